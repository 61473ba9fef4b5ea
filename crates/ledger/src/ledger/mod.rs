//! The ledger: the one owner of recorded state. Every event of the
//! lifecycle, observe mode and `check` is applied here, under one lock, in
//! order; what it derives (a group's state, what each NIXL agent holds,
//! readiness) is derived once, here, and every projection — the metric
//! gauges, /v1/status, /readyz, /livez, rank files, the pod view — reads
//! that one derivation. tokio-console's aggregator is the model: it owns
//! the task state and hands out updates.
//!
//! Architecture Invariant: the ledger imports only the event vocabulary,
//! the snapshot's shape (`status`) and `model`. It keeps the counts the
//! metric counters and histograms show (`counts`) beside the state the
//! gauges show; the registry renders both from here at scrape time, under
//! this lock ([`Ledger::read`]), so no metric can be read from another
//! moment than /v1/status. The closure [`Ledger::apply`] runs inside the
//! write only tells the registry a new generation exists.
//!
//! Architecture Invariant: holdings are keyed by (NIXL agent, first region,
//! descriptor count) in a flat table in registration order (`live`): a
//! deregistration finds the registration made on the same agent, and an
//! agent that goes away releases exactly its own.

pub mod counts;
mod live;
#[cfg(test)]
mod tests;
pub mod xfer_state;

pub use counts::{Bounds, GroupCounts, Histogram, ProcessCounts};
use live::{Live, LiveKey, LiveTable};
pub use xfer_state::{TracedXfer, Transfers, TransportWanted};

use crate::event::{Event, GroupDecl, Leaves, Source};
use crate::model::{AgentId, Failure, GroupLabels, GroupState, Phase, Reason, Region};
use crate::status::{observed_state, AgentStatus, BackendStatus, GroupStatus, Status, Stuck};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Released agents kept in /v1/status (the live ones are all listed).
pub const RELEASED_AGENTS_KEPT: usize = 8;

/// What the ledger keeps about a group beside its status.
#[derive(Debug, Clone)]
pub struct GroupMeta {
    /// The labels every series of the group carries: fixed by the group's
    /// first call (a planned group's by its spec).
    pub labels: Option<Arc<GroupLabels>>,
    /// The placeholder labels (group and kind only) of a group expected
    /// before its first call.
    pub placeholder: Arc<GroupLabels>,
    last_ok: Option<bool>,
    live_calls: usize,
    /// What `last_reason`/`last_error` said before a call past its deadline
    /// overwrote them: an attempt that then succeeds puts them back, so a
    /// `timeout` never outlives the call it was about.
    before_stuck: Option<(Option<Reason>, Option<String>)>,
}

/// The state the ledger owns. Projections read it inside the write
/// ([`Ledger::apply`]'s closure) or as a [`Status`] snapshot.
pub struct State {
    pub status: Status,
    /// Parallel to `status.groups`.
    pub meta: Vec<GroupMeta>,
    /// Parallel to `status.groups`: what the metric counters show.
    pub counts: Vec<GroupCounts>,
    pub process: ProcessCounts,
    pub bounds: Bounds,
    /// The data path: requests, flights, peers, notifications.
    pub transfers: Transfers,
    live: LiveTable,
    draining: bool,
}

impl State {
    /// The labels group `i`'s series carry now (placeholders until the
    /// first call fixes them).
    pub fn labels(&self, i: usize) -> &Arc<GroupLabels> {
        let m = &self.meta[i];
        m.labels.as_ref().unwrap_or(&m.placeholder)
    }

    pub fn group_index(&self, name: &str) -> Option<usize> {
        self.status.groups.iter().position(|g| g.name == name)
    }
}

/// What applying one event changed, for the projections.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The group the event was about, once resolved.
    pub group: Option<usize>,
    /// Readiness flipped: to this value.
    pub ready: Option<bool>,
    /// Set the first time readiness is reached.
    pub time_to_ready: Option<Duration>,
    /// A declaration refused: its name belongs to a group of another source.
    pub refused: bool,
    /// A deregistration of something the ledger never saw registered.
    pub unmatched: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The generation of the last write (a plain store in the write), so a
    /// reader can tell whether the cached snapshot is current without the
    /// state's lock.
    generation: AtomicU64,
    /// The generation of the last write, for waiters.
    changed: watch::Sender<u64>,
    /// The last snapshot built: probes read it concurrently.
    cache: RwLock<Option<Arc<Status>>>,
    started: Instant,
}

