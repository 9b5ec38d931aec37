//! The HTML report in a real browser: `onnx-parity run --report --html` on the committed cases,
//! the page rendered by headless Chromium (`--dump-dom`, and a `--screenshot` under `target/`
//! for people to look at), and the rendered DOM checked against the JSON report: the counts, every
//! case and tier, the plots, broken-mlp-layer's layer 3 marked, skipped tiers shown as skipped.
//! Needs Debian's `chromium` (`.ci/run` installs it; `ONNX_PARITY_CHROMIUM` names another).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("ONNX_PARITY_CHROMIUM") {
        return p.into();
    }
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = Command::new("which").arg(c).output() {
            if o.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            }
        }
    }
    panic!("no Chromium found for the HTML report test: install Debian's `chromium` (.ci/run does: apt-get install chromium) or set ONNX_PARITY_CHROMIUM");
}

fn headless(args: &[&str], page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let o = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "chromium failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The number shown in the count box of `status`.
fn shown_count(dom: &str, status: &str) -> usize {
    let at = dom
        .find(&format!("class=\"count {status}\" data-status=\"{status}\"><b>"))
        .unwrap_or_else(|| panic!("no {status} count in the page"));
    let rest = &dom[at..];
    let start = rest.find("<b>").unwrap() + 3;
    rest[start..rest.find("</b>").unwrap()].parse().unwrap()
}

/// The rendered `<section>` of one trial.
fn section<'a>(dom: &'a str, case: &str, level: &str) -> &'a str {
    let id = format!("id=\"t-{}-{level}\"", case.replace(['/', '@', ' ', '[', ']'], "-"));
    let at = dom.find(&id).unwrap_or_else(|| panic!("no detail section {id}"));
    &dom[at..at + dom[at..].find("</section>").unwrap()]
}

/// Guards the report a person reads: rendered by Chromium, it shows the JSON report's counts,
/// every case × tier, plots, the blamed layer, and skips as skips.
#[test]
fn report_renders_in_chromium_and_matches_the_json() {
    let out = root().join("target").join("report-html");
    std::fs::create_dir_all(&out).unwrap();
    let (json, html) = (out.join("report.json"), out.join("report.html"));
    let o = Command::new(env!("CARGO_BIN_EXE_onnx-parity"))
        .args(["run", "--report", json.to_str().unwrap(), "--html", html.to_str().unwrap()])
        .current_dir(root())
        .env("ONNX_PARITY_LOG", "warn")
        .output()
        .unwrap();
    assert!(html.exists(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    for banned in ["http://", "https://", "<script", "<link", "src=\""] {
        assert!(!page.contains(banned), "the page is not self-contained: it contains {banned:?}");
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let dom = headless(&["--dump-dom"], &html);
    let shot = out.join("report.png");
    headless(&[&format!("--screenshot={}", shot.display()), "--window-size=1400,2600"], &html);
    assert!(std::fs::metadata(&shot).map(|m| m.len() > 10_000).unwrap_or(false), "no screenshot at {}", shot.display());

    let levels: Vec<(&str, &str, &str)> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["levels"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |l| (c["name"].as_str().unwrap(), l["level"].as_str().unwrap(), l["status"].as_str().unwrap()))
        })
        .collect();
    for status in ["pass", "fail", "xfail", "ambiguous", "skipped"] {
        let want = levels.iter().filter(|(_, _, s)| *s == status).count();
        assert_eq!(shown_count(&dom, status), want, "{status} count");
    }
    assert_eq!(shown_count(&dom, "ignored"), 0);
    for (case, level, status) in &levels {
        let row = dom.find(&format!("<tr data-case=\"{case}\">")).unwrap_or_else(|| panic!("no matrix row for {case}"));
        let row = &dom[row..row + dom[row..].find("</tr>").unwrap()];
        assert!(row.contains(&format!("data-level=\"{level}\" data-status=\"{status}\"")), "{case} {level} not shown as {status}: {row}");
        assert!(section(&dom, case, level).contains(&format!("badge {status}")));
    }
    assert!(levels.iter().any(|(_, _, s)| *s == "skipped"), "the committed cases have skipped tiers (real models without weights)");
    let l3 = levels.iter().filter(|(_, l, s)| *l == "L3" && *s != "skipped").count();
    assert!(dom.matches("<svg class=\"plot layers\"").count() >= l3 / 2, "layer plots missing");
    assert!(dom.contains("<svg class=\"plot components\"") && dom.contains("<svg class=\"plot positions\""));
    let broken = section(&dom, "causal-lm/broken-mlp-layer", "L3");
    assert!(broken.contains("data-first-divergent-layer=\"3\"") && broken.contains("class=\"first-divergent\""), "layer 3 not marked");
    assert!(broken.contains("expected failure signature"), "the xfail signature is not beside the values");
    let vision = section(&dom, "vision-language/unified-vision", "L3");
    assert!(vision.contains("image-block"), "the image block is not shaded");
    assert!(dom.contains("class=\"tokens generated\"") && dom.contains("class=\"tokens top10\""), "L5 tokens / L4 top-10 tables missing");
    assert!(dom.contains("exporter: mobius-onnx") || dom.contains("exporter: mobius"), "the exporter's version is not in the header");
}
