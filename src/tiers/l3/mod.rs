//! L3 synthetic tier: the export and the reference, on the same (random) weights and inputs, must
//! give the same logits at every prefill position and every KV-cache decode step, within
//! `atol + rtol·|ref|`. The components both back ends produce are compared first, in pipeline
//! order (image features, input embeddings, per-layer inputs), then the logits, so the verdict
//! names where divergence starts.

pub mod allclose;
pub mod calibrated;
mod isolated;
mod judge;
mod layers;
pub mod quantization;
mod stage;
mod table;

use super::outcome::{Status, TierOutcome};
use crate::metrics::argmax;
use crate::onnx::protocol;
use crate::outputs::{Isolation, Run, Stage};
use crate::tier_metrics::{L3Rule, RuleVerdict};
use crate::tolerance::L3Tolerance;
use judge::{Findings, Said};
pub use layers::layer_sparkline;
use onnx_parity_reference::BidirectionalScope;
use stage::prefill_logits;
pub use stage::{Calibration, Rules};
use table::calibration_row;

/// L3 verdict: `actual` (an implementation's prefill and teacher-forced decode) against
/// `expected` (the reference's, computed in `scope`). With `calibration` the calibrated rule
/// decides (every tensor against the f64 arbiter, the reference at the candidate's precision as
/// the floor) and mobius's fixed row `tol` is reported beside it (`fixed_row_status`); without,
/// the fixed row decides.
///
/// With `isolation` ([`Isolation::Done`]) the first divergence is the first component that
/// differs *in isolation* (each sub-model on the oracle's own inputs), the layer profile comes
/// from the isolated decoder run, and the blamed layer is the first whose local error (fed the
/// oracle's stream) exceeds its rule, with the part inside it that differs first.
pub fn compare(
    expected: &Run,
    actual: &Run,
    isolation: &Isolation,
    scope: BidirectionalScope,
    tol: &L3Tolerance,
    calibration: Option<&Calibration<'_>>,
) -> TierOutcome {
    let rules = Rules { fixed: *tol, calibrated: calibration.map(|c| c.rule) };
    let mut f = Findings::default();
    // 1. The components, in pipeline order: they localise a divergence, and under the
    // calibrated rule a component beyond its own floor is a defect of the sub-model that makes
    // it and fails the verdict, even where the logits stay within k (at 12B width the vision
    // LayerNorm eps finding is 10× its floor on image_features, while the logits' own rounding
    // noise hides it); under the fixed row components only localise.
    let components_agree = judge::components(expected, actual, calibration, &rules, &mut f);
    // 2. The prefill logits.
    let prefill = prefill_logits(&actual.prefill.logits, expected, calibration, &rules);
    let last_only = actual.prefill.logits.shape.get(1) == Some(&1) && expected.prefill.logits.shape.get(1).is_some_and(|&s| s > 1);
    let prefill_report = prefill.as_ref().ok().cloned();
    let prefill_pass = f.note(Stage::Logits, prefill, Said::Outputs);
    // 3. The cached decode steps.
    let decode = judge::decode(expected, actual, calibration, &rules, &mut f);
    let fixed_pass = prefill_report.as_ref().is_some_and(|r| r.fixed.pass) && decode.fixed_pass;
    let steps = decode.steps;
    let mut pass = prefill_pass && decode.pass;
    if last_only {
        f.outputs.push("the build's logits cover the last position only (prune_lm_head): the prefill is judged there".into());
    }
    // 4. Where it diverges: the sub-models in isolation, the decoder layers, the module.
    let localised = judge::localise(expected, actual, isolation, calibration, &rules, prefill_report.as_ref(), &mut f);
    if rules.calibrated.is_some() {
        pass &= components_agree && localised.isolated_agree;
    }
    // Under the calibrated rule a layer beyond its own local floor is a defect of that layer
    // and fails the verdict, even where the logits stay within k: a 1 % error in one layer of an
    // f16 export is lost in the logits' noise but stands 10–20× above the layer's floor.
    let calibrated_layers = rules.calibrated.is_some() && f.metrics.l3.layer_local_calibrated_ratio.is_some();
    if let (Some(k), true) = (localised.blamed, calibrated_layers) {
        if pass {
            f.localisation.push(format!(
                "decoder layer {k} fails: its local error exceeds its own floor by more than k although the logits stay within it"
            ));
        }
        pass = false;
        f.first_divergence.get_or_insert(Stage::Layer(k));
    }
    if let Some(k) = localised.blamed {
        judge::blame_module(k, expected, isolation, calibration, &rules, &mut f);
    }
    // 5. The verdict, decided once from the steps' findings.
    let (lines, first_divergence, metrics, mut table) = f.lines();

    let (status, rule_line) = match &rules.calibrated {
        Some(c) => (
            if pass { Status::Pass } else { Status::Fail },
            format!(
                "rule calibrated (k {}, δ {} ulp of {:.1e}; mobius's fixed row atol {:.0e} + rtol {:.0e}·|ref|: {})",
                c.k,
                c.delta_ulps,
                c.epsilon,
                tol.atol,
                tol.rtol,
                if fixed_pass { "pass" } else { "fail" }
            ),
        ),
        None => {
            (if pass { Status::Pass } else { Status::Fail }, format!("rule fixed (atol {:.0e} + rtol {:.0e}·|ref|)", tol.atol, tol.rtol))
        }
    };
    let mut out = TierOutcome::new(status, format!("scope {scope}; {rule_line}; {}", lines.join("; ")));
    *out.metrics = metrics;
    let l3 = &mut out.metrics.l3;
    l3.decode_steps = Some(steps.saturating_sub(1));
    l3.bidirectional_scope = Some(scope.as_str().to_string());
    l3.l3_rule = Some(if rules.calibrated.is_some() { L3Rule::Calibrated } else { L3Rule::Fixed });
    l3.fixed_row_status = Some(RuleVerdict::of(fixed_pass));
    if let Some(r) = prefill_report {
        table.insert(protocol::LOGITS.into(), calibration_row(&r));
        let compared = &mut out.metrics.compared;
        (compared.max_abs_diff, compared.mean_abs_diff, compared.cosine) =
            (Some(r.fixed.max_abs_diff), Some(r.fixed.mean_abs_diff), Some(r.fixed.cosine));
        let l3 = &mut out.metrics.l3;
        (l3.atol, l3.rtol) = (Some(r.fixed.atol), Some(r.fixed.rtol));
        if let Some(c) = &r.calibrated {
            l3.calibrated_ratio = Some(c.ratio);
            (l3.e_cand_rms, l3.e_cand_max, l3.e_floor_rms, l3.e_floor_max) =
                (Some(c.e_cand_rms), Some(c.e_cand_max), Some(c.e_floor_rms), Some(c.e_floor_max));
            l3.calibrated_k = Some(c.k);
        }
        if let (Some(a), Some(e)) = (actual.prefill.last_logits(), expected.prefill.last_logits()) {
            out.metrics.compared.argmax_match = Some(argmax(a) == argmax(e));
        }
    }
    let l3 = &mut out.metrics.l3;
    if rules.calibrated.is_some() {
        l3.calibration = Some(table);
    }
    l3.first_divergence = first_divergence.map(|d| d.to_string());
    l3.logits_position_max_abs_diff = position_profile(&actual.prefill.logits, &expected.prefill.logits);
    out
}

