//! The report's plots, written as inline SVG from one place. A hand-written writer rather than
//! `plotters`: the plots are three small kinds (log-scale lines, log-scale bars, a shaded
//! series), a crate would bring a font stack and a raster back end this page does not use, and
//! the test reads the SVG's own elements (`class`, `data-*`), which a writer we own can name.

use std::fmt::Write;

/// Escapes text for HTML content and attribute values (the page's and the plots' titles).
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Plot size in CSS pixels.
const W: f64 = 560.0;
const H: f64 = 200.0;
/// Margins: left (axis labels), right, top, bottom.
const ML: f64 = 52.0;
const MR: f64 = 12.0;
const MT: f64 = 14.0;
const MB: f64 = 28.0;

/// A log10 axis over `[lo, hi]` (decades), mapping into `[y0, y1]` pixels.
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    /// Decades covering `values` and `extra` (the tolerance), at least 1e-8 … 1.
    fn covering(values: impl Iterator<Item = f64>, extra: Option<f64>) -> Self {
        let mut lo: f64 = -8.0;
        let mut hi: f64 = 0.0;
        for v in values.chain(extra) {
            if v.is_finite() && v > 0.0 {
                lo = lo.min(v.log10().floor());
                hi = hi.max(v.log10().ceil());
            }
        }
        LogAxis { lo, hi: hi.max(lo + 1.0) }
    }

    /// Where `v` lies on the axis, 0 (floor) to 1 (top): non-positive values sit on the floor,
    /// non-finite ones at the top.
    fn frac(&self, v: f64) -> f64 {
        let l = if !v.is_finite() {
            self.hi
        } else if v <= 0.0 {
            self.lo
        } else {
            v.log10().clamp(self.lo, self.hi)
        };
        (l - self.lo) / (self.hi - self.lo)
    }

    /// Pixel y of `v` in a line plot.
    fn y(&self, v: f64) -> f64 {
        MT + (H - MT - MB) * (1.0 - self.frac(v))
    }

    fn ticks(&self, out: &mut String) {
        let step = ((self.hi - self.lo) / 5.0).ceil().max(1.0) as i64;
        let mut d = self.lo as i64;
        while d as f64 <= self.hi {
            let y = self.y(10f64.powi(d as i32));
            let _ = write!(
                out,
                r##"<line x1="{ML}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">1e{d}</text>"##,
                W - MR,
                ML - 4.0,
                y + 4.0
            );
            d += step;
        }
    }
}

fn open(out: &mut String, class: &str, title: &str) {
    let _ =
        write!(out, r#"<svg class="plot {class}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{}</title>"#, esc(title));
}

/// One series of a line plot.
pub struct Series<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub values: &'a [f64],
}

