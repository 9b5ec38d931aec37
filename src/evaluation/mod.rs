//! Runs a case's implementations once and keeps the results for every tier that needs them
//! (L3, L4 and L5 of one case share one run of each implementation).
//!
//! Every implementation sees the same [`ModelInputs`] through the [`Backend`] interface. The
//! reference runs first and decodes greedily; each candidate (the export, its variants', the
//! case's other `implementations:`)
//! is then teacher-forced with the reference's tokens, so that each decode step compares logits
//! on identical histories, and decodes freely (for L5) only when the forced tokens are not what
//! it would have chosen itself.
//!
//! The runs are sequenced and each back end is dropped when its run is done (only the results
//! are kept), so a case's peak memory is the largest single implementation's, not their sum —
//! what lets a real checkpoint and its export share one machine.

pub mod cached;
mod error;
pub mod hinted;
pub mod implementations;
mod loaded;
pub mod precision;
mod reference_side;
mod request;
mod sharing;
mod weight_errors;

pub use error::{EvalError, SharedError};
use loaded::{run_loaded, run_once, run_once_beside};
use request::request;
pub use request::{eos_ids, max_new_tokens, DEFAULT_MAX_NEW_TOKENS};
use weight_errors::weight_errors;

use std::sync::{Arc, OnceLock};

use crate::artifacts::Artifacts;
use crate::backend::reference::ReferenceBackend;
use crate::backend::{Backend, BackendError, GenerationRequest};
use crate::case::{Candidate, Case, ImplementationName, Level};
use crate::eps::RunEp;
use crate::inputs::replay::IdsDrift;
use crate::inputs::ModelInputs;
use crate::metrics::greedy_token;
use crate::metrics::WeightError;
use crate::onnx::package::{Layout, OnnxPackage};
use crate::onnx::quantized::QuantizedBuild;
use crate::outputs::{GeneratedTokens, Isolation, Run};
use crate::reference_cache::codec::{Decoder, Encoder};
use crate::reference_cache::{CacheError, Cached, Held, KeyBuilder};
use crate::runtime::kernels::MatMulNBitsModel;
use implementations::Implementation;
use onnx_parity_reference::model::LocalPle;
use onnx_parity_reference::weights::name_for;
use onnx_parity_reference::BidirectionalScope;
use precision::Calibration;

/// What the reference computed for a case.
#[derive(Debug, Clone)]
pub struct ReferenceRun {
    /// The mask scope it ran in, for reports.
    pub scope: BidirectionalScope,
    pub run: Run,
}

impl Cached for ReferenceRun {
    fn encode(&self, e: &mut Encoder) -> std::io::Result<()> {
        self.scope.encode(e)?;
        self.run.encode(e)
    }

    fn decode(d: &mut Decoder) -> Result<Self, CacheError> {
        Ok(ReferenceRun { scope: Cached::decode(d)?, run: Cached::decode(d)? })
    }
}

/// What a candidate implementation computed for a case.
#[derive(Debug)]
pub struct CandidateRun {
    /// Its label ([`Implementation::label`], with `@<variant>` for a variant's export).
    pub label: String,
    /// Prefill and the decode fed the reference's tokens (free-running when the reference could
    /// not run).
    pub forced: Run,
    /// Its own greedy decode (`None`: no L5 of this run reads it, and the forced run was not it).
    pub free: Option<GeneratedTokens>,
    /// Its sub-models on the reference's inputs (L3, when the reference ran).
    pub isolation: Isolation,
    /// `partitioned: …` when the EP asked for left compute nodes to the CPU EP.
    pub partitioned: Option<String>,
    /// A build whose kernel quantizes activations to int8: its local floors conditioned on its
    /// own steps at near-ties (None otherwise, or without local activations).
    pub hinted: Option<hinted::Hinted>,
}

/// One candidate and its run, computed on first use.
#[derive(Debug)]
struct CandidateSlot {
    /// Which of the case's `implementations:` it is (`onnx` for the export and every variant's).
    name: ImplementationName,
    implementation: Implementation,
    /// The case variant whose export it runs (`None`: the case's own, or not an export).
    variant: Option<String>,
    /// The execution provider it runs on (a runtime's; the CPU for a model implementation).
    ep: RunEp,
    run: OnceLock<Result<CandidateRun, SharedError>>,
}

