//! The five tiers (DESIGN §2) and their scheduling. Each tier returns a
//! [`outcome::TierOutcome`]; the `parity` test target and the CLI only plan and report them.
//!
//! Skips that can be known without loading a model (`skip_reason`, `ci_skip_reason`, a level the
//! case does not request, a missing checkpoint or export) are decided here when the trial list is
//! built: nextest counts a run-time skip as a pass, which would hide it.

pub mod l1;
pub mod outcome;

use std::path::PathBuf;

use crate::case::{Case, Level};
use outcome::TierOutcome;

/// Every tier, in order; every case gets one trial per entry.
pub const ALL_LEVELS: [Level; 5] = [Level::L1, Level::L2, Level::L3, Level::L4, Level::L5];

/// Options shared by all trials of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding `<category>/<case>.json` goldens.
    pub goldens_root: PathBuf,
    /// `true` when running under CI (`CI` set): `ci_skip_reason` applies.
    pub ci: bool,
}

impl RunOptions {
    /// Defaults for this repository: `goldens/` beside `cases/`, CI from the environment.
    pub fn from_env() -> Self {
        RunOptions {
            goldens_root: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("goldens"),
            ci: std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false"),
        }
    }
}

/// The reason a trial will not run, if it can be known before running it.
pub fn static_skip(case: &Case, level: Level, opts: &RunOptions) -> Option<String> {
    if !implemented(level) {
        return Some(format!("{level} is not implemented yet"));
    }
    if !case.levels.contains(&level) {
        let listed = case.levels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
        return Some(format!("the case does not request {level} (levels: {listed})"));
    }
    if let Some(r) = &case.skip_reason {
        return Some(format!("skip_reason: {r}"));
    }
    if opts.ci {
        if let Some(r) = &case.ci_skip_reason {
            return Some(format!("ci_skip_reason (CI is set): {r}"));
        }
    }
    let needs_checkpoint_config = matches!(level, Level::L1 | Level::L2 | Level::L3);
    if needs_checkpoint_config {
        match &case.checkpoint {
            None => {
                return Some(format!(
                    "no local checkpoint: add `checkpoint: <HF folder with config.json>` to {}",
                    case.path.display()
                ))
            }
            Some(dir) if !dir.join("config.json").is_file() => {
                return Some(format!("checkpoint {} has no config.json: download or regenerate it", dir.display()))
            }
            _ => {}
        }
    }
    if matches!(level, Level::L1 | Level::L3 | Level::L4 | Level::L5) {
        match &case.onnx {
            None => return Some(format!("no ONNX export: add `onnx: <export folder>` to {}", case.path.display())),
            Some(dir) if !dir.is_dir() => {
                return Some(format!("ONNX export {} does not exist: export it (scripts/make-fixtures.sh for fixtures)", dir.display()))
            }
            _ => {}
        }
    }
    None
}

/// Tiers this build can run; the others report `skipped`, never a pass.
pub fn implemented(level: Level) -> bool {
    matches!(level, Level::L1)
}

/// Runs one tier of one case (after [`static_skip`] said it may run).
pub fn run_level(case: &Case, level: Level, _opts: &RunOptions) -> TierOutcome {
    let outcome = match level {
        Level::L1 => match (&case.checkpoint, &case.onnx) {
            (Some(ckpt), Some(onnx)) => l1::check(&ckpt.join("config.json"), onnx, case.dtype.onnx_elem_type()),
            _ => TierOutcome::skipped("L1 needs `checkpoint:` and `onnx:`"),
        },
        other => TierOutcome::skipped(format!("{other} is not implemented yet")),
    };
    outcome.with_expected_failure(case.xfail_for(level))
}
