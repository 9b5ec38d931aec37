//! Checkpoint access: safetensors by mmap (single file or sharded index), upcast once to f32.
//!
//! Why not candle's `VarBuilder`: its errors do not name the file, and its mmap'd backend keeps
//! the whole mapping resident while the converted copies are alive, doubling peak RSS. Here each
//! tensor is converted straight from the mapping into one owned f32 buffer, and the mapped pages
//! it came from are released (`MADV_DONTNEED`) right away, so peak RSS stays near the f32 weight
//! bytes. Tables the model only gathers rows from (the PLE table: 2.35 G elements on E2B) stay in
//! the mapping in their stored dtype ([`RowTable`]). Every tensor read is recorded with its shape
//! (the model's weight manifest).
//!
//! Besides reading a checkpoint, a [`Weights`] can stand in for one that is not there, so that a
//! model can be *built without weights* (the L2 tier, at full size, in no memory): a **dry**
//! source answers every request with a zero-stride placeholder of the asked shape and records it;
//! a **headers** source does the same but checks each request against the checkpoint's
//! safetensors headers (read without touching the data), collecting every missing or mis-shaped
//! tensor as a [`Problem`] instead of stopping at the first.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};
use memmap2::Mmap;
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::error::{Error, Result};

pub mod activations;
mod decode;
mod overrides;
pub mod rounding;
mod rows;
mod shard;
mod shared;
mod shared_read;

pub use activations::{quantize_activations, round_activations, ActFloat, ActivationQuant, MatmulActivations, StaticGrid};
use decode::{decode, Bf16Le, F16Le, F32Le, Order};
pub use overrides::{name_for, stands_for, DequantRows, Override, OverrideData, OverrideReadError, Overrides};
pub use rows::RowTable;
use shard::Shard;
pub use shared::SharedMatrices;

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

/// Where tensors come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The checkpoint's data, by mmap.
    Mapped,
    /// Nothing: placeholders of the asked shapes (the model's manifest from its config alone).
    Dry,
    /// Placeholders, each request checked against the checkpoint's headers.
    Headers,
}

/// A way the checkpoint disagrees with what the model asks for (headers source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The model needs `name` (checkpoint form) and the checkpoint lacks it.
    Missing { name: String },
    /// `name` exists with another shape.
    Shape { name: String, expected: Vec<usize>, actual: Vec<usize> },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing { name } => write!(f, "`{name}` is missing"),
            Problem::Shape { name, expected, actual } => write!(f, "`{name}` has shape {actual:?}, the config implies {expected:?}"),
        }
    }
}

/// Read-only view of a checkpoint directory's tensors.
pub struct Weights {
    dir: PathBuf,
    shards: Vec<Arc<Shard>>,
    entries: HashMap<String, Entry>,
    /// Dtype the tensors are returned in (f32, or f64 for a precision reference).
    dtype: DType,
    /// Tensors read so far: name → shape (a manifest of what the model uses).
    used: Mutex<BTreeMap<String, Vec<usize>>>,
    /// The family's checkpoint-conversion renames.
    renames: Renames,
    source: Source,
    problems: Mutex<Vec<Problem>>,
    /// Tensors read as [`RowTable`]s (left in the mapping).
    row_tables: Mutex<std::collections::BTreeSet<String>>,
    /// Where returned tensors live: each is decoded on the host and uploaded once.
    device: Device,
    /// Tensors that stand in for the checkpoint's (a quantized export's, dequantized).
    overrides: Overrides,
    /// The override keys read so far.
    used_overrides: Mutex<std::collections::BTreeSet<String>>,
    /// Overrides whose activation rounding a matmul asked for ([`Weights::activations`]).
    used_activations: Mutex<std::collections::BTreeSet<String>>,
    /// Matrices shared with other models of the checkpoint ([`SharedMatrices`]).
    shared: Option<SharedMatrices>,
}

#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// The safetensors files of a checkpoint folder: the shards an index names, or `model.safetensors`.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|source| Error::Io { path: index.clone(), source })?;
        let idx: ShardIndex = serde_json::from_str(&text).map_err(|source| Error::Json { path: index.clone(), source })?;
        let mut names: Vec<&String> = idx.weight_map.values().collect();
        names.sort();
        names.dedup();
        Ok(names.into_iter().map(|n| dir.join(n)).collect())
    } else if single.exists() {
        Ok(vec![single])
    } else {
        Err(Error::Io {
            path: single,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "neither model.safetensors nor model.safetensors.index.json exists"),
        })
    }
}

