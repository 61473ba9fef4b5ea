//! Python serving processes under `nixl-agent-instrument`: programs of our
//! own (tests/python/serving.py) that call NIXL's real Python API (the
//! nixl-cu12 wheel in .deps/venv) the way SGLang and vLLM do, run bare and
//! instrumented. What the program sees is compared between both runs; what
//! nixl-agent recorded is read over HTTP from the extension's own threads.

use crate::support::held::program;
use crate::support::{self, CommandWithin, Scrape};

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn command(instrumented: bool, args: &[&str], env: &[(&str, &str)]) -> Command {
    support::held::command(&program("serving.py"), instrumented, args, env)
}

struct Held;

impl Held {
    fn start(args: &[&str], env: &[(&str, &str)]) -> support::held::Held {
        support::held::Held::start(&program("serving.py"), args, env)
    }
}

/// Runs a program to the end; (stdout, stderr).
fn run(instrumented: bool, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = command(instrumented, args, env)
        .stdin(Stdio::null())
        .output_within(support::RUN_WITHIN);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn line_with<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {lines:?}"))
}

/// docs/metrics.md's series budget of a Python process of SGLang's shape
/// and the count of a live scrape of a first run: "exports at most B
/// series, `process_*` included (N on a live scrape, ...)".
fn documented_series() -> (usize, usize) {
    let text = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let after = |marker: &str| -> usize {
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("docs/metrics.md: no {marker:?}"))
            + marker.len();
        let n: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
        n.parse()
            .unwrap_or_else(|_| panic!("docs/metrics.md: no number after {marker:?}"))
    };
    (
        after("aux, state) exports at most "),
        after("series, `process_*` included ("),
    )
}

fn group_value(s: &Scrape, metric: &str, group: &str) -> f64 {
    s.metric(metric).label("group", group).value()
}

#[test]
fn sglang_shaped_process_shows_its_groups_and_is_ready() {
    let h = Held::start(&["sglang", "--hold"], &[("NIXL_AGENT_EXPECT", "kv:DRAM,aux")]);
    assert_eq!(line_with(&h.lines, "registered"), "registered 1 1");
    let s = h.scrape();
    for (group, kind, descriptors, bytes) in [
        ("kv", "kv", 4.0, 4.0 * 65536.0),
        ("aux", "aux", 1.0, 4096.0),
        ("state", "state", 1.0, 8192.0),
    ] {
        let m = |name| {
            s.metric(name)
                .label("group", group)
                .label("kind", kind)
                .label("mem_type", "DRAM")
                .value()
        };
        assert_eq!(m("nixl_agent_registered_descriptors"), descriptors, "{group}");
        assert_eq!(m("nixl_agent_registered_bytes"), bytes, "{group}");
        assert_eq!(m("nixl_agent_registration_attempts_total"), 1.0, "{group}");
        assert_eq!(m("nixl_agent_group_registered"), 1.0, "{group}");
    }
    // The backend SGLang creates after construction.
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    assert_eq!(h.readyz(), 200);
    let status = h.status();
    assert_eq!(status["nixl"]["agent_owner"], "caller", "{status}");
    assert_eq!(status["ready"], true);
    support::assert_projections_agree(h.addr);
    // The series budget for SGLang's three groups, with the histograms,
    // process_* and the data path's families (failure series appear on
    // first use): docs/metrics.md's "at most B series, `process_*`
    // included (N on a live scrape, and one more, ...previous_run...
    // once a process before it at the same address has ended)", B and N
    // read from the doc. A leftover rank record of an earlier run on this
    // port adds that one series, so it is counted apart.
    let body = support::get(h.addr, "/metrics").unwrap().body;
    let series: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let previous = series
        .iter()
        .filter(|l| l.starts_with("nixl_agent_previous_run_"))
        .count();
    let (budget, live) = documented_series();
    assert_eq!(budget, 160, "docs/metrics.md: the series budget");
    assert!(series.len() <= budget, "{} series for kv, aux, state", series.len());
    assert!(previous <= 1, "{series:?}");
    assert_eq!(
        series.len() - previous,
        live,
        "docs/metrics.md says {live} series on a live scrape of SGLang's shape; this one has {}",
        series.len() - previous
    );
    // A live scrape passes promtool's lint.
    let body = support::get(h.addr, "/metrics").unwrap().body;
    support::assert_promtool_clean(&body);
    h.finish();
}

#[test]
fn vllm_shaped_process_records_kv_under_its_default_name() {
    let h = Held::start(&["vllm", "--hold"], &[]);
    let s = h.scrape();
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv"), 8.0);
    assert_eq!(group_value(&s, "nixl_agent_registered_bytes", "kv"), 8.0 * 65536.0);
    // A framework of its own: ready on no expected groups, kv observed.
    assert_eq!(h.readyz(), 200);
    let status = support::assert_projections_agree(h.addr);
    // The NIXL runtime the program loaded (the pinned wheel's libnixl.so),
    // named as the binary names its own.
    let nixl = &status["nixl"];
    assert_eq!(nixl["version"], "1.5.1", "{nixl}");
    assert_eq!(nixl["found_by"], "process", "{nixl}");
    let library = nixl["library"].as_str().unwrap_or_else(|| panic!("{nixl}"));
    assert!(library.ends_with(".nixl_cu12.mesonpy.libs/libnixl.so"), "{library}");
    assert!(std::path::Path::new(library).is_file(), "{library}");
    assert!(nixl["plugin_dir"].as_str().unwrap().ends_with("plugins"), "{nixl}");
    assert!(nixl["plugins"].as_array().unwrap().iter().any(|p| p == "UCX"), "{nixl}");
    assert_eq!(nixl["binding_version"], "1.5.1", "{nixl}");
    assert_eq!(
        s.metric("nixl_agent_build_info")
            .label("nixl_version", "1.5.1")
            .label("nixl_sys_version", "1.5.1")
            .value(),
        1.0
    );
    h.finish();

    // The operator renames it; readiness waits for the new name.
    let h = Held::start(
        &["vllm", "--hold"],
        &[
            ("NIXL_AGENT_GROUPS", "kv=kv_cache:kv"),
            ("NIXL_AGENT_EXPECT", "kv_cache:DRAM"),
        ],
    );
    let s = h.scrape();
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv_cache"), 8.0);
    assert!(s
        .metric("nixl_agent_registered_descriptors")
        .label("group", "kv")
        .get()
        .is_none());
    assert_eq!(h.readyz(), 200);
    support::assert_projections_agree(h.addr);
    h.finish();
}

