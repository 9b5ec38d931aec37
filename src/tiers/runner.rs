//! Runs one tier of one case: gathers what the tier's comparison needs (the evaluation's runs,
//! the golden, the thresholds, the artifacts) and calls it, once per candidate implementation.

use super::options::RunOptions;
use super::outcome::{Status, TierOutcome};
use super::skip::tier_case;
use super::{l1, l2, l3, l4, l5};
use crate::artifacts::Artifacts;
use crate::case::{Candidate, Case, Level};
use crate::evaluation::hinted::NEAR_TIE_TOLERANCE;
use crate::evaluation::{CandidateRun, CaseEvaluation, CaseEvaluations, Dequantized, ReferenceRun, SharedError};
use crate::golden::{golden_paths, GenerationGolden, Golden};
use crate::outputs::Run;
use crate::tier_metrics::AdoptedStep;
use crate::tolerance::{L4Tolerance, Thresholds, Tolerances};
use onnx_parity_reference::weights::rounding::Adopted;

/// One tier of one case, its verdict decided ([`super::verdict::decide`] of [`tier_result`] and
/// the case's expectation; a skip stays a skip).
pub fn run_level(case: &Case, candidate: &Candidate, level: Level, opts: &RunOptions, evals: &CaseEvaluations) -> TierOutcome {
    let result = tier_result(case, candidate, level, opts, evals);
    super::verdict::decide(result, case.xfail_on(level, candidate.ep), super::verdict::RuntimeSkip::Skipped)
}

/// Runs one tier of one case (after [`super::static_skip`] said it may run): the tier's own
/// result, before the case's expectation. `evals` holds the case's runs (real and synthetic),
/// shared by its tiers.
pub fn tier_result(case: &Case, candidate: &Candidate, level: Level, opts: &RunOptions, evals: &CaseEvaluations) -> TierOutcome {
    let eval = evals.for_level(level, case);
    let case = tier_case(case, level);
    let case = case.as_ref();
    let artifacts = Artifacts::of(case);
    let outcome = match level {
        Level::L1 => match (&artifacts.checkpoint, &artifacts.export) {
            (Some(ckpt), Some(onnx)) => l1::check_on(
                l1::L1Inputs {
                    config: &ckpt.join("config.json"),
                    export: onnx,
                    float_dtype: case.dtype.onnx_elem_type(),
                    pin: case.export.as_ref(),
                },
                candidate.ep,
            ),
            _ => TierOutcome::skipped("L1 needs the checkpoint's config.json and the export"),
        },
        Level::L2 => run_l2(case, &artifacts),
        Level::L3 => run_l3(case, candidate, eval),
        Level::L4 => run_l4(case, candidate, opts, evals, &artifacts),
        Level::L5 => run_l5(case, candidate, opts, evals, &artifacts),
    };
    outcome
}

fn run_l2(case: &Case, artifacts: &Artifacts) -> TierOutcome {
    let Some(config) = &artifacts.config else {
        return TierOutcome::skipped("no real config (add `config:` or the checkpoint)");
    };
    l2::check(l2::L2Inputs {
        config,
        checkpoint: artifacts.checkpoint_with_weights(),
        export: artifacts.export.as_deref(),
        published_parameters: case.published_parameters,
        float_dtype: case.dtype.onnx_elem_type(),
        pin: case.export.as_ref(),
    })
}

fn thresholds(case: &Case) -> Result<Thresholds, TierOutcome> {
    case.thresholds(&Tolerances::defaults()).map_err(|e| TierOutcome::fail(format!("tolerances: {e}")))
}

