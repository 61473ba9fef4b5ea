//! One registration attempt, recorded the same way whoever makes it: the
//! lifecycle driver (a whole group), observe mode (one call of the caller's)
//! and `check` (a smoke test). It owns the `nixl.group.register` span, the
//! capture window for what NIXL/UCX print, the clock, the refinement of the
//! reason by those printed words, and the [`Event::Attempted`] it emits.

use super::Recorder;
use crate::diagnose::{self, Capture};
use crate::event::{Attempt, Event, GroupId, Leaves};
use crate::model::{AgentId, GroupFailure, GroupLabels, Region};
use std::time::{Duration, Instant};
use tracing::field::Empty;
use tracing::span::EnteredSpan;

/// An attempt in progress: begun with [`attempt`], timed from
/// [`Attempted::start_clock`], recorded by [`Attempted::finish`].
#[must_use = "an attempt is recorded by finish()"]
pub struct Attempted {
    span: EnteredSpan,
    attempt: u32,
    descriptors: usize,
    bytes: u64,
    t0: Option<Instant>,
}

/// Opens the attempt's span and capture window. Work done before
/// [`Attempted::start_clock`] (backend creation, allocation) is inside the
/// span but not in the duration.
pub fn attempt(labels: &GroupLabels, attempt: u32, descriptors: usize, bytes: u64, capture: &dyn Capture) -> Attempted {
    let span = tracing::info_span!(
        "nixl.group.register",
        group = %labels.group,
        kind = %labels.kind,
        mem_type = labels.mem_type.as_str(),
        backend = %labels.backend,
        device = %labels.device,
        descriptor_count = descriptors,
        bytes,
        attempt,
        outcome = Empty,
        "error.type" = Empty,
        "error.message" = Empty,
        "otel.status_code" = Empty,
        "otel.status_message" = Empty,
    )
    .entered();
    capture.begin();
    Attempted {
        span,
        attempt,
        descriptors,
        bytes,
        t0: None,
    }
}

impl Attempted {
    /// From here on the attempt is timed: validation and NIXL.
    pub fn start_clock(&mut self) -> Instant {
        let t0 = Instant::now();
        self.t0 = Some(t0);
        t0
    }

    /// How long the timed part has run so far.
    pub fn elapsed(&self) -> Option<Duration> {
        self.t0.map(|t| t.elapsed())
    }

    /// Closes the capture window, refines a failure's reason by what NIXL
    /// printed, records the attempt against `group` and returns the
    /// (refined) result.
    /// `leaves` is what the attempt leaves registered on `agent`;
    /// `region(i)` looks up a blamed region for the span event.
    #[allow(clippy::too_many_arguments)]
    pub fn finish<T>(
        self,
        rec: &Recorder,
        group: Option<GroupId>,
        agent: AgentId,
        labels: &GroupLabels,
        capture: &dyn Capture,
        result: Result<T, GroupFailure>,
        leaves: Leaves,
        region: impl Fn(usize) -> Option<Region>,
    ) -> Result<T, GroupFailure> {
        let elapsed = self.elapsed();
        let lines = capture.end(result.is_err());
        let span = self.span;
        let mut result = result;
        if let Err(f) = &mut result {
            f.reason = diagnose::refine(f.reason, &lines);
            f.diagnostics = lines;
            span.record("outcome", "failure");
            span.record("error.type", f.reason.as_str());
            span.record("error.message", f.message.as_str());
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", f.message.as_str());
        } else {
            span.record("outcome", "success");
        }
        let blamed = match &result {
            Err(GroupFailure { region: Some(i), .. }) => region(*i),
            _ => None,
        };
        rec.emit(&Event::Attempted(&Attempt {
            group,
            agent,
            labels,
            attempt: self.attempt,
            descriptors: self.descriptors,
            bytes: self.bytes,
            elapsed,
            outcome: result.as_ref().map(|_| ()),
            leaves,
            blamed,
        }));
        drop(span);
        result
    }
}
