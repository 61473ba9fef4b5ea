//! The data path's Python face: NIXL's transfer methods hand what they
//! were given and what they returned here (`_xfer.wrap`), after the call;
//! this module turns it into the library's words and records it on the
//! observer (what a request moves is read by `xfer_sides`; calls about
//! peers and notifications are `xfer_peers`'s). Nothing here is called
//! before NIXL's own method, and an "in progress" poll never reaches it.
//! Nothing here raises but a signal handler's exception (`KeyboardInterrupt`,
//! `SystemExit`) that landed while the arguments were read: it is raised
//! from the call it landed in, as the bare call would have been
//! interrupted, never kept for a later call ([`crate::finish`]).

use crate::instrument::{mem_type_word, reason_of_transfer_exception};
use crate::{arg, finish, guarded, recycle, regions_of, running, Running, Soft};
use nixl_agent::{Failure, Hooked, Reason, Transfer, XferOp, XferPoll};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::handles::Key;
use crate::prepped::Prepped;
use crate::xfer_sides::{local_side, strided_runs};

/// A name as NIXL's API gives it: a str, or bytes (`add_remote_agent`).
pub(crate) fn name_of(v: &Bound<'_, PyAny>) -> Option<String> {
    if let Ok(s) = v.cast::<PyString>() {
        return s.extract::<String>().ok();
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Some(String::from_utf8_lossy(b.as_bytes()).into_owned());
    }
    None
}

/// The failure a data-path call raised, classified.
pub(crate) fn failure_of(error: &Bound<'_, PyAny>) -> Failure {
    crate::failure_by(error, reason_of_transfer_exception)
}

/// What a post or status poll gave: its state word, or what it raised.
/// NIXL returns its own constant strings: compared by identity first.
fn poll_of(state: &Bound<'_, PyAny>, error: &Bound<'_, PyAny>) -> XferPoll {
    if !error.is_none() {
        return XferPoll::Failed(failure_of(error));
    }
    let py = state.py();
    let (done, proc) = (intern!(py, "DONE"), intern!(py, "PROC"));
    // NIXL returns its interned literals: identity first, for both words.
    if state.is(done) {
        return XferPoll::Done;
    }
    if state.is(proc) {
        return XferPoll::InProgress;
    }
    if state.eq(done).unwrap_or(false) {
        return XferPoll::Done;
    }
    if state.eq(proc).unwrap_or(false) {
        return XferPoll::InProgress;
    }
    match state.extract::<String>().ok() {
        Some(other) => XferPoll::Failed(Failure::new(
            Reason::NixlError,
            format!("NIXL reported the transfer {other} without saying why"),
        )),
        None => XferPoll::Failed(Failure::new(Reason::NixlError, "NIXL's transfer state was not a word")),
    }
}

/// Python's monotonic clock (`time.monotonic_ns`) against `Instant` (both
/// CLOCK_MONOTONIC): a post is stamped in Python before the call, with one
/// clock read.
static CLOCK: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();

/// Sets the clock base: `now_ns` is `time.monotonic_ns()` now.
#[pyfunction]
pub(crate) fn clock_base(now_ns: u64) {
    let _ = CLOCK.set((Instant::now(), now_ns));
}

/// The `Instant` of a `time.monotonic_ns()` reading.
fn instant_of(ns: u64) -> Instant {
    match CLOCK.get() {
        Some((base, base_ns)) if ns >= *base_ns => *base + Duration::from_nanos(ns - base_ns),
        Some((base, base_ns)) => base.checked_sub(Duration::from_nanos(base_ns - ns)).unwrap_or(*base),
        None => Instant::now(),
    }
}

/// `transfer(handle)`, begun at `t0_ns` (`time.monotonic_ns()`), returned
/// `state` (or raised `error`).
#[pyfunction]
pub(crate) fn xfer_posted(
    handle: &Bound<'_, PyAny>,
    t0_ns: &Bound<'_, PyAny>,
    state: &Bound<'_, PyAny>,
    error: &Bound<'_, PyAny>,
) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let h = r.requests.serial(Key::of(handle)?)?;
        // `PyLong_AsLong` (a monotonic reading fits i64): the unsigned path
        // goes through a byte array.
        let posted = t0_ns
            .extract::<i64>()
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .map_or_else(Instant::now, instant_of);
        let poll = poll_of(state, error);
        r.observer().transfer_posted(h, posted, &poll);
        // NIXL_AGENT_TRANSPORTS=1: the first posting to a peer for an op
        // reads UCX's tables (waiting for its output without the GIL).
        if !matches!(poll, XferPoll::Failed(_)) && r.observer().wants_transport(h) {
            handle.py().detach(|| r.observer().transport_after_post(h));
        }
        Some(())
    });
    finish()
}

