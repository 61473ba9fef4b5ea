//! What the data path hands the traces: a transfer that ended (or
//! stalled), described for its span and log line, and the watchdog's tick
//! that finds stalls (each counted once) and refreshes the ages of what is
//! in flight.

use super::{Moves, Transfers};
use crate::model::{Failure, MemType, Reason, XferOp, XferOutcome};
use std::time::{Duration, Instant};

/// A transfer that ended (or stalled) and is to be traced: what the span says.
#[derive(Debug, Clone)]
pub struct TracedXfer {
    pub op: XferOp,
    pub descriptors: usize,
    pub bytes: u64,
    pub backend: Option<String>,
    pub peer: String,
    pub posted: Option<Instant>,
    pub ended: Instant,
    /// `None`: still in flight (a stall).
    pub outcome: Option<XferOutcome>,
    pub reason: Option<Reason>,
    pub message: Option<String>,
    pub stalled: bool,
    pub stage: &'static str,
    /// The memory types of the local and remote descriptors.
    pub mem: (Option<MemType>, Option<MemType>),
}

impl Transfers {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn trace(
        &mut self,
        m: &Moves,
        posted: Option<Instant>,
        at: Instant,
        outcome: XferOutcome,
        failure: Option<&Failure>,
        stalled: bool,
        stage: &'static str,
    ) {
        self.traced.push(TracedXfer {
            op: m.op,
            descriptors: m.descriptors,
            bytes: m.bytes,
            backend: m.backend.as_deref().map(str::to_string),
            peer: m.peer.to_string(),
            posted,
            ended: at,
            outcome: Some(outcome),
            reason: failure.map(|f| f.reason),
            message: failure.map(|f| f.message.clone()),
            stalled,
            stage,
            mem: m.mem,
        });
    }

    /// The watchdog's tick: stalls counted once, ages refreshed.
    pub fn tick(&mut self, at: Instant, stall_after: Duration) {
        let mut oldest = [Duration::ZERO; 2];
        for f in self.flights.values_mut() {
            let m = &f.moves;
            let age = at.saturating_duration_since(f.posted);
            let i = m.op.index();
            oldest[i] = oldest[i].max(age);
            if !f.stalled && age > stall_after {
                f.stalled = true;
                let c = &mut self.counts.ops[i];
                c.stalled += 1;
                c.stalled_in_flight += 1;
                self.traced.push(TracedXfer {
                    op: m.op,
                    descriptors: m.descriptors,
                    bytes: m.bytes,
                    backend: m.backend.as_deref().map(str::to_string),
                    peer: m.peer.to_string(),
                    posted: Some(f.posted),
                    ended: at,
                    outcome: None,
                    reason: None,
                    message: Some(format!(
                        "in flight for {:.1} s (stall threshold {stall_after:?})",
                        age.as_secs_f64()
                    )),
                    stalled: true,
                    stage: "stall",
                    mem: m.mem,
                });
            }
        }
        for (c, o) in self.counts.ops.iter_mut().zip(oldest) {
            c.oldest_seconds = if c.in_flight == 0 { 0.0 } else { o.as_secs_f64() };
        }
    }
}
