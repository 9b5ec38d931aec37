//! Expected failures that cannot hide new ones. An `xfail` entry records *why* a tier fails and,
//! optionally, *what was measured*: the component where the divergence starts, a metric and its
//! value within a factor, or a substring of the error. A failure that does not match is a FAIL
//! ("failed differently than expected"), so a new bug under an old expected one is seen; a pass
//! is an unexpected pass (also a FAIL), so a fixed bug is noticed.
//!
//! ```yaml
//! xfail:
//!   L3:
//!     reason: "mobius-onnx 0.1.0 vision LayerNorm eps 1e-6 (HF: 1e-5)"
//!     first_divergence: image_features
//!     metric: max_abs_diff          # an outcome metric of the tier
//!     value: 8.0e-3                 # measured
//!     within: 2                     # accepted: value/2 ..= value·2 (default 2)
//!   L4: "a reason alone (no signature): any failure matches"
//!   L5: {reason: "...", error: "Squeeze_node"}   # the failure message contains this
//! ```
//!
//! Why a factor of 2 by default: the same finding measured on another CPU (AVX2 vs AVX-512
//! kernels) or ORT build moves by a few per cent (e.g. 8.0e-3 vs 8.1e-3 for the LayerNorm eps),
//! while a new, different bug on top of it typically moves the number by an order of magnitude,
//! which a factor of 2 rejects. Counts (token ids, ratios, parameter numbers) use `within: 1`.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

use crate::eps::RunEp;
use crate::tier_metrics::Metrics;

/// What a failing tier is expected to show.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The `first_divergence` metric (L3: `image_features`, `logits`, `decode step 3`, …).
    #[serde(default)]
    pub first_divergence: Option<String>,
    /// A numeric metric of the outcome and its measured value.
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub value: Option<f64>,
    /// Further metrics and their measured values, each held to the band (`within`, or its own):
    /// a signature that pins the first component *and* the logits catches a new bug downstream
    /// of an old one.
    #[serde(default)]
    pub metrics: BTreeMap<String, Measured>,
    /// Accepted band: `value / within ..= value · within` (≥ 1; default 2).
    #[serde(default)]
    pub within: Option<f64>,
    /// A substring the failure message must contain (errors: ORT messages, missing tensors).
    #[serde(default)]
    pub error: Option<String>,
}

/// A measured value, held to the signature's `within`, or to its own (`{value: 3, within: 1}`:
/// an index or a count among float differences).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged, expecting = "a number, or {value: <number>, within: <factor ≥ 1>}")]
pub enum Measured {
    Value(f64),
    Band(Band),
}

/// A measured value with its own band factor.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    pub value: f64,
    pub within: f64,
}

impl Measured {
    fn value(self) -> f64 {
        match self {
            Measured::Value(v) | Measured::Band(Band { value: v, .. }) => v,
        }
    }
}

/// One `xfail` entry: the reason, optionally the measured signature, and the execution
/// providers it holds on (`on: [cpu]`) where an EP changes the outcome (a build that loads on one
/// EP and not on another); without `on`, on every EP the build runs on: a finding in the graph
/// has one signature everywhere.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    pub reason: String,
    pub signature: Option<Signature>,
    /// The EPs the entry holds on (`None`: all); a CUDA entry holds on every CUDA device.
    pub on: Option<Vec<RunEp>>,
}

impl Expectation {
    /// A reason alone, on every EP.
    pub fn reason(reason: impl Into<String>) -> Expectation {
        Expectation { reason: reason.into(), signature: None, on: None }
    }

    /// Whether the entry holds for a trial on `ep`.
    pub fn holds_on(&self, ep: RunEp) -> bool {
        self.on.as_ref().is_none_or(|eps| eps.iter().any(|e| std::mem::discriminant(e) == std::mem::discriminant(&ep)))
    }
}

/// The default `within` factor (see the module doc).
pub const DEFAULT_WITHIN: f64 = 2.0;

