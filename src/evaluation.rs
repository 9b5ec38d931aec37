//! Runs both back ends on a case's inputs, once per case, and keeps the results for every tier
//! that needs them (L3, L4 and L5 of one case share one reference run and one ONNX run).
//!
//! Both back ends receive the same [`ModelInputs`]. The ONNX decode is teacher-forced with the
//! reference's greedy tokens so that each decode step compares logits on identical histories;
//! a free-running ONNX greedy decode (for L5) is run only when the forced tokens are not what the
//! export would have chosen itself.

use std::path::Path;
use std::sync::OnceLock;

use candle_core::{Device, Tensor};
use onnx_parity_reference::{BidirectionalScope as RefScope, Gemma4Unified};

use crate::case::{BidirectionalScope, Case};
use crate::inputs::{Dense, ModelInputs};
use crate::onnx::pipeline::{greedy_token, OnnxGeneration, OnnxPipeline, OnnxPrefill, SessionOptions};

/// Default number of new tokens when neither the case nor a golden says.
pub const DEFAULT_MAX_NEW_TOKENS: usize = 20;

/// What the reference computed for a case.
#[derive(Debug, Clone)]
pub struct ReferenceRun {
    /// Mask scope used (DESIGN §5), for reports.
    pub scope: &'static str,
    /// [1, S, V].
    pub logits: Dense<f32>,
    pub image_features: Option<Dense<f32>>,
    pub inputs_embeds: Dense<f32>,
    pub tokens: Vec<i64>,
    pub step_logits: Vec<Vec<f32>>,
}

/// What the export computed for a case.
#[derive(Debug, Clone)]
pub struct OnnxRun {
    pub prefill: OnnxPrefill,
    /// Decode steps fed the reference's tokens (empty when the reference could not run).
    pub forced: OnnxGeneration,
    /// The export's own greedy decode.
    pub free: OnnxGeneration,
}

/// Lazily computed, shared results for one case. Errors are kept as text so every tier that
/// needs a failed computation reports the same cause.
#[derive(Debug)]
pub struct CaseEvaluation {
    inputs: OnceLock<Result<ModelInputs, String>>,
    reference: OnceLock<Result<ReferenceRun, String>>,
    onnx: OnceLock<Result<OnnxRun, String>>,
}

impl Default for CaseEvaluation {
    fn default() -> Self {
        CaseEvaluation { inputs: OnceLock::new(), reference: OnceLock::new(), onnx: OnceLock::new() }
    }
}

impl CaseEvaluation {
    pub fn inputs(&self, case: &Case) -> Result<&ModelInputs, String> {
        self.inputs.get_or_init(|| crate::inputs::for_case(case).map_err(|e| e.to_string())).as_ref().map_err(Clone::clone)
    }

