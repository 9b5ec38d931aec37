//! The one place an ONNX Runtime session is configured: intra-op threads and the trial's
//! execution provider ([`SessionOptions::ep`]: CPU; CUDA with TF32 off and `error_on_failure`; a
//! plugin EP attached through its devices). The pipeline's sub-models, L1's loads and the TF32
//! probe's one-node model are opened here, so a GPU run cannot probe one EP configuration and
//! compare with another. Every session on a non-CPU EP is created with verbose placement logging,
//! and the float compute nodes ONNX Runtime quietly put on the CPU come back with the session
//! ([`Partition`], [`super::placement`]): L1 reports them as a finding of the build on that EP,
//! and L3–L5 say their numbers are those of a partitioned session.

use std::path::{Path, PathBuf};

use ort::logging::LogLevel;
use ort::session::builder::SessionBuilder;
use ort::session::Session;

use super::ep::{self, RunEp};
use super::placement::{self, PlacedNode};
use super::provision::{self as runtime, RuntimeError};
use crate::onnx::graph::GraphSummary;

/// `ONNX_PARITY_ORT_THREADS`: ORT intra-op threads.
pub use crate::context::THREADS_ENV;

/// Session settings.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// ORT intra-op threads (0 = ORT's default).
    pub intra_threads: usize,
    /// The execution provider the session runs on (a trial's).
    pub ep: RunEp,
}

impl SessionOptions {
    /// A session on `ep` with the run context's intra-op threads (`ONNX_PARITY_ORT_THREADS`,
    /// else ORT's default).
    pub fn on(ep: RunEp) -> Self {
        SessionOptions { intra_threads: crate::context::current().ort_threads, ep }
    }
}

/// Why a session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Configuring a session failed (threads, the execution provider).
    #[error("configuring an ONNX Runtime session ({}): {source}", ep.label())]
    Configure {
        ep: RunEp,
        #[source]
        source: ort::Error,
    },
    /// ORT refused the model on `ep`; `path` names the graph file (for an in-memory model, the
    /// file it was derived from).
    #[error("loading {path}{}: {source}", if ep.is_cpu() { String::new() } else { format!(" on {}", ep.ort_name()) })]
    Load {
        path: PathBuf,
        ep: RunEp,
        #[source]
        source: ort::Error,
    },
    /// The plugin EP loaded but reports no device here.
    #[error(
        "{}={ep}: no {device} found: ONNX Runtime lists no {} device on this machine (it lists: {listed}); run where the \
         device is, or choose another EP",
        ep::EP_VAR,
        ep.ort_name()
    )]
    NoDevice { ep: RunEp, device: &'static str, listed: String },
    /// ORT logged no node placement for a session on a non-CPU EP: where the nodes run is unknown.
    #[error("{}: ONNX Runtime logged no node placement for this {ep} session, so where its nodes run is unknown", path.display())]
    NoPlacement { path: PathBuf, ep: RunEp },
}

/// The float compute nodes of one session that ONNX Runtime placed on the CPU EP although the
/// session asked for another: the build is partitioned on that EP (its user gets those nodes'
/// CPU numbers and the copies between devices). Nodes whose outputs are integer or boolean
/// (shape arithmetic, index work, which ORT keeps on the CPU by design) are counted apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub path: PathBuf,
    pub ep: RunEp,
    pub nodes: Vec<PlacedNode>,
    /// Nodes on the CPU whose outputs are all integer/boolean (not counted).
    pub integer_nodes: usize,
}

impl Partition {
    /// `decoder/model.onnx: 6 compute nodes on the CPU although CUDAExecutionProvider was asked for:
    /// GroupQueryAttention `…` (float32 GroupQueryAttention has no CUDAExecutionProvider kernel in
    /// ONNX Runtime 1.31.1), …`
    pub fn describe(&self, graph: Option<&GraphSummary>) -> String {
        let shown: Vec<String> = self
            .nodes
            .iter()
            .take(SHOWN)
            .map(|n| {
                let dtype = graph.and_then(|g| placement::float_type_of(g, &n.name)).unwrap_or("float");
                format!(
                    "{} `{}` ({dtype} {} has no {} kernel in ONNX Runtime {})",
                    n.op,
                    n.name,
                    n.op,
                    self.ep.ort_name(),
                    runtime::ORT_VERSION
                )
            })
            .collect();
        format!(
            "{}: {} compute node{} on the CPU although {} was asked for: {}{}{}",
            self.path.display(),
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            self.ep.ort_name(),
            shown.join(", "),
            if self.nodes.len() > SHOWN { format!(" (and {} more)", self.nodes.len() - SHOWN) } else { String::new() },
            if self.integer_nodes > 0 {
                format!(" ({} integer/index nodes on the CPU are expected and not counted)", self.integer_nodes)
            } else {
                String::new()
            }
        )
    }
}

