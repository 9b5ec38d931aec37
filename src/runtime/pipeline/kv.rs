//! The decoder's KV pairs as the protocol names them and the session declares them: names, how
//! each is carried (growing `past_key_values` / `present`, indexed `key_cache` buffers, or ORT
//! GenAI's shared buffers) and static geometry.

use std::collections::BTreeMap;

use ort::session::Session;
use ort::value::ValueType;

use super::error::PipelineError;
use crate::onnx::protocol::{CacheKind, ExportProtocol, KvNames};
use crate::onnx::shapes::{self, Axis, Source};

/// Names and empty-cache geometry of one KV pair, in either cache layout.
#[derive(Debug, Clone)]
pub(super) struct KvSlot {
    pub(super) layout: CacheLayout,
    /// `past_key_values.N.key` / `key_cache.N`.
    pub(super) past_key: String,
    pub(super) past_value: String,
    /// `present.N.key` / `updated_key_cache.N`.
    pub(super) present_key: String,
    pub(super) present_value: String,
    /// Dynamic and shared: `[heads, head_dim]` (cache `[1, heads, past or capacity, head_dim]`);
    /// static: `[capacity, heads·head_dim]` (cache `[1, capacity, heads·head_dim]`). Static in
    /// the graph.
    pub(super) key_dims: [i64; 2],
    pub(super) value_dims: [i64; 2],
}

/// How one KV pair is carried between steps (read from the session). mobius's static-cache
/// builds of gemma4_text are hybrid: sliding layers keep a dynamic cache (the window needs the
/// mask), full-attention layers a static one (`mobius/tasks/_gemma4.py`,
/// `_make_gemma4_static_cache_inputs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheLayout {
    /// `present` grows by the new positions and is fed back as `past_key_values`.
    Dynamic,
    /// Buffers of `capacity` positions the graph writes at `write_indices`.
    Static { capacity: usize },
    /// ORT GenAI's shared buffers of `capacity` positions (`genai_config.json`): zeros at the
    /// start, GroupQueryAttention writes the new positions in place and returns the buffer.
    Shared { capacity: usize },
}

/// KV pairs in index order with their static geometry, and the cache layout: dynamic
/// (`past_key_values.N.{key,value}` → `present.N.*`) or static (`key_cache.N` / `value_cache.N` →
/// `updated_key_cache.N` / `updated_value_cache.N`, with `write_indices` and `nonpad_kv_seqlen`).
pub(super) fn kv_slots(
    decoder: &Session,
    role: &'static str,
    protocol: &ExportProtocol,
    cuda: bool,
) -> Result<(Vec<KvSlot>, Option<usize>), PipelineError> {
    let contract = |m: String| PipelineError::Contract { role, message: m };
    // Pair index → indexed buffer or not, as the protocol read them from the graph's inputs.
    let mut indices: BTreeMap<usize, bool> = BTreeMap::new();
    for &(idx, is_static) in &protocol.kv_pairs {
        if indices.insert(idx, is_static).is_some_and(|was| was != is_static) {
            return Err(contract(format!("KV pair {idx} is declared both as past_key_values.{idx} and as key_cache.{idx}")));
        }
    }
    let n = indices.len();
    let mut slots = Vec::with_capacity(n);
    let mut capacity = None;
    for idx in 0..n {
        let is_static = *indices.get(&idx).ok_or_else(|| contract(format!("KV inputs are not numbered 0..{n}: pair {idx} is missing")))?;
        let dims_of = |name: &str| -> Result<[i64; 2], PipelineError> {
            let ty = decoder
                .inputs()
                .iter()
                .find(|o| o.name() == name)
                .map(|o| o.dtype())
                .ok_or_else(|| contract(format!("input `{name}` is missing")))?;
            let shape = declared_shape(Some(ty)).ok_or_else(|| contract(format!("input `{name}` is not a tensor")))?;
            if is_static {
                let axes = [Axis::Is("batch", 1), Axis::Static("capacity"), Axis::Static("kv_heads · head_dim")];
                shapes::check(role, "input", name, &axes, &shape, Source::Declared)?;
                Ok([shape[1], shape[2]])
            } else {
                let axes = [Axis::Is("batch", 1), Axis::Static("kv_heads"), Axis::Any("past_sequence"), Axis::Static("head_dim")];
                shapes::check(role, "input", name, &axes, &shape, Source::Declared)?;
                Ok([shape[1], shape[3]])
            }
        };
        let KvNames { past_key, past_value, present_key, present_value } = protocol.kv_names(idx, is_static);
        for name in [&present_key, &present_value] {
            if !decoder.outputs().iter().any(|o| o.name() == name.as_str()) {
                return Err(contract(format!("output `{name}` is missing")));
            }
        }
        let (key_dims, value_dims) = (dims_of(&past_key)?, dims_of(&past_value)?);
        let layout = match protocol.cache_kind(idx, is_static, cuda) {
            CacheKind::Indexed => {
                if capacity.is_some_and(|c| c != key_dims[0] || c != value_dims[0]) {
                    return Err(contract(format!("`{past_key}` and the other caches declare different capacities")));
                }
                capacity = Some(key_dims[0]);
                CacheLayout::Static { capacity: key_dims[0] as usize }
            }
            CacheKind::Shared { capacity } => CacheLayout::Shared { capacity },
            CacheKind::Growing => CacheLayout::Dynamic,
        };
        slots.push(KvSlot { layout, key_dims, value_dims, past_key, past_value, present_key, present_value });
    }
    Ok((slots, capacity.map(|c| c as usize)))
}

/// The shape a graph declares for a tensor (-1 for a dynamic axis; empty when it states none);
/// `None` for a non-tensor.
pub(super) fn declared_shape(ty: Option<&ValueType>) -> Option<Vec<i64>> {
    match ty? {
        ValueType::Tensor { shape, .. } => Some(shape.to_vec()),
        _ => None,
    }
}
