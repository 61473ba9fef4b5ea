//! Python programs of the tests' own (tests/python/*.py) on the real NIXL
//! Python API, run bare or under `nixl-agent-instrument`, and a handle on
//! one stopped at its `HOLD` lines so a test can probe it meanwhile.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::Scrape;

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
    stdout: BufReader<ChildStdout>,
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
        let stdout = BufReader::new(child.stdout.take().unwrap());
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

    /// Reads the program's stdout up to its next `HOLD`.
    pub fn until_hold(&mut self) {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the program ended before HOLD; stdout: {:?}", self.lines);
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

    /// Lets the program finish; returns its whole stdout.
    pub fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        for line in self.stdout.by_ref().lines() {
            self.lines.push(line.unwrap());
        }
        let status = self.child.wait().unwrap();
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
