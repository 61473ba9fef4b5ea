//! The instrumentation inside the host program's own machinery, on NIXL's
//! real Python API (tests/python/host.py under `nixl-agent-instrument`):
//! an agent whose backends NIXL's config creates in `__init__`, an at-fork
//! hook that collects an agent while the process forks, a start that
//! fails, a signal handler's exception landing on the data path — and the
//! calls into the extension a registration makes. Each run is bounded: a
//! hang is a failure here, never a stuck test.

use crate::support;
use crate::support::held::program;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `host.py args` under the launcher for at most `limit`; (stdout,
/// stderr). A run that does not end in time is killed and fails the test.
fn run_bounded(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (String, String) {
    let listen = support::free_port().to_string();
    let mut all = vec![("NIXL_AGENT_LISTEN", listen.as_str())];
    all.extend_from_slice(env);
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let stdout = tempfile::NamedTempFile::new().unwrap();
    let mut child = support::held::command(&program("host.py"), true, args, &all)
        .stdin(Stdio::null())
        .stdout(stdout.reopen().unwrap())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    stdout.reopen().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    stderr.reopen().unwrap().read_to_string(&mut err).unwrap();
    match status {
        None => panic!("{args:?} hung (killed after {limit:?})\nstdout:\n{out}\nstderr:\n{err}"),
        Some(s) => assert!(s.success(), "{args:?} failed: {s}\nstdout:\n{out}\nstderr:\n{err}"),
    }
    (out, err)
}

/// `nixl_agent("x", nixl_agent_config(backends=["UCX"]))` creates UCX
/// inside `__init__`: that creation and every later call of the agent are
/// one agent of the recording, so its group is labelled with the backend it
/// created, never with the `NIXL_AGENT_BACKEND` default, and nothing says a
/// backend is down.
#[test]
fn a_config_created_backend_labels_its_agents_calls() {
    let h = support::held::Held::start(
        &program("host.py"),
        &["backends", "--hold"],
        &[("NIXL_AGENT_BACKEND", "POSIX"), ("NIXL_AGENT_EXPECT", "none")],
    );
    assert!(h.lines.iter().any(|l| l == "registered True"), "{:?}", h.lines);
    let s = h.scrape();
    let registered = s
        .metric("nixl_agent_registered_descriptors")
        .label("group", "setup_buffers");
    assert_eq!(registered.samples().len(), 1, "one series: {:?}", registered.samples());
    assert_eq!(registered.clone().label("backend", "UCX").value(), 1.0);
    assert_eq!(s.metric("nixl_agent_backend_up").label("backend", "UCX").value(), 1.0);
    assert!(
        s.metric("nixl_agent_backend_up")
            .samples()
            .iter()
            .all(|b| b.value == 1.0),
        "no backend says down: {:?}",
        s.metric("nixl_agent_backend_up").samples()
    );
    assert!(
        s.metric("nixl_agent_backend_up")
            .label("backend", "POSIX")
            .get()
            .is_none(),
        "the setting's default is not a backend"
    );
    let status = h.status();
    let agents = status["agents"].as_array().unwrap_or_else(|| panic!("{status}"));
    assert_eq!(agents.len(), 1, "one NIXL agent, one identity: {status}");
    let backends = status["backends"].as_array().unwrap();
    assert!(
        backends.iter().all(|b| b["up"] == true) && backends.iter().any(|b| b["name"] == "UCX"),
        "{status}"
    );
    let group = h.group("setup_buffers");
    assert_eq!(group["backend"], "UCX", "{group}");
    h.finish();
}

/// An at-fork hook of the program's (registered before NIXL was imported,
/// so it runs after nixl-agent's) collects a cycle holding a NIXL agent:
/// the agent's release runs in the forking thread inside the at-fork hooks.
/// The fork completes, the child exits, the parent keeps recording.
#[test]
fn a_finalizer_run_by_an_at_fork_hook_does_not_deadlock_the_fork() {
    let (out, _) = run_bounded(&["fork-finalizer"], &[], Duration::from_secs(60));
    assert!(out.contains("child exit 0"), "{out}");
    assert!(out.contains("registered after fork"), "{out}");
}

/// The instrumentation's start fails (the OS refuses its threads): the
/// program's agent is made as bare, a later agent does not wait for a start
/// that will never finish, and the instrumentation stays off in this
/// process (said once on stderr).
#[test]
fn a_failed_start_leaves_later_agents_alone() {
    let (out, err) = run_bounded(&["failed-start"], &[], Duration::from_secs(60));
    assert!(out.contains("first agent made"), "{out}");
    assert!(out.contains("second agent made"), "{out}\n{err}");
    assert!(out.contains("registered True"), "{out}");
    assert!(
        out.contains("status False"),
        "instrumentation off after the failed start: {out}"
    );
    let said: Vec<&str> = err.lines().filter(|l| l.contains("not instrumenting")).collect();
    assert_eq!(said.len(), 1, "said once: {err}");
}

/// A `KeyboardInterrupt` raised while the transfer wrapper reads its
/// arguments reaches the program from that `transfer()` call, as it would
/// have bare; the next `register_memory` on the thread is untouched.
#[test]
fn a_signal_on_the_data_path_surfaces_at_its_own_call() {
    let (out, _) = run_bounded(&["interrupted-transfer"], &[], Duration::from_secs(60));
    assert!(out.contains("transfer: KeyboardInterrupt"), "{out}");
    assert!(out.contains("register_memory: registered"), "{out}");
    assert!(out.contains("done DONE"), "{out}");
}

/// docs/python.md lists the methods of `nixl_agent` the instrumentation
/// wraps; the class NIXL's module holds once instrumented wraps exactly
/// those (and the handles' release).
#[test]
fn the_documented_wrappers_are_the_wrapped_methods() {
    let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/python.md")).unwrap();
    let start = doc.find("<!-- wrapped-methods -->").expect("the list's start marker");
    let end = doc.find("<!-- end wrapped-methods -->").expect("the list's end marker");
    let mut documented: Vec<&str> = doc[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.contains('.'))
        .collect();
    documented.sort_unstable();
    let (out, _) = run_bounded(&["wrapped"], &[], Duration::from_secs(60));
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("nixl_agent "))
        .unwrap_or_else(|| panic!("{out}"));
    let mut wrapped: Vec<&str> = line.split_whitespace().collect();
    wrapped.sort_unstable();
    assert_eq!(documented, wrapped, "docs/python.md against the instrumented class");
    assert!(out.contains("nixl_xfer_handle True"), "{out}");
    assert!(out.contains("nixl_prepped_dlist_handle True"), "{out}");
}

/// A registration crosses from Python into the extension once: the
/// wrapper hands over what only Python sees of the call site with the
/// call's arguments, and the extension names the group, records and calls
/// through — on a site's first call as on later ones, for a site named by
/// the framework's data, by its variable, or by an explicit block (whose
/// creation is one call too). Each deregistration is one call. The groups
/// are those the naming rules give.
#[test]
fn each_registration_crosses_into_the_extension_once() {
    let (out, _) = run_bounded(&["crossings"], &[], Duration::from_secs(60));
    let one = |name: &str| format!("[('{name}', 1)]");
    let mut seen = 0;
    for line in out.lines().filter_map(|l| l.strip_prefix("crossings ")) {
        if let Some(calls) = line.strip_prefix("group ") {
            assert_eq!(calls, one("explicit_group"), "nai.group(name): {out}");
        } else {
            assert_eq!(
                line.split_once(' ').map(|(_, calls)| calls),
                Some(format!("register {} deregister {}", one("register"), one("deregister")).as_str()),
                "{line}"
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 6, "four call sites, a group, a block: {out}");
    assert!(
        out.contains("groups [('aux', 'aux'), ('kv', 'kv'), ('scratch_pad', 'buffer')]"),
        "{out}"
    );
}

/// An interpreter uid 65534 can run, and the virtualenv's site-packages
/// (NIXL's Python API, the package) for it: the virtualenv's own python may
/// be a link into a directory that user may not search (/root/.pyenv).
fn python_for_another_user() -> (std::path::PathBuf, String) {
    let runs = |py: &std::path::Path| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/bin/sh",
                "-c",
                "exec \"$0\" -c pass",
            ])
            .arg(py)
            .status()
            .is_ok_and(|s| s.success())
    };
    let python = [support::python(), "/usr/bin/python3".into()]
        .into_iter()
        .find(|p| runs(p))
        .expect("a python uid 65534 can run");
    let out = std::process::Command::new(support::python())
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .output()
        .unwrap();
    (python, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The plain Python program's `config` scenario (tests/programs/python)
/// run as uid 65534 from this root process, with `HOME` a root-owned 0700
/// directory (a container run with `runAsUser` while the image keeps
/// `HOME=/root`): bare, or under the `nixl-agent-instrument` launcher (the
/// Python front-end alone), serving on `listen`, holding before it exits.
fn as_another_user(instrumented: bool, home: &std::path::Path, listen: Option<&str>) -> std::process::Command {
    let (_, script) = support::programs::python_program();
    let (python, site) = python_for_another_user();
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&python);
    if instrumented {
        // The launcher `nixl-agent-instrument` is, run by that interpreter.
        c.args(["-m", "nixl_agent_instrument._launcher"]).arg(&python);
    }
    c.arg(script).arg("config");
    support::programs::plain_env(&mut c);
    for (k, _) in std::env::vars() {
        if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" || k == "NIXL_CONFIG_FILE" {
            c.env_remove(k);
        }
    }
    c.env("HOME", home).env("PYTHONPATH", site);
    if let Some(l) = listen {
        c.env("NIXL_AGENT_LISTEN", l).env("HOLD_BEFORE_EXIT", "1");
    }
    c
}

