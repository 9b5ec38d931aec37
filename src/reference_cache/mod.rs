//! The reference side's results cached by content, so that judging a new export of an unchanged
//! checkpoint costs the ONNX Runtime side alone.
//!
//! What the tiers compare a candidate with — the reference's run, the f64 arbiter's, the floor
//! at the candidate's precision with its local layers, a quantized build's float reference and
//! the floors conditioned on its int8 steps — depends only on the checkpoint's weights and
//! config, the inputs, the precision, the reference's code and, for a quantized build, the
//! build's weights (and the candidate's activations for the conditioned floors). Each such result
//! is stored under a key over exactly those ([`key`]), in `<cache root>/reference/entries/`,
//! written atomically and checked by its XXH3 digest when read ([`codec`]): a missing, truncated or
//! altered entry is a miss (with a warning), never a value. The folder is bounded
//! (`ONNX_PARITY_REFERENCE_CACHE_MAX`, default [`DEFAULT_MAX_BYTES`]): the least recently used
//! entries go first. `ONNX_PARITY_REFERENCE_CACHE=off` or `--no-cache` turns it off.

pub mod codec;
mod error;
pub mod held;
pub mod key;
pub mod values;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

pub use error::CacheError;
pub use held::Held;
pub use key::{FileDigests, Key, KeyBuilder, CODE_VERSION, FORMAT};
pub use values::Cached;

/// The folder's default bound: two cases at 12B width (≈ 2.5 GB each with 1100 positions) and
/// room for their quantized builds.
pub const DEFAULT_MAX_BYTES: u64 = 20 << 30;

/// What this process took from the cache and put in it (the report's `reference_cache`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CacheUse {
    /// Where the entries are; empty when the cache is off.
    pub root: String,
    /// `<case>: <result>` for each result read from the cache.
    pub hits: Vec<String>,
    /// Results computed and stored.
    pub stored: usize,
    /// Entries found unusable (corrupt, truncated, unreadable), recomputed.
    pub unusable: usize,
}

static USE: Mutex<Option<CacheUse>> = Mutex::new(None);

fn record(f: impl FnOnce(&mut CacheUse)) {
    let mut guard = USE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.get_or_insert_with(CacheUse::default));
}

/// What this process took from and put in the cache so far.
pub fn usage() -> CacheUse {
    USE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default()
}

/// The entries under one folder, at most `max_bytes` of them.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    max_bytes: u64,
    pub digests: FileDigests,
}

impl Store {
    pub fn new(root: PathBuf, max_bytes: u64) -> Self {
        record(|u| u.root = root.display().to_string());
        let digests = FileDigests::new(root.join("file-digests.json"));
        Store { root, max_bytes, digests }
    }

    fn path(&self, key: &Key) -> PathBuf {
        let hex = key.to_string();
        self.root.join("entries").join(&hex[..2]).join(format!("{hex}.bin"))
    }

    /// Whether an entry is stored under `key` (not whether it is usable: reading says that).
    pub fn contains(&self, key: &Key) -> bool {
        self.path(key).is_file()
    }

    /// The value stored under `key` (`what` names it in the log and the report, with `label`,
    /// the case); `None` when there is none or it cannot be used (then it is removed).
    pub fn get<T: Cached>(&self, what: &str, label: &str, key: &Key) -> Option<T> {
        self.read(what, label, key, true)
    }

    /// [`Store::get`] of a value just stored ([`Cached::read_back_after_store`]): not a hit.
    pub fn read_back<T: Cached>(&self, what: &str, label: &str, key: &Key) -> Option<T> {
        self.read(what, label, key, false)
    }

    fn read<T: Cached>(&self, what: &str, label: &str, key: &Key, hit: bool) -> Option<T> {
        let path = self.path(key);
        let read = || -> Result<Option<T>, CacheError> {
            let Some(mut d) = codec::Decoder::open(&path, what, key)? else { return Ok(None) };
            let value = T::decode(&mut d)?;
            d.finish()?;
            Ok(Some(value))
        };
        match read() {
            Ok(Some(v)) => {
                // Recently used: eviction goes by modification time.
                if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                if hit {
                    tracing::info!("{label}: {what} read from the reference cache ({})", path.display());
                    record(|u| u.hits.push(format!("{label}: {what}")));
                }
                Some(v)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("{label}: reference cache entry for {what} not used, recomputing: {e}");
                record(|u| u.unusable += 1);
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `value` under `key` (atomically), then evicts the least recently used entries
    /// beyond the bound; whether it was stored. A failure is a warning: the run goes on without
    /// the entry.
    pub fn put<T: Cached>(&self, what: &str, label: &str, key: &Key, value: &T) -> bool {
        let path = self.path(key);
        let written = crate::atomic::write_atomic_with(&path, |file| {
            let mut e = codec::Encoder::start(file, what, key)?;
            value.encode(&mut e)?;
            e.finish()
        });
        match written {
            Ok(bytes) => {
                tracing::info!("{label}: {what} stored in the reference cache ({:.1} MB)", bytes as f64 / 1e6);
                record(|u| u.stored += 1);
                self.evict(&path);
                true
            }
            Err(e) => {
                tracing::warn!("{label}: {what} not stored in the reference cache ({}): {e}", path.display());
                false
            }
        }
    }

    /// Stores `value` under `key` and returns it held in its entry ([`Held`]: read back when
    /// first used), or in memory when it could not be stored.
    pub fn put_held<T: Cached>(&self, what: &str, label: &str, key: &Key, value: T) -> Held<T> {
        if self.put(what, label, key, &value) {
            let path = self.path(key);
            match std::fs::File::open(&path) {
                Ok(file) => return Held::entry(file, &path, what, *key),
                Err(e) => tracing::warn!("{label}: {what} kept in memory ({}: {e})", path.display()),
            }
        }
        Held::Memory(value)
    }

    /// Removes the least recently used entries until the folder is within its bound (`keep`,
    /// the entry just written, last of all).
    fn evict(&self, keep: &Path) {
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> =
            crate::files::walk(&self.root.join("entries"), &|p| p.extension().is_some_and(|e| e == "bin"))
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    let m = std::fs::metadata(&p).ok()?;
                    Some((m.modified().ok()?, m.len(), p))
                })
                .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        if total <= self.max_bytes {
            return;
        }
        entries.sort_by_key(|(t, _, p)| (p == keep, *t));
        for (_, len, p) in entries {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&p).is_ok() {
                tracing::info!("reference cache: evicted {} ({:.1} MB, least recently used)", p.display(), len as f64 / 1e6);
                total -= len;
            }
        }
    }
}

/// A size in bytes as written in `ONNX_PARITY_REFERENCE_CACHE_MAX`: a number with an optional
/// `K`, `M`, `G` or `T` (powers of 1024, `B`/`iB` allowed after them).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_uppercase();
    let t = t.trim_end_matches('B').trim_end_matches('I');
    let (number, shift) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: f64 = number.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then(|| (n * (1u64 << shift) as f64) as u64)
}
