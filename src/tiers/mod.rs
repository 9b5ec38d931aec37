//! The five tiers (DESIGN §2) and their scheduling. Each tier returns a
//! [`outcome::TierOutcome`]; the `parity` test target and the CLI only plan and report them.
//!
//! Skips that can be known without loading a model (`skip_reason`, `ci_skip_reason`, a level the
//! case does not request, a missing checkpoint or export) are decided here when the trial list is
//! built: nextest counts a run-time skip as a pass, which would hide it.

pub mod l1;
pub mod l2;
pub mod l3;
pub mod l4;
pub mod l5;
pub mod outcome;

use std::borrow::Cow;
use std::path::PathBuf;

use crate::case::{Case, Level};
use crate::evaluation::{CaseEvaluation, CaseEvaluations};
use crate::golden::{golden_paths, GenerationGolden, Golden};
use crate::tolerance::{resolve, Thresholds, Tolerances};
use outcome::TierOutcome;

/// Every tier, in order; every case gets one trial per entry.
pub const ALL_LEVELS: [Level; 5] = Level::ALL;

/// Options shared by all trials of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding `<category>/<case>.json` goldens.
    pub goldens_root: PathBuf,
    /// `true` when running under CI (`CI` set): `ci_skip_reason` applies.
    pub ci: bool,
}

impl RunOptions {
    /// Defaults for this repository: `goldens/` beside `cases/`, CI from the environment.
    /// Goldens from `ONNX_PARITY_GOLDENS`, else `goldens/` of this repository.
    pub fn from_env() -> Self {
        RunOptions {
            goldens_root: std::env::var_os("ONNX_PARITY_GOLDENS")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("goldens")),
            ci: ci_enabled(std::env::var_os("CI").as_deref()),
        }
    }
}

/// Whether a value of `CI` means "running under CI": set, and not empty, `0`, `false`, `no` or `off` (any case).
fn ci_enabled(value: Option<&std::ffi::OsStr>) -> bool {
    // Any case: `CI=False` or `CI=no` is a person switching CI off, not a CI run.
    value.is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !matches!(v.as_str(), "" | "0" | "false" | "no" | "off")
    })
}

/// The reason a trial will not run, if it can be known before running it.
pub fn static_skip(case: &Case, level: Level, opts: &RunOptions) -> Option<String> {
    if !implemented(level) {
        return Some(format!("{level} is not implemented yet"));
    }
    if !case.levels.contains(&level) {
        let listed = case.levels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
        return Some(format!("the case does not request {level} (levels: {listed})"));
    }
    if let Some(r) = &case.skip_reason {
        return Some(format!("skip_reason: {r}"));
    }
    if opts.ci {
        if let Some(r) = &case.ci_skip_reason {
            return Some(format!("ci_skip_reason (CI is set): {r}"));
        }
    }
    if !case.inputs.audio.is_empty() {
        return Some("audio inputs are out of scope: the reference implements text and vision only".into());
    }
    if onnx_parity_reference::ModelType::parse(&case.model_type).is_err() {
        return Some(format!(
            "model_type {:?} is not implemented (the reference covers gemma4, gemma4_text, gemma4_unified, gemma4_unified_text)",
            case.model_type
        ));
    }
    let case = tier_case(case, level);
    let case = case.as_ref();
    match level {
        Level::L1 | Level::L3 => artifact_skip(case, level == Level::L3),
        Level::L2 => crate::artifacts::config(case).is_none().then(|| {
            format!(
                "no real config: add `config: <config.json>` to {}, or provide the checkpoint (`checkpoint:`, or {}@{} in the HF cache)",
                case.path.display(),
                case.model_id,
                case.revision.as_deref().unwrap_or("main")
            )
        }),
        Level::L4 | Level::L5 => {
            if crate::artifacts::export(case).is_none() {
                return Some(format!(
                    "no export of {}: add `onnx: <export folder>` to {} or put it at {} (`python -m mobius build --config <checkpoint> <folder> --dtype {}`)",
                    case.model_id,
                    case.path.display(),
                    crate::artifacts::export_hint(case),
                    case.dtype.as_str()
                ));
            }
            let (json, generation) = golden_paths(&opts.goldens_root, &case.category, &case.name);
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
    }
}

/// L1 and L3 need the (synthetic or local) checkpoint's config and export; L3 also its weights.
fn artifact_skip(case: &Case, needs_weights: bool) -> Option<String> {
    let hint = || match &case.synthetic {
        Some(_) => String::new(),
        None => " (or a `synthetic:` stand-in)".to_string(),
    };
    match &case.checkpoint {
        None => {
            return Some(format!(
                "no local checkpoint: add `checkpoint: <HF folder with config.json>`{} to {}",
                hint(),
                case.path.display()
            ))
        }
        Some(dir) if !dir.join("config.json").is_file() => {
            return Some(format!("checkpoint {} has no config.json: download or regenerate it", dir.display()))
        }
        Some(dir) if needs_weights && !crate::artifacts::has_weights(dir) => {
            return Some(format!("checkpoint {} has no safetensors weights: download or regenerate them", dir.display()))
        }
        _ => {}
    }
    match &case.onnx {
        None => Some(format!("no ONNX export: add `onnx: <export folder>`{} to {}", hint(), case.path.display())),
        Some(dir) if !dir.is_dir() => {
            Some(format!("ONNX export {} does not exist: export it (scripts/make-fixtures.sh for fixtures)", dir.display()))
        }
        _ => None,
    }
}

/// The case a tier runs on: L1 and L3 of a case with `synthetic:` run on its stand-in.
pub fn tier_case(case: &Case, level: Level) -> Cow<'_, Case> {
    match level {
        Level::L1 | Level::L3 => case.for_synthetic_tiers(),
        _ => Cow::Borrowed(case),
    }
}

