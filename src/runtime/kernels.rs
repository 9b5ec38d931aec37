//! What ONNX Runtime's kernels refuse, per execution provider, known before any session opens.
//!
//! Some kernels exist on an EP and still refuse a node's configuration when the session is
//! created (the kernel's constructor throws). L1 finds the refusals of the EP a trial runs on by
//! loading the graph there; this table says what the *other* EPs of the pinned release do, read
//! from their sources and seen on the machines each was run on, so that a build no EP runs is a
//! finding of the build (L1), not a skip that advises another EP.

use std::collections::BTreeMap;

use super::provision::ORT_VERSION;
use crate::onnx::graph::GraphSummary;

/// A node configuration an EP's kernel refuses at session creation.
#[derive(Debug, Clone, Copy)]
pub struct ConfigurationRule {
    /// The ops (`domain::op_type`) the rule is about.
    pub ops: &'static [&'static str],
    /// The string attribute whose value the kernels check.
    pub attribute: &'static str,
    /// The values every listed EP accepts.
    pub accepted: &'static [&'static str],
    /// Each EP that has the kernel and where its constructor refuses other values.
    pub refused_by: &'static [(&'static str, &'static str)],
}

/// ONNX Runtime 1.31.1's MoE kernels: the CPU's `MoEBaseCPU` and CUDA's `MoEBase` accept the same
/// five activations and throw "Unsupported MoE activation type" for any other (onnxruntime
/// `contrib_ops/cpu/moe/moe_base_cpu.h`, `contrib_ops/cuda/moe/moe_base.h`; the lines are ORT
/// 1.31.1's as its errors print them: the CPU's seen here, CUDA's on an H200). ORT GenAI's builder
/// writes `geglu` for Gemma 4's experts, which neither runs.
pub const MOE_ACTIVATION: ConfigurationRule = ConfigurationRule {
    ops: &["com.microsoft::MoE", "com.microsoft::QMoE"],
    attribute: "activation_type",
    accepted: &["relu", "gelu", "silu", "swiglu", "identity"],
    refused_by: &[
        ("CPUExecutionProvider", "onnxruntime/contrib_ops/cpu/moe/moe_base_cpu.h:56 MoEBaseCPU::MoEBaseCPU"),
        ("CUDAExecutionProvider", "onnxruntime/contrib_ops/cuda/moe/moe_base.h:61 MoEBase::MoEBase"),
    ],
};

/// Every rule the harness knows.
pub const RULES: &[ConfigurationRule] = &[MOE_ACTIVATION];

/// The nodes of `graphs` (by sub-model role) that no EP of the pinned ONNX Runtime runs, each as
/// an L1 finding naming every EP's refusal (file:line).
pub fn refused_everywhere(graphs: &BTreeMap<String, GraphSummary>) -> Vec<String> {
    let mut out = Vec::new();
    for (role, g) in graphs {
        for rule in RULES {
            for n in g.nodes.iter().filter(|n| rule.ops.contains(&n.op.as_str())) {
                let Some(value) = n.string_attributes.get(rule.attribute) else { continue };
                if rule.accepted.contains(&value.as_str()) {
                    continue;
                }
                let op = n.op.rsplit("::").next().unwrap_or_default();
                let each: Vec<String> = rule
                    .refused_by
                    .iter()
                    .map(|(ep, at)| {
                        format!(
                            "{ep} refuses it when the session is created ({at}: Unsupported {op} {}: {value})",
                            rule.attribute.replace('_', " ")
                        )
                    })
                    .collect();
                out.push(format!(
                    "{role}: node `{}` ({op} with {} \"{value}\") runs on no execution provider of ONNX Runtime {ORT_VERSION}: {}; \
                     they accept {}",
                    n.name,
                    rule.attribute,
                    each.join("; "),
                    rule.accepted.join(", ")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::graph::NodeInfo;

    fn moe(name: &str, activation: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            op: "com.microsoft::MoE".into(),
            inputs: vec![],
            outputs: vec![],
            int_attributes: BTreeMap::new(),
            value_dtype: None,
            string_attributes: BTreeMap::from([("activation_type".to_string(), activation.to_string())]),
        }
    }

    /// Guards: a geglu MoE node is a finding naming each EP's refusal with its source line; an
    /// activation the kernels take is none.
    #[test]
    fn geglu_runs_nowhere_and_silu_everywhere() {
        let mut g = GraphSummary::empty(std::path::Path::new("model.onnx"));
        g.nodes = vec![moe("moe_silu", "silu"), moe("moe_geglu", "geglu")];
        let findings = refused_everywhere(&BTreeMap::from([("model".to_string(), g)]));
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert!(f.contains("`moe_geglu`") && f.contains("\"geglu\""), "{f}");
        assert!(f.contains("moe_base_cpu.h:56") && f.contains("cuda/moe/moe_base.h:61"), "{f}");
        assert!(f.contains("runs on no execution provider of ONNX Runtime 1.31.1"), "{f}");
    }
}
