//! Entry points for the fuzz targets in `fuzz/`; not part of tutti's API.
