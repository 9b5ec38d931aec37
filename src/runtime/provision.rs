//! ONNX Runtime provisioning: find or fetch `libonnxruntime` and the selected plugin EPs, and hold
//! the one ORT environment a process may have.
//!
//! Order (first hit wins): `ORT_DYLIB_PATH`; the per-user cache; a fetch of the official
//! `onnxruntime` (or, when a CUDA EP is selected, `onnxruntime-gpu`, whose library holds the CPU EP
//! too) wheel through `python3 -m pip download`, whose `onnxruntime/capi/*.so*` files are extracted
//! into the cache ([`super::wheel`]). `onnx-parity fetch --runtimes` fills the cache ahead for
//! machines without network ([`fetch_runtimes`]).
//! `ONNX_PARITY_ORT_WHEEL` names a wheel already on disk to extract instead of downloading one (a
//! machine that cannot reach the package index; `tests/kill.rs`, which kills an extraction
//! part-way without a network). A plugin EP ([`super::provider`]) is fetched the same way and
//! registered with the environment when it is created.
//!
//! Which EPs the environment is made for is the plan's choice ([`select`], called where a run's
//! trials are planned, from its options): the library (CPU or GPU wheel) and the plugin EPs are
//! loaded once per process, before any session, so they follow the trials rather than a second
//! reading of the environment that could disagree with them. Until something selects, CPU alone.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use super::ep::{self, RunEp, UnknownEp};
use super::wheel::{self, FetchError, Wheel, WheelSource};

/// The ONNX Runtime release the `ort` crate's `api-31` feature is built against.
pub const ORT_VERSION: &str = "1.31.1";

/// Why ONNX Runtime could not be made available.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "ONNX Runtime {version} is not available. Tried: {tried}. Fix: install python3 with pip \
         (the library is fetched from the `{wheel}=={version}` wheel), or point ORT_DYLIB_PATH at \
         an existing libonnxruntime.so.{version}. Cause: {cause}"
    )]
    Unavailable { version: &'static str, wheel: &'static str, tried: String, cause: Box<FetchError> },
    #[error("ORT_DYLIB_PATH={} does not name a file", .0.display())]
    BadOverride(PathBuf),
    #[error("ONNX_PARITY_ORT_WHEEL={} does not name a file", .0.display())]
    BadWheel(PathBuf),
    #[error("loading ONNX Runtime from {}: {source}", path.display())]
    Load {
        path: PathBuf,
        #[source]
        source: ort::LoadDynamicError,
    },
    #[error("creating the ONNX Runtime environment: {0}")]
    Environment(#[source] ort::Error),
    #[error(transparent)]
    UnknownEp(#[from] UnknownEp),
    /// A plugin EP's wheel could not be fetched or holds no library.
    #[error("{} ({}): the plugin EP is not available from {spec}: {cause}", ep::EP_VAR, ep)]
    Plugin { ep: RunEp, spec: String, cause: Box<FetchError> },
    #[error("{} ({}): registering the plugin EP library {}: {source}", ep::EP_VAR, ep, path.display())]
    Register {
        ep: RunEp,
        path: PathBuf,
        #[source]
        source: ort::Error,
    },
    /// The process's one attempt to create the environment failed (returned to every caller).
    #[error(transparent)]
    Once(Arc<RuntimeError>),
    /// A plan wants an EP the process's ONNX Runtime was not loaded for (it loads once).
    #[error(
        "ONNX Runtime was already loaded for {loaded} in this process; {wanted} cannot be added to it (run the trials on {wanted} in a process of their own)"
    )]
    AlreadyLoaded { loaded: String, wanted: String },
}

/// The EPs the process's environment is (to be) made for ([`select`]), and whether it was made.
struct Selection {
    eps: Vec<RunEp>,
    /// Set when the environment is made (its library chosen): no EP is added after.
    loaded: bool,
}

impl Selection {
    /// The EPs selected; the CPU alone when none was.
    fn eps_or_cpu(&self) -> Vec<RunEp> {
        if self.eps.is_empty() {
            vec![RunEp::Cpu]
        } else {
            self.eps.clone()
        }
    }
}

static SELECTION: Mutex<Selection> = Mutex::new(Selection { eps: Vec::new(), loaded: false });

