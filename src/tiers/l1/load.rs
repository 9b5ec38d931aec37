//! L1's last question: does ONNX Runtime accept each sub-model on the trial's EP? On the CPU EP
//! (ORT type-checks and assigns kernels at load): a graph ORT rejects is a failure naming the node
//! (the type check is the same on every EP, so L3–L5 run and fail with the load error); a graph
//! that is valid but has no CPU kernel for its dtype (bf16 MatMul, say) is a note — it is not
//! runnable on a CPU-only machine, and L3–L5 are skipped there naming the EP to run it on
//! (`tiers::skip`, from this same verdict) — not a failure. On another EP ([`load_on`]) every
//! refusal is a failure of the build on that EP, and so is a session whose float compute nodes
//! ORT left to the CPU EP (partitioned: named, with the kernel that is missing).

use std::collections::BTreeMap;
use std::path::Path;

use crate::onnx::graph::GraphSummary;
use crate::onnx::package::OnnxPackage;

/// What loading the sub-models found.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// The EP they were loaded on.
    pub ep: crate::eps::RunEp,
    /// Sub-models ORT rejects as graphs (on every EP), each naming the node.
    pub failures: Vec<String>,
    /// Sub-models ORT accepts as graphs but cannot run on the CPU EP: (role, what has no kernel,
    /// `no bfloat16 kernel for Mul (node `…`)`).
    pub no_cpu_kernel: Vec<(String, String)>,
    /// Why nothing was loaded (the package is too large for this machine), when so.
    pub not_loaded: Option<String>,
}

impl LoadReport {
    /// What is not a failure: sub-models without CPU kernels, or why nothing was loaded.
    pub fn notes(&self) -> Vec<String> {
        let no_kernel = self.no_cpu_kernel.iter().map(|(role, what)| format!("{role}: not runnable on the CPU EP: {what}"));
        no_kernel.chain(self.not_loaded.clone()).collect()
    }
}

/// The fraction of the available memory a load may read before L1 does not load the package.
const MAX_SHARE_OF_AVAILABLE: f64 = 0.8;

/// Whether a load that reads `bytes` into memory fits this machine; `None` when it does, else why
/// the package is not loaded.
fn too_large(bytes: u64) -> Option<String> {
    let available = crate::memory::available_bytes()?;
    (bytes as f64 > MAX_SHARE_OF_AVAILABLE * available as f64).then(|| {
        format!(
            "not loaded by ONNX Runtime: loading it reads {} and this machine has {} available",
            crate::memory::gib(bytes),
            crate::memory::gib(available)
        )
    })
}

/// Loads every sub-model of `package` on `ep` (not the CPU): a load error there is a failure (a
/// graph ORT rejects, a kernel that refuses the node on that EP); float compute nodes placed on
/// the CPU EP are a failure naming them (the build is partitioned on `ep`).
pub fn load_on(ep: crate::eps::RunEp, package: &OnnxPackage, graphs: &BTreeMap<String, GraphSummary>) -> LoadReport {
    use crate::runtime::session::{open_placed, ModelSource, SessionOptions};
    let mut report = LoadReport { ep, ..LoadReport::default() };
    // Another EP copies every weight (to the device, and often through the host).
    if let Some(why) = too_large(folder_bytes(&package.root)) {
        report.not_loaded = Some(why);
        return report;
    }
    for (role, file) in &package.submodels {
        match open_placed(ModelSource::File(file), &SessionOptions { intra_threads: 1, ep }) {
            Ok(placed) => {
                if let Some(p) = placed.partition {
                    report.failures.push(format!("{role}: partitioned on {}: {}", ep.ort_name(), p.describe(graphs.get(role))));
                }
            }
            Err(e) => {
                let message = e.to_string();
                let what = match classify(&message, graphs.get(role)) {
                    Outcome::NoCpuKernel(w) | Outcome::Rejected(w) => w,
                };
                report.failures.push(format!("{role}: ONNX Runtime does not load it on {}: {what}", ep.ort_name()));
            }
        }
    }
    report
}

/// Loads every sub-model of `package` on the CPU EP.
pub fn load_on_cpu(package: &OnnxPackage, graphs: &BTreeMap<String, GraphSummary>) -> LoadReport {
    let mut report = LoadReport::default();
    // This load does not prepack (`open_cpu`): a weight in external data stays mapped and unread,
    // so only the graph files themselves are read (a full-size export is checked here too).
    let graph_bytes = package.submodels.values().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    if let Some(why) = too_large(graph_bytes) {
        report.not_loaded = Some(why);
        return report;
    }
    for (role, file) in &package.submodels {
        let Some(message) = cpu_refusal(file) else { continue };
        let graph = graphs.get(role);
        match classify(&message, graph) {
            Outcome::NoCpuKernel(what) => report.no_cpu_kernel.push((role.clone(), what)),
            Outcome::Rejected(what) => report.failures.push(format!("{role}: ONNX Runtime rejects the graph at {what}")),
        }
    }
    report
}

