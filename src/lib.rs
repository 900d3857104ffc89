//! placeholder
pub use tutti_mix as mix;
