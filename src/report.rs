//! Run reports: JSON (DESIGN §4), a Markdown table, and the one-screen console summary.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::tiers::outcome::{Status, TierOutcome};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing report {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("serialising report: {0}")]
    Json(#[from] serde_json::Error),
}

/// One tier's entry in a case.
#[derive(Debug, Clone, Serialize)]
pub struct LevelReport {
    pub level: String,
    #[serde(flatten)]
    pub outcome: TierOutcome,
}

/// All tiers run for one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub name: String,
    pub levels: Vec<LevelReport>,
}

/// Versions and settings that a verdict depends on.
#[derive(Debug, Clone, Serialize)]
pub struct RunMetadata {
    pub onnx_parity_version: &'static str,
    pub onnxruntime_version: &'static str,
    pub execution_provider: String,
    pub reference: &'static str,
    pub started_unix_s: u64,
    pub wall_s: f64,
}

impl RunMetadata {
    pub fn new(execution_provider: impl Into<String>) -> Self {
        RunMetadata {
            onnx_parity_version: env!("CARGO_PKG_VERSION"),
            onnxruntime_version: crate::onnx::runtime::ORT_VERSION,
            execution_provider: execution_provider.into(),
            reference: "candle 0.11.1 CPU f32 (HF transformers 5.14.1 semantics)",
            started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            wall_s: 0.0,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub cases: Vec<CaseReport>,
    pub metadata: RunMetadata,
}

/// Metrics shown in the Markdown table and console summary, in this order, when present.
const KEY_METRICS: [&str; 6] = ["max_abs_diff", "cosine", "argmax_match", "top10_jaccard", "token_match_ratio", "violations"];

impl RunReport {
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

    pub fn write_markdown(&self, path: &Path) -> Result<(), ReportError> {
        write_atomic(path, self.markdown().as_bytes())
    }

    /// A table: case, tier, status, key metrics, first diverging component, message.
    pub fn markdown(&self) -> String {
        let mut s = String::from("| case | tier | status | metrics | first divergence | message |\n|---|---|---|---|---|---|\n");
        for c in &self.cases {
            for l in &c.levels {
                let div = l.outcome.metrics.get("first_divergence").map(metric_text).unwrap_or_default();
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    c.name,
                    l.level,
                    l.outcome.status,
                    key_metrics(&l.outcome),
                    div,
                    l.outcome.message.replace('|', "\\|").replace('\n', " ")
                ));
            }
        }
        s.push_str(&format!("\n{} ({})\n", self.totals(), self.metadata.execution_provider));
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
                    "{:<9} {}::{}  {}  {}\n",
                    l.outcome.status.as_str().to_uppercase(),
                    c.name,
                    l.level,
                    key_metrics(&l.outcome),
                    msg
                ));
            }
        }
        s.push_str(&self.totals());
        s.push('\n');
        s
    }
}

fn metric_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.3e}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn key_metrics(o: &TierOutcome) -> String {
    KEY_METRICS.iter().filter_map(|k| o.metrics.get(*k).map(|v| format!("{k}={}", metric_text(v)))).collect::<Vec<_>>().join(" ")
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    crate::atomic::write_atomic(path, bytes).map_err(|source| ReportError::Io { path: path.into(), source })
}
