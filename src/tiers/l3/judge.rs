//! L3's decision as named steps over the runs' tensors, each recording what it found in one
//! [`Findings`]: the components ([`components`]), the decode steps ([`decode`]), the sub-models
//! in isolation and the decoder layers with the blame inside them ([`localise`]). `super::compare`
//! runs them in pipeline order and turns the findings into the verdict once.

use std::collections::BTreeMap;

use super::isolated;
use super::layers::{layer_localisation, module_blame, LayerFloors};
use super::stage::{describe, judge_slice, stage, Calibration, Judged, Rules, StageError};
use super::table::calibration_row;
use crate::outputs::{Isolated, Isolation, LayerOutputs, Run, Stage};
use crate::tier_metrics::{CalibrationRow, Metrics};

/// What the steps found, in the order a person reads it: the components first, then where the
/// divergence is localised (isolation, layers, modules), then the logits and decode steps.
#[derive(Debug, Default)]
pub(super) struct Findings {
    pub components: Vec<String>,
    pub localisation: Vec<String>,
    pub outputs: Vec<String>,
    pub first_divergence: Option<Stage>,
    pub metrics: Metrics,
    /// The `calibration` metric's rows, by tensor.
    pub table: BTreeMap<String, CalibrationRow>,
}

/// Which of the findings' line lists a step writes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Said {
    Components,
    Outputs,
}

impl Findings {
    /// Records stage `at`'s judgement (its line, its metrics, the first divergence); whether it
    /// passed.
    pub fn note(&mut self, at: Stage, result: Result<Judged, StageError>, said: Said) -> bool {
        let (line, pass) = match result {
            Ok(r) => {
                self.metrics.stage_max_abs_diff.insert(at.to_string(), r.max_abs_diff());
                if let (Stage::Component(c), Some(ratio)) = (at, r.ratio()) {
                    self.metrics.component_calibrated_ratio.insert(c.as_str().to_string(), ratio);
                }
                (describe(&at.to_string(), &r), r.pass())
            }
            Err(e) => (e.to_string(), false),
        };
        match said {
            Said::Components => self.components.push(line),
            Said::Outputs => self.outputs.push(line),
        }
        if !pass && self.first_divergence.is_none() {
            self.first_divergence = Some(at);
        }
        pass
    }

    /// Every line, in reading order.
    pub fn lines(self) -> (Vec<String>, Option<Stage>, Metrics, BTreeMap<String, CalibrationRow>) {
        let lines = self.components.into_iter().chain(self.localisation).chain(self.outputs).collect();
        (lines, self.first_divergence, self.metrics, self.table)
    }
}

/// The components both runs produced, in pipeline order; whether all agree. They localise a
/// divergence, and under the calibrated rule gate the verdict (`super::compare`).
pub(super) fn components(expected: &Run, actual: &Run, calibration: Option<&Calibration<'_>>, rules: &Rules, f: &mut Findings) -> bool {
    let mut agree = true;
    for (c, e) in &expected.prefill.components {
        if let Some(a) = actual.prefill.components.get(c) {
            let r = stage(c.as_str(), a, e, calibration.and_then(|k| k.component(*c)), rules);
            if let Ok(j) = &r {
                f.table.insert(c.as_str().into(), calibration_row(j));
            }
            agree &= f.note(Stage::Component(*c), r, Said::Components);
        }
    }
    agree
}

/// The cached decode steps' verdict.
pub(super) struct Decode {
    /// Every step within its rule (and as many steps as the reference's).
    pub pass: bool,
    /// Every step within mobius's fixed row.
    pub fixed_pass: bool,
    /// Steps compared (step 0, the prefill's last position, included).
    pub steps: usize,
}

/// The cached decode steps (1..; step 0 is the prefill's last position, judged with the
/// prefill): each judged, the worst reported.
pub(super) fn decode(expected: &Run, actual: &Run, calibration: Option<&Calibration<'_>>, rules: &Rules, f: &mut Findings) -> Decode {
    let (expected_steps, actual_steps) = (&expected.generation.step_logits, &actual.generation.step_logits);
    let steps = actual_steps.len().min(expected_steps.len());
    let mut worst_step: Option<(usize, Judged)> = None;
    let (mut pass, mut fixed_pass) = (true, true);
    for k in 1..steps {
        let a = &actual_steps[k];
        let e = &expected_steps[k];
        let name = Stage::DecodeStep(k).to_string();
        match judge_slice(&name, a, e, &[a.len()], calibration.and_then(|c| c.step(k)), rules) {
            Ok(r) => {
                pass &= r.pass();
                fixed_pass &= r.fixed.pass;
                if worst_step.as_ref().is_none_or(|(_, w)| worse(&r, w)) {
                    worst_step = Some((k, r));
                }
            }
            Err(e) => {
                pass = false;
                fixed_pass = false;
                f.outputs.push(e.to_string());
            }
        }
    }
    if expected_steps.len() > 1 && steps < expected_steps.len() {
        pass = false;
        fixed_pass = false;
        f.outputs.push(format!("decode: the candidate produced {} steps, the reference {}", actual_steps.len(), expected_steps.len()));
    }
    if let Some((k, r)) = &worst_step {
        f.metrics.l3.decode_max_abs_diff = Some(r.max_abs_diff());
        f.metrics.l3.decode_calibrated_ratio = r.ratio();
        f.table.insert("decode".into(), calibration_row(r));
        // The token the step is fed (both runs teacher-forced with the reference's): a step that
        // fails on one token (a media placeholder, say) is then read at a glance.
        let fed = expected.generation.tokens.get(k - 1).map(|t| format!(", fed token {t}")).unwrap_or_default();
        f.outputs.push(describe(&format!("{} (worst of {}{fed})", Stage::DecodeStep(*k), steps.saturating_sub(1)), r));
    }
    if !pass && f.first_divergence.is_none() {
        f.first_divergence = Some(Stage::DecodeStep(worst_step.as_ref().map_or(0, |(k, _)| *k)));
    }
    Decode { pass, fixed_pass, steps }
}

