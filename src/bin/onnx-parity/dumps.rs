//! The dump-and-compare commands: `logits` (one implementation's logits, tokens and components
//! as safetensors), `compare` (two dumps tensor by tensor, or judged against an f64 arbiter by
//! the calibrated rule) and `diff` (verdict changes between two reports).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use onnx_parity::case::Dtype;
use onnx_parity::evaluation::implementations;
use onnx_parity::logits;
use onnx_parity_reference::BidirectionalScope as RefScope;

/// A precision the reference computes in (`logits --dtype`) or the calibrated rule judges at
/// (`compare --precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Precision {
    F32,
    F64,
    F16,
    Bf16,
}

impl Precision {
    /// The reference's compute dtype.
    fn compute(self) -> candle_core::DType {
        match self {
            Precision::F32 => candle_core::DType::F32,
            Precision::F64 => candle_core::DType::F64,
            Precision::F16 => candle_core::DType::F16,
            Precision::Bf16 => candle_core::DType::BF16,
        }
    }

    /// The `L3_calibrated` row a candidate at this precision is judged by (none for f64, the
    /// arbiter's own).
    fn row(self) -> Option<Dtype> {
        match self {
            Precision::F32 => Some(Dtype::Float32),
            Precision::F16 => Some(Dtype::Float16),
            Precision::Bf16 => Some(Dtype::Bfloat16),
            Precision::F64 => None,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        })
    }
}

/// `--implementation`: a name from the registry of implementations (or `reference`).
fn implementation_name(value: &str) -> Result<&'static str, String> {
    implementations::names()
        .into_iter()
        .find(|n| *n == value)
        .ok_or_else(|| format!("expected one of: {}", implementations::names().join(", ")))
}

/// `onnx-parity logits`.
#[derive(clap::Args)]
pub(crate) struct LogitsArgs {
    /// Which implementation runs, by its registry name: reference, onnx, candle-transformers,
    /// ort-genai (default: the reference with --checkpoint, onnx with --onnx).
    #[arg(long, value_parser = implementation_name)]
    implementation: Option<&'static str>,
    #[arg(long, conflicts_with = "onnx", required_unless_present = "onnx")]
    checkpoint: Option<PathBuf>,
    #[arg(long)]
    onnx: Option<PathBuf>,
    /// safetensors with `input_ids` [1,S] and optional `pixel_values`, `image_position_ids`, `mm_token_type_ids`.
    #[arg(long)]
    inputs: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Also greedy-decode this many tokens.
    #[arg(long, default_value_t = 0)]
    greedy: usize,
    /// Reference mask scope: all-layers | sliding-windowed | none (default: what HF forward does).
    #[arg(long)]
    bidirectional: Option<RefScope>,
    /// EOS token ids that stop greedy decoding.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    eos: Vec<i64>,
    /// Also each decoder layer's prefill output (`layer.<i>` [1,S,hidden]), as L3 compares
    /// them; for an export, the decoder runs with its layer outputs exposed.
    #[arg(long)]
    layers: bool,
    /// The execution provider an export runs on (`cpu`, `cuda[:N]`, …; default: the first
    /// `ONNX_PARITY_EP` selects). The reference's device is `ONNX_PARITY_DEVICE`.
    #[arg(long)]
    ep: Option<onnx_parity::eps::RunEp>,
    /// The reference's precision: `f32` (default); `f64`, the calibrated rule's arbiter
    /// (matrices kept f32, upcast per matmul), for `compare --arbiter`; `f16` or `bf16`, the
    /// rule's floor for a candidate at that precision (weights and activations rounded to it).
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    dtype: Precision,
}

/// `logits`: one implementation's dump of the inputs.
pub(crate) fn logits(args: LogitsArgs) -> anyhow::Result<ExitCode> {
    let LogitsArgs { implementation, checkpoint, onnx, inputs, out, greedy, bidirectional: scope, eos, layers, ep, dtype } = args;
    let name = implementation.unwrap_or(if onnx.is_some() { "onnx" } else { "reference" });
    let Some(chosen) = implementations::by_name(name) else {
        anyhow::bail!("unknown implementation {name}: expected one of {}", implementations::names().join(", "));
    };
    if scope.is_some() && name != "reference" {
        anyhow::bail!("--bidirectional applies to the reference only: an export has its mask built in, candle-transformers its own");
    }
    let model_inputs = onnx_parity::inputs::load_safetensors(&inputs)?;
    // A runtime runs the export (--onnx); the reference and candle-transformers load the checkpoint.
    let (dir, flag) =
        if chosen.per_export { (onnx.as_ref(), "--onnx <export folder>") } else { (checkpoint.as_ref(), "--checkpoint <HF folder>") };
    let Some(dir) = dir else {
        anyhow::bail!("--implementation {name} loads {}: give {flag}", if chosen.per_export { "an export" } else { "a checkpoint" });
    };
    // The EP it names, else the CPU (never the run's EP list: a dump is one back end's).
    let ep = ep.unwrap_or(onnx_parity::eps::RunEp::Cpu);
    onnx_parity::runtime::provision::select(&[ep])?;
    let options = implementations::OpenOptions { layer_outputs: layers, bidirectional: scope, ep };
    let mut backend = match (name, dtype) {
        (_, Precision::F32) => (chosen.open)(dir, &options).with_context(|| format!("{} {}", chosen.label, dir.display()))?,
        ("reference", _) => Box::new(
            onnx_parity::backend::reference::ReferenceBackend::load_with_dtype(dir, scope, dtype.compute())
                .with_context(|| format!("reference {dtype} {}", dir.display()))?,
        ),
        _ => anyhow::bail!("--dtype {dtype} applies to the reference only"),
    };
    let dump = logits::run(backend.as_mut(), &model_inputs, greedy, &eos, layers)?;
    dump.save(&out)?;
    let components: Vec<&str> = dump.run.prefill.components.keys().map(|c| c.as_str()).collect();
    eprintln!(
        "wrote {} ({}: logits {:?}{}{})",
        out.display(),
        backend.describe(),
        dump.run.prefill.logits.shape,
        if components.is_empty() { String::new() } else { format!(", {}", components.join(", ")) },
        if dump.with_tokens { format!(", greedy_tokens {:?}", dump.run.generation.tokens) } else { String::new() }
    );
    Ok(ExitCode::SUCCESS)
}

