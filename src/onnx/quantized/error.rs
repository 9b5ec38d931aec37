//! Why a quantized build's weights cannot be read.

use std::path::PathBuf;

/// Why a quantized build's weights cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum QuantizedError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not an ONNX model: {source}")]
    Decode { path: PathBuf, source: prost::DecodeError },
    #[error("{path}: {message}")]
    Package { path: PathBuf, message: String },
    #[error("{path}: node `{node}` ({op}): {message}")]
    Node { path: PathBuf, node: String, op: String, message: String },
    #[error("{path}: {message}")]
    Overrides { path: PathBuf, message: String },
}