/// A quantized build's weights (`dtype: int4` / `int8`): what its graphs say and the weights
/// dequantized, read once per evaluation and shared by its reference runs (f32, the f64
/// arbiter, the floor).
#[derive(Debug)]
pub struct Dequantized {
    /// What the graphs say; the payload is read again for each model that loads it (1.2 s at
    /// E2B width) and kept only by that model, so no copy of it outlives the runs.
    pub build: QuantizedBuild,
    /// Each dequantized weight against the checkpoint's (the weights check of L3).
    pub errors: Vec<WeightError>,
}

/// Lazily computed, shared results for one case.
#[derive(Debug)]
pub struct CaseEvaluation {
    inputs: OnceLock<Result<ModelInputs, SharedError>>,
    /// What the reference side's results are cached under ([`cached::identity`]; `None`: not
    /// cached).
    identity: OnceLock<Option<KeyBuilder>>,
    /// A quantized case's build weights (`None` for a float case).
    dequantized: OnceLock<Result<Option<Dequantized>, SharedError>>,
    reference: OnceLock<Result<ReferenceRun, SharedError>>,
    /// A quantized case's float reference (the checkpoint's own weights), teacher-forced with the
    /// reference's tokens: what the quantization's cost is measured against.
    float_reference: OnceLock<Result<Run, SharedError>>,
    /// The calibrated L3 rule's runs (the f64 arbiter, the reference at each precision).
    precision: precision::PrecisionRuns,
    candidates: Vec<CandidateSlot>,
    /// What the kernel that runs a quantized build's MatMulNBits does with its activations (its
    /// EP's: the reference on the build's weights computes the same, `runtime::kernels`).
    matmul_nbits: MatMulNBitsModel,
    /// Whether a candidate whose forced run is not its own greedy decode decodes again, freely:
    /// only L5 reads that, so a run without L5 skips a whole generation.
    decode_freely: bool,
    /// The reference side's models sharing the checkpoint's matrices until the candidates run
    /// ([`sharing`]).
    matrices: std::sync::Mutex<Option<crate::backend::reference::MatrixScope>>,
}

impl Default for CaseEvaluation {
    /// The evaluation of a case without variants or other implementations, on the CPU.
    fn default() -> Self {
        CaseEvaluation::with_candidates(&[], &[], &[RunEp::Cpu])
    }
}

/// The implementations other than the export that `case` judges.
fn other_implementations(case: &Case) -> Vec<ImplementationName> {
    let names: std::collections::BTreeSet<ImplementationName> =
        case.listed_implementations().map(|e| e.name.clone()).filter(|n| !n.is_onnx()).collect();
    names.into_iter().collect()
}

impl CaseEvaluation {
    /// The evaluation of `case` and its variants: one reference, the candidates for the case's
    /// own export and for each variant's; `variant`: the build a variant's view of the case
    /// ([`Case::view`]) judges, which gets its own candidates.
    pub fn for_case(case: &Case, variant: Option<&str>) -> Self {
        CaseEvaluation::for_case_on(case, variant, &[RunEp::Cpu])
    }

    /// [`CaseEvaluation::for_case`] with candidates on each of `eps` (the plan's EPs).
    pub fn for_case_on(case: &Case, variant: Option<&str>, eps: &[RunEp]) -> Self {
        let variants: Vec<String> = case.variants.keys().cloned().chain(variant.map(str::to_string)).collect();
        CaseEvaluation::with_candidates(&variants, &other_implementations(case), eps)
    }

