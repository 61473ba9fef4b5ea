//! Rust observe mode on the data path: a Dynamo-style embedder makes its own
//! transfer, peer and notification calls on its own `nixl_sys::Agent`
//! through an `ObservedAgent` (real NIXL, UCX, DRAM, two agents in one
//! process). Each call returns what nixl-sys returned; /metrics and
//! /v1/status say what happened.

use crate::support::traffic::{agent, dlist};
use crate::support::Scrape;
use nixl_agent::{Descriptor, Format, ObserveSettings, Observer};
use nixl_sys::{NotificationMap, OptArgs, XferOp, XferStatus};
use std::time::{Duration, Instant};

const LEN: usize = 256 << 10;

#[test]
fn an_embedders_transfers_peers_and_notifications_are_recorded_and_untouched() {
    let (a, backend_a) = agent("prefill-rs");
    let (b, backend_b) = agent("decode-rs");
    let mut opts_a = OptArgs::new().unwrap();
    opts_a.add_backend(&backend_a).unwrap();
    let mut opts_b = OptArgs::new().unwrap();
    opts_b.add_backend(&backend_b).unwrap();
    let src: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let back = vec![0u8; LEN];
    let dst = vec![0u8; LEN];
    let _ra = a.register_memory(&Descriptor::host(&src), Some(&opts_a)).unwrap();
    let _rb = a.register_memory(&Descriptor::host(&back), Some(&opts_a)).unwrap();
    let _rd = b.register_memory(&Descriptor::host(&dst), Some(&opts_b)).unwrap();
    let observer = Observer::new(ObserveSettings::default());
    let on_a = observer.agent(&a);
    let on_b = observer.agent(&b);

    // Metadata NIXL refuses, then the real one.
    let md = b.get_local_md().unwrap();
    let mut corrupt = md.clone();
    corrupt.truncate(md.len() / 2);
    assert!(on_a.load_remote_md(&corrupt).is_err());
    assert_eq!(on_a.load_remote_md(&md).unwrap(), "decode-rs");
    assert!(on_a.check_remote_metadata("decode-rs", None));

    // A peer never added: refused at creation, as without the observer.
    let direct = a
        .create_xfer_req(XferOp::Write, &dlist(&src), &dlist(&dst), "nobody", None)
        .err()
        .map(|e| e.to_string());
    let observed = on_a
        .create_xfer_req(XferOp::Write, &dlist(&src), &dlist(&dst), "nobody", None)
        .err()
        .map(|e| e.to_string());
    assert!(direct.is_some());
    assert_eq!(observed, direct, "the same error, observed or not");

    // A WRITE and a READ, compared byte for byte.
    for (op, local, remote) in [(XferOp::Write, &src, &dst), (XferOp::Read, &back, &dst)] {
        let req = on_a
            .create_xfer_req(op, &dlist(local), &dlist(remote), "decode-rs", None)
            .expect("request");
        let t0 = Instant::now();
        if on_a.post_xfer_req(&req, None).expect("post") {
            while on_a.get_xfer_status(&req).expect("status") != XferStatus::Success {
                assert!(t0.elapsed() < Duration::from_secs(20), "transfer did not complete");
                std::thread::yield_now();
            }
        }
        // The request is still the caller's: it can be posted again.
        assert!(on_a.get_xfer_status(&req).is_ok());
    }
    assert_eq!(dst, src);
    assert_eq!(back, src);

    // Notifications, sent and received.
    on_a.send_notification("decode-rs", b"kv ready", None).unwrap();
    let mut map = NotificationMap::new().unwrap();
    let t0 = Instant::now();
    while map.is_empty().unwrap() {
        on_b.get_notifications(&mut map, None).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10), "no notification arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    on_a.invalidate_remote_md("decode-rs").unwrap();

    let s = Scrape::parse(&observer.metrics().encode(Format::Text));
    let t = |op: &str, outcome: &str| s.value_at("nixl_agent_transfers_total", &[("op", op), ("outcome", outcome)]);
    assert_eq!(t("write", "done"), 1.0, "{}", s.text);
    assert_eq!(t("read", "done"), 1.0);
    assert_eq!(t("write", "error"), 1.0);
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        LEN as f64
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "read")]),
        LEN as f64
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_duration_seconds_count", &[("op", "write")]),
        1.0
    );
    assert_eq!(s.value_at("nixl_agent_transfers_in_flight", &[("op", "write")]), 0.0);
    let peer = |event: &str, outcome: &str| {
        s.value_at(
            "nixl_agent_peer_events_total",
            &[("event", event), ("outcome", outcome)],
        )
    };
    assert_eq!(peer("add", "ok"), 1.0);
    assert_eq!(peer("add", "error"), 1.0);
    assert_eq!(peer("check", "ok"), 1.0);
    assert_eq!(peer("remove", "ok"), 1.0);
    assert_eq!(s.value_at("nixl_agent_remote_agents", &[]), 0.0);
    let n = |d: &str| s.value_at("nixl_agent_notifications_total", &[("direction", d), ("outcome", "ok")]);
    assert_eq!(n("send"), 1.0);
    assert_eq!(n("receive"), 1.0);

    let status = observer.status();
    let x = &status.transfers;
    assert_eq!(x.recent_failures.len(), 1);
    assert_eq!(x.recent_failures[0].peer, "nobody");
    assert_eq!(x.recent_failures[0].stage, "create");
    assert_eq!(
        s.value_at(
            "nixl_agent_transfer_failures_total",
            &[("op", "write"), ("reason", "nixl_error")]
        ),
        1.0,
        "nixl-sys keeps no cause for a refused request"
    );
    let decode = x.peers.iter().find(|p| p.name == "decode-rs").expect("peer decode-rs");
    assert_eq!(decode.last_event, "remove");
    assert!(!decode.loaded);
}
