//! The packed payloads of a quantized build's weights and where their bytes are: MatMulNBits
//! matrices (read into memory, dequantized once as a model loads them) and GatherBlockQuantized
//! tables (read by row from their external-data file as a prompt gathers them), each
//! dequantized by row ([`DequantRows`]). Nothing here knows the graph: [`super`] reads it.

use std::sync::Arc;

use onnx_parity_reference::weights::DequantRows;
use rayon::prelude::*;

/// Element `i` of `bits`-wide values packed little-end first in `bytes`, sign-extended when
/// `signed` ((u)int4 two a byte, (u)int8 one).
pub(super) fn element(bytes: &[u8], bits: usize, signed: bool, i: usize) -> i32 {
    let v = unpack(bytes, bits, i) as i32;
    if signed {
        let shift = 32 - bits as i32;
        v << shift >> shift
    } else {
        v
    }
}

/// A MatMulNBits `B` (`[N, n_blocks, block·bits/8]`, each block padded to whole bytes), its
/// scales and zero points (each row's packed and padded to whole bytes; absent: 2^(bits−1)):
/// `W[n, k] = (q − zp) · scale[n, k / block]`. Read by bands of rows from where they are
/// stored, as the model that loads it dequantizes it.
#[derive(Debug)]
pub(super) struct MatMulNBitsRows {
    pub(super) b: Stored,
    pub(super) scales: Stored,
    pub(super) scale_f16: bool,
    pub(super) zps: Option<Stored>,
    pub(super) cols: usize,
    pub(super) bits: usize,
    pub(super) block: usize,
}

impl DequantRows for MatMulNBitsRows {
    fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> std::io::Result<()> {
        let (cols, bits, block) = (self.cols, self.bits, self.block);
        let n_blocks = cols.div_ceil(block);
        let blob = block * bits / 8;
        let zp_row = (n_blocks * bits).div_ceil(8);
        let default_zp = 1u32 << (bits - 1);
        // Each row's blocks, scales and zero points are contiguous: one read of each per call.
        let b = self.b.read(start * n_blocks * blob, count * n_blocks * blob)?;
        let scales = read_floats(&self.scales, self.scale_f16, start * n_blocks, count * n_blocks)?;
        let zps = self.zps.as_ref().map(|z| z.read(start * zp_row, count * zp_row)).transpose()?;
        // Rows side by side; each value `(q − zp) · scale` in f32 however it is reached.
        out.par_chunks_mut(cols.max(1)).take(count).enumerate().for_each(|(i, row)| {
            for blk in 0..n_blocks {
                let scale = scales[i * n_blocks + blk];
                let zp = match &zps {
                    Some(z) => unpack(&z[i * zp_row..(i + 1) * zp_row], bits, blk),
                    None => default_zp,
                } as f32;
                let bytes = &b[(i * n_blocks + blk) * blob..(i * n_blocks + blk + 1) * blob];
                let values = &mut row[blk * block..cols.min((blk + 1) * block)];
                if bits == 4 {
                    // Two a byte, the low nibble first ([`unpack`]).
                    for (pair, &byte) in values.chunks_mut(2).zip(bytes) {
                        pair[0] = ((byte & 0x0f) as f32 - zp) * scale;
                        if let Some(v) = pair.get_mut(1) {
                            *v = ((byte >> 4) as f32 - zp) * scale;
                        }
                    }
                } else {
                    for (k, v) in values.iter_mut().enumerate() {
                        *v = (unpack(bytes, bits, k) as f32 - zp) * scale;
                    }
                }
            }
        });
        Ok(())
    }
}

/// Values `start..start + n` of a stored float32 (or float16) array.
fn read_floats(stored: &Stored, f16: bool, start: usize, n: usize) -> std::io::Result<Vec<f32>> {
    let w = if f16 { 2 } else { 4 };
    Ok(decode_floats(&stored.read(start * w, n * w)?, f16))
}

