//! `check --serve ADDR` / `check --peer ADDR`: can two nodes move bytes
//! through NIXL at all? Each side opens one NIXL endpoint; they swap
//! metadata and buffer addresses over a TCP stream of their own (JSON
//! lines, every read and write bounded by the deadline), then each runs
//! the loopback's round against the other — WRITEs proven by the side they
//! landed on, READs by the side that asked — and both print both sides'
//! figures and transports. Nothing stays registered either way.

use super::transfer::{attribute, TransferCheck, TransportSeen};
use super::{CheckOutcome, PeerRole, StepLines};
use crate::datapath::{self, Measured, Round, Side};
use crate::datapath::{Endpoint, RemoteBuffer};
use crate::model::{Failure, MemType, Reason};
use crate::nixl::StderrTap;
use crate::observe::{ObserveSettings, Observer};
use crate::plan::Plan;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Longest message line accepted from a peer (metadata is a few KiB).
const MAX_LINE: usize = 1 << 20;
/// The exchange's own version: both sides must speak the same.
const PROTOCOL: u32 = 1;

/// One direction of the peer check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerSide {
    /// "this node → peer" or "peer → this node".
    pub who: String,
    pub measured: Vec<Measured>,
    pub transports: Vec<TransportSeen>,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeerCheck {
    /// "serve" or "peer".
    pub role: &'static str,
    pub address: SocketAddr,
    pub outcome: CheckOutcome,
    pub seconds: f64,
    pub mem_type: MemType,
    pub peer_agent: Option<String>,
    pub sides: Vec<PeerSide>,
    pub finding: Option<String>,
    pub reason: Option<Reason>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Msg {
    Hello {
        protocol: u32,
        /// Hex of the NIXL agent's metadata.
        metadata: String,
        buffer: RemoteBuffer,
        large: usize,
    },
    /// The sender's round to the receiver ended; the receiver checks the
    /// WRITEs landed.
    Done { side: PeerSide },
    /// Whether the WRITEs of the receiver's round landed intact.
    Verified { ok: bool },
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    s.len()
        .is_multiple_of(2)
        .then(|| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .flatten()
}

struct Wire {
    read: BufReader<TcpStream>,
    write: TcpStream,
    deadline: Instant,
}

fn left(deadline: Instant) -> Result<Duration, Failure> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(Failure::new(Reason::Timeout, "the peer check ran out of time"))
    } else {
        Ok(d)
    }
}

impl Wire {
    fn new(s: TcpStream, deadline: Instant) -> Result<Wire, Failure> {
        let read = s
            .try_clone()
            .map_err(|e| Failure::new(Reason::Unknown, format!("socket: {e}")))?;
        Ok(Wire {
            read: BufReader::new(read),
            write: s,
            deadline,
        })
    }

    fn send(&mut self, m: &Msg) -> Result<(), Failure> {
        let _ = self.write.set_write_timeout(Some(left(self.deadline)?));
        let mut line = serde_json::to_vec(m).expect("messages serialize");
        line.push(b'\n');
        self.write
            .write_all(&line)
            .map_err(|e| Failure::new(Reason::PeerLost, format!("sending to the peer: {e}")))
    }

    fn recv(&mut self) -> Result<Msg, Failure> {
        let _ = self.read.get_ref().set_read_timeout(Some(left(self.deadline)?));
        let mut line = Vec::new();
        let n = Read::by_ref(&mut self.read)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    Failure::new(Reason::Timeout, "the peer did not answer in time")
                }
                _ => Failure::new(Reason::PeerLost, format!("reading from the peer: {e}")),
            })?;
        if n == 0 {
            return Err(Failure::new(Reason::PeerLost, "the peer closed the connection"));
        }
        serde_json::from_slice(&line).map_err(|e| {
            Failure::new(
                Reason::NixlInvalidParam,
                format!("the peer sent something that is not a check message: {e}"),
            )
        })
    }
}

