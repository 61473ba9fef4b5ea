//! The events of groups: a declaration, each registration attempt, a retry,
//! a planned group's deregistration, the lifecycle's progress, a region
//! NIXL accepted that validation rejects, and the drain, each with its log
//! line.

use super::{Said, INSTRUMENT_LOG_TARGET, LOG_TARGET};
use crate::model::{AgentId, Failure, GroupFailure, GroupLabels, GroupState, Kind, Phase, Reason, Region};
use std::time::Duration;

/// Who owns a group's name and decides its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A group of the lifecycle's plan: its state is the state machine's.
    Planned,
    /// A group of calls the serving process makes itself: its state follows
    /// those calls.
    Observed,
}

/// A group as the ledger knows it: handed out when the group is declared
/// (`Applied::group` of its `Event::GroupDeclared`), then carried by every
/// event and in-flight mark about it, so nothing finds a group by its name
/// after its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

impl GroupId {
    /// Its row in the ledger's group table (ids are handed out in order).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A group nixl-agent will report on: from a plan at start, or on first use
/// (or as an expected group) in observe mode.
#[derive(Debug, Clone)]
pub struct GroupDecl {
    pub group: String,
    pub kind: Kind,
    /// The labels, when known at declaration: a planned group's come from
    /// its spec; an observed group's from its first call (`None` until then,
    /// for a group readiness expects before any call).
    pub labels: Option<GroupLabels>,
    pub backends: Vec<String>,
    /// Whether readiness waits for this group.
    pub required: bool,
    pub validate: bool,
    /// Descriptors and bytes the plan asks for (0 for observed groups).
    pub planned: (usize, u64),
    pub source: Source,
}

impl GroupDecl {
    pub(super) fn log(&self, said: &Said) {
        if said.refused {
            tracing::error!(
                target: LOG_TARGET,
                group = %self.group,
                source = ?self.source,
                "a group of this name belongs to another source (the lifecycle's plan or observed calls); not declared again"
            )
        } else if self.source == Source::Observed {
            tracing::info!(target: LOG_TARGET, group = %self.group, kind = %self.kind, "observing a new group")
        }
    }
}

/// What a group holds registered with NIXL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Holding {
    pub descriptors: usize,
    pub bytes: u64,
}

/// What an attempt leaves registered.
#[derive(Debug, Clone, Copy)]
pub enum Leaves {
    /// The lifecycle owns its handles and says what its group holds now.
    Group(Holding),
    /// One observed call: when it succeeded, the ledger holds its regions
    /// on its agent, keyed by the first one, until they are deregistered or
    /// the agent goes away.
    Call { first: Option<Region> },
}

/// One registration attempt (a whole group, or one observed call).
#[derive(Debug)]
pub struct Attempt<'a> {
    /// The group it is recorded against (`None`: a group the recording never
    /// declared, as `check`'s: only its span and log line).
    pub group: Option<GroupId>,
    pub agent: AgentId,
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    /// Descriptors and bytes submitted.
    pub descriptors: usize,
    pub bytes: u64,
    /// Time spent in validation and NIXL; `None` when the attempt failed
    /// before reaching NIXL (backend creation, allocation).
    pub elapsed: Option<Duration>,
    pub outcome: Result<(), &'a GroupFailure>,
    pub leaves: Leaves,
    /// The region the failure blames, when known (for the span event).
    pub blamed: Option<Region>,
}

impl Attempt<'_> {
    pub(super) fn log(&self) {
        let l = self.labels;
        let elapsed_us = self.elapsed.map_or(0, |d| d.as_micros() as u64);
        match self.outcome {
            Ok(()) => tracing::info!(
                target: LOG_TARGET,
                group = %l.group,
                kind = %l.kind,
                mem_type = l.mem_type.as_str(),
                backend = %l.backend,
                attempt = self.attempt,
                descriptors = self.descriptors,
                bytes = self.bytes,
                elapsed_us,
                "group registered"
            ),
            Err(f) => {
                if let (Some(i), Some(r)) = (f.region, self.blamed) {
                    tracing::warn!(
                        target: LOG_TARGET,
                        group = %l.group,
                        "region.index" = i,
                        "region.address" = %format_args!("{:#x}", r.addr),
                        "region.length" = r.len,
                        reason = f.reason.as_str(),
                        diagnostics = %f.diagnostics.join("\n"),
                        "region rejected"
                    );
                }
                tracing::error!(
                    target: LOG_TARGET,
                    group = %l.group,
                    kind = %l.kind,
                    mem_type = l.mem_type.as_str(),
                    backend = %l.backend,
                    attempt = self.attempt,
                    descriptors = self.descriptors,
                    reason = f.reason.as_str(),
                    region = f.region.map(|r| r as i64).unwrap_or(-1),
                    rolled_back = f.rolled_back,
                    error = %f.message,
                    diagnostics = %f.diagnostics.join("\n"),
                    elapsed_us,
                    "group registration failed"
                )
            }
        }
    }
}

