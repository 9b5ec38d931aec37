//! An initializer's bytes where a graph keeps them: inline, or a range of an external-data file
//! opened once per graph.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::QuantizedError;
use super::payload::Stored;
use super::payload_proto::PayloadTensor;

/// ONNX's FLOAT16 element type (its `int32_data` holds the bits).
const FLOAT16: i32 = 10;

/// An initializer's bytes, element type and dims.
pub(super) type Payload = (Vec<u8>, i32, Vec<i64>);

/// External-data files of one graph, opened once and read by range.
pub(super) struct ExternalData {
    dir: PathBuf,
    files: HashMap<String, Arc<std::fs::File>>,
}

impl ExternalData {
    pub(super) fn new(model: &Path) -> Self {
        ExternalData { dir: model.parent().map(Path::to_path_buf).unwrap_or_default(), files: HashMap::new() }
    }

    /// Where `t`'s bytes are: in memory for inline data, its range of the external file (open,
    /// not read) otherwise.
    pub(super) fn stored(&mut self, t: &PayloadTensor, model: &Path) -> Result<Stored, QuantizedError> {
        if t.data_location != 1 {
            return Ok(Stored::Memory(self.bytes(t, model)?));
        }
        let (file, offset, len, _) = self.external(t, model)?;
        Ok(Stored::File { file, offset, len })
    }

    /// `t`'s external file, offset, length and path.
    fn external(&mut self, t: &PayloadTensor, model: &Path) -> Result<(Arc<std::fs::File>, u64, usize, PathBuf), QuantizedError> {
        let bad = |message: String| QuantizedError::Node { path: model.into(), node: t.name.clone(), op: "initializer".into(), message };
        let (location, offset, length) = location(t, model)?;
        let path = self.dir.join(location);
        if !self.files.contains_key(location) {
            let f = std::fs::File::open(&path).map_err(|source| QuantizedError::Io { path: path.clone(), source })?;
            self.files.insert(location.to_string(), Arc::new(f));
        }
        let f = Arc::clone(&self.files[location]);
        let size = f.metadata().map_err(|source| QuantizedError::Io { path: path.clone(), source })?.len();
        if offset + length as u64 > size {
            return Err(bad(format!(
                "external data {offset}..{} beyond the end of {} ({size} bytes)",
                offset + length as u64,
                path.display()
            )));
        }
        Ok((f, offset, length, path))
    }

    /// `t`'s bytes: `raw_data`, the typed fields, or its range of an external file.
    pub(super) fn bytes(&mut self, t: &PayloadTensor, model: &Path) -> Result<Vec<u8>, QuantizedError> {
        if t.data_location != 1 {
            if !t.raw_data.is_empty() {
                return Ok(t.raw_data.clone());
            }
            if !t.float_data.is_empty() {
                return Ok(t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect());
            }
            // int32_data holds each (u)int8 / (u)int4 byte and each float16 as its bits.
            return Ok(match t.data_type {
                FLOAT16 => t.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
                _ => t.int32_data.iter().map(|&v| v as u8).collect(),
            });
        }
        let (file, offset, len, path) = self.external(t, model)?;
        Stored::File { file, offset, len }.read(0, len).map_err(|source| QuantizedError::Io { path, source })
    }
}

/// Where an external initializer `t` of the graph at `model` says its bytes are: the file (relative
/// to the graph's folder), offset and length.
pub(super) fn location<'a>(t: &'a PayloadTensor, model: &Path) -> Result<(&'a str, u64, usize), QuantizedError> {
    let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let bad = |message: &str| QuantizedError::Node {
        path: model.into(),
        node: t.name.clone(),
        op: "initializer".into(),
        message: message.into(),
    };
    let location = get("location").ok_or_else(|| bad("external data without a location"))?;
    let offset: u64 = get("offset").unwrap_or("0").parse().map_err(|_| bad("external data offset is not a number"))?;
    let length: usize = get("length")
        .ok_or_else(|| bad("external data without a length"))?
        .parse()
        .map_err(|_| bad("external data length is not a number"))?;
    Ok((location, offset, length))
}
