//! Traces over OTLP into a real receiver (protobuf over HTTP, decoded with
//! opentelemetry-proto), from a real-NIXL run: the span tree, failures with
//! NIXL/UCX's own diagnostics, retries, exemplars, and a collector outage.

use crate::support::otlp::{Receiver, RecvSpan};
use crate::support::{self, AgentProcess, Spawn};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn named<'a>(spans: &'a [RecvSpan], name: &str) -> Vec<&'a RecvSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[test]
fn lifecycle_span_tree_retries_resource_logs_and_exemplars() {
    let rx = Receiver::start();
    let cfg = "[retry]\ninitial_backoff='100ms'\nmax_backoff='200ms'\n\
               [tracing]\nresource = { rank = '0' }\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=4\nsize='64KiB'\n\
               [[group]]\nname='bad'\nkind='state'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nbackends=['NOPE']\nrequired=false\n";
    let endpoint = rx.endpoint();
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        env: &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_RESOURCE_ATTRIBUTES", "role=decode"),
        ],
        ..Default::default()
    });
    agent.wait_ready(WAIT);
    let spans = rx.wait("three attempts of `bad`", WAIT, |s| {
        s.iter()
            .filter(|s| s.name == "nixl.group.register" && s.attrs.get("group").map(String::as_str) == Some("bad"))
            .count()
            >= 3
    });

    // Success: one attempt span for kv with its facts.
    let kv: Vec<_> = named(&spans, "nixl.group.register")
        .into_iter()
        .filter(|s| s.attr("group") == "kv")
        .collect();
    assert_eq!(kv.len(), 1);
    let kv = kv[0];
    for (k, v) in [
        ("kind", "kv"),
        ("mem_type", "DRAM"),
        ("backend", "UCX"),
        ("device", "0"),
        ("descriptor_count", "4"),
        ("bytes", "262144"),
        ("attempt", "1"),
        ("outcome", "success"),
    ] {
        assert_eq!(kv.attr(k), v, "kv span attribute {k}");
    }
    assert_ne!(kv.status, 2);

    // Failure and retries: separate attempt spans, numbered, status Error.
    let mut bad: Vec<_> = named(&spans, "nixl.group.register")
        .into_iter()
        .filter(|s| s.attr("group") == "bad")
        .collect();
    bad.sort_by_key(|s| s.attr("attempt").parse::<u32>().unwrap());
    for (i, s) in bad.iter().take(3).enumerate() {
        assert_eq!(s.attr("attempt"), (i + 1).to_string());
        assert_eq!(s.attr("outcome"), "failure");
        assert_eq!(s.attr("error.type"), "plugin_unavailable");
        assert!(s.attr("error.message").contains("NOPE"), "{:?}", s.attrs);
        assert_eq!(s.status, 2, "span status Error");
        assert!(
            s.events.iter().any(|(name, _)| name == "group registration failed"),
            "{:?}",
            s.events
        );
    }
    let backend = named(&spans, "nixl.backend.create");
    assert!(backend
        .iter()
        .any(|s| s.attr("backend") == "UCX" && s.attr("outcome") == "success"));
    assert!(backend
        .iter()
        .any(|s| s.attr("backend") == "NOPE" && s.attr("error.type") == "plugin_unavailable"));
    let preflight = named(&spans, "nixl.preflight");
    assert_eq!(preflight.len(), 1);

    // One trace per operation, exported when it ends: every attempt is a
    // root of its own trace, and backend creation belongs to the attempt
    // that needed it. Nothing waits for the process to end.
    let trace = &kv.trace_id;
    for s in named(&spans, "nixl.group.register") {
        assert_eq!(s.parent_span_id, "", "an attempt is a root span");
    }
    let mut traces: Vec<&str> = named(&spans, "nixl.group.register")
        .iter()
        .map(|s| s.trace_id.as_str())
        .collect();
    let attempts = traces.len();
    traces.sort_unstable();
    traces.dedup();
    assert_eq!(traces.len(), attempts, "each attempt has a trace of its own");
    for b in &backend {
        let parent = spans.iter().find(|s| s.span_id == b.parent_span_id);
        assert_eq!(parent.map(|p| p.name.as_str()), Some("nixl.group.register"), "{b:?}");
        assert_eq!(&b.trace_id, &parent.unwrap().trace_id);
    }
    assert_eq!(preflight[0].parent_span_id, "", "preflight is an operation of its own");
    assert_ne!(&preflight[0].trace_id, trace);
    let s = kv.resource.clone();
    assert_eq!(s["service.name"], "nixl-agent");
    assert_eq!(s["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["role"], "decode");
    assert_eq!(s["rank"], "0");
    assert!(!s["host.name"].is_empty());
    assert_eq!(s["process.pid"].parse::<u32>().unwrap(), agent.pid());

    // OpenMetrics exemplar: the duration bucket of kv points at its span.
    let om = support::request(
        agent.addr,
        "GET",
        "/metrics",
        &[("Accept", "application/openmetrics-text")],
    )
    .unwrap()
    .body;
    let line = om
        .lines()
        .find(|l| {
            l.starts_with("nixl_agent_registration_duration_seconds_bucket")
                && l.contains("group=\"kv\"")
                && l.contains("# {trace_id=")
        })
        .unwrap_or_else(|| panic!("no exemplar for kv:\n{om}"));
    assert!(line.contains(&format!("trace_id=\"{trace}\"")), "{line}");
    assert!(line.contains(&format!("span_id=\"{}\"", kv.span_id)), "{line}");

    // Log lines inside spans carry the same ids.
    let registered = agent.events("group registered");
    assert_eq!(registered[0]["trace_id"], trace.as_str());
    assert_eq!(registered[0]["span_id"], kv.span_id.as_str());

    agent.signal("TERM");
    assert_eq!(agent.wait_exit(WAIT).code(), Some(0));
    let spans = rx.wait("drain and deregister spans after drain", WAIT, |s| {
        !named(s, "nixl.drain").is_empty() && !named(s, "nixl.group.deregister").is_empty()
    });
    let root = named(&spans, "nixl.drain")[0];
    assert_eq!(root.parent_span_id, "", "the drain is the root of its trace");
    let dereg = named(&spans, "nixl.group.deregister");
    assert_eq!(dereg.len(), 1);
    assert_eq!(dereg[0].attr("group"), "kv");
    assert_eq!(dereg[0].attr("descriptor_count"), "4");
    assert_eq!(
        dereg[0].parent_span_id, root.span_id,
        "deregistration is part of the drain"
    );
    assert_eq!(dereg[0].trace_id, root.trace_id);
}

#[test]
fn a_down_collector_neither_delays_readiness_nor_scrapes() {
    // A port with nothing listening: every export fails.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let endpoint = format!("http://{dead}");
    let cfg = "[tracing]\nexport_timeout='500ms'\nqueue_size=4\n\
               [[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n\
               [[group]]\nname='bad'\nkind='state'\nmem_type='DRAM'\ncount=1\nsize='4KiB'\nbackends=['NOPE']\nrequired=false\n\
               [retry]\ninitial_backoff='20ms'\nmax_backoff='20ms'\n";
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        env: &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        ..Default::default()
    });
    agent.wait_ready(WAIT);
    let t0 = std::time::Instant::now();
    for _ in 0..20 {
        assert_eq!(agent.get("/metrics").status, 200);
        assert_eq!(agent.get("/readyz").status, 200);
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "40 requests took {:?}",
        t0.elapsed()
    );
    let s = agent.wait_metrics("export failures and dropped spans counted", WAIT, |s| {
        s.metric("nixl_agent_trace_export_failures_total").value() >= 1.0
            && s.metric("nixl_agent_trace_spans_dropped_total").value() >= 1.0
    });
    assert!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "bad")
            .value()
            >= 5.0
    );
    assert_eq!(
        agent
            .events("trace export failed; the agent carries on (logged once until it recovers)")
            .len(),
        1,
        "logged once"
    );
    agent.signal("TERM");
    let t = std::time::Instant::now();
    assert_eq!(agent.wait_exit(WAIT).code(), Some(0));
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "flush is bounded by the grace period: {:?}",
        t.elapsed()
    );
}

