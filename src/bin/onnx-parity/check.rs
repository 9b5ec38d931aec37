//! `onnx-parity check EXPORT --model DIR|HF_ID`: judge an export without writing a case, the
//! case built from what the export and the checkpoint say (`onnx_parity::case::infer`), run as
//! `run` runs a case file, with the same verdicts, reports and blame.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use onnx_parity::case::infer::{infer, CheckRequest, Prompt, PAST_THE_WINDOW};
use onnx_parity::case::Level;

use super::{parse_level, run, ReportFiles};

/// `check`'s arguments.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The export folder (`model.onnx`, or `decoder/`, `embedding/`, `vision_encoder/`).
    pub export: PathBuf,
    /// The checkpoint it was exported from: a folder (config.json, safetensors, tokenizer), or
    /// a model id in the HF cache (never downloaded here).
    #[arg(long)]
    pub model: String,
    /// Execution providers to judge it on (`cpu`, `cuda`, `cpu,cuda`; default
    /// `ONNX_PARITY_EP`, else the CPU).
    #[arg(long)]
    pub ep: Option<String>,
    /// Tiers to run (default L1,L3: L4/L5 need goldens, which a fresh export has none of).
    #[arg(long, value_delimiter = ',', value_parser = parse_level)]
    pub levels: Vec<Level>,
    /// The prompt, through the checkpoint's tokenizer and chat template (default: a text long
    /// enough to pass the sliding window; for a vision export, with the harness's test pattern).
    #[arg(long, conflicts_with_all = ["tokens", "inputs"])]
    pub prompt: Option<String>,
    /// N token ids drawn from the vocabulary instead of a prompt, no special or media placeholder
    /// id among them (a checkpoint without a tokenizer; the default there, the sliding window + 64).
    #[arg(long, conflicts_with = "inputs")]
    pub tokens: Option<usize>,
    /// A safetensors file of the processor's tensors (`input_ids`, `pixel_values`, ...).
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// An image for the prompt (an export with a vision encoder).
    #[arg(long, requires = "prompt")]
    pub image: Vec<PathBuf>,
    /// New tokens to generate.
    #[arg(long, default_value_t = 8)]
    pub max_new_tokens: usize,
    /// Also write the case YAML it ran here (paths relative to it), to commit it as a case.
    #[arg(long)]
    pub write_case: Option<PathBuf>,
    /// Fail a tier whose artifact is missing instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub files: ReportFiles,
}

pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let levels = if args.levels.is_empty() { vec![Level::L1, Level::L3] } else { args.levels.clone() };
    let prompt = match (&args.prompt, args.tokens, &args.inputs) {
        (Some(text), _, _) => Some(Prompt::Text { text: text.clone(), images: args.image.clone() }),
        (_, Some(n), _) => Some(Prompt::Tokens(n)),
        (_, _, Some(p)) => Some(Prompt::Tensors(p.clone())),
        _ => None,
    };
    let request = CheckRequest {
        export: args.export.clone(),
        model: args.model.clone(),
        prompt,
        levels: levels.clone(),
        max_new_tokens: args.max_new_tokens,
    };
    // The case lives where it is written, else in a folder of its own under the temp folder
    // (`check/<export folder>` names its trials).
    let name = std::path::absolute(&args.export)?.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "export".into());
    let path = match &args.write_case {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join(format!("onnx-parity-check-{}", std::process::id())).join("check").join(format!("{name}.yaml")),
    };
    let dir = std::path::absolute(path.parent().unwrap_or(std::path::Path::new(".")))?;
    let inferred = match infer(&request, Some(&dir)) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    for n in &inferred.not_inferred {
        println!("not inferred: {n}");
    }
    if let Some(file) = &inferred.test_pattern {
        let png = onnx_parity::inputs::image::test_pattern_png().context("drawing the test pattern")?;
        onnx_parity::atomic::write_atomic(file, &png).with_context(|| format!("writing {}", file.display()))?;
    }
    onnx_parity::atomic::write_atomic(&path, inferred.yaml.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    if args.write_case.is_some() {
        if let Some(file) = &inferred.test_pattern {
            println!("wrote {} beside it", file.display());
        }
        println!("wrote the case to {}", path.display());
    }
    if let Some(window) = inferred.sliding_window {
        short_of_the_window(&path, window, args.max_new_tokens);
    }
    let code = run(vec![path.clone()], levels, args.files, None, args.strict);
    if args.write_case.is_none() {
        let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
    }
    code
}

/// Says so when the case's prompt does not pass the sliding window: its sliding layers then
/// compute what full attention would at prefill (and at the decode steps too when they stay within
/// it), and an export with a wrong window (or none) passes there. The inputs are made here once
/// more (a tokenizer call and the images, cheap beside the runs); where they cannot be, the run
/// says why.
fn short_of_the_window(case: &std::path::Path, window: usize, new_tokens: usize) {
    let Ok(case) = onnx_parity::case::Case::load(case) else { return };
    let Ok(inputs) = onnx_parity::inputs::for_case(&case) else { return };
    let n = inputs.input_ids.len();
    if n > window {
        return;
    }
    // The last decode step is fed at position n + new_tokens − 2 (the last new token is not fed).
    let last = (n + new_tokens).saturating_sub(2);
    let steps = if last >= window {
        format!("only the decode steps at positions {window} to {last} pass it")
    } else {
        "so do the decode steps".to_string()
    };
    println!(
        "not inferred: whether the sliding window is right: the prompt is {n} tokens, within the window of {window}, so the \
         prefill's sliding layers are judged as full-attention ones; {steps} (a longer prompt, or `--tokens {}`, judges the window)",
        window + PAST_THE_WINDOW
    );
}
