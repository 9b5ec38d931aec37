//! Why a case file cannot be used. Every variant names the file.

use std::path::PathBuf;

use thiserror::Error;

/// A case file that cannot be used. Every variant names the file.
#[derive(Debug, Error)]
pub enum CaseError {
    #[error("{}: cannot read: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// YAML syntax, unknown key, wrong type or bad value. `message` carries serde_yaml's
    /// `<key path>: <problem>, expected <...> at line L column C`.
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    /// A rule that spans several keys (e.g. neither `level` nor `levels`).
    #[error("{}: `{field}`: {message}", path.display())]
    Invalid { path: PathBuf, field: &'static str, message: String },
}
