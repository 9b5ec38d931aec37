//! Can the graph express the attention masks its config asks for? Some builds provably cannot,
//! whatever their numbers on a short prompt: a sliding-attention layer that attends over a static
//! KV buffer with the built-in causal mask and no mask input sees every cached position, not the
//! last `sliding_window` (HF: `create_sliding_window_causal_mask`); a GroupQueryAttention node on a
//! sliding layer without `local_window_size` the same. (A bidirectional-vision decoder with no
//! input that locates the image tokens is the contract's: `input_ids` is required, with why.)

use std::collections::BTreeMap;

use super::ep::layer_of;
use crate::onnx::contract::ExportContract;
use crate::onnx::graph::GraphSummary;
use crate::onnx::package::{DECODER, TEXT_MODEL};
use crate::onnx::protocol::{ExportProtocol, KvLayout};

/// The standard `Attention` op's optional mask input.
const ATTN_MASK_INPUT: usize = 3;

/// Each layer whose attention cannot apply the config's sliding window, naming the node.
pub fn mask_violations(graphs: &BTreeMap<String, GraphSummary>, contract: &ExportContract, protocol: &ExportProtocol) -> Vec<String> {
    let Some(window) = contract.sliding_window else { return Vec::new() };
    let Some(decoder) = graphs.get(DECODER).or_else(|| graphs.get(TEXT_MODEL)) else { return Vec::new() };
    let capacity = match protocol.kv {
        KvLayout::Static { capacity, .. } | KvLayout::Hybrid { capacity, .. } => capacity,
        _ => None,
    };
    let mut v = Vec::new();
    for n in &decoder.nodes {
        let Some(layer) = layer_of(&n.name) else { continue };
        if contract.layer_full.get(layer) != Some(&false) {
            continue;
        }
        let maskless = n.inputs.get(ATTN_MASK_INPUT).is_none_or(|m| m.is_empty());
        match n.op.as_str() {
            // Only a buffer longer than the window can hold positions the window excludes.
            "Attention" if maskless && capacity.is_some_and(|c| c > window) && key_from_buffer(decoder, n) => {
                v.push(format!(
                    "decoder: layer {layer} is a sliding-attention layer (window {window}) but its Attention `{}` has no mask input over a \
                     static KV buffer of {} positions (is_causal={}): it attends to every cached position, not the last {window}",
                    n.name,
                    capacity.unwrap_or_default(),
                    n.int_attributes.get("is_causal").copied().unwrap_or(0)
                ));
            }
            "com.microsoft::GroupQueryAttention" if n.int_attributes.get("local_window_size").is_none_or(|w| *w <= 0) => {
                v.push(format!(
                    "decoder: layer {layer} is a sliding-attention layer (window {window}) but its GroupQueryAttention `{}` sets no \
                     local_window_size: it attends to every past position",
                    n.name
                ));
            }
            _ => {}
        }
    }
    v
}

/// Whether the Attention node's key comes from a `TensorScatter` (a static buffer written this
/// step).
fn key_from_buffer(g: &GraphSummary, n: &crate::onnx::graph::NodeInfo) -> bool {
    let Some(key) = n.inputs.get(1) else { return false };
    g.nodes.iter().any(|p| p.op == "TensorScatter" && p.outputs.iter().any(|o| o == key))
}
