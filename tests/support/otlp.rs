//! A real OTLP/HTTP trace receiver: accepts `POST /v1/traces` with a
//! protobuf `ExportTraceServiceRequest` body, as an OpenTelemetry Collector
//! would, and keeps the decoded spans for assertions.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use prost::Message;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One received span, flattened for assertions.
#[derive(Debug, Clone)]
pub struct RecvSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attrs: HashMap<String, String>,
    /// OTel status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub status_message: String,
    pub events: Vec<(String, HashMap<String, String>)>,
    pub resource: HashMap<String, String>,
}

impl RecvSpan {
    pub fn attr(&self, k: &str) -> &str {
        self.attrs
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("span {} has no attribute {k}: {:?}", self.name, self.attrs))
    }
}

pub struct Receiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<RecvSpan>>>,
    stop: Arc<AtomicBool>,
}

fn value(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| value(&Some(v.clone())))
            .collect::<Vec<_>>()
            .join(","),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), value(&kv.value))).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Receiver {
    /// A receiver at the standard path, `POST /v1/traces`.
    pub fn start() -> Receiver {
        Receiver::start_at("/v1/traces")
    }

    /// A receiver that accepts spans only at `path` (404 elsewhere).
    pub fn start_at(path: &'static str) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (spans.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let s = s.clone();
                        std::thread::spawn(move || serve(conn, &s, path));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Receiver { addr, spans, stop }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<RecvSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the spans received so far.
    pub fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&[RecvSpan]) -> bool) -> Vec<RecvSpan> {
        super::wait_for(timeout, what, || {
            let s = self.spans();
            pred(&s).then_some(s)
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(conn: TcpStream, spans: &Mutex<Vec<RecvSpan>>, path: &str) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        if r.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let ok = request_line.starts_with(&format!("POST {path} "));
        if ok {
            let req = ExportTraceServiceRequest::decode(&body[..]).expect("a valid OTLP protobuf body");
            collect(req, spans);
        }
        let status = if ok { "200 OK" } else { "404 Not Found" };
        let resp = format!("HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n");
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// Flattens an export request into `spans`.
fn collect(req: ExportTraceServiceRequest, spans: &Mutex<Vec<RecvSpan>>) {
    let mut got = spans.lock().unwrap();
    for rs in req.resource_spans {
        let resource = rs.resource.as_ref().map(|r| attrs(&r.attributes)).unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push(RecvSpan {
                    name: s.name.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    attrs: attrs(&s.attributes),
                    status: s.status.as_ref().map_or(0, |st| st.code),
                    status_message: s.status.as_ref().map(|st| st.message.clone()).unwrap_or_default(),
                    events: s
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attrs(&e.attributes)))
                        .collect(),
                    resource: resource.clone(),
                });
            }
        }
    }
}

/// A real OTLP/gRPC receiver: the collector's `TraceService` over tonic.
pub struct GrpcReceiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<RecvSpan>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

struct TraceSvc(Arc<Mutex<Vec<RecvSpan>>>);

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService for TraceSvc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<
        tonic::Response<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse>,
        tonic::Status,
    > {
        collect(request.into_inner(), &self.0);
        Ok(tonic::Response::new(Default::default()))
    }
}

impl GrpcReceiver {
    pub fn start() -> GrpcReceiver {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        // A free port: bind, read it, release it for tonic.
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let svc = TraceSvc(spans.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(svc))
                    .serve_with_shutdown(addr, async {
                        let _ = rx.await;
                    })
                    .await;
            });
        });
        super::wait_for(Duration::from_secs(10), "the gRPC receiver to listen", || {
            TcpStream::connect(addr).ok().map(|_| ())
        });
        GrpcReceiver { addr, spans, _stop: tx }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn wait(&self, what: &str, timeout: Duration, pred: impl Fn(&[RecvSpan]) -> bool) -> Vec<RecvSpan> {
        super::wait_for(timeout, what, || {
            let s = self.spans.lock().unwrap().clone();
            pred(&s).then_some(s)
        })
    }
}
