//! The protobuf wire format, just enough to edit an ONNX `ModelProto` without decoding what this
//! crate does not model: a message is split into its fields (number, wire type, byte ranges), and
//! edited messages are written back from kept byte ranges plus new length-delimited fields. Tensor
//! payloads, attributes and fields newer than [`super::proto`] survive byte for byte.

use std::ops::Range;

/// A `ModelProto` (or one of its messages) that cannot be split into fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated field key")]
    TruncatedKey,
    #[error("truncated varint")]
    TruncatedVarint,
    #[error("truncated length")]
    TruncatedLength,
    #[error("a field runs past the end of the file")]
    PastEnd,
    #[error("the model has more than one graph field")]
    TwoGraphs,
    #[error("unsupported wire type {wire_type} at byte {at}")]
    WireType { wire_type: u64, at: usize },
    #[error("the model has no graph")]
    NoGraph,
}

/// Protobuf wire type of a length-delimited field (strings, bytes, messages, packed scalars).
pub const LEN: u64 = 2;

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub number: u64,
    pub wire_type: u64,
    /// The whole field, key included.
    pub all: Range<usize>,
    /// The payload: a length-delimited field's bytes, else the value's.
    pub payload: Range<usize>,
}

/// Reads one varint at `*pos`.
pub fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field `number` holding `payload`.
pub fn put_len_field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    put_varint(out, (number << 3) | LEN);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// The fields of `message`, in order.
pub fn fields(message: &[u8]) -> Result<Vec<Field>, WireError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < message.len() {
        let start = pos;
        let key = varint(message, &mut pos).ok_or(WireError::TruncatedKey)?;
        let payload_start = pos;
        match key & 7 {
            0 => {
                varint(message, &mut pos).ok_or(WireError::TruncatedVarint)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            LEN => {
                let len = varint(message, &mut pos).ok_or(WireError::TruncatedLength)? as usize;
                let payload = pos;
                pos = pos.checked_add(len).filter(|&e| e <= message.len()).ok_or(WireError::PastEnd)?;
                out.push(Field { number: key >> 3, wire_type: LEN, all: start..pos, payload: payload..pos });
                continue;
            }
            w => return Err(WireError::WireType { wire_type: w, at: start }),
        }
        if pos > message.len() {
            return Err(WireError::PastEnd);
        }
        out.push(Field { number: key >> 3, wire_type: key & 7, all: start..pos, payload: payload_start..pos });
    }
    Ok(out)
}

/// `ModelProto.graph`.
pub const MODEL_GRAPH: u64 = 7;

/// The byte range of the model's one graph field (the whole field) and of its payload.
pub fn graph_field(model: &[u8]) -> Result<(Range<usize>, Range<usize>), WireError> {
    let mut graph = None;
    for f in fields(model)? {
        if f.number == MODEL_GRAPH && f.wire_type == LEN {
            if graph.is_some() {
                return Err(WireError::TwoGraphs);
            }
            graph = Some((f.all, f.payload));
        }
    }
    graph.ok_or(WireError::NoGraph)
}

/// `model` with its graph field replaced by `graph` (every other byte kept).
pub fn with_graph(model: &[u8], graph: &[u8]) -> Result<Vec<u8>, WireError> {
    let (all, _) = graph_field(model)?;
    let mut out = Vec::with_capacity(model.len() - all.len() + graph.len() + 16);
    out.extend_from_slice(&model[..all.start]);
    put_len_field(&mut out, MODEL_GRAPH, graph);
    out.extend_from_slice(&model[all.end..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: fields round-trip (varint, fixed and length-delimited), a truncated message is an
    /// error, and a replaced graph keeps the fields around it.
    #[test]
    fn fields_and_graph_replacement() {
        let mut m = Vec::new();
        put_varint(&mut m, 1 << 3);
        put_varint(&mut m, 300);
        put_len_field(&mut m, MODEL_GRAPH, b"old");
        put_len_field(&mut m, 99, b"tail");
        let f = fields(&m).unwrap();
        assert_eq!(f.iter().map(|f| f.number).collect::<Vec<_>>(), [1, 7, 99]);
        assert_eq!(&m[f[1].payload.clone()], b"old");
        let edited = with_graph(&m, b"newer").unwrap();
        let f = fields(&edited).unwrap();
        assert_eq!(&edited[f[1].payload.clone()], b"newer");
        assert_eq!(&edited[f[2].payload.clone()], b"tail");
        assert_eq!(fields(&m[..m.len() - 1]), Err(WireError::PastEnd));
        assert_eq!(graph_field(&m[..3]).unwrap_err(), WireError::NoGraph);
    }
}
