//! The f64 arbiter's matmuls: f64 activations times a weight held in f32 (the f64 precision
//! mode keeps matrices f32, [`crate::weights::Weights::matrix_dtype`]).
//!
//! Why not `x.matmul(&w.to_dtype(F64))`: every such call allocates a fresh f64 copy of the
//! weight, whose pages the kernel then faults in and zeroes, and candle upcasts a column slice
//! element by element through its strided index. At E2B width the decode steps' lm_head
//! slices (32,768 columns × 1,536 rows, 400 MB in f64, eight per step) made the upcasts about
//! half of the f64 run. Here the weight is upcast row by row into one buffer that stays
//! allocated while a [`Reuse`] scope is open (a forward pass, a generation, a logits loop), and
//! the product is the same `gemm` call candle's CPU matmul makes on such a copy: the same
//! arguments, so the same bits (a test holds them equal).

use std::cell::RefCell;

use candle_core::{DType, Layout, Storage, Tensor};

use crate::error::{Error, Result};

thread_local! {
    /// Open [`Reuse`] scopes on this thread, and the buffer they keep.
    static SCRATCH: RefCell<(usize, Vec<f64>)> = const { RefCell::new((0, Vec::new())) };
}

/// While alive, the f64 copies of weights made on this thread reuse one buffer; when the last
/// scope closes the buffer is freed (it would otherwise hold up to a vocabulary slice of the
/// lm_head, 1 GB at 12B width, for the rest of the process).
#[must_use = "the buffer is reused only while the scope is alive"]
pub struct Reuse(());

/// Opens a [`Reuse`] scope (scopes nest).
pub fn reuse() -> Reuse {
    SCRATCH.with(|s| s.borrow_mut().0 += 1);
    Reuse(())
}

impl Drop for Reuse {
    fn drop(&mut self) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.0 = s.0.saturating_sub(1);
            if s.0 == 0 {
                s.1 = Vec::new();
            }
        });
    }
}

/// `x · w` in `x`'s dtype, `w` (a weight, any strides: e.g. a column slice of a transposed
/// one) upcast to it where they differ. For `x` `[m, k]` in f64 and `w` `[k, n]` in f32 on the
/// CPU: `[m, n]` in f64, bit for bit `x.matmul(&w.to_dtype(F64))`, without that copy.
/// Elsewhere (another device or dtype pair) it is that expression.
pub(crate) fn matmul(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if w.dtype() == x.dtype() {
        return Ok(x.matmul(w)?);
    }
    if x.dtype() != DType::F64 || w.dtype() != DType::F32 || !x.device().is_cpu() || !w.device().is_cpu() {
        return Ok(x.matmul(&w.to_dtype(x.dtype())?)?);
    }
    let (m, k) = x.dims2()?;
    let (wk, n) = w.dims2()?;
    if wk != k {
        return Err(Error::Internal(format!("upcast matmul: lhs [{m}, {k}] times rhs [{wk}, {n}]")));
    }
    let x = x.contiguous()?;
    let (x_storage, x_layout) = x.storage_and_layout();
    let (w_storage, w_layout) = w.storage_and_layout();
    let (Storage::Cpu(candle_core::CpuStorage::F64(xv)), Storage::Cpu(candle_core::CpuStorage::F32(wv))) = (&*x_storage, &*w_storage)
    else {
        return Err(Error::Internal("upcast matmul: storage is not the CPU's f64 and f32".into()));
    };
    let lhs = &xv[x_layout.start_offset()..];
    if let Some(dst) = row_times_matrix(&lhs[..k.min(lhs.len())], m, wv, w_layout, n) {
        drop((x_storage, w_storage));
        return Ok(Tensor::from_vec(dst, (m, n), x.device())?);
    }
    let mut dst = vec![0f64; m * n];
    // Taken out of the cell for the call (gemm's threads may run other work on this one).
    let mut rhs = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().1));
    rhs.clear();
    let (rhs_cs, rhs_rs) = upcast(wv, w_layout, k, n, &mut rhs)?;
    // SAFETY: `lhs` holds `m · k` contiguous row-major f64 from its start (`x` is contiguous),
    // `rhs` `k · n` under the strides `upcast` returned, `dst` `m · n` row-major: the strides
    // below describe exactly those, as candle's matmul passes them.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            1,
            k as isize,
            rhs.as_ptr(),
            rhs_cs,
            rhs_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism(),
        );
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.0 > 0 && s.1.capacity() < rhs.capacity() {
            s.1 = rhs;
        }
    });
    drop((x_storage, w_storage));
    Ok(Tensor::from_vec(dst, (m, n), x.device())?)
}

