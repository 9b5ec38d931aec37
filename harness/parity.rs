//! The `parity` test target: one libtest-mimic trial per case × tier, named
//! `<category>/<case>::L<n>`. `cargo test --test parity -- gemma-4-12b` selects a case by name.
//!
//! Cases come from `cases/` (or the folders/files in `ONNX_PARITY_CASES`, `:`-separated). A
//! malformed YAML becomes a failing trial naming the file and field; finding no case at all is a
//! failure. Skips known before running are decided while the list is built and their reasons go
//! to stderr (never stdout, which nextest parses when listing).

use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use onnx_parity::case::{discover, Case};
use onnx_parity::evaluation::CaseEvaluation;
use onnx_parity::tiers::{self, outcome::Status, RunOptions, ALL_LEVELS};

fn case_roots() -> Vec<PathBuf> {
    match std::env::var_os("ONNX_PARITY_CASES") {
        Some(v) => std::env::split_paths(&v).collect(),
        None => vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cases")],
    }
}

fn trial_name(case: &Case, level: impl std::fmt::Display) -> String {
    format!("{}/{}::{}", case.category, case.name, level)
}

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ONNX_PARITY_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .try_init();
    let args = Arguments::from_args();
    let listing = args.list;
    let opts = Arc::new(RunOptions::from_env());
    let roots = case_roots();
    let found = discover(&roots);
    let mut trials = Vec::new();
    if found.is_empty() {
        let where_ = roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ");
        trials.push(Trial::test("discovery::no-cases", move || Err(Failed::from(format!("no case YAML found under {where_}")))));
    }
    for (path, parsed) in found {
        match parsed {
            Err(e) => {
                let name = format!("malformed::{}", path.display());
                let msg = e.to_string();
                trials.push(Trial::test(name, move || Err(Failed::from(msg))));
            }
            Ok(case) => {
                let case = Arc::new(case);
                // One evaluation per case: its tiers share the reference and ONNX runs.
                let eval = Arc::new(CaseEvaluation::default());
                for level in ALL_LEVELS {
                    let name = trial_name(&case, level);
                    if let Some(reason) = tiers::static_skip(&case, level, &opts) {
                        if !listing {
                            eprintln!("ignored {name}: {reason}");
                        }
                        trials.push(Trial::test(name, || Ok(())).with_ignored_flag(true));
                        continue;
                    }
                    let case = Arc::clone(&case);
                    let opts = Arc::clone(&opts);
                    let eval = Arc::clone(&eval);
                    trials.push(Trial::test(name, move || {
                        let outcome = tiers::run_level(&case, level, &opts, &eval);
                        let line = format!("{}: {}", outcome.status, outcome.message);
                        match outcome.status {
                            Status::Pass => Ok(()),
                            // Shown so an expected failure or a near tie is never silent.
                            Status::Xfail | Status::Ambiguous => {
                                eprintln!("{}::{level} {line}", case.name);
                                Ok(())
                            }
                            Status::Fail => Err(Failed::from(line)),
                            // A skip found only at run time: report it as a failure with the reason,
                            // since a passing trial would hide it (nextest counts ignores as passes).
                            Status::Skipped => Err(Failed::from(format!("could not run: {}", outcome.message))),
                        }
                    }));
                }
            }
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
