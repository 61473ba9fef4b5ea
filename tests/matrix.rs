//! The truth matrix: every front-end × shape × scenario, each cell asked
//! what it says of itself (/metrics, /readyz, /livez, /v1/status) and
//! evaluated by a live Prometheus with the shipped rules, against the
//! ground truth its scenario knows. A cell that cannot apply says why
//! ([`not_applicable`]); `the_matrix_is_complete` holds the table to the
//! cross product.
//!
//! Front-ends: the binary, the Rust lifecycle, Rust observe mode, Python
//! (`nixl-agent-instrument`). Shapes: a lone process; a zero-config pod of
//! two (two processes started with one environment, one address); a sidecar
//! pod of two (`nixl-agent pod` serving the ranks' directory). In a pod the
//! scenario runs in one rank and the other is healthy. Scenarios: healthy;
//! the seed (aux fails to register); a NIXL call past its deadline; a
//! dropped agent or handle; a config-created and a non-UCX backend; a
//! deregistration NIXL refuses.
//!
//! One test per front-end and shape: its cells run side by side, one
//! Prometheus scrapes them all (the rules' `for:` in seconds instead of
//! minutes, `prom::rules_with_short_for`), and the test fails with the whole
//! table of what disagreed.

use crate::support::{self, prom};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Front {
    Binary,
    Lifecycle,
    Observe,
    Python,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Lone,
    ZeroConfig,
    Sidecar,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    Healthy,
    Seed,
    Deadline,
    Dropped,
    Backends,
    Dereg,
}

const FRONTS: [Front; 4] = [Front::Binary, Front::Lifecycle, Front::Observe, Front::Python];
const SHAPES: [Shape; 3] = [Shape::Lone, Shape::ZeroConfig, Shape::Sidecar];
const SCENARIOS: [Scenario; 6] = [
    Scenario::Healthy,
    Scenario::Seed,
    Scenario::Deadline,
    Scenario::Dropped,
    Scenario::Backends,
    Scenario::Dereg,
];

/// Why a cell is not run; `None` when one of this file's tests runs it.
fn not_applicable(front: Front, shape: Shape, scenario: Scenario) -> Option<&'static str> {
    use Front::*;
    use Scenario::*;
    use Shape::*;
    match (front, shape, scenario) {
        (Binary, ZeroConfig | Sidecar, _) => Some(
            "the binary owns its address and publishes to no pod directory; in a pod it is the sidecar \
             (`nixl-agent pod`), which serves the other front-ends' sidecar cells",
        ),
        (Binary, Lone, Dereg) => Some(
            "the binary deregisters only what its own NIXL agent registered, and NIXL 1.5.1 refuses none of \
             that (crates/engine/src/properties/batched.rs); a refused deregistration on our own agent is the driver's unit \
             test (a seam), not something real NIXL can be made to do",
        ),
        (Lifecycle | Observe, ZeroConfig, _) => Some(
            "a Rust embedder serves nixl-agent's routes from its own server (`router()`); sharing one listen \
             address between processes is the Python front-end's zero-configuration pod",
        ),
        (Lifecycle | Observe, Sidecar, Deadline | Dropped | Backends | Dereg) => Some(
            "the sidecar pod is the same publisher for every front-end (`Observer::publish`); its scenarios \
             are the Python sidecar cells, its Rust cells the healthy and the seed rank",
        ),
        (Lifecycle, Lone, Deadline) => Some(
            "on the caller's agent (nixl-sys) the lifecycle makes one call a descriptor, none of which can be \
             held past a deadline without faking NIXL; on an agent of its own it is the binary's path, whose \
             deadline cell is run",
        ),
        (Lifecycle, Lone, Dereg) => Some(
            "the lifecycle deregisters only what it registered; on the caller's agent (nixl-sys) the handle \
             is private, so neither the caller nor a test can make NIXL refuse one of its deregistrations",
        ),
        (Lifecycle, Lone, Dropped) => Some(
            "dropping a LifecycleHandle drains and stops its server (documented): the binary's drained cell \
             is that path",
        ),
        (Observe, Lone, Deadline) => Some(
            "nixl-sys 1.5 registers one descriptor per call, so no single observed Rust call can be held past \
             a deadline without faking NIXL; the one in-flight table is the Python deadline cells'",
        ),
        (Observe, Lone, Dereg) => Some(
            "nixl-sys's registration handle deregisters exactly what it registered; NIXL cannot be made to \
             refuse it from Rust (the Python dereg cells pass NIXL a list it refuses)",
        ),
        _ => None,
    }
}

/// What a cell's scenario process reports once it is steady, and what the
/// rules must make of it.
#[derive(Debug, Clone, Default)]
struct Truth {
    ready: bool,
    /// The process exits (the binary drained): only Prometheus can tell.
    exited: bool,
    registered: &'static [&'static str],
    unregistered: &'static [&'static str],
    /// Backends that must read up; any other `backend_up` must not read 0
    /// unless it is in `down`.
    up: &'static [&'static str],
    down: &'static [&'static str],
    /// (group, the backend its series and status name).
    backend_of: &'static [(&'static str, &'static str)],
    /// Alerts that must fire for the cell's target, and that may.
    fire: &'static [&'static str],
    may: &'static [&'static str],
}