/// One row `x` times a row-major `w` (`[k, n]`, unit column stride), as gemm computes it for
/// one row (its column-major matrix-vector kernel: `y = w[0]·x[0]`, then `y = fma(w[c], x[c], y)`
/// for each further row `c` of `w`, every column independently), reading the f32 weight where
/// it lies instead of an f64 copy: a decode step's matmuls. Columns are split between threads;
/// each column's sum keeps its order, so the bits are gemm's. `None` where that kernel is not
/// the one gemm would take (more rows, tiny `k`, another layout) or the CPU has no FMA.
fn row_times_matrix(x: &[f64], m: usize, data: &[f32], layout: &Layout, n: usize) -> Option<Vec<f64>> {
    let k = x.len();
    let (&[rs, 1], start) = (layout.stride(), layout.start_offset()) else { return None };
    if m != 1 || k <= 2 || n == 0 || start + (k - 1) * rs + n > data.len() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        use rayon::prelude::*;
        const BLOCK: usize = 2048;
        let mut y = vec![0f64; n];
        y.par_chunks_mut(BLOCK).enumerate().for_each(|(b, out)| {
            // SAFETY: FMA was detected above; the rows read are within `data` (checked).
            unsafe { axpy_rows(x, data, start + b * BLOCK, rs, out) }
        });
        return Some(y);
    }
    None
}

/// `out[j] = Σ_c w[c][first + j] · x[c]` in gemm's order (see [`row_times_matrix`]), `w`'s rows
/// `rs` apart from `first`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn axpy_rows(x: &[f64], data: &[f32], first: usize, rs: usize, out: &mut [f64]) {
    let cols = out.len();
    for (o, &w) in out.iter_mut().zip(&data[first..first + cols]) {
        *o = f64::from(w) * x[0];
    }
    for (c, &xc) in x.iter().enumerate().skip(1) {
        let row = &data[first + c * rs..first + c * rs + cols];
        for (o, &w) in out.iter_mut().zip(row) {
            *o = f64::from(w).mul_add(xc, *o);
        }
    }
}

/// Candle's choice of threads for its CPU matmul.
fn parallelism() -> gemm::Parallelism {
    match candle_core::utils::get_num_threads() {
        n if n > 1 => gemm::Parallelism::Rayon(n),
        _ => gemm::Parallelism::None,
    }
}