/// Each candidate's outcome of one tier, as one outcome ([`TierOutcome::of_candidates`]); a
/// candidate that could not run fails with its error.
fn per_candidate<'a>(
    candidates: Vec<Result<&'a CandidateRun, SharedError>>,
    mut judge: impl FnMut(&'a CandidateRun) -> TierOutcome,
) -> TierOutcome {
    let outcomes = candidates
        .into_iter()
        .map(|c| match c {
            Ok(run) => {
                let mut outcome = judge(run);
                // What a user of the build on this EP gets: its numbers, labelled.
                if let Some(p) = &run.partitioned {
                    outcome.message = format!("{} ({p})", outcome.message);
                    outcome.metrics.trial.partitioned = Some(p.as_str().to_string());
                }
                (run.label.as_str(), outcome)
            }
            Err(e) => ("", TierOutcome::fail(e.to_string())),
        })
        .collect();
    TierOutcome::of_candidates(outcomes)
}

fn run_l3(case: &Case, candidate: &Candidate, eval: &CaseEvaluation) -> TierOutcome {
    let tol = match thresholds(case).and_then(|t| t.require_l3().map_err(|e| TierOutcome::fail(e.to_string()))) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let reference = match eval.reference(case) {
        Ok(r) => r,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    // The candidates first (their isolation needs the f64 arbiter only): the floor at their
    // precision is judged with only when one of them ran (a graph ORT rejects needs none); an
    // f32 build's, when not cached, was already made before them (`evaluation::sharing`).
    let candidates = eval.candidates(case, candidate);
    // A quantized build: its weights against the checkpoint's, and its cost against the float
    // reference (`l3::quantization`); run before the conditioned floors held in the cache are
    // read back, so the float model is not beside them.
    let quantized = match eval.dequantized(case) {
        Ok(d) => d,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let float = match eval.float_reference(case).transpose() {
        Ok(f) => f,
        Err(e) => return TierOutcome::fail(format!("the float reference (the quantization's cost): {e}")),
    };
    // Candidates whose local floors are all conditioned on their own int8 steps need no other.
    let conditioned: Option<Vec<_>> =
        candidates.iter().filter_map(|c| c.as_ref().ok()).map(|c| c.hinted.as_ref().and_then(|h| h.local_floor())).collect();
    let conditioned = match conditioned.and_then(|all| all.into_iter().next()).transpose() {
        Ok(c) => c,
        Err(e) => return TierOutcome::fail(format!("the conditioned local floor: {e}")),
    };
    let calibration = match candidates.iter().any(Result::is_ok) {
        true => match eval.calibration_with(case, conditioned).transpose() {
            Ok(c) => c,
            Err(e) => return TierOutcome::fail(format!("the calibrated rule's runs: {e}")),
        },
        false => None,
    };
    let mut out = per_candidate(candidates, |c| {
        // A build quantizing activations to int8: its local floors take its own steps at near-ties.
        let hinted = match (&c.hinted, calibration) {
            (Some(h), Some(cal)) => match h.calibration(cal) {
                Ok(cal) => Some(cal),
                Err(e) => return TierOutcome::fail(format!("the floors conditioned on the candidate's int8 steps: {e}")),
            },
            _ => calibration,
        };
        let mut out = l3::compare(&reference.run, &c.forced, &c.isolation, reference.scope, &tol, hinted.as_ref());
        if let Some(h) = &c.hinted {
            out = match h.adopted() {
                Ok(adopted) => adopted_steps(out, &adopted),
                Err(e) => return TierOutcome::fail(format!("the floors conditioned on the candidate's int8 steps: {e}")),
            };
        }
        match quantized {
            Some(q) => quantized_verdict(out, q, float, &c.forced, candidate.ep),
            None => out,
        }
    });
    if let Some(types) = eval.inputs(case).ok().and_then(|i| i.mm_token_type_ids.as_ref()) {
        let blocks = image_blocks(types);
        if !blocks.is_empty() {
            out.metrics.l3.image_blocks = Some(blocks);
        }
    }
    out
}

/// Reports the near-ties where the floors took the candidate's int8 step: how many, and the
/// first few (run, floor or f64, key, position, channel, both scaled values), so a reader sees
/// what was adopted.
fn adopted_steps(mut out: TierOutcome, adopted: &[(&str, &str, &Adopted)]) -> TierOutcome {
    let first: Vec<AdoptedStep> = adopted
        .iter()
        .take(12)
        .map(|(run, which, a)| AdoptedStep {
            run: run.to_string(),
            which: which.to_string(),
            key: a.key.clone(),
            row: a.row,
            col: a.col,
            own: a.own,
            candidate: a.candidate,
        })
        .collect();
    out.metrics.quantized.int8_steps_adopted = Some(adopted.len());
    out.metrics.quantized.int8_steps_adopted_first = (!first.is_empty()).then_some(first);
    let widest = adopted.iter().map(|(_, _, a)| (a.own - a.candidate).abs()).fold(0.0, f64::max);
    let count = |run: &str| adopted.iter().filter(|(r, _, _)| *r == run).count();
    out.message = format!(
        "{}; the floors took the candidate's int8 step at {} near-tie(s) (local {}, prefill {}, isolated decoder {}; widest {:.1e} of a step apart, within {} relative)",
        out.message,
        adopted.len(),
        count("local"),
        count("prefill"),
        count("isolated decoder"),
        widest,
        NEAR_TIE_TOLERANCE
    );
    out
}

/// A quantized build's L3: the arithmetic verdict (against the reference on its dequantized
/// weights) failed by a weight that is not the checkpoint's; the quantization named and its cost
/// against the float reference reported.
fn quantized_verdict(mut out: TierOutcome, q: &Dequantized, float: Option<&Run>, candidate: &Run, ep: crate::eps::RunEp) -> TierOutcome {
    // What the EP's MatMulNBits computes, as the reference on the build's weights modelled it.
    let model = crate::runtime::kernels::MatMulNBitsModel::of(ep).describe(ep, q.build.at_level_4());
    let mut lines =
        vec![format!("quantized build: {}; judged against the reference on its dequantized weights, {model}", q.build.summary())];
    out.metrics.quantized.quantization = Some(q.build.summary());
    out.metrics.quantized.quantization_kernel_model = Some(model.clone());
    // The build's own checks, each naming the first divergence when it fails (the weights first).
    let weights = l3::quantization::judge_weights(&q.errors, &mut out.metrics);
    let scales = l3::quantization::judge_activation_scales(&q.build, &mut out.metrics);
    let first = match (&weights, &scales) {
        (Some(_), _) => Some("weights"),
        (None, Some(_)) => Some("activation scales"),
        (None, None) => None,
    };
    if let Some(first) = first {
        out.metrics.l3.first_divergence = Some(first.into());
        // L3's verdict with the build's checks: a pass of the arithmetic fails with them.
        if out.status == Status::Pass {
            out.status = Status::Fail;
        }
    }
    lines.extend(weights.into_iter().chain(scales));
    if let Some(line) = float.and_then(|f| l3::quantization::cost(f, candidate, &mut out.metrics)) {
        lines.push(line);
    }
    out.message = format!("{}; {}", lines.join("; "), out.message);
    out
}

/// `[[first, last], …]` of each run of image tokens (`mm_token_type_ids` 1).
fn image_blocks(types: &[i64]) -> Vec<[usize; 2]> {
    let mut out: Vec<[usize; 2]> = Vec::new();
    for (i, &t) in types.iter().enumerate() {
        if t != 1 {
            continue;
        }
        match out.last_mut() {
            Some(b) if b[1] + 1 == i => b[1] = i,
            _ => out.push([i, i]),
        }
    }
    out
}

/// The evaluation L4/L5 run on: the real one on the golden's `input_ids` (`golden_ids`, from the
/// L4 golden file; the case's own inputs when there is none), and the warning that says when
/// those differ from the case's own ids.
fn replayed<'a>(
    case: &Case,
    evals: &'a CaseEvaluations,
    golden_ids: Option<&[i64]>,
) -> Result<(&'a CaseEvaluation, Option<String>), TierOutcome> {
    let Some(ids) = golden_ids else { return Ok((&evals.real, None)) };
    let (eval, drift) = evals.replayed(case, ids).map_err(|e| TierOutcome::fail(e.to_string()))?;
    Ok((eval, drift.map(|d| format!("{d}; this tier ran on the golden's input_ids (with the case's images), as mobius's L4 does"))))
}

/// A tier outcome with the replay warning attached (and counted as a metric, so an `xfail`
/// signature or a report can see it).
fn with_replay(outcome: TierOutcome, warning: Option<String>) -> TierOutcome {
    match warning {
        None => outcome,
        Some(w) => outcome.with(|m| m.trial.input_ids_replayed = Some(true)).warn(w),
    }
}

fn run_l4(case: &Case, candidate: &Candidate, opts: &RunOptions, evals: &CaseEvaluations, artifacts: &Artifacts) -> TierOutcome {
    let tol = match thresholds(case) {
        Ok(t) => t.l4,
        Err(o) => return o,
    };
    let (path, _) = golden_paths(&opts.goldens_for(case), &case.category, &case.name);
    let golden = match Golden::load(&path) {
        Ok(Some(g)) => g,
        Ok(None) => return TierOutcome::skipped(format!("golden {} is missing", path.display())),
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let (eval, warning) = match replayed(case, evals, Some(&golden.input_ids)) {
        Ok(r) => r,
        Err(o) => return o,
    };
    with_replay(l4_on(case, candidate, eval, &golden, &tol, artifacts), warning)
}

fn l4_on(
    case: &Case,
    candidate: &Candidate,
    eval: &CaseEvaluation,
    golden: &Golden,
    tol: &L4Tolerance,
    artifacts: &Artifacts,
) -> TierOutcome {
    let inputs = match eval.inputs(case) {
        Ok(i) => i,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let live = match live_reference(case, eval, artifacts) {
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
    per_candidate(eval.candidates(case, candidate), |c| match c.forced.prefill.last_logits() {
        Some(last) => l4::compare(last, &inputs.input_ids, golden, live_logits, tol),
        None => TierOutcome::fail(format!("{} logits have shape {:?}", c.label, c.forced.prefill.logits.shape)),
    })
}

fn run_l5(case: &Case, candidate: &Candidate, opts: &RunOptions, evals: &CaseEvaluations, artifacts: &Artifacts) -> TierOutcome {
    let tol = match thresholds(case) {
        Ok(t) => t.l5,
        Err(o) => return o,
    };
    let (ids_path, path) = golden_paths(&opts.goldens_for(case), &case.category, &case.name);
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
    let live = match live_reference(case, eval, artifacts) {
        Ok(r) => r.map(|r| r.run.generation.tokens.as_slice()),
        Err(o) => return o,
    };
    let outcome = per_candidate(eval.candidates(case, candidate), |c| {
        // The plan decodes freely wherever it runs L5 (`CaseEvaluations::decoding_freely`).
        let Some(free) = &c.free else { return TierOutcome::fail("the candidate was not decoded freely: its run was planned without L5") };
        let out = l5::compare(&free.tokens, &golden.generated_tokens, live, tol.min_token_match_ratio);
        // The reports show the sequences decoded where the case has a tokenizer.
        match (crate::regenerate::decode_text(case, &free.tokens), crate::regenerate::decode_text(case, &golden.generated_tokens)) {
            (Some(a), Some(g)) => out.with(|m| (m.l5.text, m.l5.golden_text) = (Some(a), Some(g))),
            _ => out,
        }
    });
    with_replay(outcome, warning)
}

/// The live reference for L4/L5: `None` when the case has no checkpoint (golden-only), a failed
/// tier when it has one and the reference fails — never a silent fallback to the golden alone.
fn live_reference<'a>(case: &Case, eval: &'a CaseEvaluation, artifacts: &Artifacts) -> Result<Option<&'a ReferenceRun>, TierOutcome> {
    if artifacts.checkpoint.is_none() {
        return Ok(None);
    }
    eval.reference(case).map(Some).map_err(|e| TierOutcome::fail(format!("the live reference failed: {e}")))
}
