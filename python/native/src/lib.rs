//! `nixl_agent_instrument._native`: the Python face of nixl-agent, as thin
//! as PyO3 allows. The Python package (`python/nixl_agent_instrument`) wraps
//! NIXL's `nixl_agent` class and hands each wrapped call here; this module
//! turns the call's Python arguments into regions and records the call on
//! the library's one recording path ([`nixl_agent::Observer`]). The
//! decisions of this front-end (settings, group names, reasons) are in
//! [`nixl_agent_instrument`] (shared with the interposer under
//! `libnixl.so`), tested there; nixl-agent's own crates know nothing of
//! Python.
//!
//! A wrapped call returns and raises exactly what NIXL did, and HTTP never
//! takes the GIL (ARCHITECTURE.md). The only exception of ours is
//! [`RegistrationRefused`], in `enforce` mode; anything that goes wrong in
//! here is counted (`nixl_agent_instrumentation_errors_total`), logged once
//! and otherwise swallowed; a panic is caught before it can reach Python.

#![deny(unsafe_code)]

mod agents;
mod calls;
mod dlist_state;
mod dlists;
mod handles;
/// The process's instrumentation, shared with the interposer.
pub use nixl_agent_instrument as instrument;
mod prepped;
mod regions;
mod registrations;
mod xfer_args;
mod xfer_peers;
mod xfer_sides;

use instrument::{Instrumentation, Settings};
use nixl_agent::config::ProcessEnv;
use nixl_agent::{AgentId, Failure, Hooked, Observer, Reason};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use regions::{list_regions, recycle, regions_of};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

// Named after the package, as tracebacks show it
// (`nixl_agent_instrument.RegistrationRefused`).
pyo3::create_exception!(
    nixl_agent_instrument,
    RegistrationRefused,
    PyValueError,
    "nixl-agent refused a registration before NIXL saw it (NIXL_AGENT_VALIDATE=enforce)."
);

/// Calls of at least this many regions are validated without the GIL.
const DETACH_AT: usize = 4096;

/// The settings, read once per process.
fn settings() -> &'static Result<Settings, String> {
    static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();
    SETTINGS.get_or_init(|| Settings::from_env(&ProcessEnv).map_err(|e| e.to_string()))
}

/// The instrumentation of this process, started with its first NIXL agent.
struct Running {
    inst: Instrumentation,
    /// Each live `nixl_agent` instance (by its address) and its identity in
    /// the recording; removed when the instance is collected.
    agents: Mutex<HashMap<usize, AgentId>>,
    /// Transfer requests by handle object, each with its serial.
    requests: handles::Requests,
    /// Prepared descriptor lists by handle object (`make_prepped_xfer`
    /// indexes into them).
    prepped: prepped::PreppedLists,
    /// Transfer lists `get_xfer_descs` made, summarised when made.
    made: dlists::MadeLists,
    /// The agents that capture NIXL's transfer telemetry.
    telemetry: Mutex<std::collections::HashSet<AgentId>>,
    pid: u32,
}

impl Running {
    fn observer(&self) -> &Observer {
        self.inst.observer()
    }
}

/// Taken only by a thread that holds the GIL, and
/// never across a Python call. A fork happens with the forking thread
/// holding the GIL, so no thread holds this at the fork and the child
/// inherits it free; and an at-fork hook or a finalizer that runs in one
/// (`agent_released`) takes it like any call does: nothing is held across
/// the hooks (`tests/python_host.rs`
/// `a_finalizer_run_by_an_at_fork_hook_does_not_deadlock_the_fork`).
static RUNNING: Mutex<Option<Arc<Running>>> = Mutex::new(None);

/// This process's pid, read once and again in a forked child
/// ([`after_fork_in_child`]): `getpid` is a system call, and [`running`] is
/// on every recorded call's path (a transfer's among them).
static PID: AtomicU32 = AtomicU32::new(0);

fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            let p = std::process::id();
            PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// The running instrumentation of this process (not of a parent it was
/// forked from), if started. A child forked without Python's at-fork hooks
/// (a C `fork()`) is not told; `os.fork` and multiprocessing are. Called
/// with the GIL held only (see [`RUNNING`]).
fn running() -> Option<Arc<Running>> {
    let guard = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().filter(|r| r.pid == pid()).cloned()
}

