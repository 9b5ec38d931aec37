//! A decoded summary of one ONNX graph file: its inputs and outputs with element types and
//! dimensions, op inventory and unused initialisers. L1 checks these against the contract the
//! model config implies, without loading any weights.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost::Message;

use super::proto::{self, DimValue, GraphProto, ModelProto};

/// Why a graph file could not be summarised.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("reading ONNX file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid ONNX ModelProto: {source}")]
    Decode { path: PathBuf, source: prost::DecodeError },
    #[error("{path} has no graph")]
    NoGraph { path: PathBuf },
}

/// One dimension of a graph input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Static(i64),
    /// A named dynamic dimension (`batch`, `sequence_length`, ...).
    Symbolic(String),
    /// Neither value nor name.
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Static(v) => write!(f, "{v}"),
            Dim::Symbolic(s) => write!(f, "{s}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

/// Name, element type and shape of a graph input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    /// ONNX element type name (`float32`, `int64`, ...).
    pub dtype: &'static str,
    /// `None` when the graph declares no shape at all.
    pub dims: Option<Vec<Dim>>,
}

impl TensorSpec {
    /// Shape as `[batch, 8, 64]`, for messages.
    pub fn shape_string(&self) -> String {
        match &self.dims {
            None => "unknown".into(),
            Some(d) => format!("[{}]", d.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        }
    }
}

/// What L1 needs to know about one graph file.
#[derive(Debug, Clone)]
pub struct GraphSummary {
    pub path: PathBuf,
    pub producer: String,
    pub opsets: BTreeMap<String, i64>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub initializer_count: usize,
    /// `domain::op_type` (plain `op_type` for the default domain) → node count, subgraphs included.
    pub op_inventory: BTreeMap<String, usize>,
    /// Initialisers that no node (in any subgraph) reads and no output names: dead weight at best,
    /// a sign of a disconnected computation at worst.
    pub dangling_initializers: Vec<String>,
    /// The top-level graph's nodes, in file order (the EP contract checks read them).
    pub nodes: Vec<NodeInfo>,
    /// Element type of every value the graph types (inputs, outputs, `value_info`, initialisers).
    pub value_types: BTreeMap<String, &'static str>,
    /// Every initialiser's size in bytes (dims × element size), largest first.
    pub initializer_bytes: Vec<(String, u64)>,
}

/// One node of a graph: what the EP contract checks look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// `domain::op_type`, plain `op_type` for the default domain (as in the op inventory).
    pub op: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Integer attributes by name (`is_causal`, `local_window_size`); others read as 0.
    pub int_attributes: BTreeMap<String, i64>,
    /// The element type of a tensor attribute `value` (`Constant`, `ConstantOfShape`).
    pub value_dtype: Option<&'static str>,
    /// String attributes by name (`activation_type`), where not empty.
    pub string_attributes: BTreeMap<String, String>,
}

impl GraphSummary {
    /// A graph with nothing in it, named `path` (what a caller fills in by hand).
    pub fn empty(path: &Path) -> Self {
        GraphSummary {
            path: path.into(),
            producer: String::new(),
            opsets: BTreeMap::new(),
            inputs: vec![],
            outputs: vec![],
            initializer_count: 0,
            op_inventory: BTreeMap::new(),
            dangling_initializers: vec![],
            nodes: vec![],
            value_types: BTreeMap::new(),
            initializer_bytes: vec![],
        }
    }

    /// Decodes the graph file at `path` (external-data weights are not read).
    pub fn load(path: &Path) -> Result<Self, GraphError> {
        let bytes = std::fs::read(path).map_err(|source| GraphError::Read { path: path.into(), source })?;
        Self::from_bytes(&bytes, path)
    }

