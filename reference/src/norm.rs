//! The two normalisations of Gemma4Unified, written as HF computes them (f32 throughout).

use candle_core::{Tensor, D};

use crate::error::Result;
use crate::weights::Weights;

/// `Gemma4UnifiedRMSNorm`: `x · (mean(x²) + eps)^(-1/2) [· weight]`.
///
/// The weight multiplies as is (not `1 + weight` as in Gemma 1–3), and `with_scale = false`
/// (the attention's `v_norm`, the multimodal embedder's pre-projection norm) has no weight at
/// all. PyTorch evaluates `pow(·, -0.5)` as `1 / sqrt(·)`, which is what is computed here.
/// Computed in the input's dtype (f32 normally; HF would compute an f64 model's norms in f32
/// via `.float()`, the reference's f64 precision mode keeps f64).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Option<Tensor>,
    eps: f64,
}

impl RmsNorm {
    /// A norm with a learned `weight` of length `dim`, read from `{prefix}.weight`.
    pub fn load(w: &Weights, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: Some(w.get(&format!("{prefix}.weight"), &[dim])?),
            eps,
        })
    }

    /// A scale-free norm (`with_scale=False`).
    pub fn scale_free(eps: f64) -> Self {
        Self { weight: None, eps }
    }

    /// Normalises over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
        let inv = (mean_sq + self.eps)?.sqrt()?.recip()?;
        let normed = x.broadcast_mul(&inv)?;
        Ok(match &self.weight {
            Some(w) => normed.broadcast_mul(w)?,
            None => normed,
        })
    }
}

/// `nn.LayerNorm` with affine weight and bias; the vision embedder uses PyTorch's default
/// `eps = 1e-5` (it never passes one).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

/// `torch.nn.LayerNorm`'s default eps.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;

impl LayerNorm {
    /// Reads `{prefix}.weight` and `{prefix}.bias`, both of length `dim`.
    pub fn load(w: &Weights, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: w.get(&format!("{prefix}.weight"), &[dim])?,
            bias: w.get(&format!("{prefix}.bias"), &[dim])?,
            eps,
        })
    }

    /// `(x − mean) / sqrt(var_biased + eps) · weight + bias` over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centered = x.broadcast_sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
        let denom = (var + self.eps)?.sqrt()?;
        Ok(centered
            .broadcast_div(&denom)?
            .broadcast_mul(&self.weight)?
            .broadcast_add(&self.bias)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Guards the formula: no `1 + weight`, eps inside the root, scale-free variant unscaled.
    #[test]
    fn rms_norm_hand_values() -> Result<()> {
        let x = Tensor::new(&[[3.0f32, 4.0]], &Device::Cpu)?;
        // mean(x²) = 12.5 → x / sqrt(12.5)
        let free = RmsNorm::scale_free(0.0).forward(&x)?.to_vec2::<f32>()?;
        let r = 12.5f32.sqrt();
        assert_eq!(free, vec![vec![3.0 / r, 4.0 / r]]);
        let scaled = RmsNorm {
            weight: Some(Tensor::new(&[2.0f32, 0.5], &Device::Cpu)?),
            eps: 0.0,
        };
        let got = scaled.forward(&x)?.to_vec2::<f32>()?;
        assert!((got[0][0] - 6.0 / r).abs() < 1e-6 && (got[0][1] - 2.0 / r).abs() < 1e-6);
        Ok(())
    }

    /// Guards LayerNorm's biased variance and eps placement.
    #[test]
    fn layer_norm_hand_values() -> Result<()> {
        let x = Tensor::new(&[[1.0f32, 3.0]], &Device::Cpu)?;
        let ln = LayerNorm {
            weight: Tensor::new(&[1.0f32, 1.0], &Device::Cpu)?,
            bias: Tensor::new(&[0.5f32, 0.5], &Device::Cpu)?,
            eps: 0.0,
        };
        // mean 2, biased var 1 → [-1, 1] + 0.5
        assert_eq!(ln.forward(&x)?.to_vec2::<f32>()?, vec![vec![-0.5, 1.5]]);
        Ok(())
    }
}
