//! The ledger's group table — one row per declared group, keyed by the
//! [`GroupId`] handed out at declaration, holding its typed labels, counts
//! and state — and the registration family of events applied to it:
//! declarations, attempts, retries, deregistrations (planned and observed),
//! the lifecycle's progress and calls NIXL accepted against validation.

use super::counts::{self, GroupCounts};
use super::live::{Live, LiveKey};
use super::{Applied, State};
use crate::event::{Attempt, Event, GroupDecl, GroupId, GroupProgress, Holding, Leaves, Source};
use crate::model::{Failure, GroupLabels, GroupState, Kind, MemType, Phase, Reason, Region};
use crate::status::observed_state;
use std::collections::HashMap;
use std::time::Duration;

/// The labels every series of a group carries beside its name and kind:
/// fixed by its first call (a planned group's by its spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    pub mem_type: MemType,
    pub device: u32,
    /// The group's backends joined with `+`.
    pub backend: String,
}

/// One group's row.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub kind: Kind,
    /// `None` for a group expected before its first call.
    pub fixed: Option<Fixed>,
    pub backends: Vec<String>,
    pub required: bool,
    pub validate: bool,
    pub source: Source,
    /// Descriptors and bytes the plan asks for.
    pub planned: (usize, u64),
    pub state: GroupState,
    /// What it holds registered now.
    pub holding: Holding,
    pub attempts: u32,
    pub consecutive_failures: u32,
    pub last_reason: Option<Reason>,
    pub last_error: Option<String>,
    pub last_diagnostics: Vec<String>,
    pub failed_region: Option<usize>,
    pub differing_calls: u64,
    pub last_differing_call: Option<String>,
    pub last_accepted_invalid: Option<String>,
    pub next_retry: Option<Duration>,
    /// What the metric counters and histograms show.
    pub counts: GroupCounts,
    last_ok: Option<bool>,
    live_calls: usize,
    /// What `last_reason`/`last_error` said before a call past its deadline
    /// overwrote them: an attempt that then succeeds puts them back, so a
    /// `timeout` never outlives the call it was about.
    before_stuck: Option<(Option<Reason>, Option<String>)>,
}

/// Every declared group, in declaration order; a [`GroupId`] is its row.
#[derive(Debug, Default)]
pub struct Groups {
    rows: Vec<Group>,
    /// Asked only when a group is declared (and by a front-end meeting a
    /// name for the first time), never when an event is applied.
    by_name: HashMap<String, GroupId>,
}

impl Groups {
    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.rows.iter()
    }

    pub fn get(&self, id: GroupId) -> Option<&Group> {
        self.rows.get(id.index())
    }

    pub(super) fn get_mut(&mut self, id: GroupId) -> Option<&mut Group> {
        self.rows.get_mut(id.index())
    }

    /// The group declared under `name`, if any.
    pub fn find(&self, name: &str) -> Option<GroupId> {
        self.by_name.get(name).copied()
    }

    /// Any group registered now.
    pub fn anything_registered(&self) -> bool {
        self.rows.iter().any(|g| g.state == GroupState::Registered)
    }

    /// Every required group registered.
    pub fn required_registered(&self) -> bool {
        self.rows
            .iter()
            .filter(|g| g.required)
            .all(|g| g.state == GroupState::Registered)
    }
}

impl Group {
    fn new(d: &GroupDecl) -> Group {
        Group {
            name: d.group.clone(),
            kind: d.kind.clone(),
            fixed: d.labels.as_ref().map(fixed),
            backends: d.backends.clone(),
            required: d.required,
            validate: d.validate,
            source: d.source,
            planned: d.planned,
            state: GroupState::Pending,
            holding: Holding::default(),
            attempts: 0,
            consecutive_failures: 0,
            last_reason: None,
            last_error: None,
            last_diagnostics: Vec::new(),
            failed_region: None,
            differing_calls: 0,
            last_differing_call: None,
            last_accepted_invalid: None,
            next_retry: None,
            counts: GroupCounts::default(),
            last_ok: None,
            live_calls: 0,
            before_stuck: None,
        }
    }

