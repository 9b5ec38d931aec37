//! The trial list of the `parity` test target: one trial per discovered case × build ×
//! implementation × execution provider × tier, named `<category>/<case>[@<variant>]::L<n>`
//! (`… [<implementation>]` for one other than the export, `… on <ep>` on an EP other than the
//! CPU), decided from the YAML and the selected EPs alone (models load inside the trial).
//!
//! Each build runs on every selected EP it targets ([`crate::eps::BuildTarget`]: the CPU runs
//! every build; another EP the portable ones and its own); on the others its trials are ignored
//! naming why. A malformed YAML becomes a failing trial naming the file and field; finding no
//! case at all is a failing trial; skips known before running become ignored trials with their
//! reason.

use std::path::PathBuf;
use std::sync::Arc;

use crate::case::{discover, Candidate, Case, Level};
use crate::eps::RunEp;
use crate::evaluation::{implementations, CaseEvaluations};
use crate::runtime::kernels::MatMulNBitsModel;
use crate::tiers::outcome::TierOutcome;
use crate::tiers::{skip_of, RunOptions, Skip, SkipCause};

/// One trial: a case, the candidate it judges (a build in an implementation) and a tier.
#[derive(Debug, Clone)]
pub struct Trial {
    /// The case as the candidate runs it ([`Case::view`] of the YAML's case).
    pub case: Arc<Case>,
    pub candidate: Candidate,
    pub level: Level,
}

impl Trial {
    /// `<category>/<case>[@<variant>]::L<n>[ [<implementation>]]`.
    pub fn name(&self) -> String {
        self.candidate.trial_name(&self.case, self.level)
    }
}

/// What a planned trial does.
pub enum TrialKind {
    /// Run the trial; trials of one case share `eval`.
    Run { trial: Trial, eval: Arc<CaseEvaluations> },
    /// Not run, for this reason.
    Ignored { reason: String, cause: SkipCause },
    /// Fails with this message without running anything (malformed YAML, no cases).
    Failing { message: String },
}

/// One trial: its name and what it does.
pub struct PlannedTrial {
    /// `<category>/<case>::L<n>`, `malformed::<path>` or `discovery::no-cases`.
    pub name: String,
    /// The case (`<category>/<case>`, or the malformed file's path) and tier it belongs to, for
    /// reports; `None` for the no-cases trial.
    pub case: Option<String>,
    pub level: Option<Level>,
    /// The execution provider it runs on (the CPU for a trial that runs nothing).
    pub ep: RunEp,
    pub kind: TrialKind,
}

