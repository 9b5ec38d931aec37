//! Run reports: JSON (docs/design.md §4), a Markdown table, and the one-screen console summary.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tiers::outcome::{Status, TierOutcome};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing report {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("serialising report: {0}")]
    Json(#[from] serde_json::Error),
    #[error("trial record {path}: {message}")]
    Record { path: PathBuf, message: String },
}

/// One tier's entry in a case.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    pub level: String,
    #[serde(flatten)]
    pub outcome: TierOutcome,
}

/// All tiers run for one case (one candidate: a build in an implementation on an EP).
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub name: String,
    /// The execution provider its trials ran on (`CPUExecutionProvider`,
    /// `CUDAExecutionProvider:0 (TF32 off)`).
    pub execution_provider: String,
    pub levels: Vec<LevelReport>,
}

/// Versions and settings that a verdict depends on.
#[derive(Debug, Clone, Serialize)]
pub struct RunMetadata {
    pub onnx_parity_version: &'static str,
    pub onnxruntime_version: &'static str,
    /// What the `ort-genai` implementation runs: onnxruntime-genai and the ONNX Runtime of its
    /// own wheel (not the harness's).
    pub ort_genai: String,
    pub execution_provider: String,
    pub reference: String,
    pub started_unix_s: u64,
    pub wall_s: f64,
    /// The process's peak resident memory over the whole run ([`crate::memory::process_peak_bytes`];
    /// absent where `/proc` is not).
    pub peak_rss_gib: Option<f64>,
    /// The reference's device, the TF32 switches of both back ends, and the TF32 probe.
    pub gpu: crate::gpu::GpuMetadata,
    /// Which reference-side results came from the reference cache (`crate::reference_cache`).
    pub reference_cache: crate::reference_cache::CacheUse,
}

impl RunMetadata {
    /// A run whose trials run on `eps` (the plan's).
    pub fn new(eps: &[crate::eps::RunEp]) -> Self {
        Self::with(crate::runtime::provision::execution_providers(eps), crate::gpu::GpuMetadata::of(eps))
    }

    fn with(execution_provider: String, gpu: crate::gpu::GpuMetadata) -> Self {
        RunMetadata {
            onnx_parity_version: env!("CARGO_PKG_VERSION"),
            onnxruntime_version: crate::runtime::provision::ORT_VERSION,
            ort_genai: format!(
                "onnxruntime-genai {} on ONNX Runtime {} (CPUExecutionProvider)",
                crate::ort_genai::GENAI_VERSION,
                crate::ort_genai::GENAI_ORT_VERSION
            ),
            execution_provider,
            reference: format!(
                "candle 0.11.1 {} f32 (HF transformers 5.14.1 semantics)",
                crate::gpu::device_spec().map_or_else(|e| format!("invalid device ({e})"), |d| d.to_string())
            ),
            started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            wall_s: 0.0,
            peak_rss_gib: None,
            gpu,
            reference_cache: crate::reference_cache::usage(),
        }
    }
}

/// One trial's outcome as the test harness records it when `ONNX_PARITY_OUTCOMES` names a
/// folder: nextest runs each trial in its own process (and a partitioned run on several
/// machines), so each writes one file, and `onnx-parity report` merges them into the JSON and
/// Markdown reports that `onnx-parity run` writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialRecord {
    /// `<category>/<case>`, with `@<variant>` for an export variant (each its own file).
    pub case: String,
    pub level: String,
    pub outcome: TierOutcome,
    /// The trial's execution provider.
    pub execution_provider: String,
    pub gpu: crate::gpu::GpuMetadata,
}