thread_local! {
    /// A `BaseException` that is not an `Exception` (`KeyboardInterrupt`,
    /// `SystemExit` from a signal handler) raised while reading a call's
    /// arguments: the caller's control flow, re-raised before NIXL's call.
    static INTERRUPT: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The value of a Python call made while reading arguments, or `None` when
/// it raised. An `Exception` means "cannot read this" (NIXL will say what is
/// wrong); anything else is kept for [`interrupted`] to raise.
fn soft<T>(r: PyResult<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            let ours = Python::attach(|py| e.is_instance_of::<pyo3::exceptions::PyException>(py));
            if !ours {
                INTERRUPT.with(|slot| {
                    slot.borrow_mut().get_or_insert(e);
                });
            }
            None
        }
    }
}

/// [`soft`] as a method.
trait Soft<T> {
    fn soft(self) -> Option<T>;
}

impl<T> Soft<T> for PyResult<T> {
    fn soft(self) -> Option<T> {
        soft(self)
    }
}

/// The interrupt [`soft`] kept, if any: raised as the bare call would have.
fn interrupted() -> Option<PyErr> {
    INTERRUPT.with(|slot| slot.borrow_mut().take())
}

/// The end of a wrapped call's recording: the interrupt [`soft`] kept while
/// it read its arguments is raised from this call, the one it landed in,
/// and never kept for a later call on the thread.
fn finish() -> PyResult<()> {
    match interrupted() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs `f`, turning a panic into a counted instrumentation failure.
fn guarded<T>(operation: Hooked, f: impl FnOnce() -> Option<T>) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            if let Some(r) = running() {
                r.observer().hook_failed(operation, &message);
            }
            None
        }
    }
}

/// Why the settings are unusable, or `None`. The Python bootstrap does not
/// wrap anything when they are.
#[pyfunction]
fn settings_error() -> Option<String> {
    settings().as_ref().err().cloned()
}

/// Starts the instrumentation of this process if it is not running: the
/// recording, the log, the fd tap when capture is on, and the HTTP server.
/// `frameworks` are the serving frameworks loaded (`sglang`, `vllm`, ...),
/// which choose the groups readiness waits for by default. Returns the
/// address served, if any.
/// `rank_hint`: the rank the framework gives this process (SGLang's
/// `kv_args.engine_rank`, vLLM's `tp_rank`), preferred for its pod slot.
#[pyfunction]
#[pyo3(signature = (frameworks, rank_hint=None))]
fn start(py: Python<'_>, frameworks: Vec<String>, rank_hint: Option<u32>) -> Option<String> {
    start_running(py, &frameworks, rank_hint)
}

/// The interposer preloaded into this process, if any: `True` when it
/// records every NIXL call (then this front-end only hands the framework's
/// names down), the reason it refused this NIXL build (then this front-end
/// records, as without one), `None` without one.
#[pyfunction]
fn interposer(py: Python<'_>) -> Py<PyAny> {
    match nixl_agent_sys::interpose::in_process() {
        None => py.None(),
        Some(Ok(())) => true
            .into_pyobject(py)
            .map(|b| b.to_owned().into_any().unbind())
            .unwrap_or_else(|_| py.None()),
        Some(Err(why)) => why
            .into_pyobject(py)
            .map(|s| s.into_any().unbind())
            .unwrap_or_else(|_| py.None()),
    }
}

/// The pod slot this process publishes in, if it does.
#[pyfunction]
fn rank() -> Option<u32> {
    running().and_then(|r| r.inst.rank())
}

/// The pid of the process one of whose threads is starting the
/// instrumentation, or 0. Not a lock held across the slow start (bind,
/// runtime, publisher): a fork from another thread meanwhile would leave
/// the child's copy held for ever.
static STARTING: AtomicU32 = AtomicU32::new(0);

/// The pid of a process whose start failed (panicked: the OS refused a
/// thread, say), or 0. Such a process stays uninstrumented: its agents are
/// made as bare and no later agent retries (a start that failed once left
/// part of itself behind and would fail again, at every agent). A forked
/// child starts afresh.
static START_FAILED: AtomicU32 = AtomicU32::new(0);