/// `compare A B`: every tensor within `max_abs`, integer tensors equal.
pub(crate) fn compare(a: PathBuf, b: PathBuf, max_abs: f64) -> anyhow::Result<ExitCode> {
    let diffs = onnx_parity::compare::compare_files(&a, &b)?;
    let mut ok = true;
    for d in &diffs {
        let verdict = if d.within(max_abs) { "ok" } else { "DIFFERS" };
        ok &= d.within(max_abs);
        match &d.mismatch {
            Some(m) => println!("{:<20} {verdict:<8} {m}", d.name),
            None => println!("{:<20} {verdict:<8} max_abs_diff {:.3e}", d.name, d.max_abs_diff),
        }
    }
    println!("{} tensors, bound {max_abs:e}: {}", diffs.len(), if ok { "within" } else { "EXCEEDED" });
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `compare A B --arbiter F64`: B's float tensors by the calibrated rule (A the floor), integer
/// tensors equal.
pub(crate) fn compare_with_arbiter(a: PathBuf, b: PathBuf, arbiter: PathBuf, precision: Precision) -> anyhow::Result<ExitCode> {
    let dtype = precision.row().context("--precision f64 is the arbiter's own: a candidate is judged at f32, f16 or bf16")?;
    let rule = onnx_parity::tolerance::Tolerances::defaults()
        .l3_calibrated
        .get(&dtype)
        .copied()
        .with_context(|| format!("cases/default_tolerances.yaml has no L3_calibrated {dtype} row"))?;
    let judged = onnx_parity::compare::judge_against_arbiter(&a, &b, &arbiter, &rule)?;
    let mut ok = true;
    for v in &judged {
        ok &= v.pass();
        match (&v.report, &v.mismatch) {
            (_, Some(m)) => println!("{:<20} DIFFERS  {m}", v.name),
            (Some(r), None) => println!(
                "{:<20} {:<8} ratio {:.2} (k {}) e_gpu max {:.3e} rms {:.3e}, floor max {:.3e} rms {:.3e}",
                v.name,
                if r.pass { "ok" } else { "DIFFERS" },
                r.ratio,
                r.k,
                r.e_cand_max,
                r.e_cand_rms,
                r.e_floor_max,
                r.e_floor_rms
            ),
            (None, None) => {}
        }
    }
    // What the arbiter does not hold: integer tensors (greedy tokens) equal; a float tensor is
    // not judged, which is a failure.
    for d in onnx_parity::compare::compare_files(&a, &b)?.iter().filter(|d| !judged.iter().any(|v| v.name == d.name)) {
        let integer = d.mismatch.is_none() && (d.max_abs_diff == 0.0 || d.max_abs_diff.is_infinite()) && d.name.contains("tokens");
        let equal = d.within(0.0);
        ok &= integer && equal;
        let verdict = if integer && equal { "ok" } else { "DIFFERS" };
        let what = if integer { "equal" } else { "no f64 value to judge it against" };
        println!(
            "{:<20} {verdict:<8} {}",
            d.name,
            if equal || !integer { what.to_string() } else { format!("max_abs_diff {:e}", d.max_abs_diff) }
        );
    }
    println!(
        "{} tensors judged against {} (k {}, δ {} ulp): {}",
        judged.len(),
        arbiter.display(),
        rule.k,
        rule.delta_ulps,
        if ok { "within" } else { "EXCEEDED" }
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `diff A B`: verdict changes between two reports, as a Markdown table.
pub(crate) fn diff_reports(a: PathBuf, b: PathBuf) -> anyhow::Result<ExitCode> {
    let read = |p: &PathBuf| -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
            .with_context(|| format!("{} is not a JSON report", p.display()))
    };
    let d = onnx_parity::verdict_diff::diff(&read(&a)?, &read(&b)?);
    let cell = |s: &str| s.replace('|', "\\|").chars().take(300).collect::<String>();
    println!("| trial | {} | {} | message in the second run |\n|---|---|---|---|", a.display(), b.display());
    for (k, x, y) in &d.changed {
        println!("| {k} | {} | {} | {} |", x.status, y.status, cell(&y.message));
    }
    let mut why: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for (_, _, reason) in &d.one_sided {
        *why.entry(reason.chars().take(160).collect()).or_default() += 1;
    }
    println!("\n{} trials with the same verdict, {} changed, {} run by one side only:", d.same, d.changed.len(), d.one_sided.len());
    for (reason, n) in why {
        println!("  {n} × {reason}");
    }
    Ok(if d.changed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
