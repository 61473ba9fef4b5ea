//! The one recording path. The lifecycle (on nixl-agent's own NIXL agent or
//! on the caller's), observe mode and `check` describe what happened as an
//! [`Event`]; a [`Recorder`] hands each event to its subscribers: the metric
//! registry, the status board and the log. Spans are opened by [`attempt`],
//! which every registration path goes through.
//!
//! Architecture Invariant: nothing outside this module and its subscribers
//! (`telemetry::metrics`, `status`, `telemetry::events`) turns an event into a
//! metric update, a status change or a log line.

mod attempt;
mod event;

pub use attempt::{attempt, Attempted, Capture, NoCapture};
pub use event::{Attempt, Event, GroupDecl, GroupProgress, Holding};

use crate::model::RuntimeFacts;
use crate::status::{NixlStatus, Status, StatusBoard};
use crate::telemetry::metrics::BuildInfo;
use crate::telemetry::{events as log, Metrics};
use std::time::Instant;

/// Hands events to the metrics, the status board and the log. Cheap to
/// clone; every clone records into the same registry and board.
#[derive(Clone)]
pub struct Recorder {
    metrics: Metrics,
    board: StatusBoard,
}

impl Recorder {
    /// A recorder with an empty registry and board. `started` is what
    /// `time_to_ready_seconds` counts from.
    pub fn new(build: &BuildInfo, nixl: NixlStatus, started: Instant) -> Recorder {
        let mut status = Status::empty();
        status.nixl = nixl;
        status.nixl.binding_version = crate::telemetry::metrics::NIXL_SYS_VERSION;
        Recorder {
            metrics: Metrics::new(build),
            board: StatusBoard::new(status, started),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    /// Records one event in every subscriber. A change of readiness that the
    /// event causes is recorded as an [`Event::ReadinessChanged`] of its own;
    /// its gauge is set inside the status write that decided it.
    /// The recorded state (metrics, status) is written before the log line:
    /// a log write can block (seen: ~0.35 s while NIXL loads a plugin on
    /// another thread), and probes must not wait for it.
    pub fn emit(&self, e: &Event<'_>) {
        self.metrics.on(e);
        let change = self.board.on(e, |c| self.metrics.on(&c.event()));
        log::on(e);
        if let Some(c) = change {
            log::on(&c.event());
        }
    }

    /// Shutdown began: not ready from now on, whatever is recorded later.
    pub fn drain_started(&self) {
        self.board.begin_drain(|c| self.metrics.on(&c.event()));
        self.emit(&Event::DrainStarted);
    }

    /// NIXL is up on an agent: the facts go to the status and the log.
    pub fn nixl_loaded(&self, facts: &RuntimeFacts) {
        self.emit(&Event::NixlLoaded(facts));
    }
}