/// The files a load on the CPU EP reads or maps (the graph and every file beside it: its external
/// data), each with its length and modification time.
type LoadedFiles = Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)>;

/// Why ONNX Runtime refuses to load the graph at `file` on the CPU EP (its error's message;
/// `None`: it loads), asked once per process for the same files: the cases judging one export (a
/// case and its views, several cases of one fixture) load it once (`run cases`: 47 of 233 loads,
/// 0.6 s).
fn cpu_refusal(file: &Path) -> Option<String> {
    static ANSWERS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<LoadedFiles, Option<String>>>> =
        std::sync::OnceLock::new();
    let answers = ANSWERS.get_or_init(Default::default);
    let identity = |p: &Path| std::fs::metadata(p).ok().map(|m| (p.to_path_buf(), m.len(), m.modified().ok()));
    let mut key: LoadedFiles = identity(file).into_iter().collect();
    if let Some(dir) = file.parent().and_then(|d| std::fs::read_dir(d).ok()) {
        let mut beside: LoadedFiles = dir.filter_map(|e| e.ok()).filter_map(|e| identity(&e.path())).collect();
        beside.sort();
        key.extend(beside);
    }
    let lock = || answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(answer) = lock().get(&key) {
        return answer.clone();
    }
    let answer = crate::runtime::session::open_cpu(file).err().map(|e| e.to_string());
    lock().insert(key, answer.clone());
    answer
}

enum Outcome {
    NoCpuKernel(String),
    Rejected(String),
}

/// What an ORT load error means, with the node it is about (named by ORT, or found in the graph
/// when ORT leaves the name empty).
fn classify(message: &str, graph: Option<&GraphSummary>) -> Outcome {
    let one_line = message.replace('\n', " ");
    // "Could not find an implementation for MatMul(13) node with name 'decoder/…/MatMul_node_85'"
    if let Some(rest) = one_line.split("Could not find an implementation for ").nth(1) {
        let op = rest.split('(').next().unwrap_or_default().to_string();
        let node = rest.split("node with name '").nth(1).and_then(|r| r.split('\'').next()).unwrap_or_default().to_string();
        let dtype = graph
            .and_then(|g| {
                let n = g.nodes.iter().find(|n| n.name == node)?;
                n.inputs.iter().find_map(|i| g.value_types.get(i.as_str()).copied())
            })
            .unwrap_or("its");
        return Outcome::NoCpuKernel(format!("no {dtype} kernel for {op} (node `{node}`)"));
    }
    // "Exception during initialization: /onnxruntime_src/onnxruntime/contrib_ops/cpu/moe/
    // moe_base_cpu.h:56 onnxruntime::contrib::MoEBaseCPU::MoEBaseCPU(const onnxruntime::
    // OpKernelInfo&) Unsupported MoE activation type: geglu" — a CPU kernel's constructor refuses
    // the node's configuration: the graph is valid and the EP that implements it runs it.
    if let Some(rest) = one_line.split("Exception during initialization: ").nth(1) {
        let location = rest.split_whitespace().next().unwrap_or_default();
        if location.contains("/providers/cpu/") || location.contains("/contrib_ops/cpu/") {
            let reason = rest.rsplit("&) ").next().unwrap_or(rest).trim();
            let node = graph.and_then(|g| refused_node(g, reason)).map(|n| format!(" (node `{n}`)")).unwrap_or_default();
            return Outcome::NoCpuKernel(format!("the CPU kernel refuses the node's configuration{node}: {reason}"));
        }
    }
    // "Node (model/layers.9/…/Transpose_node_495) Op (Transpose) [TypeInferenceError] …"
    if let Some(rest) = one_line.split("Node (").nth(1) {
        let node = rest.split(')').next().unwrap_or_default();
        if !node.is_empty() {
            return Outcome::Rejected(format!("node `{node}`: {}", tail(&one_line)));
        }
    }
    // "Type Error: Type parameter (T) of Optype (Add) bound to different types (tensor(bfloat16)
    // and tensor(float) in node ()." — ORT names no node: find the one it means.
    if let Some(rest) = one_line.split("of Optype (").nth(1) {
        let op = rest.split(')').next().unwrap_or_default();
        let types: Vec<&str> = one_line.split("tensor(").skip(1).filter_map(|t| t.split(')').next()).map(onnx_type_name).collect();
        let at = graph.and_then(|g| mixed_type_node(g, op, &types)).unwrap_or_else(|| format!("a {op} node"));
        return Outcome::Rejected(format!("{at}: {}", tail(&one_line)));
    }
    Outcome::Rejected(format!("load: {}", tail(&one_line)))
}

/// The first node whose op a CPU kernel's refusal names (`Unsupported MoE activation type: geglu`
/// names `MoE`; its quantized twin `QMoE` counts too), the longest op name mentioned winning.
/// (`rev`: `max_by_key` keeps the last of equals, the first in file order is wanted.)
fn refused_node(g: &GraphSummary, reason: &str) -> Option<String> {
    let words: Vec<&str> = reason.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let op_name = |n: &crate::onnx::graph::NodeInfo| n.op.rsplit("::").next().unwrap_or_default().to_string();
    g.nodes
        .iter()
        .filter(|n| {
            let op = op_name(n);
            words.iter().any(|w| *w == op || op.strip_prefix('Q') == Some(*w))
        })
        .rev()
        .max_by_key(|n| op_name(n).len())
        .map(|n| n.name.clone())
}

