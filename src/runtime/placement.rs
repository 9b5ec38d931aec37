//! Where ONNX Runtime put each node of a session. ORT assigns a node the EP asked for only when
//! that EP claims it; every other node silently runs on the CPU EP (Python ORT prints a warning,
//! the C API nothing). A parity run on an EP must not report CPU numbers as that EP's, so every
//! session on a non-CPU EP is created with verbose logging under its own log id, the environment's
//! logger ([`forward`]) keeps ORT's node-placement lines per log id, and [`cpu_compute_nodes`]
//! lists the nodes that compute on floats on the CPU (shape arithmetic on int64, which ORT keeps on
//! the CPU by design, is counted, not an error).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ort::logging::{LogLevel, LoggerFunction};

use crate::onnx::graph::{GraphSummary, NodeInfo};

/// One node ORT placed, as its verbose log writes it: `OpType (node name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedNode {
    pub op: String,
    pub name: String,
}

/// Nodes per EP of one session.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placement {
    pub by_ep: Vec<(String, Vec<PlacedNode>)>,
}

static PLACEMENTS: Mutex<Option<HashMap<String, Placement>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A fresh session log id whose placements [`take`] returns.
pub fn new_log_id() -> String {
    format!("onnx-parity-session-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// The placement lines logged under `log_id` (removed from the store).
pub fn take(log_id: &str) -> Option<Placement> {
    PLACEMENTS.lock().ok()?.as_mut()?.remove(log_id)
}

/// Records one log line when it is a placement line of a session with an id.
fn record(log_id: &str, code_location: &str, message: &str) {
    if log_id.is_empty() || !code_location.contains("VerifyEachNodeIsAssignedToAnEp") {
        return;
    }
    let Ok(mut guard) = PLACEMENTS.lock() else { return };
    let placement = guard.get_or_insert_with(HashMap::new).entry(log_id.to_string()).or_default();
    // " Node(s) placed on [CPUExecutionProvider]. Number of nodes: 45"
    if let Some(rest) = message.split("placed on [").nth(1) {
        let ep = rest.split(']').next().unwrap_or_default().to_string();
        placement.by_ep.push((ep, Vec::new()));
        return;
    }
    // "  RMSNormalization (model/layers.0/input_layernorm/RMSNormalization_node_37)"
    let line = message.trim();
    if let (Some((op, rest)), Some((_, nodes))) = (line.split_once(" ("), placement.by_ep.last_mut()) {
        nodes.push(PlacedNode { op: op.to_string(), name: rest.trim_end_matches(')').to_string() });
    }
}

/// The environment's logger: ORT's messages go to `tracing` (target `onnxruntime`; verbose as
/// trace, info as debug), and placement lines are kept for [`take`].
pub fn forward() -> LoggerFunction {
    Arc::new(|level: LogLevel, category: &str, log_id: &str, code_location: &str, message: &str| {
        record(log_id, code_location, message);
        match level {
            LogLevel::Verbose => tracing::trace!(target: "onnxruntime", category, log_id, code_location, "{message}"),
            LogLevel::Info => tracing::debug!(target: "onnxruntime", category, log_id, code_location, "{message}"),
            LogLevel::Warning => tracing::warn!(target: "onnxruntime", category, log_id, code_location, "{message}"),
            LogLevel::Error | LogLevel::Fatal => tracing::error!(target: "onnxruntime", category, log_id, code_location, "{message}"),
        }
    })
}

/// Splits the CPU EP's nodes into those that output floating-point tensors (compute) and those
/// whose every output is integer or boolean (shape and index work), judged on the graph's types
/// with the undeclared ones inferred. A node whose output type stays unknown, or that the graph
/// does not hold, counts as compute: the check errs on the side of reporting.
pub fn cpu_compute_nodes(placement: &Placement, graph: Option<&GraphSummary>) -> (Vec<PlacedNode>, usize) {
    let cpu = placement.by_ep.iter().filter(|(ep, _)| ep == "CPUExecutionProvider").flat_map(|(_, n)| n.iter());
    let types = graph.map(infer_types).unwrap_or_default();
    let mut compute = Vec::new();
    let mut integer = 0;
    for node in cpu {
        let integer_only = graph.and_then(|g| {
            let n = g.nodes.iter().find(|n| n.name == node.name)?;
            let outs: Vec<&str> =
                n.outputs.iter().filter(|v| !v.is_empty()).map(|v| types.get(v.as_str()).copied()).collect::<Option<_>>()?;
            Some(!outs.is_empty() && outs.iter().all(|t| is_integer(t)))
        });
        if integer_only == Some(true) {
            integer += 1;
        } else {
            compute.push(node.clone());
        }
    }
    (compute, integer)
}

/// Whether an element type is an integer or boolean one (never a float computation).
fn is_integer(t: &str) -> bool {
    matches!(t, "int64" | "int32" | "int16" | "int8" | "uint8" | "uint16" | "uint32" | "uint64" | "bool")
}

/// The float type a node computes in (its first float output's, else its first float input's),
/// for a report line (`float32 GroupQueryAttention has no … kernel`).
pub fn float_type_of(graph: &GraphSummary, node: &str) -> Option<&'static str> {
    let types = infer_types(graph);
    let n = graph.nodes.iter().find(|n| n.name == node)?;
    n.outputs.iter().chain(&n.inputs).filter_map(|v| types.get(v.as_str()).copied()).find(|t| !is_integer(t))
}

/// Every value's element type: the graph's own (inputs, outputs, `value_info`, initialisers),
/// and for the values it leaves untyped what their producer makes (in file order, which ONNX
/// requires to be topological): `Shape` int64, `Cast` its `to`, comparisons bool, and the
/// ops that move data the type of their data input.
pub fn infer_types(graph: &GraphSummary) -> BTreeMap<&str, &'static str> {
    let mut types: BTreeMap<&str, &'static str> = graph.value_types.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for n in &graph.nodes {
        for (i, out) in n.outputs.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
            if types.contains_key(out.as_str()) {
                continue;
            }
            if let Some(t) = produced_type(n, i, &types) {
                types.insert(out.as_str(), t);
            }
        }
    }
    types
}

