//! Which decoder layer an L3 divergence starts in, and which part of it: each layer's output
//! compared in layer order, propagated and where it stands (they localise, never gate), and the
//! per-layer profile reports draw.

use super::stage::{describe, stage, Floor, Judged, Rules};
use crate::inputs::Dense;
use crate::onnx::cut::MODULES;
use crate::outputs::{LayerOutputs, ModuleOutputs};
use crate::tier_metrics::{L3Metrics, MODULE_NOT_IDENTIFIABLE};
use std::collections::BTreeMap;

/// The calibrated rule's layer floors: the reference at the candidate's precision, propagated
/// (its own run) and local (fed the arbiter's stream), and the arbiter's own layer outputs.
pub(super) struct LayerFloors<'a> {
    pub propagated: &'a LayerOutputs,
    pub truth: &'a LayerOutputs,
    pub local: &'a [Dense<f32>],
    /// The local truth when it is not the arbiter's own layer outputs (its layers run like the
    /// floor's, conditioned on the candidate's int8 steps at near-ties).
    pub local_truth: Option<&'a [Dense<f32>]>,
}

/// Per layer, the reference at the candidate's precision and the arbiter (calibration pairs).
type LayerPairs<'a> = (&'a [Dense<f32>], &'a [Dense<f32>]);

/// Each layer compared in layer order: the per-layer verdicts and the first layer outside its
/// rule, or why the lists cannot be compared. `floors`: each layer's calibration pair.
fn profile(
    expected: &LayerOutputs,
    actual: &LayerOutputs,
    floors: Option<LayerPairs<'_>>,
    rules: &Rules,
) -> Option<Result<Profile, NotLocalised>> {
    let (e, a) = match (expected, actual) {
        (LayerOutputs::Tensors(e), LayerOutputs::Tensors(a)) => (e, a),
        (LayerOutputs::NotRequested, _) | (_, LayerOutputs::NotRequested) => return None,
        (LayerOutputs::Unavailable(why), _) | (_, LayerOutputs::Unavailable(why)) => {
            return Some(Err(NotLocalised::Unavailable(why.clone())))
        }
    };
    if e.len() != a.len() {
        return Some(Err(NotLocalised::Count { export: a.len(), reference: e.len() }));
    }
    let mut p = Profile { judged: Vec::with_capacity(e.len()), first: None };
    for (i, (e, a)) in e.iter().zip(a).enumerate() {
        let floor = floors.and_then(|(p, t)| Some(Floor::of(p.get(i)?, t.get(i)?)));
        match stage(&format!("layer {i}"), a, e, floor, rules) {
            Ok(r) => {
                if !r.pass() && p.first.is_none() {
                    p.first = Some(i);
                }
                p.judged.push(r);
            }
            Err(e) => return Some(Err(NotLocalised::Stage(e))),
        }
    }
    Some(Ok(p))
}

/// Why two layer lists cannot be compared.
#[derive(Debug, thiserror::Error)]
enum NotLocalised {
    #[error("{0}")]
    Unavailable(String),
    #[error("the candidate exposes {export} layers, the reference has {reference}")]
    Count { export: usize, reference: usize },
    #[error(transparent)]
    Stage(super::stage::StageError),
}

/// What [`profile`] found.
struct Profile {
    judged: Vec<Judged>,
    first: Option<usize>,
}

impl Profile {
    fn diffs(&self) -> Vec<f64> {
        self.judged.iter().map(Judged::max_abs_diff).collect()
    }

    fn text(&self) -> String {
        let one = |j: &Judged| match &j.calibrated {
            Some(c) => format!("{:.1e}/{:.1e}", c.e_cand_max, c.e_floor_max),
            None => format!("{:.1e}", j.max_abs_diff()),
        };
        self.judged.iter().map(one).collect::<Vec<_>>().join(" ")
    }

    /// Per layer: the calibrated ratio, the candidate's and the floor's max error against f64.
    fn calibrated(&self) -> Option<[Vec<f64>; 3]> {
        let c: Option<Vec<_>> = self.judged.iter().map(|j| j.calibrated.as_ref()).collect();
        let c = c?;
        Some([c.iter().map(|c| c.ratio).collect(), c.iter().map(|c| c.e_cand_max).collect(), c.iter().map(|c| c.e_floor_max).collect()])
    }
}

fn tensors(l: &LayerOutputs) -> &[Dense<f32>] {
    match l {
        LayerOutputs::Tensors(t) => t,
        _ => &[],
    }
}

