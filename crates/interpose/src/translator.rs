//! The interposer's [`CallSink`]: what NIXL was given and returned, described
//! to the process's [`Observer`] — the recording path every front-end uses.
//! Started with the gate's verdict (the first `nixlAgent` call of the
//! process) from `NIXL_AGENT_*`, as an instrumented Python process is.
//!
//! NIXL's handles (agents, backends, requests, prepared lists) are its
//! pointers; each is mapped here to the identity the recording knows it by,
//! and forgotten when NIXL releases it (NIXL reuses the addresses).
//! Nothing here panics out: every call of the sink runs under
//! `catch_unwind`, and a panic is counted as an instrumentation failure.

use crate::naming::{Counted, Naming};
use nixl_agent_core::event::CallKind;
use nixl_agent_core::model::{
    AgentId, BlockLens, Failure, Hooked, InterposerStatus, Kind, MemType, NotifDirection, PeerOp, Region, XferOp,
};
use nixl_agent_engine::observe::{Call, CallMark, LocalCallMark, Observer, Outcome, Pending, Transfer, XferPoll};
use nixl_agent_instrument::{Instrumentation, Settings};
use nixl_agent_sys::interpose::{status, BasicDesc, CallSink, Facts, List, Out, Sym, Verdict};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

/// The prefix of the interposer's lines on the program's stderr.
pub const SAID_BY: &str = "nixl-agent interposer";

/// The process's translator: empty until the gate decided, then started (or
/// not, when the gate refused or the settings are unusable).
///
/// A child forked after that inherits an instrumentation whose threads did
/// not survive the fork (its server, publisher, watchdogs): the parent's
/// listening socket, rank slot lock and fd tap were let go of at the fork
/// (`nixl_agent_sys::interpose::fork`), and it starts a recording of its
/// own only at its own first hooked NIXL call, as an instrumented Python
/// child does: a child that never calls NIXL claims no slot, publishes
/// nothing and writes no end record. The process that started first reads
/// a `OnceLock` and nothing else.
#[derive(Default)]
pub struct Translator {
    running: OnceLock<Option<Running>>,
    /// In a forked child: its own, by the fork count it was started at.
    child: Mutex<Option<(u64, Option<Arc<Running>>)>>,
}

/// The instrumentation a call is recorded on.
enum Current<'a> {
    Started(&'a Running),
    Child(Arc<Running>),
}

impl std::ops::Deref for Current<'_> {
    type Target = Running;

    fn deref(&self) -> &Running {
        match self {
            Current::Started(r) => r,
            Current::Child(r) => r,
        }
    }
}

struct Running {
    /// Calls are recorded (else the instrumentation serves the refusal).
    recording: bool,
    inst: Instrumentation,
    naming: Naming,
    /// NIXL agent object → its identity in the recording.
    agents: RwLock<HashMap<usize, AgentId>>,
    /// NIXL request → the serial the recording knows it by, and whether
    /// its last posting was seen to end.
    requests: Mutex<HashMap<usize, Arc<Request>, Pointers>>,
    /// Prepared descriptor lists: NIXL's handle → what they describe.
    prepped: Mutex<HashMap<usize, Prepped>>,
}

/// A request NIXL made, as the recording knows it.
pub struct Request {
    serial: u64,
    /// Where its last posting stands ([`Posting`]'s words, with a status a
    /// poll handed over): the post's thread and any poll's agree through it
    /// on who records the posting's end, once.
    posting: AtomicU32,
    /// NIXL released it (or made another at its address): a thread's
    /// [`LAST_POSTED`] naming it is stale.
    gone: AtomicBool,
}

/// A posting not seen to end (a request never posted, or one whose post
/// said it is in progress): the poll that sees it end records the end.
const OPEN: u32 = 0;
/// A post call is running (what it returns says how the posting stands),
/// or the last one ended within the call and recorded its own end.
const POSTING: u32 = 1;
/// The posting was seen to end and its end recorded.
const ENDED: u32 = 2;
/// A poll on another thread saw the posting end while the post call was
/// still running; its status (in the upper bits) is handed to the post's
/// thread, which records the post, then that end, in their order.
const POLLED: u32 = 3;

impl Request {
    /// A post call of it begins.
    fn post_begins(&self) {
        self.posting.store(POSTING, Ordering::Relaxed);
    }

    /// Its post returned `st`: `Some(status)` when a poll saw the posting
    /// end meanwhile and handed its status over (to be recorded after the
    /// post, which returned in progress).
    fn post_returned(&self, st: i32) -> Option<i32> {
        if st != status::IN_PROG {
            // The post's own end is the one recorded; a poll's handed
            // status, if any, is the same ending seen twice.
            self.posting.store(ENDED, Ordering::Relaxed);
            return None;
        }
        match self
            .posting
            .compare_exchange(POSTING, OPEN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => None,
            Err(now) if now & 0xff == POLLED => {
                self.posting.store(ENDED, Ordering::Relaxed);
                Some((now >> 8) as u8 as i8 as i32)
            }
            // No post began as this thread's says (another thread posted
            // it again): nothing to hand over.
            Err(_) => None,
        }
    }