/// The element type of output `i` of `n`, from its op and its inputs' types.
fn produced_type(n: &NodeInfo, i: usize, types: &BTreeMap<&str, &'static str>) -> Option<&'static str> {
    let input = |k: usize| n.inputs.get(k).and_then(|v| types.get(v.as_str()).copied());
    let op = n.op.rsplit("::").next().unwrap_or_default();
    match op {
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" => Some("int64"),
        "Cast" => n.int_attributes.get("to").map(|&to| crate::onnx::proto::elem_type_name(to as i32)).filter(|t| *t != "unknown"),
        "Constant" => n.value_dtype,
        "ConstantOfShape" => Some(n.value_dtype.unwrap_or("float32")),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And" | "Or" | "Xor" | "IsNaN" | "IsInf" => Some("bool"),
        "TopK" if i == 1 => Some("int64"),
        "Where" => input(1).or_else(|| input(2)),
        "Gather" | "GatherElements" | "GatherND" | "Reshape" | "Squeeze" | "Unsqueeze" | "Concat" | "Slice" | "Transpose" | "Expand"
        | "Identity" | "Flatten" | "Tile" | "Split" | "Add" | "Sub" | "Mul" | "Div" | "Neg" | "Abs" | "Min" | "Max" | "Mod" | "Range"
        | "ReduceMax" | "ReduceMin" | "ReduceSum" | "ReduceProd" | "CumSum" | "Pad" | "ScatterND" | "ScatterElements" | "TopK" | "Sign"
        | "Clip" | "Trilu" => (0..n.inputs.len()).find_map(input),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the parsing of ORT 1.31.1's placement lines (as logged with a OpenVINO session)
    /// and that lines of other sessions or locations are not mixed in.
    #[test]
    fn placement_lines_are_kept_per_session() {
        let id = new_log_id();
        let at = "session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp";
        record(&id, at, " Node(s) placed on [OpenVINOExecutionProvider]. Number of nodes: 1");
        record(&id, at, "  MatMul (model/MatMul_1)");
        record(&id, "inference_session.cc:1 Other", "  Add (not a placement)");
        record("", at, " Node(s) placed on [CPUExecutionProvider]. Number of nodes: 9");
        record(&id, at, " Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1");
        record(&id, at, "  RMSNormalization (model/layers.0/input_layernorm/RMSNormalization_node_37)");
        let p = take(&id).expect("recorded");
        assert_eq!(p.by_ep.len(), 2);
        assert_eq!(
            p.by_ep[1].1,
            vec![PlacedNode { op: "RMSNormalization".into(), name: "model/layers.0/input_layernorm/RMSNormalization_node_37".into() }]
        );
        let (compute, shape) = cpu_compute_nodes(&p, None);
        assert_eq!((compute.len(), shape), (1, 0));
        assert!(take(&id).is_none());
    }

    fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str], to: Option<i64>) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            op: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            int_attributes: to.map(|t| BTreeMap::from([("to".to_string(), t)])).unwrap_or_default(),
            value_dtype: None,
            string_attributes: BTreeMap::new(),
        }
    }

    /// Guards the false alarm of mobius's `@cuda-f16` decoder on CUDA (ORT 1.31.1): `Gather
    /// node_Gather_18` of an untyped `Shape` output and `Cast node_Cast_19` to int32 are index
    /// work (outputs inferred integer), while a float node on the CPU — and one whose output type
    /// cannot be known — are compute nodes, reported.
    #[test]
    fn placement_is_judged_by_what_nodes_output() {
        let mut g = GraphSummary::empty(std::path::Path::new("model.onnx"));
        g.nodes = vec![
            node("node_Shape_17", "Shape", &["A"], &["val_5"], None),
            node("node_Gather_18", "Gather", &["val_5", "val_6"], &["val_7"], None),
            node("node_Cast_19", "Cast", &["val_7"], &["val_8"], Some(6)),
            node("gqa", "com.microsoft::GroupQueryAttention", &["A", "B"], &["attn"], None),
            node("mystery", "com.example::Opaque", &["val_8"], &["unknown_out"], None),
        ];
        g.value_types.insert("val_6".into(), "int64");
        g.value_types.insert("attn".into(), "float32");
        let at = "session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp";
        let id = new_log_id();
        record(&id, at, " Node(s) placed on [CPUExecutionProvider]. Number of nodes: 5");
        for line in [
            "  Shape (node_Shape_17)",
            "  Gather (node_Gather_18)",
            "  Cast (node_Cast_19)",
            "  GroupQueryAttention (gqa)",
            "  Opaque (mystery)",
        ] {
            record(&id, at, line);
        }
        let p = take(&id).expect("recorded");
        let (compute, integer) = cpu_compute_nodes(&p, Some(&g));
        assert_eq!(compute.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["gqa", "mystery"]);
        assert_eq!(integer, 3);
        assert_eq!(float_type_of(&g, "gqa"), Some("float32"));
    }
}
