//! A result kept in the entry it was just stored in instead of in memory, read back when first
//! used. The floors a quantized build's int8 steps condition are made one model after another,
//! each beside the results made before it: holding the finished ones on disk until the judge
//! reads them keeps them out of the peak of the models that follow (at full E2B size the
//! conditioned local layers, 1.8 GB, sat beside the f64 conditioned prefill).
//!
//! The entry's file is opened when it is stored and the handle kept, so an entry evicted or
//! replaced meanwhile is still read whole; it is read through its digest like any entry
//! ([`super::codec::Decoder`]): an altered one is an error naming it, never a value. A result
//! that is not the cache's (a candidate's runs), or any result with the cache off, waits the same
//! way in an unnamed temporary file ([`Held::spill`]), gone with its handle.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::codec::{Decoder, Encoder};
use super::{CacheError, Cached, Key};

/// A value in memory, or in a cache entry or temporary file until first read.
pub enum Held<T> {
    Memory(T),
    Entry(HeldEntry<T>),
}

/// An entry holding a value, and the value once read.
pub struct HeldEntry<T> {
    file: Mutex<Option<File>>,
    path: PathBuf,
    what: String,
    key: Key,
    value: OnceLock<Result<T, Arc<CacheError>>>,
}

impl<T> Held<T> {
    /// `what` under `key`, stored at `path`, read through `file` (opened at its start).
    pub fn entry(file: File, path: &Path, what: &str, key: Key) -> Self {
        Held::Entry(HeldEntry {
            file: Mutex::new(Some(file)),
            path: path.to_path_buf(),
            what: what.to_string(),
            key,
            value: OnceLock::new(),
        })
    }

    /// Whether the value waits in its entry (not read yet).
    pub fn is_on_disk(&self) -> bool {
        matches!(self, Held::Entry(e) if e.value.get().is_none())
    }
}

impl<T: Cached> Held<T> {
    /// `value` written to an unnamed temporary file (gone with its handle) instead of kept in
    /// memory, for a result that is not the cache's (a candidate's run) but waits while other
    /// models run; in memory when it cannot be written.
    pub fn spill(what: &str, value: T) -> Self {
        let key = Key([0; 16]);
        let written = || -> std::io::Result<File> {
            let mut file = tempfile::tempfile()?;
            let mut e = Encoder::start(file.try_clone()?, what, &key)?;
            value.encode(&mut e)?;
            e.finish()?;
            file.seek(SeekFrom::Start(0))?;
            Ok(file)
        };
        match written() {
            Ok(file) => Held::entry(file, Path::new("(a temporary file)"), what, key),
            Err(e) => {
                tracing::warn!("{what} kept in memory (a temporary file could not be written: {e})");
                Held::Memory(value)
            }
        }
    }

    /// The value: read from its entry on first use (then kept).
    pub fn get(&self) -> Result<&T, Arc<CacheError>> {
        match self {
            Held::Memory(v) => Ok(v),
            Held::Entry(e) => e.value.get_or_init(|| e.read().map_err(Arc::new)).as_ref().map_err(Arc::clone),
        }
    }

    /// The value, owned (read from its entry unless it was already).
    pub fn into_inner(self) -> Result<T, Arc<CacheError>> {
        match self {
            Held::Memory(v) => Ok(v),
            Held::Entry(mut e) => match e.value.take() {
                Some(read) => read,
                None => e.read().map_err(Arc::new),
            },
        }
    }
}

impl<T: Cached> HeldEntry<T> {
    /// Decodes the value through the entry's digest (once: the handle is taken).
    fn read(&self) -> Result<T, CacheError> {
        let file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let file =
            file.ok_or_else(|| CacheError::Corrupt { path: self.path.clone(), why: "its handle was taken by a failed read".into() })?;
        let mut d = Decoder::of_file(file, &self.path, &self.what, &self.key)?;
        let value = T::decode(&mut d)?;
        d.finish()?;
        tracing::debug!("{} read back from {}", self.what, self.path.display());
        Ok(value)
    }
}

impl<T> std::fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Memory(_) => f.write_str("Held::Memory"),
            Held::Entry(e) => write!(f, "Held::Entry({}, {})", e.what, e.path.display()),
        }
    }
}
