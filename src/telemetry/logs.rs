//! Log lines: structured fields first, then a short sentence. Text for
//! people (the default) or one JSON object per line; every line written
//! inside a span carries that span's `trace_id` and `span_id`.

use crate::config::{Config, LogFormat};
use std::fmt::Write as _;
use std::fs::File;
use std::io::IsTerminal;
use std::sync::Arc;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Default filter when `NIXL_AGENT_LOG` is unset: the agent at info, the
/// HTTP/gRPC client stacks of the OTLP exporter at warn.
#[cfg(feature = "cli")]
pub const DEFAULT_FILTER: &str = "info,h2=warn,hyper=warn,hyper_util=warn,tonic=warn,tower=warn,reqwest=warn";

/// Installs the process-wide subscriber: log lines to `stderr` (the real
/// stderr when a [`crate::nixl::StderrTap`] took fd 2), and OpenTelemetry
/// spans of this crate when `config.tracing` has an endpoint. The returned
/// guard flushes spans on shutdown.
#[cfg(feature = "cli")]
pub fn init(config: &Config, stderr: Option<Arc<File>>) -> Option<super::traces::TracingGuard> {
    init_filtered(config, stderr, DEFAULT_FILTER)
}

/// [`init`] with another filter for when `NIXL_AGENT_LOG` is unset (an
/// instrumented process logs only warnings by default).
pub fn init_filtered(
    config: &Config,
    stderr: Option<Arc<File>>,
    default_filter: &str,
) -> Option<super::traces::TracingGuard> {
    if tracing::dispatcher::has_been_set() {
        // The first subscriber of the process stays (a forked child's is
        // its parent's): no second exporter that nothing would feed.
        return None;
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env(crate::config::ENV_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let ansi = match &stderr {
        Some(f) => f.is_terminal(),
        None => std::io::stderr().is_terminal(),
    } && config.log_format == LogFormat::Text;
    let writer = tracing_subscriber::fmt::writer::BoxMakeWriter::new(move || -> Box<dyn std::io::Write> {
        match &stderr {
            Some(f) => Box::new(SharedFile(f.clone())),
            None => Box::new(std::io::stderr()),
        }
    });
    let fmt = tracing_subscriber::fmt::layer()
        .fmt_fields(NoSpanFields)
        .event_format(LineFormat {
            format: config.log_format,
            ansi,
        })
        .with_writer(writer)
        .with_filter(filter);
    let (provider, guard) = super::traces::provider(&config.tracing).unzip();
    let otel = provider.as_ref().map(|p| {
        // Only the agent's own spans: never the HTTP/gRPC client's, which
        // would trace the export itself.
        // Asked at each span, not cached per call site: a forked child
        // stops sending to its parent's exporter (whose thread it lacks).
        super::traces::layer(p).with_filter(tracing_subscriber::filter::dynamic_filter_fn(|m, _| {
            m.target().starts_with("nixl_agent") && !super::traces::forked_away()
        }))
    });
    let _ = tracing_subscriber::registry().with(otel).with(fmt).try_init();
    guard
}

struct SharedFile(Arc<File>);

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the fmt layer keeps of a span's fields: nothing. A line carries
/// its own fields and its span's ids, never the span's fields, so
/// formatting them when each span opens (the attempt's dozen, on every
/// registration call) would be work no line reads.
pub struct NoSpanFields;

impl<'w> FormatFields<'w> for NoSpanFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(&self, _: Writer<'w>, _: R) -> std::fmt::Result {
        Ok(())
    }

    fn add_fields(
        &self,
        _: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        _: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        Ok(())
    }
}

/// The event formatter.
pub struct LineFormat {
    pub format: LogFormat,
    pub ansi: bool,
}

#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(&'static str, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_str(&mut self, f: &Field, v: &str) {
        if f.name() == "message" {
            self.message = v.to_string();
        } else {
            self.pairs.push((f.name(), v.into()));
        }
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.pairs.push((f.name(), v.into()));
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.pairs.push((f.name(), v.into()));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.pairs.push((f.name(), v.into()));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.pairs.push((f.name(), v.into()));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        if f.name() == "message" {
            self.message = format!("{v:?}");
        } else {
            self.pairs.push((f.name(), format!("{v:?}").into()));
        }
    }
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let ids = ctx.lookup_current().and_then(|span| {
            let cx = tracing::dispatcher::get_default(|d| tracing_opentelemetry::get_otel_context(&span.id(), d))?;
            super::traces::ids_of(&cx)
        });
        let meta = event.metadata();
        let now = humantime_now();
        match self.format {
            LogFormat::Json => {
                let mut obj = serde_json::Map::new();
                obj.insert("timestamp".into(), now.into());
                obj.insert("level".into(), meta.level().as_str().into());
                obj.insert("message".into(), fields.message.into());
                for (k, v) in fields.pairs {
                    obj.insert(k.to_string(), v);
                }
                obj.insert("target".into(), meta.target().into());
                if let Some((t, s)) = ids {
                    obj.insert("trace_id".into(), t.to_string().into());
                    obj.insert("span_id".into(), s.to_string().into());
                }
                writeln!(w, "{}", serde_json::Value::Object(obj))
            }
            LogFormat::Text => {
                let mut line = String::new();
                let level = meta.level().as_str();
                let level = if self.ansi { paint(level) } else { level.to_string() };
                let _ = write!(line, "{now} {level:>5} {}:", meta.target());
                for (k, v) in &fields.pairs {
                    match v {
                        serde_json::Value::String(s) if !s.contains(' ') && !s.is_empty() => {
                            let _ = write!(line, " {k}={s}");
                        }
                        other => {
                            let _ = write!(line, " {k}={other}");
                        }
                    }
                }
                if let Some((t, s)) = ids {
                    let _ = write!(line, " trace_id={t} span_id={s}");
                }
                writeln!(w, "{line} {}", fields.message)
            }
        }
    }
}

fn paint(level: &str) -> String {
    let code = match level {
        "ERROR" => 31,
        "WARN" => 33,
        "INFO" => 32,
        _ => 2,
    };
    format!("\x1b[{code}m{level}\x1b[0m")
}

/// RFC 3339 UTC with microseconds, without a date-time dependency.
fn humantime_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
