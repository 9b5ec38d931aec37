//! The result of one tier on one case: a status, numbers, and a message a person can act on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::expectation::Expectation;

/// Verdict of a tier. `Xfail` is a failure the case YAML expected (and explains).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Ambiguous,
    Skipped,
    Xfail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Ambiguous => "ambiguous",
            Status::Skipped => "skipped",
            Status::Xfail => "xfail",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a tier found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierOutcome {
    pub status: Status,
    /// Named numbers (`max_abs_diff`, `cosine`, ...), and strings such as `first_divergence`.
    pub metrics: BTreeMap<String, serde_json::Value>,
    pub message: String,
    /// What a person must see even when the tier passes (e.g. a golden's replayed input_ids):
    /// the `parity` target prints them for every status, reports list them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl TierOutcome {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        TierOutcome { status, metrics: BTreeMap::new(), message: message.into(), warnings: Vec::new() }
    }

    pub fn skipped(reason: impl Into<String>) -> Self {
        Self::new(Status::Skipped, reason)
    }

    pub fn fail(message: impl Into<String>) -> Self {
        Self::new(Status::Fail, message)
    }

    pub fn metric(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.metrics.insert(key.into(), value.into());
        self
    }

    /// Adds a warning (kept through every later status change).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Applies a case's `xfail` entry: a failure that shows the expected signature (any failure,
    /// when the entry has none) becomes `xfail`; a failure that does not stays a failure ("failed
    /// differently than expected"), and a pass becomes one ("unexpected pass"), so neither a new
    /// bug nor a fixed one hides under an old expectation.
    pub fn with_expected_failure(mut self, expectation: Option<&Expectation>) -> Self {
        let Some(e) = expectation else { return self };
        let reason = &e.reason;
        match self.status {
            Status::Fail => match e.signature.as_ref().and_then(|s| s.mismatch(&self).map(|d| (s, d))) {
                None => {
                    self.status = Status::Xfail;
                    self.message = format!("expected failure ({reason}): {}", self.message);
                }
                Some((s, diff)) => {
                    self.message = format!(
                        "failed differently than expected: the case expects {} ({reason}) but {diff}: {}",
                        s.describe(),
                        self.message
                    );
                }
            },
            Status::Pass | Status::Ambiguous => {
                self.status = Status::Fail;
                self.message = format!("unexpected pass: the case marks this tier xfail ({reason}) but it passed: {}", self.message);
            }
            Status::Skipped | Status::Xfail => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: xfail converts only failures; a pass under xfail is a failure, never a silent pass;
    /// a failure with another signature stays a failure and says what differs.
    #[test]
    fn expected_failure_rules() {
        let r = Expectation { reason: "r".into(), signature: None };
        let r = Some(&r);
        assert_eq!(TierOutcome::fail("x").with_expected_failure(r).status, Status::Xfail);
        assert_eq!(TierOutcome::new(Status::Pass, "ok").with_expected_failure(r).status, Status::Fail);
        assert_eq!(TierOutcome::new(Status::Ambiguous, "near tie").with_expected_failure(r).status, Status::Fail);
        assert_eq!(TierOutcome::skipped("s").with_expected_failure(r).status, Status::Skipped);
        assert_eq!(TierOutcome::new(Status::Pass, "ok").with_expected_failure(None).status, Status::Pass);
        let sig = Expectation {
            reason: "eps".into(),
            signature: Some(crate::expectation::Signature {
                metric: Some("max_abs_diff".into()),
                value: Some(8.0e-3),
                ..Default::default()
            }),
        };
        assert_eq!(TierOutcome::fail("x").metric("max_abs_diff", 8.0e-3).with_expected_failure(Some(&sig)).status, Status::Xfail);
        let other = TierOutcome::fail("x").metric("max_abs_diff", 8.0e-2).with_expected_failure(Some(&sig));
        assert_eq!(other.status, Status::Fail);
        assert!(other.message.starts_with("failed differently than expected"), "{}", other.message);
    }
}