/// One tensor as a safetensors header describes it.
#[derive(serde::Deserialize)]
struct HeaderTensor {
    dtype: StDtype,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// The names of the tensors in one safetensors file, from its header alone ([`read_header`]:
/// the data is neither read nor mapped).
pub fn tensor_names(path: &Path) -> Result<Vec<String>> {
    Ok(read_header(path)?.1.into_iter().map(|(name, _)| name).collect())
}

/// Reads one file's safetensors header without reading (or mapping) its data: the 8-byte length
/// and the JSON after it. Works on sparse files of any size. (`SafeTensors::read_metadata` wants
/// the whole file in one buffer, so the header is validated here: offsets inside the file,
/// byte sizes that fit shape and dtype.)
fn read_header(path: &Path) -> Result<(usize, Vec<(String, HeaderTensor)>)> {
    use std::io::Read;
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let bad = |e: safetensors::SafeTensorError| Error::Safetensors { path: path.to_path_buf(), source: e };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(io)?;
    let n = u64::from_le_bytes(len);
    const MAX_HEADER: u64 = 100 << 20;
    if n > MAX_HEADER {
        return Err(bad(safetensors::SafeTensorError::HeaderTooLarge));
    }
    let mut buf = vec![0u8; n as usize];
    file.read_exact(&mut buf).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len() as usize;
    let json: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&buf).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
    let data_len = file_len.saturating_sub(8 + n as usize);
    let mut tensors = Vec::with_capacity(json.len());
    for (name, v) in json {
        if name == "__metadata__" {
            continue;
        }
        let t: HeaderTensor = serde_json::from_value(v).map_err(|source| Error::Json { path: path.to_path_buf(), source })?;
        let (begin, end) = t.data_offsets;
        let numel: usize = t.shape.iter().product();
        if begin > end || end > data_len || (end - begin) * 8 != numel * t.dtype.bitsize() {
            return Err(bad(safetensors::SafeTensorError::InvalidOffset(name)));
        }
        tensors.push((name, t));
    }
    Ok((n as usize, tensors))
}

