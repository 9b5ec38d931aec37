//! One stage of an L3 comparison (a component, the logits, a decode step, a layer's output, a
//! module's) judged by both rules — mobius's fixed row against the f32 reference, and the
//! calibrated rule against the f64 arbiter with the reference at the candidate's precision as the
//! floor — and how it is described in the verdict's message. Which rule decides is the case's
//! (`l3_rule:`); the other is always reported beside it.

use super::allclose::{allclose, AllcloseReport};
use super::calibrated::{calibrated, calibrated_streamed, CalibratedReport, CalibratedRule};
use crate::inputs::Dense;
use crate::metrics::MetricError;
use crate::onnx::protocol;
use crate::outputs::{Prefill, Run, StreamedLogits};
use crate::tolerance::L3Tolerance;

/// The rules one L3 verdict applies: the fixed row always; the calibrated rule when the case is
/// judged by it (then it decides).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    pub fixed: L3Tolerance,
    pub calibrated: Option<CalibratedRule>,
}

impl Rules {
    /// Judged by the fixed row alone (mobius's way, `l3_rule: fixed`).
    pub fn fixed(tol: L3Tolerance) -> Self {
        Rules { fixed: tol, calibrated: None }
    }
}

/// One tensor's calibration pair: the reference at the candidate's precision (the floor) and the
/// f64 arbiter (the truth), in the candidate's layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Floor<'a> {
    pub at_precision: &'a [f32],
    pub truth: Truth<'a>,
}

/// The arbiter's values of one tensor: held, or (its all-position logits) made one vocabulary
/// slice at a time from its final hidden state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Truth<'a> {
    Dense(&'a [f32]),
    Streamed(&'a StreamedLogits),
}

impl<'a> Floor<'a> {
    pub(crate) fn of(at_precision: &'a Dense<f32>, truth: &'a Dense<f32>) -> Self {
        Floor { at_precision: &at_precision.data, truth: Truth::Dense(&truth.data) }
    }

    /// The pair of the all-position prefill logits (the arbiter's streamed when it kept them so).
    pub(crate) fn logits(at_precision: &'a Prefill, truth: &'a Prefill) -> Self {
        let truth = match &truth.streamed {
            Some(s) => Truth::Streamed(s),
            None => Truth::Dense(&truth.logits.data),
        };
        Floor { at_precision: &at_precision.logits.data, truth }
    }
}

/// What the calibrated rule judges with (made by the evaluation, judged here).
pub use crate::evaluation::precision::Calibration;

impl Calibration<'_> {
    /// The floor pair of a prefill component.
    pub(crate) fn component(&self, c: crate::outputs::Component) -> Option<Floor<'_>> {
        Some(Floor::of(self.floor.prefill.components.get(&c)?, self.truth.prefill.components.get(&c)?))
    }

    /// The floor pair of cached decode step `k`.
    pub(crate) fn step(&self, k: usize) -> Option<Floor<'_>> {
        let truth = Truth::Dense(self.truth.generation.step_logits.get(k)?);
        Some(Floor { at_precision: self.floor.generation.step_logits.get(k)?, truth })
    }
}

/// Why one stage could not be compared: itself a divergence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageError {
    #[error("{stage}: shape {actual:?} from the candidate vs {expected:?} from the reference")]
    Shape { stage: String, actual: Vec<usize>, expected: Vec<usize> },
    #[error("{stage}: {source}")]
    Metric { stage: String, source: MetricError },
    /// The arbiter's streamed logits could not be made.
    #[error("{stage}: the f64 arbiter's logits: {source}")]
    Truth { stage: String, source: onnx_parity_reference::Error },
    /// The calibrated rule decides but the arbiter has no such tensor.
    #[error("{stage}: no f64 floor for this tensor ({why}); the calibrated rule cannot judge it")]
    NoFloor { stage: String, why: &'static str },
}

/// What both rules said of one stage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Judged {
    pub fixed: AllcloseReport,
    /// The calibrated rule's report, when it decides.
    pub calibrated: Option<CalibratedReport>,
}

impl Judged {
    /// The deciding rule's verdict.
    pub fn pass(&self) -> bool {
        match &self.calibrated {
            Some(c) => c.pass,
            None => self.fixed.pass,
        }
    }

