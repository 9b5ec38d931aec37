//! A quantized weight's values from its payload, in the checkpoint's layout, and a code
//! matrix's scales.

use std::path::Path;
use std::sync::Arc;

use onnx_parity_reference::weights::OverrideData;

use super::error::QuantizedError;
use super::external::{ExternalData, Payload};
use super::fused::RowRange;
use super::graph::{attr, PayloadGraph};
use super::payload::{decode_floats, element, GatherRows, MatMulNBitsRows, Stored};
use super::weight::{QuantOp, QuantizedWeight, FLOAT, FLOAT16, INT4, INT8};

impl PayloadGraph {
    /// A `[K, N]` code matrix's scales, one per output column (or one for the whole matrix).
    pub(super) fn weight_scales(&self, w: &QuantizedWeight, path: &Path, data: &mut ExternalData) -> Result<Vec<f32>, QuantizedError> {
        let bad = |message: String| QuantizedError::Node { path: path.into(), node: w.node.clone(), op: w.op.as_str().into(), message };
        let parts = w.parts.as_ref().ok_or_else(|| bad("no code matrix recorded".into()))?;
        let t = self.init(&parts.scale).ok_or_else(|| bad(format!("`{}` is not an initializer", parts.scale)))?;
        let scales = decode_floats(&data.bytes(t, path)?, t.data_type == FLOAT16);
        if scales.len() != 1 && (parts.axis != 1 || parts.block != 0 || scales.len() != w.shape[0]) {
            return Err(bad(format!(
                "{} weight scales along axis {}: an integer GEMM's weight has one per output column or one",
                scales.len(),
                parts.axis
            )));
        }
        Ok(scales)
    }

