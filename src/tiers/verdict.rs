//! A trial's verdict, decided once. A tier returns its own result — its comparison's status,
//! numbers and message, with nothing of the case's expectations in it; [`decide`] turns that
//! result, the case's expectation for the trial (`xfail`) and the run's policy for a tier that
//! could not run into the trial's status. Nothing changes a status afterwards: the console, the
//! reports, the trial records, JUnit and the HTML page only render it.

use super::outcome::{Status, TierOutcome};
use crate::expectation::Expectation;

/// What a tier that could not run (its artifact missing, a run-time skip) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeSkip {
    /// It stays skipped (a library caller that reports skips itself).
    Skipped,
    /// It fails naming what could not run: a test runner counts a skip as a pass, so a trial the
    /// plan said would run must not skip silently.
    Fails,
}

/// The trial's verdict from the tier's `result`, the case's `expectation` and the `skip` policy.
///
/// The expectation: a failure that shows the expected signature (any failure, when the entry
/// has none) is `xfail`; a failure that does not stays a failure ("failed differently than
/// expected"), and a pass becomes one ("unexpected pass"), so neither a new bug nor a fixed one
/// hides under an old expectation. Then a skip under [`RuntimeSkip::Fails`] fails.
pub fn decide(result: TierOutcome, expectation: Option<&Expectation>, skip: RuntimeSkip) -> TierOutcome {
    let mut out = expected(result, expectation);
    if out.status == Status::Skipped && skip == RuntimeSkip::Fails {
        out.status = Status::Fail;
        out.message = format!("could not run: {}", out.message);
    }
    out
}

/// The expectation applied (see [`decide`]).
fn expected(mut out: TierOutcome, expectation: Option<&Expectation>) -> TierOutcome {
    let Some(e) = expectation else { return out };
    let reason = &e.reason;
    match out.status {
        Status::Fail => match e.signature.as_ref().and_then(|s| s.mismatch(&out.metrics, &out.message).map(|d| (s, d))) {
            None => {
                out.status = Status::Xfail;
                out.message = format!("expected failure ({reason}): {}", out.message);
                if let Some(s) = &e.signature {
                    // Reports show what was expected beside what was measured.
                    out.metrics.trial.xfail_signature = Some(s.describe());
                }
            }
            Some((s, diff)) => {
                out.message =
                    format!("failed differently than expected: the case expects {} ({reason}) but {diff}: {}", s.describe(), out.message);
            }
        },
        Status::Pass | Status::Ambiguous => {
            out.status = Status::Fail;
            out.message = format!("unexpected pass: the case marks this tier xfail ({reason}) but it passed: {}", out.message);
        }
        Status::Skipped | Status::Xfail => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(out: TierOutcome, e: Option<&Expectation>) -> TierOutcome {
        decide(out, e, RuntimeSkip::Skipped)
    }

    /// Guards: xfail converts only failures; a pass under xfail is a failure, never a silent pass;
    /// a failure with another signature stays a failure and says what differs.
    #[test]
    fn expected_failure_rules() {
        let r = Expectation::reason("r");
        let r = Some(&r);
        assert_eq!(with(TierOutcome::fail("x"), r).status, Status::Xfail);
        assert_eq!(with(TierOutcome::new(Status::Pass, "ok"), r).status, Status::Fail);
        assert_eq!(with(TierOutcome::new(Status::Ambiguous, "near tie"), r).status, Status::Fail);
        assert_eq!(with(TierOutcome::skipped("s"), r).status, Status::Skipped);
        assert_eq!(with(TierOutcome::new(Status::Pass, "ok"), None).status, Status::Pass);
        let sig = Expectation {
            reason: "eps".into(),
            signature: Some(crate::expectation::Signature {
                metric: Some("max_abs_diff".into()),
                value: Some(8.0e-3),
                ..Default::default()
            }),
            on: None,
        };
        assert_eq!(with(TierOutcome::fail("x").with(|m| m.compared.max_abs_diff = Some(8.0e-3)), Some(&sig)).status, Status::Xfail);
        let other = with(TierOutcome::fail("x").with(|m| m.compared.max_abs_diff = Some(8.0e-2)), Some(&sig));
        assert_eq!(other.status, Status::Fail);
        assert!(other.message.starts_with("failed differently than expected"), "{}", other.message);
    }

    /// Guards the run policy: a skip fails naming what could not run when the trial had to run
    /// (after the expectation, so an expected failure never hides a missing artifact).
    #[test]
    fn a_trial_that_could_not_run_fails() {
        let skipped = decide(TierOutcome::skipped("no export"), None, RuntimeSkip::Fails);
        assert_eq!((skipped.status, skipped.message.as_str()), (Status::Fail, "could not run: no export"));
        let r = Expectation::reason("r");
        assert_eq!(decide(TierOutcome::skipped("no export"), Some(&r), RuntimeSkip::Fails).status, Status::Fail);
        assert_eq!(decide(TierOutcome::skipped("no export"), None, RuntimeSkip::Skipped).status, Status::Skipped);
    }
}
