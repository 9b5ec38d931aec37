//! The contract an export must honour, derived from the checkpoint's `config.json` alone: which
//! sub-models exist, their input/output names, element types and the static dimensions the
//! config fixes (hidden size, vocabulary, KV heads × head_dim per non-shared layer).
//!
//! This reads only the handful of config fields that shape the graph's interface, with HF's
//! defaults (transformers 5.14.1 `Gemma4UnifiedTextConfig` / `Gemma4TextConfig`, which differ in
//! `hidden_size_per_layer_input` and `use_bidirectional_attention`), so it stays an independent
//! statement of "what the config implies" rather than a copy of either implementation.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::package::{DECODER, EMBEDDING, TEXT_MODEL, VISION_ENCODER};
use super::protocol::{
    self, AttentionOp, ExportProtocol, KvLayout, PleSource, KEY_CACHE, NONPAD_KV_SEQLEN, PAST, PRESENT, UPDATED_KEY_CACHE,
    UPDATED_VALUE_CACHE, VALUE_CACHE, WRITE_INDICES,
};

/// Largest `num_hidden_layers` accepted (published Gemma 4 models have at most 60).
pub const MAX_LAYERS: i64 = 1 << 16;

/// Why no contract could be derived.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not valid JSON: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{path}: field `{field}`: {expected}")]
    Field { path: PathBuf, field: String, expected: String },
}

/// Element type an I/O tensor must have: a fixed one, "the export's float dtype", or "the
/// export's index type".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemType {
    Int64,
    /// Activations: float32 for an f32 export, float16 for f16, ...
    Float,
    /// Token ids, masks, positions, cache indices: int64, or int32 throughout in builds that
    /// declare their ids int32 (graph-capture builds).
    Index,
}

/// One dimension the contract states: a fixed size or "any" (batch, sequence, cache length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedDim {
    Fixed(i64),
    Any,
}

/// An input or output the contract requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedTensor {
    pub name: String,
    pub elem: ElemType,
    pub dims: Vec<ExpectedDim>,
    /// `false` for an input the export may take but need not (checked only when present).
    pub required: bool,
    /// Why it is required, when that is not obvious (said when it is missing).
    pub why: Option<&'static str>,
}

/// The interface of one sub-model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmodelContract {
    pub role: &'static str,
    pub inputs: Vec<ExpectedTensor>,
    pub outputs: Vec<ExpectedTensor>,
}

/// KV-cache geometry of one non-shared layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    pub layer: usize,
    pub heads: i64,
    pub head_dim: i64,
    /// A full-attention layer (static in mobius's hybrid static-cache builds).
    pub full: bool,
}

/// Everything the config implies about an export's interface.
#[derive(Debug, Clone)]
pub struct ExportContract {
    pub model_type: String,
    pub hidden_size: i64,
    pub vocab_size: i64,
    /// gemma4 PLE width per layer (0 = none).
    pub per_layer_input_dim: i64,
    pub kv: Vec<KvGeometry>,
    /// Every layer's attention head_dim (full layers: `global_head_dim`), shared layers included.
    pub layer_head_dims: Vec<i64>,
    /// Every layer's attention type: `true` for full attention, `false` for sliding.
    pub layer_full: Vec<bool>,
    /// The sliding layers' window (`sliding_window`), when the config sets one.
    pub sliding_window: Option<i64>,
    pub submodels: Vec<SubmodelContract>,
}

struct Fields<'a> {
    path: &'a Path,
    obj: &'a Value,
    /// Where `obj` sits, for messages (`text_config.`, `vision_config.`, or empty).
    prefix: &'static str,
}

