//! The data path's words: a transfer's direction and outcome, what happens
//! between a NIXL agent and its peers, notifications. Closed label values,
//! like the rest of `model`; peers (remote agent names, UUIDs in SGLang and
//! vLLM) are never among them.

use super::{AgentId, MemType};
use std::fmt;

/// One transfer request the program created (`initialize_xfer`,
/// `make_prepped_xfer`, `create_xfer_req`), described for recording.
#[derive(Debug, Clone, Copy)]
pub struct Transfer<'a> {
    /// The NIXL agent it was created on.
    pub agent: AgentId,
    /// The request's identity in the recording: a serial the front-end
    /// hands out when the request is made (never NIXL's address, which a
    /// later request may reuse), unique for the life of the process, what
    /// later calls name.
    pub handle: u64,
    pub op: XferOp,
    /// Local descriptors and their bytes (what moves each time it is posted).
    pub descriptors: usize,
    pub bytes: u64,
    pub local: Option<MemType>,
    pub remote: Option<MemType>,
    /// The backend the program named for the request (or the only one its
    /// agent has), when known: never asked of NIXL.
    pub backend: Option<&'a str>,
    /// The remote agent's name (NIXL's; a UUID in SGLang and vLLM): ledger
    /// and /v1/status only, never a label.
    pub peer: &'a str,
}

/// A transfer's direction (NIXL's `nixl_xfer_op_t`): the `op` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XferOp {
    Read,
    Write,
}

impl XferOp {
    pub const ALL: [XferOp; 2] = [XferOp::Read, XferOp::Write];

    pub const fn as_str(self) -> &'static str {
        match self {
            XferOp::Read => "read",
            XferOp::Write => "write",
        }
    }

    /// NIXL's word for it (`"READ"`, `"WRITE"`, either case).
    pub fn parse(word: &str) -> Option<XferOp> {
        if word.eq_ignore_ascii_case("read") || word.eq_ignore_ascii_case("nixl_read") {
            Some(XferOp::Read)
        } else if word.eq_ignore_ascii_case("write") || word.eq_ignore_ascii_case("nixl_write") {
            Some(XferOp::Write)
        } else {
            None
        }
    }

    pub const fn index(self) -> usize {
        match self {
            XferOp::Read => 0,
            XferOp::Write => 1,
        }
    }
}

impl fmt::Display for XferOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a transfer request ended, as the program saw it: the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XferOutcome {
    /// NIXL said DONE (from `transfer()` itself or the first status poll
    /// that saw it).
    Done,
    /// NIXL refused the request or reported it failed (creation, post or a
    /// status poll): with a reason.
    Error,
    /// The handle was released (or collected) while the transfer was still
    /// in flight: nobody will learn how it ended.
    ReleasedInFlight,
    /// NIXL refused to create the request only because the peer's metadata
    /// (or the part of it these descriptors need) has not arrived yet
    /// (`NIXL_ERR_NOT_FOUND` at creation), within the wait a peer is given
    /// from its first such refusal: NIXL's documented retry pattern
    /// (partial metadata, a peer still starting). Never a failure; past
    /// the wait, the same refusal is the `error` it is.
    PeerPending,
}

impl XferOutcome {
    pub const ALL: [XferOutcome; 4] = [
        XferOutcome::Done,
        XferOutcome::Error,
        XferOutcome::ReleasedInFlight,
        XferOutcome::PeerPending,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            XferOutcome::Done => "done",
            XferOutcome::Error => "error",
            XferOutcome::ReleasedInFlight => "released_in_flight",
            XferOutcome::PeerPending => "peer_pending",
        }
    }

    pub const fn index(self) -> usize {
        match self {
            XferOutcome::Done => 0,
            XferOutcome::Error => 1,
            XferOutcome::ReleasedInFlight => 2,
            XferOutcome::PeerPending => 3,
        }
    }
}

/// What a NIXL agent did about a peer: the `event` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerOp {
    /// `add_remote_agent` / `loadRemoteMD`: the peer's metadata loaded.
    Add,
    /// `remove_remote_agent` / `invalidateRemoteMD`.
    Remove,
    /// `fetch_remote_metadata`: asked the peer (or the metadata server).
    Fetch,
    /// `check_remote_metadata` found the peer's metadata (a `False` answer,
    /// "not yet", is not recorded: programs poll it).
    Check,
    /// `make_connection`.
    Connect,
}

impl PeerOp {
    pub const ALL: [PeerOp; 5] = [
        PeerOp::Add,
        PeerOp::Remove,
        PeerOp::Fetch,
        PeerOp::Check,
        PeerOp::Connect,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            PeerOp::Add => "add",
            PeerOp::Remove => "remove",
            PeerOp::Fetch => "fetch",
            PeerOp::Check => "check",
            PeerOp::Connect => "connect",
        }
    }

    pub fn parse(word: &str) -> Option<PeerOp> {
        PeerOp::ALL.into_iter().find(|p| p.as_str() == word)
    }
}

/// A notification's direction: the `direction` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifDirection {
    /// `send_notif` (`genNotif`).
    Send,
    /// `get_new_notifs` (`getNotifs`): messages received.
    Receive,
}

impl NotifDirection {
    pub const ALL: [NotifDirection; 2] = [NotifDirection::Send, NotifDirection::Receive];

    pub const fn as_str(self) -> &'static str {
        match self {
            NotifDirection::Send => "send",
            NotifDirection::Receive => "receive",
        }
    }
}

/// `ok` or `error`: the `outcome` label of peer events and notifications.
pub const OUTCOME_OK: &str = "ok";
pub const OUTCOME_ERROR: &str = "error";
