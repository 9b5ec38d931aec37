//! The one place an ONNX Runtime session is configured: intra-op threads and the run's execution
//! provider ([`super::provider`]: CPU; CUDA with TF32 off and `error_on_failure`; a plugin EP
//! attached through its devices). The pipeline's sub-models and the TF32 probe's one-node model
//! are opened here, so a GPU run cannot probe one EP configuration and compare with another, and
//! every session on a non-CPU EP is checked for nodes ONNX Runtime quietly put on the CPU
//! ([`super::placement`]).

use std::path::{Path, PathBuf};

use ort::logging::LogLevel;
use ort::session::builder::SessionBuilder;
use ort::session::Session;

use super::graph::GraphSummary;
use super::placement::{self, PlacedNode};
use super::provider::{self, RunEp};
use super::runtime::{self, RuntimeError};

/// `ONNX_PARITY_ORT_THREADS`: ORT intra-op threads.
pub use crate::context::THREADS_ENV;

/// Session settings.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// ORT intra-op threads (0 = ORT's default).
    pub intra_threads: usize,
}

impl SessionOptions {
    /// `ONNX_PARITY_ORT_THREADS` (ORT intra-op threads), else ORT's default.
    pub fn from_env() -> Self {
        SessionOptions { intra_threads: crate::context::current().ort_threads }
    }
}

/// Why a session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Configuring a session failed (threads, the execution provider).
    #[error("configuring an ONNX Runtime session ({}): {source}", runtime::execution_provider())]
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
    /// The plugin EP loaded but reports no device here.
    #[error(
        "{}={ep}: no {device} found: ONNX Runtime lists no {} device on this machine (it lists: {listed}); run where the \
         device is, or choose another EP",
        provider::EP_VAR,
        ep.ort_name()
    )]
    NoDevice { ep: RunEp, device: &'static str, listed: String },
    /// Nodes that compute on floats were placed on the CPU EP although another EP was asked for.
    #[error(
        "{}: {} of its nodes compute on the CPU EP although {}={ep} asked for {}: {}{} — the run would report CPU numbers as \
         {ep}'s{}",
        path.display(),
        nodes.len(),
        provider::EP_VAR,
        ep.ort_name(),
        list(nodes),
        if nodes.len() > SHOWN { format!(" (and {} more)", nodes.len() - SHOWN) } else { String::new() },
        if *shape_only > 0 { format!(" ({shape_only} integer shape nodes on the CPU are expected and not counted)") } else { String::new() }
    )]
    CpuFallback { path: PathBuf, ep: RunEp, nodes: Vec<PlacedNode>, shape_only: usize },
    /// ORT logged no node placement for a session on a non-CPU EP: where the nodes run is unknown.
    #[error("{}: ONNX Runtime logged no node placement for this {ep} session, so where its nodes run is unknown", path.display())]
    NoPlacement { path: PathBuf, ep: RunEp },
}

/// How many fallen-back nodes an error names.
const SHOWN: usize = 12;

fn list(nodes: &[PlacedNode]) -> String {
    nodes.iter().take(SHOWN).map(|n| format!("{} `{}`", n.op, n.name)).collect::<Vec<_>>().join(", ")
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

    fn graph(&self) -> Option<GraphSummary> {
        match self {
            ModelSource::File(p) => GraphSummary::load(p).ok(),
            ModelSource::Memory { path, bytes, .. } => GraphSummary::from_bytes(bytes, path).ok(),
        }
    }
}

/// A session builder with the run's execution provider and `opts` applied, and the log id its
/// node placements are logged under (None on the CPU EP, where every node is where it was asked
/// to be).
fn builder(opts: &SessionOptions) -> Result<(SessionBuilder, Option<String>), SessionError> {
    let env = runtime::environment()?;
    let ep = provider::run_ep().map_err(RuntimeError::from)?;
    let configure = |source: ort::Error| SessionError::Configure { source };
    let mut builder = Session::builder(env).map_err(configure)?;
    if opts.intra_threads > 0 {
        builder = builder.with_intra_threads(opts.intra_threads).map_err(|e| configure(e.into()))?;
    }
    match ep {
        RunEp::Cpu => return Ok((builder, None)),
        RunEp::Cuda(n) => {
            // TF32 would change f32 matmul results by ~1e-3 relative: parity checks need it off
            // (NVIDIA_TF32_OVERRIDE=0 is set when the environment is created); error_on_failure:
            // an EP that cannot start is an error, not a CPU session.
            let device = i32::try_from(n).unwrap_or(i32::MAX);
            builder = builder
                .with_execution_providers([ort::ep::CUDA::default().with_device_id(device).with_tf32(false).build().error_on_failure()])
                .map_err(|e| configure(e.into()))?;
        }
        plugin => {
            let devices: Vec<_> = env.devices().filter(|d| d.ep().is_ok_and(|n| n == plugin.ort_name())).collect();
            if devices.is_empty() {
                let listed = env
                    .devices()
                    .map(|d| {
                        let hw = d.hardware_device();
                        format!("{} ({:?}, {})", d.ep().unwrap_or("?"), hw.ty(), hw.vendor().unwrap_or("?"))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let device = plugin.plugin().map_or("device", |p| p.device);
                return Err(SessionError::NoDevice { ep: plugin, device, listed });
            }
            builder = builder.with_devices(devices, None).map_err(|e| configure(e.into()))?;
        }
    }
    let log_id = placement::new_log_id();
    builder = builder.with_log_id(&log_id).map_err(|e| configure(e.into()))?;
    builder = builder.with_log_level(LogLevel::Verbose).map_err(|e| configure(e.into()))?;
    Ok((builder, Some(log_id)))
}

/// Opens a session on the graph file at `path` on the CPU EP alone, whatever the run's EP: what L1
/// loads to ask whether ONNX Runtime accepts the graph.
pub fn open_cpu(path: &Path) -> Result<Session, SessionError> {
    let env = runtime::environment()?;
    let configure = |source: ort::Error| SessionError::Configure { source };
    let mut builder = Session::builder(env).map_err(configure)?.with_intra_threads(1).map_err(|e| configure(e.into()))?;
    builder.commit_from_file(path).map_err(|source| SessionError::Load { path: path.into(), source })
}

/// Opens a session on `source` on the run's execution provider.
pub fn open(source: ModelSource<'_>, opts: &SessionOptions) -> Result<Session, SessionError> {
    let path = source.path().to_path_buf();
    let fail = |e: ort::Error| SessionError::Load { path: path.clone(), source: e };
    let (mut builder, log_id) = builder(opts)?;
    let session = match source {
        ModelSource::File(p) => builder.commit_from_file(p).map_err(fail)?,
        ModelSource::Memory { bytes, external_data_dir, .. } => {
            builder = builder
                .with_config_entry("session.model_external_initializers_file_folder_path", external_data_dir.display().to_string())
                .map_err(|e| fail(e.into()))?;
            builder.commit_from_memory(bytes).map_err(fail)?
        }
    };
    if let Some(id) = log_id {
        let ep = provider::run_ep_or_cpu();
        let Some(placed) = placement::take(&id) else { return Err(SessionError::NoPlacement { path, ep }) };
        let (nodes, shape_only) = placement::cpu_compute_nodes(&placed, source.graph().as_ref());
        if !nodes.is_empty() {
            return Err(SessionError::CpuFallback { path, ep, nodes, shape_only });
        }
        tracing::debug!("{}: every compute node on {} ({shape_only} integer shape nodes on the CPU)", path.display(), ep.ort_name());
    }
    Ok(session)
}
