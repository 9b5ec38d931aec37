//! Fused elementwise kernels that run in place on freshly computed activations.
//!
//! Why: the gated MLP (`act(gate)·up`) and the final softcapping each cost two or three
//! full-size temporaries when written with candle's functional ops; the logits are the largest
//! activation of a prefill (`seq × vocab`). Doing these in place keeps peak memory near the
//! weights. The formulas follow PyTorch's kernels (`GeluKernel.cpp`: `0.5·x·(1 + tanh(β·(x +
//! κ·x³)))`, β = √2·(2/√π)·0.5, κ = 0.044715), evaluated in the tensor's dtype.

use candle_core::{CpuStorage, InplaceOp1, InplaceOp2, Layout, Tensor};
use rayon::prelude::*;

use crate::config::Activation;
use crate::error::Result;

/// Elements per parallel work item of the in-place kernels.
const CHUNK: usize = 1 << 14;

/// Hyperbolic tangent in f32, evaluated through f64 (`(e^{2|x|} − 1)/(e^{2|x|} + 1)`) and rounded
/// once: as accurate as glibc's `tanhf` (correctly rounded except within ~1e-16 of a rounding
/// boundary) and about twice as fast, which matters because every MLP activation and every
/// logit goes through it. Small |x| return x (the cubic term is below half an ulp), large |x|
/// saturate to ±1 as `tanhf` does.
#[inline]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    if a < 1.0 / 4096.0 {
        return x;
    }
    if a > 9.5 {
        return 1.0f32.copysign(x);
    }
    let e = (2.0 * a as f64).exp();
    (((e - 1.0) / (e + 1.0)) as f32).copysign(x)
}

/// Final logit softcapping `tanh(x / c) · c`. HF divides by the Python float (a true division,
/// not a reciprocal multiply) and multiplies back.
pub(crate) struct SoftCap(pub f64);

impl InplaceOp1 for SoftCap {
    fn name(&self) -> &'static str {
        "softcap"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("softcap expects a contiguous tensor");
        };
        match storage {
            CpuStorage::F32(v) => {
                let c = self.0 as f32;
                v[start..end].par_chunks_mut(CHUNK).for_each(|part| {
                    part.iter_mut().for_each(|x| *x = tanh_f32(*x / c) * c);
                });
            }
            CpuStorage::F64(v) => {
                let c = self.0;
                v[start..end].par_chunks_mut(CHUNK).for_each(|part| {
                    part.iter_mut().for_each(|x| *x = (*x / c).tanh() * c);
                });
            }
            _ => candle_core::bail!("softcap: only f32 and f64 logits"),
        }
        Ok(())
    }
}

/// `gate ← act(gate) · up`.
struct GatedAct(Activation);

macro_rules! gated {
    ($act:expr, $t:ty, $tanh:expr, $g:expr, $u:expr) => {{
        let beta: $t = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as $t;
        let kappa: $t = 0.044715;
        let f = |x: $t| -> $t {
            match $act {
                Activation::GeluPytorchTanh => {
                    let inner = beta * (x + kappa * (x * x * x));
                    0.5 * x * (1.0 + $tanh(inner))
                }
                Activation::Silu => x / (1.0 + (-x).exp()),
                Activation::Relu => x.max(0.0),
                // Not routed here (see `gated_activation`).
                Activation::Gelu => x,
            }
        };
        $g.par_chunks_mut(CHUNK).zip($u.par_chunks(CHUNK)).for_each(|(g, u)| {
            g.iter_mut().zip(u).for_each(|(g, &u)| *g = f(*g) * u);
        });
    }};
}

impl InplaceOp2 for GatedAct {
    fn name(&self) -> &'static str {
        "gated-activation"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("gated activation expects contiguous tensors");
        };
        if a1 - a0 != b1 - b0 {
            candle_core::bail!("gated activation: size mismatch");
        }
        match (s1, s2) {
            (CpuStorage::F32(g), CpuStorage::F32(u)) => {
                gated!(self.0, f32, tanh_f32, g[a0..a1], &u[b0..b1])
            }
            (CpuStorage::F64(g), CpuStorage::F64(u)) => {
                gated!(self.0, f64, f64::tanh, g[a0..a1], &u[b0..b1])
            }
            _ => candle_core::bail!("gated activation: only f32/f64 of equal dtype"),
        }
        Ok(())
    }
}

/// `act(gate) · up`, reusing `gate`'s buffer (exact erf GELU goes through candle's op).
pub(crate) fn gated_activation(act: Activation, gate: Tensor, up: &Tensor) -> Result<Tensor> {
    if act == Activation::Gelu {
        return Ok((gate.gelu_erf()? * up)?);
    }
    let gate = gate.contiguous()?;
    gate.inplace_op2(&up.contiguous()?, &GatedAct(act))?;
    Ok(gate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Guards `tanh_f32` against the f64 tanh: within half an ulp plus the f64 error,
    /// including the small-|x| and saturation branches and the sign.
    #[test]
    fn tanh_f32_accuracy() {
        let mut x = -12.0f32;
        while x < 12.0 {
            let want = (x as f64).tanh();
            let got = tanh_f32(x) as f64;
            let ulp = f32::EPSILON as f64 * want.abs().max(f32::MIN_POSITIVE as f64);
            assert!((got - want).abs() <= 0.5 * ulp + 1e-15, "tanh({x}) = {got} vs {want}");
            x += 0.000_731;
        }
        assert_eq!(tanh_f32(1e-30), 1e-30);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    /// Guards the fused kernels against candle's functional ops (same formulas up to rounding).
    #[test]
    fn fused_matches_functional() -> Result<()> {
        let dev = Device::Cpu;
        let g = Tensor::new(&[-3.0f32, -0.5, 0.0, 0.7, 2.5], &dev)?;
        let u = Tensor::new(&[1.0f32, 2.0, -1.0, 0.5, 3.0], &dev)?;
        for (act, want) in [
            (Activation::GeluPytorchTanh, (g.gelu()? * &u)?),
            (Activation::Silu, (g.silu()? * &u)?),
            (Activation::Relu, (g.relu()? * &u)?),
            (Activation::Gelu, (g.gelu_erf()? * &u)?),
        ] {
            let got = gated_activation(act, g.copy()?, &u)?;
            let d = (got - want)?.abs()?.max(0)?.to_scalar::<f32>()?;
            assert!(d < 1e-6, "{act:?}: {d}");
        }
        // The input buffer passed by value may be reused; `g` itself is untouched.
        assert_eq!(g.to_vec1::<f32>()?[0], -3.0);
        let logits = Tensor::new(&[0.0f32, 30.0, -90.0], &dev)?;
        logits.inplace_op1(&SoftCap(30.0))?;
        let v = logits.to_vec1::<f32>()?;
        assert_eq!(v[0], 0.0);
        assert!((v[1] - 30.0 * 1.0f32.tanh()).abs() < 1e-5 && (v[2] + 30.0 * 3.0f32.tanh()).abs() < 1e-5);
        Ok(())
    }
}
