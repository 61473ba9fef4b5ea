//! `nixl_agent.register_memory` and `deregister_memory`, each recorded in
//! one crossing from Python: the wrapper hands over what only it can see of
//! the call site (the caller's module and function, the variable it passes,
//! the framework attribute holding the buffer — or the group of an
//! explicit `nixl_agent_instrument.group` block) with the call's own
//! arguments; the group is named here ([`crate::instrument::name_call`]),
//! the call recorded on the observer's path and made through the original.

use crate::instrument::{check_group, name_call, CallSite};
use crate::regions::{first_and_count, recycle, regions_of};
use crate::{arg, failure_of, guarded, interrupted, running, settings, RegistrationRefused, Soft, DETACH_AT};
use nixl_agent::{Call, CallMark, Hooked, Kind, Outcome, Reason};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::time::Instant;

/// The operator's group overrides (`NIXL_AGENT_GROUPS`), if the settings
/// are usable.
fn overrides() -> &'static [crate::instrument::Override] {
    match settings() {
        Ok(s) => s.groups.as_slice(),
        Err(_) => &[],
    }
}

/// `nixl_agent_instrument.group(name, kind)`: the group and kind its block
/// records under (`kind` derived from the name, as a call site's is, when
/// `None`); a `ValueError` naming the word that cannot be a label.
#[pyfunction]
#[pyo3(signature = (name, kind=None))]
pub(crate) fn explicit_group(name: &str, kind: Option<&str>) -> PyResult<(String, String)> {
    let kind = match kind {
        Some(k) => k.to_string(),
        None => {
            let site = CallSite {
                function: name,
                argument: Some(name),
                ..CallSite::default()
            };
            name_call(&site, overrides()).1.as_str().to_string()
        }
    };
    check_group(name, &kind).map_err(|e| PyValueError::new_err(format!("nixl_agent_instrument.group: {e}")))?;
    Ok((name.to_string(), kind))
}

/// A `str` item of `site`, `Some(None)` for `None`; `None` for anything else.
fn text<'a>(site: &'a Bound<'_, PyTuple>, i: usize) -> Option<Option<&'a str>> {
    let item = site.get_borrowed_item(i).ok()?;
    if item.is_none() {
        return Some(None);
    }
    item.extract::<&'a str>().ok().map(Some)
}

/// The group and kind a call is recorded under, from what the wrapper
/// handed over: `(group, kind)` of an explicit block, or the call site's
/// facts `(module, function, argument, holder)`. `None` when it is neither.
fn group_of(site: &Bound<'_, PyTuple>) -> Option<(String, Kind)> {
    match site.len() {
        2 => Some((text(site, 0)??.to_string(), Kind::parse(text(site, 1)??))),
        4 => {
            let at = CallSite {
                module: text(site, 0)??,
                function: text(site, 1)??,
                argument: text(site, 2)?,
                holder: text(site, 3)?,
            };
            Some(name_call(&at, overrides()))
        }
        _ => None,
    }
}

/// Under the interposer (which records every NIXL call of the process):
/// the group and kind `site` names ([`group_of`]) handed down for this
/// thread's next registration call, which the interposer records. `False`
/// when there is nothing to hand down or no interposer to take it.
#[pyfunction]
pub(crate) fn hand_down(site: &Bound<'_, PyTuple>) -> bool {
    match group_of(site) {
        Some((group, kind)) => nixl_agent_sys::interpose::hand_down(&group, kind.as_str()),
        None => false,
    }
}

/// Under the interposer: the wrapped call is over; what was handed down
/// for it names no later call.
#[pyfunction]
pub(crate) fn hand_down_done() {
    nixl_agent_sys::interpose::hand_down("", "");
}

/// Under the interposer: the serving frameworks loaded and the framework's
/// rank handed down before the agent's constructor starts its
/// instrumentation (they choose readiness's groups and the pod slot).
#[pyfunction]
#[pyo3(signature = (frameworks, rank_hint=None))]
pub(crate) fn hand_down_process(frameworks: Vec<String>, rank_hint: Option<u32>) -> bool {
    nixl_agent_sys::interpose::hand_down_process(&frameworks.join(","), rank_hint)
}

/// `nixl_agent.register_memory(self_, *args, **kwargs)` through `func`
/// (the original), recorded under the group `site` names ([`group_of`]).
#[pyfunction]
#[pyo3(signature = (site, func, self_, args, kwargs=None))]
pub(crate) fn register<'py>(
    site: &Bound<'py, PyTuple>,
    func: &Bound<'py, PyAny>,
    self_: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = func.py();
    let prepared = guarded(Hooked::RegisterMemory, || {
        let r = running()?;
        let Some(named) = group_of(site) else {
            r.observer()
                .hook_failed(Hooked::RegisterMemory, "the call site handed over is not one");
            return None;
        };
        let reg_list = arg(args, kwargs, 0, "reg_list")?;
        let mem_type = arg(args, kwargs, 1, "mem_type");
        let (mem_type, regions) = regions_of(&reg_list, mem_type.as_ref())?;
        // `backends=[...]` as the call names them (vLLM passes it).
        let backends = kwargs
            .and_then(|k| k.get_item(intern!(py, "backends")).soft().flatten())
            .and_then(|b| b.extract::<Vec<String>>().ok());
        Some((r, named, mem_type, regions, backends))
    });
    // A signal handler raised while the arguments were read: the program
    // gets it now, before NIXL's call, as the bare call would have raised it.
    if let Some(e) = interrupted() {
        return Err(e);
    }
    let Some((r, (group, kind), mem_type, regions, backends)) = prepared else {
        return call_through(func, self_, args, kwargs);
    };
    let call = Call {
        agent: r.agent_id(self_),
        backends: backends.as_deref(),
        group: &group,
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
pub(crate) fn deregister<'py>(
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