fn connect(role: PeerRole, deadline: Instant) -> Result<TcpStream, Failure> {
    match role {
        PeerRole::Serve(addr) => {
            let l =
                TcpListener::bind(addr).map_err(|e| Failure::new(Reason::Unknown, format!("binding {addr}: {e}")))?;
            l.set_nonblocking(true)
                .map_err(|e| Failure::new(Reason::Unknown, format!("{addr}: {e}")))?;
            loop {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        return Ok(s);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        left(deadline).map_err(|_| {
                            Failure::new(Reason::Timeout, format!("no peer connected to {addr} in time"))
                        })?;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(Failure::new(Reason::Unknown, format!("accepting on {addr}: {e}"))),
                }
            }
        }
        PeerRole::Connect(addr) => loop {
            // The serving side may not be up yet: try again until the deadline.
            let wait =
                left(deadline).map_err(|_| Failure::new(Reason::Timeout, format!("could not reach {addr} in time")))?;
            match TcpStream::connect_timeout(&addr, wait.min(Duration::from_secs(2))) {
                Ok(s) => return Ok(s),
                Err(_) => std::thread::sleep(Duration::from_millis(200).min(wait)),
            }
        },
    }
}

/// Runs this side of the peer check.
pub fn run(
    role: PeerRole,
    timeout: Duration,
    plan: &Plan,
    nixl_up: bool,
    cuda_devices: usize,
    tap: Option<&StderrTap>,
    progress: &mut StepLines,
) -> PeerCheck {
    let vram = plan.groups.iter().any(|g| g.mem_type == MemType::Vram) && cuda_devices > 0;
    let (role_word, address) = match role {
        PeerRole::Serve(a) => ("serve", a),
        PeerRole::Connect(a) => ("peer", a),
    };
    let mut c = PeerCheck {
        role: role_word,
        address,
        outcome: CheckOutcome::Ok,
        seconds: 0.0,
        mem_type: if vram { MemType::Vram } else { MemType::Dram },
        peer_agent: None,
        sides: vec![],
        finding: None,
        reason: None,
        error: None,
    };
    let t0 = Instant::now();
    let result = if nixl_up {
        exchange(role, Instant::now() + timeout, c.mem_type, tap, &mut c, progress)
    } else {
        Err(Failure::new(Reason::NixlUnavailable, "NIXL runtime unavailable"))
    };
    c.seconds = t0.elapsed().as_secs_f64();
    if let Err(f) = result {
        c.outcome = CheckOutcome::Fail;
        c.reason = Some(f.reason);
        c.error = Some(f.message);
    }
    c
}

fn exchange(
    role: PeerRole,
    deadline: Instant,
    mem_type: MemType,
    tap: Option<&StderrTap>,
    c: &mut PeerCheck,
    progress: &mut StepLines,
) -> Result<(), Failure> {
    let round = Round::CHECK;
    // Unique on both nodes (pids may coincide across them) and short: UCX
    // titles its tables with the worker's name, which NIXL takes from it.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        & 0xff_ffff;
    let name = format!("nixl-check-{}-{nonce:06x}", std::process::id());
    let observer = Observer::new(ObserveSettings::default());
    // NIXL's progress thread on: the peer's transfers into this buffer
    // progress while this side waits on the exchange.
    let mut ep = Endpoint::open(&observer, &name, "UCX", mem_type, 0, round.buffer_len(), true)?;
    datapath::prepare_target(&mut ep, &round)?;
    if let PeerRole::Serve(a) = role {
        progress.note(&format!("waiting for `nixl-agent check --peer {a}`"));
    }
    let mut wire = Wire::new(connect(role, deadline)?, deadline)?;
    let hello = Msg::Hello {
        protocol: PROTOCOL,
        metadata: hex(&ep.metadata()?),
        buffer: ep.buffer(),
        large: round.large,
    };
    let theirs = match role {
        PeerRole::Connect(_) => {
            wire.send(&hello)?;
            wire.recv()?
        }
        PeerRole::Serve(_) => {
            let m = wire.recv()?;
            wire.send(&hello)?;
            m
        }
    };
    let Msg::Hello {
        protocol,
        metadata,
        buffer,
        large,
    } = theirs
    else {
        return Err(Failure::new(
            Reason::NixlInvalidParam,
            "the peer did not start with its metadata",
        ));
    };
    if protocol != PROTOCOL || large != round.large {
        return Err(Failure::new(
            Reason::NixlInvalidParam,
            format!(
                "the peer speaks check protocol {protocol} with {large}-byte transfers; this side {PROTOCOL} with {}",
                round.large
            ),
        ));
    }
    let md =
        unhex(&metadata).ok_or_else(|| Failure::new(Reason::NixlInvalidParam, "the peer's metadata is not hex"))?;
    let peer = ep.add_peer(&md)?;
    c.peer_agent = Some(peer.clone());
    let remote = RemoteBuffer { agent: peer, ..buffer };

    // The connecting side goes first, then the serving side.
    let first = matches!(role, PeerRole::Connect(_));
    for mine in [first, !first] {
        let (side, ok) = if mine {
            // No transfer may outlast the peer check's deadline.
            let bounded = Round {
                timeout: round.timeout.min(left(deadline)?),
                ..round
            };
            let side = own_round(&mut ep, &remote, &bounded, tap, &name, mem_type, buffer_side(&remote));
            // The source of this side's WRITEs is where the peer's land:
            // cleared, so the peer's cannot pass on bytes already there.
            ep.fill(0, &vec![0u8; round.large])?;
            wire.send(&Msg::Done { side: side.clone() })?;
            match wire.recv()? {
                Msg::Verified { ok } => (side, ok),
                _ => return Err(unexpected("the peer did not say whether the WRITEs landed")),
            }
        } else {
            let Msg::Done { mut side } = wire.recv()? else {
                return Err(unexpected("the peer did not report its round"));
            };
            let landed = if side.error.is_none() {
                datapath::written(&ep, round.large)
            } else {
                Ok(false)
            };
            // The peer hears the verdict even when reading it back failed.
            wire.send(&Msg::Verified {
                ok: *landed.as_ref().unwrap_or(&false),
            })?;
            let ok = landed?;
            side.who = "peer → this node".into();
            (side, ok)
        };
        record(c, side, ok)?;
    }
    Ok(())
}

