//! Two runs of the same cases side by side (`onnx-parity diff A.json B.json`): which trials
//! changed verdict between them, e.g. the CPU run and the GPU run of the committed cases
//! (`scripts/gpu-check.sh`). A trial is matched by its name without the ` on <ep>` suffix, so a
//! build's CPU trial meets its CUDA trial; a trial one run skipped (not for that EP, not
//! runnable there) is not a verdict change but is counted with its reason.

use std::collections::BTreeMap;

use serde_json::Value;

/// One trial's verdict in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The trial's name in its run (with its EP suffix).
    pub trial: String,
    pub status: String,
    pub message: String,
}

/// What two runs say of the trials they share.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerdictDiff {
    /// Trials both runs ran, with the same verdict.
    pub same: usize,
    /// Trials both runs ran whose verdict differs: (key, in A, in B).
    pub changed: Vec<(String, Verdict, Verdict)>,
    /// Trials one run ran and the other skipped or did not plan: (key, the run's verdict, why
    /// the other did not run it).
    pub one_sided: Vec<(String, Verdict, String)>,
}

/// A trial's key: its name with the EP suffix removed.
fn key(trial: &str) -> String {
    match trial.find(" on ") {
        Some(i) => trial[..i].to_string(),
        None => trial.to_string(),
    }
}

/// Every trial of a JSON report (`run --report`), by key.
pub fn verdicts(report: &Value) -> BTreeMap<String, Verdict> {
    let mut out = BTreeMap::new();
    for case in report["cases"].as_array().into_iter().flatten() {
        let name = case["name"].as_str().unwrap_or_default();
        for level in case["levels"].as_array().into_iter().flatten() {
            let trial = crate::report::trial_name(name, level["level"].as_str().unwrap_or_default());
            let status = level["status"].as_str().unwrap_or_default().to_string();
            let message = level["message"].as_str().unwrap_or_default().to_string();
            out.insert(key(&trial), Verdict { trial, status, message });
        }
    }
    out
}

/// The difference between run `a` and run `b`.
pub fn diff(a: &Value, b: &Value) -> VerdictDiff {
    let (va, vb) = (verdicts(a), verdicts(b));
    let mut out = VerdictDiff::default();
    let ran = |v: &Verdict| v.status != "skipped";
    for (k, x) in &va {
        match vb.get(k) {
            Some(y) if ran(x) && ran(y) => {
                if x.status == y.status {
                    out.same += 1;
                } else {
                    out.changed.push((k.clone(), x.clone(), y.clone()));
                }
            }
            Some(y) if ran(x) => out.one_sided.push((k.clone(), x.clone(), format!("the second run skipped it: {}", y.message))),
            Some(y) if ran(y) => out.one_sided.push((k.clone(), y.clone(), format!("the first run skipped it: {}", x.message))),
            Some(_) => {}
            None if ran(x) => out.one_sided.push((k.clone(), x.clone(), "the second run did not plan it".into())),
            None => {}
        }
    }
    for (k, y) in vb.iter().filter(|(k, y)| ran(y) && !va.contains_key(*k)) {
        out.one_sided.push((k.clone(), y.clone(), "the first run did not plan it".into()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cases: &[(&str, &[(&str, &str)])]) -> Value {
        let cases: Vec<Value> = cases
            .iter()
            .map(|(name, levels)| {
                let levels: Vec<Value> =
                    levels.iter().map(|(l, s)| serde_json::json!({"level": l, "status": s, "message": format!("{s} msg")})).collect();
                serde_json::json!({"name": name, "levels": levels})
            })
            .collect();
        serde_json::json!({ "cases": cases })
    }

    /// Guards: a CPU trial meets its CUDA trial by name; a changed verdict is listed, a trial one
    /// run skipped or did not plan is one-sided (never a silent match), equal verdicts counted.
    #[test]
    fn cpu_and_gpu_runs_are_matched_by_trial() {
        let cpu = report(&[("c/x", &[("L1", "pass"), ("L3", "xfail")]), ("c/x@gqa", &[("L3", "pass")]), ("c/y", &[("L3", "pass")])]);
        let gpu = report(&[("c/x on cuda:0", &[("L1", "pass"), ("L3", "fail")]), ("c/x@gqa on cuda:0", &[("L3", "skipped")])]);
        let d = diff(&cpu, &gpu);
        assert_eq!(d.same, 1);
        assert_eq!(d.changed.len(), 1);
        assert_eq!((d.changed[0].0.as_str(), d.changed[0].2.trial.as_str()), ("c/x::L3", "c/x::L3 on cuda:0"));
        assert_eq!(d.one_sided.len(), 2, "{:?}", d.one_sided);
        assert!(d.one_sided.iter().any(|(k, _, why)| k == "c/x@gqa::L3" && why.starts_with("the second run skipped it")));
        assert!(d.one_sided.iter().any(|(k, _, why)| k == "c/y::L3" && why == "the second run did not plan it"));
    }
}
