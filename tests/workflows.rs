//! The forge's workflows parse and do what the README says: the pull-request workflow runs
//! `.ci/run` on pull requests and pushes to main with its caches; the nightly GPU workflow runs
//! its parity and golden jobs strict, selects the CPU and CUDA EPs and fetches the runtimes before
//! its offline steps.

mod support;

use serde_yaml::Value;

fn workflow(name: &str) -> Value {
    let path = support::root().join(".github/workflows").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

/// Every step of every job: (job, step).
fn steps(w: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (job, body) in w["jobs"].as_mapping().expect("jobs").iter() {
        for step in body["steps"].as_sequence().into_iter().flatten() {
            out.push((job.as_str().unwrap_or_default().to_string(), step.clone()));
        }
    }
    out
}

/// Guards issue 39's pull-request workflow: triggers, the hosted runner, `.ci/run`, the caches.
#[test]
fn pull_requests_run_ci() {
    let w = workflow("ci.yml");
    assert!(w["on"]["pull_request"].is_null() || w["on"]["pull_request"].is_mapping(), "pull_request trigger: {:?}", w["on"]);
    assert!(w["on"].as_mapping().is_some_and(|m| m.contains_key("pull_request")), "{:?}", w["on"]);
    let branches: Vec<&str> = w["on"]["push"]["branches"].as_sequence().expect("push branches").iter().filter_map(Value::as_str).collect();
    assert_eq!(branches, ["main"]);
    let jobs = w["jobs"].as_mapping().expect("jobs");
    assert!(jobs.values().all(|j| j["runs-on"].as_str().is_some_and(|r| r.starts_with("ubuntu"))), "hosted Linux runners");
    let all = steps(&w);
    assert!(all.iter().any(|(_, s)| s["run"].as_str().is_some_and(|r| r.trim() == "bash .ci/run")), "a step runs .ci/run");
    let cached: Vec<String> = all
        .iter()
        .filter(|(_, s)| s["uses"].as_str().is_some_and(|u| u.starts_with("actions/cache@")))
        .map(|(_, s)| s["with"]["path"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(cached.iter().any(|p| p.contains("target") && p.contains(".cargo/registry")), "{cached:?}");
    assert!(cached.iter().any(|p| p.contains(".cache/onnx-parity")), "{cached:?}");
}

/// Guards the nightly's settings: CPU and CUDA EPs, strict parity and golden jobs, the runtimes
/// fetched before the offline steps, the binary built for the runner's SM.
#[test]
fn the_nightly_is_strict_and_provisioned() {
    let w = workflow("nightly-gpu.yml");
    assert_eq!(w["env"]["ONNX_PARITY_EP"].as_str(), Some("cpu,cuda"));
    let all = steps(&w);
    let named = |job: &str, name: &str| {
        all.iter().find(|(j, s)| j == job && s["name"].as_str().is_some_and(|n| n.starts_with(name))).map(|(_, s)| s.clone())
    };
    let parity = named("parity", "Parity").expect("the parity step");
    assert_eq!(parity["env"]["ONNX_PARITY_STRICT"].as_str(), Some("1"), "{parity:?}");
    let golden = named("goldens", "Regenerate").expect("the golden step");
    assert_eq!(golden["env"]["ONNX_PARITY_STRICT"].as_str(), Some("1"), "{golden:?}");
    let fetch = named("parity", "Fetch the runtimes").expect("fetch --runtimes");
    assert!(fetch["run"].as_str().is_some_and(|r| r.contains("fetch") && r.contains("--runtimes")), "{fetch:?}");
    let sm = named("build", "The GPU's SM").expect("the SM step");
    assert!(sm["run"].as_str().is_some_and(|r| r.contains("nvidia-smi") && r.contains("CUDA_COMPUTE_CAP")), "{sm:?}");
}
