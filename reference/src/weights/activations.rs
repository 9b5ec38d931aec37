//! How a quantized export rounds a matmul's activations, and that rounding done by the reference,
//! so that it computes what the export's kernels compute (ONNX Runtime 1.31.1's CPU EP; the
//! recipe, with source lines, in `shared/research/activation-quantization.md` §0):
//!
//! - **MLAS's int8 blocks** ([`ActivationQuant::Blocks`]): a MatMulNBits at `accuracy_level` 4
//!   quantizes each row's blocks symmetrically, `scale = amax / 127`, `q = rne(x · (127 / amax))`.
//! - **DynamicQuantizeLinear** ([`ActivationQuant::Dynamic`]): the whole tensor to asymmetric
//!   uint8 from its own range with 0 included, `scale = (max − min) / 255` (1 for a constant
//!   tensor), `zp = rne(clamp(−min / scale, 0, 255))`, `q = rne(clamp(x / scale, −zp, 255 − zp))`
//!   (ORT divides, clamps, rounds half to even, then adds `zp`). What `quantize_dynamic` writes in
//!   front of every MatMulInteger, and what ORT's fused DynamicQuantizeMatMul recomputes.
//! - **QuantizeLinear with constant parameters** ([`ActivationQuant::Static`]): a static build's
//!   calibrated per-tensor `scale` and `zero_point` into the element type's range (uint8, int8,
//!   uint16, int16), `q = rne(clamp(x / scale, qmin − zp, qmax − zp))`.
//!
//! The value the next op reads is `q · scale` (with `zp` taken out): the integer GEMMs ORT runs
//! (MatMulInteger, QLinearMatMul) sum `q_a · q_w` exactly and scale once, the same value as the
//! reference's float matmul of the dequantized operands up to the order of its f32 additions,
//! which the calibrated floor measures. Each precision does the arithmetic in its own type (the
//! reference in f32 as ORT does, the f64 arbiter in f64); where the two land on different steps of
//! a near-tie, the rounding hints take the candidate's ([`super::rounding`]).

/// How a quantized export rounds a matmul's input (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ActivationQuant {
    /// MLAS's CompInt8: per row, per block of this many inputs, symmetric int8.
    Blocks(usize),
    /// DynamicQuantizeLinear: asymmetric uint8 over the whole tensor, from its range.
    Dynamic,
    /// QuantizeLinear with a constant per-tensor scale and zero point.
    Static(StaticGrid),
}

/// A constant per-tensor quantization grid: `scale`, `zero_point`, and the element type's range
/// `[qmin, qmax]` (uint8 `[0, 255]`, int8 `[−128, 127]`, uint16 `[0, 65535]`, int16 …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticGrid {
    pub scale: f32,
    pub zero_point: i32,
    pub qmin: i32,
    pub qmax: i32,
}

/// What a quantized export does around one matmul: how it rounds the input, whether the rounded
/// input replaces the tensor for its other readers too (QDQ format: a QuantizeLinear →
/// DequantizeLinear pair on a tensor is read by every consumer of that tensor), and the static
/// requantization of the output (a QDQ pair after the MatMul, QLinearMatMul's `y_scale`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatmulActivations {
    pub input: Option<ActivationQuant>,
    pub shared_input: bool,
    pub output: Option<StaticGrid>,
    /// Where the kernel requantizes the output from an integer GEMM (QLinearMatMul: ORT's fusion
    /// of an 8-bit QDQ node unit, or a QOperator build), the weight's scales (one per output
    /// column, or one): with them the candidate's value before its output is rounded is computable
    /// exactly from its rounded input (`f32(acc) · f32(f32(s_a · s_w[n]) / s_y)`, research §0),
    /// which is what a near-tie of the output is decided against. `None` where the kernel is a
    /// float GEMM (16-bit, or int8 activations on x86: the order of its f32 sums is MLAS's).
    pub integer_output: Option<std::sync::Arc<Vec<f32>>>,
}

impl MatmulActivations {
    /// Only MLAS's int8 blocks on the input (a MatMulNBits at `accuracy_level` 4).
    pub fn blocks(block: usize) -> Self {
        MatmulActivations { input: Some(ActivationQuant::Blocks(block)), ..Default::default() }
    }

