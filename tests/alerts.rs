//! The Prometheus rules in alerts/: promtool's lint and unit tests, the mixin
//! conventions as Prometheus itself parses them, and a live Prometheus
//! scraping real agents, where the failure alerts fire for a failing agent
//! and stay silent for a healthy one.

use crate::support::prom::{self, dep_bin, read, Alertmanager, Prometheus, Webhook, ALERTMANAGER_CONFIG};
use crate::support::{self, AgentProcess, Spawn};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

const RULES: &str = "alerts/nixl-agent.rules.yml";
const RUNBOOKS: &str = "docs/runbooks.md";

/// The alerts the issue asks for, at least.
const REQUIRED: [&str; 18] = [
    "NixlRegistrationFailing",
    "NixlAgentNotReady",
    "NixlAgentDown",
    "NixlLibraryUnavailable",
    "NixlBackendDown",
    "NixlRegisteredMemoryDropped",
    "NixlRegistrationRetrying",
    "NixlRegistrationSlow",
    "NixlDeregistrationFailing",
    "NixlGroupGaveUp",
    "NixlLifecycleStuck",
    "NixlTransfersFailing",
    "NixlTransferStalled",
    "NixlPeerLost",
    "NixlPeerMetadataRejected",
    "NixlCanaryDataPathBroken",
    "NixlCanaryRoundsStopped",
    "NixlTransferTcpFallback",
];

/// A healthy `kv` group beside a required group whose backend does not
/// exist: reason `plugin_unavailable`, retried every second at most.
const FAILING: &str = "[retry]\ninitial_backoff = '200ms'\nmax_backoff = '1s'\n\
    [[group]]\nname = 'kv'\nkind = 'kv'\nmem_type = 'DRAM'\ncount = 2\nsize = '64KiB'\n\
    [[group]]\nname = 'bad'\nkind = 'state'\nmem_type = 'DRAM'\ncount = 1\nsize = '4KiB'\nbackends = ['NOPE']\n";

