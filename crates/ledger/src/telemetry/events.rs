//! The log subscriber: each event's own line (written beside its definition
//! in `event`), the readiness flips and the transfers that failed or
//! stalled, which only the ledger knows. Structured fields first, then a
//! short sentence, inside the span current when the event is emitted, so a
//! line about an attempt is also an event of its span. Error text goes
//! here (and to /v1/status), never into a label.

use crate::event::{Event, Said, LOG_TARGET};
use crate::ledger::Applied;
use crate::model::Reason;

/// The log line of a readiness flip, if the write made one.
pub fn readiness(a: &Applied) {
    match (a.ready, a.time_to_ready) {
        (Some(true), Some(t)) => tracing::info!(target: LOG_TARGET, time_to_ready_ms = t.as_millis() as u64, "ready"),
        (Some(ready), _) => tracing::info!(target: LOG_TARGET, ready, "readiness changed"),
        (None, _) => {}
    }
}

/// The log line of a transfer that failed, was released in flight or
/// stalled (a success is never logged).
pub fn transfer(t: &crate::ledger::TracedXfer) {
    let outcome = t.outcome.map_or("in_flight", crate::model::XferOutcome::as_str);
    let seconds = t.posted.map(|p| t.ended.saturating_duration_since(p).as_secs_f64());
    match t.outcome {
        Some(crate::model::XferOutcome::Done) => {}
        None => tracing::warn!(
            target: LOG_TARGET,
            op = t.op.as_str(),
            peer = %t.peer,
            bytes = t.bytes,
            seconds,
            "transfer stalled: {}",
            t.message.as_deref().unwrap_or("in flight past the stall threshold")
        ),
        Some(_) => tracing::warn!(
            target: LOG_TARGET,
            op = t.op.as_str(),
            outcome,
            stage = t.stage,
            reason = t.reason.map(Reason::as_str),
            peer = %t.peer,
            bytes = t.bytes,
            seconds,
            error = t.message.as_deref(),
            "transfer did not complete"
        ),
    }
}

/// Writes the log line of one event (each event's own, beside its
/// definition in `event`) and of the readiness flip it caused.
pub fn on(e: &Event<'_>, applied: &Applied) {
    e.log(&Said {
        refused: applied.refused,
        unmatched: applied.unmatched,
    });
    readiness(applied);
}
