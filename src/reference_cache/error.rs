//! Why a reference-cache entry could not be read or written.

use std::path::PathBuf;

/// Why an entry could not be used (a miss, logged) or stored.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is corrupt: {why}", path.display())]
    Corrupt { path: PathBuf, why: String },
    /// A value whose parts do not fit together (a shape, an enum tag).
    #[error("an entry's value does not fit together: {0}")]
    Shape(String),
}
