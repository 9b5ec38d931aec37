//! Rounding hints for int8 activation quantization (a quantized export's MatMulNBits at
//! `accuracy_level` 4): the candidate's own activations for a matmul, so that where the
//! reference's value and the candidate's lie on the two sides of an int8 step's boundary *and*
//! within rounding of each other, the reference takes the candidate's step.
//!
//! Why: `round(a · 127 / amax)` is discontinuous. Two faithful f32 computations of `a` differ in
//! their last bits; near a half-integer they round to neighbouring steps, and the one-step
//! difference (`amax / 127` times a weight column) travels on through the layer. Which step is
//! "right" is not decided by the model at f32 precision: the f64 arbiter's choice is as arbitrary
//! as either f32 run's. So the calibrated rule judges a candidate against the arbiter and the floor
//! *conditioned* on its own choices at such near-ties, and reports how many it made. A value the
//! candidate computes differently by more than rounding (a wrong weight upstream, a scrambled
//! scale) is never adopted: its error stays and fails the layer.
//!
//! The hints are installed for one run on the calling thread ([`with_rounding_hints`]); the
//! quantization reads them by the weight's key (the quantized build's parameter name).

use std::cell::RefCell;
use std::collections::HashMap;

use super::overrides::ActFloat;

/// The candidate's activations per quantized matmul, by the parameter key of its weight
/// (`layers.5.self_attn.q_proj.weight`), row-major `[rows, k]` as the reference's input to that
/// matmul.
#[derive(Debug, Clone, Default)]
pub struct RoundingHints {
    by_key: HashMap<String, std::sync::Arc<Vec<f32>>>,
    /// How close the two scaled values must be to adopt the candidate's step, relative to the
    /// larger of 1 and the scaled value (a step is 1).
    pub tolerance: f64,
}

impl RoundingHints {
    pub fn new(tolerance: f64) -> Self {
        RoundingHints { by_key: HashMap::new(), tolerance }
    }

    /// The candidate's activations for the matmul of `key`.
    /// (Matmuls that share an input, q/k/v, share one buffer: the candidate's run's own, moved
    /// into an `Arc`, not copied.)
    pub fn insert(&mut self, key: impl Into<String>, values: std::sync::Arc<Vec<f32>>) {
        self.by_key.insert(key.into(), values);
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// One near-tie where the reference took the candidate's int8 step.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    pub key: String,
    /// The row (position) and column (input channel) of the matmul's activation.
    pub row: usize,
    pub col: usize,
    /// `a · 127 / amax` as the reference and the candidate computed it.
    pub own: f64,
    pub candidate: f64,
}

thread_local! {
    static ACTIVE: RefCell<Option<(RoundingHints, Vec<Adopted>)>> = const { RefCell::new(None) };
}

/// Runs `f` with `hints` active on this thread; returns its result and the near-ties adopted.
pub fn with_rounding_hints<T>(hints: RoundingHints, f: impl FnOnce() -> T) -> (T, Vec<Adopted>) {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.borrow_mut().take());
        }
    }
    ACTIVE.with(|a| *a.borrow_mut() = Some((hints, Vec::new())));
    let guard = Clear;
    let out = f();
    let adopted = ACTIVE.with(|a| a.borrow_mut().as_mut().map(|(_, v)| std::mem::take(v))).unwrap_or_default();
    drop(guard);
    (out, adopted)
}

/// MLAS's int8 quantization of `x` (`rows × k`) per `block` ([`super::quantize_activations`]),
/// taking the candidate's step at a near-tie when hints for `key` are active.
pub(crate) fn quantize_with_hints<T: ActFloat>(key: Option<&str>, x: &mut [T], k: usize, block: usize) {
    let hinted = key.is_some_and(|key| {
        ACTIVE.with(|a| {
            let mut active = a.borrow_mut();
            let Some((hints, adopted)) = active.as_mut() else { return false };
            let Some(hint) = hints.by_key.get(key).filter(|h| h.len() == x.len()) else { return false };
            quantize_adopting(x, hint, k, block, hints.tolerance, |row, col, own, candidate| {
                adopted.push(Adopted { key: key.to_string(), row, col, own, candidate })
            });
            true
        })
    });
    if !hinted {
        super::quantize_activations(x, k, block);
    }
}

