//! Python programs of the tests' own (tests/python/*.py) on the real NIXL
//! Python API, run bare or under `nixl-agent-instrument`, and a handle on
//! one stopped at its `HOLD` lines so a test can probe it meanwhile.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use super::{Lines, Scrape};

/// A program of tests/python, by file name, as a path to run.
pub fn program(name: &str) -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
        .display()
        .to_string()
}

/// What a program printed, without the timestamped log lines of NIXL and
/// UCX and its `HOLD` marks.
pub fn said(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.starts_with("20") && !l.starts_with('[') && *l != "HOLD")
        .cloned()
        .collect()
}

/// The longest a held program may take from one `HOLD` to the next (its
/// transfers poll with limits of their own well below this).
pub const HOLD_WITHIN: Duration = Duration::from_secs(120);

/// The command for `program args`, bare or under the launcher, with a
/// clean NIXL_AGENT_* environment.
pub fn command(program: &str, instrumented: bool, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = if instrumented {
        let mut c = Command::new(super::venv_bin("nixl-agent-instrument"));
        c.arg(super::python());
        c
    } else {
        Command::new(super::python())
    };
    c.arg(program).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NIXL_AGENT_") || k.starts_with("OTEL_") || k == "PYTHONPATH" {
            c.env_remove(k);
        }
    }
    c.env("PYTHONUNBUFFERED", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// A program stopped at its `HOLD` line, waiting for the test to probe.
pub struct Held {
    pub child: Child,
    stderr: tempfile::NamedTempFile,
    stdin: Option<ChildStdin>,
    stdout: Lines,
    pub addr: SocketAddr,
    pub lines: Vec<String>,
}

impl Held {
    /// `program args` under the launcher, serving on a free port, read up
    /// to its first `HOLD`.
    pub fn start(program: &str, args: &[&str], env: &[(&str, &str)]) -> Held {
        let addr = super::free_port();
        let listen = addr.to_string();
        let mut all = vec![("NIXL_AGENT_LISTEN", listen.as_str())];
        all.extend_from_slice(env);
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut child = command(program, true, args, &all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .expect("start the program");
        let stdin = child.stdin.take();
        let stdout = Lines::new(child.stdout.take().unwrap());
        let mut h = Held {
            child,
            stderr,
            stdin,
            stdout,
            addr,
            lines: Vec::new(),
        };
        h.until_hold();
        h
    }

    /// Reads the program's stdout up to its next `HOLD`, which must come
    /// within [`HOLD_WITHIN`].
    pub fn until_hold(&mut self) {
        self.until_hold_within(HOLD_WITHIN);
    }

    /// Reads the program's stdout up to its next `HOLD` within `timeout`.
    pub fn until_hold_within(&mut self, timeout: Duration) {
        let end = std::time::Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let lines = &self.lines;
            let what = || format!("the program's next HOLD; stdout so far: {lines:?}");
            let Some(line) = self.stdout.next_or(left, what) else {
                panic!(
                    "the program ended before HOLD; stdout: {:?}; stderr: {}",
                    self.lines,
                    self.stderr()
                );
            };
            let line = line.trim_end().to_string();
            if line == "HOLD" {
                return;
            }
            self.lines.push(line);
        }
    }

    pub fn resume(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(b"\n").unwrap();
        s.flush().unwrap();
    }

    pub fn scrape(&self) -> Scrape {
        super::scrape(self.addr)
    }

    /// What the program wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap()
    }

    /// The program's own recording: the one rank of its /v1/status
    /// document (checked against the schema).
    pub fn status(&self) -> serde_json::Value {
        super::own_status(&super::status_document(self.addr)).clone()
    }

    pub fn group(&self, name: &str) -> serde_json::Value {
        let s = self.status();
        s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap_or_else(|| panic!("no group {name} in {s}"))
            .clone()
    }

    pub fn readyz(&self) -> u16 {
        super::get(self.addr, "/readyz").unwrap().status
    }

    /// Lets the program finish (within [`HOLD_WITHIN`]); returns its whole
    /// stdout.
    pub fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let what = format!("the held program's end; stdout so far: {:?}", self.lines);
        let rest = self.stdout.rest_within(HOLD_WITHIN, &what);
        self.lines.extend(rest);
        let status = super::wait_within(&mut self.child, HOLD_WITHIN, "the held program");
        assert!(status.success(), "program failed: {status}; stdout {:?}", self.lines);
        std::mem::take(&mut self.lines)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
