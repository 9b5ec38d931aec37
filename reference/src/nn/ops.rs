//! Fused elementwise kernels that run in place on freshly computed activations.
//!
//! Why: the gated MLP (`act(gate)·up`) and the final softcapping each cost two or three
//! full-size temporaries when written with candle's functional ops; the logits are the largest
//! activation of a prefill (`seq × vocab`). Doing these in place keeps peak memory near the
//! weights. The formulas follow PyTorch's kernels (`GeluKernel.cpp`: `(0.5·x)·(1 + tanh(β·(x +
//! κ·x³)))`, β = √2·(2/√π)·0.5, κ = 0.044715), evaluated in the tensor's dtype.

use candle_core::{CpuStorage, DType, InplaceOp1, InplaceOp2, Layout, Tensor};
use rayon::prelude::*;

use crate::config::Activation;
use crate::error::Result;

/// Elements per parallel work item of the in-place kernels.
const CHUNK: usize = 1 << 14;

/// Hyperbolic tangent in f32, evaluated through f64 and rounded once:
/// `(e^{2|x|} − 1)/(e^{2|x|} + 1)` with `e^y = 2^k · P(r)`, `y = k·ln2 + r`, `|r| ≤ ln2/2`,
/// `P` the degree-13 Taylor polynomial (relative error < 1e-16). The f32 result is correctly
/// rounded except within ~1e-16 of a rounding boundary — as accurate as glibc's `tanhf`.
/// Branch-free and call-free so that the loops using it vectorise: every MLP activation and
/// every logit goes through it. |x| < 2⁻¹² returns x (the cubic term is below half an ulp),
/// |x| > 9.5 saturates to ±1 as `tanhf` does; NaN propagates. Uses no FMA, so the result is
/// the same whichever SIMD width the loop is compiled for.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5·2^52: adding it rounds to an integer
    const LN2_HI: f64 = 0.693_147_180_369_123_8; // ln 2 split for exact k·LN2_HI
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let a = x.abs();
    let y = (2.0 * a as f64).min(20.0);
    let shifted = y * std::f64::consts::LOG2_E + SHIFT;
    let kf = shifted - SHIFT;
    let r = (y - kf * LN2_HI) - kf * LN2_LO;
    let mut p = 1.0 / 6_227_020_800.0; // 1/13!
    for c in [
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    // 2^k from the integer sitting in the low bits of `shifted`.
    let k = shifted.to_bits().wrapping_sub(SHIFT.to_bits()) as i64;
    let scale = f64::from_bits(((k + 1023) as u64) << 52);
    let e = p * scale;
    let t = ((e - 1.0) / (e + 1.0)) as f32;
    let t = if a < 1.0 / 4096.0 { a } else { t };
    let t = if a > 9.5 { 1.0 } else { t };
    let t = t.copysign(x);
    if x.is_nan() {
        x
    } else {
        t
    }
}

/// Defines `$name(args)`: the `#[inline(always)]` kernel `$kernel` compiled for AVX-512 or AVX2
/// when the CPU has them (wider vectors for the f64 math of [`tanh_f32`]), else for the
/// baseline. The kernels use no FMA, so every path gives identical results.
macro_rules! simd_dispatch {
    ($name:ident, $kernel:ident, ($($arg:ident: $ty:ty),*)) => {
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    $kernel($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) {
                    $kernel($($arg),*)
                }
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports AVX-512F (checked just above).
                    unsafe { avx512($($arg),*) };
                    return;
                }
                if is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2 (checked just above).
                    unsafe { avx2($($arg),*) };
                    return;
                }
            }
            $kernel($($arg),*)
        }
    };
}

#[inline(always)]
fn softcap_kernel(v: &mut [f32], c: f32) {
    for x in v.iter_mut() {
        *x = tanh_f32(*x / c) * c;
    }
}
simd_dispatch!(softcap_simd, softcap_kernel, (v: &mut [f32], c: f32));

/// `g ← (0.5·g)·(1 + tanh(β·(g + κ·g³)))·u`.
#[inline(always)]
fn gelu_tanh_mul_kernel(g: &mut [f32], u: &[f32]) {
    let (beta, kappa) = (GELU_BETA as f32, GELU_KAPPA as f32);
    let n = g.len().min(u.len());
    let (g, u) = (&mut g[..n], &u[..n]);
    for i in 0..n {
        let x = g[i];
        let inner = beta * (x + kappa * (x * x * x));
        g[i] = 0.5 * x * (1.0 + tanh_f32(inner)) * u[i];
    }
}
simd_dispatch!(gelu_tanh_mul_simd, gelu_tanh_mul_kernel, (g: &mut [f32], u: &[f32]));

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
                v[start..end].par_chunks_mut(CHUNK).for_each(|part| softcap_simd(part, c));
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

