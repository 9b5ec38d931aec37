//! L3's sub-models in isolation: each ONNX sub-model's output on the reference's own inputs
//! against the reference's, so the first divergence names the component that makes it (an
//! upstream difference no longer smears over a correct decoder, nor hides a wrong one).

use super::stage::{describe, judge_slice, prefill_logits, stage, Calibration, Judged, Rules, StageError};
use crate::onnx::protocol;
use crate::outputs::{Component, Isolated, Run, Stage};
use crate::tier_metrics::L3Metrics;

/// One sub-model's verdict in isolation: its largest difference, its worst calibrated ratio and
/// the first of its outputs that differs.
#[derive(Default)]
struct Verdict {
    max_abs_diff: f64,
    ratio: Option<f64>,
    first: Option<Stage>,
    parts: Vec<String>,
}

impl Verdict {
    fn note(&mut self, at: Stage, name: &str, r: Result<Judged, StageError>) {
        match r {
            Ok(r) => {
                // NaN never agrees: a non-finite difference is the largest.
                let d = r.max_abs_diff();
                self.max_abs_diff = if d.is_nan() || self.max_abs_diff.is_nan() { f64::NAN } else { self.max_abs_diff.max(d) };
                if let Some(q) = r.ratio() {
                    self.ratio = Some(match self.ratio {
                        Some(p) if p.is_nan() || q.is_nan() => f64::NAN,
                        Some(p) => p.max(q),
                        None => q,
                    });
                }
                if !r.pass() && self.first.is_none() {
                    self.first = Some(at);
                }
                self.parts.push(describe(name, &r));
            }
            Err(e) => {
                self.max_abs_diff = f64::NAN;
                self.first.get_or_insert(at);
                self.parts.push(e.to_string());
            }
        }
    }

    fn line(&self, component: &str) -> String {
        let state = if self.first.is_some() { "differs" } else { "agrees" };
        format!("{component} in isolation {state} ({})", self.parts.join(", "))
    }
}