    /// A poll saw the posting end with `st`: `true` when this poll records
    /// the end (the first to see it, with no post call running); a post
    /// call running is handed the status instead.
    fn poll_ended(&self, st: i32) -> bool {
        let mut now = self.posting.load(Ordering::Acquire);
        loop {
            let next = match now & 0xff {
                OPEN => ENDED,
                POSTING => POLLED | (u32::from(st as i8 as u8) << 8),
                _ => return false,
            };
            match self
                .posting
                .compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return now & 0xff == OPEN,
                Err(seen) => now = seen,
            }
        }
    }

    fn new(serial: u64) -> Request {
        Request {
            serial,
            posting: AtomicU32::new(OPEN),
            gone: AtomicBool::new(false),
        }
    }
}

thread_local! {
    /// The request this thread posted last, with the instrumentation it
    /// was recorded on (its address and the fork count): reposting it,
    /// the data path's loop, looks up nothing and takes no lock.
    static LAST_POSTED: std::cell::RefCell<Option<Posted>> = const { std::cell::RefCell::new(None) };
}

thread_local! {
    /// A registration's regions, kept between the thread's calls.
    static SPARE_REGIONS: std::cell::RefCell<Vec<Region>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most regions [`SPARE_REGIONS`] keeps room for (1.5 MiB).
const SPARE_REGIONS_KEPT: usize = 1 << 16;

/// [`LAST_POSTED`]'s entry.
struct Posted {
    running: usize,
    forks: u64,
    handle: usize,
    request: Arc<Request>,
}

impl Posted {
    /// It is `req` as the instrumentation `(running, forks)` knows it now.
    fn names(&self, req: usize, running: usize, forks: u64) -> bool {
        self.handle == req
            && self.running == running
            && self.forks == forks
            && !self.request.gone.load(Ordering::Acquire)
    }
}

/// Hashing NIXL's pointers: distinct by construction, so the post and poll
/// path hashes with one multiply (no SipHash).
#[derive(Default, Clone, Copy)]
struct Pointers;

impl std::hash::BuildHasher for Pointers {
    type Hasher = PointerHasher;

    fn build_hasher(&self) -> PointerHasher {
        PointerHasher(0)
    }
}

#[derive(Default)]
struct PointerHasher(u64);

impl std::hash::Hasher for PointerHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 ^ (n as u64 >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A list `prepXferDlist` prepared: its peer, memory type and each block's
/// length (a transfer made from it moves the indexed ones).
struct Prepped {
    peer: String,
    mem: Option<MemType>,
    lens: BlockLens,
}

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// What `begin` hands to `end`.
pub enum Token {
    /// Nothing to record when the call ends.
    None,
    Agent {
        name: String,
    },
    Backend {
        agent: AgentId,
        plugin: String,
        t0: Instant,
    },
    Register(Box<RegisterCall>),
    Deregister {
        agent: AgentId,
        first: Region,
        descriptors: usize,
        mark: CallMark,
    },
    Create {
        agent: AgentId,
        transfer: Box<Made>,
        _mark: CallMark,
    },
    Status {
        req: usize,
    },
    Release {
        req: usize,
        request: Option<Arc<Request>>,
    },
    Prep {
        peer: String,
        mem: Option<MemType>,
        lens: BlockLens,
    },
    ReleaseDlist {
        dlist: usize,
    },
    Peer {
        agent: AgentId,
        op: PeerOp,
        peer: String,
        _mark: Option<CallMark>,
    },
    Notify {
        agent: AgentId,
        peer: String,
        heartbeat: bool,
    },
    Notifs {
        agent: AgentId,
    },
    /// A call counted by method and status, nothing more.
    Plain {
        method: Sym,
    },
}

/// A registration call begun: what `Observer::end` is told.
pub struct RegisterCall {
    agent: AgentId,
    group: String,
    kind: Kind,
    mem: MemType,
    device: u32,
    regions: Vec<Region>,
    /// What the call takes of [`Naming`]'s ordinals when NIXL registers it
    /// (`None`: named otherwise, or by no ordinal).
    counted: Option<Counted>,
    /// Taken by `Observer::end`.
    pending: Option<Pending>,
    finding: Option<nixl_agent_core::validate::Rejection>,
}

impl RegisterCall {
    fn call(&self) -> Call<'_> {
        Call {
            agent: self.agent,
            group: &self.group,
            kind: &self.kind,
            mem_type: self.mem,
            device: self.device,
            backends: None,
            regions: &self.regions,
        }
    }
}

/// A transfer request about to be made: what `Transfer` says of it.
pub struct Made {
    op: XferOp,
    descriptors: usize,
    bytes: u64,
    local: Option<MemType>,
    remote: Option<MemType>,
    peer: String,
}

fn mem_of(raw: i32) -> Option<MemType> {
    match raw {
        nixl_agent_sys::interpose::layout::DRAM_SEG => Some(MemType::Dram),
        nixl_agent_sys::interpose::layout::VRAM_SEG => Some(MemType::Vram),
        _ => None,
    }
}

fn op_of(raw: i32) -> XferOp {
    // NIXL_READ = 0, NIXL_WRITE = 1.
    if raw == 0 {
        XferOp::Read
    } else {
        XferOp::Write
    }
}

/// The status a call NIXL threw out of ends with: none of NIXL's (never
/// success nor in progress), its reason `unknown` (the C++ exception
/// cannot be read here), as the Python front-end's for an exception it
/// does not know.
const THREW: i32 = i32::MIN;

fn failure(code: i32, data_path: bool) -> Failure {
    Failure::new(status::reason(code, data_path), said(code))
}

/// What NIXL said of a failed call: its status's name, or that it threw.
fn said(code: i32) -> String {
    if code == THREW {
        "NIXL threw a C++ exception".into()
    } else {
        format!("NIXL: {}", status::name(code))
    }
}

impl Translator {
    /// The recording a hooked NIXL call is recorded on: in a forked child,
    /// its own, started now if this is its first call.
    fn running(&self) -> Option<Current<'_>> {
        let forks = nixl_agent_sys::interpose::forks();
        if forks == 0 {
            return self.running.get().and_then(Option::as_ref).map(Current::Started);
        }
        self.in_child(forks).map(Current::Child)
    }

    /// The recording this process started, if it did; never starts one (a
    /// forked child that made no NIXL call has none).
    fn started(&self) -> Option<Current<'_>> {
        let forks = nixl_agent_sys::interpose::forks();
        if forks == 0 {
            return self.running.get().and_then(Option::as_ref).map(Current::Started);
        }
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match child.as_ref() {
            Some((at, Some(r))) if *at == forks => Some(Current::Child(r.clone())),
            _ => None,
        }
    }

    /// A forked child's instrumentation, started at its first call, once
    /// per fork count. What it inherited was let go of at the fork; here
    /// it is only marked as an ancestor's (its exporter unused).
    fn in_child(&self, forks: u64) -> Option<Arc<Running>> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, r)) = child.as_ref() {
            if *at == forks {
                return r.clone();
            }
            if let Some(r) = r {
                r.inst.let_go_in_child();
            }
        } else if let Some(Some(r)) = self.running.get() {
            r.inst.let_go_in_child();
        }
        let gate = nixl_agent_sys::interpose::real::gate();
        let started = catch_unwind(AssertUnwindSafe(|| Translator::start(&gate.verdict).map(Arc::new)))
            .ok()
            .flatten();
        *child = Some((forks, started.clone()));
        started
    }

    /// The instrumentation, started with the verdict: recording, or serving
    /// the refusal (said on stderr in one line) when no front-end records
    /// instead. A Python process whose front-end is on falls back to it:
    /// it records, and reports the refusal, itself.
    fn start(verdict: &Verdict) -> Option<Running> {
        let (status, library, version) = match verdict {
            Verdict::Active { library, version } => (
                InterposerStatus {
                    recording: true,
                    refused: None,
                    blind: None,
                    fallback: None,
                },
                Some(library.as_str()),
                version.as_deref(),
            ),
            Verdict::Refused { library, why, blind } => {
                let fallback = python_front_end_on().then_some("python");
                let instead = if fallback.is_some() {
                    "; the Python front-end records instead"
                } else {
                    ""
                };
                // Said once for a process and the children it forks.
                if nixl_agent_sys::interpose::forks() == 0 {
                    eprintln!("{SAID_BY}: not recording NIXL calls: {why}{instead}");
                }
                let status = InterposerStatus {
                    recording: false,
                    refused: Some(why.clone()),
                    blind: Some(*blind),
                    fallback,
                };
                if fallback.is_some() {
                    return None;
                }
                (status, library.as_deref(), None)
            }
        };
        let settings = match Settings::from_env(&nixl_agent_core::config::ProcessEnv) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{SAID_BY}: not recording NIXL calls: {e}");
                return None;
            }
        };
        let (frameworks, rank) = PROCESS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let names: Vec<&str> = frameworks.iter().map(String::as_str).collect();
        // The first call pays for the recording only: the pod slot and the
        // port are taken beside it.
        let inst = Instrumentation::start_beside(&settings, &names, rank);
        inst.observer().interposed(&status, library, version);
        // A process that exits through `exit` ends its rank as exited
        // (`_exit`, a signal or an abort leave it to the pod: died).
        nixl_agent_sys::interpose::at_exit(exiting);
        Some(Running {
            recording: status.recording,
            naming: Naming::new(settings.groups.clone()),
            inst,
            agents: RwLock::new(HashMap::new()),
            requests: Mutex::new(HashMap::with_hasher(Pointers)),
            prepped: Mutex::new(HashMap::new()),
        })
    }
}