/// Appends `w` (`[k, n]` under `layout` in `data`) to `out` in f64, laid out as candle's
/// `to_dtype` copy would be: column-major where `w` is a transposed contiguous matrix (the
/// copy's transpose, as the logits head multiplies), else row-major. Returns the copy's column
/// and row strides.
fn upcast(data: &[f32], layout: &Layout, k: usize, n: usize, out: &mut Vec<f64>) -> Result<(isize, isize)> {
    let (rs, cs) = match layout.stride() {
        [rs, cs] => (*rs, *cs),
        other => return Err(Error::Internal(format!("upcast matmul: rhs strides {other:?}"))),
    };
    let start = layout.start_offset();
    let last = start + (k.max(1) - 1) * rs + (n.max(1) - 1) * cs;
    if k > 0 && n > 0 && last >= data.len() {
        return Err(Error::Internal(format!("upcast matmul: rhs layout reaches {last} of {} values", data.len())));
    }
    out.reserve(k * n);
    if rs == 1 && cs == k && n > 1 {
        out.extend(data[start..start + k * n].iter().map(|&v| f64::from(v)));
        return Ok((k as isize, 1));
    }
    for r in 0..k {
        let row = start + r * rs;
        if cs == 1 {
            out.extend(data[row..row + n].iter().map(|&v| f64::from(v)));
        } else {
            out.extend((0..n).map(|c| f64::from(data[row + c * cs])));
        }
    }
    Ok((1, n as isize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// `len` values in [-1, 1) with every bit of an f64 mantissa used (so that a product with an
    /// f32 weight is not exact and the order of the sums shows in the bits).
    fn random64(len: usize, seed: u64) -> Tensor {
        let mut s = seed;
        let v: Vec<f64> = (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(v, len, &Device::Cpu).unwrap()
    }

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Guards the claim in the module doc: the same bits as candle's matmul on an f64 copy, for
    /// a column slice of a transposed weight (the lm_head's and a linear's layout), with one row
    /// (a decode step: gemm's matrix-vector path) and many (a prefill), inside and outside a
    /// [`Reuse`] scope.
    #[test]
    fn equals_candles_matmul_on_an_f64_copy_bit_for_bit() {
        let dev = Device::Cpu;
        let (k, out) = (96, 300);
        let w_t = Tensor::from_vec(random(k * out, 1), (k, out), &dev).unwrap();
        for m in [1, 7, 70] {
            let x = random64(m * k, m as u64 + 2).reshape((m, k)).unwrap();
            for (start, cols) in [(0, out), (13, 65), (250, 50)] {
                let w = w_t.narrow(1, start, cols).unwrap();
                let want = x.matmul(&w.to_dtype(DType::F64).unwrap()).unwrap().to_vec2::<f64>().unwrap();
                let got = matmul(&x, &w).unwrap().to_vec2::<f64>().unwrap();
                let scoped = {
                    let _scope = reuse();
                    matmul(&x, &w).unwrap();
                    matmul(&x, &w).unwrap().to_vec2::<f64>().unwrap()
                };
                for (a, b) in [(&want, &got), (&want, &scoped)] {
                    let bits = |v: &Vec<Vec<f64>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(a), bits(b), "m {m}, columns {start}..{}", start + cols);
                }
            }
        }
        // One row against more columns than one thread's block of the one-row path.
        let wide = Tensor::from_vec(random(64 * 5000, 11), (64, 5000), &dev).unwrap();
        let x = random64(64, 12).reshape((1, 64)).unwrap();
        let w = wide.narrow(1, 7, 4990).unwrap();
        let want = x.matmul(&w.to_dtype(DType::F64).unwrap()).unwrap().to_vec2::<f64>().unwrap();
        assert_eq!(want, matmul(&x, &w).unwrap().to_vec2::<f64>().unwrap());
        // A transposed (column-major) rhs, as the logits head passes its rows.
        let rows = Tensor::from_vec(random(40 * k, 9), (40, k), &dev).unwrap();
        let x = random64(3 * k, 10).reshape((3, k)).unwrap();
        let want = x.matmul(&rows.to_dtype(DType::F64).unwrap().t().unwrap()).unwrap().to_vec2::<f64>().unwrap();
        let got = matmul(&x, &rows.t().unwrap()).unwrap().to_vec2::<f64>().unwrap();
        assert_eq!(want, got);
        SCRATCH.with(|s| assert!(s.borrow().1.capacity() == 0, "the buffer outlived its scopes"));
    }

    /// A mismatched inner dimension is an error, not a read past the weight.
    #[test]
    fn refuses_mismatched_operands() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 5), DType::F64, &dev).unwrap();
        let w = Tensor::zeros((4, 3), DType::F32, &dev).unwrap();
        assert!(matmul(&x, &w).is_err());
    }
}
