//! The decoder's KV pairs as the protocol names them and the session declares them: names, how
//! each is carried (growing `past_key_values` / `present`, indexed `key_cache` buffers, or ORT
//! GenAI's shared buffers) and static geometry.

use std::collections::BTreeMap;

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;
use ort::value::{DynTensor, DynValue, TensorElementType};

use super::error::PipelineError;
use super::values::{declared_shape, float_value};
use crate::eps::RunEp;
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

/// An empty cache for each KV pair (key, value, in pair order) in the layout the session carries:
/// growing caches of no positions; static buffers of zeros (what lies beyond
/// `nonpad_kv_seqlen` is never attended to); shared buffers of zeros where the EP computes, as ORT
/// GenAI allocates them (the kernel writes from position 0).
pub(super) fn empty_cache(
    slots: &[KvSlot],
    float: TensorElementType,
    ep: RunEp,
    decoder: Option<&Session>,
) -> Result<Vec<DynValue>, ort::Error> {
    let mut cache = Vec::with_capacity(slots.len() * 2);
    for slot in slots {
        for dims in [slot.key_dims, slot.value_dims] {
            let (a, b) = (dims[0] as usize, dims[1] as usize);
            cache.push(match slot.layout {
                CacheLayout::Dynamic => float_value(float, &[1, a, 0, b], &[])?,
                CacheLayout::Shared { capacity } => shared_buffer(float, ep, decoder, &[1, a, capacity, b])?,
                CacheLayout::Static { .. } => float_value(float, &[1, a, b], &vec![0.0; a * b])?,
            });
        }
    }
    Ok(cache)
}

/// A zeroed shared KV buffer in the memory the EP computes in: bound as a past input and a present
/// output, it must already be where the kernel writes (CUDA's sliding-window GroupQueryAttention
/// refuses a past and a present that are not one buffer). Allocated by ONNX Runtime, not from a
/// Rust vector: only such a tensor can be bound as an output and written in place. Device memory
/// comes uninitialised, so host zeros are copied into it.
fn shared_buffer(float: TensorElementType, ep: RunEp, decoder: Option<&Session>, shape: &[usize]) -> Result<DynValue, ort::Error> {
    let ty = match float {
        TensorElementType::Float16 | TensorElementType::Bfloat16 => float,
        _ => TensorElementType::Float32,
    };
    // ort zeroes what it allocates in host memory.
    let zeros = DynTensor::new(&Allocator::default(), ty, shape.to_vec())?;
    let home = kv_memory(ep)?;
    if home.is_cpu_accessible() {
        return Ok(zeros.into_dyn());
    }
    let decoder = decoder.ok_or_else(|| ort::Error::new("the decoder session was released"))?;
    let mut buffer = DynTensor::new(&Allocator::new(decoder, home)?, ty, shape.to_vec())?;
    zeros.copy_into(&mut buffer)?;
    Ok(buffer.into_dyn())
}

/// Where a decoder's KV caches live between steps: the device of a CUDA EP (what ORT GenAI does;
/// a cache never crosses to the host and back), host memory on every other EP.
pub(super) fn kv_memory(ep: RunEp) -> Result<MemoryInfo<'static>, ort::Error> {
    match ep {
        RunEp::Cuda(device) => MemoryInfo::new(AllocationDevice::CUDA, device as i32, AllocatorType::Device, MemoryType::Default),
        _ => Ok(MemoryInfo::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards where caches live between steps: host memory on the CPU EP (ort zeroes what it
    /// allocates there, so a shared buffer starts empty), the EP's device on CUDA, so a cache
    /// never crosses to the host and back.
    #[test]
    fn caches_live_where_the_ep_computes() {
        crate::runtime::provision::environment().expect("ONNX Runtime");
        let host = kv_memory(RunEp::Cpu).expect("host memory info");
        assert!(host.is_cpu_accessible());
        let cuda = kv_memory(RunEp::Cuda(1)).expect("CUDA memory info (no device needed to name it)");
        assert_eq!((cuda.allocation_device(), cuda.device_id()), (AllocationDevice::CUDA, 1));
        assert!(!cuda.is_cpu_accessible());
        let slot = KvSlot { layout: CacheLayout::Shared { capacity: 3 }, ..cache_slot() };
        let cache = empty_cache(&[slot], TensorElementType::Float16, RunEp::Cpu, None).expect("a shared buffer in host memory");
        assert_eq!(cache.len(), 2);
        for value in &cache {
            let (shape, data) = value.try_extract_tensor::<half::f16>().expect("f16 buffer");
            assert_eq!(**shape, [1, 2, 3, 4]);
            assert!(data.iter().all(|x| x.to_f32() == 0.0), "a shared buffer starts zeroed");
        }
        // A device buffer needs the decoder's session for its allocator: refused without one.
        let slot = KvSlot { layout: CacheLayout::Shared { capacity: 3 }, ..cache_slot() };
        assert!(empty_cache(&[slot], TensorElementType::Float32, RunEp::Cuda(0), None).is_err());
    }

    fn cache_slot() -> KvSlot {
        KvSlot {
            layout: CacheLayout::Dynamic,
            past_key: "k".into(),
            past_value: "v".into(),
            present_key: "pk".into(),
            present_value: "pv".into(),
            key_dims: [2, 4],
            value_dims: [2, 4],
        }
    }
}
