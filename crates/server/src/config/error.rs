//! Why a configuration was refused: each error names the key and where
//! the value came from.

/// Why a configuration was refused. Each names the key and the source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or a value has the wrong type.
    #[error("{origin}: {message}")]
    Parse {
        /// Where the text came from (a file, an environment variable, a flag).
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A key that tutti does not know.
    #[error("{origin}: unknown key '{key}' (see deploy/tutti.toml for every key)")]
    UnknownKey {
        /// Where it came from.
        origin: String,
        /// The key path.
        key: String,
    },
    /// A value out of range.
    #[error("{key}: {message}")]
    Invalid {
        /// The key path.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

pub(super) fn parse_err(origin: &str, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Parse { origin: origin.to_owned(), message: e.to_string() }
}
