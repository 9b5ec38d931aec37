//! The cost of L3 on builds that quantize activations (issue 43) against the same model's f32
//! build, at fixture scale: each trial's whole L3 — the reference, the f64 arbiter, the floors
//! (conditioned on the candidate's steps for a quantized build), the float reference the cost is
//! measured against, and the candidate's runs — on a fresh evaluation each time. With the
//! reference cache off (`ONNX_PARITY_REFERENCE_CACHE=off cargo bench --bench quantized_l3`)
//! nothing is shared between repeats: the cold cost. With it on (the default) the first repeat
//! fills it and the median is a rerun's cost, the ONNX Runtime side and the comparisons (what an
//! exporter's second `check` of a build pays). Target: ≤ 1.5× the f32 build's.

mod support;

use onnx_parity::case::{Candidate, Case, Level};
use onnx_parity::evaluation::CaseEvaluations;
use onnx_parity::tiers::outcome::Status;
use onnx_parity::tiers::{run_level, RunOptions};

const REPEATS: usize = 5;

/// Median seconds of `case`'s L3 on `variant` (the case's own export: `None`).
fn l3_seconds(case: &Case, variant: Option<&str>, options: &RunOptions) -> f64 {
    let view = match variant {
        Some(v) => case.for_variant(v).expect("variant"),
        None => case.clone(),
    };
    let candidate = match variant {
        Some(v) => Candidate::variant(v),
        None => Candidate::default(),
    };
    let (seconds, status) = support::time(REPEATS, || {
        let evals = CaseEvaluations::for_build(&view, variant);
        run_level(&view, &candidate, Level::L3, options, &evals).status
    });
    assert_eq!(status, Status::Pass, "{}@{variant:?}: L3 must pass to be timed", case.name);
    seconds
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let options = RunOptions::with_goldens(root.join("goldens"));
    let cache = match &onnx_parity::context::current().reference_cache.root {
        Some(root) => format!("on ({}; the median is a warm rerun)", root.display()),
        None => "off (every repeat computes the reference side)".to_string(),
    };
    println!("reference cache: {cache}\n");
    println!("| case | build | L3 median (s) | ratio to f32 |");
    println!("|---|---|---|---|");
    for path in ["cases/causal-lm/gemma4-text-ple.yaml", "cases/causal-lm/unified-vision-text.yaml"] {
        let case = Case::load(&root.join(path)).expect("case");
        let f32 = l3_seconds(&case, None, &options);
        println!("| {} | f32 | {f32:.3} | 1.00 |", case.name);
        // For comparison: weight-only int8 (no activation rounded, no hinted floors) and int4 at
        // accuracy_level 4 (MLAS's int8 blocks: hinted floors, issue 38).
        let weight_only: &[&str] = if case.name.ends_with("gemma4-text-ple") { &["int8", "int4-acc4"] } else { &[] };
        for &build in weight_only.iter().chain(&["dynamic", "dynamic-pc", "qdq-w8a8", "qdq-w8a16", "qop-w8a8"]) {
            let s = l3_seconds(&case, Some(build), &options);
            println!("| {} | {build} | {s:.3} | {:.2} |", case.name, s / f32);
        }
    }
}
