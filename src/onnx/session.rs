//! The one place an ONNX Runtime session is configured: intra-op threads and the execution
//! provider (CPU, or CUDA with TF32 off and no silent CPU fallback under the `cuda` feature). The
//! pipeline's sub-models and the TF32 probe's one-node model are built here, so a GPU run cannot
//! probe one EP configuration and compare with another.

use std::path::{Path, PathBuf};

use ort::session::builder::SessionBuilder;
use ort::session::Session;

use super::runtime::{self, RuntimeError};

/// `ONNX_PARITY_ORT_THREADS`: ORT intra-op threads.
pub const THREADS_ENV: &str = "ONNX_PARITY_ORT_THREADS";

/// Session settings.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// ORT intra-op threads (0 = ORT's default).
    pub intra_threads: usize,
}

impl SessionOptions {
    /// `ONNX_PARITY_ORT_THREADS` (ORT intra-op threads), else ORT's default.
    pub fn from_env() -> Self {
        let intra_threads = std::env::var(THREADS_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        SessionOptions { intra_threads }
    }
}

/// Why a session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Configuring a session failed (threads, the execution provider).
    #[error("configuring an ONNX Runtime session ({}): {source}", crate::onnx::runtime::execution_provider())]
    Configure {
        #[source]
        source: ort::Error,
    },
    /// ORT refused the model; `path` names the graph file (for an in-memory model, the file it
    /// was derived from).
    #[error("loading {path}: {source}")]
    Load {
        path: PathBuf,
        #[source]
        source: ort::Error,
    },
}

/// Where a session's model comes from.
#[derive(Debug, Clone, Copy)]
pub enum ModelSource<'a> {
    /// A graph file (its external data beside it).
    File(&'a Path),
    /// An edited graph held in memory: `path` is the file it was derived from (what errors name),
    /// `external_data_dir` the folder its external data is read from.
    Memory { path: &'a Path, bytes: &'a [u8], external_data_dir: &'a Path },
}

impl ModelSource<'_> {
    /// The graph file this model is, or was derived from.
    pub fn path(&self) -> &Path {
        match self {
            ModelSource::File(p) | ModelSource::Memory { path: p, .. } => p,
        }
    }
}

/// A session builder with this build's execution provider and `opts` applied.
pub fn builder(opts: &SessionOptions) -> Result<SessionBuilder, SessionError> {
    let env = runtime::environment()?;
    let configure = |source: ort::Error| SessionError::Configure { source };
    #[allow(unused_mut)]
    let mut builder = Session::builder(env).map_err(configure)?;
    if opts.intra_threads > 0 {
        builder = builder.with_intra_threads(opts.intra_threads).map_err(|e| configure(e.into()))?;
    }
    #[cfg(feature = "cuda")]
    {
        // TF32 would change f32 matmul results by ~1e-3 relative: parity checks need it off
        // (NVIDIA_TF32_OVERRIDE=0 is set when the environment is created), and a silent fallback
        // to CPU would report CPU numbers as GPU ones.
        builder = builder
            .with_execution_providers([ort::ep::CUDA::default().with_tf32(false).build().error_on_failure()])
            .map_err(|e| configure(e.into()))?;
    }
    Ok(builder)
}

/// Opens a session on the graph file at `path` on the CPU EP alone, whatever the run's EP: what L1
/// loads to ask whether ONNX Runtime accepts the graph.
pub fn open_cpu(path: &Path) -> Result<Session, SessionError> {
    let env = runtime::environment()?;
    let configure = |source: ort::Error| SessionError::Configure { source };
    let mut builder = Session::builder(env).map_err(configure)?.with_intra_threads(1).map_err(|e| configure(e.into()))?;
    builder.commit_from_file(path).map_err(|source| SessionError::Load { path: path.into(), source })
}

/// Opens a session on `source`.
pub fn open(source: ModelSource<'_>, opts: &SessionOptions) -> Result<Session, SessionError> {
    let path = source.path().to_path_buf();
    let fail = |e: ort::Error| SessionError::Load { path: path.clone(), source: e };
    let mut builder = builder(opts)?;
    match source {
        ModelSource::File(p) => builder.commit_from_file(p).map_err(fail),
        ModelSource::Memory { bytes, external_data_dir, .. } => {
            builder = builder
                .with_config_entry("session.model_external_initializers_file_folder_path", external_data_dir.display().to_string())
                .map_err(|e| fail(e.into()))?;
            builder.commit_from_memory(bytes).map_err(fail)
        }
    }
}