/// Starts the instrumentation, or waits for the thread of this process
/// that is starting it (without the GIL), and returns the address served.
/// `None`: unusable settings, or a start that failed in this process.
fn start_running(py: Python<'_>, frameworks: &[String], rank_hint: Option<u32>) -> Option<String> {
    let Ok(settings) = settings() else { return None };
    let me = pid();
    loop {
        if let Some(r) = running() {
            return r.inst.addr().map(|a| a.to_string());
        }
        if START_FAILED.load(Ordering::Acquire) == me {
            return None;
        }
        match STARTING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            // Another thread of this process is starting it: wait for it.
            Err(other) if other == me => py.detach(|| std::thread::sleep(Duration::from_millis(1))),
            // A parent's thread was starting it when this process forked.
            Err(other) => {
                if STARTING
                    .compare_exchange(other, me, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break;
                }
            }
        }
    }
    let names: Vec<&str> = frameworks.iter().map(String::as_str).collect();
    // Without the GIL: binding, the runtime, the publisher take a while.
    let started = py.detach(|| catch_unwind(AssertUnwindSafe(|| Instrumentation::start(settings, &names, rank_hint))));
    let inst = match started {
        Ok(inst) => inst,
        Err(panic) => {
            START_FAILED.store(me, Ordering::Release);
            STARTING.store(0, Ordering::Release);
            eprintln!(
                "nixl-agent-instrument: not instrumenting: the instrumentation failed to start ({}); the program runs uninstrumented",
                panic_message(panic.as_ref())
            );
            return None;
        }
    };
    // An interposer that refused this NIXL build: this front-end records
    // instead, and says so where the interposer would have.
    if let Some(Err(why)) = nixl_agent_sys::interpose::in_process() {
        let status = nixl_agent_core::model::InterposerStatus {
            recording: false,
            refused: Some(why),
            blind: None,
            fallback: Some("python"),
        };
        inst.observer().interposed(&status, None, None);
    }
    let addr = inst.addr();
    *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(Running {
        inst,
        agents: Mutex::new(HashMap::new()),
        requests: handles::Requests::default(),
        prepped: prepped::PreppedLists::default(),
        made: dlists::MadeLists::default(),
        telemetry: Mutex::new(std::collections::HashSet::new()),
        pid: me,
    }));
    STARTING.store(0, Ordering::Release);
    addr.map(|a| a.to_string())
}

/// What a caught panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// `os.register_at_fork(after_in_child=...)`: the parent's instrumentation
/// is abandoned here (its exporter unused, never dropped); its listening
/// socket, rank slot lock and fd tap were let go of at the fork itself
/// (`nixl_agent_sys::interpose::fork`). The child starts its own with its
/// first NIXL agent.
/// [`RUNNING`] is free here: no thread held it at the fork (the forking
/// one held the GIL).
#[pyfunction]
fn after_fork_in_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    let inherited = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(parent) = inherited {
        match Arc::try_unwrap(parent) {
            Ok(r) => r.inst.abandon_in_child(),
            // Another reference lived on a thread that is gone: leaked.
            Err(r) => std::mem::forget(r),
        }
    }
}

/// At interpreter exit (or before `os._exit`): writes this process's end
/// record into its rank's file (`exception`: the uncaught exception the
/// interpreter exits after) and frees the slot, then flushes the traces.
#[pyfunction]
#[pyo3(signature = (exception=None))]
fn shutdown(py: Python<'_>, exception: Option<String>) {
    let Some(r) = running() else { return };
    py.detach(|| {
        r.inst.end(exception.as_deref());
        r.inst.flush_traces(Duration::from_secs(2));
    })
}

/// Whether fds 1 and 2 go through the fd tap (capture or transports on).
#[pyfunction]
fn output_tapped() -> bool {
    running().is_some_and(|r| r.inst.output_tapped())
}

/// Before `os._exit`: writes out what is in the fd tap's pipes (at most a
/// second, without the GIL).
#[pyfunction]
fn drain_output(py: Python<'_>) {
    if let Some(r) = running() {
        py.detach(|| r.inst.drain_output());
    }
}

