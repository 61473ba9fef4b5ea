//! The NIXL release matrix: every release of the last year as its real
//! wheel, unpacked by scripts/matrix.sh into `.deps/matrix/<build>/` (a
//! site-packages-like tree), and one source-layout build (1.5.1's
//! libraries with no dist-info beside them). On each build, four programs
//! run bare and under `nixl-agent instrument`, publishing to a pod
//! directory that `nixl-agent pod` then serves:
//! - NIXL's own `nixl_example` from the wheel (two agents, one 256-byte
//!   region registered on each, a WRITE of 8 bytes with a notification);
//! - the project's C++ (`nixl_plain.cpp ok`: one binary, built against
//!   1.5.1's declarations, for every release: `ok` calls only methods whose
//!   mangled names every release since 1.0 exports), Rust (nixl-sys 1.5.1 on
//!   the build's `libnixl_capi.so`) and Python (`nixl_plain.py ok`, with
//!   PYTHONPATH at the build's tree) programs.
//!
//! Each prints what it prints bare, with the same exit code, and its
//! registrations, deregistrations, WRITE, bytes and notification are counted
//! on the sidecar.
//!
//! The rest of the product runs on each build too:
//! - the lifecycle: `nixl-agent run` on its default plan, with NIXL_LIB_DIR
//!   at the build's libraries, is ready with kv's 8 and aux's 4 regions
//!   registered (one `registerMem` of a list a group on a version of
//!   `capi::PROVEN`, one region a call on any other, as its log says) and
//!   drains on SIGTERM to nothing registered, exit 0;
//! - the Python front-end: the Python program under the virtualenv's
//!   launcher `nixl-agent-instrument` with no interposer to preload, so
//!   that the front-end itself records it, counted as above and unchanged.
//!
//! `make test` runs the oldest release, the newest and the source layout;
//! `make matrix` runs every build.

use super::support;
use super::support::programs::{argv, launched_argv, plain_env, unstamped};
use super::support::{AgentProcess, Spawn};
use super::{text, WITHIN};
use nixl_agent_sys::capi;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// One build of the matrix: its folder under `.deps/matrix/`, the Python
/// distribution that holds its libraries (`nixl_cu12`, `nixl_cu13`), and
/// whether NIXL's Python API of that release imports torch (before 1.4).
struct Build {
    folder: &'static str,
    dist: &'static str,
    imports_torch: bool,
}

impl Build {
    /// Its NIXL version as the lifecycle judges it: the wheel's, none for
    /// the source layout (no dist-info, no NIXL_AGENT_NIXL_VERSION).
    fn version(&self) -> Option<&'static str> {
        self.folder.strip_prefix(self.dist)?.strip_prefix('-')
    }

    /// Where its libraries are (`libnixl_capi.so`, `plugins/`).
    fn libs(&self) -> PathBuf {
        self.root().join(format!(".{}.mesonpy.libs", self.dist))
    }

    fn root(&self) -> PathBuf {
        let root = support::repo().join(".deps/matrix").join(self.folder);
        assert!(
            root.join(".nixl-agent-matrix").exists(),
            "{}: not set up; run `bash scripts/matrix.sh` (make setup does)",
            root.display()
        );
        root
    }

    /// What a plain user of this build sets: the loader's path at its
    /// libraries (nixl-sys loads `libnixl_capi.so` by its bare name; the
    /// C++ program's runpath names the set-up's 1.5.1, which this
    /// overrides), NIXL's plugin folder, and PYTHONPATH at the tree (with
    /// tests/python/cpu_torch where NIXL's Python API imports torch).
    fn env(&self) -> Vec<(&'static str, OsString)> {
        let root = self.root();
        let libs = self.libs();
        let mut path = OsString::from(root.as_os_str());
        if self.imports_torch {
            path.push(":");
            path.push(support::repo().join("tests/python/cpu_torch"));
        }
        vec![
            ("LD_LIBRARY_PATH", libs.clone().into()),
            ("NIXL_PLUGIN_DIR", libs.join("plugins").into()),
            ("PYTHONPATH", path),
        ]
    }

    /// NIXL's own example program of this build.
    fn nixl_example(&self) -> PathBuf {
        self.root().join(format!("{}.scripts/nixl_example", self.dist))
    }
}

/// A program and what it does: its registration calls (nixl-sys registers
/// one descriptor a call), the descriptors registered, the bytes written.
struct Program {
    name: &'static str,
    argv: Vec<OsString>,
    calls: f64,
    descriptors: f64,
    bytes: f64,
}

fn programs(build: &Build) -> Vec<Program> {
    let plain = |lang: &'static str, calls: f64| Program {
        name: lang,
        argv: argv(lang, "ok"),
        calls,
        descriptors: 8.0,
        bytes: 262_144.0,
    };
    vec![
        Program {
            name: "nixl_example",
            argv: vec![build.nixl_example().into()],
            calls: 2.0,
            descriptors: 2.0,
            bytes: 8.0,
        },
        plain("cpp", 2.0),
        plain("rust", 8.0),
        plain("python", 2.0),
    ]
}