    /// Largest `|candidate − f32 reference|` (the fixed row's view, kept for continuity).
    pub fn max_abs_diff(&self) -> f64 {
        self.fixed.max_abs_diff
    }

    /// The calibrated ratio (≤ k passes), when the calibrated rule judged.
    pub fn ratio(&self) -> Option<f64> {
        self.calibrated.as_ref().map(|c| c.ratio)
    }
}

/// Judges one stage (`name` for messages): `actual` against `expected` (the f32 reference) by the
/// fixed row, and with `rules.calibrated` against `floor` by the calibrated rule.
pub(crate) fn stage(
    name: &str,
    actual: &Dense<f32>,
    expected: &Dense<f32>,
    floor: Option<Floor<'_>>,
    rules: &Rules,
) -> Result<Judged, StageError> {
    if actual.shape != expected.shape {
        return Err(StageError::Shape { stage: name.into(), actual: actual.shape.clone(), expected: expected.shape.clone() });
    }
    judge_slice(name, &actual.data, &expected.data, &actual.shape, floor, rules)
}

/// [`stage`] on flat slices of `shape` (decode steps, module outputs whose batch axis differs).
/// The prefill logits judged: at every position, or — for a build whose logits cover the last
/// position only (ORT GenAI's `prune_lm_head`: `[1, 1, vocab]` against the reference's `[1, S,
/// vocab]`) — at that position, judged as decode step 0 is (the reference's, the floor's and the
/// arbiter's step-0 logits are the last prefill position).
pub(crate) fn prefill_logits(
    actual: &Dense<f32>,
    expected: &Run,
    calibration: Option<&Calibration<'_>>,
    rules: &Rules,
) -> Result<Judged, StageError> {
    let last_only = actual.shape.get(1) == Some(&1) && expected.prefill.logits.shape.get(1).is_some_and(|&s| s > 1);
    if let (true, Some(e)) = (last_only, expected.generation.step_logits.first()) {
        return judge_slice("logits (last position)", &actual.data, e, &[actual.data.len()], calibration.and_then(|c| c.step(0)), rules);
    }
    let floor = calibration.map(|c| Floor::logits(&c.floor.prefill, &c.truth.prefill));
    stage(protocol::LOGITS, actual, &expected.prefill.logits, floor, rules)
}

pub(crate) fn judge_slice(
    name: &str,
    actual: &[f32],
    expected: &[f32],
    shape: &[usize],
    floor: Option<Floor<'_>>,
    rules: &Rules,
) -> Result<Judged, StageError> {
    let metric = |source| StageError::Metric { stage: name.into(), source };
    let fixed = || allclose(actual, expected, shape, rules.fixed.atol, rules.fixed.rtol);
    // A large tensor's two rules run side by side, each its own sequential pass (so the same
    // bits as one after the other): the all-position logits at 12B width are 288 M elements a
    // rule, each pass single-threaded (a warm run's comparisons left a core idle for 11 s).
    let (fixed, calibrated) = if actual.len() >= PARALLEL_RULES_FROM && rules.calibrated.is_some() && floor.is_some() {
        rayon::join(fixed, || calibrated_rule(name, actual, shape, floor, rules))
    } else {
        let fixed = fixed();
        (fixed, calibrated_rule(name, actual, shape, floor, rules))
    };
    Ok(Judged { fixed: fixed.map_err(metric)?, calibrated: calibrated? })
}

/// Elements from which [`judge_slice`] runs its two rules side by side (below, a pool hand-off
/// costs more than the pass).
const PARALLEL_RULES_FROM: usize = 1 << 22;

/// The calibrated rule's report of `actual` against `floor`'s truth, when the rule applies.
fn calibrated_rule(
    name: &str,
    actual: &[f32],
    shape: &[usize],
    floor: Option<Floor<'_>>,
    rules: &Rules,
) -> Result<Option<CalibratedReport>, StageError> {
    let metric = |source| StageError::Metric { stage: name.into(), source };
    Ok(match (rules.calibrated, floor) {
        (None, _) => None,
        (Some(rule), Some(Floor { at_precision, truth: Truth::Dense(t) })) => {
            Some(calibrated(actual, at_precision, t, shape, &rule).map_err(metric)?)
        }
        (Some(rule), Some(Floor { at_precision, truth: Truth::Streamed(s) })) => {
            let r = calibrated_streamed(actual, at_precision, shape, &rule, |f| s.for_each_slice(f));
            Some(r.map_err(|e| match e {
                SliceError::Metric(source) => StageError::Metric { stage: name.into(), source },
                SliceError::Truth(source) => StageError::Truth { stage: name.into(), source },
            })?)
        }
        (Some(_), None) => return Err(StageError::NoFloor { stage: name.into(), why: "the arbiter did not compute it" }),
    })
}

