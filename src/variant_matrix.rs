//! The variant matrix a run prints: for every case with `variants:`, one row per build (the
//! case's own export, then each variant) and one column per tier, the verdict in each cell, the
//! exporter that made the build (its graphs' producer) and the protocol L1 read from the graph. It is what docs/exporters.md's variant table is (a test holds
//! the two equal), so a reader sees at a glance which of mobius's builds of a model compute what
//! the model computes.

use std::collections::BTreeMap;

use crate::report::{CaseReport, RunReport};
use crate::tiers::outcome::Status;

/// The tiers the matrix shows (L2 judges the config, the same for every build).
const COLUMNS: [&str; 4] = ["L1", "L3", "L4", "L5"];

/// One cell: the verdict as docs/exporters.md writes it (`pass`, **FAIL**, `xfail`, `skip`).
fn cell(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Fail => "**FAIL**",
        Status::Ambiguous => "ambiguous",
        Status::Skipped => "skip",
        Status::Xfail => "xfail",
    }
}

/// The markdown tables, one per case with variants (empty when the run has none).
pub fn markdown(report: &RunReport) -> String {
    // Case name (without `@variant`) → its builds in run order.
    let mut groups: BTreeMap<&str, Vec<(&str, &CaseReport)>> = BTreeMap::new();
    for c in &report.cases {
        let (base, variant) = c.name.split_once('@').map_or((c.name.as_str(), ""), |(b, v)| (b, v));
        groups.entry(base).or_default().push((variant, c));
    }
    let mut out = String::new();
    for (base, builds) in groups.iter().filter(|(_, b)| b.iter().any(|(v, _)| !v.is_empty())) {
        out.push_str(&format!(
            "`{base}`\n\n| build | exporter | protocol | {} |\n|---|---|---|{}\n",
            COLUMNS.join(" | "),
            "---|".repeat(COLUMNS.len())
        ));
        for (variant, c) in builds {
            let level = |name: &str| c.levels.iter().find(|l| l.level == name);
            let l1 = level("L1").map(|l| &l.outcome.metrics.l1);
            let protocol = match (l1.and_then(|m| m.export_variant.as_deref()), l1.and_then(|m| m.activations.as_deref())) {
                (Some(v), Some(a)) => format!("{v} · {a}"),
                (Some(v), None) => v.to_string(),
                _ => "–".to_string(),
            };
            let exporter = l1.and_then(|m| m.exporter.as_deref()).filter(|e| !e.is_empty()).unwrap_or("–");
            let cells: Vec<&str> = COLUMNS.iter().map(|l| level(l).map_or("–", |l| cell(l.outcome.status))).collect();
            let build = if variant.is_empty() { "(as exported)".to_string() } else { format!("@{variant}") };
            out.push_str(&format!("| {build} | {exporter} | {protocol} | {} |\n", cells.join(" | ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{LevelReport, RunMetadata};
    use crate::tiers::outcome::TierOutcome;

    fn case(name: &str, statuses: &[(&str, Status)]) -> CaseReport {
        CaseReport {
            name: name.into(),
            execution_provider: "CPUExecutionProvider".into(),
            levels: statuses
                .iter()
                .map(|(l, s)| LevelReport {
                    level: (*l).into(),
                    outcome: TierOutcome::new(*s, "")
                        .with(|m| m.l1.export_variant = Some(if name.contains('@') { "gqa" } else { "portable" }.to_string())),
                })
                .collect(),
        }
    }

    /// Guards the table's shape: only cases with variants, the case's own export first, a
    /// dash for a tier that did not run.
    #[test]
    fn one_row_per_build() {
        let report = RunReport {
            cases: vec![
                case("causal-lm/a", &[("L1", Status::Pass), ("L3", Status::Pass)]),
                case("causal-lm/a@gqa", &[("L1", Status::Fail), ("L3", Status::Xfail), ("L5", Status::Skipped)]),
                case("causal-lm/plain", &[("L1", Status::Pass)]),
            ],
            metadata: RunMetadata::new(&[crate::eps::RunEp::Cpu]),
        };
        assert_eq!(
            markdown(&report),
            "`causal-lm/a`\n\n| build | exporter | protocol | L1 | L3 | L4 | L5 |\n|---|---|---|---|---|---|---|\n\
             | (as exported) | – | portable | pass | pass | – | – |\n| @gqa | – | gqa | **FAIL** | xfail | – | skip |\n\n"
        );
    }
}
