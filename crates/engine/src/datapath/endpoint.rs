//! Proving the data path: a NIXL agent of nixl-agent's own with one
//! backend and one registered buffer (an [`Endpoint`]), which moves bytes
//! to and from another endpoint — in this process (`check`'s loopback, the
//! node canary) or on a peer node (`check --serve/--peer`).
//!
//! Every transfer goes through [`ObservedAgent`], so it is recorded on the
//! same path as a serving process's: a check's or canary's transfer is a
//! transfer like any other. The buffer is registered directly on the
//! endpoint's agent (it is not a serving group). Dropping an endpoint
//! deregisters the buffer before it is freed, and forgets the peers it
//! loaded.

use crate::model::{Failure, MemType, Reason, Region, XferOp};
use crate::nixl::memory::{self, Backing, MmapArea};
use crate::nixl::{cuda, reason_of, Descriptor};
use crate::observe::ObservedAgent;
use crate::observe::Observer;
use nixl_sys::{
    Agent, AgentConfig, Backend, NixlError, NotificationMap, OptArgs, RegistrationHandle, XferDescList, XferStatus,
};
use std::time::{Duration, Instant};

/// How long a transfer's poll spins before it sleeps between polls.
const SPIN: Duration = Duration::from_millis(20);
/// The sleep between polls after that.
const BACKOFF: Duration = Duration::from_micros(200);

/// Where a peer's buffer is: what a transfer to it needs besides its
/// metadata (sent over the check's own exchange to a peer node).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteBuffer {
    /// The peer's NIXL agent name, as `load_remote_md` returned it.
    pub agent: String,
    pub addr: u64,
    pub len: u64,
    pub device: u32,
    pub mem_type: MemType,
}

enum Buffer {
    /// An anonymous mapping, unmapped on drop.
    Dram(MmapArea),
    Vram(cuda::VramBuffer),
}

/// A NIXL agent of ours with one backend and one registered buffer.
pub struct Endpoint {
    // Field order is drop order: the registration goes before the buffer.
    reg: Option<RegistrationHandle>,
    observed: ObservedAgent,
    peers: Vec<String>,
    agent: Agent,
    _backend: Backend,
    opts: OptArgs,
    buf: Buffer,
    addr: usize,
    len: usize,
    mem_type: MemType,
    device: u32,
}

fn nixl_failure(e: NixlError, what: &str) -> Failure {
    Failure::new(
        reason_of(&e),
        format!("{what}: {e} (NIXL/UCX print the cause on stderr)"),
    )
}

fn nixl_mem(m: MemType) -> nixl_sys::MemType {
    match m {
        MemType::Dram => nixl_sys::MemType::Dram,
        MemType::Vram => nixl_sys::MemType::Vram,
    }
}

impl Endpoint {
    /// A NIXL agent `name` with `backend`, and `len` bytes of `mem_type`
    /// on `device` registered on it. `progress_thread`: NIXL's own progress
    /// thread (needed when the other side is in another process and this
    /// one only waits); without it, [`Endpoint::progress`] drives it.
    pub fn open(
        observer: &Observer,
        name: &str,
        backend: &str,
        mem_type: MemType,
        device: u32,
        len: usize,
        progress_thread: bool,
    ) -> Result<Endpoint, Failure> {
        let (agent, created) = Endpoint::agent(name, backend, progress_thread)?;
        Endpoint::on(observer, agent, created, mem_type, device, len)
    }

    /// The slow half of [`Endpoint::open`] (creating a UCX backend takes
    /// about half a second), which may run on another thread.
    pub fn agent(name: &str, backend: &str, progress_thread: bool) -> Result<(Agent, Backend), Failure> {
        let cfg = AgentConfig {
            enable_prog_thread: progress_thread,
            enable_listen_thread: false,
            ..AgentConfig::default()
        };
        let agent = Agent::new_configured(name, &cfg)
            .map_err(|e| crate::nixl_config::agent_creation_failed(&format!("creating NIXL agent {name:?}"), &e))?;
        let (_, params) = agent
            .get_plugin_params(backend)
            .map_err(|e| Failure::new(Reason::PluginUnavailable, format!("{backend} plugin: {e}")))?;
        let created = agent.create_backend(backend, &params).map_err(|e| {
            Failure::new(
                Reason::BackendInitFailed,
                format!("creating the {backend} backend: {e}"),
            )
        })?;
        Ok((agent, created))
    }

    /// The rest of [`Endpoint::open`]: the buffer, registered on `agent`.
    pub fn on(
        observer: &Observer,
        agent: Agent,
        created: Backend,
        mem_type: MemType,
        device: u32,
        len: usize,
    ) -> Result<Endpoint, Failure> {
        let mut opts = OptArgs::new().map_err(|e| nixl_failure(e, "options"))?;
        opts.add_backend(&created).map_err(|e| nixl_failure(e, "options"))?;
        let (addr, buf) = match mem_type {
            MemType::Dram => {
                let (regions, backing) = memory::allocate(MemType::Dram, 0, 1, len)?;
                let Backing::Dram(area) = backing else {
                    unreachable!("a DRAM allocation is a mapping")
                };
                (regions[0].addr, Buffer::Dram(area))
            }
            MemType::Vram => {
                let b = cuda::VramBuffer::new(device, len).map_err(|(r, m)| Failure::new(r, m))?;
                (b.addr(), Buffer::Vram(b))
            }
        };
        let desc = Descriptor::new(Region::new(addr, len, device), mem_type);
        let reg = agent
            .register_memory(&desc, Some(&opts))
            .map_err(|e| nixl_failure(e, &format!("registering {len} bytes of {}", mem_type.as_str())))?;
        let observed = observer.agent(&agent);
        Ok(Endpoint {
            reg: Some(reg),
            observed,
            peers: Vec::new(),
            agent,
            _backend: created,
            opts,
            buf,
            addr,
            len,
            mem_type,
            device,
        })
    }