/// At `exit`: the rank's file gets its end record, as an instrumented Python
/// process's does at interpreter exit. A forked child inherits the handler:
/// it does nothing there unless the child started a recording of its own
/// (and never starts one).
extern "C" fn exiting() {
    let _ = catch_unwind(|| {
        if let Some(r) = crate::translator().started() {
            r.inst.end(None);
        }
    });
}

/// Whether this is a Python process whose front-end (the import hook of
/// `nixl_agent_instrument`) is on: `NIXL_AGENT_INSTRUMENT` on, or its
/// launcher's bootstrap on PYTHONPATH and the variable not off.
fn python_front_end_on() -> bool {
    use nixl_agent_instrument::{ENV_INSTRUMENT, INSTRUMENT_WORDS};
    if !nixl_agent_sys::interpose::python_in_process() {
        return false;
    }
    let v = std::env::var(ENV_INSTRUMENT)
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    // The words' first half says on, the second off.
    let (on, off) = INSTRUMENT_WORDS.split_at(INSTRUMENT_WORDS.len() / 2);
    let launched = std::env::var("PYTHONPATH").is_ok_and(|p| p.contains("nixl_agent_instrument"));
    on.contains(&v.as_str()) || (launched && !off.contains(&v.as_str()))
}

thread_local! {
    /// The group and kind a front-end handed down for this thread's next
    /// registration call.
    static HANDED_DOWN: std::cell::RefCell<Option<(String, Kind)>> = const { std::cell::RefCell::new(None) };
}