    /// `w`'s values in the checkpoint's layout: its packed payload, dequantized by row when read
    /// (MatMulNBits, GatherBlockQuantized), or dequantized now (DequantizeLinear, transposed).
    pub(super) fn dequantize(&self, w: &QuantizedWeight, path: &Path, data: &mut ExternalData) -> Result<OverrideData, QuantizedError> {
        let node = self.nodes.iter().find(|n| n.name == w.node).ok_or_else(|| QuantizedError::Node {
            path: path.into(),
            node: w.node.clone(),
            op: w.op.as_str().into(),
            message: "gone from the graph".into(),
        })?;
        let bad = |message: String| QuantizedError::Node { path: path.into(), node: w.node.clone(), op: w.op.as_str().into(), message };
        let payload = |i: usize, data: &mut ExternalData| -> Result<Option<Payload>, QuantizedError> {
            let Some(name) = node.input.get(i).filter(|s| !s.is_empty()) else { return Ok(None) };
            let t = self.init(name).ok_or_else(|| bad(format!("input {i} `{name}` is not an initializer")))?;
            Ok(Some((data.bytes(t, path)?, t.data_type, t.dims.clone())))
        };
        // MatMulNBits matrices and GatherBlockQuantized tables are read by row from where they
        // are stored (the external-data file) when a model dequantizes them: never whole in memory.
        let stored = |i: usize, data: &mut ExternalData| -> Result<Option<(Stored, i32)>, QuantizedError> {
            let Some(name) = node.input.get(i).filter(|s| !s.is_empty()) else { return Ok(None) };
            let t = self.init(name).ok_or_else(|| bad(format!("input {i} `{name}` is not an initializer")))?;
            Ok(Some((data.stored(t, path)?, t.data_type)))
        };
        // Scales are float32 or float16: the bytes of one.
        let scale_width = |ty: i32, what: &str| -> Result<usize, QuantizedError> {
            match ty {
                FLOAT => Ok(4),
                FLOAT16 => Ok(2),
                t => Err(bad(format!("{what} of type {}: expected float32 or float16", crate::onnx::proto::elem_type_name(t)))),
            }
        };
        let [rows, cols] = w.shape;
        // A fused matrix is read whole and this part taken as its rows.
        let rows = if w.first_row.is_some() { attr(node, "N").unwrap_or(0) as usize } else { rows };
        match w.op {
            QuantOp::MatMulNBits => {
                let (b, _) = stored(1, data)?.ok_or_else(|| bad("no B".into()))?;
                let (scales, sty) = stored(2, data)?.ok_or_else(|| bad("no scales".into()))?;
                let scale_bytes = scale_width(sty, "scales")?;
                let (bits, block) = (w.bits as usize, w.block_size);
                let n_blocks = cols.div_ceil(block);
                let blob = block * bits / 8;
                if b.len() != rows * n_blocks * blob || scales.len() != rows * n_blocks * scale_bytes {
                    return Err(bad(format!(
                        "B has {} bytes and scales {} bytes; [N {rows}, K {cols}] in blocks of {block} at {bits} bits needs {} and {} values",
                        b.len(),
                        scales.len(),
                        rows * n_blocks * blob,
                        rows * n_blocks
                    )));
                }
                let zp_row = (n_blocks * bits).div_ceil(8);
                let zps = match stored(3, data)? {
                    Some((z, _)) if z.len() == rows * zp_row => Some(z),
                    Some((z, _)) => return Err(bad(format!("zero_points has {} bytes; {rows} rows of {zp_row} expected", z.len()))),
                    None => None,
                };
                let whole = Arc::new(MatMulNBitsRows { b, scales, scale_f16: sty == FLOAT16, zps, cols, bits, block });
                Ok(OverrideData::Packed(match w.first_row {
                    Some(start) => Arc::new(RowRange { inner: whole, start }),
                    None => whole,
                }))
            }
            QuantOp::GatherBlockQuantized => {
                let name = node.input.first().map_or("", String::as_str);
                let (table, _) = self.table(name).ok_or_else(|| bad(format!("input 0 (data) `{name}` is not an initializer")))?;
                let (q, qty) = (data.stored(table, path)?, table.data_type);
                let (scales, sty) = stored(2, data)?.ok_or_else(|| bad("no scales".into()))?;
                let scale_bytes = scale_width(sty, "scales")?;
                let block = w.block_size;
                let n_blocks = cols.div_ceil(block);
                if scales.len() != rows * n_blocks * scale_bytes {
                    return Err(bad(format!(
                        "scales has {} bytes; [{rows}, {cols}] in blocks of {block} needs {} values",
                        scales.len(),
                        rows * n_blocks
                    )));
                }
                let signed = qty == INT4 || qty == INT8;
                let zps = payload(3, data)?.map(|(z, _, _)| z);
                if let Some(z) = &zps {
                    let need = (rows * n_blocks * w.bits as usize).div_ceil(8);
                    if z.len() != need {
                        return Err(bad(format!(
                            "zero_points has {} bytes; {} blocks at {} bits need {need}",
                            z.len(),
                            rows * n_blocks,
                            w.bits
                        )));
                    }
                }
                let need = (rows * cols * w.bits as usize).div_ceil(8);
                if q.len() != need {
                    return Err(bad(format!("data has {} bytes; [{rows}, {cols}] at {} bits needs {need}", q.len(), w.bits)));
                }
                Ok(OverrideData::Packed(Arc::new(GatherRows {
                    q,
                    signed,
                    bits: w.bits as usize,
                    scales,
                    scale_f16: sty == FLOAT16,
                    zps,
                    cols,
                    block,
                })))
            }
            QuantOp::DequantizeLinear
            | QuantOp::MatMulInteger
            | QuantOp::DynamicQuantizeMatMul
            | QuantOp::MatMulIntegerToFloat
            | QuantOp::QLinearMatMul
            | QuantOp::GatherDequantize => {
                let parts = w.parts.as_ref().ok_or_else(|| bad("no code matrix recorded".into()))?;
                let named = |name: &str, data: &mut ExternalData| -> Result<Payload, QuantizedError> {
                    let t = self.init(name).ok_or_else(|| bad(format!("`{name}` is not an initializer")))?;
                    Ok((data.bytes(t, path)?, t.data_type, t.dims.clone()))
                };
                let (q, qty, _) = named(&parts.q, data)?;
                let (s, sty, sdims) = named(&parts.scale, data)?;
                scale_width(sty, "the scale")?;
                let scales = decode_floats(&s, sty == FLOAT16);
                let zps = parts.zero_point.as_deref().map(|z| named(z, data)).transpose()?.map(|(z, _, _)| z);
                // Stored `[K, N]` for a matmul (the checkpoint's `[N, K]` transposed), else as is.
                let (k_dim, n_dim) = if parts.transposed { (cols, rows) } else { (rows, cols) };
                let axis = parts.axis;
                let signed = qty == INT4 || qty == INT8;
                let bits = w.bits as usize;
                let q_at = |i: usize| element(&q, bits, signed, i);
                let zp_at = |i: usize| zps.as_ref().map_or(0, |z| element(z, bits, signed, i));
                let block = parts.block;
                let per_tensor = sdims.iter().product::<i64>() == 1;
                let scale_index = |k: usize, n: usize| -> Option<usize> {
                    match (sdims.len(), axis, block) {
                        _ if per_tensor => Some(0),
                        (1, 1, 0) => Some(n),
                        (1, 0, 0) => Some(k),
                        (2, 0, b) if b > 0 => Some((k / b) * n_dim + n),
                        (2, 1, b) if b > 0 => Some(k * n_dim.div_ceil(b) + n / b),
                        _ => None,
                    }
                };
                let mut out = vec![0f32; rows * cols];
                for k in 0..k_dim {
                    for n in 0..n_dim {
                        let si = scale_index(k, n).filter(|&i| i < scales.len()).ok_or_else(|| {
                            bad(format!("scale of shape {sdims:?} with axis {axis}, block_size {block} for codes [{k_dim}, {n_dim}]"))
                        })?;
                        let i = k * n_dim + n;
                        let v = (q_at(i) - zp_at(si)) as f32 * scales[si];
                        if parts.transposed {
                            out[n * cols + k] = v;
                        } else {
                            out[i] = v;
                        }
                    }
                }
                Ok(OverrideData::Dense(Arc::new(out)))
            }
        }
    }
}
