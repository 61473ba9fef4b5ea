//! The Python front-end's process: what the extension starts with the
//! first NIXL agent of a process and keeps until the process ends — the
//! observer, the log, the fd tap when capture is on, the HTTP server on a
//! runtime of its own, the pod publisher — built from [`Settings`]. The
//! rest of the extension calls only this and the observer it hands out.

use super::{Settings, DEFAULT_LOG_FILTER, LOG_TARGET};
use nixl_agent_admin::{http, otlp};
use nixl_agent_engine::observe::Observer;
use nixl_agent_ledger::telemetry;
use nixl_agent_ledger::telemetry::traces::TracingGuard;
use nixl_agent_pod as pod;
use nixl_agent_pod::publish::Publisher;
use nixl_agent_sys::interpose::fork;
use nixl_agent_sys::StderrTap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The instrumentation of one process.
pub struct Instrumentation {
    observer: Observer,
    /// What serves HTTP, once this process holds the port (at start, or
    /// later by taking it over from another rank of its address).
    http: Arc<Mutex<Option<Served>>>,
    /// The fd tap, when capturing (undone in a forked child at the fork).
    tap: Option<StderrTap>,
    /// The pod slot's publisher, once claimed (beside the first call, for
    /// the interposer: [`Start::Beside`]).
    publisher: Arc<Mutex<Option<Publisher>>>,
    /// [`Instrumentation::end`] ran.
    ended: Arc<AtomicBool>,
    /// Whether the pod slot was claimed (or will not be): what a failure
    /// and the end wait for, briefly, so that their evidence is written.
    claimed: Arc<Claimed>,
    traces: Mutex<Option<TracingGuard>>,
    /// Why this process does not serve its listen address (another program
    /// holds the port, or it cannot be bound), shown while it does not.
    http_error: Arc<Mutex<Option<String>>>,
}

