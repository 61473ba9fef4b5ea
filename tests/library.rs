//! The library as a serving process embeds it: its own regions handed over
//! through `GroupSpec::provided`, against the real NIXL runtime in-process.

use crate::support::{self, Scrape};
use nixl_agent::Format;
use nixl_agent::{GroupSpec, Kind, Lifecycle, LifecycleHandle, MemType, Plan, Region};
use std::time::Duration;

const READY: Duration = Duration::from_secs(30);

fn config(name: &str) -> nixl_agent::Config {
    support::library_config(name)
}

fn region(buf: &[u8]) -> Region {
    Region::new(buf.as_ptr() as usize, buf.len(), 0)
}

fn scrape(agent: &LifecycleHandle) -> Scrape {
    Scrape::parse(&agent.metrics().encode(Format::Text))
}

/// Waits until the group has failed at least once; returns the scrape.
async fn wait_failure(agent: &LifecycleHandle, group: &str) -> Scrape {
    for _ in 0..1500 {
        let s = scrape(agent);
        if s.metric("nixl_agent_registration_failures_total")
            .label("group", group)
            .sum()
            >= 1.0
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("group {group} never failed: {:#?}", agent.status());
}

async fn wait_registered(agent: &LifecycleHandle, group: &str) {
    for _ in 0..1500 {
        if scrape(agent)
            .metric("nixl_agent_group_registered")
            .label("group", group)
            .value()
            == 1.0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("group {group} never registered: {:#?}", agent.status());
}

/// An aux group whose second region is a null pointer, beside a healthy kv
/// group: the seed incident ("NIXL memory registration failed for aux tensors").
async fn null_aux(validate: bool, expect: &str) {
    let kv = vec![1u8; 256 << 10];
    let aux = vec![2u8; 16 << 10];
    let plan = Plan {
        groups: vec![
            GroupSpec::provided(
                "kv",
                Kind::Kv,
                MemType::Dram,
                vec![region(&kv[..128 << 10]), region(&kv[128 << 10..])],
            ),
            GroupSpec::provided(
                "aux",
                Kind::Aux,
                MemType::Dram,
                vec![region(&aux), Region::new(0, 4096, 0)],
            )
            .with_validate(validate),
        ],
    };
    let agent = Lifecycle::start(config(&format!("null-aux-{validate}")), plan)
        .await
        .unwrap();
    wait_registered(&agent, "kv").await;
    let s = wait_failure(&agent, "aux").await;
    let failures = s.metric("nixl_agent_registration_failures_total").label("group", "aux");
    assert_eq!(
        failures.clone().label("reason", expect).value(),
        failures.sum(),
        "every failure is {expect}"
    );
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "aux")
            .value(),
        0.0
    );
    assert_eq!(
        s.metric("nixl_agent_registered_bytes").label("group", "aux").value(),
        0.0
    );
    assert_eq!(
        s.metric("nixl_agent_group_registered").label("group", "aux").value(),
        0.0
    );
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .value(),
        2.0
    );
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    assert!(
        s.metric("nixl_agent_last_failure_timestamp_seconds")
            .label("group", "aux")
            .label("reason", expect)
            .value()
            > 1.7e9
    );

    // The HTTP surface says the same, and keeps serving.
    let r = support::get(agent.local_addr().unwrap(), "/readyz?verbose").unwrap();
    assert_eq!(r.status, 503);
    assert!(r.body.contains(&format!("[-]group:aux failed: {expect}")), "{}", r.body);
    assert!(r.body.contains("[+]group:kv ok"), "{}", r.body);
    let st = agent.status();
    let aux_st = &st.groups[1];
    assert_eq!(aux_st.failed_region, Some(1));
    let err = aux_st.last_error.clone().unwrap();
    assert!(err.contains("region 1"), "{err}");
    assert_eq!(support::get(agent.local_addr().unwrap(), "/livez").unwrap().status, 200);

    let metrics = agent.metrics().clone();
    let report = agent.shutdown().await.unwrap();
    assert_eq!(report.deregistered, 2, "only kv's two regions were ever held");
    let s = Scrape::parse(&metrics.encode(Format::Text));
    assert_eq!(s.metric("nixl_agent_registered_descriptors").sum(), 0.0);
    drop((kv, aux)); // freed only after the agent deregistered them
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_aux_region_is_refused_by_validation_as_invalid_address() {
    null_aux(true, "invalid_address").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_aux_region_without_validation_fails_in_nixl_and_rolls_back() {
    // Region 0 registers, region 1 (null) fails inside UCX; region 0 must be
    // deregistered again before the failure is reported.
    null_aux(false, "nixl_backend_error").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_catches_what_nixl_would_accept() {
    let buf = vec![0u8; 64 << 10];
    let base = buf.as_ptr() as usize;
    let groups = vec![
        // NIXL/UCX accepts an unmapped address on a CPU-only machine; the agent does not.
        GroupSpec::provided(
            "unmapped",
            Kind::Aux,
            MemType::Dram,
            vec![Region::new(0x10000, 4096, 0)],
        ),
        GroupSpec::provided(
            "overlap",
            Kind::Kv,
            MemType::Dram,
            vec![Region::new(base, 8192, 0), Region::new(base + 4096, 8192, 0)],
        ),
        GroupSpec::provided("empty", Kind::State, MemType::Dram, vec![Region::new(base, 0, 0)]),
    ];
    let expect = [
        ("unmapped", "unmapped_address"),
        ("overlap", "overlapping_regions"),
        ("empty", "zero_length"),
    ];
    let agent = Lifecycle::start(config("validation"), Plan { groups }).await.unwrap();
    for (group, reason) in expect {
        let s = wait_failure(&agent, group).await;
        assert!(
            s.metric("nixl_agent_registration_failures_total")
                .label("group", group)
                .label("reason", reason)
                .sum()
                >= 1.0,
            "{group}: {:?}",
            agent.status().groups
        );
    }
    agent.shutdown().await.unwrap();
    drop(buf);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_to_zero_and_stops_serving() {
    let bufs: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; 64 << 10]).collect();
    let plan = Plan {
        groups: vec![GroupSpec::provided(
            "kv",
            Kind::Kv,
            MemType::Dram,
            bufs.iter().map(|b| region(b)).collect(),
        )],
    };
    let agent = Lifecycle::start(config("drain"), plan).await.unwrap();
    assert!(agent.wait_ready(READY).await, "{:#?}", agent.status());
    let s = scrape(&agent);
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .value(),
        16.0
    );
    assert_eq!(
        s.metric("nixl_agent_registered_bytes").label("group", "kv").value(),
        (16 * (64 << 10)) as f64
    );
    let addr = agent.local_addr().unwrap();
    let metrics = agent.metrics().clone();
    let report = agent.shutdown().await.unwrap();
    assert_eq!((report.deregistered, report.failed), (16, 0));
    let s = Scrape::parse(&metrics.encode(Format::Text));
    assert_eq!(
        s.metric("nixl_agent_registered_descriptors")
            .label("group", "kv")
            .value(),
        0.0
    );
    assert_eq!(
        s.metric("nixl_agent_registered_bytes").label("group", "kv").value(),
        0.0
    );
    assert_eq!(s.metric("nixl_agent_ready").value(), 0.0);
    assert_eq!(
        s.metric("nixl_agent_deregistrations_total")
            .label("group", "kv")
            .value(),
        1.0
    );
    assert!(support::get(addr, "/livez").is_err(), "server stopped after drain");
    drop(bufs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_failing_group_does_not_gate_readiness() {
    let buf = vec![0u8; 4096];
    let plan = Plan {
        groups: vec![
            GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![region(&buf)]),
            GroupSpec::provided(
                "extra",
                Kind::Custom("mamba_conv".into()),
                MemType::Dram,
                vec![Region::new(0, 64, 0)],
            )
            .with_required(false),
        ],
    };
    let agent = Lifecycle::start(config("optional"), plan).await.unwrap();
    assert!(agent.wait_ready(READY).await);
    let s = wait_failure(&agent, "extra").await;
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("kind", "mamba_conv")
            .get()
            .map(|v| v >= 1.0),
        Some(true)
    );
    let r = support::get(agent.local_addr().unwrap(), "/readyz?verbose").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        !r.body.contains("extra"),
        "optional groups are not readiness checks: {}",
        r.body
    );
    agent.shutdown().await.unwrap();
    drop(buf);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_plan_is_refused_before_anything_starts() {
    let g = GroupSpec::provided("a\"b", Kind::Aux, MemType::Dram, vec![]);
    let err = Lifecycle::start(config("bad-plan"), Plan { groups: vec![g] })
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("groups[0].name"), "{err}");
}

