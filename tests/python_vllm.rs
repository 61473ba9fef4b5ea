//! vLLM's KV path on NIXL's real Python API (tests/python/vllm_sequence.py:
//! a decode and a prefill process, N×5 strided prepared lists, one READ of
//! 2N descriptors by index with its notification, heartbeats), bare and
//! under `nixl-agent-instrument` with `NIXL_AGENT_TRANSPORTS=1`: the READ
//! is counted once with NIXL's own byte count, a refused repost and a
//! release NIXL refused leave the transfer in flight, stale
//! handles and a peer never added each have their reason, more prepared
//! lists than are kept evict the right ones, the peer's table in
//! /v1/status says all of it, UCX's tables stay off the program's stdout,
//! and a live Prometheus fires the TCP fall-back alert for the worker
//! forced over TCP and not for a loopback that UCX moves over cma.

use crate::support::held::{command, program, said, Held};
use crate::support::{self, prom};
use std::process::Stdio;
use std::time::Duration;

/// A line of one of UCX's protocol tables (`UCX_PROTO_INFO=y`).
fn ucx_table(line: &str) -> bool {
    line.starts_with('[') && (line.contains("| ") || line.contains("+--"))
}

#[test]
fn vllms_read_is_counted_once_with_its_bytes_and_the_tcp_fallback_alert_fires_only_for_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let tcp = [("UCX_TLS", "tcp")];
    let bare = command(&program("vllm_sequence.py"), false, &[&work], &tcp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        bare.stdin.as_ref().unwrap().write_all(b"\n\n\n").unwrap();
    }
    let out = support::wait_with_output_within(bare, support::RUN_WITHIN, "vllm_sequence.py run bare");
    assert!(out.status.success(), "bare run failed: {out:?}");
    let bare_lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    // NIXL 1.5.1's own words for what the program did: the stale handles
    // (after the peer was removed and added again) and the repost.
    let bare_err = String::from_utf8_lossy(&out.stderr);
    for words in [
        "was invalidated or re-registered after transfer request creation; not posting stale handle",
        "was invalidated or re-registered after prepped xfer request creation",
        "transfer request is still in progress and cannot be reposted",
    ] {
        assert!(bare_err.contains(words), "NIXL did not say {words:?}:\n{bare_err}");
    }

    let transports = ("NIXL_AGENT_TRANSPORTS", "1");
    let mut h = Held::start(
        &program("vllm_sequence.py"),
        &[&work],
        // The creation to a peer never added is its failure at once, not a
        // wait for its metadata (tests/interposer.rs tests the wait).
        &[
            ("UCX_TLS", "tcp"),
            transports,
            ("NIXL_AGENT_EXPECT", "none"),
            ("NIXL_AGENT_PEER_WAIT", "0s"),
        ],
    );
    let mut lb = Held::start(
        &program("vllm_sequence.py"),
        &["--loopback"],
        &[transports, ("NIXL_AGENT_EXPECT", "none")],
    );
    let prom = prom::Prometheus::start_alerting(&[h.addr, lb.addr], Some(&prom::rules_with_short_for()), None);

    // After vLLM's READ: one, with the bytes NIXL's telemetry counted.
    let telemetry: f64 = h
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("telemetry bytes: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no telemetry line in {:?}", h.lines));
    assert_eq!(telemetry, 8.0 * 4096.0, "2N descriptors of a 4 KiB block");
    let s = h.scrape();
    assert_eq!(
        s.value_at("nixl_agent_transfers_total", &[("op", "read"), ("outcome", "done")]),
        1.0
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "read")]),
        telemetry
    );
    assert_eq!(
        s.value_at(
            "nixl_agent_transfer_transport",
            &[("op", "read"), ("scope", "intra-node"), ("transport", "tcp")]
        ),
        1.0,
        "{}",
        s.text
    );
    h.resume();
    h.until_hold();

    // A release NIXL refused while the transfer is in flight: nothing
    // ended, the transfer is still in flight.
    let s = h.scrape();
    assert_eq!(
        s.value_at("nixl_agent_transfers_in_flight", &[("op", "read")]),
        1.0,
        "{}",
        s.text
    );
    assert!(!s.text.contains("outcome=\"released_in_flight\""), "{}", s.text);
    assert!(
        h.lines.iter().any(|l| l == "released: nixlBackendError"),
        "{:?}",
        h.lines
    );
    h.resume();
    h.until_hold();

    let s = h.scrape();
    let status = support::assert_projections_agree(h.addr);
    let failed = |reason: &str| {
        s.value_at(
            "nixl_agent_transfer_failures_total",
            &[("op", "read"), ("reason", reason)],
        )
    };
    // The repost refused while the first posting was in flight; the first
    // posting's DONE counted with its 16 MiB.
    assert_eq!(failed("repost_active"), 1.0);
    // Two stale handles posted, one stale prepared list used: NIXL's
    // "invalidated or re-registered"; the peer never added: not found.
    assert_eq!(failed("peer_invalidated"), 3.0);
    assert_eq!(failed("nixl_not_found"), 1.0);
    // Done: vLLM's READ, the first posting of the repost, the transfer
    // whose release was refused, the READ after the flood of lists, and
    // the two into tensors (two of 4 KiB prepared, one of 4 KiB).
    let tensors = 3.0 * 4096.0;
    assert_eq!(
        s.value_at("nixl_agent_transfers_total", &[("op", "read"), ("outcome", "done")]),
        6.0
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "read")]),
        2.0 * telemetry + (32u64 << 20) as f64 + tensors,
        "the READ after 4,200 more prepared lists still has its bytes: the local list was kept"
    );
    assert_eq!(s.value_at("nixl_agent_transfers_in_flight", &[("op", "read")]), 0.0);
    assert_eq!(s.value_at("nixl_agent_transfers_stalled_total", &[("op", "read")]), 0.0);
    assert_eq!(
        s.value_at(
            "nixl_agent_notifications_total",
            &[("direction", "send"), ("outcome", "ok")]
        ),
        3.0
    );
    assert_eq!(
        s.value_at("nixl_agent_instrumentation_errors_total", &[("operation", "transfer")]),
        0.0
    );
    // The series budget holds with the data path and the transports.
    let series = s
        .text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    assert!(series <= 160, "{series} series");

    let x = &status["transfers"];
    assert_eq!(
        (x["heartbeats_sent"].as_u64(), x["notifications_sent"].as_u64()),
        (Some(2), Some(3))
    );
    let prefill = x["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "prefill")
        .unwrap_or_else(|| panic!("no peer prefill in {x}"));
    assert_eq!(
        prefill["done"], 6,
        "the READ after the flood is the peer's: its list was kept"
    );
    assert_eq!(prefill["released_in_flight"], 0);
    assert_eq!(
        prefill["bytes"].as_f64(),
        Some(2.0 * telemetry + (32u64 << 20) as f64 + tensors)
    );
    assert_eq!(prefill["failed"], 4);
    assert_eq!(
        (
            prefill["heartbeats_sent"].as_u64(),
            prefill["notifications_sent"].as_u64()
        ),
        (Some(2), Some(3))
    );
    let reasons: Vec<(&str, u64)> = prefill["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["reason"].as_str().unwrap(), f["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(reasons, [("repost_active", 1), ("peer_invalidated", 3)]);
    assert_eq!(prefill["last_failure"]["reason"], "peer_invalidated");
    assert!(prefill["invalidated_unix_seconds"].as_f64().is_some());
    assert_eq!(
        prefill["transports"],
        serde_json::json!([{"op": "read", "scope": "intra-node", "transports": ["tcp"]}])
    );

    // The loopback between two agents of one process: cma.
    let l = lb.scrape();
    assert_eq!(
        l.value_at(
            "nixl_agent_transfer_transport",
            &[("op", "write"), ("scope", "intra-node"), ("transport", "cma")]
        ),
        1.0,
        "{}",
        l.text
    );
    assert!(!l.text.contains("transport=\"tcp\""), "{}", l.text);

    // The fall-back alert: firing for the TCP worker; the cma loopback,
    // scraped as long, stays silent.
    let tcp_instance = h.addr.to_string();
    let lb_instance = lb.addr.to_string();
    let alerts = support::wait_for(Duration::from_secs(60), "NixlTransferTcpFallback", || {
        let alerts = prom.alerts();
        alerts
            .iter()
            .any(|a| {
                a["labels"]["alertname"] == "NixlTransferTcpFallback"
                    && a["labels"]["instance"] == tcp_instance.as_str()
                    && a["state"] == "firing"
            })
            .then_some(alerts)
    });
    let fired = alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == "NixlTransferTcpFallback" && a["state"] == "firing")
        .unwrap();
    assert_eq!(
        (fired["labels"]["op"].as_str(), fired["labels"]["scope"].as_str()),
        (Some("read"), Some("intra-node"))
    );
    assert!(
        !alerts
            .iter()
            .any(|a| a["labels"]["alertname"] == "NixlTransferTcpFallback"
                && a["labels"]["instance"] == lb_instance.as_str()),
        "{alerts:?}"
    );

    lb.resume();
    let lb_lines = lb.finish();
    let lines = h.finish();
    // UCX's tables never reached the program's stdout; it saw what it saw bare.
    for l in lines.iter().chain(&lb_lines) {
        assert!(!ucx_table(l), "a UCX table line on stdout: {l}");
    }
    assert_eq!(
        said(&lines),
        said(&bare_lines),
        "the program saw the same, bare and instrumented"
    );
}

