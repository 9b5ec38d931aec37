//! Skips that can be known without running a model (`skip_reason`, `ci_skip_reason`, a level the
//! case does not request, a missing checkpoint, export or golden, an export ONNX Runtime accepts
//! but has no kernels for on this run's EP), decided when the trial list is built: nextest counts
//! a run-time skip as a pass, which would hide it. Every reason says how to provide what is
//! missing. A failure is never a skip: an export ORT rejects runs, and fails with ORT's error.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::options::RunOptions;
use crate::artifacts::{export_hint, has_weights, Artifacts};
use crate::case::{Candidate, Case, Level};
use crate::eps::{BuildTarget, Ep, RunEp};
use crate::golden::golden_paths;
use crate::onnx::graph::GraphSummary;
use crate::onnx::protocol;

/// Why a trial is skipped: what strict mode (`--strict`, `ONNX_PARITY_STRICT=1`) turns into a
/// failure is a missing artifact; the rest stay skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipCause {
    /// The case asked for it: a level it does not request, `skip_reason`, `ci_skip_reason`, a tier
    /// that judges the config once (L2 of a variant or off the CPU).
    Asked,
    /// An artifact the trial needs is not there: export, checkpoint (config, weights), golden.
    MissingArtifact,
    /// This machine cannot run it: the EP's kernels or device are missing here (a bf16 build on
    /// the CPU EP).
    Environment,
    /// The build or implementation cannot run it anywhere the harness drives: not built for the
    /// trial's EP, no EP runs a node of it, an implementation lacking a feature, audio, a text
    /// component asked for images.
    Unsupported,
}

/// A skip known before running, with its cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub cause: SkipCause,
    pub reason: String,
}

impl Skip {
    fn new(cause: SkipCause, reason: impl Into<String>) -> Skip {
        Skip { cause, reason: reason.into() }
    }
}

/// The reason a trial will not run, if it can be known before running it.
pub fn static_skip(case: &Case, candidate: &Candidate, level: Level, opts: &RunOptions) -> Option<String> {
    skip_of(case, candidate, level, opts).map(|s| s.reason)
}

/// [`static_skip`] with its cause.
pub fn skip_of(case: &Case, candidate: &Candidate, level: Level, opts: &RunOptions) -> Option<Skip> {
    use SkipCause::{Asked, Environment, MissingArtifact, Unsupported};
    if !case.levels.contains(&level) {
        let listed = case.levels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
        return Some(Skip::new(Asked, format!("the case does not request {level} (levels: {listed})")));
    }
    if let Some(r) = &case.skip_reason {
        return Some(Skip::new(Asked, format!("skip_reason: {r}")));
    }
    if opts.ci {
        if let Some(r) = &case.ci_skip_reason {
            return Some(Skip::new(Asked, format!("ci_skip_reason (CI is set): {r}")));
        }
    }
    if !case.inputs.audio.is_empty() {
        return Some(Skip::new(Unsupported, "audio inputs are out of scope: the reference implements text and vision only"));
    }
    if onnx_parity_reference::ModelType::parse(&case.model_type).is_err() {
        return Some(Skip::new(
            Unsupported,
            format!(
                "model_type {:?} is not implemented (the reference covers gemma4, gemma4_text, gemma4_unified, gemma4_unified_text)",
                case.model_type
            ),
        ));
    }
    if !candidate.ep.is_cpu() {
        if let Some(skip) = ep_skip(&tier_case(case, level), candidate, level) {
            return Some(skip);
        }
    }
    if !candidate.implementation.is_onnx() {
        return implementation_skip(&tier_case(case, level), candidate, level, opts);
    }
    if candidate.variant.is_some() && level == Level::L2 {
        return Some(Skip::new(Asked, "L2 judges the model's config and checkpoint, the same for every build: see the case's own L2"));
    }
    let case = tier_case(case, level);
    let case = case.as_ref();
    let artifacts = Artifacts::of(case);
    if matches!(level, Level::L3 | Level::L4 | Level::L5) {
        if let Some(export) = artifacts.export.as_deref() {
            if let Some(reason) = not_runnable_here(case, export, candidate.ep) {
                return Some(Skip::new(Environment, reason));
            }
            let unsupported =
                no_ep_runs_it(export, candidate.ep).or_else(|| text_component_only(case, export)).or_else(|| no_embedding_model(export));
            if let Some(reason) = unsupported {
                return Some(Skip::new(Unsupported, reason));
            }
        }
    }
    let missing = match level {
        Level::L1 | Level::L3 => artifact_skip(case, &artifacts, level == Level::L3),
        Level::L2 => artifacts.config.is_none().then(|| {
            format!(
                "no real config: add `config: <config.json>` to {}, or provide the checkpoint (`checkpoint:`, or {}@{} in the HF cache)",
                case.path.display(),
                case.model_id,
                case.revision.as_deref().unwrap_or("main")
            )
        }),
        Level::L4 | Level::L5 => match &artifacts.export {
            None => Some(format!(
                "no export of {}: add `onnx: <export folder>` to {} or put it at {} (`python -m mobius build --config <checkpoint> <folder> --dtype {}`)",
                case.model_id,
                case.path.display(),
                export_hint(case),
                case.dtype.as_str()
            )),
            Some(dir) if case.onnx.is_some() && !dir.is_dir() => {
                Some(format!("ONNX export {} does not exist: export it (scripts/make-fixtures.sh for fixtures)", dir.display()))
            }
            Some(_) => golden_skip(case, level, opts),
        },
    };
    missing.map(|reason| Skip::new(MissingArtifact, reason))
}

