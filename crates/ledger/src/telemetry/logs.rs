//! Log lines: structured fields first, then a short sentence. Text for
//! people (the default) or one JSON object per line; every line written
//! inside a span carries that span's `trace_id` and `span_id`.

use crate::config::{Config, LogFormat, TracingConfig};
use opentelemetry_sdk::trace::SpanProcessor;
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

/// Installs the process-wide subscriber: log lines to `stderr` (the real
/// stderr when a [``nixl_agent_sys::StderrTap``] took fd 2), filtered by
/// `NIXL_AGENT_LOG` or else `default_filter`, and OpenTelemetry spans of
/// the agent into the span processor `exporter` starts for
/// `config.tracing` (the OTLP exporter, `nixl-agent-admin`'s `otlp`; `None`:
/// no spans leave). It is asked only when this call installs the
/// subscriber. The returned guard flushes spans on shutdown.
pub fn init<P: SpanProcessor + 'static>(
    config: &Config,
    stderr: Option<Arc<File>>,
    default_filter: &str,
    exporter: impl FnOnce(&TracingConfig) -> Option<P>,
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
    let (provider, guard) = exporter(&config.tracing)
        .map(|p| super::traces::provider(&config.tracing, p))
        .unzip();
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

/// A text line's fields, written as they are visited (`key=value`, the
/// value quoted when it would not read back as one token); the sentence is
/// kept for the end of the line.
struct TextFields<'a, 'w> {
    w: &'a mut Writer<'w>,
    message: String,
    scratch: String,
}

impl TextFields<'_, '_> {
    fn pair(&mut self, key: &str, value: &str) {
        let _ = if is_token(value) {
            write!(self.w, " {key}={value}")
        } else {
            // JSON's quoting: escapes quotes, backslashes and line breaks,
            // so that one event stays one line.
            write!(self.w, " {key}={}", serde_json::Value::from(value))
        };
    }
}

/// A line's closing sentence, its control characters escaped (`\n` as
/// the two characters `\` `n`): a sentence carrying NIXL's words (a
/// stalled transfer's message) stays on its line.
fn write_sentence(w: &mut impl std::fmt::Write, sentence: &str) -> std::fmt::Result {
    if !sentence.chars().any(char::is_control) {
        return w.write_str(sentence);
    }
    for c in sentence.chars() {
        if c.is_control() {
            write!(w, "{}", c.escape_default())?;
        } else {
            w.write_char(c)?;
        }
    }
    Ok(())
}

/// Whether a text value reads back as one token unquoted.
fn is_token(v: &str) -> bool {
    !v.is_empty() && !v.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"')
}

