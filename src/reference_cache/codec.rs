//! The entry format: a header (magic, format version, what the entry holds, its key), the value's
//! fields in order (little endian; lengths before sequences), and an XXH3-128 of everything
//! before it. Written streaming through the digest (never a second copy of a value in memory), read
//! in one pass through it, and used only after it matched: a truncated or altered entry is a miss,
//! never a value.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::Xxh3;

use super::error::CacheError;
use super::key::{Key, FORMAT};

/// The first bytes of every entry.
const MAGIC: &[u8; 8] = b"OPREFC\0\x01";
/// The trailing digest's bytes.
const DIGEST: u64 = 16;
/// Floats converted per write (bounded scratch, not a copy of the tensor).
const CHUNK: usize = 1 << 16;

/// Writes one entry.
pub struct Encoder {
    out: BufWriter<File>,
    digest: Xxh3,
    written: u64,
}

impl Encoder {
    /// Starts the entry for `what` under `key` in `file`.
    pub fn start(file: File, what: &str, key: &Key) -> std::io::Result<Self> {
        let mut e = Encoder { out: BufWriter::with_capacity(1 << 20, file), digest: Xxh3::new(), written: 0 };
        e.bytes(MAGIC)?;
        e.u64(FORMAT as u64)?;
        e.str(what)?;
        e.bytes(&key.0)?;
        Ok(e)
    }

    pub fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.digest.update(b);
        self.written += b.len() as u64;
        self.out.write_all(b)
    }

    pub fn u64(&mut self, v: u64) -> std::io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub fn usize(&mut self, v: usize) -> std::io::Result<()> {
        self.u64(v as u64)
    }

    pub fn f64(&mut self, v: f64) -> std::io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub fn str(&mut self, s: &str) -> std::io::Result<()> {
        self.usize(s.len())?;
        self.bytes(s.as_bytes())
    }

    /// The values without their length (a block whose length the reader knows).
    pub fn f32_block(&mut self, v: &[f32]) -> std::io::Result<()> {
        let mut scratch = Vec::with_capacity(CHUNK.min(v.len()) * 4);
        for chunk in v.chunks(CHUNK) {
            scratch.clear();
            scratch.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
            self.bytes(&scratch)?;
        }
        Ok(())
    }

    pub fn f32s(&mut self, v: &[f32]) -> std::io::Result<()> {
        self.usize(v.len())?;
        self.f32_block(v)
    }

    pub fn i64s(&mut self, v: &[i64]) -> std::io::Result<()> {
        self.usize(v.len())?;
        for x in v {
            self.bytes(&x.to_le_bytes())?;
        }
        Ok(())
    }

    /// Bytes written so far (where the next value starts).
    pub fn position(&self) -> u64 {
        self.written
    }

    /// Appends the digest and flushes to the kernel; returns the entry's size.
    ///
    /// Not synced to the disk: the entry is renamed into place whole (a reader never sees it
    /// half-written), and what a power loss could leave of it (empty, truncated, stale blocks)
    /// fails its digest when read, which is a miss with a warning, never a value. Syncing cost a
    /// cold E2B-width run 2.3 s for the reference's 901 MB entry alone (waiting on the disk).
    pub fn finish(mut self) -> std::io::Result<u64> {
        let digest = self.digest.digest128().to_le_bytes();
        self.out.write_all(&digest)?;
        self.out.flush()?;
        Ok(self.written + digest.len() as u64)
    }
}

/// Reads one entry in one pass: every byte goes through the digest as it is read (a skipped
/// block too), and [`Decoder::finish`] compares it with the stored one, so a value is used only
/// after its whole entry matched (a warm 12B-width run read its 3.8 GB of entries twice, once
/// for the digest and once to decode, from the disk when ONNX Runtime had evicted them).
pub struct Decoder {
    input: BufReader<File>,
    digest: Xxh3,
    /// A second handle on the same file for values read later (stored logits slices).
    shared: Arc<Mutex<File>>,
    path: PathBuf,
    pos: u64,
    /// Where the value ends (the digest follows).
    end: u64,
}