    /// The input's static grid, when the input is rounded to one.
    pub fn input_grid(&self) -> Option<StaticGrid> {
        match self.input {
            Some(ActivationQuant::Static(g)) => Some(g),
            _ => None,
        }
    }

    /// Whether the export rounds anything around this matmul.
    pub fn any(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }
}

/// The float types the rounding works in (the reference's f32 and the arbiter's f64: each does
/// the kernels' arithmetic in its own precision).
pub trait ActFloat:
    Copy + PartialEq + PartialOrd + std::ops::Mul<Output = Self> + std::ops::Div<Output = Self> + std::ops::Sub<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn max_abs(self, v: Self) -> Self;
    fn div127(self) -> Self;
    /// `127 / self`.
    fn inv127(self) -> Self;
    fn round_even(self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn fmin(self, v: Self) -> Self;
    fn fmax(self, v: Self) -> Self;
}

/// Both float types do the kernels' arithmetic the same way, each in its own precision.
macro_rules! act_float {
    ($($t:ty),*) => {$(
        impl ActFloat for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn max_abs(self, v: Self) -> Self {
                self.max(v.abs())
            }
            fn div127(self) -> Self {
                self / 127.0
            }
            fn inv127(self) -> Self {
                127.0 / self
            }
            fn round_even(self) -> Self {
                self.round_ties_even()
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn fmin(self, v: Self) -> Self {
                self.min(v)
            }
            fn fmax(self, v: Self) -> Self {
                self.max(v)
            }
        }
    )*};
}
act_float!(f32, f64);

/// One group's grid (an MLAS block, or a whole tensor): the step of a value and its dequantized
/// value `step · scale`.
#[derive(Debug, Clone, Copy)]
struct Grid<T> {
    scale: T,
    /// MLAS multiplies by `127 / amax` where ORT's QuantizeLinear divides by the scale.
    multiply: Option<T>,
    /// The steps' range with the zero point taken out (`qmin − zp ..= qmax − zp`).
    lo: T,
    hi: T,
}

impl<T: ActFloat> Grid<T> {
    /// `x` in steps, before rounding (clamped to the range, as ORT clamps before it rounds).
    fn scaled(&self, x: T) -> T {
        let s = match self.multiply {
            Some(m) => x * m,
            None => x / self.scale,
        };
        s.fmax(self.lo).fmin(self.hi)
    }
}

/// MLAS's block grid of `b` (symmetric int8 from the block's amax; a zero block stays zero).
fn block_grid<T: ActFloat>(b: &[T]) -> Grid<T> {
    let amax = b.iter().fold(T::ZERO, |m, v| m.max_abs(*v));
    let multiply = if amax == T::ZERO { T::ZERO } else { T::inv127(amax) };
    let inf = T::from_f64(f64::INFINITY);
    Grid { scale: amax.div127(), multiply: Some(multiply), lo: T::ZERO - inf, hi: inf }
}

/// DynamicQuantizeLinear's grid of `x` (uint8 from the range of `x` with 0 included).
fn dynamic_grid<T: ActFloat>(x: &[T]) -> Grid<T> {
    let mn = x.iter().fold(T::ZERO, |m, v| m.fmin(*v));
    let mx = x.iter().fold(T::ZERO, |m, v| m.fmax(*v));
    let scale = if mx == mn { T::ONE } else { (mx - mn) / T::from_f64(255.0) };
    let zp = (T::ZERO - mn / scale).fmax(T::ZERO).fmin(T::from_f64(255.0)).round_even();
    Grid { scale, multiply: None, lo: T::ZERO - zp, hi: T::from_f64(255.0) - zp }
}

/// A static grid in `T`.
fn static_grid<T: ActFloat>(g: &StaticGrid) -> Grid<T> {
    let zp = g.zero_point as f64;
    Grid { scale: T::from_f64(g.scale as f64), multiply: None, lo: T::from_f64(g.qmin as f64 - zp), hi: T::from_f64(g.qmax as f64 - zp) }
}

