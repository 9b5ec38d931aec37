//! The contracts an EP build must honour beyond the config's (mobius's `EpCapabilities` for the
//! EP, `src/eps.rs`), and whether an export is what its case says it is.

use std::collections::BTreeMap;

use crate::case::ExportPin;
use crate::eps::Ep;
use crate::onnx::contract::ExportContract;
use crate::onnx::graph::GraphSummary;
use crate::onnx::package::{DECODER, TEXT_MODEL};
use crate::onnx::protocol::{ExportProtocol, KvLayout};

/// A layer index from a node name (`…/layers.<i>/…`), as torch-dynamo exporters write them.
pub fn layer_of(name: &str) -> Option<usize> {
    let at = name.find("layers.")?;
    let rest = &name[at + "layers.".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// What differs between the case's pin and the export's protocol.
pub fn pin_violations(pin: &ExportPin, protocol: &ExportProtocol) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(d) = pin.dtype {
        if d.onnx_elem_type() != protocol.float {
            v.push(format!("the case pins dtype {d} but the export's activations are {}", protocol.float));
        }
    }
    if let Some(want) = pin.static_cache {
        let is = matches!(protocol.kv, KvLayout::Static { .. } | KvLayout::Hybrid { .. });
        if want != is {
            v.push(format!("the case pins static_cache: {want} but the export has {} KV cache", if is { "a static" } else { "a dynamic" }));
        }
    }
    // The EP's build as mobius makes it; another exporter's build for that EP is judged by the
    // EP's own contract ([`ep_violations`]) only.
    if let Some(ep) = pin.ep.filter(|_| protocol.is_mobius()) {
        let compatible = protocol.compatible_eps();
        if !compatible.contains(&ep) {
            let names: Vec<&str> = compatible.iter().map(|e| e.as_str()).collect();
            v.push(format!(
                "the case pins ep {ep} but this is not mobius's {ep} build at {}: {} (it looks like a build for {})",
                protocol.float,
                if ep.fuses_gqa(protocol.float) {
                    "that build fuses GroupQueryAttention"
                } else {
                    "that build keeps the standard Attention"
                },
                names.join(", ")
            ));
        }
    }
    v
}

/// What the EP contract check found.
#[derive(Debug, Default)]
pub struct EpFindings {
    /// Each way the export breaks the contract, naming the sub-model, node or tensor.
    pub violations: Vec<String>,
    /// Conditions that hold for other deployments than the one judged (an ORT release).
    pub notes: Vec<String>,
}

/// Checks the export against `ep`'s contract as deployed with ONNX Runtime `ort_version`.
pub fn ep_violations(
    ep: Ep,
    graphs: &BTreeMap<String, GraphSummary>,
    contract: &ExportContract,
    protocol: &ExportProtocol,
    ort_version: &str,
) -> EpFindings {
    let build = ep.build();
    let mut v = Vec::new();
    let mut notes = Vec::new();
    if let Some(limit) = build.max_buffer_size {
        for (role, g) in graphs {
            for (name, bytes) in g.initializer_bytes.iter().take_while(|(_, b)| *b > limit) {
                v.push(format!(
                    "{ep}: {role}: initializer `{name}` is {:.1} MiB, over the EP's {:.0} MiB buffer limit (WebGPU's maxBufferSize; mobius \
                     max_buffer_size): it must be split",
                    mib(*bytes),
                    mib(limit)
                ));
            }
        }
    }
    let decoder = graphs.get(DECODER).or_else(|| graphs.get(TEXT_MODEL));
    // A package with a runtime config captures the graph only where that config says so (ORT
    // GenAI's builder writes `enableGraphCapture: "0"` for WebGPU); mobius's WebGPU builds always.
    let captured = protocol.runtime.as_ref().is_none_or(|r| r.graph_capture());
    if build.shape_free_capture && !captured {
        notes.push(format!("{ep}: graph capture is off in the package's genai_config.json, so Shape nodes may stay"));
    }
    if build.shape_free_capture && captured {
        if let Some(d) = decoder {
            let dynamic: Vec<&str> =
                d.nodes.iter().filter(|n| n.op == "Shape" || n.op == "ConstantOfShape").map(|n| n.name.as_str()).collect();
            if !dynamic.is_empty() {
                v.push(format!(
                    "{ep}: graph capture cannot execute Shape / ConstantOfShape, and the decoder has {}: {} (mobius \
                     requires_graph_capture_rewrite: its StaticEmptyKV rewrite should have replaced them)",
                    dynamic.len(),
                    dynamic.iter().take(6).copied().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    if let (Some(max), Some(d)) = (build.gqa_max_head_dim, decoder) {
        for n in d.nodes.iter().filter(|n| n.op == "com.microsoft::GroupQueryAttention") {
            if let Some(hd) = layer_of(&n.name).and_then(|l| contract.layer_head_dims.get(l)).filter(|&&hd| hd > max) {
                v.push(format!(
                    "{ep}: GroupQueryAttention `{}` runs a layer of head_dim {hd}, above the {max} ONNX Runtime's {ep} GroupQueryAttention \
                     kernel supports",
                    n.name
                ));
            }
        }
    }
    if let Some(ceiling) = build.max_opset.filter(|c| protocol.opset > c.max) {
        let (major, minor) = ceiling.through_ort;
        let what = format!(
            "{ep}: the decoder declares opset {}, and ONNX Runtime ≤ {major}.{minor}'s {ep} EP has kernels only up to opset {} (its \
             Reshape, Squeeze, … would run on the CPU; mobius lowers the declaration with MOBIUS_ORT_LOWER_OPSET_FOR_EP=1)",
            protocol.opset, ceiling.max
        );
        if ceiling.holds_for(ort_version) {
            v.push(format!("{what}; judged for ONNX Runtime {ort_version}"));
        } else {
            notes.push(format!("{what}; not a violation with ONNX Runtime {ort_version}"));
        }
    }
    if build.needs_float_attention_mask {
        for (role, g) in graphs {
            for n in g.nodes.iter().filter(|n| n.op == "Attention") {
                let mask = n.inputs.get(3).filter(|m| !m.is_empty());
                if let Some(m) = mask.filter(|m| g.value_types.get(m.as_str()) == Some(&"bool")) {
                    v.push(format!(
                        "{ep}: {role}: Attention `{}` takes a bool attn_mask `{m}`: ONNX Runtime's {ep} mask conversion turns it into NaN; \
                         the build must pass an additive float mask",
                        n.name
                    ));
                }
            }
        }
    }
    EpFindings { violations: v, notes }
}

/// ONNX Runtime's GroupQueryAttention kernels take head sizes that are multiples of 16 (1.31.1,
/// CPU: "head_size shall be a multiple of 16"), whatever the EP the build was made for.
pub const GQA_HEAD_SIZE_MULTIPLE: i64 = 16;

/// Each GroupQueryAttention node on a layer whose head_dim ONNX Runtime's kernel refuses: the
/// graph loads, and fails at its first run. ORT checks the head size only for a node that
/// receives cos/sin caches (it rotates inside, `cos_cache`/`sin_cache`, inputs 7 and 8): mobius's
/// GQA does; onnxruntime-genai's builder rotates in a RotaryEmbedding before it and passes none,
/// and runs any head_dim.
pub fn gqa_kernel_violations(graphs: &BTreeMap<String, GraphSummary>, contract: &ExportContract) -> Vec<String> {
    let Some(decoder) = graphs.get(DECODER).or_else(|| graphs.get(TEXT_MODEL)) else { return Vec::new() };
    let given = |n: &crate::onnx::graph::NodeInfo, i: usize| n.inputs.get(i).is_some_and(|s| !s.is_empty());
    decoder
        .nodes
        .iter()
        .filter(|n| n.op == "com.microsoft::GroupQueryAttention")
        .filter(|n| given(n, 7) && given(n, 8))
        .filter_map(|n| {
            let hd = *layer_of(&n.name).and_then(|l| contract.layer_head_dims.get(l))?;
            (hd % GQA_HEAD_SIZE_MULTIPLE != 0).then(|| {
                format!(
                    "decoder: GroupQueryAttention `{}` runs a layer of head_dim {hd}; ONNX Runtime's GroupQueryAttention kernel needs a \
                     multiple of {GQA_HEAD_SIZE_MULTIPLE} (\"head_size shall be a multiple of 16\" at run time)",
                    n.name
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the layer lookup the head_dim check relies on.
    #[test]
    fn layers_from_node_names() {
        assert_eq!(layer_of("model/layers.12/self_attn/GroupQueryAttention_3"), Some(12));
        assert_eq!(layer_of("model/norm/x"), None);
    }
}