/// Output with NIXL's and UCX's stamps taken out, and the addresses
/// `nixl_example` prints (heap pointers, other on every run) as `0x…`.
fn comparable(b: &[u8]) -> String {
    let s = unstamped(b);
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let hex = tail.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(tail.len());
        out.push_str(if hex > 0 { "0x…" } else { "0x" });
        rest = &tail[hex..];
    }
    out.push_str(rest);
    out
}

fn run(mut cmd: Command, what: &str) -> Output {
    support::output_within(&mut cmd, WITHIN, what)
}

/// Who records an instrumented run.
#[derive(Clone, Copy, PartialEq)]
enum Front {
    /// The interposer, under `nixl-agent instrument --`.
    Interposer,
    /// The Python front-end alone: the virtualenv's launcher
    /// `nixl-agent-instrument`, with no `NIXL_AGENT_INTERPOSER` and no
    /// `nixl-agent` on PATH, preloads nothing for a Python command.
    Python,
}

/// `argv` under `front`'s launcher, publishing to the pod directory `pod`.
fn instrumented(front: Front, argv: &[OsString], pod: &str) -> Command {
    match front {
        Front::Interposer => launched_argv(argv, &[("NIXL_AGENT_MULTIPROC_DIR", pod)]),
        Front::Python => {
            let mut cmd = Command::new(support::venv_bin("nixl-agent-instrument"));
            cmd.args(argv);
            plain_env(&mut cmd);
            for (k, _) in std::env::vars() {
                if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" {
                    cmd.env_remove(k);
                }
            }
            cmd.env("PATH", "/usr/bin:/bin")
                .env_remove("LD_PRELOAD")
                .env("NIXL_AGENT_MULTIPROC_DIR", pod);
            cmd
        }
    }
}

/// `program` on `build`: bare, then under `front`'s launcher publishing to
/// a pod directory, its rank served by a sidecar once it has exited.
fn counted_and_unchanged(build: &Build, program: &Program, front: Front) {
    let at = match front {
        Front::Interposer => format!("{} on {}", program.name, build.folder),
        Front::Python => format!("{} on {} under the Python front-end", program.name, build.folder),
    };
    let env = build.env();
    let mut bare = Command::new(&program.argv[0]);
    bare.args(&program.argv[1..]);
    plain_env(&mut bare);
    bare.env_remove("PYTHONPATH").envs(env.iter().map(|(k, v)| (k, v)));
    let bare = run(bare, &format!("{at}, bare"));
    assert_eq!(bare.status.code(), Some(0), "{at}, bare: {}", text(&bare.stderr));

    let pod = tempfile::tempdir().unwrap();
    let mut launched = instrumented(front, &program.argv, pod.path().to_str().unwrap());
    launched.envs(env.iter().map(|(k, v)| (k, v)));
    let inst = run(launched, &format!("{at}, under the launcher"));
    let stderr = text(&inst.stderr);

    let (_sidecar, addr) = support::pod_server(pod.path(), 1);
    let s = support::wait_for(
        Duration::from_secs(30),
        &format!("{at}: its end on the sidecar"),
        || {
            let s = support::scrape(addr);
            (s.value_at("nixl_agent_pod_rank_exits_total", &[("how", "exited")]) == 1.0).then_some(s)
        },
    );
    let dram = |name: &str| s.metric(name).label("mem_type", "DRAM").sum();
    let seen = format!(
        "{at}: registrations {}, deregistrations {}, descriptors {}, writes done {}, bytes written {}, \
         notifications received {}; the program's stderr under the launcher:\n{stderr}",
        dram("nixl_agent_registration_attempts_total"),
        s.metric("nixl_agent_deregistrations_total").sum(),
        dram("nixl_agent_registration_descriptors_sum"),
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]),
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        s.metric("nixl_agent_notifications_total")
            .label("direction", "receive")
            .label("outcome", "ok")
            .sum(),
    );
    assert_eq!(dram("nixl_agent_registration_attempts_total"), program.calls, "{seen}");
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 0.0, "{seen}");
    assert_eq!(
        dram("nixl_agent_registration_descriptors_sum"),
        program.descriptors,
        "{seen}"
    );
    assert_eq!(
        s.metric("nixl_agent_deregistrations_total").sum(),
        program.calls,
        "{seen}"
    );
    assert_eq!(
        dram("nixl_agent_registered_descriptors"),
        0.0,
        "{seen}: all deregistered"
    );
    assert_eq!(
        s.value_at("nixl_agent_transfers_total", &[("op", "write"), ("outcome", "done")]),
        1.0,
        "{seen}"
    );
    assert_eq!(
        s.value_at("nixl_agent_transfer_bytes_total", &[("op", "write")]),
        program.bytes,
        "{seen}"
    );
    assert_eq!(
        s.metric("nixl_agent_notifications_total")
            .label("direction", "receive")
            .label("outcome", "ok")
            .sum(),
        1.0,
        "{seen}"
    );
    assert_eq!(
        s.value_at("nixl_agent_peer_events_total", &[("event", "add"), ("outcome", "ok")]),
        1.0,
        "{seen}"
    );

    // Who recorded: the interposer says so in `nixl.interposer`; the
    // Python front-end alone leaves it out.
    let doc: serde_json::Value =
        serde_json::from_str(&support::get(addr, "/v1/status").unwrap().body).expect("status is JSON");
    let interposer = &doc["ranks"][0]["status"]["nixl"]["interposer"];
    match front {
        Front::Interposer => assert_eq!(interposer["recording"], true, "{at}: {doc}"),
        Front::Python => assert!(interposer.is_null(), "{at}: no interposer: {doc}"),
    }

    assert_eq!(inst.status.code(), bare.status.code(), "{at}: exit code");
    assert_eq!(comparable(&inst.stdout), comparable(&bare.stdout), "{at}: stdout");
    assert_eq!(comparable(&inst.stderr), comparable(&bare.stderr), "{at}: stderr");
}

