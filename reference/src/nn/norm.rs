//! The two normalisations of Gemma4Unified, written as HF computes them (f32 throughout).

use candle_core::{CpuStorage, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;

use crate::nn::reduce::{torch_moments, torch_sum};

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
    /// The weight as a host vector for the fused f32 kernel.
    weight_f32: Option<Vec<f32>>,
    eps: f64,
}

impl RmsNorm {
    /// A norm with a learned `weight` of length `dim`, read from `{prefix}.weight`.
    pub fn load(w: &Weights, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        let weight = w.get(&format!("{prefix}.weight"), &[dim])?;
        Ok(Self { weight_f32: Some(weight.to_dtype(DType::F32)?.to_vec1()?), weight: Some(weight), eps })
    }

    /// A norm with the given `weight` (length = normalised dim).
    pub fn from_weight(weight: Tensor, eps: f64) -> Result<Self> {
        Ok(Self { weight_f32: Some(weight.to_dtype(DType::F32)?.to_vec1()?), weight: Some(weight), eps })
    }

    /// A scale-free norm (`with_scale=False`).
    pub fn scale_free(eps: f64) -> Self {
        Self { weight: None, weight_f32: None, eps }
    }

    /// Normalises over the last dimension.
    ///
    /// f32 on the CPU runs a fused row kernel that sums the squares in PyTorch's order
    /// ([`crate::nn::reduce::torch_sum`]); other dtypes (the f64 precision mode) and devices use
    /// candle ops.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Half precision: HF normalises `x.float()` with `weight.float()` and casts back.
        if let Some(half) = crate::nn::ops::half_dtype(x) {
            let w = self.weight.as_ref().map(|w| w.to_dtype(DType::F32)).transpose()?;
            let f32_norm = RmsNorm { weight: w, weight_f32: self.weight_f32.clone(), eps: self.eps };
            return Ok(f32_norm.forward(&x.to_dtype(DType::F32)?)?.to_dtype(half)?);
        }
        // The fused kernel is CPU-only; other devices take the composite path below (same
        // formula, candle's reduction order).
        if x.dtype() == DType::F32 && x.device().is_cpu() {
            return Ok(x.contiguous()?.apply_op1_no_bwd(&FusedRmsNorm { weight: self.weight_f32.as_deref(), eps: self.eps as f32 })?);
        }
        let mean_sq = x.sqr()?.mean_keepdim(D::Minus1)?;
        let inv = (mean_sq + self.eps)?.sqrt()?.recip()?;
        let normed = x.broadcast_mul(&inv)?;
        Ok(match &self.weight {
            Some(w) => normed.broadcast_mul(&w.to_dtype(x.dtype())?)?,
            None => normed,
        })
    }
}

/// One pass per row: `x · 1/sqrt(Σx²/n + eps) [· w]`, rows in parallel.
struct FusedRmsNorm<'a> {
    weight: Option<&'a [f32]>,
    eps: f32,
}

impl candle_core::CustomOp1 for FusedRmsNorm<'_> {
    fn name(&self) -> &'static str {
        "rms-norm-torch-order"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(data), Some((start, end))) = (storage, layout.contiguous_offsets()) else {
            candle_core::bail!("fused rms norm expects a contiguous f32 tensor");
        };
        let dim = layout.dims().last().copied().unwrap_or(1).max(1);
        if self.weight.is_some_and(|w| w.len() != dim) {
            candle_core::bail!("rms norm weight length differs from the last dim {dim}");
        }
        let src = &data[start..end];
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(dim).zip(src.par_chunks(dim)).for_each_init(
            || Vec::with_capacity(dim),
            |squares, (o, x)| {
                squares.clear();
                squares.extend(x.iter().map(|v| v * v));
                let mean = torch_sum(squares) / dim as f32;
                let inv = 1.0 / (mean + self.eps).sqrt();
                match self.weight {
                    Some(w) => {
                        for ((o, &x), &w) in o.iter_mut().zip(x).zip(w) {
                            *o = x * inv * w;
                        }
                    }
                    None => {
                        for (o, &x) in o.iter_mut().zip(x) {
                            *o = x * inv;
                        }
                    }
                }
            },
        );
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// One pass per row: torch-order moments, `rstd = 1/sqrt(var + eps)`, then
/// `fma((x − mean)·rstd, w, b)`; rows in parallel.
struct FusedLayerNorm<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    eps: f32,
}

