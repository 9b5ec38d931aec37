//! The result of one tier on one case: a status, numbers, and a message a person can act on.

use serde::{Deserialize, Serialize};

use crate::names::named_enum;
use crate::tier_metrics::Metrics;

named_enum! {
    /// Verdict of a tier. `Xfail` is a failure the case YAML expected (and explains).
    pub enum Status("status") {
        Pass = "pass",
        Fail = "fail",
        Ambiguous = "ambiguous",
        Skipped = "skipped",
        Xfail = "xfail",
    }
}

impl Status {
    /// The worse of two verdicts of one tier: fail > ambiguous > pass (two checks of one
    /// export, e.g. against the golden and against the live reference).
    pub fn worse(self, other: Status) -> Status {
        let rank = |s| match s {
            Status::Fail => 3,
            Status::Ambiguous => 2,
            _ => 1,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// What a tier found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierOutcome {
    pub status: Status,
    /// What the tier measured, as typed fields ([`crate::tier_metrics`]); boxed, since an
    /// outcome travels as an `Err` through the tiers' early returns.
    #[serde(default)]
    pub metrics: Box<Metrics>,
    pub message: String,
    /// What a person must see even when the tier passes (e.g. a golden's replayed input_ids):
    /// the `parity` target prints them for every status, reports list them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl TierOutcome {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        TierOutcome::decided(status, message, Metrics::default())
    }

    /// A tier's result, decided once: its status, message and what it measured.
    pub fn decided(status: Status, message: impl Into<String>, metrics: Metrics) -> Self {
        TierOutcome { status, metrics: Box::new(metrics), message: message.into(), warnings: Vec::new() }
    }

    pub fn skipped(reason: impl Into<String>) -> Self {
        Self::new(Status::Skipped, reason)
    }

    pub fn fail(message: impl Into<String>) -> Self {
        Self::new(Status::Fail, message)
    }

    /// The outcome with `record` applied to its metrics.
    pub fn with(mut self, record: impl FnOnce(&mut Metrics)) -> Self {
        record(&mut self.metrics);
        self
    }

    /// Adds a warning (kept through every later status change).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// One tier's outcome over several candidate implementations, each judged against the
    /// reference: a single candidate's outcome as it is; for several, the worst status, each
    /// message and warning prefixed with its label, and each one's metrics under its label.
    pub fn of_candidates(mut outcomes: Vec<(&str, TierOutcome)>) -> TierOutcome {
        match outcomes.len() {
            0 => return TierOutcome::fail("no implementation to judge against the reference"),
            1 => return outcomes.remove(0).1,
            _ => {}
        }
        let status = outcomes.iter().map(|(_, o)| o.status).reduce(Status::worse).unwrap_or(Status::Fail);
        let message = outcomes.iter().map(|(label, o)| format!("{label}: {}", o.message)).collect::<Vec<_>>().join(" | ");
        let mut merged = TierOutcome::new(status, message);
        for (label, o) in outcomes {
            merged.metrics.candidates.push((label.to_string(), *o.metrics));
            merged.warnings.extend(o.warnings.into_iter().map(|w| format!("{label}: {w}")));
        }
        merged
    }

    /// An L3 verdict of a GPU run with the run's TF32 probe quoted (`probe`: each back end's
    /// maximum relative error on a product TF32 cannot compute within 1e-5; metric
    /// `tf32_probe_max_rel_err`, the largest): the evidence that a ratio ≫ k at every layer is
    /// the candidate's arithmetic, not this machine's. A CPU run (no probe) is left as it is.
    pub fn with_tf32_probe(mut self, probe: &[crate::gpu::ProbeResult]) -> Self {
        if probe.is_empty() || self.status == Status::Skipped {
            return self;
        }
        let each: Vec<String> = probe.iter().map(|p| format!("{} {:.1e}", p.backend, p.max_rel_err)).collect();
        let worst = probe.iter().map(|p| p.max_rel_err).fold(0.0, f64::max);
        let tf32 = probe.iter().any(|p| p.tf32_like);
        self.message = format!(
            "{}; TF32 probe of this run (max relative error of a product TF32 rounds): {} ({})",
            self.message,
            each.join(", "),
            if tf32 { "TF32-like: this run's numbers are the machine's, not the export's" } else { "f32 arithmetic" }
        );
        self.metrics.l3.tf32_probe_max_rel_err = Some(worst);
        self
    }
}

#[cfg(test)]
mod tests {

    /// Guards the probe's place in a GPU run's verdicts: quoted with each back end's number and
    /// the largest as a metric; a TF32-like back end said so; a CPU run and a skip untouched.
    #[test]
    fn tf32_probe_is_quoted_in_a_gpu_verdict() {
        use crate::gpu::ProbeResult;
        let probe = vec![
            ProbeResult { backend: "candle (cuda:0)".into(), max_rel_err: 1.2e-7, tf32_like: false },
            ProbeResult { backend: "onnxruntime (CUDAExecutionProvider)".into(), max_rel_err: 3.1e-7, tf32_like: false },
        ];
        let out = TierOutcome::new(Status::Pass, "logits agree").with_tf32_probe(&probe);
        assert!(
            out.message.ends_with("candle (cuda:0) 1.2e-7, onnxruntime (CUDAExecutionProvider) 3.1e-7 (f32 arithmetic)"),
            "{}",
            out.message
        );
        assert_eq!(out.metrics.l3.tf32_probe_max_rel_err, Some(3.1e-7));
        let tf32 = vec![ProbeResult { backend: "candle (cuda:0)".into(), max_rel_err: 4e-4, tf32_like: true }];
        assert!(TierOutcome::fail("every layer exceeds its own floor").with_tf32_probe(&tf32).message.contains("TF32-like"));
        let cpu = TierOutcome::new(Status::Pass, "logits agree").with_tf32_probe(&[]);
        assert_eq!(cpu.message, "logits agree");
        assert!(cpu.metrics.is_empty());
        assert_eq!(TierOutcome::skipped("no GPU").with_tf32_probe(&probe).message, "no GPU");
    }

    use super::*;

    /// Guards: one candidate's outcome is kept as it is; several are merged with the worst status
    /// and every metric, message and warning attributed to its implementation; none is a failure.
    #[test]
    fn candidates_merge() {
        let a = TierOutcome::new(Status::Pass, "fine").with(|m| m.compared.max_abs_diff = Some(1e-6));
        assert_eq!(TierOutcome::of_candidates(vec![("ONNX", a.clone())]).message, "fine");
        let b = TierOutcome::fail("off").with(|m| m.compared.max_abs_diff = Some(0.5)).warn("w");
        let m = TierOutcome::of_candidates(vec![("ONNX", a), ("other", b)]);
        assert_eq!(m.status, Status::Fail);
        assert_eq!(m.message, "ONNX: fine | other: off");
        assert_eq!(m.metrics.value("other/max_abs_diff"), Some(0.5.into()));
        assert_eq!(m.metrics.value("ONNX/max_abs_diff"), Some(1e-6.into()));
        assert_eq!(m.warnings, vec!["other: w".to_string()]);
        assert_eq!(TierOutcome::of_candidates(vec![]).status, Status::Fail);
    }
}