/// A failure of the wrapping itself never reaches the program: the call
/// goes ahead, the failure is counted every time and logged once.
#[test]
fn a_failure_of_the_instrumentation_is_counted_logged_once_and_swallowed() {
    let (bare, _) = run(false, &["evil"], &[]);
    assert!(bare.contains("evil caller registered 1"), "{bare}");
    let h = Held::start(&["evil", "--hold"], &[]);
    assert!(h.lines.iter().any(|l| l == "evil caller registered 1"), "{:?}", h.lines);
    let s = h.scrape();
    assert_eq!(
        s.metric("nixl_agent_instrumentation_errors_total")
            .label("operation", "register_memory")
            .value(),
        3.0
    );
    let err = h.stderr();
    let logged: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("nixl_agent_instrumentation_errors_total"))
        .collect();
    assert_eq!(logged.len(), 1, "logged once: {err}");
    assert!(logged[0].contains("cannot be printed"), "{}", logged[0]);
    h.finish();
}

/// A forked child that creates its own agent records on its own (the
/// parent keeps the port); neither hangs nor crashes.
/// A forked child records on its own: its recording holds what it
/// registered (not its parent's kv), the parent's is untouched.
#[test]
fn a_forked_child_records_on_its_own() {
    let h = Held::start(&["fork", "--hold"], &[("NIXL_AGENT_EXPECT", "kv:DRAM,aux")]);
    assert!(h.lines.iter().any(|l| l == "child registered"), "{:?}", h.lines);
    assert_eq!(
        line_with(&h.lines, "child recorded"),
        "child recorded [('aux', 1)]",
        "the child's own recording"
    );
    assert_eq!(line_with(&h.lines, "child exit"), "child exit 0");
    // The child was a second process of this address while it lived (the
    // merged view). It exited cleanly and wrote its end record: its
    // counters stay on the address for the retention, its gauges go, and a
    // clean exit is no rank the address waits for — ready.
    let st = support::wait_for(Duration::from_secs(5), "the child's end, and the address ready", || {
        let r = support::get(h.addr, "/v1/status").ok()?;
        let st: serde_json::Value = serde_json::from_str(&r.body).ok()?;
        let ended = st["ranks"].as_array()?.iter().any(|r| r["ended"]["how"] == "exited");
        (ended && h.readyz() == 200).then_some(st)
    });
    assert_eq!(st["shape"], "zero_config_pod", "{st}");
    let s = h.scrape();
    assert_eq!(
        group_value(&s, "nixl_agent_registered_descriptors", "aux"),
        1.0,
        "the child's gauges go"
    );
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv"), 4.0);
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "aux")
            .samples()
            .len(),
        2,
        "the parent's and the ended child's counters"
    );
    assert!(
        !h.stderr().contains("cannot serve"),
        "the child says nothing of the port its parent holds: {}",
        h.stderr()
    );
    h.finish();
}

/// A child that outlives its parent never held the parent's listening
/// socket (closed in the child at the fork); once the parent exits, the
/// child — another process of the same address — takes the address over
/// within 2 s and serves its own recording there.
#[test]
fn a_forked_child_does_not_keep_its_parents_port_and_takes_the_address_over() {
    let addr = support::free_port();
    let listen = addr.to_string();
    let mut parent = support::spawn_piped(&mut command(
        true,
        &["fork", "--orphan"],
        &[("NIXL_AGENT_LISTEN", listen.as_str())],
    ));
    let mut child_stdin = parent.stdin.take().unwrap();
    let mut stdout = support::Lines::new(parent.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut child_pid = None;
    let mut parents_socket = None;
    while child_pid.is_none() || !lines.iter().any(|l: &String| l == "parent exits") {
        let line = stdout
            .next_within(
                support::RUN_WITHIN,
                &format!("the forking program's next line after {lines:?}"),
            )
            .unwrap_or_else(|| panic!("ended early: {lines:?}"));
        if line == "parent listening" {
            parents_socket = support::listening_inode(addr.port());
            child_stdin.write_all(b"\n").unwrap();
            child_stdin.flush().unwrap();
        }
        if let Some(pid) = line.strip_prefix("child pid ") {
            child_pid = Some(pid.parse::<u32>().unwrap());
        }
        lines.push(line);
    }
    let child = child_pid.unwrap();
    let parents_socket = parents_socket.expect("the parent listens");
    assert!(
        !support::socket_inodes(child).contains(&parents_socket),
        "the child holds its parent's listening socket"
    );
    assert!(
        support::wait_within(&mut parent, support::RUN_WITHIN, "the forking parent").success(),
        "{lines:?}"
    );
    let exited = Instant::now();
    // Not a zombie waiting for a reaper either.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    assert!(alive(), "the child lives on");
    let status = support::wait_for(Duration::from_secs(5), "the child serving the address", || {
        support::get(addr, "/v1/status")
            .ok()
            .filter(|r| r.status == 200)
            .map(|r| serde_json::from_str::<serde_json::Value>(&r.body).unwrap())
            .filter(|doc| doc["shape"] == "process")
    });
    support::assert_status_schema(&status);
    let status = support::own_status(&status).clone();
    let took = exited.elapsed();
    assert!(took <= Duration::from_secs(2), "handed over after {took:?}");
    assert_ne!(
        support::listening_inode(addr.port()),
        Some(parents_socket),
        "a socket of the child's own"
    );
    let names: Vec<&str> = status["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("the child's own recording: {status}"))
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["aux"], "{status}");
    drop(child_stdin);
    support::wait_for(Duration::from_secs(10), "the child exits", || (!alive()).then_some(()));
}

/// The seed: an aux list with a null pointer.
#[test]
fn seed_null_aux_raises_what_nixl_raises_and_is_recorded_with_its_reason() {
    let (bare, _) = run(false, &["sglang", "--null-aux"], &[]);
    let bare: Vec<String> = bare.lines().map(str::to_string).collect();
    let raised = line_with(&bare, "raised").to_string();
    assert!(
        raised.contains("nixlBackendError") && raised.contains("origin=_api.py:register_memory"),
        "{raised}"
    );

    let h = Held::start(
        &["sglang", "--null-aux", "--hold"],
        &[("NIXL_AGENT_EXPECT", "kv:DRAM,aux"), ("NIXL_AGENT_CAPTURE", "on")],
    );
    // Same class, same args, same origin; the program goes on.
    assert_eq!(line_with(&h.lines, "raised"), raised);
    assert!(h.lines.iter().any(|l| l == "continued"), "{:?}", h.lines);
    let aux = h.group("aux");
    assert_eq!(aux["state"], "failed", "{aux}");
    assert_eq!(aux["last_reason"], "invalid_address", "{aux}");
    assert_eq!(aux["failed_region"], 0, "{aux}");
    let words = aux["last_diagnostics"].to_string();
    assert!(
        words.contains("undefined address") || words.contains("registration failed"),
        "UCX/NIXL words in /v1/status: {aux}"
    );
    let s = h.scrape();
    assert_eq!(
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "aux")
            .label("reason", "invalid_address")
            .value(),
        1.0
    );
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv"), 4.0);
    let state = |group: &str, state: &str| {
        s.metric("nixl_agent_group_state")
            .label("group", group)
            .label("state", state)
            .value()
    };
    assert_eq!((state("aux", "failed"), state("kv", "registered")), (1.0, 1.0));
    assert_eq!(h.readyz(), 503, "aux is expected and failed");
    let verbose = support::get(h.addr, "/readyz?verbose").unwrap().body;
    assert!(verbose.contains("group:aux"), "{verbose}");
    support::assert_projections_agree(h.addr);
    h.finish();
}

