//! The calibrated floors of a build whose kernel rounds its quantized matmuls' activations to
//! int8 (MLAS at `accuracy_level` 4), conditioned on the candidate's own step at each near-tie
//! (`onnx_parity_reference::weights::rounding`): the reference at the candidate's precision and
//! the f64 arbiter run again with the candidate's activations as rounding hints, so a value within
//! rounding of a step's boundary that ORT rounds one way and the reference the other is no longer
//! a difference of the arithmetic the rule must budget (it cannot: it is a discontinuity). What
//! the candidate computes differently beyond rounding keeps the reference's step and its error.
//!
//! Three runs of the candidate give hints, each conditioning the floors it is judged against:
//! its layers run locally on the arbiter's streams (the local floors), its forced run's prefill
//! (the logits' and the propagated layers' floors; a text-only package's isolated decoder run is
//! that run), and a multimodal package's decoder run in isolation on the arbiter's embeddings.
//! Decode steps are not hinted (one row per matmul; their floors quantize as MLAS does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use candle_core::DType;
use onnx_parity_reference::weights::activations::NearTies;
use onnx_parity_reference::weights::rounding::{Adopted, RoundingHints};
use onnx_parity_reference::weights::ActivationQuant;

use super::cached::through_held;
use super::error::{EvalError, SharedError};
use super::precision::{forced, slot, with_reference, Calibration, RunPair};
use super::request::eos_ids;
use crate::backend::reference::ReferenceBackend;
use crate::backend::BackendError;
use crate::case::Case;
use crate::inputs::{Dense, ModelInputs};
use crate::onnx::quantized::{QuantizedBuild, QuantizedWeight};
use crate::outputs::{Isolation, LocalLayers, Run};
use crate::reference_cache::codec::{Decoder, Encoder};
use crate::reference_cache::{CacheError, Cached, Held, KeyBuilder};
use onnx_parity_reference::model::LocalPle;

/// How close (relative to the scaled value, at least one step) the reference's and the
/// candidate's scaled activation must be for the candidate's step to be taken: above two f32
/// computations' rounding of one activation (measured 3e-6 relative at the fixtures' near-ties;
/// ~√k·ε grows to ~4e-6 at real width), far below a wrong weight's or scale's effect (a x1.25
/// scale moves it by 25 %). At 1e-3 a 4e-4 difference left by an upstream one-step flip was taken
/// too (gemma4-text-ple@int4-acc4, layer 2): not rounding, so not adopted.
pub const NEAR_TIE_TOLERANCE: f64 = 1e-4;

/// One conditioned run's output and the near-ties where it took the candidate's step.
#[derive(Debug)]
pub struct HintedOutput<T> {
    pub output: T,
    pub adopted: Vec<Adopted>,
}

/// A floor and its truth (the reference at the candidate's precision and the f64 arbiter) run
/// with the candidate's activations as rounding hints. Each is held in its cache entry (with the
/// cache off, a temporary file) once made and read when the judge asks: the floor is not beside
/// the f64 model that makes the truth, nor either beside the runs conditioned after them.
#[derive(Debug)]
pub struct Conditioned<T> {
    pub floor: Held<HintedOutput<T>>,
    pub truth: Held<HintedOutput<T>>,
}

impl<T: Cached> Conditioned<T> {
    /// The floor and the truth, read from their entries where they are held.
    pub fn read(&self) -> Result<(&HintedOutput<T>, &HintedOutput<T>), SharedError> {
        Ok((read(&self.floor)?, read(&self.truth)?))
    }
}

/// A held value, its read failure as the evaluation's error.
fn read<T: Cached>(held: &Held<T>) -> Result<&T, SharedError> {
    held.get().map_err(|e| Arc::new(EvalError::Held(e)))
}

/// The local floors conditioned on the candidate's local run: each layer fed the arbiter's stream.
pub type HintedLocal = Conditioned<LocalLayers>;

/// A floor run and its truth, teacher-forced with the reference's tokens, their prefill
/// conditioned on one of the candidate's prefills.
pub type HintedRuns = Conditioned<Run>;

/// The activations a candidate's runs exposed (quantized matmuls' inputs by tensor name), moved
/// out of the runs: the hints' only use, so not kept beside them (at E2B width and 600 positions
/// they are ~1 GB per run of an int8-activation build).
#[derive(Debug, Default)]
pub struct CandidateActivations {
    /// Its forced run's prefill.
    pub forced: BTreeMap<String, Dense<f32>>,
    /// A multimodal package's isolated decoder run.
    pub isolated: BTreeMap<String, Dense<f32>>,
    /// Its layers run locally.
    pub local: BTreeMap<String, Dense<f32>>,
}

impl CandidateActivations {
    /// Whether no run exposed any.
    pub fn is_empty(&self) -> bool {
        self.forced.is_empty() && self.isolated.is_empty() && self.local.is_empty()
    }