    /// Candidates for the case's own export, each variant's, and each other implementation, on
    /// each EP a trial of this run may ask for (the CPU and the plan's `selected` ones; a trial's
    /// EP picks its slot, so a build judged on two EPs is two candidates of one reference run).
    fn with_candidates(variants: &[String], others: &[ImplementationName], selected: &[RunEp]) -> Self {
        let mut eps = vec![RunEp::Cpu];
        eps.extend(selected.iter().copied().filter(|e| !e.is_cpu()));
        let mut candidates = Vec::new();
        for &ep in &eps {
            for variant in std::iter::once(None).chain(variants.iter().cloned().map(Some)) {
                let (name, implementation) = (ImplementationName::ONNX, implementations::ONNX_RUNTIME);
                candidates.push(CandidateSlot { name, implementation, variant, ep, run: OnceLock::new() });
            }
        }
        for name in others {
            // The plan refused a case naming an implementation the registry does not hold.
            let Some(implementation) = implementations::candidate(name) else { continue };
            // A runtime runs every build; a model implementation the checkpoint, once.
            let builds: Vec<Option<String>> = match implementation.per_export {
                true => std::iter::once(None).chain(variants.iter().cloned().map(Some)).collect(),
                false => vec![None],
            };
            let on: &[RunEp] = if implementation.per_export { &eps } else { &[RunEp::Cpu] };
            for &ep in on {
                for variant in &builds {
                    candidates.push(CandidateSlot {
                        name: name.clone(),
                        implementation,
                        variant: variant.clone(),
                        ep,
                        run: OnceLock::new(),
                    });
                }
            }
        }
        CaseEvaluation {
            inputs: OnceLock::new(),
            identity: OnceLock::new(),
            dequantized: OnceLock::new(),
            reference: OnceLock::new(),
            float_reference: OnceLock::new(),
            precision: Default::default(),
            candidates,
            matmul_nbits: MatMulNBitsModel::Mlas,
            decode_freely: true,
            matrices: Default::default(),
        }
    }

    /// An evaluation of given inputs (a golden's replayed ids) instead of the case's own, with
    /// candidates for these variants and other implementations.
    pub fn of_inputs(inputs: ModelInputs, variants: &[String], others: &[ImplementationName], eps: &[RunEp]) -> Self {
        let evaluation = CaseEvaluation::with_candidates(variants, others, eps);
        let _ = evaluation.inputs.set(Ok(inputs));
        evaluation
    }

    pub fn inputs(&self, case: &Case) -> Result<&ModelInputs, SharedError> {
        self.inputs.get_or_init(|| crate::inputs::for_case(case).map_err(|e| Arc::new(e.into()))).as_ref().map_err(Arc::clone)
    }

    /// The key parts every reference-side result of `case` is cached under (`None`: the cache
    /// is off, or the case's files or inputs cannot be read: the runs report why).
    fn identity(&self, case: &Case) -> Option<&KeyBuilder> {
        self.identity.get_or_init(|| cached::current_identity(case, self.inputs(case).ok()?, self.matmul_nbits)).as_ref()
    }

    /// A quantized case's build weights, read from its graphs and dequantized on first use;
    /// `None` for a float case. A quantized dtype on a build with no quantized weight is an
    /// error (a float model under a quantized name).
    pub fn dequantized(&self, case: &Case) -> Result<Option<&Dequantized>, SharedError> {
        self.dequantized
            .get_or_init(|| {
                if !case.dtype.is_quantized() {
                    return Ok(None);
                }
                let artifacts = Artifacts::of(case);
                let dir = artifacts.export.as_deref().ok_or(EvalError::NoArtifact("the case has no `onnx:` export"))?;
                let err = |m: String| Arc::new(EvalError::Quantized(m));
                let mut build = QuantizedBuild::read(dir).map_err(|e| err(e.to_string()))?.ok_or_else(|| {
                    err(format!(
                        "{}: dtype {} but no graph has a quantized weight (MatMulNBits, GatherBlockQuantized, DequantizeLinear into a MatMul): a float build under a quantized name",
                        dir.display(),
                        case.dtype
                    ))
                })?;
                build.int8_activations_at = self.matmul_nbits.quantizes_activations(4).then_some(4);
                let checkpoint = artifacts.checkpoint.as_deref().ok_or(EvalError::NoArtifact(implementations::REFERENCE.missing))?;
                // Which checkpoint tensor each quantized weight stands for: its name, else what the
                // graph says it replaced (the node's module path), the two cross-checked.
                let names: Vec<String> = onnx_parity_reference::weights::Weights::open(checkpoint)
                    .map_err(|e| err(e.to_string()))?
                    .names()
                    .map(str::to_string)
                    .collect();
                build.resolve_keys(|k| name_for(k, names.iter().map(String::as_str)).map(str::to_string)).map_err(|e| err(e.to_string()))?;
                tracing::info!("{}: quantized build: {}", case.name, build.summary());
                let errors = cached::through(case, self.identity(case), "weight errors", |_| {}, || {
                    let weights = build.dequantize().map_err(|e| err(e.to_string()))?;
                    weight_errors(&build, &weights, checkpoint)
                })?;
                Ok(Some(Dequantized { build, errors }))
            })
            .as_ref()
            .map(Option::as_ref)
            .map_err(Arc::clone)
    }

