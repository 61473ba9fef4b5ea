//! The embedding example (`examples/serving.rs`, docs/embedding.md) runs:
//! a serving process with its own NIXL agent hands kv/aux to nixl-agent,
//! serves nixl-agent's routes from its own server, transfers to a peer, and
//! drains on SIGTERM with NIXL refusing the drained regions afterwards.

use crate::support::{self, Scrape};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_serving_example_on_the_lifecycle_registers_transfers_serves_and_drains() {
    run("lifecycle");
}

#[test]
fn the_serving_example_in_observe_mode_registers_transfers_serves_and_drains() {
    run("observe");
}

fn run(mode: &str) {
    let mut child = Command::new(support::example_binary("serving"))
        .arg(mode)
        .env("NIXL_LIB_DIR", support::nixl_lib_dir())
        .env_remove("NIXL_PLUGIN_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = |prefix: &str| -> String {
        loop {
            let line = rx
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("no `{prefix}` line from the example"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
    };
    let addr: SocketAddr = next("listening http://").parse().unwrap();
    let transferred = next("transferred");
    assert!(transferred.contains("match=true"), "{transferred}");

    // nixl-agent's routes, mounted in the process's own server, beside its own.
    assert_eq!(support::get(addr, "/generate").unwrap().status, 200);
    assert_eq!(support::get(addr, "/readyz").unwrap().status, 200);
    let status = support::assert_projections_agree(addr);
    assert_eq!(status["nixl"]["agent"], "prefill-0");
    assert_eq!(status["nixl"]["agent_owner"], "caller");
    let s = Scrape::parse(&support::get(addr, "/metrics").unwrap().body);
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .value(),
        4.0
    );
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "aux")
            .value(),
        1.0
    );
    // Ready, and no backend reads down: NixlBackendDown fires on 0 alone,
    // and a backend is down only when an agent failed to create it.
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    let backends = s.metric("nixl_agent_backend_up");
    let down: Vec<_> = backends.samples().into_iter().filter(|b| b.value == 0.0).collect();
    assert!(
        down.is_empty(),
        "a backend reads down on a ready {mode} process: {down:?}"
    );

    support::signal(child.id(), "TERM");
    let drained = next("drained");
    assert!(drained.contains("deregistered=5"), "{drained}");
    assert!(drained.contains("still_registered=0"), "{drained}");
    assert!(drained.contains("nixl_refuses_drained_kv=true"), "{drained}");
    let status = support::wait_for(WAIT, "the example to exit", || child.try_wait().unwrap());
    assert!(status.success(), "{status}");
}
