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

use super::activations::{ActFloat, ActivationQuant, Hint, NearTies};

/// The candidate's activations for one matmul: all of them, or only its near-ties.
#[derive(Debug, Clone)]
pub enum HintValues {
    Dense(std::sync::Arc<Vec<f32>>),
    NearTies(std::sync::Arc<NearTies>),
}

impl HintValues {
    pub(crate) fn hint(&self) -> Hint<'_> {
        match self {
            HintValues::Dense(v) => Hint::Values(v),
            HintValues::NearTies(n) => Hint::NearTies(n),
        }
    }
}

/// The candidate's activations per quantized matmul, by the parameter key of its weight
/// (`layers.5.self_attn.q_proj.weight`), row-major `[rows, k]` as the reference's input to that
/// matmul.
#[derive(Debug, Clone, Default)]
pub struct RoundingHints {
    by_key: HashMap<String, HintValues>,
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
        self.by_key.insert(key.into(), HintValues::Dense(values));
    }

    /// The candidate's near-ties for the matmul of `key` ([`NearTies`]: what a matmul whose
    /// candidate's rounded values are not needed — no output requantized from them — reads of
    /// its activations, at a few percent of their size).
    pub fn insert_near_ties(&mut self, key: impl Into<String>, near_ties: std::sync::Arc<NearTies>) {
        self.by_key.insert(key.into(), HintValues::NearTies(near_ties));
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Whether the matmul of `key` has hints.
    pub fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
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
    let mut adopted = ACTIVE.with(|a| a.borrow_mut().as_mut().map(|(_, v)| std::mem::take(v))).unwrap_or_default();
    drop(guard);
    // A tensor a QDQ build's quantization replaces for all its readers is rounded where the
    // stream is read and again at its matmul (the same values, the same steps): counted once.
    let mut seen = std::collections::BTreeSet::new();
    adopted.retain(|a| seen.insert((a.key.clone(), a.row, a.col)));
    (out, adopted)
}

/// The candidate's activations for the matmul of `key`, when hints for it are active on this
/// thread.
pub(crate) fn active_hint(key: &str) -> Option<(HintValues, f64)> {
    ACTIVE.with(|a| a.borrow().as_ref().and_then(|(hints, _)| hints.by_key.get(key).map(|h| (h.clone(), hints.tolerance))))
}

