//! Processes the run starts: the `nixl-agent` binary, and this binary's own
//! `hold-raw` role (a bare nixl-sys process holding the same registrations,
//! optionally with NIXL's Prometheus telemetry exporter switched on).

use crate::common::nixl_lib_dir;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `count × size` regions, one anonymous mapping per group (as the agent
/// binary allocates them).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct GroupShape {
    pub count: usize,
    pub size: usize,
}

/// The agent's embedded default plan: kv 8 × 512 KiB, aux 4 × 64 KiB.
pub const DEFAULT_PLAN: &[GroupShape] = &[
    GroupShape {
        count: 8,
        size: 512 << 10,
    },
    GroupShape {
        count: 4,
        size: 64 << 10,
    },
];

/// `8x524288,4x65536` (the form `hold-raw --groups` takes).
pub fn shapes_arg(shapes: &[GroupShape]) -> String {
    shapes
        .iter()
        .map(|g| format!("{}x{}", g.count, g.size))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn parse_shapes(s: &str) -> Result<Vec<GroupShape>, String> {
    s.split(',')
        .map(|g| {
            let (c, z) = g.split_once('x').ok_or(format!("bad group {g:?}"))?;
            Ok(GroupShape {
                count: c.parse().map_err(|e| format!("{g:?}: {e}"))?,
                size: z.parse().map_err(|e| format!("{g:?}: {e}"))?,
            })
        })
        .collect()
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A blocking GET; returns (status, body length).
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, usize)> {
    get_text(addr, path).map(|(s, b)| (s, b.len()))
}

/// A blocking GET; returns (status, body).
pub fn get_text(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A running `nixl-agent run`.
pub struct AgentProc {
    child: Child,
    pub addr: SocketAddr,
    pub spawned: Instant,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl AgentProc {
    /// Starts the binary on a free port with a config holding `groups`
    /// (DRAM, UCX, allocated by the agent); the embedded default plan when
    /// `groups` is None.
    pub fn spawn(bin: &Path, groups: Option<&[GroupShape]>) -> Result<AgentProc, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = Command::new(bin);
        cmd.env_remove("NIXL_AGENT_CONFIG")
            .env_remove("NIXL_PLUGIN_DIR")
            .env_remove("NIXL_AGENT_LOG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env("NIXL_LIB_DIR", nixl_lib_dir())
            .arg("run")
            .args(["--listen", &addr.to_string(), "--log-format", "json"]);
        if let Some(groups) = groups {
            let mut text = String::new();
            for (i, g) in groups.iter().enumerate() {
                text.push_str(&format!(
                    "[[group]]\nname = \"bench{i}\"\nkind = \"kv\"\nmem_type = \"DRAM\"\ncount = {}\nsize = \"{}B\"\n\n",
                    g.count, g.size
                ));
            }
            let path = dir.path().join("agent.toml");
            std::fs::write(&path, text).map_err(|e| e.to_string())?;
            cmd.arg("--config").arg(path);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Ok(AgentProc {
            child,
            addr,
            spawned,
            log,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls /readyz every `interval` until 200; returns when it was seen.
    pub fn wait_ready(&mut self, timeout: Duration, interval: Duration) -> Result<Instant, String> {
        let end = Instant::now() + timeout;
        loop {
            if let Ok((200, _)) = get(self.addr, "/readyz") {
                return Ok(Instant::now());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("nixl-agent exited ({status}): {}", self.log_tail()));
            }
            if Instant::now() > end {
                return Err(format!("nixl-agent not ready after {timeout:?}: {}", self.log_tail()));
            }
            std::thread::sleep(interval);
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        log.iter().rev().take(5).rev().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        // SIGTERM first: the agent deregisters and exits.
        // Safety: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        reap(&mut self.child, Duration::from_secs(5));
    }
}

/// Waits up to `grace` for a child asked to exit, then kills it.
fn reap(child: &mut std::process::Child, grace: Duration) {
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A running `nixl-bench hold-raw`.
pub struct RawProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub spawned: Instant,
    /// The NIXL telemetry exporter's address when it was switched on.
    pub exporter: Option<SocketAddr>,
}

impl RawProc {
    pub fn spawn(groups: &[GroupShape], telemetry: bool) -> Result<RawProc, String> {
        let me: PathBuf = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(me);
        cmd.arg("hold-raw")
            .arg("--groups")
            .arg(shapes_arg(groups))
            .env("NIXL_LIB_DIR", nixl_lib_dir())
            .env_remove("NIXL_TELEMETRY_ENABLE");
        let mut exporter = None;
        if telemetry {
            let port = free_port();
            cmd.env("NIXL_TELEMETRY_ENABLE", "y")
                .env("NIXL_TELEMETRY_EXPORTER", "prometheus")
                .env("NIXL_TELEMETRY_PROMETHEUS_PORT", port.to_string())
                .env("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "y");
            exporter = Some(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let spawned = Instant::now();
        let mut child = cmd.spawn().map_err(|e| format!("starting hold-raw: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let rx = lines_of(stdout);
        Ok(RawProc {
            child,
            stdin,
            lines: rx,
            spawned,
            exporter,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the "ready" line (everything registered); returns when it came.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Instant, String> {
        let line = self
            .lines
            .recv_timeout(timeout)
            .map_err(|e| format!("hold-raw not ready: {e}"))?;
        let at = Instant::now();
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| format!("hold-raw said {line:?}: {e}"))?;
        if v.get("ready").and_then(|r| r.as_bool()) != Some(true) {
            return Err(format!("hold-raw failed: {line}"));
        }
        Ok(at)
    }
}

impl Drop for RawProc {
    fn drop(&mut self) {
        // Closing stdin makes it deregister and exit.
        drop(self.stdin.take());
        reap(&mut self.child, Duration::from_secs(5));
    }
}

/// The `hold-raw` role: a bare nixl-sys process (NIXL agent without
/// progress/listen threads, UCX backend, per-region registration of one
/// populated mapping per group), which says `{"ready":true}` and holds the
/// registrations until stdin closes.
pub fn hold_raw(groups: &[GroupShape]) -> Result<(), String> {
    use nixl_sys::{Agent, AgentConfig, OptArgs};
    crate::common::load_nixl()?;
    let cfg = AgentConfig {
        enable_prog_thread: false,
        enable_listen_thread: false,
        ..AgentConfig::default()
    };
    let agent = Agent::new_configured("bench-hold-raw", &cfg).map_err(|e| format!("agent: {e}"))?;
    let (_m, params) = agent.get_plugin_params("UCX").map_err(|e| e.to_string())?;
    let backend = agent.create_backend("UCX", &params).map_err(|e| e.to_string())?;
    let mut opts = OptArgs::new().map_err(|e| e.to_string())?;
    opts.add_backend(&backend).map_err(|e| e.to_string())?;
    let page = 4096;
    let mut arenas = Vec::new();
    let mut handles = Vec::new();
    for g in groups {
        let stride = g.size.next_multiple_of(page);
        let arena = crate::common::Arena::exact(stride * g.count);
        for r in arena.regions(g.count, stride) {
            handles.push(
                agent
                    .register_memory(&crate::registration::Desc(r), Some(&opts))
                    .map_err(|e| format!("register: {e}"))?,
            );
        }
        arenas.push(arena);
    }
    println!("{{\"ready\":true,\"descriptors\":{}}}", handles.len());
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut sink = String::new();
    let _ = std::io::stdin().read_to_string(&mut sink);
    while let Some(h) = handles.pop() {
        drop(h);
    }
    drop(arenas);
    Ok(())
}

/// `nixl-agent pod` over `dir` for `ranks` ranks, listening on `addr`,
/// its output dropped.
pub fn spawn_pod(
    agent_bin: &std::path::Path,
    dir: &std::path::Path,
    ranks: u32,
    addr: std::net::SocketAddr,
) -> Result<std::process::Child, String> {
    std::process::Command::new(agent_bin)
        .args([
            "pod",
            "--ranks",
            &ranks.to_string(),
            "--listen",
            &addr.to_string(),
            "--dir",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nixl-agent pod: {e}"))
}

/// The lines of `out`, read on a thread of their own into a channel.
pub fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
