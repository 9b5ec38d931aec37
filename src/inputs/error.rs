//! Why a case's inputs could not be built: every variant names the file, tensor or setting.

use std::path::PathBuf;

/// Why inputs could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a safetensors file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}`: {expected}")]
    Tensor { path: PathBuf, name: String, expected: String },
    #[error("the case gives no inputs: set `inputs.input_ids`, `inputs.tensors`, or `inputs.prompts` with a `checkpoint:`")]
    NoInputs,
    /// A checkpoint/processor configuration file that is missing, malformed or inconsistent.
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    /// The tokenizer file, or what the processor needs from it.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// An image file that cannot be opened, decoded or processed.
    #[error("image {path}: {message}")]
    Image { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}
