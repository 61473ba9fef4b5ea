//! The lifecycle state machine: a fixed set of inputs in, a list of actions
//! out. No I/O, no clocks, no NIXL, no HTTP: the driver performs the actions
//! and feeds their outcomes back as inputs.
//!
//! ```text
//! Starting --Start--> (Preflight) --ok--> Running --Shutdown--> Draining --DrainFinished--> Stopped
//!                                 --err-> Unavailable --Shutdown--> Draining
//! ```

use crate::backoff;
use crate::config::RetryConfig;
use crate::model::Reason;
pub use crate::model::{GroupState, Phase};
use std::time::Duration;

/// Everything that can happen to the lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Start,
    PreflightFinished(Result<(), Reason>),
    AttemptFinished {
        group: usize,
        result: Result<(), Reason>,
    },
    RetryDue {
        group: usize,
    },
    /// Deregister a registered group and register it again (SIGUSR1, or
    /// `AgentHandle::reregister`); a failed group is retried at once.
    ReregisterRequested {
        group: usize,
    },
    ShutdownRequested,
    DrainFinished,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Preflight,
    Register {
        group: usize,
        attempt: u32,
    },
    ScheduleRetry {
        group: usize,
        after: Duration,
    },
    /// Deregister one group (its regions are kept for the next attempt).
    Deregister {
        group: usize,
    },
    Drain,
    Stop,
}

#[derive(Debug, Clone)]
struct MachineGroup {
    /// Read by the machine's own view of readiness, for its unit tests.
    #[cfg_attr(not(test), allow(dead_code))]
    required: bool,
    state: GroupState,
    attempts: u32,
    consecutive_failures: u32,
    last_reason: Option<Reason>,
}

/// The state machine. Readiness is derived, never stored.
#[derive(Debug, Clone)]
pub struct Machine {
    phase: Phase,
    groups: Vec<MachineGroup>,
    retry: RetryConfig,
}

impl Machine {
    /// `required[i]` says whether group `i` gates readiness.
    pub fn new(required: &[bool], retry: RetryConfig) -> Machine {
        let groups = required
            .iter()
            .map(|&required| MachineGroup {
                required,
                state: GroupState::Pending,
                attempts: 0,
                consecutive_failures: 0,
                last_reason: None,
            })
            .collect();
        Machine {
            phase: Phase::Starting,
            groups,
            retry,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn group_state(&self, group: usize) -> GroupState {
        self.groups[group].state
    }

    pub fn attempts(&self, group: usize) -> u32 {
        self.groups[group].attempts
    }

    pub fn consecutive_failures(&self, group: usize) -> u32 {
        self.groups[group].consecutive_failures
    }

    #[cfg(test)]
    pub fn last_reason(&self, group: usize) -> Option<Reason> {
        self.groups[group].last_reason
    }

    /// The machine's own view of readiness, for its unit tests; readiness
    /// itself is derived once, by the ledger (`Status::derive_ready`).
    #[cfg(test)]
    pub fn ready(&self) -> bool {
        self.phase == Phase::Running
            && self
                .groups
                .iter()
                .filter(|g| g.required)
                .all(|g| g.state == GroupState::Registered)
    }

    /// Advances the machine. Inputs that make no sense in the current phase
    /// (a late retry timer during drain, a second shutdown) are ignored.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        match (self.phase, input) {
            (Phase::Starting, Input::Start) => vec![Action::Preflight],
            (Phase::Starting, Input::PreflightFinished(Ok(()))) => {
                self.phase = Phase::Running;
                (0..self.groups.len()).map(|g| self.begin_attempt(g)).collect()
            }
            (Phase::Starting, Input::PreflightFinished(Err(_))) => {
                self.phase = Phase::Unavailable;
                vec![]
            }
            (Phase::Running, Input::AttemptFinished { group, result }) => {
                let max_attempts = self.retry.max_attempts;
                let g = &mut self.groups[group];
                if g.state != GroupState::Registering {
                    return vec![];
                }
                match result {
                    Ok(()) => {
                        g.state = GroupState::Registered;
                        g.consecutive_failures = 0;
                        vec![]
                    }
                    Err(reason) => {
                        g.consecutive_failures = g.consecutive_failures.saturating_add(1);
                        g.last_reason = Some(reason);
                        // A budget per episode of failures: a re-registration or a
                        // success starts a new one, so a lifetime of SIGUSR1s
                        // does not use it up.
                        if max_attempts != 0 && g.consecutive_failures >= max_attempts {
                            g.state = GroupState::GaveUp;
                            vec![]
                        } else {
                            g.state = GroupState::Failed;
                            let after = backoff::delay(
                                self.retry.initial_backoff,
                                self.retry.max_backoff,
                                g.consecutive_failures,
                            );
                            vec![Action::ScheduleRetry { group, after }]
                        }
                    }
                }
            }
            (Phase::Running, Input::RetryDue { group }) if self.groups[group].state == GroupState::Failed => {
                vec![self.begin_attempt(group)]
            }
            (Phase::Starting | Phase::Running | Phase::Unavailable, Input::ShutdownRequested) => {
                self.phase = Phase::Draining;
                vec![Action::Drain]
            }
            (Phase::Draining, Input::DrainFinished) => {
                self.phase = Phase::Stopped;
                for g in &mut self.groups {
                    if g.state == GroupState::Registered {
                        g.state = GroupState::Deregistered;
                    }
                }
                vec![Action::Stop]
            }
            (Phase::Running, Input::ReregisterRequested { group }) => match self.groups[group].state {
                GroupState::Registered => vec![Action::Deregister { group }, self.begin_attempt(group)],
                GroupState::Failed | GroupState::GaveUp => {
                    self.groups[group].consecutive_failures = 0;
                    vec![self.begin_attempt(group)]
                }
                _ => vec![],
            },
            _ => vec![],
        }
    }

    fn begin_attempt(&mut self, group: usize) -> Action {
        let g = &mut self.groups[group];
        g.state = GroupState::Registering;
        g.attempts = g.attempts.saturating_add(1);
        Action::Register {
            group,
            attempt: g.attempts,
        }
    }
}

#[cfg(test)]
mod tests;
