//! OpenTelemetry traces, the state side: the tracer provider built from
//! [`TracingConfig`] around the span processor a front-end hands in (the
//! OTLP exporter, `nixl-agent-admin`'s `otlp`), the transfer and peer spans
//! the recording makes, the export counters, and the current trace id for
//! exemplars and log lines.
//!
//! Spans leave the process through that processor's bounded queue:
//! dropped spans are counted in `nixl_agent_trace_spans_dropped_total`,
//! failed exports in `nixl_agent_trace_export_failures_total` (both
//! [`counters`]). Nothing on the registration path, the probes or the
//! scrape waits for the collector.

use super::names;
use crate::config::TracingConfig;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Process-wide trace export counters, registered in every [`super::Metrics`].
pub struct TraceCounters {
    pub dropped: IntCounter,
    pub export_failures: IntCounter,
}

pub fn counters() -> &'static TraceCounters {
    static C: OnceLock<TraceCounters> = OnceLock::new();
    C.get_or_init(|| {
        let f = |name| {
            let fam = names::Family::get(name);
            IntCounter::new(fam.name, fam.help).expect("valid counter")
        };
        TraceCounters {
            dropped: f(names::TRACE_SPANS_DROPPED_TOTAL),
            export_failures: f(names::TRACE_EXPORT_FAILURES_TOTAL),
        }
    })
}

/// The trace and span id of the current span, when it is sampled: what an
/// exemplar or a log line refers to.
pub fn current_ids() -> Option<(TraceId, SpanId)> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    // No OpenTelemetry layer in this process: no span has an id to give
    // (and asking costs a context lookup on every recorded call).
    if !EXPORTING.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let cx = tracing::Span::current().context();
    ids_of(&cx)
}

/// Whether this process exports spans (an OpenTelemetry layer is
/// installed and not forked away from).
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn ids_of(cx: &Context) -> Option<(TraceId, SpanId)> {
    let span = cx.span();
    let sc = span.span_context();
    (sc.is_valid() && sc.is_sampled()).then(|| (sc.trace_id(), sc.span_id()))
}

/// Keeps the provider alive; shut it down to flush within a deadline.
pub struct TracingGuard {
    provider: SdkTracerProvider,
}

impl TracingGuard {
    /// Flushes what is queued, waiting at most `timeout`.
    pub fn shutdown(self, timeout: Duration) {
        let _ = self.provider.shutdown_with_timeout(timeout);
    }
}

/// Set in a forked child: the exporter's thread is its parent's, so this
/// process exports nothing through it (and never flushes it).
static FORKED_AWAY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// In a forked child, before anything else records: spans stop going to
/// the exporter the child inherited.
pub fn forked() {
    FORKED_AWAY.store(true, std::sync::atomic::Ordering::Relaxed);
    EXPORTING.store(false, std::sync::atomic::Ordering::Relaxed);
}

pub fn forked_away() -> bool {
    FORKED_AWAY.load(std::sync::atomic::Ordering::Relaxed)
}

/// Set once a provider exists: spans may then carry trace ids.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Builds the provider around `processor`, the exporter a front-end
/// started for `cfg.endpoint`: from now on spans may carry trace ids.
pub fn provider<P: SpanProcessor + 'static>(cfg: &TracingConfig, processor: P) -> (SdkTracerProvider, TracingGuard) {
    EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(&cfg.sampler, cfg.sampler_arg))
        .with_resource(resource(cfg))
        .build();
    // Transfers are traced with a sampler of their own: every failure and
    // stall, a ratio of the successes (the provider's own sampler still
    // decides for registrations).
    let _ = TRANSFER_TRACER.set(provider.tracer("nixl-agent"));
    let ratio = transfer_ratio(&cfg.sampler, cfg.sampler_arg);
    TRANSFER_RATIO_PPM.store((ratio.clamp(0.0, 1.0) * 1e6) as u32, Ordering::Relaxed);
    (provider.clone(), TracingGuard { provider })
}

/// The tracer transfer spans are made with (set with the provider).
static TRANSFER_TRACER: OnceLock<opentelemetry_sdk::trace::SdkTracer> = OnceLock::new();
/// The share of successful transfers traced, in parts per million.
static TRANSFER_RATIO_PPM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Share of successful transfers traced unless `OTEL_TRACES_SAMPLER` asks
/// for a ratio: a decode worker posts thousands a second.
pub const DEFAULT_TRANSFER_SAMPLE_RATIO: f64 = 0.01;

/// The ratio of successful transfers to trace: the configured ratio
/// sampler's argument, `always_off` none, anything else the default.
fn transfer_ratio(sampler: &str, arg: f64) -> f64 {
    match sampler.strip_prefix("parentbased_").unwrap_or(sampler) {
        "traceidratio" => arg,
        "always_off" => 0.0,
        _ => DEFAULT_TRANSFER_SAMPLE_RATIO,
    }
}

