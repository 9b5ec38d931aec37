//! Checkpoint access: safetensors by mmap (single file or sharded index), upcast once to f32.
//!
//! Why not candle's `VarBuilder`: its errors do not name the file, and its mmap'd backend keeps
//! the whole mapping resident while the converted copies are alive, doubling peak RSS. Here each
//! tensor is converted straight from the mapping into one owned f32 buffer, and the mapped pages
//! it came from are released (`MADV_DONTNEED`) right away, so peak RSS stays near the f32 weight
//! bytes. Every tensor read is recorded with its shape (the model's weight manifest, used by the
//! harness's L2 contract).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::error::{Error, Result};

/// Module-name fragment → checkpoint-name fragment renames of HF's checkpoint conversion.
pub type Renames = &'static [(&'static str, &'static str)];

/// HF's checkpoint-conversion renames for `gemma4_unified` (`conversion_mapping.py`), as
/// (module-name fragment, checkpoint-name fragment). `save_pretrained` writes the checkpoint
/// form (`model.vision_embedder.patch_dense.weight`, `model.embed_vision.embedding_projection
/// .weight`), `from_pretrained` accepts either form, and so does [`Weights::get`]. The gemma4
/// family has no conversion mapping in 5.14.1: its checkpoint names are the module names.
pub const UNIFIED_RENAMES: Renames = &[
    ("embed_vision.patch_ln1", "vision_embedder.patch_ln1"),
    ("embed_vision.patch_dense", "vision_embedder.patch_dense"),
    ("embed_vision.patch_ln2", "vision_embedder.patch_ln2"),
    ("embed_vision.pos_embedding", "vision_embedder.pos_embedding"),
    ("embed_vision.pos_norm", "vision_embedder.pos_norm"),
    ("embed_vision.multimodal_embedder.embedding_projection", "embed_vision.embedding_projection"),
];

/// The checkpoint-form name of a module parameter name under `renames` (itself when none applies).
pub fn checkpoint_name(module_name: &str, renames: Renames) -> String {
    for (module, ckpt) in renames {
        if module_name.contains(module) {
            return module_name.replacen(module, ckpt, 1);
        }
    }
    module_name.to_string()
}

/// Element order of a decoded tensor.
#[derive(Debug, Clone, Copy)]
enum Order {
    RowMajor,
    /// Stored `[rows, cols]`, produced `[cols, rows]`.
    Transposed {
        rows: usize,
        cols: usize,
    },
}

/// A little-endian stored element type.
trait Elem {
    const SIZE: usize;
    fn get(bytes: &[u8], i: usize) -> f32;
}

struct F32Le;
struct F16Le;
struct Bf16Le;

impl Elem for F32Le {
    const SIZE: usize = 4;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    }
}

impl Elem for F16Le {
    const SIZE: usize = 2;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32()
    }
}

impl Elem for Bf16Le {
    const SIZE: usize = 2;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        half::bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32()
    }
}

/// Elements decoded between two releases of the mapped pages they came from (16 MiB of f32).
const BAND: usize = 1 << 22;

/// Upcasts `bytes` (`out.len()` elements of `E`) into `out` in `order`, in parallel, band by
/// band; after each band `release(byte_offset, byte_len)` is told which source bytes are done.
/// Why bands: without them the pages of the tensor being decoded stay resident next to its f32
/// copy, so peak RSS exceeds the weights by the largest tensor (the PLE table: 268 MiB on the
/// benchmark model, gigabytes on real ones).
fn decode<E: Elem>(bytes: &[u8], out: &mut [f32], order: Order, release: &dyn Fn(usize, usize)) {
    decode_banded::<E>(bytes, out, order, release, BAND)
}

fn decode_banded<E: Elem>(bytes: &[u8], out: &mut [f32], order: Order, release: &dyn Fn(usize, usize), band: usize) {
    debug_assert_eq!(bytes.len(), out.len() * E::SIZE);
    const B: usize = 32;
    match order {
        Order::RowMajor => {
            for (k, dst) in out.chunks_mut(band).enumerate() {
                let start = k * band;
                dst.par_chunks_mut(1 << 16).enumerate().for_each(|(k, part)| {
                    let base = start + (k << 16);
                    for (i, o) in part.iter_mut().enumerate() {
                        *o = E::get(bytes, base + i);
                    }
                });
                release(start * E::SIZE, dst.len() * E::SIZE);
            }
        }
        Order::Transposed { rows, cols } => {
            // Stored rows in bands; within a band each task writes B output rows (= B stored
            // columns), walking the band's stored rows in blocks of B so that reads and writes
            // stay in cache.
            let band_rows = (band / cols.max(1)).max(B) / B * B;
            for r_start in (0..rows).step_by(band_rows) {
                let r_end = (r_start + band_rows).min(rows);
                out.par_chunks_mut(rows * B).enumerate().for_each(|(k, part)| {
                    let c0 = k * B;
                    let c1 = (c0 + B).min(cols);
                    for r0 in (r_start..r_end).step_by(B) {
                        for r in r0..(r0 + B).min(r_end) {
                            for c in c0..c1 {
                                part[(c - c0) * rows + r] = E::get(bytes, r * cols + c);
                            }
                        }
                    }
                });
                release(r_start * cols * E::SIZE, (r_end - r_start) * cols * E::SIZE);
            }
        }
    }
}