impl Visit for TextFields<'_, '_> {
    fn record_str(&mut self, f: &Field, v: &str) {
        if f.name() == "message" {
            self.message.push_str(v);
        } else {
            self.pair(f.name(), v);
        }
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        let _ = write!(self.w, " {}={v}", f.name());
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        let _ = write!(self.w, " {}={v}", f.name());
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        let _ = write!(self.w, " {}={v}", f.name());
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        // As JSON writes it (NaN and infinities are `null`), like the
        // JSON format's value.
        let _ = write!(self.w, " {}={}", f.name(), serde_json::Value::from(v));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        if f.name() == "message" {
            let _ = write!(self.message, "{v:?}");
        } else {
            let mut s = std::mem::take(&mut self.scratch);
            s.clear();
            let _ = write!(s, "{v:?}");
            self.pair(f.name(), &s);
            self.scratch = s;
        }
    }
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        // Only a process exporting spans has ids to give a line.
        let ids = if super::traces::exporting() {
            ctx.lookup_current().and_then(|span| {
                let cx = tracing::dispatcher::get_default(|d| tracing_opentelemetry::get_otel_context(&span.id(), d))?;
                super::traces::ids_of(&cx)
            })
        } else {
            None
        };
        let meta = event.metadata();
        match self.format {
            LogFormat::Json => {
                let mut fields = Fields::default();
                event.record(&mut fields);
                let mut obj = serde_json::Map::new();
                obj.insert("timestamp".into(), humantime_now().into());
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
                write_timestamp(&mut w)?;
                let level = meta.level().as_str();
                if self.ansi {
                    write!(w, " {:>5} {}:", paint(level), meta.target())?;
                } else {
                    write!(w, " {level:>5} {}:", meta.target())?;
                }
                let mut fields = TextFields {
                    w: &mut w,
                    message: String::new(),
                    scratch: String::new(),
                };
                event.record(&mut fields);
                let message = fields.message;
                if let Some((t, s)) = ids {
                    write!(w, " trace_id={t} span_id={s}")?;
                }
                w.write_char(' ')?;
                write_sentence(&mut w, &message)?;
                w.write_char('\n')
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
    let mut s = String::with_capacity(27);
    let _ = write_timestamp(&mut s);
    s
}

/// [`humantime_now`] written into `w`; the date and time of day are worked
/// out once a second per thread, the microseconds on every line.
fn write_timestamp(w: &mut impl std::fmt::Write) -> std::fmt::Result {
    use std::cell::RefCell;
    thread_local! {
        static SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
    }
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    SECOND.with_borrow_mut(|(at, prefix)| {
        if *at != secs {
            let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            let (y, m, day) = crate::units::civil_from_days(days);
            prefix.clear();
            let _ = write!(
                prefix,
                "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}",
                rem / 3600,
                rem % 3600 / 60,
                rem % 60
            );
            *at = secs;
        }
        write!(w, "{prefix}.{:06}Z", d.subsec_micros())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of `f` formatted by [`LineFormat`], the timestamp cut off.
    fn lines(format: LogFormat, f: impl FnOnce()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .fmt_fields(NoSpanFields)
            .event_format(LineFormat { format, ansi: false })
            .with_writer(move || buf.clone())
            .finish();
        tracing::subscriber::with_default(sub, f);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| match format {
                LogFormat::Text => l.split_once(' ').unwrap().1.to_string(),
                LogFormat::Json => {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    let ts = v.as_object_mut().unwrap().remove("timestamp").unwrap();
                    assert_eq!(ts.as_str().unwrap().len(), "2026-12-03T14:00:21.119512Z".len());
                    v.to_string()
                }
            })
            .collect()
    }

    fn sample() {
        let error = "NIXL: backend error \"x\"";
        tracing::info!(
            group = %"kv",
            kind = %"kv",
            mem_type = "DRAM",
            attempt = 3u32,
            bytes = 4_194_304u64,
            delta = -2i64,
            ok = true,
            ratio = 0.5f64,
            whole = 2.0f64,
            empty = "",
            error = %error,
            reason = Some("timeout"),
            "group registered"
        );
        tracing::warn!(peer = %"p", seconds = 1e21f64, "transfer stalled: {}", "in flight\nucp: timeout");
        tracing::error!(diagnostics = %"a\nb", nan = f64::NAN, "line with spaces");
    }

    #[test]
    fn text_lines_are_fields_then_the_sentence() {
        assert_eq!(
            lines(LogFormat::Text, sample),
            [
                " INFO nixl_agent_ledger::telemetry::logs::tests: group=kv kind=kv mem_type=DRAM attempt=3 bytes=4194304 \
                 delta=-2 ok=true ratio=0.5 whole=2.0 empty=\"\" error=\"NIXL: backend error \\\"x\\\"\" \
                 reason=timeout group registered",
                " WARN nixl_agent_ledger::telemetry::logs::tests: peer=p seconds=1e+21 transfer stalled: in flight\\nucp: timeout",
                "ERROR nixl_agent_ledger::telemetry::logs::tests: diagnostics=\"a\\nb\" nan=null line with spaces",
            ]
        );
    }

    #[test]
    fn json_lines_are_one_object_each() {
        let l = lines(LogFormat::Json, sample);
        assert_eq!(l.len(), 3);
        let v: serde_json::Value = serde_json::from_str(&l[0]).unwrap();
        assert_eq!(v["message"], "group registered");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["bytes"], 4_194_304u64);
        assert_eq!(v["ratio"], 0.5);
        assert_eq!(v["error"], "NIXL: backend error \"x\"");
        assert_eq!(v["reason"], "timeout");
        let w: serde_json::Value = serde_json::from_str(&l[1]).unwrap();
        assert_eq!(w["message"], "transfer stalled: in flight\nucp: timeout");
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let t = humantime_now();
        assert_eq!(t.len(), 27, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T" && &t[19..20] == ".",
            "{t}"
        );
    }

    #[test]
    fn civil_dates() {
        assert_eq!(crate::units::civil_from_days(0), (1970, 1, 1));
        assert_eq!(crate::units::civil_from_days(20_787), (2026, 11, 30));
        assert_eq!(crate::units::civil_from_days(11_016), (2000, 2, 29));
    }
}
