//! What ONNX Runtime's kernels refuse, per execution provider, known before any session opens.
//!
//! Some kernels exist on an EP and still refuse a node's configuration when the session is
//! created (the kernel's constructor throws). L1 finds the refusals of the EP a trial runs on by
//! loading the graph there; this table says what the *other* EPs of the pinned release do, read
//! from their sources and seen on the machines each was run on, so that a build no EP runs is a
//! finding of the build (L1), not a skip that advises another EP.

use std::collections::BTreeMap;

use super::provision::ORT_VERSION;
use crate::eps::RunEp;
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

/// What an EP's `MatMulNBits` does with its activations, which the calibrated floor of a
/// quantized build must model (the reference runs on the build's dequantized weights, and at
/// `accuracy_level` 4 the CPU's kernel also rounds the activations):
/// - the CPU EP (MLAS, `onnxruntime/core/mlas/lib/qnbitgemm.cpp`, the CompInt8 variant chosen at
///   `accuracy_level` 4): each block of `block_size` activations quantized to int8 with its own
///   scale, integer dot products with the int4 weights, then scaled back;
/// - CUDA (`onnxruntime/contrib_ops/cuda/quantization/matmul_nbits.cc`): never reads
///   `accuracy_level`; a fused GEMV for one row, else the weights dequantized to the activation
///   type and a cuBLAS GEMM (fp32 with `use_tf32` honoured; fp16/bf16 through CUTLASS fpA_intB):
///   the activations are never quantized.
///
/// `GatherBlockQuantized` dequantizes rows on every EP (a lookup, no activations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum MatMulNBitsModel {
    /// MLAS: int8 activation blocks at `accuracy_level` 4, float otherwise.
    #[default]
    Mlas,
    /// Dequantize to the activation type, then a float GEMM, at every `accuracy_level`.
    DequantizeThenGemm,
}

impl MatMulNBitsModel {
    /// The model of `ep`'s kernel (plugin EPs: the CPU's until one is read and measured).
    pub fn of(ep: RunEp) -> MatMulNBitsModel {
        match ep {
            RunEp::Cuda(_) => MatMulNBitsModel::DequantizeThenGemm,
            _ => MatMulNBitsModel::Mlas,
        }
    }

    /// Whether the kernel quantizes the activations of a node at `accuracy_level`.
    pub fn quantizes_activations(self, accuracy_level: i64) -> bool {
        self == MatMulNBitsModel::Mlas && accuracy_level == 4
    }

    /// How a build's `MatMulNBits` is modelled, for its report (`accuracy_level 4 modelled as
    /// MLAS's int8 activation blocks (CPU EP)`).
    pub fn describe(self, ep: RunEp, quantizes_at_level_4: bool) -> String {
        match (self, quantizes_at_level_4) {
            (MatMulNBitsModel::Mlas, true) => format!("accuracy_level 4 modelled as MLAS's int8 activation blocks ({})", ep.ort_name()),
            (MatMulNBitsModel::Mlas, false) => format!("float activations as MLAS computes below accuracy_level 4 ({})", ep.ort_name()),
            (MatMulNBitsModel::DequantizeThenGemm, true) => {
                format!("accuracy_level 4 not applied: {} dequantizes the weights and runs a float GEMM at every level", ep.ort_name())
            }
            (MatMulNBitsModel::DequantizeThenGemm, false) => format!("dequantized weights and a float GEMM ({})", ep.ort_name()),
        }
    }
}

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

    /// Guards the per-EP model of MatMulNBits: only the CPU's MLAS quantizes activations, and only
    /// at accuracy_level 4; CUDA never does (it does not read the attribute).
    #[test]
    fn only_mlas_quantizes_activations_at_level_4() {
        assert!(MatMulNBitsModel::of(RunEp::Cpu).quantizes_activations(4));
        assert!(!MatMulNBitsModel::of(RunEp::Cpu).quantizes_activations(0));
        for level in [0, 1, 2, 3, 4] {
            assert!(!MatMulNBitsModel::of(RunEp::Cuda(0)).quantizes_activations(level));
        }
        let d = MatMulNBitsModel::of(RunEp::Cuda(0)).describe(RunEp::Cuda(0), true);
        assert!(d.contains("accuracy_level 4 not applied") && d.contains("CUDAExecutionProvider"), "{d}");
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