fn promtool(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(support::promtool())
        .args(args)
        .current_dir(support::repo())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn test_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(support::repo().join("alerts/tests"))
        .expect("alerts/tests/")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yml") || n.ends_with(".yaml"))
        .map(|n| format!("alerts/tests/{n}"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no promtool unit tests in alerts/tests/");
    files
}

fn alert_names() -> Vec<String> {
    prom::rule_exprs(&read(RULES)).into_iter().map(|(n, _)| n).collect()
}

#[test]
fn promtool_check_rules_is_clean_with_every_lint_fatal() {
    let (ok, out) = promtool(&["check", "rules", "--lint=all", "--lint-fatal", RULES]);
    assert!(ok, "promtool check rules:\n{out}");
    let n = alert_names().len();
    assert!(out.contains(&format!("SUCCESS: {n} rules found")), "{out}");
}

/// The checked-in rules are `nixl-agent rules` with its defaults; other
/// selectors and runbook locations render rules promtool accepts, with no
/// trace of the defaults.
#[test]
fn rules_file_is_the_generator_output_and_other_parameters_render_clean_rules() {
    let out = support::binary().arg("rules").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        read(RULES),
        "alerts/nixl-agent.rules.yml differs from `nixl-agent rules`: regenerate it"
    );
    let selector = r#"job=~"sglang.*",namespace="prod""#;
    let base = "https://wiki.example.org/nixl/runbooks";
    let out = support::binary()
        .args(["rules", "--selector", selector, "--runbook-url-base", base])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yml");
    std::fs::write(&file, &text).unwrap();
    let (ok, said) = promtool(&["check", "rules", "--lint=all", "--lint-fatal", file.to_str().unwrap()]);
    assert!(ok, "{said}");
    assert!(!text.contains(r#"job="nixl-agent""#), "a default selector is left");
    for (name, expr) in prom::rule_exprs(&text) {
        for sel in prom::selectors(&expr) {
            assert!(
                sel.has_matcher(r#"job=~"sglang.*""#) && sel.has_matcher(r#"namespace="prod""#),
                "{name}: {sel:?}"
            );
        }
    }
    assert_eq!(
        text.matches(&format!("runbook_url: {base}#nixl")).count(),
        alert_names().len()
    );
    // A bad parameter is named, exit 2, nothing printed.
    for (flag, value, says) in [
        ("--selector", "job", "--selector"),
        ("--runbook-url-base", "docs/runbooks.md", "absolute"),
    ] {
        let out = support::binary().args(["rules", flag, value]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{flag} {value}");
    }
}

#[test]
fn promtool_unit_tests_pass() {
    let files = test_files();
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let (ok, out) = promtool(&args);
    assert!(ok, "promtool test rules:\n{out}");
    assert!(!out.contains("FAILED"), "{out}");
}

#[test]
fn every_alert_has_a_unit_test_that_fires_and_one_that_stays_silent() {
    let names = alert_names();
    for want in REQUIRED {
        assert!(names.iter().any(|n| n == want), "{RULES} lacks {want}");
    }
    let (mut fires, mut silent) = (BTreeSet::new(), BTreeSet::new());
    for file in test_files() {
        let text = read(&file);
        let mut current: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("alertname:") {
                let name = name.trim().to_string();
                assert!(names.contains(&name), "{file}: test for unknown alert {name}");
                current = Some(name);
            } else if let Some(exp) = line.strip_prefix("exp_alerts:") {
                let name = current.take().expect("exp_alerts: after alertname:");
                if exp.trim() == "[]" {
                    silent.insert(name);
                } else {
                    fires.insert(name);
                }
            }
        }
        assert!(
            read(&file).contains("../nixl-agent.rules.yml"),
            "{file} tests the rules file"
        );
    }
    for n in &names {
        assert!(fires.contains(n), "no unit test where {n} fires");
        assert!(
            silent.contains(n),
            "no unit test where {n} stays silent (exp_alerts: [])"
        );
    }
}

/// The runbook section of an alert: from its `## Name` heading to the next.
fn runbook_section<'a>(runbooks: &'a str, name: &str) -> &'a str {
    let head = format!("\n## {name}\n");
    let start = runbooks
        .find(&head)
        .unwrap_or_else(|| panic!("{RUNBOOKS} has no section `## {name}`"));
    let rest = &runbooks[start + head.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

fn duration_word(seconds: f64) -> String {
    let s = seconds as u64;
    if s.is_multiple_of(3600) && s > 0 {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[test]
fn rules_follow_the_mixin_conventions_as_prometheus_parses_them() {
    let text = read(RULES);
    let runbooks = read(RUNBOOKS);
    let anchors = prom::anchors(&runbooks);
    let exprs = prom::rule_exprs(&text);
    let prom = Prometheus::start(&[], Some(&text));
    let rules = prom.rules();
    assert_eq!(rules.len(), alert_names().len(), "{rules:#?}");
    let mut severities = BTreeSet::new();
    for r in &rules {
        let name = r["name"].as_str().unwrap();
        assert_eq!(r["type"], "alerting", "{name}");
        assert!(
            name.starts_with("Nixl")
                && name.chars().all(|c| c.is_ascii_alphanumeric())
                && name[4..].starts_with(|c: char| c.is_ascii_uppercase()),
            "{name}: CamelCase with the Nixl prefix"
        );
        assert_ne!(r["health"], "err", "{name}: {}", r["lastError"]);

        let labels = r["labels"].as_object().unwrap();
        let severity = labels["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity}"
        );
        severities.insert(severity.to_string());

        let ann = r["annotations"].as_object().unwrap();
        let keys: BTreeSet<&str> = ann.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["summary", "description", "runbook_url"]),
            "{name}: annotations"
        );
        let summary = ann["summary"].as_str().unwrap();
        assert!(
            !summary.is_empty() && !summary.contains("{{") && summary.ends_with('.'),
            "{name}: summary is one static sentence: {summary:?}"
        );
        let description = ann["description"].as_str().unwrap();
        assert!(
            description.contains("$labels") || description.contains("$value"),
            "{name}: description is templated: {description:?}"
        );
        let url = ann["runbook_url"].as_str().unwrap();
        assert!(
            url.starts_with(&format!("{}#", nixl_agent::cli::DEFAULT_RUNBOOK_URL_BASE)),
            "{name}: runbook_url is absolute: {url}"
        );
        let anchor = name.to_lowercase();
        assert!(
            url.ends_with(&format!("docs/runbooks.md#{anchor}")),
            "{name}: runbook_url {url}"
        );
        assert!(anchors.contains(&anchor), "{RUNBOOKS} has no anchor #{anchor}");

        // The runbook justifies this very threshold.
        let section = runbook_section(&runbooks, name);
        let dur = duration_word(r["duration"].as_f64().unwrap());
        assert!(
            section.contains(&format!("`for: {dur}`")),
            "{RUNBOOKS} § {name} does not state and justify `for: {dur}`"
        );
        assert!(
            section.contains(&format!("**Severity** {severity}")),
            "{RUNBOOKS} § {name} does not state severity {severity}"
        );
        for part in ["**Meaning.**", "**Confirm.**", "**Causes and fixes.**", "**Why"] {
            assert!(section.contains(part), "{RUNBOOKS} § {name} lacks {part}");
        }

        // Every selector is scoped to the agent's scrape job, and the rules
        // file says what Prometheus parsed.
        let query = r["query"].as_str().unwrap();
        let raw = &exprs.iter().find(|(n, _)| n == name).expect("in the file").1;
        assert_eq!(prom::metric_names(raw), prom::metric_names(query), "{name}");
        let selectors = prom::selectors(query);
        assert!(!selectors.is_empty(), "{name}: {query}");
        for s in selectors {
            assert!(
                s.has_matcher(&format!("job=\"{}\"", prom::JOB)),
                "{name}: selector {s:?} lacks job=\"{}\"",
                prom::JOB
            );
        }
    }
    assert_eq!(
        severities,
        BTreeSet::from(["critical".to_string(), "warning".to_string(), "info".to_string()])
    );
    // Every anchor the runbooks link to internally exists.
    for r in prom::runbook_refs(&runbooks.replace("](#", "](docs/runbooks.md#")) {
        assert!(anchors.contains(&r), "{RUNBOOKS} links to missing #{r}");
    }
}

fn label<'a>(a: &'a Value, k: &str) -> &'a str {
    a["labels"][k].as_str().unwrap_or_default()
}

fn find<'a>(alerts: &'a [Value], name: &str, instance: &str, want: &[(&str, &str)]) -> Option<&'a Value> {
    alerts.iter().find(|a| {
        label(a, "alertname") == name && label(a, "instance") == instance && want.iter().all(|(k, v)| label(a, k) == *v)
    })
}

