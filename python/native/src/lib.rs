//! `nixl_agent_instrument._native`: the Python face of nixl-agent, as thin
//! as PyO3 allows. The Python package (`python/nixl_agent_instrument`) wraps
//! NIXL's `nixl_agent` class and hands each wrapped call here; this module
//! turns the call's Python arguments into regions and records the call on
//! the library's one recording path ([`nixl_agent::Observer`]). The
//! decisions of this front-end (settings, group names, reasons) are in
//! [`instrument`], tested there; nixl-agent's own crates know nothing of
//! Python.
//!
//! Architecture Invariant: a wrapped call returns exactly what NIXL
//! returned and raises exactly what NIXL raised (the same exception object).
//! The only exception of ours is [`RegistrationRefused`], in `enforce`
//! mode. Anything that goes wrong in here is counted
//! (`nixl_agent_instrumentation_errors_total`), logged once and otherwise
//! swallowed; a panic is caught before it can reach Python.
//!
//! Architecture Invariant: HTTP (/metrics, /readyz, ...) is served by this
//! module's own threads from recorded state and never takes the GIL.

#![deny(unsafe_code)]

mod dlists;
mod handles;
pub mod instrument;
mod prepped;
mod xfer_args;

use instrument::{CallSite, Instrumentation, Settings};
use nixl_agent::config::ProcessEnv;
use nixl_agent::{AgentId, Call, CallMark, Failure, Hooked, Kind, MemType, Observer, Outcome, Reason, Region};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// Architecture Invariant: taken only by a thread that holds the GIL, and
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

/// Why an explicit group (`nixl_agent_instrument.group`) cannot be
/// recorded under its name and kind, or `None`.
#[pyfunction]
fn group_error(name: &str, kind: &str) -> Option<String> {
    instrument::check_group(name, kind).err().map(|e| e.to_string())
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
/// is abandoned here (its listening socket closed, its exporter unused, its
/// tap undone); the child starts its own with its first NIXL agent.
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

impl Running {
    /// The identity of the `nixl_agent` instance `agent`: given when its
    /// `__init__` began ([`agent_creating`]), so what `__init__` itself
    /// does (the backends NIXL's config creates) is that agent's; one
    /// created before the instrumentation started gets one on first use.
    fn agent_id(&self, agent: &Bound<'_, PyAny>) -> AgentId {
        let mut map = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(agent.as_ptr() as usize).or_insert_with(AgentId::fresh)
    }
}

/// `nixl_agent.__init__` begins on the instance `agent`: it is a new agent
/// of the recording from here on (an identity an earlier, collected object
/// at the same address had is not reused).
#[pyfunction]
fn agent_creating(agent: &Bound<'_, PyAny>) {
    guarded(Hooked::Init, || {
        let r = running()?;
        r.agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(agent.as_ptr() as usize, AgentId::fresh());
        Some(())
    });
}

/// The agent `agent` was created: its name and the plugins NIXL found.
/// Returns its identity, for `agent_released` when it is collected.
/// `telemetry`: the agent captures NIXL's transfer telemetry (asking one
/// that does not makes NIXL print an error line, so it is never asked).
#[pyfunction]
#[pyo3(signature = (agent, name, plugins, telemetry=false))]
fn agent_created(agent: &Bound<'_, PyAny>, name: String, plugins: Vec<String>, telemetry: bool) -> Option<u64> {
    guarded(Hooked::Init, || {
        let r = running()?;
        // The identity its `__init__` began with (its backends are on it).
        let id = r.agent_id(agent);
        if telemetry {
            r.telemetry.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        }
        r.observer().saw_agent(id, &name, || plugins);
        Some(id.0)
    })
}

/// The `nixl_agent` instance of identity `id` was collected: NIXL released
/// what it held, and so does the recording.
#[pyfunction]
fn agent_released(id: u64) {
    guarded(Hooked::Init, || {
        let r = running()?;
        let id = AgentId(id);
        r.agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, a| *a != id);
        r.observer().agent_released(id);
        Some(())
    });
}