    /// The first call of a group fixes its labels; a later call that
    /// differs is recorded as such, and counted under the fixed labels.
    fn fix_labels(&mut self, call: &GroupLabels) {
        match &self.fixed {
            None => self.fixed = Some(fixed(call)),
            Some(l) => {
                if l.mem_type != call.mem_type || l.device != call.device || l.backend != call.backend {
                    self.differing_calls = self.differing_calls.saturating_add(1);
                    self.last_differing_call = Some(format!(
                        "mem_type {} device {} backend {} (the group's labels: mem_type {} device {} backend {})",
                        call.mem_type, call.device, call.backend, l.mem_type, l.device, l.backend
                    ));
                }
            }
        }
    }

    /// An observed group is as good as its last call (`observed_state`).
    fn derive_observed(&mut self) {
        if self.source == Source::Observed {
            self.state = observed_state(self.last_ok, self.live_calls);
        }
    }

    fn count_deregistration(&mut self, failure: Option<&Failure>) {
        self.counts.deregistrations += 1;
        if let Some(f) = failure {
            counts::count_reason(&mut self.counts.deregistration_failures, f.reason, 0.0);
        }
    }

    /// A call past its deadline is why the group is not ready while it
    /// runs; the attempt counts when it ends, with its own reason.
    pub(super) fn stuck(&mut self, message: String) {
        let saved = (self.last_reason, self.last_error.clone());
        self.before_stuck.get_or_insert(saved);
        self.last_reason = Some(Reason::Timeout);
        self.last_error = Some(message);
    }
}

fn fixed(l: &GroupLabels) -> Fixed {
    Fixed {
        mem_type: l.mem_type,
        device: l.device,
        backend: l.backend.clone(),
    }
}

impl State {
    /// A group a plan or observed calls name. Its backends are not recorded
    /// here: a backend is up because an agent created it and down because a
    /// creation failed, never because a setting named it.
    pub(super) fn declare(&mut self, d: &GroupDecl) -> Applied {
        let mut out = Applied::default();
        if let Some(id) = self.groups.find(&d.group) {
            out.group = Some(id);
            out.refused = self.groups.get(id).is_some_and(|g| g.source != d.source);
            return out;
        }
        let id = GroupId(self.groups.rows.len() as u32);
        self.groups.rows.push(Group::new(d));
        self.groups.by_name.insert(d.group.clone(), id);
        out.group = Some(id);
        out
    }

    /// The registration family: `None` when `e` is of another.
    pub(super) fn apply_group(&mut self, e: &Event<'_>) -> Option<Applied> {
        let mut out = Applied::default();
        match e {
            Event::GroupDeclared(d) => return Some(self.declare(d)),
            Event::Attempted(a) => self.attempted(a, &mut out),
            Event::RetryScheduled(crate::event::RetryScheduled { group, after, .. }) => {
                if let Some(g) = group.and_then(|id| self.groups.get_mut(id)) {
                    g.next_retry = Some(*after);
                    out.group = *group;
                }
            }
            Event::Deregistered(crate::event::Deregistered {
                group,
                holding,
                failure,
                ..
            }) => {
                if let Some(g) = group.and_then(|id| self.groups.get_mut(id)) {
                    out.group = *group;
                    g.count_deregistration(*failure);
                    g.holding = *holding;
                }
            }
            Event::CallDeregistered(crate::event::CallDeregistered {
                agent,
                first,
                descriptors,
                failure,
                ..
            }) => {
                let key = LiveKey {
                    agent: *agent,
                    first: *first,
                    descriptors: *descriptors,
                };
                // A failed deregistration leaves the registration in place;
                // one NIXL refused of a list matching no registration exactly
                // (a part of one, or more than one) still counts, against the
                // group its first region is registered in.
                let found = if failure.is_none() {
                    self.live.take(&key)
                } else {
                    self.live.find(&key).or_else(|| self.live.find_first(*agent, *first))
                };
                let Some(live) = found else {
                    out.unmatched = true;
                    return Some(out);
                };
                out.group = Some(live.group);
                if let Some(g) = self.groups.get_mut(live.group) {
                    g.count_deregistration(*failure);
                }
                if failure.is_none() {
                    self.unhold(live);
                }
            }
            Event::Progress(crate::event::Progress { phase, groups }) => self.progress(*phase, groups),
            Event::AcceptedInvalid(crate::event::AcceptedInvalid {
                group, reason, message, ..
            }) => {
                if let Some(g) = self.groups.get_mut(*group) {
                    out.group = Some(*group);
                    g.last_accepted_invalid = Some(format!("{reason}: {message}"));
                    counts::count_reason(&mut g.counts.accepted_invalid, *reason, 0.0);
                }
            }
            _ => return None,
        }
        Some(out)
    }