/// `check_xfer_state(handle)` returned `state` (not "PROC") or raised.
/// A completed transfer of an agent that captures NIXL's telemetry is timed
/// by NIXL (`xferDuration`).
#[pyfunction]
pub(crate) fn xfer_state(
    agent: &Bound<'_, PyAny>,
    handle: &Bound<'_, PyAny>,
    state: &Bound<'_, PyAny>,
    error: &Bound<'_, PyAny>,
) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let key = Key::of(handle)?;
        let h = r.requests.serial(key)?;
        let poll = poll_of(state, error);
        let measured = match poll {
            XferPoll::Done if r.captures_telemetry(agent) => telemetry_of(agent, key.pointer()),
            _ => None,
        };
        r.observer().transfer_status(h, &poll, measured);
        Some(())
    });
    finish()
}

/// NIXL's own measure of a completed transfer (`getXferTelemetry`).
fn telemetry_of(agent: &Bound<'_, PyAny>, handle: u64) -> Option<Duration> {
    let py = agent.py();
    let t = agent
        .getattr(intern!(py, "agent"))
        .soft()?
        .call_method1(intern!(py, "getXferTelemetry"), (handle,))
        .soft()?;
    let us: u64 = t.getattr(intern!(py, "xferDuration")).soft()?.extract().soft()?;
    Some(Duration::from_micros(us))
}

/// The operation word of a creation call.
fn op_of(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> Option<XferOp> {
    let word: String = arg(args, kwargs, 0, "operation")?.extract().ok()?;
    XferOp::parse(&word)
}

/// The peer a creation call names: `initialize_xfer`'s `remote_agent`;
/// `make_prepped_xfer`'s remote side's prepared agent.
fn peer_of(r: &Running, method: &str, args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> String {
    match method {
        "initialize_xfer" => arg(args, kwargs, 3, "remote_agent")
            .and_then(|v| name_of(&v))
            .unwrap_or_default(),
        _ => arg(args, kwargs, 3, "remote_xfer_side")
            .and_then(|v| Key::of(&v))
            .and_then(|h| r.prepped(h))
            .map(|p| p.peer.clone())
            .unwrap_or_default(),
    }
}

/// `initialize_xfer` / `make_prepped_xfer` returned `handle`.
#[pyfunction]
#[pyo3(signature = (agent, method, handle, args, kwargs=None))]
pub(crate) fn xfer_created(
    agent: &Bound<'_, PyAny>,
    method: &str,
    handle: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let key = Key::of(handle)?;
        let op = op_of(args, kwargs)?;
        // A new request, whatever address NIXL gave it; one that NIXL's
        // address shows gone (released by a path nobody saw) ends here.
        let (h, gone) = r.requests.created(key);
        for old in gone {
            r.observer().transfer_released(old);
        }
        let peer = peer_of(&r, method, args, kwargs);
        let (descriptors, bytes, local, remote) = local_side(&r, method, args, kwargs);
        let id = r.agent_id(agent);
        let named = named_backend(&r, method, args, kwargs);
        let sole = r.observer().sole_backend(id);
        let backend = named
            .as_deref()
            .or_else(|| sole.as_ref().and_then(|l| l.first()).map(String::as_str));
        r.observer().transfer_created(&Transfer {
            agent: id,
            handle: h,
            op,
            descriptors,
            bytes,
            local,
            remote,
            backend,
            peer: &peer,
        });
        Some(())
    });
    finish()
}

