//! Each decoder layer's output hidden state, exposed from an export without changing its math,
//! so an L3 divergence can be traced to the first layer that differs.
//!
//! A copy of the decoder graph gets the residual stream after every layer as extra graph outputs.
//! The tensors are found by structure: the hidden state entering layer `i + 1`'s
//! `input_layernorm` (the final `norm` for the last layer) must be produced inside layer `i`
//! (node names `…/layers.{i}/…`, as torch-dynamo exporters such as mobius write them). Where that
//! does not hold the boundaries are reported as not identifiable rather than guessed.
//!
//! The copy is edited at the protobuf wire level: the graph field of the `ModelProto` gets extra
//! `output` entries appended (repeated fields may come in any order) and everything else is kept
//! byte for byte, tensor payloads and fields this crate does not model included. ORT loads it from
//! memory with external data (`model.onnx.data`) resolved in the original's folder.
//!
//! The instrumented graph only serves the per-layer comparison: exposing an intermediate may
//! stop ORT from fusing across it, so the gated logits always come from the original graph.

use std::path::{Path, PathBuf};

use prost::Message;

use super::proto::{GraphProto, ModelProto, TensorTypeProto, TypeProto, ValueInfoProto};
use super::protocol;
use super::wire;

/// Why the layer outputs of an export are not available.
#[derive(Debug, thiserror::Error)]
pub enum LayersError {
    #[error("reading {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not a valid ONNX ModelProto: {source}", path.display())]
    Decode { path: PathBuf, source: prost::DecodeError },
    #[error("{} is not a valid ONNX ModelProto: {source}", path.display())]
    Wire { path: PathBuf, source: WireError },
    /// The graph's structure does not show where layers begin and end.
    #[error("{}: decoder layer boundaries not identifiable: {reason}", path.display())]
    Unidentifiable { path: PathBuf, reason: BoundaryError },
}

/// Why a graph's layer boundaries cannot be identified (see the module doc for the rule).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundaryError {
    #[error("the model has no graph")]
    NoGraph,
    #[error("no node is named after a decoder layer (`…/layers.<i>/…`), and no initializer `…layers.<i>.layer_scalar` ends a layer")]
    NoLayerNames,
    /// The layer-scalar rule found some layers' ends and not others.
    #[error("the graph's `…layers.<i>.layer_scalar` products do not end layers 0..{count}: {reason}")]
    LayerScalars { count: usize, reason: String },
    #[error("no node of {what} (the end of layer {layer})")]
    NoEnd { what: String, layer: usize },
    #[error("{node} has no input")]
    NoInput { node: String },
    #[error("`{tensor}` (into {what}) is not produced by a node")]
    NotProduced { tensor: String, what: String },
    #[error("`{tensor}` (into {what}) is produced by `{made_by}`, not by a node of layers.{layer}")]
    OutsideLayer { tensor: String, what: String, made_by: String, layer: usize },
    /// The residual add is fused into the next norm (a SkipLayerNormalization: ORT GenAI's
    /// builder) and the node's sum output (index 3) has no name, so no graph value holds it.
    #[error("the stream leaving layer {layer} is the sum inside the fused `{node}` ({what}), whose sum output the graph does not name")]
    UnnamedSum { node: String, what: String, layer: usize },
}

pub use super::wire::WireError;

/// One decoder layer's output tensor in the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerBoundary {
    pub layer: usize,
    /// The graph value holding the layer's output hidden state.
    pub tensor: String,
}

/// The `i` of the first `layers.<i>/` path segment of a node name (`decoder/model/layers.3/mlp/…`);
/// `None` for the final norm ORT GenAI's builder names as one layer past the last
/// (`/model/layers.{L}/final_norm_layernorm/…`).
pub(crate) fn layer_index(name: &str) -> Option<usize> {
    segment_layer(name).filter(|(_, rest)| !rest.starts_with(BUILDER_FINAL_NORM)).map(|(i, _)| i)
}

/// ORT GenAI's builder's final norm, a path segment below `layers.{L}/`.
const BUILDER_FINAL_NORM: &str = "final_norm_layernorm/";

