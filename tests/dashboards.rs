//! The Grafana dashboard in dashboards/: its lint rules, the provisioning
//! file, every metric name of dashboards/ and alerts/ against the live agent
//! and `telemetry::names`, every query against a live Prometheus scraping
//! real agents, and the copies the agent serves.

use crate::support::prom::{self, read, Prometheus};
use crate::support::{self, AgentProcess, Scrape, Spawn};
use nixl_agent::names::{Type, FAMILIES};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const DASHBOARD: &str = "dashboards/nixl-agent.json";
const RULES: &str = "alerts/nixl-agent.rules.yml";

/// The agent's failing twin of the default plan (see tests/alerts.rs).
const FAILING: &str = "[retry]\ninitial_backoff = '200ms'\nmax_backoff = '1s'\n\
    [[group]]\nname = 'kv'\nkind = 'kv'\nmem_type = 'DRAM'\ncount = 2\nsize = '64KiB'\n\
    [[group]]\nname = 'bad'\nkind = 'state'\nmem_type = 'DRAM'\ncount = 1\nsize = '4KiB'\nbackends = ['NOPE']\n";

/// Tracing on, towards a collector that is not there: attempts are sampled,
/// so the duration histogram carries exemplars (exports fail and are counted).
const TRACED: &str = "[tracing]\nendpoint = 'http://127.0.0.1:9'\n";

const PANEL_TYPES: [&str; 5] = ["row", "timeseries", "stat", "table", "state-timeline"];
const ROWS: [&str; 6] = [
    "Overview",
    "Registration",
    "Memory",
    "Failures",
    "Transfers",
    "Node canary",
];
/// Panels whose links lead to the runbooks.
const RUNBOOK_LINKED: [&str; 8] = [
    "Registration failures by reason",
    "Last failures",
    "Group state",
    "Ready",
    "Transfer failures by reason",
    "Oldest transfer in flight",
    "Stalled transfers",
    "Peers lost",
];

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).expect("dashboard is JSON")
}

/// Every panel, rows included, with the panels of collapsed rows.
fn panels(d: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p.clone());
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter().cloned());
        }
    }
    out
}

/// Data panels, each with the title of the row above it.
fn data_panels(d: &Value) -> Vec<(String, Value)> {
    let mut row = String::new();
    let mut out = Vec::new();
    for p in panels(d) {
        if p["type"] == "row" {
            row = p["title"].as_str().unwrap_or_default().to_string();
        } else {
            out.push((row.clone(), p));
        }
    }
    out
}

fn exprs(panel: &Value) -> Vec<String> {
    panel["targets"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["expr"].as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn variable<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no `{name}` variable"))
}

fn variable_query(v: &Value) -> String {
    match &v["query"] {
        Value::String(s) => s.clone(),
        q => q["query"].as_str().unwrap_or_default().to_string(),
    }
}

fn family(name: &str) -> Option<&'static nixl_agent::names::Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The metric family a series name belongs to: histogram series map to
/// their family (`_bucket`, `_sum`, `_count`).
fn family_of(series: &str) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = series.strip_suffix(suffix) {
            if family(base).is_some_and(|f| f.kind == Type::Histogram) {
                return base.to_string();
            }
        }
    }
    series.to_string()
}

