//! The ledger's tables of NIXL agents and calls: the agents the recording
//! follows (what each holds, which went away), the calls past their
//! deadline, the oldest call in flight per operation, the calls with no
//! record of their own and the instrumentation's own failures — with the
//! family of events that writes them.

use super::{Applied, State};
use crate::event::{CallKey, CallKind, Event, GroupId};
use crate::model::{AgentId, Hooked};
use std::time::Duration;

/// Released agents kept in /v1/status (the live ones are all listed).
pub const RELEASED_AGENTS_KEPT: usize = 8;

/// One NIXL agent the recording follows.
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: AgentId,
    pub name: String,
    /// nixl-agent created it (else it is the serving process's own).
    pub owned: bool,
    /// What observed calls hold registered on it now.
    pub descriptors: usize,
    pub bytes: u64,
    pub released: bool,
}

/// The agents, in the order first seen: the live ones and the last few
/// released.
#[derive(Debug, Default)]
pub struct Agents(Vec<Agent>);

impl Agents {
    pub fn iter(&self) -> impl Iterator<Item = &Agent> {
        self.0.iter()
    }

    pub(super) fn hold(&mut self, agent: AgentId, descriptors: usize, bytes: u64) {
        if let Some(a) = self.0.iter_mut().find(|a| a.id == agent) {
            a.descriptors = a.descriptors.saturating_add(descriptors);
            a.bytes = a.bytes.saturating_add(bytes);
        }
    }

    pub(super) fn unhold(&mut self, agent: AgentId, descriptors: usize, bytes: u64) {
        if let Some(a) = self.0.iter_mut().find(|a| a.id == agent) {
            a.descriptors = a.descriptors.saturating_sub(descriptors);
            a.bytes = a.bytes.saturating_sub(bytes);
        }
    }
}

/// A NIXL call past its deadline, until it returns.
#[derive(Debug, Clone)]
pub struct StuckCall {
    pub call: CallKey,
    pub operation: CallKind,
    pub group: Option<GroupId>,
    /// How long it had run when the deadline passed.
    pub elapsed: Duration,
}

/// The NIXL calls the watchdog reported.
#[derive(Debug, Default)]
pub struct Calls {
    /// In the order they passed their deadline.
    pub stuck: Vec<StuckCall>,
    /// The oldest call in flight per operation, as last seen.
    pub in_flight: Vec<(CallKind, Duration)>,
    /// Failures of nixl-agent's own wrapping of a foreign call, by operation.
    pub instrumentation_errors: Vec<(Hooked, u64)>,
    /// NIXL calls with no record of their own, by (method, status): closed
    /// values ([`crate::event::NixlCalled`]), in the order first seen.
    pub nixl_calls: Vec<((&'static str, &'static str), u64)>,
}

impl State {
    /// The family of agents and calls: `None` when `e` is of another.
    pub(super) fn apply_call(&mut self, e: &Event<'_>) -> Option<Applied> {
        let mut out = Applied::default();
        match e {
            Event::AgentSeen(crate::event::AgentSeen { agent, name, owned }) => {
                if !*owned {
                    self.transfers.follows_caller();
                }
                self.transfers.agent_named(*agent, name);
                if !self.agents.0.iter().any(|a| a.id == *agent) {
                    self.agents.0.push(Agent {
                        id: *agent,
                        name: name.to_string(),
                        owned: *owned,
                        descriptors: 0,
                        bytes: 0,
                        released: false,
                    });
                }
            }
            Event::AgentReleased(crate::event::AgentReleased { agent }) => {
                self.release_agent(*agent);
                self.transfers.agent_gone(*agent);
            }
            Event::Stuck(crate::event::Stuck {
                call,
                operation,
                group,
                elapsed,
            }) => {
                let id = group.map(|(id, _)| id);
                if !self.calls.stuck.iter().any(|x| x.call == *call) {
                    self.calls.stuck.push(StuckCall {
                        call: *call,
                        operation: *operation,
                        group: id,
                        elapsed: *elapsed,
                    });
                }
                if let Some(g) = id.and_then(|id| self.groups.get_mut(id)) {
                    out.group = id;
                    if *operation == CallKind::Register {
                        g.stuck(format!(
                            "NIXL {} call past its deadline after {elapsed:?}",
                            operation.as_str()
                        ));
                    }
                }
            }
            // Only its own call's episode ends.
            Event::Unstuck(crate::event::Unstuck { call, .. }) => self.calls.stuck.retain(|x| x.call != *call),
            Event::CallsInFlight(crate::event::CallsInFlight { oldest }) => self.calls.in_flight = oldest.to_vec(),
            Event::NixlCalled(crate::event::NixlCalled { method, status }) => {
                let list = &mut self.calls.nixl_calls;
                match list.iter_mut().find(|(k, _)| *k == (*method, *status)) {
                    Some((_, n)) => *n += 1,
                    None => list.push(((*method, *status), 1)),
                }
            }
            Event::InstrumentationFailed(crate::event::InstrumentationFailed { operation, .. }) => {
                let list = &mut self.calls.instrumentation_errors;
                match list.iter_mut().find(|(o, _)| o == operation) {
                    Some((_, n)) => *n += 1,
                    None => list.push((*operation, 1)),
                }
            }
            _ => return None,
        }
        Some(out)
    }

    /// `agent` went away: NIXL released what it held, and so does the
    /// ledger; the agent stays listed (the last few released ones).
    fn release_agent(&mut self, agent: AgentId) {
        for l in self.live.take_agent(agent) {
            self.unhold(l);
        }
        let agents = &mut self.agents.0;
        if let Some(a) = agents.iter_mut().find(|a| a.id == agent) {
            a.released = true;
        }
        let released = agents.iter().filter(|a| a.released).count();
        if released > RELEASED_AGENTS_KEPT {
            let mut drop = released - RELEASED_AGENTS_KEPT;
            agents.retain(|a| {
                if a.released && drop > 0 {
                    drop -= 1;
                    return false;
                }
                true
            });
        }
    }
}
