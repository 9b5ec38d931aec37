//! Cache keys: a 128-bit XXH3 over everything that decides a reference-side result, each part
//! named (so two parts cannot run into each other), and the digests of the files it reads — the
//! checkpoint's weights and config, a quantized build's graphs and payload — remembered by their
//! metadata so an unchanged multi-GB checkpoint is hashed once, not on every run.
//!
//! Why XXH3 and not a cryptographic hash: the keys guard against accidents (a changed file, a
//! stale entry), not an adversary who can write the cache folder anyway, and the inputs are
//! large (a 3 GB checkpoint: SHA-256 took 2.3 s of a run's cold start, XXH3 reads it at memory
//! speed); 128 bits make an accidental collision of two of a machine's entries negligible.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use super::error::CacheError;

/// The entry layout's version, in every key and entry header: bumped when the layout of any
/// value changes (the code version covers the rest).
pub const FORMAT: u32 = 2;

/// The version of the code that computes the reference side (build.rs: a digest of its sources).
pub const CODE_VERSION: &str = env!("ONNX_PARITY_REFERENCE_CODE");

/// A cache key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub [u8; 16]);

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({self})")
    }
}

/// Builds a key from named parts, in the order given.
#[derive(Clone)]
pub struct KeyBuilder(Xxh3);

impl KeyBuilder {
    /// A key for results of kind `what`, of this code version (`code`: [`CODE_VERSION`] but in
    /// the tests that show a changed reference build misses).
    pub fn new(what: &str, code: &str) -> Self {
        let mut b = KeyBuilder(Xxh3::new());
        b.add("format", &FORMAT.to_le_bytes());
        b.add("code", code.as_bytes());
        b.add("what", what.as_bytes());
        b
    }

    /// Adds part `name` (length-prefixed, so parts never run into each other).
    pub fn add(&mut self, name: &str, value: &[u8]) -> &mut Self {
        for part in [name.as_bytes(), value] {
            self.0.update(&(part.len() as u64).to_le_bytes());
            self.0.update(part);
        }
        self
    }

    pub fn text(&mut self, name: &str, value: &str) -> &mut Self {
        self.add(name, value.as_bytes())
    }

    pub fn i64s(&mut self, name: &str, values: &[i64]) -> &mut Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add(name, &bytes)
    }

    /// Adds `values` (f32, bit exact) without a copy of them.
    pub fn f32s(&mut self, name: &str, values: &[f32]) -> &mut Self {
        self.0.update(&(name.len() as u64).to_le_bytes());
        self.0.update(name.as_bytes());
        self.0.update(&((values.len() * 4) as u64).to_le_bytes());
        let mut bytes = Vec::with_capacity(4 << 14);
        for chunk in values.chunks(1 << 14) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            self.0.update(&bytes);
        }
        self
    }

    pub fn finish(&self) -> Key {
        Key(self.0.digest128().to_le_bytes())
    }
}

impl std::fmt::Debug for KeyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyBuilder({})", self.finish())
    }
}

/// What a file's digest is remembered by: it is hashed again when any of these changed (a
/// write changes the size or the change time, which no tool can set back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    len: u64,
    modified_ns: i128,
    changed_ns: i128,
    inode: u64,
}

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    let ns = |t: std::io::Result<std::time::SystemTime>| {
        t.ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as i128)
    };
    #[cfg(unix)]
    let (changed_ns, inode) = {
        use std::os::unix::fs::MetadataExt;
        (meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128, meta.ino())
    };
    #[cfg(not(unix))]
    let (changed_ns, inode) = (0, 0);
    Stamp { len: meta.len(), modified_ns: ns(meta.modified()), changed_ns, inode }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    stamp: Stamp,
    xxh3: String,
}

/// File digests remembered by path and [`Stamp`], kept in `<cache>/file-digests.json`.
#[derive(Debug)]
pub struct FileDigests {
    path: PathBuf,
    known: Mutex<Option<BTreeMap<PathBuf, Remembered>>>,
}

impl FileDigests {
    pub fn new(path: PathBuf) -> Self {
        FileDigests { path, known: Mutex::new(None) }
    }

