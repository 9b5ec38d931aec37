//! The run context: every setting a run takes from its environment (where exports and goldens
//! live, the execution providers and the reference's device, ONNX Runtime's library and threads,
//! the caches, CI, the hub's variables), resolved in one place. A driver (`onnx-parity`, the
//! `parity` test target) resolves it once, with its flags over the environment, installs it
//! before anything runs, and sets the variables the libraries it loads read
//! (`crate::driver::variables_to_set`: TF32 off for CUDA, ORT GenAI's ONNX Runtime); library
//! modules read [`current`] and never read or set the environment. A test binary without a
//! driver gets the environment's context on first use.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::eps::{parse_selection, RunEp, UnknownEp};
use crate::hub::HubSettings;

/// `ONNX_PARITY_EXPORTS`: a folder of exports `<model_id>/<dtype>/` for cases without `onnx:`.
pub const EXPORTS_ENV: &str = "ONNX_PARITY_EXPORTS";
/// `ONNX_PARITY_DEVICE`: the reference's device (`cpu`, `cuda[:N]`).
pub const DEVICE_VAR: &str = "ONNX_PARITY_DEVICE";
/// `ONNX_PARITY_EP`: the execution providers trials run on, a list (`cpu`, `cuda[:N]`,
/// `cpu,cuda`, `webgpu`, ...).
pub use crate::eps::EP_VAR;
/// `ONNX_PARITY_ORT_THREADS`: ORT intra-op threads (0 or unset: ORT's default).
pub const THREADS_ENV: &str = "ONNX_PARITY_ORT_THREADS";
/// `ONNX_PARITY_TESTDATA`: where a case's images are looked for when not beside its YAML.
pub const TESTDATA_ENV: &str = "ONNX_PARITY_TESTDATA";
/// `ONNX_PARITY_GOLDENS`: the goldens folder (mobius's `testdata/golden` has the same layout);
/// unset, each case's goldens are found beside its `cases/` folder ([`crate::golden::root_for`]).
pub const GOLDENS_ENV: &str = "ONNX_PARITY_GOLDENS";
/// `ONNX_PARITY_STRICT`: a missing artifact fails its trial instead of skipping it (`1`, `true`).
pub const STRICT_ENV: &str = "ONNX_PARITY_STRICT";
/// `ONNX_PARITY_CASES`: the case folders or files the test target plans (`:`-separated).
pub const CASES_ENV: &str = "ONNX_PARITY_CASES";
/// `NVIDIA_TF32_OVERRIDE`: cuBLAS/cuDNN's process-wide TF32 switch (`0`: off).
pub use crate::tf32::TF32_OVERRIDE_VAR;
/// `ORT_LIB_PATH`: the ONNX Runtime library onnxruntime-genai loads (its own variable).
pub const ORT_LIB_PATH_VAR: &str = "ORT_LIB_PATH";
/// `ONNX_PARITY_ORT_WHEEL`: an ONNX Runtime wheel on disk to extract instead of downloading one.
pub const ORT_WHEEL_ENV: &str = "ONNX_PARITY_ORT_WHEEL";
/// `ORT_DYLIB_PATH`: an ONNX Runtime library to load instead of the pinned wheel's (the `ort`
/// crate's own variable).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";
/// `CUDA_CACHE_PATH`: where the CUDA driver keeps the machine code it JIT-compiles from PTX
/// (candle's kernels are PTX: the first process on a machine compiles them, ~15 s on an H200).
pub const CUDA_CACHE_PATH_VAR: &str = "CUDA_CACHE_PATH";
/// `CUDA_CACHE_MAXSIZE`: that cache's size limit in bytes (the driver's maximum is 4 GiB).
pub const CUDA_CACHE_MAXSIZE_VAR: &str = "CUDA_CACHE_MAXSIZE";
/// `ONNX_PARITY_CACHE`: the per-user cache root (else `$XDG_CACHE_HOME/onnx-parity`, else
/// `~/.cache/onnx-parity`).
pub const CACHE_ENV: &str = "ONNX_PARITY_CACHE";
/// `ONNX_PARITY_REFERENCE_CACHE`: `off` (`0`, `false`, `no`) turns the reference cache off
/// (`crate::reference_cache`); a folder puts it there; unset (or `on`) keeps it on under the
/// cache root (`<ONNX_PARITY_CACHE>/reference`).
pub const REFERENCE_CACHE_ENV: &str = "ONNX_PARITY_REFERENCE_CACHE";
/// `ONNX_PARITY_REFERENCE_CACHE_MAX`: the reference cache's bound (`20G`, `500M`, bytes).
pub const REFERENCE_CACHE_MAX_ENV: &str = "ONNX_PARITY_REFERENCE_CACHE_MAX";

