//! The ledger: the one owner of recorded state. Every event of the
//! lifecycle, observe mode and `check` is applied here, under one lock, in
//! order; what it derives (a group's state, what each NIXL agent holds,
//! readiness) is derived once, here, and every projection — the metric
//! gauges, /v1/status, /readyz, /livez, rank files, the pod view — reads
//! that one derivation. tokio-console's aggregator is the model: it owns
//! the task state and hands out updates.
//!
//! Its storage is its own tables — groups keyed by the [`GroupId`] it hands
//! out at declaration (`groups`), agents and calls (`calls`), the process
//! (`process`), the data path (`xfer_state`), holdings (`live`) — each with
//! the family of events that writes it; /v1/status is built from them when
//! a snapshot is taken (`snapshot`). The invariants are in ARCHITECTURE.md
//! ("the ledger").

pub mod calls;
pub mod counts;
mod deferred;
pub mod groups;
mod live;
pub mod process;
mod snapshot;
#[cfg(test)]
mod tests;
pub mod xfer_state;

pub use calls::RELEASED_AGENTS_KEPT;
pub use counts::{Bounds, GroupCounts, Histogram};
use live::LiveTable;
pub use xfer_state::{TracedXfer, Transfers, TransportWanted};

use crate::event::{Event, GroupId, Source};
use crate::status::{NixlStatus, Status};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The tables the ledger owns. Projections read them inside the write
/// ([`Ledger::apply`]'s closure, the registry's render under
/// [`Ledger::read`]) or as a [`Status`] snapshot built from them.
pub struct State {
    /// Grows with every write.
    generation: u64,
    pub process: process::Process,
    pub groups: groups::Groups,
    pub agents: calls::Agents,
    pub calls: calls::Calls,
    pub bounds: Bounds,
    /// The data path: requests, flights, peers, notifications.
    pub transfers: Transfers,
    live: LiveTable,
    draining: bool,
}

impl State {
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn nixl(&self) -> &NixlStatus {
        &self.process.nixl
    }

    /// One event, handed to the family that owns it.
    fn apply(&mut self, e: &Event<'_>) -> Applied {
        if let Some(heard) = self.transfers.apply(e) {
            return Applied {
                unmatched: heard.unmatched,
                ..Applied::default()
            };
        }
        self.apply_group(e)
            .or_else(|| self.apply_call(e))
            .or_else(|| self.apply_process(e))
            .unwrap_or_default()
    }
}

/// What applying one event changed, for the projections.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The group the event was about (for a declaration: the group now
    /// declared under its name).
    pub group: Option<GroupId>,
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
    /// Postings threads told without the state's lock, applied by the
    /// next lock of it (`deferred`).
    deferred: Arc<deferred::Deferred>,
}

/// The owner of recorded state. Cheap to clone; every clone is the same
/// ledger.
#[derive(Clone)]
pub struct Ledger(Arc<Shared>);

impl Ledger {
    /// An empty ledger with what is known of NIXL before it loads;
    /// `started` is what `time_to_ready_seconds` counts from.
    pub fn new(nixl: NixlStatus, started: Instant, bounds: Bounds) -> Ledger {
        Ledger(Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                process: process::Process::new(nixl),
                groups: groups::Groups::default(),
                agents: calls::Agents::default(),
                calls: calls::Calls::default(),
                bounds,
                transfers: Transfers::new(bounds.transfer_duration),
                live: LiveTable::default(),
                draining: false,
            }),
            generation: AtomicU64::new(0),
            changed: watch::Sender::new(0),
            cache: RwLock::new(None),
            started,
            deferred: Default::default(),
        }))
    }

    /// The state, with every deferred posting applied first: no reader or
    /// writer sees the tables without them.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        // Runs of one handle (a request reposted in a loop) are applied
        // together; one wall-clock stamp serves the whole batch.
        let started = self.0.started;
        let mut start_unix = None;
        let mut run: (u64, Vec<(u64, Option<u64>)>) = (0, Vec::new());
        let mut flush = |st: &mut State, run: &mut (u64, Vec<(u64, Option<u64>)>)| {
            if run.1.is_empty() {
                return;
            }
            let unix = *start_unix.get_or_insert_with(|| st.transfers.unix_at(started));
            st.transfers.posted_later(run.0, started, unix, &run.1);
            run.1.clear();
        };
        let applied = self.0.deferred.take(|p| {
            if run.0 != p.handle {
                flush(&mut st, &mut run);
                run.0 = p.handle;
            }
            run.1.push((p.posted, p.ended));
        });
        flush(&mut st, &mut run);
        if applied {
            // A new generation, published now: the caches and the
            // publisher's look compare against it.
            st.generation += 1;
            self.notify(st.generation);
        }
        st
    }

    /// Records that `handle` was posted (and ended well, within the call,
    /// at `ended`) without taking the state's lock; applied before the
    /// next read or write. Times in nanoseconds since the ledger's start
    /// ([`Ledger::nanos`]). `false` when it cannot be deferred (record the
    /// event the usual way, which applies what was deferred first). For
    /// postings nothing else must hear of now: not failed, not traced.
    pub fn defer_posting(&self, handle: u64, posted: u64, ended: Option<u64>) -> bool {
        deferred::Deferred::push(&self.0.deferred, deferred::DeferredPosting { handle, posted, ended })
    }

    /// The instant the ledger counts from.
    pub fn started(&self) -> Instant {
        self.0.started
    }

    /// Nanoseconds from the ledger's start to `at` (`None` before it).
    pub fn nanos(&self, at: Instant) -> Option<u64> {
        at.checked_duration_since(self.0.started).map(counts::nanos)
    }

    /// Applies what was deferred, if anything: for readers that skip the
    /// state's lock while the generation is unchanged.
    pub fn fold(&self) {
        if self.0.deferred.pending() {
            drop(self.lock());
        }
    }

    /// The generation of the last write, what was deferred applied first.
    pub fn generation(&self) -> u64 {
        self.fold();
        self.0.generation.load(Ordering::Acquire)
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
        st.generation += 1;
        project(e, &st, &applied);
        self.notify(st.generation);
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
        if !matches!(st.process.phase, crate::model::Phase::Stopped) {
            st.process.phase = crate::model::Phase::Draining;
        }
        let mut applied = Applied::default();
        self.derive_ready(&mut st, &mut applied);
        st.generation += 1;
        project(&st, &applied);
        self.notify(st.generation);
        applied
    }

    fn derive_ready(&self, st: &mut State, applied: &mut Applied) {
        let ready = !st.draining && st.derive_ready();
        if ready == st.process.ready {
            return;
        }
        st.process.ready = ready;
        applied.ready = Some(ready);
        if ready && st.process.time_to_ready.is_none() {
            let t = self.0.started.elapsed();
            st.process.time_to_ready = Some(t.as_secs_f64());
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
        self.fold();
        let current = self.0.generation.load(Ordering::Acquire);
        {
            let cache = self.0.cache.read().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = cache.as_ref().filter(|s| s.generation == current) {
                return s.clone();
            }
        }
        let st = self.lock();
        let s = Arc::new(st.status());
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

    /// Who owns the group name `name`, if anyone (asked by a front-end
    /// meeting a name for the first time).
    pub fn source_of(&self, name: &str) -> Option<Source> {
        let st = self.lock();
        st.groups.find(name).and_then(|id| st.groups.get(id)).map(|g| g.source)
    }

    /// The name of group `id` (asked when a call of it is past its
    /// deadline, for the log line).
    pub fn group_name(&self, id: GroupId) -> Option<String> {
        self.lock().groups.get(id).map(|g| g.name.clone())
    }
}
