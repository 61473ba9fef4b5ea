//! Observe mode on the data path, in Rust: the caller's transfer requests,
//! posts, status polls, peers and notifications on its own
//! `nixl_sys::Agent`, passed through untouched and recorded on the
//! observer. What nixl-sys returns is handed back as it is.
//!
//! nixl-sys folds most of NIXL's statuses into `BackendError` (a remote
//! disconnect among them), so a Rust caller's transfer failures carry the
//! coarser reasons of [`reason_of`]; Python's carry NIXL's own.

use super::observed_agent::{failure, ObservedAgent};
use crate::model::{MemType, NotifDirection, PeerOp, Transfer, XferOp};
use crate::observe::{Observer, XferPoll};
use nixl_agent_sys::interpose::quiet;
use nixl_sys::{Backend, NixlError, NotificationMap, OptArgs, XferDescList, XferRequest, XferStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Identities of Rust transfer requests: from the top half of the space, so
/// they never meet a Python request's serial in one process.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1 << 63);

/// A transfer request made through [`ObservedAgent::create_xfer_req`]: the
/// nixl-sys request (it derefs to it) and its identity in the recording.
/// Dropping it releases the request, as dropping an `XferRequest` does; a
/// transfer still in flight then ends as released in flight.
pub struct ObservedXfer {
    req: XferRequest,
    handle: u64,
    observer: Observer,
}

impl std::ops::Deref for ObservedXfer {
    type Target = XferRequest;

    fn deref(&self) -> &XferRequest {
        &self.req
    }
}

impl Drop for ObservedXfer {
    fn drop(&mut self) {
        self.observer.transfer_released(self.handle);
    }
}

fn op_of(op: nixl_sys::XferOp) -> XferOp {
    match op {
        nixl_sys::XferOp::Read => XferOp::Read,
        nixl_sys::XferOp::Write => XferOp::Write,
    }
}

fn mem_of(list: &XferDescList) -> Option<MemType> {
    match list.get_type().ok()? {
        nixl_sys::MemType::Dram => Some(MemType::Dram),
        nixl_sys::MemType::Vram => Some(MemType::Vram),
        _ => None,
    }
}

/// Descriptors and bytes of a list.
fn size_of(list: &XferDescList) -> (usize, u64) {
    let n = list.len().unwrap_or(0);
    let bytes = (0..n)
        .filter_map(|i| list.get(i).ok())
        .fold(0u64, |a, d| a.saturating_add(d.len as u64));
    (n, bytes)
}

impl ObservedAgent {
    /// `agent.create_xfer_req(...)`, recorded: the request, or a transfer
    /// that ended in error before it was posted.
    pub fn create_xfer_req(
        &self,
        operation: nixl_sys::XferOp,
        local: &XferDescList,
        remote: &XferDescList,
        remote_agent: &str,
        opts: Option<&OptArgs>,
    ) -> Result<ObservedXfer, NixlError> {
        let op = op_of(operation);
        match quiet(|| self.agent.create_xfer_req(operation, local, remote, remote_agent, opts)) {
            Ok(req) => {
                let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
                let (descriptors, bytes) = size_of(local);
                self.observer.transfer_created(&Transfer {
                    agent: self.id,
                    handle,
                    op,
                    descriptors,
                    bytes,
                    local: mem_of(local),
                    remote: mem_of(remote),
                    backend: None,
                    peer: remote_agent,
                });
                Ok(ObservedXfer {
                    req,
                    handle,
                    observer: self.observer.clone(),
                })
            }
            Err(e) => {
                self.observer
                    .transfer_create_failed(self.id, op, remote_agent, &failure(&e));
                Err(e)
            }
        }
    }

    /// `agent.post_xfer_req(req, opts)`, recorded: `Ok(true)` in progress,
    /// `Ok(false)` done within the call.
    pub fn post_xfer_req(&self, req: &ObservedXfer, opts: Option<&OptArgs>) -> Result<bool, NixlError> {
        let t0 = Instant::now();
        let result = quiet(|| self.agent.post_xfer_req(&req.req, opts));
        let poll = match &result {
            Ok(true) => XferPoll::InProgress,
            Ok(false) => XferPoll::Done,
            Err(e) => XferPoll::Failed(failure(e)),
        };
        self.observer.transfer_posted(req.handle, t0, &poll);
        result
    }

    /// `agent.get_xfer_status(req)`, recorded when it is not "in progress".
    pub fn get_xfer_status(&self, req: &ObservedXfer) -> Result<XferStatus, NixlError> {
        let result = quiet(|| self.agent.get_xfer_status(&req.req));
        match &result {
            Ok(XferStatus::InProgress) => {}
            Ok(XferStatus::Success) => self.observer.transfer_status(req.handle, &XferPoll::Done, None),
            Err(e) => self
                .observer
                .transfer_status(req.handle, &XferPoll::Failed(failure(e)), None),
        }
        result
    }

    /// `agent.load_remote_md(metadata)`: a peer added (or refused).
    pub fn load_remote_md(&self, metadata: &[u8]) -> Result<String, NixlError> {
        let result = quiet(|| self.agent.load_remote_md(metadata));
        match &result {
            Ok(name) => self.observer.peer(self.id, PeerOp::Add, name, None),
            Err(e) => self.observer.peer(self.id, PeerOp::Add, "", Some(&failure(e))),
        }
        result
    }

    /// `agent.invalidate_remote_md(name)`: a peer removed.
    pub fn invalidate_remote_md(&self, remote_agent: &str) -> Result<(), NixlError> {
        let result = quiet(|| self.agent.invalidate_remote_md(remote_agent));
        let f = result.as_ref().err().map(failure);
        self.observer.peer(self.id, PeerOp::Remove, remote_agent, f.as_ref());
        result
    }

    /// `agent.make_connection(name, opts)`.
    pub fn make_connection(&self, remote_agent: &str, opts: Option<&OptArgs>) -> Result<(), NixlError> {
        let result = quiet(|| self.agent.make_connection(remote_agent, opts));
        let f = result.as_ref().err().map(failure);
        self.observer.peer(self.id, PeerOp::Connect, remote_agent, f.as_ref());
        result
    }

    /// `agent.check_remote_metadata(name, descs)`: recorded when it is there.
    pub fn check_remote_metadata(&self, remote_agent: &str, descs: Option<&XferDescList>) -> bool {
        let there = quiet(|| self.agent.check_remote_metadata(remote_agent, descs));
        if there {
            self.observer.peer(self.id, PeerOp::Check, remote_agent, None);
        }
        there
    }

    /// `agent.send_notification(remote, message, backend)`.
    pub fn send_notification(
        &self,
        remote_agent: &str,
        message: &[u8],
        backend: Option<&Backend>,
    ) -> Result<(), NixlError> {
        let result = quiet(|| self.agent.send_notification(remote_agent, message, backend));
        let f = result.as_ref().err().map(failure);
        self.observer.notified(self.id, NotifDirection::Send, 1, f.as_ref());
        result
    }

    /// `agent.get_notifications(notifs, opts)`: the messages it added to
    /// `notifs` are counted (nothing is recorded when it added none).
    pub fn get_notifications(&self, notifs: &mut NotificationMap, opts: Option<&OptArgs>) -> Result<(), NixlError> {
        let before = messages(notifs);
        let result = quiet(|| self.agent.get_notifications(notifs, opts));
        match &result {
            Ok(()) => {
                let n = messages(notifs).saturating_sub(before);
                if n > 0 {
                    self.observer.notified(self.id, NotifDirection::Receive, n, None);
                }
            }
            Err(e) => self
                .observer
                .notified(self.id, NotifDirection::Receive, 0, Some(&failure(e))),
        }
        result
    }
}

fn messages(notifs: &NotificationMap) -> u64 {
    notifs
        .agents()
        .filter_map(|a| a.ok())
        .filter_map(|a| notifs.get_notifications_size(a).ok())
        .map(|n| n as u64)
        .sum()
}