/// Compares each decoder layer's output (they localise, never gate): the metrics
/// `layer_max_abs_diff` (per layer, propagated: each layer fed the previous layer's output of
/// the same run) and `first_divergent_layer`. With `local` (each layer fed the oracle's
/// residual stream entering it) also `layer_local_max_abs_diff`, and the blamed layer is the
/// first whose *local* error exceeds its rule — under the calibrated rule, its own local floor
/// (the reference at the candidate's precision fed the same f64 stream) by more than k. Without
/// it, no layer is blamed when the decoder's inputs already differ (`upstream`: the first
/// divergent component), since every layer then inherits the difference. Returns the blamed
/// layer.
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_localisation(
    expected: &LayerOutputs,
    actual: &LayerOutputs,
    local: Option<&LayerOutputs>,
    floors: Option<&LayerFloors<'_>>,
    upstream: Option<&str>,
    rules: &Rules,
    lines: &mut Vec<String>,
    metrics: &mut L3Metrics,
) -> Option<usize> {
    let not_localised = |why: String, lines: &mut Vec<String>, metrics: &mut L3Metrics| {
        lines.push(format!("decoder layers: not localised ({why})"));
        metrics.layers_localised = Some(false);
    };
    let propagated_floor = floors.map(|f| (tensors(f.propagated), tensors(f.truth)));
    let propagated = match profile(expected, actual, propagated_floor, rules)? {
        Ok(p) => p,
        Err(why) => {
            not_localised(why.to_string(), lines, metrics);
            return None;
        }
    };
    metrics.layers_localised = Some(true);
    metrics.layer_max_abs_diff = Some(propagated.diffs());
    if let Some([ratio, cand, floor]) = propagated.calibrated() {
        metrics.layer_calibrated_ratio = Some(ratio);
        metrics.layer_e_cand = Some(cand);
        metrics.layer_e_floor = Some(floor);
    }
    let local_floor = floors.map(|f| (f.local, f.local_truth.unwrap_or_else(|| tensors(f.truth))));
    let local = match local.and_then(|l| profile(expected, l, local_floor, rules)) {
        Some(Ok(l)) => Some(l),
        Some(Err(why)) => {
            lines.push(format!("local layer runs: not available ({why})"));
            None
        }
        None => None,
    };
    let against = if rules.calibrated.is_some() { " (max |x − f64| candidate/floor)" } else { "" };
    if let Some(l) = &local {
        metrics.layer_local_max_abs_diff = Some(l.diffs());
        if let Some([ratio, cand, floor]) = l.calibrated() {
            precision_wide(&ratio, rules, lines);
            metrics.layer_local_calibrated_ratio = Some(ratio);
            metrics.layer_local_e_cand = Some(cand);
            metrics.layer_local_e_floor = Some(floor);
        }
        let both = format!("propagated [{}]; local [{}]{against}", propagated.text(), l.text());
        return match l.first {
            Some(i) => {
                metrics.first_divergent_layer = Some(i);
                lines.push(format!(
                    "first divergent decoder layer {i} (fed the reference's stream: {}); {both}",
                    describe(&format!("layer {i}"), &l.judged[i])
                ));
                Some(i)
            }
            None => {
                lines.push(format!("decoder layers agree where they stand, {both}"));
                None
            }
        };
    }
    let profile = propagated.text();
    match (upstream, propagated.first) {
        (Some(c), _) => {
            lines.push(format!("decoder layers [{profile}]{against}: no layer blamed, their input ({c}) already differs"));
            None
        }
        (None, Some(i)) => {
            metrics.first_divergent_layer = Some(i);
            lines.push(format!(
                "first divergent decoder layer {i} ({}); per layer [{profile}]{against}",
                describe(&format!("layer {i}"), &propagated.judged[i])
            ));
            Some(i)
        }
        (None, None) => {
            lines.push(format!("decoder layers agree [{profile}]{against}"));
            None
        }
    }
}

/// Every layer beyond its local floor (at least two layers): not one layer's bug but the whole
/// arithmetic at a lower precision than the candidate claims — TF32 matmuls on a GPU, an f16
/// accumulation. Said, so the verdict does not read as "layer 0 is wrong".
fn precision_wide(ratios: &[f64], rules: &Rules, lines: &mut Vec<String>) {
    let Some(rule) = rules.calibrated else { return };
    // NaN counts as beyond the floor.
    if ratios.len() >= 2 && ratios.iter().all(|r| r.is_nan() || *r > rule.k) {
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        lines.push(format!(
            "every layer exceeds its own floor (local ratios ≥ {min:.1} > k {}): the candidate computes at a lower precision than its dtype \
             throughout (TF32 matmuls, a half-precision accumulation), not one layer's bug",
            rule.k
        ));
    }
}