/// `(i, rest after "layers.<i>/")` of the first `layers.<i>/` segment.
pub(crate) fn segment_layer(name: &str) -> Option<(usize, &str)> {
    let mut from = 0;
    while let Some(at) = name[from..].find("layers.") {
        let start = from + at;
        let rest = &name[start + "layers.".len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let at_segment_start = start == 0 || name.as_bytes()[start - 1] == b'/';
        if at_segment_start && digits > 0 && rest.as_bytes().get(digits) == Some(&b'/') {
            return rest[..digits].parse().ok().map(|i| (i, &rest[digits + 1..]));
        }
        from = start + 1;
    }
    None
}

/// The layer whose `input_layernorm` this node belongs to.
pub(crate) fn input_norm_layer(name: &str) -> Option<usize> {
    segment_layer(name).filter(|(_, rest)| rest.starts_with("input_layernorm/")).map(|(i, _)| i)
}

/// The decoder's final norm (`model/norm/…`, outside every layer; ORT GenAI's builder:
/// `/model/layers.{L}/final_norm_layernorm/…`).
fn is_final_norm(name: &str) -> bool {
    let mobius = (name.starts_with("model/norm/") || name.contains("/model/norm/")) && layer_index(name).is_none();
    mobius || segment_layer(name).is_some_and(|(_, rest)| rest.starts_with(BUILDER_FINAL_NORM))
}

/// A norm with the residual add fused in (`input + skip`, its sum the output at index 3).
pub(crate) fn is_skip_norm(op_type: &str) -> bool {
    matches!(op_type, "SkipSimplifiedLayerNormalization" | "SkipLayerNormalization")
}

/// Finds every decoder layer's output tensor (see the module doc for the rule).
pub fn boundaries(graph: &GraphProto) -> Result<Vec<LayerBoundary>, BoundaryError> {
    let Some(n_layers) = graph.node.iter().filter_map(|n| layer_index(&n.name)).max().map(|m| m + 1) else {
        return boundaries_from_layer_scalars(graph);
    };
    // Producer of each value, by name.
    let producer: std::collections::HashMap<&str, &str> =
        graph.node.iter().flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n.name.as_str()))).collect();
    let mut out = Vec::with_capacity(n_layers);
    for layer in 0..n_layers {
        let (consumer, what) = if layer + 1 < n_layers {
            // The norm's first node (a norm may be decomposed into several).
            let first = graph.node.iter().find(|n| input_norm_layer(&n.name) == Some(layer + 1));
            (first, format!("layers.{}/input_layernorm", layer + 1))
        } else {
            (graph.node.iter().find(|n| is_final_norm(&n.name)), "the final model/norm".to_string())
        };
        let consumer = consumer.ok_or_else(|| BoundaryError::NoEnd { what: what.clone(), layer })?;
        let first =
            consumer.input.first().filter(|t| !t.is_empty()).ok_or_else(|| BoundaryError::NoInput { node: consumer.name.clone() })?;
        // A fused residual add: the stream is the norm's sum of its two inputs (one of which the
        // layer made), not its first input (the layer's last delta).
        let skip = is_skip_norm(&consumer.op_type);
        let ends_layer: Vec<&String> = if skip { consumer.input.iter().take(2).collect() } else { vec![first] };
        let made = |t: &String| producer.get(t.as_str()).copied();
        if !ends_layer.iter().any(|t| made(t).is_some_and(|m| layer_index(m) == Some(layer))) {
            let made_by = made(first).ok_or_else(|| BoundaryError::NotProduced { tensor: first.clone(), what: what.clone() })?;
            return Err(BoundaryError::OutsideLayer { tensor: first.clone(), what, made_by: made_by.to_string(), layer });
        }
        let tensor = if skip {
            consumer.output.get(3).filter(|t| !t.is_empty()).ok_or_else(|| BoundaryError::UnnamedSum {
                node: consumer.name.clone(),
                what: what.clone(),
                layer,
            })?
        } else {
            first
        };
        out.push(LayerBoundary { layer, tensor: tensor.clone() });
    }
    Ok(out)
}

