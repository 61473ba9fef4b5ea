//! The interposer's NIXL side: NIXL's exported `nixlAgent` methods, called
//! for whoever called them (NIXL's Python bindings, `libnixl_capi.so` under
//! nixl-sys, a C++ program) with what NIXL was given read and handed to a
//! [`CallSink`] before and after the real call.
//!
//! The methods are rows of one table ([`methods`]: [`Sym`], the mangled
//! names, the exported functions' signatures and hooks, where releases
//! differ); the interposer library (`crates/interpose`) expands it into
//! its exported symbols, each a call of one hook here ([`hooks`]). A hook:
//! - calls NIXL's own definition with the caller's arguments untouched and
//!   returns exactly what it returned; a C++ exception NIXL throws passes
//!   through (`C-unwind`), and the sink hears that the call ended without
//!   a status ([`CallSink::unwound`]);
//! - saves and restores `errno` around everything of its own;
//! - passes straight through when the gate refused this NIXL build
//!   ([`real`]), and when it is re-entered on a thread already inside one.
//!
//! Layouts and the self-test that proves them: [`layout`]. What a forked
//! child lets go of at the fork (the rank slot's lock, the listening
//! socket, the fd tap): [`fork`].

pub mod fork;
pub mod hooks;
pub mod layout;
pub mod methods;
pub mod real;

pub use layout::{BasicDesc, List};
pub use methods::Sym;
pub use real::{
    at_exit, forks, hand_down, hand_down_process, in_process, python_in_process, quiet, quiet_thread, Verdict,
    ENV_NIXL_VERSION,
};

/// `nixl_status_t` values (NIXL's `nixl_types.h`).
pub mod status {
    pub const IN_PROG: i32 = 1;
    pub const SUCCESS: i32 = 0;
    pub const ERR_NOT_POSTED: i32 = -1;
    pub const ERR_INVALID_PARAM: i32 = -2;
    pub const ERR_BACKEND: i32 = -3;
    pub const ERR_NOT_FOUND: i32 = -4;
    pub const ERR_MISMATCH: i32 = -5;
    pub const ERR_NOT_ALLOWED: i32 = -6;
    pub const ERR_REPOST_ACTIVE: i32 = -7;
    pub const ERR_UNKNOWN: i32 = -8;
    pub const ERR_NOT_SUPPORTED: i32 = -9;
    pub const ERR_REMOTE_DISCONNECT: i32 = -10;
    pub const ERR_CANCELED: i32 = -11;
    pub const ERR_NO_TELEMETRY: i32 = -12;

    /// The closed reason of a failed status: at registration, as NIXL's
    /// Python exceptions of the same code map (`reason_of_exception`); on
    /// the data path (`data_path`), a remote disconnect is a lost peer and
    /// a mismatch is metadata NIXL refuses.
    pub fn reason(code: i32, data_path: bool) -> crate::model::Reason {
        use crate::model::Reason;
        match code {
            ERR_BACKEND => Reason::NixlBackendError,
            ERR_NOT_FOUND => Reason::NixlNotFound,
            ERR_INVALID_PARAM => Reason::NixlInvalidParam,
            ERR_MISMATCH if data_path => Reason::MetadataMismatch,
            ERR_MISMATCH => Reason::NixlInvalidParam,
            ERR_REMOTE_DISCONNECT if data_path => Reason::PeerLost,
            ERR_REPOST_ACTIVE if data_path => Reason::RepostActive,
            ERR_NOT_ALLOWED | ERR_NOT_POSTED if data_path => Reason::InvalidArgument,
            ERR_CANCELED | ERR_UNKNOWN | ERR_NOT_SUPPORTED | ERR_NO_TELEMETRY if data_path => Reason::NixlError,
            _ => Reason::Unknown,
        }
    }

    /// NIXL's name of a status, as its `nixlEnumStrings::statusStr` says it.
    pub fn name(code: i32) -> &'static str {
        match code {
            IN_PROG => "NIXL_IN_PROG",
            SUCCESS => "NIXL_SUCCESS",
            ERR_NOT_POSTED => "NIXL_ERR_NOT_POSTED",
            ERR_INVALID_PARAM => "NIXL_ERR_INVALID_PARAM",
            ERR_BACKEND => "NIXL_ERR_BACKEND",
            ERR_NOT_FOUND => "NIXL_ERR_NOT_FOUND",
            ERR_MISMATCH => "NIXL_ERR_MISMATCH",
            ERR_NOT_ALLOWED => "NIXL_ERR_NOT_ALLOWED",
            ERR_REPOST_ACTIVE => "NIXL_ERR_REPOST_ACTIVE",
            ERR_UNKNOWN => "NIXL_ERR_UNKNOWN",
            ERR_NOT_SUPPORTED => "NIXL_ERR_NOT_SUPPORTED",
            ERR_REMOTE_DISCONNECT => "NIXL_ERR_REMOTE_DISCONNECT",
            ERR_CANCELED => "NIXL_ERR_CANCELED",
            ERR_NO_TELEMETRY => "NIXL_ERR_NO_TELEMETRY",
            _ => "NIXL_ERR_UNRECOGNIZED",
        }
    }
}