/// NIXL raises for a HOME the user may not search; under the launcher the
/// program sees the same exception (it prints its class and text) and the
/// same exit code, prints nothing else, and the Python front-end records
/// `nixl_config` naming `$HOME/.nixl.cfg`, the user and the fix.
#[test]
fn a_home_the_user_may_not_search_is_named_and_the_program_sees_what_it_saw_bare() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cfg = home.path().join(".nixl.cfg").display().to_string();
    let bare = support::output_within(
        &mut as_another_user(false, home.path(), None),
        support::held::HOLD_WITHIN,
        "bare",
    );
    assert_eq!(bare.status.code(), Some(1), "{}", String::from_utf8_lossy(&bare.stderr));
    let said = String::from_utf8_lossy(&bare.stdout).to_string();
    assert!(
        said.contains("agent creation failed: RuntimeError") && said.contains(&cfg),
        "bare: {said}"
    );
    let addr = support::free_port();
    let mut child = as_another_user(true, home.path(), Some(&addr.to_string()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let scrape = support::wait_for(support::held::HOLD_WITHIN, "nixl_config counted", || {
        support::get(addr, "/metrics")
            .ok()
            .map(|r| support::Scrape::parse(&r.body))
            .filter(|s| s.metric("nixl_agent_nixl_failures_total").sum() >= 1.0)
    });
    assert_eq!(
        scrape
            .metric("nixl_agent_nixl_failures_total")
            .label("reason", "nixl_config")
            .value(),
        1.0
    );
    let doc = support::status_document(addr);
    let nixl = &support::own_status(&doc)["nixl"];
    assert_eq!(nixl["reason"], "nixl_config", "{nixl}");
    let error = nixl["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&cfg) && error.contains("uid 65534") && error.contains("RuntimeError"),
        "{error}"
    );
    assert!(nixl["fix"].as_str().unwrap_or_default().contains("HOME"), "{nixl}");
    let ready = support::get(addr, "/readyz?verbose").unwrap();
    assert!(
        ready.body.contains("[-]nixl failed: nixl_config; fix: run with a HOME"),
        "{}",
        ready.body
    );
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let inst = support::wait_with_output_within(child, support::held::HOLD_WITHIN, "the instrumented program");
    assert_eq!(inst.status.code(), bare.status.code());
    assert_eq!(
        support::programs::unstamped(&inst.stdout),
        support::programs::unstamped(&bare.stdout)
    );
    assert_eq!(
        support::programs::unstamped(&inst.stderr),
        support::programs::unstamped(&bare.stderr)
    );
}