/// Plans the trials for the cases under `roots`.
pub fn plan(roots: &[PathBuf], opts: &RunOptions) -> Vec<PlannedTrial> {
    // The process's ONNX Runtime is loaded for the trials' EPs, before any of them opens a session.
    if let Err(e) = crate::runtime::provision::select(&opts.eps) {
        return vec![PlannedTrial {
            name: "run::execution-providers".into(),
            case: None,
            level: None,
            ep: RunEp::Cpu,
            kind: TrialKind::Failing { message: e.to_string() },
        }];
    }
    let found = discover(roots);
    let mut trials = Vec::new();
    if found.is_empty() {
        let where_ = roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ");
        trials.push(PlannedTrial {
            name: "discovery::no-cases".into(),
            case: None,
            level: None,
            ep: RunEp::Cpu,
            kind: TrialKind::Failing { message: format!("no case YAML found under {where_}") },
        });
    }
    for (path, parsed) in found {
        match parsed {
            Err(e) => trials.push(PlannedTrial {
                name: format!("malformed::{}", path.display()),
                case: Some(path.display().to_string()),
                level: None,
                ep: RunEp::Cpu,
                kind: TrialKind::Failing { message: e.to_string() },
            }),
            Ok(case) if implementations::unknown_implementation(&case).is_some() => trials.push(PlannedTrial {
                name: format!("malformed::{}", path.display()),
                case: Some(path.display().to_string()),
                level: None,
                ep: RunEp::Cpu,
                kind: TrialKind::Failing { message: implementations::unknown_implementation(&case).unwrap_or_default() },
            }),
            Ok(case) => {
                // The case and each of its variants: one evaluation, so one reference run.
                // A run without L5 does not decode a candidate freely a second time.
                let free = opts.runs_level(Level::L5);
                let eval = Arc::new(CaseEvaluations::for_case_on(&opts.judged(&case), &opts.eps).decoding_freely(free));
                let base_quantized = case.dtype.is_quantized();
                // Other implementations are judged on the tiers that compare computed outputs;
                // L1 and L2 judge an export's graph and the config.
                const COMPUTED: [Level; 3] = [Level::L3, Level::L4, Level::L5];
                // Each build (the case's own export, each variant's) in the pipeline; a runtime
                // (per_export) judges each build too; a model implementation the checkpoint once.
                let builds: Vec<Candidate> =
                    std::iter::once(Candidate::default()).chain(case.variants.keys().map(|v| Candidate::variant(v))).collect();
                let mut candidates: Vec<(Candidate, &[Level])> = Vec::new();
                if case.judges_onnx() {
                    candidates.extend(builds.iter().map(|b| (b.clone(), &Level::ALL[..])));
                }
                for build in &builds {
                    let Some(view) = case.view(build) else { continue };
                    for entry in view.implementations.iter().filter(|e| !e.name.is_onnx()) {
                        if build.variant.is_none() || implementations::candidate(&entry.name).is_some_and(|i| i.per_export) {
                            candidates.push((build.clone().in_implementation(entry.name.clone()), &COMPUTED[..]));
                        }
                    }
                }
                // A quantized build is judged against the reference on its own dequantized
                // weights: its own evaluation (and a float variant of a quantized case, the float
                // reference's), shared by its trials on every EP whose kernels compute it alike
                // (MatMulNBits' activations: MLAS on the CPU quantizes them at accuracy_level 4,
                // CUDA never does).
                let mut own: std::collections::BTreeMap<(Option<String>, MatMulNBitsModel), Arc<CaseEvaluations>> = Default::default();
                for (build, levels) in candidates {
                    let Some(requested) = case.view(&build) else { continue };
                    let quantized = build.variant.is_some() && (requested.dtype.is_quantized() || base_quantized);
                    // Judged at the tiers both the run and the case ask for: a run without L3
                    // computes no f64 arbiter, floor, isolation or layer streams for it.
                    let view = Arc::new(opts.judged(&requested));
                    // A model implementation runs the checkpoint on the reference's device: one
                    // trial, no EP; a runtime on each selected EP.
                    let eps: &[RunEp] = match implementations::candidate(&build.implementation).is_some_and(|i| i.per_export) {
                        true => &opts.eps,
                        false => &[RunEp::Cpu],
                    };
                    for &ep in eps {
                        let eval = match quantized {
                            true => Arc::clone(own.entry((build.variant.clone(), MatMulNBitsModel::of(ep))).or_insert_with(|| {
                                Arc::new(
                                    CaseEvaluations::for_build_on(&view, build.variant.as_deref(), ep, &opts.eps).decoding_freely(free),
                                )
                            })),
                            false => Arc::clone(&eval),
                        };
                        let candidate = build.clone().on(ep);
                        let id = candidate.id(&view);
                        // The run's levels (`run --levels`) are planned; the others are not trials of it.
                        for &level in levels.iter().filter(|&&l| opts.runs_level(l)) {
                            let trial = Trial { case: Arc::clone(&view), candidate: candidate.clone(), level };
                            let name = trial.name();
                            let kind = match skip_of(&requested, &trial.candidate, level, opts) {
                                // Strict: a missing artifact fails the trial (a CI run that lost
                                // its exports must not go green having judged nothing).
                                Some(Skip { cause: SkipCause::MissingArtifact, reason }) if opts.strict => {
                                    TrialKind::Failing { message: format!("strict mode: a needed artifact is missing: {reason}") }
                                }
                                Some(Skip { cause, reason }) => TrialKind::Ignored { reason, cause },
                                None => TrialKind::Run { trial, eval: Arc::clone(&eval) },
                            };
                            trials.push(PlannedTrial { name, case: Some(id.clone()), level: Some(level), ep, kind });
                        }
                    }
                }
            }
        }
    }
    trials
}