/// The prefill worker on another "node" (a network namespace of its own,
/// on its end of a veth pair), UCX over TCP: the transport is named
/// `inter-node` `tcp`, and the fall-back alert stays silent, for no peer of
/// this process goes over RDMA (on a node with RDMA, it would fire).
#[cfg_attr(
    not(nixl_agent_netns),
    ignore = "needs root and iproute2 to make a network namespace and a veth pair (the build found neither)"
)]
#[test]
fn a_peer_on_another_node_over_tcp_is_inter_node_and_silent_without_rdma() {
    let pid = std::process::id();
    let x = pid % 200 + 20;
    let ns = format!("nixl-vs-{pid}");
    let (dev_a, dev_b) = (format!("nvs{pid}a"), format!("nvs{pid}b"));
    let (ip_a, ip_b) = (format!("10.211.{x}.1"), format!("10.211.{x}.2"));
    let _netns = support::netns::veth_to_here(&ns, [&dev_a, &dev_b], [&ip_a, &ip_b])
        .unwrap_or_else(|e| panic!("cannot make the namespace: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let mut h = Held::start(
        &program("vllm_sequence.py"),
        &[&work],
        &[
            ("UCX_TLS", "tcp"),
            ("UCX_NET_DEVICES", &dev_a),
            ("PREFILL_NETNS", &ns),
            ("PREFILL_NET_DEVICES", &dev_b),
            ("NIXL_AGENT_TRANSPORTS", "1"),
            ("NIXL_AGENT_EXPECT", "none"),
        ],
    );
    let prom = prom::Prometheus::start_alerting(&[h.addr], Some(&prom::rules_with_short_for()), None);
    let s = h.scrape();
    assert_eq!(
        s.value_at(
            "nixl_agent_transfer_transport",
            &[("op", "read"), ("scope", "inter-node"), ("transport", "tcp")]
        ),
        1.0,
        "{}",
        s.text
    );
    // Scraped past the alert's (shortened) `for`: nothing fires.
    prom.wait_scraped(&[h.addr], 8, Duration::from_secs(30));
    let alerts = prom.alerts();
    assert!(
        !alerts
            .iter()
            .any(|a| a["labels"]["alertname"] == "NixlTransferTcpFallback"),
        "{alerts:?}"
    );
    for _ in 0..2 {
        h.resume();
        h.until_hold();
    }
    let status = h.status();
    let prefill = status["transfers"]["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "prefill")
        .cloned()
        .unwrap_or_else(|| panic!("no peer prefill in {status}"));
    assert_eq!(
        prefill["transports"],
        serde_json::json!([{"op": "read", "scope": "inter-node", "transports": ["tcp"]}])
    );
    assert_eq!(prefill["done"], 6);
    let lines = h.finish();
    assert!(!lines.iter().any(|l| ucx_table(l)), "{lines:?}");
}
