//! The one recording path, and the fan-out above its subscribers. The
//! lifecycle (on nixl-agent's own NIXL agent or on the caller's), observe
//! mode and `check` describe what happened as an [`Event`]; a [`Recorder`]
//! applies it to the [`Ledger`] (the one owner of recorded state), projects
//! it onto the metric registry inside that same write, then writes its log
//! line. Spans are opened by [`attempt`], which every registration path goes
//! through.
//! Nothing else turns an event into recorded state, a metric update or a
//! log line (ARCHITECTURE.md).

mod attempt;
pub mod watchdog;

pub use crate::diagnose::{Capture, NoCapture};
pub use attempt::{attempt, Attempted};
pub use watchdog::{InFlight, LocalMark, Mark};

use crate::event::Event;
use crate::ledger::{Applied, Bounds, Ledger};
use crate::model::RuntimeFacts;
use crate::status::NixlStatus;
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::{events as log, Metrics};
use std::time::Instant;

/// Applies events to the ledger and projects them. Cheap to clone; every
/// clone records into the same ledger and registry, and marks its NIXL
/// calls in the same in-flight table (one watchdog per recording).
#[derive(Clone)]
pub struct Recorder {
    metrics: Metrics,
    ledger: Ledger,
    calls: InFlight,
    /// Subscribers that must hear of a failure before the call that
    /// caused it returns: the process may die right after.
    pub sink: std::sync::Arc<Sinks>,
}

pub use crate::event::Sink;

/// The subscribers of one recording. Most recordings have none: one
/// atomic load then.
#[derive(Default)]
pub struct Sinks {
    any: std::sync::atomic::AtomicBool,
    /// A failure was told: successes are told from now on too (they may
    /// resolve it).
    failed: std::sync::atomic::AtomicBool,
    list: std::sync::RwLock<Vec<Box<dyn Sink>>>,
}

impl Sinks {
    /// Tells the subscribers of a failure, and, once one was told, of the
    /// successes that may resolve it. A healthy process's registrations
    /// and transfers pay a match and an atomic load, never the list's lock.
    fn tell(&self, e: &Event<'_>) {
        use crate::event::XferEnd;
        use std::sync::atomic::Ordering;
        // Only what may end a process's story: never a status poll's tick.
        let failure = match e {
            Event::Attempted(a) => a.outcome.is_err(),
            Event::XferCreateFailed(crate::event::XferCreateFailed { pending, .. }) => !pending,
            Event::XferPosted(crate::event::XferPosted {
                ended: Some((_, end)), ..
            })
            | Event::XferEnded(crate::event::XferEnded { end, .. }) => matches!(end, XferEnd::Failed(_)),
            _ => return,
        };
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        if failure {
            self.failed.store(true, Ordering::Release);
        } else if !self.failed.load(Ordering::Acquire) {
            return;
        }
        for s in self.list.read().unwrap_or_else(|e| e.into_inner()).iter() {
            s.on(e);
        }
    }
}

impl Recorder {
    /// A recorder with an empty ledger and registry. `started` is what
    /// `time_to_ready_seconds` counts from.
    pub fn new(build: &BuildInfo, nixl: NixlStatus, started: Instant) -> Recorder {
        let mut nixl = nixl;
        nixl.binding_version = crate::telemetry::metrics::NIXL_SYS_VERSION;
        let bounds = Bounds {
            duration: crate::telemetry::metrics::DURATION_BUCKETS,
            descriptors: crate::telemetry::metrics::DESCRIPTOR_BUCKETS,
            transfer_duration: crate::telemetry::metrics::TRANSFER_DURATION_BUCKETS,
        };
        let ledger = Ledger::new(nixl, started, bounds);
        let metrics = Metrics::new(build, &ledger);
        Recorder {
            metrics,
            ledger,
            // One clock base for the recording: a call's mark and its
            // deferred posting count from the ledger's start.
            calls: InFlight::since(started),
            sink: Default::default(),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The NIXL calls in flight of this recording: the lifecycle's and
    /// every observer's, marked in one table.
    pub fn calls(&self) -> &InFlight {
        &self.calls
    }

    /// Watches this recording's calls, looking often enough for
    /// `deadline` (each call is held to the deadline it was marked with):
    /// one watchdog thread per recording, started by the first caller.
    pub fn watch_calls(&self, deadline: std::time::Duration) {
        let _detached = watchdog::watch(self, deadline);
    }

    /// Records one event: applied to the ledger and projected onto the
    /// registry in one write, then logged. The log comes last: a log write
    /// can block (seen: ~0.35 s while NIXL loads a plugin on another
    /// thread), and probes must not wait for it.
    pub fn emit(&self, e: &Event<'_>) -> Applied {
        let (applied, traced) = self.ledger.apply_traced(e, |e, st, a| self.metrics.on(e, st, a));
        self.sink.tell(e);
        // Transfers that failed, stalled or were sampled: a span each (the
        // exemplar of a completed one points at it), and a log line for
        // what did not complete.
        for t in &traced {
            let ids = crate::telemetry::traces::transfer_span(t);
            if let (Some((trace, span)), Some(posted), Some(crate::model::XferOutcome::Done)) =
                (&ids, t.posted, t.outcome)
            {
                let seconds = t.ended.saturating_duration_since(posted).as_secs_f64();
                self.metrics.transfer_exemplar(t.op, seconds, trace, span);
            }
            log::transfer(t);
        }
        if let Event::Peer(crate::event::Peer {
            op,
            peer,
            failure: Some(f),
            ..
        }) = e
        {
            crate::telemetry::traces::peer_span(op.as_str(), peer, f);
        }
        log::on(e, &applied);
        applied
    }

    /// Records a posting that ended well within the call (`ended`) or is
    /// in flight without the ledger's lock, when nothing must hear of it
    /// now: no subscriber waits for successes (none failed yet), and it is
    /// not traced. `false`: emit the `XferPosted` instead.
    /// `at` and `ended` in nanoseconds since the recording's start (a
    /// [`LocalMark`]'s clock).
    pub fn posted_quietly(&self, handle: u64, at: u64, ended: Option<u64>) -> bool {
        use std::sync::atomic::Ordering;
        if self.sink.any.load(Ordering::Acquire) && self.sink.failed.load(Ordering::Acquire) {
            return false;
        }
        self.ledger.defer_posting(handle, at, ended)
    }

    /// Nanoseconds from the recording's start to `at` (`None` before it).
    pub fn nanos(&self, at: Instant) -> Option<u64> {
        self.ledger.nanos(at)
    }

    /// The recording's start: what its nanoseconds count from.
    pub fn started(&self) -> Instant {
        self.ledger.started()
    }

    /// Tells `sink` of every event [`Sink`] says from now on (subscribers
    /// that are gone are dropped here).
    pub fn subscribe(&self, sink: Box<dyn Sink>) {
        let mut list = self.sink.list.write().unwrap_or_else(|e| e.into_inner());
        list.retain(|s| !s.gone());
        list.push(sink);
        self.sink.any.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Shutdown began: not ready from now on, whatever is recorded later.
    pub fn drain_started(&self) {
        let applied = self.ledger.begin_drain(|_, _| {});
        log::readiness(&applied);
        self.emit(&Event::DrainStarted);
    }

    /// NIXL is up on an agent: the facts go to the status and the log.
    pub fn nixl_loaded(&self, facts: &RuntimeFacts) {
        self.emit(&Event::NixlLoaded(facts));
    }
}

#[cfg(test)]
mod deferred_tests;