/// The HTTP server: its runtime (its threads end with the process) and
/// the address. Its listening socket is closed in a forked child at the
/// fork (`nixl_agent_sys::interpose::fork`).
struct Served {
    _rt: tokio::runtime::Runtime,
    addr: SocketAddr,
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
        Instrumentation::start_with(settings, frameworks, rank_hint, Start::Here)
    }

    /// [`Instrumentation::start`] for a caller on the host's path (the
    /// interposer, inside the host's first NIXL call): the recording
    /// starts here, and what can wait (claiming the pod slot, sweeping the
    /// private directory, binding the port and asking its holder) runs on
    /// a thread of its own, so that neither this call nor another thread's
    /// NIXL call waits on it.
    pub fn start_beside(settings: &Settings, frameworks: &[&str], rank_hint: Option<u32>) -> Instrumentation {
        Instrumentation::start_with(settings, frameworks, rank_hint, Start::Beside)
    }

    fn start_with(settings: &Settings, frameworks: &[&str], rank_hint: Option<u32>, start: Start) -> Instrumentation {
        let tap = if settings.capture || settings.transports {
            match StderrTap::install_in_host() {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!(
                        "nixl-agent-instrument: NIXL_AGENT_CAPTURE or NIXL_AGENT_TRANSPORTS is on but the fd tap failed ({e}); not capturing"
                    );
                    None
                }
            }
        } else {
            None
        };
        let traces = otlp::init_logs_filtered(&settings.config, tap.as_ref().map(|t| t.original()), DEFAULT_LOG_FILTER);
        let mut observer = Observer::new(settings.observe(frameworks));
        // The line a process that dies of a NIXL failure leaves for
        // Kubernetes: written as the failure is recorded.
        match telemetry::last_words::LastWords::open(&settings.termination_log) {
            Ok(Some(w)) => {
                observer.recorder().subscribe(Box::new(w));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                target: LOG_TARGET,
                error = %e,
                "cannot open the termination-message file {}; a NIXL failure that kills this process will not be written there",
                telemetry::last_words::ENV_TERMINATION_LOG
            ),
        }
        if let Some(t) = tap.as_ref().filter(|_| settings.capture) {
            observer = observer.with_capture(Box::new(t.clone()));
        }
        if let Some(t) = tap.as_ref().filter(|_| settings.transports) {
            // UCX's tables: read, and kept off stdout when nixl-agent asked
            // for them; an operator's own pass through. The import hook
            // asks for them as NIXL is imported, which may be after the
            // settings were first read: its word is read now.
            let ours = settings.proto_info_ours || std::env::var(super::ENV_PROTO_INFO_SET).is_ok_and(|v| v == "1");
            t.keep_protocol_tables(ours);
            // C's stdout line by line (the same bytes): UCX's table lines
            // reach the pipe whole, without flushing the host's buffers.
            t.line_buffer_c_stdout();
            observer = observer.with_protocol_tables(Box::new(t.clone()));
        }
        let http = Arc::new(Mutex::new(None));
        let http_error = Arc::new(Mutex::new(None));
        let publisher = Arc::new(Mutex::new(None));
        let ended = Arc::new(AtomicBool::new(false));
        let claimed = Arc::new(Claimed::default());
        let attach = Attach {
            claimed: claimed.clone(),
            settings: settings.clone(),
            observer: observer.clone(),
            rank_hint,
            http: http.clone(),
            http_error: http_error.clone(),
            publisher: publisher.clone(),
            ended: ended.clone(),
        };
        match start {
            Start::Here => attach.run(),
            Start::Beside => {
                let spawned = std::thread::Builder::new()
                    .name("nixl-agent-start".into())
                    .spawn(move || attach.run());
                if let Err(e) = spawned {
                    tracing::warn!(target: LOG_TARGET, error = %e, "cannot start a thread to claim the pod slot and serve HTTP; recording without them");
                }
            }
        }
        Instrumentation {
            observer,
            http,
            tap,
            publisher,
            ended,
            claimed,
            traces: Mutex::new(traces),
            http_error,
        }
    }

    /// Waits (at most two seconds) until the pod slot is claimed when it is
    /// claimed beside the first call ([`Instrumentation::start_beside`]):
    /// what a NIXL failure does before the host sees it, so that a process
    /// that dies of it leaves it in its rank's file. At once otherwise.
    pub fn settle_claim(&self) {
        self.claimed.wait(CLAIM_WAIT);
    }

    /// Why this process serves no HTTP although asked to (its listen port is
    /// another program's, or cannot be bound); `None` when it serves, or
    /// another rank of its address does.
    pub fn http_error(&self) -> Option<String> {
        self.http_error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// The address /metrics is served on, if this process serves it.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.http
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.addr)
    }

    /// The pod slot this process publishes in, if it does.
    pub fn rank(&self) -> Option<u32> {
        self.publisher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Publisher::rank)
    }

    /// At the interpreter's exit: the rank's file gets its end record (how
    /// the process ended: `exception` names an uncaught exception) and the
    /// slot is freed. The file stays: the pod serves what this process
    /// counted, and the next process of the rank reads it.
    pub fn end(&self, exception: Option<&str>) {
        self.claimed.wait(CLAIM_WAIT);
        let publisher = {
            let mut slot = self.publisher.lock().unwrap_or_else(|e| e.into_inner());
            self.ended.store(true, Ordering::Release);
            slot.take()
        };
        if let Some(p) = publisher {
            // Before the lock is closed: a child forked from now on never
            // closes its number, which may be reused by then.
            if let Some(fd) = p.lock_fd() {
                fork::let_go_of(fork::Held::RankLock, fd);
            }
            p.finish(nixl_agent_core::model::Ended::now(exception));
        }
    }

    /// In a forked child, the instrumentation it inherited from its parent:
    /// whose threads (HTTP, publisher, exporter) did not survive the fork.
    /// The child exports no span through the parent's exporter and never
    /// drops what it inherited (dropping would wait on threads that do not
    /// exist here). Its descriptors of ours (the listening socket, so the
    /// port is the parent's alone and is freed when the parent exits; the
    /// rank slot's lock, so the slot is free once the parent is gone) and
    /// the fd tap were let go of at the fork itself
    /// (`nixl_agent_sys::interpose::fork`): nothing is closed here by
    /// number, which the child may have reused since.
    pub fn abandon_in_child(self) {
        self.let_go_in_child();
        std::mem::forget(self);
    }

    /// [`Instrumentation::abandon_in_child`] for an instrumentation the
    /// child cannot own (a static's): the same, without the forget; the
    /// caller never drops it.
    pub fn let_go_in_child(&self) {
        telemetry::traces::forked();
    }

    /// Whether fds 1 and 2 go through the tap (`NIXL_AGENT_CAPTURE=on` or
    /// `NIXL_AGENT_TRANSPORTS=1`, and it could be installed).
    pub fn output_tapped(&self) -> bool {
        self.tap.is_some()
    }

    /// Just before the process ends without exit handlers (Python's
    /// `os._exit`): what is in the tap's pipes is written out, and fds 1
    /// and 2 point at the real streams again (waits at most a second).
    pub fn drain_output(&self) {
        if let Some(t) = &self.tap {
            t.drain();
        }
    }

    /// Flushes the traces, waiting at most `timeout` (at interpreter exit).
    pub fn flush_traces(&self, timeout: Duration) {
        let guard = self.traces.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = guard {
            t.shutdown(timeout);
        }
    }
}