/// Tiers this build can run; the others report `skipped`, never a pass.
pub fn implemented(level: Level) -> bool {
    matches!(level, Level::L1 | Level::L2 | Level::L3 | Level::L4 | Level::L5)
}

/// Runs one tier of one case (after [`static_skip`] said it may run). `evals` holds the case's
/// back-end runs (real and synthetic), shared by its tiers.
pub fn run_level(case: &Case, level: Level, opts: &RunOptions, evals: &CaseEvaluations) -> TierOutcome {
    let expected = case.xfail_for(level);
    let eval = evals.for_level(level, case);
    let case = tier_case(case, level);
    let case = case.as_ref();
    let outcome = match level {
        Level::L1 => match (&case.checkpoint, &case.onnx) {
            (Some(ckpt), Some(onnx)) => l1::check(&ckpt.join("config.json"), onnx, case.dtype.onnx_elem_type()),
            _ => TierOutcome::skipped("L1 needs `checkpoint:` and `onnx:`"),
        },
        Level::L3 => run_l3(case, eval),
        Level::L4 => run_l4(case, opts, evals),
        Level::L5 => run_l5(case, opts, evals),
        Level::L2 => run_l2(case),
    };
    outcome.with_expected_failure(expected)
}

fn run_l2(case: &Case) -> TierOutcome {
    let Some(config) = crate::artifacts::config(case) else {
        return TierOutcome::skipped("no real config (add `config:` or the checkpoint)");
    };
    let checkpoint = crate::artifacts::checkpoint(case).filter(|d| crate::artifacts::has_weights(d));
    let export = crate::artifacts::export(case);
    l2::check(l2::L2Inputs {
        config: &config,
        checkpoint: checkpoint.as_deref(),
        export: export.as_deref(),
        published_parameters: case.published_parameters,
        float_dtype: case.dtype.onnx_elem_type(),
    })
}

fn thresholds(case: &Case) -> Result<Thresholds, TierOutcome> {
    resolve(&Tolerances::defaults(), case).map_err(|e| TierOutcome::fail(format!("tolerances: {e}")))
}

fn run_l3(case: &Case, eval: &CaseEvaluation) -> TierOutcome {
    let tol = match thresholds(case).and_then(|t| t.require_l3().map_err(|e| TierOutcome::fail(e.to_string()))) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let reference = match eval.reference(case) {
        Ok(r) => r,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    match eval.onnx(case) {
        Ok(onnx) => l3::compare(reference, onnx, &tol),
        Err(e) => TierOutcome::fail(e.to_string()),
    }
}

/// The evaluation L4/L5 run on: the real one on the golden's `input_ids` (`golden_ids`, from the
/// L4 golden file; the case's own inputs when there is none), and the warning that says when
/// those differ from the case's own ids.
fn replayed<'a>(case: &Case, evals: &'a CaseEvaluations, golden_ids: Option<&[i64]>) -> Result<(&'a CaseEvaluation, Option<String>), TierOutcome> {
    let Some(ids) = golden_ids else { return Ok((&evals.real, None)) };
    let (eval, drift) = evals.replayed(case, ids).map_err(|e| TierOutcome::fail(e.to_string()))?;
    Ok((eval, drift.map(|d| format!("{d}; this tier ran on the golden's input_ids (with the case's images), as mobius's L4 does"))))
}