/// Why a streamed comparison stopped: the comparison itself, or making the arbiter's slice.
enum SliceError {
    Metric(MetricError),
    Truth(onnx_parity_reference::Error),
}

impl From<MetricError> for SliceError {
    fn from(e: MetricError) -> Self {
        SliceError::Metric(e)
    }
}

impl From<onnx_parity_reference::Error> for SliceError {
    fn from(e: onnx_parity_reference::Error) -> Self {
        SliceError::Truth(e)
    }
}

/// The stage's line: the deciding rule first, the other beside it.
pub(crate) fn describe(name: &str, j: &Judged) -> String {
    let r = &j.fixed;
    let fixed = format!(
        "max_abs_diff {:.3e} at {:?} (candidate {} vs ref {}), {} of {} outside atol {:.0e} + rtol {:.0e}·|ref|{}",
        r.max_abs_diff,
        r.worst_index,
        r.worst_actual,
        r.worst_expected,
        r.n_violations,
        r.numel,
        r.atol,
        r.rtol,
        if r.nonfinite_mismatch > 0 { format!(", {} non-finite", r.nonfinite_mismatch) } else { String::new() }
    );
    match &j.calibrated {
        None => format!("{name}: {fixed}"),
        Some(c) => format!(
            "{name}: {} vs f64 e_cand rms {:.2e} max {:.2e}, floor rms {:.2e} max {:.2e}, ratio {:.2} {} k {} ({}; largest error in row {:?}){}; fixed row {}: {fixed}",
            if c.pass { "agrees" } else { "differs" },
            c.e_cand_rms,
            c.e_cand_max,
            c.e_floor_rms,
            c.e_floor_max,
            c.ratio,
            if c.ratio <= c.k { "≤" } else { ">" },
            c.k,
            c.worst_statistic,
            c.worst_row,
            if c.nonfinite > 0 { format!(", {} non-finite", c.nonfinite) } else { String::new() },
            if r.pass { "pass" } else { "fail" },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the two rules run side by side on a large tensor: the same reports, to the bit, as
    /// each rule run alone, and a failing candidate still fails both.
    #[test]
    fn rules_side_by_side_report_what_each_reports_alone() {
        let n = PARALLEL_RULES_FROM + 3;
        let value = |i: usize, scale: f32| ((i % 977) as f32 * 0.013 - 6.0) * scale;
        let truth: Vec<f32> = (0..n).map(|i| value(i, 1.0)).collect();
        let floor: Vec<f32> = (0..n).map(|i| value(i, 1.0) + 1e-6 * ((i % 7) as f32 - 3.0)).collect();
        let rule = CalibratedRule { k: 4.0, delta_ulps: 1.0, epsilon: f64::from(f32::EPSILON) };
        let rules = Rules { fixed: L3Tolerance { atol: 1e-3, rtol: 1e-3 }, calibrated: Some(rule) };
        for broken in [false, true] {
            let mut actual: Vec<f32> = (0..n).map(|i| value(i, 1.0) + 2e-6 * ((i % 5) as f32 - 2.0)).collect();
            if broken {
                actual[n - 2] += 0.5;
            }
            let shape = [1, n];
            let both =
                judge_slice("logits", &actual, &truth, &shape, Some(Floor { at_precision: &floor, truth: Truth::Dense(&truth) }), &rules)
                    .expect("judged");
            let fixed = allclose(&actual, &truth, &shape, 1e-3, 1e-3).expect("allclose");
            let cal = calibrated(&actual, &floor, &truth, &shape, &rule).expect("calibrated");
            assert_eq!(both.fixed, fixed);
            assert_eq!(both.calibrated.as_ref(), Some(&cal));
            assert_eq!(both.fixed.max_abs_diff.to_bits(), fixed.max_abs_diff.to_bits());
            assert_eq!(both.fixed.pass, !broken);
            assert_eq!(cal.ratio <= rule.k, !broken, "ratio {}", cal.ratio);
        }
    }
}