/// Runs a planned trial under the one verdict policy both drivers apply (the `parity` test
/// target and `onnx-parity run`): an ignored trial is a skip with its reason; a failing one
/// fails; a run's L3 verdict quotes the GPU run's TF32 probe; a skip found only while running
/// is a failure naming what could not run, since a test runner counts a skip as a pass.
pub fn run_trial(kind: TrialKind, opts: &RunOptions, tf32_probe: &[crate::gpu::ProbeResult]) -> TierOutcome {
    match kind {
        TrialKind::Ignored { reason, .. } => TierOutcome::skipped(reason),
        TrialKind::Failing { message } => TierOutcome::fail(message),
        TrialKind::Run { trial, eval } => {
            let mut result = crate::tiers::tier_result(&trial.case, &trial.candidate, trial.level, opts, &eval);
            if trial.level == Level::L3 {
                result = result.with_tf32_probe(tf32_probe);
            }
            // The one place a trial's verdict is decided; nothing changes it afterwards.
            let expectation = trial.case.xfail_on(trial.level, trial.candidate.ep);
            crate::tiers::verdict::decide(result, expectation, crate::tiers::verdict::RuntimeSkip::Fails)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::outcome::Status;

    fn opts(ci: bool) -> RunOptions {
        RunOptions { ci, ..RunOptions::with_goldens("/nonexistent-goldens") }
    }

    fn kinds(trials: &[PlannedTrial]) -> Vec<(String, &'static str, String)> {
        trials
            .iter()
            .map(|t| match &t.kind {
                TrialKind::Run { .. } => (t.name.clone(), "run", String::new()),
                TrialKind::Ignored { reason, .. } => (t.name.clone(), "ignored", reason.clone()),
                TrialKind::Failing { message } => (t.name.clone(), "failing", message.clone()),
            })
            .collect()
    }

    /// Guards the verdict policy both drivers share: an ignored trial is a skip with its reason,
    /// a failing one a failure with its message (never a pass).
    #[test]
    fn planned_skips_and_failures_keep_their_verdicts() {
        let o = run_trial(TrialKind::Ignored { reason: "why".into(), cause: SkipCause::Asked }, &opts(false), &[]);
        assert_eq!((o.status, o.message.as_str()), (Status::Skipped, "why"));
        let o = run_trial(TrialKind::Failing { message: "bad yaml".into() }, &opts(false), &[]);
        assert_eq!((o.status, o.message.as_str()), (Status::Fail, "bad yaml"));
    }

    /// Guards: a name under `implementations:` (the case's or a variant's) that the registry
    /// does not hold is a failing trial naming the file, the name and the names known.
    #[test]
    fn unknown_implementation_is_a_failing_trial() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = "model_id: x\nmodel_type: gemma4_unified\ndtype: float32\nlevels: [L1]\n";
        std::fs::write(dir.path().join("a.yaml"), format!("{base}implementations: [onnx, candle]\n")).expect("write");
        std::fs::write(dir.path().join("b.yaml"), format!("{base}variants:\n  v:\n    onnx: o\n    implementations: [ort-genia]\n"))
            .expect("write");
        let k = kinds(&plan(&[dir.path().to_path_buf()], &opts(false)));
        assert_eq!(k.len(), 2, "{k:?}");
        for (trial, name) in k.iter().zip(["\"candle\"", "\"ort-genia\""]) {
            assert_eq!(trial.1, "failing", "{k:?}");
            assert!(trial.2.contains(name) && trial.2.contains("onnx, candle-transformers, ort-genai"), "{k:?}");
        }
    }

    /// Guards: zero discovered cases is a failing trial, never an empty (green) run.
    #[test]
    fn no_cases_is_a_failure() {
        let dir = tempfile::tempdir().expect("temp dir");
        let k = kinds(&plan(&[dir.path().to_path_buf()], &opts(false)));
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].1, "failing");
    }

    /// Guards: a malformed YAML is a failing trial whose message names the file and the key.
    #[test]
    fn malformed_yaml_is_a_failing_trial() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("bad.yaml"), "model_id: x\nmodel_type: gemma4_unified\ndtype: float32\nlevels: [L1]\nbogus: 1\n")
            .expect("write");
        let k = kinds(&plan(&[dir.path().to_path_buf()], &opts(false)));
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].1, "failing");
        assert!(k[0].0.contains("bad.yaml") && k[0].2.contains("bogus"), "{k:?}");
    }

    /// Guards: five trials per case with the `<category>/<case>::L<n>` names; skip_reason and
    /// (under CI only) ci_skip_reason ignore the trial with that reason; levels the case does not
    /// request are ignored, never run.
    #[test]
    fn names_and_static_skips() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cat = dir.path().join("vision-language");
        std::fs::create_dir_all(&cat).expect("mkdir");
        let base = "model_id: x\nmodel_type: gemma4_unified\ndtype: float32\nlevel: \"L4+L5\"\n";
        std::fs::write(cat.join("a.yaml"), format!("{base}ci_skip_reason: too big for CI\n")).expect("write");
        std::fs::write(cat.join("b.yaml"), format!("{base}skip_reason: gated\n")).expect("write");
        let local = kinds(&plan(&[dir.path().to_path_buf()], &opts(false)));
        let names: Vec<_> = local.iter().map(|k| k.0.as_str()).collect();
        assert_eq!(
            &names[..5],
            &["vision-language/a::L1", "vision-language/a::L2", "vision-language/a::L3", "vision-language/a::L4", "vision-language/a::L5"]
        );
        assert!(local.iter().all(|k| k.1 == "ignored"), "{local:?}");
        assert!(local[0].2.contains("does not request L1"), "{local:?}");
        assert!(local[8].2.contains("gated"), "{local:?}");
        assert!(!local[3].2.contains("too big for CI"), "ci_skip_reason must not apply outside CI: {local:?}");
        let ci = kinds(&plan(&[dir.path().to_path_buf()], &opts(true)));
        assert!(ci[3].2.contains("too big for CI"), "{ci:?}");
    }

    /// Guards: a run's levels narrow what its trials judge (`run --levels L1` on a case that
    /// lists L3 gives its trials, and their shared evaluation, a case without L3, so no arbiter,
    /// floor or isolation runs), while a level the case does not request is still named with the
    /// case's own list.
    #[test]
    fn a_runs_levels_narrow_the_case_its_trials_judge() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cat = dir.path().join("text");
        std::fs::create_dir_all(&cat).expect("mkdir");
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemma4-text-dense");
        let yaml = format!(
            "model_id: x\nmodel_type: gemma4_text\ndtype: float32\ncheckpoint: {}\nonnx: {}\nlevels: [L1, L3]\n",
            fixture.join("checkpoint").display(),
            fixture.join("onnx").display()
        );
        std::fs::write(cat.join("a.yaml"), yaml).expect("write");
        let o = RunOptions { levels: Some(vec![Level::L1, Level::L4]), ..opts(false) };
        let trials = plan(&[dir.path().to_path_buf()], &o);
        let judged: Vec<_> = trials
            .iter()
            .filter_map(|t| match &t.kind {
                TrialKind::Run { trial, .. } => Some((t.level, trial.case.levels.iter().copied().collect::<Vec<_>>())),
                _ => None,
            })
            .collect();
        assert_eq!(judged, [(Some(Level::L1), vec![Level::L1])], "{:?}", kinds(&trials));
        let k = kinds(&trials);
        let l4 = k.iter().find(|t| t.0.ends_with("::L4")).expect("an L4 trial");
        assert_eq!(l4.1, "ignored");
        assert!(l4.2.contains("does not request L4 (levels: L1, L3)"), "{k:?}");
        assert!(!k.iter().any(|t| t.0.ends_with("::L3")), "L3 is not this run's: {k:?}");
        // Without `--levels` (the test target) the case is judged as written.
        let all = plan(&[dir.path().to_path_buf()], &opts(false));
        let l1 = all.iter().find_map(|t| match &t.kind {
            TrialKind::Run { trial, .. } if t.level == Some(Level::L1) => Some(trial.case.levels.len()),
            _ => None,
        });
        assert_eq!(l1, Some(2));
    }
}