#[test]
fn dashboard_follows_the_lint_rules() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 39, "schemaVersion");
    assert_eq!(d["uid"], "nixl-agent");
    assert!(!d["title"].as_str().unwrap().is_empty());

    // Variables: datasource, job, instance, group, all from the chosen Prometheus.
    let ds = variable(&d, "datasource");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    for name in ["job", "instance", "group"] {
        let v = variable(&d, name);
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}");
        let q = variable_query(v);
        assert!(q.starts_with("label_values("), "{name}: {q}");
        if v["includeAll"] == true {
            assert_eq!(v["allValue"], ".*", "{name}: All matches everything");
        }
    }
    assert!(variable_query(variable(&d, "instance")).contains("job=~\"$job\""));
    let group_q = variable_query(variable(&d, "group"));
    assert!(group_q.contains("job=~\"$job\"") && group_q.contains("instance=~\"$instance\""));

    let all = panels(&d);
    let rows: Vec<&str> = all
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ROWS, "rows, in order");
    let mut ids = BTreeSet::new();
    let mut rects: Vec<(String, [i64; 4])> = Vec::new();
    for p in &all {
        let title = p["title"].as_str().unwrap_or_default().to_string();
        let ty = p["type"].as_str().unwrap();
        assert!(
            PANEL_TYPES.contains(&ty),
            "{title}: panel type {ty} (no graph, singlestat, ...)"
        );
        assert!(ids.insert(p["id"].as_u64().expect("id")), "{title}: duplicate id");
        let g = &p["gridPos"];
        let r = ["x", "y", "w", "h"].map(|k| g[k].as_i64().unwrap_or_else(|| panic!("{title}: gridPos.{k}")));
        assert!(r[0] >= 0 && r[2] > 0 && r[0] + r[2] <= 24, "{title}: gridPos {g}");
        for (other, o) in &rects {
            let overlap = r[0] < o[0] + o[2] && o[0] < r[0] + r[2] && r[1] < o[1] + o[3] && o[1] < r[1] + r[3];
            assert!(!overlap, "{title} overlaps {other}");
        }
        rects.push((title, r));
    }

    let anchors = prom::anchors(&read("docs/runbooks.md"));
    let mut by_row: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (row, p) in data_panels(&d) {
        let title = p["title"].as_str().unwrap();
        assert!(
            p["description"].as_str().is_some_and(|s| s.len() > 20),
            "{title}: description"
        );
        assert!(
            p["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .is_some_and(|u| !u.is_empty()),
            "{title}: unit"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}: datasource");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let refs: BTreeSet<&str> = targets.iter().map(|t| t["refId"].as_str().unwrap()).collect();
        assert_eq!(refs.len(), targets.len(), "{title}: refIds");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}: target datasource");
            let expr = t["expr"].as_str().unwrap();
            // Every range is the rate interval; an instant panel (stat,
            // table) may take the dashboard's whole range instead.
            let instant = matches!(p["type"].as_str(), Some("stat" | "table"));
            for (i, _) in expr.match_indices('[') {
                assert!(
                    expr[i..].starts_with("[$__rate_interval]") || (instant && expr[i..].starts_with("[$__range]")),
                    "{title}: ranges use $__rate_interval: {expr}"
                );
            }
            for fun in ["rate(", "increase(", "irate("] {
                if expr.contains(fun) {
                    assert!(
                        expr.contains("[$__rate_interval]") || (instant && expr.contains("[$__range]")),
                        "{title}: {expr}"
                    );
                }
            }
            // Lifetime ratios draw flat lines: what a panel shows changes.
            if expr.contains("_count{") || expr.contains("_bucket{") {
                assert!(
                    expr.contains("rate(") || expr.contains("increase("),
                    "{title}: over a window: {expr}"
                );
            }
            // Every selector filters on job and instance, and on group where
            // the family has one.
            let sels = prom::selectors(expr);
            assert!(!sels.is_empty(), "{title}: {expr}");
            for s in sels {
                let name = s.name.clone().unwrap_or_default();
                assert!(
                    s.has_matcher("job=~\"$job\"") && s.has_matcher("instance=~\"$instance\""),
                    "{title}: {name} lacks the job/instance matchers: {expr}"
                );
                let fam = family(&family_of(&name)).unwrap_or_else(|| panic!("{title}: unknown metric {name}"));
                if fam.labels.contains(&"group") {
                    assert!(
                        s.has_matcher("group=~\"$group\""),
                        "{title}: {name} lacks group=~\"$group\""
                    );
                }
                by_row.entry(row.clone()).or_default().insert(fam.name.to_string());
            }
            if expr.contains("registration_duration_seconds_bucket") && expr.contains("rate(") {
                assert_eq!(t["exemplar"], true, "{title}: exemplars on the duration quantiles");
            }
        }
        let text = p.to_string();
        for r in prom::runbook_refs(&text) {
            assert!(anchors.contains(&r), "{title}: docs/runbooks.md#{r} does not exist");
        }
    }

    // What each row is for.
    let want: [(&str, &[&str]); 5] = [
        (
            "Overview",
            &[
                "nixl_agent_ready",
                "nixl_agent_time_to_ready_seconds",
                "nixl_agent_nixl_available",
                "nixl_agent_backend_up",
                "nixl_agent_build_info",
            ],
        ),
        (
            "Registration",
            &[
                "nixl_agent_registration_attempts_total",
                "nixl_agent_registration_failures_total",
                "nixl_agent_registration_descriptors",
                "nixl_agent_registration_duration_seconds",
            ],
        ),
        (
            "Memory",
            &["nixl_agent_registered_bytes", "nixl_agent_registered_descriptors"],
        ),
        ("Failures", &["nixl_agent_last_failure_timestamp_seconds"]),
        (
            "Transfers",
            &[
                "nixl_agent_transfer_bytes_total",
                "nixl_agent_transfers_total",
                "nixl_agent_transfer_duration_seconds",
                "nixl_agent_transfer_failures_total",
                "nixl_agent_transfers_in_flight",
                "nixl_agent_transfer_oldest_in_flight_seconds",
                "nixl_agent_transfers_stalled_total",
                "nixl_agent_peers_lost_total",
                "nixl_agent_remote_agents",
                "nixl_agent_peer_events_total",
                "nixl_agent_notifications_total",
            ],
        ),
    ];
    for (row, families) in want {
        for f in families {
            assert!(by_row[row].contains(*f), "row {row} shows no {f}");
        }
    }
    let all_exprs: Vec<String> = data_panels(&d).iter().flat_map(|(_, p)| exprs(p)).collect();
    assert!(all_exprs.iter().any(|e| e.contains("histogram_quantile(0.5,")), "p50");
    assert!(all_exprs.iter().any(|e| e.contains("histogram_quantile(0.99,")), "p99");
    assert!(all_exprs
        .iter()
        .any(|e| e.contains("by (instance, group, reason)") && e.contains("failures_total")));
    assert!(all_exprs
        .iter()
        .any(|e| e.contains("kind, mem_type, device") && e.contains("registered_bytes")));
    let failures = data_panels(&d)
        .into_iter()
        .find(|(row, p)| row == "Failures" && p["type"] == "table")
        .expect("a failures table")
        .1;
    let organize = failures["transformations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "organize")
        .expect("organize");
    for col in ["instance", "group", "reason"] {
        assert!(
            organize["options"]["indexByName"].get(col).is_some(),
            "failures table column {col}"
        );
    }
}

