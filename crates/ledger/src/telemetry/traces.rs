//! OpenTelemetry traces: the tracer provider built from [`TracingConfig`], a
//! bounded span processor that never blocks the agent, and the current
//! trace id for exemplars.
//!
//! Spans are exported by one worker thread through a queue of
//! `tracing.queue_size` spans. When the queue is full (collector down or
//! slow) spans are dropped and counted in
//! `nixl_agent_trace_spans_dropped_total`, logged once per outage; failed
//! exports are counted in `nixl_agent_trace_export_failures_total`. Nothing on
//! the registration path, the probes or the scrape waits for the collector.

use super::names;
use crate::config::{OtlpProtocol, TracingConfig};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Spans per export request.
const BATCH: usize = 512;
/// Longest a span waits in the queue before export.
const LINGER: Duration = Duration::from_millis(500);

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

/// Builds the provider when an endpoint is configured; `None` otherwise.
pub fn provider(cfg: &TracingConfig) -> Option<(SdkTracerProvider, TracingGuard)> {
    let endpoint = cfg.endpoint.clone()?;
    EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let processor = BoundedProcessor::start(cfg.clone(), endpoint);
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
    Some((provider.clone(), TracingGuard { provider }))
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

/// The URL spans are posted to. A base endpoint gets `/v1/traces` (unless
/// it already ends so); a signal-specific one (`exact`) is used as given.
pub fn traces_url(endpoint: &str, protocol: OtlpProtocol, exact: bool) -> String {
    match protocol {
        OtlpProtocol::Grpc => endpoint.to_string(),
        OtlpProtocol::HttpProtobuf if exact => endpoint.to_string(),
        OtlpProtocol::HttpProtobuf if endpoint.trim_end_matches('/').ends_with("/v1/traces") => endpoint.to_string(),
        OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
    }
}

enum Msg {
    Span(Box<SpanData>),
    Flush(SyncSender<()>),
    Resource(Box<Resource>),
}

/// A span processor with a bounded queue and one export thread.
#[derive(Debug)]
struct BoundedProcessor {
    tx: Mutex<Option<SyncSender<Msg>>>,
    full: AtomicBool,
    timeout: Duration,
}

impl BoundedProcessor {
    fn start(cfg: TracingConfig, endpoint: String) -> BoundedProcessor {
        let (tx, rx) = sync_channel(cfg.queue_size);
        let timeout = cfg.export_timeout;
        let spawned = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(rx, cfg, endpoint));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the trace export thread; traces are off");
        }
        BoundedProcessor {
            tx: Mutex::new(Some(tx)),
            full: AtomicBool::new(false),
            timeout,
        }
    }

    fn flush(&self, timeout: Duration) -> OTelSdkResult {
        let (ack_tx, ack_rx) = sync_channel(1);
        let sent = match self.tx.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            // A full queue cannot take the flush request: report, do not wait.
            Some(tx) => tx.try_send(Msg::Flush(ack_tx)).is_ok(),
            None => return Ok(()),
        };
        if !sent {
            return Err(OTelSdkError::Timeout(timeout));
        }
        ack_rx.recv_timeout(timeout).map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = guard.as_ref() else { return };
        match tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => self.full.store(false, Ordering::Relaxed),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                counters().dropped.inc();
                // Logged by the export thread, once per outage: logging here
                // would re-enter the tracing subscriber that is ending a span.
                self.full.store(true, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush(self.timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(tx) = self.tx.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            // Sent before any span: the queue is empty when the provider is built.
            let _ = tx.try_send(Msg::Resource(Box::new(resource.clone())));
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let r = self.flush(timeout);
        // Disconnect: the export thread exits after its last batch.
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        r
    }
}

/// How the exporter's futures are driven: HTTP uses a blocking client, gRPC
/// (tonic) needs a tokio runtime of its own on this thread.
enum Exporter {
    Http(opentelemetry_otlp::SpanExporter),
    Grpc(opentelemetry_otlp::SpanExporter, tokio::runtime::Runtime),
}

