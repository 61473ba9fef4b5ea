//! The events of NIXL agents and calls: an agent seen and released, an
//! observed deregistration, a call past its deadline and its return, the
//! calls in flight, a call with no meaning of its own, a failure of
//! nixl-agent's own wrapping, the lifecycle thread's death, each with its
//! log line.

use super::{Said, INSTRUMENT_LOG_TARGET, LOG_TARGET};
use crate::model::{AgentId, Failure, Hooked, Reason, Region};
use std::time::Duration;

/// Which NIXL call is in flight, or overran its deadline: the `operation`
/// label, a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Preflight,
    Register,
    Deregister,
    Drain,
    /// `postXferReq`: a transfer posted, while the call itself runs.
    PostXfer,
    /// `createXferReq` / `makeXferReq` (may connect to the peer).
    CreateXfer,
    /// `makeConnection`.
    Connect,
    /// `loadRemoteMD`.
    LoadMetadata,
    /// `fetchRemoteMD`.
    FetchMetadata,
}

impl CallKind {
    pub const ALL: [CallKind; 9] = [
        CallKind::Preflight,
        CallKind::Register,
        CallKind::Deregister,
        CallKind::Drain,
        CallKind::PostXfer,
        CallKind::CreateXfer,
        CallKind::Connect,
        CallKind::LoadMetadata,
        CallKind::FetchMetadata,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            CallKind::Preflight => "preflight",
            CallKind::Register => "register",
            CallKind::Deregister => "deregister",
            CallKind::Drain => "drain",
            CallKind::PostXfer => "post_xfer",
            CallKind::CreateXfer => "create_xfer",
            CallKind::Connect => "make_connection",
            CallKind::LoadMetadata => "load_remote_md",
            CallKind::FetchMetadata => "fetch_remote_md",
        }
    }
}

/// Which NIXL call in flight an event is about: the slot of the thread
/// that made it and when it started there (never two calls alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallKey {
    pub slot: u64,
    pub started: u64,
}

/// A NIXL agent the recording follows from now on.
#[derive(Debug)]
pub struct AgentSeen<'a> {
    pub agent: AgentId,
    pub name: &'a str,
    pub owned: bool,
}

impl AgentSeen<'_> {
    pub(super) fn log(&self) {
        tracing::debug!(target: LOG_TARGET, agent = self.agent.0, name = self.name, owned = self.owned, "NIXL agent seen")
    }
}

/// That agent is gone (collected, dropped): NIXL released what it held,
/// and so does the ledger.
#[derive(Debug)]
pub struct AgentReleased {
    pub agent: AgentId,
}

impl AgentReleased {
    pub(super) fn log(&self) {
        tracing::info!(
            target: LOG_TARGET,
            agent = self.agent.0,
            "NIXL agent released: what it held is no longer counted as registered"
        )
    }
}

/// An observed deregistration of what one call registered
/// (`descriptors` regions from `first`) on `agent`: the ledger finds
/// the registration on that agent; one it never saw is left alone.
#[derive(Debug)]
pub struct CallDeregistered<'a> {
    pub agent: AgentId,
    pub first: Region,
    pub descriptors: usize,
    pub failure: Option<&'a Failure>,
    pub elapsed: Duration,
}

impl CallDeregistered<'_> {
    pub(super) fn log(&self, said: &Said) {
        tracing::debug!(
            target: LOG_TARGET,
            agent = self.agent.0,
            descriptors = self.descriptors,
            reason = self.failure.map(|f| f.reason).map(Reason::as_str),
            unmatched = said.unmatched,
            elapsed_us = self.elapsed.as_micros() as u64,
            "observed deregistration"
        )
    }
}

/// A NIXL call outlived `nixl_call_timeout`. Not a failure: the call
/// is counted once, when it ends, with the reason it ends with.
#[derive(Debug)]
pub struct Stuck<'a> {
    /// The call: its episode ends only with its own `Unstuck`.
    pub call: CallKey,
    pub operation: CallKind,
    /// The group whose call it is, if any, and its name (for the log).
    pub group: Option<(super::GroupId, &'a str)>,
    pub elapsed: Duration,
}

impl Stuck<'_> {
    pub(super) fn log(&self) {
        tracing::error!(
            target: LOG_TARGET,
            operation = self.operation.as_str(),
            group = self.group.map(|(_, name)| name),
            elapsed_ms = self.elapsed.as_millis() as u64,
            reason = Reason::Timeout.as_str(),
            "a NIXL call is past its deadline: not ready, /livez failing until it returns"
        )
    }
}

/// That call returned at last.
#[derive(Debug)]
pub struct Unstuck {
    pub call: CallKey,
    pub operation: CallKind,
    pub elapsed: Duration,
}

impl Unstuck {
    pub(super) fn log(&self) {
        tracing::warn!(
            target: LOG_TARGET,
            operation = self.operation.as_str(),
            elapsed_ms = self.elapsed.as_millis() as u64,
            "the NIXL call past its deadline returned"
        )
    }
}

/// NIXL calls in flight (the lifecycle's and observed ones), as the
/// recording's watchdog last saw them: the oldest per operation (empty:
/// none in flight). No line.
#[derive(Debug)]
pub struct CallsInFlight<'a> {
    pub oldest: &'a [(CallKind, Duration)],
}

/// A NIXL call the recording gives no meaning of its own (a method a
/// front-end hooks only to count it), by method and status: closed
/// values, the method's name in NIXL's API (`queryMem`) from the front-end's
/// table of methods and NIXL's name of the status it returned
/// (`NIXL_SUCCESS`), or [`NixlCalled::THREW`].
#[derive(Debug)]
pub struct NixlCalled {
    pub method: &'static str,
    pub status: &'static str,
}

impl NixlCalled {
    /// The status of a call NIXL threw out of instead of returning.
    pub const THREW: &'static str = "exception";

    pub(super) fn log(&self) {
        tracing::debug!(target: LOG_TARGET, method = self.method, status = self.status, "NIXL call")
    }
}

/// nixl-agent's own wrapping of a foreign call failed; the call itself
/// went ahead untouched. `first` is set for the first failure of this
/// operation (logged; later ones are only counted).
#[derive(Debug)]
pub struct InstrumentationFailed<'a> {
    pub operation: Hooked,
    pub message: &'a str,
    pub first: bool,
}

impl InstrumentationFailed<'_> {
    pub(super) fn log(&self) {
        if self.first {
            tracing::warn!(
                target: INSTRUMENT_LOG_TARGET,
                operation = self.operation.as_str(),
                error = self.message,
                "nixl-agent's wrapping of this NIXL call failed; the call went ahead untouched (counted in nixl_agent_instrumentation_errors_total, logged once)"
            )
        }
    }
}

pub(super) fn lifecycle_died() {
    tracing::error!(target: LOG_TARGET, "the lifecycle thread died: nothing registers or drains; /livez failing")
}