#[test]
fn provisioning_file_and_import_note_are_there() {
    let prov = read("dashboards/provisioning.yaml");
    for want in ["apiVersion: 1", "providers:", "type: file", "path:"] {
        assert!(prov.contains(want), "provisioning.yaml lacks {want}");
    }
    let note = read("dashboards/README.md");
    for want in [
        "provisioning.yaml",
        nixl_agent::endpoints::DASHBOARD_PATH,
        "Import",
        "datasource",
    ] {
        assert!(note.contains(want), "dashboards/README.md lacks {want}");
    }
}

/// Every metric name read by a dashboard query, a dashboard variable, an
/// alert expression or an alert unit test's input series.
fn names_used() -> BTreeMap<String, Vec<String>> {
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |expr: &str, whence: String| {
        for n in prom::metric_names(expr) {
            used.entry(n).or_default().push(whence.clone());
        }
    };
    let d = dashboard();
    for (_, p) in data_panels(&d) {
        for e in exprs(&p) {
            add(&e, format!("{DASHBOARD}: {}", p["title"]));
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            add(
                &variable_query(v),
                format!("{DASHBOARD}: ${}", v["name"].as_str().unwrap()),
            );
        }
    }
    let rules = prom::rule_exprs(&read(RULES));
    assert!(rules.len() >= 8, "{rules:?}");
    for (alert, e) in &rules {
        add(e, format!("{RULES}: {alert}"));
    }
    for entry in std::fs::read_dir(support::repo().join("alerts/tests")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for s in prom::test_input_series(&text) {
            add(&s, path.display().to_string());
        }
    }
    used
}