/// The duration buckets resolve what NIXL does: attempts of very different
/// sizes (1 region and 4,096 regions, re-registered a few times) land in
/// more than one bucket, and even the smallest attempt is above the first
/// bucket (with the old 0.5 ms first bucket, every small attempt sat in it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_durations_spread_over_the_buckets() {
    let small = vec![1u8; 4096];
    let big = vec![2u8; 4096 * 4096];
    let plan = Plan {
        groups: vec![
            GroupSpec::provided("small", Kind::Aux, MemType::Dram, vec![region(&small)]).with_validate(false),
            GroupSpec::provided("big", Kind::Kv, MemType::Dram, big.chunks(4096).map(region).collect())
                .with_validate(false),
        ],
    };
    let agent = Lifecycle::start(config("buckets"), plan).await.unwrap();
    assert!(agent.wait_ready(READY).await, "{:#?}", agent.status());
    for round in 1..=3 {
        agent.reregister(None).unwrap();
        for _ in 0..1500 {
            let attempts = scrape(&agent).metric("nixl_agent_registration_attempts_total").sum();
            if attempts >= 2.0 * (round as f64 + 1.0) && agent.status().ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let s = scrape(&agent);
    // Per-bucket counts from the cumulative ones, over both groups.
    let mut used = std::collections::BTreeSet::new();
    for group in ["small", "big"] {
        let mut buckets: Vec<(f64, f64)> = s
            .metric("nixl_agent_registration_duration_seconds_bucket")
            .label("group", group)
            .samples()
            .iter()
            .map(|x| {
                let le = x
                    .labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .map(|(_, v)| v.clone())
                    .unwrap();
                (le.parse::<f64>().unwrap_or(f64::INFINITY), x.value)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = buckets.last().map_or(0.0, |b| b.1);
        assert!(total >= 4.0, "{group}: {total} attempts observed");
        assert!(
            buckets[0].1 < total,
            "{group}: all {total} attempts in the first bucket (le={}): it resolves nothing",
            buckets[0].0
        );
        let mut below = 0.0;
        for (le, cumulative) in buckets {
            if cumulative > below {
                used.insert(le.to_string());
            }
            below = cumulative;
        }
    }
    assert!(used.len() >= 2, "every attempt landed in one bucket: {used:?}");
    agent.shutdown().await.unwrap();
    drop((small, big));
}

/// Dropping a running lifecycle inside a runtime never blocks it: here a
/// current_thread runtime, whose one thread every task shares (a tokio
/// worker is the same in small). The runtime's next task runs while the
/// drain is still going on (the drop handed its wait to a thread), and the
/// drain still happens: every region is deregistered, nothing leaked.
#[test]
fn dropping_the_handle_inside_a_runtime_never_blocks_it() {
    // Enough that the drain (a NIXL deregistration per region) outlasts
    // the drop's own work many times over, on a loaded machine too.
    const REGIONS: usize = 65536;
    const SIZE: usize = 256;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let buf = vec![0u8; REGIONS * SIZE];
    let plan = Plan {
        groups: vec![GroupSpec::provided(
            "kv",
            Kind::Kv,
            MemType::Dram,
            buf.chunks(SIZE).map(region).collect(),
        )],
    };
    rt.block_on(async {
        let agent = Lifecycle::start(config("drop-in-runtime"), plan).await.unwrap();
        assert!(agent.wait_ready(READY).await, "{:#?}", agent.status());
        let metrics = agent.metrics().clone();
        let deregistered = move || {
            let s = Scrape::parse(&metrics.encode(Format::Text));
            let d = |name| s.metric(name).label("group", "kv").get().unwrap_or(-1.0);
            (
                d("nixl_agent_deregistrations_total"),
                d("nixl_agent_registered_descriptors"),
            )
        };
        assert_eq!(deregistered(), (0.0, REGIONS as f64));
        let look = deregistered.clone();
        let t0 = std::time::Instant::now();
        drop(agent);
        let dropped_in = t0.elapsed();
        // The runtime's next task: on a blocked runtime it runs only once
        // the drain is over.
        let seen = tokio::spawn(async move { look() }).await.unwrap();
        assert_eq!(
            seen,
            (0.0, REGIONS as f64),
            "the runtime ran its next task only after the drain (the drop took {dropped_in:?})"
        );
        for _ in 0..1500 {
            if deregistered() == (1.0, 0.0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the drain never deregistered: {:?}", deregistered());
    });
    drop(buf);
}