    /// Runs the candle reference (prefill with all-position logits, then greedy decoding).
    pub fn reference(&self, case: &Case) -> Result<&ReferenceRun, String> {
        self.reference
            .get_or_init(|| {
                let inputs = self.inputs(case)?;
                let dir = case.checkpoint.as_deref().ok_or("the case has no `checkpoint:` for the reference")?;
                run_reference(case, dir, inputs).map_err(|e| format!("reference ({}): {e}", dir.display()))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Runs the export: prefill, the forced decode (when the reference is available) and greedy.
    pub fn onnx(&self, case: &Case) -> Result<&OnnxRun, String> {
        self.onnx
            .get_or_init(|| {
                let inputs = self.inputs(case)?;
                let dir = case.onnx.as_deref().ok_or("the case has no `onnx:` export")?;
                let forced_tokens = self.reference(case).ok().map(|r| r.tokens.clone());
                run_onnx(case, dir, inputs, forced_tokens.as_deref()).map_err(|e| format!("ONNX ({}): {e}", dir.display()))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Number of tokens to generate: the case's `max_new_tokens`, else the default.
pub fn max_new_tokens(case: &Case) -> usize {
    case.generation.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS)
}

/// EOS ids: the case's `eos_token_id`, else Gemma's `<eos>` (1).
pub fn eos_ids(case: &Case) -> Vec<i64> {
    case.generation.eos_token_id.clone().unwrap_or_else(|| vec![1])
}

fn scope_for(case: &Case, model: &Gemma4Unified) -> RefScope {
    match case.bidirectional {
        Some(BidirectionalScope::AllLayers) => RefScope::AllLayers,
        Some(BidirectionalScope::SlidingWindowed) => RefScope::SlidingWindowed,
        Some(BidirectionalScope::None) => RefScope::None,
        None => model.hf_forward_scope(),
    }
}

/// Converts harness inputs to the reference's tensors.
pub fn to_reference_inputs(inputs: &ModelInputs) -> candle_core::Result<onnx_parity_reference::ModelInputs> {
    let dev = Device::Cpu;
    Ok(onnx_parity_reference::ModelInputs {
        input_ids: inputs.input_ids.clone(),
        pixel_values: inputs.pixel_values.as_ref().map(|d| Tensor::from_slice(&d.data, d.shape.as_slice(), &dev)).transpose()?,
        image_position_ids: inputs
            .image_position_ids
            .as_ref()
            .map(|d| Tensor::from_slice(&d.data, d.shape.as_slice(), &dev))
            .transpose()?,
        mm_token_type_ids: inputs.mm_token_type_ids.clone(),
    })
}

/// A candle tensor as a dense f32 array.
pub fn dense(t: &Tensor) -> candle_core::Result<Dense<f32>> {
    Ok(Dense::new(t.dims().to_vec(), t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1()?))
}

fn run_reference(case: &Case, dir: &Path, inputs: &ModelInputs) -> Result<ReferenceRun, String> {
    let t = std::time::Instant::now();
    let model = Gemma4Unified::load(dir).map_err(|e| e.to_string())?;
    let scope = scope_for(case, &model);
    let run = reference_run(&model, inputs, scope, max_new_tokens(case), &eos_ids(case))?;
    tracing::info!("{}: reference ran in {:.2} s (scope {})", case.name, t.elapsed().as_secs_f64(), scope.as_str());
    Ok(run)
}

/// Everything the reference computes for `inputs`: image features, embeddings, logits for every
/// position, and `max_new` greedy tokens with their step logits (none when `max_new` is 0).
pub fn reference_run(
    model: &Gemma4Unified,
    inputs: &ModelInputs,
    scope: RefScope,
    max_new: usize,
    eos: &[i64],
) -> Result<ReferenceRun, String> {
    let r = to_reference_inputs(inputs).map_err(|e| e.to_string())?;
    let image_features = match (&r.pixel_values, &r.image_position_ids) {
        (Some(p), Some(q)) => Some(model.image_features(p, q).and_then(|t| dense(&t).map_err(Into::into)).map_err(|e| e.to_string())?),
        _ => None,
    };
    let inputs_embeds = model.embed(&r).map_err(|e| e.to_string())?;
    let logits = model.forward_embeds(&inputs_embeds, r.mm_token_type_ids.as_deref(), scope).map_err(|e| e.to_string())?;
    let generation = model.greedy(&r, max_new, eos, scope).map_err(|e| e.to_string())?;
    Ok(ReferenceRun {
        scope: scope.as_str(),
        logits: dense(&logits).map_err(|e| e.to_string())?,
        image_features,
        inputs_embeds: dense(&inputs_embeds).map_err(|e| e.to_string())?,
        tokens: generation.tokens,
        step_logits: generation.step_logits,
    })
}

fn run_onnx(case: &Case, dir: &Path, inputs: &ModelInputs, forced: Option<&[i64]>) -> Result<OnnxRun, String> {
    let t = std::time::Instant::now();
    let mut pipeline = OnnxPipeline::open(dir, &SessionOptions::default()).map_err(|e| e.to_string())?;
    let max_new = max_new_tokens(case);
    let eos = eos_ids(case);
    let (prefill, forced_gen) = match forced {
        Some(tokens) => {
            let (p, g) = pipeline.greedy(inputs, max_new, &eos, Some(tokens)).map_err(|e| e.to_string())?;
            (p, g)
        }
        None => {
            let (p, _) = pipeline.greedy(inputs, 0, &eos, None).map_err(|e| e.to_string())?;
            (p, OnnxGeneration::default())
        }
    };
    // The forced run already is the export's own greedy decode if at every step the export's
    // argmax equals the forced token (and stopping agrees); otherwise decode freely.
    let agrees = forced.is_some_and(|f| {
        forced_gen.step_logits.len() == f.len() && forced_gen.step_logits.iter().zip(f).all(|(l, &t)| greedy_token(l) == t)
    }) && (forced_gen.tokens.len() == max_new || forced_gen.tokens.last().is_some_and(|t| eos.contains(t)));
    let free = if agrees { forced_gen.clone() } else { pipeline.greedy(inputs, max_new, &eos, None).map_err(|e| e.to_string())?.1 };
    tracing::info!("{}: ONNX ran in {:.2} s", case.name, t.elapsed().as_secs_f64());
    Ok(OnnxRun { prefill, forced: forced_gen, free })
}