/// Why a trial on `candidate.ep` (not the CPU) does not run: L2 judges the config, the same on
/// every EP; the build is not for that EP ([`build_target`]); the implementation does not run on it.
fn ep_skip(case: &Case, candidate: &Candidate, level: Level) -> Option<Skip> {
    if level == Level::L2 {
        return Some(Skip::new(
            SkipCause::Asked,
            format!("L2 judges the model's config and checkpoint, the same on every EP: see its CPU trial (not {})", candidate.ep),
        ));
    }
    if let Some(reason) = crate::evaluation::implementations::candidate(&candidate.implementation).and_then(|i| (i.not_on)(candidate.ep)) {
        return Some(Skip::new(SkipCause::Unsupported, reason));
    }
    build_target(case).not_for(candidate.ep).map(|reason| Skip::new(SkipCause::Unsupported, reason))
}

/// Which EPs the case's build is for, from what its case or exporter wrote: the case's (or
/// variant's) `export.ep`, else the package's `genai_config.json` provider options, else
/// portable (mobius-onnx 0.1.0 records no EP in its graphs: `metadata_props` is empty).
pub fn build_target(case: &Case) -> BuildTarget {
    if let Some(ep) = case.export.as_ref().and_then(|p| p.ep) {
        return BuildTarget { ep: Some(ep), source: "export.ep in the case" };
    }
    let config = Artifacts::of(case).export.and_then(|dir| crate::onnx::genai_config::GenAiConfig::read(&dir).ok().flatten());
    match config.as_ref().and_then(|c| c.target_ep()) {
        Some(ep) => BuildTarget { ep: Some(ep), source: "its genai_config.json's provider_options" },
        None => BuildTarget::PORTABLE,
    }
}