impl Fields<'_> {
    fn err(&self, field: &str, expected: &str) -> ContractError {
        ContractError::Field { path: self.path.into(), field: format!("{}{field}", self.prefix), expected: expected.into() }
    }
    fn int(&self, field: &str, default: Option<i64>) -> Result<i64, ContractError> {
        match self.obj.get(field) {
            None | Some(Value::Null) => default.ok_or_else(|| self.err(field, "a required integer is missing")),
            Some(v) => v.as_i64().ok_or_else(|| self.err(field, &format!("expected an integer, found {v}"))),
        }
    }
    /// A size: an integer > 0 (0 would declare empty tensors, e.g. an empty vocabulary).
    fn positive(&self, field: &str, default: Option<i64>) -> Result<i64, ContractError> {
        let v = self.int(field, default)?;
        if v <= 0 {
            return Err(self.err(field, &format!("a positive integer, found {v}")));
        }
        Ok(v)
    }
    /// A width where 0 means "none": an integer ≥ 0.
    fn non_negative(&self, field: &str, v: i64) -> Result<i64, ContractError> {
        if v < 0 {
            return Err(self.err(field, &format!("an integer ≥ 0, found {v}")));
        }
        Ok(v)
    }
    fn opt_int(&self, field: &str) -> Result<Option<i64>, ContractError> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| self.err(field, &format!("expected an integer, found {v}"))),
        }
    }
    fn bool(&self, field: &str, default: bool) -> Result<bool, ContractError> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(field, &format!("expected true/false, found {v}"))),
        }
    }
}

impl ExportContract {
    /// Derives the contract from a checkpoint's `config.json`.
    pub fn from_config_file(path: &Path) -> Result<Self, ContractError> {
        let text = std::fs::read_to_string(path).map_err(|source| ContractError::Read { path: path.into(), source })?;
        Self::from_config_str(&text, path)
    }

    /// Derives the contract from `config.json` text already read; `path` names it in errors.
    pub fn from_config_str(text: &str, path: &Path) -> Result<Self, ContractError> {
        let root: Value = serde_json::from_str(text).map_err(|source| ContractError::Json { path: path.into(), source })?;
        Self::from_config(path, &root)
    }