/// Whether a successful transfer is to be traced: a cheap per-thread
/// generator against the ratio; `false` without an exporter.
pub fn sample_transfer() -> bool {
    let ppm = TRANSFER_RATIO_PPM.load(Ordering::Relaxed);
    if ppm == 0 || forked_away() {
        return false;
    }
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            let local = 0u8;
            (0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id()).wrapping_mul(0xBF58_476D_1CE4_E5B9)
                ^ (std::ptr::addr_of!(local) as u64))
                | 1
        });
    }
    let x = STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    });
    (x % 1_000_000) < u64::from(ppm)
}

/// Exports one span for a failed call about a peer (`nixl.peer`): a
/// refused metadata, a connection to an unknown agent. Never sampled away.
pub fn peer_span(event: &str, peer: &str, failure: &crate::model::Failure) {
    use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus, Tracer as _};
    if forked_away() {
        return;
    }
    let Some(tracer) = TRANSFER_TRACER.get() else { return };
    let mut span = tracer
        .span_builder("nixl.peer")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new("nixl.event", event.to_string()),
            KeyValue::new("nixl.peer", peer.to_string()),
            KeyValue::new("nixl.reason", failure.reason.as_str()),
        ])
        .start(tracer);
    span.set_status(SpanStatus::error(failure.message.clone()));
    span.end();
}

/// Exports one span for a traced transfer (failed, stalled or sampled),
/// from its post to its end; its trace and span ids when it was exported.
pub fn transfer_span(t: &crate::ledger::TracedXfer) -> Option<(String, String)> {
    use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus, Tracer as _};
    if forked_away() {
        return None;
    }
    let tracer = TRANSFER_TRACER.get()?;
    let (now_sys, now) = (std::time::SystemTime::now(), Instant::now());
    let wall = |i: Instant| now_sys - now.saturating_duration_since(i);
    let mut attrs = vec![
        KeyValue::new("nixl.op", t.op.as_str()),
        KeyValue::new("nixl.descriptors", t.descriptors as i64),
        KeyValue::new("nixl.bytes", t.bytes as i64),
        KeyValue::new("nixl.peer", t.peer.clone()),
        KeyValue::new("nixl.stage", t.stage),
        KeyValue::new("nixl.stalled", t.stalled),
        KeyValue::new(
            "nixl.outcome",
            t.outcome.map_or("in_flight", crate::model::XferOutcome::as_str),
        ),
    ];
    if let Some(b) = &t.backend {
        attrs.push(KeyValue::new("nixl.backend", b.clone()));
    }
    if let Some(r) = t.reason {
        attrs.push(KeyValue::new("nixl.reason", r.as_str()));
    }
    for (key, mem) in [("nixl.local_mem_type", t.mem.0), ("nixl.remote_mem_type", t.mem.1)] {
        if let Some(m) = mem {
            attrs.push(KeyValue::new(key, m.as_str()));
        }
    }
    let mut span = tracer
        .span_builder("nixl.transfer")
        .with_kind(SpanKind::Client)
        .with_start_time(wall(t.posted.unwrap_or(t.ended)))
        .with_attributes(attrs)
        .start(tracer);
    let failed = t.stalled || !matches!(t.outcome, Some(crate::model::XferOutcome::Done));
    if failed {
        span.set_status(SpanStatus::error(t.message.clone().unwrap_or_else(|| {
            t.outcome
                .map_or("stalled", crate::model::XferOutcome::as_str)
                .to_string()
        })));
    }
    let sc = span.span_context().clone();
    span.end_with_timestamp(wall(t.ended));
    sc.is_sampled()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// The tracing layer that turns spans into OpenTelemetry spans.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("nixl-agent"))
        .with_error_events_to_exceptions(false)
        .with_threads(false)
        .with_location(false)
}

fn sampler(name: &str, arg: f64) -> Sampler {
    let base = |n: &str| match n {
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(arg),
        _ => Sampler::AlwaysOn,
    };
    match name.strip_prefix("parentbased_") {
        Some(inner) => Sampler::ParentBased(Box::new(base(inner))),
        None => base(name),
    }
}

fn resource(cfg: &TracingConfig) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut attrs = vec![
        KeyValue::new("service.name", cfg.service_name.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("host.name", host),
        KeyValue::new("process.pid", i64::from(std::process::id())),
    ];
    attrs.extend(cfg.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
    Resource::builder_empty().with_attributes(attrs).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers() {
        assert!(matches!(sampler("always_off", 1.0), Sampler::AlwaysOff));
        assert!(matches!(
            sampler("parentbased_traceidratio", 0.5),
            Sampler::ParentBased(_)
        ));
        assert!(matches!(sampler("traceidratio", 0.5), Sampler::TraceIdRatioBased(r) if r == 0.5));
        assert_eq!(transfer_ratio("parentbased_traceidratio", 0.25), 0.25);
        assert_eq!(transfer_ratio("always_off", 1.0), 0.0);
        assert_eq!(transfer_ratio("always_on", 1.0), DEFAULT_TRANSFER_SAMPLE_RATIO);
    }
}