/// What a front-end handed down of the process: its serving frameworks and
/// the framework's rank, read when the instrumentation starts.
static PROCESS: Mutex<(Vec<String>, Option<u32>)> = Mutex::new((Vec::new(), None));

/// Takes a front-end's word on the process; `false` for one that is not UTF-8.
pub fn hand_down_process(frameworks: &[u8], rank: Option<u32>) -> bool {
    let Ok(f) = std::str::from_utf8(frameworks) else {
        return false;
    };
    let names = f
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    *PROCESS.lock().unwrap_or_else(|e| e.into_inner()) = (names, rank);
    true
}

/// Takes a front-end's names for this thread's next registration call;
/// `false` for words that are not UTF-8 or cannot be labels. An empty group
/// takes back what was handed down (the front-end's call is over, whether
/// or not it reached NIXL).
pub fn hand_down(group: &[u8], kind: &[u8]) -> bool {
    if group.is_empty() {
        HANDED_DOWN.with(|h| h.borrow_mut().take());
        return true;
    }
    let (Ok(group), Ok(kind)) = (std::str::from_utf8(group), std::str::from_utf8(kind)) else {
        return false;
    };
    if nixl_agent_instrument::check_group(group, kind).is_err() {
        return false;
    }
    HANDED_DOWN.with(|h| *h.borrow_mut() = Some((group.to_string(), Kind::parse(kind))));
    true
}

impl Running {
    fn observer(&self) -> &Observer {
        self.inst.observer()
    }