/// The quantization with the candidate's activations `hint` beside `x` (same layout): a step the
/// candidate rounds to one away from the reference's, with the two scaled values within
/// `tolerance`, is the candidate's (`adopt` is told of each).
fn quantize_adopting<T: ActFloat>(
    x: &mut [T],
    hint: &[f32],
    k: usize,
    block: usize,
    tolerance: f64,
    mut adopt: impl FnMut(usize, usize, f64, f64),
) {
    if k == 0 || block == 0 {
        return;
    }
    for (row, (xs, hs)) in x.chunks_mut(k).zip(hint.chunks(k)).enumerate() {
        for (b, (xb, hb)) in xs.chunks_mut(block).zip(hs.chunks(block)).enumerate() {
            let amax = xb.iter().fold(T::ZERO, |m, v| m.max_abs(*v));
            let scale = amax.div127();
            let inv = if amax == T::ZERO { T::ZERO } else { T::inv127(amax) };
            // The candidate's step as its kernel computed it: MLAS's arithmetic in f32 on its
            // activations (in f64 an exact `.5` that f32 makes `63.499996` would round the other
            // way: the structural ties of an int4 table's rows, README "Quantized builds").
            let hmax = hb.iter().fold(0f32, |m, v| m.max_abs(*v));
            let hinv = if hmax == 0.0 { 0.0 } else { f32::inv127(hmax) };
            for (i, (v, h)) in xb.iter_mut().zip(hb).enumerate() {
                let own = *v * inv;
                let mut q = own.round_even();
                let cand32 = *h * hinv;
                let (own64, cand, cand_q) = (own.to_f64(), cand32.to_f64(), cand32.round_even().to_f64());
                let one_step = (q.to_f64() - cand_q).abs() == 1.0;
                if one_step && (own64 - cand).abs() <= tolerance * own64.abs().max(1.0) {
                    q = T::from_f64(cand_q);
                    adopt(row, b * block + i, own64, cand);
                }
                *v = q * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the adoption rule: a value within rounding of the candidate's on the other side of
    /// a half step takes the candidate's step (and is reported); one the candidate computes a
    /// whole step away, or further than the tolerance, keeps the reference's; without hints the
    /// quantization is MLAS's.
    #[test]
    fn near_ties_take_the_candidate_s_step() {
        // Block of 2: amax 1 → scaled values ·127. 0.5/127 + ε rounds to 1, the candidate's
        // 0.5/127 − ε to 0.
        let tie = 0.5f32 / 127.0;
        // The last block: 10.5 + 0.004 against the candidate's 10.5 − 0.004, one step apart but
        // 8e-3 apart (> 1e-4 · 10.5): a difference beyond rounding, kept.
        let far = 1.0f32 / 127.0;
        let x = vec![1.0f32, tie * 1.000_001, 1.0, 0.3, 1.0, far * 10.504];
        let hint = vec![1.0f32, tie * 0.999_999, 1.0, 0.3 * 1.2, 1.0, far * 10.496];
        let mut plain = x.clone();
        crate::weights::quantize_activations(&mut plain, 6, 2);
        assert_eq!(plain[1], 1.0 / 127.0, "rounds up on its own");
        let mut hints = RoundingHints::new(1e-4);
        hints.insert("layers.0.mlp.up_proj.weight", std::sync::Arc::new(hint.clone()));
        let mut y = x.clone();
        let ((), adopted) = with_rounding_hints(hints.clone(), || quantize_with_hints(Some("layers.0.mlp.up_proj.weight"), &mut y, 6, 2));
        assert_eq!(y[1], 0.0, "takes the candidate's step at the near-tie");
        assert_eq!(y[3], plain[3], "a value 20 % off is never adopted");
        assert_eq!(y[5], plain[5], "one step apart but beyond rounding: kept");
        assert_eq!(plain[5], 11.0 / 127.0);
        assert_eq!(adopted.len(), 1);
        assert_eq!((adopted[0].row, adopted[0].col), (0, 1));
        // Another key, or no hints active: MLAS's own rounding.
        let mut z = x.clone();
        let ((), none) = with_rounding_hints(hints, || quantize_with_hints(Some("layers.1.mlp.up_proj.weight"), &mut z, 6, 2));
        assert!(none.is_empty() && z == plain);
        let mut w = x;
        quantize_with_hints(Some("layers.0.mlp.up_proj.weight"), &mut w, 6, 2);
        assert_eq!(w, plain);
    }
}
