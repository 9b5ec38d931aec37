//! Where ONNX Runtime put each node of a session. ORT assigns a node the EP asked for only when
//! that EP claims it; every other node silently runs on the CPU EP (Python ORT prints a warning,
//! the C API nothing). A parity run on an EP must not report CPU numbers as that EP's, so every
//! session on a non-CPU EP is created with verbose logging under its own log id, the environment's
//! logger ([`forward`]) keeps ORT's node-placement lines per log id, and [`cpu_compute_nodes`]
//! lists the nodes that compute on floats on the CPU (shape arithmetic on int64, which ORT keeps on
//! the CPU by design, is counted, not an error).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ort::logging::{LogLevel, LoggerFunction};

use super::graph::GraphSummary;

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

/// Splits the CPU EP's nodes into those that compute on floating-point tensors and those that
/// only move integers (shape arithmetic). A node whose tensors the graph does not type counts as
/// compute: the check errs on the side of reporting.
pub fn cpu_compute_nodes(placement: &Placement, graph: Option<&GraphSummary>) -> (Vec<PlacedNode>, usize) {
    let cpu = placement.by_ep.iter().filter(|(ep, _)| ep == "CPUExecutionProvider").flat_map(|(_, n)| n.iter());
    let mut compute = Vec::new();
    let mut shape_only = 0;
    for node in cpu {
        let integer_only = graph.and_then(|g| {
            let n = g.nodes.iter().find(|n| n.name == node.name)?;
            let types: Vec<&str> = n
                .inputs
                .iter()
                .chain(&n.outputs)
                .filter(|v| !v.is_empty())
                .map(|v| g.value_types.get(v.as_str()).copied())
                .collect::<Option<_>>()?;
            Some(!types.is_empty() && types.iter().all(|t| matches!(*t, "int64" | "int32" | "bool")))
        });
        if integer_only == Some(true) {
            shape_only += 1;
        } else {
            compute.push(node.clone());
        }
    }
    (compute, shape_only)
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
}