impl candle_core::CustomOp1 for FusedLayerNorm<'_> {
    fn name(&self) -> &'static str {
        "layer-norm-torch-order"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(data), Some((start, end))) = (storage, layout.contiguous_offsets()) else {
            candle_core::bail!("fused layer norm expects a contiguous f32 tensor");
        };
        let dim = layout.dims().last().copied().unwrap_or(1).max(1);
        if self.weight.len() != dim || self.bias.len() != dim {
            candle_core::bail!("layer norm parameters differ from the last dim {dim}");
        }
        let src = &data[start..end];
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(dim).zip(src.par_chunks(dim)).for_each(|(o, x)| {
            let (mean, var) = torch_moments(x);
            let rstd = 1.0 / (var + self.eps).sqrt();
            for (((o, &x), &w), &b) in o.iter_mut().zip(x).zip(self.weight).zip(self.bias) {
                *o = ((x - mean) * rstd).mul_add(w, b);
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// `nn.LayerNorm` with affine weight and bias; the vision embedder uses PyTorch's default
/// `eps = 1e-5` (it never passes one).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    weight_f32: Vec<f32>,
    bias_f32: Vec<f32>,
    eps: f64,
}

/// `torch.nn.LayerNorm`'s default eps.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;

impl LayerNorm {
    /// Reads `{prefix}.weight` and `{prefix}.bias`, both of length `dim`.
    pub fn load(w: &Weights, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        let weight = w.get(&format!("{prefix}.weight"), &[dim])?;
        let bias = w.get(&format!("{prefix}.bias"), &[dim])?;
        Ok(Self { weight_f32: weight.to_dtype(DType::F32)?.to_vec1()?, bias_f32: bias.to_dtype(DType::F32)?.to_vec1()?, weight, bias, eps })
    }

    /// A LayerNorm from its parameters.
    pub fn from_parts(weight: Tensor, bias: Tensor, eps: f64) -> Result<Self> {
        Ok(Self { weight_f32: weight.to_dtype(DType::F32)?.to_vec1()?, bias_f32: bias.to_dtype(DType::F32)?.to_vec1()?, weight, bias, eps })
    }

    /// `(x − mean) / sqrt(var_biased + eps) · weight + bias` over the last dimension.
    ///
    /// f32 runs a fused row kernel computing the moments in torch's order
    /// ([`crate::nn::reduce::torch_moments`]) and `fma((x − mean)·rstd, weight, bias)` as torch's
    /// kernel does; other dtypes and devices use candle ops.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Half precision: torch's layer_norm accumulates in f32; the output is rounded once.
        if let Some(half) = crate::nn::ops::half_dtype(x) {
            return Ok(self.forward(&x.to_dtype(DType::F32)?)?.to_dtype(half)?);
        }
        if x.dtype() == DType::F32 && x.device().is_cpu() {
            return Ok(x.contiguous()?.apply_op1_no_bwd(&FusedLayerNorm {
                weight: &self.weight_f32,
                bias: &self.bias_f32,
                eps: self.eps as f32,
            })?);
        }
        self.composite(x)
    }

    /// The candle-ops path (other devices, f64): the parameters in `x`'s dtype, since a half
    /// build's parameters are stored in half and its LayerNorm computes on `x` upcast to f32
    /// (on the CPU the fused kernel reads the f32 copies; on CUDA this path once multiplied an
    /// f32 tensor by f16 weights: "dtype mismatch in mul, lhs: F32, rhs: F16").
    fn composite(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centered = x.broadcast_sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
        let denom = (var + self.eps)?.sqrt()?;
        let (weight, bias) = (self.weight.to_dtype(x.dtype())?, self.bias.to_dtype(x.dtype())?);
        Ok(centered.broadcast_div(&denom)?.broadcast_mul(&weight)?.broadcast_add(&bias)?)
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
        let scaled = RmsNorm { weight: Some(Tensor::new(&[2.0f32, 0.5], &Device::Cpu)?), weight_f32: Some(vec![2.0, 0.5]), eps: 0.0 };
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
            weight_f32: vec![1.0, 1.0],
            bias_f32: vec![0.5, 0.5],
            eps: 0.0,
        };
        // mean 2, biased var 1 → [-1, 1] + 0.5
        assert_eq!(ln.forward(&x)?.to_vec2::<f32>()?, vec![vec![-0.5, 1.5]]);
        Ok(())
    }

    /// Guards the device path of a half-precision build (what runs on CUDA): parameters stored in
    /// f16 or bf16, the input upcast to f32, the composite path gives the fused kernel's values
    /// (it once failed with "dtype mismatch in mul, lhs: F32, rhs: F16" on an H200).
    #[test]
    fn half_parameters_on_the_composite_path() -> Result<()> {
        let x = Tensor::new(&[[1.0f32, 3.0, -2.0, 0.5]], &Device::Cpu)?;
        for half in [DType::F16, DType::BF16] {
            let w = Tensor::new(&[1.5f32, 0.5, 2.0, 1.0], &Device::Cpu)?.to_dtype(half)?;
            let b = Tensor::new(&[0.25f32, -0.5, 0.0, 1.0], &Device::Cpu)?.to_dtype(half)?;
            let ln = LayerNorm::from_parts(w.clone(), b, 1e-5)?;
            let fused = ln.forward(&x)?.to_vec2::<f32>()?;
            let composite = ln.composite(&x)?.to_vec2::<f32>()?;
            for (f, c) in fused[0].iter().zip(&composite[0]) {
                assert!((f - c).abs() < 1e-5, "{half:?}: fused {f} vs composite {c}");
            }
            // The half input takes the same route, its output rounded once to the half dtype.
            assert_eq!(ln.forward(&x.to_dtype(half)?)?.dtype(), half);
            let rms = RmsNorm { weight: Some(w), weight_f32: Some(vec![1.5, 0.5, 2.0, 1.0]), eps: 1e-6 };
            let via_f64 = rms.forward(&x.to_dtype(DType::F64)?)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
            let f32s = rms.forward(&x)?.to_vec2::<f32>()?;
            for (a, b) in via_f64[0].iter().zip(&f32s[0]) {
                assert!((a - b).abs() < 1e-5, "{half:?}: rms f64 path {a} vs f32 {b}");
            }
        }
        Ok(())
    }
}
