//! The `parity` test target: one libtest-mimic trial per case × tier, named
//! `<category>/<case>::L<n>`. `cargo test --test parity -- gemma-4-12b` selects a case by name.
//!
//! Cases come from the folders/files in `ONNX_PARITY_CASES` (`:`-separated), else `cases/` of the
//! package this test runs in (`CARGO_MANIFEST_DIR` as cargo and nextest set it when the test runs,
//! remapped with the archive), else `cases/` in the working directory: nothing is compiled in, so
//! an archived binary runs against the checkout it is given. The trial list is planned by
//! [`onnx_parity::plan`], one trial per selected EP (`ONNX_PARITY_EP`, a list) a build targets.
//! Skip reasons go to stderr (never stdout, which nextest parses when listing).

use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use onnx_parity::plan::{plan, TrialKind};
use onnx_parity::tiers::{outcome::Status, RunOptions};

fn case_roots() -> Vec<PathBuf> {
    if let Some(roots) = &onnx_parity::context::current().case_roots {
        return roots.clone();
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) => vec![PathBuf::from(dir).join("cases")],
        None => vec![PathBuf::from("cases")],
    }
}

fn main() {
    // The run context (src/context.rs): resolved once, here, from the environment; while the
    // process has one thread, the variables the libraries it loads read (TF32 off for CUDA before
    // any CUDA context, ORT GenAI's ONNX Runtime) are set here and nowhere else.
    let context = onnx_parity::context::RunContext::from_env();
    let vars = onnx_parity::driver::variables_to_set(&context, cfg!(feature = "cuda"));
    for (k, v) in &vars {
        std::env::set_var(k, v);
    }
    onnx_parity::context::install(context.with_set(&vars));
    onnx_parity::logging::init(std::env::var(onnx_parity::logging::LOG_VARIABLE).ok().as_deref(), "warn");
    let args = Arguments::from_args();
    let listing = args.list;
    let opts = Arc::new(RunOptions::from_env());
    // A GPU run (ONNX_PARITY_DEVICE=cuda, or a cuda build) starts with the TF32 probe; a
    // TF32-like back end fails every trial with the probe's numbers. Not while listing: nextest
    // lists first, and the probe would open a device for nothing.
    let probe: Result<Arc<[onnx_parity::gpu::ProbeResult]>, Arc<str>> = if listing {
        Ok(Arc::from(Vec::new()))
    } else {
        onnx_parity::gpu::probe_gpu_run(&opts.eps).map(Arc::from).map_err(|e| Arc::from(e.to_string()))
    };
    let planned = match &onnx_parity::context::current().eps {
        Ok(_) => plan(&case_roots(), &opts),
        Err(e) => vec![onnx_parity::plan::PlannedTrial {
            name: "run::execution-providers".into(),
            case: None,
            level: None,
            ep: onnx_parity::eps::RunEp::Cpu,
            kind: TrialKind::Failing { message: e.to_string() },
        }],
    };
    // Trials ignored because an artifact is missing: counted at the end, so a run that judged
    // little says so (ONNX_PARITY_STRICT=1 fails them instead).
    let mut missing_artifacts = 0usize;
    let trials: Vec<Trial> = planned
        .into_iter()
        .map(|t| match t.kind {
            TrialKind::Failing { message } => Trial::test(t.name, move || Err(Failed::from(message))),
            TrialKind::Ignored { reason, cause } => {
                if cause == onnx_parity::tiers::SkipCause::MissingArtifact {
                    missing_artifacts += 1;
                }
                if !listing {
                    eprintln!("ignored {}: {reason}", t.name);
                }
                Trial::test(t.name, || Ok(())).with_ignored_flag(true)
            }
            TrialKind::Run { trial, eval } => {
                let opts = Arc::clone(&opts);
                let probe = probe.clone();
                let (name, id, level, ep) = (trial.name(), trial.candidate.id(&trial.case), trial.level, t.ep);
                let kind = TrialKind::Run { trial, eval };
                Trial::test(t.name, move || {
                    let probe = probe.map_err(|e| Failed::from(e.to_string()))?;
                    // One verdict policy with `onnx-parity run` (onnx_parity::plan::run_trial).
                    let outcome = onnx_parity::plan::run_trial(kind, &opts, &probe);
                    // ONNX_PARITY_OUTCOMES=dir: one record per trial, merged by `onnx-parity report`.
                    if let Some(dir) = std::env::var_os("ONNX_PARITY_OUTCOMES") {
                        let record = onnx_parity::report::TrialRecord {
                            case: id.clone(),
                            level: level.to_string(),
                            outcome: outcome.clone(),
                            execution_provider: ep.label(),
                            gpu: onnx_parity::gpu::GpuMetadata::of(&opts.eps),
                        };
                        record.write(std::path::Path::new(&dir)).map_err(|e| Failed::from(e.to_string()))?;
                    }
                    // Warnings (a golden's replayed input_ids, ...) are shown whatever the status.
                    for w in &outcome.warnings {
                        eprintln!("{name} warning: {w}");
                    }
                    let line = format!("{}: {}", outcome.status, outcome.message);
                    match outcome.status {
                        Status::Pass => Ok(()),
                        // Shown so an expected failure or a near tie is never silent.
                        Status::Xfail | Status::Ambiguous => {
                            eprintln!("{name} {line}");
                            Ok(())
                        }
                        Status::Fail | Status::Skipped => Err(Failed::from(line)),
                    }
                })
            }
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if !listing && missing_artifacts > 0 {
        eprintln!(
            "parity: {missing_artifacts} trials ignored because an artifact they need is missing (export, checkpoint, golden); \
             ONNX_PARITY_STRICT=1 fails them"
        );
    }
    conclusion.exit();
}