    fn attempted(&mut self, a: &Attempt<'_>, out: &mut Applied) {
        let Some(id) = a.group else { return };
        let bounds = self.bounds;
        let Some(g) = self.groups.get_mut(id) else { return };
        out.group = Some(id);
        g.fix_labels(a.labels);
        let c = &mut g.counts;
        c.attempts += 1;
        c.descriptors.observe(bounds.descriptors, a.descriptors as f64);
        // An attempt that never reached NIXL has no duration.
        if let Some(d) = a.elapsed {
            c.duration.observe(bounds.duration, d.as_secs_f64());
        }
        if let Err(f) = a.outcome {
            counts::count_reason(&mut c.failures, f.reason, counts::unix_now());
        }
        let before_stuck = g.before_stuck.take();
        match a.outcome {
            Ok(()) => {
                g.failed_region = None;
                if let Some((reason, error)) = before_stuck {
                    (g.last_reason, g.last_error) = (reason, error);
                }
            }
            Err(f) => {
                g.last_reason = Some(f.reason);
                g.last_error = Some(f.message.clone());
                g.last_diagnostics = f.diagnostics.clone();
                g.failed_region = f.region;
            }
        }
        match a.leaves {
            Leaves::Group(h) => g.holding = h,
            Leaves::Call { first } => {
                g.attempts = g.attempts.saturating_add(1);
                if a.outcome.is_ok() {
                    g.consecutive_failures = 0;
                } else {
                    g.consecutive_failures = g.consecutive_failures.saturating_add(1);
                }
                g.last_ok = Some(a.outcome.is_ok());
                if a.outcome.is_ok() {
                    let key = LiveKey {
                        agent: a.agent,
                        first: first.unwrap_or(Region::new(0, 0, 0)),
                        descriptors: a.descriptors,
                    };
                    self.hold(id, key, a.bytes);
                }
                if let Some(g) = self.groups.get_mut(id) {
                    g.derive_observed();
                }
            }
        }
    }

    /// The lifecycle machine moved: its phase (a drain is never undone but
    /// by stopping) and every planned group's state.
    fn progress(&mut self, phase: Phase, groups: &[GroupProgress]) {
        let p = &mut self.process;
        if !matches!(p.phase, Phase::Draining | Phase::Stopped) || phase == Phase::Stopped {
            p.phase = phase;
        }
        for p in groups {
            let Some(g) = self.groups.get_mut(p.group) else {
                continue;
            };
            if g.source != Source::Planned {
                continue;
            }
            g.state = p.state;
            g.attempts = p.attempts;
            g.consecutive_failures = p.consecutive_failures;
            if g.state != GroupState::Failed {
                g.next_retry = None;
            }
        }
    }

    fn hold(&mut self, group: GroupId, key: LiveKey, bytes: u64) {
        self.live.push(Live { key, group, bytes });
        if let Some(g) = self.groups.get_mut(group) {
            g.live_calls += 1;
            g.holding.descriptors = g.holding.descriptors.saturating_add(key.descriptors);
            g.holding.bytes = g.holding.bytes.saturating_add(bytes);
        }
        self.agents.hold(key.agent, key.descriptors, bytes);
    }

    /// Accounts for one registration taken out of the live table.
    pub(super) fn unhold(&mut self, live: Live) {
        let (key, bytes) = (live.key, live.bytes);
        if let Some(g) = self.groups.get_mut(live.group) {
            g.live_calls = g.live_calls.saturating_sub(1);
            g.holding.descriptors = g.holding.descriptors.saturating_sub(key.descriptors);
            g.holding.bytes = g.holding.bytes.saturating_sub(bytes);
            g.derive_observed();
        }
        self.agents.unhold(key.agent, key.descriptors, bytes);
    }
}