/// The `i` of an initializer `…layers.<i>.layer_scalar` (torch.onnx's dynamo exports keep the
/// module path in initializer names, `m.model.layers.1.layer_scalar`, not in node names).
fn layer_scalar_index(name: &str) -> Option<usize> {
    let rest = name.strip_suffix(".layer_scalar")?;
    let (head, index) = rest.rsplit_once('.')?;
    (head == "layers" || head.ends_with(".layers")).then(|| index.parse().ok()).flatten()
}

/// Boundaries of a graph whose node names carry no layer (torch.onnx's dynamo exports): a Gemma 4
/// decoder layer ends with `hidden_states *= self.layer_scalar` (transformers
/// `models/gemma4/modeling_gemma4.py:1461`, `gemma4_unified/modeling_gemma4_unified.py:543`), so
/// the product with initializer `…layers.<i>.layer_scalar` is layer `i`'s output. Every layer
/// 0..L must have exactly one such product.
fn boundaries_from_layer_scalars(graph: &GraphProto) -> Result<Vec<LayerBoundary>, BoundaryError> {
    let mut ends: std::collections::BTreeMap<usize, Vec<&String>> = std::collections::BTreeMap::new();
    let inits: std::collections::HashMap<&str, usize> =
        graph.initializer.iter().filter_map(|t| layer_scalar_index(&t.name).map(|i| (t.name.as_str(), i))).collect();
    for n in graph.node.iter().filter(|n| n.op_type == "Mul") {
        if let (Some(layer), Some(out)) = (n.input.iter().find_map(|i| inits.get(i.as_str()).copied()), n.output.first()) {
            ends.entry(layer).or_default().push(out);
        }
    }
    let count = ends.keys().max().map_or(0, |m| m + 1);
    if count == 0 {
        return Err(BoundaryError::NoLayerNames);
    }
    (0..count)
        .map(|layer| match ends.get(&layer).map(Vec::as_slice) {
            Some([tensor]) => Ok(LayerBoundary { layer, tensor: (*tensor).clone() }),
            Some(many) => {
                Err(BoundaryError::LayerScalars { count, reason: format!("layer {layer}'s scalar multiplies {} tensors", many.len()) })
            }
            None => Err(BoundaryError::LayerScalars { count, reason: format!("no product with layer {layer}'s scalar") }),
        })
        .collect()
}

/// The element type to declare for the residual stream: the graph's own `value_info` when it has
/// one, else the type of `inputs_embeds` (multimodal decoders), else of the token embedding
/// table (text-only models), else float32.
pub(crate) fn residual_elem_type(graph: &GraphProto, tensor: &str) -> i32 {
    let typed = |v: &ValueInfoProto| v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()).map(|t| t.elem_type).filter(|&t| t != 0);
    graph
        .value_info
        .iter()
        .find(|v| v.name == tensor)
        .and_then(typed)
        .or_else(|| graph.input.iter().find(|v| v.name == protocol::INPUTS_EMBEDS).and_then(typed))
        .or_else(|| graph.initializer.iter().find(|t| t.name.contains("embed_tokens.weight")).map(|t| t.data_type))
        .unwrap_or(1)
}

/// `model` with `outputs` (name, ONNX element type) appended to its graph's outputs, every other
/// byte kept.
pub fn with_extra_outputs(model: &[u8], outputs: &[(String, i32)]) -> Result<Vec<u8>, WireError> {
    const GRAPH_OUTPUT: u64 = 12;
    let (_, payload) = wire::graph_field(model)?;
    let mut graph = model[payload].to_vec();
    for (name, elem_type) in outputs {
        wire::put_len_field(&mut graph, GRAPH_OUTPUT, &value_info(name, *elem_type).encode_to_vec());
    }
    wire::with_graph(model, &graph)
}