/// An implementation other than the export's pipeline loads its artifact (the checkpoint, or the
/// export as another runtime runs it); it must implement what the model and the prompt use (a
/// feature it lacks is a skip naming it, never a silently different model that passes or
/// fails); L4/L5 need the goldens. An unreadable config is not a skip: the run fails and says why.
fn implementation_skip(case: &Case, candidate: &Candidate, level: Level, opts: &RunOptions) -> Option<Skip> {
    use SkipCause::{Environment, MissingArtifact, Unsupported};
    let name = &candidate.implementation;
    let Some(implementation) = crate::evaluation::implementations::candidate(name) else {
        return Some(Skip::new(Unsupported, format!("no implementation is named {name:?} (see `onnx-parity logits --help`)")));
    };
    let artifacts = Artifacts::of(case);
    if implementation.per_export {
        let Some(dir) = artifacts.export.as_deref() else {
            return Some(Skip::new(
                MissingArtifact,
                format!("{name} runs the export: add `onnx: <export folder>` to {}", case.path.display()),
            ));
        };
        if !dir.is_dir() {
            return Some(Skip::new(
                MissingArtifact,
                format!("{name} runs the export {}, which is missing: {}", dir.display(), export_hint(case)),
            ));
        }
        // What keeps the pipeline from running the build keeps another runtime on the same
        // execution provider from it too (kernels the build's EP has and the CPU lacks, a
        // package that cannot run alone).
        if let Some(reason) = not_runnable_here(case, dir, candidate.ep) {
            return Some(Skip::new(Environment, reason));
        }
        if let Some(reason) =
            no_ep_runs_it(dir, candidate.ep).or_else(|| no_embedding_model(dir)).or_else(|| (implementation.unsupported)(case, dir))
        {
            return Some(Skip::new(Unsupported, reason));
        }
    } else {
        let Some(dir) = &artifacts.checkpoint else {
            return Some(Skip::new(
                MissingArtifact,
                format!("{name} loads the checkpoint: add `checkpoint: <HF folder with config.json>` to {}", case.path.display()),
            ));
        };
        if let Some(reason) = incomplete_checkpoint(dir, true) {
            return Some(Skip::new(MissingArtifact, reason));
        }
        if let Some(reason) = (implementation.unsupported)(case, dir) {
            return Some(Skip::new(Unsupported, reason));
        }
    }
    if matches!(level, Level::L4 | Level::L5) {
        return golden_skip(case, level, opts).map(|reason| Skip::new(MissingArtifact, reason));
    }
    None
}

/// The golden `level` compares with, when it is missing.
fn golden_skip(case: &Case, level: Level, opts: &RunOptions) -> Option<String> {
    let (json, generation) = golden_paths(&opts.goldens_for(case), &case.category, &case.name);
    let needed = if level == Level::L4 { json } else { generation };
    (!needed.is_file()).then(|| {
        format!(
            "golden {} is missing: run `onnx-parity golden {}` on a machine with the checkpoint, or point \
             ONNX_PARITY_GOLDENS / --goldens at a folder that has it (mobius's testdata/golden uses the same format)",
            needed.display(),
            case.path.display()
        )
    })
}

/// L1 and L3 need the checkpoint's config and the export (the case's own, a stand-in's, or found
/// in the HF cache and `ONNX_PARITY_EXPORTS`); L3 also the checkpoint's weights.
fn artifact_skip(case: &Case, artifacts: &Artifacts, needs_weights: bool) -> Option<String> {
    let hint = || match &case.synthetic {
        Some(_) => String::new(),
        None => " (or a `synthetic:` stand-in)".to_string(),
    };
    match &artifacts.checkpoint {
        None => {
            return Some(format!(
                "no local checkpoint: add `checkpoint: <HF folder with config.json>`{} to {}",
                hint(),
                case.path.display()
            ))
        }
        Some(dir) => {
            if let Some(reason) = incomplete_checkpoint(dir, needs_weights) {
                return Some(reason);
            }
        }
    }
    match (&artifacts.export, &case.onnx) {
        (None, _) => Some(format!("no ONNX export: add `onnx: <export folder>`{} to {}", hint(), case.path.display())),
        (Some(dir), Some(_)) if !dir.is_dir() => {
            Some(format!("ONNX export {} does not exist: export it (scripts/make-fixtures.sh for fixtures)", dir.display()))
        }
        _ => None,
    }
}

/// What a checkpoint folder lacks: its config.json, or (`needs_weights`) its safetensors.
fn incomplete_checkpoint(dir: &Path, needs_weights: bool) -> Option<String> {
    if !dir.join("config.json").is_file() {
        return Some(format!("checkpoint {} has no config.json: download or regenerate it", dir.display()));
    }
    (needs_weights && !has_weights(dir))
        .then(|| format!("checkpoint {} has no safetensors weights: download or regenerate them", dir.display()))
}

