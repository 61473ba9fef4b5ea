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
//! on the sidecar. `make test` runs the oldest release, the newest and the
//! source layout; `make matrix` runs every build.

use super::support;
use super::support::programs::{argv, launched_argv, plain_env, unstamped};
use super::{text, WITHIN};
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
        let libs = root.join(format!(".{}.mesonpy.libs", self.dist));
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

/// `program` on `build`: bare, then under the launcher publishing to a pod
/// directory, its rank served by a sidecar once it has exited.
fn counted_and_unchanged(build: &Build, program: &Program) {
    let at = format!("{} on {}", program.name, build.folder);
    let env = build.env();
    let mut bare = Command::new(&program.argv[0]);
    bare.args(&program.argv[1..]);
    plain_env(&mut bare);
    bare.env_remove("PYTHONPATH").envs(env.iter().map(|(k, v)| (k, v)));
    let bare = run(bare, &format!("{at}, bare"));
    assert_eq!(bare.status.code(), Some(0), "{at}, bare: {}", text(&bare.stderr));

    let pod = tempfile::tempdir().unwrap();
    let pod_s = pod.path().to_str().unwrap();
    let mut launched = launched_argv(&program.argv, &[("NIXL_AGENT_MULTIPROC_DIR", pod_s)]);
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

    assert_eq!(inst.status.code(), bare.status.code(), "{at}: exit code");
    assert_eq!(comparable(&inst.stdout), comparable(&bare.stdout), "{at}: stdout");
    assert_eq!(comparable(&inst.stderr), comparable(&bare.stderr), "{at}: stderr");
}

fn every_program_is_counted_on(build: Build) {
    for program in programs(&build) {
        counted_and_unchanged(&build, &program);
    }
}

fn wheel(dist: &'static str, folder: &'static str, imports_torch: bool) -> Build {
    Build {
        folder,
        dist,
        imports_torch,
    }
}

/// The oldest release of the last year.
#[test]
fn nixl_cu12_1_0_1_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.0.1", true));
}

#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu12_1_1_0_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.1.0", true));
}

#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu12_1_3_2_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.3.2", true));
}

#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu12_1_4_1_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.4.1", false));
}

#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu12_1_5_0_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.5.0", false));
}

/// The newest release (the set-up's own `.deps/nixl` is the same wheel).
#[test]
fn nixl_cu12_1_5_1_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "nixl_cu12-1.5.1", false));
}

/// Dynamo 1.6.1's `ai-dynamo[vllm]` pin.
#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu13_1_4_1_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu13", "nixl_cu13-1.4.1", false));
}

/// Dynamo 1.6.1's `ai-dynamo[sglang]` pin.
#[test]
#[ignore = "the full release matrix: `make matrix`"]
fn nixl_cu13_1_5_0_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu13", "nixl_cu13-1.5.0", false));
}

/// 1.5.1 as an image built from source carries it: no dist-info beside
/// the libraries, and no NIXL_AGENT_NIXL_VERSION.
#[test]
fn source_layout_1_5_1_every_program_is_counted_and_unchanged() {
    every_program_is_counted_on(wheel("nixl_cu12", "source-1.5.1", false));
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
        .filter_map(|l| l.trim().strip_prefix("every_program_is_counted_on(wheel("))
        .filter_map(|l| l.split('"').nth(3))
        .collect();
    assert_eq!(tested, listed);
}
