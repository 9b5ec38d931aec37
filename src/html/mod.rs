//! One self-contained HTML page per run (`run --html`, `report --html`): inline CSS and SVG, no
//! script, no fetch, no external URL, so it opens from a file path or a CI artifact viewer.
//! Header (versions, EP, reference device, TF32 state and probe), the counts (each status apart:
//! a skip is never a pass), a case × tier matrix linking to each tier's detail, and per tier the
//! plots ([`svg`]) and tables its metrics allow.

pub mod svg;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::onnx::protocol;
use crate::report::{LevelReport, RunReport};
use crate::tier_metrics::{CalibrationRow, L3Rule, Metrics};
use crate::tiers::outcome::Status;

pub use svg::esc;

/// The statuses counted in the header, in order, with "ignored" last: trials the test harness
/// did not run (they leave no record, so a report of records counts 0 and says so).
const COUNTED: [Status; 5] = [Status::Pass, Status::Fail, Status::Xfail, Status::Ambiguous, Status::Skipped];

const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232b;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#555;font-size:13px}.meta td{padding:1px 12px 1px 0}
.counts{display:flex;gap:10px;margin:16px 0}.count{padding:8px 14px;border-radius:6px;font-weight:600;min-width:74px;text-align:center}
.count b{display:block;font-size:22px}
.pass{background:#d8f3dc;color:#1b4332}.fail{background:#ffd6d6;color:#7a0b0b}.xfail{background:#ffe8c2;color:#7a4a00}
.ambiguous{background:#e7dcff;color:#3c1e7a}.skipped{background:#e9ecef;color:#495057}.ignored{background:#f1f3f5;color:#868e96}
table.matrix{border-collapse:collapse}table.matrix td,table.matrix th{border:1px solid #dee2e6;padding:4px 8px;text-align:center}
table.matrix td.case{text-align:left;font-family:ui-monospace,monospace;font-size:12.5px}
table.matrix a{display:block;color:inherit;text-decoration:none;font-weight:600}
section.detail{background:#fff;border:1px solid #dee2e6;border-radius:8px;padding:10px 16px;margin:12px 0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.msg{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;color:#333;max-height:12em;overflow:auto;background:#f8f9fa;padding:6px;border-radius:4px}
.warning{background:#fff3bf;border-left:4px solid #f59f00;padding:4px 8px;margin:6px 0}
.signature{background:#fff4e6;border-left:4px solid #fd7e14;padding:4px 8px;margin:6px 0}
table.kv td{padding:1px 10px 1px 0;font-size:13px}table.kv td:first-child{color:#555}
table.tokens td{font-family:ui-monospace,monospace;font-size:12px;padding:1px 5px;border:1px solid #eee}
td.diff{background:#ffd6d6;font-weight:700}
svg.plot{background:#fff;display:block;margin:6px 0}
svg .grid{stroke:#eee}svg .tick{font-size:10px;fill:#666}svg .tolerance{stroke:#e8590c;stroke-dasharray:5 3}
svg .series{fill:none;stroke-width:2}svg .propagated{stroke:#1971c2}svg .local{stroke:#2f9e44}svg .floor{stroke:#868e96;stroke-dasharray:4 2}
svg circle.propagated{fill:#1971c2}svg circle.local{fill:#2f9e44}svg circle.floor{fill:#868e96}svg .swatch.propagated{fill:#1971c2}svg .swatch.local{fill:#2f9e44}svg .swatch.floor{fill:#868e96}
table.calibration{border-collapse:collapse}table.calibration td,table.calibration th{border:1px solid #dee2e6;padding:2px 8px;font-size:12.5px;text-align:right}
table.calibration td:first-child{text-align:left;font-family:ui-monospace,monospace}
svg .first-divergent{fill:none;stroke:#c92a2a;stroke-width:2.5}svg .bar{fill:#74c0fc}svg .bar.over{fill:#ff8787}
svg .image-block{fill:#fff3bf}
"#;

/// The page for `report`.
pub fn page(report: &RunReport) -> String {
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>onnx-parity report</title><style>");
    h.push_str(CSS);
    h.push_str("</style></head><body>\n");
    header(&mut h, report);
    counts(&mut h, report);
    matrix(&mut h, report);
    h.push_str("<h2>Details</h2>\n");
    for c in &report.cases {
        for l in &c.levels {
            detail(&mut h, &c.name, l);
        }
    }
    h.push_str("</body></html>\n");
    h
}

fn header(h: &mut String, r: &RunReport) {
    let m = &r.metadata;
    let g = &m.gpu;
    let probe = if g.tf32_probe.is_empty() {
        "not run (CPU)".to_string()
    } else {
        g.tf32_probe
            .iter()
            .map(|p| format!("{} max rel err {:.1e}{}", p.backend, p.max_rel_err, if p.tf32_like { " TF32-LIKE" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let date = unix_date(m.started_unix_s);
    let recorded = |field: fn(&Metrics) -> Option<&str>| {
        let mut v: Vec<&str> =
            r.cases.iter().flat_map(|c| &c.levels).filter_map(|l| field(&l.outcome.metrics)).filter(|s| !s.is_empty()).collect();
        v.sort();
        v.dedup();
        if v.is_empty() {
            "not recorded".to_string()
        } else {
            v.join("; ")
        }
    };
    let versions = format!(
        "exporter: {}; transformers: {}",
        recorded(|m| m.l1.exporter.as_deref()),
        recorded(|m| m.l1.transformers_version.as_deref())
    );
    let _ = write!(
        h,
        "<h1>onnx-parity report</h1><table class=\"meta\"><tr><td>onnx-parity</td><td>{}</td><td>ONNX Runtime</td><td>{} ({})</td></tr>\
<tr><td>ORT GenAI</td><td>{}</td><td>reference</td><td>{}</td></tr><tr><td>device</td><td colspan=\"3\">{}</td></tr>\
<tr><td>TF32</td><td>{}</td><td>TF32 probe</td><td>{}</td></tr>\
<tr><td>recorded by the exports and checkpoints</td><td>{}</td><td>date</td><td>{date} (wall {:.1} s)</td></tr></table>",
        esc(m.onnx_parity_version),
        esc(m.onnxruntime_version),
        esc(&m.execution_provider),
        esc(&m.ort_genai),
        esc(&m.reference),
        esc(&g.reference_device),
        esc(&g.tf32_line()),
        esc(&probe),
        esc(&versions),
        m.wall_s
    );
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time (civil-from-days, no calendar crate).
fn unix_date(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let (hh, mm) = ((t % 86_400) / 3600, (t % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02} UTC")
}

fn counts(h: &mut String, r: &RunReport) {
    h.push_str("<div class=\"counts\">");
    for s in COUNTED {
        let _ = write!(h, "<div class=\"count {0}\" data-status=\"{0}\"><b>{1}</b>{0}</div>", s.as_str(), r.count(s));
    }
    h.push_str("<div class=\"count ignored\" data-status=\"ignored\"><b>0</b><span title=\"trials the test harness did not run leave no record\">ignored</span></div></div>\n");
}

fn anchor(case: &str, level: &str) -> String {
    format!("t-{}-{level}", case.replace(['/', '@', ' ', '[', ']'], "-"))
}

fn matrix(h: &mut String, r: &RunReport) {
    let mut levels: Vec<&str> = r.cases.iter().flat_map(|c| c.levels.iter().map(|l| l.level.as_str())).collect();
    levels.sort();
    levels.dedup();
    h.push_str("<h2>Case × tier</h2><table class=\"matrix\"><tr><th>case</th><th>EP</th>");
    for l in &levels {
        let _ = write!(h, "<th>{l}</th>");
    }
    h.push_str("</tr>\n");
    for c in &r.cases {
        let _ = write!(
            h,
            "<tr data-case=\"{0}\"><td class=\"case\">{0}</td><td class=\"ep\">{1}</td>",
            esc(&c.name),
            esc(&c.execution_provider)
        );
        for lv in &levels {
            match c.levels.iter().find(|l| l.level == *lv) {
                Some(l) => {
                    let s = l.outcome.status.as_str();
                    let _ = write!(
                        h,
                        "<td class=\"{s}\" data-level=\"{lv}\" data-status=\"{s}\"><a href=\"#{}\">{s}</a></td>",
                        anchor(&c.name, lv)
                    );
                }
                None => h.push_str("<td></td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// The calibrated rule per compared tensor: both errors against f64, the ratio, both verdicts.
fn calibration_table(h: &mut String, table: &BTreeMap<String, CalibrationRow>) {
    h.push_str(
        "<table class=\"calibration\"><tr><th>tensor</th><th>e_cand rms</th><th>e_cand max</th><th>e_floor rms</th><th>e_floor max</th>\
         <th>ratio</th><th>calibrated</th><th>fixed row</th></tr>",
    );
    for (name, row) in table {
        let num = |v: Option<f64>| v.map(|v| format!("{v:.2e}")).unwrap_or_else(|| "–".into());
        let status = |s: Option<crate::tier_metrics::RuleVerdict>| {
            let s = s.map_or("–", |s| s.as_str());
            format!("<td class=\"{}\">{}</td>", esc(s), esc(s))
        };
        let c = row.calibrated.as_ref();
        let ratio = c.map(|c| format!("{:.2}", c.ratio)).unwrap_or_else(|| "–".into());
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ratio}</td>{}{}</tr>",
            esc(name),
            num(c.map(|c| c.e_cand_rms)),
            num(c.map(|c| c.e_cand_max)),
            num(c.map(|c| c.e_floor_rms)),
            num(c.map(|c| c.e_floor_max)),
            status(c.map(|c| c.calibrated_status)),
            status(Some(row.fixed_row_status))
        );
    }
    h.push_str("</table>");
}

fn detail(h: &mut String, case: &str, l: &LevelReport) {
    let o = &l.outcome;
    let m = &o.metrics;
    let s = o.status.as_str();
    let _ = write!(
        h,
        "<section class=\"detail\" id=\"{}\" data-case=\"{}\" data-level=\"{}\"><h3>{} · {} <span class=\"badge {s}\">{s}</span></h3>",
        anchor(case, &l.level),
        esc(case),
        l.level,
        esc(case),
        l.level
    );
    for w in &o.warnings {
        let _ = write!(h, "<div class=\"warning\">warning: {}</div>", esc(w));
    }
    if let Some(sig) = &m.trial.xfail_signature {
        let _ = write!(h, "<div class=\"signature\">expected failure signature: {}</div>", esc(sig));
    }
    let l3 = &m.l3;
    let calibrated = l3.l3_rule == Some(L3Rule::Calibrated);
    // Under the calibrated rule there is no one tolerance line: each layer has its own floor.
    let tol = if calibrated { None } else { l3.atol };
    let (propagated, local) = if calibrated && l3.layer_e_cand.is_some() {
        (&l3.layer_e_cand, &l3.layer_local_e_cand)
    } else {
        (&l3.layer_max_abs_diff, &l3.layer_local_max_abs_diff)
    };
    if let Some(prop) = propagated {
        let floor = l3.layer_local_e_floor.as_ref().filter(|_| calibrated);
        let mut series = vec![svg::Series { name: "propagated", class: "propagated", values: prop }];
        if let Some(f) = floor {
            series.push(svg::Series { name: "local floor (reference)", class: "floor", values: f });
        }
        if let Some(l) = local {
            series.push(svg::Series { name: "local (fed the reference's stream)", class: "local", values: l });
        }
        let first = l3.first_divergent_layer;
        h.push_str("<div>decoder layers");
        if let Some(k) = first {
            let part = l3.divergent_module.as_deref().map(|p| format!(" ({})", esc(p))).unwrap_or_default();
            let _ = write!(h, ": first divergent layer <b>{k}</b>{part}");
        }
        if calibrated {
            h.push_str(" — max |x − f64| per layer; the calibrated rule blames the first local error beyond k × its floor");
        }
        h.push_str("</div>");
        h.push_str(&svg::layer_plot(&series, tol, first));
    }
    if let Some(table) = &l3.calibration {
        calibration_table(h, table);
    }
    let stage = |name: &str| m.stage_max_abs_diff.get(name).copied();
    let components: Vec<(String, f64)> = [
        (protocol::IMAGE_FEATURES, stage(protocol::IMAGE_FEATURES)),
        (protocol::INPUTS_EMBEDS, stage(protocol::INPUTS_EMBEDS)),
        (protocol::PER_LAYER_INPUTS, stage(protocol::PER_LAYER_INPUTS)),
        ("vision_encoder alone", l3.vision_encoder_isolated_max_abs_diff),
        ("embedding alone", l3.embedding_isolated_max_abs_diff),
        ("decoder alone", l3.decoder_isolated_max_abs_diff),
        (protocol::LOGITS, m.compared.max_abs_diff),
        ("worst decode step", l3.decode_max_abs_diff),
    ]
    .into_iter()
    .filter_map(|(label, v)| Some((label.to_string(), v?)))
    .collect();
    if l.level == "L3" && !components.is_empty() {
        h.push_str("<div>max abs diff per component</div>");
        h.push_str(&svg::bars(&components, tol));
    }
    if let Some(p) = &l3.logits_position_max_abs_diff {
        let blocks: Vec<(usize, usize)> = l3.image_blocks.iter().flatten().map(|&[a, b]| (a, b)).collect();
        h.push_str("<div>logits max abs diff per prompt position (image blocks shaded)</div>");
        h.push_str(&svg::positions(p, tol, &blocks));
    }
    if let Some(kl) = &m.quantized.quantization_kl {
        h.push_str("<div>quantization's cost: KL divergence (nats) of the export against the float reference per position (prefill, then decode steps)</div>");
        h.push_str(&svg::positions(kl, None, &[]));
    }
    let candidate = implementation_label(case);
    if let Some(golden) = &m.l4.golden_top10 {
        top10(h, m, golden, candidate);
    }
    if let Some(golden) = &m.l5.golden_tokens {
        tokens(h, m, golden, candidate);
    }
    // Every other number the trial recorded, as its report key and value.
    let shown_elsewhere = |k: &str| matches!(k, "xfail_signature" | "text" | "golden_text");
    let scalars: Vec<String> = m
        .rendered()
        .iter()
        .filter(|(k, v)| !v.is_array() && !v.is_object() && !shown_elsewhere(k))
        .map(|(k, v)| format!("<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(&scalar(v))))
        .collect();
    if !scalars.is_empty() {
        let _ = write!(h, "<table class=\"kv\">{}</table>", scalars.join(""));
    }
    let _ = writeln!(h, "<div class=\"msg\">{}</div></section>", esc(&o.message));
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => format!("{:.4e}", n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What computed a trial's candidate rows, from its name: the implementation in brackets
/// (`causal-lm/x [ort-genai]`), else the export in ONNX Runtime.
fn implementation_label(case: &str) -> &str {
    case.rsplit_once(" [").and_then(|(_, rest)| rest.split(']').next()).unwrap_or("ONNX Runtime")
}

/// L4: golden vs the candidate vs reference top-10, ids that differ from the golden's at a rank
/// marked; `candidate` names what computed its row.
fn top10(h: &mut String, m: &Metrics, golden: &[i64], candidate: &str) {
    let onnx = m.l4.top10.clone().unwrap_or_default();
    let reference = m.l4.reference_top10.clone().unwrap_or_default();
    // No second logit (+∞, `null` in the report): no margin shown.
    let gap = m.l4.top1_gap.filter(|g| g.is_finite()).map(|g| format!(" ({} top-1 margin {g:.3e})", esc(candidate))).unwrap_or_default();
    let _ = write!(h, "<div>top-10 next tokens{gap}</div><table class=\"tokens top10\">");
    for (name, row) in [("golden", golden), (candidate, onnx.as_slice()), ("reference", reference.as_slice())] {
        if row.is_empty() {
            continue;
        }
        let _ = write!(h, "<tr><td>{}</td>", esc(name));
        for (i, t) in row.iter().enumerate() {
            let cls = if golden.get(i) != Some(t) { " class=\"diff\"" } else { "" };
            let _ = write!(h, "<td{cls}>{t}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// L5: golden, the candidate's (`candidate` names what computed it) and reference greedy tokens
/// aligned, the first difference marked.
fn tokens(h: &mut String, m: &Metrics, golden: &[i64], candidate: &str) {
    let onnx = m.l5.tokens.clone().unwrap_or_default();
    let reference = m.l5.reference_tokens.clone().unwrap_or_default();
    let first = onnx.iter().zip(golden).position(|(a, b)| a != b).or((onnx.len() != golden.len()).then(|| onnx.len().min(golden.len())));
    h.push_str("<div>greedy tokens (ids; the first difference from the golden marked)</div><table class=\"tokens generated\">");
    for (name, row) in [("golden", golden), (candidate, onnx.as_slice()), ("reference", reference.as_slice())] {
        if row.is_empty() && name != candidate {
            continue;
        }
        let _ = write!(h, "<tr><td>{}</td>", esc(name));
        for (i, t) in row.iter().enumerate() {
            let cls = if name != "golden" && Some(i) == first { " class=\"diff\" data-first-difference=\"true\"" } else { "" };
            let _ = write!(h, "<td{cls}>{t}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    for (name, text) in [("golden", &m.l5.golden_text), (candidate, &m.l5.text)] {
        if let Some(t) = text {
            let _ = write!(h, "<div class=\"decoded\"><b>{name}:</b> {}</div>", esc(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the calendar arithmetic of the header's date.
    #[test]
    fn dates() {
        assert_eq!(unix_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(unix_date(1_796_089_020), "2026-12-01 01:37 UTC");
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }

    /// Guards issue 45: each L4/L5 row names what computed it, not "ONNX" for every runtime.
    #[test]
    fn candidate_rows_name_their_implementation() {
        assert_eq!(implementation_label("causal-lm/x@v [ort-genai] on cuda:0"), "ort-genai");
        assert_eq!(implementation_label("causal-lm/x [candle-transformers]"), "candle-transformers");
        assert_eq!(implementation_label("causal-lm/x@int4"), "ONNX Runtime");
        let mut m = Metrics::default();
        (m.l5.tokens, m.l5.reference_tokens) = (Some(vec![5, 6]), Some(vec![5, 7]));
        let mut h = String::new();
        tokens(&mut h, &m, &[5, 7], implementation_label("causal-lm/x [ort-genai]"));
        assert!(h.contains("<td>ort-genai</td>") && !h.contains(">ONNX<"), "{h}");
    }
}