fn truth(front: Front, scenario: Scenario) -> Truth {
    use Scenario::*;
    let healthy = Truth {
        ready: true,
        registered: &["kv", "aux"],
        up: &["UCX"],
        ..Truth::default()
    };
    match (front, scenario) {
        (_, Healthy) => healthy,
        (Front::Binary, Seed) => Truth {
            ready: false,
            registered: &["kv"],
            unregistered: &["aux"],
            up: &["UCX"],
            // The aux group's backend plugin is missing: that backend is down.
            down: &["NOPE"],
            fire: &["NixlRegistrationFailing", "NixlAgentNotReady", "NixlBackendDown"],
            may: &["NixlRegistrationRetrying"],
            ..Truth::default()
        },
        (_, Seed) => Truth {
            ready: false,
            registered: &["kv"],
            unregistered: &["aux"],
            up: &["UCX"],
            fire: &["NixlRegistrationFailing", "NixlAgentNotReady"],
            may: &["NixlRegistrationRetrying"],
            ..Truth::default()
        },
        // Once the held call returned: all clear. The stuck alert fires while
        // it is held where the test holds it long enough (Python), and may
        // where NIXL's call is merely slow (the binary).
        (Front::Python, Deadline) => Truth {
            fire: &["NixlLifecycleStuck"],
            may: &["NixlAgentNotReady"],
            ..healthy
        },
        // The binary's call is SIGUSR1's re-registration of 262,144 regions:
        // while it runs nothing is registered, so, as long as it lasts past
        // the rules' (shortened) `for:`, the memory drop is as true as the
        // stuck call.
        (_, Deadline) => Truth {
            may: &["NixlLifecycleStuck", "NixlAgentNotReady", "NixlRegisteredMemoryDropped"],
            ..healthy
        },
        (Front::Binary, Dropped) => Truth {
            exited: true,
            fire: &["NixlAgentDown"],
            ..Truth::default()
        },
        (_, Dropped) => Truth {
            ready: false,
            unregistered: &["kv", "aux"],
            fire: &["NixlAgentNotReady", "NixlRegisteredMemoryDropped"],
            ..Truth::default()
        },
        (Front::Binary | Front::Lifecycle | Front::Observe, Backends) => Truth {
            up: &["UCX", "POSIX"],
            backend_of: &[("kv", "UCX"), ("aux", "POSIX")],
            ..healthy
        },
        (_, Backends) => Truth {
            up: &["UCX", "POSIX"],
            backend_of: &[("kv", "UCX"), ("aux", "UCX"), ("posix_scratch", "POSIX")],
            ..healthy
        },
        (_, Dereg) => Truth {
            fire: &["NixlDeregistrationFailing"],
            ..healthy
        },
    }
}

/// One cell running: what Prometheus scrapes and the probes ask.
struct Cell {
    front: Front,
    shape: Shape,
    scenario: Scenario,
    addr: SocketAddr,
    /// The scenario process's pid in a pod (its rank is found by it), or
    /// its rank where the ranks share a process.
    pid: Option<u32>,
    rank: Option<u64>,
    truth: Truth,
}

impl Cell {
    fn name(&self) -> String {
        format!("{:?}/{:?}/{:?}", self.front, self.shape, self.scenario)
    }
}

// ---- processes -------------------------------------------------------------

/// A child whose stdout lines arrive on a channel, told steps on stdin.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    what: String,
}

impl Proc {
    fn spawn(mut cmd: Command, what: String) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Proc {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            what,
        }
    }

    /// Waits for a stdout line equal to `line` (or starting with it).
    fn wait_line(&mut self, line: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.starts_with(line);
                    self.seen.push(l);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!("{}: no {line:?} within {timeout:?}; printed {:?}", self.what, self.seen),
            }
        }
    }

    fn tell(&mut self, line: &str) {
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python_scenario(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Healthy => "healthy",
        Scenario::Seed => "seed",
        Scenario::Deadline => "deadline",
        Scenario::Dropped => "dropped",
        Scenario::Backends => "backends",
        Scenario::Dereg => "dereg",
    }
}

/// The Python cell's process: tests/python/matrix.py under the launcher.
fn python_proc(scenario: Scenario, env: &[(&str, &str)], what: String) -> Proc {
    let script = support_path("tests/python/matrix.py");
    let mut all: Vec<(&str, &str)> = vec![("NIXL_AGENT_CALL_TIMEOUT", "50ms")];
    if scenario == Scenario::Backends {
        // The setting a config-created backend must not be labelled with.
        all.push(("NIXL_AGENT_BACKEND", "POSIX"));
    }
    all.extend_from_slice(env);
    let cmd = support::held::command(&script, true, &[python_scenario(scenario)], &all);
    Proc::spawn(cmd, what)
}