    /// Moves them out of a candidate's `forced` run and its `isolation`.
    pub fn take(forced: &mut Run, isolation: &mut Isolation) -> Self {
        let mut out = CandidateActivations { forced: std::mem::take(&mut forced.prefill.activations), ..Default::default() };
        if let Isolation::Done(iso) = isolation {
            out.isolated = std::mem::take(&mut iso.activations);
            out.local = std::mem::take(&mut iso.local_activations);
        }
        out
    }
}

/// Every floor of one candidate conditioned on its int8 steps (see the module doc).
#[derive(Debug, Default)]
pub struct Hinted {
    pub local: Option<HintedLocal>,
    /// The forced run's prefill (a text-only package's isolated decoder run too).
    pub prefill: Option<HintedRuns>,
    /// A multimodal package's isolated decoder run.
    pub isolated: Option<HintedRuns>,
}

impl Hinted {
    /// Each near-tie adopted, with the run whose floors took it (`local`, `prefill`,
    /// `isolated decoder`) and which of them (`floor`, `f64`).
    pub fn adopted(&self) -> Result<Vec<(&'static str, &'static str, &Adopted)>, SharedError> {
        let runs = [
            ("local", self.local.as_ref().map(|l| l.read().map(|(f, t)| (&f.adopted, &t.adopted))).transpose()?),
            ("prefill", self.prefill.as_ref().map(|p| p.read().map(|(f, t)| (&f.adopted, &t.adopted))).transpose()?),
            ("isolated decoder", self.isolated.as_ref().map(|i| i.read().map(|(f, t)| (&f.adopted, &t.adopted))).transpose()?),
        ];
        let mut out = Vec::new();
        for (run, lists) in runs {
            if let Some((floor, truth)) = lists {
                out.extend(floor.iter().map(|a| (run, "floor", a)));
                out.extend(truth.iter().map(|a| (run, "f64", a)));
            }
        }
        Ok(out)
    }

    /// The conditioned local floor, when the local layers are conditioned.
    pub fn local_floor(&self) -> Option<Result<&LocalLayers, SharedError>> {
        self.local.as_ref().map(|l| read(&l.floor).map(|f| &f.output))
    }

    /// `cal` with every floor these runs condition replaced by its conditioned run.
    pub fn calibration<'a>(&'a self, cal: Calibration<'a>) -> Result<Calibration<'a>, SharedError> {
        let mut out = cal;
        if let Some(l) = &self.local {
            let (floor, truth) = l.read()?;
            out.local = &floor.output;
            out.local_truth = Some(&truth.output);
        }
        if let Some(p) = &self.prefill {
            let (floor, truth) = p.read()?;
            out.floor = &floor.output;
            out.truth = &truth.output;
        }
        if let Some(i) = &self.isolated {
            let (floor, truth) = i.read()?;
            out.isolated = Some(RunPair { floor: &floor.output, truth: &truth.output });
        }
        Ok(out)
    }
}

/// The hints a candidate run's `activations` (by tensor name) give `build`'s matmuls (by weight
/// key; matmuls sharing an input share its values); `None` when they give none. A matmul whose
/// kernel rounds its input in MLAS's int8 blocks (a MatMulNBits at `accuracy_level` 4, what
/// the reference on the build's weights models it as) is given only its input's near-ties
/// ([`NearTies`]: the same steps adopted, a few percent of the memory); a graph's own rounding
/// (QDQ, dynamic, QOperator) keeps every value (an output requantized from the candidate's rounded
/// input reads them all).
pub(super) fn hints(build: &QuantizedBuild, mut activations: BTreeMap<String, Dense<f32>>) -> Option<RoundingHints> {
    let blocked = |w: &QuantizedWeight| !w.rounding.any() && !w.op.is_table();
    let all_bytes: usize = activations.values().map(|a| a.data.len() * 4).sum();
    let mut hints = RoundingHints::new(NEAR_TIE_TOLERANCE);
    let mut near_ties: BTreeMap<(String, usize), Arc<NearTies>> = BTreeMap::new();
    // The tensors some matmul reads whole.
    let mut whole: BTreeSet<String> = BTreeSet::new();
    for w in &build.weights {
        let Some((name, a)) = w.activation.as_deref().and_then(|n| activations.get_key_value(n)) else { continue };
        if !blocked(w) {
            whole.insert(name.clone());
            continue;
        }
        let id = (name.clone(), w.block_size);
        let found = match near_ties.get(&id) {
            Some(n) => Some(Arc::clone(n)),
            None => {
                let k = a.shape.last().copied().unwrap_or(0);
                let n = NearTies::new(&a.data, k, &ActivationQuant::Blocks(w.block_size), NEAR_TIE_TOLERANCE).map(Arc::new);
                if let Some(n) = &n {
                    near_ties.insert(id, Arc::clone(n));
                }
                n
            }
        };
        match found {
            Some(n) => hints.insert_near_ties(w.key.clone(), n),
            None => {
                whole.insert(name.clone());
            }
        }
    }
    // Moved, not copied: the run's own buffers.
    let shared: BTreeMap<String, Arc<Vec<f32>>> =
        whole.into_iter().filter_map(|n| activations.remove(&n).map(|d| (n, Arc::new(d.data)))).collect();
    for w in &build.weights {
        if let Some(values) = w.activation.as_deref().and_then(|a| shared.get(a)).filter(|_| !hints.contains(&w.key)) {
            hints.insert(w.key.clone(), Arc::clone(values));
        }
    }
    let kept: usize = near_ties.values().map(|n| n.bytes()).sum::<usize>() + shared.values().map(|v| v.len() * 4).sum::<usize>();
    tracing::debug!("rounding hints: {:.1} MB of the candidate's activations held as {:.1} MB", all_bytes as f64 / 1e6, kept as f64 / 1e6);
    (!hints.is_empty()).then_some(hints)
}

