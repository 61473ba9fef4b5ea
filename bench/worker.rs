//! Contender processes. Each contender runs in a process of its own, with one
//! NIXL agent, as in real use: a second NIXL agent (UCX context) in the same
//! process slows registration by a third to a half (measured on this kind of
//! machine), which would penalise whoever shares. The driver talks to every
//! worker line by line, so repetitions interleave across processes.
//!
//! Protocol: the worker's first stdout line is `{"ready": true, ...}`; then
//! one JSON request per stdin line, one JSON reply per stdout line:
//! `{"cmd":"rep","variant":V,"n":N,"size":S}` → `{"reg_ns":..,"dereg_ns":..}`,
//! `{"cmd":"probe"}` → what the worker measures about itself, `{"cmd":"quit"}`.

use crate::common::{nixl_lib_dir, repo};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// The Python interpreter: `--python`, `BENCH_PYTHON`, else the venv that
/// scripts/bench.sh creates.
pub fn interpreter(flag: Option<&str>) -> PathBuf {
    flag.map(PathBuf::from)
        .or_else(|| std::env::var_os("BENCH_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| repo().join(".deps/venv/bin/python"))
}

/// bench/py/nixl_worker.py with the wheel's package importable (the wheel
/// is unpacked beside the library folder, not installed).
pub fn python_command(python: &PathBuf) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(repo().join("bench/py/nixl_worker.py"))
        .env("PYTHONPATH", nixl_lib_dir().parent().unwrap_or(&nixl_lib_dir()))
        .env("PYTHONUNBUFFERED", "1")
        .env("NIXL_PLUGIN_DIR", nixl_lib_dir().join("plugins"));
    cmd
}

/// This binary's own `worker KIND` role.
pub fn self_command(kind: &str) -> Result<Command, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(me);
    cmd.args(["worker", kind]).env("NIXL_LIB_DIR", nixl_lib_dir());
    Ok(cmd)
}

pub struct Worker {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    pub info: serde_json::Value,
}

impl Worker {
    /// Starts the process; [`Worker::ready`] waits for its first line.
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Worker, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the {name} worker: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let rx = crate::procs::lines_of(stdout);
        Ok(Worker {
            name: name.to_string(),
            child,
            stdin,
            lines: rx,
            info: serde_json::Value::Null,
        })
    }

    /// Waits for `{"ready": true}` (NIXL agent and UCX backend created).
    pub fn ready(mut self) -> Result<Worker, String> {
        let first = self.read(Duration::from_secs(60))?;
        if first.get("ready").and_then(|v| v.as_bool()) != Some(true) {
            return Err(format!("the {} worker did not start: {first}", self.name));
        }
        self.info = first;
        Ok(self)
    }

    fn read(&mut self, timeout: Duration) -> Result<serde_json::Value, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => serde_json::from_str(&line).map_err(|e| format!("the {} worker said {line:?}: {e}", self.name)),
            Err(RecvTimeoutError::Timeout) => Err(format!("the {} worker was silent for {timeout:?}", self.name)),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("the {} worker exited ({status})", self.name))
            }
        }
    }

    pub fn request(&mut self, msg: serde_json::Value) -> Result<serde_json::Value, String> {
        writeln!(self.stdin, "{msg}").map_err(|e| format!("the {} worker: {e}", self.name))?;
        self.stdin.flush().map_err(|e| e.to_string())?;
        let v = self.read(Duration::from_secs(300))?;
        match v.get("error") {
            Some(e) => Err(format!("the {} worker: {e}", self.name)),
            None => Ok(v),
        }
    }

    /// One repetition: (register, deregister) in milliseconds.
    pub fn rep(&mut self, variant: &str, n: usize, size: usize) -> Result<(f64, f64), String> {
        let v = self.request(serde_json::json!({ "cmd": "rep", "variant": variant, "n": n, "size": size }))?;
        let get = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_f64())
                .ok_or(format!("the {} worker said {v}", self.name))
        };
        Ok((get("reg_ns")? / 1e6, get("dereg_ns")? / 1e6))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", serde_json::json!({ "cmd": "quit" }));
        let _ = self.stdin.flush();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves the protocol on stdin/stdout with `handle` answering each request.
pub fn serve(
    ready: serde_json::Value,
    mut handle: impl FnMut(&serde_json::Value) -> Result<serde_json::Value, String>,
) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{ready}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let msg: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("{line:?}: {e}"))?;
        if msg.get("cmd").and_then(|c| c.as_str()) == Some("quit") {
            break;
        }
        let reply = handle(&msg).unwrap_or_else(|e| serde_json::json!({ "error": e }));
        writeln!(out, "{reply}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}
