//! Which model parameter a quantized weight stands for, from the names quantizers write and the
//! module path in the quantized node's name, and the accuracy level ONNX Runtime computes a
//! DequantizeLinear weight at.

/// The reference parameter a quantized initializer (or its float original's name) stands for:
/// quantizer suffixes and mobius's `_t` dropped, then the part from `layers.` on, or the name
/// below its `model.` / `decoder.` prefixes (`lm_head.weight`, `embed_tokens.weight`).
pub fn key_of(initializer: &str) -> String {
    // Quantizers' suffixes, in any order and combination: ORT's default path `…weight_t_Q4`, its
    // RTN path `…weight_t_Q4G32`, its QDQ path `…weight_t_DQ_Q4`, others' `_quantized`, `_q4`.
    let mut s = initializer;
    loop {
        let before = s;
        s = strip_bits_suffix(s);
        for suffix in ["_quantized", "_q4", "_q8", "_DQ", "_t"] {
            s = s.strip_suffix(suffix).unwrap_or(s);
        }
        if s == before {
            break;
        }
    }
    canonical_key(s)
}

/// The naming dialect a quantized initializer is written in (what the report says was
/// recognised): ONNX Runtime's RTN path, its QDQ path, the `_Q<bits>` / `_scales` names its default
/// path, Olive's RTN pass and ORT GenAI's builder share, or none known (then the node's module
/// path names the parameter).
pub fn dialect_of(initializer: &str) -> &'static str {
    let bits_block = |s: &str| s.rfind("_Q").is_some_and(|i| s[i + 2..].contains('G'));
    if initializer.contains("_DQ_") {
        "ONNX Runtime QDQ (`…_DQ_Q4` into MatMul)"
    } else if bits_block(initializer) {
        "ONNX Runtime RTN (`…_Q4G32`, `…_scale`)"
    } else if strip_bits_suffix(initializer) != initializer {
        "`…_Q4`, `…_scales` (ONNX Runtime's default path, Olive, the ORT GenAI builder)"
    } else {
        "no known quantizer's names (the node's module path names the parameter)"
    }
}

/// Why a quantized tensor that stands for no parameter is not one, where its name says so: a RoPE
/// cos/sin cache is computed from the config (mobius stores it as an initializer the rotary
/// embedding gathers from by position), so a quantizer that takes every Gather on an initializer
/// for a token table rounds every position's rotation instead (Olive's RTN pass does, by default).
pub fn not_a_parameter(key: &str) -> Option<&'static str> {
    let rope = key.contains("rotary_emb") || key.ends_with("cos_cache") || key.ends_with("sin_cache");
    rope.then_some(
        "a RoPE cos/sin cache, computed from the config rather than a checkpoint parameter: the quantizer took its Gather for a token table and rounds every position's rotation (exclude the rotary_emb Gathers from quantization)",
    )
}

/// `…_Q4`, `…_Q8`, `…_Q4G32` (bits, then an optional block size) removed.
fn strip_bits_suffix(s: &str) -> &str {
    let Some(i) = s.rfind("_Q") else { return s };
    let tail = &s[i + 2..];
    let (bits, block) = tail.split_once('G').unwrap_or((tail, "0"));
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    if digits(bits) && digits(block) {
        &s[..i]
    } else {
        s
    }
}

/// The parameter a quantized node's name says it replaced, from its module path (ORT's quantizers
/// keep the replaced MatMul's name and add a suffix: `model/layers.0/self_attn/q_proj/MatMul_node_72_Q4`;
/// ORT GenAI's builder names `/model/layers.0/attn/qkv_proj/MatMulNBits`); `None` for a name
/// without a module path (`node_MatMul_12`).
pub fn key_of_node(node: &str) -> Option<String> {
    let parts: Vec<&str> = node.trim_start_matches('/').split('/').collect();
    let (_, modules) = parts.split_last()?;
    if modules.is_empty() {
        return None;
    }
    Some(canonical_key(&format!("{}.weight", modules.join("."))))
}

