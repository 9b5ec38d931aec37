//! Preallocated per-layer K/V cache for incremental decoding.
//!
//! Each non-shared layer owns `[kv_heads, capacity, head_dim]` key and value buffers; new states
//! are written in place (`slice_set`) and attention reads a narrowed view of the filled prefix,
//! so a decode step copies only the new position (the buffers grow by doubling if a caller
//! exceeds the capacity it asked for). KV-shared layers own nothing: they read their source
//! layer's buffers (HF's `shared_kv_states`).
//!
//! Sliding layers keep the full history too. HF's `DynamicSlidingWindowLayer` keeps only the
//! last `sliding_window − 1` states, but the sliding mask hides everything older from text
//! queries, and decode queries are always text, so the function is the same; keeping it all
//! also matches what the ONNX exports do (full-length `present` for every layer).

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};

/// K/V buffers of one layer.
#[derive(Debug)]
struct LayerKv {
    k: Tensor,
    v: Tensor,
}

/// The cache of one sequence.
#[derive(Debug)]
pub struct KvCache {
    /// `None` for KV-shared layers.
    layers: Vec<Option<LayerKv>>,
    /// Number of positions written (same for every owning layer after a full forward).
    len: usize,
    capacity: usize,
    /// Positions written by the forward in progress (committed by [`KvCache::advance`]).
    pending: usize,
}

/// Per-layer cache geometry: `Some((kv_heads, head_dim))` for layers that own K/V.
pub type CacheLayout = Vec<Option<(usize, usize)>>;

impl KvCache {
    /// An empty cache able to hold `capacity` positions without reallocating.
    pub fn new(layout: &CacheLayout, capacity: usize, dtype: DType, device: &Device) -> Result<Self> {
        let capacity = capacity.max(1);
        let layers = layout
            .iter()
            .map(|g| {
                g.map(|(heads, dim)| -> Result<LayerKv> {
                    Ok(LayerKv {
                        k: Tensor::zeros((heads, capacity, dim), dtype, device)?,
                        v: Tensor::zeros((heads, capacity, dim), dtype, device)?,
                    })
                })
                .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers, len: 0, capacity, pending: 0 })
    }

    /// Positions already committed (the next token's absolute position).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `k`, `v` (`[kv_heads, n, head_dim]`, positions `len..len+n`) for `layer` and
    /// returns views of that layer's keys and values for positions `0..len+n`.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let n = k.dim(1)?;
        let end = self.len + n;
        if end > self.capacity {
            self.grow(end.max(self.capacity * 2))?;
        }
        let len = self.len;
        let entry = self.layer_mut(layer)?;
        entry.k.slice_set(&k.contiguous()?, 1, len)?;
        entry.v.slice_set(&v.contiguous()?, 1, len)?;
        self.pending = n;
        self.view(layer, end)
    }

    /// Views of `layer`'s keys and values for positions `0..end` (for KV-shared readers).
    pub fn view(&self, layer: usize, end: usize) -> Result<(Tensor, Tensor)> {
        let entry =
            self.layers.get(layer).and_then(Option::as_ref).ok_or_else(|| Error::Internal(format!("layer {layer} owns no KV cache")))?;
        Ok((entry.k.narrow(1, 0, end)?, entry.v.narrow(1, 0, end)?))
    }

    /// Commits the positions written by the forward that just finished.
    pub fn advance(&mut self) {
        self.len += self.pending;
        self.pending = 0;
    }

    fn layer_mut(&mut self, layer: usize) -> Result<&mut LayerKv> {
        self.layers.get_mut(layer).and_then(Option::as_mut).ok_or_else(|| Error::Internal(format!("layer {layer} owns no KV cache")))
    }

    /// Reallocates every buffer to `capacity` positions, keeping the committed prefix.
    fn grow(&mut self, capacity: usize) -> Result<()> {
        let len = self.len;
        for entry in self.layers.iter_mut().flatten() {
            let (heads, _, dim) = entry.k.dims3()?;
            let k = Tensor::zeros((heads, capacity, dim), entry.k.dtype(), entry.k.device())?;
            let v = Tensor::zeros((heads, capacity, dim), entry.v.dtype(), entry.v.device())?;
            if len > 0 {
                k.slice_set(&entry.k.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
                v.slice_set(&entry.v.narrow(1, 0, len)?.contiguous()?, 1, 0)?;
            }
            *entry = LayerKv { k, v };
        }
        self.capacity = capacity;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards in-place appends, views over the filled prefix, growth past capacity, and that
    /// shared layers (no buffers) are refused.
    #[test]
    fn append_view_grow() -> Result<()> {
        let dev = Device::Cpu;
        let mut c = KvCache::new(&vec![Some((1, 2)), None], 2, DType::F32, &dev)?;
        let k0 = Tensor::new(&[[[1.0f32, 2.0]]], &dev)?;
        let (k, _) = c.append(0, &k0, &k0)?;
        assert_eq!(k.to_vec3::<f32>()?, vec![vec![vec![1.0, 2.0]]]);
        c.advance();
        let k1 = Tensor::new(&[[[3.0f32, 4.0], [5.0, 6.0]]], &dev)?;
        let (k, v) = c.append(0, &k1, &k1)?;
        c.advance();
        assert_eq!(c.len(), 3);
        let want = vec![vec![vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0, 6.0]]];
        assert_eq!(k.to_vec3::<f32>()?, want);
        assert_eq!(v.to_vec3::<f32>()?, want);
        assert!(c.append(1, &k0, &k0).is_err());
        Ok(())
    }
}