/// Whether the reference side's results are cached, where and how much.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceCacheSettings {
    /// `None`: off (the variable or `--no-cache`).
    pub root: Option<PathBuf>,
    pub max_bytes: u64,
}

/// Everything a run takes from its environment.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub exports_root: Option<PathBuf>,
    /// The reference's device as written (`None`: the CPU); parsed where it is used.
    pub device: Option<String>,
    /// The execution providers trials run on (`ONNX_PARITY_EP`, default the CPU alone), or why
    /// the value names none (the drivers refuse to run then).
    pub eps: Result<Vec<RunEp>, UnknownEp>,
    pub ort_dylib: Option<PathBuf>,
    pub ort_wheel: Option<PathBuf>,
    pub ort_threads: usize,
    pub cache_root: PathBuf,
    pub reference_cache: ReferenceCacheSettings,
    pub testdata: Option<PathBuf>,
    /// `ONNX_PARITY_GOLDENS` (else each case's own, found from its folder).
    pub goldens_root: Option<PathBuf>,
    /// `ONNX_PARITY_CASES`, split.
    pub case_roots: Option<Vec<PathBuf>>,
    /// `NVIDIA_TF32_OVERRIDE` as the process found it (the TF32 policy, `crate::tf32`).
    pub tf32_override: Option<String>,
    /// `ORT_LIB_PATH` (what ORT GenAI will bind; the driver sets it).
    pub ort_lib_path: Option<OsString>,
    /// `CUDA_CACHE_PATH` and `CUDA_CACHE_MAXSIZE` as the process found them (the driver puts
    /// the JIT cache under the cache root when the user set no path).
    pub cuda_jit_cache: (Option<OsString>, Option<OsString>),
    /// Running under CI (`CI` set, not `0`/`false`/`no`/`off`): `ci_skip_reason` applies.
    pub ci: bool,
    /// `ONNX_PARITY_STRICT` (same spellings as `CI`): missing artifacts fail their trials.
    pub strict: bool,
    pub hub: HubSettings,
}

impl RunContext {
    /// This context with the reference cache off (`--no-cache`).
    pub fn without_reference_cache(mut self) -> RunContext {
        self.reference_cache.root = None;
        self
    }

    /// The selected EPs, or the CPU alone when the selection is invalid (for reports and skip
    /// reasons; the drivers refuse an invalid selection before planning).
    pub fn eps_or_cpu(&self) -> Vec<RunEp> {
        self.eps.clone().unwrap_or_else(|_| vec![RunEp::Cpu])
    }

    /// Whether a trial of this run may use CUDA (a CUDA EP selected): the TF32 policy applies
    /// before any CUDA context exists.
    pub fn cuda_ep(&self) -> bool {
        self.eps_or_cpu().iter().any(|e| e.is_cuda())
    }

    /// The TF32 environment of this run as the drivers left it ([`crate::tf32::decide`] on the
    /// value the process started with; a build with CUDA may create a context whatever the EPs).
    pub fn tf32(&self) -> crate::tf32::Tf32Env {
        crate::tf32::decide(self.tf32_override.as_deref(), cfg!(feature = "cuda") || self.cuda_ep()).1
    }