    fn agent(&self, this: usize) -> Option<AgentId> {
        self.agents
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&this)
            .copied()
    }

    /// `req` is being posted: its serial (`None`: a request the recording
    /// does not know), its posting marked ended (what most posts do within
    /// the call; [`Running::post_in_flight`] says otherwise). The thread's last
    /// posted request is found without the map's lock.
    fn posting(&self, req: usize) -> Option<u64> {
        let (running, forks) = self.identity();
        let looked_up = || {
            let request = self
                .requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&req)
                .cloned()?;
            request.post_begins();
            Some(request)
        };
        let cached = LAST_POSTED.try_with(|last| {
            let mut last = last.borrow_mut();
            if let Some(p) = last.as_ref().filter(|p| p.names(req, running, forks)) {
                p.request.post_begins();
                return Some(p.request.serial);
            }
            let request = looked_up()?;
            let serial = request.serial;
            *last = Some(Posted {
                running,
                forks,
                handle: req,
                request,
            });
            Some(serial)
        });
        match cached {
            Ok(serial) => serial,
            // The thread is ending: the map alone.
            Err(_) => looked_up().map(|r| r.serial),
        }
    }

    /// The post of `req` this thread just made returned `st`: the status a
    /// poll on another thread handed over meanwhile, if one did
    /// ([`Request::post_returned`]). The thread's last posted request is
    /// found without the map's lock.
    fn post_returned(&self, req: usize, st: i32) -> Option<i32> {
        let cached = LAST_POSTED
            .try_with(|last| {
                last.borrow()
                    .as_ref()
                    .filter(|p| p.handle == req)
                    .map(|p| p.request.post_returned(st))
            })
            .ok()
            .flatten();
        if let Some(handed) = cached {
            return handed;
        }
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        requests.get(&req).and_then(|r| r.post_returned(st))
    }

    /// This instrumentation as [`LAST_POSTED`] names it: its address and
    /// the fork count it runs at.
    fn identity(&self) -> (usize, u64) {
        (self as *const Running as usize, nixl_agent_sys::interpose::forks())
    }

    /// A poll saw `req`'s posting end with `st`: its serial when this poll
    /// records the end (the first to see it, with no post call running),
    /// `None` after, or for a request the recording does not know. The thread that
    /// posted a request usually polls it: its last posted one is found
    /// without the map's lock, and a posting already seen to end costs a
    /// load.
    fn ended(&self, req: usize, st: i32) -> Option<u64> {
        let first = |r: &Request| r.poll_ended(st).then_some(r.serial);
        let (running, forks) = self.identity();
        let cached = LAST_POSTED.try_with(|last| {
            last.borrow()
                .as_ref()
                .filter(|p| p.names(req, running, forks))
                .map(|p| first(&p.request))
        });
        if let Ok(Some(serial)) = cached {
            return serial;
        }
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        first(requests.get(&req)?)
    }

    fn region(d: BasicDesc) -> Region {
        Region::new(d.addr, d.len, u32::try_from(d.dev).unwrap_or(u32::MAX))
    }

    /// The list's regions, in the thread's kept buffer: a registration of
    /// thousands of descriptors allocates nothing once warm, so NIXL's own
    /// allocations around it find the heap as the program left it.
    fn regions(list: &List<'_>) -> Vec<Region> {
        let mut v = SPARE_REGIONS
            .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
            .unwrap_or_default();
        v.clear();
        v.extend(list.iter().map(Self::region));
        v
    }

    /// Gives a registration's regions back to the thread's buffer.
    fn spare(mut v: Vec<Region>) {
        // A buffer held for one huge list is let go rather than kept.
        if v.capacity() <= SPARE_REGIONS_KEPT {
            v.clear();
            let _ = SPARE_REGIONS.try_with(|s| *s.borrow_mut() = v);
        }
    }

    fn begin(&self, this: usize, facts: &Facts<'_>) -> Token {
        // What was handed down names this registration call and no later
        // one, recorded or not (a list that does not read, a file's memory).
        let handed = match facts {
            Facts::Register { .. } => HANDED_DOWN.with(|h| h.borrow_mut().take()),
            _ => None,
        };
        // The data path's calls name a request, never need the agent: they
        // look up nothing more than the request.
        match facts {
            Facts::AgentNew { name } => return Token::Agent { name: name.to_string() },
            // The poll loop's call: nothing to look up before NIXL answers.
            Facts::Status { req } => return Token::Status { req: *req },
            // Counted whatever agent it is on.
            Facts::Plain { method } => return Token::Plain { method: *method },
            // Taken out before NIXL frees it: a request NIXL makes at its
            // address on another thread meanwhile is never taken for it.
            Facts::Release { req } => {
                let request = self.requests.lock().unwrap_or_else(|e| e.into_inner()).remove(req);
                return Token::Release { req: *req, request };
            }
            _ => {}
        }
        let Some(agent) = self.agent(this) else {
            // An agent made before the interposer could see it.
            return Token::None;
        };
        let obs = self.observer();
        match *facts {
            Facts::AgentNew { .. } => Token::None,
            Facts::AgentDrop => {
                self.agents.write().unwrap_or_else(|e| e.into_inner()).remove(&this);
                self.naming.forget(agent);
                obs.agent_released(agent);
                Token::None
            }
            Facts::Backend { plugin } => Token::Backend {
                agent,
                plugin: plugin.to_string(),
                t0: Instant::now(),
            },
            Facts::Register { list } => {
                let Some((list, mem)) = list.and_then(|l| Some((l, mem_of(l.mem_type)?))) else {
                    return Token::None;
                };
                let regions = Self::regions(&list);
                let device = obs.device_of(mem, &regions);
                let (group, kind, counted) = match handed {
                    Some((group, kind)) => (group, kind, None),
                    None => self.naming.next(agent, mem, device, &regions),
                };
                let mut r = Box::new(RegisterCall {
                    agent,
                    group,
                    kind,
                    mem,
                    device,
                    regions,
                    counted,
                    pending: None,
                    finding: None,
                });
                let call = r.call();
                let (pending, finding) = (obs.begin(&call), obs.check(&call));
                (r.pending, r.finding) = (Some(pending), finding);
                Token::Register(r)
            }
            Facts::Deregister { list } => {
                let Some(list) = list.filter(|l| mem_of(l.mem_type).is_some()) else {
                    return Token::None;
                };
                let Some(first) = list.get(0) else { return Token::None };
                Token::Deregister {
                    agent,
                    first: Self::region(first),
                    descriptors: list.len(),
                    mark: obs.deregistration_started(),
                }
            }
            Facts::CreateXfer {
                op,
                local,
                remote,
                peer,
            } => Token::Create {
                agent,
                transfer: Box::new(Made {
                    op: op_of(op),
                    descriptors: local.map_or(0, |l| l.len()),
                    bytes: local.map_or(0, |l| l.bytes()),
                    local: local.and_then(|l| mem_of(l.mem_type)),
                    remote: remote.and_then(|l| mem_of(l.mem_type)),
                    peer: peer.to_string(),
                }),
                _mark: obs.call_started(CallKind::CreateXfer),
            },
            Facts::PrepDlist { peer, list } => Token::Prep {
                peer: peer.to_string(),
                mem: list.and_then(|l| mem_of(l.mem_type)),
                lens: list.map_or_else(BlockLens::default, |l| {
                    BlockLens::from_runs(l.iter().map(|d| (1, d.len as u64)))
                }),
            },
            Facts::PrepStrided { peer, list } => Token::Prep {
                peer: peer.to_string(),
                mem: list.and_then(|l| mem_of(l.mem_type)),
                lens: list.map_or_else(BlockLens::default, |l| {
                    BlockLens::from_runs(l.runs().map(|(len, count)| (count, len)))
                }),
            },
            Facts::ReleaseDlist { dlist } => Token::ReleaseDlist { dlist },
            Facts::MakeXfer {
                op,
                local,
                local_idx,
                remote,
                ..
            } => {
                let prepped = self.prepped.lock().unwrap_or_else(|e| e.into_inner());
                let (l, r) = (prepped.get(&local), prepped.get(&remote));
                let bytes = l.map_or(0, |p| {
                    local_idx
                        .iter()
                        .filter_map(|i| usize::try_from(*i).ok().and_then(|i| p.lens.get(i)))
                        .sum()
                });
                let made = Made {
                    op: op_of(op),
                    descriptors: local_idx.len(),
                    bytes,
                    local: l.and_then(|p| p.mem),
                    remote: r.and_then(|p| p.mem),
                    peer: r.map(|p| p.peer.clone()).unwrap_or_default(),
                };
                drop(prepped);
                Token::Create {
                    agent,
                    transfer: Box::new(made),
                    _mark: obs.call_started(CallKind::CreateXfer),
                }
            }
            Facts::Status { .. } | Facts::Release { .. } | Facts::Plain { .. } => Token::None,
            Facts::LoadMd => Token::Peer {
                agent,
                op: PeerOp::Add,
                peer: String::new(),
                _mark: Some(obs.call_started(CallKind::LoadMetadata)),
            },
            Facts::Invalidate { peer } => Token::Peer {
                agent,
                op: PeerOp::Remove,
                peer: peer.to_string(),
                _mark: None,
            },
            Facts::Connect { peer } => Token::Peer {
                agent,
                op: PeerOp::Connect,
                peer: peer.to_string(),
                _mark: Some(obs.call_started(CallKind::Connect)),
            },
            Facts::Fetch { peer } => Token::Peer {
                agent,
                op: PeerOp::Fetch,
                peer: peer.to_string(),
                _mark: Some(obs.call_started(CallKind::FetchMetadata)),
            },
            Facts::Check { peer } => Token::Peer {
                agent,
                op: PeerOp::Check,
                peer: peer.to_string(),
                _mark: None,
            },
            Facts::Notify { peer, message } => Token::Notify {
                agent,
                peer: peer.to_string(),
                heartbeat: nixl_agent_instrument::is_heartbeat(message),
            },
            Facts::GetNotifs => Token::Notifs { agent },
        }
    }

    /// NIXL threw out of the call `token` began: a constructor that threw
    /// made no agent (NIXL's configuration file is looked at now, as the
    /// other front-ends do). Any other call ends as one NIXL failed
    /// ([`THREW`]), so what its begin opened is closed: a registration's
    /// attempt is counted failed, its capture window settled and its span
    /// ended; a call's in-flight mark is let go and its failure recorded.
    /// A status poll that threw records nothing: the next poll says how
    /// the posting stands.
    fn unwound(&self, this: usize, token: Token) {
        match token {
            Token::Agent { name } => {
                let failure = Failure::new(
                    nixl_agent_core::model::Reason::NixlUnavailable,
                    format!("creating NIXL agent {name:?}: NIXL's constructor threw"),
                );
                self.observer()
                    .nixl_unavailable(&nixl_agent_engine::nixl_config::explain(failure));
            }
            Token::Status { .. } => {}
            token => self.end(this, token, THREW, &Out::default()),
        }
    }

    fn end(&self, this: usize, token: Token, st: i32, out: &Out<'_>) {
        let obs = self.observer();
        let ok = st == status::SUCCESS;
        match token {
            Token::None => {}
            Token::Agent { name } => {
                let id = AgentId::fresh();
                self.agents.write().unwrap_or_else(|e| e.into_inner()).insert(this, id);
                obs.saw_agent(id, &name, Vec::new);
            }
            Token::Backend { agent, plugin, t0 } => {
                let result = if ok {
                    Ok(t0.elapsed())
                } else {
                    Err(Failure::new(
                        nixl_agent_core::model::Reason::BackendInitFailed,
                        format!("creating backend {plugin}: {}", said(st)),
                    ))
                };
                obs.backend(agent, &plugin, result);
            }
            Token::Register(mut r) => {
                let outcome = if ok {
                    if let Some(c) = r.counted.take() {
                        self.naming.registered(c);
                    }
                    Outcome::Registered
                } else {
                    obs.settle_capture();
                    Outcome::Failed(failure(st, false))
                };
                if let Some(pending) = r.pending.take() {
                    let finding = r.finding.take();
                    obs.end(pending, &r.call(), finding, outcome);
                }
                Self::spare(std::mem::take(&mut r.regions));
            }
            Token::Deregister {
                agent,
                first,
                descriptors,
                mark,
            } => {
                let elapsed = mark.started().elapsed();
                drop(mark);
                obs.deregistered(agent, first, descriptors, elapsed, (!ok).then(|| failure(st, false)));
            }
            Token::Create { agent, transfer, .. } => {
                let Made {
                    op,
                    descriptors,
                    bytes,
                    local,
                    remote,
                    peer,
                } = *transfer;
                if ok && out.handle != 0 {
                    let serial = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
                    let before = self
                        .requests
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(out.handle, Arc::new(Request::new(serial)));
                    if let Some(before) = before {
                        // NIXL made this one where a request the recording
                        // never saw released was.
                        before.gone.store(true, Ordering::Release);
                    }
                    obs.transfer_created(&Transfer {
                        agent,
                        handle: serial,
                        op,
                        descriptors,
                        bytes,
                        local,
                        remote,
                        backend: None,
                        peer: &peer,
                    });
                } else {
                    obs.transfer_create_failed(agent, op, &peer, &failure(st, true));
                }
            }
            Token::Status { req } => {
                if st == status::IN_PROG {
                    return;
                }
                // Only the first poll that sees the posting end counts: a
                // loop that polls a done request again records nothing.
                if let Some(serial) = self.ended(req, st) {
                    let poll = if ok {
                        XferPoll::Done
                    } else {
                        XferPoll::Failed(failure(st, true))
                    };
                    obs.transfer_status(serial, &poll, None);
                }
            }
            Token::Release { req, request } => {
                let Some(r) = request else { return };
                if ok {
                    r.gone.store(true, Ordering::Release);
                    obs.transfer_released(r.serial);
                } else {
                    // NIXL kept it: it is the program's still.
                    self.requests
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(req)
                        .or_insert(r);
                }
            }
            Token::Prep { peer, mem, lens } => {
                if ok && out.handle != 0 {
                    self.prepped
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(out.handle, Prepped { peer, mem, lens });
                }
            }
            Token::ReleaseDlist { dlist } => {
                if ok {
                    self.prepped.lock().unwrap_or_else(|e| e.into_inner()).remove(&dlist);
                }
            }
            // "Not yet" is no event: programs poll it (as the Python
            // front-end's check_remote_metadata records only True).
            Token::Peer { op: PeerOp::Check, .. } if !ok => {}
            Token::Peer { agent, op, peer, _mark } => {
                drop(_mark);
                let peer = if op == PeerOp::Add { out.name } else { &peer };
                obs.peer(agent, op, peer, (!ok).then(|| failure(st, true)).as_ref());
            }
            Token::Notify { agent, peer, heartbeat } => {
                if ok {
                    obs.notified_peer(agent, NotifDirection::Send, &peer, 1, u64::from(heartbeat));
                } else {
                    obs.notified(agent, NotifDirection::Send, 0, Some(&failure(st, true)));
                }
            }
            Token::Plain { method } => {
                let status = if st == THREW {
                    nixl_agent_core::event::NixlCalled::THREW
                } else {
                    status::name(st)
                };
                obs.nixl_called(method.name(), status);
            }
            Token::Notifs { agent } => {
                if !ok {
                    obs.notified(agent, NotifDirection::Receive, 0, Some(&failure(st, true)));
                    return;
                }
                for (peer, messages) in out.fresh {
                    let beats = messages
                        .iter()
                        .filter(|m| nixl_agent_instrument::is_heartbeat(m))
                        .count();
                    obs.notified_peer(
                        agent,
                        NotifDirection::Receive,
                        peer,
                        messages.len() as u64,
                        beats as u64,
                    );
                }
            }
        }
    }
}

