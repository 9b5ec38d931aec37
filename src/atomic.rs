//! Atomic file writes: goldens, reports, dumps and the ONNX Runtime cache are written to a
//! temp file in the target's folder, synced, then renamed over the target, so a reader (or a
//! crash) never sees a half-written file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How many temp names [`write_atomic`] tries before giving up.
const TMP_ATTEMPTS: u32 = 1000;

/// Writes `bytes` to `path` atomically, creating the parent folder if needed.
///
/// The temp file is `.{name}.tmp-{pid}-{n}` beside `path`: hidden and never named like the target,
/// so a reader opening `path` (or listing `*.json`, `*.yaml`) never sees it. A process killed
/// mid-write leaves it behind. Such leftovers are not deleted here, since a leftover cannot be told
/// from a live writer's temp file without a lock (the ONNX Runtime cache removes them under its
/// lock), but they never block a write (see `create_temp`). `tests/kill.rs` checks all of this.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    })
}

/// [`write_atomic`] of what `write` writes into the temp file (and syncs): a large value streamed
/// to disk without a copy of it in memory (the reference cache's entries).
pub fn write_atomic_with<T>(path: &Path, write: impl FnOnce(File) -> io::Result<T>) -> io::Result<T> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    fs::create_dir_all(&dir)?;
    let (tmp, f) = create_temp(&dir, &name.to_string_lossy())?;
    let result = write(f).and_then(|out| fs::rename(&tmp, path).map(|()| out));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    let out = result?;
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(out)
}

/// Creates a fresh temp file for `name` in `dir`. A name that exists is skipped, never reused or
/// removed: it is the leftover of a killed writer whose pid this process now has (pids are reused,
/// and a container's first process often gets the same pid every run), or the live temp of a
/// process with the same pid in another pid namespace sharing the folder.
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    for _ in 0..TMP_ATTEMPTS {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{TMP_ATTEMPTS} temp names for {name} in {} are taken by leftovers", dir.display()),
    ))
}