#[test]
fn every_metric_in_dashboards_and_alerts_is_exported_and_declared() {
    let agent = AgentProcess::spawn(Spawn {
        config: Some(FAILING),
        ..Default::default()
    });
    // After a failure, so that the families that only exist then are there.
    let scrape = agent.wait_metrics("a failure", Duration::from_secs(30), |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("reason", "plugin_unavailable")
            .sum()
            >= 1.0
    });
    let live: BTreeSet<String> = scrape.families().into_iter().collect();
    // The data path's families: from a recording that follows a serving
    // process's NIXL agents, moving real KV.
    let observer = nixl_agent::Observer::new(nixl_agent::ObserveSettings::default());
    let traffic = support::traffic::start(&observer);
    let observed = Scrape::parse(&observer.metrics().encode(nixl_agent::Format::Text));
    drop(traffic);
    let data_path: BTreeSet<String> = observed.families().into_iter().collect();
    // The canary's families: from a node canary after its first round.
    let canary = AgentProcess::spawn(Spawn {
        config: Some("probe_interval = '1s'\n"),
        ..Default::default()
    });
    let probed = canary.wait_metrics("a loopback round", Duration::from_secs(20), |s| {
        s.metric("nixl_agent_probe_transfer_up").get().is_some()
    });
    let probe: BTreeSet<String> = probed.families().into_iter().collect();
    let used = names_used();
    assert!(used.len() >= 12, "{:?}", used.keys());
    // Absent until the first readiness, which this failing agent never
    // reaches (tests/binary.rs sees it on a ready one).
    assert!(
        scrape.metric("nixl_agent_time_to_ready_seconds").get().is_none(),
        "time_to_ready is absent before readiness"
    );
    for (name, whence) in &used {
        if name == "up"
            || name == "nixl_agent_time_to_ready_seconds"
            || nixl_agent::names::POD_ONLY.contains(&name.as_str())
        {
            continue; // Prometheus's own; absent until ready
        }
        let fam = family_of(name);
        if name.starts_with("process_") {
            // The process collector's standard families: exported, not ours.
            assert!(live.contains(name), "{name} (used in {whence:?}) is not exported");
            continue;
        }
        let declared =
            family(&fam).unwrap_or_else(|| panic!("{name} (used in {whence:?}) is not in telemetry::names::FAMILIES"));
        if fam != *name {
            assert_eq!(declared.kind, Type::Histogram, "{name}");
        }
        let live = if nixl_agent::names::DATA_PATH.contains(&fam.as_str()) {
            &data_path
        } else if nixl_agent::names::PROBE.contains(&fam.as_str()) {
            &probe
        } else {
            &live
        };
        if nixl_agent::names::ON_FIRST_USE.contains(&fam.as_str()) && !live.contains(&fam) {
            continue; // appears with its first event
        }
        assert!(
            live.contains(&fam),
            "{name} (used in {whence:?}) is not in the agent's exposition: {live:?}"
        );
        let in_scrape = scrape.samples.iter().any(|s| s.name == *name);
        let empty_family = scrape.samples.iter().all(|s| family_of(&s.name) != fam);
        assert!(
            in_scrape || empty_family,
            "{name}: the agent exports the family but no such series"
        );
    }
}

/// What Grafana sends for a dashboard query with these variable values.
fn substitute(expr: &str, instances: &[String], rate_interval: &str) -> String {
    let escaped: Vec<String> = instances.iter().map(|i| i.replace('.', "\\\\.")).collect();
    expr.replace("$__rate_interval", rate_interval)
        .replace("$__range", "5m")
        .replace("$job", prom::JOB)
        .replace("$instance", &format!("({})", escaped.join("|")))
        .replace("$group", ".*")
        .replace("$rank", ".+")
}

