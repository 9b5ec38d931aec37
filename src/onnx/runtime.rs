//! ONNX Runtime provisioning: find or fetch `libonnxruntime`, and hold the one ORT environment a
//! process may have.
//!
//! Order (first hit wins): `ORT_DYLIB_PATH`; the per-user cache; a fetch of the official
//! `onnxruntime` (or, with the `cuda` feature, `onnxruntime-gpu`) wheel through `python3 -m pip
//! download`, whose `onnxruntime/capi/*.so*` files are extracted into the cache. The fetch is
//! serialised with a file lock and each file is renamed into place, so several test processes
//! starting at once neither race nor see a half-written library. `ONNX_PARITY_ORT_WHEEL` names a
//! wheel already on disk to extract instead of downloading one (a machine that cannot reach the
//! package index; `tests/kill.rs`, which kills an extraction part-way without a network).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use fs2::FileExt;

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
    Unavailable { version: &'static str, wheel: &'static str, tried: String, cause: FetchError },
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
    /// The process's one attempt to create the environment failed (returned to every caller).
    #[error(transparent)]
    Once(Arc<RuntimeError>),
}

/// Why fetching the library failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("running python3 -m pip: {0}")]
    Pip(#[source] std::io::Error),
    #[error("pip download {spec} failed ({status}): {stderr}")]
    PipFailed { spec: String, status: std::process::ExitStatus, stderr: String },
    #[error("pip download {spec} produced no .whl in {}", dir.display())]
    NoWheel { spec: String, dir: PathBuf },
    #[error("reading {}: {source}", wheel.display())]
    Zip {
        wheel: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("the wheel did not contain onnxruntime/capi/{0}")]
    NoLibrary(String),
}

/// The execution provider of this build and the wheel that carries its library.
struct Provider {
    name: &'static str,
    wheel: &'static str,
}

const PROVIDER: Provider = if cfg!(feature = "cuda") {
    Provider { name: "CUDAExecutionProvider (TF32 off)", wheel: "onnxruntime-gpu" }
} else {
    Provider { name: "CPUExecutionProvider", wheel: "onnxruntime" }
};

/// The execution provider sessions use (for reports).
pub fn execution_provider() -> &'static str {
    PROVIDER.name
}

/// Which wheel carries the library for this build.
fn wheel_name() -> &'static str {
    PROVIDER.wheel
}

fn library_file_name() -> String {
    format!("libonnxruntime.so.{ORT_VERSION}")
}

/// Per-user cache folder for the extracted library (separate for CPU and GPU wheels).
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("ONNX_PARITY_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|p| PathBuf::from(p).join("onnx-parity")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/onnx-parity")))
        .unwrap_or_else(|| std::env::temp_dir().join("onnx-parity"));
    base.join(format!("{}-{ORT_VERSION}", wheel_name()))
}

/// Where a fetch gets the wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WheelSource {
    /// `python3 -m pip download` (the default).
    Pip,
    /// `ONNX_PARITY_ORT_WHEEL`: a wheel on disk, extracted exactly as a downloaded one.
    File(PathBuf),
}

/// Locates the ONNX Runtime shared library, fetching it on first use.
pub fn locate_library() -> Result<PathBuf, RuntimeError> {
    let source = std::env::var_os("ONNX_PARITY_ORT_WHEEL").map_or(WheelSource::Pip, |p| WheelSource::File(p.into()));
    locate(std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from), cache_dir(), &source)
}

/// [`locate_library`] with its inputs explicit (testable without touching the environment).
fn locate(override_path: Option<PathBuf>, dir: PathBuf, source: &WheelSource) -> Result<PathBuf, RuntimeError> {
    if let Some(p) = override_path {
        return if p.is_file() { Ok(p) } else { Err(RuntimeError::BadOverride(p)) };
    }
    let lib = dir.join(library_file_name());
    if lib.is_file() {
        return Ok(lib);
    }
    let fetch = match source {
        WheelSource::Pip => format!("python3 -m pip download {}=={}", wheel_name(), ORT_VERSION),
        WheelSource::File(p) if p.is_file() => format!("the wheel {} (ONNX_PARITY_ORT_WHEEL)", p.display()),
        WheelSource::File(p) => return Err(RuntimeError::BadWheel(p.clone())),
    };
    let tried = format!("ORT_DYLIB_PATH (unset); cache {}; {fetch}", lib.display());
    let unavailable =
        |cause: FetchError| RuntimeError::Unavailable { version: ORT_VERSION, wheel: wheel_name(), tried: tried.clone(), cause };
    let io = |action: &'static str, path: &Path, source| unavailable(FetchError::Io { action, path: path.into(), source });
    fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
    let lock_path = dir.join(".lock");
    let lock = fs::File::create(&lock_path).map_err(|e| io("creating", &lock_path, e))?;
    lock.lock_exclusive().map_err(|e| io("locking", &lock_path, e))?;
    // Another process may have finished the fetch while we waited for the lock.
    if !lib.is_file() {
        remove_leftovers(&dir);
        fetch_into(&dir, source).map_err(unavailable)?;
    }
    // Dropping the file releases the lock.
    drop(lock);
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(unavailable(FetchError::NoLibrary(library_file_name())))
    }
}