/// The operation a failure of ours is counted under.
fn hooked(facts: &Facts<'_>) -> Hooked {
    match facts {
        Facts::AgentNew { .. } | Facts::AgentDrop => Hooked::Init,
        Facts::Backend { .. } => Hooked::CreateBackend,
        Facts::Register { .. } => Hooked::RegisterMemory,
        Facts::Deregister { .. } => Hooked::DeregisterMemory,
        _ => Hooked::Transfer,
    }
}

/// Whether calls are recorded, and why not: the gate decided now if no
/// call has yet.
pub fn state() -> (bool, Option<&'static std::ffi::CStr>) {
    static WHY: OnceLock<std::ffi::CString> = OnceLock::new();
    let gate = nixl_agent_sys::interpose::real::gate();
    match &gate.verdict {
        Verdict::Active { .. } => (true, None),
        Verdict::Refused { why, .. } => {
            let c = WHY.get_or_init(|| std::ffi::CString::new(why.replace('\0', " ")).unwrap_or_default());
            (false, Some(c.as_c_str()))
        }
    }
}

/// A post begun: what [`CallSink::post_end`] is handed.
pub struct Posting {
    running: Current<'static>,
    req: usize,
    serial: u64,
    /// The post in flight; its clock is the posting's (one read).
    mark: LocalCallMark,
}