#[test]
fn every_dashboard_query_returns_data_from_a_live_prometheus() {
    // A node canary: its loopback rounds fill the Node canary row.
    let healthy = AgentProcess::spawn(Spawn {
        config: Some("probe_interval = '1s'\n"),
        ..Default::default()
    });
    let failing_traced = format!("{FAILING}{TRACED}");
    let failing = AgentProcess::spawn(Spawn {
        config: Some(&failing_traced),
        ..Default::default()
    });
    healthy.wait_ready(Duration::from_secs(30));
    failing.wait_metrics("a failure", Duration::from_secs(30), |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("reason", "plugin_unavailable")
            .sum()
            >= 1.0
    });
    // A pod of one rank: a library Observer publishes, `nixl-agent pod` serves.
    let pod_dir = tempfile::tempdir().unwrap();
    let observer = nixl_agent::Observer::new(nixl_agent::ObserveSettings::default());
    let _publisher = observer.publish(pod_dir.path(), 0).unwrap();
    // The rank moves KV and keeps retrying a peer that is gone: the
    // Transfers row has data, its failures a rate.
    let _traffic = support::traffic::start(&observer);
    let pod_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // Killed when dropped, the test failing or not.
    let _pod = support::Killed(
        support::binary()
            .args(["pod", "--ranks", "1", "--listen", &pod_addr.to_string(), "--dir"])
            .arg(pod_dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    support::wait_for(Duration::from_secs(10), "the pod agent", || {
        support::get(pod_addr, "/metrics")
            .ok()
            .filter(|r| r.body.contains("nixl_agent_rank_up{"))
    });
    let targets = [healthy.addr, failing.addr, pod_addr];
    let (h, f, p) = (healthy.addr.to_string(), failing.addr.to_string(), pod_addr.to_string());
    let instances = vec![h.clone(), f.clone(), p.clone()];
    let prom = Prometheus::start(&targets, None);
    prom.wait_scraped(&targets, 6, Duration::from_secs(30));
    let d = dashboard();

    // Variables: label_values(selector, label) is what Grafana asks the series API.
    let values = |name: &str| -> BTreeSet<String> {
        let q = variable_query(variable(&d, name));
        let inner = q.strip_prefix("label_values(").unwrap().strip_suffix(')').unwrap();
        let (sel, label) = inner.rsplit_once(',').unwrap();
        let sel = substitute(sel.trim(), &instances, "1m");
        let series = prom.api(&format!("/api/v1/series?match[]={}", prom::encode(&sel)));
        series
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s[label.trim()].as_str().map(String::from))
            .collect()
    };
    assert!(values("job").contains(prom::JOB));
    assert_eq!(values("instance"), instances.iter().cloned().collect());
    let groups = values("group");
    for g in ["kv", "aux", "bad"] {
        assert!(groups.contains(g), "group variable: {groups:?}");
    }

    let now = prom.query("time()")[0].as_f64().expect("time() is [ts, value]");
    let mut results: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (_, p) in data_panels(&d) {
        let title = p["title"].as_str().unwrap().to_string();
        for t in p["targets"].as_array().unwrap() {
            let raw = t["expr"].as_str().unwrap();
            for rate_interval in ["5s", "1m"] {
                let expr = substitute(raw, &instances, rate_interval);
                let rows = prom.try_query(&expr).unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
                assert!(
                    !rows.is_empty(),
                    "{title}: no data with $__rate_interval={rate_interval}: {expr}"
                );
                if rate_interval == "1m" {
                    results.entry(title.clone()).or_default().extend(rows);
                }
                if t["range"] == true {
                    let path = format!(
                        "/api/v1/query_range?query={}&start={}&end={}&step=1",
                        prom::encode(&expr),
                        now - 10.0,
                        now
                    );
                    prom.try_api(&path)
                        .unwrap_or_else(|e| panic!("{title}: range {expr}: {e}"));
                }
            }
        }
    }

    // The data is the right data.
    let value = |title: &str, labels: &[(&str, &str)]| -> Vec<f64> {
        results[title]
            .iter()
            .filter(|r| labels.iter().all(|(k, v)| r["metric"][*k] == *v))
            .map(|r| r["value"][1].as_str().unwrap().parse::<f64>().unwrap())
            .collect()
    };
    assert_eq!(
        value("Ready per rank", &[("instance", &p), ("rank", "0")]).len(),
        2,
        "ready and up"
    );
    assert!(values("rank").contains("0"), "rank variable");
    assert_eq!(value("Ready", &[("instance", &h)]), [1.0]);
    assert_eq!(value("Ready", &[("instance", &f)]), [0.0]);
    assert_eq!(
        value("Registered bytes", &[("instance", &h), ("group", "kv")]),
        [(8 * 512 * 1024) as f64]
    );
    assert_eq!(
        value("Registered descriptors", &[("instance", &h), ("group", "aux")]),
        [4.0]
    );
    let failures = value(
        "Registration failures by reason",
        &[("instance", &f), ("group", "bad"), ("reason", "plugin_unavailable")],
    );
    assert!(failures.len() == 1 && failures[0] > 0.0, "{failures:?}");
    assert!(
        value("Registration failures by reason", &[("instance", &h)]).is_empty(),
        "the healthy agent has no failures"
    );
    let last = value(
        "Last failures",
        &[("instance", &f), ("group", "bad"), ("reason", "plugin_unavailable")],
    );
    assert!(
        last.iter().any(|ms| (ms / 1000.0 - now).abs() < 60.0),
        "last failure time in ms: {last:?}"
    );
    assert_eq!(value("Backends up", &[("instance", &f), ("backend", "NOPE")]), [0.0]);
    assert!(value("Time to ready", &[("instance", &h)])[0] > 0.0);

    // Exemplars: the duration quantiles lead to the traces of the attempts.
    let mut exemplar_queries = 0;
    for (_, p) in data_panels(&d) {
        for t in p["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["exemplar"] == true)
        {
            exemplar_queries += 1;
            let expr = substitute(t["expr"].as_str().unwrap(), &instances, "1m");
            let path = format!(
                "/api/v1/query_exemplars?query={}&start={}&end={}",
                prom::encode(&expr),
                now - 60.0,
                now
            );
            let found = prom.api(&path);
            let traced = found.as_array().unwrap().iter().any(|series| {
                series["seriesLabels"]["instance"] == f.as_str()
                    && series["exemplars"].as_array().is_some_and(|e| {
                        e.iter()
                            .any(|x| x["labels"]["trace_id"].as_str().is_some_and(|id| id.len() == 32))
                    })
            });
            assert!(traced, "{}: no exemplar with a trace_id: {found}", p["title"]);
        }
    }
    assert!(exemplar_queries >= 2, "p50 and p99 have exemplars on");
}

#[test]
fn served_dashboard_and_rules_are_byte_identical_to_the_repo() {
    let agent = AgentProcess::spawn(Spawn::default());
    for (path, file, content_type) in [
        (nixl_agent::endpoints::DASHBOARD_PATH, DASHBOARD, "application/json"),
        (nixl_agent::endpoints::ALERT_RULES_PATH, RULES, "application/yaml"),
    ] {
        let r = agent.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let want = std::fs::read(support::repo().join(file)).unwrap();
        assert!(r.body.as_bytes() == want.as_slice(), "{path} differs from {file}");
        assert!(
            nixl_agent::endpoints::ENDPOINTS.iter().any(|(p, _)| *p == path),
            "{path} is listed in ENDPOINTS"
        );
    }
    assert_eq!(nixl_agent::endpoints::DASHBOARD_JSON, read(DASHBOARD));
    assert_eq!(nixl_agent::endpoints::ALERT_RULES_YAML, read(RULES));
    let index = agent.get("/").body;
    for path in [
        nixl_agent::endpoints::DASHBOARD_PATH,
        nixl_agent::endpoints::ALERT_RULES_PATH,
    ] {
        assert!(index.contains(&format!("href=\"{path}\"")), "/ links {path}:\n{index}");
    }
}

#[test]
fn the_promql_scanner_finds_every_selector() {
    let names = |e: &str| prom::metric_names(e);
    assert_eq!(
        names(
            "sum by (job, instance) (rate(foo_total{a=\"b}\", c=~\"x|y\"}[5m])) / on (job) group_left (instance) bar"
        ),
        ["foo_total", "bar"]
    );
    assert_eq!(
        prom::selectors("rate(foo_total{a=\"b}\", c=~\"x|y\"}[5m])")[0].matchers,
        "a=\"b}\", c=~\"x|y\""
    );
    assert_eq!(
        names("histogram_quantile(0.99, sum(rate(x_bucket[1m])) by (le)) > 1e3"),
        ["x_bucket"]
    );
    assert_eq!(names("absent(up{job=\"x\"}) or vector(1)"), ["up"]);
    assert_eq!(
        names("count_values(\"version\", build_info) offset 5m unless max without (le) (y)"),
        ["build_info", "y"]
    );
    assert_eq!(names("{__name__=\"foo\", job=\"j\"} * 0x1F"), ["foo"]);
    assert_eq!(
        names("label_values(nixl_agent_build_info{job=~\"$job\"}, instance)"),
        ["nixl_agent_build_info"]
    );
    assert_eq!(
        names("max_over_time(a[15m:1m]) - a > 0 and on (job, instance) (up == 1)"),
        ["a", "up"]
    );
}

/// Failure panels link to their runbooks with absolute URLs (a relative
/// link is dead in Grafana too), each to an anchor that exists.
#[test]
fn failure_panels_link_to_their_runbooks() {
    let d = dashboard();
    let anchors = prom::anchors(&read("docs/runbooks.md"));
    let base = format!("{}#", nixl_agent::cli::DEFAULT_RUNBOOK_URL_BASE);
    for title in RUNBOOK_LINKED {
        let (_, p) = data_panels(&d)
            .into_iter()
            .find(|(_, p)| p["title"] == title)
            .unwrap_or_else(|| panic!("no panel {title}"));
        let links = p["links"].as_array().unwrap_or_else(|| panic!("{title}: no links"));
        assert!(!links.is_empty(), "{title}");
        for l in links {
            let url = l["url"].as_str().unwrap();
            let anchor = url
                .strip_prefix(&base)
                .unwrap_or_else(|| panic!("{title}: {url} is not under {base}"));
            assert!(
                anchors.contains(&anchor.to_string()),
                "{title}: #{anchor} is not in docs/runbooks.md"
            );
        }
    }
}