fn support_path(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel).display().to_string()
}

use crate::support::Killed;

// ---- what a cell says of itself -----------------------------------------------

/// Every rank's (rank, pid, status) in a /v1/status document: a lone
/// process's is its own.
fn rank_statuses(doc: &Value) -> Vec<(Option<u64>, Option<u64>, Value)> {
    match doc["ranks"].as_array() {
        Some(ranks) => ranks
            .iter()
            .map(|r| (r["rank"].as_u64(), r["pid"].as_u64(), r["status"].clone()))
            .collect(),
        None => vec![(None, None, doc.clone())],
    }
}

/// The scenario process's status and its rank label ("" alone).
fn scenario_status(c: &Cell, doc: &Value) -> Result<(String, Value), String> {
    let ranks = rank_statuses(doc);
    let found = match (c.rank, c.pid) {
        (Some(rank), _) => ranks.into_iter().find(|(r, _, _)| *r == Some(rank)),
        (None, Some(pid)) => ranks.into_iter().find(|(_, p, _)| *p == Some(u64::from(pid))),
        (None, None) if ranks.len() == 1 => ranks.into_iter().next(),
        (None, None) => None,
    };
    match found {
        Some((rank, _, st)) => Ok((rank.map(|r| r.to_string()).unwrap_or_default(), st)),
        None => Err(format!("no rank of pid {:?} in /v1/status {doc}", c.pid)),
    }
}