    fn from_config(path: &Path, root: &Value) -> Result<Self, ContractError> {
        let top = Fields { path, obj: root, prefix: "" };
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or_default().to_string();
        let gemma4 = matches!(model_type.as_str(), "gemma4" | "gemma4_text");
        let (text, multimodal, has_vision) = match model_type.as_str() {
            "gemma4_unified" | "gemma4" => {
                let text = root.get("text_config").ok_or_else(|| top.err("text_config", "required for a multimodal model"))?;
                if !text.is_object() {
                    return Err(top.err("text_config", &format!("an object, found {text}")));
                }
                let has_vision = match root.get("vision_config") {
                    None | Some(Value::Null) => false,
                    Some(Value::Object(_)) => true,
                    Some(other) => return Err(top.err("vision_config", &format!("an object or null, found {other}"))),
                };
                (text, true, has_vision)
            }
            "gemma4_unified_text" | "gemma4_text" => (root, false, false),
            other => return Err(top.err("model_type", &format!("a Gemma 4 model type, found {other:?}"))),
        };
        let t = Fields { path, obj: text, prefix: if multimodal { "text_config." } else { "" } };
        let hidden = t.positive("hidden_size", Some(2304))?;
        let vocab = t.positive("vocab_size", Some(262_144))?;
        let n_layers = t.int("num_hidden_layers", Some(30))?;
        let kv_heads = t.positive("num_key_value_heads", Some(4))?;
        let head_dim = t.positive("head_dim", Some(256))?;
        // 0: full layers use head_dim.
        let global_head_dim = t.non_negative("global_head_dim", t.opt_int("global_head_dim")?.unwrap_or(512))?;
        let k_eq_v = t.bool("attention_k_eq_v", false)?;
        // HF reads num_global_key_value_heads only with k_eq_v, and fails when it is null then.
        let global_kv_heads = match (k_eq_v, t.opt_int("num_global_key_value_heads")?) {
            (true, Some(n)) if n > 0 => n,
            (true, Some(n)) => return Err(t.err("num_global_key_value_heads", &format!("a positive integer, found {n}"))),
            (true, None) => return Err(t.err("num_global_key_value_heads", "an integer when attention_k_eq_v is true")),
            (false, _) => kv_heads,
        };
        // gemma4 PLE width (on by default there; unified has none): per_layer_inputs carry L·P.
        let ple = if gemma4 { t.non_negative("hidden_size_per_layer_input", t.int("hidden_size_per_layer_input", Some(256))?)? } else { 0 };
        let n_shared = t.int("num_kv_shared_layers", Some(0))?;
        if !(1..=MAX_LAYERS).contains(&n_layers) {
            // Checked before per-layer lists are built from it (a huge count would abort the process).
            return Err(t.err("num_hidden_layers", &format!("1 to {MAX_LAYERS} layers, found {n_layers}")));
        }
        if n_shared < 0 || n_shared >= n_layers {
            return Err(t.err("num_kv_shared_layers", &format!("0 ≤ shared < num_hidden_layers ({n_layers}), found {n_shared}")));
        }
        let layer_types = layer_types(&t, n_layers as usize)?;
        let kv = layer_types
            .iter()
            .take((n_layers - n_shared) as usize)
            .enumerate()
            .map(|(layer, full)| KvGeometry {
                layer,
                full: *full,
                heads: if *full && k_eq_v { global_kv_heads } else { kv_heads },
                head_dim: if *full && global_head_dim > 0 { global_head_dim } else { head_dim },
            })
            .collect::<Vec<_>>();

        let any = ExpectedDim::Any;
        let fixed = ExpectedDim::Fixed;
        let t_in = |name: &str, elem, dims: Vec<ExpectedDim>| ExpectedTensor { name: name.into(), elem, dims, required: true, why: None };
        let mut past = Vec::new();
        let mut present = Vec::new();
        for (i, g) in kv.iter().enumerate() {
            for kind in ["key", "value"] {
                let dims = vec![any, fixed(g.heads), any, fixed(g.head_dim)];
                past.push(t_in(&format!("past_key_values.{i}.{kind}"), ElemType::Float, dims.clone()));
                present.push(t_in(&format!("present.{i}.{kind}"), ElemType::Float, dims));
            }
        }
        let logits = t_in(protocol::LOGITS, ElemType::Float, vec![any, any, fixed(vocab)]);
        let ids = || t_in(protocol::INPUT_IDS, ElemType::Index, vec![any, any]);
        let mask = || t_in(protocol::ATTENTION_MASK, ElemType::Index, vec![any, any]);
        let pos = || t_in(protocol::POSITION_IDS, ElemType::Index, vec![any, any]);
        let mut submodels = Vec::new();
        if multimodal {
            let embeds = || t_in(protocol::INPUTS_EMBEDS, ElemType::Float, vec![any, any, fixed(hidden)]);
            let features = || t_in(protocol::IMAGE_FEATURES, ElemType::Float, vec![any, fixed(hidden)]);
            // The decoder derives the image-block mask from input_ids, so it needs them exactly
            // when the config asks for bidirectional vision attention (unified's default is
            // "vision", gemma4's null).
            let bidirectional = text.get("use_bidirectional_attention").and_then(Value::as_str) == Some("vision")
                || (text.get("use_bidirectional_attention").is_none() && model_type == "gemma4_unified");
            let mut dec_ids = ids();
            dec_ids.required = bidirectional && has_vision;
            dec_ids.why = dec_ids.required.then_some(BIDIRECTIONAL_NEEDS_IDS);
            let mut dec_in = vec![embeds(), mask(), pos(), dec_ids];
            let mut emb_out = vec![embeds()];
            if ple > 0 {
                // The embedding model computes the per-layer inputs (it has the token ids); the
                // decoder takes them at prefill and every decode step.
                let width = n_layers.checked_mul(ple).ok_or_else(|| {
                    t.err(
                        "hidden_size_per_layer_input",
                        &format!("a width whose product with {n_layers} layers fits in 64 bits, found {ple}"),
                    )
                })?;
                let per_layer = || t_in(protocol::PER_LAYER_INPUTS, ElemType::Float, vec![any, any, fixed(width)]);
                dec_in.push(per_layer());
                emb_out.push(per_layer());
            }
            dec_in.extend(past);
            let mut dec_out = vec![logits];
            dec_out.extend(present);
            submodels.push(SubmodelContract { role: DECODER, inputs: dec_in, outputs: dec_out });
            let emb_in = if has_vision { vec![ids(), features()] } else { vec![ids()] };
            submodels.push(SubmodelContract { role: EMBEDDING, inputs: emb_in, outputs: emb_out });
            if has_vision {
                let v = Fields { path, obj: &root["vision_config"], prefix: "vision_config." };
                // unified: merged (k·p)² patches; gemma4: the tower's unmerged p² patches.
                let patch = if gemma4 {
                    v.positive("patch_size", Some(16))?
                } else {
                    let (p, k) = (v.positive("patch_size", Some(16))?, v.positive("pooling_kernel_size", Some(3))?);
                    p.checked_mul(k).ok_or_else(|| {
                        v.err(
                            "patch_size",
                            &format!("a merged patch (patch_size · pooling_kernel_size = {p} · {k}) whose pixel count fits in 64 bits"),
                        )
                    })?
                };
                let patch_dim = patch.checked_mul(patch).and_then(|p| p.checked_mul(3)).ok_or_else(|| {
                    let what = if gemma4 { "patch_size" } else { "patch_size · pooling_kernel_size" };
                    v.err("patch_size", &format!("a patch whose pixel count ({what} = {patch})² · 3 fits in 64 bits"))
                })?;
                submodels.push(SubmodelContract {
                    role: VISION_ENCODER,
                    inputs: vec![
                        t_in(protocol::PIXEL_VALUES, ElemType::Float, vec![any, any, fixed(patch_dim)]),
                        t_in(protocol::PIXEL_POSITION_IDS, ElemType::Int64, vec![any, any, fixed(2)]),
                    ],
                    outputs: vec![features()],
                });
            }
        } else {
            let mut inputs = vec![ids(), mask(), pos()];
            inputs.extend(past);
            let mut outputs = vec![logits];
            outputs.extend(present);
            submodels.push(SubmodelContract { role: TEXT_MODEL, inputs, outputs });
        }
        let layer_head_dims =
            layer_types.iter().map(|full| if *full && global_head_dim > 0 { global_head_dim } else { head_dim }).collect();
        let sliding_window = t.int("sliding_window", Some(0)).ok().filter(|w| *w > 0);
        Ok(ExportContract {
            model_type,
            hidden_size: hidden,
            vocab_size: vocab,
            per_layer_input_dim: ple,
            kv,
            layer_head_dims,
            layer_full: layer_types,
            sliding_window,
            submodels,
        })
    }
}