    /// The quantized build whose weights the reference runs on (`None`: the checkpoint's).
    fn build(&self, case: &Case) -> Result<Option<&QuantizedBuild>, SharedError> {
        Ok(self.dequantized(case)?.map(|d| &d.build))
    }

    /// A quantized case's float reference run, teacher-forced with the reference's tokens;
    /// `None` for a float case.
    pub fn float_reference(&self, case: &Case) -> Option<Result<&Run, SharedError>> {
        if !case.dtype.is_quantized() {
            return None;
        }
        Some(
            self.float_reference
                .get_or_init(|| {
                    let (inputs, reference) = (self.inputs(case)?, &self.reference(case)?.run);
                    cached::through(
                        case,
                        self.identity(case),
                        "float reference",
                        |_| {},
                        || {
                            let eos = eos_ids(case);
                            let request =
                                GenerationRequest { layer_outputs: false, ..precision::forced(case, &eos, &reference.generation.tokens) };
                            // Its all-position logits streamed (the cost is made slice by slice): the
                            // float model is the last one loaded, beside the runs already held.
                            precision::with_reference(case, candle_core::DType::F32, None, |b| {
                                b.stream_logits();
                                b.run(inputs, &request)
                            })
                        },
                    )
                })
                .as_ref()
                .map_err(Arc::clone),
        )
    }

    /// Runs the reference (prefill with components and logits, then greedy decoding), on a
    /// quantized case's dequantized weights.
    pub fn reference(&self, case: &Case) -> Result<&ReferenceRun, SharedError> {
        self.reference
            .get_or_init(|| {
                let inputs = self.inputs(case)?;
                let build = self.build(case)?;
                cached::through(
                    case,
                    self.identity(case),
                    "reference",
                    |_| {},
                    || {
                        self.share_matrices(case);
                        self.run_reference(case, inputs, build)
                    },
                )
            })
            .as_ref()
            .map_err(Arc::clone)
    }

    fn run_reference(&self, case: &Case, inputs: &ModelInputs, build: Option<&QuantizedBuild>) -> Result<ReferenceRun, SharedError> {
        let eos = eos_ids(case);
        let (run, opened) = match build {
            None => run_once(&implementations::REFERENCE, case, RunEp::Cpu, |backend| backend.run(inputs, &request(case, &eos, None)))?,
            Some(build) => {
                let artifacts = Artifacts::of(case);
                let dir = artifacts.checkpoint.as_deref().ok_or(EvalError::NoArtifact(implementations::REFERENCE.missing))?;
                let open = |dir: &std::path::Path| precision::load_reference(case, dir, candle_core::DType::F32, Some(build));
                run_loaded(case, "reference", dir, "", open, |b: &mut ReferenceBackend| b.run(inputs, &request(case, &eos, None)))?
            }
        };
        let scope = opened.scope.unwrap_or(BidirectionalScope::None);
        Ok(ReferenceRun { scope, run })
    }