/// Removes what a fetch killed part-way left behind (its scratch folder with the wheel, temp files
/// of [`crate::atomic::write_atomic`]). Called under the lock, so no live fetch owns them.
fn remove_leftovers(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with(".download-") {
            let _ = fs::remove_dir_all(&path);
        } else if name.starts_with('.') && name.contains(".tmp-") {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Gets the wheel (pip, or the file given) and extracts its `capi` shared libraries into `dir`.
fn fetch_into(dir: &Path, source: &WheelSource) -> Result<(), FetchError> {
    let (wheel, origin) = match source {
        WheelSource::Pip => download(dir)?,
        WheelSource::File(p) => {
            (fs::File::open(p).map_err(|source| FetchError::Io { action: "opening", path: p.clone(), source })?, p.clone())
        }
    };
    let n = extract_capi_libraries(wheel, &origin, dir)?;
    tracing::info!("extracted {n} ONNX Runtime libraries into {}", dir.display());
    Ok(())
}

/// Downloads the wheel with pip into a scratch folder and returns it open, the scratch folder
/// already removed (the open file stays readable). Removing it before the extraction means a
/// process killed after the runtime library is in place leaves no scratch behind: the next
/// [`locate`] finds the library and never takes the lock that would clean it.
fn download(dir: &Path) -> Result<(fs::File, PathBuf), FetchError> {
    let scratch = dir.join(format!(".download-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(|source| FetchError::Io { action: "creating", path: scratch.clone(), source })?;
    let spec = format!("{}=={ORT_VERSION}", wheel_name());
    tracing::info!("fetching ONNX Runtime: python3 -m pip download --no-deps {spec} (once per machine)");
    eprintln!("onnx-parity: fetching ONNX Runtime ({spec}) into {} ...", dir.display());
    let result = (|| {
        let out = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-d"])
            .arg(&scratch)
            .arg(&spec)
            .output()
            .map_err(FetchError::Pip)?;
        if !out.status.success() {
            return Err(FetchError::PipFailed {
                spec: spec.clone(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let wheel = fs::read_dir(&scratch)
            .map_err(|source| FetchError::Io { action: "listing", path: scratch.clone(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| FetchError::NoWheel { spec: spec.clone(), dir: scratch.clone() })?;
        let file = fs::File::open(&wheel).map_err(|source| FetchError::Io { action: "opening", path: wheel.clone(), source })?;
        Ok((file, wheel))
    })();
    let _ = fs::remove_dir_all(&scratch);
    result
}

/// Extracts every `onnxruntime/capi/lib*.so*` member (the runtime and, for the GPU wheel, its
/// provider libraries, which must sit beside it) into `dir`, each via a temp file + rename. The
/// runtime library goes last: its presence is what [`locate`] takes for a finished extraction, so
/// a fetch killed part-way is redone rather than leaving a runtime without its providers.
fn extract_capi_libraries(file: fs::File, wheel: &Path, dir: &Path) -> Result<usize, FetchError> {
    let zip_err = |source| FetchError::Zip { wheel: wheel.into(), source };
    let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
    let mut members: Vec<(usize, String)> = Vec::new();
    for i in 0..zip.len() {
        let member = zip.by_index(i).map_err(zip_err)?;
        let Some(base) = member.name().strip_prefix("onnxruntime/capi/") else { continue };
        if base.contains('/') || !base.starts_with("lib") || !base.contains(".so") {
            continue;
        }
        members.push((i, base.to_string()));
    }
    members.sort_by_key(|(_, base)| *base == library_file_name());
    let mut n = 0;
    for (i, base) in members {
        let mut member = zip.by_index(i).map_err(zip_err)?;
        let name = PathBuf::from(member.name());
        let target = dir.join(base);
        let mut bytes = Vec::with_capacity(member.size() as usize);
        member.read_to_end(&mut bytes).map_err(|source| FetchError::Io { action: "extracting", path: name, source })?;
        crate::atomic::write_atomic(&target, &bytes).map_err(|source| FetchError::Io {
            action: "writing",
            path: target.clone(),
            source,
        })?;
        n += 1;
    }
    Ok(n)
}

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, Arc<RuntimeError>>> = OnceLock::new();

/// The process-wide ORT environment (ONNX Runtime allows one per process), created on first use.
pub fn environment() -> Result<&'static ort::environment::Environment, RuntimeError> {
    let env = ENVIRONMENT.get_or_init(|| {
        {
            // Before any CUDA context exists (cuBLAS/cuDNN read it once): NVIDIA_TF32_OVERRIDE=0
            // unless the user set it (crate::tf32; main and the test harness applied it already).
            crate::tf32::tf32_env();
            let lib = locate_library()?;
            tracing::debug!("loading ONNX Runtime from {}", lib.display());
            let builder = ort::init_from(&lib).map_err(|source| RuntimeError::Load { path: lib.clone(), source })?;
            builder.with_name("onnx-parity").with_telemetry(false).build().map_err(RuntimeError::Environment)
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
        let e = locate(Some(missing.clone()), dir.path().into(), &WheelSource::Pip).expect_err("bad override must fail").to_string();
        assert!(e.contains("ORT_DYLIB_PATH") && e.contains("nope.so"), "{e}");
        let cached = dir.path().join(library_file_name());
        std::fs::write(&cached, b"not really a library").expect("write");
        assert_eq!(locate(None, dir.path().into(), &WheelSource::Pip).expect("cache hit"), cached);
    }

    /// Guards: a wrong ONNX_PARITY_ORT_WHEEL is an error naming it, never a silent fallback to pip.
    #[test]
    fn bad_wheel_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nope.whl");
        let e = locate(None, dir.path().join("cache"), &WheelSource::File(missing)).expect_err("bad wheel must fail").to_string();
        assert!(e.contains("ONNX_PARITY_ORT_WHEEL") && e.contains("nope.whl"), "{e}");
    }
}
