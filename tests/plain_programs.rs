//! The plain NIXL programs of tests/programs/ (no nixl-agent code in them)
//! work against the real NIXL and print the same bytes on every run: what
//! the interposer tests compare them with must not move by itself.

use crate::support;
use crate::support::programs::plain_command;
use std::time::Duration;

const OK_LINES: &str = "registered A 4\nregistered B 4\nloaded metadata of B\ntransfer done\nnotif done\n\
                        data verified\nderegistered\n";

fn run(lang: &str, scenario: &str) -> std::process::Output {
    support::output_within(
        &mut plain_command(lang, scenario),
        Duration::from_secs(60),
        &format!("{lang} {scenario}"),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok_twice_the_same(lang: &str) -> String {
    let first = run(lang, "ok");
    let second = run(lang, "ok");
    assert_eq!(
        first.status.code(),
        Some(0),
        "{lang} ok: {}\n{}",
        text(&first.stdout),
        text(&first.stderr)
    );
    assert_eq!(second.status.code(), Some(0), "{lang} ok, second run");
    assert_eq!(text(&first.stdout), text(&second.stdout), "{lang} ok: stdout differs");
    assert_eq!(text(&first.stderr), text(&second.stderr), "{lang} ok: stderr differs");
    text(&first.stdout)
}

fn seed_fails(lang: &str, line: &str) {
    let out = run(lang, "seed");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{lang} seed: {stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("registered kv 2\n") && stdout.ends_with(&format!("{line}\n")),
        "{lang} seed printed:\n{stdout}"
    );
}

#[test]
fn cpp_program_is_deterministic_and_fails_the_seed() {
    assert_eq!(ok_twice_the_same("cpp"), OK_LINES);
    seed_fails("cpp", "aux registration failed: NIXL_ERR_BACKEND");
}

#[test]
fn rust_program_is_deterministic_and_fails_the_seed() {
    assert_eq!(ok_twice_the_same("rust"), OK_LINES);
    seed_fails("rust", "aux registration failed: BackendError");
}

#[test]
fn python_program_is_deterministic_and_fails_the_seed() {
    let stdout = ok_twice_the_same("python");
    assert!(stdout.ends_with(OK_LINES), "python ok printed:\n{stdout}");
    seed_fails("python", "aux registration failed: nixlBackendError");
}

#[test]
fn cpp_stall_keeps_a_transfer_to_a_stopped_peer_in_progress() {
    let mut cmd = plain_command("cpp", "stall");
    cmd.env("STALL_SECONDS", "2");
    let out = support::output_within(&mut cmd, Duration::from_secs(60), "cpp stall");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(
        stdout,
        "registered A 4\nloaded metadata of B\nstopped B\nposted\ntransfer in progress after 2 s\n\
         deregistered\nkilled B\n"
    );
}