/// Sets [`Claimed`] when dropped (a claim that panicked is done too).
struct Set<'a>(&'a Claimed);

impl Drop for Set<'_> {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// Where the pod slot is claimed and HTTP served: on the starting thread,
/// or beside it.
#[derive(Clone, Copy)]
enum Start {
    Here,
    Beside,
}

/// What [`Instrumentation::start`] does beside the recording: the pod
/// slot claimed (and the private directory swept) and HTTP served, each
/// filling what the instrumentation shares with it.
struct Attach {
    settings: Settings,
    observer: Observer,
    rank_hint: Option<u32>,
    http: Arc<Mutex<Option<Served>>>,
    http_error: Arc<Mutex<Option<String>>>,
    publisher: Arc<Mutex<Option<Publisher>>>,
    /// The process ended ([`Instrumentation::end`]) before this was done:
    /// no slot is claimed then, and one claimed meanwhile ends at once.
    ended: Arc<AtomicBool>,
    claimed: Arc<Claimed>,
}

/// Set once the pod slot is claimed, or known not to be.
#[derive(Default)]
struct Claimed {
    done: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Claimed {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Waits until set, at most `within`.
    fn wait(&self, within: Duration) {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout_while(done, within, |d| !*d);
    }
}

/// The longest a failure or the process's end waits for the pod slot to be
/// claimed beside the first call (a claimer waits at most 100 ms for a
/// sweeper; the rest is a few file operations).
const CLAIM_WAIT: Duration = Duration::from_secs(2);

impl Attach {
    fn run(self) {
        let Attach {
            settings,
            observer,
            rank_hint,
            http,
            http_error,
            publisher: shared,
            ended,
            claimed,
        } = self;
        let settings = &settings;
        // Without a pod directory, the processes sharing this address are a
        // pod of their own (the scheduler processes of one container).
        let local = if settings.serve && settings.publish.is_none() {
            pod::local::dir_for(settings.config.listen)
                .map_err(|e| {
                    tracing::warn!(target: LOG_TARGET, listen = %settings.config.listen, error = %e, "no private directory for the processes of this address; each serves only its own recording");
                })
                .ok()
                .flatten()
        } else {
            None
        };
        let publish_to = settings.publish.clone().or_else(|| local.clone());
        // Set once the claim is done (or panicked), before HTTP is served.
        let claim_done = Set(&claimed);
        let publisher = publish_to.as_ref().filter(|_| !ended.load(Ordering::Acquire)).and_then(|dir| {
            use pod::claim::Wish;
            let wish = match (settings.rank, rank_hint) {
                (Wish::Explicit(r), _) => Wish::Explicit(r),
                (_, Some(h)) => Wish::Preferred(h),
                (w, None) => w,
            };
            if local.is_some() {
                pod::local::sweep(dir, settings.retention);
            }
            let publisher = observer
                .publish_as(dir, wish)
                .map_err(|e| {
                    tracing::warn!(target: LOG_TARGET, dir = %dir.display(), wish = %wish, error = %e, "cannot publish to the pod directory; recording without it");
                })
                .ok();
            // The slot is this process's alone: a child it forks lets go
            // of the lock at the fork, so the slot is free once this
            // process is gone.
            if let Some(fd) = publisher.as_ref().and_then(Publisher::lock_fd) {
                fork::hold(fork::Held::RankLock, fd);
            }
            publisher
        });
        // Shared as soon as claimed: an end from now on finishes it.
        if let Some(p) = publisher {
            let mut slot = shared.lock().unwrap_or_else(|e| e.into_inner());
            if ended.load(Ordering::Acquire) {
                drop(slot);
                if let Some(fd) = p.lock_fd() {
                    fork::let_go_of(fork::Held::RankLock, fd);
                }
                p.finish(nixl_agent_core::model::Ended::now(None));
            } else {
                *slot = Some(p);
            }
        }
        drop(claim_done);
        if settings.serve {
            let listen = settings.config.listen;
            let limits = settings.config.http.clone();
            let in_use = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AddrInUse;
            match serve(&observer, listen, &limits, local.as_deref(), settings.retention) {
                Ok(s) => *http.lock().unwrap_or_else(|e| e.into_inner()) = Some(s),
                // Another rank of this address serves the merged view; this
                // one takes the port over when that one is gone.
                Err(e) if local.is_some() && in_use(&e) && held_by_nixl_agent(listen) => {
                    tracing::debug!(target: LOG_TARGET, listen = %listen, "another rank of this address serves it; taking it over if it goes");
                    takeover(
                        http.clone(),
                        observer.clone(),
                        listen,
                        limits,
                        local.clone(),
                        settings.retention,
                    );
                }
                // A forked child whose parent serves this address: expected,
                // and not the child's to say on the program's stderr.
                Err(e) if telemetry::traces::forked_away() => {
                    tracing::debug!(target: LOG_TARGET, listen = %listen, error = %e, "a forked child records without HTTP: its parent serves this address");
                }
                Err(e) => {
                    let why = if in_use(&e) {
                        format!("{listen} is in use by another program (not nixl-agent): probes and scrapes of it reach that program")
                    } else {
                        format!("cannot bind {listen}: {e}")
                    };
                    tracing::warn!(target: LOG_TARGET, listen = %listen, error = %why, "cannot serve /metrics and /readyz; recording without HTTP (set NIXL_AGENT_LISTEN to a free ADDR:PORT, or off)");
                    *http_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                }
            }
        }
    }
}

/// Binds `listen` and serves the observer's routes on a runtime of its own
/// (one worker thread, no interpreter lock); with `local`, the routes of a
/// zero-configuration pod's port holder (its own recording while it is
/// alone, the merged view of the address's ranks once it is not).
fn serve(
    observer: &Observer,
    listen: SocketAddr,
    limits: &nixl_agent_core::config::HttpConfig,
    local: Option<&Path>,
    retention: Duration,
) -> std::io::Result<Served> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .thread_name("nixl-agent-http")
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(listen))?;
    let addr = listener.local_addr()?;
    // Served until the process ends; a child it forks closes its copy at
    // the fork.
    fork::hold(fork::Held::Listener, std::os::fd::AsRawFd::as_raw_fd(&listener));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Served until the process ends.
    std::mem::forget(stop_tx);
    let router = {
        let _in_runtime = rt.enter();
        match local {
            Some(dir) => pod::serve::local_router(observer.router(), dir.to_path_buf(), retention),
            None => observer.router(),
        }
    };
    rt.spawn(http::server::serve(listener, router, limits.clone(), stop_rx));
    Ok(Served { _rt: rt, addr })
}