fn summary(alerts: &[Value]) -> String {
    alerts
        .iter()
        .map(|a| format!("{} {} {}", a["state"], label(a, "alertname"), a["labels"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn live_prometheus_fires_failure_alerts_for_a_failing_agent_and_none_for_a_healthy_one() {
    let mut healthy = AgentProcess::spawn(Spawn::default());
    let failing = AgentProcess::spawn(Spawn {
        config: Some(FAILING),
        ..Default::default()
    });
    healthy.wait_ready(Duration::from_secs(30));
    failing.wait_metrics("a plugin_unavailable failure", Duration::from_secs(30), |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "bad")
            .label("reason", "plugin_unavailable")
            .sum()
            >= 1.0
    });
    let (h, f) = (healthy.addr.to_string(), failing.addr.to_string());
    let prom = Prometheus::start(&[healthy.addr, failing.addr], Some(&prom::rules_with_short_for()));

    // The failing agent: failing, not ready, its backend down, retrying.
    let firing = |a: &Value| a["state"] == "firing";
    let active = |a: &Value| a["state"] == "firing" || a["state"] == "pending";
    let alerts = support::wait_for(
        Duration::from_secs(40),
        "failure and not-ready alerts for the failing agent",
        || {
            let alerts = prom.alerts();
            let ok = find(
                &alerts,
                "NixlRegistrationFailing",
                &f,
                &[("group", "bad"), ("reason", "plugin_unavailable")],
            )
            .is_some_and(firing)
                && find(&alerts, "NixlAgentNotReady", &f, &[]).is_some_and(firing)
                && find(&alerts, "NixlBackendDown", &f, &[("backend", "NOPE")]).is_some_and(firing)
                && find(&alerts, "NixlRegistrationRetrying", &f, &[("group", "bad")]).is_some_and(active);
            ok.then_some(alerts)
        },
    );
    let failing_alert = find(&alerts, "NixlRegistrationFailing", &f, &[]).unwrap();
    assert_eq!(failing_alert["labels"]["severity"], "warning");
    assert!(
        failing_alert["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains(&format!("Group bad on nixl-agent {f} is not registered")),
        "{failing_alert}"
    );
    assert_eq!(
        find(&alerts, "NixlAgentNotReady", &f, &[]).unwrap()["labels"]["severity"],
        "critical"
    );
    // Only the broken group and backend: the registered kv group and UCX are fine.
    for a in alerts.iter().filter(|a| label(a, "instance") == f) {
        assert_ne!(label(a, "group"), "kv", "{}", summary(&alerts));
        assert_ne!(label(a, "backend"), "UCX", "{}", summary(&alerts));
    }

    // The healthy agent, scraped as long: not one alert, and nothing down or absent.
    prom.wait_scraped(&[healthy.addr], 8, Duration::from_secs(20));
    let alerts = prom.alerts();
    assert!(
        alerts.iter().all(|a| label(a, "instance") == f),
        "alerts for anything but the failing agent:\n{}",
        summary(&alerts)
    );
    for quiet in [
        "NixlAgentDown",
        "NixlLibraryUnavailable",
        "NixlRegisteredMemoryDropped",
        "NixlRegistrationSlow",
    ] {
        assert!(
            alerts.iter().all(|a| label(a, "alertname") != quiet),
            "{quiet} is active:\n{}",
            summary(&alerts)
        );
    }
    for r in prom.rules() {
        assert_ne!(r["health"], "err", "{}: {}", r["name"], r["lastError"]);
    }

    // SIGTERM drains the healthy agent to 0 bytes and it exits: the target is
    // down, and the drop of its registered memory is not an alert.
    healthy.signal("TERM");
    assert_eq!(healthy.wait_exit(Duration::from_secs(15)).code(), Some(0));
    support::wait_for(Duration::from_secs(20), "NixlAgentDown for the stopped agent", || {
        let alerts = prom.alerts();
        if let Some(a) = find(&alerts, "NixlRegisteredMemoryDropped", &h, &[]) {
            assert!(!firing(a), "memory drop on drain fired:\n{}", summary(&alerts));
        }
        find(&alerts, "NixlAgentDown", &h, &[])
            .is_some_and(firing)
            .then_some(())
    });
    let alerts = prom.alerts();
    assert!(
        find(&alerts, "NixlRegisteredMemoryDropped", &h, &[]).is_none(),
        "{}",
        summary(&alerts)
    );
}

fn amtool() -> std::path::PathBuf {
    dep_bin("AMTOOL", ".deps/alertmanager/usr/bin/amtool")
}

#[test]
fn amtool_accepts_the_shipped_alertmanager_config() {
    let out = std::process::Command::new(amtool())
        .args(["check-config", ALERTMANAGER_CONFIG])
        .current_dir(support::repo())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("8 inhibit rules"), "{said}");
}

/// One cause, one page: a missing plugin pages once (NotReady) and opens one
/// ticket (BackendDown) while Prometheus fires RegistrationFailing and
/// Retrying too; a missing library pages once (LibraryUnavailable). The
/// recovery sends the resolved notification.
#[test]
fn live_alertmanager_pages_once_per_cause_and_sends_the_recovery() {
    let hook = Webhook::start();
    let am = Alertmanager::start(hook.addr);
    let plugin = AgentProcess::spawn(Spawn {
        config: Some(FAILING),
        ..Default::default()
    });
    let library = AgentProcess::spawn(Spawn {
        no_nixl: true,
        env: &[("NIXL_LIB_DIR", "/nonexistent/nixl/lib")],
        ..Default::default()
    });
    let (p, l) = (plugin.addr.to_string(), library.addr.to_string());
    let prom = Prometheus::start_alerting(
        &[plugin.addr, library.addr],
        Some(&prom::rules_with_short_for()),
        Some(am.addr),
    );

    // Prometheus fires every alert of both causes...
    support::wait_for(
        Duration::from_secs(60),
        "all alerts of both causes firing in Prometheus",
        || {
            let alerts = prom.alerts();
            let firing =
                |name: &str, instance: &str| find(&alerts, name, instance, &[]).is_some_and(|a| a["state"] == "firing");
            (firing("NixlAgentNotReady", &p)
                && firing("NixlBackendDown", &p)
                && firing("NixlRegistrationFailing", &p)
                && firing("NixlRegistrationRetrying", &p)
                && firing("NixlLibraryUnavailable", &l)
                && firing("NixlAgentNotReady", &l))
            .then_some(())
        },
    );
    // ...Alertmanager notifies the causes...
    let has = |n: &[(String, String, String, String)], path: &str, name: &str, inst: &str, status: &str| {
        n.iter()
            .any(|(pp, a, i, s)| pp == path && a == name && i == inst && s == status)
    };
    support::wait_for(Duration::from_secs(30), "the pages and the ticket", || {
        let n = hook.notified();
        (has(&n, "/pager", "NixlAgentNotReady", &p, "firing")
            && has(&n, "/tickets", "NixlBackendDown", &p, "firing")
            && has(&n, "/pager", "NixlLibraryUnavailable", &l, "firing"))
        .then_some(())
    });
    // ...and suppresses the consequences, for as long as several group
    // intervals (2 s each) give it to change its mind.
    std::thread::sleep(Duration::from_secs(8));
    let n = hook.notified();
    let about = |inst: &str| -> BTreeSet<String> {
        n.iter()
            .filter(|x| x.2 == inst)
            .map(|x| format!("{} {}", x.0, x.1))
            .collect()
    };
    assert_eq!(
        about(&p),
        BTreeSet::from([
            "/pager NixlAgentNotReady".to_string(),
            "/tickets NixlBackendDown".to_string()
        ]),
        "missing plugin: one page, one ticket; {n:?}"
    );
    assert_eq!(
        about(&l),
        BTreeSet::from(["/pager NixlLibraryUnavailable".to_string()]),
        "missing library: one page; {n:?}"
    );
    // Alertmanager has the consequences, inhibited by their cause.
    let am_alerts = am.alerts();
    for (name, instance) in [
        ("NixlRegistrationFailing", &p),
        ("NixlRegistrationRetrying", &p),
        ("NixlAgentNotReady", &l),
    ] {
        let a = am_alerts
            .iter()
            .find(|a| a["labels"]["alertname"] == name && a["labels"]["instance"] == instance.as_str())
            .unwrap_or_else(|| panic!("{name} {instance} not in Alertmanager: {am_alerts:?}"));
        assert_eq!(a["status"]["state"], "suppressed", "{a}");
        assert!(!a["status"]["inhibitedBy"].as_array().unwrap().is_empty(), "{a}");
    }

    // Recovery: a healthy agent at the same address; NotReady resolves.
    let mut plugin = plugin;
    plugin.signal("TERM");
    assert_eq!(plugin.wait_exit(Duration::from_secs(15)).code(), Some(0));
    let healthy = AgentProcess::spawn(Spawn {
        args: &["--listen", &p],
        ..Default::default()
    });
    healthy.wait_ready(Duration::from_secs(30));
    support::wait_for(Duration::from_secs(60), "the resolved page", || {
        has(&hook.notified(), "/pager", "NixlAgentNotReady", &p, "resolved").then_some(())
    });
}

/// A decode worker whose transfers keep failing (a peer that is gone,
/// retried on real NIXL while other transfers succeed): once past the floor
/// of failures, the failure ratio pages, for its op; nothing else of the
/// data path fires.
#[test]
fn live_prometheus_pages_for_a_worker_whose_transfers_keep_failing() {
    let observer = nixl_agent::Observer::new(nixl_agent::ObserveSettings::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let router = observer.router();
    rt.spawn(async move { axum::serve(listener, router).await });
    let prom = Prometheus::start(&[addr], Some(&prom::rules_with_short_for()));
    prom.wait_scraped(&[addr], 2, Duration::from_secs(30));
    let _traffic = support::traffic::start(&observer);
    let instance = addr.to_string();
    let alerts = support::wait_for(Duration::from_secs(60), "NixlTransfersFailing for writes", || {
        let alerts = prom.alerts();
        find(&alerts, "NixlTransfersFailing", &instance, &[("op", "write")])
            .is_some_and(|a| a["state"] == "firing")
            .then_some(alerts)
    });
    let page = find(&alerts, "NixlTransfersFailing", &instance, &[]).unwrap();
    assert_eq!(page["labels"]["severity"], "critical");
    for quiet in ["NixlPeerLost", "NixlTransferStalled", "NixlPeerMetadataRejected"] {
        assert!(
            alerts.iter().all(|a| label(a, "alertname") != quiet),
            "{quiet} is active:\n{}",
            summary(&alerts)
        );
    }
}

/// The node canary's data-path alert on a live Prometheus: a canary whose
/// UCX cannot connect its own two agents (UCX_TLS=self) fires
/// NixlCanaryDataPathBroken; a healthy canary, scraped as long, does not.
#[test]
fn live_prometheus_fires_the_canary_data_path_alert_only_for_the_broken_node() {
    let canary = Some("probe_interval = '1s'\n");
    let healthy = AgentProcess::spawn(Spawn {
        config: canary,
        ..Default::default()
    });
    let broken = AgentProcess::spawn(Spawn {
        config: canary,
        env: &[("UCX_TLS", "self")],
        ..Default::default()
    });
    healthy.wait_ready(Duration::from_secs(30));
    let (h, b) = (healthy.addr.to_string(), broken.addr.to_string());
    let prom = Prometheus::start(&[healthy.addr, broken.addr], Some(&prom::rules_with_short_for()));
    let alerts = support::wait_for(
        Duration::from_secs(40),
        "NixlCanaryDataPathBroken for the broken canary",
        || {
            let alerts = prom.alerts();
            find(&alerts, "NixlCanaryDataPathBroken", &b, &[])
                .is_some_and(|a| a["state"] == "firing")
                .then_some(alerts)
        },
    );
    let a = find(&alerts, "NixlCanaryDataPathBroken", &b, &[]).unwrap();
    assert_eq!(a["labels"]["severity"], "warning");
    prom.wait_scraped(&[healthy.addr], 8, Duration::from_secs(20));
    let alerts = prom.alerts();
    assert!(
        alerts.iter().all(|a| label(a, "instance") != h),
        "alerts for the healthy canary:\n{}",
        summary(&alerts)
    );
}
