//! Options shared by all trials of a run.

use std::path::PathBuf;

use crate::case::{Case, Level};
use crate::eps::RunEp;

/// `ONNX_PARITY_GOLDENS`: the goldens folder (mobius's `testdata/golden` has the same layout).
pub use crate::context::GOLDENS_ENV;

/// Options shared by all trials of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding `<category>/<case>.json` goldens (`--goldens`, `ONNX_PARITY_GOLDENS`);
    /// `None`: each case's own, beside its `cases/` folder ([`crate::golden::root_for`]).
    pub goldens_root: Option<PathBuf>,
    /// `true` when running under CI (`CI` set): `ci_skip_reason` applies.
    pub ci: bool,
    /// The execution providers the trials run on (`ONNX_PARITY_EP`), in order.
    pub eps: Vec<RunEp>,
    /// Strict mode (`--strict`, `ONNX_PARITY_STRICT=1`): a trial whose artifact is missing
    /// (export, checkpoint, golden) fails naming it instead of being skipped.
    pub strict: bool,
    /// The tiers this run executes (`run --levels`: the plan holds no trial of another);
    /// `None`: every tier a case requests (the test target, whose filter is applied per trial).
    /// A run without L5 decodes no candidate freely a second time.
    pub levels: Option<Vec<Level>>,
}

impl RunOptions {
    /// The run context's goldens folder, CI flag and EPs ([`crate::context`]; an invalid EP
    /// selection reads as the CPU here, and the drivers refuse it before planning).
    pub fn from_env() -> Self {
        let context = crate::context::current();
        RunOptions {
            goldens_root: context.goldens_root.clone(),
            ci: context.ci,
            eps: context.eps_or_cpu(),
            strict: context.strict,
            levels: None,
        }
    }

    /// A CPU run outside CI with the goldens under `root` (tests).
    pub fn with_goldens(root: impl Into<PathBuf>) -> Self {
        RunOptions { goldens_root: Some(root.into()), ci: false, eps: vec![RunEp::Cpu], strict: false, levels: None }
    }

    /// Whether this run's levels include `level` (a case's own list narrows it further).
    pub fn runs_level(&self, level: Level) -> bool {
        self.levels.as_ref().is_none_or(|l| l.contains(&level))
    }

    /// `case` as this run judges it: its levels narrowed to the run's (`run --levels`). What the
    /// tiers compute follows the case's levels, so `run --levels L1,L4` on a case that lists L3
    /// pays for no L3 work (the f64 arbiter, floors, isolation, layer streams).
    pub fn judged(&self, case: &Case) -> Case {
        let mut judged = case.clone();
        judged.levels.retain(|&l| self.runs_level(l));
        judged
    }

    /// The goldens folder of `case`: the run's, else the one beside the case's own `cases/`
    /// folder.
    pub fn goldens_for(&self, case: &Case) -> PathBuf {
        self.goldens_root.clone().unwrap_or_else(|| crate::golden::root_for(&case.path))
    }
}