/// The node ORT means by "`op` bound to different types": the first `op` node whose typed inputs
/// are exactly those types, else the first whose typed inputs are among them and one input is not
/// typed in the graph (an output of a fused op the exporter did not annotate), with its inputs.
fn mixed_type_node(g: &GraphSummary, op: &str, types: &[&str]) -> Option<String> {
    let typed = |n: &crate::onnx::graph::NodeInfo| -> Vec<Option<&str>> {
        n.inputs.iter().filter(|i| !i.is_empty()).map(|i| g.value_types.get(i.as_str()).copied()).collect()
    };
    let candidates = g.nodes.iter().filter(|n| n.op == op);
    let exact = candidates.clone().find(|n| {
        let ts = typed(n);
        ts.iter().all(Option::is_some) && types.iter().all(|t| ts.contains(&Some(*t)))
    });
    let partial = || {
        candidates.clone().find(|n| {
            let ts = typed(n);
            ts.contains(&None) && ts.iter().flatten().all(|t| types.contains(t))
        })
    };
    let node = exact.or_else(partial)?;
    let inputs: Vec<String> = node
        .inputs
        .iter()
        .filter(|i| !i.is_empty())
        .map(|i| {
            let producer =
                g.nodes.iter().find(|p| p.outputs.contains(i)).map(|p| format!(", from {} `{}`", p.op, p.name)).unwrap_or_default();
            format!("`{i}` {}{producer}", g.value_types.get(i.as_str()).copied().unwrap_or("untyped"))
        })
        .collect();
    Some(format!("node `{}` ({op} of {})", node.name, inputs.join(" and ")))
}

/// ORT's `tensor(float)` spellings as this crate names element types.
fn onnx_type_name(t: &str) -> &str {
    match t {
        "float" => "float32",
        "double" => "float64",
        other => other,
    }
}

/// The part of an ORT error after its status prefix (`[ONNXRuntimeError] : 1 : FAIL : `).
fn tail(message: &str) -> String {
    let m = message.rsplit(" : ").next().unwrap_or(message).trim();
    m.chars().take(400).collect()
}

/// Bytes of every file under `dir`.
fn folder_bytes(dir: &Path) -> u64 {
    crate::files::walk(dir, &|_| true).into_iter().flatten().filter_map(|p| p.metadata().ok()).map(|m| m.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the memory guard: a load reading more than this machine has available is not made,
    /// saying how much; a small one is.
    #[test]
    fn a_load_larger_than_the_memory_is_not_made() {
        let Some(available) = crate::memory::available_bytes() else { return };
        let why = too_large(available.saturating_mul(2)).expect("twice the available memory is too large");
        assert!(why.starts_with("not loaded by ONNX Runtime: loading it reads"), "{why}");
        assert_eq!(too_large(1 << 20), None);
    }

    /// Guards the message parsing on ORT 1.31.1's three load failures seen on mobius builds.
    #[test]
    fn ort_messages_name_the_node() {
        let m = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for MatMul(13) node with name 'd/q/MatMul_1'";
        assert!(matches!(classify(m, None), Outcome::NoCpuKernel(w) if w == "no its kernel for MatMul (node `d/q/MatMul_1`)"));
        let m = "[ONNXRuntimeError] : 1 : FAIL : Node (model/layers.9/self_attn/Transpose_node_495) Op (Transpose) [TypeInferenceError] Invalid attribute perm {0, 2, 1, 3}, input shape = {0, 64, 32}";
        assert!(
            matches!(classify(m, None), Outcome::Rejected(w) if w.starts_with("node `model/layers.9/self_attn/Transpose_node_495`: Node ("))
        );
        let m = "[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: /onnxruntime_src/onnxruntime/contrib_ops/cpu/moe/moe_base_cpu.h:56 onnxruntime::contrib::MoEBaseCPU::MoEBaseCPU(const onnxruntime::OpKernelInfo&) Unsupported MoE activation type: geglu";
        assert!(
            matches!(classify(m, None), Outcome::NoCpuKernel(w) if w == "the CPU kernel refuses the node's configuration: Unsupported MoE activation type: geglu")
        );
        // The same exception from a kernel outside the CPU EP's tree is no CPU-kernel note.
        let m = "[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: /onnxruntime_src/onnxruntime/core/framework/session_state.cc:10 f() bad";
        assert!(matches!(classify(m, None), Outcome::Rejected(_)));
        let m = "[ONNXRuntimeError] : 1 : FAIL : Type Error: Type parameter (T) of Optype (Add) bound to different types (tensor(bfloat16) and tensor(float) in node ().";
        assert!(matches!(classify(m, None), Outcome::Rejected(w) if w.starts_with("a Add node: Type Error")));
    }
}
