//! A deadline on every NIXL call of the lifecycle. The lifecycle thread
//! marks each call in a [`Heartbeat`]; a [`Watchdog`], looked at from the
//! async runtime, records a call that outlives `nixl_call_timeout` as
//! [`Event::Stuck`] (not ready, /livez failing, `last_reason` timeout while
//! it runs; the attempt itself is counted once, when it returns) and its
//! end as [`Event::Unstuck`]. A lifecycle thread that
//! died is [`Event::LifecycleDied`]. NIXL calls cannot be cancelled, so the
//! deadline reports; a restart is what frees a wedged process.

pub use crate::event::CallKind as Operation;
use crate::event::Event;
use crate::record::Recorder;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Busy {
    since: Instant,
    operation: Operation,
    group: Option<usize>,
    episode: u64,
}

#[derive(Debug, Default)]
struct Beat {
    busy: Option<Busy>,
    episodes: u64,
    died: bool,
}

/// Written by the lifecycle thread around each NIXL call. Cheap: one
/// uncontended lock per call.
#[derive(Debug, Default)]
pub struct Heartbeat(Mutex<Beat>);

impl Heartbeat {
    pub fn begin(&self, operation: Operation, group: Option<usize>) {
        let mut b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        b.episodes += 1;
        b.busy = Some(Busy {
            since: Instant::now(),
            operation,
            group,
            episode: b.episodes,
        });
    }

    pub fn end(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).busy = None;
    }

    /// The lifecycle thread panicked.
    pub fn died(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).died = true;
    }

    fn read(&self) -> (Option<Busy>, bool) {
        let b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (b.busy, b.died)
    }
}

/// Reads a heartbeat against the deadline and records what it finds.
pub struct Watchdog {
    beat: Arc<Heartbeat>,
    timeout: Duration,
    groups: Vec<String>,
    /// The busy episode reported stuck, until it ends.
    flagged: Option<(u64, Operation, Instant)>,
    died_reported: bool,
}

impl Watchdog {
    /// `groups[i]` is group `i`'s name, for the stuck call it records.
    pub fn new(beat: Arc<Heartbeat>, timeout: Duration, groups: Vec<String>) -> Watchdog {
        Watchdog {
            beat,
            timeout,
            groups,
            flagged: None,
            died_reported: false,
        }
    }

    /// How often to look: four times within the deadline, at most once a
    /// second (an idle agent wakes once a second for it).
    pub fn period(&self) -> Duration {
        (self.timeout / 4).min(Duration::from_secs(1))
    }

    /// One look at `now`.
    pub fn check(&mut self, now: Instant, rec: &Recorder) {
        let (busy, died) = self.beat.read();
        if died && !self.died_reported {
            self.died_reported = true;
            rec.emit(&Event::LifecycleDied);
        }
        if let Some((episode, operation, since)) = self.flagged {
            if busy.is_none_or(|b| b.episode != episode) {
                self.flagged = None;
                rec.emit(&Event::Unstuck {
                    operation,
                    elapsed: now.saturating_duration_since(since),
                });
            }
        }
        let Some(b) = busy else { return };
        let elapsed = now.saturating_duration_since(b.since);
        if elapsed > self.timeout && self.flagged.is_none_or(|(e, _, _)| e != b.episode) {
            self.flagged = Some((b.episode, b.operation, b.since));
            rec.emit(&Event::Stuck {
                operation: b.operation,
                group: b.group.and_then(|g| self.groups.get(g)).map(String::as_str),
                elapsed,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::NixlStatus;
    use crate::telemetry::metrics::BuildInfo;

    fn recorder() -> Recorder {
        Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now())
    }

    #[test]
    fn a_call_past_its_deadline_is_reported_once_and_its_end_too() {
        let beat = Arc::new(Heartbeat::default());
        let rec = recorder();
        let mut w = Watchdog::new(beat.clone(), Duration::from_millis(100), vec!["kv".into()]);
        let t0 = Instant::now();
        beat.begin(Operation::Register, Some(0));
        w.check(t0 + Duration::from_millis(50), &rec);
        assert!(rec.ledger().snapshot().stuck.is_none(), "within the deadline");
        w.check(t0 + Duration::from_millis(150), &rec);
        let stuck = rec.ledger().snapshot().stuck.clone().expect("past the deadline");
        assert_eq!(
            (stuck.operation.as_str(), stuck.group.as_deref()),
            ("register", Some("kv"))
        );
        w.check(t0 + Duration::from_millis(300), &rec);
        beat.end();
        w.check(t0 + Duration::from_millis(400), &rec);
        assert!(rec.ledger().snapshot().stuck.is_none(), "the call returned");
        // A new call is a new episode with a deadline of its own.
        beat.begin(Operation::Deregister, Some(0));
        w.check(Instant::now(), &rec);
        assert!(rec.ledger().snapshot().stuck.is_none());
    }

    #[test]
    fn a_dead_lifecycle_thread_is_recorded() {
        let beat = Arc::new(Heartbeat::default());
        let rec = recorder();
        let mut w = Watchdog::new(beat.clone(), Duration::from_secs(1), vec![]);
        beat.died();
        w.check(Instant::now(), &rec);
        assert!(rec.ledger().snapshot().lifecycle_dead);
    }
}
