//! `onnx-parity` command line: list cases, run tiers, regenerate goldens, dump logits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use onnx_parity::artifacts::Artifacts;
use onnx_parity::case::{discover, Level};
use onnx_parity::evaluation::implementations;
use onnx_parity::gpu;
use onnx_parity::plan::{plan, TrialKind};
use onnx_parity::regenerate::{regenerate, GoldenChange};
use onnx_parity::report::{CaseReport, LevelReport, RunMetadata, RunReport};
use onnx_parity::tiers::RunOptions;

mod check;
mod dumps;
use dumps::{compare, compare_with_arbiter, diff_reports, logits, LogitsArgs, Precision};

#[derive(Parser)]
#[command(name = "onnx-parity", version, about = "Proves an ONNX export of a Gemma 4 model computes the same function as the model")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Neither read nor write the reference cache (also `ONNX_PARITY_REFERENCE_CACHE=off`):
    /// every reference-side result is computed.
    #[arg(long, global = true)]
    no_cache: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List the cases found under PATHs (case files or folders; default `cases/`), their levels
    /// and parse errors, then each trial with the execution provider it runs on for the EPs
    /// `ONNX_PARITY_EP` selects (ignored ones with why). Exits 1 if any file is malformed.
    List {
        paths: Vec<PathBuf>,
        /// The execution providers to plan trials on (`cpu`, `cuda:1`, `cpu,cuda`; else
        /// `ONNX_PARITY_EP`, else the CPU).
        #[arg(long)]
        ep: Option<String>,
    },
    /// Judge an export without a case file: the case is built from the export and its
    /// checkpoint (`--model DIR|HF_ID`), what could not be inferred is printed, then the tiers
    /// run as `run` runs them (same verdicts, reports, blame and exit status; 2 when the export
    /// or the checkpoint is not usable). `--write-case FILE` keeps the YAML to commit.
    Check(check::CheckArgs),
    /// Run tiers on the cases under PATHs and print a verdict per case × tier. Exits 0 when every
    /// tier that ran passed (xfail, ambiguous and skipped do not fail a run), 1 when one failed,
    /// 3 when nothing ran (every trial asked for was skipped or ignored), 2 on an error.
    Run {
        paths: Vec<PathBuf>,
        /// A trial whose artifact is missing (export, checkpoint, golden) fails naming it instead
        /// of being skipped (also `ONNX_PARITY_STRICT=1`): for CI, where a missing export means
        /// the job lost it.
        #[arg(long)]
        strict: bool,
        /// The execution providers the trials run on (`cpu`, `cuda:1`, `cpu,cuda`; else
        /// `ONNX_PARITY_EP`, else the CPU).
        #[arg(long)]
        ep: Option<String>,
        /// Comma-separated tiers to run, e.g. `L1,L3` (default: all).
        #[arg(long, value_delimiter = ',', value_parser = parse_level)]
        levels: Vec<Level>,
        #[command(flatten)]
        files: ReportFiles,
        /// Folder with `<category>/<case>.json` goldens.
        #[arg(long)]
        goldens: Option<PathBuf>,
    },
    /// Write L4 and L5 goldens from the reference for the cases under PATHs. Refuses to replace
    /// a golden that differs unless --force; prints what changed.
    Golden {
        paths: Vec<PathBuf>,
        #[arg(long)]
        force: bool,
        #[arg(long)]
        goldens: Option<PathBuf>,
    },
    /// Download into the HF cache what the cases under PATHs name by `model_id`/`revision`:
    /// config.json and the tokenizer/processor files (L2, prompts), and with --weights the
    /// safetensors (the reference for L4/L5). Uses HF_TOKEN (or the token file), HF_ENDPOINT,
    /// HF_HOME/HF_HUB_CACHE; never logs the token. With --runtimes, first every runtime library
    /// the selected EPs (`ONNX_PARITY_EP`) and the cases' implementations need, into the cache a
    /// later run without network reads (ONNX_PARITY_CACHE).
    Fetch {
        paths: Vec<PathBuf>,
        /// Also the weights (model.safetensors or the index and its shards).
        #[arg(long)]
        weights: bool,
        /// Also the runtimes: ONNX Runtime for the selected EPs (onnxruntime, onnxruntime-gpu,
        /// plugin EP wheels), and onnxruntime-genai with its ONNX Runtime when a case lists ort-genai.
        #[arg(long)]
        runtimes: bool,
        /// Only the runtimes (no case files are read from the hub).
        #[arg(long, requires = "runtimes")]
        no_hub: bool,
    },
    /// Write the tensors both back ends receive for a case (`input_ids`, and with images
    /// `pixel_values`, `image_position_ids`, `mm_token_type_ids`) and print a one-line summary;
    /// when the case has an L4 golden, a second line says whether its input_ids are the case's
    /// (L4/L5 replay the golden's ids).
    Inputs {
        case: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// The inputs of the case's `synthetic:` stand-in (what L1/L3 run on) instead of its own.
        #[arg(long, conflicts_with = "replay")]
        synthetic: bool,
        /// What L4/L5 receive: the golden's input_ids with the case's images.
        #[arg(long)]
        replay: bool,
        /// Folder with `<category>/<case>.json` goldens.
        #[arg(long)]
        goldens: Option<PathBuf>,
    },
    /// Dump `logits` [1,S,V] (all positions), `greedy_tokens` and `image_features` from the
    /// reference (--checkpoint), ONNX Runtime (--onnx) or candle-transformers' gemma4
    /// (--implementation candle-transformers --checkpoint) for an inputs safetensors file.
    Logits(LogitsArgs),
    /// Compare two `logits` dumps tensor by tensor (e.g. the reference with ONNX_PARITY_DEVICE=cpu
    /// and =cuda). Exits 1 when a float tensor differs by more than --max-abs, an integer tensor
    /// (greedy_tokens) differs at all, or a tensor is missing or mis-shaped on one side.
    ///
    /// With --arbiter F64 (a dump of `logits --dtype f64` of the same inputs), B is judged as L3
    /// judges a candidate: each float tensor's error against F64 may be k times A's (the f32
    /// reference on the CPU: the floor) plus δ, the float32 row of L3_calibrated; integer
    /// tensors must be equal. This is the GPU reference's bound (scripts/gpu-check.sh). With
    /// --precision f16|bf16, A is the reference at that precision (`logits --dtype bf16`) and
    /// the row is that precision's (scripts/measure_half_precision.py).
    Compare {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, default_value_t = 1e-5, conflicts_with = "arbiter")]
        max_abs: f64,
        #[arg(long)]
        arbiter: Option<PathBuf>,
        /// The L3_calibrated row B is judged by (with --arbiter): f32, f16 or bf16.
        #[arg(long, value_enum, default_value_t = Precision::F32, requires = "arbiter")]
        precision: Precision,
    },
    /// Merge the trial records a test run wrote (`ONNX_PARITY_OUTCOMES=DIR cargo nextest run
    /// --test parity`, possibly partitioned over machines) into the reports `run` writes. Prints
    /// the totals (xfail, ambiguous and skipped apart from passes); exits 1 if a tier failed.
    Report {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        #[command(flatten)]
        files: ReportFiles,
    },
    /// The trials whose verdict differs between two `run --report` files (e.g. the CPU run and
    /// the GPU run of the same cases; a trial's CPU and CUDA names match without their ` on <ep>`
    /// suffix), and those one run ran and the other skipped, with why. Exits 1 when a trial both
    /// runs ran changed verdict.
    Diff { a: PathBuf, b: PathBuf },
    /// Write a reproducer bundle for the first divergence of CASE's L3: the blamed decoder layer
    /// cut out of the decoder (or the sub-model that differs in isolation), its inputs and the
    /// reference's outputs in ONNX's test-data layout, `reproduce.py` (onnxruntime, onnx, numpy)
    /// and a README. On a passing case it writes nothing and says so.
    Repro {
        case: PathBuf,
        /// A variant of the case (`variants:` key) instead of its own export.
        #[arg(long)]
        variant: Option<String>,
        #[arg(long, default_value = "L3", value_parser = parse_level)]
        level: Level,
        #[arg(long)]
        out: PathBuf,
    },
    /// The TF32 probe: a matmul TF32 cannot compute within 1e-5 (relative), through candle on the
    /// reference's device (ONNX_PARITY_DEVICE) and through ONNX Runtime with this build's
    /// execution provider, each against f64 on the CPU. Exits 1 if either is TF32-like.
    Tf32Probe,
}