/// Why a bidirectional-vision decoder must take `input_ids`.
pub const BIDIRECTIONAL_NEEDS_IDS: &str = "the config asks for bidirectional attention over image blocks \
    (`use_bidirectional_attention: vision`), and the decoder derives those blocks from input_ids; a decoder \
    with no input locating the image tokens can only attend causally over them";

impl ExportContract {
    /// Whether the config is a composite (multimodal) model's: its contract has a decoder beside
    /// an embedding model.
    pub fn is_composite(&self) -> bool {
        self.submodels.iter().any(|s| s.role == DECODER)
    }

    /// The contract of an export of a composite model's text component alone (what ORT GenAI's
    /// model builder writes for `Gemma4UnifiedForConditionalGeneration` and
    /// `Gemma4ForConditionalGeneration`): one model that embeds `input_ids` itself (per-layer
    /// inputs included) and otherwise takes and returns what the decoder does. No image block
    /// can reach it, so `input_ids` is required for embedding, not for bidirectional attention.
    pub fn text_component(mut self) -> Self {
        let Some(decoder) = self.submodels.iter().find(|s| s.role == DECODER).cloned() else { return self };
        let mut inputs: Vec<ExpectedTensor> =
            decoder.inputs.into_iter().filter(|e| e.name != protocol::INPUTS_EMBEDS && e.name != protocol::PER_LAYER_INPUTS).collect();
        for e in inputs.iter_mut().filter(|e| e.name == protocol::INPUT_IDS) {
            e.required = true;
            e.why = None;
        }
        self.submodels = vec![SubmodelContract { role: TEXT_MODEL, inputs, outputs: decoder.outputs }];
        self
    }