/// A corrupted aux pointer NIXL accepts silently: recorded in `record`
/// mode, refused before NIXL in `enforce` mode.
#[test]
fn corrupted_pointer_is_recorded_or_refused_before_nixl() {
    let (bare, _) = run(false, &["sglang", "--corrupt-aux"], &[]);
    assert!(bare.contains("registered 1 1"), "NIXL accepts it: {bare}");

    let h = Held::start(&["sglang", "--corrupt-aux", "--hold"], &[]);
    assert_eq!(
        line_with(&h.lines, "registered"),
        "registered 1 1",
        "record mode changes nothing"
    );
    let s = h.scrape();
    assert_eq!(
        s.metric("nixl_agent_accepted_invalid_total")
            .label("group", "aux")
            .label("reason", "unmapped_address")
            .value(),
        1.0
    );
    let aux = h.group("aux");
    assert!(
        aux["last_accepted_invalid"]
            .as_str()
            .unwrap()
            .starts_with("unmapped_address"),
        "{aux}"
    );
    support::assert_projections_agree(h.addr);
    h.finish();

    let h = Held::start(
        &["sglang", "--corrupt-aux", "--hold"],
        &[("NIXL_AGENT_VALIDATE", "enforce")],
    );
    let raised = line_with(&h.lines, "raised");
    assert!(
        raised.contains("nixl_agent_instrument.RegistrationRefused"),
        "named after the package, not its extension: {raised}"
    );
    assert!(
        raised.contains("RegistrationRefused")
            && raised.contains("region 0")
            && raised.contains("unmapped_address")
            && raised.contains("\"aux\""),
        "{raised}"
    );
    // NIXL's own view: the agent's metadata did not grow.
    assert_eq!(line_with(&h.lines, "metadata grew by"), "metadata grew by 0");
    let aux = h.group("aux");
    assert_eq!(aux["last_reason"], "unmapped_address", "{aux}");
    assert!(
        aux["last_error"].as_str().unwrap().contains("refused before NIXL"),
        "{aux}"
    );
    support::assert_projections_agree(h.addr);
    h.finish();
}

#[test]
fn two_instrumented_agents_complete_a_real_transfer() {
    let addr = support::free_port().to_string();
    let (out, _) = run(true, &["transfer"], &[("NIXL_AGENT_LISTEN", &addr)]);
    assert!(out.contains("transfer DONE bytes match"), "{out}");
}

#[test]
fn deregister_memory_drops_the_gauges() {
    let mut h = Held::start(&["deregister", "--hold"], &[("NIXL_AGENT_EXPECT", "kv:DRAM,aux")]);
    let s = h.scrape();
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv"), 4.0);
    assert_eq!(h.readyz(), 200);
    h.resume();
    h.until_hold();
    let s = h.scrape();
    for g in ["kv", "aux"] {
        assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", g), 0.0, "{g}");
        assert_eq!(group_value(&s, "nixl_agent_registered_bytes", g), 0.0, "{g}");
        assert_eq!(group_value(&s, "nixl_agent_deregistrations_total", g), 1.0, "{g}");
        assert_eq!(group_value(&s, "nixl_agent_group_registered", g), 0.0, "{g}");
        assert_eq!(
            s.metric("nixl_agent_group_state")
                .label("group", g)
                .label("state", "deregistered")
                .value(),
            1.0,
            "{g}"
        );
    }
    assert_eq!(h.readyz(), 503, "expected groups deregistered");
    support::assert_projections_agree(h.addr);
    h.finish();
}