/// The first fall-back among the directions' transports, as the peer
/// check's finding (a warning); `rdma_devices`: the host check's reading.
pub fn judge(c: &mut PeerCheck, rdma_devices: bool) {
    c.finding = c.sides.iter().find_map(|s| {
        let t = as_check(s, c.mem_type);
        super::transfer::fallback(&t, rdma_devices).map(|f| format!("{}: {f}", s.who))
    });
    if c.finding.is_some() && c.outcome == CheckOutcome::Ok {
        c.outcome = CheckOutcome::Warn;
    }
}

fn unexpected(what: &str) -> Failure {
    Failure::new(Reason::NixlInvalidParam, what)
}

/// Keeps one direction's result, its WRITEs marked as the landing side
/// found them; its failure, or bytes that differ, end the check.
fn record(c: &mut PeerCheck, mut side: PeerSide, ok: bool) -> Result<(), Failure> {
    for m in side.measured.iter_mut().filter(|m| m.op == crate::model::XferOp::Write) {
        m.verified = ok;
    }
    let who = side.who.clone();
    let failed = side.error.clone().map(|e| (side.reason.unwrap_or(Reason::Unknown), e));
    c.sides.push(side);
    match failed {
        Some((reason, e)) => Err(Failure::new(reason, format!("{who}: {e}"))),
        None if !ok => Err(Failure::new(
            Reason::Unknown,
            format!("{who}: the WRITEs completed but the bytes that landed differ"),
        )),
        None => Ok(()),
    }
}

fn buffer_side(r: &RemoteBuffer) -> Side {
    Side {
        mem_type: r.mem_type,
        device: r.device,
    }
}

/// This side's round to the peer, with the transports UCX printed for it.
fn own_round(
    ep: &mut Endpoint,
    remote: &RemoteBuffer,
    round: &Round,
    tap: Option<&StderrTap>,
    name: &str,
    mem_type: MemType,
    to: Side,
) -> PeerSide {
    let r = datapath::run(ep, remote, None, round);
    let mut t = TransferCheck::blank(name, Side { mem_type, device: 0 }, to);
    if let Some(tap) = tap {
        let tables = crate::diagnose::proto::parse(&tap.protocol_tables());
        attribute(std::slice::from_mut(&mut t), &tables, false);
    }
    PeerSide {
        who: "this node → peer".into(),
        measured: r.measured,
        transports: t.transports,
        reason: r.failure.as_ref().map(|f| f.reason),
        error: r.failure.map(|f| f.message),
    }
}

fn as_check(s: &PeerSide, mem_type: MemType) -> TransferCheck {
    let side = Side { mem_type, device: 0 };
    let mut t = TransferCheck::blank("", side, side);
    t.transports = s.transports.clone();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_survives_hex() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }

    #[test]
    fn messages_are_one_json_line_each() {
        let m = Msg::Verified { ok: true };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(s, r#"{"type":"verified","ok":true}"#);
        assert!(matches!(
            serde_json::from_str::<Msg>(&s).unwrap(),
            Msg::Verified { ok: true }
        ));
    }
}