    /// This context once a driver set `vars` (`crate::driver::variables_to_set`): what it reads
    /// of them afterwards (`ORT_LIB_PATH`); the TF32 override keeps the value the process started
    /// with, so the report says who set it.
    pub fn with_set(mut self, vars: &[(&'static str, OsString)]) -> RunContext {
        if let Some((_, v)) = vars.iter().find(|(k, _)| *k == ORT_LIB_PATH_VAR) {
            self.ort_lib_path = Some(v.clone());
        }
        self
    }

    /// The context of these variables alone (tests, a driver that is given its settings).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> RunContext {
        RunContext::from_lookup(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v)))
    }

    /// The context of this process's environment.
    pub fn from_env() -> RunContext {
        RunContext::from_lookup(|k| std::env::var_os(k))
    }

    /// The context of any variable lookup (the environment in [`RunContext::from_env`]).
    pub fn from_lookup(var: impl Fn(&str) -> Option<OsString>) -> RunContext {
        let path = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let text = |k: &str| var(k).map(|v| v.to_string_lossy().into_owned());
        let cache_root = path(CACHE_ENV)
            .or_else(|| path("XDG_CACHE_HOME").map(|p| p.join("onnx-parity")))
            .or_else(|| path("HOME").map(|h| h.join(".cache/onnx-parity")))
            .unwrap_or_else(|| std::env::temp_dir().join("onnx-parity"));
        RunContext {
            exports_root: path(EXPORTS_ENV),
            device: text(DEVICE_VAR),
            eps: parse_selection(&text(EP_VAR).unwrap_or_default()),
            ort_dylib: path(ORT_DYLIB_ENV),
            ort_wheel: path(ORT_WHEEL_ENV),
            ort_threads: text(THREADS_ENV).and_then(|v| v.trim().parse().ok()).unwrap_or(0),
            reference_cache: ReferenceCacheSettings {
                root: reference_cache_root(var(REFERENCE_CACHE_ENV).as_deref(), &cache_root),
                max_bytes: text(REFERENCE_CACHE_MAX_ENV)
                    .and_then(|v| crate::reference_cache::parse_size(&v))
                    .unwrap_or(crate::reference_cache::DEFAULT_MAX_BYTES),
            },
            cache_root,
            testdata: path(TESTDATA_ENV),
            goldens_root: path(GOLDENS_ENV),
            case_roots: var(CASES_ENV).filter(|v| !v.is_empty()).map(|v| std::env::split_paths(&v).collect()),
            tf32_override: text(TF32_OVERRIDE_VAR),
            ort_lib_path: var(ORT_LIB_PATH_VAR),
            cuda_jit_cache: (var(CUDA_CACHE_PATH_VAR).filter(|v| !v.is_empty()), var(CUDA_CACHE_MAXSIZE_VAR).filter(|v| !v.is_empty())),
            ci: ci_enabled(var("CI").as_deref()),
            strict: ci_enabled(var(STRICT_ENV).as_deref()),
            hub: HubSettings::from_lookup(|k| text(k)),
        }
    }
}

/// Whether a value of `CI` means "running under CI": set, and not empty, `0`, `false`, `no` or `off` (any case).
fn ci_enabled(value: Option<&std::ffi::OsStr>) -> bool {
    // Any case: `CI=False` or `CI=no` is a person switching CI off, not a CI run.
    value.is_some_and(|v| !v.to_string_lossy().trim().is_empty()) && !switched_off(value)
}

/// Where the reference cache is (`None`: off) for `ONNX_PARITY_REFERENCE_CACHE`'s `value`.
fn reference_cache_root(value: Option<&std::ffi::OsStr>, cache_root: &std::path::Path) -> Option<PathBuf> {
    if switched_off(value) {
        return None;
    }
    let v = value.map(|v| v.to_string_lossy().trim().to_string()).unwrap_or_default();
    match v.to_ascii_lowercase().as_str() {
        "" | "1" | "on" | "true" | "yes" => Some(cache_root.join("reference")),
        _ => Some(PathBuf::from(v)),
    }
}

