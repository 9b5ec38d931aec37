//! The runs the calibrated L3 rule needs beside the reference's own (docs/design.md §2b): the
//! **arbiter** — the reference in float64, teacher-forced with the reference's tokens, every
//! component, layer and module kept — and, per precision a candidate computes in, the reference
//! **at that precision** (f32: the reference's own run; f16 / bf16: a run with every weight and
//! activation rounded to it) with its decoder layers run **locally** on the arbiter's streams.
//!
//! Each model is loaded, run and dropped in turn (f32 reference, f64, then the precision's), so
//! the peak is one model's weights; the f64 arbiter keeps its matrices in f32 and upcasts them
//! one matmul at a time, so it is never an f64 copy of the checkpoint. It keeps its final hidden
//! state and its head instead of its all-position logits (`Prefill::streamed`): those are made
//! one vocabulary slice at a time when a candidate is judged, so the ONNX stage holds two full
//! `[S, vocab]` tensors (the reference's and the candidate's), not three.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use candle_core::DType;

use super::error::{EvalError, SharedError};
use super::loaded::run_loaded;
use super::request::{eos_ids, max_new_tokens};
use crate::artifacts::Artifacts;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Backend, BackendError, GenerationRequest};
use crate::case::{Case, Dtype, L3Rule, Level};
use crate::inputs::ModelInputs;
use crate::onnx::quantized::QuantizedBuild;
use crate::outputs::{LocalLayers, Run};
use crate::reference_cache::codec::{Decoder, Encoder};
use crate::reference_cache::{CacheError, Cached, KeyBuilder};
use crate::tolerance::{CalibratedRule, Tolerances};
use onnx_parity_reference::model::LocalPle;

/// The reference at one precision: its own run (`None` for f32: the reference's run is it) and
/// its layers fed the arbiter's streams.
#[derive(Debug)]
pub struct AtPrecision {
    pub run: Option<Run>,
    pub local: LocalLayers,
}

impl Cached for AtPrecision {
    fn encode(&self, e: &mut Encoder) -> std::io::Result<()> {
        self.run.encode(e)?;
        self.local.encode(e)
    }

    fn decode(d: &mut Decoder) -> Result<Self, CacheError> {
        Ok(AtPrecision { run: Cached::decode(d)?, local: Cached::decode(d)? })
    }
}

/// A case's calibration runs, each computed on first use and shared by its candidates (a
/// case's f16 variants share one f16 run).
#[derive(Debug, Default)]
pub struct PrecisionRuns {
    arbiter: OnceLock<Result<Run, SharedError>>,
    /// f32, f16, bf16; each with the per-layer inputs given, then computed from the stream.
    at: [OnceLock<Result<AtPrecision, SharedError>>; 6],
}

/// Which precision's slot and compute dtype `dtype` computes in (a quantized build: its
/// activations', [`Dtype::compute`]).
pub(super) fn slot(dtype: Dtype) -> Option<(usize, DType)> {
    match dtype.compute() {
        Dtype::Float32 => Some((0, DType::F32)),
        Dtype::Float16 => Some((1, DType::F16)),
        Dtype::Bfloat16 => Some((2, DType::BF16)),
        Dtype::Int4 | Dtype::Int8 => None,
    }
}

/// The calibrated rule that decides `case`'s L3, when one does: `l3_rule: calibrated` (the
/// default) and a row for its dtype.
pub fn calibrated_rule(case: &Case) -> Option<CalibratedRule> {
    if case.l3_rule != L3Rule::Calibrated || !case.levels.contains(&Level::L3) {
        return None;
    }
    case.thresholds(&Tolerances::defaults()).ok()?.l3_calibrated
}

impl PrecisionRuns {
    /// The f64 arbiter's run of `inputs`, teacher-forced with `reference`'s tokens.
    pub fn arbiter(
        &self,
        case: &Case,
        identity: Option<&KeyBuilder>,
        inputs: &ModelInputs,
        reference: &Run,
        build: Option<&QuantizedBuild>,
    ) -> Result<&Run, SharedError> {
        self.arbiter
            .get_or_init(|| {
                super::cached::through(
                    case,
                    identity,
                    "arbiter",
                    |_| {},
                    || {
                        let eos = eos_ids(case);
                        with_reference(case, DType::F64, build, |b| {
                            b.stream_logits();
                            b.run(inputs, &forced(case, &eos, &reference.generation.tokens))
                        })
                    },
                )
            })
            .as_ref()
            .map_err(Arc::clone)
    }

