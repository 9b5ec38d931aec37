//! Decoding stored tensor bytes (f32, f16, bf16, little-endian) into f32 buffers, row-major or
//! transposed, in bands whose source pages can be released as soon as they are converted.

use rayon::prelude::*;

/// Element order of a decoded tensor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Order {
    RowMajor,
    /// Stored `[rows, cols]`, produced `[cols, rows]`.
    Transposed {
        rows: usize,
        cols: usize,
    },
}

/// A little-endian stored element type.
pub(crate) trait Elem {
    const SIZE: usize;
    fn get(bytes: &[u8], i: usize) -> f32;
}

pub(crate) struct F32Le;
pub(crate) struct F16Le;
pub(crate) struct Bf16Le;

impl Elem for F32Le {
    const SIZE: usize = 4;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    }
}

impl Elem for F16Le {
    const SIZE: usize = 2;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32()
    }
}

impl Elem for Bf16Le {
    const SIZE: usize = 2;
    #[inline(always)]
    fn get(b: &[u8], i: usize) -> f32 {
        half::bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32()
    }
}

/// Elements decoded between two releases of the mapped pages they came from (16 MiB of f32).
const BAND: usize = 1 << 22;

/// Upcasts `bytes` (`out.len()` elements of `E`) into `out` in `order`, in parallel, band by
/// band; after each band `release(byte_offset, byte_len)` is told which source bytes are done.
/// Why bands: without them the pages of the tensor being decoded stay resident next to its f32
/// copy, so peak RSS exceeds the weights by the largest tensor (the PLE table: 268 MiB on the
/// benchmark model, gigabytes on real ones).
pub(crate) fn decode<E: Elem>(bytes: &[u8], out: &mut [f32], order: Order, release: &dyn Fn(usize, usize)) {
    decode_banded::<E>(bytes, out, order, release, BAND)
}

fn decode_banded<E: Elem>(bytes: &[u8], out: &mut [f32], order: Order, release: &dyn Fn(usize, usize), band: usize) {
    debug_assert_eq!(bytes.len(), out.len() * E::SIZE);
    const B: usize = 32;
    match order {
        Order::RowMajor => {
            for (k, dst) in out.chunks_mut(band).enumerate() {
                let start = k * band;
                dst.par_chunks_mut(1 << 16).enumerate().for_each(|(k, part)| {
                    let base = start + (k << 16);
                    for (i, o) in part.iter_mut().enumerate() {
                        *o = E::get(bytes, base + i);
                    }
                });
                release(start * E::SIZE, dst.len() * E::SIZE);
            }
        }
        Order::Transposed { rows, cols } => {
            // Stored rows in bands; within a band each task writes B output rows (= B stored
            // columns), walking the band's stored rows in blocks of B so that reads and writes
            // stay in cache.
            let band_rows = (band / cols.max(1)).max(B) / B * B;
            for r_start in (0..rows).step_by(band_rows) {
                let r_end = (r_start + band_rows).min(rows);
                out.par_chunks_mut(rows * B).enumerate().for_each(|(k, part)| {
                    let c0 = k * B;
                    let c1 = (c0 + B).min(cols);
                    for r0 in (r_start..r_end).step_by(B) {
                        for r in r0..(r0 + B).min(r_end) {
                            for c in c0..c1 {
                                part[(c - c0) * rows + r] = E::get(bytes, r * cols + c);
                            }
                        }
                    }
                });
                release(r_start * cols * E::SIZE, (r_end - r_start) * cols * E::SIZE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Guards the banded decode: every order gives the same values as an unbanded decode, and
    /// the released byte ranges cover the tensor exactly once, in order.
    #[test]
    fn banded_decode_equals_whole_and_releases_everything() {
        let (n, rows, cols) = (3, 70, 45);
        let vals: Vec<f32> = (0..n * rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        for order in [Order::RowMajor, Order::Transposed { rows: n * rows, cols }] {
            let mut whole = vec![0f32; vals.len()];
            decode_banded::<F32Le>(&bytes, &mut whole, order, &|_, _| {}, usize::MAX / 2);
            let released = RefCell::new(Vec::new());
            let mut banded = vec![0f32; vals.len()];
            decode_banded::<F32Le>(&bytes, &mut banded, order, &|off, len| released.borrow_mut().push((off, len)), 100);
            assert_eq!(whole, banded, "{order:?}");
            let mut next = 0;
            for (off, len) in released.into_inner() {
                assert_eq!(off, next, "{order:?}: gap or overlap");
                next += len;
            }
            assert_eq!(next, bytes.len(), "{order:?}: not all bytes released");
        }
        // And the transposes are transposes.
        let mut t = vec![0f32; rows * cols];
        decode_banded::<F32Le>(&bytes[..rows * cols * 4], &mut t, Order::Transposed { rows, cols }, &|_, _| {}, 100);
        assert_eq!(t[5 * rows + 7], vals[7 * cols + 5]);
    }
}
