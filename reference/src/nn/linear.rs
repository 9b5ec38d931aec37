//! `nn.Linear` and Gemma 4's `Gemma4ClippableLinear`.

use candle_core::{DType, Tensor};

use crate::error::Result;
use crate::weights::rounding::quantize_with_hints;
use crate::weights::Weights;

/// `nn.Linear`: `x · Wᵀ (+ b)`. `W` is stored `[out, in]` in the checkpoint and kept
/// transposed, `weight_t = Wᵀ` (`[in, out]`, contiguous), so the matmul reads a row-major
/// right-hand side (see [`Weights::get_t`]).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    weight_t: Tensor,
    bias: Option<Tensor>,
    /// A quantized export's int8 activation block for this matmul (MatMulNBits at
    /// `accuracy_level` 4), emulated before the matmul ([`crate::weights::quantize_activations`]).
    activation_block: Option<usize>,
    /// Its weight's key in the quantized build, where rounding hints are looked up
    /// ([`crate::weights::rounding`]).
    hint_key: Option<String>,
}

impl Linear {
    pub(crate) fn load(w: &Weights, prefix: &str, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        let name = format!("{prefix}.weight");
        Ok(Self {
            weight_t: w.get_t(&name, [out_dim, in_dim])?,
            bias: if bias { Some(w.get(&format!("{prefix}.bias"), &[out_dim])?) } else { None },
            activation_block: w.activation_block(&name),
            hint_key: w.activation_key(&name),
        })
    }

    /// A bias-free Linear from an already transposed weight `[in, out]`.
    pub(crate) fn from_weight_t(weight_t: Tensor) -> Self {
        Self { weight_t, bias: None, activation_block: None, hint_key: None }
    }

    /// With its activations quantized per `block` as a quantized export's matmul does.
    pub(crate) fn with_activation_block(mut self, block: Option<usize>) -> Self {
        self.activation_block = block;
        self
    }

    /// `x` as this matmul sees it: quantized per block when the export does that.
    pub(crate) fn input(&self, x: &Tensor) -> Result<Tensor> {
        match self.activation_block {
            Some(block) => quantized_input_hinted(x, block, self.hint_key.as_deref()),
            None => Ok(x.clone()),
        }
    }

    /// The int8 activation block of this matmul, when the export quantizes its input.
    pub(crate) fn activation_block(&self) -> Option<usize> {
        self.activation_block
    }

    /// The dtype the weight is held in (f32 in the f64 mode, whose matmuls upcast it).
    pub(crate) fn weight_dtype(&self) -> candle_core::DType {
        self.weight_t.dtype()
    }

    /// Output columns `start..start + cols` only (no bias): `[n, cols]`, of `x` as
    /// [`Linear::input`] made it (once for every slice: its int8 rounding is the same each time).
    pub(crate) fn forward_columns(&self, x: &Tensor, start: usize, cols: usize) -> Result<Tensor> {
        Ok(x.matmul(&in_dtype_of(&self.weight_t.narrow(1, start, cols)?, x)?)?)
    }

    /// `x`: `[n, in]` → `[n, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.input(x)?;
        let y = x.matmul(&in_dtype_of(&self.weight_t, &x)?)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// `x` (`[.., k]`) quantized to int8 per `block` of its last axis as MLAS does, in `x`'s own
/// precision ([`quantize_activations`]).
pub(crate) fn quantized_input(x: &Tensor, block: usize) -> Result<Tensor> {
    quantized_input_hinted(x, block, None)
}

/// [`quantized_input`] taking the candidate's step at near-ties when rounding hints for `key` are
/// active on this thread.
fn quantized_input_hinted(x: &Tensor, block: usize, key: Option<&str>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let k = dims.last().copied().unwrap_or(0);
    let dtype = x.dtype();
    let flat = x.flatten_all()?;
    Ok(match dtype {
        DType::F64 => {
            let mut v = flat.to_vec1::<f64>()?;
            quantize_with_hints(key, &mut v, k, block);
            Tensor::from_vec(v, dims, x.device())?
        }
        _ => {
            let mut v = flat.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            quantize_with_hints(key, &mut v, k, block);
            Tensor::from_vec(v, dims, x.device())?.to_dtype(dtype)?
        }
    })
}

/// `w` in `x`'s dtype: the f64 precision mode keeps matrices f32 and upcasts each for its
/// matmul only ([`Weights::matrix_dtype`]); otherwise `w` as it is.
fn in_dtype_of(w: &Tensor, x: &Tensor) -> Result<Tensor> {
    Ok(if w.dtype() == x.dtype() { w.clone() } else { w.to_dtype(x.dtype())? })
}

/// `Gemma4ClippableLinear` (vision tower): a bias-free `nn.Linear` stored as `{prefix}.linear.weight`
/// and, with `use_clipped_linears`, `clamp(x, input_min, input_max) → linear → clamp(·,
/// output_min, output_max)` with the four scalar buffers of the checkpoint. HF initialises absent
/// buffers to ±inf (no clipping), so they are optional here too; without `use_clipped_linears`
/// HF never reads them (and neither does this).
#[derive(Debug, Clone)]
pub(crate) struct ClippableLinear {
    linear: Linear,
    clip: Option<Clip>,
}

/// Clamp bounds of a clippable linear.
#[derive(Debug, Clone, Copy)]
struct Clip {
    input: (f64, f64),
    output: (f64, f64),
}

impl ClippableLinear {
    pub(crate) fn load(w: &Weights, prefix: &str, in_dim: usize, out_dim: usize, clipped: bool) -> Result<Self> {
        let linear = Linear::load(w, &format!("{prefix}.linear"), in_dim, out_dim, false)?;
        let clip = if clipped {
            let bound = |name: &str, default: f64| -> Result<f64> {
                Ok(match w.get_buffer(&format!("{prefix}.{name}"), &[])? {
                    Some(t) => t.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?,
                    None => default,
                })
            };
            Some(Clip {
                input: (bound("input_min", f64::NEG_INFINITY)?, bound("input_max", f64::INFINITY)?),
                output: (bound("output_min", f64::NEG_INFINITY)?, bound("output_max", f64::INFINITY)?),
            })
        } else {
            None
        };
        Ok(Self { linear, clip })
    }

    /// `x`: `[n, in]` → `[n, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let Some(c) = self.clip else { return self.linear.forward(x) };
        let x = clamp(x, c.input)?;
        clamp(&self.linear.forward(&x)?, c.output)
    }
}

/// `torch.clamp(x, lo, hi)` with scalar bounds (±inf = unbounded). The bounds are f32 values read
/// from the checkpoint, so comparing in the tensor's dtype is exact.
fn clamp(x: &Tensor, (lo, hi): (f64, f64)) -> Result<Tensor> {
    let x = if lo > f64::NEG_INFINITY { x.maximum(lo)? } else { x.clone() };
    Ok(if hi < f64::INFINITY { x.minimum(hi)? } else { x })
}