impl Running {
    /// A post of `req` begins: `None` for a request the recording does
    /// not know.
    fn post_begin(&self, req: usize) -> Option<(u64, LocalCallMark)> {
        let serial = self.posting(req)?;
        Some((serial, self.observer().call_started_here(CallKind::PostXfer)))
    }

    /// The post of `req` (`serial`) returned `st`.
    fn post_end(&self, req: usize, serial: u64, mark: LocalCallMark, st: i32) {
        let poll = match st {
            status::IN_PROG => XferPoll::InProgress,
            status::SUCCESS => XferPoll::Done,
            _ => XferPoll::Failed(failure(st, true)),
        };
        // A post that ended within the call recorded its own end: the
        // request stays "posting", so a poll that sees it end now hands a
        // status nobody takes (the end is recorded once), and the next
        // post begins anew. Only a post in flight asks what a poll handed.
        let handed = (st == status::IN_PROG).then(|| self.post_returned(req, st)).flatten();
        self.observer().transfer_posted_here(serial, mark, &poll);
        // A poll on another thread saw the posting end while the post was
        // running: its end, recorded after the post.
        if let Some(code) = handed {
            let poll = if code == status::SUCCESS {
                XferPoll::Done
            } else {
                XferPoll::Failed(failure(code, true))
            };
            self.observer().transfer_status(serial, &poll, None);
        }
    }
}

/// The token and the object it is about.
pub struct Begun {
    this: usize,
    token: Token,
}

impl CallSink for Translator {
    type Token = Option<Begun>;
    type Post = Option<Posting>;

