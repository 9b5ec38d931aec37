//! One implementation's run: load it from its folder, run it, keep the results and drop it,
//! logging the time and this stage's peak memory — the same for a case's implementations and
//! for the calibrated rule's reference runs.

use std::path::Path;
use std::sync::Arc;

use super::error::{EvalError, SharedError};
use super::implementations::{self, Implementation};
use crate::artifacts::Artifacts;
use crate::backend::{Backend, BackendError};
use crate::case::Case;
use crate::eps::RunEp;
use onnx_parity_reference::BidirectionalScope;

/// What is kept of a back end after its run.
pub(super) struct Opened {
    pub description: String,
    pub scope: Option<BidirectionalScope>,
    /// Compute nodes the EP asked for did not run (a partitioned session), when so.
    pub partitioned: Option<String>,
}

/// Opens a back end with `open` on `dir`, runs `f` on it and returns the result with the back
/// end's description; `label` names it in errors, `purpose` follows its description in the log
/// line (`""`, `" (calibration)"`). The back end is dropped before the next one loads.
pub(super) fn run_loaded<B: Backend + ?Sized, T>(
    case: &Case,
    label: &'static str,
    dir: &Path,
    purpose: &str,
    open: impl FnOnce(&Path) -> Result<Box<B>, BackendError>,
    f: impl FnOnce(&mut B) -> Result<T, BackendError>,
) -> Result<(T, Opened), SharedError> {
    let fail = |source: BackendError| Arc::new(EvalError::Run { label, dir: dir.into(), source });
    let t = std::time::Instant::now();
    crate::memory::reset_peak();
    let mut backend = open(dir).map_err(fail)?;
    let opened_in = t.elapsed().as_secs_f64();
    let out = f(backend.as_mut()).map_err(fail)?;
    let opened = Opened { description: backend.describe(), scope: backend.bidirectional_scope(), partitioned: backend.partitioned() };
    // Released here, before the next back end loads: a case's peak is the larger side's.
    drop(backend);
    let released = crate::gpu::release_reference_memory();
    tracing::info!(
        "{}: {}{purpose} ran in {:.2} s (opened in {opened_in:.2} s){}{released}",
        case.name,
        opened.description,
        t.elapsed().as_secs_f64(),
        crate::memory::stage_peak()
    );
    Ok((out, opened))
}

/// Opens `implementation` on its artifact, runs `f` on it and returns the result with the back
/// end's description; logs the time and this stage's peak memory. The back end is dropped
/// before the next implementation loads.
pub(super) fn run_once<T>(
    implementation: &Implementation,
    case: &Case,
    ep: RunEp,
    f: impl FnOnce(&mut dyn Backend) -> Result<T, BackendError>,
) -> Result<(T, Opened), SharedError> {
    let artifacts = Artifacts::of(case);
    let dir = (implementation.artifact)(&artifacts).ok_or(EvalError::NoArtifact(implementation.missing))?;
    // `f` takes any `dyn Backend`; the opened one is boxed `'static`.
    run_loaded(
        case,
        implementation.label,
        dir,
        "",
        |dir| (implementation.open)(dir, &implementations::OpenOptions::for_case(case, ep)),
        |b: &mut (dyn Backend + 'static)| f(b),
    )
}

/// [`run_once`] with `beside` running on another thread while the back end opens (a reference
/// side read from the cache: [`super::reference_side`]); `f` gets its result once the back end
/// is open. A panic on that thread is resumed on this one.
pub(super) fn run_once_beside<S: Send, T>(
    implementation: &Implementation,
    case: &Case,
    ep: RunEp,
    beside: impl FnOnce() -> S + Send,
    f: impl FnOnce(&mut dyn Backend, S) -> Result<T, BackendError>,
) -> Result<(T, Opened), SharedError> {
    std::thread::scope(|scope| {
        let side = scope.spawn(beside);
        run_once(implementation, case, ep, |backend| {
            let side = side.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            f(backend, side)
        })
    })
}