    /// The f64 arbiter's run of the case's inputs, teacher-forced with the reference's tokens
    /// (the calibrated L3 rule's truth).
    pub fn arbiter(&self, case: &Case) -> Result<&Run, SharedError> {
        self.precision.arbiter(case, self.identity(case), self.inputs(case)?, &self.reference(case)?.run, self.build(case)?)
    }

    /// What the calibrated rule judges `case`'s candidates with, when it decides their L3
    /// ([`precision::calibrated_rule`]); an error when a run it needs failed (L3 fails with it).
    pub fn calibration(&self, case: &Case) -> Option<Result<Calibration<'_>, SharedError>> {
        self.calibration_with(case, None)
    }

    /// [`CaseEvaluation::calibration`] for candidates whose local floors are all conditioned on
    /// their own int8 steps (`conditioned`: one of them, [`hinted::Hinted::local`], which each
    /// candidate's own then replaces): an f32-computing build's unconditioned local floor, which
    /// no such candidate is judged against, is not made (at full E2B size 42 s and 0.9 GB).
    pub fn calibration_with<'a>(
        &'a self,
        case: &Case,
        conditioned: Option<&'a crate::outputs::LocalLayers>,
    ) -> Option<Result<Calibration<'a>, SharedError>> {
        let rule = precision::calibrated_rule(case)?;
        let get = || -> Result<Calibration<'a>, SharedError> {
            let (inputs, reference) = (self.inputs(case)?, &self.reference(case)?.run);
            let build = self.build(case)?;
            let id = self.identity(case);
            let truth = self.precision.arbiter(case, id, inputs, reference, build)?;
            let f32_floor = precision::slot(case.dtype).is_some_and(|(_, compute)| compute == candle_core::DType::F32);
            if let Some(local) = conditioned.filter(|_| f32_floor) {
                return Ok(Calibration { rule, truth, floor: reference, local, local_truth: None, isolated: None });
            }
            let at = self.precision.at_precision(case, id, case.dtype, inputs, reference, truth, build, local_ple(case))?;
            Ok(Calibration {
                rule,
                truth,
                floor: at.run.as_ref().unwrap_or(reference),
                local: &at.local,
                local_truth: None,
                isolated: None,
            })
        };
        Some(get())
    }

    /// The runs of `candidate` (`case` is its view, [`Case::view`]): the prefill, the forced
    /// decode (when the reference is available) and the free one. Each runs on first use, after
    /// the reference.
    pub fn candidates(&self, case: &Case, candidate: &Candidate) -> Vec<Result<&CandidateRun, SharedError>> {
        let variant = candidate.variant.as_deref();
        let found: Vec<_> = (0..self.candidates.len())
            .filter(|&i| {
                let c = &self.candidates[i];
                c.variant.as_deref() == variant
                    && c.name == candidate.implementation
                    && (c.ep == candidate.ep || !c.implementation.per_export)
            })
            .map(|i| self.candidate(i, case))
            .collect();
        if found.is_empty() {
            return vec![Err(Arc::new(EvalError::NoCandidate(candidate.id(case))))];
        }
        found
    }

    fn candidate(&self, i: usize, case: &Case) -> Result<&CandidateRun, SharedError> {
        let c = &self.candidates[i];
        c.run
            .get_or_init(|| {
                let inputs = self.inputs(case)?;
                let free = self.decode_freely;
                let runs = |backend: &mut dyn Backend, (reference, oracle): (Option<&Run>, Option<&Run>)| {
                    candidate_runs(case, backend, inputs, reference, oracle, free)
                };
                let (mut run, opened) = if self.reference_side_stored(case) {
                    // Read from the cache while the candidate's back end opens.
                    let (run, opened) = run_once_beside(
                        &c.implementation,
                        case,
                        c.ep,
                        || self.reference_side(case),
                        |backend, side| match side {
                            Ok(side) => runs(backend, side).map(Ok),
                            // Not run: the error is the candidate's (L3 reports it).
                            Err(e) => Ok(Err(e)),
                        },
                    )?;
                    (run?, opened)
                } else {
                    let side = self.reference_side(case)?;
                    run_once(&c.implementation, case, c.ep, |backend| runs(backend, side))?
                };
                let activations = hinted::CandidateActivations::take(&mut run.0, &mut run.2);
                let (forced, isolation, hinted) = match self.conditioning(case)?.filter(|_| !activations.is_empty()) {
                    // The candidate's runs wait on disk while each conditioned floor's model runs
                    // (at full E2B size ≈ 1.5 GB that sat beside the f64 model).
                    Some(build) => {
                        let (forced, isolation) =
                            (Held::spill("the candidate's forced run", run.0), Held::spill("the candidate's isolation", run.2));
                        // Their four models share the build's dequantized matrices ([`sharing`]).
                        self.share_matrices(case);
                        let hinted = self.hinted(case, build, activations);
                        self.end_sharing();
                        let hinted = hinted?;
                        let back = |e| Arc::new(EvalError::Held(e));
                        (forced.into_inner().map_err(back)?, isolation.into_inner().map_err(back)?, hinted)
                    }
                    None => (run.0, run.2, None),
                };
                let label = match &c.variant {
                    None => c.implementation.label.to_string(),
                    Some(v) => format!("{}@{v}", c.implementation.label),
                };
                Ok(CandidateRun { label, forced, free: run.1, isolation, partitioned: opened.partitioned, hinted })
            })
            .as_ref()
            .map_err(Arc::clone)
    }
}

