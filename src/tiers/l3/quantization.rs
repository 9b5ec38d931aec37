//! What L3 says of a quantized build beside its arithmetic (judged against the reference on the
//! build's own dequantized weights, [`super::compare`]):
//!
//! - **Its weights are the checkpoint's.** Against the reference on its own weights a build whose
//!   one matmul has its scales off, or its nibbles in the wrong order, computes exactly what it
//!   claims: only its dequantized weights against the checkpoint's show it. Per weight, the
//!   relative error `rms(W_deq − W) / rms(W)`; a weight more than [`WEIGHT_ERROR_RATIO`] times the
//!   median of the build's weights of the same bit width is a wrong weight, blamed on its layer
//!   and module. (Quantization error is the same order for every weight quantized the same way:
//!   RTN int4 in blocks of 32 puts the fixtures' weights at 0.10–0.13; one matmul's scales ×1.25
//!   is 2.4× the median, nibbles swapped 11×.)
//! - **What the quantization costs** (not a failure: users choose builds by it): the export
//!   against the *float* reference per position — the KL divergence of the softmax, its mean and
//!   99th percentile, and how often the top-1 token agrees — as llama.cpp's perplexity tool
//!   reports KLD and "same top p".

use crate::metrics::argmax;
use crate::outputs::{Run, StreamedLogits};
use crate::tier_metrics::{Metrics, ScaleMismatch, WeightErrorRow};

/// A weight whose dequantization error is this many times the median of its build's weights
/// compared with it ([`judge_weights`]) is not the checkpoint's weight.
pub const WEIGHT_ERROR_RATIO: f64 = 1.6;

/// The weights' errors are measured by the evaluation (a pure metric, `crate::metrics`).
pub use crate::metrics::{relative_error, RelativeError, WeightError};

/// The layer index of a reference parameter name (`layers.3.…` → 3).
fn layer_of(key: &str) -> Option<usize> {
    key.strip_prefix("layers.")?.split('.').next()?.parse().ok()
}

/// Blames the layer and module of parameter `key` (`layers.1.mlp.gate_proj.weight` → layer 1
/// `mlp`) in `metrics`; returns the message's `; blamed on layer 1 mlp` (empty outside a layer).
fn blame(key: &str, metrics: &mut Metrics) -> String {
    let module = key.split('.').nth(2).unwrap_or("");
    let Some(layer) = layer_of(key) else { return String::new() };
    metrics.l3.first_divergent_layer = Some(layer);
    metrics.l3.divergent_module = Some(format!("layer {layer} {module}"));
    format!("; blamed on layer {layer} {module}")
}

/// Which weights a weight is compared with, and by which error: a weight whose steps are read
/// ([`WeightError::rounding_error`]) with every such weight by that error (≈ 1 for
/// round-to-nearest at any granularity: an int8 per-channel matrix and a uint8 per-tensor table
/// alike), the others with their bit width's by the relative error.
fn population(w: &WeightError) -> (Option<u32>, f64) {
    match w.rounding_error {
        Some(r) => (None, r),
        None => (Some(w.bits), w.relative_error),
    }
}

