//! A real Prometheus (and Alertmanager, with a webhook receiver) for the
//! alert and dashboard tests, and small readers for PromQL and for the rule
//! files: the alert, dashboard, matrix, pod and Python tests use it.

use super::repo;
use crate::support;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Prometheus job the rules select (`job="nixl-agent"`).
pub const JOB: &str = "nixl-agent";

pub fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The Prometheus server unpacked by scripts/setup.sh.
pub fn prometheus_bin() -> PathBuf {
    let p = std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".deps/prometheus/usr/bin/prometheus"));
    assert!(
        p.exists(),
        "PROMETHEUS: {} does not exist; run `bash scripts/setup.sh` (make test does)",
        p.display()
    );
    p
}

/// A Prometheus server on a free loopback port with its own temporary
/// storage and exemplar storage on (so it scrapes OpenMetrics), scraping
/// `targets` as job `nixl-agent` every second and evaluating `rules` every
/// second. Killed on drop.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    pub fn start(targets: &[SocketAddr], rules: Option<&str>) -> Prometheus {
        Prometheus::start_alerting(targets, rules, None)
    }

    /// [`Prometheus::start`] sending its alerts to an Alertmanager.
    pub fn start_alerting(targets: &[SocketAddr], rules: Option<&str>, alertmanager: Option<SocketAddr>) -> Prometheus {
        let mut dir = tempfile::tempdir().unwrap();
        let mut config =
            String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n");
        if let Some(am) = alertmanager {
            config.push_str(&format!(
                "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am}']\n"
            ));
        }
        if let Some(text) = rules {
            let path = dir.path().join("rules.yml");
            std::fs::write(&path, text).unwrap();
            config.push_str(&format!("rule_files:\n  - {}\n", path.display()));
        }
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        config.push_str(&format!(
            "scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        ));
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        // A free port can be taken between probing it and Prometheus binding
        // it: try a few.
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
            let child = Command::new(prometheus_bin())
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--enable-feature=exemplar-storage")
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn prometheus");
            let mut p = Prometheus { child, addr, dir };
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                if let Ok(Some(_)) = p.child.try_wait() {
                    break; // port taken, most likely: try another
                }
                if support::get(addr, "/-/ready").is_ok_and(|r| r.status == 200) {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("prometheus did not start on {addr}:\n{}", p.log());
            dir = std::mem::replace(&mut p.dir, tempfile::tempdir().unwrap());
        }
        panic!("could not start prometheus");
    }

    /// What Prometheus logged (warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET an API path (with its query string already encoded) and return
    /// `data`; panics unless Prometheus answers `"status": "success"`.
    pub fn api(&self, path: &str) -> serde_json::Value {
        self.try_api(path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\nprometheus log:\n{}", self.log()))
    }

    pub fn try_api(&self, path: &str) -> Result<serde_json::Value, String> {
        let r = support::get(self.addr, path).map_err(|e| e.to_string())?;
        let v: serde_json::Value =
            serde_json::from_str(&r.body).map_err(|e| format!("{e}: {} {}", r.status, r.body))?;
        if v["status"] != "success" {
            return Err(format!("{} {}", r.status, r.body));
        }
        Ok(v["data"].clone())
    }

    /// An instant query at the current time; `Err` carries Prometheus's error.
    pub fn try_query(&self, promql: &str) -> Result<Vec<serde_json::Value>, String> {
        let data = self.try_api(&format!("/api/v1/query?query={}", encode(promql)))?;
        Ok(match &data["result"] {
            serde_json::Value::Array(a) => a.clone(),
            scalar => vec![scalar.clone()],
        })
    }

    pub fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        self.try_query(promql).unwrap_or_else(|e| panic!("query {promql}: {e}"))
    }

    /// Active alerts (pending and firing).
    pub fn alerts(&self) -> Vec<serde_json::Value> {
        self.api("/api/v1/alerts")["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every loaded rule, as Prometheus parsed it.
    pub fn rules(&self) -> Vec<serde_json::Value> {
        self.api("/api/v1/rules")["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect()
    }

    /// Waits until every target has been scraped successfully at least
    /// `scrapes` times (one per second), so rate windows hold data.
    pub fn wait_scraped(&self, targets: &[SocketAddr], scrapes: u32, timeout: Duration) {
        for t in targets {
            let q = format!("count_over_time(up{{job=\"{JOB}\", instance=\"{t}\"}}[1m]) >= {scrapes}");
            support::wait_for(timeout, &format!("{scrapes} scrapes of {t}"), || {
                (!self.query(&q).is_empty()).then_some(())
            });
            assert_eq!(
                self.query(&format!("up{{instance=\"{t}\"}}"))[0]["value"][1],
                "1",
                "{t} is scraped successfully"
            );
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One vector selector in a PromQL expression: the metric name (None for a
/// bare `{...}`) and the text between its braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: Option<String>,
    pub matchers: String,
}

impl Selector {
    pub fn has_matcher(&self, m: &str) -> bool {
        self.matchers.split(',').any(|x| x.trim() == m)
    }
}

const AGGREGATORS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// Every vector selector of a PromQL expression, found by a small scanner
/// that skips strings, label lists (`by (...)`), range and subquery brackets,
/// numbers, functions and keywords. Grafana's `label_values(selector, label)`
/// is read as its selector.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let expr = match expr.trim().strip_prefix("label_values(") {
        Some(rest) => rest.rsplit_once(',').map_or(rest, |(sel, _)| sel),
        None => expr,
    };
    let c: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let skip_ws = |mut j: usize| {
        while j < c.len() && c[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '"' || ch == '\'' || ch == '`' {
            i += 1;
            while i < c.len() && c[i] != ch {
                if c[i] == '\\' && ch != '`' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if ch == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '[' {
            while i < c.len() && c[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if ch == '{' {
            let (body, next) = braces(&c, i);
            out.push(Selector {
                name: None,
                matchers: body,
            });
            i = next;
        } else if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.') {
                i += 1;
            }
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let j = skip_ws(i);
            let next = c.get(j).copied();
            if LABEL_LISTS.contains(&word.as_str()) {
                if next == Some('(') {
                    while i < c.len() && c[i] != ')' {
                        i += 1;
                    }
                    i += 1;
                }
            } else if KEYWORDS.contains(&word.as_str()) || AGGREGATORS.contains(&word.as_str()) || next == Some('(') {
                // a keyword, an aggregation or a function call
            } else if next == Some('{') {
                let (body, after) = braces(&c, j);
                out.push(Selector {
                    name: Some(word),
                    matchers: body,
                });
                i = after;
            } else {
                out.push(Selector {
                    name: Some(word),
                    matchers: String::new(),
                });
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The text between the brace at `open` and its closing brace (skipping
/// quoted strings), and the index after the closing brace.
fn braces(c: &[char], open: usize) -> (String, usize) {
    let mut i = open + 1;
    let mut body = String::new();
    while i < c.len() && c[i] != '}' {
        if c[i] == '"' || c[i] == '\'' {
            let q = c[i];
            body.push(q);
            i += 1;
            while i < c.len() && c[i] != q {
                if c[i] == '\\' {
                    body.push(c[i]);
                    i += 1;
                }
                body.push(c[i]);
                i += 1;
            }
        }
        if i < c.len() {
            body.push(c[i]);
            i += 1;
        }
    }
    (body, i + 1)
}

/// The metric names an expression reads, in order, without repeats.
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in selectors(expr) {
        let name = s.name.or_else(|| {
            s.matchers.split(',').find_map(|m| {
                m.trim()
                    .strip_prefix("__name__=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        });
        if let Some(n) = name {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// Alert names and expressions of a rule file, read line by line: the
/// `- alert:` key and its `expr:` (inline or a block scalar). Good enough for
/// the files in alerts/; Prometheus itself is the parser of record, and
/// tests check both agree on the count.
pub fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut alert: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("- alert:").or_else(|| t.strip_prefix("- record:")) {
            alert = Some(name.trim().to_string());
        } else if let Some(value) = t.strip_prefix("expr:") {
            let indent = line.len() - t.len();
            let value = value.trim();
            let expr = if value.starts_with('|') || value.starts_with('>') {
                let mut body = Vec::new();
                while i + 1 < lines.len() {
                    let l = lines[i + 1];
                    let li = l.len() - l.trim_start().len();
                    if !l.trim().is_empty() && li <= indent {
                        break;
                    }
                    body.push(l.trim());
                    i += 1;
                }
                body.join("\n").trim().to_string()
            } else {
                value.trim_matches(|c| c == '\'' || c == '"').to_string()
            };
            out.push((alert.take().expect("expr: before - alert:"), expr));
        }
        i += 1;
    }
    out
}

/// The series of `promtool test rules` input (`series: '...'` lines).
pub fn test_input_series(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- series:"))
        .map(|s| s.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
        .collect()
}

/// GitHub's anchor for a Markdown heading text.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Anchors of every heading in a Markdown file.
pub fn anchors(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// Every `docs/runbooks.md#anchor` reference in a text.
pub fn runbook_refs(text: &str) -> Vec<String> {
    text.match_indices("docs/runbooks.md#")
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect()
        })
        .collect()
}

/// The rules with every `for:` in minutes turned into the same number of
/// seconds, so a live test sees them fire in seconds.
pub fn rules_with_short_for() -> String {
    let text = read("alerts/nixl-agent.rules.yml");
    let mut out = String::new();
    for line in text.lines() {
        match line.trim_start().strip_prefix("for: ") {
            Some(d) if d.ends_with('m') => {
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(&format!("{indent}for: {}s\n", d.trim_end_matches('m')));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    assert_ne!(out, text);
    out
}

pub const ALERTMANAGER_CONFIG: &str = "alerts/alertmanager.yml";

pub fn dep_bin(var: &str, default: &str) -> std::path::PathBuf {
    let p = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join(default));
    assert!(
        p.exists(),
        "{var}: {} does not exist; run `bash scripts/setup.sh`",
        p.display()
    );
    p
}

/// A webhook receiver: every POST body, by path.
pub struct Webhook {
    pub addr: std::net::SocketAddr,
    got: std::sync::Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
}

impl Webhook {
    pub fn start() -> Webhook {
        use std::io::{BufRead, BufReader, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = got.clone();
        std::thread::spawn(move || {
            for stream in l.incoming().map_while(Result::ok) {
                // A client that stops mid-request cannot hold the hook.
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let mut r = BufReader::new(stream);
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    continue;
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_ok() {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
                        sink.lock().unwrap().push((path, v));
                    }
                }
                let _ = r
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Webhook { addr, got }
    }

    /// (receiver path, alertname, instance, status) of every alert notified.
    pub fn notified(&self) -> Vec<(String, String, String, String)> {
        let mut out = Vec::new();
        for (path, v) in self.got.lock().unwrap().iter() {
            for a in v["alerts"].as_array().into_iter().flatten() {
                out.push((
                    path.clone(),
                    a["labels"]["alertname"].as_str().unwrap_or_default().to_string(),
                    a["labels"]["instance"].as_str().unwrap_or_default().to_string(),
                    a["status"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        out
    }
}

/// Alertmanager from Debian's package with the shipped config: its
/// inhibition rules and route tree as they are, the receivers pointed at
/// the test's webhook, the waits shortened.
pub struct Alertmanager {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    pub fn start(hook: std::net::SocketAddr) -> Alertmanager {
        let shipped = read(ALERTMANAGER_CONFIG);
        let mut config = shipped
            .replace("group_wait: 30s", "group_wait: 1s")
            .replace("group_interval: 5m", "group_interval: 2s")
            .replace("repeat_interval: 4h", "repeat_interval: 1h");
        for r in ["pager", "tickets"] {
            config = config.replace(
                &format!("  - name: {r}\n"),
                &format!("  - name: {r}\n    webhook_configs: [{{url: 'http://{hook}/{r}', send_resolved: true}}]\n"),
            );
        }
        assert_ne!(config, shipped);
        assert!(config.contains(&read(ALERTMANAGER_CONFIG)[shipped.find("inhibit_rules:").unwrap()..]));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alertmanager.yml");
        std::fs::write(&path, config).unwrap();
        // A port picked free can be taken again before Alertmanager binds it
        // (tests run side by side): a start that ended is told apart from a
        // slow one by its own words, and one that lost its port tries another.
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let log = dir.path().join(format!("alertmanager-{port}.log"));
            let mut child = std::process::Command::new(dep_bin(
                "ALERTMANAGER",
                ".deps/alertmanager/usr/bin/prometheus-alertmanager",
            ))
            .arg(format!("--config.file={}", path.display()))
            .arg(format!("--storage.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn alertmanager");
            let ready = support::wait_for(Duration::from_secs(60), "alertmanager ready", || {
                if let Ok(Some(status)) = child.try_wait() {
                    return Some(Err(status));
                }
                support::get(addr, "/-/ready").ok().filter(|r| r.status == 200).map(Ok)
            });
            match ready {
                Ok(_) => return Alertmanager { child, addr, _dir: dir },
                Err(status) => {
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    assert!(
                        said.contains("address already in use"),
                        "alertmanager ended ({status}):\n{said}"
                    );
                }
            }
        }
        panic!("alertmanager found no free port in three tries");
    }

    pub fn alerts(&self) -> Vec<serde_json::Value> {
        let r = support::get(self.addr, "/api/v2/alerts").unwrap();
        serde_json::from_str::<serde_json::Value>(&r.body)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