fn repro(path: PathBuf, variant: Option<String>, level: Level, out: PathBuf) -> anyhow::Result<ExitCode> {
    let case = onnx_parity::case::Case::load(&path)?;
    let candidate = variant.as_deref().map(onnx_parity::case::Candidate::variant).unwrap_or_default();
    let case = case
        .view(&candidate)
        .with_context(|| format!("{}: no variant `{}` under `variants:`", path.display(), variant.as_deref().unwrap_or_default()))?;
    let id = candidate.id(&case);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    match onnx_parity::repro::make(&case, &candidate, level, &out, &command)? {
        onnx_parity::repro::ReproOutcome::Passes(o) => {
            println!("{id} {level} passes: no divergence to reproduce, nothing written ({})", o.message);
        }
        onnx_parity::repro::ReproOutcome::Written { dir, part, measured, reproduces } => {
            println!("wrote {} for {id}: {part}", dir.display());
            for (name, d, bad, all) in measured {
                println!("  {name}: max_abs_diff {d:.3e}, {bad} of {all} outside the tolerance");
            }
            println!("  the mismatch {} in the bundle alone", if reproduces { "reproduces" } else { "does not reproduce" });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The report files `run` and `report` write.
#[derive(clap::Args)]
pub(crate) struct ReportFiles {
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write a Markdown table here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write one self-contained HTML page here (inline CSS and SVG plots, no network).
    #[arg(long)]
    html: Option<PathBuf>,
}

fn default_paths(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    if paths.is_empty() {
        vec![PathBuf::from("cases")]
    } else {
        paths
    }
}

/// A `--levels` entry: `L1` … `L5`, any case.
pub(crate) fn parse_level(s: &str) -> Result<Level, onnx_parity::names::UnknownName> {
    s.trim().to_ascii_uppercase().parse()
}

fn list(paths: Vec<PathBuf>) -> anyhow::Result<ExitCode> {
    let paths = default_paths(paths);
    let found = discover(&paths);
    let mut bad = 0;
    for (path, parsed) in &found {
        let unknown = parsed.as_ref().ok().and_then(implementations::unknown_implementation);
        match parsed {
            Ok(_) if unknown.is_some() => {
                bad += 1;
                println!("ERROR {}", unknown.unwrap_or_default());
            }
            Ok(case) => {
                let levels = case.levels.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",");
                let skip = case.skip_reason.as_deref().map(|r| format!("  [skip: {r}]")).unwrap_or_default();
                println!("{}/{}  {}  {}  levels={levels}{skip}", case.category, case.name, case.model_type, case.dtype);
            }
            Err(e) => {
                bad += 1;
                println!("ERROR {}: {e}", path.display());
            }
        }
    }
    println!("{} cases, {} malformed", found.len() - bad, bad);
    // The trials, each with its EP, as the test target and `run` plan them.
    let opts = RunOptions::from_env();
    let trials = plan(&paths, &opts);
    let mut runs = 0;
    println!();
    for t in &trials {
        let what = match &t.kind {
            TrialKind::Run { .. } => {
                runs += 1;
                "run".to_string()
            }
            TrialKind::Ignored { reason, .. } => format!("ignored: {reason}"),
            TrialKind::Failing { message } => format!("fails: {message}"),
        };
        println!("{}  [{}]  {what}", t.name, t.ep.label());
    }
    let eps: Vec<String> = opts.eps.iter().map(|e| e.to_string()).collect();
    println!("{} trials on {} ({runs} to run)", trials.len(), eps.join(", "));
    Ok(if bad > 0 || found.is_empty() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `run`'s exit status when no trial it was asked for ran (pytest's "no tests collected").
const NOTHING_RAN: u8 = 3;

pub(crate) fn run(
    paths: Vec<PathBuf>,
    levels: Vec<Level>,
    files: ReportFiles,
    goldens: Option<PathBuf>,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    let levels = if levels.is_empty() { Level::ALL.to_vec() } else { levels };
    let mut opts = RunOptions::from_env();
    opts.strict |= strict;
    opts.levels = Some(levels);
    if let Some(g) = goldens {
        opts.goldens_root = Some(g);
    }
    let start = Instant::now();
    let mut meta = RunMetadata::new(&opts.eps);
    // A GPU run starts with the TF32 probe and stops on a TF32-like back end.
    meta.gpu.tf32_probe = gpu::probe_gpu_run(&opts.eps).context("GPU run refused")?;
    // The test target's trial list: the same skips, the same failing trials for malformed files.
    let trials = plan(&default_paths(paths), &opts);
    let mut cases: Vec<CaseReport> = Vec::new();
    // Consumed in order, so a case's runs are dropped with its last trial.
    for trial in trials {
        let (Some(name), level) = (trial.case, trial.level) else {
            anyhow::bail!("no case YAML found");
        };
        // The test target's verdict policy (a run-time skip is a failure naming it).
        let outcome = onnx_parity::plan::run_trial(trial.kind, &opts, &meta.gpu.tf32_probe);
        let entry = LevelReport { level: level.map_or_else(|| "parse".to_string(), |l| l.to_string()), outcome };
        match cases.last_mut().filter(|c| c.name == name) {
            Some(c) => c.levels.push(entry),
            None => cases.push(CaseReport { name, execution_provider: trial.ep.label(), levels: vec![entry] }),
        }
    }
    meta.wall_s = start.elapsed().as_secs_f64();
    meta.peak_rss_gib = onnx_parity::memory::process_peak_bytes().map(|b| (b as f64 / (1u64 << 30) as f64 * 100.0).round() / 100.0);
    meta.reference_cache = onnx_parity::reference_cache::usage();
    let report_data = RunReport { cases, metadata: meta };
    write_reports(&report_data, &files)?;
    print!("{}", report_data.console_summary());
    let matrix = onnx_parity::variant_matrix::markdown(&report_data);
    if !matrix.is_empty() {
        print!("\nvariant matrix (docs/exporters.md's table):\n\n{matrix}");
    }
    if !report_data.ok() {
        return Ok(ExitCode::FAILURE);
    }
    if report_data.count(onnx_parity::tiers::outcome::Status::Skipped) == report_data.cases.iter().map(|c| c.levels.len()).sum::<usize>() {
        println!(
            "nothing ran: every trial asked for was skipped or ignored (exit status {NOTHING_RAN}); see the reasons above, or \
             --strict to fail missing artifacts"
        );
        return Ok(ExitCode::from(NOTHING_RAN));
    }
    Ok(ExitCode::SUCCESS)
}

fn golden(paths: Vec<PathBuf>, force: bool, goldens: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = goldens.or_else(|| RunOptions::from_env().goldens_root);
    let found = discover(&default_paths(paths));
    if found.is_empty() {
        anyhow::bail!("no case YAML found");
    }
    let mut ok = true;
    for (path, parsed) in found {
        let case = match parsed {
            Ok(c) => c,
            Err(e) => {
                ok = false;
                println!("ERROR {}: {e}", path.display());
                continue;
            }
        };
        if Artifacts::of(&case).checkpoint.is_none() {
            let why = format!("{}: no checkpoint for the reference (`checkpoint:`, or {} in the HF cache)", path.display(), case.model_id);
            // Strict (ONNX_PARITY_STRICT=1): a missing checkpoint is an error, not a skip.
            if onnx_parity::context::current().strict {
                ok = false;
                println!("ERROR     {why} (strict mode)");
            } else {
                println!("skipped   {why}");
            }
            continue;
        }
        let case_root = root.clone().unwrap_or_else(|| onnx_parity::golden::root_for(&case.path));
        match regenerate(&case, &case_root, force) {
            Ok(changes) => {
                for c in changes {
                    ok &= !matches!(c, GoldenChange::Refused { .. });
                    println!("{c}");
                }
            }
            Err(e) => {
                ok = false;
                println!("ERROR {e}");
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Files of a checkpoint the harness reads besides the weights; only config.json is required.
/// (The processor reads `preprocessor_config.json` when there is no `processor_config.json`, and
/// a chat template from `chat_template.jinja`, the legacy `chat_template.json` or
/// `tokenizer_config.json`.)
const CHECKPOINT_FILES: [&str; 7] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "chat_template.jinja",
    "chat_template.json",
];

/// `fetch --runtimes`: every runtime library the selected EPs need, and ORT GenAI's when a case
/// under `paths` lists it, into the cache; prints each and where it lies.
fn fetch_runtimes(paths: &[PathBuf]) -> anyhow::Result<bool> {
    let eps = onnx_parity::context::current().eps.clone()?;
    let mut ok = true;
    match onnx_parity::runtime::provision::fetch_runtimes(&eps) {
        Ok(fetched) => {
            for f in fetched {
                println!("runtime   {} -> {}", f.spec, f.library.display());
            }
        }
        Err(e) => {
            ok = false;
            println!("ERROR     {e}");
        }
    }
    let genai_name = implementations::ORT_GENAI.name;
    let genai =
        discover(paths).into_iter().filter_map(|(_, c)| c.ok()).any(|c| c.listed_implementations().any(|e| e.name.as_str() == genai_name));
    if genai {
        let root = onnx_parity::runtime::wheel::cache_root();
        match onnx_parity::ort_genai::install(&root, &onnx_parity::runtime::wheel::WheelSource::Pip) {
            Ok((lib, ort)) => {
                println!("runtime   onnxruntime-genai=={} -> {}", onnx_parity::ort_genai::GENAI_VERSION, lib.display());
                println!("runtime   onnxruntime=={} (ORT GenAI's) -> {}", onnx_parity::ort_genai::GENAI_ORT_VERSION, ort.display());
            }
            Err(e) => {
                ok = false;
                println!("ERROR     {e}");
            }
        }
        for ep in eps.iter().filter(|e| !e.is_cpu()) {
            if let Some(why) = onnx_parity::ort_genai::not_on(*ep) {
                println!("skipped   ORT GenAI on {ep}: {why}");
            }
        }
    }
    Ok(ok)
}

fn fetch(paths: Vec<PathBuf>, weights: bool, runtimes: bool, no_hub: bool) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    if runtimes {
        ok &= fetch_runtimes(&default_paths(paths.clone()))?;
        if no_hub {
            return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
    }
    let hub = onnx_parity::hub::Hub::new(onnx_parity::context::current().hub.clone());
    let mut seen = std::collections::BTreeSet::new();
    for (path, parsed) in discover(&default_paths(paths)) {
        let case = match parsed {
            Ok(c) => c,
            Err(e) => {
                ok = false;
                println!("ERROR {}: {e}", path.display());
                continue;
            }
        };
        if case.checkpoint.is_some() || case.model_id.is_empty() {
            continue;
        }
        let revision = case.revision.clone().unwrap_or_else(|| "main".into());
        if !seen.insert((case.model_id.clone(), revision.clone())) {
            continue;
        }
        for (i, file) in CHECKPOINT_FILES.iter().enumerate() {
            match hub.snapshot_file(&case.model_id, &revision, file) {
                Ok(p) => println!("fetched   {}@{revision} {file} -> {}", case.model_id, p.display()),
                Err(e) if i > 0 && e.is_missing_file() => {}
                Err(e) => {
                    ok = false;
                    println!("ERROR     {e}");
                    break;
                }
            }
        }
        if weights {
            match hub.weights(&case.model_id, &revision) {
                Ok(w) => println!("fetched   {}@{revision} weights ({} files)", case.model_id, w.files().len()),
                Err(e) => {
                    ok = false;
                    println!("ERROR     {e}");
                }
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn inputs(path: PathBuf, out: PathBuf, synthetic: bool, replay: bool, goldens: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let mut found = discover(std::slice::from_ref(&path));
    let (file, parsed) = match found.len() {
        1 => found.remove(0),
        0 => anyhow::bail!("no case YAML at {}", path.display()),
        n => anyhow::bail!("{} holds {n} cases; give one case file", path.display()),
    };
    let case = parsed.with_context(|| file.display().to_string())?;
    let case = if synthetic {
        if case.synthetic.is_none() {
            anyhow::bail!("{}: --synthetic, but the case has no `synthetic:` stand-in", file.display());
        }
        case.for_synthetic_tiers().into_owned()
    } else {
        case
    };
    let (model_inputs, source) = onnx_parity::inputs::for_case_with_source(&case).with_context(|| {
        let hint = if !synthetic && case.synthetic.is_some() { " (--synthetic: the stand-in's inputs)" } else { "" };
        format!("inputs of {}{hint}", file.display())
    })?;
    // The L4 golden's ids, which L4/L5 feed instead of the case's own (inputs::replay).
    let golden_root = goldens.or_else(|| RunOptions::from_env().goldens_root).unwrap_or_else(|| onnx_parity::golden::root_for(&case.path));
    let (golden_path, _) = onnx_parity::golden::golden_paths(&golden_root, &case.category, &case.name);
    let golden = if synthetic { None } else { onnx_parity::golden::Golden::load(&golden_path)? };
    let drift = golden.as_ref().and_then(|g| onnx_parity::inputs::replay::first_difference(&model_inputs.input_ids, &g.input_ids));
    let written = match (&golden, replay) {
        (Some(g), true) => {
            onnx_parity::inputs::replay::with_golden_ids(&model_inputs, &g.input_ids)
                .map_err(|e| anyhow::anyhow!("{}: {e}", golden_path.display()))?
                .0
        }
        (None, true) => anyhow::bail!("--replay: no golden at {} (its input_ids are what would be replayed)", golden_path.display()),
        (_, false) => model_inputs,
    };
    let bytes = onnx_parity::inputs::to_safetensors(&written).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    onnx_parity::atomic::write_atomic(&out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let images = onnx_parity::inputs::soft_tokens_per_image(&written);
    println!(
        "{}: {} ids, {} image(s){}; from {}",
        out.display(),
        written.input_ids.len(),
        images.len(),
        if images.is_empty() { String::new() } else { format!(" with {images:?} soft tokens") },
        if replay { format!("the golden's input_ids ({}) with {source}", golden_path.display()) } else { source.to_string() }
    );
    match (&golden, drift) {
        (None, _) => {}
        (Some(_), None) => println!("golden {}: its input_ids are the case's", golden_path.display()),
        (Some(_), Some(d)) => println!(
            "warning: golden {}: {d}{}",
            golden_path.display(),
            if replay { "" } else { " (L4/L5 replay those; --replay writes them)" }
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON report and the Markdown table, where asked for.
fn write_reports(r: &RunReport, files: &ReportFiles) -> anyhow::Result<()> {
    if let Some(p) = &files.report {
        r.write_json(p)?;
    }
    if let Some(p) = &files.html {
        let page = onnx_parity::html::page(r);
        onnx_parity::atomic::write_atomic(p, page.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &files.markdown {
        let matrix = onnx_parity::variant_matrix::markdown(r);
        let text = if matrix.is_empty() { r.markdown() } else { format!("{}\n## Variant matrix\n\n{matrix}", r.markdown()) };
        onnx_parity::atomic::write_atomic(p, text.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn merge_reports(dirs: Vec<PathBuf>, files: ReportFiles) -> anyhow::Result<ExitCode> {
    let records = onnx_parity::report::TrialRecord::read_all(&dirs)?;
    if records.is_empty() {
        anyhow::bail!("no trial records under {dirs:?}");
    }
    let merged = RunReport::from_records(records);
    write_reports(&merged, &files)?;
    print!("{}", onnx_parity::variant_matrix::markdown(&merged));
    println!("{}", merged.totals());
    Ok(if merged.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn tf32_probe() -> anyhow::Result<ExitCode> {
    let device = gpu::reference_device()?;
    let mut results = vec![gpu::probe_candle(&device)?];
    let eps = onnx_parity::context::current().eps_or_cpu();
    onnx_parity::runtime::provision::select(&eps)?;
    for ep in eps {
        match gpu::probe_ort(ep) {
            Ok(r) => results.push(r),
            Err(e) => println!("onnxruntime {}: not probed ({e})", ep.label()),
        }
    }
    let env = onnx_parity::context::current().tf32();
    println!("NVIDIA_TF32_OVERRIDE={} (set by {})", env.nvidia_tf32_override.as_deref().unwrap_or("unset"), env.set_by);
    println!("candle reduced precision: {:?}", onnx_parity_reference::device::reduced_precision());
    let mut ok = true;
    for r in &results {
        ok &= !r.tf32_like;
        println!("{:<48} max_rel_err {:.3e}  {}", r.backend, r.max_rel_err, if r.tf32_like { "TF32-LIKE" } else { "f32" });
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn main() -> ExitCode {
    // The run context (src/context.rs): resolved once, here, from the environment; while the
    // process has one thread, the variables the libraries it loads read (TF32 off for CUDA before
    // any CUDA context, ORT GenAI's ONNX Runtime) are set here and nowhere else.
    let cli = Cli::parse();
    let mut context = onnx_parity::context::RunContext::from_env();
    if cli.no_cache {
        context = context.without_reference_cache();
    }
    // The EP axis: a command's `--ep` over the variable, installed with the context before
    // anything is planned (the plan reads it; nothing after changes it).
    if let Command::Check(check::CheckArgs { ep: Some(eps), .. })
    | Command::Run { ep: Some(eps), .. }
    | Command::List { ep: Some(eps), .. } = &cli.command
    {
        context.eps = onnx_parity::eps::parse_selection(eps);
        if context.eps.is_err() {
            eprintln!("error: --ep {eps}: {}", onnx_parity::eps::EXPECTED_EPS);
            return ExitCode::from(2);
        }
    }
    let vars = onnx_parity::driver::variables_to_set(&context, cfg!(feature = "cuda"));
    for (k, v) in &vars {
        std::env::set_var(k, v);
    }
    onnx_parity::context::install(context.with_set(&vars));
    onnx_parity::logging::init(std::env::var(onnx_parity::logging::LOG_VARIABLE).ok().as_deref(), "info");
    if let Err(e) = &onnx_parity::context::current().eps {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::List { paths, .. } => list(paths),
        Command::Check(args) => check::check(args),
        Command::Run { paths, levels, files, goldens, strict, .. } => run(paths, levels, files, goldens, strict),
        Command::Golden { paths, force, goldens } => golden(paths, force, goldens),
        Command::Fetch { paths, weights, runtimes, no_hub } => fetch(paths, weights, runtimes, no_hub),
        Command::Inputs { case, out, synthetic, replay, goldens } => inputs(case, out, synthetic, replay, goldens),
        Command::Logits(args) => logits(args),
        Command::Compare { a, b, max_abs, arbiter: None, .. } => compare(a, b, max_abs),
        Command::Compare { a, b, arbiter: Some(f64), precision, .. } => compare_with_arbiter(a, b, f64, precision),
        Command::Repro { case, variant, level, out } => repro(case, variant, level, out),
        Command::Tf32Probe => tf32_probe(),
        Command::Report { dirs, files } => merge_reports(dirs, files),
        Command::Diff { a, b } => diff_reports(a, b),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
