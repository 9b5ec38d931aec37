//! L1 graph tier: does the ONNX package honour the contract its config implies?

use std::collections::BTreeMap;
use std::path::Path;

use super::outcome::{Status, TierOutcome};
use crate::metric_keys as key;
use crate::onnx::contract::{ElemType, ExpectedDim, ExportContract};
use crate::onnx::graph::{Dim, GraphSummary, TensorSpec};
use crate::onnx::package::OnnxPackage;

/// Checks the export at `onnx_dir` against the contract of `config_json`. `float_dtype` is the
/// ONNX element type the export's activations must have (`float32` for an f32 export).
pub fn check(config_json: &Path, onnx_dir: &Path, float_dtype: &str) -> TierOutcome {
    let contract = match ExportContract::from_config_file(config_json) {
        Ok(c) => c,
        Err(e) => return TierOutcome::fail(format!("cannot derive the contract: {e}")),
    };
    let package = match OnnxPackage::open(onnx_dir) {
        Ok(p) => p,
        Err(e) => return TierOutcome::fail(e.to_string()),
    };
    let mut violations = Vec::new();
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    let mut n_initializers = 0;
    for sub in &contract.submodels {
        let Some(file) = package.submodel(sub.role) else {
            violations.push(format!("sub-model `{}` is missing from {}", sub.role, onnx_dir.display()));
            continue;
        };
        let graph = match GraphSummary::load(file) {
            Ok(g) => g,
            Err(e) => {
                violations.push(e.to_string());
                continue;
            }
        };
        n_initializers += graph.initializer_count;
        for (op, n) in &graph.op_inventory {
            *ops.entry(op.clone()).or_default() += n;
        }
        for (kind, expected, actual) in [("input", &sub.inputs, &graph.inputs), ("output", &sub.outputs, &graph.outputs)] {
            for e in expected.iter() {
                match actual.iter().find(|a| a.name == e.name) {
                    None if e.required => violations.push(format!("{}: {kind} `{}` is missing", sub.role, e.name)),
                    None => {}
                    Some(a) => violations.extend(tensor_violations(sub.role, kind, e, a, float_dtype)),
                }
            }
        }
        // An input the contract does not know is one the pipeline cannot feed (an extra KV pair,
        // a renamed tensor); extra outputs are harmless.
        for a in &graph.inputs {
            if !sub.inputs.iter().any(|e| e.name == a.name) {
                violations.push(format!("{}: unexpected input `{}` {} {}", sub.role, a.name, a.dtype, a.shape_string()));
            }
        }
        if !graph.dangling_initializers.is_empty() {
            let shown: Vec<_> = graph.dangling_initializers.iter().take(5).cloned().collect();
            violations.push(format!(
                "{}: {} initialisers are never used (e.g. {})",
                sub.role,
                graph.dangling_initializers.len(),
                shown.join(", ")
            ));
        }
    }
    let inventory = ops.iter().map(|(k, v)| format!("{k}×{v}")).collect::<Vec<_>>().join(" ");
    let status = if violations.is_empty() { Status::Pass } else { Status::Fail };
    let message = if violations.is_empty() {
        format!(
            "{} sub-models honour the contract of {} ({} KV pairs, hidden {}, vocab {}); ops: {inventory}",
            contract.submodels.len(),
            config_json.display(),
            contract.kv.len(),
            contract.hidden_size,
            contract.vocab_size
        )
    } else {
        format!("{} contract violations: {}", violations.len(), violations.join("; "))
    };
    TierOutcome::new(status, message)
        .metric(key::VIOLATIONS, violations.len())
        .metric(key::KV_PAIRS, contract.kv.len())
        .metric(key::INITIALIZERS, n_initializers)
        .metric(key::OP_INVENTORY, serde_json::to_value(&ops).unwrap_or_default())
}

fn tensor_violations(role: &str, kind: &str, e: &crate::onnx::contract::ExpectedTensor, a: &TensorSpec, float_dtype: &str) -> Vec<String> {
    let mut v = Vec::new();
    let want_dtype = match e.elem {
        ElemType::Int64 => "int64",
        ElemType::Float => float_dtype,
    };
    if a.dtype != want_dtype {
        v.push(format!("{role}: {kind} `{}` has dtype {}, contract expects {want_dtype}", e.name, a.dtype));
    }
    let want_shape = format!(
        "[{}]",
        e.dims
            .iter()
            .map(|d| match d {
                ExpectedDim::Fixed(n) => n.to_string(),
                ExpectedDim::Any => "*".into(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    match &a.dims {
        None => v.push(format!("{role}: {kind} `{}` declares no shape, contract expects {want_shape}", e.name)),
        Some(dims) if dims.len() != e.dims.len() => {
            v.push(format!("{role}: {kind} `{}` has rank {} {}, contract expects {want_shape}", e.name, dims.len(), a.shape_string()))
        }
        Some(dims) => {
            for (axis, (got, want)) in dims.iter().zip(&e.dims).enumerate() {
                if let ExpectedDim::Fixed(n) = want {
                    if *got != Dim::Static(*n) {
                        v.push(format!(
                            "{role}: {kind} `{}` dim {axis} is {got}, contract expects {n} (shape {} vs {want_shape})",
                            e.name,
                            a.shape_string()
                        ));
                    }
                }
            }
        }
    }
    v
}
