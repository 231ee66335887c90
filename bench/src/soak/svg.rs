//! The soak's picture: one small line chart per series in a single SVG file, written by
//! hand (a few dozen elements; no plotting crate for that). Each chart shades the warm-up,
//! draws the samples, the least-squares line after warm-up dashed, and says the verdict.

use super::series::{SERIES, Sample, Trend};

/// One chart's width and height, in pixels.
const WIDTH: f64 = 420.0;
const HEIGHT: f64 = 200.0;
/// Charts per row.
const COLUMNS: usize = 2;
/// The plot area's margins inside a chart: left, right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (56.0, 12.0, 28.0, 26.0);

/// The SVG document: a chart per series of `samples`, with its `trends` (one per series),
/// warm-up ending at `warm_up_until` seconds.
pub fn picture(samples: &[Sample], trends: &[Trend], warm_up_until: f64) -> String {
    let rows = SERIES.len().div_ceil(COLUMNS);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        w = WIDTH * COLUMNS as f64,
        h = HEIGHT * rows as f64
    );
    for (index, (series, trend)) in SERIES.iter().zip(trends).enumerate() {
        let x = WIDTH * (index % COLUMNS) as f64;
        let y = HEIGHT * (index / COLUMNS) as f64;
        let points: Vec<(f64, f64)> = samples
            .iter()
            .map(|sample| (sample.seconds, sample.values[index]))
            .collect();
        let title = format!(
            "{} ({}): {}",
            series.label,
            series.unit,
            trend.verdict.word()
        );
        svg.push_str(&chart(x, y, &title, &points, trend, warm_up_until));
    }
    svg.push_str("</svg>\n");
    svg
}

/// One chart at (`x`, `y`).
fn chart(
    x: f64,
    y: f64,
    title: &str,
    points: &[(f64, f64)],
    trend: &Trend,
    warm_up_until: f64,
) -> String {
    let (left, right, top, bottom) = MARGIN;
    let (plot_w, plot_h) = (WIDTH - left - right, HEIGHT - top - bottom);
    let t_max = points.iter().map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let v_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let v_max = if v_max > 0.0 { v_max * 1.1 } else { 1.0 };
    let px = |t: f64| x + left + plot_w * (t / t_max).clamp(0.0, 1.0);
    let py = |v: f64| y + top + plot_h * (1.0 - (v / v_max).clamp(0.0, 1.0));
    let mut out = format!(
        "<g>\n<text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n",
        x + 8.0,
        y + 16.0,
        escape(title)
    );
    out.push_str(&format!(
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{plot_h:.1}\" fill=\"#eeeeee\"/>\n",
        px(0.0),
        y + top,
        px(warm_up_until) - px(0.0)
    ));
    out.push_str(&format!(
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{plot_w:.1}\" height=\"{plot_h:.1}\" fill=\"none\" stroke=\"#888888\"/>\n",
        x + left,
        y + top
    ));
    for (value, at) in [(v_max, y + top + 10.0), (0.0, y + top + plot_h)] {
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{at:.1}\" text-anchor=\"end\">{}</text>\n",
            x + left - 4.0,
            number(value)
        ));
    }
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\">0 s</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0} s</text>\n",
        x + left,
        y + HEIGHT - 8.0,
        x + left + plot_w,
        y + HEIGHT - 8.0,
        t_max
    ));
    let line: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", px(*t), py(*v)))
        .collect();
    out.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"{}\"/>\n",
        line.join(" ")
    ));
    let fitted = |t: f64| trend.intercept + trend.slope * t;
    out.push_str(&format!(
        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/>\n</g>\n",
        px(warm_up_until),
        py(fitted(warm_up_until)),
        px(t_max),
        py(fitted(t_max))
    ));
    out
}

/// A value for an axis label: no more digits than it needs.
fn number(value: f64) -> String {
    if value == 0.0 {
        "0".into()
    } else if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// Text made safe inside an SVG element.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::super::series::{self, SERIES, Sample};
    use super::*;

    #[test]
    fn one_chart_per_series_with_its_samples_and_verdict() {
        let samples: Vec<Sample> = (0..5)
            .map(|i| Sample {
                seconds: 10.0 * i as f64,
                written: 100 * i,
                values: [f64::from(i as u32); SERIES.len()],
            })
            .collect();
        let trends = series::trends(&samples, 40.0);
        let svg = picture(&samples, &trends, 8.0);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), SERIES.len());
        let first = svg.split("<polyline").nth(1).unwrap_or_default();
        let points = first
            .split("points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        assert_eq!(points.split(' ').count(), samples.len());
        assert!(svg.contains("outbox rows (rows): GROWING"), "{svg}");
    }

    #[test]
    fn titles_are_escaped() {
        assert_eq!(escape("a < b & c"), "a &lt; b &amp; c");
    }
}
