//! Why a load run or a capacity search stops.

/// Why a load run or a capacity search could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The settings make no sense.
    #[error("configuration: {0}")]
    Config(String),
    /// The server's API refused or failed.
    #[error("server API: {0}")]
    Api(String),
    /// The speech clip could not be read or encoded.
    #[error("audio: {0}")]
    Audio(String),
    /// A socket, thread or file failed.
    #[error("I/O: {0}")]
    Io(String),
    /// The local server could not be started.
    #[error("local server: {0}")]
    Server(String),
    /// Stopped (Ctrl-C).
    #[error("stopped")]
    Stopped,
}