impl CaseEvaluation {
    /// The quantized build whose candidates' floors are conditioned on their int8 steps: one whose
    /// kernel quantizes activations, under the calibrated rule; `None` otherwise.
    fn conditioning(&self, case: &Case) -> Result<Option<&QuantizedBuild>, SharedError> {
        Ok(self.dequantized(case)?.map(|d| &d.build).filter(|b| b.quantizes_activations() && precision::calibrated_rule(case).is_some()))
    }

    /// The floors of `case`'s candidate conditioned on its int8 steps (`activations`) on `build`
    /// ([`CaseEvaluation::conditioning`]); `None` when they give no hints.
    fn hinted(
        &self,
        case: &Case,
        build: &QuantizedBuild,
        activations: hinted::CandidateActivations,
    ) -> Result<Option<hinted::Hinted>, SharedError> {
        let (inputs, reference) = (self.inputs(case)?, &self.reference(case)?.run);
        let tokens = &reference.generation.tokens;
        let mut out = hinted::Hinted::default();
        let id = self.identity(case);
        // Each conditioned floor is cached under the candidate's activations too.
        let digest = hinted::activations_digest;
        let (local_digest, isolated_digest, forced_digest) =
            (digest(&activations.local), digest(&activations.isolated), digest(&activations.forced));
        // Made before any conditioned run, so the candidate's activations are gone by then (at
        // full E2B size 1.4 GB per run; the near-ties its int4 build's hints keep, a few percent).
        let (local, isolated, forced) =
            (hinted::hints(build, activations.local), hinted::hints(build, activations.isolated), hinted::hints(build, activations.forced));
        if let Some(h) = local {
            let arbiter = self.precision.arbiter(case, id, inputs, reference, Some(build))?;
            let ple = local_ple(case);
            let key = |k: &mut KeyBuilder| {
                k.add("activations", &local_digest).text("ple", &format!("{ple:?}"));
            };
            let entry = hinted::Entry { identity: id, what: "conditioned local layers", key: &key };
            out.local = Some(hinted::local(case, &entry, inputs, arbiter, build, ple, &h)?);
        }
        if let Some(h) = isolated {
            let key = |k: &mut KeyBuilder| {
                k.add("activations", &isolated_digest);
            };
            let entry = hinted::Entry { identity: id, what: "conditioned isolated decoder", key: &key };
            out.isolated = Some(hinted::runs(case, &entry, inputs, tokens, build, &h)?);
        }
        if let Some(h) = forced {
            let key = |k: &mut KeyBuilder| {
                k.add("activations", &forced_digest);
            };
            let entry = hinted::Entry { identity: id, what: "conditioned prefill", key: &key };
            out.prefill = Some(hinted::runs(case, &entry, inputs, tokens, build, &h)?);
        }
        Ok((out.local.is_some() || out.prefill.is_some() || out.isolated.is_some()).then_some(out))
    }
}