    /// This agent's metadata, for a peer's `load_remote_md`.
    pub fn metadata(&self) -> Result<Vec<u8>, Failure> {
        self.agent.get_local_md().map_err(|e| nixl_failure(e, "get_local_md"))
    }

    /// Where this endpoint's buffer is, for a peer.
    pub fn buffer(&self) -> RemoteBuffer {
        RemoteBuffer {
            agent: self.agent.name(),
            addr: self.addr as u64,
            len: self.len as u64,
            device: self.device,
            mem_type: self.mem_type,
        }
    }

    /// Loads a peer's metadata; returns its agent name.
    pub fn add_peer(&mut self, metadata: &[u8]) -> Result<String, Failure> {
        let name = self
            .observed
            .load_remote_md(metadata)
            .map_err(|e| nixl_failure(e, "load_remote_md"))?;
        self.peers.push(name.clone());
        Ok(name)
    }

    /// Lets NIXL progress this agent's side (it has no progress thread of
    /// its own): asking for notifications progresses its backends.
    pub fn progress(&self) {
        if let Ok(mut m) = NotificationMap::new() {
            let _ = self.agent.get_notifications(&mut m, None);
        }
    }

    /// Writes `bytes` at `offset` of the buffer.
    pub fn fill(&mut self, offset: usize, bytes: &[u8]) -> Result<(), Failure> {
        self.check_range(offset, bytes.len())?;
        match &mut self.buf {
            Buffer::Dram(area) => area.write(offset, bytes).map_err(|m| Failure::new(Reason::Unknown, m)),
            Buffer::Vram(b) => b.write(offset, bytes).map_err(|m| Failure::new(Reason::Unknown, m)),
        }
    }

    /// Reads `len` bytes at `offset` of the buffer.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, Failure> {
        self.check_range(offset, len)?;
        match &self.buf {
            Buffer::Dram(area) => area.read(offset, len).map_err(|m| Failure::new(Reason::Unknown, m)),
            Buffer::Vram(b) => b.read(offset, len).map_err(|m| Failure::new(Reason::Unknown, m)),
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), Failure> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Failure::new(
                Reason::NixlInvalidParam,
                format!("{offset}+{len} is outside the {}-byte buffer", self.len),
            )),
        }
    }

    /// One `op` of `len` bytes between `local_offset` of this buffer and
    /// `remote_offset` of the peer's, posted and polled to its end, at most
    /// `timeout`; `target`, when the peer is in this process and has no
    /// progress thread, is progressed while polling. Returns the time from
    /// post to completion.
    #[allow(clippy::too_many_arguments)]
    pub fn transfer(
        &self,
        op: XferOp,
        local_offset: usize,
        len: usize,
        remote: &RemoteBuffer,
        remote_offset: usize,
        timeout: Duration,
        target: Option<&Endpoint>,
    ) -> Result<Duration, Failure> {
        self.check_range(local_offset, len)?;
        if remote_offset.checked_add(len).is_none_or(|e| e as u64 > remote.len) {
            return Err(Failure::new(
                Reason::NixlInvalidParam,
                format!("{remote_offset}+{len} is outside the peer's {}-byte buffer", remote.len),
            ));
        }
        let mut local = XferDescList::new(nixl_mem(self.mem_type)).map_err(|e| nixl_failure(e, "descriptor list"))?;
        local.add_desc(self.addr + local_offset, len, u64::from(self.device));
        let mut far = XferDescList::new(nixl_mem(remote.mem_type)).map_err(|e| nixl_failure(e, "descriptor list"))?;
        far.add_desc(remote.addr as usize + remote_offset, len, u64::from(remote.device));
        let nixl_op = match op {
            XferOp::Read => nixl_sys::XferOp::Read,
            XferOp::Write => nixl_sys::XferOp::Write,
        };
        let req = self
            .observed
            .create_xfer_req(nixl_op, &local, &far, &remote.agent, Some(&self.opts))
            .map_err(|e| nixl_failure(e, "create_xfer_req"))?;
        let t0 = Instant::now();
        let mut pending = self
            .observed
            .post_xfer_req(&req, Some(&self.opts))
            .map_err(|e| nixl_failure(e, "post_xfer_req"))?;
        while pending {
            if let Some(t) = target {
                t.progress();
            }
            match self.observed.get_xfer_status(&req) {
                Ok(XferStatus::Success) => pending = false,
                // Spin briefly (a transfer takes µs to ms), then back off:
                // a transfer that hangs does not burn a core to its timeout.
                Ok(XferStatus::InProgress) if t0.elapsed() < SPIN => std::thread::yield_now(),
                Ok(XferStatus::InProgress) if t0.elapsed() < timeout => std::thread::sleep(BACKOFF),
                Ok(XferStatus::InProgress) => {
                    // Dropping the request releases it in flight (recorded so).
                    return Err(Failure::new(
                        Reason::Timeout,
                        format!("{} of {len} bytes still in progress after {timeout:?}", op.as_str()),
                    ));
                }
                Err(e) => return Err(nixl_failure(e, "transfer")),
            }
        }
        Ok(t0.elapsed())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for p in std::mem::take(&mut self.peers) {
            let _ = self.observed.invalidate_remote_md(&p);
        }
        // Deregistered before the buffer (a later field) is freed.
        drop(self.reg.take());
    }
}