/// One mapped safetensors file.
struct Shard {
    path: PathBuf,
    mmap: Mmap,
    /// Offset of the data section (8-byte length + JSON header).
    data_start: usize,
}

/// Where a tensor lives: shard index plus what the header says about it.
#[derive(Debug, Clone)]
struct Entry {
    shard: usize,
    dtype: StDtype,
    shape: Vec<usize>,
    /// Byte range within the data section.
    begin: usize,
    end: usize,
}

/// Read-only view of a checkpoint directory's tensors.
pub struct Weights {
    dir: PathBuf,
    shards: Vec<Shard>,
    entries: HashMap<String, Entry>,
    /// Dtype the tensors are returned in (f32, or f64 for a precision reference).
    dtype: DType,
    /// Tensors read so far: name → shape (a manifest of what the model uses).
    used: Mutex<BTreeMap<String, Vec<usize>>>,
    /// The family's checkpoint-conversion renames.
    renames: Renames,
}

#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl Weights {
    /// Opens `model.safetensors`, or every shard named by `model.safetensors.index.json`;
    /// tensors are returned as f32.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with_dtype(dir, DType::F32)
    }

    /// Like [`Weights::open`], returning tensors in `dtype` (F32 or F64).
    pub fn open_with_dtype(dir: &Path, dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(Error::input(format!("compute dtype {dtype:?}: only f32 and f64 are supported")));
        }
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|source| Error::Io { path: index.clone(), source })?;
            let idx: ShardIndex = serde_json::from_str(&text).map_err(|source| Error::Json { path: index.clone(), source })?;
            let mut names: Vec<&String> = idx.weight_map.values().collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        } else if single.exists() {
            vec![single]
        } else {
            return Err(Error::Io {
                path: single,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "neither model.safetensors nor model.safetensors.index.json exists",
                ),
            });
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut entries = HashMap::new();
        for (i, path) in files.into_iter().enumerate() {
            let file = std::fs::File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
            // SAFETY: the mapping is read-only; the checkpoint must not be modified while the
            // model loads (the same contract as every mmap-based loader, e.g. candle's).
            let mmap = unsafe { Mmap::map(&file) }.map_err(|source| Error::Io { path: path.clone(), source })?;
            let (header_len, metadata) =
                SafeTensors::read_metadata(&mmap).map_err(|source| Error::Safetensors { path: path.clone(), source })?;
            let data_start = 8 + header_len;
            for (name, info) in metadata.tensors() {
                entries.insert(
                    name,
                    Entry { shard: i, dtype: info.dtype, shape: info.shape.clone(), begin: info.data_offsets.0, end: info.data_offsets.1 },
                );
            }
            shards.push(Shard { path, mmap, data_start });
        }
        Ok(Self { dir: dir.to_path_buf(), shards, entries, dtype, used: Mutex::new(BTreeMap::new()), renames: &[] })
    }

    /// Uses the given checkpoint-conversion renames (the model family's) from now on.
    pub fn with_renames(mut self, renames: Renames) -> Self {
        self.renames = renames;
        self
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Shape of `name` as stored, if present.
    pub fn shape_of(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// The dtype tensors are returned in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Every tensor name in the checkpoint.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The tensors read so far with their shapes.
    pub fn manifest(&self) -> BTreeMap<String, Vec<usize>> {
        self.used.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The name under which the module parameter `module_name` is stored: the checkpoint form
    /// (HF `save_pretrained` output) if present, else the module form, else `None`.
    fn stored_name(&self, module_name: &str) -> Option<String> {
        let ckpt = checkpoint_name(module_name, self.renames);
        [ckpt, module_name.to_string()].into_iter().find(|n| self.entries.contains_key(n))
    }

    /// Reads the module parameter `module_name` (under its checkpoint or module name), checks
    /// it has shape `expected`, and returns it as a tensor of the compute dtype.
    pub fn get(&self, module_name: &str, expected: &[usize]) -> Result<Tensor> {
        let data = self.read(module_name, expected)?;
        let t = Tensor::from_vec(data, expected, &Device::Cpu)?;
        Ok(if self.dtype == DType::F32 { t } else { t.to_dtype(self.dtype)? })
    }

    /// Reads a 2-D parameter stored `[rows, cols]` (`expected`) and returns it transposed,
    /// `[cols, rows]` and contiguous. Linear weights are kept this way: the gemm kernel runs
    /// ~20% faster on a row-major right-hand side than on a transposed view. The transpose
    /// happens while decoding from the mapping, so no intermediate copy is made.
    pub fn get_t(&self, module_name: &str, expected: [usize; 2]) -> Result<Tensor> {
        let [rows, cols] = expected;
        let data = self.read_with(module_name, &expected, Order::Transposed { rows, cols })?;
        let t = Tensor::from_vec(data, (cols, rows), &Device::Cpu)?;
        Ok(if self.dtype == DType::F32 { t } else { t.to_dtype(self.dtype)? })
    }

    /// Shape-checks `module_name` and decodes it to f32 values (row-major).
    fn read(&self, module_name: &str, expected: &[usize]) -> Result<Vec<f32>> {
        self.read_with(module_name, expected, Order::RowMajor)
    }

    /// Shape-checks `module_name` and decodes it to f32 values in `order`.
    fn read_with(&self, module_name: &str, expected: &[usize], order: Order) -> Result<Vec<f32>> {
        let Some(stored) = self.stored_name(module_name) else {
            let ckpt = checkpoint_name(module_name, self.renames);
            return Err(Error::MissingTensor {
                name: if ckpt == module_name { ckpt } else { format!("{ckpt}` (module name `{module_name}") },
                location: self.location(),
            });
        };
        let name = stored.as_str();
        let entry = &self.entries[name];
        let shard = &self.shards[entry.shard];
        if entry.shape != expected {
            return Err(Error::TensorShape {
                name: name.to_string(),
                file: shard.path.clone(),
                expected: expected.to_vec(),
                actual: entry.shape.clone(),
            });
        }
        let begin = shard.data_start + entry.begin;
        let end = shard.data_start + entry.end;
        let bytes = shard.mmap.get(begin..end).ok_or_else(|| Error::Safetensors {
            path: shard.path.clone(),
            source: safetensors::SafeTensorError::InvalidOffset(name.to_string()),
        })?;
        let n: usize = expected.iter().product();
        let elem = match entry.dtype {
            StDtype::F32 => 4,
            StDtype::F16 | StDtype::BF16 => 2,
            other => return Err(Error::TensorDtype { name: name.to_string(), file: shard.path.clone(), dtype: format!("{other:?}") }),
        };
        if bytes.len() != n * elem {
            return Err(Error::Safetensors {
                path: shard.path.clone(),
                source: safetensors::SafeTensorError::InvalidOffset(name.to_string()),
            });
        }
        let mut data = vec![0f32; n];
        // Release mapped pages as soon as they are converted: they are clean file-backed pages of
        // a read-only mapping, so the kernel simply drops them (a later read would fault them back
        // in from the file). Best effort: failure only costs memory.
        let release = |off: usize, len: usize| {
            // SAFETY: MADV_DONTNEED on a clean, never-written, read-only file mapping does not
            // change its contents: a later access (none is made) would re-read the file.
            unsafe {
                let _ = shard.mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, begin + off, len);
            }
        };
        match entry.dtype {
            StDtype::F32 => decode::<F32Le>(bytes, &mut data, order, &release),
            StDtype::F16 => decode::<F16Le>(bytes, &mut data, order, &release),
            _ => decode::<Bf16Le>(bytes, &mut data, order, &release),
        }
        if let Ok(mut used) = self.used.lock() {
            used.insert(name.to_string(), expected.to_vec());
        }
        Ok(data)
    }

    /// Reads `name` if present (shape-checked), `None` if absent.
    pub fn get_opt(&self, name: &str, expected: &[usize]) -> Result<Option<Tensor>> {
        if self.stored_name(name).is_some() {
            self.get(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    /// [`Weights::get_t`] if present, `None` if absent.
    pub fn get_opt_t(&self, name: &str, expected: [usize; 2]) -> Result<Option<Tensor>> {
        if self.stored_name(name).is_some() {
            self.get_t(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    fn location(&self) -> String {
        match self.shards.as_slice() {
            [one] => one.path.display().to_string(),
            many => format!("{} shards in {}", many.len(), self.dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Guards the banded decode: every order gives the same values as an unbanded decode, and
    /// the released byte ranges cover the tensor exactly once, in order.
    #[test]
    fn banded_decode_equals_whole_and_releases_everything() {
        let (n, rows, cols) = (3, 70, 45);
        let vals: Vec<f32> = (0..n * rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        for order in [Order::RowMajor, Order::Transposed { rows: n * rows, cols }] {
            let mut whole = vec![0f32; vals.len()];
            decode_banded::<F32Le>(&bytes, &mut whole, order, &|_, _| {}, usize::MAX / 2);
            let released = RefCell::new(Vec::new());
            let mut banded = vec![0f32; vals.len()];
            decode_banded::<F32Le>(&bytes, &mut banded, order, &|off, len| released.borrow_mut().push((off, len)), 100);
            assert_eq!(whole, banded, "{order:?}");
            let mut next = 0;
            for (off, len) in released.into_inner() {
                assert_eq!(off, next, "{order:?}: gap or overlap");
                next += len;
            }
            assert_eq!(next, bytes.len(), "{order:?}: not all bytes released");
        }
        // And the transposes are transposes.
        let mut t = vec![0f32; rows * cols];
        decode_banded::<F32Le>(&bytes[..rows * cols * 4], &mut t, Order::Transposed { rows, cols }, &|_, _| {}, 100);
        assert_eq!(t[5 * rows + 7], vals[7 * cols + 5]);
    }
}
