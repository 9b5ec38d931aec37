//! Decoder layers cut out of an export, so each can be judged where it stands: fed the
//! reference's residual stream instead of the export's own.
//!
//! The cut uses the layer boundaries of [`super::layers`] (the residual stream entering each
//! layer's `input_layernorm`). Every consumer of the stream entering layer `k` is rewired to a new
//! graph input `onnx_parity.local_in.k`; the graph's outputs become the layer outputs (and the
//! outputs of the modules inside each layer: `self_attn`, `mlp`, the norms); whatever is not
//! needed for them is pruned (the final norm, `lm_head`, unused inputs and initializers). A
//! KV-shared layer keeps the key/value path of its source layer, which then reads the reference's
//! stream entering the source layer: the shared-KV sources are inputs of the cut too. Rotary
//! tables, masks and per-layer-input slices are computed from the graph's own inputs as in the
//! export.
//!
//! The edit is made on the wire ([`super::wire`]): kept nodes, initializers and value infos are
//! copied byte for byte (a renamed input re-encodes only that node's input fields).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

use prost::Message;

use super::layers::{self, BoundaryError, LayerBoundary};
use super::proto::{GraphProto, ModelProto, NodeProto, TensorProto};
use super::wire::{self, WireError};

/// Prefix of the inputs that carry the reference's residual stream into a layer.
pub const LOCAL_INPUT: &str = "onnx_parity.local_in.";

/// The input carrying the residual stream into layer `k`.
pub fn local_input(k: usize) -> String {
    format!("{LOCAL_INPUT}{k}")
}

/// The layer a local input feeds (`onnx_parity.local_in.3` → 3).
pub fn local_input_layer(name: &str) -> Option<usize> {
    name.strip_prefix(LOCAL_INPUT)?.parse().ok()
}

/// The modules of a decoder layer whose outputs are compared inside a blamed layer, in forward
/// order, spelt as HF (and the reference) name them.
/// (MoE layers: the experts' path shows in `pre_feedforward_layernorm_2` and
/// `post_feedforward_layernorm_2`, the dense MLP's in `post_feedforward_layernorm_1`.)
pub const MODULES: [&str; 9] = [
    "input_layernorm",
    "self_attn",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "mlp",
    "post_feedforward_layernorm_1",
    "pre_feedforward_layernorm_2",
    "post_feedforward_layernorm_2",
    "post_feedforward_layernorm",
];

/// Why a decoder cannot be cut.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    #[error("not a valid ONNX ModelProto: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("not a valid ONNX ModelProto: {0}")]
    Wire(#[from] WireError),
    #[error("decoder layer boundaries not identifiable: {0}")]
    Boundaries(#[from] BoundaryError),
    #[error("layer {layer} does not exist (the decoder has {layers})")]
    NoLayer { layer: usize, layers: usize },
    #[error("node `{node}` holds a subgraph (control flow), whose outer-scope inputs the cut cannot follow")]
    Subgraph { node: String },
    /// The stream entering a layer is made inside that layer's fused input norm (a residual add
    /// fused into a SkipLayerNormalization, ORT GenAI's builder) of a form the cut cannot split
    /// into the sum and a norm of the fed stream (a bias, a used statistics output, a beta).
    #[error(
        "the stream entering layer {layer} is the sum inside its fused input norm `{node}`, which the cut cannot split (only SkipSimplifiedLayerNormalization(input, skip, gamma) with its normed and sum outputs)"
    )]
    FusedStream { layer: usize, node: String },
}

/// Why the decoder cannot be cut at its layers.
#[derive(Debug, thiserror::Error)]
pub enum CutUnavailable {
    #[error("reading {}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Cut { path: std::path::PathBuf, source: CutError },
}

/// A module's output tensor inside a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleOutput {
    pub layer: usize,
    pub module: &'static str,
    pub tensor: String,
}