/// A parameter name as the reference keys it: the builder's `.MatMul.weight` and `attn` spelled as
/// HF's, and the wrappers' prefixes (`model.`, `language_model.`, …) removed.
fn canonical_key(s: &str) -> String {
    // ORT GenAI's builder: `….attn.o_proj.MatMul.weight` (and `….attn.qkv_proj.weight` from its
    // node path).
    let builder = s
        .strip_suffix(".MatMul.weight")
        .map(|p| format!("{}.weight", p.replacen(".attn.", ".self_attn.", 1)))
        .or_else(|| s.contains(".attn.").then(|| s.replacen(".attn.", ".self_attn.", 1)));
    let s = builder.as_deref().unwrap_or(s);
    if let Some(i) = s.find("layers.") {
        if i == 0 || s[..i].ends_with('.') {
            return s[i..].to_string();
        }
    }
    let mut s = s;
    while let Some(rest) = ["decoder.", "embedding.", "model.", "language_model.", "text_model."].iter().find_map(|p| s.strip_prefix(p)) {
        s = rest;
    }
    s.to_string()
}

/// The `accuracy_level` a `DequantizeLinear → MatMul` weight computes at on the CPU EP: ONNX
/// Runtime's level-2 optimizer fuses an int4 weight dequantized in blocks along K (axis 0, a
/// power-of-two block ≥ 16) with its MatMul into MatMulNBits (`DQMatMulToMatMulNBits`), at the
/// session's `session.qdq_matmulnbits_accuracy_level`, 4 unless set: a QDQ int4 build's
/// activations are quantized to int8 like a MatMulNBits build's at level 4 (measured on the
/// committed `gemma4-text-ple@qdq`: default session = level 4 bit for bit; level 0 differs by 0.27
/// on the logits). Any other DequantizeLinear stays a float matmul (0).
pub(super) fn dq_fused_accuracy_level(bits: u32, block: i64, axis: i64) -> i64 {
    if bits == 4 && axis == 0 && block >= 16 && block & (block - 1) == 0 {
        4
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the naming rule against the names quantizers and mobius write.
    #[test]
    fn keys_of_quantized_initializers() {
        assert_eq!(key_of("model.layers.0.self_attn.q_proj.weight_t_Q4"), "layers.0.self_attn.q_proj.weight");
        assert_eq!(key_of("decoder.model.layers.3.mlp.down_proj.weight_t_Q8"), "layers.3.mlp.down_proj.weight");
        assert_eq!(key_of("lm_head.weight_t_Q4"), "lm_head.weight");
        assert_eq!(key_of("model.embed_tokens.weight_Q4"), "embed_tokens.weight");
        assert_eq!(key_of("model.per_layer_model_projection.weight_t_Q4"), "per_layer_model_projection.weight");
        // ORT 1.31.1's RTN path and QDQ path.
        assert_eq!(key_of("model.per_layer_model_projection.weight_t_Q4G32"), "per_layer_model_projection.weight");
        assert_eq!(key_of("model.layers.0.self_attn.q_proj.weight_t_DQ_Q4"), "layers.0.self_attn.q_proj.weight");
        assert_eq!(key_of("model.layers.0.self_attn.q_proj.weight_t_Q"), "layers.0.self_attn.q_proj.weight_t_Q");
        // The node's module path, as ORT's quantizers and ORT GenAI's builder name nodes.
        assert_eq!(key_of_node("model/layers.0/self_attn/q_proj/MatMul_node_72_Q4").as_deref(), Some("layers.0.self_attn.q_proj.weight"));
        assert_eq!(key_of_node("/model/layers.2/attn/qkv_proj/MatMulNBits").as_deref(), Some("layers.2.self_attn.qkv_proj.weight"));
        assert_eq!(key_of_node("lm_head/MatMul_node_522_Q4").as_deref(), Some("lm_head.weight"));
        assert_eq!(key_of_node("node_MatMul_12"), None);
    }

    /// Guards what the report says was recognised: each quantizer's names, an unknown name said
    /// so; and which tensors are named as no parameter (a RoPE cache), and which are not.
    #[test]
    fn dialects_and_non_parameters_are_named() {
        assert!(dialect_of("model.layers.0.mlp.up_proj.weight_t_Q4G32").starts_with("ONNX Runtime RTN"));
        assert!(dialect_of("model.layers.0.mlp.up_proj.weight_t_DQ_Q4").starts_with("ONNX Runtime QDQ"));
        assert!(dialect_of("model.layers.1.attn.qkv_proj.MatMul.weight_Q4").contains("ORT GenAI builder"));
        assert!(dialect_of("w_quantized_custom").starts_with("no known quantizer"));
        assert!(not_a_parameter("rotary_emb_local.cos_cache").is_some_and(|w| w.contains("RoPE")));
        assert_eq!(not_a_parameter("layers.0.mlp.up_proj.weight"), None);
    }
}