fn selection() -> std::sync::MutexGuard<'static, Selection> {
    SELECTION.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes the process's ONNX Runtime serve `eps` too: before the environment is made they are
/// added to what it will load; afterwards an EP it was not loaded for is an error.
pub fn select(eps: &[RunEp]) -> Result<(), RuntimeError> {
    let mut s = selection();
    // An empty selection stands for the CPU (every library has its EP).
    let served = s.eps_or_cpu();
    let missing: Vec<RunEp> = eps.iter().copied().filter(|e| !served.contains(e)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if s.loaded {
        let labels = |eps: &[RunEp]| eps.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
        return Err(RuntimeError::AlreadyLoaded { loaded: labels(&served), wanted: labels(&missing) });
    }
    s.eps.extend(missing);
    Ok(())
}

/// The EPs selected so far ([`select`]); the CPU alone when none was.
pub fn selected() -> Vec<RunEp> {
    selection().eps_or_cpu()
}

/// `eps`' labels, for reports (`CPUExecutionProvider, CUDAExecutionProvider:0 (TF32 off)`).
pub fn execution_providers(eps: &[RunEp]) -> String {
    eps.iter().map(|e| e.label()).collect::<Vec<_>>().join(", ")
}

/// The ONNX Runtime wheel a run of `eps` loads.
pub fn runtime_wheel(eps: &[RunEp]) -> Wheel {
    Wheel {
        name: ep::runtime_wheel_name(eps),
        version: ORT_VERSION,
        member_dir: "onnxruntime/capi/",
        library: format!("libonnxruntime.so.{ORT_VERSION}"),
    }
}

/// Per-user cache folder for the extracted library of this run's EPs (separate for CPU and GPU
/// wheels).
pub fn cache_dir() -> PathBuf {
    runtime_wheel(&selected()).cache_dir(&wheel::cache_root())
}

/// `ONNX_PARITY_ORT_WHEEL`: a wheel already on disk to extract instead of downloading one.
fn wheel_source() -> WheelSource {
    crate::context::current().ort_wheel.clone().map_or(WheelSource::Pip, WheelSource::File)
}

/// Locates the ONNX Runtime shared library of this run's EPs, fetching it on first use.
pub fn locate_library() -> Result<PathBuf, RuntimeError> {
    locate_library_for(&selected())
}

fn locate_library_for(eps: &[RunEp]) -> Result<PathBuf, RuntimeError> {
    let wheel = runtime_wheel(eps);
    let dir = wheel.cache_dir(&wheel::cache_root());
    locate(crate::context::current().ort_dylib.clone(), wheel, dir, &wheel_source())
}

/// [`locate_library`] with its inputs explicit (testable without touching the environment).
fn locate(override_path: Option<PathBuf>, wheel: Wheel, dir: PathBuf, source: &WheelSource) -> Result<PathBuf, RuntimeError> {
    if let Some(p) = override_path {
        return if p.is_file() { Ok(p) } else { Err(RuntimeError::BadOverride(p)) };
    }
    let lib = dir.join(&wheel.library);
    if lib.is_file() {
        return Ok(lib);
    }
    let fetch = match source {
        WheelSource::Pip => format!("python3 -m pip download {}", wheel.spec()),
        WheelSource::File(p) if p.is_file() => format!("the wheel {} (ONNX_PARITY_ORT_WHEEL)", p.display()),
        WheelSource::File(p) => return Err(RuntimeError::BadWheel(p.clone())),
    };
    let tried = format!("ORT_DYLIB_PATH (unset); cache {}; {fetch}", lib.display());
    wheel.install(&dir, source).map_err(|cause| RuntimeError::Unavailable {
        version: ORT_VERSION,
        wheel: wheel.name,
        tried,
        cause: Box::new(cause),
    })
}

/// The plugin library of `ep` (fetched into the cache on first use), when `ep` is a plugin EP.
fn plugin_library(ep: RunEp) -> Result<Option<PathBuf>, RuntimeError> {
    let Some(plugin) = ep::plugin(ep) else { return Ok(None) };
    let dir = plugin.wheel.cache_dir(&wheel::cache_root());
    plugin.wheel.install(&dir, &WheelSource::Pip).map(Some).map_err(|cause| RuntimeError::Plugin {
        ep,
        spec: plugin.wheel.spec(),
        cause: Box::new(cause),
    })
}

/// One runtime library in the cache: what it is and where.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub spec: String,
    pub library: PathBuf,
}