/// The map form: `reason` beside the [`Signature`] fields (not `#[serde(flatten)]`, which
/// buffers the map and so loses the key of a mistyped value: `xfail.L3: invalid type: sequence,
/// expected a string` without `.first_divergence`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectation {
    reason: String,
    #[serde(default)]
    first_divergence: Option<String>,
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    metrics: BTreeMap<String, Measured>,
    #[serde(default)]
    within: Option<f64>,
    #[serde(default)]
    error: Option<String>,
    /// EP names as `ONNX_PARITY_EP` spells them (`cpu`, `cuda`).
    #[serde(default)]
    on: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for Expectation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Expectation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reason string, or {reason, first_divergence?, metric?, value?, within?, error?, on?}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Expectation, E> {
                Ok(Expectation::reason(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Expectation, A::Error> {
                let raw = RawExpectation::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let s = Signature {
                    first_divergence: raw.first_divergence,
                    metric: raw.metric,
                    value: raw.value,
                    metrics: raw.metrics,
                    within: raw.within,
                    error: raw.error,
                };
                if s.metric.is_some() != s.value.is_some() {
                    return Err(de::Error::custom("xfail: `metric` and `value` go together (the metric and its measured value)"));
                }
                if let Some(v) = s.value {
                    if !v.is_finite() {
                        return Err(de::Error::custom(format!("xfail: `value` must be a finite number, got {v}")));
                    }
                }
                for (m, v) in &s.metrics {
                    if !v.value().is_finite() {
                        return Err(de::Error::custom(format!("xfail: `metrics.{m}` must be a finite number, got {}", v.value())));
                    }
                    if let Measured::Band(Band { within, .. }) = v {
                        if !(within.is_finite() && *within >= 1.0) {
                            return Err(de::Error::custom(format!("xfail: `metrics.{m}.within` must be a factor ≥ 1, got {within}")));
                        }
                    }
                }
                if let Some(w) = s.within {
                    if !(w.is_finite() && w >= 1.0) {
                        return Err(de::Error::custom(format!("xfail: `within` must be a factor ≥ 1, got {w}")));
                    }
                    if s.value.is_none() && s.metrics.is_empty() {
                        return Err(de::Error::custom("xfail: `within` needs `metric` and `value` or `metrics`"));
                    }
                }
                let empty = s == Signature::default();
                let on = match raw.on {
                    None => None,
                    Some(names) if names.is_empty() => return Err(de::Error::custom("xfail: `on` lists no EP (leave it out: every EP)")),
                    Some(names) => Some(
                        names
                            .iter()
                            .map(|n| n.parse::<RunEp>().map_err(|e| de::Error::custom(format!("xfail: `on`: {n:?}: {e}"))))
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                };
                Ok(Expectation { reason: raw.reason, signature: (!empty).then_some(s), on })
            }
        }
        d.deserialize_any(V)
    }
}

impl Signature {
    /// What the signature expects, for messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.first_divergence {
            parts.push(format!("first divergence {c}"));
        }
        for (m, v, w) in self.measured() {
            parts.push(if w == 1.0 { format!("{m} = {v:e}") } else { format!("{m} {v:e} (×/÷ {w})") });
        }
        if let Some(e) = &self.error {
            parts.push(format!("an error containing {e:?}"));
        }
        parts.join(", ")
    }

    /// Every (metric, measured value, band factor) the signature holds: `metric`/`value`, then
    /// `metrics`.
    fn measured(&self) -> impl Iterator<Item = (&str, f64, f64)> {
        let w = self.within.unwrap_or(DEFAULT_WITHIN);
        let single = self.metric.as_deref().zip(self.value).map(|(m, v)| (m, v, w));
        single.into_iter().chain(self.metrics.iter().map(move |(m, v)| match *v {
            Measured::Value(v) => (m.as_str(), v, w),
            Measured::Band(Band { value, within }) => (m.as_str(), value, within),
        }))
    }

    /// `None` when a failure with these `metrics` and `message` shows this signature, else what
    /// differs.
    pub fn mismatch(&self, metrics: &Metrics, message: &str) -> Option<String> {
        let mut diffs = Vec::new();
        if let Some(want) = &self.first_divergence {
            match metrics.l3.first_divergence.as_deref() {
                Some(got) if got == want => {}
                got => diffs.push(format!("first divergence {} instead of {want}", got.unwrap_or("none"))),
            }
        }
        // The signature names metrics by their keys in reports.
        let rendered = metrics.rendered();
        for (m, v, w) in self.measured() {
            let (lo, hi) = if v >= 0.0 { (v / w, v * w) } else { (v * w, v / w) };
            match rendered.get(m).and_then(|x| x.as_f64()) {
                // NaN fails the comparison, so it never matches.
                Some(got) if got >= lo && got <= hi => {}
                Some(got) => diffs.push(format!("{m} {got:e} outside {lo:e} ..= {hi:e}")),
                None => diffs.push(format!("no numeric metric {m}")),
            }
        }
        if let Some(e) = &self.error {
            if !message.contains(e.as_str()) {
                diffs.push(format!("the message does not contain {e:?}"));
            }
        }
        (!diffs.is_empty()).then(|| diffs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Expectation, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    /// A failure's metrics and message, built as a tier builds its outcome.
    struct Failure {
        metrics: Metrics,
        message: String,
    }

    impl Failure {
        /// Records `value` under its report key (as a tier's field would render).
        fn metric(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
            let mut rendered = self.metrics.rendered();
            rendered.insert(key.into(), value.into());
            self.metrics = Metrics::from_rendered(rendered).expect("a metric of its type");
            self
        }
    }

    /// Stands in for `TierOutcome::fail` (this module does not depend on the tiers).
    struct TierOutcome;

    impl TierOutcome {
        fn fail(message: &str) -> Failure {
            Failure { metrics: Metrics::default(), message: message.into() }
        }
    }

    fn failing(max: f64, first: &str, message: &str) -> Failure {
        TierOutcome::fail(message).metric("max_abs_diff", max).metric("first_divergence", first)
    }

    /// [`Signature::mismatch`] of a failure.
    fn mismatch(s: &Signature, f: &Failure) -> Option<String> {
        s.mismatch(&f.metrics, &f.message)
    }

    /// Guards: the string form is a reason without a signature; the map form parses every field
    /// and rejects half-given or impossible bands.
    #[test]
    fn parsing() {
        assert_eq!(parse("\"why\"").unwrap(), Expectation::reason("why"));
        let on = parse("{reason: r, on: [cuda]}").unwrap();
        assert!(on.holds_on(RunEp::Cuda(1)) && !on.holds_on(RunEp::Cpu));
        assert!(Expectation::reason("r").holds_on(RunEp::Cpu) && Expectation::reason("r").holds_on(RunEp::Cuda(0)));
        assert!(parse("{reason: r, on: [tpu]}").unwrap_err().to_string().contains("tpu"));
        assert!(parse("{reason: r, on: []}").is_err());
        let e = parse("{reason: r, first_divergence: image_features, metric: max_abs_diff, value: 8.0e-3, within: 3}").unwrap();
        let s = e.signature.unwrap();
        assert_eq!(
            (s.first_divergence.as_deref(), s.metric.as_deref(), s.value, s.within),
            (Some("image_features"), Some("max_abs_diff"), Some(8.0e-3), Some(3.0))
        );
        assert!(parse("{reason: r}").unwrap().signature.is_none());
        assert!(parse("{reason: r, metric: m}").is_err());
        assert!(parse("{reason: r, value: 1}").is_err());
        assert!(parse("{reason: r, metric: m, value: 1, within: 0.5}").is_err());
        assert!(parse("{reason: r, metric: m, value: .nan}").is_err());
        assert!(parse("{reason: r, within: 2}").is_err());
        assert!(parse("{reason: r, typo: 1}").is_err());
        assert!(parse("{metric: m, value: 1}").is_err());
    }

    /// Guards the matching rules: the recorded failure matches; a 10× larger difference, NaN, a
    /// different first component, a missing metric or error text do not.
    #[test]
    fn matching() {
        let s = Signature {
            first_divergence: Some("image_features".into()),
            metric: Some("max_abs_diff".into()),
            value: Some(8.0e-3),
            within: None,
            error: None,
            metrics: BTreeMap::new(),
        };
        assert_eq!(mismatch(&s, &failing(8.1e-3, "image_features", "m")), None);
        assert_eq!(mismatch(&s, &failing(4.1e-3, "image_features", "m")), None);
        assert!(mismatch(&s, &failing(8.0e-2, "image_features", "m")).is_some());
        assert!(mismatch(&s, &failing(3.9e-3, "image_features", "m")).is_some());
        assert!(mismatch(&s, &failing(f64::NAN, "image_features", "m")).is_some());
        assert!(mismatch(&s, &failing(8.0e-3, "logits", "m")).is_some());
        assert!(mismatch(&s, &TierOutcome::fail("reference failed: NaN")).is_some());
        let exact = Signature { metric: Some("top1".into()), value: Some(421.0), within: Some(1.0), ..Default::default() };
        assert_eq!(mismatch(&exact, &TierOutcome::fail("x").metric("top1", 421)), None);
        assert!(mismatch(&exact, &TierOutcome::fail("x").metric("top1", 420)).is_some());
        let zero = Signature { metric: Some("token_match_ratio".into()), value: Some(0.0), within: Some(1.0), ..Default::default() };
        assert_eq!(mismatch(&zero, &TierOutcome::fail("x").metric("token_match_ratio", 0.0)), None);
        assert!(mismatch(&zero, &TierOutcome::fail("x").metric("token_match_ratio", 0.125)).is_some());
        let err = Signature { error: Some("Squeeze_node".into()), ..Default::default() };
        assert_eq!(mismatch(&err, &TierOutcome::fail("vision_encoder: ... Squeeze_node_274 ...")), None);
        assert!(mismatch(&err, &TierOutcome::fail("vision_encoder: out of memory")).is_some());
    }

    /// Guards `metrics`: every listed metric must be in its band, so a new bug downstream of the
    /// first divergence (logits 10× worse, image features unchanged) does not match.
    #[test]
    fn every_listed_metric_is_held() {
        let e =
            parse("{reason: r, first_divergence: image_features, metrics: {image_features_max_abs_diff: 1.6e-3, max_abs_diff: 8.0e-3}}")
                .unwrap();
        let s = e.signature.unwrap();
        let out = |img: f64, max: f64| {
            TierOutcome::fail("m")
                .metric("first_divergence", "image_features")
                .metric("image_features_max_abs_diff", img)
                .metric("max_abs_diff", max)
        };
        assert_eq!(mismatch(&s, &out(1.6e-3, 8.0e-3)), None);
        let later = mismatch(&s, &out(1.6e-3, 8.0e-2)).unwrap();
        assert!(later.contains("max_abs_diff 8e-2 outside"), "{later}");
        assert!(mismatch(&s, &out(1.6e-2, 8.0e-3)).is_some());
        assert!(s.describe().contains("image_features_max_abs_diff 1.6e-3 (×/÷ 2)"), "{}", s.describe());
        assert!(parse("{reason: r, metrics: {m: .inf}}").is_err());
        assert!(parse("{reason: r, metrics: {m: 1}, within: 1}").is_ok());
        // A metric with its own band: the layer index exact among ×/÷ 2 float differences.
        let s =
            parse("{reason: r, metrics: {first_divergent_layer: {value: 3, within: 1}, max_abs_diff: 0.8}}").unwrap().signature.unwrap();
        let out = |layer: u64, max: f64| TierOutcome::fail("m").metric("first_divergent_layer", layer).metric("max_abs_diff", max);
        assert_eq!(mismatch(&s, &out(3, 1.2)), None);
        assert!(mismatch(&s, &out(4, 0.8)).unwrap().contains("first_divergent_layer 4e0 outside 3e0 ..= 3e0"));
        assert!(mismatch(&s, &out(3, 2.0)).is_some());
        assert!(parse("{reason: r, metrics: {m: {value: 1, within: 0.5}}}").is_err());
        assert!(parse("{reason: r, metrics: {m: {value: 1, typo: 1}}}").is_err());
    }
}
