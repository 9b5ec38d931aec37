//! Rotary position embeddings per layer type (`Gemma4UnifiedTextRotaryEmbedding`).
//!
//! Inverse frequencies follow `compute_default_rope_parameters` and
//! `_compute_proportional_rope_parameters` in float32, as torch evaluates them; cos/sin are
//! `cos(pos · inv_freq)` duplicated over both halves (`cat(freqs, freqs)`), and the rotation is
//! `x·cos + rotate_half(x)·sin` (candle's contiguous `rope_thd` kernel computes exactly
//! `x1·cos − x2·sin`, `x1·sin + x2·cos` per half, with the half-width cos/sin).

use candle_core::{DType, Device, Tensor};

use crate::config::{RopeKind, RopeSpec};
use crate::error::Result;

/// Inverse frequencies and the rotation for one layer type.
#[derive(Debug, Clone)]
pub struct Rope {
    /// `dim / 2` inverse frequencies (zeros for the non-rotating pairs of proportional RoPE).
    inv_freq: Vec<f32>,
}

impl Rope {
    /// Builds the inverse frequencies of `spec`.
    pub fn new(spec: &RopeSpec) -> Self {
        Self { inv_freq: inv_freq(spec) }
    }

    /// The inverse frequencies (length `dim / 2`).
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// Half-width `(cos, sin)`, each `[positions.len(), dim / 2]`, for absolute positions.
    /// Computed in f32 as HF does (it forces float32 here whatever the model dtype), except in
    /// the f64 precision mode, where angles and cos/sin are f64.
    pub fn cos_sin(&self, positions: &[usize], dtype: DType, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let shape = (positions.len(), half);
        if dtype == DType::F64 {
            // Precision mode: angles and cos/sin in f64 from the f32 inverse frequencies.
            let angles: Vec<f64> = positions.iter().flat_map(|&p| self.inv_freq.iter().map(move |&f| f as f64 * p as f64)).collect();
            let cos = angles.iter().map(|a| a.cos()).collect::<Vec<f64>>();
            let sin = angles.iter().map(|a| a.sin()).collect::<Vec<f64>>();
            return Ok((Tensor::from_vec(cos, shape, device)?, Tensor::from_vec(sin, shape, device)?));
        }
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            // HF: `inv_freq[None, :, None].float() @ position_ids[:, None, :].float()`: one f32
            // product per element.
            let p = p as f32;
            for &f in &self.inv_freq {
                let angle = f * p;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Ok((Tensor::from_vec(cos, shape, device)?.to_dtype(dtype)?, Tensor::from_vec(sin, shape, device)?.to_dtype(dtype)?))
    }

    /// Rotates `x` laid out `[1, seq, heads, dim]` (HF applies RoPE before the head transpose,
    /// `unsqueeze_dim=2`) with the half-width `cos`/`sin` from [`Rope::cos_sin`].
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::rotary_emb::rope_thd(&x.contiguous()?, cos, sin)?)
    }
}

/// HF's inverse frequencies in f32.
fn inv_freq(spec: &RopeSpec) -> Vec<f32> {
    let dim = spec.dim;
    let base = spec.theta as f32;
    let dim_f = dim as f32;
    match spec.kind {
        RopeKind::Default => (0..dim).step_by(2).map(|i| 1.0f32 / base.powf(i as f32 / dim_f)).collect(),
        RopeKind::Proportional => {
            // `rope_angles = int(rope_proportion * head_dim // 2)` (Python floor division).
            let rope_angles = ((spec.partial_rotary_factor * dim as f64) / 2.0).floor() as usize;
            let rope_angles = rope_angles.min(dim / 2);
            let factor = spec.factor as f32;
            (0..dim / 2)
                .map(|j| {
                    let f = if j < rope_angles { 1.0f32 / base.powf((2 * j) as f32 / dim_f) } else { 0.0 };
                    f / factor
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: RopeKind, dim: usize, prf: f64) -> RopeSpec {
        RopeSpec { kind, theta: 10_000.0, dim, partial_rotary_factor: prf, factor: 1.0 }
    }

    /// Guards default RoPE: exponents 2i/dim over the whole head.
    #[test]
    fn default_inv_freq() {
        let r = Rope::new(&spec(RopeKind::Default, 4, 1.0));
        assert_eq!(r.inv_freq(), &[1.0, 1.0 / 100.0]);
    }

    /// Guards proportional RoPE: only `partial_rotary_factor` of the pairs rotate, exponents are
    /// still over the full dim (not the rotated part), the rest have frequency 0.
    #[test]
    fn proportional_inv_freq() {
        let r = Rope::new(&spec(RopeKind::Proportional, 8, 0.5));
        // rope_angles = int(0.5*8//2) = 2 → 1/10000^(0/8), 1/10000^(2/8), then 0, 0.
        let f = r.inv_freq();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 0.1).abs() < 1e-7);
        assert_eq!(&f[2..], &[0.0, 0.0]);
    }

    /// Guards the rotation convention (rotate_half, halves not interleaved) and that zero
    /// frequencies leave their dims untouched.
    #[test]
    fn rotation_hand_values() -> Result<()> {
        let r = Rope::new(&spec(RopeKind::Proportional, 4, 0.5));
        // inv_freq = [1, 0]; position 1 → angle [1, 0].
        let (cos, sin) = r.cos_sin(&[1], DType::F32, &Device::Cpu)?;
        let x = Tensor::new(&[1.0f32, 2.0, 3.0, 4.0], &Device::Cpu)?.reshape((1, 1, 1, 4))?;
        let y = Rope::apply(&x, &cos, &sin)?.flatten_all()?.to_vec1::<f32>()?;
        let (c, s) = (1.0f32.cos(), 1.0f32.sin());
        // pair (x0, x2) rotates by 1 rad; pair (x1, x3) by 0.
        let want = [1.0 * c - 3.0 * s, 2.0, 1.0 * s + 3.0 * c, 4.0];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{y:?} vs {want:?}");
        }
        Ok(())
    }
}