/// The owner of recorded state. Cheap to clone; every clone is the same
/// ledger.
#[derive(Clone)]
pub struct Ledger(Arc<Shared>);

impl Ledger {
    /// A ledger starting from `initial`; `started` is what
    /// `time_to_ready_seconds` counts from.
    pub fn new(initial: Status, started: Instant, bounds: Bounds) -> Ledger {
        Ledger(Arc::new(Shared {
            state: Mutex::new(State {
                status: initial,
                meta: Vec::new(),
                counts: Vec::new(),
                process: ProcessCounts::default(),
                bounds,
                transfers: Transfers::new(bounds.transfer_duration),
                live: LiveTable::default(),
                draining: false,
            }),
            generation: AtomicU64::new(0),
            changed: watch::Sender::new(0),
            cache: RwLock::new(None),
            started,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one event, derives what it changes, and runs `project` with
    /// the state after it — all inside one write.
    #[cfg(any(test, feature = "testing"))]
    pub fn apply(&self, e: &Event<'_>, project: impl FnOnce(&Event<'_>, &State, &Applied)) -> Applied {
        self.apply_traced(e, project).0
    }

    /// Applies one event, derives what it changes, and runs `project` with
    /// the state after it — all inside one write — and hands back the transfers the event ended
    /// (or found stalled) that are to be traced.
    pub fn apply_traced(
        &self,
        e: &Event<'_>,
        project: impl FnOnce(&Event<'_>, &State, &Applied),
    ) -> (Applied, Vec<TracedXfer>) {
        let mut st = self.lock();
        let mut applied = st.apply(e);
        self.derive_ready(&mut st, &mut applied);
        st.status.generation += 1;
        project(e, &st, &applied);
        self.notify(st.status.generation);
        let traced = if st.transfers.traced.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut st.transfers.traced)
        };
        (applied, traced)
    }

    /// Transfers in flight now (the watchdog's question: is there anything
    /// to look at?).
    pub fn transfers_in_flight(&self) -> usize {
        self.lock().transfers.in_flight()
    }

    /// What to look for to learn the transports of `handle`'s peer, when
    /// nobody looked yet (`NIXL_AGENT_TRANSPORTS=1`).
    pub fn transport_wanted(&self, handle: u64) -> Option<TransportWanted> {
        self.lock().transfers.transport_wanted(handle)
    }

    /// Publishes the new generation and wakes waiters, if any (waking none
    /// costs a lock per notifier).
    fn notify(&self, generation: u64) {
        self.0.generation.store(generation, Ordering::Release);
        if self.0.changed.receiver_count() > 0 {
            self.0.changed.send_replace(generation);
        }
    }

    /// Shutdown began: not ready from now on, whatever is applied later.
    pub fn begin_drain(&self, project: impl FnOnce(&State, &Applied)) -> Applied {
        let mut st = self.lock();
        st.draining = true;
        if !matches!(st.status.phase, Phase::Stopped) {
            st.status.phase = Phase::Draining;
        }
        let mut applied = Applied::default();
        self.derive_ready(&mut st, &mut applied);
        st.status.generation += 1;
        project(&st, &applied);
        self.notify(st.status.generation);
        applied
    }

    fn derive_ready(&self, st: &mut State, applied: &mut Applied) {
        let ready = !st.draining && st.status.derive_ready();
        if ready == st.status.ready {
            return;
        }
        st.status.ready = ready;
        applied.ready = Some(ready);
        if ready && st.status.time_to_ready_seconds.is_none() {
            let t = self.0.started.elapsed();
            st.status.time_to_ready_seconds = Some(t.as_secs_f64());
            applied.time_to_ready = Some(t);
        }
    }

    /// Reads the state under the ledger's lock (short: no I/O in `f`).
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock())
    }

    /// An immutable snapshot of the state: built once per generation and
    /// shared by every reader until the next event.
    /// The probes' path takes no lock of the state's while nothing changed.
    pub fn snapshot(&self) -> Arc<Status> {
        let current = self.0.generation.load(Ordering::Acquire);
        {
            let cache = self.0.cache.read().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = cache.as_ref().filter(|s| s.generation == current) {
                return s.clone();
            }
        }
        let st = self.lock();
        let s = Arc::new(st.status.clone());
        *self.0.cache.write().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
        s
    }

