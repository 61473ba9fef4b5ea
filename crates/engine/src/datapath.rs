//! The data-path proof `check` and the node canary share: a round of
//! WRITEs and READs, small (latency) and large (bandwidth), between two
//! NIXL endpoints, compared byte for byte.
//!
//! The buffer of each endpoint has two halves: WRITEs land in the peer's
//! first half, READs fetch the peer's second half (filled beforehand with a
//! pattern both sides know) into the initiator's second half. So a WRITE
//! is proven by the side it landed on, a READ by the side that asked.

use crate::model::{Failure, MemType, Reason, XferOp};
mod endpoint;

use crate::observe::Observer;
pub use endpoint::{Endpoint, RemoteBuffer};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The NIXL backends that move memory between agents: loopback rounds run
/// on these only (POSIX, GDS and object stores move files).
pub const MEMORY_BACKENDS: &[&str] = &["UCX", "LIBFABRIC", "UCCL", "MOONCAKE"];

/// Sizes and repetitions of one round.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// The small transfer (latency): a page.
    pub small: usize,
    pub small_reps: u32,
    /// The large transfer (bandwidth).
    pub large: usize,
    pub large_reps: u32,
    /// The most one transfer may take.
    pub timeout: Duration,
}

impl Round {
    /// `check`'s round: 4 KiB × 16 and 16 MiB × 3 each way.
    pub const CHECK: Round = Round {
        small: 4 << 10,
        small_reps: 16,
        large: 16 << 20,
        large_reps: 3,
        timeout: Duration::from_secs(10),
    };

    /// The canary's round, every probe interval: 4 KiB × 4, 1 MiB × 1.
    pub const CANARY: Round = Round {
        small: 4 << 10,
        small_reps: 4,
        large: 1 << 20,
        large_reps: 1,
        timeout: Duration::from_secs(10),
    };

    /// Bytes each endpoint's buffer needs.
    pub const fn buffer_len(&self) -> usize {
        2 * self.large
    }
}

/// One size of one operation, measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub op: XferOp,
    pub bytes: u64,
    pub reps: u32,
    /// Median time from post to completion.
    pub seconds: f64,
    pub bytes_per_second: f64,
    /// The bytes were compared and equal (a WRITE's by the side they
    /// landed on).
    pub verified: bool,
}

/// What a round did: each measurement, and the failure that stopped it.
#[derive(Debug, Clone, Default)]
pub struct RoundResult {
    pub measured: Vec<Measured>,
    pub failure: Option<Failure>,
}

/// A deterministic byte pattern (never all zeros, distinct per seed).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// Seeds of what an initiator WRITEs and what its target serves to READs.
pub const WRITE_SEED: u8 = 0x5a;
pub const READ_SEED: u8 = 0xa5;

/// Fills the second half of a target's buffer with what READs expect.
pub fn prepare_target(target: &mut Endpoint, round: &Round) -> Result<(), Failure> {
    target.fill(round.large, &pattern(round.large, READ_SEED))
}