/// Judges `iso` (with `actual`'s prefill logits for a text-only package's decoder, see
/// [`Isolated::logits`]) against `expected` (the reference's run) and, under the calibrated rule,
/// against the arbiter with the reference at the candidate's precision as the floor (for the
/// decoder alone: the reference's own propagated run, whose inputs differ from the arbiter's
/// by the upstream rounding only): one line per sub-model, the metrics
/// `vision_encoder_isolated_max_abs_diff`, `embedding_isolated_max_abs_diff`,
/// `decoder_isolated_max_abs_diff` (and `decoder_isolated_pass`,
/// `decoder_isolated_calibrated_ratio`), and the first stage that differs in isolation, in
/// pipeline order.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
    expected: &Run,
    actual: &Run,
    iso: &Isolated,
    rules: &Rules,
    calibration: Option<&Calibration<'_>>,
    forced_prefill: Option<&Judged>,
    lines: &mut Vec<String>,
    metrics: &mut L3Metrics,
) -> Option<Stage> {
    let mut first = None;
    if let (Some(a), Some(e)) = (&iso.image_features, expected.prefill.components.get(&Component::ImageFeatures)) {
        let mut v = Verdict::default();
        let floor = calibration.and_then(|c| c.component(Component::ImageFeatures));
        v.note(Stage::Component(Component::ImageFeatures), protocol::IMAGE_FEATURES, stage(protocol::IMAGE_FEATURES, a, e, floor, rules));
        metrics.vision_encoder_isolated_max_abs_diff = Some(v.max_abs_diff);
        lines.push(v.line("vision_encoder"));
        first = first.or(v.first);
    }
    if !iso.text_only {
        let mut v = Verdict::default();
        for (c, a) in &iso.embedding {
            if let Some(e) = expected.prefill.components.get(c) {
                let floor = calibration.and_then(|k| k.component(*c));
                v.note(Stage::Component(*c), c.as_str(), stage(c.as_str(), a, e, floor, rules));
            }
        }
        if !v.parts.is_empty() {
            metrics.embedding_isolated_max_abs_diff = Some(v.max_abs_diff);
            lines.push(v.line("embedding (on the reference's image features)"));
            first = first.or(v.first);
        }
    }
    let mut v = Verdict::default();
    // A text-only package's isolated decoder run is its forced run: the same logits against the
    // same floors unless its own are conditioned on its int8 steps — then the forced run's
    // judgement is that one (at real width each is a pass over [S, 262144] logits and the
    // arbiter's, read from its entry).
    let same_as_forced = iso.logits.is_none() && calibration.is_none_or(|c| c.isolated.is_none());
    let logits = iso.logits.as_ref().unwrap_or(&actual.prefill.logits);
    // Its own floors where they differ from the forced run's (conditioned on its int8 steps).
    let calibration = calibration.map(Calibration::for_isolated_decoder);
    let calibration = calibration.as_ref();
    let judged = match forced_prefill.filter(|_| same_as_forced) {
        Some(j) => Ok(j.clone()),
        None => prefill_logits(logits, expected, calibration, rules),
    };
    v.note(Stage::Logits, protocol::LOGITS, judged);
    if let (Some(a), Some(e)) = (&iso.step_logits, expected.generation.step_logits.get(1)) {
        let floor = calibration.and_then(|c| c.step(1));
        v.note(Stage::DecodeStep(1), "decode step 1", judge_slice("decode step 1", a, e, &[a.len()], floor, rules));
    }
    metrics.decoder_isolated_max_abs_diff = Some(v.max_abs_diff);
    metrics.decoder_isolated_pass = Some(v.first.is_none());
    if let Some(r) = v.ratio {
        metrics.decoder_isolated_calibrated_ratio = Some(r);
    }
    let what = if iso.text_only { "decoder (the whole text-only model)" } else { "decoder (on the reference's inputs_embeds)" };
    lines.push(v.line(what));
    first.or(v.first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::Dense;
    use crate::outputs::{GeneratedTokens, Prefill};

    const TOL: Rules = Rules { fixed: crate::tolerance::L3Tolerance { atol: 1e-3, rtol: 1e-3 }, calibrated: None };

    fn reference() -> Run {
        let mut prefill = Prefill { logits: Dense::new(vec![1, 1, 2], vec![1.0, 2.0]), ..Default::default() };
        prefill.components.insert(Component::ImageFeatures, Dense::new(vec![1, 2], vec![0.5, 0.5]));
        prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 1, 2], vec![0.5, 0.5]));
        Run {
            prefill,
            generation: GeneratedTokens { tokens: vec![1, 1], step_logits: vec![vec![1.0, 2.0], vec![3.0, 4.0]] },
            ..Default::default()
        }
    }

    fn isolated() -> Isolated {
        Isolated {
            image_features: Some(Dense::new(vec![1, 2], vec![0.5, 0.5])),
            embedding: [(Component::InputsEmbeds, Dense::new(vec![1, 1, 2], vec![0.5, 0.5]))].into(),
            logits: Some(Dense::new(vec![1, 1, 2], vec![1.0, 2.0])),
            step_logits: Some(vec![3.0, 4.0]),
            ..Default::default()
        }
    }

    fn judged(iso: &Isolated) -> (Option<Stage>, L3Metrics, Vec<String>) {
        let (mut lines, mut metrics) = (Vec::new(), L3Metrics::default());
        let first = judge(&reference(), &reference(), iso, &TOL, None, None, &mut lines, &mut metrics);
        (first, metrics, lines)
    }

    /// Guards: agreeing sub-models name no divergence; a vision encoder that differs is named
    /// even though the decoder agrees (and the decoder is cleared); a decoder that differs only
    /// at its isolated decode step is named there; NaN never agrees.
    #[test]
    fn first_component_that_differs_in_isolation() {
        let (first, m, lines) = judged(&isolated());
        assert_eq!(first, None, "{lines:?}");
        assert_eq!(m.decoder_isolated_pass, Some(true));
        let mut iso = isolated();
        iso.image_features = Some(Dense::new(vec![1, 2], vec![0.5, 0.6]));
        let (first, m, lines) = judged(&iso);
        assert_eq!(first, Some(Stage::Component(Component::ImageFeatures)));
        assert_eq!(m.decoder_isolated_pass, Some(true), "{lines:?}");
        assert!(lines[0].starts_with("vision_encoder in isolation differs"), "{lines:?}");
        let mut iso = isolated();
        iso.step_logits = Some(vec![3.0, 4.5]);
        let (first, m, _) = judged(&iso);
        assert_eq!(first, Some(Stage::DecodeStep(1)));
        assert_eq!(m.decoder_isolated_max_abs_diff, Some(0.5));
        let mut iso = isolated();
        iso.logits = Some(Dense::new(vec![1, 1, 2], vec![1.0, f32::NAN]));
        let (first, m, _) = judged(&iso);
        assert_eq!(first, Some(Stage::Logits));
        assert_eq!(m.decoder_isolated_pass, Some(false));
    }
}
