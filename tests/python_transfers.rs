//! The data path of a Python serving process under `nixl-agent-instrument`:
//! tests/python/kv_transfer.py moves KV from a prefill agent to a decode
//! process with NIXL's real Python API over UCX (TCP, two processes) and
//! meets every way a transfer goes wrong on a CPU-only machine. Run bare and
//! instrumented, the program sees the same; /metrics, /v1/status and the
//! traces (a real OTLP receiver) say what happened, with the right outcome
//! and reason.

use crate::support::held::{command, program, said, Held};
use crate::support::{self, prom};
use std::time::Duration;

#[test]
fn every_transfer_failure_is_named_and_the_program_sees_what_it_saw_bare() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let ucx = [("UCX_TLS", "tcp")];
    // Bare: what the program sees without nixl-agent.
    let bare = support::spawn_piped(&mut command(&program("kv_transfer.py"), false, &[&work], &ucx));
    {
        use std::io::Write;
        let mut stdin = bare.stdin.as_ref().unwrap();
        stdin.write_all(b"\n\n\n").unwrap();
    }
    let out = support::wait_with_output_within(bare, Duration::from_secs(180), "kv_transfer.py run bare");
    assert!(out.status.success(), "bare run failed: {out:?}");
    let bare_lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();

    let rx = support::otlp::Receiver::start();
    let endpoint = rx.endpoint();
    let mut h = Held::start(
        &program("kv_transfer.py"),
        &[&work],
        &[
            ("UCX_TLS", "tcp"),
            ("NIXL_AGENT_TRANSFER_STALL_AFTER", "1s"),
            // The one creation to a peer never added is its failure at once,
            // not a wait for its metadata (tests/interposer.rs tests the wait).
            ("NIXL_AGENT_PEER_WAIT", "0s"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            // Every successful transfer traced too: the duration histogram
            // then carries exemplars.
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1.0"),
            ("NIXL_AGENT_EXPECT", "none"),
        ],
    );
    // A real Prometheus with the shipped rules scrapes the worker from
    // before its first transfer, and a real Alertmanager with the shipped
    // inhibitions routes what fires.
    let hook = prom::Webhook::start();
    let am = prom::Alertmanager::start(hook.addr);
    let prom = prom::Prometheus::start_alerting(&[h.addr], Some(&prom::rules_with_short_for()), Some(am.addr));
    prom.wait_scraped(&[h.addr], 2, Duration::from_secs(30));
    let instance = h.addr.to_string();
    let firing = |names: &[&str]| {
        let alerts = prom.alerts();
        let on = |name: &str| {
            alerts.iter().any(|a| {
                a["labels"]["alertname"] == name
                    && a["labels"]["instance"] == instance.as_str()
                    && a["state"] == "firing"
            })
        };
        names.iter().all(|n| on(n)).then_some(alerts)
    };
    h.resume();
    h.until_hold();
    // Held at the stopped peer, past the stall threshold: in flight, stalled,
    // counted once.
    let s = support::wait_for(Duration::from_secs(30), "the stall counted in /metrics", || {
        let s = h.scrape();
        (s.value_at("nixl_agent_transfers_stalled_total", &[("op", "write")]) >= 1.0).then_some(s)
    });
    assert_eq!(s.value_at("nixl_agent_transfers_in_flight", &[("op", "write")]), 1.0);
    assert!(s.value_at("nixl_agent_transfer_oldest_in_flight_seconds", &[("op", "write")]) >= 1.0);
    assert_eq!(
        s.value_at("nixl_agent_transfers_stalled_total", &[("op", "write")]),
        1.0
    );
    let status = h.status();
    let write = &status["transfers"]["ops"][1];
    assert_eq!(write["op"], "write");
    assert_eq!(write["in_flight"], 1);
    assert_eq!(write["stalled_in_flight"], 1);
    assert_eq!(status["transfers"]["stall_after_seconds"], 1.0);
    // The peer is resumed at once, as in the bare run: one stopped for as
    // long as alerting takes on a loaded machine is one UCX may give up on,
    // which the bare run never sees. The stall alert looks back ten
    // minutes: it fires for the stall counted, after it ended.
    h.resume();
    h.until_hold();
    let s = h.scrape();
    let status = support::assert_projections_agree(h.addr);
    support::wait_for(
        Duration::from_secs(60),
        "NixlTransferStalled and NixlPeerMetadataRejected firing",
        || firing(&["NixlTransferStalled", "NixlPeerMetadataRejected"]),
    );
    // The lost peer fires too; three failures in a handful of transfers is
    // below the paging floor of NixlTransfersFailing.
    let alerts = support::wait_for(Duration::from_secs(60), "NixlPeerLost firing", || {
        firing(&["NixlPeerLost"])
    });
    assert!(
        !alerts
            .iter()
            .any(|a| a["labels"]["alertname"] == "NixlTransfersFailing" && a["labels"]["instance"] == instance.as_str()),
        "{alerts:?}"
    );
    // One cause: the lost peer explains the stall, which Alertmanager now
    // holds back (inhibited), while the peer loss is notified.
    support::wait_for(Duration::from_secs(60), "the stall inhibited by the lost peer", || {
        let stalled = am.alerts().into_iter().find(|a| {
            a["labels"]["alertname"] == "NixlTransferStalled" && a["labels"]["instance"] == instance.as_str()
        })?;
        (stalled["status"]["state"] == "suppressed"
            && hook
                .notified()
                .iter()
                .any(|(_, name, inst, status)| name == "NixlPeerLost" && *inst == instance && status == "firing"))
        .then_some(())
    });
    // OpenMetrics: the write duration's buckets point at sampled spans.
    let om = support::request(h.addr, "GET", "/metrics", &[("Accept", "application/openmetrics-text")])
        .unwrap()
        .body;
    let exemplar = om
        .lines()
        .find(|l| {
            l.starts_with("nixl_agent_transfer_duration_seconds_bucket")
                && l.contains("op=\"write\"")
                && l.contains("# {trace_id=")
        })
        .unwrap_or_else(|| panic!("no transfer exemplar:\n{om}"))
        .to_string();
    let lines = h.finish();
    assert_eq!(
        said(&lines),
        said(&bare_lines),
        "the program saw the same, bare and instrumented"
    );

    let t = |op: &str, outcome: &str| s.value_at("nixl_agent_transfers_total", &[("op", op), ("outcome", outcome)]);
    let failed =
        |op: &str, reason: &str| s.value_at("nixl_agent_transfer_failures_total", &[("op", op), ("reason", reason)]);
    // Done: the 1 MiB write, the prepped write (two 1 MiB descriptors by
    // index) and the 64 MiB write after the stall; the read.
    assert_eq!(t("write", "done"), 3.0, "{}", s.text);
    assert_eq!(t("read", "done"), 1.0);
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        ((1u64 << 20) + (2u64 << 20) + (64u64 << 20)) as f64
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "read")]),
        (1u64 << 20) as f64
    );
    // The peer never added (refused at creation), the request to the agent
    // removed in flight (NIXL: "invalidated or re-registered during
    // transfer", a stale handle), and the killed peer.
    assert_eq!(failed("write", "nixl_not_found"), 1.0);
    assert_eq!(failed("write", "peer_invalidated"), 1.0);
    assert_eq!(failed("write", "peer_lost"), 1.0);
    assert_eq!(t("write", "error"), 3.0);
    assert_eq!(t("write", "released_in_flight"), 1.0);
    assert_eq!(
        s.value_at("nixl_agent_transfers_stalled_total", &[("op", "write")]),
        1.0
    );
    assert_eq!(s.value_at("nixl_agent_transfers_in_flight", &[("op", "write")]), 0.0);
    assert_eq!(s.value_at("nixl_agent_peers_lost_total", &[]), 1.0);
    let peer = |event: &str, outcome: &str| {
        s.value_at(
            "nixl_agent_peer_events_total",
            &[("event", event), ("outcome", outcome)],
        )
    };
    assert_eq!(peer("add", "error"), 1.0);
    assert_eq!(peer("add", "ok"), 2.0);
    assert_eq!(peer("check", "ok"), 1.0);
    assert_eq!(peer("remove", "ok"), 1.0);
    assert_eq!(
        s.value_at(
            "nixl_agent_peer_failures_total",
            &[("event", "add"), ("reason", "metadata_mismatch")]
        ),
        1.0
    );
    assert_eq!(s.value_at("nixl_agent_remote_agents", &[]), 1.0);
    assert_eq!(
        s.value_at(
            "nixl_agent_notifications_total",
            &[("direction", "send"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        s.value_at("nixl_agent_instrumentation_errors_total", &[("operation", "transfer")]),
        0.0
    );

    // /v1/status: the failures with NIXL's words, the peer as last seen.
    let x = &status["transfers"];
    let reasons: Vec<&str> = x["recent_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["nixl_not_found", "peer_invalidated", "peer_lost"], "{x}");
    let lost = &x["recent_failures"][2];
    assert_eq!(lost["peer"], "decode");
    assert_eq!(lost["stage"], "status");
    assert!(
        lost["error"].as_str().unwrap().contains("nixlRemoteDisconnectError"),
        "{lost}"
    );
    let decode = x["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "decode")
        .unwrap_or_else(|| panic!("no peer decode in {x}"));
    assert_eq!(decode["last_event"], "lost");
    assert_eq!(decode["lost"], true);
    assert_eq!(x["peers_lost"], 1);
    let write = &x["ops"][1];
    assert_eq!(
        (write["done"].as_u64(), write["error"].as_u64()),
        (Some(3), Some(3)),
        "{write}"
    );
    assert_eq!(write["released_in_flight"], 1);
    assert_eq!(write["stalled"], 1);

    // Traces: every failure, the stall and the release in flight.
    let spans = rx.wait("six failed transfer spans", Duration::from_secs(30), |s| {
        s.iter().filter(|s| s.name == "nixl.transfer" && s.status == 2).count() >= 6
    });
    let transfer = |pred: &dyn Fn(&support::otlp::RecvSpan) -> bool| {
        spans
            .iter()
            .find(|s| s.name == "nixl.transfer" && pred(s))
            .unwrap_or_else(|| panic!("no such transfer span in {spans:?}"))
            .clone()
    };
    let lost = transfer(&|s| s.attrs.get("nixl.reason").map(String::as_str) == Some("peer_lost"));
    assert_eq!(lost.attr("nixl.op"), "write");
    assert_eq!(lost.attr("nixl.peer"), "decode");
    assert_eq!(lost.attr("nixl.bytes"), (64u64 << 20).to_string());
    assert_eq!(lost.attr("nixl.backend"), "UCX");
    assert!(lost.status_message.contains("nixlRemoteDisconnectError"), "{lost:?}");
    let traced = exemplar
        .split("trace_id=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap();
    let done = transfer(&|s| s.trace_id == traced);
    assert_eq!(
        done.attr("nixl.outcome"),
        "done",
        "the exemplar's span is a completed write"
    );
    let stalled = transfer(&|s| s.attrs.get("nixl.stage").map(String::as_str) == Some("stall"));
    assert_eq!(stalled.attr("nixl.stalled"), "true");
    transfer(&|s| s.attrs.get("nixl.outcome").map(String::as_str) == Some("released_in_flight"));
    // The request to the removed agent: NIXL's own words, from its status.
    let removed = transfer(&|s| {
        s.attrs.get("nixl.reason").map(String::as_str) == Some("peer_invalidated")
            && s.attrs.get("nixl.stage").map(String::as_str) == Some("status")
    });
    assert!(removed.status_message.contains("nixlNotFoundError"), "{removed:?}");
    // The refused metadata: a peer span with its reason.
    let refused = spans
        .iter()
        .find(|s| s.name == "nixl.peer")
        .unwrap_or_else(|| panic!("no nixl.peer span in {spans:?}"));
    assert_eq!(refused.attr("nixl.event"), "add");
    assert_eq!(refused.attr("nixl.reason"), "metadata_mismatch");
    assert_eq!(refused.status, 2);
    transfer(&|s| {
        s.attrs.get("nixl.stage").map(String::as_str) == Some("create")
            && s.attrs.get("nixl.peer").map(String::as_str) == Some("nobody")
    });
}

/// `shape: STATE moved=… items_read=… expected=B recorded=R` lines.
fn list_lines(out: &std::process::Output) -> Vec<String> {
    assert!(out.status.success(), "xfer_lists.py failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" moved="))
        .map(String::from)
        .collect()
}

#[test]
fn every_shape_of_transfer_list_is_read_in_bulk_and_counts_its_bytes() {
    let run = |instrumented: bool| {
        let out = support::output_within(
            &mut command(
                &program("xfer_lists.py"),
                instrumented,
                &[],
                &[("NIXL_AGENT_LISTEN", "off")],
            ),
            Duration::from_secs(180),
            "xfer_lists.py",
        );
        list_lines(&out)
    };
    let (bare, inst) = (run(false), run(true));
    assert_eq!(bare.len(), 9, "{bare:?}");
    let without_recorded = |l: &str| l.split(" recorded=").next().unwrap_or_default().to_string();
    // The program sees the same: every request DONE, every byte moved (NIXL's
    // own proof), and no list read one descriptor at a time.
    assert_eq!(
        bare.iter().map(|l| without_recorded(l)).collect::<Vec<_>>(),
        inst.iter().map(|l| without_recorded(l)).collect::<Vec<_>>()
    );
    for (b, i) in bare.iter().zip(&inst) {
        assert!(b.contains(": DONE moved=True"), "{b}");
        assert!(!b.contains("items_read=") || b.contains("items_read=0"), "{b}");
        assert!(b.ends_with("recorded=bare"), "{b}");
        let field = |k: &str| {
            i.split(&format!(" {k}="))
                .nth(1)
                .and_then(|v| v.split(' ').next())
                .map(String::from)
        };
        assert_eq!(field("expected"), field("recorded"), "the recording's bytes of {i}");
    }
}

/// NIXL makes a request at the address of one released where no wrapper
/// saw it (NIXL's binding, NIXL's own leak list): it is a new request, and
/// the old one's open transfer ends released in flight, never "done" at the
/// new one's post with the time between as its duration. And the backend
/// of a request on an agent of two is read from what the program passed:
/// `query_xfer_backend` (whose `KeyboardInterrupt` would be swallowed) is
/// never called for the record.
#[test]
fn a_request_at_a_released_ones_address_is_new_and_nixl_is_asked_nothing_for_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let run = |instrumented: bool| {
        let what = format!(
            "xfer_handles.py ({})",
            if instrumented { "instrumented" } else { "bare" }
        );
        let env = [("UCX_TLS", "tcp"), ("NIXL_AGENT_LISTEN", "off")];
        let out = support::output_within(
            &mut command(&program("xfer_handles.py"), instrumented, &[&work], &env),
            Duration::from_secs(180),
            &what,
        );
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        assert!(
            out.status.success(),
            "{what} failed: {lines:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (recorded, seen): (Vec<String>, Vec<String>) =
            said(&lines).into_iter().partition(|l| l.starts_with("recorded: "));
        (seen, recorded)
    };
    let (bare, bare_recorded) = run(false);
    assert!(
        bare.iter().any(|l| l == "address reused: True"),
        "NIXL did not reuse the released request's address: {bare:?}"
    );
    assert_eq!(bare_recorded, ["recorded: bare"]);
    let (inst, recorded) = run(true);
    assert_eq!(inst, bare, "the program saw the same, bare and instrumented");
    assert!(inst.iter().any(|l| l == "query_xfer_backend calls: 0"), "{inst:?}");
    assert_eq!(
        recorded,
        ["recorded: done=1 released_in_flight=1 in_flight=0 durations=1"],
        "the old request released in flight, the new one done once"
    );
}

/// What tests/python/notifs.py's agent B received, by one front-end's
/// recording: /metrics' notifications by direction, and /v1/status's
/// received messages and heartbeats (B's from its peer A). `interposer`:
/// `nixl-agent instrument --`; else the launcher `nixl-agent-instrument`
/// alone. Read at the program's `HOLD`, once its last message is counted.
fn notifs_recorded(interposer: bool) -> ([f64; 2], [u64; 4], Vec<String>) {
    let script = program("notifs.py");
    let addr = support::free_port();
    let listen = addr.to_string();
    let env = [("NIXL_AGENT_LISTEN", listen.as_str()), ("HOLD_BEFORE_EXIT", "1")];
    let mut cmd = if interposer {
        support::programs::launched_argv(&[support::python().into(), script.into()], &env)
    } else {
        let mut c = command(&script, true, &[], &env);
        support::programs::plain_env(&mut c);
        c
    };
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .env("HOLD_BEFORE_EXIT", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("start notifs.py");
    let mut stdout = support::Lines::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        match stdout.next_within(Duration::from_secs(120), "notifs.py's HOLD") {
            Some(l) if l.trim_end() == "HOLD" => break,
            Some(l) => lines.push(l),
            None => panic!(
                "notifs.py ended before HOLD: {lines:?}\n{}",
                std::fs::read_to_string(stderr.path()).unwrap_or_default()
            ),
        }
    }
    let received = |s: &support::Scrape| {
        s.value_at(
            "nixl_agent_notifications_total",
            &[("direction", "receive"), ("outcome", "ok")],
        )
    };
    // The recording may trail the program by a moment: up to 5 s for the
    // seven messages, then whatever it counted.
    let end = std::time::Instant::now() + Duration::from_secs(5);
    let mut s = support::scrape(addr);
    while received(&s) < 7.0 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        s = support::scrape(addr);
    }
    let counts = [
        s.value_at(
            "nixl_agent_notifications_total",
            &[("direction", "send"), ("outcome", "ok")],
        ),
        received(&s),
    ];
    let status = support::own_status(&support::status_document(addr)).clone();
    let x = &status["transfers"];
    let from_a = x["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "A")
        .map_or([0, 0], |p| {
            [
                p["notifications_received"].as_u64().unwrap(),
                p["heartbeats_received"].as_u64().unwrap(),
            ]
        });
    let seen = [
        x["notifications_received"].as_u64().unwrap(),
        x["heartbeats_received"].as_u64().unwrap(),
        from_a[0],
        from_a[1],
    ];
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"\n").unwrap();
    }
    let rest = stdout.rest_within(Duration::from_secs(60), "notifs.py's end");
    lines.extend(rest);
    let status = support::wait_within(&mut child, Duration::from_secs(60), "notifs.py");
    assert!(
        status.success(),
        "notifs.py failed: {status}; {lines:?}\n{}",
        std::fs::read_to_string(stderr.path()).unwrap_or_default()
    );
    (counts, seen, said(&lines))
}

/// Notifications a program takes through NIXL's own map of the agent
/// (`check_remote_xfer_done`, finding new and old messages by prefix and
/// by substring, and `update_notifs`) are each counted once as received,
/// heartbeats apart, by the Python front-end alone as by the interposer
/// (which counts what `getNotifs` added to the map); and the program sees
/// what it sees bare.
#[test]
fn notifications_taken_from_nixls_map_are_counted_once_by_both_front_ends() {
    let bare = support::output_within(
        &mut {
            let mut c = command(&program("notifs.py"), false, &[], &[]);
            support::programs::plain_env(&mut c);
            c
        },
        Duration::from_secs(120),
        "notifs.py bare",
    );
    assert!(bare.status.success(), "bare: {bare:?}");
    let bare_lines: Vec<String> = String::from_utf8_lossy(&bare.stdout)
        .lines()
        .map(String::from)
        .filter(|l| l != "HOLD")
        .collect();
    let (python, python_status, python_said) = notifs_recorded(false);
    assert_eq!(
        python_said,
        said(&bare_lines),
        "the program saw the same, bare and instrumented"
    );
    assert!(
        python_said.iter().any(|l| l == "left {'A': [b'hello']}"),
        "{python_said:?}"
    );
    // A sent two (hello, HB:beat); B received the five WRITEs' messages and
    // both, one a heartbeat, all from A.
    assert_eq!(python, [2.0, 7.0], "Python front-end: [sent, received]");
    assert_eq!(
        python_status,
        [7, 1, 7, 1],
        "Python front-end: received, heartbeats, of them from A"
    );
    let (interposed, interposed_status, _) = notifs_recorded(true);
    assert_eq!(interposed, python, "the interposer against the Python front-end");
    assert_eq!(
        interposed_status, python_status,
        "the interposer against the Python front-end"
    );
}

/// Who runs tests/python/telemetry.py: nobody, the launcher
/// `nixl-agent-instrument` alone, or the interposer (`nixl-agent instrument
/// --`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Under {
    Bare,
    Python,
    Interposer,
}

/// tests/python/telemetry.py `scenario` with NIXL_TELEMETRY_ENABLE=`variable`
/// under `under`: its stdout, its stderr with NIXL's and UCX's stamps taken
/// out, its exit code, and (instrumented) the recording's completed WRITEs
/// and its own failures, scraped at the program's `HOLD`.
fn telemetry_run(under: Under, scenario: &str, variable: &str) -> (String, String, Option<i32>, [f64; 2]) {
    let script = program("telemetry.py");
    // NIXL's telemetry buffers, when it records any, in a directory of this
    // run's own (NIXL names each file after its agent).
    let dir = tempfile::tempdir().unwrap();
    let dir_s = dir.path().display().to_string();
    let addr = support::free_port();
    let listen = addr.to_string();
    let nixl = [
        ("NIXL_TELEMETRY_ENABLE", variable),
        ("NIXL_TELEMETRY_DIR", dir_s.as_str()),
    ];
    let listening = [("NIXL_AGENT_LISTEN", listen.as_str())];
    let env: Vec<(&str, &str)> = nixl.iter().chain(listening.iter()).copied().collect();
    let mut cmd = match under {
        Under::Interposer => {
            support::programs::launched_argv(&[support::python().into(), script.into(), scenario.into()], &env)
        }
        _ => {
            let mut c = command(&script, under == Under::Python, &[scenario], &env);
            support::programs::plain_env(&mut c);
            c
        }
    };
    let what = format!("telemetry.py {scenario} NIXL_TELEMETRY_ENABLE={variable} ({under:?})");
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let mut stdout = support::Lines::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        match stdout.next_within(Duration::from_secs(120), &what) {
            Some(l) if l.trim_end() == "HOLD" => break,
            Some(l) => lines.push(l),
            None => panic!(
                "{what} ended before HOLD: {lines:?}\n{}",
                std::fs::read_to_string(stderr.path()).unwrap_or_default()
            ),
        }
    }
    let mut counted = [0.0; 2];
    if under != Under::Bare {
        let done =
            |s: &support::Scrape| s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]);
        // The recording may trail the program's DONE by a moment.
        let end = std::time::Instant::now() + Duration::from_secs(5);
        let mut s = support::scrape(addr);
        while done(&s) < 1.0 && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            s = support::scrape(addr);
        }
        let errors = s
            .text
            .lines()
            .filter(|l| l.starts_with("nixl_agent_instrumentation_errors_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        counted = [done(&s), errors];
    }
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"\n").unwrap();
    }
    lines.push("HOLD".into());
    lines.extend(stdout.rest_within(Duration::from_secs(60), &what));
    let status = support::wait_within(&mut child, Duration::from_secs(60), &what);
    let err = std::fs::read(stderr.path()).unwrap();
    (
        lines.join("\n"),
        support::programs::unstamped(&err),
        status.code(),
        counted,
    )
}

