//! One in-flight table and one watchdog per recording: "a NIXL call is past
//! its deadline" has one owner. The lifecycle thread and observe mode mark
//! every NIXL call they make in the table of the recording they record
//! into (so an observer sharing a lifecycle's recording shares its table);
//! the watchdog — one thread per recording, started by the first deadline
//! set — reads every slot a few times a deadline and records what it finds:
//! `CallsInFlight` (the oldest call per operation), `Stuck` once for each
//! call past its own deadline, and `Unstuck` when that call returns. Each
//! episode carries its call's key, so one call ending never ends another's.
//! NIXL calls cannot be cancelled: the deadline reports, a restart frees.
//!
//! Each thread that makes calls owns a slot per table; marking a call is a
//! few plain atomic stores on it (no lock, no read-modify-write on the hot
//! path). The table holds its slots weakly: a slot is freed with the thread
//! that owns it, and dead ones are pruned whenever a thread takes a slot or
//! the watchdog looks, so thread-pool churn never grows the table.

use super::Recorder;
use crate::event::{CallKey, CallKind, Event, GroupId};
use crate::ledger::counts::nanos;
use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the watchdog looks: four times a deadline, within these.
const MIN_PERIOD: Duration = Duration::from_millis(5);
const MAX_PERIOD: Duration = Duration::from_secs(1);

/// One thread's current call: when it started (nanoseconds since the
/// table's base, 0 when idle), its operation, its group (the ledger's id)
/// and its deadline (nanoseconds, 0: none).
struct Slot {
    /// Never reused within a table: with `started`, the call's key.
    id: u64,
    started: AtomicU64,
    operation: AtomicU8,
    group: AtomicU32,
    deadline: AtomicU64,
    /// The last `started` this slot's owner wrote (only the owner writes
    /// it), so two calls of one thread never share a key.
    last: AtomicU64,
}

const NO_GROUP: u32 = u32::MAX;

struct Table {
    base: Instant,
    next_slot: AtomicU64,
    slots: Mutex<Vec<Weak<Slot>>>,
    /// The watchdog's period (nanoseconds): the shortest deadline's.
    period: AtomicU64,
    watching: AtomicBool,
}

/// The calls in flight of one recording. Cheap to clone; every clone is
/// the same table.
#[derive(Clone)]
pub struct InFlight(Arc<Table>);

thread_local! {
    /// This thread's slot in each table it made calls under.
    static SLOTS: RefCell<Vec<(Weak<Table>, Arc<Slot>)>> = const { RefCell::new(Vec::new()) };
}

fn kind_code(k: CallKind) -> u8 {
    CallKind::ALL.iter().position(|c| *c == k).unwrap_or(0) as u8
}

fn kind_of(code: u8) -> CallKind {
    CallKind::ALL
        .get(usize::from(code))
        .copied()
        .unwrap_or(CallKind::Deregister)
}

/// A call marked in flight; unmarked when dropped.
#[must_use = "the call is in flight until the mark is dropped"]
pub struct Mark(Arc<Slot>);

impl Drop for Mark {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
    }
}

/// A call marked in flight by [`InFlight::begin_here`]; unmarked when
/// dropped, on the thread that marked it (it cannot be sent elsewhere).
#[must_use = "the call is in flight until the mark is dropped"]
pub struct LocalMark {
    /// The table's address: this thread's slot in it is the one marked.
    table: usize,
    nanos: u64,
    /// The thread's first call: its slot taken as `begin` does.
    owned: Option<Mark>,
    _here: std::marker::PhantomData<*const ()>,
}

impl LocalMark {
    /// When the call began, in nanoseconds since the table's base.
    pub fn nanos(&self) -> u64 {
        self.nanos
    }
}

impl Drop for LocalMark {
    fn drop(&mut self) {
        if self.owned.is_some() {
            return;
        }
        let table = self.table as *const Table;
        let _ = SLOTS.try_with(|slots| {
            if let Some((_, s)) = slots.borrow().iter().find(|(t, _)| is(t, table)) {
                s.started.store(0, Ordering::Release);
            }
        });
    }
}

/// Whether `t` is the live table at `table` (a table gone since may have
/// left its address to another).
fn is(t: &Weak<Table>, table: *const Table) -> bool {
    std::ptr::eq(t.as_ptr(), table) && t.strong_count() > 0
}

/// A call in flight, as one look saw it.
#[derive(Debug, Clone)]
struct Seen {
    call: CallKey,
    operation: CallKind,
    group: Option<GroupId>,
    age: Duration,
    deadline: Option<Duration>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new()
    }
}

impl InFlight {
    pub fn new() -> InFlight {
        InFlight::since(Instant::now())
    }