/// Whether decode step `r` is worse than `w`: a failing step beats a passing one, then the
/// larger calibrated ratio (or, under the fixed rule, the larger difference).
fn worse(r: &Judged, w: &Judged) -> bool {
    if !r.pass() && w.pass() {
        return true;
    }
    if r.pass() != w.pass() {
        return false;
    }
    match (r.ratio(), w.ratio()) {
        (Some(a), Some(b)) => a > b || (a.is_nan() && !b.is_nan()),
        _ => r.max_abs_diff() > w.max_abs_diff(),
    }
}

/// Where a divergence is: the sub-models in isolation, then the decoder layers.
pub(super) struct Localised {
    /// Every sub-model agrees in isolation (true when not run).
    pub isolated_agree: bool,
    /// The first layer whose local error exceeds its rule.
    pub blamed: Option<usize>,
}

/// The sub-models judged in isolation (the first divergence moved there), then the decoder
/// layers (the isolated decoder run's where it ran) and, inside a blamed layer, its modules.
/// `prefill`: the forced run's prefill logits as already judged (a text-only package's isolated
/// decoder run is that run: not judged twice).
#[allow(clippy::too_many_arguments)]
pub(super) fn localise(
    expected: &Run,
    actual: &Run,
    isolation: &Isolation,
    calibration: Option<&Calibration<'_>>,
    rules: &Rules,
    prefill: Option<&Judged>,
    f: &mut Findings,
) -> Localised {
    let iso: Option<&Isolated> = match isolation {
        Isolation::Done(iso) => Some(iso.as_ref()),
        Isolation::Failed(why) => {
            f.localisation.push(format!("in isolation: not judged ({why})"));
            None
        }
        Isolation::NotRun => None,
    };
    let mut isolated_agree = true;
    if let Some(iso) = iso {
        if let Some(at) = isolated::judge(expected, actual, iso, rules, calibration, prefill, &mut f.localisation, &mut f.metrics.l3) {
            // A text-only model "in isolation" is the whole model, its own embedding included:
            // a divergence already seen at that embedding stays the first.
            if !(iso.text_only && f.first_divergence.is_some_and(Stage::is_before_decoder)) {
                f.first_divergence = Some(at);
            }
            isolated_agree = false;
        }
    }
    // Without isolation, blame goes to a layer only when no stage before the decoder diverged.
    let upstream = f.first_divergence.filter(|s| s.is_before_decoder() && iso.is_none()).map(|s| s.to_string());
    let (layers, local) = match iso {
        Some(iso) => (&iso.layers, Some(&iso.local)),
        None => (&actual.prefill.layers, None),
    };
    // The propagated layers are the isolated decoder run's where it ran: its floors.
    let propagated = calibration.map(|c| if iso.is_some() { c.for_isolated_decoder() } else { *c });
    let floors = propagated.as_ref().zip(calibration).map(|(p, c)| LayerFloors {
        propagated: &p.floor.prefill.layers,
        truth: &p.truth.prefill.layers,
        local: &c.local.layers,
        local_truth: c.local_truth.map(|t| t.layers.as_slice()),
    });
    let blamed = layer_localisation(
        &expected.prefill.layers,
        layers,
        local,
        floors.as_ref(),
        upstream.as_deref(),
        rules,
        &mut f.localisation,
        &mut f.metrics.l3,
    );
    Localised { isolated_agree, blamed }
}

/// Inside blamed layer `k` of an isolated run, the module that differs first.
pub(super) fn blame_module(
    k: usize,
    expected: &Run,
    isolation: &Isolation,
    calibration: Option<&Calibration<'_>>,
    rules: &Rules,
    f: &mut Findings,
) {
    let Isolation::Done(iso) = isolation else { return };
    if !matches!(iso.local, LayerOutputs::Tensors(_)) {
        return;
    }
    let floors = calibration
        .map(|c| (c.local.modules.as_slice(), c.local_truth.map_or(c.truth.prefill.modules.as_slice(), |t| t.modules.as_slice())));
    module_blame(k, &expected.prefill.modules, &iso.modules, &iso.unidentified, floors, rules, &mut f.localisation, &mut f.metrics.l3);
}
