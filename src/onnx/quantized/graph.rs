//! A quantized build's graph as its payload reader sees it: nodes with their attributes,
//! initializers with their bytes or external-data location, who makes and who reads each value.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use prost::Message;

use super::error::QuantizedError;
use super::fused::int64s;
use super::payload_proto::{PayloadModel, PayloadNode, PayloadTensor};

/// The graph of one sub-model.
pub(super) struct PayloadGraph {
    pub(super) nodes: Vec<PayloadNode>,
    pub(super) inits: HashMap<String, PayloadTensor>,
    /// Which node consumes each value.
    pub(super) consumers: HashMap<String, Vec<usize>>,
    /// Which node makes each value.
    pub(super) producers: HashMap<String, usize>,
    /// The graph's outputs.
    pub(super) outputs: BTreeSet<String>,
}

pub(super) fn attr(node: &PayloadNode, name: &str) -> Option<i64> {
    node.attribute.iter().find(|a| a.name == name).map(|a| a.i)
}

impl PayloadGraph {
    pub(super) fn load(path: &Path) -> Result<Self, QuantizedError> {
        let bytes = std::fs::read(path).map_err(|source| QuantizedError::Io { path: path.into(), source })?;
        let model = PayloadModel::decode(bytes.as_slice()).map_err(|source| QuantizedError::Decode { path: path.into(), source })?;
        let g = model.graph.unwrap_or_default();
        let mut consumers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut producers: HashMap<String, usize> = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            for input in &n.input {
                consumers.entry(input.clone()).or_default().push(i);
            }
            for output in n.output.iter().filter(|o| !o.is_empty()) {
                producers.insert(output.clone(), i);
            }
        }
        let outputs = g.output.into_iter().map(|o| o.name).collect();
        Ok(PayloadGraph {
            nodes: g.node,
            inits: g.initializer.into_iter().map(|t| (t.name.clone(), t)).collect(),
            consumers,
            producers,
            outputs,
        })
    }

    pub(super) fn init(&self, name: &str) -> Option<&PayloadTensor> {
        self.inits.get(name)
    }

    /// A gathered table: an initializer, or one reshaped by a `Reshape` (the builder's tied
    /// table, the lm_head's `[vocab, blocks, bytes]` payload as `[vocab, blocks·bytes]`), with
    /// the dims the gather sees.
    pub(super) fn table(&self, name: &str) -> Option<(&PayloadTensor, Vec<i64>)> {
        if let Some(t) = self.init(name) {
            return Some((t, t.dims.clone()));
        }
        let reshape = self.nodes.iter().find(|n| n.op_type == "Reshape" && n.output.first().is_some_and(|o| o == name))?;
        let t = self.init(reshape.input.first()?)?;
        let flat = [*t.dims.first()?, t.dims.iter().skip(1).product()];
        let target = self.int64_constant(reshape.input.get(1)?)?;
        (target == flat).then_some((t, flat.to_vec()))
    }

    /// The sizes of the constant `Split` a MatMul's output alone feeds (a fused projection's parts).
    pub(super) fn split_sizes(&self, n: &PayloadNode) -> Option<Vec<usize>> {
        let consumers = self.consumers.get(n.output.first()?)?;
        let [only] = consumers.as_slice() else { return None };
        let split = self.nodes.get(*only).filter(|s| s.op_type == "Split")?;
        self.int64_constant(split.input.get(1)?)?.into_iter().map(|v| usize::try_from(v).ok()).collect()
    }

    /// An int64 constant's values: an initializer's, or a `Constant` node's `value`.
    pub(super) fn int64_constant(&self, name: &str) -> Option<Vec<i64>> {
        let t = self.init(name).or_else(|| {
            let node = self.nodes.iter().find(|n| n.op_type == "Constant" && n.output.first().is_some_and(|o| o == name))?;
            node.attribute.iter().find(|a| a.name == "value")?.t.as_ref()
        })?;
        (t.data_type == 7).then(|| int64s(&t.raw_data, &t.int64_data))
    }

    pub(super) fn float_matmuls(&self) -> usize {
        self.nodes.iter().filter(|n| n.op_type == "MatMul" && n.input.get(1).is_some_and(|b| self.inits.contains_key(b))).count()
    }
}