/// A tier outcome with the replay warning attached (and counted as a metric, so an `xfail`
/// signature or a report can see it).
fn with_replay(outcome: TierOutcome, warning: Option<String>) -> TierOutcome {
    match warning {
        None => outcome,
        Some(w) => outcome.metric("input_ids_replayed", true).warn(w),
    }
}

fn run_l4(case: &Case, opts: &RunOptions, evals: &CaseEvaluations) -> TierOutcome {
    let tol = match thresholds(case) {
        Ok(t) => t.l4,
        Err(o) => return o,
    };
    let (path, _) = golden_paths(&opts.goldens_root, &case.category, &case.name);
    let golden = match Golden::load(&path) {
        Ok(Some(g)) => g,
        Ok(None) => return TierOutcome::skipped(format!("golden {} is missing", path.display())),
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let (eval, warning) = match replayed(case, evals, Some(&golden.input_ids)) {
        Ok(r) => r,
        Err(o) => return o,
    };
    with_replay(l4_on(case, eval, &golden, &tol), warning)
}

fn l4_on(case: &Case, eval: &CaseEvaluation, golden: &Golden, tol: &crate::tolerance::L4Tolerance) -> TierOutcome {
    let inputs = match eval.inputs(case) {
        Ok(i) => i,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let onnx = match eval.onnx(case) {
        Ok(o) => o,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let Some(last) = onnx.forced.prefill.last_logits() else {
        return TierOutcome::fail(format!("ONNX logits have shape {:?}", onnx.forced.prefill.logits.shape));
    };
    let live = match live_reference(case, eval) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let live_logits = match live {
        None => None,
        Some(r) => match r.run.prefill.last_logits() {
            Some(l) => Some(l),
            None => return TierOutcome::fail(format!("reference logits have shape {:?}", r.run.prefill.logits.shape)),
        },
    };
    l4::compare(last, &inputs.input_ids, golden, live_logits, tol)
}

fn run_l5(case: &Case, opts: &RunOptions, evals: &CaseEvaluations) -> TierOutcome {
    let tol = match thresholds(case) {
        Ok(t) => t.l5,
        Err(o) => return o,
    };
    let (ids_path, path) = golden_paths(&opts.goldens_root, &case.category, &case.name);
    let golden = match GenerationGolden::load(&path) {
        Ok(Some(g)) => g,
        Ok(None) => return TierOutcome::skipped(format!("golden {} is missing", path.display())),
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    // The ids to replay live in the L4 golden (the generation file has none).
    let golden_ids = match Golden::load(&ids_path) {
        Ok(g) => g.map(|g| g.input_ids),
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let (eval, warning) = match replayed(case, evals, golden_ids.as_deref()) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let onnx = match eval.onnx(case) {
        Ok(o) => o,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let live = match live_reference(case, eval) {
        Ok(r) => r.map(|r| r.run.generation.tokens.as_slice()),
        Err(o) => return o,
    };
    with_replay(l5::compare(&onnx.free.tokens, &golden.generated_tokens, live, tol.min_token_match_ratio), warning)
}

/// The live reference for L4/L5: `None` when the case has no checkpoint (golden-only), a failed
/// tier when it has one and the reference fails — never a silent fallback to the golden alone.
fn live_reference<'a>(case: &Case, eval: &'a CaseEvaluation) -> Result<Option<&'a crate::evaluation::ReferenceRun>, TierOutcome> {
    if crate::artifacts::checkpoint(case).is_none() {
        return Ok(None);
    }
    eval.reference(case).map(Some).map_err(|e| TierOutcome::fail(format!("the live reference failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// Guards: `CI` counts as set unless it is absent, empty, `0` or `false` (GitHub Actions and
    /// most CI systems set `CI=true`; `CI=0` / `CI=false` switch `ci_skip_reason` off).
    #[test]
    fn ci_values() {
        for on in ["true", "1", "yes", "TRUE", "00", "woodpecker"] {
            assert!(ci_enabled(Some(OsStr::new(on))), "{on}");
        }
        assert!(!ci_enabled(None));
        for off in ["", "0", "false", "False", "FALSE", "no", "Off", " false "] {
            assert!(!ci_enabled(Some(OsStr::new(off))), "{off:?}");
        }
    }
}