/// `tanh(x / c) · c` on `x`'s buffer (CPU: the in-place [`SoftCap`] kernel). Other devices use
/// candle's `tanh` (the device's `tanhf`), which may differ from the CPU kernel by an ulp.
pub(crate) fn softcap(x: Tensor, c: f64) -> Result<Tensor> {
    if let Some(half) = half_dtype(&x) {
        return Ok(softcap(x.to_dtype(DType::F32)?, c)?.to_dtype(half)?);
    }
    if x.device().is_cpu() {
        let x = x.contiguous()?;
        x.inplace_op1(&SoftCap(c))?;
        return Ok(x);
    }
    Ok(((x / c)?.tanh()? * c)?)
}

/// `gate ← act(gate) · up`.
struct GatedAct(Activation);

/// PyTorch's tanh-GELU constants (`GeluKernel.cpp`): β = √2·(2/√π)·0.5, κ = 0.044715.
const GELU_BETA: f64 = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
const GELU_KAPPA: f64 = 0.044715;

/// `g ← act(g)·u` over f32 slices, one straight loop per activation.
fn gated_f32(act: Activation, g: &mut [f32], u: &[f32]) {
    g.par_chunks_mut(CHUNK).zip(u.par_chunks(CHUNK)).for_each(|(g, u)| match act {
        Activation::GeluPytorchTanh => gelu_tanh_mul_simd(g, u),
        Activation::Silu => g.iter_mut().zip(u).for_each(|(g, &u)| *g = *g / (1.0 + (-*g).exp()) * u),
        Activation::Relu => g.iter_mut().zip(u).for_each(|(g, &u)| *g = g.max(0.0) * u),
        // Routed through candle's erf GELU by `gated_activation`.
        Activation::Gelu => {}
    });
}

/// `g ← act(g)·u` over f64 slices (precision mode).
fn gated_f64(act: Activation, g: &mut [f64], u: &[f64]) {
    g.par_chunks_mut(CHUNK).zip(u.par_chunks(CHUNK)).for_each(|(g, u)| match act {
        Activation::GeluPytorchTanh => g.iter_mut().zip(u).for_each(|(g, &u)| {
            let x = *g;
            let inner = GELU_BETA * (x + GELU_KAPPA * (x * x * x));
            *g = 0.5 * x * (1.0 + inner.tanh()) * u;
        }),
        Activation::Silu => g.iter_mut().zip(u).for_each(|(g, &u)| *g = *g / (1.0 + (-*g).exp()) * u),
        Activation::Relu => g.iter_mut().zip(u).for_each(|(g, &u)| *g = g.max(0.0) * u),
        Activation::Gelu => {}
    });
}

impl InplaceOp2 for GatedAct {
    fn name(&self) -> &'static str {
        "gated-activation"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<()> {
        let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("gated activation expects contiguous tensors");
        };
        if a1 - a0 != b1 - b0 {
            candle_core::bail!("gated activation: size mismatch");
        }
        match (s1, s2) {
            (CpuStorage::F32(g), CpuStorage::F32(u)) => gated_f32(self.0, &mut g[a0..a1], &u[b0..b1]),
            (CpuStorage::F64(g), CpuStorage::F64(u)) => gated_f64(self.0, &mut g[a0..a1], &u[b0..b1]),
            _ => candle_core::bail!("gated activation: only f32/f64 of equal dtype"),
        }
        Ok(())
    }
}

/// `act(gate) · up`, reusing `gate`'s buffer (exact erf GELU goes through candle's op).
pub(crate) fn gated_activation(act: Activation, gate: Tensor, up: &Tensor) -> Result<Tensor> {
    if let Some(half) = half_dtype(&gate) {
        let g = gated_activation(act, gate.to_dtype(DType::F32)?, &up.to_dtype(DType::F32)?)?;
        return Ok(g.to_dtype(half)?);
    }
    if act == Activation::Gelu {
        return Ok((gate.gelu_erf()? * up)?);
    }
    if !gate.device().is_cpu() {
        // candle's device kernels: `gelu` is the tanh approximation with PyTorch's constants,
        // evaluated as 0.5·x·(1 + tanh(√(2/π)·x·(1 + κx²))) — the same function, another order.
        let g = match act {
            Activation::GeluPytorchTanh => gate.gelu()?,
            Activation::Silu => gate.silu()?,
            Activation::Relu => gate.relu()?,
            Activation::Gelu => gate.gelu_erf()?,
        };
        return Ok((g * up)?);
    }
    let gate = gate.contiguous()?;
    gate.inplace_op2(&up.contiguous()?, &GatedAct(act))?;
    Ok(gate)
}

/// `Some(dtype)` when `x` is f16 or bf16: the reference at a half-precision export's precision
/// stores every activation in it but, like PyTorch's half kernels and ONNX Runtime's, evaluates
/// each op in f32 and rounds its output once. Norms and softmax run in f32 as HF writes them.
pub(crate) fn half_dtype(x: &Tensor) -> Option<DType> {
    matches!(x.dtype(), DType::F16 | DType::BF16).then(|| x.dtype())
}

/// `softmax(x, dim=-1, dtype=float32).to(x.dtype)` (HF's eager attention and router).
pub(crate) fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    Ok(match half_dtype(x) {
        Some(half) => candle_nn::ops::softmax_last_dim(&x.to_dtype(DType::F32)?)?.to_dtype(half)?,
        None => candle_nn::ops::softmax_last_dim(x)?,
    })
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