/// Per prompt position, the largest `|actual − expected|` over the vocabulary (NaN where either is
/// not finite), when both logits are `[1, S, V]` of one shape.
fn position_profile(actual: &crate::inputs::Dense<f32>, expected: &crate::inputs::Dense<f32>) -> Option<Vec<f64>> {
    if actual.shape != expected.shape || actual.shape.len() != 3 || actual.shape[2] == 0 {
        return None;
    }
    use rayon::prelude::*;
    let v = actual.shape[2];
    // Rows side by side: each row's maximum is its own (order-free), and at 12B width the
    // profile is a 288 M-element pass.
    Some(
        actual
            .data
            .par_chunks(v)
            .zip(expected.data.par_chunks(v))
            .map(|(a, e)| {
                // NaN where any difference is NaN, else the largest (a form the compiler
                // vectorises: the maximum ignoring NaN, and whether one was seen).
                let (mut worst, mut nan) = (0.0f64, false);
                for (&a, &e) in a.iter().zip(e) {
                    let d = (f64::from(a) - f64::from(e)).abs();
                    worst = worst.max(d);
                    nan |= d.is_nan();
                }
                if nan {
                    f64::NAN
                } else {
                    worst
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::Dense;
    use crate::outputs::LocalLayers;
    use crate::outputs::{Component, GeneratedTokens, LayerOutputs, Prefill};
    use crate::tolerance::CalibratedRule;

    /// The reference's run and the mask scope it ran in.
    struct ReferenceRun {
        scope: BidirectionalScope,
        run: Run,
    }

    /// An export's teacher-forced run.
    struct OnnxRun {
        forced: Run,
    }

    fn compare(r: &ReferenceRun, o: &OnnxRun, tol: &L3Tolerance) -> TierOutcome {
        super::compare(&r.run, &o.forced, &Isolation::NotRun, r.scope, tol, None)
    }

    fn runs(onnx_logits: Vec<f32>, onnx_step: Vec<f32>) -> (ReferenceRun, OnnxRun) {
        let embeds = Dense::new(vec![1, 2, 1], vec![0.5, 0.5]);
        let reference = ReferenceRun {
            scope: BidirectionalScope::None,
            run: Run {
                prefill: Prefill {
                    logits: Dense::new(vec![1, 2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
                    components: [(Component::InputsEmbeds, embeds.clone())].into(),
                    layers: LayerOutputs::NotRequested,
                    ..Default::default()
                },
                generation: GeneratedTokens { tokens: vec![2, 2], step_logits: vec![vec![3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]] },
                step_inputs: Default::default(),
            },
        };
        let onnx = OnnxRun {
            forced: Run {
                prefill: Prefill {
                    logits: Dense::new(vec![1, 2, 3], onnx_logits),
                    components: [(Component::InputsEmbeds, embeds)].into(),
                    layers: LayerOutputs::NotRequested,
                    ..Default::default()
                },
                generation: GeneratedTokens { tokens: vec![2, 2], step_logits: vec![vec![3.0, 4.0, 5.0], onnx_step] },
                step_inputs: Default::default(),
            },
        };
        (reference, onnx)
    }

    const TOL: L3Tolerance = L3Tolerance { atol: 1e-3, rtol: 1e-3 };

    /// Guards: identical runs pass (the next tests show the same runs with one bad value fail).
    #[test]
    fn equal_runs_pass() {
        let (r, o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        assert_eq!(compare(&r, &o, &TOL).status, Status::Pass);
    }

    /// Guards the last-position build (ORT GenAI's prune_lm_head): its one prefill row is judged
    /// against the reference's last position (step 0), passes when equal and fails when not.
    #[test]
    fn last_position_logits_are_judged_at_the_last_position() {
        let (r, mut o) = runs(vec![0.0; 6], vec![1.0, 1.0, 9.0]);
        o.forced.prefill.logits = Dense::new(vec![1, 1, 3], vec![3.0, 4.0, 5.0]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert!(out.message.contains("the last position only (prune_lm_head)"), "{}", out.message);
        o.forced.prefill.logits = Dense::new(vec![1, 1, 3], vec![3.0, 4.1, 5.0]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Fail, "{}", out.message);
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("logits"));
    }

    /// Guards: a NaN in the export's prefill logits fails L3 (NaN never passes).
    #[test]
    fn nan_prefill_fails() {
        let (r, o) = runs(vec![0.0, 1.0, f32::NAN, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Fail, "{}", out.message);
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("logits"));
    }

    /// Guards: a prefill that agrees does not hide a KV-cache decode step that does not.
    #[test]
    fn diverging_decode_step_fails() {
        let (r, o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.1]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Fail, "{}", out.message);
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("decode step 1"));
    }

    /// Guards: a diverging component is named as the first divergence even when the logits
    /// agree, and it does not gate on its own.
    #[test]
    fn diverging_component_is_localised() {
        let (r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        o.forced.prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 2, 1], vec![0.5, 0.9]));
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("inputs_embeds"));
    }

    /// Guards: an export that stops producing decode steps early fails.
    #[test]
    fn missing_decode_steps_fail() {
        let (r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        o.forced.generation.step_logits.truncate(1);
        assert_eq!(compare(&r, &o, &TOL).status, Status::Fail);
    }

    fn layers(values: &[f32]) -> LayerOutputs {
        LayerOutputs::Tensors(values.iter().map(|&v| Dense::new(vec![1, 1, 2], vec![v, 1.0])).collect())
    }

    /// Guards: the first layer outside the tolerance is named; the verdict still gates on logits.
    #[test]
    fn first_divergent_layer_is_named() {
        let (mut r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        r.run.prefill.layers = layers(&[1.0, 2.0, 3.0, 4.0]);
        o.forced.prefill.layers = layers(&[1.0, 2.0, 3.5, 4.5]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert_eq!(out.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(2), "{}", out.message);
        assert_eq!(out.metrics.value("layer_max_abs_diff").as_ref().and_then(|v| v.as_array()).map(|a| a.len()), Some(4));
        assert!(out.message.contains("first divergent decoder layer 2"), "{}", out.message);
        o.forced.prefill.layers = layers(&[1.0, 2.0, 3.0, 4.0]);
        let out = compare(&r, &o, &TOL);
        assert!(out.metrics.value("first_divergent_layer").is_none());
        assert!(out.message.contains("decoder layers agree"), "{}", out.message);
    }

    /// Guards: no layer is blamed when a component upstream of the decoder already differs, and
    /// unavailable or mismatched layer lists are said, not guessed.
    #[test]
    fn layers_are_not_blamed_for_upstream_differences() {
        let (mut r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        o.forced.prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 2, 1], vec![0.5, 0.9]));
        r.run.prefill.layers = layers(&[1.0, 2.0]);
        o.forced.prefill.layers = layers(&[1.5, 2.5]);
        let out = compare(&r, &o, &TOL);
        assert!(out.metrics.value("first_divergent_layer").is_none(), "{}", out.message);
        assert!(out.message.contains("no layer blamed, their input (inputs_embeds) already differs"), "{}", out.message);
        o.forced.prefill.layers = LayerOutputs::Unavailable("boundaries not identifiable: x".into());
        let out = compare(&r, &o, &TOL);
        assert!(out.message.contains("not localised (boundaries not identifiable: x)"), "{}", out.message);
        assert_eq!(out.metrics.value("layers_localised"), Some(serde_json::Value::Bool(false)));
        o.forced.prefill.layers = layers(&[1.0]);
        assert!(compare(&r, &o, &TOL).message.contains("exposes 1 layers, the reference has 2"));
    }

    fn isolated(r: &ReferenceRun, layers: LayerOutputs, local: LayerOutputs) -> Isolation {
        Isolation::Done(Box::new(crate::outputs::Isolated {
            embedding: r.run.prefill.components.clone(),
            logits: Some(r.run.prefill.logits.clone()),
            layers,
            local,
            ..Default::default()
        }))
    }

    /// Guards the local blame: with isolation the blamed layer is the first whose *local* error
    /// exceeds the tolerance, even when a component upstream differs (the old rule blamed none),
    /// and a layer that only inherits an earlier layer's error is not blamed.
    #[test]
    fn local_error_blames_where_the_layer_stands() {
        let (mut r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        o.forced.prefill.components.insert(Component::InputsEmbeds, Dense::new(vec![1, 2, 1], vec![0.5, 0.9]));
        r.run.prefill.layers = layers(&[1.0, 2.0, 3.0]);
        // Propagated: layers 1 and 2 off; locally only layer 1.
        let iso = isolated(&r, layers(&[1.0, 2.5, 3.5]), layers(&[1.0, 2.5, 3.0]));
        let out = super::compare(&r.run, &o.forced, &iso, r.scope, &TOL, None);
        assert_eq!(out.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(1), "{}", out.message);
        assert_eq!(out.metrics.value("layer_local_max_abs_diff").as_ref().and_then(|v| v.as_array()).map(|a| a.len()), Some(3));
        assert!(out.message.contains("first divergent decoder layer 1 (fed the reference's stream"), "{}", out.message);
        assert!(out.message.contains("propagated [0.0e0 5.0e-1 5.0e-1]; local [0.0e0 5.0e-1 0.0e0]"), "{}", out.message);
        // The reference kept no module outputs: said, not guessed.
        assert_eq!(out.metrics.value("divergent_module").as_ref().and_then(|v| v.as_str()), Some("not identifiable"), "{}", out.message);
        let iso = isolated(&r, layers(&[1.0, 2.5, 3.5]), layers(&[1.0, 2.0, 3.0]));
        let out = super::compare(&r.run, &o.forced, &iso, r.scope, &TOL, None);
        assert!(out.metrics.value("first_divergent_layer").is_none(), "{}", out.message);
        assert!(out.message.contains("decoder layers agree where they stand"), "{}", out.message);
        // Local runs unavailable: the isolated propagated profile blames, with the reason said.
        let iso = isolated(&r, layers(&[1.0, 2.5, 3.5]), LayerOutputs::Unavailable("cut refused".into()));
        let out = super::compare(&r.run, &o.forced, &iso, r.scope, &TOL, None);
        assert!(out.message.contains("local layer runs: not available (cut refused)"), "{}", out.message);
        assert_eq!(out.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(1), "{}", out.message);
        let out = super::compare(&r.run, &o.forced, &Isolation::Failed("boom".into()), r.scope, &TOL, None);
        assert!(out.message.contains("in isolation: not judged (boom)"), "{}", out.message);
    }

    /// Guards the part named inside a blamed layer: the first module in forward order that
    /// differs; when all agree, what is left after them.
    #[test]
    fn module_inside_the_blamed_layer() {
        let (mut r, o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        r.run.prefill.layers = layers(&[1.0, 2.0]);
        let m = |attn: f32, mlp: f32| -> crate::outputs::ModuleOutputs {
            [("self_attn".to_string(), Dense::new(vec![1, 1, 1], vec![attn])), ("mlp".to_string(), Dense::new(vec![1, 1, 1], vec![mlp]))]
                .into()
        };
        r.run.prefill.modules = vec![m(0.0, 0.0), m(1.0, 1.0)];
        let with = |attn: f32, mlp: f32| {
            let Isolation::Done(mut iso) = isolated(&r, layers(&[1.0, 2.5]), layers(&[1.0, 2.5])) else { unreachable!() };
            iso.modules = vec![m(0.0, 0.0), m(attn, mlp)];
            super::compare(&r.run, &o.forced, &Isolation::Done(iso), r.scope, &TOL, None)
        };
        let part = |out: &TierOutcome| out.metrics.value("divergent_module").as_ref().and_then(|v| v.as_str()).map(String::from);
        assert_eq!(part(&with(1.0, 1.5)).as_deref(), Some("layer 1 mlp"));
        assert_eq!(part(&with(1.5, 1.5)).as_deref(), Some("layer 1 self_attn"));
        let out = with(1.0, 1.0);
        assert!(part(&out).is_some_and(|p| p.starts_with("layer 1 after its modules")), "{}", out.message);
    }

    /// Guards the table profile: a log-scale bar per layer and the blamed layer.
    #[test]
    fn sparkline() {
        let mut m = crate::tier_metrics::L3Metrics::default();
        assert_eq!(layer_sparkline(&m), None);
        m.layer_max_abs_diff = Some(vec![1e-9, 5e-7, 2e-3, 0.5, 30.0]);
        assert_eq!(layer_sparkline(&m).as_deref(), Some("▁▁▅▇█"));
        m.first_divergent_layer = Some(2);
        assert_eq!(layer_sparkline(&m).as_deref(), Some("layer 2 ▁▁▅▇█"));
    }

    fn with_steps(reference: Vec<Vec<f32>>, onnx: Vec<Vec<f32>>) -> TierOutcome {
        let (mut r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        r.run.generation.step_logits = reference;
        o.forced.generation.step_logits = onnx;
        compare(&r, &o, &TOL)
    }

    /// Guards (mutation testing): the decode step reported is the one with the largest
    /// difference (the first of equal ones), and a failing step beats a passing one with a
    /// larger absolute difference (a relative bound passed it).
    #[test]
    fn worst_decode_step_is_reported() {
        let z = vec![0.0f32; 3];
        let d = |x: f32| vec![0.0, 0.0, x];
        let worst = |out: &TierOutcome| {
            out.message.split("; ").find(|l| l.starts_with("decode step")).map(|l| l.split(':').next().unwrap().to_string())
        };
        let out = with_steps(vec![z.clone(), z.clone(), z.clone()], vec![z.clone(), d(0.0), d(1e-4)]);
        assert_eq!(worst(&out).as_deref(), Some("decode step 2 (worst of 2, fed token 2)"), "{}", out.message);
        assert_eq!(out.status, Status::Pass);
        assert!(out.metrics.value("first_divergence").is_none(), "agreeing steps name no divergence: {}", out.message);
        let out = with_steps(vec![z.clone(), z.clone(), z.clone()], vec![z.clone(), d(1e-4), d(1e-4)]);
        assert_eq!(worst(&out).as_deref(), Some("decode step 1 (worst of 2, fed token 2)"), "{}", out.message);
        let out = with_steps(vec![z.clone(), z.clone(), z.clone()], vec![z.clone(), d(1e-4), d(0.0)]);
        assert_eq!(worst(&out).as_deref(), Some("decode step 1 (worst of 2, fed token 2)"), "{}", out.message);
        assert_eq!(out.status, Status::Pass);
        let big = vec![0.0, 0.0, 1000.0];
        let out = with_steps(vec![z.clone(), big.clone(), z.clone()], vec![z.clone(), vec![0.0, 0.0, 1000.5], d(0.01)]);
        assert_eq!(out.status, Status::Fail);
        assert_eq!(worst(&out).as_deref(), Some("decode step 2 (worst of 2, fed token 2)"), "{}", out.message);
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("decode step 2"));
    }

    /// Guards (mutation testing): a reference with no cached step (only step 0, the prefill's
    /// last position) asks nothing of the export's decode steps.
    #[test]
    fn no_cached_steps_to_compare_pass() {
        let out = with_steps(vec![vec![3.0, 4.0, 5.0]], vec![]);
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert_eq!(out.metrics.value("decode_steps").as_ref().and_then(|v| v.as_u64()), Some(0));
    }

    /// Guards (mutation testing): the message describes each stage (max_abs_diff, where, how
    /// many outside the tolerance), the layer line comes right after the components and before
    /// the logits, and `argmax_match` says whether the last positions agree.
    #[test]
    fn message_order_and_argmax_metric() {
        let (mut r, mut o) = runs(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], vec![1.0, 1.0, 9.0]);
        r.run.prefill.layers = layers(&[1.0, 2.0]);
        o.forced.prefill.layers = layers(&[1.0, 2.5]);
        let out = compare(&r, &o, &TOL);
        let at = |what: &str| out.message.find(what).unwrap_or_else(|| panic!("no {what:?} in {}", out.message));
        assert!(
            out.message.starts_with("scope none; rule fixed (atol 1e-3 + rtol 1e-3·|ref|); inputs_embeds: max_abs_diff 0.000e0 at ["),
            "{}",
            out.message
        );
        let layer = at("; first divergent decoder layer 1 (layer 1: max_abs_diff 5.000e-1 at [");
        let logits = at("; logits: max_abs_diff 0.000e0 at [");
        assert!(at("inputs_embeds") < layer && layer < logits && logits < at("; decode step 1"), "{}", out.message);
        assert!(out.message.contains("0 of 6 outside atol 1e-3 + rtol 1e-3·|ref|"), "{}", out.message);
        assert_eq!(out.metrics.value("argmax_match"), Some(serde_json::Value::Bool(true)));
        let (r, o) = runs(vec![0.0, 1.0, 2.0, 3.0, 9.0, 5.0], vec![1.0, 1.0, 9.0]);
        let out = compare(&r, &o, &TOL);
        assert_eq!(out.metrics.value("argmax_match"), Some(serde_json::Value::Bool(false)), "{}", out.message);
    }

    // ----- the calibrated rule (docs/design.md §2b) -----

    const CAL: CalibratedRule = CalibratedRule { k: 4.0, delta_ulps: 1.0, epsilon: 1.0 / 8_388_608.0 };

    /// A reference run `truth + floor_err` (the floor), the truth, and a candidate `truth + e`.
    fn calibrated_runs(floor_err: f32, cand_err: f32) -> (Run, Run, Run, LocalLayers) {
        let (r, _) = runs(vec![0.0; 6], vec![0.0; 3]);
        let truth = r.run;
        let shift = |run: &Run, d: f32| {
            let mut out = run.clone();
            out.prefill.logits.data.iter_mut().for_each(|v| *v += d);
            out.generation.step_logits.iter_mut().for_each(|s| s.iter_mut().for_each(|v| *v += d));
            out
        };
        let local = LocalLayers::default();
        (shift(&truth, floor_err), truth.clone(), shift(&truth, cand_err), local)
    }

    fn judged(floor: &Run, truth: &Run, cand: &Run, local: &LocalLayers) -> TierOutcome {
        let cal = Calibration { rule: CAL, truth, floor, local, local_truth: None, isolated: None };
        super::compare(floor, cand, &Isolation::NotRun, BidirectionalScope::None, &TOL, Some(&cal))
    }

    /// Guards the calibrated verdict: within k times the reference's own error passes even where
    /// the fixed row fails (wide models), beyond it fails even where the fixed row passes (one
    /// bad layer of a half-precision export); both verdicts are reported.
    #[test]
    fn calibrated_rule_decides_and_reports_the_fixed_row() {
        // Floor 1e-2 (a wide model's f32 error), candidate 3e-2: fixed row fails, calibrated passes.
        let (floor, truth, cand, local) = calibrated_runs(1e-2, 3e-2);
        let out = judged(&floor, &truth, &cand, &local);
        assert_eq!(out.status, Status::Pass, "{}", out.message);
        assert_eq!(out.metrics.value("fixed_row_status").as_ref().and_then(|v| v.as_str()), Some("fail"));
        assert_eq!(out.metrics.value("l3_rule").as_ref().and_then(|v| v.as_str()), Some("calibrated"));
        let ratio = out.metrics.value("calibrated_ratio").as_ref().and_then(|v| v.as_f64()).unwrap();
        assert!(ratio > 2.9 && ratio < 3.1, "{ratio}");
        assert!(out.message.contains("rule calibrated (k 4"), "{}", out.message);
        // Floor 1e-6, candidate 5e-4: the fixed row passes, the calibrated rule fails.
        let (floor, truth, cand, local) = calibrated_runs(1e-6, 5e-4);
        let out = judged(&floor, &truth, &cand, &local);
        assert_eq!(out.status, Status::Fail, "{}", out.message);
        assert_eq!(out.metrics.value("fixed_row_status").as_ref().and_then(|v| v.as_str()), Some("pass"));
        assert_eq!(out.metrics.value("first_divergence").as_ref().and_then(|v| v.as_str()), Some("logits"));
        let row = &out.metrics.l3.calibration.as_ref().expect("the table")["logits"];
        assert_eq!(row.fixed_row_status, RuleVerdict::Pass);
        assert_eq!(row.calibrated.as_ref().map(|c| c.calibrated_status), Some(RuleVerdict::Fail));
        // NaN never passes.
        let (floor, truth, mut cand, local) = calibrated_runs(1e-2, 0.0);
        cand.prefill.logits.data[2] = f32::NAN;
        assert_eq!(judged(&floor, &truth, &cand, &local).status, Status::Fail);
    }

    /// Guards the local blame under the calibrated rule: the blamed layer is the first whose
    /// local error exceeds *its own* local floor by more than k, however small the error is in
    /// absolute terms, and the precision-wide note appears only when every layer is beyond it.
    #[test]
    fn calibrated_local_blame_uses_each_layers_floor() {
        let (floor, mut truth, cand, _) = calibrated_runs(0.0, 0.0);
        let l = |vals: &[f32]| vals.iter().map(|&v| Dense::new(vec![1, 1, 2], vec![v, 1.0])).collect::<Vec<_>>();
        truth.prefill.layers = LayerOutputs::Tensors(l(&[1.0, 2.0, 3.0]));
        let mut reference = floor.clone();
        reference.prefill.layers = LayerOutputs::Tensors(l(&[1.0, 2.0, 3.0]));
        // The local floor: 1e-4 off at every layer; the candidate: 2e-4 at layers 0 and 2, 1e-3 at layer 1.
        let local = LocalLayers { layers: l(&[1.0001, 2.0001, 3.0001]), modules: Vec::new() };
        let iso = Isolation::Done(Box::new(crate::outputs::Isolated {
            logits: None,
            layers: LayerOutputs::Tensors(l(&[1.0002, 2.001, 3.001])),
            local: LayerOutputs::Tensors(l(&[1.0002, 2.001, 3.0002])),
            ..Default::default()
        }));
        let cal = Calibration { rule: CAL, truth: &truth, floor: &reference, local: &local, local_truth: None, isolated: None };
        let out = super::compare(&reference, &cand, &iso, BidirectionalScope::None, &TOL, Some(&cal));
        assert_eq!(out.metrics.value("first_divergent_layer").as_ref().and_then(|v| v.as_u64()), Some(1), "{}", out.message);
        let ratios = out.metrics.l3.layer_local_calibrated_ratio.clone().expect("per layer");
        assert!(ratios[0] < 4.0 && ratios[1] > 4.0 && ratios[2] < 4.0, "{ratios:?}");
        assert!(!out.message.contains("every layer exceeds its own floor"), "{}", out.message);
        // Every layer 10x its floor: a precision-wide loss, said as such.
        let iso = Isolation::Done(Box::new(crate::outputs::Isolated {
            logits: None,
            layers: LayerOutputs::Tensors(l(&[1.001, 2.001, 3.001])),
            local: LayerOutputs::Tensors(l(&[1.001, 2.001, 3.001])),
            ..Default::default()
        }));
        let out = super::compare(&reference, &cand, &iso, BidirectionalScope::None, &TOL, Some(&cal));
        assert!(out.message.contains("every layer exceeds its own floor"), "{}", out.message);
    }
}