    /// The contract for an export that declares `protocol`: the decoder's cache inputs and
    /// outputs in its KV layout, `position_ids` optional where GroupQueryAttention derives
    /// positions from the mask, per-layer inputs where the export computes them. What stays the
    /// same is what the config fixes: names of the protocol's own tensors, widths, KV heads ×
    /// head_dim of every non-shared layer, the vocabulary.
    pub fn for_protocol(mut self, protocol: &ExportProtocol) -> Self {
        let any = ExpectedDim::Any;
        let fixed = ExpectedDim::Fixed;
        let t = |name: String, elem, dims| ExpectedTensor { name, elem, dims, required: true, why: None };
        let kv = self.kv.clone();
        for sub in &mut self.submodels {
            if sub.role != DECODER && sub.role != TEXT_MODEL {
                if protocol.ple == PleSource::Decoder && sub.role == EMBEDDING {
                    sub.outputs.retain(|e| e.name != protocol::PER_LAYER_INPUTS);
                }
                continue;
            }
            if protocol.attention == AttentionOp::GroupQuery {
                for e in sub.inputs.iter_mut().filter(|e| e.name == protocol::POSITION_IDS) {
                    e.required = false;
                }
            }
            if protocol.ple == PleSource::Decoder {
                sub.inputs.retain(|e| e.name != protocol::PER_LAYER_INPUTS);
                if let Some(e) = sub.inputs.iter_mut().find(|e| e.name == protocol::INPUT_IDS) {
                    e.required = true;
                }
            }
            // Static: every pair in a buffer; hybrid (mobius's gemma4_text static build): the
            // full-attention pairs in buffers, the sliding ones dynamic beside the mask.
            let buffered: Vec<usize> = match protocol.kv {
                KvLayout::Static { .. } => (0..kv.len()).collect(),
                KvLayout::Hybrid { .. } => kv.iter().enumerate().filter(|(_, g)| g.full).map(|(i, _)| i).collect(),
                _ => continue,
            };
            let past_of = |i: usize| format!("{PAST}{i}.");
            let present_of = |i: usize| format!("{PRESENT}{i}.");
            sub.inputs.retain(|e| !buffered.iter().any(|&i| e.name.starts_with(&past_of(i))));
            sub.outputs.retain(|e| !buffered.iter().any(|&i| e.name.starts_with(&present_of(i))));
            if let KvLayout::Static { .. } = protocol.kv {
                for e in sub.inputs.iter_mut().filter(|e| e.name == protocol::ATTENTION_MASK) {
                    e.required = false;
                }
            }
            sub.inputs.push(t(WRITE_INDICES.into(), ElemType::Index, vec![any]));
            sub.inputs.push(t(NONPAD_KV_SEQLEN.into(), ElemType::Index, vec![any]));
            for &i in &buffered {
                let g = &kv[i];
                let dims = vec![any, any, fixed(g.heads * g.head_dim)];
                for (cache, updated) in [(KEY_CACHE, UPDATED_KEY_CACHE), (VALUE_CACHE, UPDATED_VALUE_CACHE)] {
                    sub.inputs.push(t(format!("{cache}{i}"), ElemType::Float, dims.clone()));
                    sub.outputs.push(t(format!("{updated}{i}"), ElemType::Float, dims.clone()));
                }
            }
        }
        self
    }
}