/// What a hooked call was given, read before NIXL ran it. `agent` (passed
/// beside) is the `nixlAgent` object's address; handles are NIXL's
/// pointers, which it may reuse once released.
#[derive(Clone, Copy)]
pub enum Facts<'a> {
    /// The constructor (the agent's address is not an agent yet).
    AgentNew {
        name: &'a str,
    },
    AgentDrop,
    /// `createBackend`: the plugin name. Out: the backend handle.
    Backend {
        plugin: &'a str,
    },
    /// `None` lists did not read as the proven layout.
    Register {
        list: Option<List<'a>>,
    },
    Deregister {
        list: Option<List<'a>>,
    },
    /// Out: the request handle.
    CreateXfer {
        op: i32,
        local: Option<List<'a>>,
        remote: Option<List<'a>>,
        peer: &'a str,
    },
    /// `prepXferDlist` with an agent name (the local one names this agent).
    /// Out: the list handle.
    PrepDlist {
        peer: &'a str,
        list: Option<List<'a>>,
    },
    /// The strided `prepXferDlist` with an agent name; `None`: a list not
    /// read (a release whose strided descriptors are not proven). Out: the
    /// list handle.
    PrepStrided {
        peer: &'a str,
        list: Option<layout::StrideList<'a>>,
    },
    ReleaseDlist {
        dlist: usize,
    },
    /// Out: the request handle.
    MakeXfer {
        op: i32,
        local: usize,
        local_idx: &'a [i32],
        remote: usize,
        remote_idx: &'a [i32],
    },
    Status {
        req: usize,
    },
    Release {
        req: usize,
    },
    /// Out: the name of the agent loaded.
    LoadMd,
    Invalidate {
        peer: &'a str,
    },
    Connect {
        peer: &'a str,
    },
    Fetch {
        peer: &'a str,
    },
    /// `checkRemoteMD`: whether the peer's metadata (for a list) is here.
    Check {
        peer: &'a str,
    },
    /// `genNotif`: the peer and the message.
    Notify {
        peer: &'a str,
        message: &'a [u8],
    },
    /// `getNotifs`. Out: `fresh`, what the call added to the map.
    GetNotifs,
    /// A method the recording gives no meaning of its own (a row of the
    /// table whose hook is `hooks::plain`): nothing of its arguments is
    /// read, and its call is counted by method and status.
    Plain {
        method: Sym,
    },
}

/// What a hooked call handed back besides its status.
#[derive(Default, Clone, Copy)]
pub struct Out<'a> {
    pub handle: usize,
    pub name: &'a str,
    /// `getNotifs`: each peer's messages the call added, in order.
    pub fresh: &'a [(String, Vec<Vec<u8>>)],
}

/// Where the hooks hand each call, before and after NIXL ran it (the
/// interposer's `Translator`). Implementations never panic out and never
/// call NIXL's `nixlAgent` methods (a call from inside a hook passes
/// through).
pub trait CallSink: Sync {
    type Token;
    /// What [`CallSink::post_begin`] hands to [`CallSink::post_end`].
    type Post;
    /// The gate's verdict, once per process, before anything else.
    fn decided(&self, verdict: &Verdict);
    /// A call is about to run on `agent`.
    fn begin(&self, agent: usize, facts: &Facts<'_>) -> Self::Token;
    /// It returned `status` (void calls: `SUCCESS`).
    fn end(&self, token: Self::Token, status: i32, out: &Out<'_>);
    /// NIXL's definition threw instead of returning (any hooked call but a
    /// post): its C++ exception goes on to the caller untouched, and the
    /// call ends here, with no status; what `begin` opened for it is
    /// closed here. Told while the exception unwinds: it must not panic
    /// out.
    fn unwound(&self, token: Self::Token) {
        drop(token);
    }
    /// `postXferReq(req)` is about to run: the data path's per-transfer
    /// call has a pair of its own, narrow and on a sink that lives as
    /// long as the process (what it begins, it ends without looking up).
    fn post_begin(&'static self, req: usize) -> Self::Post;
    /// The post returned `status`.
    fn post_end(&'static self, post: Self::Post, status: i32);
}

/// The gate's verdict if it has been decided (the first hooked call
/// decides it).
pub fn verdict() -> Option<&'static Verdict> {
    real::decided().map(|g| &g.verdict)
}
