//! nixl-plain: a plain nixl-sys user, with no nixl-agent code in it. Tests
//! run it bare and under an interposer and compare what it prints.
//!
//! Build: `cargo build -p nixl-plain-program` (target/debug/nixl-plain).
//! Run (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
//!
//! ```text
//! LD_LIBRARY_PATH=$NIXL_LIB_DIR NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins nixl-plain ok|seed|config
//! ```
//!
//! nixl-sys (feature `stub-api`) resolves NIXL with a one-time
//! `dlopen("libnixl_capi.so")` and aborts the process when that fails, so the
//! folder holding libnixl_capi.so must be on the loader's search path
//! (LD_LIBRARY_PATH) — what any plain nixl-sys user has to arrange.
//!
//! Scenarios (argv\[1\]):
//! - `ok`: agents "A" and "B" in this process, UCX each; 4 x 64 KiB DRAM
//!   regions registered on each (nixl-sys' safe API registers one
//!   descriptor per call: 4 registerMem calls per agent); A writes its
//!   regions into B's with notification "done"; B receives it; everything
//!   released. Exit 0.
//! - `seed`: agent "A" registers "kv" (2 x 64 KiB DRAM), then "aux", one
//!   DRAM region at address 0: the registration fails, the error is
//!   printed, and the program exits 1 as a serving process dies.
//!
//! - `config`: agent "A" is made, as the first thing a serving process
//!   does; when NIXL refuses (its configuration file, say), the error is
//!   printed and the program exits 1. Exit 0 when the agent is made.
//!
//! Exit codes: 0 ok, 1 seed or config failure, 2 usage, 3 a NIXL call failed
//! unexpectedly, 4 the notification did not arrive within 10 s.
//!
//! With HOLD_BEFORE_EXIT=1 the program reads one line from stdin just before
//! it exits (after everything else), so a test can look at it alive.

use nixl_sys::{
    Agent, AgentConfig, MemType, MemoryRegion, NixlDescriptor, NixlError, NotificationMap, OptArgs, Params,
    RegistrationHandle, XferDescList, XferOp, XferStatus,
};
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

const REGION: usize = 64 * 1024;

/// A DRAM region given by address and length: a buffer of ours, or the
/// address-0 region of the seed failure.
#[derive(Debug)]
struct Region {
    addr: usize,
    len: usize,
}

impl MemoryRegion for Region {
    unsafe fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }
    fn size(&self) -> usize {
        self.len
    }
}

impl NixlDescriptor for Region {
    fn mem_type(&self) -> MemType {
        MemType::Dram
    }
    fn device_id(&self) -> u64 {
        0
    }
}

fn finish(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    if std::env::var("HOLD_BEFORE_EXIT").as_deref() == Ok("1") {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
    std::process::exit(code)
}

fn check<T>(r: Result<T, NixlError>, what: &str) -> T {
    r.unwrap_or_else(|e| {
        println!("{what} failed: {e:?}");
        finish(3)
    })
}

fn make_agent(name: &str) -> Agent {
    // No progress thread, as a default nixlAgentConfig in C++.
    let cfg = AgentConfig {
        enable_prog_thread: false,
        ..AgentConfig::default()
    };
    let agent = check(Agent::new_configured(name, &cfg), "createAgent");
    let params = check(Params::from(std::iter::empty::<(&str, &str)>()), "params");
    check(agent.create_backend("UCX", &params), "createBackend");
    agent
}

fn regions(bufs: &[Vec<u8>]) -> Vec<Region> {
    bufs.iter()
        .map(|b| Region {
            addr: b.as_ptr() as usize,
            len: b.len(),
        })
        .collect()
}

fn register(agent: &Agent, regions: &[Region], what: &str) -> Vec<RegistrationHandle> {
    regions
        .iter()
        .map(|r| check(agent.register_memory(r, None), what))
        .collect()
}

fn xfer_list(regions: &[Region]) -> XferDescList<'static> {
    let mut l = check(XferDescList::new(MemType::Dram), "xfer list");
    for r in regions {
        l.add_desc(r.addr, r.len, 0);
    }
    l
}