/// A program that drops its NIXL agent: NIXL releases its memory, and the
/// recording releases what that agent held — not ready, every endpoint
/// agreeing.
#[test]
fn a_collected_agent_releases_its_holdings_and_readiness_follows() {
    let mut h = Held::start(&["dropped", "--hold"], &[("NIXL_AGENT_EXPECT", "kv,aux")]);
    let before = support::assert_projections_agree(h.addr);
    assert_eq!(before["ready"], true, "{before}");
    let agents = before["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1, "{before}");
    assert_eq!(agents[0]["released"], false);
    h.resume();
    h.until_hold();
    let after = support::assert_projections_agree(h.addr);
    assert_eq!(after["ready"], false, "{after}");
    for g in ["kv", "aux"] {
        let g = h.group(g);
        assert_eq!(
            (g["state"].as_str(), g["descriptors"].as_u64()),
            (Some("deregistered"), Some(0)),
            "{g}"
        );
    }
    assert_eq!(after["agents"][0]["released"], true, "{after}");
    assert_eq!(after["agents"][0]["descriptors"], 0, "{after}");
    assert_eq!(h.readyz(), 503);
    h.finish();
}

/// Calls A and C succeed, then B fails, then A is deregistered: a group is as good as
/// its last registration call, and /metrics, /v1/status and /readyz say the
/// same (they used to disagree here).
#[test]
fn a_partial_deregistration_reads_the_same_on_every_endpoint() {
    let h = Held::start(&["partial", "--hold"], &[("NIXL_AGENT_EXPECT", "kv")]);
    assert!(h.lines.iter().any(|l| l.starts_with("B failed")), "{:?}", h.lines);
    let status = support::assert_projections_agree(h.addr);
    let group = status["groups"].as_array().unwrap()[0].clone();
    assert_eq!(group["state"], "failed", "{status}");
    assert_eq!(group["descriptors"], 1, "C is still registered: {status}");
    assert_eq!(status["ready"], false);
    h.finish();
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A Python thread spins in pure Python, holding the GIL, with the switch
/// interval raised to 250 ms (a thread that wants the GIL waits that long),
/// while /readyz and /metrics are probed: the extension's threads answer
/// without the GIL. Not a speed target (that is `make bench-python`): a
/// server that needed the GIL would wait about half the switch interval on
/// the median probe; the median stays far below that even on this 2-core
/// machine running other tests beside it.
#[test]
fn probes_answer_while_python_threads_hold_the_gil() {
    let h = Held::start(&["spin"], &[("NIXL_AGENT_EXPECT", "kv:DRAM,aux")]);
    let mut ready = Vec::new();
    let mut metrics = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        assert_eq!(h.readyz(), 200);
        ready.push(t.elapsed());
        let t = Instant::now();
        let r = support::get(h.addr, "/metrics").unwrap();
        assert_eq!(r.status, 200);
        metrics.push(t.elapsed());
    }
    let (r, m) = (median(ready), median(metrics));
    eprintln!("median /readyz {r:?}, /metrics {m:?} while Python spins");
    let bound = Duration::from_millis(60);
    assert!(r < bound && m < bound, "median /readyz {r:?}, /metrics {m:?}");
    h.finish();
}

/// With capture off, the program's stdout and stderr (written to files, not
/// pipes) are byte for byte what they are without nixl-agent, and it sees
/// the same kind of fds.
#[test]
fn stdout_and_stderr_are_byte_identical_when_capture_is_off() {
    for args in [&["sglang"][..], &["vllm"][..], &["sglang", "--null-aux"][..]] {
        let outs: Vec<(Vec<u8>, Vec<u8>)> = [false, true]
            .iter()
            .map(|&instrumented| {
                let dir = tempfile::tempdir().unwrap();
                let (o, e) = (dir.path().join("out"), dir.path().join("err"));
                let addr = support::free_port().to_string();
                let status = command(instrumented, args, &[("NIXL_AGENT_LISTEN", &addr)])
                    .stdin(Stdio::null())
                    .stdout(std::fs::File::create(&o).unwrap())
                    .stderr(std::fs::File::create(&e).unwrap())
                    .status_within(support::RUN_WITHIN);
                assert!(status.success());
                (std::fs::read(&o).unwrap(), std::fs::read(&e).unwrap())
            })
            .collect();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        // What NIXL/UCX print on a failure carries times and pids: compare
        // those lines by their words.
        let words = |b: &[u8]| {
            text(b)
                .lines()
                .map(|l| {
                    let native = l.starts_with('[') || l.as_bytes().get(1).is_some_and(u8::is_ascii_digit);
                    if native {
                        l.replace(|c: char| c.is_ascii_digit(), "0")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
        };
        if args.len() == 1 {
            assert_eq!(text(&outs[0].0), text(&outs[1].0), "{args:?} stdout");
            assert_eq!(
                outs[0].1,
                outs[1].1,
                "{args:?} stderr:\n{}\n--\n{}",
                text(&outs[0].1),
                text(&outs[1].1)
            );
        } else {
            assert_eq!(words(&outs[0].0), words(&outs[1].0), "{args:?} stdout");
            assert_eq!(words(&outs[0].1), words(&outs[1].1), "{args:?} stderr");
        }
        assert!(
            text(&outs[1].0).starts_with("fds reg reg False False"),
            "{}",
            text(&outs[1].0)
        );
    }
}

/// A KeyboardInterrupt or SystemExit raised by a signal handler while the
/// instrumentation works reaches the program, as it would have from the
/// bare call, and NIXL's call does not go ahead; nothing is counted as a
/// failure of the wrapping.
#[test]
fn a_signal_handlers_exception_is_never_swallowed() {
    for (where_, which, class) in [
        ("start", "kbd", "KeyboardInterrupt"),
        ("start", "exit", "SystemExit"),
        ("site", "kbd", "KeyboardInterrupt"),
        ("site", "exit", "SystemExit"),
    ] {
        let addr = support::free_port().to_string();
        let (out, _) = run(true, &["interrupted", where_, which], &[("NIXL_AGENT_LISTEN", &addr)]);
        assert!(out.contains(&format!("caught {class}")), "{where_}/{which}: {out}");
        if where_ == "site" {
            assert!(
                out.contains("metadata grew False"),
                "{where_}/{which}: NIXL's call went ahead: {out}"
            );
        }
    }
}

/// A hung NIXL call in the program's own `deregister_memory` is seen as in
/// the binary: past `NIXL_AGENT_CALL_TIMEOUT` /livez is 503 naming the call,
/// `nixl_agent_lifecycle_stuck` is 1 and `nixl_agent_oldest_call_seconds`
/// says for how long; it all clears when the call returns. Real NIXL: a
/// deregistration of 524,288 regions (~0.4 s here) under a 10 ms deadline.
#[test]
fn a_hung_call_fails_livez_until_it_returns() {
    let mut h = Held::start(
        &["hung", "524288", "--hold"],
        &[("NIXL_AGENT_CALL_TIMEOUT", "10ms"), ("NIXL_AGENT_EXPECT", "kv")],
    );
    support::wait_for(Duration::from_secs(10), "/livez 200 once registered", || {
        (support::get(h.addr, "/livez").unwrap().status == 200).then_some(())
    });
    h.resume();
    // Read in one look while the call runs (it lasts a few hundred ms):
    // the gauges, then /livez and /readyz.
    let (s, livez, ready) = support::wait_for(Duration::from_secs(30), "stuck while deregistering", || {
        let s = h.scrape();
        (s.metric("nixl_agent_lifecycle_stuck").value() == 1.0)
            .then(|| (s, support::get(h.addr, "/livez").unwrap(), h.readyz()))
    });
    assert!(
        s.metric("nixl_agent_oldest_call_seconds")
            .label("operation", "deregister")
            .value()
            > 0.0
    );
    assert_eq!(livez.status, 503, "{livez:?}");
    assert!(
        livez.body.contains("NIXL deregister past its deadline"),
        "{}",
        livez.body
    );
    assert_eq!(ready, 503, "not ready while stuck");
    h.until_hold();
    assert!(line_with(&h.lines, "deregistered in").len() > 3);
    support::wait_for(Duration::from_secs(5), "/livez 200 once the call returned", || {
        (support::get(h.addr, "/livez").unwrap().status == 200).then_some(())
    });
    let s = h.scrape();
    assert_eq!(s.metric("nixl_agent_lifecycle_stuck").value(), 0.0);
    assert!(s.metric("nixl_agent_oldest_call_seconds").get().is_none());
    h.finish();
}

/// Another wrapper on `nixl_agent.register_memory` (a tracer installed after
/// the instrumentation) does not hide SGLang's call sites: kv and aux are
/// named from the framework's frame above it, and with SGLang loaded and no
/// `NIXL_AGENT_EXPECT` the process is ready.
#[test]
fn another_wrapper_on_the_class_keeps_the_frameworks_groups() {
    let h = Held::start(&["wrapped", "--hold"], &[]);
    let status = support::assert_projections_agree(h.addr);
    let names: Vec<&str> = status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"kv") && names.contains(&"aux"), "{names:?}");
    assert!(!names.contains(&"traced"), "the wrapper's name is no group: {names:?}");
    assert_eq!(h.group("kv")["state"], "registered");
    assert_eq!(h.group("aux")["state"], "registered");
    assert_eq!(h.readyz(), 200, "{status}");
    h.finish();
}

/// One `nai.group` instance entered by interleaving threads and asyncio
/// tasks: every exit resets its own entry, no `ValueError` reaches the
/// user's block, and the group is unset after the last exit.
#[test]
fn a_group_block_is_per_entry_across_threads_and_tasks() {
    let addr = support::free_port().to_string();
    let (out, _) = run(false, &["groups"], &[("NIXL_AGENT_LISTEN", &addr)]);
    assert!(out.contains("groups clean [] True None"), "{out}");
}

#[test]
fn explicit_api_names_the_group_without_the_launcher() {
    let addr = support::free_port().to_string();
    let (out, _) = run(false, &["explicit"], &[("NIXL_AGENT_LISTEN", &addr)]);
    assert!(
        out.contains(
            r#"explicit nixl_agent_registered_bytes{backend="UCX",device="0",group="scratch_pad",kind="aux",mem_type="DRAM"} 4096"#
        ),
        "{out}"
    );
    assert!(out.contains("address True"), "{out}");
}

/// A listen port another program holds (here, one that answers every
/// request with a 404): the process says so on stderr with the default log
/// filter, `nai.address()` is None and `nai.status()["http"]` says why,
/// instead of waiting silently for a rank of its own to give the port up.
#[test]
fn a_port_held_by_another_program_is_said_on_stderr_and_in_status() {
    use std::io::{Read, Write};
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in taken.incoming() {
            let Ok(mut c) = conn else { continue };
            let _ = c.read(&mut [0u8; 1024]);
            let _ = c.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let (out, err) = run(false, &["explicit"], &[("NIXL_AGENT_LISTEN", &addr)]);
    assert!(out.contains("address False"), "{out}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot serve /metrics and /readyz"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains(&format!("{addr} is in use by another program (not nixl-agent)")),
        "{}",
        said[0]
    );
    assert!(
        out.contains(&format!(
            "http {{'address': None, 'error': '{addr} is in use by another program (not nixl-agent)"
        )),
        "{out}"
    );
}

#[test]
fn environment_variable_instruments_without_the_launcher_and_off_switches_it_off() {
    // NIXL_AGENT_INSTRUMENT=1 alone: the wheel's .pth file boots the hook.
    let mut c = command(false, &["vllm", "--hold"], &[]);
    let addr = support::free_port();
    c.env("NIXL_AGENT_INSTRUMENT", "1")
        .env("NIXL_AGENT_LISTEN", addr.to_string());
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = support::Lines::new(child.stdout.take().unwrap());
    let hold = |out: &mut support::Lines| out.skip_to("HOLD", support::RUN_WITHIN, "the program's HOLD");
    hold(&mut out);
    let s = support::scrape(addr);
    assert_eq!(group_value(&s, "nixl_agent_registered_descriptors", "kv"), 8.0);
    drop(child.stdin.take());
    assert!(support::wait_within(&mut child, support::RUN_WITHIN, "the held program").success());

    // The launcher with NIXL_AGENT_INSTRUMENT=off: nothing is served.
    let addr = support::free_port();
    let mut c = command(true, &["vllm", "--hold"], &[("NIXL_AGENT_INSTRUMENT", "off")]);
    c.env("NIXL_AGENT_LISTEN", addr.to_string());
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = support::Lines::new(child.stdout.take().unwrap());
    hold(&mut out);
    assert!(support::get(addr, "/metrics").is_err(), "nothing listens");
    drop(child.stdin.take());
    assert!(support::wait_within(&mut child, support::RUN_WITHIN, "the held program").success());
}

/// An unusable setting is named once on stderr and the program runs as if
/// uninstrumented; the hook never imports NIXL before the program does.
#[test]
fn bad_settings_are_named_and_leave_the_program_alone() {
    let (bare_out, bare_err) = run(false, &["vllm"], &[]);
    let (out, err) = run(true, &["vllm"], &[("NIXL_AGENT_VALIDATE", "strict")]);
    assert_eq!(out, bare_out);
    let extra: Vec<&str> = err.lines().filter(|l| !bare_err.contains(l)).collect();
    assert_eq!(extra.len(), 1, "{err}");
    assert!(
        extra[0].starts_with("nixl-agent-instrument: not instrumenting") && extra[0].contains("NIXL_AGENT_VALIDATE"),
        "{}",
        extra[0]
    );

    let out = Command::new(support::venv_bin("nixl-agent-instrument"))
        .arg(support::python())
        .args([
            "-c",
            "import sys; print('nixl' in sys.modules, 'nixl_cu12' in sys.modules)",
        ])
        .output_within(support::RUN_WITHIN);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "False False");
    // No command: usage and exit 2; an unknown command: 127.
    let out = Command::new(support::venv_bin("nixl-agent-instrument")).output_within(support::RUN_WITHIN);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("usage: nixl-agent-instrument"));
    let out = Command::new(support::venv_bin("nixl-agent-instrument"))
        .arg("no-such-command-here")
        .output_within(support::RUN_WITHIN);
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found: no-such-command-here"));
}

/// The launcher of one environment running a Python of another (the system
/// one, which has no nixl_agent_instrument): the program runs as it would,
/// and one line says the package is missing for that interpreter and how
/// to install it there.
#[test]
fn a_program_on_a_python_without_the_package_is_told_where_to_install_it() {
    let other = std::path::Path::new("/usr/bin/python3");
    assert!(other.exists(), "a system python3 (the venv's base)");
    let out = Command::new(support::venv_bin("nixl-agent-instrument"))
        .arg(other)
        .args(["-c", "print('ran')"])
        .output_within(support::RUN_WITHIN);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("nixl-agent-instrument: not instrumenting: nixl_agent_instrument is not installed for /usr/bin/python3; install the wheel into the environment that runs the program (/usr/bin/python3 -m pip install"),
        "{err}"
    );
}