    /// Decodes graph-file bytes already read; `path` names the source in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, GraphError> {
        let model = ModelProto::decode(bytes).map_err(|source| GraphError::Decode { path: path.into(), source })?;
        Self::from_model(path, &model)
    }

    fn from_model(path: &Path, model: &ModelProto) -> Result<Self, GraphError> {
        let graph = model.graph.as_ref().ok_or_else(|| GraphError::NoGraph { path: path.into() })?;
        let mut op_inventory = BTreeMap::new();
        let mut consumed = BTreeSet::new();
        visit(graph, &mut op_inventory, &mut consumed);
        for f in &model.functions {
            for n in &f.node {
                consumed.extend(n.input.iter().cloned());
            }
        }
        consumed.extend(graph.output.iter().map(|o| o.name.clone()));
        let dangling_initializers = graph.initializer.iter().filter(|t| !consumed.contains(&t.name)).map(|t| t.name.clone()).collect();
        let nodes = graph
            .node
            .iter()
            .map(|n| NodeInfo {
                name: n.name.clone(),
                op: op_key(n),
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                int_attributes: n.attribute.iter().map(|a| (a.name.clone(), a.i)).collect(),
                value_dtype: n
                    .attribute
                    .iter()
                    .find(|a| a.name == "value")
                    .and_then(|a| a.t.as_ref())
                    .map(|t| proto::elem_type_name(t.data_type)),
                string_attributes: n
                    .attribute
                    .iter()
                    .filter(|a| !a.s.is_empty())
                    .map(|a| (a.name.clone(), String::from_utf8_lossy(&a.s).into_owned()))
                    .collect(),
            })
            .collect();
        let mut value_types: BTreeMap<String, &'static str> = BTreeMap::new();
        for v in graph.value_info.iter().chain(&graph.input).chain(&graph.output) {
            if let Some(t) = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()) {
                value_types.insert(v.name.clone(), proto::elem_type_name(t.elem_type));
            }
        }
        for t in &graph.initializer {
            value_types.insert(t.name.clone(), proto::elem_type_name(t.data_type));
        }
        let mut initializer_bytes: Vec<(String, u64)> = graph
            .initializer
            .iter()
            .map(|t| {
                let elems = t.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?)).unwrap_or(u64::MAX);
                (t.name.clone(), elems.saturating_mul(proto::elem_size(t.data_type)))
            })
            .collect();
        initializer_bytes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(GraphSummary {
            path: path.into(),
            producer: format!("{} {}", model.producer_name, model.producer_version).trim().to_string(),
            opsets: model.opset_import.iter().map(|o| (o.domain.clone(), o.version)).collect(),
            inputs: graph.input.iter().map(spec).collect(),
            outputs: graph.output.iter().map(spec).collect(),
            initializer_count: graph.initializer.len(),
            op_inventory,
            dangling_initializers,
            nodes,
            value_types,
            initializer_bytes,
        })
    }

    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|t| t.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|t| t.name == name)
    }
}

/// `domain::op_type`, plain `op_type` for the default domain.
fn op_key(node: &proto::NodeProto) -> String {
    if node.domain.is_empty() || node.domain == "ai.onnx" {
        node.op_type.clone()
    } else {
        format!("{}::{}", node.domain, node.op_type)
    }
}

fn visit(graph: &GraphProto, ops: &mut BTreeMap<String, usize>, consumed: &mut BTreeSet<String>) {
    for node in &graph.node {
        *ops.entry(op_key(node)).or_default() += 1;
        consumed.extend(node.input.iter().filter(|i| !i.is_empty()).cloned());
        for attr in &node.attribute {
            for sub in attr.g.iter().chain(attr.graphs.iter()) {
                visit(sub, ops, consumed);
                consumed.extend(sub.output.iter().map(|o| o.name.clone()));
            }
        }
    }
}

fn spec(v: &proto::ValueInfoProto) -> TensorSpec {
    let tensor = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
    TensorSpec {
        name: v.name.clone(),
        dtype: tensor.map(|t| proto::elem_type_name(t.elem_type)).unwrap_or("unknown"),
        dims: tensor.and_then(|t| t.shape.as_ref()).map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(DimValue::DimValue(v)) => Dim::Static(*v),
                    Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                    _ => Dim::Unknown,
                })
                .collect()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::*;

    fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TensorTypeProto {
                    elem_type: elem,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| Dimension {
                                value: Some(if d < 0 { DimValue::DimParam("batch".into()) } else { DimValue::DimValue(d) }),
                            })
                            .collect(),
                    }),
                }),
            }),
        }
    }

    /// Guards: an initialiser nobody reads is reported; one read only inside a subgraph is not;
    /// ops inside subgraphs are counted; a round trip through protobuf bytes keeps I/O specs.
    #[test]
    fn dangling_initializers_and_subgraph_ops() {
        let sub = GraphProto {
            node: vec![NodeProto {
                input: vec!["w_sub".into()],
                output: vec!["y".into()],
                op_type: "Identity".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let graph = GraphProto {
            node: vec![
                NodeProto {
                    input: vec!["x".into(), "w_used".into()],
                    output: vec!["z".into()],
                    op_type: "MatMul".into(),
                    ..Default::default()
                },
                NodeProto {
                    input: vec!["cond".into()],
                    output: vec!["out".into()],
                    op_type: "If".into(),
                    attribute: vec![AttributeProto { name: "then_branch".into(), g: Some(sub), ..Default::default() }],
                    ..Default::default()
                },
            ],
            initializer: ["w_used", "w_sub", "w_dead"].iter().map(|n| TensorProto { name: n.to_string(), ..Default::default() }).collect(),
            input: vec![vi("x", 1, &[-1, 64])],
            output: vec![vi("out", 10, &[-1, 512])],
            ..Default::default()
        };
        let model = ModelProto { graph: Some(graph), ..Default::default() };
        let bytes = model.encode_to_vec();
        let decoded = ModelProto::decode(bytes.as_slice()).expect("decodes");
        let s = GraphSummary::from_model(Path::new("m.onnx"), &decoded).expect("summary");
        assert_eq!(s.dangling_initializers, vec!["w_dead".to_string()]);
        assert_eq!(s.op_inventory.get("Identity"), Some(&1));
        assert_eq!(s.op_inventory.get("If"), Some(&1));
        assert_eq!(s.input("x").map(|t| t.shape_string()), Some("[batch, 64]".into()));
        assert_eq!(s.output("out").map(|t| t.dtype), Some("float16"));
    }
}