/// Where the export under judgment gets its per-layer inputs when its layers run locally: a
/// text-only graph computes them from `input_ids` and the stream it is fed entering layer 0, a
/// multimodal package's decoder is fed them (the arbiter's). Without an export (another
/// implementation judged, or no package yet) they are given.
fn local_ple(case: &Case) -> LocalPle {
    let artifacts = Artifacts::of(case);
    match artifacts.export.as_deref().map(OnnxPackage::open) {
        Some(Ok(p)) if p.layout == Layout::TextOnly => LocalPle::FromStream,
        _ => LocalPle::Given,
    }
}

/// A case's evaluations (its variants' included): the synthetic stand-in's (L1, L3, when the case has `synthetic:`), the
/// real artifacts' on the case's own inputs (L3 without a stand-in; L4/L5 when a golden's ids
/// are the same), and the real artifacts' on a golden's replayed `input_ids` (L4/L5 when they
/// differ, [`crate::inputs::replay`]). Each runs at most once and is shared by the tiers using it.
#[derive(Debug, Default)]
pub struct CaseEvaluations {
    pub real: CaseEvaluation,
    pub synthetic: CaseEvaluation,
    /// The evaluation of a golden's ids and how they differ from the case's; `None` when they
    /// are the case's own, so the real evaluation serves.
    replay: OnceLock<Result<Option<(CaseEvaluation, IdsDrift)>, SharedError>>,
    /// The case's variants and other implementations (a replayed evaluation needs their
    /// candidates too).
    variants: Vec<String>,
    others: Vec<ImplementationName>,
    /// The quantized kernels' model its evaluations share (a replayed one too).
    matmul_nbits: MatMulNBitsModel,
    /// The EPs its candidates run on (the plan's).
    eps: Vec<RunEp>,
}

impl CaseEvaluations {
    /// The evaluations of `case` and its variants (one reference run each, shared by them all),
    /// their candidates on the CPU.
    pub fn for_case(case: &Case) -> Self {
        CaseEvaluations::for_build(case, None)
    }

    /// [`CaseEvaluations::for_case`] with candidates on each of the plan's `eps`.
    pub fn for_case_on(case: &Case, eps: &[RunEp]) -> Self {
        CaseEvaluations::for_build_on(case, None, RunEp::Cpu, eps)
    }

    /// The evaluations of a variant's view of a case (`case`, [`Case::view`]) when that build
    /// needs its own (a quantized build is judged against the reference on its own weights), as
    /// the CPU EP's kernels run it.
    pub fn for_build(case: &Case, variant: Option<&str>) -> Self {
        CaseEvaluations::for_build_on(case, variant, RunEp::Cpu, &[RunEp::Cpu])
    }

    /// [`CaseEvaluations::for_build`] as `ep`'s kernels run a quantized build (its MatMulNBits'
    /// activations: [`MatMulNBitsModel::of`]), with candidates on each of the plan's `eps`.
    pub fn for_build_on(case: &Case, variant: Option<&str>, ep: RunEp, eps: &[RunEp]) -> Self {
        let model = MatMulNBitsModel::of(ep);
        let on = |mut e: CaseEvaluation| {
            e.matmul_nbits = model;
            e
        };
        CaseEvaluations {
            real: on(CaseEvaluation::for_case_on(case, variant, eps)),
            synthetic: on(CaseEvaluation::for_case_on(case, variant, eps)),
            replay: OnceLock::new(),
            variants: case.variants.keys().cloned().chain(variant.map(str::to_string)).collect(),
            others: other_implementations(case),
            matmul_nbits: model,
            eps: eps.to_vec(),
        }
    }

    /// These evaluations for a run that does (`true`, the default) or does not run L5: without
    /// it a candidate is not decoded a second time, freely, when its forced run was not its own
    /// greedy decode (a broken export's: a whole generation saved).
    pub fn decoding_freely(mut self, needed: bool) -> Self {
        self.real.decode_freely = needed;
        self.synthetic.decode_freely = needed;
        self
    }