/// The backend a creation call confines the request to: its own
/// `backends=[one]`, else (`make_prepped_xfer`) the one its local prepared
/// list was confined to. Read from what the program passed, never asked of
/// NIXL (a call the program did not make); an agent of one backend is the
/// caller's fallback, and a choice among several left unknown.
fn named_backend(
    r: &Running,
    method: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> Option<String> {
    let at = if method == "initialize_xfer" { 5 } else { 6 };
    if let Some(one) = arg(args, kwargs, at, "backends").and_then(|b| only_backend(&b)) {
        return Some(one);
    }
    if method == "make_prepped_xfer" {
        let local = arg(args, kwargs, 1, "local_xfer_side").and_then(|v| Key::of(&v))?;
        return r.prepped(local)?.backend.clone();
    }
    None
}

/// The one name of a `backends` list, when it names exactly one.
fn only_backend(backends: &Bound<'_, PyAny>) -> Option<String> {
    let l = backends.cast::<PyList>().ok()?;
    if l.len() != 1 {
        return None;
    }
    l.get_item(0).ok()?.extract::<String>().ok()
}

/// Creating a transfer request raised `error`.
#[pyfunction]
#[pyo3(signature = (agent, method, args, kwargs, error))]
pub(crate) fn xfer_create_failed(
    agent: &Bound<'_, PyAny>,
    method: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    error: &Bound<'_, PyAny>,
) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        // An unknown op word is the program's misuse, not a transfer.
        let op = op_of(args, kwargs)?;
        let failure = failure_of(error);
        let id = r.agent_id(agent);
        // A prepared remote list names its peer and when it was prepared:
        // a peer reloaded since makes it stale (peer_invalidated).
        let remote = (method == "make_prepped_xfer")
            .then(|| arg(args, kwargs, 3, "remote_xfer_side").and_then(|v| Key::of(&v)))
            .flatten()
            .and_then(|h| r.prepped(h));
        match remote {
            Some(p) => r
                .observer()
                .prepped_transfer_create_failed(id, op, &p.peer, &failure, p.prepared),
            None => {
                let peer = peer_of(&r, method, args, kwargs);
                r.observer().transfer_create_failed(id, op, &peer, &failure)
            }
        }
        Some(())
    });
    finish()
}

/// `prep_xfer_dlist(agent_name, xfer_list, mem_type, ...)` returned `handle`.
#[pyfunction]
#[pyo3(signature = (agent, handle, args, kwargs=None))]
pub(crate) fn dlist_prepped(
    agent: &Bound<'_, PyAny>,
    handle: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let _ = agent;
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let h = Key::of(handle)?;
        let peer = arg(args, kwargs, 0, "agent_name")
            .and_then(|v| name_of(&v))
            .unwrap_or_default();
        let peer = if peer == "NIXL_INIT_AGENT" { String::new() } else { peer };
        let mem_word = arg(args, kwargs, 2, "mem_type");
        let named = mem_word
            .as_ref()
            .and_then(|m| m.extract::<String>().ok())
            .and_then(|w| mem_type_word(&w));
        let list = arg(args, kwargs, 1, "xfer_list");
        let prepped = match list.as_ref().and_then(strided_runs) {
            // N×5: (addr, len, dev, stride, count), `count` descriptors a row.
            Some(runs) => Prepped::new(runs, named, peer),
            None => match list.and_then(|l| regions_of(&l, mem_word.as_ref())) {
                Some((mem, regions)) => {
                    let p = Prepped::new(regions.iter().map(|x| (1, x.len as u64)), Some(mem), peer);
                    recycle(regions);
                    p
                }
                None => Prepped::new([], named, peer),
            },
        };
        let backend = arg(args, kwargs, 3, "backends").and_then(|b| only_backend(&b));
        r.prepped.insert(h, prepped.confined_to(backend));
        Some(())
    });
    finish()
}

/// A transfer handle's `release()` returned, or the handle was collected:
/// the request it names ends, once (a second release, or the finalizer
/// of a released handle, finds nothing).
#[pyfunction]
pub(crate) fn xfer_released(handle: &Bound<'_, PyAny>) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let serial = r.requests.released(Key::of(handle)?)?;
        r.observer().transfer_released(serial);
        Some(())
    });
    finish()
}

/// A prepared list's handle released or collected: forgotten.
#[pyfunction]
pub(crate) fn dlist_released(handle: &Bound<'_, PyAny>) -> PyResult<()> {
    guarded(Hooked::Transfer, || {
        let r = running()?;
        let h = Key::of(handle)?;
        r.prepped.remove(h);
        Some(())
    });
    finish()
}

impl Running {
    fn captures_telemetry(&self, agent: &Bound<'_, PyAny>) -> bool {
        let set = self.telemetry.lock().unwrap_or_else(|e| e.into_inner());
        !set.is_empty() && set.contains(&self.agent_id(agent))
    }

    pub(crate) fn prepped(&self, handle: Key) -> Option<Arc<Prepped>> {
        self.prepped.get(handle)
    }
}