    /// The reference at `dtype`'s precision (see [`AtPrecision`]), its layers fed `arbiter`'s
    /// streams with their per-layer inputs as the export gets them (`ple`).
    #[allow(clippy::too_many_arguments)]
    pub fn at_precision(
        &self,
        case: &Case,
        identity: Option<&KeyBuilder>,
        dtype: Dtype,
        inputs: &ModelInputs,
        reference: &Run,
        arbiter: &Run,
        build: Option<&QuantizedBuild>,
        ple: LocalPle,
    ) -> Result<&AtPrecision, SharedError> {
        let Some((i, compute)) = slot(dtype) else {
            return Err(Arc::new(EvalError::NoArtifact("int4 has no precision of its own to run the reference at")));
        };
        let i = i + if ple == LocalPle::FromStream { 3 } else { 0 };
        self.at[i]
            .get_or_init(|| {
                super::cached::through(case, identity, "floor", floor_key(compute, ple), || {
                    let eos = eos_ids(case);
                    let request = forced(case, &eos, &reference.generation.tokens);
                    with_reference(case, compute, build, |b| {
                        let run = if compute == DType::F32 { None } else { Some(b.run(inputs, &request)?) };
                        Ok(AtPrecision { run, local: b.local_layers(inputs, arbiter, ple)? })
                    })
                })
            })
            .as_ref()
            .map_err(Arc::clone)
    }
}

/// Whether the floor at `dtype`'s precision with `ple` is in the reference cache (then it is
/// read when L3 judges, not computed).
pub fn floor_stored(identity: Option<&KeyBuilder>, dtype: Dtype, ple: LocalPle) -> bool {
    slot(dtype).is_some_and(|(_, compute)| super::cached::is_stored(identity, "floor", floor_key(compute, ple)))
}

/// What distinguishes a floor's cache key within its case.
fn floor_key(compute: DType, ple: LocalPle) -> impl FnOnce(&mut KeyBuilder) {
    move |k: &mut KeyBuilder| {
        k.text("compute", &format!("{compute:?}")).text("ple", &format!("{ple:?}"));
    }
}

/// A run teacher-forced with `tokens`, every position's logits and every layer kept.
pub(super) fn forced<'a>(case: &Case, eos: &'a [i64], tokens: &'a [i64]) -> GenerationRequest<'a> {
    GenerationRequest { max_new_tokens: max_new_tokens(case), eos, forced: Some(tokens), all_position_logits: true, layer_outputs: true }
}

/// Loads the case's reference at `dtype` (on a quantized `build`'s weights where it has them),
/// runs `f` on it and drops it; logs time and peak memory.
pub(super) fn with_reference<T>(
    case: &Case,
    dtype: DType,
    build: Option<&QuantizedBuild>,
    f: impl FnOnce(&mut ReferenceBackend) -> Result<T, BackendError>,
) -> Result<T, SharedError> {
    let artifacts = Artifacts::of(case);
    let dir = artifacts.checkpoint.as_deref().ok_or(EvalError::NoArtifact("the case has no `checkpoint:` for the reference"))?;
    let open = |dir: &Path| load_reference(case, dir, dtype, build);
    Ok(run_loaded(case, "reference", dir, " (calibration)", open, f)?.0)
}

/// The reference at `dtype` on `dir`, on `build`'s weights when given: its payload is read from
/// the graphs now and kept only by the model (matrices dequantized into the model's own, tables
/// gathered from the payload), so no copy of a build's weights outlives the model that used it.
pub(super) fn load_reference(
    case: &Case,
    dir: &Path,
    dtype: DType,
    build: Option<&QuantizedBuild>,
) -> Result<Box<ReferenceBackend>, BackendError> {
    let overrides = build.map(QuantizedBuild::dequantize).transpose()?;
    Ok(Box::new(ReferenceBackend::load_with_overrides(dir, case.bidirectional, dtype, overrides.as_ref())?))
}
/// What the calibrated rule judges with: the f64 arbiter's run (the truth), the reference at the
/// candidate's precision (the floor: the f32 reference itself for an f32 candidate), and that
/// precision's layers run locally on the arbiter's streams (the local floor). All teacher-forced
/// with the reference's tokens, so every decode step compares on one history.
#[derive(Debug, Clone, Copy)]
pub struct Calibration<'a> {
    pub rule: CalibratedRule,
    pub truth: &'a crate::outputs::Run,
    pub floor: &'a crate::outputs::Run,
    pub local: &'a crate::outputs::LocalLayers,
    /// The local truth when it is not the arbiter's own layer outputs: its layers run like the
    /// floor's, conditioned on the candidate's int8 steps at near-ties
    /// ([`super::hinted::HintedLocal`]).
    pub local_truth: Option<&'a crate::outputs::LocalLayers>,
    /// A multimodal package's isolated decoder run's floor and truth when they are not `floor`
    /// and `truth` (conditioned on that run's own int8 steps: [`super::hinted::HintedRuns`]).
    pub isolated: Option<RunPair<'a>>,
}

/// A floor run and its truth.
#[derive(Debug, Clone, Copy)]
pub struct RunPair<'a> {
    pub floor: &'a crate::outputs::Run,
    pub truth: &'a crate::outputs::Run,
}

impl<'a> Calibration<'a> {
    /// What the isolated decoder run is judged with: `isolated`'s pair where given.
    pub fn for_isolated_decoder(&self) -> Calibration<'a> {
        match self.isolated {
            Some(p) => Calibration { floor: p.floor, truth: p.truth, ..*self },
            None => *self,
        }
    }
}
