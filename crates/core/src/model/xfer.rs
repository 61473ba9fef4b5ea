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

/// The length of each block of a prepared descriptor list by its flat index
/// (what a transfer made from the list by indices moves), kept as runs of
/// equal lengths: a strided N×5 row is `count` blocks of one length, a
/// plain descriptor one block, and equal neighbours merge, so a list of
/// equal blocks (vLLM's, SGLang's) is one run whatever its length. Sized
/// by the list's descriptors, never by its blocks. Both front-ends read
/// prepared lists into it (the interposer's `prepXferDlist`, Python's
/// `prep_xfer_dlist`), so their transfers count the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockLens(Vec<(u64, u64)>);

impl BlockLens {
    /// The lens of `runs`: (blocks, length of each), in order.
    pub fn from_runs(runs: impl IntoIterator<Item = (u64, u64)>) -> BlockLens {
        let mut lens = BlockLens::default();
        for (count, len) in runs {
            lens.push(count, len);
        }
        lens
    }

    /// `count` more blocks of `len` bytes.
    pub fn push(&mut self, count: u64, len: u64) {
        if count == 0 {
            return;
        }
        let start = self.0.last().map_or(0, |r| r.0);
        let end = start.saturating_add(count);
        match self.0.last_mut() {
            Some(r) if r.1 == len => r.0 = end,
            _ => self.0.push((end, len)),
        }
    }

    /// Block `i`'s length, if the list has a block `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        let i = u64::try_from(i).ok()?;
        let k = self.0.partition_point(|r| r.0 <= i);
        self.0.get(k).map(|r| r.1)
    }

    /// The one length of every block, when they are all alike.
    pub fn uniform(&self) -> Option<u64> {
        match self.0.as_slice() {
            [(_, len)] => Some(*len),
            _ => None,
        }
    }
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

#[cfg(test)]
mod block_lens_tests {
    use super::BlockLens;

    #[test]
    fn strided_runs_and_plain_descriptors_give_each_block_its_length() {
        let mut l = BlockLens::default();
        l.push(8, 1024);
        l.push(8, 1024);
        l.push(0, 7);
        l.push(1, 4096);
        l.push(3, 512);
        assert_eq!(l.0.len(), 3, "equal neighbours merged: {l:?}");
        assert_eq!(l.get(0), Some(1024));
        assert_eq!(l.get(15), Some(1024));
        assert_eq!(l.get(16), Some(4096));
        assert_eq!(l.get(17), Some(512));
        assert_eq!(l.get(19), Some(512));
        assert_eq!(l.get(20), None);
        assert_eq!(l.uniform(), None);
        assert_eq!(BlockLens::from_runs([(4, 64), (2, 64)]).uniform(), Some(64));
        assert_eq!(BlockLens::default().get(0), None);
    }
}
