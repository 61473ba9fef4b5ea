//! NIXL agents as the recording knows them: each `nixl_agent` instance's
//! identity, its creation (or failure), its backends and its release, and
//! the failures of the Python side's own wrapping.

use crate::{failure_of, guarded, running, Running};
use nixl_agent::{AgentId, Hooked, Reason};
use nixl_agent_core::diagnose::nixl_config::{telemetry_on, TELEMETRY_ENABLE};
use pyo3::prelude::*;
use std::time::Duration;

impl Running {
    /// The identity of the `nixl_agent` instance `agent`: given when its
    /// `__init__` began ([`agent_creating`]), so what `__init__` itself
    /// does (the backends NIXL's config creates) is that agent's; one
    /// created before the instrumentation started gets one on first use.
    pub(crate) fn agent_id(&self, agent: &Bound<'_, PyAny>) -> AgentId {
        let mut map = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(agent.as_ptr() as usize).or_insert_with(AgentId::fresh)
    }
}

/// `nixl_agent.__init__` begins on the instance `agent`: it is a new agent
/// of the recording from here on (an identity an earlier, collected object
/// at the same address had is not reused).
#[pyfunction]
pub(crate) fn agent_creating(agent: &Bound<'_, PyAny>) {
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
/// `telemetry`: the program's config asked for NIXL's transfer telemetry
/// (`capture_telemetry=True`). Whether NIXL records it is NIXL's rule,
/// `NIXL_TELEMETRY_ENABLE` first, read here as NIXL just read it: only an
/// agent that records it is asked for a transfer's telemetry (asking one
/// that does not makes NIXL print an error line). NIXL exposes no way to
/// ask an agent whether it records telemetry without that line.
#[pyfunction]
#[pyo3(signature = (agent, name, plugins, telemetry=false))]
pub(crate) fn agent_created(
    agent: &Bound<'_, PyAny>,
    name: String,
    plugins: Vec<String>,
    telemetry: bool,
) -> Option<u64> {
    guarded(Hooked::Init, || {
        let r = running()?;
        // The identity its `__init__` began with (its backends are on it).
        let id = r.agent_id(agent);
        let variable = std::env::var_os(TELEMETRY_ENABLE);
        if telemetry_on(variable.as_deref().map(|v| v.to_str().unwrap_or("")), telemetry) {
            r.telemetry.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        }
        r.observer().saw_agent(id, &name, || plugins);
        Some(id.0)
    })
}

/// The `nixl_agent` instance of identity `id` was collected: NIXL released
/// what it held, and so does the recording.
#[pyfunction]
pub(crate) fn agent_released(id: u64) {
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
pub(crate) fn agent_failed(error: &Bound<'_, PyAny>, agent: Option<&Bound<'_, PyAny>>) {
    let failure = failure_of(error, Reason::NixlUnavailable);
    guarded(Hooked::Init, || {
        let r = running()?;
        // NIXL's exception names no cause when its configuration file is
        // one: looked at now that NIXL has failed, never before.
        let failure = nixl_agent_engine::nixl_config::explain(failure);
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
pub(crate) fn backend(agent: &Bound<'_, PyAny>, name: &str, seconds: f64, error: Option<&Bound<'_, PyAny>>) {
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
pub(crate) fn hook_failed(operation: &str, message: &str) {
    if let (Some(r), Some(op)) = (running(), Hooked::parse(operation)) {
        r.observer().hook_failed(op, message);
    }
}