/// Why an export cannot run on this run's execution provider: ONNX Runtime accepts its graph
/// but has no kernel here for an op at its dtype (bf16 MatMul/Mul on the CPU EP). ORT's verdict is
/// L1's ([`super::l1::load`]: the sub-models loaded on the CPU EP), reached once per export and
/// process on a CPU run; only a bf16 export or one with an op whose CPU kernel refuses some
/// configurations (MoE) is loaded (the CPU EP has kernels for the other ops of mobius's f32 and
/// f16 builds), so listing the trials loads nothing else. A graph ORT
/// rejects (a type error, the same on every EP) is no skip: L3–L5 run and fail with the load
/// error, as they would anywhere.
/// An export of a multimodal checkpoint's text component alone (one `model.onnx`, as ORT GenAI's
/// model builder writes for `Gemma4UnifiedForConditionalGeneration`) asked to run a case with
/// images: there is no vision encoder to run them through.
fn text_component_only(case: &Case, export: &Path) -> Option<String> {
    let images = !case.inputs.images.is_empty()
        || case.inputs.tensors.as_deref().is_some_and(|t| {
            onnx_parity_reference::weights::tensor_names(t).is_ok_and(|names| names.iter().any(|n| n == protocol::PIXEL_VALUES))
        });
    let package = crate::onnx::package::OnnxPackage::open(export).ok()?;
    (images && package.layout == crate::onnx::package::Layout::TextOnly).then(|| {
        format!(
            "text component only: {} is the text model alone (no vision encoder), and this case's inputs have images; \
             judge it on a text case of the same checkpoint",
            export.display()
        )
    })
}

/// A text-only package whose decoder takes `inputs_embeds` (ORT GenAI's `exclude_embeds`): the
/// embedding lives in a model the package does not hold, so nothing can run it alone (L1 fails it
/// saying so). Memoised per export folder, as listing the trials asks once per level.
fn no_embedding_model(export: &Path) -> Option<String> {
    static VERDICTS: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let verdicts = VERDICTS.get_or_init(Mutex::default);
    if let Some(v) = verdicts.lock().unwrap_or_else(|e| e.into_inner()).get(export) {
        return v.clone();
    }
    let verdict = (|| {
        use crate::onnx::package::{Layout, OnnxPackage};
        use crate::onnx::protocol::{ExportProtocol, Feed};
        let package = OnnxPackage::open(export).ok().filter(|p| p.layout == Layout::TextOnly)?;
        let protocol = ExportProtocol::of_package(&package).ok()?;
        let input = protocol.decoder_inputs.iter().find(|n| protocol.feed(n) == Feed::NoEmbeddingModel)?;
        Some(format!(
            "no embedding model: {}'s decoder takes `{input}` and the package has no model that makes it (an ORT GenAI \
             `exclude_embeds` build); it runs only beside the embedding model it was built for",
            export.display()
        ))
    })();
    verdicts.lock().unwrap_or_else(|e| e.into_inner()).insert(export.to_path_buf(), verdict.clone());
    verdict
}

fn not_runnable_here(case: &Case, export: &Path, run: RunEp) -> Option<String> {
    if !run.is_cpu() || no_ep_runs_it(export, run).is_some() {
        return None;
    }
    let missing = kernels_missing_on_cpu(export)?;
    let missing: Vec<String> = missing.iter().map(|(role, what)| format!("{role}: {what}")).collect();
    let var = crate::eps::EP_VAR;
    let build = case.export.as_ref().and_then(|p| p.ep);
    let there = match (build, build.and_then(RunEp::for_build)) {
        (_, Some(its)) => format!("it is judged on its EP when that is selected: {var}=cpu,{its} ({})", its.ort_name()),
        (Some(b), None) if b != Ep::Default && b != Ep::Cpu => {
            format!("it is a {b} build, an EP this harness does not run; select an EP with the kernels ({var}=cpu,cuda)")
        }
        _ => format!("select an EP with the kernels ({var}=cpu,cuda)"),
    };
    Some(format!(
        "not runnable on {}: ONNX Runtime {} accepts the graph but has no kernel for it on this EP ({}); {there}",
        run.ort_name(),
        crate::runtime::provision::ORT_VERSION,
        missing.join("; ")
    ))
}