/// Whether a value switches something off: `0`, `false`, `no` or `off` (any case); unset or
/// empty leaves it as it is.
fn switched_off(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| matches!(v.to_string_lossy().trim().to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off"))
}

static CONTEXT: OnceLock<RunContext> = OnceLock::new();

/// Installs the driver's context; the first one installed (or resolved by [`current`]) holds for
/// the process, and is returned.
pub fn install(context: RunContext) -> &'static RunContext {
    CONTEXT.get_or_init(|| context)
}

/// The run's context (the environment's when no driver installed one).
pub fn current() -> &'static RunContext {
    CONTEXT.get_or_init(RunContext::from_env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> RunContext {
        RunContext::from_pairs(pairs)
    }

    /// Guards: each variable lands in its field; empty values are unset; CI's off spellings are off.
    #[test]
    fn variables_are_read_into_the_context() {
        let c = lookup(&[
            (EXPORTS_ENV, "/x"),
            (EP_VAR, "cuda:1"),
            (THREADS_ENV, "3"),
            (CACHE_ENV, "/c"),
            (GOLDENS_ENV, "/g"),
            (ORT_WHEEL_ENV, ""),
            ("CI", "true"),
        ]);
        assert_eq!(c.exports_root.as_deref(), Some(std::path::Path::new("/x")));
        assert_eq!((c.eps.clone(), c.ort_threads), (Ok(vec![RunEp::Cuda(1)]), 3));
        assert!(c.cuda_ep());
        assert_eq!(c.cache_root, PathBuf::from("/c"));
        assert_eq!(c.goldens_root, Some(PathBuf::from("/g")));
        assert!(c.ort_wheel.is_none() && c.ci);
        let home = lookup(&[("HOME", "/h"), ("CI", "False")]);
        assert_eq!(home.cache_root, PathBuf::from("/h/.cache/onnx-parity"));
        assert!(!home.ci);
        // Nothing compiled in: without the variable each case finds its own goldens.
        assert_eq!(home.goldens_root, None);
        assert_eq!(home.eps, Ok(vec![RunEp::Cpu]));
        assert!(!home.cuda_ep());
        assert!(lookup(&[(EP_VAR, "cpu,tpu")]).eps.is_err());
        // The reference cache: on under the cache root by default, off, or in a folder given.
        assert_eq!(c.reference_cache.root, Some(PathBuf::from("/c/reference")));
        assert_eq!(c.reference_cache.max_bytes, crate::reference_cache::DEFAULT_MAX_BYTES);
        assert_eq!(lookup(&[(REFERENCE_CACHE_ENV, "Off")]).reference_cache.root, None);
        let moved = lookup(&[(REFERENCE_CACHE_ENV, "/big/disk"), (REFERENCE_CACHE_MAX_ENV, "2G")]).reference_cache;
        assert_eq!((moved.root, moved.max_bytes), (Some(PathBuf::from("/big/disk")), 2 << 30));
        for off in ["", "0", "false", "No", "OFF"] {
            assert!(!ci_enabled(Some(std::ffi::OsStr::new(off))), "{off:?}");
        }
    }

    /// Guards: `CI` counts as set unless it is absent, empty, `0` or `false` (GitHub Actions and
    /// most CI systems set `CI=true`; `CI=0` / `CI=false` switch `ci_skip_reason` off).
    #[test]
    fn ci_values() {
        for on in ["true", "1", "yes", "TRUE", "00", "woodpecker"] {
            assert!(ci_enabled(Some(std::ffi::OsStr::new(on))), "{on}");
        }
        assert!(!ci_enabled(None));
        for off in ["", "0", "false", "False", "FALSE", "no", "Off", " false "] {
            assert!(!ci_enabled(Some(std::ffi::OsStr::new(off))), "{off:?}");
        }
    }
}