/// Where a conditioned floor is cached: the case's identity, the result's name (`floor` or
/// `f64` is added to it) and what the key adds (the candidate's activations).
pub(super) struct Entry<'a> {
    pub identity: Option<&'a KeyBuilder>,
    pub what: &'static str,
    pub key: &'a dyn Fn(&mut KeyBuilder),
}

/// `run` on the reference at `case`'s precision and on the f64 arbiter, each on `build`'s
/// weights with `hints` active, each cached and held in its entry before the next model loads.
fn conditioned<T: Cached>(
    case: &Case,
    entry: &Entry<'_>,
    build: &QuantizedBuild,
    hints: &RoundingHints,
    run: impl Fn(&mut ReferenceBackend, RoundingHints) -> Result<(T, Vec<Adopted>), BackendError>,
) -> Result<Conditioned<T>, SharedError> {
    let compute = slot(case.dtype).map_or(DType::F32, |(_, d)| d);
    let made = |dtype: DType, which: &str| {
        through_held(case, entry.identity, &format!("{} ({which})", entry.what), entry.key, || {
            let (output, adopted) = with_reference(case, dtype, Some(build), |b| run(b, hints.clone()))?;
            Ok(HintedOutput { output, adopted })
        })
    };
    Ok(Conditioned { floor: made(compute, "floor")?, truth: made(DType::F64, "f64")? })
}

/// [`HintedLocal`] of `case`'s build on its weights `build`, fed `arbiter`'s streams.
#[allow(clippy::too_many_arguments)]
pub(super) fn local(
    case: &Case,
    entry: &Entry<'_>,
    inputs: &ModelInputs,
    arbiter: &Run,
    build: &QuantizedBuild,
    ple: LocalPle,
    hints: &RoundingHints,
) -> Result<HintedLocal, SharedError> {
    conditioned(case, entry, build, hints, |b, h| b.local_layers_hinted(inputs, arbiter, ple, h))
}

/// [`HintedRuns`] of `case`'s build on its weights `build`, teacher-forced with `tokens`. The f64
/// run keeps its all-position logits (not streamed: its head must run while the hints are
/// active), one more `[S, vocab]` tensor for such a build only.
pub(super) fn runs(
    case: &Case,
    entry: &Entry<'_>,
    inputs: &ModelInputs,
    tokens: &[i64],
    build: &QuantizedBuild,
    hints: &RoundingHints,
) -> Result<HintedRuns, SharedError> {
    let eos = eos_ids(case);
    let request = forced(case, &eos, tokens);
    conditioned(case, entry, build, hints, |b, h| b.run_hinted(inputs, &request, h))
}

/// The digest of a candidate's activations (name, shape, values, bit exact) and the near-tie
/// tolerance: what a conditioned floor's cache key adds to the case's identity.
pub fn activations_digest(activations: &BTreeMap<String, Dense<f32>>) -> [u8; 16] {
    let mut key = KeyBuilder::new("activations", "");
    key.text("near-tie tolerance", &NEAR_TIE_TOLERANCE.to_string());
    for (name, a) in activations {
        key.text("activation", name).text("shape", &format!("{:?}", a.shape)).f32s("values", &a.data);
    }
    key.finish().0
}

impl<T: Cached> Cached for HintedOutput<T> {
    fn encode(&self, e: &mut Encoder) -> std::io::Result<()> {
        self.output.encode(e)?;
        self.adopted.encode(e)
    }

    fn decode(d: &mut Decoder) -> Result<Self, CacheError> {
        Ok(HintedOutput { output: T::decode(d)?, adopted: <Vec<Adopted>>::decode(d)? })
    }
}
