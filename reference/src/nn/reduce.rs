//! Row sums in the order PyTorch's CPU kernels add, so that f32 reductions round like HF's.
//!
//! Why: the fixtures are ill-conditioned enough that the *order* in which an RMSNorm adds its
//! squares (one ulp here and there) moves the logits by ~1e-4. Any order is an equally valid
//! f32 sum; this one is `at::native::cascade_sum` for a contiguous inner reduction
//! (`vectorized_inner_sum` → `row_sum` → `multi_row_sum`, aten/src/ATen/native/cpu/SumKernel.cpp)
//! as torch 2.15 runs it on x86-64: 8-lane (256-bit) vector accumulators, 4-way ILP, a 4-level
//! cascade, then the scalar tail and the 8 lanes added left to right; rows shorter than one
//! vector use the scalar 4-way ILP sum. Measured bit-exact against `torch.sum` for row lengths
//! 2–6912 (also under torch's AVX-512 dispatch, where this kernel still adds 8 lanes at a time).

/// Lanes of the vector accumulator of torch's float sum kernel.
const LANES: usize = 8;
/// `row_sum`'s `ilp_factor`.
const ILP: usize = 4;
/// `multi_row_sum`'s `num_levels`.
const LEVELS: usize = 4;

fn add<const L: usize>(a: &mut [f32; L], b: &[f32; L]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

fn load<const L: usize>(xs: &[f32], vec_index: usize) -> [f32; L] {
    let mut v = [0.0; L];
    v.copy_from_slice(&xs[vec_index * L..(vec_index + 1) * L]);
    v
}

fn ceil_log2(x: usize) -> usize {
    if x <= 1 {
        0
    } else {
        (usize::BITS - (x - 1).leading_zeros()) as usize
    }
}

/// `multi_row_sum<acc, ILP>` over `size` groups of `ILP` consecutive `L`-lane loads.
fn multi_row_sum<const L: usize>(xs: &[f32], size: usize) -> [[f32; L]; ILP] {
    let level_power = 4.max(ceil_log2(size) / LEVELS);
    let level_step = 1usize << level_power;
    let level_mask = level_step - 1;
    let mut acc = [[[0.0f32; L]; ILP]; LEVELS];
    let mut i = 0;
    while i + level_step <= size {
        for _ in 0..level_step {
            for (k, a) in acc[0].iter_mut().enumerate() {
                add(a, &load::<L>(xs, i * ILP + k));
            }
            i += 1;
        }
        for j in 1..LEVELS {
            let (lower, upper) = acc.split_at_mut(j);
            for (up, low) in upper[0].iter_mut().zip(lower[j - 1].iter_mut()) {
                add(up, low);
                *low = [0.0; L];
            }
            let mask = level_mask << (j * level_power);
            if i & mask != 0 {
                break;
            }
        }
    }
    while i < size {
        for (k, a) in acc[0].iter_mut().enumerate() {
            add(a, &load::<L>(xs, i * ILP + k));
        }
        i += 1;
    }
    let (first, rest) = acc.split_at_mut(1);
    for level in rest.iter() {
        for (a, u) in first[0].iter_mut().zip(level) {
            add(a, u);
        }
    }
    first[0]
}

/// `row_sum<acc, L-lane load>` over the first `n` loads of `xs`.
fn row_sum<const L: usize>(xs: &[f32], n: usize) -> [f32; L] {
    let size_ilp = n / ILP;
    let mut partial = multi_row_sum::<L>(xs, size_ilp);
    for i in size_ilp * ILP..n {
        add(&mut partial[0], &load::<L>(xs, i));
    }
    for k in 1..ILP {
        let p = partial[k];
        add(&mut partial[0], &p);
    }
    partial[0]
}

/// Sum of `xs` in torch's `cascade_sum` order (vectorised inner sum when the row has at
/// least one full vector, `scalar_inner_sum` otherwise).
pub(crate) fn torch_sum(xs: &[f32]) -> f32 {
    if xs.len() < LANES {
        return row_sum::<1>(xs, xs.len())[0];
    }
    let n_vec = xs.len() / LANES;
    let lanes = row_sum::<LANES>(xs, n_vec);
    // scalar tail first, then the lanes left to right
    let mut total = 0.0f32;
    for &x in &xs[n_vec * LANES..] {
        total += x;
    }
    for lane in lanes {
        total += lane;
    }
    total
}

/// `RowwiseMoments`' chunk length in vectors (`kChunkSize`).
const MOMENT_CHUNK: usize = 16;

/// Welford moments `(count, mean, M2)` of one accumulator lane.
#[derive(Clone, Copy, Default)]
struct Moments {
    n: usize,
    m1: f32,
    m2: f32,
}

impl Moments {
    /// `AddMoments`/`AddMomentsVec`: merge `add` into `self` (the compiler contracts
    /// `m1 += c·δ` and `m2_add + δ²·c·n` into FMAs; measured).
    fn absorb(&mut self, add: Moments) {
        let n = self.n + add.n;
        let c = if n == 0 { 0.0 } else { add.n as f32 / n as f32 };
        let delta = add.m1 - self.m1;
        self.m1 = c.mul_add(delta, self.m1);
        self.m2 += (delta * delta * c).mul_add(self.n as f32, add.m2);
        self.n = n;
    }
}

/// Mean and biased variance of `xs` as torch's `RowwiseMoments` computes them
/// (aten/src/ATen/native/cpu/moments_utils.h: Welford per 8-lane accumulator over chunks of 16
/// vectors, chunks merged in a binary cascade, a scalar Welford tail, then the lanes merged
/// into the tail). Measured bit-exact against `torch.native_layer_norm` for rows of 8 to 129
/// values (one chunk plus tail — every LayerNorm of the fixtures); longer rows merge chunks,
/// and rows under 8 values take a path, that are close to but not always exactly torch's.
pub(crate) fn torch_moments(xs: &[f32]) -> (f32, f32) {
    let n_vec = xs.len() / LANES;
    let n_chunks = n_vec.div_ceil(MOMENT_CHUNK);
    let depth = ceil_log2(n_chunks).max(1);
    let mut stack = vec![[Moments::default(); LANES]; depth];
    let inv: Vec<f32> = (0..MOMENT_CHUNK).map(|i| 1.0 / (i + 1) as f32).collect();
    for chunk in 0..n_chunks {
        let first = chunk * MOMENT_CHUNK;
        let count = MOMENT_CHUNK.min(n_vec - first);
        let mut acc = [Moments::default(); LANES];
        for lane in 0..LANES {
            let (mut m1, mut m2) = (0.0f32, 0.0f32);
            for (j, c) in inv.iter().enumerate().take(count) {
                let x = xs[(first + j) * LANES + lane];
                let d = x - m1;
                m1 = d.mul_add(*c, m1);
                m2 = d.mul_add(x - m1, m2);
            }
            acc[lane] = Moments { n: count, m1, m2 };
        }
        for lane in 0..LANES {
            stack[0][lane].absorb(acc[lane]);
        }
        let mut mask = chunk + 1;
        let mut j = 1;
        while j < depth && mask & 1 == 0 {
            let lower = stack[j - 1];
            for lane in 0..LANES {
                stack[j][lane].absorb(lower[lane]);
            }
            stack[j - 1] = [Moments::default(); LANES];
            mask >>= 1;
            j += 1;
        }
    }
    for j in 1..depth {
        let upper = stack[j];
        for lane in 0..LANES {
            stack[0][lane].absorb(upper[lane]);
        }
    }
    let mut total = Moments::default();
    for &x in &xs[n_vec * LANES..] {
        let d = x - total.m1;
        total.n += 1;
        total.m1 += d / total.n as f32;
        total.m2 = d.mul_add(x - total.m1, total.m2);
    }
    for lane in stack[0] {
        total.absorb(lane);
    }
    (total.m1, total.m2 / xs.len().max(1) as f32)
}