/// `x` (`rows × k`) rounded as `quant` rounds it ([`super::activations`]), taking the candidate's
/// step at a near-tie when `hint` (the candidate's values of `x`, with the tolerance) is given;
/// each step taken is recorded under `key` (the matmul's weight key, `… (output)` for its
/// output). Returns the candidate's rounded values when `candidate_values`.
pub(crate) fn round_hinted<T: ActFloat>(
    key: &str,
    x: &mut [T],
    k: usize,
    quant: &ActivationQuant,
    hint: Option<(Hint<'_>, f64)>,
    candidate_values: bool,
) -> Option<Vec<f32>> {
    if let Some((_, tol)) = hint.filter(|(h, tol)| h.len() == x.len() && !h.fits(x.len(), k, quant, *tol)) {
        // Near-ties kept for another grid: a harness error, never the candidate's; the floor
        // then keeps its own steps (stricter). (A decode step's row is not hinted: another length.)
        tracing::warn!(
            "rounding hints for `{key}` do not fit its matmul ({} values {k} wide, {quant:?}, tolerance {tol}): not used",
            x.len()
        );
    }
    if candidate_values && matches!(hint, Some((Hint::NearTies(_), _))) {
        tracing::warn!("rounding hints for `{key}`: the candidate's rounded values are needed, and only its near-ties are given");
    }
    let mut taken = Vec::new();
    let out = super::activations::round(x, k, quant, hint, candidate_values, |t| taken.push(t));
    if !taken.is_empty() {
        ACTIVE.with(|a| {
            if let Some((_, adopted)) = a.borrow_mut().as_mut() {
                adopted.extend(taken.into_iter().map(|t| Adopted {
                    key: key.to_string(),
                    row: t.row,
                    col: t.col,
                    own: t.own,
                    candidate: t.candidate,
                }));
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x` rounded as `quant` rounds it, with the active hints for `key` (if any).
    fn round_with_active_hints<T: ActFloat>(key: Option<&str>, x: &mut [T], k: usize, quant: &ActivationQuant) {
        let hint = key.and_then(active_hint);
        round_hinted(key.unwrap_or(""), x, k, quant, hint.as_ref().map(|(h, t)| (h.hint(), *t)), false);
    }

    /// Guards the rule on the graph's own grids: a dynamic tensor's candidate grid comes from the
    /// candidate's own range (a 1-ulp different max moves no step), a static grid is the build's;
    /// at a near-tie the candidate's step is taken and recorded, a value beyond rounding never is.
    #[test]
    fn near_ties_on_dynamic_and_static_grids() {
        // Range [0, 2.55] → scale 0.01; 0.015 is a tie (1.5 steps), the candidate's just below.
        let x = vec![2.55f32, 0.015 * 1.000_001, 0.5];
        let hint = vec![2.55f32, 0.015 * 0.999_999, 0.5 * 1.2];
        let mut hints = RoundingHints::new(1e-4);
        hints.insert("k", std::sync::Arc::new(hint));
        for quant in [
            ActivationQuant::Dynamic,
            ActivationQuant::Static(crate::weights::StaticGrid { scale: 0.01, zero_point: 0, qmin: 0, qmax: 255 }),
        ] {
            let mut plain = x.clone();
            crate::weights::round_activations(&mut plain, 3, &quant);
            let mut y = x.clone();
            let ((), adopted) = with_rounding_hints(hints.clone(), || round_with_active_hints(Some("k"), &mut y, 3, &quant));
            assert_eq!(adopted.len(), 1, "{quant:?}");
            assert_eq!((adopted[0].col, (y[1] / 0.01).round()), (1, 1.0), "{quant:?}: the candidate's step 1, not 2");
            assert_eq!((plain[1] / 0.01).round(), 2.0);
            assert_eq!(y[2], plain[2], "{quant:?}: a value 20 % off keeps the reference's step");
        }
    }

    /// Guards a scaled hint (a QLinearMatMul's output as its kernel scales it onto the grid): the
    /// candidate's step is decided on the scaled value itself, not divided again.
    #[test]
    fn scaled_hints_are_steps_already() {
        let grid = ActivationQuant::Static(crate::weights::StaticGrid { scale: 0.5, zero_point: 0, qmin: 0, qmax: 255 });
        // Own 3.5000005 steps (rounds to 4); the candidate's kernel put it at 3.4999998.
        let mut y = vec![1.750_000_2f32];
        let scaled = [3.499_999_8f32];
        let mut taken = Vec::new();
        crate::weights::activations::round(&mut y, 1, &grid, Some((Hint::Scaled(&scaled), 1e-4)), false, |t| taken.push(t.candidate));
        assert_eq!((y[0], taken.len()), (1.5, 1));
    }

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
        let blocks = ActivationQuant::Blocks(2);
        let mut plain = x.clone();
        crate::weights::quantize_activations(&mut plain, 6, 2);
        assert_eq!(plain[1], 1.0 / 127.0, "rounds up on its own");
        let mut hints = RoundingHints::new(1e-4);
        hints.insert("layers.0.mlp.up_proj.weight", std::sync::Arc::new(hint.clone()));
        let mut y = x.clone();
        let ((), adopted) =
            with_rounding_hints(hints.clone(), || round_with_active_hints(Some("layers.0.mlp.up_proj.weight"), &mut y, 6, &blocks));
        assert_eq!(y[1], 0.0, "takes the candidate's step at the near-tie");
        assert_eq!(y[3], plain[3], "a value 20 % off is never adopted");
        assert_eq!(y[5], plain[5], "one step apart but beyond rounding: kept");
        assert_eq!(plain[5], 11.0 / 127.0);
        assert_eq!(adopted.len(), 1);
        assert_eq!((adopted[0].row, adopted[0].col), (0, 1));
        // Another key, or no hints active: MLAS's own rounding.
        let mut z = x.clone();
        let ((), none) = with_rounding_hints(hints, || round_with_active_hints(Some("layers.1.mlp.up_proj.weight"), &mut z, 6, &blocks));
        assert!(none.is_empty() && z == plain);
        let mut w = x;
        round_with_active_hints(Some("layers.0.mlp.up_proj.weight"), &mut w, 6, &blocks);
        assert_eq!(w, plain);
    }
}