/// Inside blamed layer `layer`: the first module (in forward order, HF's names) whose output in
/// the local run differs from the reference's, as "layer 3 mlp"; when every identifiable module
/// agrees, what is left after them; when none is identifiable, why. Metric `divergent_module`.
/// `floors`: the local floor's and the arbiter's module outputs per layer (calibrated rule).
#[allow(clippy::too_many_arguments)]
pub(super) fn module_blame(
    layer: usize,
    expected: &[ModuleOutputs],
    actual: &[ModuleOutputs],
    unidentified: &BTreeMap<(usize, String), String>,
    floors: Option<(&[ModuleOutputs], &[ModuleOutputs])>,
    rules: &Rules,
    lines: &mut Vec<String>,
    metrics: &mut L3Metrics,
) {
    let (Some(e), Some(a)) = (expected.get(layer), actual.get(layer)) else {
        let why =
            if expected.get(layer).is_none() { "the reference kept no module outputs" } else { "the export's node names name no module" };
        lines.push(format!("inside layer {layer}: not identifiable ({why})"));
        metrics.divergent_module = Some(MODULE_NOT_IDENTIFIABLE.to_string());
        return;
    };
    let floor_of = |module: &str| -> Option<Floor<'_>> {
        let (p, t) = floors?;
        let (p, t) = (p.get(layer)?.get(module)?, t.get(layer)?.get(module)?);
        (p.data.len() == e.get(module)?.data.len() && t.data.len() == p.data.len()).then(|| Floor::of(p, t))
    };
    let mut compared = Vec::new();
    for module in MODULES {
        let (Some(e), Some(a)) = (e.get(module), a.get(module)) else { continue };
        // Module outputs may carry the batch axis on one side only: compare the values.
        let r = if e.data.len() == a.data.len() {
            stage(module, &Dense::new(e.shape.clone(), a.data.clone()), e, floor_of(module), rules).ok()
        } else {
            None
        };
        match r {
            Some(r) if !r.pass() => {
                let part = format!("layer {layer} {module}");
                lines.push(format!(
                    "inside layer {layer}: {part} is the first part that differs ({}){}",
                    describe(module, &r),
                    agreed(&compared)
                ));
                metrics.divergent_module = Some(part);
                return;
            }
            Some(r) => compared.push(match r.ratio() {
                Some(ratio) => format!("{module} ratio {ratio:.2}"),
                None => format!("{module} {:.1e}", r.max_abs_diff()),
            }),
            None => compared.push(format!("{module} not comparable ({} vs {} values)", a.data.len(), e.data.len())),
        }
    }
    if compared.is_empty() {
        let why: Vec<&str> = unidentified.iter().filter(|((l, _), _)| *l == layer).map(|(_, w)| w.as_str()).collect();
        lines.push(format!(
            "inside layer {layer}: not identifiable ({})",
            if why.is_empty() { "no module output in common".to_string() } else { why.join("; ") }
        ));
        metrics.divergent_module = Some(MODULE_NOT_IDENTIFIABLE.to_string());
    } else {
        let part = format!("layer {layer} after its modules (residual adds, per-layer input, layer_scalar)");
        lines.push(format!("inside layer {layer}: every identified module agrees{}; the difference starts in {part}", agreed(&compared)));
        metrics.divergent_module = Some(part);
    }
}

fn agreed(compared: &[String]) -> String {
    if compared.is_empty() {
        String::new()
    } else {
        format!("; before it: {}", compared.join(", "))
    }
}

/// A per-layer profile of `layer_max_abs_diff` for tables: one bar per layer on a log scale
/// from 1e-7 (▁) to ≥ 1 (█), prefixed by the first divergent layer when there is one
/// (`layer 3 ▁▁▁▇▇▇`), followed by the local profile when there is one (`· local ▁▁▁▇▁▁`),
/// and under the calibrated rule the local ratios to each layer's floor, log scale from 1 (▁) to
/// ≥ 10⁷ (█) (`· ratio ▁▁▄▁▁▁`).
pub fn layer_sparkline(metrics: &L3Metrics) -> Option<String> {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    // `lowest`: the decade drawn as ▁; seven decades above it reach █.
    let bars = |values: &Option<Vec<f64>>, lowest: f64| -> Option<String> {
        Some(
            values
                .as_ref()?
                .iter()
                .map(|&v| match v {
                    // NaN shows as the tallest bar.
                    v if v.is_finite() => BARS[((v.max(lowest) / lowest).log10().floor().clamp(0.0, 7.0)) as usize],
                    _ => '█',
                })
                .collect(),
        )
    };
    let mut out = bars(&metrics.layer_max_abs_diff, 1e-7)?;
    if let Some(local) = bars(&metrics.layer_local_max_abs_diff, 1e-7) {
        out = format!("{out} · local {local}");
    }
    if let Some(ratio) = bars(&metrics.layer_local_calibrated_ratio, 1.0) {
        out = format!("{out} · ratio {ratio}");
    }
    Some(match metrics.first_divergent_layer {
        Some(i) => format!("layer {i} {out}"),
        None => out,
    })
}
