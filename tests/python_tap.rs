//! The host program's own stdout and stderr with nixl-agent's fd tap in
//! place (tests/python/tap.py on NIXL's real Python API, under
//! `nixl-agent-instrument`): its last bytes before it dies (an abort, a
//! crash under faulthandler, `os._exit`, an ordinary exit) reach the real
//! streams exactly as they do without nixl-agent; a prompt goes out as it
//! comes and a line shaped like UCX's that is not UCX's is the program's;
//! UCX's protocol report is asked for only when the settings are accepted
//! and ask for transports; C's buffers are never flushed behind the host's
//! back. Every run is bounded: a hang fails with what it waited for.

use crate::support;
use crate::support::held::program;

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Waits at most `limit` for `child`; kills it and fails naming `what`.
fn wait_bounded(child: &mut std::process::Child, limit: Duration, what: &str) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `tap.py how`, bare or instrumented, stdout and stderr to files: (stdout,
/// stderr, exit status).
fn run(instrumented: bool, how: &str, env: &[(&str, &str)]) -> (String, String, ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let (o, e) = (dir.path().join("out"), dir.path().join("err"));
    let mut all = vec![("NIXL_AGENT_LISTEN", "off"), ("NIXL_AGENT_EXPECT", "none")];
    all.extend_from_slice(env);
    let mut child = support::held::command(&program("tap.py"), instrumented, &[how], &all)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let what = format!("tap.py {how} (instrumented: {instrumented})");
    let status = wait_bounded(&mut child, Duration::from_secs(60), &what);
    let read = |p: &std::path::Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    (read(&o), read(&e), status)
}

/// What may differ between two runs of the same program: NIXL's timestamps,
/// faulthandler's thread address, and the list of extension modules it
/// names (nixl-agent's is one more).
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("Extension modules:"))
        .map(|l| {
            let words = l.split(' ').map(|w| if w.starts_with("0x") { "0x" } else { w });
            let l = words.collect::<Vec<_>>().join(" ");
            if l.starts_with("20") {
                l.replace(|c: char| c.is_ascii_digit(), "0")
            } else {
                l
            }
        })
        .collect()
}

/// The signal or the exit code, as a shell would tell them apart.
fn ending(s: ExitStatus) -> (Option<i32>, Option<i32>) {
    (s.code(), s.signal())
}

/// What is in the tap's pipes when the process dies reaches the real
/// streams: after `os.abort()`, a SIGSEGV under faulthandler (its traceback
/// too), `os._exit(3)`, a SIGTERM and an ordinary exit, stdout and stderr
/// are those of the bare run, and so is how it ended; ten times each.
#[test]
fn the_hosts_last_bytes_survive_every_way_it_dies() {
    for how in ["abort", "segv", "_exit", "sigterm", "exit"] {
        let (bare_out, bare_err, bare_status) = run(false, how, &[]);
        assert_eq!(
            bare_out.matches("of the program's own output").count(),
            200,
            "{how}: bare"
        );
        assert!(bare_err.contains("the last words on stderr"), "{how}: bare: {bare_err}");
        for i in 0..10 {
            let (out, err, status) = run(true, how, &[("NIXL_AGENT_CAPTURE", "on")]);
            assert_eq!(
                ending(status),
                ending(bare_status),
                "{how} #{i}: ended otherwise than bare\n{err}"
            );
            assert_eq!(normalized(&out), normalized(&bare_out), "{how} #{i}: stdout");
            assert_eq!(
                normalized(&err),
                normalized(&bare_err),
                "{how} #{i}: stderr\n--- instrumented\n{err}\n--- bare\n{bare_err}"
            );
        }
    }
}

/// With UCX's tables kept off stdout (`NIXL_AGENT_TRANSPORTS=1`, the
/// report asked for by nixl-agent), an unfinished line starting with `[`
/// (a prompt) reaches the real stdout before its newline, and a line shaped
/// like a UCX table line that another process (or the program) printed is
/// the program's: it passes.
#[test]
fn a_prompt_goes_out_as_it_comes_and_only_ucxs_own_lines_are_kept() {
    let mut child = support::spawn_piped(&mut support::held::command(
        &program("tap.py"),
        true,
        &["prompt"],
        &[
            ("NIXL_AGENT_LISTEN", "off"),
            ("NIXL_AGENT_EXPECT", "none"),
            ("NIXL_AGENT_TRANSPORTS", "1"),
        ],
    ));
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(&seen).ends_with("[y/N] ") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(b) => seen.extend(b),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the prompt `[y/N] ` did not reach stdout before its newline within 30 s; stdout so far: {:?}",
                    String::from_utf8_lossy(&seen)
                );
            }
        }
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("[1796185907.212271] [vm:1    :0]   | the program's own table |\n"),
        "a table-shaped line not of this process's UCX was dropped: {text:?}"
    );
    child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(30), "tap.py prompt after its answer");
    assert!(status.success(), "{status}");
    let rest: Vec<u8> = rx.try_iter().flatten().collect();
    assert!(String::from_utf8_lossy(&rest).contains("answered"), "{rest:?}");
}

/// `UCX_PROTO_INFO=y` is set (before NIXL loads) only when the settings are
/// accepted and ask for transports: never when the instrumentation is off
/// or a setting is refused, and never when transports are not asked for.
#[test]
fn ucxs_report_is_asked_for_only_by_accepted_settings_that_want_transports() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("NIXL_AGENT_TRANSPORTS", "1")], "UCX_PROTO_INFO y"),
        (
            &[("NIXL_AGENT_TRANSPORTS", "1"), ("NIXL_AGENT_INSTRUMENT", "off")],
            "UCX_PROTO_INFO None",
        ),
        (
            &[("NIXL_AGENT_TRANSPORTS", "1"), ("NIXL_AGENT_CAPTURE", "bogus")],
            "UCX_PROTO_INFO None",
        ),
        (&[], "UCX_PROTO_INFO None"),
    ];
    for (env, want) in cases {
        let (out, err, status) = run(true, "env", env);
        assert!(status.success(), "{env:?}: {status}\n{err}");
        assert_eq!(out.trim_end(), want, "{env:?}\n{err}");
    }
}

/// Learning transports (`NIXL_AGENT_TRANSPORTS=1`) never flushes the host's
/// C streams: a line the program left in a `FILE`'s buffer is still there
/// after its first transfer was posted and its transports read.
#[test]
fn learning_transports_leaves_the_hosts_c_buffers_alone() {
    let (out, err, status) = run(true, "cbuffer", &[("NIXL_AGENT_TRANSPORTS", "1")]);
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(
        out.contains("transfer DONE c buffer untouched"),
        "stdout:\n{out}\nstderr:\n{err}"
    );
}
