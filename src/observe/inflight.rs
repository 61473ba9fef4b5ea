//! Observed NIXL calls in flight, and the watchdog that looks at them: a
//! UCX hang inside the program's own `register_memory` or
//! `deregister_memory` must reach /livez, `nixl_agent_lifecycle_stuck` and
//! `NixlLifecycleStuck` as the lifecycle's own calls do.
//!
//! Each thread that makes observed calls owns a slot; marking a call is two
//! plain atomic stores on it (no lock, no read-modify-write on the hot
//! path). The watchdog thread — one per observer, only when a deadline is
//! set — reads every slot a few times a deadline and records what it finds
//! as events: `CallsInFlight` (the oldest call per operation), `Stuck` once
//! a call is past the deadline, `Unstuck` when it returns.

use crate::event::{CallKind, Event};
use crate::record::Recorder;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// One thread's current call: when it started (nanoseconds since the
/// table's base, 0 when idle), its operation and its group's name index.
#[derive(Default)]
struct Slot {
    started: AtomicU64,
    operation: AtomicU8,
    group: AtomicU32,
}

const NO_GROUP: u32 = u32::MAX;

/// The slots of one observer's threads, and the group names they index.
pub(crate) struct InFlight {
    id: u64,
    base: Instant,
    slots: Mutex<Vec<Arc<Slot>>>,
    names: Mutex<Vec<String>>,
}

thread_local! {
    /// This thread's slot in each in-flight table it made calls under.
    static SLOTS: RefCell<Vec<(u64, Arc<Slot>)>> = const { RefCell::new(Vec::new()) };
}

fn kind_code(k: CallKind) -> u8 {
    match k {
        CallKind::Preflight => 0,
        CallKind::Register => 1,
        CallKind::Deregister => 2,
        CallKind::Drain => 3,
    }
}

fn kind_of(code: u8) -> CallKind {
    match code {
        0 => CallKind::Preflight,
        1 => CallKind::Register,
        3 => CallKind::Drain,
        _ => CallKind::Deregister,
    }
}

/// A call marked in flight; unmarked when dropped.
#[must_use = "the call is in flight until the mark is dropped"]
pub(crate) struct Mark(Option<Arc<Slot>>);

impl Drop for Mark {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.started.store(0, Ordering::Release);
        }
    }
}

impl InFlight {
    pub(crate) fn new() -> InFlight {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        InFlight {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            base: Instant::now(),
            slots: Mutex::new(Vec::new()),
            names: Mutex::new(Vec::new()),
        }
    }

    /// The index a group name is marked by (names are few: at most the
    /// group cap and `other`).
    pub(crate) fn group_index(&self, name: &str) -> u32 {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        match names.iter().position(|n| n == name) {
            Some(i) => i as u32,
            None => {
                names.push(name.to_string());
                (names.len() - 1) as u32
            }
        }
    }

    fn slot(&self) -> Arc<Slot> {
        SLOTS.with(|slots| {
            let mut slots = slots.borrow_mut();
            if let Some((_, s)) = slots.iter().find(|(id, _)| *id == self.id) {
                return s.clone();
            }
            let s = Arc::new(Slot::default());
            self.slots.lock().unwrap_or_else(|e| e.into_inner()).push(s.clone());
            slots.push((self.id, s.clone()));
            s
        })
    }

    /// Marks this thread's call as started at `at` (a clock already read).
    pub(crate) fn begin(&self, operation: CallKind, group: Option<u32>, at: Instant) -> Mark {
        let s = self.slot();
        s.operation.store(kind_code(operation), Ordering::Relaxed);
        s.group.store(group.unwrap_or(NO_GROUP), Ordering::Relaxed);
        // Never 0 (idle): a call that started at the base instant is 1 ns.
        let nanos = at.saturating_duration_since(self.base).as_nanos().max(1) as u64;
        s.started.store(nanos, Ordering::Release);
        Mark(Some(s))
    }

    /// The calls in flight now: (operation, group, how long, which slot).
    fn look(&self, now: Instant) -> Vec<(CallKind, Option<String>, Duration, usize, u64)> {
        let now = now.saturating_duration_since(self.base).as_nanos() as u64;
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let started = s.started.load(Ordering::Acquire);
                (started != 0).then(|| {
                    let group = names.get(s.group.load(Ordering::Relaxed) as usize).cloned();
                    let op = kind_of(s.operation.load(Ordering::Relaxed));
                    (op, group, Duration::from_nanos(now.saturating_sub(started)), i, started)
                })
            })
            .collect()
    }
}

/// Starts the watchdog of an observer's calls: it ends when the observer
/// (its in-flight table) is gone.
pub(crate) fn watch(inflight: &Arc<InFlight>, rec: Recorder, timeout: Duration) {
    let table: Weak<InFlight> = Arc::downgrade(inflight);
    let period = (timeout / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let spawned = std::thread::Builder::new()
        .name("nixl-agent-watchdog".into())
        .spawn(move || {
            // The stuck call reported, by slot and start, until it ends.
            let mut flagged: Option<(usize, u64, CallKind, Instant)> = None;
            let mut shown = false;
            loop {
                std::thread::sleep(period);
                let Some(table) = table.upgrade() else { return };
                let now = Instant::now();
                let calls = table.look(now);
                if let Some((slot, started, operation, since)) = flagged {
                    if !calls.iter().any(|c| c.3 == slot && c.4 == started) {
                        flagged = None;
                        rec.emit(&Event::Unstuck {
                            operation,
                            elapsed: now.saturating_duration_since(since),
                        });
                    }
                }
                if flagged.is_none() {
                    if let Some(c) = calls.iter().filter(|c| c.2 > timeout).max_by_key(|c| c.2) {
                        flagged = Some((c.3, c.4, c.0, now - c.2));
                        rec.emit(&Event::Stuck {
                            operation: c.0,
                            group: c.1.as_deref(),
                            elapsed: c.2,
                        });
                    }
                }
                // The oldest call per operation, while any is in flight (and
                // once more when the last one ended, to clear it).
                if !calls.is_empty() || shown {
                    let mut oldest: Vec<(CallKind, Duration)> = Vec::new();
                    for (op, _, d, _, _) in &calls {
                        match oldest.iter_mut().find(|(o, _)| o == op) {
                            Some((_, old)) => *old = (*old).max(*d),
                            None => oldest.push((*op, *d)),
                        }
                    }
                    shown = !oldest.is_empty();
                    rec.emit(&Event::CallsInFlight { oldest: &oldest });
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the watchdog of observed NIXL calls; a hung call will not fail /livez");
    }
}
