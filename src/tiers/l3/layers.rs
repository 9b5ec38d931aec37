//! Which decoder layer an L3 divergence starts in, and which part of it: each layer's output
//! compared in layer order, propagated and where it stands (they localise, never gate), and the
//! per-layer profile reports draw.

use super::allclose::AllcloseReport;
use super::stage::{describe, stage};
use crate::inputs::Dense;
use crate::metric_keys as key;
use crate::metric_keys::Metrics;
use crate::onnx::cut::MODULES;
use crate::outputs::{LayerOutputs, ModuleOutputs};
use crate::tolerance::L3Tolerance;
use std::collections::BTreeMap;

/// Each layer compared in layer order: the per-layer maximum differences and the first layer
/// outside the tolerance (with its report), or why the lists cannot be compared.
fn profile(expected: &LayerOutputs, actual: &LayerOutputs, tol: &L3Tolerance) -> Option<Result<Profile, NotLocalised>> {
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
    let mut p = Profile { diffs: Vec::with_capacity(e.len()), first: None };
    for (i, (e, a)) in e.iter().zip(a).enumerate() {
        match stage(&format!("layer {i}"), a, e, tol) {
            Ok(r) => {
                p.diffs.push(r.max_abs_diff);
                if !r.pass && p.first.is_none() {
                    p.first = Some((i, r));
                }
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
    #[error("the export exposes {export} layers, the reference has {reference}")]
    Count { export: usize, reference: usize },
    #[error(transparent)]
    Stage(super::stage::StageError),
}

/// What [`profile`] found.
struct Profile {
    diffs: Vec<f64>,
    first: Option<(usize, AllcloseReport)>,
}

impl Profile {
    fn text(&self) -> String {
        self.diffs.iter().map(|d| format!("{d:.1e}")).collect::<Vec<_>>().join(" ")
    }
}

/// Compares each decoder layer's output (they localise, never gate): the metrics
/// `layer_max_abs_diff` (per layer, propagated: each layer fed the previous layer's output of
/// the same run) and `first_divergent_layer`. With `local` (each layer fed the reference's
/// residual stream entering it) also `layer_local_max_abs_diff`, and the blamed layer is the
/// first whose *local* error exceeds the tolerance. Without it, no layer is blamed when the
/// decoder's inputs already differ (`upstream`: the first divergent component), since every
/// layer then inherits the difference. Returns the blamed layer.
pub(super) fn layer_localisation(
    expected: &LayerOutputs,
    actual: &LayerOutputs,
    local: Option<&LayerOutputs>,
    upstream: Option<&str>,
    tol: &L3Tolerance,
    lines: &mut Vec<String>,
    metrics: &mut Metrics,
) -> Option<usize> {
    let not_localised = |why: String, lines: &mut Vec<String>, metrics: &mut Metrics| {
        lines.push(format!("decoder layers: not localised ({why})"));
        metrics.insert(key::LAYERS_LOCALISED.into(), false.into());
    };
    let propagated = match profile(expected, actual, tol)? {
        Ok(p) => p,
        Err(why) => {
            not_localised(why.to_string(), lines, metrics);
            return None;
        }
    };
    metrics.insert(key::LAYERS_LOCALISED.into(), true.into());
    metrics.insert(key::LAYER_MAX_ABS_DIFF.into(), propagated.diffs.clone().into());
    let local = match local.and_then(|l| profile(expected, l, tol)) {
        Some(Ok(l)) => Some(l),
        Some(Err(why)) => {
            lines.push(format!("local layer runs: not available ({why})"));
            None
        }
        None => None,
    };
    if let Some(l) = &local {
        metrics.insert(key::LAYER_LOCAL_MAX_ABS_DIFF.into(), l.diffs.clone().into());
        let both = format!("propagated [{}]; local [{}]", propagated.text(), l.text());
        return match &l.first {
            Some((i, r)) => {
                metrics.insert(key::FIRST_DIVERGENT_LAYER.into(), (*i).into());
                lines.push(format!(
                    "first divergent decoder layer {i} (fed the reference's stream: {}); {both}",
                    describe(&format!("layer {i}"), r)
                ));
                Some(*i)
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
            lines.push(format!("decoder layers [{profile}]: no layer blamed, their input ({c}) already differs"));
            None
        }
        (None, Some((i, r))) => {
            metrics.insert(key::FIRST_DIVERGENT_LAYER.into(), i.into());
            lines.push(format!("first divergent decoder layer {i} ({}); per layer [{profile}]", describe(&format!("layer {i}"), &r)));
            Some(i)
        }
        (None, None) => {
            lines.push(format!("decoder layers agree [{profile}]"));
            None
        }
    }
}

/// Inside blamed layer `layer`: the first module (in forward order, HF's names) whose output in
/// the local run differs from the reference's, as "layer 3 mlp"; when every identifiable module
/// agrees, what is left after them; when none is identifiable, why. Metric `divergent_module`.
pub(super) fn module_blame(
    layer: usize,
    expected: &[ModuleOutputs],
    actual: &[ModuleOutputs],
    unidentified: &BTreeMap<(usize, String), String>,
    tol: &L3Tolerance,
    lines: &mut Vec<String>,
    metrics: &mut Metrics,
) {
    let (Some(e), Some(a)) = (expected.get(layer), actual.get(layer)) else {
        let why =
            if expected.get(layer).is_none() { "the reference kept no module outputs" } else { "the export's node names name no module" };
        lines.push(format!("inside layer {layer}: not identifiable ({why})"));
        metrics.insert(key::DIVERGENT_MODULE.into(), "not identifiable".into());
        return;
    };
    let mut compared = Vec::new();
    for module in MODULES {
        let (Some(e), Some(a)) = (e.get(module), a.get(module)) else { continue };
        // Module outputs may carry the batch axis on one side only: compare the values.
        let r = if e.data.len() == a.data.len() { stage(module, &Dense::new(e.shape.clone(), a.data.clone()), e, tol).ok() } else { None };
        match r {
            Some(r) if !r.pass => {
                let part = format!("layer {layer} {module}");
                lines.push(format!(
                    "inside layer {layer}: {part} is the first part that differs ({}){}",
                    describe(module, &r),
                    agreed(&compared)
                ));
                metrics.insert(key::DIVERGENT_MODULE.into(), part.into());
                return;
            }
            Some(r) => compared.push(format!("{module} {:.1e}", r.max_abs_diff)),
            None => compared.push(format!("{module} not comparable ({} vs {} values)", a.data.len(), e.data.len())),
        }
    }
    if compared.is_empty() {
        let why: Vec<&str> = unidentified.iter().filter(|((l, _), _)| *l == layer).map(|(_, w)| w.as_str()).collect();
        lines.push(format!(
            "inside layer {layer}: not identifiable ({})",
            if why.is_empty() { "no module output in common".to_string() } else { why.join("; ") }
        ));
        metrics.insert(key::DIVERGENT_MODULE.into(), "not identifiable".into());
    } else {
        let part = format!("layer {layer} after its modules (residual adds, per-layer input, layer_scalar)");
        lines.push(format!("inside layer {layer}: every identified module agrees{}; the difference starts in {part}", agreed(&compared)));
        metrics.insert(key::DIVERGENT_MODULE.into(), part.into());
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
/// (`layer 3 ▁▁▁▇▇▇`), followed by the local profile when there is one (`· local ▁▁▁▇▁▁`).
pub fn layer_sparkline(metrics: &Metrics) -> Option<String> {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let bars = |key: &str| -> Option<String> {
        let diffs = metrics.get(key)?.as_array()?;
        Some(
            diffs
                .iter()
                .map(|d| match d.as_f64() {
                    // log10 in [-7, 0] → 0..=7; NaN or a missing value shows as the tallest bar.
                    Some(v) if v.is_finite() => BARS[((v.max(1e-7).log10() + 7.0).floor().clamp(0.0, 7.0)) as usize],
                    _ => '█',
                })
                .collect(),
        )
    };
    let mut out = bars(key::LAYER_MAX_ABS_DIFF)?;
    if let Some(local) = bars(key::LAYER_LOCAL_MAX_ABS_DIFF) {
        out = format!("{out} · local {local}");
    }
    Some(match metrics.get(key::FIRST_DIVERGENT_LAYER).and_then(|v| v.as_u64()) {
        Some(i) => format!("layer {i} {out}"),
        None => out,
    })
}