/// A graph input or output `name` of element type `elem_type` (no shape stated).
pub(crate) fn value_info(name: &str, elem_type: i32) -> ValueInfoProto {
    ValueInfoProto { name: name.into(), r#type: Some(TypeProto { tensor_type: Some(TensorTypeProto { elem_type, shape: None }) }) }
}

/// An instrumented copy of a decoder graph, in memory: ORT loads it with its external data
/// resolved in the original's folder (a copy elsewhere would fail ORT's check that external data
/// stays inside the model's folder, and symlinks do not pass it either).
#[derive(Debug)]
pub struct InstrumentedDecoder {
    /// The edited `ModelProto`.
    pub bytes: Vec<u8>,
    /// Where the original's external data lives.
    pub external_data_dir: PathBuf,
    /// Layer output tensors, in layer order (also the names of the extra graph outputs).
    pub layers: Vec<LayerBoundary>,
    /// The stream entering layer 0 when the graph computes it (a text-only model's scaled token
    /// embeddings), also an extra output: compared with the reference's `inputs_embeds`, it
    /// names a divergence at the embedding rather than at layer 0.
    pub embeddings: Option<String>,
}

/// The tensor entering layer 0's input norm when a node outside every layer makes it (the
/// embedding of a model that embeds `input_ids` itself); `None` for a graph input
/// (`inputs_embeds` of a multimodal decoder) or a graph without layer names.
pub fn embeddings_into_layer0(graph: &GraphProto) -> Option<String> {
    let Some(norm) = graph.node.iter().find(|n| input_norm_layer(&n.name) == Some(0)) else {
        // Without layer names: the token embedding's scale product (`embed_tokens.embed_scale`,
        // HF's scaled word embedding) is the stream entering layer 0.
        let scale = graph.initializer.iter().find(|t| t.name.ends_with("embed_tokens.embed_scale"))?;
        let mul = graph.node.iter().find(|n| n.op_type == "Mul" && n.input.contains(&scale.name))?;
        return mul.output.first().cloned();
    };
    let input = before_rounding(graph, norm.input.first().filter(|t| !t.is_empty())?);
    let made_by = graph.node.iter().find(|n| n.output.contains(&input))?;
    (layer_index(&made_by.name).is_none() && !is_skip_norm(&norm.op_type)).then_some(input)
}

/// `tensor`, or, where it is the output of a QDQ pair (`X → QuantizeLinear → DequantizeLinear`,
/// a static build rounding the tensor for every reader), the pair's float input `X`: the rounding
/// belongs to the layers that read the tensor (the reference rounds it there), so the value that
/// enters them, and is compared with the reference's, is the float one before it.
pub(crate) fn before_rounding(graph: &GraphProto, tensor: &str) -> String {
    let made_by = |t: &str| graph.node.iter().find(|n| n.output.first().is_some_and(|o| o == t));
    pair_source(made_by, tensor).map_or_else(|| tensor.to_string(), str::to_string)
}

/// The float tensor `X` whose QDQ pair (`X → QuantizeLinear → DequantizeLinear → t`) makes `t`,
/// `made_by` finding a value's producer; `None` when no such pair makes `t`.
pub(crate) fn pair_source<'a>(made_by: impl Fn(&str) -> Option<&'a super::proto::NodeProto>, t: &str) -> Option<&'a str> {
    let source = |n: &'a super::proto::NodeProto| n.input.first().map(String::as_str).filter(|x| !x.is_empty());
    let dq = made_by(t).filter(|n| n.op_type == "DequantizeLinear")?;
    let q = made_by(source(dq)?).filter(|n| n.op_type == "QuantizeLinear")?;
    source(q)
}

/// The instrumented copy of the decoder graph at `model_path`.
pub fn instrument(model_path: &Path) -> Result<InstrumentedDecoder, LayersError> {
    let bytes = std::fs::read(model_path).map_err(|source| LayersError::Io { path: model_path.into(), source })?;
    let bytes = with_fused_sums_named(&bytes).map_err(|source| LayersError::Wire { path: model_path.into(), source })?;
    let decoded = ModelProto::decode(bytes.as_slice()).map_err(|source| LayersError::Decode { path: model_path.into(), source })?;
    let unidentifiable = |reason: BoundaryError| LayersError::Unidentifiable { path: model_path.into(), reason };
    let graph = decoded.graph.as_ref().ok_or_else(|| unidentifiable(BoundaryError::NoGraph))?;
    let layers = boundaries(graph).map_err(unidentifiable)?;
    let embeddings = embeddings_into_layer0(graph);
    let outputs: Vec<(String, i32)> = layers
        .iter()
        .map(|b| &b.tensor)
        .chain(embeddings.as_ref())
        .filter(|t| !graph.output.iter().any(|o| &o.name == *t))
        .map(|t| (t.clone(), residual_elem_type(graph, t)))
        .collect();
    let edited = with_extra_outputs(&bytes, &outputs).map_err(|source| LayersError::Wire { path: model_path.into(), source })?;
    let external_data_dir = model_path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    Ok(InstrumentedDecoder { bytes: edited, external_data_dir, layers, embeddings })
}