impl Exporter {
    fn build(cfg: &TracingConfig, endpoint: &str) -> Result<Exporter, String> {
        let url = traces_url(endpoint, cfg.protocol, cfg.endpoint_is_traces_url);
        match cfg.protocol {
            OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(url)
                .with_timeout(cfg.export_timeout)
                .with_headers(Default::default())
                .build()
                .map(Exporter::Http)
                .map_err(|e| e.to_string()),
            OtlpProtocol::Grpc => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let exporter = {
                    let _g = rt.enter();
                    opentelemetry_otlp::SpanExporter::builder()
                        .with_tonic()
                        .with_endpoint(url)
                        .with_timeout(cfg.export_timeout)
                        .build()
                        .map_err(|e| e.to_string())?
                };
                Ok(Exporter::Grpc(exporter, rt))
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        match self {
            Exporter::Http(e) | Exporter::Grpc(e, _) => e.set_resource(resource),
        }
    }

    fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        match self {
            Exporter::Http(e) => futures_executor::block_on(e.export(batch)),
            Exporter::Grpc(e, rt) => rt.block_on(e.export(batch)),
        }
    }
}

fn export_loop(rx: Receiver<Msg>, cfg: TracingConfig, endpoint: String) {
    let mut exporter = match Exporter::build(&cfg, &endpoint) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(endpoint, error = %e, "cannot build the OTLP exporter; traces are off");
            return;
        }
    };
    tracing::info!(endpoint, protocol = ?cfg.protocol, "exporting traces over OTLP");
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    let mut oldest: Option<Instant> = None;
    let mut failing = false;
    let mut dropped_seen = 0;
    loop {
        let wait = oldest.map_or(LINGER, |t| LINGER.saturating_sub(t.elapsed()));
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                oldest.get_or_insert_with(Instant::now);
                batch.push(*s);
                if batch.len() >= BATCH {
                    send(&exporter, &mut batch, &mut failing);
                    oldest = None;
                }
            }
            Ok(Msg::Resource(r)) => exporter.set_resource(&r),
            Ok(Msg::Flush(ack)) => {
                send(&exporter, &mut batch, &mut failing);
                oldest = None;
                let _ = ack.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&exporter, &mut batch, &mut failing);
                oldest = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&exporter, &mut batch, &mut failing);
                return;
            }
        }
        let dropped = counters().dropped.get();
        if dropped > dropped_seen {
            tracing::warn!(
                dropped_total = dropped,
                "trace export queue full; spans dropped (counted, logged once per burst)"
            );
            dropped_seen = dropped;
        }
    }
}

fn send(exporter: &Exporter, batch: &mut Vec<SpanData>, failing: &mut bool) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len();
    match exporter.export(std::mem::take(batch)) {
        Ok(()) => {
            if *failing {
                tracing::info!(spans = n, "trace export recovered");
            }
            *failing = false;
        }
        Err(e) => {
            counters().export_failures.inc();
            if !*failing {
                tracing::warn!(error = %e, spans = n, "trace export failed; the agent carries on (logged once until it recovers)");
            }
            *failing = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_samplers() {
        assert_eq!(
            traces_url("http://c:4318", OtlpProtocol::HttpProtobuf, false),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/", OtlpProtocol::HttpProtobuf, false),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces", OtlpProtocol::HttpProtobuf, false),
            "http://c:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c:4317", OtlpProtocol::Grpc, false), "http://c:4317");
        // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the whole URL.
        assert_eq!(
            traces_url("http://c:4318/otlp/spans", OtlpProtocol::HttpProtobuf, true),
            "http://c:4318/otlp/spans"
        );
        assert!(matches!(sampler("always_off", 1.0), Sampler::AlwaysOff));
        assert!(matches!(
            sampler("parentbased_traceidratio", 0.5),
            Sampler::ParentBased(_)
        ));
        assert!(matches!(sampler("traceidratio", 0.5), Sampler::TraceIdRatioBased(r) if r == 0.5));
    }

    #[test]
    fn no_endpoint_builds_nothing() {
        assert!(provider(&TracingConfig::default()).is_none());
    }
}