impl Weights {
    /// Opens `model.safetensors`, or every shard named by `model.safetensors.index.json`;
    /// tensors are returned as f32.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with_dtype(dir, DType::F32)
    }

    /// Like [`Weights::open`], returning tensors in `dtype`: F32 (the reference), F64 (the
    /// precision arbiter; its matrices stay f32, see [`Weights::matrix_dtype`]) or F16 / BF16
    /// (the reference at a half-precision export's precision: every weight rounded to it, as
    /// the export casts them).
    pub fn open_with_dtype(dir: &Path, dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(Error::input(format!("compute dtype {dtype:?}: only f32, f64, f16 and bf16 are supported")));
        }
        Self::from_files(dir, dtype, Source::Mapped)
    }

    /// A source with no checkpoint: every request gets a zero-stride placeholder and is recorded,
    /// so loading a model through it yields its full manifest at no memory cost.
    pub fn dry() -> Self {
        Self::empty(PathBuf::new(), Source::Dry)
    }

    /// Placeholders checked against the safetensors headers of `dir` (data never read):
    /// [`Weights::problems`] lists what the checkpoint lacks or has mis-shaped.
    pub fn headers(dir: &Path) -> Result<Self> {
        Self::from_files(dir, DType::F32, Source::Headers)
    }

    fn empty(dir: PathBuf, source: Source) -> Self {
        Self {
            dir,
            shards: Vec::new(),
            entries: HashMap::new(),
            dtype: DType::F32,
            used: Mutex::new(BTreeMap::new()),
            renames: &[],
            source,
            problems: Mutex::new(Vec::new()),
            row_tables: Mutex::new(std::collections::BTreeSet::new()),
            device: Device::Cpu,
            overrides: Overrides::default(),
            used_overrides: Mutex::new(std::collections::BTreeSet::new()),
            used_activations: Mutex::new(std::collections::BTreeSet::new()),
            shared: None,
        }
    }

    fn from_files(dir: &Path, dtype: DType, source: Source) -> Result<Self> {
        let files = checkpoint_files(dir)?;
        let mut w = Self::empty(dir.to_path_buf(), source);
        w.dtype = dtype;
        for (i, path) in files.into_iter().enumerate() {
            let (mmap, header_len) = if source == Source::Mapped {
                let file = std::fs::File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
                // SAFETY: the mapping is read-only; the checkpoint must not be modified while the
                // model uses it (the same contract as every mmap-based loader, e.g. candle's).
                let mmap = unsafe { Mmap::map(&file) }.map_err(|source| Error::Io { path: path.clone(), source })?;
                let (header_len, metadata) =
                    SafeTensors::read_metadata(&mmap).map_err(|source| Error::Safetensors { path: path.clone(), source })?;
                for (name, info) in metadata.tensors() {
                    w.entries.insert(
                        name,
                        Entry {
                            shard: i,
                            dtype: info.dtype,
                            shape: info.shape.clone(),
                            begin: info.data_offsets.0,
                            end: info.data_offsets.1,
                        },
                    );
                }
                (Some(mmap), header_len)
            } else {
                let (header_len, tensors) = read_header(&path)?;
                for (name, t) in tensors {
                    let (begin, end) = t.data_offsets;
                    w.entries.insert(name, Entry { shard: i, dtype: t.dtype, shape: t.shape, begin, end });
                }
                (None, header_len)
            };
            w.shards.push(Arc::new(Shard { path, mmap, data_start: 8 + header_len }));
        }
        Ok(w)
    }

    /// Uses the given checkpoint-conversion renames (the model family's) from now on.
    pub fn with_renames(mut self, renames: Renames) -> Self {
        self.renames = renames;
        self
    }

    /// Returns every tensor on `device` from now on (decoded on the host, uploaded once; row
    /// tables stay in the mapping and upload the rows they gather).
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Shares f32 matrices with other models of the same checkpoint through `shared`.
    pub fn with_shared_matrices(mut self, shared: SharedMatrices) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Reads `overrides` in place of the checkpoint's tensors they match (see [`Overrides`]).
    pub fn with_overrides(mut self, overrides: Overrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// The override `module_name` reads, recorded as used.
    fn override_for(&self, module_name: &str) -> Option<(&str, &Override)> {
        let (key, o) = self.overrides.lookup(module_name)?;
        if let Ok(mut used) = self.used_overrides.lock() {
            used.insert(key.to_string());
        }
        Some((key, o))
    }

    /// Overrides no tensor the model read matched (each a mapping error of the caller's).
    pub fn unused_overrides(&self) -> Vec<String> {
        let used = self.used_overrides.lock().map(|u| u.clone()).unwrap_or_default();
        self.overrides.keys().filter(|k| !used.contains(*k)).map(|k| format!("{k} (from {})", self.overrides_source(k))).collect()
    }

    fn overrides_source(&self, key: &str) -> String {
        self.overrides.lookup(key).map(|(_, o)| o.source.clone()).unwrap_or_default()
    }

    /// How the export rounds `module_name`'s matmul's activations, recorded as asked for.
    pub fn activations(&self, module_name: &str) -> MatmulActivations {
        let Some((key, o)) = self.overrides.lookup(module_name) else { return MatmulActivations::default() };
        if let Ok(mut used) = self.used_activations.lock() {
            used.insert(key.to_string());
        }
        o.activations.clone()
    }

    /// The quantized build's parameter key of `module_name` when the export rounds its matmul's
    /// activations: what rounding hints are looked up by ([`rounding`]).
    pub fn activation_key(&self, module_name: &str) -> Option<String> {
        self.overrides.lookup(module_name).filter(|(_, o)| o.activations.any()).map(|(k, _)| k.to_string())
    }

    /// Overrides whose activations the export rounds but no matmul of the model asked how (a
    /// matmul the reference computes otherwise than as a linear layer, e.g. routed experts): the
    /// reference would compute them in float, so the build cannot be judged on its arithmetic.
    pub fn unmodelled_activations(&self) -> Vec<String> {
        let used = self.used_activations.lock().map(|u| u.clone()).unwrap_or_default();
        self.overrides
            .keys()
            .filter(|k| !used.contains(*k) && self.overrides.get(k).is_some_and(|o| o.activations.any()))
            .map(|k| format!("{k} (from {})", self.overrides_source(k)))
            .collect()
    }

    /// The device returned tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether `name` can be read: the checkpoint holds it or a quantized build overrides it.
    pub fn provides(&self, name: &str) -> bool {
        self.stored_name(name).is_some() || self.overrides.lookup(name).is_some()
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Shape of `name` as stored, if present.
    pub fn shape_of(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Stored dtype of `name` (safetensors' name, e.g. `BF16`), if present.
    pub fn stored_dtype(&self, name: &str) -> Option<String> {
        self.entries.get(name).map(|e| format!("{:?}", e.dtype))
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

    /// Tensors read as row tables (kept in the checkpoint's mapping, not upcast).
    pub fn row_tables(&self) -> std::collections::BTreeSet<String> {
        self.row_tables.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Headers source: every missing or mis-shaped tensor requested so far.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// The name under which the module parameter `module_name` is stored: the checkpoint form
    /// (HF `save_pretrained` output) if present, else the module form, else `None`.
    fn stored_name(&self, module_name: &str) -> Option<String> {
        let ckpt = checkpoint_name(module_name, self.renames);
        [ckpt, module_name.to_string()].into_iter().find(|n| self.entries.contains_key(n))
    }

    fn record(&self, name: &str, shape: &[usize]) {
        if let Ok(mut used) = self.used.lock() {
            used.insert(name.to_string(), shape.to_vec());
        }
    }

    /// For the dry and headers sources: records the request (checking it against the headers)
    /// and returns a zero-stride placeholder of `shape`; `None` for a mapped source.
    fn placeholder(&self, module_name: &str, expected: &[usize], shape: &[usize]) -> Result<Option<Tensor>> {
        if self.source == Source::Mapped {
            return Ok(None);
        }
        let name = match self.stored_name(module_name) {
            Some(stored) => {
                let actual = &self.entries[&stored].shape;
                if actual != expected {
                    self.push_problem(Problem::Shape { name: stored.clone(), expected: expected.to_vec(), actual: actual.clone() });
                }
                stored
            }
            None => {
                let ckpt = checkpoint_name(module_name, self.renames);
                if self.source == Source::Headers {
                    self.push_problem(Problem::Missing { name: ckpt.clone() });
                }
                ckpt
            }
        };
        self.record(&name, expected);
        if shape.is_empty() {
            return Ok(Some(Tensor::zeros((), self.dtype, &self.device)?));
        }
        Ok(Some(Tensor::zeros(1, self.dtype, &self.device)?.reshape(vec![1; shape.len()])?.broadcast_as(shape)?))
    }

    fn push_problem(&self, p: Problem) {
        if let Ok(mut problems) = self.problems.lock() {
            problems.push(p);
        }
    }

    /// Reads the module parameter `module_name` (under its checkpoint or module name), checks
    /// it has shape `expected`, and returns it as a tensor of the compute dtype.
    pub fn get(&self, module_name: &str, expected: &[usize]) -> Result<Tensor> {
        if let Some(t) = self.placeholder(module_name, expected, expected)? {
            return Ok(t);
        }
        let data = self.read_with(module_name, expected, Order::RowMajor)?;
        let t = Tensor::from_vec(data, expected, &Device::Cpu)?;
        self.upload(if self.dtype == DType::F32 { t } else { t.to_dtype(self.dtype)? })
    }

    /// Reads a 2-D parameter stored `[rows, cols]` (`expected`) and returns it transposed,
    /// `[cols, rows]` and contiguous. Linear weights are kept this way: the gemm kernel runs
    /// ~20% faster on a row-major right-hand side than on a transposed view. The transpose
    /// happens while decoding from the mapping, so no intermediate copy is made.
    pub fn get_t(&self, module_name: &str, expected: [usize; 2]) -> Result<Tensor> {
        let [rows, cols] = expected;
        if let Some(t) = self.placeholder(module_name, &expected, &[cols, rows])? {
            return Ok(t);
        }
        let load = || {
            let data = self.read_with(module_name, &expected, Order::Transposed { rows, cols })?;
            let t = Tensor::from_vec(data, (cols, rows), &Device::Cpu)?;
            let dtype = self.matrix_dtype();
            self.upload(if dtype == DType::F32 { t } else { t.to_dtype(dtype)? })
        };
        self.through_shared(module_name, &expected, load)
    }

    /// The dtype [`Weights::get_t`] keeps matrices in: the compute dtype, except in the f64
    /// precision mode, where they stay f32 (every checkpoint value is an f32, so nothing is
    /// lost) and are upcast one matmul at a time ([`crate::nn::linear::Linear`]): an f64 copy of
    /// every weight would double the reference's memory at real width.
    pub fn matrix_dtype(&self) -> DType {
        if self.dtype == DType::F64 {
            DType::F32
        } else {
            self.dtype
        }
    }

    /// `t` (decoded on the host) on the weights' device; the CPU keeps it as is.
    fn upload(&self, t: Tensor) -> Result<Tensor> {
        Ok(if self.device.is_cpu() { t } else { t.to_device(&self.device)? })
    }

    /// A `[rows, cols]` table the model only gathers rows from, left in the mapping in its
    /// stored dtype (or a quantized build's payload): rows are decoded when looked up (see
    /// [`RowTable`]), in the compute dtype on the weights' device.
    pub fn get_rows(&self, module_name: &str, expected: [usize; 2]) -> Result<RowTable> {
        if let Ok(mut t) = self.row_tables.lock() {
            t.insert(self.stored_name(module_name).unwrap_or_else(|| checkpoint_name(module_name, self.renames)));
        }
        self.rows_in(module_name, expected, self.dtype, self.device.clone())
    }

    /// Whether `a` and `b` are both a quantized build's matrices with the same values (read by
    /// bands, never whole): ONNX Runtime's quantizer writes a tied embedding and lm_head as a
    /// GatherBlockQuantized table and a MatMulNBits matrix that dequantize identically, and the
    /// model then keeps one copy for both.
    pub fn overrides_equal(&self, a: &str, b: &str) -> bool {
        let (Some((_, x)), Some((_, y))) = (self.override_for(a), self.override_for(b)) else { return false };
        if x.shape != y.shape || x.shape.len() != 2 {
            return false;
        }
        const BAND: usize = 1024;
        let rows = x.shape[0];
        (0..rows).step_by(BAND).all(|start| {
            let n = BAND.min(rows - start);
            matches!((x.rows(start, n), y.rows(start, n)), (Ok(a), Ok(b)) if a == b)
        })
    }

    /// The rows of the 2-D tensor `module_name`, to be read slice by slice (an lm_head's after the
    /// model is gone, [`crate::text::LogitsHead`]; a weight compared with a quantized build's):
    /// the mapping (pages released as read) or a quantized build's payload, shared, never copied;
    /// rows come out in f32 on the host.
    pub fn matrix_rows(&self, module_name: &str, expected: [usize; 2]) -> Result<RowTable> {
        self.rows_in(module_name, expected, DType::F32, Device::Cpu)
    }

    /// [`Weights::get_rows`] and [`Weights::matrix_rows`]: a placeholder (dry and headers
    /// sources), a quantized build's payload, or the mapping; gathered rows in `out` on `device`.
    fn rows_in(&self, module_name: &str, expected: [usize; 2], out: DType, device: Device) -> Result<RowTable> {
        if let Some(t) = self.placeholder(module_name, &expected, &expected)? {
            return Ok(RowTable::placeholder(t));
        }
        if let Some((key, o)) = self.checked_override(module_name, &expected)? {
            self.record(key, &expected);
            return Ok(RowTable::overridden(o.clone(), expected, out, device));
        }
        let (name, entry, shard) = self.entry(module_name, &expected)?;
        let elem = element_size(&name, entry.dtype, &shard.path)?;
        if entry.end - entry.begin != expected[0] * expected[1] * elem {
            return Err(Error::Safetensors { path: shard.path.clone(), source: safetensors::SafeTensorError::InvalidOffset(name) });
        }
        self.record(&name, &expected);
        Ok(RowTable::mapped(name, Arc::clone(shard), shard.data_start + entry.begin, entry.dtype, expected, out, device))
    }

    /// The quantized build's override `module_name` reads, its shape checked against `expected`.
    fn checked_override(&self, module_name: &str, expected: &[usize]) -> Result<Option<(&str, &Override)>> {
        let Some((key, o)) = self.override_for(module_name) else { return Ok(None) };
        if o.shape != expected {
            return Err(Error::TensorShape {
                name: format!("{key} (dequantized from the export's `{}`)", o.source),
                file: self.dir.clone(),
                expected: expected.to_vec(),
                actual: o.shape.clone(),
            });
        }
        Ok(Some((key, o)))
    }

    /// The stored name, header entry and shard of `module_name`, shape-checked.
    fn entry(&self, module_name: &str, expected: &[usize]) -> Result<(String, &Entry, &Arc<Shard>)> {
        let Some(stored) = self.stored_name(module_name) else {
            let ckpt = checkpoint_name(module_name, self.renames);
            return Err(Error::MissingTensor {
                name: if ckpt == module_name { ckpt } else { format!("{ckpt}` (module name `{module_name}") },
                location: self.location(),
            });
        };
        let entry = &self.entries[&stored];
        let shard = &self.shards[entry.shard];
        if entry.shape != expected {
            return Err(Error::TensorShape {
                name: stored,
                file: shard.path.clone(),
                expected: expected.to_vec(),
                actual: entry.shape.clone(),
            });
        }
        Ok((stored, entry, shard))
    }

    /// Shape-checks `module_name` and decodes it to f32 values in `order`.
    fn read_with(&self, module_name: &str, expected: &[usize], order: Order) -> Result<Vec<f32>> {
        if let Some((key, o)) = self.checked_override(module_name, expected)? {
            self.record(key, expected);
            return Ok(o.decode(matches!(order, Order::Transposed { .. }))?);
        }
        let (name, entry, shard) = self.entry(module_name, expected)?;
        let mmap = shard.mmap.as_ref().ok_or_else(|| Error::Internal("a mapped read from a headers-only source".into()))?;
        let begin = shard.data_start + entry.begin;
        let end = shard.data_start + entry.end;
        let bytes = mmap.get(begin..end).ok_or_else(|| Error::Safetensors {
            path: shard.path.clone(),
            source: safetensors::SafeTensorError::InvalidOffset(name.clone()),
        })?;
        let n: usize = expected.iter().product();
        let elem = element_size(&name, entry.dtype, &shard.path)?;
        if bytes.len() != n * elem {
            return Err(Error::Safetensors { path: shard.path.clone(), source: safetensors::SafeTensorError::InvalidOffset(name) });
        }
        let mut data = vec![0f32; n];
        // Release mapped pages as soon as they are converted: they are clean file-backed pages of
        // a read-only mapping, so the kernel simply drops them (a later read would fault them back
        // in from the file). Best effort: failure only costs memory.
        let release = |off: usize, len: usize| {
            // SAFETY: MADV_DONTNEED on a clean, never-written, read-only file mapping does not
            // change its contents: a later access (none is made) would re-read the file.
            unsafe {
                let _ = mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, begin + off, len);
            }
        };
        match entry.dtype {
            StDtype::F32 => decode::<F32Le>(bytes, &mut data, order, &release),
            StDtype::F16 => decode::<F16Le>(bytes, &mut data, order, &release),
            _ => decode::<Bf16Le>(bytes, &mut data, order, &release),
        }
        self.record(&name, expected);
        Ok(data)
    }

    /// Reads `name` if present (shape-checked), `None` if absent. A dry source answers `None`
    /// (the checkpoint HF writes does not have it), a headers source answers what the headers say.
    pub fn get_opt(&self, name: &str, expected: &[usize]) -> Result<Option<Tensor>> {
        if self.stored_name(name).is_some() || self.overrides.lookup(name).is_some() {
            self.get(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    /// [`Weights::get_t`] if present, `None` if absent (as [`Weights::get_opt`]).
    pub fn get_opt_t(&self, name: &str, expected: [usize; 2]) -> Result<Option<Tensor>> {
        if self.stored_name(name).is_some() || self.overrides.lookup(name).is_some() {
            self.get_t(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A persistent buffer HF always registers (and so `save_pretrained` always writes) but
    /// initialises itself when a checkpoint lacks it (e.g. the clip bounds of a clippable
    /// linear, ±inf): optional when reading a checkpoint, present in a dry manifest, and a
    /// [`Problem::Missing`] when a headers source lacks it.
    pub fn get_buffer(&self, name: &str, expected: &[usize]) -> Result<Option<Tensor>> {
        match self.source {
            Source::Mapped => self.get_opt(name, expected),
            Source::Dry | Source::Headers => self.get(name, expected).map(Some),
        }
    }

    fn location(&self) -> String {
        match self.shards.as_slice() {
            [one] => one.path.display().to_string(),
            many => format!("{} shards in {}", many.len(), self.dir.display()),
        }
    }
}

/// Bytes per element of a stored dtype the reference can upcast.
fn element_size(name: &str, dtype: StDtype, file: &Path) -> Result<usize> {
    match dtype {
        StDtype::F32 => Ok(4),
        StDtype::F16 | StDtype::BF16 => Ok(2),
        other => Err(Error::TensorDtype { name: name.to_string(), file: file.into(), dtype: format!("{other:?}") }),
    }
}