/// `true` for a full-attention layer; HF's default is five sliding layers then one full, and the
/// last layer is forced to full attention.
fn layer_types(t: &Fields<'_>, n: usize) -> Result<Vec<bool>, ContractError> {
    let mut types = match t.obj.get("layer_types") {
        None | Some(Value::Null) => (0..n).map(|i| (i + 1) % 6 == 0).collect::<Vec<_>>(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v.as_str() {
                Some("full_attention") => Ok(true),
                Some("sliding_attention") => Ok(false),
                _ => Err(t.err("layer_types", &format!("each entry full_attention or sliding_attention, found {v}"))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(t.err("layer_types", &format!("a list, found {v}"))),
    };
    if types.len() != n {
        return Err(t.err("layer_types", &format!("{n} entries (num_hidden_layers), found {}", types.len())));
    }
    if let Some(last) = types.last_mut() {
        *last = true;
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: KV pairs = layers − shared; full layers with k_eq_v take the global KV heads and
    /// global head_dim; the last layer is forced to full attention as HF does.
    #[test]
    fn kv_geometry_follows_layer_types_sharing_and_k_eq_v() {
        let cfg = serde_json::json!({
            "model_type": "gemma4_unified_text", "hidden_size": 64, "vocab_size": 512,
            "num_hidden_layers": 6, "num_key_value_heads": 2, "head_dim": 16,
            "global_head_dim": 32, "num_global_key_value_heads": 1, "attention_k_eq_v": true,
            "num_kv_shared_layers": 2,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                            "full_attention", "sliding_attention", "sliding_attention"]
        });
        let c = ExportContract::from_config(Path::new("config.json"), &cfg).expect("contract");
        let geo: Vec<_> = c.kv.iter().map(|g| (g.heads, g.head_dim)).collect();
        assert_eq!(geo, vec![(2, 16), (1, 32), (2, 16), (1, 32)]);
        assert_eq!(c.submodels.len(), 1);
        assert_eq!(c.submodels[0].inputs.len(), 3 + 8);
    }

    /// Guards: gemma4 multimodal PLE (on by default) routes per_layer_inputs [*, *, L·P] from the
    /// embedding model to the decoder; the vision encoder takes unmerged 3·p² patches; without
    /// use_bidirectional_attention (gemma4's default is null) the decoder need not take input_ids.
    #[test]
    fn gemma4_ple_and_tower_contract() {
        let cfg = serde_json::json!({
            "model_type": "gemma4",
            "text_config": {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 2, "num_key_value_heads": 1,
                            "head_dim": 16, "global_head_dim": 32, "hidden_size_per_layer_input": 16},
            "vision_config": {"patch_size": 2, "pooling_kernel_size": 3}
        });
        let c = ExportContract::from_config(Path::new("config.json"), &cfg).expect("contract");
        let sub = |role| c.submodels.iter().find(|s| s.role == role).expect("sub-model");
        let ple = |ts: &[ExpectedTensor]| ts.iter().find(|t| t.name == "per_layer_inputs").map(|t| t.dims.clone());
        assert_eq!(ple(&sub(DECODER).inputs), Some(vec![ExpectedDim::Any, ExpectedDim::Any, ExpectedDim::Fixed(32)]));
        assert_eq!(ple(&sub(EMBEDDING).outputs), Some(vec![ExpectedDim::Any, ExpectedDim::Any, ExpectedDim::Fixed(32)]));
        assert!(!sub(DECODER).inputs.iter().any(|t| t.name == "input_ids" && t.required));
        assert_eq!(sub(VISION_ENCODER).inputs[0].dims[2], ExpectedDim::Fixed(12));
        // The same text config without PLE, and unified (never PLE) with the same key.
        let mut no_ple = cfg.clone();
        no_ple["text_config"]["hidden_size_per_layer_input"] = 0.into();
        let c = ExportContract::from_config(Path::new("config.json"), &no_ple).expect("contract");
        assert!(c.submodels.iter().all(|s| s.inputs.iter().chain(&s.outputs).all(|t| t.name != "per_layer_inputs")));
        let mut unified = cfg.clone();
        unified["model_type"] = "gemma4_unified".into();
        let c = ExportContract::from_config(Path::new("config.json"), &unified).expect("contract");
        assert_eq!(c.per_layer_input_dim, 0);
    }

    /// Guards: k_eq_v with null num_global_key_value_heads is an error (HF cannot run it), not a
    /// silent fallback to num_key_value_heads.
    #[test]
    fn k_eq_v_needs_global_kv_heads() {
        let cfg = serde_json::json!({"model_type": "gemma4_text", "attention_k_eq_v": true, "num_hidden_layers": 2});
        let e = ExportContract::from_config(Path::new("config.json"), &cfg).expect_err("must fail").to_string();
        assert!(e.contains("num_global_key_value_heads"), "{e}");
    }

    /// Guards: a malformed field is named with the file.
    #[test]
    fn bad_field_is_named() {
        let cfg = serde_json::json!({"model_type": "gemma4_unified_text", "hidden_size": "big"});
        let e = ExportContract::from_config(Path::new("x/config.json"), &cfg).expect_err("must fail").to_string();
        assert!(e.contains("x/config.json") && e.contains("hidden_size"), "{e}");
    }
}
