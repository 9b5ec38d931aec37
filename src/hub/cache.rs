//! The cache layout `huggingface_hub` writes (see the module doc of [`super`]): refs, blobs,
//! snapshot links, locks, leftovers of interrupted downloads.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::names::{is_commit_hash, is_safe_component};

const LOCK_LOG_EVERY: Duration = Duration::from_secs(10);
/// A partial download untouched this long belongs to no live writer.
const STALE_INCOMPLETE: Duration = Duration::from_secs(60);
pub(super) const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by huggingface_hub.\n# For information about cache directory tags, see:\n#\thttps://bford.info/cachedir/\n";

/// `{cache}/models--{org}--{name}` (`repo_folder_name`).
pub(super) fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

/// `_get_pointer_path`: `snapshots/{sha}/{file}` (file already validated).
pub(super) fn pointer_path(dir: &Path, sha: &str, file: &str) -> PathBuf {
    file.split('/').fold(dir.join("snapshots").join(sha), |p, s| p.join(s))
}

/// The commit a revision names in the cache: itself when it is a sha, else `refs/{revision}`
/// (surrounding blanks ignored, for hand-written refs).
pub(super) fn cached_commit(dir: &Path, revision: &str) -> Option<String> {
    if is_commit_hash(revision) {
        return Some(revision.to_string());
    }
    let sha = fs::read_to_string(dir.join("refs").join(revision)).ok()?;
    Some(sha.trim().to_string()).filter(|s| is_safe_component(s))
}

/// `_cache_commit_hash_for_specific_revision`: atomic, and only when the ref changes.
pub(super) fn write_ref(dir: &Path, revision: &str, commit: &str) -> io::Result<()> {
    if revision == commit {
        return Ok(());
    }
    let path = dir.join("refs").join(revision);
    if fs::read_to_string(&path).is_ok_and(|c| c == commit) {
        return Ok(());
    }
    crate::atomic::write_atomic(&path, commit.as_bytes())
}

/// `_create_symlink`: a relative link `../../blobs/{etag}` (one more `../` per folder level of
/// the file), replacing a stale or dangling entry.
pub(super) fn link(blob: &Path, pointer: &Path, file: &str, etag: &str) -> io::Result<()> {
    let _ = fs::remove_file(pointer);
    #[cfg(unix)]
    {
        let rel: PathBuf = vec![".."; 1 + file.split('/').count()].join("/").into();
        match std::os::unix::fs::symlink(rel.join("blobs").join(etag), pointer) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && fs::canonicalize(pointer)? == fs::canonicalize(blob)? => Ok(()),
            r => r,
        }
    }
    #[cfg(not(unix))]
    {
        // No symlinks: a copy, as huggingface_hub does where they are unsupported.
        let _ = (file, etag);
        fs::copy(blob, pointer).map(drop)
    }
}

/// An exclusive `flock` on the lock file Python's `WeakFileLock` uses, logging while it waits.
pub(super) fn lock(path: &Path) -> io::Result<File> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o664);
    let f = opts.open(path)?;
    let start = Instant::now();
    let mut logged = start;
    while f.try_lock().is_err() {
        if logged.elapsed() >= LOCK_LOG_EVERY {
            tracing::info!("still waiting for {} ({:.0} s)", path.display(), start.elapsed().as_secs_f64());
            logged = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(f)
}

/// Deletes `{etag}.*.incomplete` (and the older `{etag}.incomplete`) left by a crashed download,
/// once untouched long enough that no live writer owns it.
pub(super) fn remove_stale_incomplete(blobs: &Path, etag: &str) {
    let Ok(entries) = fs::read_dir(blobs) else { return };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(&format!("{etag}.")) && name.ends_with(".incomplete")) {
            continue;
        }
        let old = e.metadata().and_then(|m| m.modified()).is_ok_and(|m| now.duration_since(m).unwrap_or_default() >= STALE_INCOMPLETE);
        if old && fs::remove_file(e.path()).is_ok() {
            tracing::info!("removed a leftover partial download {}", e.path().display());
        }
    }
}

/// Eight hex digits, unique per process and call (`uuid4().hex[:8]` in Python).
pub(super) fn unique_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{:08x}", h.finish() as u32)
}
