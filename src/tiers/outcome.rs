//! The result of one tier on one case: a status, numbers, and a message a person can act on.

use std::collections::BTreeMap;

use serde::Serialize;

/// Verdict of a tier. `Xfail` is a failure the case YAML expected (and explains).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct TierOutcome {
    pub status: Status,
    /// Named numbers (`max_abs_diff`, `cosine`, ...), and strings such as `first_divergence`.
    pub metrics: BTreeMap<String, serde_json::Value>,
    pub message: String,
}

impl TierOutcome {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        TierOutcome { status, metrics: BTreeMap::new(), message: message.into() }
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

    /// Applies a case's `xfail` reason: an expected failure becomes `xfail`, an unexpected pass
    /// becomes a failure that says so (a fixed bug must be noticed, not hidden).
    pub fn with_expected_failure(mut self, reason: Option<&str>) -> Self {
        let Some(reason) = reason else { return self };
        match self.status {
            Status::Fail => {
                self.status = Status::Xfail;
                self.message = format!("expected failure ({reason}): {}", self.message);
            }
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

    /// Guards: xfail converts only failures; a pass under xfail is a failure, never a silent pass.
    #[test]
    fn expected_failure_rules() {
        assert_eq!(TierOutcome::fail("x").with_expected_failure(Some("r")).status, Status::Xfail);
        assert_eq!(TierOutcome::new(Status::Pass, "ok").with_expected_failure(Some("r")).status, Status::Fail);
        assert_eq!(TierOutcome::skipped("s").with_expected_failure(Some("r")).status, Status::Skipped);
        assert_eq!(TierOutcome::new(Status::Pass, "ok").with_expected_failure(None).status, Status::Pass);
    }
}
