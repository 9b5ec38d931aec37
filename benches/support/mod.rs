//! Timing helpers shared by the benches (each bench is its own crate and includes this module).

#![allow(dead_code)]

use std::time::Instant;

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` once untimed (warm-up; its result is returned), then `repeats` times timed: the
/// median seconds and the warm-up's result.
pub fn time<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let first = f();
    let runs = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    (median(runs), first)
}