/// Fills the cache with every ONNX Runtime library a later run of `eps` may load without network
/// (`onnx-parity fetch --runtimes`): the library of the selection and of each EP alone (a run of
/// `cpu,cuda` loads `onnxruntime-gpu`, a later `cpu` run `onnxruntime`), and each plugin EP's.
/// Cached libraries are not fetched again.
pub fn fetch_runtimes(eps: &[RunEp]) -> Result<Vec<Fetched>, RuntimeError> {
    let mut wheels = vec![runtime_wheel(eps)];
    for &e in eps {
        let w = runtime_wheel(&[e]);
        if !wheels.contains(&w) {
            wheels.push(w);
        }
    }
    let mut out = Vec::new();
    for w in wheels {
        let dir = w.cache_dir(&wheel::cache_root());
        let library = locate(None, w.clone(), dir, &wheel_source())?;
        out.push(Fetched { spec: w.spec(), library });
    }
    for &e in eps {
        if let Some(library) = plugin_library(e)? {
            out.push(Fetched { spec: ep::plugin(e).map(|p| p.wheel.spec()).unwrap_or_default(), library });
        }
    }
    Ok(out)
}

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, Arc<RuntimeError>>> = OnceLock::new();

/// The process-wide ORT environment (ONNX Runtime allows one per process), created on first use.
pub fn environment() -> Result<&'static ort::environment::Environment, RuntimeError> {
    let env = ENVIRONMENT.get_or_init(|| {
        {
            // NVIDIA_TF32_OVERRIDE=0 (unless the user set it) was set by the driver before any
            // CUDA context could exist (crate::context::RunContext::variables_to_set).
            // The selection is closed as the library is chosen: a later `select` of another EP
            // is refused, never added after the fact.
            let eps = {
                let mut s = selection();
                s.loaded = true;
                s.eps_or_cpu()
            };
            let lib = locate_library_for(&eps)?;
            tracing::debug!("loading ONNX Runtime from {}", lib.display());
            let builder = ort::init_from(&lib).map_err(|source| RuntimeError::Load { path: lib.clone(), source })?;
            let env = builder
                .with_name("onnx-parity")
                .with_telemetry(false)
                .with_logger(super::placement::forward())
                .build()
                .map_err(RuntimeError::Environment)?;
            for ep in eps {
                if let Some(path) = plugin_library(ep)? {
                    tracing::debug!("registering the {} plugin EP from {}", ep.ort_name(), path.display());
                    env.register_ep_library(ep.ort_name(), &path).map_err(|source| RuntimeError::Register { ep, path, source })?;
                }
            }
            Ok(env)
        }
        .map_err(Arc::new)
    });
    env.as_ref().map_err(|e| RuntimeError::Once(Arc::clone(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: a wrong ORT_DYLIB_PATH is an error naming it (never a silent fallback to another
    /// library); a library already in the cache is used without fetching.
    #[test]
    fn override_and_cache_lookup() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nope.so");
        let wheel = runtime_wheel(&[RunEp::Cpu]);
        let e = locate(Some(missing.clone()), wheel.clone(), dir.path().into(), &WheelSource::Pip)
            .expect_err("bad override must fail")
            .to_string();
        assert!(e.contains("ORT_DYLIB_PATH") && e.contains("nope.so"), "{e}");
        let cached = dir.path().join(&wheel.library);
        std::fs::write(&cached, b"not really a library").expect("write");
        assert_eq!(locate(None, wheel, dir.path().into(), &WheelSource::Pip).expect("cache hit"), cached);
    }

    /// Guards: a wrong ONNX_PARITY_ORT_WHEEL is an error naming it, never a silent fallback to pip.
    #[test]
    fn bad_wheel_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nope.whl");
        let e = locate(None, runtime_wheel(&[RunEp::Cpu]), dir.path().join("cache"), &WheelSource::File(missing))
            .expect_err("bad wheel must fail")
            .to_string();
        assert!(e.contains("ONNX_PARITY_ORT_WHEEL") && e.contains("nope.whl"), "{e}");
    }
}