/// The launcher answers `--version` (the wheel's own version, the
/// extension's) and `--help` as a command-line tool does, and an option it
/// does not know is a usage error, not a "command not found".
#[test]
fn the_launcher_answers_version_and_help() {
    let launcher = || Command::new(support::venv_bin("nixl-agent-instrument"));
    let out = launcher().arg("--version").output_within(support::RUN_WITHIN);
    assert_eq!(out.status.code(), Some(0));
    let native = Command::new(support::python())
        .args([
            "-c",
            "from nixl_agent_instrument import _native; print(_native.VERSION)",
        ])
        .output_within(support::RUN_WITHIN);
    let native = String::from_utf8_lossy(&native.stdout).trim().to_string();
    assert_eq!(native, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("nixl-agent-instrument {native}\n")
    );
    for help in ["--help", "-h"] {
        let out = launcher().arg(help).output_within(support::RUN_WITHIN);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("usage: nixl-agent-instrument COMMAND"), "{text}");
        assert!(text.contains("--version | --help"), "{text}");
    }
    let out = launcher().arg("--verbose").output_within(support::RUN_WITHIN);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("nixl-agent-instrument: unknown option --verbose\nusage:"),
        "{err}"
    );
}

/// Values that used to be taken silently: a NIXL_AGENT_INSTRUMENT that is
/// neither on nor off (under the launcher and through the .pth file alike),
/// a log filter that does not parse, an explicit group whose name or kind
/// cannot be a label. Each is one line naming the key, the value and what
/// is allowed; nothing is instrumented on a guess.
#[test]
fn bad_values_are_one_line_never_a_guess() {
    let (bare_out, bare_err) = run(false, &["vllm"], &[]);
    for instrumented in [true, false] {
        let (out, err) = run(instrumented, &["vllm"], &[("NIXL_AGENT_INSTRUMENT", "maybe")]);
        assert_eq!(out, bare_out, "the program runs as if uninstrumented");
        let extra: Vec<&str> = err.lines().filter(|l| !bare_err.contains(l)).collect();
        assert_eq!(
            extra,
            ["nixl-agent-instrument: not instrumenting: config key `NIXL_AGENT_INSTRUMENT`: `maybe` is not one of 1, on, true, 0, off, false"],
            "launcher: {instrumented}: {err}"
        );
    }
    let (out, err) = run(true, &["vllm"], &[("NIXL_AGENT_LOG", "notalevel[")]);
    assert_eq!(out, bare_out);
    let extra: Vec<&str> = err.lines().filter(|l| !bare_err.contains(l)).collect();
    assert_eq!(extra.len(), 1, "{err}");
    assert!(
        extra[0].starts_with(
            "nixl-agent-instrument: not instrumenting: config key `NIXL_AGENT_LOG`: `notalevel[` is not a log filter"
        ),
        "{}",
        extra[0]
    );
    let code = "import nixl_agent_instrument as nai\n\
                for name, kind in (('kv cache', None), ('kv_cache', 'KV')):\n\
                \x20   try:\n\
                \x20       nai.group(name, kind=kind)\n\
                \x20   except ValueError as e:\n\
                \x20       print(e)\n\
                print(nai.group('kv_cache', kind='kv')._chosen)\n";
    let out = Command::new(support::python())
        .args(["-c", code])
        .output_within(support::RUN_WITHIN);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "nixl_agent_instrument.group: config key `group name`: \"kv cache\" contains ' '; allowed: ASCII letters, digits, '_', '-' and '.'",
            "nixl_agent_instrument.group: config key `group kind`: \"KV\" contains 'K'; allowed: lowercase ASCII letters, digits and '_' (kv, aux, state or a word of your own)",
            "('kv_cache', 'kv')",
        ]
    );
}