    fn post_begin(&'static self, req: usize) -> Option<Posting> {
        let running = self.running().filter(|r| r.recording)?;
        match catch_unwind(AssertUnwindSafe(|| running.post_begin(req))) {
            Ok(begun) => begun.map(|(serial, mark)| Posting {
                running,
                req,
                serial,
                mark,
            }),
            Err(_) => {
                running
                    .observer()
                    .hook_failed(Hooked::Transfer, "the interposer panicked before a NIXL call");
                None
            }
        }
    }

    fn post_end(&'static self, post: Option<Posting>, st: i32) {
        let Some(Posting {
            running,
            req,
            serial,
            mark,
        }) = post
        else {
            return;
        };
        let r = &*running;
        if catch_unwind(AssertUnwindSafe(|| r.post_end(req, serial, mark, st))).is_err() {
            r.observer()
                .hook_failed(Hooked::Transfer, "the interposer panicked after a NIXL call");
        }
    }

    fn decided(&self, verdict: &Verdict) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            self.running.get_or_init(|| Translator::start(verdict));
        }));
    }

    fn begin(&self, agent: usize, facts: &Facts<'_>) -> Option<Begun> {
        let r = self.running().filter(|r| r.recording)?;
        match catch_unwind(AssertUnwindSafe(|| r.begin(agent, facts))) {
            Ok(token) => Some(Begun { this: agent, token }),
            Err(_) => {
                r.observer()
                    .hook_failed(hooked(facts), "the interposer panicked before a NIXL call");
                None
            }
        }
    }

    fn unwound(&self, begun: Option<Begun>) {
        let (Some(r), Some(Begun { this, token })) = (self.running(), begun) else {
            return;
        };
        // Its evidence is written before the host sees the exception.
        r.inst.settle_claim();
        if catch_unwind(AssertUnwindSafe(|| r.unwound(this, token))).is_err() {
            r.observer()
                .hook_failed(Hooked::Init, "the interposer panicked while NIXL threw");
        }
    }

    fn end(&self, begun: Option<Begun>, st: i32, out: &Out<'_>) {
        let (Some(r), Some(Begun { this, token })) = (self.running(), begun) else {
            return;
        };
        // A failure's evidence is written (the pod slot claimed beside the
        // first call) before the host, which may die of it, sees it.
        if st < 0 {
            r.inst.settle_claim();
        }
        if catch_unwind(AssertUnwindSafe(|| r.end(this, token, st, out))).is_err() {
            r.observer()
                .hook_failed(Hooked::Transfer, "the interposer panicked after a NIXL call");
        }
    }
}

#[cfg(test)]
mod posting_tests {
    use super::*;

    /// The race of a post and a poll on another thread: the poll sees the
    /// posting end while the post call still runs (NIXL finished the
    /// transfer before the post returned in progress). The end is recorded
    /// once, by the post's thread, after the post.
    #[test]
    fn a_poll_that_sees_the_end_during_the_post_hands_it_to_the_post() {
        let r = Request::new(7);
        r.post_begins();
        assert!(!r.poll_ended(status::SUCCESS), "the post's thread records it");
        assert!(!r.poll_ended(status::SUCCESS), "seen once");
        assert_eq!(r.post_returned(status::IN_PROG), Some(status::SUCCESS));
        assert!(!r.poll_ended(status::SUCCESS), "already recorded");
    }

    /// What the translator does after a post that ended within its call: it
    /// asks nothing more, and no later poll records the end again.
    #[test]
    fn after_a_post_that_ended_in_the_call_no_poll_records_an_end() {
        let r = Request::new(7);
        r.post_begins();
        assert!(!r.poll_ended(status::SUCCESS));
        assert!(!r.poll_ended(status::SUCCESS));
        r.post_begins();
        assert_eq!(r.post_returned(status::IN_PROG), None);
        assert!(
            r.poll_ended(status::SUCCESS),
            "a later posting in flight ends once, by its poll"
        );
    }

    #[test]
    fn a_failure_handed_over_keeps_its_status() {
        let r = Request::new(7);
        r.post_begins();
        assert!(!r.poll_ended(status::ERR_REMOTE_DISCONNECT));
        assert_eq!(r.post_returned(status::IN_PROG), Some(status::ERR_REMOTE_DISCONNECT));
    }

    #[test]
    fn in_progress_then_the_poll_records_the_end_once() {
        let r = Request::new(7);
        r.post_begins();
        assert_eq!(r.post_returned(status::IN_PROG), None);
        assert!(r.poll_ended(status::SUCCESS));
        assert!(!r.poll_ended(status::SUCCESS));
        // Posted again: the next end is recorded again.
        r.post_begins();
        assert_eq!(r.post_returned(status::IN_PROG), None);
        assert!(r.poll_ended(status::SUCCESS));
    }

    #[test]
    fn a_post_that_ends_within_the_call_leaves_polls_nothing() {
        let r = Request::new(7);
        r.post_begins();
        assert!(!r.poll_ended(status::SUCCESS));
        assert_eq!(r.post_returned(status::SUCCESS), None, "the post's own end is recorded");
        assert!(!r.poll_ended(status::SUCCESS));
        // A request never posted: its first poll's end is recorded.
        assert!(Request::new(8).poll_ended(status::ERR_NOT_POSTED));
    }
}
