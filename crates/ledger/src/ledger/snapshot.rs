//! The /v1/status snapshot built from the ledger's tables when one is taken
//! (`Ledger::snapshot`, cached per generation): the document's data is a
//! projection of the tables, never stored as such.

use super::calls::Agent;
use super::groups::Group;
use super::process::{owner, Backend};
use super::State;
use crate::status::{AgentStatus, BackendStatus, GroupStatus, InFlightCall, NixlCallCount, Status, StuckCallStatus};

impl State {
    /// The snapshot of the tables now.
    pub fn status(&self) -> Status {
        let p = &self.process;
        let mut s = Status::empty();
        s.generation = self.generation;
        s.phase = p.phase;
        s.ready = p.ready;
        s.time_to_ready_seconds = p.time_to_ready;
        s.memlock_limit_bytes = p.memlock_limit;
        s.nixl = p.nixl.clone();
        s.stuck = self
            .calls
            .stuck
            .iter()
            .map(|c| StuckCallStatus {
                call: c.call,
                operation: c.operation.as_str().to_string(),
                group: c.group.and_then(|g| self.groups.get(g)).map(|g| g.name.clone()),
                seconds: c.elapsed.as_secs_f64(),
            })
            .collect();
        s.in_flight = self
            .calls
            .in_flight
            .iter()
            .map(|(op, d)| InFlightCall {
                operation: op.as_str(),
                seconds: d.as_secs_f64(),
            })
            .collect();
        s.nixl_calls = self
            .calls
            .nixl_calls
            .iter()
            .map(|&((method, status), count)| NixlCallCount { method, status, count })
            .collect();
        s.lifecycle_dead = p.lifecycle_dead;
        s.awaits_registration = p.awaits_registration;
        s.backends = p.backends.iter().map(backend).collect();
        s.groups = self.groups.iter().map(group).collect();
        s.agents = self.agents.iter().map(agent).collect();
        s.transfers = self.transfers.status();
        s.probe = p.probe.clone();
        s.pod = p.pod.clone();
        s
    }
}

fn backend(b: &Backend) -> BackendStatus {
    BackendStatus {
        name: b.name.clone(),
        up: b.up,
        reason: b.failure.as_ref().map(|f| f.0),
        error: b.failure.as_ref().map(|f| f.1.clone()),
    }
}

fn agent(a: &Agent) -> AgentStatus {
    AgentStatus {
        id: a.id,
        name: a.name.clone(),
        owner: owner(a.owned),
        descriptors: a.descriptors,
        bytes: a.bytes,
        released: a.released,
    }
}

fn group(g: &Group) -> GroupStatus {
    let fixed = g.fixed.as_ref();
    GroupStatus {
        name: g.name.clone(),
        kind: g.kind.as_str().to_string(),
        mem_type: fixed.map(|l| l.mem_type.as_str()),
        device: fixed.map(|l| l.device.to_string()),
        backend: fixed.map(|l| l.backend.clone()),
        backends: g.backends.clone(),
        required: g.required,
        validate: g.validate,
        source: g.source,
        differing_calls: g.differing_calls,
        last_differing_call: g.last_differing_call.clone(),
        state: g.state,
        descriptors: g.holding.descriptors,
        bytes: g.holding.bytes,
        planned_descriptors: g.planned.0,
        planned_bytes: g.planned.1,
        attempts: g.attempts,
        consecutive_failures: g.consecutive_failures,
        last_reason: g.last_reason,
        last_error: g.last_error.clone(),
        last_diagnostics: g.last_diagnostics.clone(),
        failed_region: g.failed_region,
        last_accepted_invalid: g.last_accepted_invalid.clone(),
        next_retry_seconds: g.next_retry.map(|d| d.as_secs_f64()),
    }
}