    /// A table whose clock counts from `base` (its recording's start, so
    /// a mark's nanoseconds are the recording's own: [`LocalMark::nanos`]).
    pub fn since(base: Instant) -> InFlight {
        InFlight(Arc::new(Table {
            base,
            next_slot: AtomicU64::new(1),
            slots: Mutex::new(Vec::new()),
            period: AtomicU64::new(nanos(MAX_PERIOD)),
            watching: AtomicBool::new(false),
        }))
    }

    /// A new slot, held by the table weakly; dead slots are pruned.
    fn new_slot(&self) -> Arc<Slot> {
        let s = Arc::new(Slot {
            id: self.0.next_slot.fetch_add(1, Ordering::Relaxed),
            started: AtomicU64::new(0),
            operation: AtomicU8::new(0),
            group: AtomicU32::new(NO_GROUP),
            deadline: AtomicU64::new(0),
            last: AtomicU64::new(0),
        });
        let mut slots = self.0.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(&s));
        s
    }

    /// This thread's slot (taken on its first call; freed when it ends).
    fn slot(&self) -> Arc<Slot> {
        let mine = Arc::as_ptr(&self.0);
        let found = SLOTS.try_with(|slots| {
            let mut slots = slots.borrow_mut();
            if let Some((_, s)) = slots.iter().find(|(t, _)| is(t, mine)) {
                return s.clone();
            }
            // Tables gone since: their slots go with them.
            slots.retain(|(t, _)| t.strong_count() > 0);
            let s = self.new_slot();
            slots.push((Arc::downgrade(&self.0), s.clone()));
            s
        });
        // A call from a thread-local destructor: a slot for this call only.
        found.unwrap_or_else(|_| self.new_slot())
    }

    /// Marks this thread's call as started at `at` (a clock already read);
    /// past `deadline`, if any, the watchdog reports it stuck.
    pub fn begin(&self, operation: CallKind, group: Option<GroupId>, at: Instant, deadline: Option<Duration>) -> Mark {
        let s = self.slot();
        self.mark(
            &s,
            operation,
            group,
            nanos(at.saturating_duration_since(self.0.base)),
            deadline,
        );
        Mark(s)
    }

    /// The same for a call that ends on this thread, marked on the slot
    /// this thread already holds without moving its reference count (the
    /// data path's per-call cost); the first call of a thread takes its
    /// slot as [`InFlight::begin`] does.
    /// `at`: nanoseconds since the table's base.
    pub fn begin_here(&self, operation: CallKind, at: u64, deadline: Option<Duration>) -> LocalMark {
        let mine = Arc::as_ptr(&self.0);
        let marked = SLOTS.try_with(|slots| {
            let slots = slots.borrow();
            let (_, s) = slots.iter().find(|(t, _)| is(t, mine))?;
            self.mark(s, operation, None, at, deadline);
            Some(())
        });
        match marked {
            Ok(Some(())) => LocalMark {
                table: mine as usize,
                nanos: at,
                owned: None,
                _here: std::marker::PhantomData,
            },
            _ => {
                let s = self.slot();
                self.mark(&s, operation, None, at, deadline);
                LocalMark {
                    table: mine as usize,
                    nanos: at,
                    owned: Some(Mark(s)),
                    _here: std::marker::PhantomData,
                }
            }
        }
    }

    /// Marks `s`; `at` in nanoseconds since the table's base.
    fn mark(&self, s: &Slot, operation: CallKind, group: Option<GroupId>, at: u64, deadline: Option<Duration>) {
        // A sequence lock: the slot reads idle while its fields change, and
        // the fence keeps the field stores after that (on a weakly ordered
        // CPU a relaxed store may otherwise be seen before the idle one, and
        // a look would read the previous call's key with this call's
        // operation). `look` pairs it with an acquire fence.
        s.started.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        s.operation.store(kind_code(operation), Ordering::Relaxed);
        s.group.store(group.map_or(NO_GROUP, |g| g.0), Ordering::Relaxed);
        s.deadline
            .store(deadline.map_or(0, |d| nanos(d).max(1)), Ordering::Relaxed);
        // Never 0 (idle), and after this slot's previous call.
        let started = at.max(1).max(s.last.load(Ordering::Relaxed) + 1);
        s.last.store(started, Ordering::Relaxed);
        s.started.store(started, Ordering::Release);
    }

    /// The calls in flight at `now`. A slot whose call changed while it
    /// was read is skipped until the next look.
    fn look(&self, now: Instant) -> Vec<Seen> {
        let now = nanos(now.saturating_duration_since(self.0.base));
        let mut slots = self.0.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|s| {
                let started = s.started.load(Ordering::Acquire);
                if started == 0 {
                    return None;
                }
                let operation = kind_of(s.operation.load(Ordering::Relaxed));
                let group = s.group.load(Ordering::Relaxed);
                let deadline = s.deadline.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if s.started.load(Ordering::Relaxed) != started {
                    return None;
                }
                Some(Seen {
                    call: CallKey { slot: s.id, started },
                    operation,
                    group: (group != NO_GROUP).then_some(GroupId(group)),
                    age: Duration::from_nanos(now.saturating_sub(started)),
                    deadline: (deadline != 0).then(|| Duration::from_nanos(deadline)),
                })
            })
            .collect()
    }

    /// Slots the table holds now (live threads that made calls).
    #[cfg(test)]
    fn slots(&self) -> usize {
        let mut slots = self.0.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots.len()
    }
}

