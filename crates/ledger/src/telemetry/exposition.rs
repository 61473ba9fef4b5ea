//! Exposition formats: Prometheus text 0.0.4 (the crate's own encoder) and
//! OpenMetrics 1.0 text (encoded here from the same gathered families), chosen
//! by the scraper's Accept header.

use super::exemplars::Exemplars;
use super::names;
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::{Encoder, Registry, TextEncoder};
use std::fmt::Write;

pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which exposition format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the Accept header lists it with a non-zero q-value
    /// (as Prometheus does when it prefers it), else text 0.0.4.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        for item in accept.split(',') {
            let mut parts = item.split(';').map(str::trim);
            if parts.next() != Some("application/openmetrics-text") {
                continue;
            }
            let q_zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !q_zero {
                return Format::OpenMetrics;
            }
        }
        Format::Text
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// Encodes the registry in the given format.
pub fn encode(registry: &Registry, format: Format) -> String {
    encode_with(registry, format, None)
}

/// Encodes the registry; OpenMetrics output carries the exemplars of the
/// registration duration histogram.
pub fn encode_with(registry: &Registry, format: Format, exemplars: Option<&Exemplars>) -> String {
    let families = registry.gather();
    match format {
        Format::Text => {
            let mut buf = Vec::with_capacity(16 * 1024);
            // Cannot fail: families come from a registry that validated them.
            TextEncoder::new().encode(&families, &mut buf).expect("text encoding");
            String::from_utf8(buf).expect("text exposition is UTF-8")
        }
        Format::OpenMetrics => encode_openmetrics(&families, exemplars),
    }
}

/// OpenMetrics text: counters are declared without `_total` and sampled with
/// it, histograms end with a `+Inf` bucket, and the body ends with `# EOF`.
pub fn encode_openmetrics(families: &[MetricFamily], exemplars: Option<&Exemplars>) -> String {
    let mut out = String::with_capacity(16 * 1024);
    for mf in families {
        let name = mf.name();
        let kind = mf.get_field_type();
        let (family, type_word) = match kind {
            MetricType::COUNTER => (name.strip_suffix("_total").unwrap_or(name), "counter"),
            MetricType::GAUGE => (name, "gauge"),
            MetricType::HISTOGRAM => (name, "histogram"),
            MetricType::SUMMARY => (name, "summary"),
            MetricType::UNTYPED => (name, "unknown"),
        };
        let _ = writeln!(out, "# TYPE {family} {type_word}");
        if !mf.help().is_empty() {
            let _ = writeln!(out, "# HELP {family} {}", escape(mf.help()));
        }
        if let Some(unit) = unit_of(family) {
            let _ = writeln!(out, "# UNIT {family} {unit}");
        }
        for m in mf.get_metric() {
            let labels: Vec<(&str, &str)> = m.get_label().iter().map(|l| (l.name(), l.value())).collect();
            match kind {
                MetricType::COUNTER => {
                    sample(&mut out, family, "_total", &labels, None, m.get_counter().get_value());
                }
                MetricType::GAUGE | MetricType::UNTYPED => {
                    sample(&mut out, family, "", &labels, None, m.get_gauge().get_value());
                }
                MetricType::HISTOGRAM => {
                    let h = m.get_histogram();
                    let ex = exemplars.filter(|_| {
                        name == names::REGISTRATION_DURATION_SECONDS || name == names::TRANSFER_DURATION_SECONDS
                    });
                    let buckets = h.get_bucket();
                    for (i, b) in buckets.iter().enumerate() {
                        let le = float_label(b.upper_bound());
                        sample(
                            &mut out,
                            family,
                            "_bucket",
                            &labels,
                            Some(&le),
                            b.cumulative_count() as f64,
                        );
                        exemplar(&mut out, ex, &labels, i);
                    }
                    let count = h.get_sample_count() as f64;
                    sample(&mut out, family, "_bucket", &labels, Some("+Inf"), count);
                    exemplar(&mut out, ex, &labels, buckets.len());
                    sample(&mut out, family, "_sum", &labels, None, h.get_sample_sum());
                    sample(&mut out, family, "_count", &labels, None, count);
                }
                MetricType::SUMMARY => {
                    let s = m.get_summary();
                    sample(&mut out, family, "_sum", &labels, None, s.sample_sum());
                    sample(&mut out, family, "_count", &labels, None, s.sample_count() as f64);
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Appends ` # {trace_id=..,span_id=..} value timestamp` to the sample line
/// just written, when the bucket has an exemplar.
fn exemplar(out: &mut String, ex: Option<&Exemplars>, labels: &[(&str, &str)], bucket: usize) {
    let Some(e) = ex.and_then(|ex| ex.get(labels, bucket)) else {
        return;
    };
    out.pop(); // the newline
    let _ = writeln!(
        out,
        " # {{trace_id=\"{}\",span_id=\"{}\"}} {} {:.3}",
        e.trace_id,
        e.span_id,
        float_value(e.value),
        e.unix_seconds
    );
}

/// The OpenMetrics UNIT of a family whose name ends in a base unit.
fn unit_of(family: &str) -> Option<&'static str> {
    ["seconds", "bytes"]
        .into_iter()
        .find(|u| family.ends_with(&format!("_{u}")))
}

fn sample(out: &mut String, family: &str, suffix: &str, labels: &[(&str, &str)], le: Option<&str>, value: f64) {
    out.push_str(family);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let mut first = true;
        let extra = le.map(|v| ("le", v));
        for (k, v) in labels.iter().copied().chain(extra) {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&float_value(value));
    out.push('\n');
}

fn float_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        v.to_string()
    }
}

/// Canonical float for `le`: always with a fraction ("1.0", "0.005").
fn float_label(v: f64) -> String {
    let s = float_value(v);
    if v.is_finite() && !s.contains(['.', 'e']) {
        format!("{s}.0")
    } else {
        s
    }
}

/// Escapes a label value or help text: backslash, double quote, newline.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};

    #[test]
    fn negotiation() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Text
        );
    }

    #[test]
    fn openmetrics_shapes() {
        let r = Registry::new();
        let c = IntCounterVec::new(Opts::new("x_events_total", "Events."), &["who"]).unwrap();
        r.register(Box::new(c.clone())).unwrap();
        c.with_label_values(&["a\"b\\c\nd"]).inc();
        let h = HistogramVec::new(
            HistogramOpts::new("x_wait_seconds", "Wait.").buckets(vec![0.5, 1.0]),
            &[],
        )
        .unwrap();
        r.register(Box::new(h.clone())).unwrap();
        h.with_label_values(&[] as &[&str]).observe(0.7);
        let text = encode(&r, Format::OpenMetrics);
        let expected = "\
# TYPE x_events counter
# HELP x_events Events.
x_events_total{who=\"a\\\"b\\\\c\\nd\"} 1
# TYPE x_wait_seconds histogram
# HELP x_wait_seconds Wait.
# UNIT x_wait_seconds seconds
x_wait_seconds_bucket{le=\"0.5\"} 0
x_wait_seconds_bucket{le=\"1.0\"} 1
x_wait_seconds_bucket{le=\"+Inf\"} 1
x_wait_seconds_sum 0.7
x_wait_seconds_count 1
# EOF
";
        assert_eq!(text, expected);
        let plain = encode(&r, Format::Text);
        assert!(plain.contains("# TYPE x_events_total counter"), "{plain}");
        assert!(!plain.contains("# EOF"));
    }
}