fn run_ok() -> i32 {
    let a = make_agent("A");
    let b = make_agent("B");
    let bufs_a: Vec<Vec<u8>> = (0..4)
        .map(|i| (0..REGION).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    let bufs_b: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; REGION]).collect();
    let (ra, rb) = (regions(&bufs_a), regions(&bufs_b));

    let mut reg_a = register(&a, &ra, "registerMem A");
    println!("registered A 4");
    let mut reg_b = register(&b, &rb, "registerMem B");
    println!("registered B 4");

    let md = check(b.get_local_md(), "getLocalMD B");
    let remote = check(a.load_remote_md(&md), "loadRemoteMD");
    println!("loaded metadata of {remote}");

    let (xa, xb) = (xfer_list(&ra), xfer_list(&rb));
    let mut args = check(OptArgs::new(), "opt args");
    check(args.set_notification_message(b"done"), "notif");
    check(args.set_has_notification(true), "notif");
    let req = check(
        a.create_xfer_req(XferOp::Write, &xa, &xb, "B", Some(&args)),
        "createXferReq",
    );
    check(a.post_xfer_req(&req, None), "postXferReq");

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut notifs: HashMap<String, Vec<String>> = HashMap::new();
    let mut map = check(NotificationMap::new(), "notif map");
    // One thread and no progress threads: B's side is progressed by polling
    // its notifications while A's transfer is in flight.
    let mut poll_b = |notifs: &mut HashMap<String, Vec<String>>| {
        check(b.get_notifications(&mut map, None), "getNotifs");
        for (k, v) in check(map.take_notifs(), "notifs") {
            notifs.entry(k).or_default().extend(v);
        }
    };
    while check(a.get_xfer_status(&req), "getXferStatus") == XferStatus::InProgress {
        poll_b(&mut notifs);
        if Instant::now() > deadline {
            println!("transfer still in progress after 10 s");
            finish(4);
        }
    }
    println!("transfer done");

    while !notifs.get("A").is_some_and(|v| v.iter().any(|m| m == "done")) {
        poll_b(&mut notifs);
        if Instant::now() > deadline {
            println!("no notification after 10 s");
            finish(4);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("notif done");

    let same = bufs_a == bufs_b;
    println!("{}", if same { "data verified" } else { "data MISMATCH" });

    drop(req); // releaseXferReq
    check(a.invalidate_remote_md("B"), "invalidateRemoteMD");
    for h in reg_a.iter_mut().chain(reg_b.iter_mut()) {
        check(h.deregister(), "deregisterMem");
    }
    println!("deregistered");
    drop((xa, xb, reg_a, reg_b, a, b));
    if same {
        0
    } else {
        3
    }
}

fn run_seed() -> i32 {
    let a = make_agent("A");
    let kv: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; REGION]).collect();
    let _kv = register(&a, &regions(&kv), "kv registration");
    println!("registered kv 2");
    let aux = Region { addr: 0, len: 4096 };
    match a.register_memory(&aux, None) {
        Ok(_) => {
            println!("aux registration succeeded");
            0
        }
        Err(e) => {
            println!("aux registration failed: {e:?}");
            // A serving process dies here, without cleaning up.
            finish(1)
        }
    }
}

fn run_config() -> i32 {
    match Agent::new("A") {
        Ok(_) => {
            println!("agent created");
            0
        }
        Err(e) => {
            println!("agent creation failed: {e:?}");
            1
        }
    }
}

fn main() {
    let code = match std::env::args().nth(1).as_deref() {
        Some("ok") => run_ok(),
        Some("seed") => run_seed(),
        Some("config") => run_config(),
        _ => {
            println!("usage: nixl-plain ok|seed|config");
            2
        }
    };
    finish(code)
}