/// A session and where ONNX Runtime placed its nodes.
pub struct Placed {
    pub session: Session,
    /// `None` on the CPU EP or when every compute node is on the EP asked for.
    pub partition: Option<Partition>,
}

/// How many fallen-back nodes an error names.
const SHOWN: usize = 12;

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

    /// The graph's summary (node types for placement), when it decodes.
    pub fn graph(&self) -> Option<GraphSummary> {
        match self {
            ModelSource::File(p) => GraphSummary::load(p).ok(),
            ModelSource::Memory { path, bytes, .. } => GraphSummary::from_bytes(bytes, path).ok(),
        }
    }
}

/// A session builder on `opts.ep` with `opts` applied, and the log id its node placements are
/// logged under (None on the CPU EP, where every node is where it was asked to be).
fn builder(opts: &SessionOptions) -> Result<(SessionBuilder, Option<String>), SessionError> {
    let env = runtime::environment()?;
    let ep = opts.ep;
    let configure = |source: ort::Error| SessionError::Configure { ep, source };
    let mut builder = Session::builder(env).map_err(configure)?;
    // ONNX Runtime's intra-op workers spin after each parallel section by default; beside the
    // harness's own work on the same cores (the reference, the comparisons) that spinning took
    // 14 % of a warm `run cases` (`perf`: its `pause` loop). Waiting is not arithmetic: the
    // results are the same bits.
    builder = builder.with_intra_op_spinning(false).map_err(|e| configure(e.into()))?;
    if opts.intra_threads > 0 {
        builder = builder.with_intra_threads(opts.intra_threads).map_err(|e| configure(e.into()))?;
    }
    match ep {
        RunEp::Cpu => return Ok((builder, None)),
        RunEp::Cuda(n) => {
            // TF32 would change f32 matmul results by ~1e-3 relative: parity checks need it off
            // (NVIDIA_TF32_OVERRIDE=0 is set by the drivers); error_on_failure: an EP that cannot
            // start is an error, not a CPU session.
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
                let device = ep::plugin(plugin).map_or("device", |p| p.device);
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

/// Opens a session on the graph file at `path` on the CPU EP alone with one thread: what L1
/// loads to ask whether ONNX Runtime accepts the graph (its types checked, the graph optimized,
/// each node's kernel chosen and created). Weights are not prepacked: ORT then leaves a weight in
/// external data mapped and unread, so checking a full-size export costs neither its load time
/// nor its memory (E2B width, 8.3 GB of f32 weights: 6.6–10.9 s and 4.9 GiB prepacked, 0.04 s and
/// 0.05 GiB not). Prepacking lays weights out for MLAS's GEMMs; what it would reject, L3's run
/// (which prepacks) still meets.
pub fn open_cpu(path: &Path) -> Result<Session, SessionError> {
    let opts = SessionOptions { intra_threads: 1, ep: RunEp::Cpu };
    let fail = |e: ort::Error| SessionError::Load { path: path.to_path_buf(), ep: opts.ep, source: e };
    let (builder, _) = builder(&opts)?;
    let mut builder = builder.with_config_entry("session.disable_prepacking", "1").map_err(|e| fail(e.into()))?;
    builder.commit_from_file(path).map_err(fail)
}

/// Opens a session on `source` on `opts.ep`; compute nodes ORT put on the CPU instead are
/// logged (callers that report them use [`open_placed`]).
pub fn open(source: ModelSource<'_>, opts: &SessionOptions) -> Result<Session, SessionError> {
    let placed = open_placed(source, opts)?;
    if let Some(p) = &placed.partition {
        tracing::warn!("{}", p.describe(source.graph().as_ref()));
    }
    Ok(placed.session)
}

/// Opens a session on `source` on `opts.ep`, with the float compute nodes ORT put on the CPU.
pub fn open_placed(source: ModelSource<'_>, opts: &SessionOptions) -> Result<Placed, SessionError> {
    let path = source.path().to_path_buf();
    let ep = opts.ep;
    let fail = |e: ort::Error| SessionError::Load { path: path.clone(), ep, source: e };
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
    let Some(id) = log_id else { return Ok(Placed { session, partition: None }) };
    let Some(placed) = placement::take(&id) else { return Err(SessionError::NoPlacement { path, ep }) };
    let (nodes, integer_nodes) = placement::cpu_compute_nodes(&placed, source.graph().as_ref());
    if nodes.is_empty() {
        tracing::debug!("{}: every compute node on {} ({integer_nodes} integer/index nodes on the CPU)", path.display(), ep.ort_name());
        return Ok(Placed { session, partition: None });
    }
    Ok(Placed { session, partition: Some(Partition { path, ep, nodes, integer_nodes }) })
}