impl Decoder {
    /// Opens `path`, checks its header (`what`, `key`), and leaves the reader at the value's
    /// first field; the digest is checked by [`Decoder::finish`]. `Ok(None)`: no such entry.
    pub fn open(path: &Path, what: &str, key: &Key) -> Result<Option<Self>, CacheError> {
        match File::open(path) {
            Ok(file) => Self::of_file(file, path, what, key).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CacheError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// [`Decoder::open`] on a handle opened on `path` before (at its start): an entry held by a
    /// value read later, still readable if the entry was evicted or replaced meanwhile.
    pub fn of_file(file: File, path: &Path, what: &str, key: &Key) -> Result<Self, CacheError> {
        let corrupt = |why: String| CacheError::Corrupt { path: path.to_path_buf(), why };
        let io = |source| CacheError::Io { path: path.to_path_buf(), source };
        let len = file.metadata().map_err(io)?.len();
        if len < DIGEST + MAGIC.len() as u64 {
            return Err(corrupt(format!("{len} bytes: shorter than a header and its digest")));
        }
        let end = len - DIGEST;
        let shared = Arc::new(Mutex::new(file.try_clone().map_err(io)?));
        let input = BufReader::with_capacity(1 << 20, file);
        let mut d = Decoder { input, digest: Xxh3::new(), shared, path: path.to_path_buf(), pos: 0, end };
        let mut magic = [0u8; 8];
        d.read(&mut magic)?;
        let format = d.u64()?;
        if &magic != MAGIC || format != FORMAT as u64 {
            return Err(corrupt(format!("not an entry of format {FORMAT} (format {format})")));
        }
        let holds = d.str()?;
        let mut stored_key = [0u8; 16];
        d.read(&mut stored_key)?;
        if holds != what || stored_key != key.0 {
            return Err(corrupt(format!("holds `{holds}` under another key, not `{what}` under {key}")));
        }
        Ok(d)
    }

    fn corrupt(&self, why: impl Into<String>) -> CacheError {
        CacheError::Corrupt { path: self.path.clone(), why: why.into() }
    }

    fn read(&mut self, out: &mut [u8]) -> Result<(), CacheError> {
        if self.pos + out.len() as u64 > self.end {
            return Err(self.corrupt(format!("a field runs past the end at byte {}", self.pos)));
        }
        self.input.read_exact(out).map_err(|source| CacheError::Io { path: self.path.clone(), source })?;
        self.digest.update(out);
        self.pos += out.len() as u64;
        Ok(())
    }

    pub fn u64(&mut self) -> Result<u64, CacheError> {
        let mut b = [0u8; 8];
        self.read(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A value (an index, a dimension).
    pub fn usize(&mut self) -> Result<usize, CacheError> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| self.corrupt(format!("{v} does not fit a usize")))
    }

    /// A count of items that each take at least one byte: at most the bytes left (a corrupt
    /// count never allocates).
    pub fn count(&mut self) -> Result<usize, CacheError> {
        self.len_of(1)
    }

    /// A length of `elem`-byte elements that fit in what is left.
    fn len_of(&mut self, elem: u64) -> Result<usize, CacheError> {
        let n = self.u64()?;
        if n.saturating_mul(elem) > self.end - self.pos {
            return Err(self.corrupt(format!("{n} elements of {elem} bytes past the end at byte {}", self.pos)));
        }
        Ok(n as usize)
    }

    pub fn f64(&mut self) -> Result<f64, CacheError> {
        Ok(f64::from_bits(self.u64()?))
    }

    pub fn str(&mut self) -> Result<String, CacheError> {
        let n = self.len_of(1)?;
        let mut b = vec![0u8; n];
        self.read(&mut b)?;
        String::from_utf8(b).map_err(|_| self.corrupt("a string that is not UTF-8"))
    }

    pub fn f32_block(&mut self, n: usize) -> Result<Vec<f32>, CacheError> {
        if (n as u64).saturating_mul(4) > self.end - self.pos {
            return Err(self.corrupt(format!("{n} floats past the end at byte {}", self.pos)));
        }
        let mut out = Vec::with_capacity(n);
        let mut scratch = vec![0u8; CHUNK.min(n) * 4];
        let mut left = n;
        while left > 0 {
            let k = CHUNK.min(left);
            self.read(&mut scratch[..k * 4])?;
            out.extend(scratch[..k * 4].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            left -= k;
        }
        Ok(out)
    }

    pub fn f32s(&mut self) -> Result<Vec<f32>, CacheError> {
        let n = self.len_of(4)?;
        self.f32_block(n)
    }

    pub fn i64s(&mut self) -> Result<Vec<i64>, CacheError> {
        let n = self.len_of(8)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.u64()? as i64);
        }
        Ok(out)
    }

    /// Passes over `n` bytes of a block read later through [`Decoder::shared`] (through the
    /// digest, not into memory); returns where it starts.
    pub fn skip(&mut self, n: u64) -> Result<u64, CacheError> {
        if self.pos.saturating_add(n) > self.end {
            return Err(self.corrupt(format!("a block of {n} bytes past the end at byte {}", self.pos)));
        }
        let at = self.pos;
        let mut left = n;
        while left > 0 {
            let buf = self.input.fill_buf().map_err(|source| CacheError::Io { path: self.path.clone(), source })?;
            if buf.is_empty() {
                return Err(self.corrupt(format!("the file ends inside a block at byte {}", self.pos)));
            }
            let k = (buf.len() as u64).min(left) as usize;
            self.digest.update(&buf[..k]);
            self.input.consume(k);
            self.pos += k as u64;
            left -= k as u64;
        }
        Ok(at)
    }

    /// The file, for a block read after decoding (checked by [`Decoder::finish`]; the handle
    /// stays valid if the entry is evicted or replaced meanwhile).
    pub fn shared(&self) -> (Arc<Mutex<File>>, PathBuf) {
        (Arc::clone(&self.shared), self.path.clone())
    }

    /// Whether every byte of the value was read (a value shorter than its entry is corrupt) and
    /// the entry's digest matches what was read: only then may the value be used.
    pub fn finish(mut self) -> Result<(), CacheError> {
        if self.pos != self.end {
            return Err(self.corrupt(format!("{} bytes left after the value", self.end - self.pos)));
        }
        let mut stored = [0u8; DIGEST as usize];
        self.input.read_exact(&mut stored).map_err(|source| CacheError::Io { path: self.path.clone(), source })?;
        if self.digest.digest128().to_le_bytes() != stored {
            return Err(self.corrupt("its digest does not match its content (truncated or altered)"));
        }
        Ok(())
    }
}