/// A group's next attempt is due `after` from now.
#[derive(Debug)]
pub struct RetryScheduled<'a> {
    pub group: Option<GroupId>,
    pub labels: &'a GroupLabels,
    pub attempt: u32,
    pub after: Duration,
}

impl RetryScheduled<'_> {
    pub(super) fn log(&self) {
        tracing::info!(
            target: LOG_TARGET,
            group = %self.labels.group,
            next_attempt = self.attempt + 1,
            after_ms = self.after.as_millis() as u64,
            "retry scheduled"
        )
    }
}

/// A planned group's deregistration (the lifecycle says what is left).
#[derive(Debug)]
pub struct Deregistered<'a> {
    pub group: Option<GroupId>,
    pub labels: &'a GroupLabels,
    pub descriptors: usize,
    pub failed: usize,
    pub failure: Option<&'a Failure>,
    pub elapsed: Duration,
    pub holding: Holding,
}

impl Deregistered<'_> {
    pub(super) fn log(&self) {
        tracing::info!(
            target: LOG_TARGET,
            group = %self.labels.group,
            descriptors = self.descriptors,
            failed = self.failed,
            reason = self.failure.map(|f| f.reason).map(Reason::as_str),
            registered_descriptors = self.holding.descriptors,
            elapsed_us = self.elapsed.as_micros() as u64,
            "group deregistered"
        )
    }
}

/// A group's state in the lifecycle machine.
#[derive(Debug, Clone, Copy)]
pub struct GroupProgress {
    pub group: GroupId,
    pub state: GroupState,
    pub attempts: u32,
    pub consecutive_failures: u32,
}

/// The lifecycle machine moved: its phase and every planned group (no line).
#[derive(Debug)]
pub struct Progress<'a> {
    pub phase: Phase,
    pub groups: &'a [GroupProgress],
}

/// NIXL accepted an observed call whose regions validation rejects
/// (the seed's corrupted pointers that NIXL registers silently).
#[derive(Debug)]
pub struct AcceptedInvalid<'a> {
    pub group: GroupId,
    pub labels: &'a GroupLabels,
    pub reason: Reason,
    pub message: &'a str,
}

impl AcceptedInvalid<'_> {
    pub(super) fn log(&self) {
        let l = self.labels;
        if self.reason == Reason::DuplicateRegions {
            // A crash to come: said where a serving process's default log
            // filter shows it (the instrumentation's target), before it happens.
            tracing::error!(
                target: INSTRUMENT_LOG_TARGET,
                group = %l.group,
                kind = %l.kind,
                reason = self.reason.as_str(),
                finding = self.message,
                "NIXL accepted a registration list that holds the same region twice; deregistering that list will crash this process (SIGSEGV in NIXL): remove the repeated region before register_memory"
            )
        } else {
            tracing::warn!(
                target: LOG_TARGET,
                group = %l.group,
                kind = %l.kind,
                reason = self.reason.as_str(),
                finding = self.message,
                "NIXL accepted a region that validation rejects"
            )
        }
    }
}

pub(super) fn drain_started() {
    tracing::info!(target: LOG_TARGET, "shutdown requested: not ready, deregistering")
}

/// The drain ended: what it released, what failed, what NIXL still holds.
#[derive(Debug)]
pub struct DrainFinished {
    pub deregistered: usize,
    pub failed: usize,
    /// Descriptors NIXL still holds for nixl-agent after the drain.
    pub still_registered: usize,
    pub elapsed: Duration,
}

impl DrainFinished {
    pub(super) fn log(&self) {
        let elapsed_us = self.elapsed.as_micros() as u64;
        if self.still_registered == 0 {
            tracing::info!(
                target: LOG_TARGET,
                deregistered_descriptors = self.deregistered,
                failed = self.failed,
                registered_descriptors = self.still_registered,
                elapsed_us,
                "drain complete"
            )
        } else {
            tracing::error!(
                target: LOG_TARGET,
                deregistered_descriptors = self.deregistered,
                failed = self.failed,
                registered_descriptors = self.still_registered,
                elapsed_us,
                "drain left registrations behind"
            )
        }
    }
}