    /// The XXH3-128 of each of `files`' content (hashed now when it changed or was never seen,
    /// those files side by side: a checkpoint's shards; progress logged for large files), in
    /// order; the first file that cannot be read is the error. What was hashed is remembered
    /// once for all of them, even when one fails: one synced write per folder, not one per file.
    pub fn digests(&self, files: &[PathBuf]) -> Result<Vec<String>, CacheError> {
        use rayon::prelude::*;
        let mut guard = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known =
            guard.get_or_insert_with(|| std::fs::read(&self.path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default());
        let looked: Vec<Result<(PathBuf, Stamp), CacheError>> = files.iter().map(|f| look(f)).collect();
        let remembered = &*known;
        let found: Vec<Result<Found, CacheError>> = looked
            .into_par_iter()
            .map(|l| {
                let (canonical, now) = l?;
                match remembered.get(&canonical).filter(|r| r.stamp == now) {
                    Some(r) => Ok(Found { digest: r.xxh3.clone(), learned: None }),
                    None => hashed(canonical, now),
                }
            })
            .collect();
        let mut learned = false;
        let out = found
            .into_iter()
            .map(|f| {
                let f = f?;
                if let Some((canonical, stamp)) = f.learned {
                    known.insert(canonical, Remembered { stamp, xxh3: f.digest.clone() });
                    learned = true;
                }
                Ok(f.digest)
            })
            .collect::<Vec<Result<String, CacheError>>>();
        if learned {
            if let Ok(text) = serde_json::to_vec(&*known) {
                if let Err(e) = crate::atomic::write_atomic(&self.path, &text) {
                    tracing::warn!("reference cache: cannot remember file digests in {}: {e}", self.path.display());
                }
            }
        }
        out.into_iter().collect()
    }
}

/// A file's digest, and what to remember it by when it was hashed now.
struct Found {
    digest: String,
    learned: Option<(PathBuf, Stamp)>,
}

/// `file`'s canonical path and its [`Stamp`] now.
fn look(file: &Path) -> Result<(PathBuf, Stamp), CacheError> {
    let io = |source| CacheError::Io { path: file.to_path_buf(), source };
    let canonical = std::fs::canonicalize(file).map_err(io)?;
    let now = stamp(&std::fs::metadata(&canonical).map_err(io)?);
    Ok((canonical, now))
}

/// `canonical` hashed; remembered by `now` only when it is still stamped so after reading (a
/// file written meanwhile is not remembered as read).
fn hashed(canonical: PathBuf, now: Stamp) -> Result<Found, CacheError> {
    let digest = hash_file(&canonical)?;
    let after = stamp(&std::fs::metadata(&canonical).map_err(|source| CacheError::Io { path: canonical.clone(), source })?);
    Ok(Found { digest, learned: (after == now).then_some((canonical, now)) })
}

/// XXH3-128 of a file's content, hashed where the page cache holds it (mapped, not copied
/// out: at E2B width reading 3.1 GB of shards cost 1 s more than hashing them); a file over
/// 1 GiB logs its progress.
fn hash_file(path: &Path) -> Result<String, CacheError> {
    let io = |source| CacheError::Io { path: path.to_path_buf(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let t = std::time::Instant::now();
    let mut logged = 0u64;
    let mut progress = |done: u64| {
        if len > 1 << 30 && done - logged >= 1 << 30 {
            logged = done;
            tracing::info!("reference cache: hashing {}: {:.1} of {:.1} GB", path.display(), done as f64 / 1e9, len as f64 / 1e9);
        }
    };
    let digest = if len == 0 {
        digest_of(&mut file, 0, progress).map_err(io)?
    } else {
        // SAFETY: the map is only read, and dropped before this returns; a file truncated
        // meanwhile is a fault, as for the reference's own mapped weights (`Weights::open`).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let mut h = Xxh3::new();
        for (i, block) in map.chunks(64 << 20).enumerate() {
            h.update(block);
            progress((i * (64 << 20) + block.len()) as u64);
        }
        h.digest128()
    };
    if len > 1 << 28 {
        tracing::info!("reference cache: hashed {} ({:.2} GB) in {:.1} s", path.display(), len as f64 / 1e9, t.elapsed().as_secs_f64());
    }
    Ok(format!("{digest:032x}"))
}

/// The XXH3-128 of the next `len` bytes of `input`, read in 8 MiB blocks (`progress` hears the
/// bytes done after each): a checkpoint file's digest, and an entry's up to its trailer.
pub(super) fn digest_of(input: &mut impl std::io::Read, len: u64, mut progress: impl FnMut(u64)) -> std::io::Result<u128> {
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; (8usize << 20).min(usize::try_from(len).unwrap_or(usize::MAX)).max(1)];
    let mut done = 0u64;
    while done < len {
        let n = (buf.len() as u64).min(len - done) as usize;
        input.read_exact(&mut buf[..n])?;
        h.update(&buf[..n]);
        done += n as u64;
        progress(done);
    }
    Ok(h.digest128())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the mapped hash: a file's digest is the streamed XXH3-128 of its bytes (what an
    /// entry's trailer is checked with), for an empty file too, so a key does not depend on how
    /// its files were read.
    #[test]
    fn a_mapped_file_hashes_as_its_bytes_stream() {
        let dir = tempfile::tempdir().unwrap();
        for (name, len) in [("empty", 0usize), ("small", 5), ("blocks", (3 << 20) + 7)] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            let streamed = digest_of(&mut bytes.as_slice(), len as u64, |_| {}).unwrap();
            assert_eq!(hash_file(&path).unwrap(), format!("{streamed:032x}"), "{name}");
        }
    }

    /// Guards the remembered digests: a folder's files are hashed once and remembered together
    /// (one file written with all of them), a file that changes is hashed again, and a missing
    /// file is an error naming it while what was hashed before it is still remembered.
    #[test]
    fn digests_are_remembered_per_folder_and_follow_changes() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("f{i}"))).collect();
        for (i, f) in files.iter().enumerate() {
            std::fs::write(f, vec![i as u8; 100]).unwrap();
        }
        let memo = dir.path().join("file-digests.json");
        let first = FileDigests::new(memo.clone()).digests(&files).unwrap();
        let remembered: BTreeMap<PathBuf, Remembered> = serde_json::from_slice(&std::fs::read(&memo).unwrap()).unwrap();
        assert_eq!(remembered.len(), 3);
        assert_eq!(FileDigests::new(memo.clone()).digests(&files).unwrap(), first);
        std::fs::write(&files[1], vec![9u8; 101]).unwrap();
        let again = FileDigests::new(memo.clone()).digests(&files).unwrap();
        assert_eq!((again[0] == first[0], again[1] == first[1]), (true, false));
        let missing = [files[0].clone(), dir.path().join("absent")];
        let err = FileDigests::new(dir.path().join("other.json")).digests(&missing).unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
        let kept: BTreeMap<PathBuf, Remembered> = serde_json::from_slice(&std::fs::read(dir.path().join("other.json")).unwrap()).unwrap();
        assert_eq!(kept.len(), 1);
    }
}