/// Whether what holds `listen` is a nixl-agent (another rank of this
/// address, a process of ours): it serves this build's alerting rules at
/// their path. Anything else (another program, or nothing that answers
/// within half a second) is not.
fn held_by_nixl_agent(listen: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let mut to = listen;
    if to.ip().is_unspecified() {
        to.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let wait = Duration::from_millis(500);
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&to, wait) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(wait));
    let _ = conn.set_write_timeout(Some(wait));
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n",
        http::ALERT_RULES_PATH
    );
    if conn.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = Vec::new();
    let _ = conn.take(4096).read_to_end(&mut head);
    let text = String::from_utf8_lossy(&head);
    let first_line = http::ALERT_RULES_YAML.lines().next().unwrap_or_default();
    text.starts_with("HTTP/1.1 200") && text.contains(first_line)
}

/// A rank that does not hold its address's port tries it every
/// [`pod::local::TAKEOVER_EVERY`] and serves once it gets it (the
/// holder exited or died).
fn takeover(
    http: Arc<Mutex<Option<Served>>>,
    observer: Observer,
    listen: SocketAddr,
    limits: nixl_agent_core::config::HttpConfig,
    local: Option<PathBuf>,
    retention: Duration,
) {
    let spawned = std::thread::Builder::new()
        .name("nixl-agent-takeover".into())
        .spawn(move || loop {
            std::thread::sleep(pod::local::TAKEOVER_EVERY);
            if let Ok(s) = serve(&observer, listen, &limits, local.as_deref(), retention) {
                tracing::info!(target: LOG_TARGET, listen = %listen, "took the address over: serving this address's ranks");
                *http.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
                return;
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(target: LOG_TARGET, error = %e, "cannot start the thread that would take the address over");
    }
}
