//! The OTLP exporter: how the ledger's spans leave the process. A span
//! processor with a bounded queue of `tracing.queue_size` spans and one
//! export thread (`otlp-export`) that posts batches over http/protobuf or
//! gRPC; and the process's log and trace set-up with it ([`init_logs`]).
//!
//! When the queue is full (collector down or slow) spans are dropped and
//! counted in `nixl_agent_trace_spans_dropped_total`, logged once per
//! outage; failed exports are counted in
//! `nixl_agent_trace_export_failures_total` (the ledger's
//! `telemetry::traces::counters`). Nothing on the registration path, the
//! probes or the scrape waits for the collector.

use crate::config::{Config, OtlpProtocol, TracingConfig};
use crate::telemetry::traces::{counters, TracingGuard};
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spans per export request.
const BATCH: usize = 512;
/// Longest a span waits in the queue before export.
const LINGER: Duration = Duration::from_millis(500);

/// Default filter when `NIXL_AGENT_LOG` is unset: the agent at info, the
/// HTTP/gRPC client stacks of this exporter at warn.
pub const DEFAULT_FILTER: &str = "info,h2=warn,hyper=warn,hyper_util=warn,tonic=warn,tower=warn,reqwest=warn";

/// Installs the process-wide subscriber (the ledger's
/// `telemetry::logs::init`): log lines to `stderr` (the real stderr when a
/// [``nixl_agent_sys::StderrTap``] took fd 2), and OpenTelemetry spans of
/// the agent exported over OTLP when `config.tracing` has an endpoint. The
/// returned guard flushes spans on shutdown.
pub fn init_logs(config: &Config, stderr: Option<Arc<File>>) -> Option<TracingGuard> {
    init_logs_filtered(config, stderr, DEFAULT_FILTER)
}

/// [`init_logs`] with another filter for when `NIXL_AGENT_LOG` is unset (an
/// instrumented process logs only warnings by default).
pub fn init_logs_filtered(config: &Config, stderr: Option<Arc<File>>, default_filter: &str) -> Option<TracingGuard> {
    crate::telemetry::logs::init(config, stderr, default_filter, processor)
}

/// The span processor exporting to `cfg.endpoint`, its thread started;
/// `None` without an endpoint.
pub fn processor(cfg: &TracingConfig) -> Option<impl SpanProcessor + 'static> {
    let endpoint = cfg.endpoint.clone()?;
    Some(BoundedProcessor::start(cfg.clone(), endpoint))
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

/// What the export thread is sent: a span, a flush to acknowledge, the resource.
enum Queued {
    Span(Box<SpanData>),
    Flush(SyncSender<()>),
    Resource(Box<Resource>),
}

/// A span processor with a bounded queue and one export thread.
#[derive(Debug)]
struct BoundedProcessor {
    tx: Mutex<Option<SyncSender<Queued>>>,
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
            Some(tx) => tx.try_send(Queued::Flush(ack_tx)).is_ok(),
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
        match tx.try_send(Queued::Span(Box::new(span))) {
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
            let _ = tx.try_send(Queued::Resource(Box::new(resource.clone())));
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

fn export_loop(rx: Receiver<Queued>, cfg: TracingConfig, endpoint: String) {
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
            Ok(Queued::Span(s)) => {
                oldest.get_or_insert_with(Instant::now);
                batch.push(*s);
                if batch.len() >= BATCH {
                    send(&exporter, &mut batch, &mut failing);
                    oldest = None;
                }
            }
            Ok(Queued::Resource(r)) => exporter.set_resource(&r),
            Ok(Queued::Flush(ack)) => {
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
    fn urls() {
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
    }

    #[test]
    fn no_endpoint_builds_nothing() {
        assert!(processor(&TracingConfig::default()).is_none());
    }
}
