//! Why a case's inputs or one of its runs is unavailable, shared by every tier that needs it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::BackendError;
use crate::inputs::replay::ReplayError;
use crate::inputs::InputsError;

/// Why a case's inputs or one of its runs is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// A golden's `input_ids` that cannot be fed with the case's images.
    #[error("replaying the golden's input_ids: {0}")]
    Replay(#[from] ReplayError),
    /// The implementation's artifact (checkpoint, export) is not there.
    #[error("{0}")]
    NoArtifact(&'static str),
    /// No candidate of the evaluation runs this build in this implementation on this EP (a plan
    /// that asked for an EP the evaluation was not made for).
    #[error("{0}: no run of this candidate was planned on its execution provider")]
    NoCandidate(String),
    /// A quantized build (`dtype: int4` / `int8`) whose weights cannot be read, or that has none.
    #[error("the quantized build's weights: {0}")]
    Quantized(String),
    /// A result held in its reference-cache entry that could not be read back.
    #[error("a result held in the reference cache could not be read back: {0}")]
    Held(Arc<crate::reference_cache::CacheError>),
    #[error("{label} ({}): {source}", dir.display())]
    Run {
        label: &'static str,
        dir: PathBuf,
        #[source]
        source: BackendError,
    },
}

/// A shared, cloneable evaluation error: every tier that needs a failed computation reports the
/// same cause.
pub type SharedError = Arc<EvalError>;