/// The address /metrics is served on, if it is.
#[pyfunction]
fn address() -> Option<String> {
    running().and_then(|r| r.inst.addr().map(|a| a.to_string()))
}

/// The metrics in the Prometheus text format (for a program that serves
/// them itself).
#[pyfunction]
fn metrics_text(py: Python<'_>) -> Option<String> {
    let r = running()?;
    Some(py.detach(|| r.observer().metrics().encode(nixl_agent::Format::Text)))
}

/// This process's own recording, as JSON: the one rank of its /v1/status
/// document (`ranks[0].status`).
#[pyfunction]
fn status_json() -> Option<String> {
    let r = running()?;
    let mut status = serde_json::to_value(&*r.observer().status()).ok()?;
    // What only this process knows: where it serves, or why it does not
    // (its port is another program's); /v1/status cannot say it.
    if let Some(map) = status.as_object_mut() {
        let addr = r.inst.addr().map(|a| a.to_string());
        let error = if addr.is_some() { None } else { r.inst.http_error() };
        map.insert("http".into(), serde_json::json!({ "address": addr, "error": error }));
    }
    serde_json::to_string(&status).ok()
}

/// `Failure` from a Python exception: its class names the reason.
fn failure_of(error: &Bound<'_, PyAny>, fallback: Reason) -> Failure {
    failure_by(error, |class| match instrument::reason_of_exception(class) {
        Reason::Unknown => fallback,
        r => r,
    })
}

/// `Failure` from a Python exception, its class mapped to a reason by
/// `reason`; the message is `Class: text`.
fn failure_by(error: &Bound<'_, PyAny>, reason: impl FnOnce(&str) -> Reason) -> Failure {
    let class = error
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let text = error.str().map(|s| s.to_string()).unwrap_or_default();
    Failure::new(reason(&class), format!("{class}: {text}"))
}

fn arg<'py>(
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
    index: usize,
    name: &str,
) -> Option<Bound<'py, PyAny>> {
    if let Ok(a) = args.get_item(index) {
        return Some(a);
    }
    kwargs.and_then(|k| k.get_item(name).soft().flatten())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RegistrationRefused", m.py().get_type::<RegistrationRefused>())?;
    m.add("DEFAULT_LISTEN", nixl_agent::config::DEFAULT_LISTEN)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    // Where the frameworks keep their buffers' addresses and their ranks:
    // the attribute paths the Python side reads (instrument::frameworks).
    let paths = |v: Vec<&str>| PyTuple::new(m.py(), v);
    m.add(
        "BUFFER_HOLDERS",
        paths(instrument::BUFFER_HOLDERS.iter().map(|(p, _)| *p).collect())?,
    )?;
    m.add("RANK_HOLDERS", paths(instrument::RANK_HOLDERS.to_vec())?)?;
    m.add_function(wrap_pyfunction!(settings_error, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::explicit_group, m)?)?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(address, m)?)?;
    m.add_function(wrap_pyfunction!(output_tapped, m)?)?;
    m.add_function(wrap_pyfunction!(drain_output, m)?)?;
    m.add_function(wrap_pyfunction!(metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(status_json, m)?)?;
    m.add_function(wrap_pyfunction!(agents::agent_creating, m)?)?;
    m.add_function(wrap_pyfunction!(agents::agent_created, m)?)?;
    m.add_function(wrap_pyfunction!(agents::agent_released, m)?)?;
    m.add_function(wrap_pyfunction!(agents::agent_failed, m)?)?;
    m.add_function(wrap_pyfunction!(agents::backend, m)?)?;
    m.add_function(wrap_pyfunction!(agents::hook_failed, m)?)?;
    m.add_function(wrap_pyfunction!(calls::nixl_called, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::register, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::hand_down, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::hand_down_done, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::hand_down_process, m)?)?;
    m.add_function(wrap_pyfunction!(interposer, m)?)?;
    m.add_function(wrap_pyfunction!(registrations::deregister, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::clock_base, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_posted, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_state, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_created, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_create_failed, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::dlist_prepped, m)?)?;
    m.add_function(wrap_pyfunction!(dlists::xfer_descs_made, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_released, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::dlist_released, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_peers::peer, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_peers::notified, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_peers::notifs_grew, m)?)?;
    Ok(())
}