/// `nixl_agent.__init__` raised on the instance `agent`, which is no agent.
#[pyfunction]
#[pyo3(signature = (error, agent=None))]
fn agent_failed(error: &Bound<'_, PyAny>, agent: Option<&Bound<'_, PyAny>>) {
    let failure = failure_of(error, Reason::NixlUnavailable);
    guarded(Hooked::Init, || {
        let r = running()?;
        if let Some(a) = agent {
            r.agents
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(a.as_ptr() as usize));
        }
        r.observer().nixl_unavailable(&failure);
        Some(())
    });
}

/// `agent.create_backend(name)` returned after `seconds` (`error`: what it
/// raised).
#[pyfunction]
#[pyo3(signature = (agent, name, seconds, error=None))]
fn backend(agent: &Bound<'_, PyAny>, name: &str, seconds: f64, error: Option<&Bound<'_, PyAny>>) {
    let result = match error {
        None => Ok(Duration::from_secs_f64(seconds.max(0.0))),
        Some(e) => Err(failure_of(e, Reason::BackendInitFailed)),
    };
    guarded(Hooked::CreateBackend, || {
        let r = running()?;
        r.observer().backend(r.agent_id(agent), name, result);
        Some(())
    });
}

/// A failure of the Python side of the instrumentation.
#[pyfunction]
fn hook_failed(operation: &str, message: &str) {
    if let (Some(r), Some(op)) = (running(), Hooked::parse(operation)) {
        r.observer().hook_failed(op, message);
    }
}

/// The group and kind of a call site (see [`instrument::name_call`]).
#[pyfunction]
#[pyo3(signature = (module, function, argument=None))]
fn name_call(module: &str, function: &str, argument: Option<&str>) -> (String, String) {
    let overrides = match settings() {
        Ok(s) => s.groups.as_slice(),
        Err(_) => &[],
    };
    let (group, kind) = instrument::name_call(
        &CallSite {
            module,
            function,
            argument,
            holder: None,
        },
        overrides,
    );
    (group, kind.as_str().to_string())
}

use instrument::mem_type_word;

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

/// What was passed to `register_memory`: its memory type and regions.
/// `None` for memory nixl-agent does not record (files, blocks, objects).
/// A shape it cannot read is recorded with no regions (NIXL will say).
fn regions_of(reg_list: &Bound<'_, PyAny>, mem_type: Option<&Bound<'_, PyAny>>) -> Option<(MemType, Vec<Region>)> {
    let py = reg_list.py();
    let named = mem_type.and_then(|m| m.extract::<String>().ok());
    let named_type = match named.as_deref() {
        // Files, blocks, objects: not memory nixl-agent records.
        Some("FILE" | "BLOCK" | "OBJ") => return None,
        Some(w) => mem_type_word(w),
        None => None,
    };
    let mem = named_type.unwrap_or(MemType::Dram);
    // A list of (addr, len, dev, meta) tuples: what SGLang and vLLM pass.
    if let Ok(l) = reg_list.cast::<PyList>() {
        return Some(list_regions(l, mem, named_type.is_some()));
    }
    // A nixlRegDList (or nixlXferDList) carries its own type: read from its
    // serialised form in one call, else item by item.
    if soft(reg_list.hasattr(intern!(py, "descCount"))).unwrap_or(false) {
        let mut out = scratch(0);
        if let Some(mem) = dlists::state_regions(reg_list, &mut out) {
            return Some((mem?, out));
        }
        let t = reg_list
            .call_method0(intern!(py, "getType"))
            .soft()?
            .str()
            .soft()?
            .to_string();
        let mem = if t.contains("VRAM") {
            MemType::Vram
        } else if t.contains("DRAM") {
            MemType::Dram
        } else {
            return None;
        };
        let n: usize = reg_list
            .call_method0(intern!(py, "descCount"))
            .soft()?
            .extract()
            .soft()?;
        out.reserve(n);
        for i in 0..n {
            match reg_list.get_item(i).soft().and_then(|d| tuple_region(&d)) {
                Some(r) => out.push(r),
                None => return Some((mem, Vec::new())),
            }
        }
        return Some((mem, out));
    }
    if is_tensor(reg_list) {
        let (mem, r) = tensor_region(reg_list)?;
        return Some((mem, vec![r]));
    }
    // An N×3 array (numpy): read in place, never as Python objects.
    let mut out = scratch(0);
    if dlists::array_regions(reg_list, &mut out).is_some() {
        return Some((mem, out));
    }
    recycle(out);
    if let Ok(t) = reg_list.cast::<PyTuple>() {
        return Some(list_regions(
            &PyList::new(py, t.iter()).soft()?,
            mem,
            named_type.is_some(),
        ));
    }
    Some((mem, Vec::new()))
}