/// Whether the first `len` bytes of the target's first half hold the
/// initiator's WRITE pattern.
pub fn written(target: &Endpoint, len: usize) -> Result<bool, Failure> {
    Ok(target.read(0, len)? == pattern(len, WRITE_SEED))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Runs one round from `initiator` to `remote` (prepared with
/// [`prepare_target`]). `local_target`, when the target is in this
/// process, verifies WRITEs and is progressed while polling; otherwise a
/// WRITE's `verified` is left false for the peer to confirm.
pub fn run(
    initiator: &mut Endpoint,
    remote: &RemoteBuffer,
    local_target: Option<&Endpoint>,
    round: &Round,
) -> RoundResult {
    let mut out = RoundResult::default();
    if let Err(f) = initiator.fill(0, &pattern(round.large, WRITE_SEED)) {
        out.failure = Some(f);
        return out;
    }
    for op in [XferOp::Write, XferOp::Read] {
        for (len, reps) in [(round.small, round.small_reps), (round.large, round.large_reps)] {
            match measure(initiator, remote, local_target, round, op, len, reps) {
                Ok(m) => out.measured.push(m),
                Err(f) => {
                    out.failure = Some(f);
                    return out;
                }
            }
        }
    }
    out
}

fn measure(
    initiator: &mut Endpoint,
    remote: &RemoteBuffer,
    local_target: Option<&Endpoint>,
    round: &Round,
    op: XferOp,
    len: usize,
    reps: u32,
) -> Result<Measured, Failure> {
    // WRITE: local first half → remote first half; READ: remote second
    // half → local second half (cleared first, so stale bytes cannot pass).
    let (local_off, remote_off) = match op {
        XferOp::Write => (0, 0),
        XferOp::Read => (round.large, round.large),
    };
    if op == XferOp::Read {
        initiator.fill(local_off, &vec![0u8; len])?;
    }
    let mut times = Vec::with_capacity(reps as usize);
    for _ in 0..reps.max(1) {
        times.push(initiator.transfer(op, local_off, len, remote, remote_off, round.timeout, local_target)?);
    }
    let verified = match (op, local_target) {
        (XferOp::Read, _) => initiator.read(local_off, len)? == pattern(len, READ_SEED),
        (XferOp::Write, Some(t)) => written(t, len)?,
        (XferOp::Write, None) => false,
    };
    if !verified && (op == XferOp::Read || local_target.is_some()) {
        return Err(Failure::new(
            Reason::Unknown,
            format!("{} of {len} bytes completed but the bytes differ", op.as_str()),
        ));
    }
    let t = median(times).as_secs_f64();
    Ok(Measured {
        op,
        bytes: len as u64,
        reps: reps.max(1),
        seconds: t,
        bytes_per_second: if t > 0.0 { len as f64 / t } else { 0.0 },
        verified,
    })
}

/// Two endpoints in this process, for a loopback round.
pub struct Loopback {
    initiator: Endpoint,
    target: Endpoint,
    remote: RemoteBuffer,
}

/// Where each side of a loopback lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    pub mem_type: MemType,
    pub device: u32,
}

impl Loopback {
    /// Opens both endpoints (named `{prefix}-a`, `{prefix}-b`) with
    /// `backend`, registers their buffers and introduces the initiator to
    /// the target. Neither has a progress thread: polling progresses both.
    pub fn open(
        observer: &Observer,
        prefix: &str,
        backend: &str,
        from: Side,
        to: Side,
        round: &Round,
    ) -> Result<Loopback, Failure> {
        let len = round.buffer_len();
        // Creating a UCX backend takes about half a second: both at once.
        let (a, b) = std::thread::scope(|s| {
            let b = s.spawn(|| Endpoint::agent(&format!("{prefix}-b"), backend, false));
            let a = Endpoint::agent(&format!("{prefix}-a"), backend, false);
            (
                a,
                b.join()
                    .unwrap_or_else(|_| Err(Failure::new(Reason::Unknown, "creating the target agent panicked"))),
            )
        });
        let ((agent_a, backend_a), (agent_b, backend_b)) = (a?, b?);
        let mut initiator = Endpoint::on(observer, agent_a, backend_a, from.mem_type, from.device, len)?;
        let mut target = Endpoint::on(observer, agent_b, backend_b, to.mem_type, to.device, len)?;
        prepare_target(&mut target, round)?;
        let name = initiator.add_peer(&target.metadata()?)?;
        let remote = RemoteBuffer {
            agent: name,
            ..target.buffer()
        };
        Ok(Loopback {
            initiator,
            target,
            remote,
        })
    }

    /// One round, target cleared first so each WRITE proves itself anew.
    pub fn round(&mut self, round: &Round) -> RoundResult {
        if let Err(f) = self.target.fill(0, &vec![0u8; round.large]) {
            return RoundResult {
                measured: vec![],
                failure: Some(f),
            };
        }
        run(&mut self.initiator, &self.remote, Some(&self.target), round)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_are_never_blank() {
        let a = pattern(4096, WRITE_SEED);
        assert_ne!(a, pattern(4096, READ_SEED));
        assert!(a.iter().any(|b| *b != 0));
        assert_ne!(a[..256], a[256..512], "a shifted copy would not pass");
    }

    #[test]
    fn rounds_fit_their_buffers() {
        for r in [
            Round::CANARY,
            Round {
                large: 16 << 20,
                ..Round::CANARY
            },
        ] {
            assert!(r.small <= r.large);
            assert_eq!(r.buffer_len(), 2 * r.large);
        }
    }
}
