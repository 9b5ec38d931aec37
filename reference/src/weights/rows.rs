//! Tables the model only gathers rows from, kept in the checkpoint's mapping in their stored
//! dtype and decoded row by row on lookup.
//!
//! Why: the per-layer embedding table of gemma-4-E2B is `[262144, 35·256]` = 2.35 G elements —
//! 4.7 GB in the bf16 checkpoint, 9.4 GB upcast to f32 — and a prompt reads a few dozen of its
//! rows. Upcasting it once, as every other weight is, would dominate the reference's memory.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use safetensors::Dtype as StDtype;

use super::decode::{decode, Bf16Le, F16Le, F32Le, Order};
use super::shard::Shard;
use super::Override;
use crate::error::{Error, Result};

/// A `[rows, cols]` table read by row.
#[derive(Clone)]
pub struct RowTable(Inner);

#[derive(Clone)]
enum Inner {
    /// Rows decoded from the mapping on lookup.
    Mapped { name: String, shard: Arc<Shard>, offset: usize, dtype: StDtype, shape: [usize; 2], out: DType, device: Device },
    /// A table in memory: a dry/headers source's stand-in (zeros of the table's shape), or a
    /// quantized export's table dequantized ([`super::Overrides`]).
    Placeholder(Tensor),
    /// A quantized export's matrix, shared with the overrides (not copied), dequantized by row;
    /// gathered rows come out in `out` on `device`.
    Overridden { data: Override, shape: [usize; 2], out: DType, device: Device },
}

impl std::fmt::Debug for RowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Inner::Mapped { name, dtype, shape, .. } => write!(f, "RowTable({name}, {dtype:?}, {shape:?})"),
            Inner::Placeholder(t) => write!(f, "RowTable(placeholder {:?})", t.dims()),
            Inner::Overridden { data, shape, .. } => write!(f, "RowTable({}, {shape:?})", data.source),
        }
    }
}

impl RowTable {
    pub(crate) fn mapped(
        name: String,
        shard: Arc<Shard>,
        offset: usize,
        dtype: StDtype,
        shape: [usize; 2],
        out: DType,
        device: Device,
    ) -> Self {
        RowTable(Inner::Mapped { name, shard, offset, dtype, shape, out, device })
    }

    pub(crate) fn placeholder(t: Tensor) -> Self {
        RowTable(Inner::Placeholder(t))
    }

    pub(crate) fn overridden(data: Override, shape: [usize; 2], out: DType, device: Device) -> Self {
        RowTable(Inner::Overridden { data, shape, out, device })
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        match &self.0 {
            Inner::Mapped { shape, .. } | Inner::Overridden { shape, .. } => shape[1],
            Inner::Placeholder(t) => t.dims().get(1).copied().unwrap_or(0),
        }
    }

    /// Rows `start..start + count` as f32, row-major `[count, cols]`, decoded on the host. Mapped
    /// pages are released once decoded (a clean read-only file mapping: the kernel drops them), so
    /// reading a whole table slice by slice never holds it resident.
    pub fn read_rows(&self, start: usize, count: usize) -> Result<Vec<f32>> {
        let rows = self.rows();
        if start + count > rows {
            return Err(Error::Internal(format!("{self:?}: rows {start}..{} outside 0..{rows}", start + count)));
        }
        let cols = self.cols();
        match &self.0 {
            Inner::Overridden { data, .. } => Ok(data.rows(start, count)?),
            Inner::Placeholder(t) => Ok(t.narrow(0, start, count)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?),
            Inner::Mapped { name, shard, offset, dtype, .. } => {
                let elem = if *dtype == StDtype::F32 { 4 } else { 2 };
                let mmap = shard.mmap.as_ref().ok_or_else(|| Error::Internal(format!("{name}: a row read on a headers-only source")))?;
                let begin = offset + start * cols * elem;
                let len = count * cols * elem;
                let bytes = mmap.get(begin..begin + len).ok_or_else(|| Error::Safetensors {
                    path: shard.path.clone(),
                    source: safetensors::SafeTensorError::InvalidOffset(name.clone()),
                })?;
                let mut data = vec![0f32; count * cols];
                let release = |off: usize, n: usize| {
                    // SAFETY: MADV_DONTNEED on a clean, never-written, read-only file mapping does
                    // not change its contents: a later access re-reads the file.
                    unsafe {
                        let _ = mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, begin + off, n);
                    }
                };
                match dtype {
                    StDtype::F32 => decode::<F32Le>(bytes, &mut data, Order::RowMajor, &release),
                    StDtype::F16 => decode::<F16Le>(bytes, &mut data, Order::RowMajor, &release),
                    _ => decode::<Bf16Le>(bytes, &mut data, Order::RowMajor, &release),
                }
                Ok(data)
            }
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        match &self.0 {
            Inner::Mapped { shape, .. } | Inner::Overridden { shape, .. } => shape[0],
            Inner::Placeholder(t) => t.dims().first().copied().unwrap_or(0),
        }
    }