/// The weights check: each weight's error over the median of its population's ([`population`]);
/// the first (in layer order) beyond [`WEIGHT_ERROR_RATIO`] fails, named with its layer and
/// module. Returns the failure message, if any, and records `quantization_weight_error` (per
/// weight) and `quantization_weight_error_ratio_max`.
pub fn judge_weights(weights: &[WeightError], metrics: &mut Metrics) -> Option<String> {
    let mut groups: std::collections::BTreeMap<Option<u32>, Vec<f64>> = Default::default();
    for w in weights {
        let (group, error) = population(w);
        groups.entry(group).or_default().push(error);
    }
    let median = |group: Option<u32>| -> f64 {
        let mut v = groups.get(&group).cloned().unwrap_or_default();
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut table = std::collections::BTreeMap::new();
    let mut worst: Option<(f64, &WeightError)> = None;
    let mut first_bad: Option<(f64, &WeightError)> = None;
    let mut ordered: Vec<&WeightError> = weights.iter().collect();
    ordered.sort_by_key(|w| (layer_of(&w.key).unwrap_or(usize::MAX), w.key.clone()));
    for w in ordered {
        let (group, error) = population(w);
        let m = median(group);
        // NaN (a non-finite weight) is never within the budget.
        let ratio = if m > 0.0 {
            error / m
        } else if error == 0.0 {
            1.0
        } else {
            f64::INFINITY
        };
        let ratio = if ratio.is_nan() { f64::INFINITY } else { ratio };
        let row = WeightErrorRow {
            node: w.node.clone(),
            bits: w.bits,
            relative_error: w.relative_error,
            ratio_to_median: ratio,
            rounding_error: w.rounding_error,
        };
        table.insert(w.key.clone(), row);
        if worst.is_none_or(|(r, _)| ratio > r) {
            worst = Some((ratio, w));
        }
        if ratio > WEIGHT_ERROR_RATIO && first_bad.is_none() {
            first_bad = Some((ratio, w));
        }
    }
    metrics.quantized.quantization_weight_error = Some(table);
    if let Some((r, _)) = worst {
        metrics.quantized.quantization_weight_error_ratio_max = Some(r);
    }
    let (ratio, w) = first_bad?;
    let blamed = blame(&w.key, metrics);
    let measured = match w.rounding_error {
        Some(r) => format!(
            "{r:.2}× the error rounding to nearest on its own grid gives (rms of its steps / √12), {ratio:.1}× the median of the build's weights whose steps are read (> {WEIGHT_ERROR_RATIO})"
        ),
        None => format!("{ratio:.1}× the median of the build's int{} weights (> {WEIGHT_ERROR_RATIO})", w.bits),
    };
    Some(format!(
        "the build's `{}` (node `{}`, int{}) is not the checkpoint's weight: it dequantizes {:.3} off (rms relative), {measured}{}",
        w.key, w.node, w.bits, w.relative_error, blamed
    ))
}

/// The activation scales check: a tensor the build quantizes with one scale and dequantizes with
/// another (a QuantizeLinear and its DequantizeLinear, or a QLinearMatMul's `a_scale`, reading
/// different scales) comes out `dequantizing / quantizing` times what was measured, which is no
/// quantization of the model's function. The reference rounds it on the grid it is quantized
/// with, so the arithmetic fails too; this names the tensor, both scales and the layer and module
/// of its matmul. Returns the failure message, if any, and records
/// `quantization_activation_scale_mismatch`.
pub fn judge_activation_scales(build: &crate::onnx::quantized::QuantizedBuild, metrics: &mut Metrics) -> Option<String> {
    let mut found = Vec::new();
    let mut table = std::collections::BTreeMap::new();
    let mut ordered: Vec<&crate::onnx::quantized::QuantizedWeight> = build.weights.iter().collect();
    ordered.sort_by_key(|w| (layer_of(&w.key).unwrap_or(usize::MAX), w.key.clone()));
    for w in ordered {
        for (which, m, quantized) in w.rounding.mismatches() {
            table.insert(
                format!("{} ({which})", w.key),
                ScaleMismatch {
                    dequantized_by: m.node.clone(),
                    scale: f64::from(m.scale),
                    quantized_with: f64::from(quantized),
                    ratio: f64::from(m.scale / quantized),
                },
            );
            found.push((w, which, m, quantized));
        }
    }
    let (w, which, m, quantized) = found.first().copied()?;
    metrics.quantized.quantization_activation_scale_mismatch = Some(table);
    let blamed = blame(&w.key, metrics);
    Some(format!(
        "the {which} of `{}`'s matmul is quantized with scale {quantized:e} and dequantized by `{}` with {:e} ({:.4}×): its values come out scaled, not rounded{}{}",
        w.key,
        m.node,
        m.scale,
        m.scale / quantized,
        blamed,
        if found.len() > 1 { format!(" ({} such tensors)", found.len()) } else { String::new() }
    ))
}

/// `log Σ exp(x)`, in f64.
fn log_sum_exp(x: &[f32]) -> f64 {
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

/// `Σ p·(log p − log q)` over matching entries of two logit rows (or slices of them), with
/// `lp`, `lq` their whole rows' log-sum-exp.
fn kl_terms(p_logits: &[f32], q_logits: &[f32], lp: f64, lq: f64) -> f64 {
    p_logits
        .iter()
        .zip(q_logits)
        .map(|(&a, &b)| {
            let (la, lb) = (a as f64 - lp, b as f64 - lq);
            la.exp() * (la - lb)
        })
        .sum::<f64>()
}

/// `KL(p ‖ q)` of the softmax of two logit rows (`p` the float reference's), in nats.
fn kl(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    kl_terms(p_logits, q_logits, log_sum_exp(p_logits), log_sum_exp(q_logits)).max(0.0)
}

/// One row's KL (float ‖ candidate) and whether their top-1 tokens agree.
fn row_cost(f: &[f32], c: &[f32]) -> (f64, bool) {
    (kl(f, c), argmax(f).is_some() && argmax(f) == argmax(c))
}

/// [`row_cost`] of every prefill position with the float reference's logits streamed
/// (`[S, V]` made one vocabulary slice at a time, never whole): a first pass for each row's
/// log-sum-exp and argmax, a second for the KL terms. `candidate` is `[S, V]` row-major.
fn streamed_costs(float: &StreamedLogits, candidate: &[f32], v: usize) -> Result<Vec<(f64, bool)>, onnx_parity_reference::Error> {
    let s = candidate.len() / v;
    // Pass 1: online log-sum-exp (max m, Σ exp(x − m)) and argmax (lowest index of the max) per row.
    let (mut m, mut z, mut top) = (vec![f64::NEG_INFINITY; s], vec![0f64; s], vec![(f32::NEG_INFINITY, 0usize); s]);
    float.for_each_slice::<onnx_parity_reference::Error>(|start, cols, values| {
        for (r, row) in values.chunks_exact(cols).enumerate() {
            let slice_max = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
            let new_m = m[r].max(slice_max);
            z[r] = z[r] * (m[r] - new_m).exp() + row.iter().map(|&x| (x as f64 - new_m).exp()).sum::<f64>();
            m[r] = new_m;
            for (c, &x) in row.iter().enumerate() {
                if x > top[r].0 {
                    top[r] = (x, start + c);
                }
            }
        }
        Ok(())
    })?;
    let lse_p: Vec<f64> = m.iter().zip(&z).map(|(m, z)| m + z.ln()).collect();
    let lse_q: Vec<f64> = candidate.chunks_exact(v).map(log_sum_exp).collect();
    // Pass 2: Σ p·(log p − log q).
    let mut kls = vec![0f64; s];
    float.for_each_slice::<onnx_parity_reference::Error>(|start, cols, values| {
        for (r, row) in values.chunks_exact(cols).enumerate() {
            let q = &candidate[r * v + start..r * v + start + cols];
            kls[r] += kl_terms(row, q, lse_p[r], lse_q[r]);
        }
        Ok(())
    })?;
    Ok(kls
        .into_iter()
        .zip(top)
        .enumerate()
        .map(|(r, (k, (_, i)))| (k.max(0.0), argmax(&candidate[r * v..(r + 1) * v]) == Some(i)))
        .collect())
}

/// The quantization's cost: the candidate's logits against the float reference's at every prefill
/// position and decode step (both teacher-forced with the same tokens). Records
/// `quantization_kl_mean`, `quantization_kl_p99`, `quantization_top1_agreement` and the per
/// position `quantization_kl`; returns the line for the verdict.
pub fn cost(float: &Run, candidate: &Run, metrics: &mut Metrics) -> Option<String> {
    let v = *candidate.prefill.logits.shape.last()?;
    let float_shape = float.prefill.streamed.as_ref().map_or_else(|| float.prefill.logits.shape.clone(), |s| s.shape());
    if v == 0 || candidate.prefill.logits.shape != float_shape {
        return None;
    }
    // (KL, top-1 agrees) per prefill position, then per decode step.
    let mut rows: Vec<(f64, bool)> = match &float.prefill.streamed {
        None => float
            .prefill
            .logits
            .data
            .chunks_exact(v)
            .zip(candidate.prefill.logits.data.chunks_exact(v))
            .map(|(f, c)| row_cost(f, c))
            .collect(),
        Some(s) => match streamed_costs(s, &candidate.prefill.logits.data, v) {
            Ok(r) => r,
            Err(e) => return Some(format!("quantization's cost: the float reference's logits could not be made: {e}")),
        },
    };
    for (f, c) in float.generation.step_logits.iter().zip(&candidate.generation.step_logits) {
        if f.len() == v && c.len() == v {
            rows.push(row_cost(f, c));
        }
    }
    let kls: Vec<f64> = rows.iter().map(|(k, _)| *k).collect();
    let agree = rows.iter().filter(|(_, a)| *a).count();
    let mut sorted = kls.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let p99 = sorted.get(((sorted.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN);
    let mean = kls.iter().sum::<f64>() / kls.len().max(1) as f64;
    let top1 = agree as f64 / rows.len().max(1) as f64;
    let q = &mut metrics.quantized;
    (q.quantization_kl_mean, q.quantization_kl_p99, q.quantization_top1_agreement) = (Some(mean), Some(p99), Some(top1));
    q.quantization_kl = Some(kls);
    Some(format!(
        "quantization's cost against the float reference over {} positions: KL mean {mean:.3e}, p99 {p99:.3e} nats, top-1 agreement {:.1}% (reported, not judged)",
        rows.len(),
        top1 * 100.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: &str, e: f64) -> WeightError {
        WeightError { key: key.into(), node: format!("n/{key}"), bits: 4, relative_error: e, rounding_error: None }
    }

    /// Guards the weights check: uniform quantization error passes; one weight 2.5× the median
    /// fails, blamed on its layer and module; a NaN weight fails.
    #[test]
    fn one_weight_off_the_checkpoint_fails_and_is_blamed() {
        let good: Vec<WeightError> = (0..6).map(|l| w(&format!("layers.{l}.mlp.up_proj.weight"), 0.10 + 0.005 * l as f64)).collect();
        let mut m = Metrics::default();
        assert_eq!(judge_weights(&good, &mut m), None);
        let mut bad = good.clone();
        bad[3].relative_error = 0.28;
        let mut m = Metrics::default();
        let msg = judge_weights(&bad, &mut m).expect("fails");
        assert!(msg.contains("layers.3.mlp.up_proj.weight") && msg.contains("layer 3 mlp"), "{msg}");
        assert_eq!(m.l3.first_divergent_layer, Some(3));
        let mut nan = good.clone();
        nan[1].relative_error = f64::NAN;
        assert!(judge_weights(&nan, &mut Metrics::default()).is_some());
        assert!(relative_error(&[1.0, f32::NAN], &[1.0, 1.0]).is_nan());
    }

    /// Guards the steps-read population: weights compared by their error against rounding on their
    /// own grid, whatever their granularity (per channel 0.95, a per-tensor table 1.0), pass; one at
    /// 20x fails blamed on its layer and module; the two populations never mix medians (an int4
    /// weight at 0.12 relative beside them is judged with the int4 weights).
    #[test]
    fn weights_whose_steps_are_read_are_judged_on_their_own_grid() {
        let r = |key: &str, rounding: f64| WeightError { rounding_error: Some(rounding), bits: 8, ..w(key, 0.01 * rounding) };
        let mut good: Vec<WeightError> = (0..6).map(|l| r(&format!("layers.{l}.mlp.up_proj.weight"), 0.95 + 0.01 * l as f64)).collect();
        good.push(r("embed_tokens.weight", 1.0));
        good.push(w("layers.0.self_attn.q_proj.weight", 0.12));
        assert_eq!(judge_weights(&good, &mut Metrics::default()), None);
        let mut bad = good.clone();
        bad[2].rounding_error = Some(20.0);
        let mut m = Metrics::default();
        let msg = judge_weights(&bad, &mut m).expect("fails");
        assert!(msg.contains("layers.2.mlp.up_proj.weight") && msg.contains("own grid") && msg.contains("layer 2 mlp"), "{msg}");
        assert_eq!(m.l3.first_divergent_layer, Some(2));
    }

    /// Guards the activation scales check: a build whose tensors are dequantized with the scale
    /// they are quantized with says nothing; one dequantized with 1.25x its scale fails naming the
    /// tensor's matmul, both scales and its layer and module.
    #[test]
    fn a_tensor_dequantized_with_another_scale_fails() {
        use crate::onnx::quantized::{IntType, MatmulRounding, QuantizedActivation, Rounding, ScaleMismatch};
        let reader = |path: &std::path::Path| crate::onnx::quantized::QuantizedBuild::read(path).expect("read").expect("quantized");
        let mut q = reader(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-text-ple/variants/qdq-w8a8"));
        assert_eq!(judge_activation_scales(&q, &mut Metrics::default()), None);
        let w = q.weights.iter_mut().find(|w| w.key == "layers.3.mlp.up_proj.weight").expect("up_proj");
        w.rounding = MatmulRounding {
            input: Some(QuantizedActivation {
                tensor: Some("x".into()),
                node: "x_q".into(),
                rounding: Rounding::Static { scale: 0.5, zero_point: 128 },
                ty: IntType { bits: 8, signed: false },
                mismatch: Some(ScaleMismatch { node: "x_dq".into(), scale: 0.625, zero_point: 128 }),
            }),
            ..w.rounding.clone()
        };
        let mut m = Metrics::default();
        let msg = judge_activation_scales(&q, &mut m).expect("fails");
        assert!(
            msg.contains("layers.3.mlp.up_proj.weight") && msg.contains("`x_dq`") && msg.contains("1.2500×") && msg.contains("layer 3 mlp"),
            "{msg}"
        );
        assert_eq!(m.l3.first_divergent_layer, Some(3));
    }

    /// Guards the cost: identical logits cost nothing and agree everywhere; a flipped argmax is
    /// counted and costs KL > 0.
    #[test]
    fn kl_and_top1_against_the_float_reference() {
        use crate::inputs::Dense;
        let run = |d: Vec<f32>| Run {
            prefill: crate::outputs::Prefill { logits: Dense::new(vec![1, 2, 3], d), ..Default::default() },
            ..Default::default()
        };
        let f = run(vec![1.0, 2.0, 3.0, 3.0, 2.0, 1.0]);
        let mut m = Metrics::default();
        cost(&f, &f, &mut m).expect("line");
        assert_eq!(m.quantized.quantization_kl_mean, Some(0.0));
        assert_eq!(m.quantized.quantization_top1_agreement, Some(1.0));
        let c = run(vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let mut m = Metrics::default();
        cost(&f, &c, &mut m).expect("line");
        assert_eq!(m.quantized.quantization_top1_agreement, Some(0.5));
        assert!(m.quantized.quantization_kl_p99.expect("p99") > 0.5);
    }
}