    /// Tells of every write (its generation); for waiters.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Waits until `pred` holds for a snapshot or `timeout` passes.
    pub async fn wait_for(&self, timeout: Duration, pred: impl Fn(&Status) -> bool) -> bool {
        let mut rx = self.subscribe();
        let wait = async {
            loop {
                if pred(&self.snapshot()) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// Who owns the group name `name`, if anyone.
    pub fn source_of(&self, name: &str) -> Option<Source> {
        let st = self.lock();
        st.group_index(name).map(|i| st.status.groups[i].source)
    }
}

impl State {
    fn apply(&mut self, e: &Event<'_>) -> Applied {
        let mut out = Applied::default();
        let s = &mut self.status;
        match e {
            Event::GroupDeclared(d) => return self.declare(d),
            Event::MemlockObserved { soft_limit, exempt } => {
                s.memlock_limit_bytes = *soft_limit;
                self.process.memlock_exempt = *exempt;
            }
            Event::NixlLoaded(f) => {
                s.nixl.available = true;
                s.nixl.reason = None;
                s.nixl.error = None;
                s.nixl.plugins = f.plugins.clone();
                s.nixl.agent = Some(f.agent.clone());
                s.nixl.agent_owner = Some(owner(f.owned));
            }
            Event::NixlUnavailable(f) => {
                s.nixl.available = false;
                s.nixl.reason = Some(f.reason);
                s.nixl.error = Some(f.message.clone());
            }
            Event::AgentSeen { agent, name, owned } => {
                self.transfers.observing |= !*owned;
                if !s.agents.iter().any(|a| a.id == *agent) {
                    s.agents.push(AgentStatus {
                        id: *agent,
                        name: name.to_string(),
                        owner: owner(*owned),
                        descriptors: 0,
                        bytes: 0,
                        released: false,
                    });
                }
            }
            Event::AgentReleased { agent } => {
                self.release_agent(*agent);
                self.transfers
                    .agent_released(&mut self.status.transfers, *agent, Instant::now());
                self.sync_transfers(None);
            }
            Event::XferCreated(r) => self.transfers.created(r, Instant::now()),
            Event::XferCreateFailed {
                agent,
                op,
                peer,
                failure,
                prepared,
            } => {
                self.transfers.create_failed(
                    &mut self.status.transfers,
                    *agent,
                    *op,
                    peer,
                    failure,
                    *prepared,
                    Instant::now(),
                );
                self.sync_transfers(None);
            }
            Event::XferPosted {
                handle,
                at,
                ended,
                sampled,
            } => {
                out.unmatched = !self
                    .transfers
                    .posted(&mut self.status.transfers, *handle, *at, *ended, *sampled);
                self.sync_transfers(None);
            }
            Event::XferEnded {
                handle,
                at,
                end,
                measured,
                sampled,
            } => {
                out.unmatched = !self.transfers.ended(
                    &mut self.status.transfers,
                    *handle,
                    *at,
                    *end,
                    *measured,
                    *sampled,
                    "status",
                );
                self.sync_transfers(None);
            }
            Event::XferReleased { handle, at } => {
                self.transfers.released(&mut self.status.transfers, *handle, *at);
                self.sync_transfers(None);
            }
            Event::XferTick { at, stall_after } => {
                self.transfers.tick(*at, *stall_after);
                self.sync_transfers(Some(*stall_after));
            }
            Event::Peer {
                agent,
                op,
                peer,
                failure,
            } => {
                self.transfers
                    .peer(&mut self.status.transfers, *agent, *op, peer, *failure);
                self.sync_transfers(None);
            }
            Event::Notified {
                agent,
                direction,
                messages,
                failure,
                peer,
                heartbeats,
            } => {
                self.transfers.notified(
                    &mut self.status.transfers,
                    *agent,
                    *direction,
                    peer,
                    *messages,
                    *heartbeats,
                    *failure,
                );
                self.sync_transfers(None);
            }
            Event::XferTransport {
                agent,
                peer,
                op,
                transport,
            } => {
                self.transfers
                    .transport(&mut self.status.transfers, *agent, peer, *op, *transport);
            }
            Event::BackendCreated { backend, .. } => self.backend(backend, true, None),
            Event::BackendFailed { backend, failure } => self.backend(backend, false, Some(failure)),
            Event::Attempted(a) => {
                let Some(i) = self.group_index(&a.labels.group) else {
                    return out;
                };
                out.group = Some(i);
                self.fix_labels(i, a.labels);
                let bounds = self.bounds;
                let c = &mut self.counts[i];
                c.attempts += 1;
                c.descriptors.observe(bounds.descriptors, a.descriptors as f64);
                // An attempt that never reached NIXL has no duration.
                if let Some(d) = a.elapsed {
                    c.duration.observe(bounds.duration, d.as_secs_f64());
                }
                if let Err(f) = a.outcome {
                    counts::count_reason(&mut c.failures, f.reason, counts::unix_now());
                }
                let g = &mut self.status.groups[i];
                let before_stuck = self.meta[i].before_stuck.take();
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
                    Leaves::Group(h) => {
                        g.descriptors = h.descriptors;
                        g.bytes = h.bytes;
                    }
                    Leaves::Call { first } => {
                        g.attempts = g.attempts.saturating_add(1);
                        if a.outcome.is_ok() {
                            g.consecutive_failures = 0;
                        } else {
                            g.consecutive_failures = g.consecutive_failures.saturating_add(1);
                        }
                        self.meta[i].last_ok = Some(a.outcome.is_ok());
                        if a.outcome.is_ok() {
                            let key = LiveKey {
                                agent: a.agent,
                                first: first.unwrap_or(Region::new(0, 0, 0)),
                                descriptors: a.descriptors,
                            };
                            self.hold(i, key, a.bytes);
                        }
                        self.derive_observed(i);
                    }
                }
            }
            Event::RetryScheduled { labels, after, .. } => {
                if let Some(i) = self.group_index(&labels.group) {
                    out.group = Some(i);
                    self.status.groups[i].next_retry_seconds = Some(after.as_secs_f64());
                }
            }
            Event::Deregistered {
                labels,
                holding,
                failure,
                ..
            } => {
                let Some(i) = self.group_index(&labels.group) else {
                    return out;
                };
                out.group = Some(i);
                self.count_deregistration(i, *failure);
                let g = &mut self.status.groups[i];
                g.descriptors = holding.descriptors;
                g.bytes = holding.bytes;
            }
            Event::CallDeregistered {
                agent,
                first,
                descriptors,
                failure,
                ..
            } => {
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
                    return out;
                };
                out.group = Some(live.group);
                self.count_deregistration(live.group, *failure);
                if failure.is_none() {
                    self.unhold(live);
                    self.derive_observed(live.group);
                }
            }
            Event::Progress { phase, groups } => {
                if !matches!(s.phase, Phase::Draining | Phase::Stopped) || *phase == Phase::Stopped {
                    s.phase = *phase;
                }
                for p in groups.iter() {
                    let Some(g) = s.groups.iter_mut().find(|g| g.name == p.group) else {
                        continue;
                    };
                    if g.source != Source::Planned {
                        continue;
                    }
                    g.state = p.state;
                    g.attempts = p.attempts;
                    g.consecutive_failures = p.consecutive_failures;
                    if g.state != GroupState::Failed {
                        g.next_retry_seconds = None;
                    }
                }
            }
            Event::ProbeTransfer(r) => s.probe.get_or_insert_with(Default::default).apply(
                r.failure.as_ref(),
                r.bytes_per_second,
                r.elapsed.as_secs_f64(),
                counts::unix_now(),
            ),
            Event::CanaryStarted { interval } => {
                s.probe.get_or_insert_with(Default::default).interval_seconds = interval.as_secs_f64();
            }
            Event::DrainStarted => {
                if s.phase != Phase::Stopped {
                    s.phase = Phase::Draining;
                }
            }
            Event::Stuck {
                call,
                operation,
                group,
                elapsed,
            } => {
                if !s.stuck.iter().any(|x| x.call == *call) {
                    s.stuck.push(Stuck {
                        call: *call,
                        operation: operation.as_str().to_string(),
                        group: group.map(str::to_string),
                        seconds: elapsed.as_secs_f64(),
                    });
                }
                if let Some(i) = group.and_then(|g| self.group_index(g)) {
                    out.group = Some(i);
                    // The reason the group is not ready while the call runs;
                    // the attempt counts when it ends, with its own reason.
                    if *operation == crate::event::CallKind::Register {
                        let g = &mut self.status.groups[i];
                        let saved = (g.last_reason, g.last_error.clone());
                        self.meta[i].before_stuck.get_or_insert(saved);
                        g.last_reason = Some(Reason::Timeout);
                        g.last_error = Some(format!(
                            "NIXL {} call past its deadline after {elapsed:?}",
                            operation.as_str()
                        ));
                    }
                }
            }
            // Only its own call's episode ends.
            Event::Unstuck { call, .. } => s.stuck.retain(|x| x.call != *call),
            Event::CallsInFlight { oldest } => {
                s.in_flight = oldest
                    .iter()
                    .map(|(op, d)| crate::status::InFlightCall {
                        operation: op.as_str(),
                        seconds: d.as_secs_f64(),
                    })
                    .collect();
            }
            Event::LifecycleDied => s.lifecycle_dead = true,
            Event::PodDirectory { dir, rank, refused } => {
                s.pod = Some(crate::status::PodStatus {
                    dir: dir.to_string(),
                    rank: *rank,
                    refused: refused.map(|(r, _)| r),
                    detail: refused.map(|(_, d)| d.to_string()),
                });
            }
            Event::AwaitRegistration => s.awaits_registration = true,
            Event::AcceptedInvalid {
                labels,
                reason,
                message,
            } => {
                if let Some(i) = self.group_index(&labels.group) {
                    out.group = Some(i);
                    self.status.groups[i].last_accepted_invalid = Some(format!("{reason}: {message}"));
                    counts::count_reason(&mut self.counts[i].accepted_invalid, *reason, 0.0);
                }
            }
            Event::InstrumentationFailed { operation, .. } => {
                let list = &mut self.process.instrumentation_errors;
                match list.iter_mut().find(|(o, _)| o == operation) {
                    Some((_, n)) => *n += 1,
                    None => list.push((*operation, 1)),
                }
            }
            Event::DrainFinished { .. } => {}
        }
        out
    }

    /// A group a plan or observed calls name. Its backends are not recorded
    /// here: a backend is up because an agent created it and down because a
    /// creation failed (`backend`), never because a setting named it.
    fn declare(&mut self, d: &GroupDecl) -> Applied {
        let mut out = Applied::default();
        if let Some(i) = self.group_index(&d.group) {
            out.group = Some(i);
            out.refused = self.status.groups[i].source != d.source;
            return out;
        }
        let labels = d.labels.clone().map(Arc::new);
        let placeholder = Arc::new(GroupLabels {
            group: d.group.clone(),
            kind: d.kind.clone(),
            mem_type: "",
            backend: String::new(),
            device: String::new(),
        });
        self.status.groups.push(GroupStatus {
            name: d.group.clone(),
            kind: d.kind.clone(),
            mem_type: labels.as_ref().map(|l| l.mem_type),
            device: labels.as_ref().map(|l| l.device.clone()),
            backend: labels.as_ref().map(|l| l.backend.clone()),
            backends: d.backends.clone(),
            required: d.required,
            validate: d.validate,
            source: d.source,
            differing_calls: 0,
            last_differing_call: None,
            state: GroupState::Pending,
            descriptors: 0,
            bytes: 0,
            planned_descriptors: d.planned.0,
            planned_bytes: d.planned.1,
            attempts: 0,
            consecutive_failures: 0,
            last_reason: None,
            last_error: None,
            last_diagnostics: Vec::new(),
            failed_region: None,
            last_accepted_invalid: None,
            next_retry_seconds: None,
        });
        self.counts.push(GroupCounts::default());
        self.meta.push(GroupMeta {
            labels,
            placeholder,
            last_ok: None,
            live_calls: 0,
            before_stuck: None,
        });
        out.group = Some(self.meta.len() - 1);
        out
    }

    /// The first call of a group fixes its labels; a later call that
    /// differs is recorded as such, and counted under the fixed labels.
    fn fix_labels(&mut self, i: usize, call: &GroupLabels) {
        let m = &mut self.meta[i];
        let g = &mut self.status.groups[i];
        match &m.labels {
            None => {
                g.mem_type = Some(call.mem_type);
                g.device = Some(call.device.clone());
                g.backend = Some(call.backend.clone());
                m.labels = Some(Arc::new(call.clone()));
            }
            Some(l) => {
                if l.mem_type != call.mem_type || l.device != call.device || l.backend != call.backend {
                    g.differing_calls = g.differing_calls.saturating_add(1);
                    g.last_differing_call = Some(format!(
                        "mem_type {} device {} backend {} (the group's labels: mem_type {} device {} backend {})",
                        call.mem_type, call.device, call.backend, l.mem_type, l.device, l.backend
                    ));
                }
            }
        }
    }

    fn hold(&mut self, group: usize, key: LiveKey, bytes: u64) {
        self.live.push(Live { key, group, bytes });
        self.meta[group].live_calls += 1;
        let g = &mut self.status.groups[group];
        g.descriptors = g.descriptors.saturating_add(key.descriptors);
        g.bytes = g.bytes.saturating_add(bytes);
        if let Some(a) = self.status.agents.iter_mut().find(|a| a.id == key.agent) {
            a.descriptors = a.descriptors.saturating_add(key.descriptors);
            a.bytes = a.bytes.saturating_add(bytes);
        }
    }

    /// Accounts for one registration taken out of the live table.
    fn unhold(&mut self, live: Live) {
        let (key, bytes) = (live.key, live.bytes);
        let m = &mut self.meta[live.group];
        m.live_calls = m.live_calls.saturating_sub(1);
        let g = &mut self.status.groups[live.group];
        g.descriptors = g.descriptors.saturating_sub(key.descriptors);
        g.bytes = g.bytes.saturating_sub(bytes);
        if let Some(a) = self.status.agents.iter_mut().find(|a| a.id == key.agent) {
            a.descriptors = a.descriptors.saturating_sub(key.descriptors);
            a.bytes = a.bytes.saturating_sub(bytes);
        }
    }

    fn sync_transfers(&mut self, stall_after: Option<Duration>) {
        self.transfers.sync(&mut self.status.transfers, stall_after);
    }

    fn release_agent(&mut self, agent: AgentId) {
        let mut touched: Vec<usize> = Vec::new();
        for l in self.live.take_agent(agent) {
            self.unhold(l);
            if !touched.contains(&l.group) {
                touched.push(l.group);
            }
        }
        for g in touched {
            self.derive_observed(g);
        }
        if let Some(a) = self.status.agents.iter_mut().find(|a| a.id == agent) {
            a.released = true;
        }
        // Keep the live agents and the last few released ones.
        let released = self.status.agents.iter().filter(|a| a.released).count();
        if released > RELEASED_AGENTS_KEPT {
            let mut drop = released - RELEASED_AGENTS_KEPT;
            self.status.agents.retain(|a| {
                if a.released && drop > 0 {
                    drop -= 1;
                    return false;
                }
                true
            });
        }
    }

    fn count_deregistration(&mut self, i: usize, failure: Option<&Failure>) {
        let c = &mut self.counts[i];
        c.deregistrations += 1;
        if let Some(f) = failure {
            counts::count_reason(&mut c.deregistration_failures, f.reason, 0.0);
        }
    }

    fn derive_observed(&mut self, i: usize) {
        let g = &mut self.status.groups[i];
        if g.source == Source::Observed {
            let m = &self.meta[i];
            g.state = observed_state(m.last_ok, m.live_calls);
        }
    }

    fn backend(&mut self, name: &str, up: bool, failure: Option<&Failure>) {
        let i = match self.status.backends.iter().position(|b| b.name == name) {
            Some(i) => i,
            None => {
                self.status.backends.push(BackendStatus {
                    name: name.to_string(),
                    up,
                    reason: None,
                    error: None,
                });
                self.status.backends.len() - 1
            }
        };
        let b = &mut self.status.backends[i];
        b.up = up;
        b.reason = failure.map(|f| f.reason);
        b.error = failure.map(|f| f.message.clone());
    }
}

fn owner(owned: bool) -> &'static str {
    if owned {
        "nixl-agent"
    } else {
        "caller"
    }
}