thread_local! {
    /// The regions vector of this thread's last call, kept for the next:
    /// a call of thousands of regions then allocates nothing (a fresh 100 KB
    /// block each call is page faults and heap trims NIXL's call pays for).
    static SCRATCH: std::cell::Cell<Vec<Region>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Kept regions vectors hold at most this many (a million-region call's
/// 24 MB is given back).
const SCRATCH_KEPT: usize = 1 << 16;

/// An empty vector for a call's regions (the thread's kept one, if any).
fn scratch(capacity: usize) -> Vec<Region> {
    let mut v = SCRATCH.with(|s| s.take());
    v.clear();
    v.reserve(capacity);
    v
}

/// Gives a call's regions vector back for the next call on this thread.
fn recycle(v: Vec<Region>) {
    if v.capacity() <= SCRATCH_KEPT {
        SCRATCH.with(|s| s.set(v));
    }
}

/// The regions of a list of tuples (or rows, or tensors).
fn list_regions(items: &Bound<'_, PyList>, mem: MemType, named: bool) -> (MemType, Vec<Region>) {
    let mut out = scratch(items.len());
    for item in items.iter() {
        let region = match item.cast::<PyTuple>() {
            Ok(t) => tuple_fields(t),
            // A list of tensors: their device says the type.
            Err(_) if is_tensor(&item) => {
                return match (tensors(items), items.get_item(0).soft().and_then(|t| tensor_region(&t))) {
                    (Some(all), Some((m, _))) if !named => (m, all),
                    (Some(all), _) => (mem, all),
                    _ => (mem, Vec::new()),
                };
            }
            Err(_) => tuple_region(&item),
        };
        match region {
            Some(r) => out.push(r),
            None => return (mem, Vec::new()),
        }
    }
    (mem, out)
}

fn tensors(items: &Bound<'_, PyList>) -> Option<Vec<Region>> {
    items.iter().map(|t| tensor_region(&t).map(|(_, r)| r)).collect()
}

/// `(addr, len, dev[, meta])` as a tuple (the fast path: borrowed items)
/// or any sequence (a `nixlRegDList` item).
fn tuple_region(item: &Bound<'_, PyAny>) -> Option<Region> {
    match item.cast::<PyTuple>() {
        Ok(t) => tuple_fields(t),
        Err(_) => fields(
            word(&item.get_item(0).soft()?)?,
            word(&item.get_item(1).soft()?)?,
            item.get_item(2).soft()?.extract::<i64>().soft()?,
        ),
    }
}

/// The fast path: a tuple's first three items, borrowed.
fn tuple_fields(t: &Bound<'_, PyTuple>) -> Option<Region> {
    // The common shapes, (addr, len, dev) and (addr, len, dev, meta), in one
    // extraction (items read in place); anything else (an address past
    // i64::MAX, an int-like object) by the general path below. What the
    // fast path raised is kept if it is an interrupt ([`soft`]).
    let fast = match t.len() {
        3 => t.extract::<(i64, i64, i64)>(),
        4 => t
            .extract::<(i64, i64, i64, Bound<'_, PyAny>)>()
            .map(|(a, l, d, _)| (a, l, d)),
        n if n < 3 => return None,
        _ => Err(pyo3::exceptions::PyTypeError::new_err("")),
    };
    match fast {
        Ok((a, l, d)) if a >= 0 && l >= 0 => return fields(a as u64, l as u64, d),
        Ok(_) => {}
        Err(e) => {
            soft::<()>(Err(e));
        }
    }
    let (addr, len, dev) = (
        t.get_borrowed_item(0).soft()?,
        t.get_borrowed_item(1).soft()?,
        t.get_borrowed_item(2).soft()?,
    );
    fields(word(&addr)?, word(&len)?, dev.extract::<i64>().soft()?)
}

fn fields(addr: u64, len: u64, dev: i64) -> Option<Region> {
    Some(Region::new(
        addr as usize,
        len as usize,
        u32::try_from(dev.max(0)).unwrap_or(u32::MAX),
    ))
}

/// An address or length: as `i64` first (CPython's `PyLong_AsLong` is a
/// short loop; its `unsigned long long` conversion goes through a generic
/// byte-array path several times slower), as `u64` above `i64::MAX`.
fn word(v: &Bound<'_, PyAny>) -> Option<u64> {
    match v.extract::<i64>() {
        Ok(w) if w >= 0 => Some(w as u64),
        Ok(_) => None,
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(v.py()) => v.extract::<u64>().soft(),
        Err(e) => soft::<u64>(Err(e)),
    }
}

/// What a deregistration names: its first region and descriptor count
/// (a `nixlRegDList` from `register_memory`; one pybind call each).
fn first_and_count(list: &Bound<'_, PyAny>) -> Option<(Region, usize)> {
    let py = list.py();
    if !soft(list.hasattr(intern!(py, "descCount"))).unwrap_or(false) {
        let (_, regions) = regions_of(list, None)?;
        return regions.first().map(|r| (*r, regions.len()));
    }
    let n: usize = list.call_method0(intern!(py, "descCount")).soft()?.extract().soft()?;
    if n == 0 {
        return None;
    }
    Some((tuple_region(&list.get_item(0).soft()?)?, n))
}

fn is_tensor(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    soft(obj.hasattr(intern!(py, "data_ptr"))).unwrap_or(false)
        && soft(obj.hasattr(intern!(py, "element_size"))).unwrap_or(false)
}

fn tensor_region(t: &Bound<'_, PyAny>) -> Option<(MemType, Region)> {
    let py = t.py();
    let addr: u64 = t.call_method0(intern!(py, "data_ptr")).soft()?.extract().soft()?;
    let numel: u64 = t.call_method0(intern!(py, "numel")).soft()?.extract().soft()?;
    let size: u64 = t.call_method0(intern!(py, "element_size")).soft()?.extract().soft()?;
    let dev: i64 = t.call_method0(intern!(py, "get_device")).soft()?.extract().soft()?;
    let mem = if dev >= 0 { MemType::Vram } else { MemType::Dram };
    Some((
        mem,
        Region::new(addr as usize, numel.saturating_mul(size) as usize, dev.max(0) as u32),
    ))
}

/// `func(self_, *args, **kwargs)`.
fn call_through<'py>(
    func: &Bound<'py, PyAny>,
    self_: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = func.py();
    let mut all = Vec::with_capacity(args.len() + 1);
    all.push(self_.clone());
    all.extend(args.iter());
    func.call(PyTuple::new(py, all)?, kwargs)
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

/// `nixl_agent.register_memory(self_, *args, **kwargs)` through `func`
/// (the original), recorded under `group` / `kind`.
#[pyfunction]
#[pyo3(signature = (group, kind, func, self_, args, kwargs=None))]
fn register<'py>(
    group: &str,
    kind: &str,
    func: &Bound<'py, PyAny>,
    self_: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = func.py();
    let prepared = guarded(Hooked::RegisterMemory, || {
        let r = running()?;
        let reg_list = arg(args, kwargs, 0, "reg_list")?;
        let mem_type = arg(args, kwargs, 1, "mem_type");
        let (mem_type, regions) = regions_of(&reg_list, mem_type.as_ref())?;
        // `backends=[...]` as the call names them (vLLM passes it).
        let backends = kwargs
            .and_then(|k| k.get_item(intern!(py, "backends")).soft().flatten())
            .and_then(|b| b.extract::<Vec<String>>().ok());
        Some((r, mem_type, regions, backends))
    });
    // A signal handler raised while the arguments were read: the program
    // gets it now, before NIXL's call, as the bare call would have raised it.
    if let Some(e) = interrupted() {
        return Err(e);
    }
    let Some((r, mem_type, regions, backends)) = prepared else {
        return call_through(func, self_, args, kwargs);
    };
    let kind = Kind::parse(kind);
    let call = Call {
        agent: r.agent_id(self_),
        backends: backends.as_deref(),
        group,
        kind: &kind,
        mem_type,
        device: r.observer().device_of(mem_type, &regions),
        regions: &regions,
    };
    let started = guarded(Hooked::RegisterMemory, || {
        let pending = r.observer().begin(&call);
        let finding = if regions.len() >= DETACH_AT {
            py.detach(|| r.observer().check(&call))
        } else {
            r.observer().check(&call)
        };
        Some((pending, finding))
    });
    let Some((pending, finding)) = started else {
        return call_through(func, self_, args, kwargs);
    };
    if let (true, Some(f)) = (r.observer().enforcing(), &finding) {
        let message = format!(
            "nixl-agent refused to register group {group:?} before NIXL saw it (NIXL_AGENT_VALIDATE=enforce): {} [reason {}]",
            f.message, f.reason
        );
        guarded(Hooked::RegisterMemory, || {
            r.observer().end(pending, &call, finding.clone(), Outcome::Refused);
            Some(())
        });
        return Err(RegistrationRefused::new_err(message));
    }
    let result = call_through(func, self_, args, kwargs);
    let outcome = match &result {
        Ok(_) => Outcome::Registered,
        Err(e) => {
            // What NIXL printed is read for the failure: waited for here,
            // without the GIL, never inside `end` with it.
            py.detach(|| r.observer().settle_capture());
            Outcome::Failed(failure_of(e.value(py).as_any(), Reason::Unknown))
        }
    };
    guarded(Hooked::RegisterMemory, || {
        r.observer().end(pending, &call, finding, outcome);
        Some(())
    });
    recycle(regions);
    result
}

/// `nixl_agent.deregister_memory(self_, *args, **kwargs)` through `func`,
/// recorded on the group that registered those regions.
#[pyfunction]
#[pyo3(signature = (func, self_, args, kwargs=None))]
fn deregister<'py>(
    func: &Bound<'py, PyAny>,
    self_: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = func.py();
    let prepared = guarded(Hooked::DeregisterMemory, || {
        let r = running()?;
        let list = arg(args, kwargs, 0, "dereg_list")?;
        Some((r, first_and_count(&list)?))
    });
    if let Some(e) = interrupted() {
        return Err(e);
    }
    let mark = prepared.as_ref().map(|(r, _)| r.observer().deregistration_started());
    let t0 = mark.as_ref().map_or_else(Instant::now, CallMark::started);
    let result = call_through(func, self_, args, kwargs);
    let elapsed = t0.elapsed();
    drop(mark);
    if let Some((r, (first, count))) = prepared {
        let failure = result
            .as_ref()
            .err()
            .map(|e| failure_of(e.value(py).as_any(), Reason::Unknown));
        guarded(Hooked::DeregisterMemory, || {
            r.observer()
                .deregistered(r.agent_id(self_), first, count, elapsed, failure);
            Some(())
        });
    }
    result
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RegistrationRefused", m.py().get_type::<RegistrationRefused>())?;
    m.add("DEFAULT_LISTEN", nixl_agent::config::DEFAULT_LISTEN)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(settings_error, m)?)?;
    m.add_function(wrap_pyfunction!(group_error, m)?)?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(address, m)?)?;
    m.add_function(wrap_pyfunction!(output_tapped, m)?)?;
    m.add_function(wrap_pyfunction!(drain_output, m)?)?;
    m.add_function(wrap_pyfunction!(metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(status_json, m)?)?;
    m.add_function(wrap_pyfunction!(agent_creating, m)?)?;
    m.add_function(wrap_pyfunction!(agent_created, m)?)?;
    m.add_function(wrap_pyfunction!(agent_released, m)?)?;
    m.add_function(wrap_pyfunction!(agent_failed, m)?)?;
    m.add_function(wrap_pyfunction!(backend, m)?)?;
    m.add_function(wrap_pyfunction!(hook_failed, m)?)?;
    m.add_function(wrap_pyfunction!(name_call, m)?)?;
    m.add_function(wrap_pyfunction!(register, m)?)?;
    m.add_function(wrap_pyfunction!(deregister, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::clock_base, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_posted, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_state, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_created, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_create_failed, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::dlist_prepped, m)?)?;
    m.add_function(wrap_pyfunction!(dlists::xfer_descs_made, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::xfer_released, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::dlist_released, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::peer, m)?)?;
    m.add_function(wrap_pyfunction!(xfer_args::notified, m)?)?;
    Ok(())
}