/// What disagrees between the cell's projections and its truth (empty when
/// nothing does). Read while the cell is steady.
fn disagreements(c: &Cell) -> Vec<String> {
    let mut bad = Vec::new();
    let t = &c.truth;
    let get = |path: &str| support::get(c.addr, path).map_err(|e| format!("GET {path}: {e}"));
    let (readyz, livez, doc, metrics) = match (get("/readyz"), get("/livez"), get("/v1/status"), get("/metrics")) {
        (Ok(r), Ok(l), Ok(s), Ok(m)) => (r, l, s, m),
        (r, l, s, m) => {
            for e in [r.err(), l.err(), s.err(), m.err()].into_iter().flatten() {
                bad.push(e);
            }
            return bad;
        }
    };
    if (readyz.status == 200) != t.ready {
        bad.push(format!(
            "/readyz {} but ready is {}: {}",
            readyz.status,
            t.ready,
            readyz.body.trim()
        ));
    }
    if livez.status != 200 {
        bad.push(format!("/livez {}: {}", livez.status, livez.body.trim()));
    }
    let doc: Value = match serde_json::from_str(&doc.body) {
        Ok(v) => v,
        Err(e) => return vec![format!("/v1/status is not JSON: {e}")],
    };
    if let Err(e) = support::status_schema_errors(&doc) {
        bad.push(format!("/v1/status against docs/status.schema.json: {e}"));
    }
    let (rank, st) = match scenario_status(c, &doc) {
        Ok(x) => x,
        Err(e) => {
            bad.push(e);
            return bad;
        }
    };
    let scrape = support::Scrape::parse(&metrics.body);
    let mine =
        |s: &&support::metrics::Sample| rank.is_empty() || s.labels.iter().any(|(k, v)| k == "rank" && *v == rank);
    let series = |name: &str| -> Vec<support::metrics::Sample> {
        scrape
            .metric(name)
            .samples()
            .into_iter()
            .filter(mine)
            .cloned()
            .collect()
    };
    let label = |s: &support::metrics::Sample, k: &str| {
        s.labels
            .iter()
            .find(|(k2, _)| k2 == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };

    // Ready: the status, the gauge and /readyz say one thing.
    if st["ready"].as_bool() != Some(t.ready) {
        bad.push(format!("status ready {} but truth {}", st["ready"], t.ready));
    }
    match series("nixl_agent_ready").as_slice() {
        [s] if (s.value == 1.0) == t.ready => {}
        other => bad.push(format!("nixl_agent_ready {other:?} but ready is {}", t.ready)),
    }
    // Groups, as status and metrics show them.
    let group_state = |g: &str| {
        st["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|x| x["name"] == g))
            .map(|x| x["state"].as_str().unwrap_or_default().to_string())
    };
    let registered_gauge = |g: &str| {
        series("nixl_agent_group_registered")
            .iter()
            .find(|s| label(s, "group") == g)
            .map(|s| s.value)
    };
    for g in t.registered {
        if group_state(g).as_deref() != Some("registered") || registered_gauge(g) != Some(1.0) {
            bad.push(format!(
                "group {g} should be registered: status {:?}, gauge {:?}",
                group_state(g),
                registered_gauge(g)
            ));
        }
    }
    for g in t.unregistered {
        if group_state(g).as_deref() == Some("registered") || registered_gauge(g) == Some(1.0) {
            bad.push(format!(
                "group {g} should not be registered: status {:?}, gauge {:?}",
                group_state(g),
                registered_gauge(g)
            ));
        }
    }
    for (g, b) in t.backend_of {
        let in_status = st["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|x| x["name"] == *g))
            .map(|x| x["backend"].clone());
        let in_metrics: Vec<String> = series("nixl_agent_group_registered")
            .iter()
            .filter(|s| label(s, "group") == *g)
            .map(|s| label(s, "backend"))
            .collect();
        if in_status != Some(Value::from(*b)) || in_metrics != [b.to_string()] {
            bad.push(format!(
                "group {g} should be labelled backend {b}: status {in_status:?}, series {in_metrics:?}"
            ));
        }
    }
    // Backends: up where they are, never a "down" that is not.
    let backend_up = series("nixl_agent_backend_up");
    for b in t.up {
        let up_status = st["backends"]
            .as_array()
            .is_some_and(|bs| bs.iter().any(|x| x["name"] == *b && x["up"] == true));
        let up_metric = backend_up.iter().any(|s| label(s, "backend") == *b && s.value == 1.0);
        if !up_status || !up_metric {
            bad.push(format!(
                "backend {b} should be up: status {}, gauge {:?}",
                st["backends"],
                backend_up
                    .iter()
                    .map(|s| (label(s, "backend"), s.value))
                    .collect::<Vec<_>>()
            ));
        }
    }
    for s in &backend_up {
        let b = label(s, "backend");
        if s.value == 0.0 && !t.down.contains(&b.as_str()) {
            bad.push(format!("backend_up{{backend={b:?}}} 0 but it is not down"));
        }
    }
    for x in st["backends"].as_array().into_iter().flatten() {
        let b = x["name"].as_str().unwrap_or_default();
        if x["up"] == false && !t.down.contains(&b) {
            bad.push(format!("status says backend {b} down but it is not: {x}"));
        }
    }
    for b in t.down {
        if !backend_up.iter().any(|s| label(s, "backend") == *b && s.value == 0.0) {
            bad.push(format!("backend {b} should read down"));
        }
    }
    bad
}

// ---- what Prometheus makes of it ------------------------------------------------

/// Alerts seen firing, by instance.
type Fired = BTreeMap<String, BTreeSet<String>>;

/// Alerts seen firing per instance while `until` polls, for at least
/// `settle` after every cell's `fire` alerts were seen (so that an alert
/// with a longer `for:` that should not fire has had its chance).
fn alerts_seen(prom: &prom::Prometheus, cells: &[Cell], mut seen: Fired, settle: Duration, timeout: Duration) -> Fired {
    let end = Instant::now() + timeout;
    let mut all_fired_at: Option<Instant> = None;
    loop {
        for a in prom.alerts() {
            if a["state"] == "firing" {
                let inst = a["labels"]["instance"].as_str().unwrap_or_default().to_string();
                let name = a["labels"]["alertname"].as_str().unwrap_or_default().to_string();
                seen.entry(inst).or_default().insert(name);
            }
        }
        let all_fired = cells.iter().all(|c| {
            c.truth
                .fire
                .iter()
                .all(|f| seen.get(&c.addr.to_string()).is_some_and(|s| s.contains(*f)))
        });
        if all_fired && all_fired_at.is_none() {
            all_fired_at = Some(Instant::now());
        }
        if all_fired_at.is_some_and(|t| t.elapsed() >= settle) || Instant::now() >= end {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn alert_disagreements(c: &Cell, seen: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let none = BTreeSet::new();
    let fired = seen.get(&c.addr.to_string()).unwrap_or(&none);
    let mut bad = Vec::new();
    for f in c.truth.fire {
        if !fired.contains(*f) {
            bad.push(format!("{f} did not fire"));
        }
    }
    for f in fired {
        if !c.truth.fire.contains(&f.as_str()) && !c.truth.may.contains(&f.as_str()) {
            bad.push(format!("{f} fired"));
        }
    }
    bad
}

/// Runs the checks over every cell and fails with the table of what disagreed.
fn judge(cells: &[Cell], prom: &prom::Prometheus, mid_run: Vec<(String, String)>, fired_before: Fired) {
    let mut table: Vec<(String, String)> = mid_run;
    for c in cells.iter().filter(|c| !c.truth.exited) {
        for d in disagreements(c) {
            table.push((c.name(), d));
        }
    }
    let seen = alerts_seen(
        prom,
        cells,
        fired_before,
        Duration::from_secs(8),
        Duration::from_secs(60),
    );
    for c in cells {
        for d in alert_disagreements(c, &seen) {
            table.push((c.name(), d));
        }
    }
    let fired: Vec<String> = cells
        .iter()
        .map(|c| {
            let f = seen.get(&c.addr.to_string()).cloned().unwrap_or_default();
            format!(
                "  {:<28} fired: {}",
                c.name(),
                f.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    eprintln!("alerts fired per cell:\n{}", fired.join("\n"));
    for r in prom.rules() {
        if r["health"] == "err" {
            table.push((
                "prometheus".into(),
                format!("rule {} errs: {}", r["name"], r["lastError"]),
            ));
        }
    }
    assert!(
        table.is_empty(),
        "the matrix disagrees with the ground truth:\n{}",
        table
            .iter()
            .map(|(c, d)| format!("  {c}: {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// While a held call is past its deadline: the cell's /livez is 503 and
/// names the call (and, in a pod, the rank) — for a sidecar, the serving
/// container's probe (`/livez/ranks`), while the sidecar's own /livez stays
/// 200; Prometheus sees the stuck gauge. Returns what disagreed.
fn while_stuck(
    c: &Cell,
    prom: &prom::Prometheus,
    call: &[&str],
    hold_for_alert: bool,
    fired: &mut Fired,
) -> Vec<(String, String)> {
    let mut bad = Vec::new();
    // /livez goes 503 and names the call (and the rank, in a pod) within a
    // watchdog look and, in a pod, a publish and a pass.
    let names_it = |b: &str| call.iter().all(|w| b.contains(w)) && (c.shape == Shape::Lone || b.contains("rank"));
    let probe = match c.shape {
        Shape::Sidecar => nixl_agent::endpoints::LIVEZ_RANKS_PATH,
        _ => "/livez",
    };
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        if let Ok(r) = support::get(c.addr, probe) {
            if r.status == 503 && names_it(&r.body) {
                break;
            }
            last = Some((r.status, r.body));
        }
        if Instant::now() >= end {
            bad.push((
                c.name(),
                format!("{probe} never 503 naming the held call {call:?} (and its rank in a pod); last {last:?}"),
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if c.shape == Shape::Sidecar {
        match support::get(c.addr, "/livez") {
            Ok(r) if r.status == 200 => {}
            other => bad.push((
                c.name(),
                format!("the sidecar's own /livez failed for a serving rank's hang: {other:?}"),
            )),
        }
    }
    if !hold_for_alert {
        return bad;
    }
    // Held until Prometheus fired the stuck alert for it (or long enough
    // that it should have: the judgement says which).
    let inst = c.addr.to_string();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let firing = prom.alerts().iter().any(|a| {
            a["labels"]["alertname"] == "NixlLifecycleStuck"
                && a["labels"]["instance"] == inst.as_str()
                && a["state"] == "firing"
        });
        if firing {
            fired.entry(inst).or_default().insert("NixlLifecycleStuck".to_string());
            return bad;
        }
        if Instant::now() >= end {
            let seen = prom.query(&format!("nixl_agent_lifecycle_stuck{{instance=\"{inst}\"}}"));
            let up = prom.query(&format!("up{{instance=\"{inst}\"}}"));
            bad.push((
                c.name(),
                format!("the stuck alert did not fire while held for 30 s: stuck {seen:?}, up {up:?}"),
            ));
            return bad;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ---- the tests ----------------------------------------------------------------

#[test]
fn the_matrix_is_complete() {
    let mut rows = Vec::new();
    for f in FRONTS {
        for sh in SHAPES {
            for sc in SCENARIOS {
                let why = not_applicable(f, sh, sc);
                rows.push(format!("{f:?}/{sh:?}/{sc:?}: {}", why.unwrap_or("run")));
                if let Some(w) = why {
                    assert!(w.len() > 40, "{f:?}/{sh:?}/{sc:?}: say why in full");
                }
            }
        }
    }
    let run = rows.iter().filter(|r| r.ends_with(": run")).count();
    eprintln!("{}", rows.join("\n"));
    // Every cell is run by one of the tests below or says why not.
    assert_eq!(run, ran_cells().len(), "cells run: {:?}", ran_cells());
    for (f, sh, sc) in ran_cells() {
        assert!(
            not_applicable(f, sh, sc).is_none(),
            "{f:?}/{sh:?}/{sc:?} is run and listed as not applicable"
        );
    }
}

/// The cells this file's tests run.
fn ran_cells() -> Vec<(Front, Shape, Scenario)> {
    let mut v = Vec::new();
    for sh in SHAPES {
        for sc in SCENARIOS {
            v.push((Front::Python, sh, sc));
        }
    }
    for sc in [
        Scenario::Healthy,
        Scenario::Seed,
        Scenario::Deadline,
        Scenario::Dropped,
        Scenario::Backends,
    ] {
        v.push((Front::Binary, Shape::Lone, sc));
    }
    for sc in [Scenario::Healthy, Scenario::Seed, Scenario::Backends] {
        v.push((Front::Lifecycle, Shape::Lone, sc));
    }
    for sc in [Scenario::Healthy, Scenario::Seed, Scenario::Dropped, Scenario::Backends] {
        v.push((Front::Observe, Shape::Lone, sc));
    }
    for f in [Front::Lifecycle, Front::Observe] {
        for sc in [Scenario::Healthy, Scenario::Seed] {
            v.push((f, Shape::Sidecar, sc));
        }
    }
    v
}

/// Python cells of one shape: every scenario, each in its own process (a
/// pod: with a healthy rank beside it).
fn python_shape(shape: Shape) {
    let dirs: Vec<tempfile::TempDir> = SCENARIOS.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let mut procs: Vec<(Scenario, Proc)> = Vec::new();
    let mut partners: Vec<Proc> = Vec::new();
    let mut servers: Vec<Killed> = Vec::new();
    let mut cells = Vec::new();
    for (sc, dir) in SCENARIOS.iter().zip(&dirs) {
        let what = format!("Python/{shape:?}/{sc:?}");
        let (addr, env): (SocketAddr, Vec<(String, String)>) = match shape {
            Shape::Lone | Shape::ZeroConfig => {
                let a = support::free_port();
                (a, vec![("NIXL_AGENT_LISTEN".into(), a.to_string())])
            }
            Shape::Sidecar => {
                let (child, a) = support::pod_server(dir.path(), 2);
                servers.push(child);
                (
                    a,
                    vec![("NIXL_AGENT_MULTIPROC_DIR".into(), dir.path().display().to_string())],
                )
            }
        };
        let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut with_rank = env_ref.clone();
        if shape == Shape::Sidecar {
            with_rank.push(("LOCAL_RANK", "0"));
        }
        let p = python_proc(*sc, &with_rank, what.clone());
        let pid = (shape != Shape::Lone).then(|| p.child.id());
        if shape != Shape::Lone {
            let mut partner_env = env_ref.clone();
            if shape == Shape::Sidecar {
                partner_env.push(("LOCAL_RANK", "1"));
            }
            partners.push(python_proc(Scenario::Healthy, &partner_env, format!("{what} partner")));
        }
        cells.push(Cell {
            front: Front::Python,
            shape,
            scenario: *sc,
            addr,
            pid,
            rank: None,
            truth: truth(Front::Python, *sc),
        });
        procs.push((*sc, p));
    }
    for p in &mut partners {
        p.wait_line("steady", Duration::from_secs(120));
    }
    for (sc, p) in &mut procs {
        let first = match sc {
            Scenario::Deadline => "ready to call",
            Scenario::Dropped => "registered",
            _ => "steady",
        };
        p.wait_line(first, Duration::from_secs(120));
    }
    let addrs: Vec<SocketAddr> = cells.iter().map(|c| c.addr).collect();
    let prom = prom::Prometheus::start(&addrs, Some(&prom::rules_with_short_for()));
    prom.wait_scraped(&addrs, 3, Duration::from_secs(60));
    let mut mid_run = Vec::new();
    let mut fired = Fired::new();
    for (c, (sc, p)) in cells.iter().zip(procs.iter_mut()) {
        match sc {
            Scenario::Deadline => {
                p.tell("call");
                p.wait_line("calling", Duration::from_secs(30));
                mid_run.extend(while_stuck(c, &prom, &["register", "aux"], true, &mut fired));
                p.tell("release");
                p.wait_line("steady", Duration::from_secs(60));
            }
            Scenario::Dropped => {
                p.tell("drop");
                p.wait_line("steady", Duration::from_secs(60));
            }
            _ => {}
        }
    }
    // The ranks' files reach the pod within a publish interval or two.
    std::thread::sleep(Duration::from_secs(1));
    judge(&cells, &prom, mid_run, fired);
}

#[test]
fn python_lone_process() {
    python_shape(Shape::Lone);
}

#[test]
fn python_zero_config_pod_of_two() {
    python_shape(Shape::ZeroConfig);
}

#[test]
fn python_sidecar_pod_of_two() {
    python_shape(Shape::Sidecar);
}

// ---- the binary ---------------------------------------------------------------

const QUICK_RETRY: &str = "[retry]\ninitial_backoff = '200ms'\nmax_backoff = '1s'\n";

fn binary_config(scenario: Scenario) -> Option<String> {
    let kv = "[[group]]\nname = 'kv'\nkind = 'kv'\nmem_type = 'DRAM'\ncount = 2\nsize = '64KiB'\n";
    let aux = |backend: &str| {
        format!("[[group]]\nname = 'aux'\nkind = 'aux'\nmem_type = 'DRAM'\ncount = 1\nsize = '4KiB'\nbackends = ['{backend}']\n")
    };
    match scenario {
        Scenario::Healthy | Scenario::Dropped => None,
        // The aux group's backend plugin is not installed: it cannot register.
        Scenario::Seed => Some(format!("{QUICK_RETRY}{kv}{}", aux("NOPE"))),
        // A group of 262,144 regions: one NIXL call each way that runs for
        // hundreds of milliseconds, far past a 10 ms deadline.
        Scenario::Deadline => Some(format!(
            "nixl_call_timeout = '10ms'\nshutdown_grace = '30s'\n{QUICK_RETRY}\
             [[group]]\nname = 'kv'\nkind = 'kv'\nmem_type = 'DRAM'\ncount = 262144\nsize = '4KiB'\nvalidate = false\n{}",
            aux("UCX")
        )),
        Scenario::Backends => Some(format!("{QUICK_RETRY}{kv}{}", aux("POSIX"))),
        Scenario::Dereg => unreachable!("not applicable"),
    }
}

#[test]
fn binary_lone_process() {
    let scenarios: Vec<Scenario> = SCENARIOS
        .into_iter()
        .filter(|sc| not_applicable(Front::Binary, Shape::Lone, *sc).is_none())
        .collect();
    let configs: Vec<Option<String>> = scenarios.iter().map(|sc| binary_config(*sc)).collect();
    let mut agents: Vec<support::AgentProcess> = configs
        .iter()
        .map(|c| {
            support::AgentProcess::spawn(support::Spawn {
                config: c.as_deref(),
                ..Default::default()
            })
        })
        .collect();
    let cells: Vec<Cell> = scenarios
        .iter()
        .zip(&agents)
        .map(|(sc, a)| Cell {
            front: Front::Binary,
            shape: Shape::Lone,
            scenario: *sc,
            addr: a.addr,
            pid: None,
            rank: None,
            truth: truth(Front::Binary, *sc),
        })
        .collect();
    for (c, a) in cells.iter().zip(&agents) {
        if c.truth.ready || c.scenario == Scenario::Dropped {
            a.wait_ready(Duration::from_secs(60));
        }
    }
    let addrs: Vec<SocketAddr> = cells.iter().map(|c| c.addr).collect();
    let prom = prom::Prometheus::start(&addrs, Some(&prom::rules_with_short_for()));
    prom.wait_scraped(&addrs, 3, Duration::from_secs(60));
    let mut mid_run = Vec::new();
    let mut fired = Fired::new();
    for (c, a) in cells.iter().zip(agents.iter_mut()) {
        match c.scenario {
            Scenario::Deadline => {
                // Deregistered and registered again: each call past 10 ms.
                a.signal("USR1");
                mid_run.extend(while_stuck(c, &prom, &["kv"], false, &mut fired));
                a.wait_ready(Duration::from_secs(60));
            }
            Scenario::Dropped => {
                a.signal("TERM");
                assert_eq!(
                    a.wait_exit(Duration::from_secs(30)).code(),
                    Some(0),
                    "drained and exited"
                );
            }
            _ => {}
        }
    }
    judge(&cells, &prom, mid_run, fired);
}

// ---- the Rust library -----------------------------------------------------------

use nixl_agent::{
    Descriptor, Expected, GroupSpec, Kind, Lifecycle, LifecycleHandle, MemType, ObserveSettings, ObservedAgent,
    ObservedRegistration, Observer, Plan, Region,
};

const KV: usize = 64 << 10;
const AUX: usize = 4 << 10;

/// The serving process's own NIXL agent, with `backends` created.
fn caller_agent(name: &str, backends: &[&str]) -> nixl_sys::Agent {
    nixl_agent::load_nixl(Some(&support::nixl_lib_dir())).expect("NIXL runtime from the wheel");
    let a = nixl_sys::Agent::new(name).expect("NIXL agent");
    for b in backends {
        let (_, params) = a.get_plugin_params(b).expect("plugin");
        a.create_backend(b, &params).expect("backend");
    }
    a
}

/// Buffers and handles a cell keeps alive while it is judged.
/// (Dropped in this order: what is registered before the buffers.)
#[derive(Default)]
struct Held {
    publishers: Vec<nixl_agent::Publisher>,
    lifecycles: Vec<LifecycleHandle>,
    registrations: Vec<ObservedRegistration>,
    observed: Vec<ObservedAgent>,
    observers: Vec<Observer>,
    agents: Vec<nixl_sys::Agent>,
    buffers: Vec<Vec<u8>>,
}

impl Held {
    fn buffer(&mut self, len: usize) -> Region {
        let b = vec![1u8; len];
        let r = Region::new(b.as_ptr() as usize, b.len(), 0);
        self.buffers.push(b);
        r
    }
}

/// Serves `router` on a free loopback port from `rt`.
fn serve(rt: &tokio::runtime::Runtime, router: nixl_agent::Router) -> SocketAddr {
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A lifecycle on the caller's agent in `scenario`; its router, and what
/// it holds.
fn lifecycle(rt: &tokio::runtime::Runtime, name: &str, scenario: Scenario, held: &mut Held) -> LifecycleHandle {
    let backends: &[&str] = if scenario == Scenario::Backends {
        &["UCX", "POSIX"]
    } else {
        &["UCX"]
    };
    let agent = caller_agent(name, backends);
    let kv = held.buffer(KV);
    let aux = match scenario {
        // The seed: aux at address 0.
        Scenario::Seed => Region::new(0, AUX, 0),
        _ => held.buffer(AUX),
    };
    let mut aux_spec = GroupSpec::provided("aux", Kind::Aux, MemType::Dram, vec![aux]);
    if scenario == Scenario::Backends {
        aux_spec = aux_spec.with_backends(&["POSIX"]);
    }
    let plan = Plan {
        groups: vec![GroupSpec::provided("kv", Kind::Kv, MemType::Dram, vec![kv]), aux_spec],
    };
    let handle = rt
        .block_on(
            Lifecycle::prepare(support::library_config(name), plan)
                .unwrap()
                .on_agent(agent.clone())
                .without_server()
                .start(),
        )
        .expect("lifecycle starts");
    held.agents.push(agent);
    handle
}

/// Observe mode on the caller's agent in `scenario` (the dropped one's
/// registrations are handed back to drop later).
fn observed(name: &str, scenario: Scenario, held: &mut Held) -> (Observer, Vec<ObservedRegistration>) {
    let agent = caller_agent(name, &["UCX"]);
    let observer = Observer::new(ObserveSettings {
        expect: vec![Expected::new("kv", Kind::Kv), Expected::new("aux", Kind::Aux)],
        validate: true,
        ..ObserveSettings::default()
    });
    let on = observer.agent(&agent);
    let aux_backend = if scenario == Scenario::Backends {
        let (_, params) = agent.get_plugin_params("POSIX").unwrap();
        on.create_backend("POSIX", &params).expect("POSIX backend");
        "POSIX"
    } else {
        "UCX"
    };
    let kv = held.buffer(KV);
    let mut regs = vec![on
        .register_on("kv", Kind::Kv, &Descriptor::new(kv, MemType::Dram), &["UCX"])
        .expect("kv registers")];
    let aux = match scenario {
        Scenario::Seed => Region::new(0, AUX, 0),
        _ => held.buffer(AUX),
    };
    match on.register_on("aux", Kind::Aux, &Descriptor::new(aux, MemType::Dram), &[aux_backend]) {
        Ok(r) => regs.push(r),
        Err(_) => assert_eq!(scenario, Scenario::Seed, "aux registers"),
    }
    held.observed.push(on);
    held.agents.push(agent);
    if scenario == Scenario::Dropped {
        return (observer, regs);
    }
    held.registrations.extend(regs);
    (observer, Vec::new())
}

#[test]
fn rust_lifecycle_and_observe() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut held = Held::default();
    let mut cells = Vec::new();
    let mut to_drop: Vec<ObservedRegistration> = Vec::new();
    let cell = |front, shape, scenario, addr, rank| Cell {
        front,
        shape,
        scenario,
        addr,
        pid: None,
        rank,
        truth: truth(front, scenario),
    };
    for (i, sc) in [Scenario::Healthy, Scenario::Seed, Scenario::Backends]
        .into_iter()
        .enumerate()
    {
        let h = lifecycle(&rt, &format!("lc-lone-{i}"), sc, &mut held);
        let addr = serve(&rt, h.router());
        held.lifecycles.push(h);
        cells.push(cell(Front::Lifecycle, Shape::Lone, sc, addr, None));
    }
    for (i, sc) in [Scenario::Healthy, Scenario::Seed, Scenario::Dropped, Scenario::Backends]
        .into_iter()
        .enumerate()
    {
        let (o, regs) = observed(&format!("ob-lone-{i}"), sc, &mut held);
        to_drop.extend(regs);
        let addr = serve(&rt, o.router());
        held.observers.push(o);
        cells.push(cell(Front::Observe, Shape::Lone, sc, addr, None));
    }
    // Sidecar pods of two: rank 0 in the scenario, rank 1 healthy, both
    // publishing from this process; `nixl-agent pod` serves the directory.
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers = Vec::new();
    let mut d = dirs.iter();
    for front in [Front::Lifecycle, Front::Observe] {
        for sc in [Scenario::Healthy, Scenario::Seed] {
            let dir = d.next().unwrap().path();
            let (child, addr) = support::pod_server(dir, 2);
            servers.push(child);
            for (rank, rsc) in [(0u32, sc), (1, Scenario::Healthy)] {
                let name = format!("{front:?}-pod-{sc:?}-{rank}").to_lowercase();
                let observer = match front {
                    Front::Lifecycle => {
                        let h = lifecycle(&rt, &name, rsc, &mut held);
                        let o = h.observer(ObserveSettings::default()).unwrap();
                        held.lifecycles.push(h);
                        o
                    }
                    _ => observed(&name, rsc, &mut held).0,
                };
                held.publishers.push(observer.publish(dir, rank).expect("publishes"));
                held.observers.push(observer);
            }
            cells.push(cell(front, Shape::Sidecar, sc, addr, Some(0)));
        }
    }
    for h in &held.lifecycles {
        let ready = rt.block_on(h.wait_ready(Duration::from_secs(30)));
        let failing = h
            .status()
            .groups
            .iter()
            .any(|g| g.name == "aux" && g.last_reason.is_some());
        assert!(ready || failing, "{:#?}", h.status());
    }
    let addrs: Vec<SocketAddr> = cells.iter().map(|c| c.addr).collect();
    let prom = prom::Prometheus::start(&addrs, Some(&prom::rules_with_short_for()));
    prom.wait_scraped(&addrs, 3, Duration::from_secs(60));
    // The dropped cell: its registrations go away while it runs.
    drop(to_drop);
    std::thread::sleep(Duration::from_secs(1));
    judge(&cells, &prom, Vec::new(), Fired::new());
    drop(held);
}
