//! Shared libraries fetched from Python wheels: ONNX Runtime itself (`onnxruntime`,
//! `onnxruntime-gpu`) and its plugin execution providers (`onnxruntime-ep-webgpu`, …). A wheel is
//! downloaded once per machine with `python3 -m pip download` (or taken from a file on disk), and
//! the shared libraries of one folder inside it are extracted into a per-user cache folder.
//!
//! The fetch is serialised with a file lock and each file is renamed into place, so several test
//! processes starting at once neither race nor see a half-written library; the wheel's main
//! library is written last, and its presence is what marks a finished extraction.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use fs2::FileExt;

/// Why fetching a wheel's libraries failed.
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
    #[error("the wheel {wheel} does not contain {member} (it holds {members})")]
    NoLibrary { wheel: String, member: String, members: String },
}

/// Where a fetch gets the wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WheelSource {
    /// `python3 -m pip download` (the default).
    Pip,
    /// A wheel on disk, extracted exactly as a downloaded one.
    File(PathBuf),
}

/// One wheel and the libraries taken from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wheel {
    /// The distribution name (`onnxruntime-ep-webgpu`).
    pub name: &'static str,
    pub version: &'static str,
    /// The folder inside the wheel whose shared libraries are extracted (`onnxruntime/capi/`).
    pub member_dir: &'static str,
    /// The library the caller loads; written last.
    pub library: String,
}

impl Wheel {
    /// `name==version`.
    pub fn spec(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// The per-user cache folder for this wheel's libraries under `base`.
    pub fn cache_dir(&self, base: &Path) -> PathBuf {
        base.join(format!("{}-{}", self.name, self.version))
    }

    /// The library in `dir`, fetching the wheel into `dir` first when it is not there yet.
    pub fn install(&self, dir: &Path, source: &WheelSource) -> Result<PathBuf, FetchError> {
        let lib = dir.join(&self.library);
        if lib.is_file() {
            return Ok(lib);
        }
        let io = |action: &'static str, path: &Path, source| FetchError::Io { action, path: path.into(), source };
        fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
        let lock_path = dir.join(".lock");
        let lock = fs::File::create(&lock_path).map_err(|e| io("creating", &lock_path, e))?;
        lock.lock_exclusive().map_err(|e| io("locking", &lock_path, e))?;
        // Another process may have finished the fetch while we waited for the lock.
        if !lib.is_file() {
            remove_leftovers(dir);
            self.fetch_into(dir, source)?;
        }
        // Dropping the file releases the lock.
        drop(lock);
        Ok(lib)
    }

    /// Gets the wheel (pip, or the file given) and extracts its libraries into `dir`.
    fn fetch_into(&self, dir: &Path, source: &WheelSource) -> Result<(), FetchError> {
        let (wheel, origin) = match source {
            WheelSource::Pip => self.download(dir)?,
            WheelSource::File(p) => {
                (fs::File::open(p).map_err(|source| FetchError::Io { action: "opening", path: p.clone(), source })?, p.clone())
            }
        };
        let n = self.extract(wheel, &origin, dir)?;
        tracing::info!("extracted {n} libraries of {} into {}", self.spec(), dir.display());
        Ok(())
    }

    /// Downloads the wheel with pip into a scratch folder and returns it open, the scratch folder
    /// already removed (the open file stays readable). Removing it before the extraction means a
    /// process killed after the library is in place leaves no scratch behind: the next
    /// [`Wheel::install`] finds the library and never takes the lock that would clean it.
    fn download(&self, dir: &Path) -> Result<(fs::File, PathBuf), FetchError> {
        let scratch = dir.join(format!(".download-{}", std::process::id()));
        let _ = fs::remove_dir_all(&scratch);
        fs::create_dir_all(&scratch).map_err(|source| FetchError::Io { action: "creating", path: scratch.clone(), source })?;
        let spec = self.spec();
        tracing::info!("fetching {spec}: python3 -m pip download --no-deps {spec} (once per machine)");
        eprintln!("onnx-parity: fetching {spec} into {} ...", dir.display());
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

    /// Extracts every `<member_dir>lib*.so*` member (the library and the siblings it loads,
    /// which must sit beside it) into `dir`, each via a temp file + rename, the main library last.
    fn extract(&self, file: fs::File, wheel: &Path, dir: &Path) -> Result<usize, FetchError> {
        let zip_err = |source| FetchError::Zip { wheel: wheel.into(), source };
        let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
        let mut members: Vec<(usize, String)> = Vec::new();
        let mut all = Vec::new();
        for i in 0..zip.len() {
            let member = zip.by_index(i).map_err(zip_err)?;
            all.push(member.name().to_string());
            let Some(base) = member.name().strip_prefix(self.member_dir) else { continue };
            if base.contains('/') || !base.starts_with("lib") || !base.contains(".so") {
                continue;
            }
            members.push((i, base.to_string()));
        }
        if !members.iter().any(|(_, b)| *b == self.library) {
            return Err(FetchError::NoLibrary {
                wheel: self.spec(),
                member: format!("{}{}", self.member_dir, self.library),
                members: if all.is_empty() { "nothing".into() } else { all.join(", ") },
            });
        }
        members.sort_by_key(|(_, base)| *base == self.library);
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

/// The per-user cache root (the run context's: `ONNX_PARITY_CACHE`, else
/// `$XDG_CACHE_HOME/onnx-parity`, else `~/.cache/onnx-parity`).
pub fn cache_root() -> PathBuf {
    crate::context::current().cache_root.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn wheel_with(members: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        let mut zip = zip::ZipWriter::new(f.reopen().expect("reopen"));
        for (name, bytes) in members {
            zip.start_file(*name, zip::write::SimpleFileOptions::default()).expect("member");
            zip.write_all(bytes).expect("write");
        }
        zip.finish().expect("finish");
        f
    }

    /// Guards: the library and its siblings of the member folder are extracted (nothing else);
    /// a wheel without the library is an error naming what it holds (the TensorRT-RTX wheel on
    /// PyPI carries only metadata).
    #[test]
    fn extracts_the_member_folder_and_names_a_missing_library() {
        let w = Wheel { name: "ep", version: "1", member_dir: "ep_pkg/", library: "libep.so".into() };
        let file =
            wheel_with(&[("ep_pkg/libep.so", b"main"), ("ep_pkg/libdep.so.2", b"dep"), ("ep_pkg/__init__.py", b""), ("x/liby.so", b"")]);
        let dir = tempfile::tempdir().expect("dir");
        let lib = w.install(dir.path(), &WheelSource::File(file.path().into())).expect("installs");
        assert_eq!(fs::read(&lib).expect("lib"), b"main");
        assert!(
            dir.path().join("libdep.so.2").is_file() && !dir.path().join("__init__.py").exists() && !dir.path().join("liby.so").exists()
        );
        let stub = wheel_with(&[("ep-1.dist-info/METADATA", b"")]);
        let dir = tempfile::tempdir().expect("dir");
        let e = w.install(dir.path(), &WheelSource::File(stub.path().into())).expect_err("no library").to_string();
        assert!(e.contains("ep==1 does not contain ep_pkg/libep.so (it holds ep-1.dist-info/METADATA)"), "{e}");
    }
}