#[test]
fn grpc_protocol_exports_to_a_real_trace_service() {
    let rx = support::otlp::GrpcReceiver::start();
    let endpoint = rx.endpoint();
    let mut agent = AgentProcess::spawn(Spawn {
        env: &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        ..Default::default()
    });
    agent.wait_ready(WAIT);
    let spans = rx.wait("kv's attempt span over gRPC", WAIT, |s| {
        s.iter()
            .any(|s| s.name == "nixl.group.register" && s.attrs.get("group").is_some_and(|g| g == "kv"))
    });
    let kv = spans
        .iter()
        .find(|s| s.name == "nixl.group.register" && s.attr("group") == "kv")
        .unwrap();
    assert_eq!(kv.attr("outcome"), "success");
    assert_eq!(kv.resource["service.name"], "nixl-agent");
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(WAIT).code(), Some(0));
    rx.wait("the drain span, flushed at shutdown", WAIT, |s| {
        s.iter().any(|s| s.name == "nixl.drain")
    });
}

/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is the whole URL, used as given;
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is a base that gets `/v1/traces` (the OTel
/// spec). Each against a real receiver listening only where it should.
#[test]
fn each_otlp_endpoint_variable_reaches_the_receiver_at_its_own_path() {
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n";
    let custom = Receiver::start_at("/otlp/spans");
    let url = format!("{}/otlp/spans", custom.endpoint());
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        env: &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)],
        ..Default::default()
    });
    agent.wait_ready(WAIT);
    custom.wait("spans at the traces URL as given", WAIT, |s| {
        s.iter().any(|s| s.name == "nixl.group.register")
    });
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(WAIT).code(), Some(0));

    let base = Receiver::start();
    let mut agent = AgentProcess::spawn(Spawn {
        config: Some(cfg),
        env: &[("OTEL_EXPORTER_OTLP_ENDPOINT", &base.endpoint())],
        ..Default::default()
    });
    agent.wait_ready(WAIT);
    base.wait("spans at <base>/v1/traces", WAIT, |s| {
        s.iter().any(|s| s.name == "nixl.group.register")
    });
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(WAIT).code(), Some(0));
}