impl TrialRecord {
    /// Writes `<dir>/<category>--<case>--<level>.json` (atomically; `+<implementation>` after the case
    /// for an implementation other than the export).
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ReportError> {
        std::fs::create_dir_all(dir).map_err(|source| ReportError::Io { path: dir.into(), source })?;
        // `causal-lm/x [candle-transformers]` → `causal-lm--x+candle-transformers--L3.json`;
        // `… on cuda:0` → `…+on-cuda_0`.
        let case = self.case.replace('/', "--").replace(" [", "+").replace(']', "").replace(" on ", "+on-").replace(':', "_");
        let file = format!("{case}--{}.json", self.level);
        let path = dir.join(file);
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    /// Every record under `dirs` (files ending in `.json`, folders searched recursively).
    pub fn read_all(dirs: &[PathBuf]) -> Result<Vec<TrialRecord>, ReportError> {
        let mut files = Vec::new();
        for d in dirs {
            for found in crate::files::walk(d, &|p| p.extension().is_some_and(|e| e == "json")) {
                files.push(found.map_err(|e| ReportError::Io { path: e.path, source: e.source })?);
            }
        }
        files.sort();
        files
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).map_err(|source| ReportError::Io { path: p.clone(), source })?;
                serde_json::from_str(&text).map_err(|e| ReportError::Record { path: p.clone(), message: e.to_string() })
            })
            .collect()
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub cases: Vec<CaseReport>,
    pub metadata: RunMetadata,
}

impl RunReport {
    /// The report of trial records (grouped by case, levels in record order; metadata from the
    /// first record: the machine that ran the trials, not the one merging).
    pub fn from_records(records: Vec<TrialRecord>) -> Self {
        let mut eps: Vec<&str> = records.iter().map(|r| r.execution_provider.as_str()).collect();
        eps.sort();
        eps.dedup();
        let label = if eps.is_empty() { "unknown".to_string() } else { eps.join(", ") };
        let mut metadata = RunMetadata::with(label, crate::gpu::GpuMetadata::of(&[]));
        if let Some(r) = records.first() {
            metadata.gpu = r.gpu.clone();
            metadata.reference = format!("candle 0.11.1 {} f32 (HF transformers 5.14.1 semantics)", r.gpu.reference_device);
        }
        let mut cases: Vec<CaseReport> = Vec::new();
        for r in records {
            let level = LevelReport { level: r.level, outcome: r.outcome };
            match cases.iter_mut().find(|c| c.name == r.case) {
                Some(c) => c.levels.push(level),
                None => cases.push(CaseReport { name: r.case, execution_provider: r.execution_provider, levels: vec![level] }),
            }
        }
        for c in &mut cases {
            c.levels.sort_by(|a, b| a.level.cmp(&b.level));
        }
        cases.sort_by(|a, b| a.name.cmp(&b.name));
        RunReport { cases, metadata }
    }

    /// `true` when no tier failed (xfail, skipped and ambiguous do not fail a run).
    pub fn ok(&self) -> bool {
        !self.cases.iter().flat_map(|c| &c.levels).any(|l| l.outcome.status == Status::Fail)
    }

    pub fn count(&self, status: Status) -> usize {
        self.cases.iter().flat_map(|c| &c.levels).filter(|l| l.outcome.status == status).count()
    }

    /// `N passed, N failed, ... in T s`.
    pub fn totals(&self) -> String {
        format!(
            "{} passed, {} failed, {} xfail, {} ambiguous, {} skipped in {:.2} s",
            self.count(Status::Pass),
            self.count(Status::Fail),
            self.count(Status::Xfail),
            self.count(Status::Ambiguous),
            self.count(Status::Skipped),
            self.metadata.wall_s
        )
    }