/// Calls NIXL's Python API rejects raise the same Python errors, counted
/// as `invalid_argument`.
#[test]
fn bad_calls_raise_the_same_errors_and_count_as_invalid_argument() {
    let (bare, _) = run(false, &["badcalls"], &[]);
    let h = Held::start(&["badcalls", "--hold"], &[]);
    let instrumented: Vec<&String> = h.lines.iter().filter(|l| l.starts_with("raised")).collect();
    let expected: Vec<&str> = bare.lines().filter(|l| l.starts_with("raised")).collect();
    assert_eq!(instrumented.len(), expected.len());
    for (a, b) in instrumented.iter().zip(&expected) {
        assert_eq!(a.split(" origin=").next(), b.split(" origin=").next());
    }
    let s = h.scrape();
    let invalid = s
        .metric("nixl_agent_registration_failures_total")
        .label("reason", "invalid_argument")
        .sum();
    assert_eq!(invalid, 2.0, "the empty list and the unknown mem type");
    h.finish();
}

/// Each observed call is a trace of its own, exported when it ends (and
/// flushed at interpreter exit), to a real OTLP receiver.
#[test]
fn each_observed_call_is_its_own_trace() {
    let rx = support::otlp::Receiver::start();
    let endpoint = rx.endpoint();
    let addr = support::free_port().to_string();
    run(
        true,
        &["sglang", "--null-aux"],
        &[
            ("NIXL_AGENT_LISTEN", &addr),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "prefill-worker"),
        ],
    );
    let spans = rx.wait("kv and aux attempt spans", Duration::from_secs(10), |s| {
        s.iter().filter(|s| s.name == "nixl.group.register").count() >= 2
    });
    let attempt = |group: &str| {
        spans
            .iter()
            .find(|s| s.name == "nixl.group.register" && s.attrs.get("group").map(String::as_str) == Some(group))
            .unwrap_or_else(|| panic!("no span for {group}: {spans:?}"))
    };
    let (kv, aux) = (attempt("kv"), attempt("aux"));
    assert_eq!(kv.attr("outcome"), "success");
    assert_eq!(kv.attr("descriptor_count"), "4");
    assert_eq!(aux.attr("outcome"), "failure");
    assert_eq!(aux.attr("error.type"), "invalid_address");
    assert_eq!(aux.status, 2);
    assert_ne!(kv.trace_id, aux.trace_id, "one trace per call");
    assert!(kv.parent_span_id.is_empty() && aux.parent_span_id.is_empty(), "roots");
    assert_eq!(
        kv.resource.get("service.name").map(String::as_str),
        Some("prefill-worker")
    );
}