/// A cut of a decoder graph, as a complete `ModelProto`.
#[derive(Debug)]
pub struct CutModel {
    /// The edited model (initializers still point at the original's external data).
    pub bytes: Vec<u8>,
    /// Its graph inputs, in order.
    pub inputs: Vec<String>,
    /// The element type each local input is declared with (the residual stream's own: float32
    /// in ORT GenAI's builder's float16 builds, which keep the stream in float32).
    pub stream_types: BTreeMap<String, i32>,
    /// Layer outputs in layer order (the cut's first outputs).
    pub layers: Vec<LayerBoundary>,
    /// Module outputs the cut also returns, and for every `(layer, module)` it could not
    /// identify, why.
    pub modules: Vec<ModuleOutput>,
    pub unidentified: BTreeMap<(usize, &'static str), String>,
    /// Names of the kept nodes and initializers (what the cut holds).
    pub nodes: Vec<String>,
    pub initializers: Vec<String>,
}

/// Which module of which layer a node belongs to: from its name (`model/layers.3/mlp/…`), else
/// from its first output's name (`v_model.layers.3.pre_feedforward_layernorm.…`: fused nodes such
/// as SkipSimplifiedLayerNormalization carry no layer in their own name), else from the module
/// path torch.onnx's dynamo exporter records beside the node (`pkg.torch.onnx.name_scopes`:
/// `['', 'model', …, 'model.model.layers.3', 'model.model.layers.3.mlp', …, 'mul_12']`).
fn place(node: &NodeProto) -> (Option<usize>, Option<&'static str>) {
    if let Some((layer, rest)) = layers::segment_layer(&node.name) {
        let module = rest.split('/').next().and_then(|m| MODULES.iter().find(|&&x| x == m).copied());
        return (Some(layer), module);
    }
    match node.output.first().and_then(|o| dotted_layer(o)).or_else(|| scoped_layer(node)) {
        Some((layer, module)) => (Some(layer), module),
        None => (None, None),
    }
}

/// `(layer, module)` of the deepest `…layers.<i>[.<module>…]` scope in a node's
/// `pkg.torch.onnx.name_scopes` (a Python list literal of strings).
fn scoped_layer(node: &NodeProto) -> Option<(usize, Option<&'static str>)> {
    let scopes = &node.metadata_props.iter().find(|p| p.key == "pkg.torch.onnx.name_scopes")?.value;
    let scopes = scopes.trim().trim_start_matches('[').trim_end_matches(']');
    scopes.split(',').map(|s| s.trim().trim_matches(|c| c == '\'' || c == '"')).rev().find_map(|s| dotted_layer(&format!("{s}.")))
}

/// `(layer, module)` of a dotted tensor name `…layers.<i>.<module>.…`.
fn dotted_layer(name: &str) -> Option<(usize, Option<&'static str>)> {
    let at = name.find("layers.")?;
    if at > 0 && !matches!(name.as_bytes()[at - 1], b'.' | b'_') {
        return None;
    }
    let rest = &name[at + "layers.".len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || rest.as_bytes().get(digits) != Some(&b'.') {
        return None;
    }
    let layer = rest[..digits].parse().ok()?;
    let module = rest[digits + 1..].split('.').next().and_then(|m| MODULES.iter().find(|&&x| x == m).copied());
    Some((layer, module))
}

/// The residual stream entering each of the `boundaries.len()` layers: layer 0's
/// `input_layernorm` input, then each earlier layer's output. A graph whose node names carry no
/// layer (torch.onnx's dynamo exports, cut at each layer's `layer_scalar` product) enters layer 0
/// with the token embedding's scale product, as [`layers::embeddings_into_layer0`] finds it.
pub fn layer_inputs(graph: &GraphProto, boundaries: &[LayerBoundary]) -> Result<Vec<String>, BoundaryError> {
    let into0 = match graph.node.iter().find(|n| layers::input_norm_layer(&n.name) == Some(0)) {
        Some(first) => layers::before_rounding(
            graph,
            first.input.first().filter(|t| !t.is_empty()).ok_or_else(|| BoundaryError::NoInput { node: first.name.clone() })?,
        ),
        None if !graph.node.iter().any(|n| layers::layer_index(&n.name).is_some()) => {
            layers::embeddings_into_layer0(graph).ok_or_else(|| BoundaryError::NoEnd {
                what: "the token embedding's scale product (`…embed_tokens.embed_scale`)".into(),
                layer: 0,
            })?
        }
        None => return Err(BoundaryError::NoEnd { what: "layers.0/input_layernorm".into(), layer: 0 }),
    };
    Ok(std::iter::once(into0).chain(boundaries.iter().take(boundaries.len().saturating_sub(1)).map(|b| b.tensor.clone())).collect())
}

/// The float tensor a module hands on where `reader` reads `t` rounded: integer codes (and the
/// scale and zero point a DynamicQuantizeLinear computes) are never a module's output, and a QDQ
/// pair on a matmul's input is the matmul's rounding (the reference rounds a linear layer's input
/// inside it), so both stand for the float tensor before them. A pair read by anything else (a
/// matmul's rounded output read by the next norm) is the writing module's output, rounded.
fn handed_on<'a>(producer: &HashMap<&str, &'a NodeProto>, t: &'a str, reader: &NodeProto) -> &'a str {
    let source = |n: &'a NodeProto| n.input.first().map(String::as_str).filter(|x| !x.is_empty());
    let Some(made) = producer.get(t) else { return t };
    match made.op_type.as_str() {
        "QuantizeLinear" | "DynamicQuantizeLinear" => source(made).unwrap_or(t),
        "DequantizeLinear" if reader.op_type == "MatMul" => layers::pair_source(|v| producer.get(v).copied(), t).unwrap_or(t),
        _ => t,
    }
}

/// Every identifiable module output of every layer (a tensor made inside the module and read by
/// another node of the same layer), and why the others are not identifiable.
pub fn module_outputs(graph: &GraphProto, n_layers: usize) -> (Vec<ModuleOutput>, BTreeMap<(usize, &'static str), String>) {
    let places: Vec<_> = graph.node.iter().map(place).collect();
    let mut made_in: HashMap<&str, (Option<usize>, Option<&'static str>)> = HashMap::new();
    for (n, p) in graph.node.iter().zip(&places) {
        for o in &n.output {
            made_in.insert(o.as_str(), *p);
        }
    }
    let producer: HashMap<&str, &NodeProto> = graph.node.iter().flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n))).collect();
    // (layer, module) → tensors made there and read elsewhere in the layer.
    let mut candidates: BTreeMap<(usize, &'static str), BTreeSet<&str>> = BTreeMap::new();
    for (n, (layer, module)) in graph.node.iter().zip(&places) {
        let Some(layer) = layer else { continue };
        for i in &n.input {
            let i = handed_on(&producer, i, n);
            if let Some((Some(l), Some(m))) = made_in.get(i) {
                if l == layer && Some(*m) != *module {
                    candidates.entry((*l, m)).or_default().insert(i);
                }
            }
        }
    }
    let mut found = Vec::new();
    let mut why = BTreeMap::new();
    for layer in 0..n_layers {
        for module in MODULES {
            let c = candidates.get(&(layer, module)).cloned().unwrap_or_default();
            let named: Vec<&str> =
                c.iter().copied().filter(|t| t.contains(&format!(".{module}.")) || t.contains(&format!("/{module}/"))).collect();
            let pick = match (c.len(), named.len()) {
                (1, _) => c.iter().next().copied(),
                (_, 1) => named.first().copied(),
                _ => None,
            };
            match pick {
                Some(t) => found.push(ModuleOutput { layer, module, tensor: t.to_string() }),
                None if c.is_empty() => {
                    why.insert((layer, module), format!("no node of layers.{layer}/{module} feeds the rest of the layer"));
                }
                None => {
                    why.insert((layer, module), format!("layers.{layer}/{module} has {} outputs read by the layer: {:?}", c.len(), c));
                }
            }
        }
    }
    (found, why)
}

/// The decoder `model` with every layer fed [`local_input`]`(k)` and returning its output (and
/// its modules' outputs): all layers, or only `only` (then the cut holds that layer, the shared
/// preprocessing and the key/value path of a KV-sharing source, and nothing else).
pub fn local_model(model: &[u8], only: Option<usize>) -> Result<CutModel, CutError> {
    let decoded = ModelProto::decode(model)?;
    let graph = decoded.graph.as_ref().ok_or(BoundaryError::NoGraph)?;
    let boundaries = layers::boundaries(graph)?;
    let n = boundaries.len();
    if let Some(k) = only.filter(|&k| k >= n) {
        return Err(CutError::NoLayer { layer: k, layers: n });
    }
    let into = layer_inputs(graph, &boundaries)?;
    let rewire: HashMap<&str, String> = into.iter().enumerate().map(|(k, t)| (t.as_str(), local_input(k))).collect();
    // A stream that is the sum output of the next layer's fused input norm (ORT GenAI's builder)
    // cannot be rewired as it is: the norm computes its output from the sum's own inputs. Such a
    // node is split into the sum and a plain norm of the fed stream.
    let mut splits: Vec<Option<[NodeProto; 2]>> = vec![None; graph.node.len()];
    for b in boundaries.iter().filter(|b| b.layer + 1 < n) {
        if let Some(i) = graph.node.iter().position(|nd| nd.output.iter().any(|o| o == &b.tensor)) {
            if layers::is_skip_norm(&graph.node[i].op_type) {
                let mut parts = split_fused_norm(&graph.node[i], &local_input(b.layer + 1), b.layer + 1)?;
                for t in parts.iter_mut().flat_map(|p| p.input.iter_mut()) {
                    if let Some(r) = rewire.get(t.as_str()) {
                        *t = r.clone();
                    }
                }
                splits[i] = Some(parts);
            }
        }
    }
    let (all_modules, mut unidentified) = module_outputs(graph, n);
    let wanted = |layer: usize| only.is_none_or(|k| k == layer);
    let layer_outs: Vec<LayerBoundary> = boundaries.iter().filter(|b| wanted(b.layer)).cloned().collect();
    let modules: Vec<ModuleOutput> = all_modules.into_iter().filter(|m| wanted(m.layer)).collect();
    unidentified.retain(|(l, _), _| wanted(*l));

    // Backward slice from the outputs, over the rewired graph.
    let renamed = |t: &str| rewire.get(t).cloned().unwrap_or_else(|| t.to_string());
    let mut needed: BTreeSet<String> =
        layer_outs.iter().map(|b| b.tensor.clone()).chain(modules.iter().map(|m| m.tensor.clone())).collect();
    // Which parts of each node are kept: the node itself (`[true, _]`), or a split node's sum and
    // norm.
    let mut keep = vec![[false; 2]; graph.node.len()];
    for (i, node) in graph.node.iter().enumerate().rev() {
        let parts = match &splits[i] {
            Some(parts) => parts.as_slice(),
            None => std::slice::from_ref(node),
        };
        for (p, part) in parts.iter().enumerate().rev() {
            if part.output.iter().any(|o| needed.contains(o)) {
                if node.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty()) {
                    return Err(CutError::Subgraph { node: node.name.clone() });
                }
                keep[i][p] = true;
                needed.extend(part.input.iter().filter(|t| !t.is_empty()).map(|t| renamed(t)));
            }
        }
    }

    // Rewrite the graph field by field.
    const NODE: u64 = 1;
    const INITIALIZER: u64 = 5;
    const INPUT: u64 = 11;
    const OUTPUT: u64 = 12;
    const VALUE_INFO: u64 = 13;
    let (_, payload) = wire::graph_field(model)?;
    let g = &model[payload.clone()];
    let mut out = Vec::with_capacity(g.len());
    let (mut node_i, mut nodes, mut initializers, mut inputs) = (0, Vec::new(), Vec::new(), Vec::new());
    for f in wire::fields(g)? {
        let bytes = &g[f.all.clone()];
        let body = &g[f.payload.clone()];
        match f.number {
            NODE if f.wire_type == wire::LEN => {
                let i = node_i;
                node_i += 1;
                let kept = keep.get(i).copied().unwrap_or_default();
                if let Some(Some(parts)) = splits.get(i) {
                    for (part, _) in parts.iter().zip(kept).filter(|(_, k)| *k) {
                        nodes.push(part.name.clone());
                        let mut bytes = part.encode_to_vec();
                        if part.op_type == SPLIT_NORM {
                            // The fused node's attributes (its epsilon) as written: the crate's
                            // schema does not model float attributes.
                            bytes.extend(attribute_fields(body)?);
                        }
                        wire::put_len_field(&mut out, NODE, &bytes);
                    }
                    continue;
                }
                if !kept[0] {
                    continue;
                }
                let node = &graph.node[i];
                nodes.push(node.name.clone());
                if node.input.iter().any(|t| rewire.contains_key(t.as_str())) {
                    wire::put_len_field(&mut out, NODE, &rename_inputs(body, &rewire)?);
                } else {
                    out.extend_from_slice(bytes);
                }
            }
            INITIALIZER => {
                let t = TensorProto::decode(body)?;
                if needed.contains(&t.name) {
                    initializers.push(t.name);
                    out.extend_from_slice(bytes);
                }
            }
            INPUT | VALUE_INFO => {
                let v = super::proto::ValueInfoProto::decode(body)?;
                if needed.contains(&v.name) {
                    if f.number == INPUT {
                        inputs.push(v.name);
                    }
                    out.extend_from_slice(bytes);
                }
            }
            OUTPUT => {}
            _ => out.extend_from_slice(bytes),
        }
    }
    let mut stream_types = BTreeMap::new();
    for (k, t) in into.iter().enumerate() {
        let name = local_input(k);
        if needed.contains(&name) {
            let elem_type = layers::residual_elem_type(graph, t);
            wire::put_len_field(&mut out, INPUT, &layers::value_info(&name, elem_type).encode_to_vec());
            stream_types.insert(name.clone(), elem_type);
            inputs.push(name);
        }
    }
    for t in layer_outs.iter().map(|b| &b.tensor).chain(modules.iter().map(|m| &m.tensor)) {
        wire::put_len_field(&mut out, OUTPUT, &layers::value_info(t, layers::residual_elem_type(graph, t)).encode_to_vec());
    }
    Ok(CutModel {
        bytes: wire::with_graph(model, &out)?,
        inputs,
        stream_types,
        layers: layer_outs,
        modules,
        unidentified,
        nodes,
        initializers,
    })
}

/// The plain norm a split fused norm leaves (ONNX Runtime's RMS norm in the default domain, as
/// the builder writes its unfused norms; `axis` -1 and `stash_type` 1 are its defaults).
const SPLIT_NORM: &str = "SimplifiedLayerNormalization";

/// A fused residual norm `SkipSimplifiedLayerNormalization(input, skip, gamma)` → (normed, _, _,
/// sum) whose sum is the stream entering layer `layer`, as two nodes: `Add(input, skip)` → sum
/// (the previous layer's output) and `SimplifiedLayerNormalization(fed, gamma)` → normed (the
/// layer's input norm of the fed stream). A bias input, a used mean or inverse-deviation output,
/// or a LayerNorm with beta have no such split: refused naming the node.
fn split_fused_norm(node: &NodeProto, fed: &str, layer: usize) -> Result<[NodeProto; 2], CutError> {
    let refuse = || CutError::FusedStream { layer, node: node.name.clone() };
    let out = |i: usize| node.output.get(i).map(String::as_str).unwrap_or("");
    let statistics_used = !out(1).is_empty() || !out(2).is_empty();
    if node.op_type != "SkipSimplifiedLayerNormalization"
        || node.input.len() != 3
        || statistics_used
        || out(0).is_empty()
        || out(3).is_empty()
    {
        return Err(refuse());
    }
    let sum = NodeProto {
        input: node.input[..2].to_vec(),
        output: vec![out(3).to_string()],
        name: format!("{}/onnx_parity.residual_add", node.name),
        op_type: "Add".into(),
        ..Default::default()
    };
    let norm = NodeProto {
        input: vec![fed.to_string(), node.input[2].clone()],
        output: vec![out(0).to_string()],
        name: node.name.clone(),
        op_type: SPLIT_NORM.into(),
        ..Default::default()
    };
    Ok([sum, norm])
}

/// The `attribute` fields of a node's bytes, as written.
fn attribute_fields(node: &[u8]) -> Result<Vec<u8>, WireError> {
    const NODE_ATTRIBUTE: u64 = 5;
    Ok(wire::fields(node)?.into_iter().filter(|f| f.number == NODE_ATTRIBUTE).flat_map(|f| node[f.all].to_vec()).collect())
}

/// A node's bytes with its `input` fields renamed as `rewire` says (every other field kept).
fn rename_inputs(node: &[u8], rewire: &HashMap<&str, String>) -> Result<Vec<u8>, WireError> {
    const NODE_INPUT: u64 = 1;
    let mut out = Vec::with_capacity(node.len() + 32);
    for f in wire::fields(node)? {
        let payload: Range<usize> = f.payload.clone();
        match (f.number, std::str::from_utf8(&node[payload])) {
            (NODE_INPUT, Ok(name)) if rewire.contains_key(name) => wire::put_len_field(&mut out, NODE_INPUT, rewire[name].as_bytes()),
            _ => out.extend_from_slice(&node[f.all]),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::ValueInfoProto;

    /// A model of `nodes` with one-element float `initializers` and untyped `inputs`/`outputs`.
    fn encode(nodes: Vec<NodeProto>, initializers: &[&str], inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
        let init = |n: &&str| TensorProto { name: n.to_string(), data_type: 1, dims: vec![1], ..Default::default() };
        let vi = |n: &&str| ValueInfoProto { name: n.to_string(), r#type: None };
        let graph = GraphProto {
            node: nodes,
            initializer: initializers.iter().map(init).collect(),
            input: inputs.iter().map(vi).collect(),
            output: outputs.iter().map(vi).collect(),
            ..Default::default()
        };
        ModelProto { ir_version: 10, graph: Some(graph), ..Default::default() }.encode_to_vec()
    }

    fn node(name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            name: name.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Three layers in mobius's layout; layer 2 reads layer 0's key (KV sharing), and a fused
    /// norm outside every layer's name holds layer 1's residual add.
    fn model() -> Vec<u8> {
        let nodes = vec![
            node("model/embed_tokens/Gather", &["table", "input_ids"], &["e"]),
            node("model/rotary/Gather", &["cos", "position_ids"], &["cos_t"]),
            node("model/layers.0/input_layernorm/RMS", &["e", "w0n"], &["n0"]),
            node("model/layers.0/self_attn/k_proj/MatMul", &["n0", "w0k"], &["k0"]),
            node("model/layers.0/self_attn/o_proj/MatMul", &["k0", "cos_t"], &["a0"]),
            node("model/layers.0/Add", &["e", "a0"], &["h0"]),
            node("model/layers.1/input_layernorm/RMS", &["h0", "w1n"], &["n1"]),
            node("model/layers.1/mlp/down_proj/MatMul", &["n1", "w1d"], &["v_model.layers.1.mlp.down_proj.MatMul_9"]),
            node(
                "node_Skip_1",
                &["h0", "v_model.layers.1.mlp.down_proj.MatMul_9"],
                &["v_model.layers.1.post_feedforward_layernorm.RMS_3", "sum1"],
            ),
            node("model/layers.1/Add", &["sum1", "v_model.layers.1.post_feedforward_layernorm.RMS_3"], &["h1"]),
            node("model/layers.2/input_layernorm/RMS", &["h1", "w2n"], &["n2"]),
            node("model/layers.2/self_attn/o_proj/MatMul", &["n2", "k0"], &["a2"]),
            node("model/layers.2/Add", &["h1", "a2"], &["h2"]),
            node("model/norm/RMS", &["h2", "wn"], &["hn"]),
            node("lm_head/MatMul", &["hn", "table"], &["logits"]),
        ];
        encode(nodes, &["table", "cos", "w0n", "w0k", "w1n", "w1d", "w2n", "wn"], &["input_ids", "position_ids"], &["logits"])
    }

    /// Guards the fused residual add (ORT GenAI's builder): a stream made inside the next layer's
    /// SkipSimplifiedLayerNormalization is cut by splitting that node into the sum (the previous
    /// layer's output, from its own inputs) and a plain norm of the fed stream that keeps the
    /// node's attributes; a fused norm with a bias input cannot be split and is refused naming it.
    #[test]
    fn a_stream_made_inside_a_fused_norm_is_split() {
        use crate::onnx::proto::AttributeProto;
        let skip = |name: &str, inputs: &[&str], outputs: &[&str]| NodeProto {
            op_type: "SkipSimplifiedLayerNormalization".into(),
            domain: "com.microsoft".into(),
            attribute: vec![AttributeProto { name: "epsilon_stand_in".into(), i: 7, ..Default::default() }],
            ..node(name, inputs, outputs)
        };
        let model = |bias: bool| {
            let mut fused = vec!["d0", "e", "w1"];
            if bias {
                fused.push("b1");
            }
            let nodes = vec![
                node("/model/layers.0/input_layernorm/LayerNorm", &["e", "w0"], &["n0"]),
                node("/model/layers.0/mlp/down_proj/MatMul", &["n0", "m0"], &["d0"]),
                skip("/model/layers.1/input_layernorm/SkipLayerNorm", &fused, &["n1", "", "", "sum0"]),
                node("/model/layers.1/mlp/down_proj/MatMul", &["n1", "m1"], &["d1"]),
                skip("/model/layers.2/final_norm_layernorm/SkipLayerNorm", &["d1", "sum0", "wn"], &["hn", "", "", "sum1"]),
            ];
            encode(nodes, &[], &["e"], &[])
        };
        let cut = local_model(&model(false), None).unwrap();
        let g = graph(&cut);
        // The layer outputs, then the input norms' outputs (module outputs).
        assert_eq!(g.output.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["sum0", "sum1", "n0", "n1"]);
        let find = |n: &str| g.node.iter().find(|x| x.name == n).unwrap_or_else(|| panic!("no {n} in {:?}", cut.nodes)).clone();
        let add = find("/model/layers.1/input_layernorm/SkipLayerNorm/onnx_parity.residual_add");
        assert_eq!(
            (add.op_type.as_str(), add.input.clone(), add.output.clone()),
            ("Add", vec!["d0".into(), "onnx_parity.local_in.0".into()], vec!["sum0".into()])
        );
        let norm = find("/model/layers.1/input_layernorm/SkipLayerNorm");
        assert_eq!(norm.op_type, "SimplifiedLayerNormalization");
        assert_eq!(norm.domain, "");
        assert_eq!(norm.input, ["onnx_parity.local_in.1", "w1"]);
        assert_eq!(norm.output, ["n1"]);
        assert_eq!(norm.attribute.iter().map(|a| (a.name.as_str(), a.i)).collect::<Vec<_>>(), [("epsilon_stand_in", 7)]);
        let last = find("/model/layers.2/final_norm_layernorm/SkipLayerNorm");
        assert_eq!(last.input, ["d1", "onnx_parity.local_in.1", "wn"]);
        assert_eq!(cut.inputs, ["onnx_parity.local_in.0", "onnx_parity.local_in.1"]);
        // Layer 1 alone: the norm of its fed stream, not the sum of layer 0's output.
        let one = local_model(&model(false), Some(1)).unwrap();
        assert!(!one.nodes.iter().any(|n| n.ends_with("onnx_parity.residual_add") || n.contains("layers.0/")), "{:?}", one.nodes);
        let err = local_model(&model(true), None).unwrap_err().to_string();
        assert!(
            err.contains("the stream entering layer 1 is the sum inside its fused input norm `/model/layers.1/input_layernorm/SkipLayerNorm`, which the cut cannot split"),
            "{err}"
        );
    }

    /// Guards the module path of dynamo's `pkg.torch.onnx.name_scopes`: the deepest layer scope
    /// names the layer and its module (a sub-module such as `mlp.down_proj` is the module `mlp`),
    /// a node of the layer itself has no module, and a node outside every layer has no place.
    #[test]
    fn dynamo_name_scopes_place_a_node() {
        use crate::onnx::proto::StringStringEntryProto;
        let scoped = |scopes: &str| NodeProto {
            metadata_props: vec![StringStringEntryProto { key: "pkg.torch.onnx.name_scopes".into(), value: scopes.into() }],
            ..node("node_linear_9", &["x"], &["linear_9"])
        };
        let mlp = "['', 'model', 'model.model', 'model.model.layers.3', 'model.model.layers.3.mlp', 'model.model.layers.3.mlp.down_proj', 'linear_9']";
        assert_eq!(place(&scoped(mlp)), (Some(3), Some("mlp")));
        assert_eq!(place(&scoped("['', 'model', 'model.model', 'model.model.layers.12', 'mul_40']")), (Some(12), None));
        assert_eq!(place(&scoped("['', 'model', 'model.model', 'model.model.rotary_emb', 'cos']")), (None, None));
        assert_eq!(place(&node("node_linear_9", &["x"], &["linear_9"])), (None, None));
    }

    /// A two-layer graph as torch.onnx's dynamo exporter writes it: no layer in any node name,
    /// the module path only in initializer names (`m.model.layers.<i>.layer_scalar`).
    fn dynamo_model(embed_scale: bool) -> Vec<u8> {
        let mul = |name: &str, inputs: &[&str], outputs: &[&str]| NodeProto { op_type: "Mul".into(), ..node(name, inputs, outputs) };
        let scale = if embed_scale { "m.model.embed_tokens.embed_scale" } else { "c" };
        let nodes = vec![
            node("node_Gather_0", &["m.model.embed_tokens.weight", "input_ids"], &["embedding"]),
            mul("node_Mul_1", &["embedding", scale], &["mul"]),
            node("node_RMS_2", &["mul", "w0n"], &["n0"]),
            node("node_MatMul_3", &["n0", "w0"], &["a0"]),
            node("node_Add_4", &["mul", "a0"], &["add"]),
            mul("node_Mul_5", &["add", "m.model.layers.0.layer_scalar"], &["mul_1"]),
            node("node_RMS_6", &["mul_1", "w1n"], &["n1"]),
            node("node_MatMul_7", &["n1", "w1"], &["a1"]),
            node("node_Add_8", &["mul_1", "a1"], &["add_1"]),
            mul("node_Mul_9", &["add_1", "m.model.layers.1.layer_scalar"], &["mul_2"]),
            node("node_RMS_10", &["mul_2", "wn"], &["hn"]),
            node("node_MatMul_11", &["hn", "m.model.embed_tokens.weight"], &["logits"]),
        ];
        let names = [
            "m.model.embed_tokens.weight",
            scale,
            "w0n",
            "w0",
            "m.model.layers.0.layer_scalar",
            "w1n",
            "w1",
            "m.model.layers.1.layer_scalar",
            "wn",
        ];
        encode(nodes, &names, &["input_ids"], &["logits"])
    }

    /// Guards the cut of a graph without layer names (torch.onnx dynamo): layer 0 is fed where
    /// the token embedding's scale product was read, each later layer where the previous
    /// layer's `layer_scalar` product was; the embedding and the head are pruned. Without the
    /// scale product the cut is refused naming it, never made at a guessed tensor.
    #[test]
    fn a_graph_without_layer_names_is_cut_at_its_layer_scalars() {
        let cut = local_model(&dynamo_model(true), None).unwrap();
        let g = graph(&cut);
        assert_eq!(g.output.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["mul_1", "mul_2"]);
        assert_eq!(cut.inputs, ["onnx_parity.local_in.0", "onnx_parity.local_in.1"]);
        let reads = |n: &str| g.node.iter().find(|x| x.name == n).unwrap().input.clone();
        assert_eq!(reads("node_RMS_2")[0], "onnx_parity.local_in.0");
        assert_eq!(reads("node_Add_4")[0], "onnx_parity.local_in.0");
        assert_eq!(reads("node_Add_8")[0], "onnx_parity.local_in.1");
        assert!(
            !cut.nodes.iter().any(|n| ["node_Gather_0", "node_Mul_1", "node_RMS_10", "node_MatMul_11"].contains(&n.as_str())),
            "{:?}",
            cut.nodes
        );
        let one = local_model(&dynamo_model(true), Some(1)).unwrap();
        assert_eq!(one.nodes, ["node_RMS_6", "node_MatMul_7", "node_Add_8", "node_Mul_9"]);
        assert_eq!(one.inputs, ["onnx_parity.local_in.1"]);
        let err = local_model(&dynamo_model(false), None).unwrap_err().to_string();
        assert!(err.contains("no node of the token embedding's scale product"), "{err}");
    }

    fn graph(cut: &CutModel) -> GraphProto {
        ModelProto::decode(cut.bytes.as_slice()).unwrap().graph.unwrap()
    }

    /// Guards the all-layers cut: every consumer of a layer's incoming stream reads its local
    /// input (the fused norm too), the outputs are the layer and module outputs, and lm_head, the
    /// final norm and the embedding table are pruned.
    #[test]
    fn all_layers_read_local_inputs() {
        let cut = local_model(&model(), None).unwrap();
        let g = graph(&cut);
        let outputs: Vec<&str> = g.output.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(&outputs[..3], ["h0", "h1", "h2"]);
        assert!(cut.modules.contains(&ModuleOutput { layer: 0, module: "self_attn", tensor: "a0".into() }), "{:?}", cut.modules);
        assert!(cut.modules.contains(&ModuleOutput { layer: 1, module: "mlp", tensor: "v_model.layers.1.mlp.down_proj.MatMul_9".into() }));
        assert!(cut.modules.iter().any(|m| m.layer == 1 && m.module == "post_feedforward_layernorm"));
        let skip = g.node.iter().find(|n| n.name == "node_Skip_1").unwrap();
        assert_eq!(skip.input[0], "onnx_parity.local_in.1");
        let add0 = g.node.iter().find(|n| n.name == "model/layers.0/Add").unwrap();
        assert_eq!(add0.input[0], "onnx_parity.local_in.0");
        assert!(
            !cut.nodes.iter().any(|n| n.contains("lm_head") || n.contains("model/norm") || n.contains("embed_tokens")),
            "{:?}",
            cut.nodes
        );
        assert!(!cut.initializers.contains(&"table".to_string()));
        assert_eq!(cut.inputs, ["position_ids", "onnx_parity.local_in.0", "onnx_parity.local_in.1", "onnx_parity.local_in.2"]);
    }

    /// Guards the one-layer cut: layer 1 alone holds no other layer's nodes or weights; layer 2
    /// (KV-shared with layer 0) keeps layer 0's key path, fed layer 0's local input.
    #[test]
    fn one_layer_cuts() {
        let cut = local_model(&model(), Some(1)).unwrap();
        assert!(cut.nodes.iter().all(|n| n.contains("layers.1/") || n == "node_Skip_1"), "{:?}", cut.nodes);
        assert_eq!(cut.initializers, ["w1n", "w1d"]);
        assert_eq!(cut.inputs, ["onnx_parity.local_in.1"]);
        let cut = local_model(&model(), Some(2)).unwrap();
        assert!(cut.nodes.contains(&"model/layers.0/self_attn/k_proj/MatMul".to_string()));
        assert!(!cut.nodes.contains(&"model/layers.0/Add".to_string()));
        assert_eq!(cut.inputs, ["onnx_parity.local_in.0", "onnx_parity.local_in.2"]);
        assert!(local_model(&model(), Some(3)).unwrap_err().to_string().contains("layer 3 does not exist"));
    }
}
