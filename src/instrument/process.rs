//! The Python front-end's process: what the extension starts with the
//! first NIXL agent of a process and keeps until the process ends — the
//! observer, the log, the fd tap when capture is on, the HTTP server on a
//! runtime of its own, the pod publisher — built from [`Settings`]. The
//! extension (`python/native`) calls only this and the observer it hands
//! out; it reaches no internals.

use super::{Settings, DEFAULT_LOG_FILTER, LOG_TARGET};
use crate::nixl::StderrTap;
use crate::observe::Observer;
use crate::pod::publish::Publisher;
use crate::telemetry::traces::TracingGuard;
use std::net::SocketAddr;
use std::time::Duration;

/// The instrumentation of one process.
pub struct Instrumentation {
    observer: Observer,
    addr: Option<SocketAddr>,
    /// The HTTP threads; they end with the process.
    _http: Option<tokio::runtime::Runtime>,
    /// The listening socket's descriptor (closed by a forked child).
    listener_fd: Option<std::os::fd::RawFd>,
    /// The fd tap, when capturing (undone by a forked child).
    tap: Option<StderrTap>,
    _publisher: Option<Publisher>,
    traces: std::sync::Mutex<Option<TracingGuard>>,
}

impl Instrumentation {
    /// Starts recording for `frameworks` (the serving frameworks loaded,
    /// which choose the groups readiness waits for). What cannot start
    /// (the port, the pod directory, the tap) is logged and left out; the
    /// recording itself always starts.
    /// `rank_hint`: the rank the serving framework itself gives this
    /// process (SGLang's engine rank, vLLM's tp rank), preferred when
    /// claiming a pod slot unless a rank was told explicitly.
    pub fn start(settings: &Settings, frameworks: &[&str], rank_hint: Option<u32>) -> Instrumentation {
        let tap = if settings.capture {
            match StderrTap::install() {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!(
                        "nixl-agent-instrument: NIXL_AGENT_CAPTURE=on but the fd tap failed ({e}); not capturing"
                    );
                    None
                }
            }
        } else {
            None
        };
        let traces = crate::telemetry::logs::init_filtered(
            &settings.config,
            tap.as_ref().map(|t| t.original()),
            DEFAULT_LOG_FILTER,
        );
        let mut observer = Observer::new(settings.observe(frameworks));
        if let Some(t) = &tap {
            observer = observer.with_capture(Box::new(t.clone()));
        }
        let (http, addr, listener_fd) = if settings.serve {
            match serve(&observer, settings) {
                Ok((rt, addr, fd)) => (Some(rt), Some(addr), Some(fd)),
                // A forked child whose parent serves this address: expected,
                // and not the child's to say on the program's stderr.
                Err(e) if crate::telemetry::traces::forked_away() => {
                    tracing::debug!(target: LOG_TARGET, listen = %settings.config.listen, error = %e, "a forked child records without HTTP: its parent serves this address");
                    (None, None, None)
                }
                Err(e) => {
                    tracing::warn!(target: LOG_TARGET, listen = %settings.config.listen, error = %e, "cannot serve /metrics and /readyz; recording without HTTP (set NIXL_AGENT_LISTEN to a free ADDR:PORT, or off)");
                    (None, None, None)
                }
            }
        } else {
            (None, None, None)
        };
        let publisher = settings.publish.as_ref().and_then(|(dir, wish)| {
            use crate::pod::claim::Wish;
            let wish = match (*wish, rank_hint) {
                (Wish::Explicit(r), _) => Wish::Explicit(r),
                (_, Some(h)) => Wish::Preferred(h),
                (w, None) => w,
            };
            Publisher::start(dir, wish, observer.metrics().clone(), observer.status_source())
                .map_err(|e| {
                    tracing::warn!(target: LOG_TARGET, dir = %dir.display(), ?wish, error = %e, "cannot publish to the pod directory; recording without it");
                })
                .ok()
        });
        Instrumentation {
            observer,
            addr,
            _http: http,
            listener_fd,
            tap,
            _publisher: publisher,
            traces: std::sync::Mutex::new(traces),
        }
    }

    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// The address /metrics is served on, if it is.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The pod slot this process publishes in, if it does.
    pub fn rank(&self) -> Option<u32> {
        self._publisher.as_ref().map(Publisher::rank)
    }

    /// In a forked child, the instrumentation it inherited from its parent:
    /// whose threads (HTTP, publisher, exporter) did not survive the fork.
    /// The child closes the parent's listening socket (so the port is the
    /// parent's alone and is freed when the parent exits), exports no span
    /// through the parent's exporter, and never drops what it inherited
    /// (dropping would wait on threads that do not exist here).
    pub fn abandon_in_child(self) {
        crate::telemetry::traces::forked();
        if let Some(fd) = self.listener_fd {
            crate::nixl::close_inherited(fd);
        }
        if let Some(t) = &self.tap {
            t.restore_in_child();
        }
        std::mem::forget(self);
    }

    /// Flushes the traces, waiting at most `timeout` (at interpreter exit).
    pub fn flush_traces(&self, timeout: Duration) {
        let guard = self.traces.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = guard {
            t.shutdown(timeout);
        }
    }
}

/// Binds the listen address and serves the observer's routes on a runtime
/// of its own (one worker thread, no interpreter lock).
fn serve(
    observer: &Observer,
    settings: &Settings,
) -> std::io::Result<(tokio::runtime::Runtime, SocketAddr, std::os::fd::RawFd)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .thread_name("nixl-agent-http")
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(settings.config.listen))?;
    let addr = listener.local_addr()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Served until the process ends.
    std::mem::forget(stop_tx);
    rt.spawn(crate::http::server::serve(
        listener,
        observer.router(),
        settings.config.http.clone(),
        stop_rx,
    ));
    Ok((rt, addr, fd))
}
