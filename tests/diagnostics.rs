//! NIXL/UCX's own stderr attributed to the failing attempt: a null aux
//! region with `validate = false` goes to UCX, which prints why it refuses
//! it; the agent maps that text to `invalid_address` and attaches it to the
//! span, the log and /v1/status. In-process: this test binary's stderr is
//! tapped the way the agent binary taps its own.

use crate::support;
use crate::support::otlp::Receiver;
use nixl_agent::config::{Config, RetryConfig};
use nixl_agent::StderrTap;
use nixl_agent::{GroupSpec, Kind, Lifecycle, MemType, Plan, Region};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_aux_region_without_validation_is_diagnosed_from_ucx_output() {
    let rx = Receiver::start();
    let tap = StderrTap::install().expect("tap stderr");
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        agent_name: "diag".into(),
        nixl_lib_dir: Some(support::nixl_lib_dir()),
        retry: RetryConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(100),
            max_attempts: 0,
        },
        groups: vec![],
        ..Config::default()
    };
    config.tracing.endpoint = Some(rx.endpoint());
    let traces = nixl_agent::cli::init_logs(&config, Some(tap.original())).expect("tracing on");

    let aux = vec![7u8; 8192];
    let plan = Plan {
        groups: vec![GroupSpec::provided(
            "aux",
            Kind::Aux,
            MemType::Dram,
            vec![
                Region::new(aux.as_ptr() as usize, aux.len(), 0),
                Region::new(0, 4096, 0),
            ],
        )
        .with_validate(false)],
    };
    let agent = Lifecycle::prepare(config, plan)
        .unwrap()
        .with_stderr_tap(Some(tap.clone()))
        .start()
        .await
        .unwrap();
    let mut status = None;
    for _ in 0..500 {
        let st = agent.status();
        if st.groups[0].last_reason.is_some() {
            status = Some(st);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = status.expect("aux failed");
    let g = &st.groups[0];
    assert_eq!(
        g.last_reason.map(|r| r.as_str()),
        Some("invalid_address"),
        "refined from UCX's text: {g:#?}"
    );
    assert_eq!(g.failed_region, Some(1));
    assert!(
        g.last_diagnostics
            .iter()
            .any(|l| l.contains("undefined address with nonzero length")),
        "UCX's line is attached: {:#?}",
        g.last_diagnostics
    );
    assert_eq!(g.descriptors, 0, "region 0 was rolled back");

    let spans = rx.wait("the failed attempt span", Duration::from_secs(20), |s| {
        s.iter().any(|s| s.name == "nixl.group.register")
    });
    let span = spans.iter().find(|s| s.name == "nixl.group.register").unwrap();
    assert_eq!(span.attr("error.type"), "invalid_address");
    assert_eq!(span.status, 2);
    let (_, rejected) = span
        .events
        .iter()
        .find(|(name, _)| name == "region rejected")
        .unwrap_or_else(|| panic!("no region event: {:?}", span.events));
    assert_eq!(rejected["region.index"], "1");
    assert_eq!(rejected["region.address"], "0x0");
    assert_eq!(rejected["region.length"], "4096");
    assert_eq!(rejected["reason"], "invalid_address");
    assert!(rejected["diagnostics"].contains("UCP_MEM_MAP_ALLOCATE"), "{rejected:?}");

    agent.shutdown().await.unwrap();
    traces.shutdown(Duration::from_secs(2));
    drop(aux);
}