    pub fn write_json(&self, path: &Path) -> Result<(), ReportError> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        write_atomic(path, text.as_bytes())
    }

    /// A table: case, tier, status, key metrics, first diverging component, message.
    pub fn markdown(&self) -> String {
        let mut s = String::from("| case | tier | EP | status | metrics | first divergence | message |\n|---|---|---|---|---|---|---|\n");
        for c in &self.cases {
            for l in &c.levels {
                let mut div = l.outcome.metrics.l3.first_divergence.clone().unwrap_or_default();
                // L3: the per-layer profile (and the first divergent decoder layer).
                if let Some(profile) = crate::tiers::l3::layer_sparkline(&l.outcome.metrics.l3) {
                    div = if div.is_empty() { profile } else { format!("{div}; {profile}") };
                }
                let warnings: String = l.outcome.warnings.iter().map(|w| format!(" **warning:** {w}")).collect();
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    c.name,
                    l.level,
                    c.execution_provider,
                    l.outcome.status,
                    key_metrics(&l.outcome),
                    div,
                    format!("{}{warnings}", l.outcome.message).replace('|', "\\|").replace('\n', " ")
                ));
            }
        }
        s.push_str(&format!("\n{} ({})\n", self.totals(), self.metadata.execution_provider));
        let g = &self.metadata.gpu;
        let probe: Vec<String> = g
            .tf32_probe
            .iter()
            .map(|p| format!("{} {:.1e}{}", p.backend, p.max_rel_err, if p.tf32_like { " TF32-LIKE" } else { "" }))
            .collect();
        s.push_str(&format!(
            "\nreference on {}; TF32: {}{}\n",
            g.reference_device,
            g.tf32_line(),
            if probe.is_empty() { String::new() } else { format!("; TF32 probe: {}", probe.join(", ")) }
        ));
        s
    }

    /// The console summary printed at the end of `run`: one line per tier (failures in full), then
    /// totals.
    pub fn console_summary(&self) -> String {
        let mut s = String::new();
        for c in &self.cases {
            for l in &c.levels {
                let mut msg = l.outcome.message.clone();
                // A failure is printed whole: it is what the reader has to act on.
                if l.outcome.status != Status::Fail && msg.chars().count() > 110 {
                    msg = msg.chars().take(107).collect::<String>() + "...";
                }
                s.push_str(&format!(
                    "{:<9} {}  {}  {}\n",
                    l.outcome.status.as_str().to_uppercase(),
                    trial_name(&c.name, &l.level),
                    key_metrics(&l.outcome),
                    msg
                ));
                for w in &l.outcome.warnings {
                    s.push_str(&format!("          warning: {w}\n"));
                }
            }
        }
        s.push_str(&self.totals());
        s.push('\n');
        s
    }
}

/// The metrics shown in the Markdown table and console summary, in this order, when present.
fn key_metrics(o: &TierOutcome) -> String {
    let m = &o.metrics;
    // A float in scientific notation (`null`, as in the JSON, where it is not finite).
    let float = |x: Option<f64>| x.map(|f| if f.is_finite() { format!("{f:.3e}") } else { "null".to_string() });
    let columns = [
        ("max_abs_diff", float(m.compared.max_abs_diff)),
        ("calibrated_ratio", float(m.l3.calibrated_ratio)),
        ("fixed_row_status", m.l3.fixed_row_status.map(|s| s.to_string())),
        ("quantization_kl_mean", float(m.quantized.quantization_kl_mean)),
        ("quantization_top1_agreement", float(m.quantized.quantization_top1_agreement)),
        ("cosine", float(m.compared.cosine)),
        ("argmax_match", m.compared.argmax_match.map(|b| b.to_string())),
        ("top10_jaccard", float(m.compared.top10_jaccard)),
        ("token_match_ratio", float(m.compared.token_match_ratio)),
        ("violations", m.l1.violations.map(|n| n.to_string())),
    ];
    columns.into_iter().filter_map(|(k, v)| Some(format!("{k}={}", v?))).collect::<Vec<_>>().join(" ")
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    crate::atomic::write_atomic(path, bytes).map_err(|source| ReportError::Io { path: path.into(), source })
}

/// The trial name of a case id's tier, as the test target names it: the level before an
/// implementation's ` [<name>]` and an EP's ` on <ep>` (`causal-lm/x::L3 [candle-transformers]`,
/// `causal-lm/x@v::L3 on cuda:0`).
pub fn trial_name(case_id: &str, level: &str) -> String {
    let at = [case_id.find(" ["), case_id.find(" on ")].into_iter().flatten().min();
    match at {
        Some(i) => format!("{}::{level}{}", &case_id[..i], &case_id[i..]),
        None => format!("{case_id}::{level}"),
    }
}

