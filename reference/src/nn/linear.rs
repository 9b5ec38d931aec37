//! `nn.Linear` and Gemma 4's `Gemma4ClippableLinear`.

use candle_core::{DType, Tensor};

use crate::error::Result;
use crate::nn::upcast;
use crate::weights::activations::Hint;
use crate::weights::rounding::{active_hint, round_hinted};
use crate::weights::{ActivationQuant, MatmulActivations, Weights};

/// `nn.Linear`: `x · Wᵀ (+ b)`. `W` is stored `[out, in]` in the checkpoint and kept
/// transposed, `weight_t = Wᵀ` (`[in, out]`, contiguous), so the matmul reads a row-major
/// right-hand side (see [`Weights::get_t`]).
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    weight_t: Tensor,
    bias: Option<Tensor>,
    /// How a quantized export rounds this matmul's input and output
    /// ([`crate::weights::activations`]), done here around the matmul (boxed: most linears of a
    /// model are float, and a layer holds several).
    quant: Box<MatmulActivations>,
    /// Its weight's key in the quantized build, where rounding hints are looked up
    /// ([`crate::weights::rounding`]).
    hint_key: Option<String>,
    /// The weight's integer codes `[in, out]` (f64) where the export's kernel is an integer GEMM
    /// ([`Linear::candidate_output`]): made on first use, once per model.
    codes: std::sync::OnceLock<Tensor>,
}

/// A linear layer's input as its matmul reads it ([`Linear::input`]): rounded as the export
/// rounds it, and, under rounding hints of a build that requantizes the output, the candidate's
/// own rounded input (the output's hint is its product with the weight).
#[derive(Debug, Clone)]
pub(crate) struct LinearInput {
    pub(crate) x: Tensor,
    candidate: Option<Tensor>,
}

impl Linear {
    pub(crate) fn load(w: &Weights, prefix: &str, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        let name = format!("{prefix}.weight");
        Ok(Self {
            weight_t: w.get_t(&name, [out_dim, in_dim])?,
            bias: if bias { Some(w.get(&format!("{prefix}.bias"), &[out_dim])?) } else { None },
            quant: Box::new(w.activations(&name)),
            hint_key: w.activation_key(&name),
            codes: Default::default(),
        })
    }

    /// A bias-free Linear from an already transposed weight `[in, out]`.
    pub(crate) fn from_weight_t(weight_t: Tensor) -> Self {
        Self { weight_t, bias: None, quant: Box::default(), hint_key: None, codes: Default::default() }
    }

    /// With its activations rounded as a quantized export rounds them, hints looked up by `key`.
    pub(crate) fn with_activations(mut self, quant: MatmulActivations, key: Option<String>) -> Self {
        self.hint_key = key.filter(|_| quant.any());
        self.quant = Box::new(quant);
        self
    }

    /// How the export rounds this matmul's activations.
    pub(crate) fn activations(&self) -> MatmulActivations {
        (*self.quant).clone()
    }

    /// Whether the export's rounding of the input replaces the tensor for its other readers too
    /// (a QDQ build): the caller then reads [`LinearInput::x`] instead of its own tensor.
    pub(crate) fn shares_input(&self) -> bool {
        self.quant.shared_input && self.quant.input.is_some()
    }

    /// `x` as this matmul reads it: rounded as the export rounds it.
    pub(crate) fn input(&self, x: &Tensor) -> Result<LinearInput> {
        let Some(quant) = self.quant.input else { return Ok(LinearInput { x: x.clone(), candidate: None }) };
        let key = self.hint_key.as_deref();
        let hint = key.and_then(active_hint);
        // The candidate's own rounded input is only needed for an output's hint.
        let want = hint.is_some() && self.quant.output.is_some() && self.quant.integer_output.is_some();
        let (x, candidate) = round_tensor(x, &quant, key.unwrap_or(""), hint.as_ref().map(|(h, t)| (h.hint(), *t)), want)?;
        Ok(LinearInput { x, candidate })
    }

    /// The dtype the weight is held in (f32 in the f64 mode, whose matmuls upcast it).
    pub(crate) fn weight_dtype(&self) -> candle_core::DType {
        self.weight_t.dtype()
    }