/// NIXL 1.5 (UCX) accepts one list holding the same region twice and dies
/// with SIGSEGV when it is deregistered. Bare and instrumented in `record`
/// the program meets the same end (nixl-agent never hides what NIXL does),
/// but the instrumented one has said so first: one error line naming the
/// group and both indexes, and `accepted_invalid{reason="duplicate_regions"}`.
/// In `enforce` the list is refused before NIXL sees it, and nothing crashes.
#[test]
fn a_duplicate_region_crash_is_announced_in_record_and_refused_in_enforce() {
    use std::os::unix::process::ExitStatusExt;
    let bare = command(false, &["duplicate"], &[])
        .stdin(Stdio::null())
        .output_within(support::RUN_WITHIN);
    assert_eq!(bare.status.signal(), Some(11), "bare: {:?}", bare);
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();
    assert!(
        bare_out.contains("registered 2") && !bare_out.contains("deregistered"),
        "{bare_out}"
    );

    let mut h = Held::start(&["duplicate", "--hold"], &[("NIXL_AGENT_EXPECT", "aux")]);
    let s = h.scrape();
    assert_eq!(
        s.metric("nixl_agent_accepted_invalid_total")
            .label("group", "aux")
            .label("reason", "duplicate_regions")
            .value(),
        1.0
    );
    let line = h
        .stderr()
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("same region twice"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no error line before the crash: {}", h.stderr()));
    assert!(
        line.contains("aux") && line.contains("region 1 repeats region 0") && line.contains("SIGSEGV"),
        "{line}"
    );
    let g = h.group("aux");
    assert!(
        g["last_accepted_invalid"]
            .as_str()
            .unwrap()
            .starts_with("duplicate_regions"),
        "{g}"
    );
    h.resume();
    let status = support::wait_within(&mut h.child, support::RUN_WITHIN, "the held program's crash");
    assert_eq!(
        status.signal(),
        Some(11),
        "instrumented in record: the same end as bare"
    );
    // The same stdout, but for the line naming the kinds of fds 1 and 2.
    let program = |lines: Vec<String>| lines.into_iter().filter(|l| !l.starts_with("fds ")).collect::<Vec<_>>();
    assert_eq!(
        program(std::mem::take(&mut h.lines)),
        program(bare_out.lines().map(str::to_string).collect()),
        "same stdout"
    );

    let (out, _) = run(
        true,
        &["duplicate"],
        &[("NIXL_AGENT_VALIDATE", "enforce"), ("NIXL_AGENT_LISTEN", "off")],
    );
    assert!(
        out.contains("raised nixl_agent_instrument.RegistrationRefused") && out.contains("duplicate_regions"),
        "{out}"
    );
}

/// The names of the groups /v1/status shows.
fn group_names(status: &serde_json::Value) -> Vec<String> {
    status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect()
}

/// Groups come from the framework's own data, not its variable names:
/// SGLang-shaped code with renamed locals (its `self.kv_args` says which
/// pointer is kv and which aux) and vLLM-shaped code (its
/// `self.kv_caches_base_addr`), with and without another wrapper on
/// `nixl_agent.register_memory`, no `NIXL_AGENT_EXPECT`: the default groups,
/// registered, and ready.
#[test]
fn groups_come_from_the_frameworks_data_whatever_the_locals_are_called() {
    for (args, want) in [
        (&["renamed", "--hold"][..], &["kv", "aux"][..]),
        (&["renamed", "--wrapped", "--hold"][..], &["kv", "aux"][..]),
        (&["renamed", "--vllm", "--hold"][..], &["kv"][..]),
        (&["renamed", "--vllm", "--wrapped", "--hold"][..], &["kv"][..]),
    ] {
        let h = Held::start(args, &[]);
        let status = support::assert_projections_agree(h.addr);
        let names = group_names(&status);
        assert_eq!(names, want, "{args:?}: {status}");
        for g in want {
            assert_eq!(h.group(g)["state"], "registered", "{args:?}");
        }
        assert_eq!(h.readyz(), 200, "{args:?}: {status}");
        h.finish();
    }
}

/// With no framework the defaults know and nothing said, a process is not
/// ready until something registered (`[-]registered failed:
/// nothing_registered`); `NIXL_AGENT_EXPECT=none` says it need not.
#[test]
fn a_process_with_no_framework_is_ready_once_something_registered() {
    let mut h = Held::start(&["plain"], &[]);
    let r = support::get(h.addr, "/readyz?verbose").unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert!(
        r.body.contains("[-]registered failed: nothing_registered"),
        "{}",
        r.body
    );
    assert_eq!(support::scrape(h.addr).metric("nixl_agent_ready").value(), 0.0);
    h.resume();
    h.until_hold();
    let r = support::get(h.addr, "/readyz?verbose").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("[+]registered ok"), "{}", r.body);
    support::assert_projections_agree(h.addr);
    // The process's first agent got its UCX backend inside
    // `nixl_agent.__init__` (nixl_agent_config(backends=["UCX"])): it reads
    // up, in /metrics and /v1/status alike, and nothing reads down.
    let s = support::scrape(h.addr);
    let backends = s.metric("nixl_agent_backend_up");
    assert_eq!(backends.clone().label("backend", "UCX").value(), 1.0);
    assert!(
        backends.samples().iter().all(|b| b.value == 1.0),
        "{:?}",
        backends.samples()
    );
    assert_eq!(h.status()["backends"][0]["up"], true);
    h.finish();

    let h = Held::start(&["plain"], &[("NIXL_AGENT_EXPECT", "none")]);
    assert_eq!(h.readyz(), 200, "NIXL_AGENT_EXPECT=none: ready with nothing registered");
    h.finish();
}