/// The groups `x` (`rows × k`, row-major) is quantized in, each with its grid: `(offset, len)`.
fn groups<T: ActFloat>(x: &[T], k: usize, quant: &ActivationQuant) -> Vec<(usize, usize, Grid<T>)> {
    match quant {
        ActivationQuant::Blocks(block) => {
            if k == 0 || *block == 0 {
                return Vec::new();
            }
            let mut out = Vec::new();
            for row in (0..x.len()).step_by(k) {
                for start in (row..(row + k).min(x.len())).step_by(*block) {
                    let len = (*block).min(row + k - start).min(x.len() - start);
                    out.push((start, len, block_grid(&x[start..start + len])));
                }
            }
            out
        }
        ActivationQuant::Dynamic => vec![(0, x.len(), dynamic_grid(x))],
        ActivationQuant::Static(g) => vec![(0, x.len(), static_grid(g))],
    }
}

/// The candidate's values of a tensor the reference rounds: the float values its kernel rounds
/// (`Values`), or, where its kernel scales an integer result straight onto the grid (a
/// QLinearMatMul's output), the scaled values themselves (`Scaled`), or only the scaled values
/// that can be near-ties ([`NearTies`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hint<'a> {
    Values(&'a [f32]),
    Scaled(&'a [f32]),
    NearTies(&'a NearTies),
}

impl<'a> Hint<'a> {
    /// Every value (`None` for [`Hint::NearTies`]).
    fn values(&self) -> Option<&'a [f32]> {
        match self {
            Hint::Values(v) | Hint::Scaled(v) => Some(v),
            Hint::NearTies(_) => None,
        }
    }

    /// How many values it stands for (a prefill's: a decode step's one row is not hinted).
    pub(crate) fn len(&self) -> usize {
        match self {
            Hint::Values(v) | Hint::Scaled(v) => v.len(),
            Hint::NearTies(n) => n.len,
        }
    }

    /// Whether it is a hint for `len` values rounded `k` wide as `quant` rounds them, with a
    /// near-tie tolerance of at most `tolerance`.
    pub(crate) fn fits(&self, len: usize, k: usize, quant: &ActivationQuant, tolerance: f64) -> bool {
        match self {
            Hint::Values(v) | Hint::Scaled(v) => v.len() == len,
            Hint::NearTies(n) => n.len == len && n.k == k && n.quant == *quant && tolerance <= n.tolerance,
        }
    }
}

/// The candidate's scaled values of a tensor (`a · 127 / amax` for MLAS's blocks), kept only
/// where one can be a near-tie: at full E2B size the values of every quantized matmul's input at
/// 600 positions are 1.4 GB per run of the candidate, of which about 1 % lie near a half step.
///
/// Kept: each scaled value `c` within `2 · tolerance · max(1, |c|)` of a half-integer. A value
/// left out is never adopted: adopting needs the reference's scaled value `a` to round to the
/// step next to `c`'s, so a half-integer `b` lies between them and `|c − b| ≤ |c − a| ≤
/// tolerance · max(1, |a|) ≤ tolerance · max(1, |c|) / (1 − tolerance)`, inside the bound for
/// any tolerance up to ½. The candidate's values are scaled as [`round`] scales them (in f32,
/// on its own grid), so a kept value is the bit [`round`] would compute.
#[derive(Debug, Clone, PartialEq)]
pub struct NearTies {
    len: usize,
    k: usize,
    quant: ActivationQuant,
    tolerance: f64,
    /// Ascending element indices, and the scaled value at each.
    index: Vec<u32>,
    scaled: Vec<f32>,
}

impl NearTies {
    /// `values` (`rows × k`, row-major, as the candidate computed them) rounded as `quant`
    /// rounds them, kept where a near-tie within `tolerance` can be (see the type's doc);
    /// `None` where the bound does not hold (a tolerance over ½, more than `u32::MAX` values).
    pub fn new(values: &[f32], k: usize, quant: &ActivationQuant, tolerance: f64) -> Option<Self> {
        if !(0.0..=0.5).contains(&tolerance) || u32::try_from(values.len()).is_err() {
            return None;
        }
        let (mut index, mut scaled) = (Vec::new(), Vec::new());
        for (start, len, grid) in groups(values, k, quant) {
            for (i, &v) in values.iter().enumerate().skip(start).take(len) {
                let c = grid.scaled(v);
                let c64 = c as f64;
                let half = c64.floor() + 0.5;
                if (c64 - half).abs() <= 2.0 * tolerance * c64.abs().max(1.0) {
                    index.push(i as u32);
                    scaled.push(c);
                }
            }
        }
        Some(NearTies { len: values.len(), k, quant: *quant, tolerance, index, scaled })
    }

    /// How many values are kept.
    pub fn kept(&self) -> usize {
        self.index.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.index.len() * 8
    }
}

/// One near-tie where the reference took the candidate's step, as [`round`] reports it: the
/// element's row and column (`k` wide), and its scaled value as each computed it.
pub(crate) struct NearTie {
    pub row: usize,
    pub col: usize,
    pub own: f64,
    pub candidate: f64,
}

/// `x` (`rows × k`, row-major) rounded in place as `quant` rounds it. With `hint` (the
/// candidate's values of the same tensor, and the tolerance): where the candidate's step — as its
/// kernel computes it, in f32 from its own values — is one step from the reference's and the two
/// scaled values are within `tolerance · max(1, |scaled|)`, the candidate's step is taken and
/// `adopt` told. Returns the candidate's rounded values when `candidate_values` (a static
/// output's hint is the matmul of them).
pub(crate) fn round<T: ActFloat>(
    x: &mut [T],
    k: usize,
    quant: &ActivationQuant,
    hint: Option<(Hint<'_>, f64)>,
    candidate_values: bool,
    mut adopt: impl FnMut(NearTie),
) -> Option<Vec<f32>> {
    let hint = hint.filter(|(h, tol)| h.fits(x.len(), k, quant, *tol));
    // Every candidate value given: its groups' grids; only its near-ties: the scaled values.
    let dense = hint.and_then(|(h, tol)| h.values().map(|v| (matches!(h, Hint::Scaled(_)), v, tol, groups(v, k, quant))));
    let near_ties = match hint {
        Some((Hint::NearTies(n), tol)) => Some((n, tol)),
        _ => None,
    };
    let mut cursor = 0;
    let mut cand_out = (candidate_values && dense.is_some()).then(|| vec![0f32; x.len()]);
    for (gi, (start, len, grid)) in groups(x, k, quant).into_iter().enumerate() {
        let cand = dense.as_ref().and_then(|(scaled, v, tol, cg)| cg.get(gi).map(|(_, _, g)| (*scaled, *v, *tol, *g)));
        for i in start..start + len {
            let own = grid.scaled(x[i]);
            let mut q = own.round_even();
            // The candidate's scaled value (in f32, as its kernel computes it) and the tolerance.
            let candidate = match (cand, near_ties) {
                (Some((scaled, v, tol, cgrid)), _) => {
                    let cand_scaled = match scaled {
                        false => cgrid.scaled(v[i]),
                        true => v[i].fmax(cgrid.lo).fmin(cgrid.hi),
                    };
                    if let Some(out) = cand_out.as_mut() {
                        out[i] = cand_scaled.round_even() * cgrid.scale;
                    }
                    Some((cand_scaled, tol))
                }
                (None, Some((n, tol))) => {
                    while n.index.get(cursor).is_some_and(|&j| (j as usize) < i) {
                        cursor += 1;
                    }
                    n.index.get(cursor).filter(|&&j| j as usize == i).map(|_| (n.scaled[cursor], tol))
                }
                (None, None) => None,
            };
            if let Some((cand_scaled, tol)) = candidate {
                let cand_q = cand_scaled.round_even();
                let (own64, cand64) = (own.to_f64(), cand_scaled.to_f64());
                let one_step = (q.to_f64() - cand_q.to_f64()).abs() == 1.0;
                if one_step && (own64 - cand64).abs() <= tol * own64.abs().max(1.0) {
                    q = T::from_f64(cand_q.to_f64());
                    let (row, col) = i.checked_div(k).map_or((0, i), |row| (row, i % k));
                    adopt(NearTie { row, col, own: own64, candidate: cand64 });
                }
            }
            x[i] = q * grid.scale;
        }
    }
    cand_out
}

/// MLAS's int8 quantization of a matmul's activations (CompInt8), applied in place to `x`
/// (`rows × k`, row-major) and returned dequantized: per row, per block of `block` elements along
/// `k` (the last one shorter), `scale = amax / 127`, `q = round_half_even(x · (127 / amax))`
/// (0 where amax = 0), `x' = q · scale`.
pub fn quantize_activations<T: ActFloat>(x: &mut [T], k: usize, block: usize) {
    round(x, k, &ActivationQuant::Blocks(block), None, false, |_| {});
}

/// `x` rounded as `quant` rounds it, without hints (see [`round`]).
pub fn round_activations<T: ActFloat>(x: &mut [T], k: usize, quant: &ActivationQuant) {
    round(x, k, quant, None, false, |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards MLAS's emulation: per-block scales from each block's own amax, ties to even, a zero
    /// block stays zero, the short last block is its own block.
    #[test]
    fn activations_are_quantized_per_block() {
        let mut x = vec![1.0f32, -0.5, 0.25, 0.0, 0.0, 0.0, 2.0];
        quantize_activations(&mut x, 7, 3);
        // Block 0: amax 1 → steps of 1/127: 0.25·127 = 31.75 → 32.
        assert_eq!(x[0], 1.0);
        assert_eq!(x[1], (-63.5f32).round_ties_even() * (1.0 / 127.0));
        assert_eq!(x[2], 32.0 * (1.0 / 127.0));
        assert_eq!(&x[3..6], &[0.0, 0.0, 0.0]);
        assert_eq!(x[6], 127.0 * (2.0 / 127.0));
    }

    /// Guards DynamicQuantizeLinear's recipe as ONNX Runtime computes it (research §1, measured
    /// bit-exact): the range includes 0, the scale is `(max − min) / 255` in the working type,
    /// the zero point rounds half to even (min −126.5, max 128.5 → zp 126, not 127), values
    /// round half to even before the zero point is added, and a constant tensor has scale 1.
    #[test]
    fn dynamic_quantization_follows_onnx_runtime() {
        // Range [0, 255] → scale 1, zp 0: 0.5 → 0, 1.5 → 2, 2.5 → 2, 254.5 → 254.
        let mut x = vec![0.5f32, 1.5, 2.5, 254.5, 255.0];
        round_activations(&mut x, 5, &ActivationQuant::Dynamic);
        assert_eq!(x, vec![0.0, 2.0, 2.0, 254.0, 255.0]);
        let g = dynamic_grid(&[-126.5f32, 128.5]);
        assert_eq!((g.scale, -g.lo), (1.0, 126.0), "zp 126: −min / scale = 126.5 rounds to even");
        // All positive: the range starts at 0 (zp 0, scale max / 255).
        let g = dynamic_grid(&[2.0f32, 5.1]);
        assert_eq!((g.scale, g.lo, g.hi), (5.1f32 / 255.0, 0.0, 255.0));
        // A zero tensor: scale 1, zp 0, values unchanged.
        let mut z = vec![0.0f32; 3];
        round_activations(&mut z, 3, &ActivationQuant::Dynamic);
        assert_eq!(z, vec![0.0; 3]);
        // One scale for the whole tensor, whatever its rows: the 2 of row 1 sets row 0's grid.
        let mut two_rows = vec![0.01f32, -0.01, 2.0, -1.0];
        round_activations(&mut two_rows, 2, &ActivationQuant::Dynamic);
        let s = 3.0f32 / 255.0;
        assert_eq!(two_rows[0], (0.01f32 / s).round_ties_even() * s);
    }

    /// Guards QuantizeLinear's clamp into the element type's range with the zero point taken out,
    /// and half-to-even rounding *before* an odd zero point is added (zp 127: 0.5 → step 0,
    /// 1.5 → step 2; rounding `x / s + zp` would give 1 and 1).
    #[test]
    fn static_grids_clamp_then_round() {
        let g = StaticGrid { scale: 1.0, zero_point: 127, qmin: 0, qmax: 255 };
        let mut x = vec![0.5f32, 1.5, -1.5, 500.0, -500.0];
        round_activations(&mut x, 5, &ActivationQuant::Static(g));
        assert_eq!(x, vec![0.0, 2.0, -2.0, 128.0, -127.0]);
        let u16 = StaticGrid { scale: 0.5, zero_point: 32768, qmin: 0, qmax: 65535 };
        let mut y = vec![0.26f64, 1e9];
        round_activations(&mut y, 2, &ActivationQuant::Static(u16));
        assert_eq!(y, vec![0.5, 32767.0 * 0.5]);
    }

    /// An adopted near-tie: row, column, and the two scaled values' bits.
    type Taken = (usize, usize, u64, u64);

    /// Rounds `x` in `T` with `hint`, returning the values and each adopted near-tie.
    fn rounded<T: ActFloat>(x: &[f32], k: usize, quant: &ActivationQuant, hint: Hint<'_>) -> (Vec<f64>, Vec<Taken>) {
        let mut v: Vec<T> = x.iter().map(|&a| T::from_f64(a as f64)).collect();
        let mut taken = Vec::new();
        round(&mut v, k, quant, Some((hint, 1e-4)), false, |t| taken.push((t.row, t.col, t.own.to_bits(), t.candidate.to_bits())));
        (v.iter().map(|a| a.to_f64()).collect(), taken)
    }

    /// Guards the near-ties' bound: kept only where a near-tie can be (a few percent of the
    /// values), they round every value of both precisions and adopt every step exactly as all
    /// the candidate's values do, on every grid, with near-ties up to 0.9 of the tolerance away
    /// (a bound of half the tolerance loses those and fails here).
    #[test]
    fn near_ties_alone_round_as_all_values_do() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let (k, rows) = (96, 40);
        // Every block of 32 holds 3 and −3 (amax 3, range [−3, 3]): each grid's step is known.
        let grids = [
            (ActivationQuant::Blocks(32), 3.0 / 127.0),
            (ActivationQuant::Dynamic, 6.0 / 255.0),
            (ActivationQuant::Static(StaticGrid { scale: 3.0 / 127.0, zero_point: 0, qmin: -128, qmax: 127 }), 3.0 / 127.0),
        ];
        let mut cand = Vec::new();
        for (quant, step) in grids {
            let (mut own, mut c) = (Vec::with_capacity(k * rows), Vec::with_capacity(k * rows));
            for i in 0..k * rows {
                let a = (uniform() * 2.0 - 1.0) * 3.0;
                // A third on a half step: the reference's just on one side, the candidate's up to
                // 0.9 of the tolerance (of the scaled value) on the other; the others within an
                // f32 rounding.
                let (o, x) = match i % 32 {
                    0 => (3.0, 3.0),
                    1 => (-3.0, -3.0),
                    _ if uniform() < 0.33 => {
                        let half = (a / step).floor() + 0.5;
                        let d = half.abs().max(1.0) * 0.9e-4 * uniform();
                        let side = if uniform() < 0.5 { 1.0 } else { -1.0 };
                        ((half + side * 1e-3 * d) * step, (half - side * d) * step)
                    }
                    _ => (a, a * (1.0 + 1e-7 * (uniform() - 0.5))),
                };
                own.push(o as f32);
                c.push(x as f32);
            }
            let near = NearTies::new(&c, k, &quant, 1e-4).expect("a tolerance under ½");
            assert!(near.kept() < own.len() / 2 && near.kept() > 0, "{quant:?}: {} of {} kept", near.kept(), own.len());
            let all = rounded::<f32>(&own, k, &quant, Hint::Values(&c));
            assert!(all.1.len() > 50, "{quant:?}: {} near-ties adopted", all.1.len());
            assert_eq!(rounded::<f32>(&own, k, &quant, Hint::NearTies(&near)), all, "{quant:?} f32");
            let all64 = rounded::<f64>(&own, k, &quant, Hint::Values(&c));
            assert!(!all64.1.is_empty(), "{quant:?}: f64 adopts too");
            assert_eq!(rounded::<f64>(&own, k, &quant, Hint::NearTies(&near)), all64, "{quant:?} f64");
            cand = c;
        }
        // Another grid, width or a larger tolerance than they were kept for: not used.
        let near = NearTies::new(&cand, k, &ActivationQuant::Blocks(32), 1e-4).expect("bound");
        let len = cand.len();
        assert!(!Hint::NearTies(&near).fits(len, k, &ActivationQuant::Blocks(16), 1e-4));
        assert!(!Hint::NearTies(&near).fits(len, k / 2, &ActivationQuant::Blocks(32), 1e-4));
        assert!(!Hint::NearTies(&near).fits(len, k, &ActivationQuant::Blocks(32), 1e-3));
        assert!(Hint::NearTies(&near).fits(len, k, &ActivationQuant::Blocks(32), 1e-4));
        assert!(NearTies::new(&cand, k, &ActivationQuant::Blocks(32), 0.6).is_none());
    }
}
