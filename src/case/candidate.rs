//! What a trial judges besides its case and tier: which build (the case's own export or one of
//! its `variants:`) in which implementation (`onnx`, the harness's pipeline, or another of the
//! case's `implementations:`) on which execution provider (a value the plan gives each trial and
//! the sessions are opened with). The case stays what its YAML says; [`crate::case::Case::view`]
//! is the case as a candidate runs it, and `Candidate::id` / `Candidate::trial_name` (beside
//! `Case`) name the trial.

use super::implementations::ImplementationName;
use crate::eps::RunEp;

/// A build and the implementation that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// The variant whose build is judged (`None`: the case's own export; the checkpoint for an
    /// implementation that loads it).
    pub variant: Option<String>,
    pub implementation: ImplementationName,
    /// The execution provider a runtime runs the build on (the CPU for an implementation that
    /// loads the checkpoint).
    pub ep: RunEp,
}

impl Default for Candidate {
    /// The case's own export in the harness's pipeline on the CPU EP.
    fn default() -> Self {
        Candidate { variant: None, implementation: ImplementationName::ONNX, ep: RunEp::Cpu }
    }
}

impl Candidate {
    /// Variant `name`'s build in the harness's pipeline on the CPU EP.
    pub fn variant(name: &str) -> Candidate {
        Candidate { variant: Some(name.to_string()), ..Candidate::default() }
    }

    /// This candidate on `ep`.
    pub fn on(self, ep: RunEp) -> Candidate {
        Candidate { ep, ..self }
    }

    /// This build in `implementation`.
    pub fn in_implementation(self, implementation: ImplementationName) -> Candidate {
        Candidate { implementation, ..self }
    }
}