/// On Python 3.9/3.10 (no `co_qualname`) a method's override key is still
/// `Class.method`, of the class that defines it (not a subclass).
#[test]
fn a_methods_qualified_name_is_found_without_co_qualname() {
    let (out, _) = run(false, &["qualname"], &[]);
    assert!(
        out.contains("qualname NixlKVManager.register_buffer_to_engine\n"),
        "{out}"
    );
    assert!(out.contains("qualname function describe\n"), "{out}");
}

/// A failure of the import hook before the extension loads is counted once
/// the recording starts, and `nai.instrument()` still wraps NIXL later.
#[test]
fn a_hook_failure_before_the_extension_loads_is_counted() {
    let mut c = Command::new(support::venv_bin("nixl-agent-instrument"));
    c.arg(support::python())
        .arg(repo().join("tests/python/hook_failure.py"))
        .env("NIXL_AGENT_LISTEN", "off")
        .env_remove("NIXL_AGENT_EXPECT");
    let out = c.output_within(support::RUN_WITHIN);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("wrapped at import False"), "{stdout}");
    assert!(stdout.contains("wrapped after instrument() True"), "{stdout}");
    assert!(
        stdout.contains(r#"nixl_agent_instrumentation_errors_total{operation="import"} 1"#),
        "{stdout}"
    );
}

/// N×3 descriptor arrays are read the way NIXL's binding reads them (as
/// bytes, no Python object per row: `tolist` is never called), and arrays
/// NIXL refuses raise exactly what the bare call raises.
#[test]
fn descriptor_arrays_are_read_as_nixl_reads_them() {
    let (bare, _) = run(false, &["arrays"], &[]);
    let h = Held::start(&["arrays", "--hold"], &[]);
    let program = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with("fds ") && *l != "HOLD")
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        program(&h.lines.join("\n")),
        program(&bare),
        "same results and exceptions"
    );
    assert!(!h.lines.iter().any(|l| l.contains("tolist called")), "{:?}", h.lines);
    assert!(h.lines.iter().any(|l| l == "registered 8"), "{:?}", h.lines);
    let status = support::assert_projections_agree(h.addr);
    let group = status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["descriptors"] == 8)
        .cloned()
        .unwrap_or_else(|| panic!("no group holding the 8 rows: {status}"));
    assert_eq!(group["state"], "registered", "{group}");
    h.finish();
}
