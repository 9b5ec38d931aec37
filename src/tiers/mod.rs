//! The five tiers and their scheduling: each tier's comparison rule lives in its module
//! (`l1` … `l5`) and returns a [`outcome::TierOutcome`]; [`static_skip`] decides the skips known
//! before running, [`tier_result`] runs one tier of one case and [`verdict::decide`] turns its
//! result and the case's expectation into the trial's verdict ([`run_level`]: both). The `parity`
//! test target and the CLI only plan and report them.

pub mod l1;
pub mod l2;
pub mod l3;
pub mod l4;
pub mod l5;
mod options;
pub mod outcome;
mod runner;
mod skip;
pub mod verdict;

pub use options::{RunOptions, GOLDENS_ENV};
pub use runner::{run_level, tier_result};
pub use skip::{skip_of, static_skip, tier_case, Skip, SkipCause};