/// Max abs diff per decoder layer on a log scale: each series a polyline with points, the
/// tolerance as a dashed line, the first divergent layer circled (`data-first-divergent-layer`).
pub fn layer_plot(series: &[Series<'_>], tolerance: Option<f64>, first: Option<usize>) -> String {
    let n = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
    let axis = LogAxis::covering(series.iter().flat_map(|s| s.values.iter().copied()), tolerance);
    let x = |i: usize| ML + (W - ML - MR) * if n > 1 { i as f64 / (n - 1) as f64 } else { 0.5 };
    let mut out = String::new();
    open(&mut out, "layers", "max abs diff per decoder layer");
    if let Some(k) = first {
        let _ = write!(out, r#"<g data-first-divergent-layer="{k}">"#);
    } else {
        out.push_str("<g>");
    }
    axis.ticks(&mut out);
    for i in 0..n {
        let _ = write!(out, r#"<text x="{:.1}" y="{}" class="tick" text-anchor="middle">{i}</text>"#, x(i), H - MB + 16.0);
    }
    if let Some(t) = tolerance {
        let y = axis.y(t);
        let _ = write!(
            out,
            r#"<line x1="{ML}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="tolerance"/><text x="{}" y="{:.1}" class="tick" text-anchor="end">atol</text>"#,
            W - MR,
            W - MR,
            y - 4.0
        );
    }
    for s in series {
        let pts: Vec<String> = s.values.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", x(i), axis.y(*v))).collect();
        let _ = write!(out, r#"<polyline class="series {}" points="{}"><title>{}</title></polyline>"#, s.class, pts.join(" "), s.name);
        for (i, v) in s.values.iter().enumerate() {
            let _ = write!(
                out,
                r#"<circle class="point {}" cx="{:.1}" cy="{:.1}" r="3"><title>{} layer {i}: {v:.3e}</title></circle>"#,
                s.class,
                x(i),
                axis.y(*v),
                s.name
            );
        }
    }
    if let (Some(k), Some(s)) = (first, series.last()) {
        if let Some(v) = s.values.get(k) {
            let _ = write!(
                out,
                r#"<circle class="first-divergent" cx="{:.1}" cy="{:.1}" r="8"><title>first divergent layer {k}</title></circle>"#,
                x(k),
                axis.y(*v)
            );
        }
    }
    out.push_str("</g>");
    legend(&mut out, series);
    out.push_str("</svg>");
    out
}

fn legend(out: &mut String, series: &[Series<'_>]) {
    for (i, s) in series.iter().enumerate() {
        let x = ML + 8.0 + 150.0 * i as f64;
        let _ = write!(
            out,
            r#"<rect x="{x}" y="2" width="10" height="10" class="swatch {}"/><text x="{}" y="11" class="tick">{}</text>"#,
            s.class,
            x + 14.0,
            s.name
        );
    }
}

/// Horizontal log-scale bars, one per `(label, value)`, the tolerance as a dashed line; a bar over
/// the tolerance gets class `over`.
pub fn bars(items: &[(String, f64)], tolerance: Option<f64>) -> String {
    let h = MT + 22.0 * items.len() as f64 + MB;
    let axis = LogAxis::covering(items.iter().map(|(_, v)| *v), tolerance);
    let x = |v: f64| 150.0 + (W - 150.0 - 64.0) * axis.frac(v);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="plot components" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img"><title>max abs diff per component</title>"#
    );
    for (i, (label, v)) in items.iter().enumerate() {
        let y = MT + 22.0 * i as f64;
        // NaN counts as over the tolerance.
        let over = tolerance
            .is_some_and(|t| v.partial_cmp(&t) != Some(std::cmp::Ordering::Less) && v.partial_cmp(&t) != Some(std::cmp::Ordering::Equal));
        let _ = write!(
            out,
            r#"<text x="144" y="{:.1}" class="tick" text-anchor="end">{}</text><rect class="bar{}" x="150" y="{y:.1}" width="{:.1}" height="16"><title>{}: {v:.3e}</title></rect><text x="{:.1}" y="{:.1}" class="tick">{v:.2e}</text>"#,
            y + 12.0,
            esc(label),
            if over { " over" } else { "" },
            (x(*v) - 150.0).max(1.0),
            esc(label),
            x(*v) + 4.0,
            y + 12.0
        );
    }
    if let Some(t) = tolerance {
        let _ = write!(out, r#"<line x1="{:.1}" x2="{:.1}" y1="{MT}" y2="{:.1}" class="tolerance"/>"#, x(t), x(t), h - MB + 6.0);
    }
    let mut d = axis.lo as i64;
    while d as f64 <= axis.hi {
        let _ =
            write!(out, r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">1e{d}</text>"#, x(10f64.powi(d as i32)), h - 8.0);
        d += ((axis.hi - axis.lo) / 5.0).ceil().max(1.0) as i64;
    }
    out.push_str("</svg>");
    out
}

/// Logit error per prompt position (log scale) with the image blocks (`[first, last]`) shaded.
pub fn positions(values: &[f64], tolerance: Option<f64>, blocks: &[(usize, usize)]) -> String {
    let n = values.len();
    let axis = LogAxis::covering(values.iter().copied(), tolerance);
    let x = |i: f64| ML + (W - ML - MR) * if n > 1 { i / (n - 1) as f64 } else { 0.5 };
    let mut out = String::new();
    open(&mut out, "positions", "logits max abs diff per prompt position");
    for &(a, b) in blocks {
        let _ = write!(
            out,
            r#"<rect class="image-block" x="{:.1}" y="{MT}" width="{:.1}" height="{:.1}"><title>image block {a}–{b}</title></rect>"#,
            x(a as f64 - 0.5).max(ML),
            (x(b as f64 + 0.5) - x(a as f64 - 0.5)).max(1.0),
            H - MT - MB
        );
    }
    axis.ticks(&mut out);
    if let Some(t) = tolerance {
        let y = axis.y(t);
        let _ = write!(out, r#"<line x1="{ML}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="tolerance"/>"#, W - MR);
    }
    let pts: Vec<String> = values.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", x(i as f64), axis.y(*v))).collect();
    let _ = write!(out, r#"<polyline class="series propagated" points="{}"/>"#, pts.join(" "));
    let _ = write!(
        out,
        r#"<text x="{ML}" y="{}" class="tick">position 0</text><text x="{}" y="{}" class="tick" text-anchor="end">{}</text>"#,
        H - 8.0,
        W - MR,
        H - 8.0,
        n.saturating_sub(1)
    );
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards: the first divergent layer is marked and named in the SVG, the tolerance drawn, a
    /// bar over the tolerance (or NaN) marked `over`, image blocks shaded.
    #[test]
    fn plots_name_what_the_test_reads() {
        let s = layer_plot(&[Series { name: "local", class: "local", values: &[1e-7, 1e-7, 0.5] }], Some(1e-3), Some(2));
        assert!(s.contains(r#"data-first-divergent-layer="2""#) && s.contains("first-divergent") && s.contains("tolerance"), "{s}");
        let b = bars(&[("logits".into(), 0.5), ("inputs_embeds".into(), 1e-7), ("nan".into(), f64::NAN)], Some(1e-3));
        assert_eq!(b.matches("bar over").count(), 2, "{b}");
        let p = positions(&[1e-6, 1e-2, 1e-6], Some(1e-3), &[(1, 1)]);
        assert!(p.contains("image-block"), "{p}");
    }
}