fn every_program_is_counted_on(build: Build) {
    for program in programs(&build) {
        counted_and_unchanged(&build, &program, Front::Interposer);
    }
}

/// The Python program under the Python front-end alone.
fn the_python_front_end_counts_on(build: Build) {
    let python = programs(&build)
        .into_iter()
        .find(|p| p.name == "python")
        .expect("the Python program");
    counted_and_unchanged(&build, &python, Front::Python);
}

/// The embedded default plan (crates/core/src/config.rs): kv 8 × 512 KiB
/// and aux 4 × 64 KiB of DRAM on UCX.
const PLAN: [(&str, f64, f64); 2] = [("kv", 8.0, 8.0 * 524_288.0), ("aux", 4.0, 4.0 * 65_536.0)];

/// The log line of the lifecycle's fallback on a version not proven.
const ONE_A_CALL: &str =
    "this NIXL version's handling of descriptor lists is not proven: registering one region a call";

/// `nixl-agent run` on its default plan with NIXL_LIB_DIR at `build`'s
/// libraries: ready with every group registered, batched on a proven
/// version and one region a call elsewhere, then drained by SIGTERM.
fn the_lifecycle_on(build: Build) {
    let at = format!("the lifecycle on {}", build.folder);
    let libs = build.libs();
    let plugins = libs.join("plugins");
    let mut agent = AgentProcess::spawn(Spawn {
        no_nixl: true,
        env: &[
            ("NIXL_LIB_DIR", libs.to_str().unwrap()),
            ("NIXL_PLUGIN_DIR", plugins.to_str().unwrap()),
        ],
        ..Default::default()
    });
    let log = |agent: &AgentProcess| agent.log().join("\n");
    support::wait_for(Duration::from_secs(60), &format!("{at}: /readyz 200"), || {
        (agent.get("/readyz").status == 200).then_some(())
    });
    let s = agent.scrape();
    let group = |name: &str, group: &str| {
        s.metric(name)
            .label("group", group)
            .label("mem_type", "DRAM")
            .label("backend", "UCX")
            .sum()
    };
    for (g, descriptors, bytes) in PLAN {
        assert_eq!(
            group("nixl_agent_registration_attempts_total", g),
            1.0,
            "{at}: {g}\n{}",
            log(&agent)
        );
        assert_eq!(group("nixl_agent_registered_descriptors", g), descriptors, "{at}: {g}");
        assert_eq!(group("nixl_agent_registered_bytes", g), bytes, "{at}: {g}");
    }
    assert_eq!(s.metric("nixl_agent_registration_failures_total").sum(), 0.0, "{at}");
    assert_eq!(s.metric("nixl_agent_ready").value(), 1.0, "{at}");
    let version = build.version().unwrap_or("unknown");
    assert_eq!(
        s.metric("nixl_agent_build_info").label("nixl_version", version).value(),
        1.0,
        "{at}: the build's version"
    );
    let st = agent.status();
    let library = st["nixl"]["library"].as_str().unwrap_or_default();
    assert!(
        Path::new(library).starts_with(&libs),
        "{at}: loaded {library}, not the build's"
    );

    // Batched (one registerMem of a list a group) only where the version is
    // proven; one region a call elsewhere, as the log says once.
    let batched = capi::proven(build.version());
    let said = agent.events(ONE_A_CALL).len();
    assert_eq!(said, usize::from(!batched), "{at}: batched {batched}\n{}", log(&agent));
    let registered: Vec<(String, u64)> = agent
        .events("group registered")
        .iter()
        .map(|e| {
            (
                e["group"].as_str().unwrap().to_string(),
                e["descriptors"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(registered.len(), 2, "{at}: {registered:?}");
    for (g, descriptors, _) in PLAN {
        assert!(
            registered.contains(&(g.to_string(), descriptors as u64)),
            "{at}: {g} registered whole: {registered:?}"
        );
    }

    agent.signal("TERM");
    let status = agent.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{at}: exit\n{}", log(&agent));
    let groups = agent.events("group deregistered");
    let total: u64 = groups.iter().map(|e| e["descriptors"].as_u64().unwrap()).sum();
    assert_eq!(total, 12, "{at}: kv 8 + aux 4 deregistered");
    assert!(groups.iter().all(|e| e["failed"] == 0), "{at}: {groups:?}");
    let done = agent.events("drain complete");
    assert_eq!(done.len(), 1, "{at}");
    assert_eq!(done[0]["registered_descriptors"], 0, "{at}: {}", done[0]);
    assert_eq!(done[0]["deregistered_descriptors"], 12, "{at}: {}", done[0]);
}

fn wheel(dist: &'static str, folder: &'static str, imports_torch: bool) -> Build {
    Build {
        folder,
        dist,
        imports_torch,
    }
}

/// One build's tests, in a module named for it: every program under the
/// interposer, the lifecycle, and the Python front-end alone. `matrix`:
/// only `make matrix` runs them.
macro_rules! build {
    (@tests $(#[$m:meta])* $name:ident = $build:expr; [$(#[$t:meta])*]) => {
        $(#[$m])*
        mod $name {
            use super::*;

            #[test]
            $(#[$t])*
            fn every_program_is_counted_and_unchanged() {
                every_program_is_counted_on($build);
            }

            #[test]
            $(#[$t])*
            fn the_lifecycle_registers_and_drains() {
                the_lifecycle_on($build);
            }

            #[test]
            $(#[$t])*
            fn the_python_front_end_counts_and_is_unchanged() {
                the_python_front_end_counts_on($build);
            }
        }
    };
    ($(#[$m:meta])* $name:ident = $build:expr, matrix) => {
        build!(@tests $(#[$m])* $name = $build; [#[ignore = "the full release matrix: `make matrix`"]]);
    };
    ($(#[$m:meta])* $name:ident = $build:expr) => {
        build!(@tests $(#[$m])* $name = $build; []);
    };
}

build! {
    /// The oldest release of the last year.
    nixl_cu12_1_0_1 = wheel("nixl_cu12", "nixl_cu12-1.0.1", true)
}
build! { nixl_cu12_1_1_0 = wheel("nixl_cu12", "nixl_cu12-1.1.0", true), matrix }
build! { nixl_cu12_1_3_2 = wheel("nixl_cu12", "nixl_cu12-1.3.2", true), matrix }
build! { nixl_cu12_1_4_1 = wheel("nixl_cu12", "nixl_cu12-1.4.1", false), matrix }
build! { nixl_cu12_1_5_0 = wheel("nixl_cu12", "nixl_cu12-1.5.0", false), matrix }
build! {
    /// The newest release (the set-up's own `.deps/nixl` is the same wheel).
    nixl_cu12_1_5_1 = wheel("nixl_cu12", "nixl_cu12-1.5.1", false)
}
build! {
    /// Dynamo 1.6.1's `ai-dynamo[vllm]` pin.
    nixl_cu13_1_4_1 = wheel("nixl_cu13", "nixl_cu13-1.4.1", false), matrix
}
build! {
    /// Dynamo 1.6.1's `ai-dynamo[sglang]` pin.
    nixl_cu13_1_5_0 = wheel("nixl_cu13", "nixl_cu13-1.5.0", false), matrix
}
build! {
    /// 1.5.1 as an image built from source carries it: no dist-info beside
    /// the libraries, and no NIXL_AGENT_NIXL_VERSION.
    source_layout_1_5_1 = wheel("nixl_cu12", "source-1.5.1", false)
}

/// The table above is the set-up's: scripts/matrix.sh --list names the
/// same builds, so a build added there is tested here.
#[test]
fn the_tested_builds_are_the_set_ups() {
    let out = support::output_within(
        Command::new("bash")
            .arg(support::repo().join("scripts/matrix.sh"))
            .arg("--list"),
        Duration::from_secs(10),
        "scripts/matrix.sh --list",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| Path::new(l).file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let here = include_str!("releases.rs");
    let tested: Vec<&str> = here
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("build! { ").split_once(" = wheel("))
        .filter(|(name, _)| name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .filter_map(|(_, l)| l.split('"').nth(3))
        .collect();
    assert_eq!(tested, listed);
}