    /// The evaluation tier `level` runs on, when no golden's ids are replayed.
    pub fn for_level(&self, level: Level, case: &Case) -> &CaseEvaluation {
        match level {
            Level::L1 | Level::L3 if case.synthetic.is_some() => &self.synthetic,
            _ => &self.real,
        }
    }

    /// The real evaluation on `golden_ids` (L4/L5), and where the case's own ids first differ
    /// from them (`None` when equal: then it is the real evaluation itself). The first call
    /// fixes the ids: a case's L4 and L5 replay the same golden file.
    pub fn replayed(&self, case: &Case, golden_ids: &[i64]) -> Result<(&CaseEvaluation, Option<&IdsDrift>), SharedError> {
        let replay = self
            .replay
            .get_or_init(|| {
                let ours = self.real.inputs(case)?;
                let (inputs, drift) = crate::inputs::replay::with_golden_ids(ours, golden_ids).map_err(|e| Arc::new(e.into()))?;
                if let Some(d) = &drift {
                    tracing::warn!("{}: {d}; L4/L5 replay the golden's input_ids", case.name);
                }
                let of_inputs = |i| {
                    let mut e = CaseEvaluation::of_inputs(i, &self.variants, &self.others, &self.eps);
                    e.matmul_nbits = self.matmul_nbits;
                    e.decode_freely = self.real.decode_freely;
                    e
                };
                Ok(drift.map(|d| (of_inputs(inputs), d)))
            })
            .as_ref()
            .map_err(Arc::clone)?;
        Ok(match replay {
            Some((evaluation, drift)) => (evaluation, Some(drift)),
            None => (&self.real, None),
        })
    }
}

/// A candidate's forced run, its free-running decode (the same run when they agree) and, with
/// L3, its sub-models judged on the reference's inputs.
fn candidate_runs(
    case: &Case,
    backend: &mut dyn Backend,
    inputs: &ModelInputs,
    reference: Option<&Run>,
    oracle: Option<&Run>,
    decode_freely: bool,
) -> Result<(Run, Option<GeneratedTokens>, Isolation), BackendError> {
    let eos = eos_ids(case);
    let max_new = max_new_tokens(case);
    let forced = reference.map(|r| r.generation.tokens.as_slice());
    if reference.is_some() && case.levels.contains(&Level::L3) {
        backend.will_isolate();
    }
    let forced_run = backend.run(inputs, &request(case, &eos, forced))?;
    let (Some(f), Some(reference)) = (forced, reference) else {
        // Without reference tokens the run above already decoded freely.
        let free = forced_run.generation.clone();
        return Ok((forced_run, Some(free), Isolation::NotRun));
    };
    // The forced run already is the candidate's own greedy decode if at every step its argmax
    // equals the forced token (and stopping agrees); otherwise decode freely.
    let g = &forced_run.generation;
    let agrees = g.step_logits.len() == f.len()
        && g.step_logits.iter().zip(f).all(|(l, &t)| greedy_token(l) == Some(t))
        && (g.tokens.len() == max_new || g.tokens.last().is_some_and(|t| eos.contains(t)));
    let free = if agrees && !backend.searches_itself() {
        Some(g.clone())
    } else if decode_freely {
        // Only the forced run's prefill is compared per layer.
        Some(backend.run(inputs, &GenerationRequest { layer_outputs: false, ..request(case, &eos, None) })?.generation)
    } else {
        None
    };
    let isolation = if case.levels.contains(&Level::L3) {
        let t = std::time::Instant::now();
        let isolation = backend.isolated(inputs, oracle.unwrap_or(reference), &forced_run).unwrap_or_else(|e| {
            tracing::warn!("{}: the sub-models could not be judged in isolation: {e}", case.name);
            Isolation::Failed(e.to_string())
        });
        tracing::info!("{}: isolation and local layer runs took {:.2} s", case.name, t.elapsed().as_secs_f64());
        isolation
    } else {
        Isolation::NotRun
    };
    Ok((forced_run, free, isolation))
}