/// The stuck calls reported, until each ends; what one look does.
#[derive(Default)]
pub struct Watchdog {
    flagged: Vec<(CallKey, CallKind, Instant)>,
    shown: bool,
}

impl Watchdog {
    /// One look at `calls` at `now`, recorded into `rec`.
    pub fn check(&mut self, calls: &InFlight, now: Instant, rec: &Recorder) {
        let seen = calls.look(now);
        self.flagged.retain(|(call, operation, since)| {
            let running = seen.iter().any(|c| c.call == *call);
            if !running {
                rec.emit(&Event::Unstuck(crate::event::Unstuck {
                    call: *call,
                    operation: *operation,
                    elapsed: now.saturating_duration_since(*since),
                }));
            }
            running
        });
        for c in &seen {
            let late = c.deadline.is_some_and(|d| c.age > d);
            if late && !self.flagged.iter().any(|(k, _, _)| *k == c.call) {
                let since = now.checked_sub(c.age).unwrap_or(now);
                self.flagged.push((c.call, c.operation, since));
                // A late call is rare: its group's name (for the log line)
                // is asked of the ledger only then.
                let name = c.group.and_then(|g| rec.ledger().group_name(g));
                rec.emit(&Event::Stuck(crate::event::Stuck {
                    call: c.call,
                    operation: c.operation,
                    group: c.group.zip(name.as_deref()),
                    elapsed: c.age,
                }));
            }
        }
        // The oldest call per operation, while any is in flight (and once
        // more when the last one ended, to clear it).
        if !seen.is_empty() || self.shown {
            let mut oldest: Vec<(CallKind, Duration)> = Vec::new();
            for c in &seen {
                match oldest.iter_mut().find(|(o, _)| *o == c.operation) {
                    Some((_, old)) => *old = (*old).max(c.age),
                    None => oldest.push((c.operation, c.age)),
                }
            }
            self.shown = !oldest.is_empty();
            rec.emit(&Event::CallsInFlight(crate::event::CallsInFlight { oldest: &oldest }));
        }
    }
}

/// Starts the recording's watchdog, once, or makes it look often enough
/// for `deadline` too. It ends when the recording (every `Recorder` of it)
/// is gone.
/// Returns the thread when this call started it.
pub fn watch(rec: &Recorder, deadline: Duration) -> Option<std::thread::JoinHandle<()>> {
    let table = &rec.calls.0;
    let period = (deadline / 4).clamp(MIN_PERIOD, MAX_PERIOD);
    table.period.fetch_min(nanos(period), Ordering::Relaxed);
    if table.watching.swap(true, Ordering::AcqRel) {
        return None;
    }
    let weak = Arc::downgrade(table);
    let (metrics, ledger, sink) = (rec.metrics.clone(), rec.ledger.clone(), rec.sink.clone());
    let spawned = std::thread::Builder::new()
        .name("nixl-agent-watchdog".into())
        .spawn(move || {
            let mut dog = Watchdog::default();
            loop {
                let period = weak.upgrade().map(|t| t.period.load(Ordering::Relaxed));
                let Some(period) = period else { return };
                std::thread::sleep(Duration::from_nanos(period));
                let Some(table) = weak.upgrade() else { return };
                let rec = Recorder {
                    metrics: metrics.clone(),
                    ledger: ledger.clone(),
                    calls: InFlight(table),
                    sink: sink.clone(),
                };
                dog.check(&rec.calls, Instant::now(), &rec);
            }
        });
    match spawned {
        Ok(thread) => Some(thread),
        Err(e) => {
            table.watching.store(false, Ordering::Release);
            tracing::warn!(error = %e, "cannot start the watchdog of NIXL calls; a hung call will not fail /livez");
            None
        }
    }
}

#[cfg(test)]
mod tests;