/// The name given in an instrumented copy to a fused norm's unnamed residual sum.
const SUM_SUFFIX: &str = "/onnx_parity_residual_sum";

/// `model` with every fused residual norm's sum output (index 3 of a
/// `SkipSimplifiedLayerNormalization`) named where the graph leaves it unnamed: ORT GenAI's
/// builder names it where the next layer reads it and not at the final norm, so the stream
/// leaving the last layer exists in the graph only once the copy names it. Naming an optional
/// output changes no value. The node's `output` entries are appended at the wire level (a
/// repeated field's entries keep their order wherever they sit), every other byte kept.
pub fn with_fused_sums_named(model: &[u8]) -> Result<Vec<u8>, WireError> {
    const GRAPH_NODE: u64 = 1;
    const NODE_OUTPUT: u64 = 2;
    let (_, payload) = wire::graph_field(model)?;
    let graph = &model[payload];
    let mut edited = Vec::with_capacity(graph.len() + 256);
    let mut changed = false;
    for f in wire::fields(graph)? {
        let node = (f.number == GRAPH_NODE && f.wire_type == wire::LEN)
            .then(|| crate::onnx::proto::NodeProto::decode(&graph[f.payload.clone()]).ok())
            .flatten()
            // A fourth entry left empty is not edited (re-encoding the node would drop what the
            // crate's NodeProto does not model); such a graph stays unidentifiable, saying why.
            .filter(|n| is_skip_norm(&n.op_type) && n.output.len() <= 3);
        let Some(node) = node else {
            edited.extend_from_slice(&graph[f.all.clone()]);
            continue;
        };
        let mut bytes = graph[f.payload.clone()].to_vec();
        // Entries up to index 3: empty names keep optional outputs absent.
        for _ in node.output.len()..3 {
            wire::put_len_field(&mut bytes, NODE_OUTPUT, b"");
        }
        wire::put_len_field(&mut bytes, NODE_OUTPUT, format!("{}{SUM_SUFFIX}", node.name).as_bytes());
        wire::put_len_field(&mut edited, GRAPH_NODE, &bytes);
        changed = true;
    }
    if !changed {
        return Ok(model.to_vec());
    }
    wire::with_graph(model, &edited)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::NodeProto;
    use crate::onnx::wire::put_varint;

    fn node(name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            name: name.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn two_layers() -> GraphProto {
        GraphProto {
            node: vec![
                node("model/layers.0/input_layernorm/RMS", &["embeds", "w0"], &["n0"]),
                node("model/layers.0/mlp/MatMul", &["n0", "m0"], &["h0a"]),
                node("model/layers.0/Mul", &["h0a", "s0"], &["h0"]),
                node("model/layers.1/input_layernorm/RMS", &["h0", "w1"], &["n1"]),
                node("model/layers.1/Mul", &["n1", "s1"], &["h1"]),
                node("model/norm/RMS", &["h1", "wn"], &["hn"]),
            ],
            ..Default::default()
        }
    }

    /// Guards the structural rule: each layer's output is the tensor entering the next layer's
    /// input_layernorm (the final norm for the last), produced inside that layer.
    #[test]
    fn boundaries_follow_the_residual_stream() {
        let b = boundaries(&two_layers()).unwrap();
        assert_eq!(b, vec![LayerBoundary { layer: 0, tensor: "h0".into() }, LayerBoundary { layer: 1, tensor: "h1".into() }]);
    }

    /// Guards the rule for graphs without layer names (torch.onnx dynamo): each layer ends at the
    /// product with its `layer_scalar` initializer, the embedding at its scale product; a missing
    /// layer is reported, never guessed.
    #[test]
    fn layer_scalars_end_layers_without_layer_names() {
        use crate::onnx::proto::TensorProto;
        let mul = |name: &str, inputs: &[&str], outputs: &[&str]| NodeProto { op_type: "Mul".into(), ..node(name, inputs, outputs) };
        let init = |name: &str| TensorProto { name: name.into(), ..Default::default() };
        let mut g = GraphProto {
            node: vec![
                node("node_Gather_1", &["m.model.embed_tokens.weight", "input_ids"], &["g"]),
                mul("node_Mul_2", &["g", "m.model.embed_tokens.embed_scale"], &["e"]),
                node("node_MatMul_3", &["e", "w"], &["a0"]),
                mul("node_Mul_4", &["a0", "m.model.layers.0.layer_scalar"], &["h0"]),
                node("node_MatMul_5", &["h0", "w"], &["a1"]),
                mul("node_Mul_6", &["a1", "m.model.layers.1.layer_scalar"], &["h1"]),
            ],
            initializer: vec![
                init("m.model.embed_tokens.embed_scale"),
                init("m.model.layers.0.layer_scalar"),
                init("m.model.layers.1.layer_scalar"),
            ],
            ..Default::default()
        };
        let b = boundaries(&g).unwrap();
        assert_eq!(b, vec![LayerBoundary { layer: 0, tensor: "h0".into() }, LayerBoundary { layer: 1, tensor: "h1".into() }]);
        assert_eq!(embeddings_into_layer0(&g).as_deref(), Some("e"));
        g.node.remove(3);
        assert!(boundaries(&g).unwrap_err().to_string().contains("no product with layer 0's scalar"));
        g.initializer.clear();
        assert_eq!(boundaries(&g).unwrap_err(), BoundaryError::NoLayerNames);
    }

    /// Guards: a graph whose boundary tensor comes from elsewhere, or without a final norm, or
    /// without layer names, is reported as unidentifiable (with the reason), never guessed.
    #[test]
    fn unidentifiable_boundaries_are_reported() {
        let mut g = two_layers();
        g.node[3].input[0] = "embeds".into();
        assert!(boundaries(&g).unwrap_err().to_string().contains("not produced by a node"));
        let mut g = two_layers();
        g.node[3].input[0] = "n1".into();
        assert!(boundaries(&g).unwrap_err().to_string().contains("not by a node of layers.0"));
        let mut g = two_layers();
        g.node.pop();
        assert!(boundaries(&g).unwrap_err().to_string().contains("final model/norm"));
        let g = GraphProto { node: vec![node("MatMul_1", &["a"], &["b"])], ..Default::default() };
        assert!(boundaries(&g).unwrap_err().to_string().contains("no node is named after a decoder layer"));
    }

    /// ORT GenAI's builder's naming: residual adds fused into SkipSimplifiedLayerNormalization
    /// (the next input norm), `layer_scalar` as two Muls, the final norm named
    /// `/model/layers.{L}/final_norm_layernorm/` (one past the last layer).
    fn builder_layers(final_sum: &str) -> GraphProto {
        let skip = |name: &str, inputs: &[&str], outputs: &[&str]| NodeProto {
            op_type: "SkipSimplifiedLayerNormalization".into(),
            ..node(name, inputs, outputs)
        };
        GraphProto {
            node: vec![
                node("/model/layers.0/input_layernorm/LayerNorm", &["embeds", "w0"], &["n0"]),
                node("/model/layers.0/mlp/down_proj/MatMul", &["n0", "m0"], &["d0"]),
                node("/model/layers.0/layer_scalar/Mul_root", &["d0", "s0"], &["r0"]),
                node("/model/layers.0/layer_scalar/Mul_skip", &["embeds", "s0"], &["k0"]),
                skip("/model/layers.1/input_layernorm/SkipLayerNorm", &["r0", "k0", "w1"], &["n1", "", "", "sum0"]),
                node("/model/layers.1/mlp/down_proj/MatMul", &["n1", "m1"], &["d1"]),
                node("/model/layers.1/layer_scalar/Mul_root", &["d1", "s1"], &["r1"]),
                node("/model/layers.1/layer_scalar/Mul_skip", &["sum0", "s1"], &["k1"]),
                skip("/model/layers.2/final_norm_layernorm/SkipLayerNorm", &["r1", "k1", "wn"], &["hn", "", "", final_sum]),
            ],
            ..Default::default()
        }
    }

    /// Guards the builder's boundaries: the final norm is not a third layer, a fused input norm's
    /// sum output (not its first input, the layer's last delta) is the stream leaving the layer,
    /// and a fused norm that does not name its sum is unidentifiable, never its first input.
    #[test]
    fn fused_residual_adds_give_the_sum_output() {
        let b = boundaries(&builder_layers("sum1")).unwrap();
        assert_eq!(b, vec![LayerBoundary { layer: 0, tensor: "sum0".into() }, LayerBoundary { layer: 1, tensor: "sum1".into() }]);
        let err = boundaries(&builder_layers("")).unwrap_err().to_string();
        assert!(
            err.contains("the stream leaving layer 1 is the sum inside the fused `/model/layers.2/final_norm_layernorm/SkipLayerNorm`"),
            "{err}"
        );
        assert_eq!(layer_index("/model/layers.2/final_norm_layernorm/SkipLayerNorm"), None);
        assert!(is_final_norm("/model/layers.2/final_norm_layernorm/SkipLayerNorm"));
        // Neither input made by the layer: not a boundary.
        let mut g = builder_layers("sum1");
        g.node[4].input = vec!["embeds".into(), "embeds".into(), "w1".into()];
        assert!(boundaries(&g).unwrap_err().to_string().contains("not produced by a node"));
    }

    /// Guards the name parsing: only whole `layers.<i>/` segments count.
    #[test]
    fn layer_names() {
        assert_eq!(layer_index("decoder/model/layers.12/mlp/MatMul"), Some(12));
        assert_eq!(layer_index("layers.3/x"), Some(3));
        assert_eq!(layer_index("model/sublayers.3/x"), None);
        assert_eq!(layer_index("model/layers.x/layers.4/y"), Some(4));
        assert_eq!(layer_index("model/layers.5"), None);
        assert_eq!(input_norm_layer("model/layers.2/input_layernorm/RMS_1"), Some(2));
        assert_eq!(input_norm_layer("model/layers.2/post_attention_layernorm/RMS_1"), None);
        assert!(is_final_norm("decoder/model/norm/RMSNormalization_node_9"));
        assert!(!is_final_norm("model/layers.1/model/norm/x"));
    }

    /// Guards the wire-level edit: the extra outputs decode as graph outputs after the original
    /// ones, and every other field survives byte for byte (here an unknown top-level field and
    /// the graph's name).
    #[test]
    fn extra_outputs_keep_everything_else() {
        let original = ModelProto {
            ir_version: 10,
            producer_name: "p".into(),
            graph: Some(GraphProto {
                name: "g".into(),
                output: vec![ValueInfoProto { name: "logits".into(), r#type: None }],
                ..two_layers()
            }),
            ..Default::default()
        };
        let mut bytes = original.encode_to_vec();
        // An unknown field 99 (length-delimited) after the graph: kept as is.
        put_varint(&mut bytes, (99 << 3) | 2);
        put_varint(&mut bytes, 3);
        bytes.extend_from_slice(b"xyz");
        let edited = with_extra_outputs(&bytes, &[("h0".into(), 1), ("h1".into(), 10)]).unwrap();
        assert!(edited.ends_with(b"xyz"));
        let m = ModelProto::decode(edited.as_slice()).unwrap();
        let g = m.graph.unwrap();
        let names: Vec<&str> = g.output.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["logits", "h0", "h1"]);
        assert_eq!(g.output[2].r#type.as_ref().unwrap().tensor_type.as_ref().unwrap().elem_type, 10);
        assert_eq!((m.ir_version, m.producer_name.as_str(), g.name.as_str(), g.node.len()), (10, "p", "g", 6));
        assert!(with_extra_outputs(&bytes[..bytes.len() - 2], &[]).is_err());
        assert!(with_extra_outputs(&ModelProto::default().encode_to_vec(), &[]).unwrap_err().to_string().contains("no graph"));
    }
}
