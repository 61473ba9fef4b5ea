//! The node canary's data-path probe: on every `probe_interval`, half an
//! interval after the registrations (so the two never overlap, and what
//! UCX prints during one is not taken for the other's), a loopback round between two NIXL agents of its own
//! (WRITE and READ, 4 KiB and 1 MiB, compared byte for byte), recorded as
//! one `Event::ProbeTransfer` — so a node whose data path breaks is seen
//! before a request lands on it.
//!
//! The endpoints are opened at the first round and kept (creating a UCX
//! backend costs about half a second of CPU); after a failed round they
//! are closed and opened again at the next. The transfers themselves go
//! through observe mode's recording in a recording of their own (the
//! canary's /metrics shows rounds, not KV traffic). Nothing runs between
//! rounds: neither agent has a progress thread.

use crate::datapath::{Loopback, Round, Side};
use crate::event::{Event, ProbeRound};
use crate::model::MemType;
use crate::observe::{ObserveSettings, Observer};
use crate::record::Recorder;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the idle thread looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// The probe thread and the way to tick it.
pub struct Canary {
    tick: Option<SyncSender<()>>,
    /// Its own stop: joining never waits for the probe task to let go of
    /// its ticker (a runtime being dropped may never run that task again).
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Canary {
    /// Starts the thread (`nixl-canary-xfer`); rounds use `backend`. Call
    /// only after NIXL is loaded.
    pub fn spawn(rec: Recorder, backend: String) -> std::io::Result<Canary> {
        let (tx, rx) = sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nixl-canary-xfer".into())
            .spawn(move || {
                // Its transfers are recorded here, not by an interposer.
                nixl_agent_sys::interpose::quiet_thread();
                rounds(rec, &backend, rx, &stopped)
            })?;
        Ok(Canary {
            tick: Some(tx),
            stop,
            thread: Some(thread),
        })
    }

    /// A handle the probe task ticks with.
    pub fn ticker(&self) -> Option<SyncSender<()>> {
        self.tick.clone()
    }
}

/// Asks for a round; one already waiting is enough (rounds never pile up
/// behind a slow one), and a stopped canary asks for nothing.
pub fn tick(t: &SyncSender<()>) {
    let _ = t.try_send(());
}

impl Drop for Canary {
    /// Stops after the round in progress (each transfer is bounded by the
    /// round's timeout) and waits, so no NIXL agent outlives the handle.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.tick.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn rounds(rec: Recorder, backend: &str, ticks: Receiver<()>, stop: &AtomicBool) {
    let observer = Observer::new(ObserveSettings::default());
    let dram = Side {
        mem_type: MemType::Dram,
        device: 0,
    };
    let prefix = format!("nixl-canary-{}", std::process::id());
    let mut open: Option<Loopback> = None;
    loop {
        match ticks.recv_timeout(STOP_POLL) {
            Ok(()) if !stop.load(Ordering::Relaxed) => {}
            Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::Relaxed) => continue,
            // Stopped (a tick already queued is not run) or every ticker gone.
            _ => return,
        }
        let t0 = Instant::now();
        let result = match open.take() {
            Some(lb) => Ok(lb),
            None => Loopback::open(&observer, &prefix, backend, dram, dram, &Round::CANARY),
        };
        let (failure, bytes_per_second) = match result {
            Err(f) => (Some(f), [0.0; 2]),
            Ok(mut lb) => {
                let r = lb.round(&Round::CANARY);
                let mut bps = [0.0; 2];
                for m in r.measured.iter().filter(|m| m.bytes as usize == Round::CANARY.large) {
                    bps[m.op.index()] = m.bytes_per_second;
                }
                if r.failure.is_none() {
                    open = Some(lb);
                }
                (r.failure, bps)
            }
        };
        rec.emit(&Event::ProbeTransfer(&ProbeRound {
            failure,
            bytes_per_second,
            elapsed: t0.elapsed(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Failure, Reason};
    use crate::status::NixlStatus;
    use crate::telemetry::exposition::Format;
    use crate::telemetry::metrics::BuildInfo;

    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Freshness: the interval from the round thread's start, the time of
    /// the last round that ended (ok or not) from the first round — what
    /// NixlCanaryRoundsStopped compares.
    #[test]
    fn each_round_that_ends_stamps_its_time() {
        let rec = Recorder::new(&BuildInfo::current(None), NixlStatus::default(), Instant::now());
        let text = rec.metrics().encode(Format::Text);
        assert_eq!(
            sample(&text, "nixl_agent_probe_interval_seconds"),
            None,
            "not a canary yet"
        );
        rec.emit(&Event::CanaryStarted(crate::event::CanaryStarted {
            interval: Duration::from_secs(60),
        }));
        let text = rec.metrics().encode(Format::Text);
        assert_eq!(sample(&text, "nixl_agent_probe_interval_seconds"), Some(60.0));
        assert_eq!(sample(&text, "nixl_agent_probe_transfer_up"), None, "no round yet");
        assert_eq!(
            sample(&text, "nixl_agent_probe_transfer_last_round_timestamp_seconds"),
            None
        );
        let probe = rec.ledger().snapshot().probe.clone().expect("a canary");
        assert_eq!((probe.up, probe.last_round_unix_seconds), (None, None));

        for failure in [
            None,
            Some(Failure::new(Reason::Timeout, "a transfer stayed in progress")),
        ] {
            let before = crate::ledger::counts::unix_now();
            rec.emit(&Event::ProbeTransfer(&ProbeRound {
                failure: failure.clone(),
                bytes_per_second: [0.0; 2],
                elapsed: Duration::from_millis(3),
            }));
            let text = rec.metrics().encode(Format::Text);
            let stamp = sample(&text, "nixl_agent_probe_transfer_last_round_timestamp_seconds").expect("stamped");
            assert!(stamp >= before && stamp <= crate::ledger::counts::unix_now(), "{stamp}");
            let up = if failure.is_none() { 1.0 } else { 0.0 };
            assert_eq!(sample(&text, "nixl_agent_probe_transfer_up"), Some(up));
            let probe = rec.ledger().snapshot().probe.clone().unwrap();
            let said = probe.last_round_unix_seconds.expect("/v1/status says it too");
            assert!((said - stamp).abs() < 1e-3, "{said} vs {stamp}");
            assert_eq!(probe.interval_seconds, 60.0);
        }
    }
}