/// Little-endian float32 (or float16) values.
pub(super) fn decode_floats(raw: &[u8], f16: bool) -> Vec<f32> {
    if f16 {
        raw.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
    } else {
        raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
}

/// A GatherBlockQuantized table (`[rows, cols]` packed row-major, quantized along its columns in
/// blocks; zero points packed over the blocks, absent: 0 for (u)int4 data typed signed, else
/// 2^(bits−1)): `W[r, c] = (q − zp) · scale[r, c / block]`. Data and scales are read by row from
/// where they are stored.
#[derive(Debug)]
pub(super) struct GatherRows {
    pub(super) q: Stored,
    pub(super) signed: bool,
    pub(super) bits: usize,
    pub(super) scales: Stored,
    pub(super) scale_f16: bool,
    pub(super) zps: Option<Vec<u8>>,
    pub(super) cols: usize,
    pub(super) block: usize,
}

impl DequantRows for GatherRows {
    fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> std::io::Result<()> {
        let (cols, block, bits) = (self.cols, self.block, self.bits);
        let n_blocks = cols.div_ceil(block);
        let default_zp = if self.signed { 0 } else { 1i32 << (bits - 1) };
        // The packed bytes of elements start·cols .. (start+count)·cols, and their scales.
        let (e0, e1) = (start * cols, (start + count) * cols);
        let b0 = e0 * bits / 8;
        let q = self.q.read(b0, (e1 * bits).div_ceil(8) - b0)?;
        let first = b0 * 8 / bits;
        let scales = read_floats(&self.scales, self.scale_f16, start * n_blocks, count * n_blocks)?;
        // Rows side by side, each block's zero point and scale looked up once.
        out.par_chunks_mut(cols.max(1)).take(count).enumerate().for_each(|(i, row)| {
            let r = start + i;
            for (b, values) in row.chunks_mut(block.max(1)).enumerate() {
                let zp = self.zps.as_ref().map_or(default_zp, |z| unpack(z, bits, r * n_blocks + b) as i32);
                let scale = scales[i * n_blocks + b];
                let first_element = r * cols + b * block - first;
                for (k, v) in values.iter_mut().enumerate() {
                    *v = (element(&q, bits, self.signed, first_element + k) - zp) as f32 * scale;
                }
            }
        });
        Ok(())
    }
}

/// An initializer's bytes where they are: in memory (inline in the graph) or a range of an
/// external-data file, read on demand.
#[derive(Debug)]
pub(super) enum Stored {
    Memory(Vec<u8>),
    File { file: Arc<std::fs::File>, offset: u64, len: usize },
}

impl Stored {
    pub(super) fn len(&self) -> usize {
        match self {
            Stored::Memory(b) => b.len(),
            Stored::File { len, .. } => *len,
        }
    }

    /// Bytes `start..start + n`.
    pub(super) fn read(&self, start: usize, n: usize) -> std::io::Result<Vec<u8>> {
        if start + n > self.len() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("bytes {start}..{} of {}", start + n, self.len())));
        }
        match self {
            Stored::Memory(b) => Ok(b[start..start + n].to_vec()),
            Stored::File { file, offset, .. } => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; n];
                file.read_exact_at(&mut buf, offset + start as u64)?;
                Ok(buf)
            }
        }
    }
}

/// Element `i` of `bits`-wide unsigned values packed little-end first in `bytes`.
pub(super) fn unpack(bytes: &[u8], bits: usize, i: usize) -> u32 {
    let per = 8 / bits;
    let byte = bytes.get(i / per).copied().unwrap_or(0);
    ((byte >> ((i % per) * bits)) & ((1u16 << bits) - 1) as u8) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the nibble order: element 2i in the low nibble, 2i+1 in the high one.
    #[test]
    fn nibbles_unpack_low_first() {
        assert_eq!(unpack(&[0x21, 0x43], 4, 0), 1);
        assert_eq!(unpack(&[0x21, 0x43], 4, 1), 2);
        assert_eq!(unpack(&[0x21, 0x43], 4, 3), 4);
        assert_eq!(unpack(&[0b11_10_01_00], 2, 2), 2);
        assert_eq!(unpack(&[200], 8, 0), 200);
        assert_eq!(element(&[0xF1], 4, true, 1), -1);
        assert_eq!(element(&[0xF1], 4, false, 1), 15);
        assert_eq!(element(&[0x80], 8, true, 0), -128);
    }

    /// Guards the by-row dequantization: MatMulNBits with zero points and a short last block
    /// (K 5, block 4: each block padded to 2 bytes), and a signed int4 table without zero points,
    /// any row range giving the rows of the whole.
    #[test]
    fn packed_rows_dequantize_by_row() {
        // Row 0: q 1..=5 (blocks [1,2,3,4] [5]), zp 8 and 2, scales 0.5 and 2.
        // Row 1: q 15,0,0,0 | 9, zp 0 and 1, scales 1 and -1.
        let b = Stored::Memory(vec![0x21, 0x43, 0x05, 0x00, 0x0F, 0x00, 0x09, 0x00]);
        let scales = Stored::Memory([0.5f32, 2.0, 1.0, -1.0].iter().flat_map(|v| v.to_le_bytes()).collect());
        let zps = Some(Stored::Memory(vec![0x28, 0x10]));
        let m = MatMulNBitsRows { b, scales, scale_f16: false, zps, cols: 5, bits: 4, block: 4 };
        let mut all = vec![0f32; 10];
        m.rows_into(0, 2, &mut all).expect("rows");
        assert_eq!(all, vec![-3.5, -3.0, -2.5, -2.0, 6.0, 15.0, 0.0, 0.0, 0.0, -8.0]);
        let mut second = vec![0f32; 5];
        m.rows_into(1, 1, &mut second).expect("rows");
        assert_eq!(second, all[5..]);
        let scales = Stored::Memory([0.5f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect());
        let g = GatherRows {
            q: Stored::Memory(vec![0xF1, 0x7A]),
            signed: true,
            bits: 4,
            scales,
            scale_f16: false,
            zps: None,
            cols: 2,
            block: 2,
        };
        let mut rows = vec![0f32; 4];
        g.rows_into(0, 2, &mut rows).expect("rows");
        assert_eq!(rows, vec![0.5, -0.5, -12.0, 14.0]);
        let mut second = vec![0f32; 2];
        g.rows_into(1, 1, &mut second).expect("rows");
        assert_eq!(second, rows[2..]);
        // A row range past the stored bytes is an error, not zeros.
        assert!(g.rows_into(1, 2, &mut [0f32; 4]).is_err());
    }
}
