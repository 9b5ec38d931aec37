//! Which decoder layer an L3 divergence starts in: each layer's output compared in layer order
//! (they localise, never gate), and the per-layer profile reports draw.

use super::allclose::AllcloseReport;
use super::stage::{describe, stage};
use crate::metric_keys as key;
use crate::metric_keys::Metrics;
use crate::outputs::LayerOutputs;
use crate::tolerance::L3Tolerance;

/// Compares each decoder layer's output (they localise, never gate): the metrics
/// `layer_max_abs_diff` (per layer) and `first_divergent_layer` (the first layer outside the
/// tolerance). No layer is blamed when the decoder's inputs already differ (`upstream`: the
/// first divergent component), since every layer then inherits the difference.
pub(super) fn layer_localisation(
    expected: &LayerOutputs,
    actual: &LayerOutputs,
    upstream: Option<&str>,
    tol: &L3Tolerance,
    lines: &mut Vec<String>,
    metrics: &mut Metrics,
) {
    let (e, a) = match (expected, actual) {
        (LayerOutputs::Tensors(e), LayerOutputs::Tensors(a)) => (e, a),
        (LayerOutputs::NotRequested, _) | (_, LayerOutputs::NotRequested) => return,
        (LayerOutputs::Unavailable(why), _) | (_, LayerOutputs::Unavailable(why)) => {
            lines.push(format!("decoder layers: not localised ({why})"));
            metrics.insert(key::LAYERS_LOCALISED.into(), false.into());
            return;
        }
    };
    if e.len() != a.len() {
        lines.push(format!("decoder layers: not localised (the export exposes {} layers, the reference has {})", a.len(), e.len()));
        metrics.insert(key::LAYERS_LOCALISED.into(), false.into());
        return;
    }
    let mut diffs = Vec::with_capacity(e.len());
    let mut first: Option<(usize, AllcloseReport)> = None;
    for (i, (e, a)) in e.iter().zip(a).enumerate() {
        match stage(&format!("layer {i}"), a, e, tol) {
            Ok(r) => {
                diffs.push(serde_json::Value::from(r.max_abs_diff));
                if !r.pass && first.is_none() {
                    first = Some((i, r));
                }
            }
            Err(msg) => {
                lines.push(format!("decoder layers: not localised ({msg})"));
                metrics.insert(key::LAYERS_LOCALISED.into(), false.into());
                return;
            }
        }
    }
    metrics.insert(key::LAYERS_LOCALISED.into(), true.into());
    metrics.insert(key::LAYER_MAX_ABS_DIFF.into(), diffs.clone().into());
    let profile = diffs.iter().filter_map(|d| d.as_f64()).map(|d| format!("{d:.1e}")).collect::<Vec<_>>().join(" ");
    match (upstream, first) {
        (Some(c), _) => lines.push(format!("decoder layers [{profile}]: no layer blamed, their input ({c}) already differs")),
        (None, Some((i, r))) => {
            metrics.insert(key::FIRST_DIVERGENT_LAYER.into(), i.into());
            lines.push(format!("first divergent decoder layer {i} ({}); per layer [{profile}]", describe(&format!("layer {i}"), &r)));
        }
        (None, None) => lines.push(format!("decoder layers agree [{profile}]")),
    }
}

/// A per-layer profile of `layer_max_abs_diff` for tables: one bar per layer on a log scale
/// from 1e-7 (▁) to ≥ 1 (█), prefixed by the first divergent layer when there is one
/// (`layer 3 ▁▁▁▇▇▇`).
pub fn layer_sparkline(metrics: &Metrics) -> Option<String> {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let diffs = metrics.get(key::LAYER_MAX_ABS_DIFF)?.as_array()?;
    let bars: String = diffs
        .iter()
        .map(|d| match d.as_f64() {
            // log10 in [-7, 0] → 0..=7; NaN or a missing value shows as the tallest bar.
            Some(v) if v.is_finite() => BARS[((v.max(1e-7).log10() + 7.0).floor().clamp(0.0, 7.0)) as usize],
            _ => '█',
        })
        .collect();
    Some(match metrics.get(key::FIRST_DIVERGENT_LAYER).and_then(|v| v.as_u64()) {
        Some(i) => format!("layer {i} {bars}"),
        None => bars,
    })
}
