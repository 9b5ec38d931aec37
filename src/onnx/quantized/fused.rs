//! Quantized weights an exporter stores fused or shared: ORT GenAI's model builder packs each
//! layer's q, k and v projections into one MatMulNBits (`attn.qkv_proj`, its output split by a
//! `Split` whose sizes are a constant) and gathers the tied token table from the lm_head's packed
//! payload reshaped to `[vocab, bytes]`. The reference has one parameter per projection, so a
//! fused matrix is read as row ranges of one packed reader.

use std::sync::Arc;

use onnx_parity_reference::weights::DequantRows;

/// Rows `start..` of another reader: one projection's part of a fused matrix.
#[derive(Debug)]
pub(super) struct RowRange {
    pub(super) inner: Arc<dyn DequantRows>,
    pub(super) start: usize,
}

impl DequantRows for RowRange {
    fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> std::io::Result<()> {
        self.inner.rows_into(self.start + start, count, out)
    }
}

/// The projections a fused `qkv_proj` key stands for, in the order its rows hold them.
pub(super) fn unfused_keys(key: &str) -> Option<[String; 3]> {
    key.contains("qkv_proj.").then(|| ["q_proj.", "k_proj.", "v_proj."].map(|p| key.replacen("qkv_proj.", p, 1)))
}

/// Little-endian int64 values of a constant's `raw_data` (or its `int64_data`).
pub(super) fn int64s(raw: &[u8], int64_data: &[i64]) -> Vec<i64> {
    if raw.is_empty() {
        return int64_data.to_vec();
    }
    raw.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Counting(usize);
    impl DequantRows for Counting {
        fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> std::io::Result<()> {
            for r in 0..count {
                for c in 0..self.0 {
                    out[r * self.0 + c] = (start + r) as f32;
                }
            }
            Ok(())
        }
    }

    /// Guards the row offset of a part and the key rule.
    #[test]
    fn parts_of_a_fused_matrix() {
        let part = RowRange { inner: Arc::new(Counting(2)), start: 5 };
        let mut out = vec![0.0; 4];
        part.rows_into(1, 2, &mut out).expect("rows");
        assert_eq!(out, [6.0, 6.0, 7.0, 7.0]);
        let keys = unfused_keys("layers.2.self_attn.qkv_proj.weight").expect("fused");
        assert_eq!(keys[2], "layers.2.self_attn.v_proj.weight");
        assert!(unfused_keys("layers.2.self_attn.q_proj.weight").is_none());
        assert_eq!(int64s(&[128, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0], &[]), [128, 32]);
    }
}