/// A build with a node no EP of the pinned ONNX Runtime runs ([`crate::runtime::kernels`]): L1
/// fails it naming each EP's refusal, and the tiers that run it are skipped saying so, on every EP.
fn no_ep_runs_it(export: &Path, run: RunEp) -> Option<String> {
    static VERDICTS: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let verdicts = VERDICTS.get_or_init(Mutex::default);
    let cached = verdicts.lock().unwrap_or_else(|e| e.into_inner()).get(export).cloned();
    let verdict = cached.unwrap_or_else(|| {
        let package = crate::onnx::package::OnnxPackage::open(export).ok();
        let graphs: BTreeMap<String, GraphSummary> = package
            .iter()
            .flat_map(|p| p.submodels.iter())
            .filter_map(|(role, file)| Some((role.clone(), GraphSummary::load(file).ok()?)))
            .collect();
        let findings = crate::runtime::kernels::refused_everywhere(&graphs);
        let verdict = (!findings.is_empty()).then(|| findings.join("; "));
        verdicts.lock().unwrap_or_else(|e| e.into_inner()).insert(export.to_path_buf(), verdict.clone());
        verdict
    })?;
    Some(format!(
        "no execution provider of ONNX Runtime {} runs this build, {} included (L1's finding): {verdict}",
        crate::runtime::provision::ORT_VERSION,
        run.ort_name()
    ))
}

/// Ops whose CPU kernel exists but refuses some of their configurations when the session is
/// created (ORT 1.31.1's `MoEBaseCPU`: activation types other than relu, gelu, silu, swiglu and
/// identity — ORT GenAI's builder writes `geglu` for Gemma 4's experts, which CUDA's MoE runs).
const CONFIGURATION_REFUSED_ON_CPU: &[&str] = &["com.microsoft::MoE", "com.microsoft::QMoE"];

/// [`kernels_missing_on_cpu`]'s answers, by export folder.
type Verdicts = Mutex<HashMap<PathBuf, Option<Vec<(String, String)>>>>;

/// The sub-models of the export at `export` that ONNX Runtime accepts as graphs but cannot run on
/// the CPU EP (L1's load verdict, memoised per export folder); `None` when the export is neither
/// bf16 nor holds an op of [`CONFIGURATION_REFUSED_ON_CPU`], is unreadable (its tiers fail saying
/// why), rejected by ORT, or runnable.
fn kernels_missing_on_cpu(export: &Path) -> Option<Vec<(String, String)>> {
    static VERDICTS: OnceLock<Verdicts> = OnceLock::new();
    let verdicts = VERDICTS.get_or_init(Mutex::default);
    if let Some(v) = verdicts.lock().unwrap_or_else(|e| e.into_inner()).get(export) {
        return v.clone();
    }
    let verdict = (|| {
        use crate::onnx::package::{OnnxPackage, DECODER, TEXT_MODEL};
        let package = OnnxPackage::open(export).ok()?;
        let graphs: BTreeMap<String, GraphSummary> =
            package.submodels.iter().filter_map(|(role, file)| Some((role.clone(), GraphSummary::load(file).ok()?))).collect();
        let decoder = graphs.get(DECODER).or_else(|| graphs.get(TEXT_MODEL))?;
        // The activations as the protocol reads them (the KV cache's where ORT GenAI's builder
        // casts the logits up).
        let bf16 = crate::onnx::protocol::ExportProtocol::read(decoder, None).float == "bfloat16";
        let refusable = graphs.values().any(|g| g.nodes.iter().any(|n| CONFIGURATION_REFUSED_ON_CPU.contains(&n.op.as_str())));
        if !bf16 && !refusable {
            return None;
        }
        let report = super::l1::load::load_on_cpu(&package, &graphs);
        (report.failures.is_empty() && !report.no_cpu_kernel.is_empty()).then_some(report.no_cpu_kernel)
    })();
    verdicts.lock().unwrap_or_else(|e| e.into_inner()).insert(export.to_path_buf(), verdict.clone());
    verdict
}

/// The case a tier runs on: L1 and L3 of a case with `synthetic:` run on its stand-in.
pub fn tier_case(case: &Case, level: Level) -> Cow<'_, Case> {
    match level {
        Level::L1 | Level::L3 => case.for_synthetic_tiers(),
        _ => Cow::Borrowed(case),
    }
}