    /// Rows `ids` (each `< rows()`) as a `[ids.len(), cols]` tensor of the compute dtype.
    pub fn gather(&self, ids: &[u32]) -> Result<Tensor> {
        let (name, shard, offset, dtype, [rows, cols], out, device) = match &self.0 {
            Inner::Placeholder(t) => {
                let idx = Tensor::from_vec(ids.to_vec(), ids.len(), t.device())?;
                return Ok(t.index_select(&idx, 0)?);
            }
            Inner::Overridden { data, shape: [rows, cols], out, device } => {
                let mut values = vec![0f32; ids.len() * cols];
                for (&id, dst) in ids.iter().zip(values.chunks_mut((*cols).max(1))) {
                    if id as usize >= *rows {
                        return Err(Error::Internal(format!("{}: row {id} outside 0..{rows}", data.source)));
                    }
                    data.rows_into(id as usize, 1, dst)?;
                }
                let t = Tensor::from_vec(values, (ids.len(), *cols), &Device::Cpu)?;
                let t = if *out == DType::F32 { t } else { t.to_dtype(*out)? };
                return Ok(if device.is_cpu() { t } else { t.to_device(device)? });
            }
            Inner::Mapped { name, shard, offset, dtype, shape, out, device } => (name, shard, *offset, *dtype, *shape, *out, device),
        };
        let elem = match dtype {
            StDtype::F32 => 4,
            _ => 2,
        };
        let mmap = shard.mmap.as_ref().ok_or_else(|| Error::Internal(format!("{name}: a row lookup on a headers-only source")))?;
        let mut data = vec![0f32; ids.len() * cols];
        for (&id, dst) in ids.iter().zip(data.chunks_mut(cols.max(1))) {
            let id = id as usize;
            if id >= rows {
                return Err(Error::Internal(format!("{name}: row {id} outside 0..{rows}")));
            }
            let start = offset + id * cols * elem;
            let bytes = mmap.get(start..start + cols * elem).ok_or_else(|| Error::Safetensors {
                path: shard.path.clone(),
                source: safetensors::SafeTensorError::InvalidOffset(name.clone()),
            })?;
            match dtype {
                StDtype::F32 => decode::<F32Le>(bytes, dst, Order::RowMajor, &|_, _| {}),
                StDtype::F16 => decode::<F16Le>(bytes, dst, Order::RowMajor, &|_, _| {}),
                _ => decode::<Bf16Le>(bytes, dst, Order::RowMajor, &|_, _| {}),
            }
        }
        // Decoded on the host (the table stays in the mapping); only the gathered rows upload.
        let t = Tensor::from_vec(data, (ids.len(), cols), &Device::Cpu)?;
        let t = if out == DType::F32 { t } else { t.to_dtype(out)? };
        Ok(if device.is_cpu() { t } else { t.to_device(device)? })
    }
}