/// NIXL's telemetry asked for in the agent's config but turned off by
/// NIXL_TELEMETRY_ENABLE=no (NIXL's variable wins), and the opposite (on
/// by the variable alone): under either front-end the program's stdout,
/// stderr (byte for byte but NIXL's and UCX's clock stamps) and exit code
/// are the bare run's: the front-end never asks NIXL for the telemetry of
/// an agent that does not record it (NIXL would print "cannot return values
/// when telemetry is not enabled"), and the WRITE is still counted.
#[test]
fn telemetry_is_asked_only_of_an_agent_nixl_records_it_for_and_nothing_is_printed() {
    for (scenario, variable) in [("asked", "no"), ("not-asked", "yes")] {
        let (out, err, code, _) = telemetry_run(Under::Bare, scenario, variable);
        assert_eq!(code, Some(0), "bare {scenario} {variable}: {out}\n{err}");
        assert!(out.contains("transfer DONE\ndata verified"), "bare {scenario}: {out}");
        for under in [Under::Python, Under::Interposer] {
            let (i_out, i_err, i_code, [done, errors]) = telemetry_run(under, scenario, variable);
            let case = format!("{scenario}, NIXL_TELEMETRY_ENABLE={variable}, {under:?}");
            assert_eq!(i_err, err, "stderr as bare ({case})");
            assert_eq!(i_out, out, "stdout as bare ({case})");
            assert_eq!(i_code, code, "exit code as bare ({case})");
            assert_eq!(done, 1.0, "the WRITE counted done ({case})");
            assert_eq!(errors, 0.0, "no failure of the instrumentation ({case})");
        }
    }
}