    /// Output columns `start..start + cols` only (no bias): `[n, cols]`, of `x` as
    /// [`Linear::input`] made it (once for every slice: its rounding is the same each time),
    /// requantized as the export requantizes the output (per tensor: each slice alike).
    pub(crate) fn forward_columns(&self, x: &LinearInput, start: usize, cols: usize) -> Result<Tensor> {
        let w = self.weight_t.narrow(1, start, cols)?;
        let y = upcast::matmul(&x.x, &w)?;
        let candidate = x.candidate.as_ref().map(|c| self.candidate_output(c, start, cols)).transpose()?.flatten();
        self.output(y, candidate)
    }

    /// The matmul of an input made by [`Linear::input`], its bias, and the export's rounding of
    /// the output.
    pub(crate) fn apply(&self, x: &LinearInput) -> Result<Tensor> {
        // The f64 precision mode keeps matrices f32 ([`Weights::matrix_dtype`]): upcast per matmul.
        let y = upcast::matmul(&x.x, &self.weight_t)?;
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let candidate = match &self.bias {
            None => x.candidate.as_ref().map(|c| self.candidate_output(c, 0, self.weight_t.dim(1)?)).transpose()?.flatten(),
            Some(_) => None,
        };
        self.output(y, candidate)
    }

    /// The candidate's output as its kernel scales it onto the output grid, from its rounded input
    /// `c`, for the output columns `first..first + cols`: where the kernel is QLinearMatMul, an
    /// integer GEMM of the codes (recovered exactly from the dequantized operands: each is a code
    /// times its scale to within an f32 rounding) scaled by `m[n] = f32(f32(s_a · s_w[n]) / s_y)` in
    /// f32, as ONNX Runtime computes it (research §3: 768,000 codes bit for bit). `None` where the
    /// kernel is a float GEMM: its sums' order is MLAS's, and the reference's own is as good a guess.
    fn candidate_output(&self, c: &Tensor, first: usize, cols: usize) -> Result<Option<Vec<f32>>> {
        let (Some(scales), Some(a), Some(out)) = (&self.quant.integer_output, self.quant.input_grid(), self.quant.output) else {
            return Ok(None);
        };
        let s_w = |col: usize| -> f32 {
            if scales.len() == 1 {
                scales[0]
            } else {
                scales.get(col).copied().unwrap_or(0.0)
            }
        };
        let iw = match self.codes.get() {
            Some(codes) => codes,
            None => {
                let codes = Tensor::from_vec(integer_codes(&self.weight_t, &s_w)?, self.weight_t.dims2()?, c.device())?;
                self.codes.get_or_init(|| codes)
            }
        };
        let k = iw.dim(0)?;
        let ia = Tensor::from_vec(integer_codes(c, &|_| a.scale)?, (c.dim(0)?, k), c.device())?;
        // |acc| ≤ 2^16 · K: exact in f64.
        let acc = ia.matmul(&iw.narrow(1, first, cols)?)?.flatten_all()?.to_vec1::<f64>()?;
        let m: Vec<f32> = (first..first + cols).map(|col| (a.scale * s_w(col)) / out.scale).collect();
        Ok(Some(acc.iter().enumerate().map(|(i, &v)| (v as f32) * m[i % cols]).collect()))
    }

    /// `y` requantized as the export requantizes this matmul's output, taking the candidate's step
    /// at near-ties where its scaled output is known ([`Linear::candidate_output`]).
    fn output(&self, y: Tensor, candidate: Option<Vec<f32>>) -> Result<Tensor> {
        let Some(grid) = self.quant.output else { return Ok(y) };
        let tol = self.hint_key.as_deref().and_then(active_hint).map_or(0.0, |(_, t)| t);
        let key = format!("{} (output)", self.hint_key.as_deref().unwrap_or(""));
        let hint = candidate.as_deref().map(|h| (Hint::Scaled(h), tol));
        Ok(round_tensor(&y, &ActivationQuant::Static(grid), &key, hint, false)?.0)
    }

    /// `x`: `[n, in]` → `[n, out]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.apply(&self.input(x)?)
    }
}