#[cfg(test)]
mod tests {
    /// Guards: the console names a trial as the test target does.
    #[test]
    fn trial_names_put_the_level_before_the_implementation() {
        assert_eq!(super::trial_name("causal-lm/x [candle-transformers]", "L3"), "causal-lm/x::L3 [candle-transformers]");
        assert_eq!(super::trial_name("causal-lm/x@gqa", "L1"), "causal-lm/x@gqa::L1");
        assert_eq!(super::trial_name("causal-lm/x@gqa on cuda:0", "L1"), "causal-lm/x@gqa::L1 on cuda:0");
        assert_eq!(super::trial_name("causal-lm/x [ort-genai] on cuda:0", "L5"), "causal-lm/x::L5 [ort-genai] on cuda:0");
    }

    use super::*;

    /// Guards: a case's variants write their own records (they used to overwrite the case's).
    #[test]
    fn variant_records_do_not_collide() {
        let dir = tempfile::tempdir().unwrap();
        let record = |case: &str| TrialRecord {
            case: case.into(),
            level: "L3".into(),
            outcome: TierOutcome::new(crate::tiers::outcome::Status::Pass, "ok"),
            execution_provider: "CPU".into(),
            gpu: crate::gpu::GpuMetadata::of(&[crate::eps::RunEp::Cpu]),
        };
        let a = record("c/x").write(dir.path()).unwrap();
        let b = record("c/x@gqa").write(dir.path()).unwrap();
        let c = record("c/x@gqa on cuda:0").write(dir.path()).unwrap();
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert!(c.file_name().is_some_and(|n| n.to_string_lossy() == "c--x@gqa+on-cuda_0--L3.json"), "{}", c.display());
        assert_eq!(TrialRecord::read_all(&[dir.path().to_path_buf()]).unwrap().len(), 3);
    }

    /// Guards the partitioned-run report: per-trial records written by separate processes merge
    /// into one report grouped by case, with xfail and skipped counted apart from passes, and the
    /// GPU metadata of the machine that ran them.
    #[test]
    fn trial_records_merge() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut gpu = crate::gpu::GpuMetadata::of(&[crate::eps::RunEp::Cpu]);
        gpu.reference_device = "cuda:0".into();
        let rec = |case: &str, level: &str, outcome: TierOutcome| TrialRecord {
            case: case.into(),
            level: level.into(),
            outcome,
            execution_provider: "CUDAExecutionProvider (TF32 off)".into(),
            gpu: gpu.clone(),
        };
        rec("a/x", "L3", TierOutcome::new(Status::Xfail, "expected").with(|m| m.compared.max_abs_diff = Some(1e-3)))
            .write(dir.path())
            .expect("write");
        rec("a/x", "L1", TierOutcome::new(Status::Pass, "ok")).write(&dir.path().join("p2")).expect("write");
        rec("a/y", "L4", TierOutcome::skipped("no golden")).write(dir.path()).expect("write");
        let merged = RunReport::from_records(TrialRecord::read_all(&[dir.path().to_path_buf()]).expect("read"));
        assert_eq!(merged.cases.len(), 2);
        assert_eq!(merged.cases[0].levels.iter().map(|l| l.level.as_str()).collect::<Vec<_>>(), ["L1", "L3"]);
        assert_eq!((merged.count(Status::Pass), merged.count(Status::Xfail), merged.count(Status::Skipped)), (1, 1, 1));
        assert!(merged.ok());
        assert_eq!(merged.metadata.gpu.reference_device, "cuda:0");
        assert!(merged.markdown().contains("reference on cuda:0"));
        assert!(merged.totals().starts_with("1 passed, 0 failed, 1 xfail, 0 ambiguous, 1 skipped"));
    }
}
