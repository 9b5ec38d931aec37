//! Why onnxruntime-genai could not run a package.

use std::path::PathBuf;
use std::sync::Arc;

use super::version::GENAI_VERSION;
use crate::runtime::wheel::FetchError;

/// Why ORT GenAI could not run.
#[derive(Debug, thiserror::Error)]
pub enum GenaiError {
    #[error("fetching {spec} for ORT GenAI: {source}")]
    Fetch {
        spec: String,
        #[source]
        source: FetchError,
    },
    #[error("loading {}: {source}", path.display())]
    Load {
        path: PathBuf,
        #[source]
        source: libloading::Error,
    },
    #[error("{} has no function `{name}` (not onnxruntime-genai {GENAI_VERSION}?): {source}", path.display())]
    Symbol {
        path: PathBuf,
        name: &'static str,
        #[source]
        source: libloading::Error,
    },
    /// A C API call returned an error.
    #[error("ORT GenAI {call}: {message}")]
    Call { call: &'static str, message: String },
    /// The package cannot be run by ORT GenAI (no `genai_config.json`, a prompt it cannot take).
    #[error("ORT GenAI: {0}")]
    Unsupported(String),
    #[error("{} is not a valid genai_config.json: {message}", path.display())]
    Config { path: PathBuf, message: String },
    /// The driver did not point `ORT_LIB_PATH` at ORT GenAI's own ONNX Runtime before loading it.
    #[error(
        "ORT_LIB_PATH does not name {}, the ONNX Runtime onnxruntime-genai {GENAI_VERSION} runs on: the program driving the \
         harness must set it before ORT GenAI loads (onnx_parity::context::RunContext::variables_to_set)",
        expected.display()
    )]
    OrtLibPath { expected: PathBuf },
    /// The process's one attempt to load the library failed (returned to every caller).
    #[error(transparent)]
    Once(Arc<GenaiError>),
}