/// `x` (`[.., k]`) rounded as `quant` rounds it, in `x`'s own precision, taking the candidate's
/// step at near-ties given its values `hint` (recorded under `key`); with `candidate`, also the
/// candidate's rounded values as a tensor like `x`.
fn round_tensor(
    x: &Tensor,
    quant: &ActivationQuant,
    key: &str,
    hint: Option<(Hint<'_>, f64)>,
    candidate: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let dims = x.dims().to_vec();
    let k = dims.last().copied().unwrap_or(0);
    let dtype = x.dtype();
    let flat = x.flatten_all()?;
    let (rounded, cand) = match dtype {
        DType::F64 => {
            let mut v = flat.to_vec1::<f64>()?;
            let c = round_hinted(key, &mut v, k, quant, hint, candidate);
            (Tensor::from_vec(v, dims.clone(), x.device())?, c)
        }
        _ => {
            let mut v = flat.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            let c = round_hinted(key, &mut v, k, quant, hint, candidate);
            (Tensor::from_vec(v, dims.clone(), x.device())?.to_dtype(dtype)?, c)
        }
    };
    let cand = cand.map(|c| Tensor::from_vec(c, dims, x.device())?.to_dtype(dtype)).transpose()?;
    Ok((rounded, cand))
}

/// The integer codes of `t` (`[rows, cols]`, each column `n` a code times `scale(n)` to within an
/// f32 rounding) as f64, row-major (a zero scale gives code 0).
fn integer_codes(t: &Tensor, scale: &dyn Fn(usize) -> f32) -> Result<Vec<f64>> {
    let cols = t.dim(1)?;
    let v = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok(v.iter()
        .enumerate()
        .map(|(i, &x)| {
            let s = scale(i % cols);
            if s == 0.0 {
                0.0
            } else {
                ((x / s) as f64).round_ties_even()
            }
        })
        .collect())
}

/// `x` (`[.., k]`) rounded as `quant` rounds it, without hints.
pub(crate) fn rounded_input(x: &Tensor, quant: &ActivationQuant) -> Result<Tensor> {
    Ok(round_tensor(x, quant, "", None, false)?.0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::StaticGrid;

    /// Guards the candidate's output of a QLinearMatMul as ONNX Runtime computes it: the integer
    /// GEMM of the codes recovered from the dequantized operands, scaled by
    /// `f32(f32(s_a · s_w[n]) / s_y)`, per output column (and the column offset of a slice).
    #[test]
    fn integer_output_is_the_codes_gemm_times_the_multiplier() -> Result<()> {
        let grid = |scale| StaticGrid { scale, zero_point: 0, qmin: 0, qmax: 255 };
        let dev = candle_core::Device::Cpu;
        // W codes [[1, 2], [3, 4]] ([K, N]) with column scales 0.5 and 0.25.
        let w = Tensor::from_vec(vec![0.5f32, 0.5, 1.5, 1.0], (2, 2), &dev)?;
        let quant = MatmulActivations {
            input: Some(ActivationQuant::Static(grid(0.1))),
            shared_input: false,
            output: Some(grid(0.2)),
            integer_output: Some(std::sync::Arc::new(vec![0.5, 0.25])),
        };
        let linear = Linear::from_weight_t(w.clone()).with_activations(quant, Some("k".into()));
        // The candidate's rounded input: codes 2 and −3 of scale 0.1.
        let c = Tensor::from_vec(vec![0.2f32, -0.3], (1, 2), &dev)?;
        let got = linear.candidate_output(&c, 0, 2)?.expect("an integer GEMM");
        // acc = [2·1 − 3·3, 2·2 − 3·4] = [−7, −8]; m = [0.1·0.5 / 0.2, 0.1·0.25 / 0.2].
        assert_eq!(got, vec![-7.0 * ((0.1f32 * 0.5) / 0.2), -8.0 * ((0.1f32 * 0.25) / 0.2)]);
        // The second column alone, as the lm_head's slices read it.
        let got = linear.candidate_output(&c, 1, 1)?.expect("an integer GEMM");
        assert_eq!(got, vec![-8.0 * ((0.1f32 * 0.25) / 0.2)]);
        // A float GEMM's output has no computable candidate value.
        let float = Linear::from_weight_t(w.clone())
            .with_activations(MatmulActivations { integer_output: None, ..linear.activations() }, Some("k".into()));
        assert_eq!(float.candidate_output(&c, 0, 2)?, None);
        Ok(())
    }
}
