//! Why the ONNX pipeline failed.

use std::path::PathBuf;

use crate::onnx::package::PackageError;
use crate::onnx::protocol::ProtocolError;
use crate::onnx::shapes::ShapeError;
use crate::runtime::provision::RuntimeError;
use crate::runtime::session::SessionError;

/// Why the pipeline failed.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// ONNX Runtime failed while running a sub-model (its message says why).
    #[error("{role}: ONNX Runtime failed: {source}")]
    Run {
        role: &'static str,
        #[source]
        source: ort::Error,
    },
    /// The export does not follow the protocol (names, ranks, dtypes, shapes).
    #[error("{role}: {message}")]
    Contract { role: &'static str, message: String },
    #[error("the inputs have images but the package {0} has no vision_encoder")]
    NoVision(PathBuf),
    /// An ORT GenAI package's shared KV buffers hold fewer positions than the run needs.
    #[error("{config}: search.max_length is {max_length} positions, and the prompt ({prompt} tokens) with {new} new tokens needs {}", prompt + new.saturating_sub(1))]
    MaxLength { config: PathBuf, max_length: usize, prompt: usize, new: usize },
    /// A static-cache export holds fewer positions than the run needs (said before running).
    #[error("the static KV cache holds {capacity} positions, and the prompt ({prompt} tokens) with {new} new tokens needs {}; export with a larger --max-seq-len", prompt + new.saturating_sub(1))]
    Capacity { capacity: usize, prompt: usize, new: usize },
    /// A tensor a session declares or returns has the wrong rank or size (an empty vocabulary,
    /// KV without static heads, ...): names the session, the tensor, the expected and found shape.
    #[error(transparent)]
    Shape(#[from] ShapeError),
}
