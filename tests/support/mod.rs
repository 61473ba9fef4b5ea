//! Test support: where the real NIXL and promtool live, a tiny HTTP client,
//! a Prometheus text matcher, and a handle on a spawned `nixl-agent` binary.

pub mod held;
pub mod metrics;
pub mod netns;
pub mod otlp;
pub mod programs;
pub mod prom;
pub mod traffic;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use metrics::Scrape;

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn required_path(var: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(default));
    assert!(
        p.exists(),
        "{var}: {} does not exist; run `bash scripts/setup.sh` (make test does)",
        p.display()
    );
    p
}

/// The real NIXL runtime unpacked by scripts/setup.sh.
pub fn nixl_lib_dir() -> PathBuf {
    required_path("NIXL_LIB_DIR", ".deps/nixl/.nixl_cu12.mesonpy.libs")
}

/// promtool from Debian's prometheus package, unpacked by scripts/setup.sh.
pub fn promtool() -> PathBuf {
    required_path("PROMTOOL", ".deps/prometheus/usr/bin/promtool")
}

/// The project's virtualenv python (scripts/setup.sh), with the
/// nixl_agent_instrument wheel installed by `make python` / `make test`.
pub fn python() -> PathBuf {
    required_path("NIXL_AGENT_PYTHON", ".deps/venv/bin/python")
}

/// That virtualenv's site-packages (where the NIXL wheels are installed).
pub fn python_site_packages() -> PathBuf {
    let lib = python().parent().and_then(Path::parent).unwrap().join("lib");
    std::fs::read_dir(&lib)
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no site-packages under {}", lib.display()))
}

/// A program of that virtualenv (`nixl-agent-instrument`, `kubernetes-validate`).
pub fn venv_bin(name: &str) -> PathBuf {
    let p = python().with_file_name(name);
    assert!(p.exists(), "{}: run `make python` (make test does)", p.display());
    p
}

/// A loopback address nothing listens on (bound, then released), never
/// handed out before in this test process, and with no pod directory left
/// by an earlier process of the same address (`/dev/shm/nixl-agent-UID/`:
/// an ended rank's file is kept there for its retention, and a process
/// given the address would show it in its merged view).
pub fn free_port() -> SocketAddr {
    use std::os::unix::fs::MetadataExt;
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    loop {
        let a = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let left = Path::new(&format!("/dev/shm/nixl-agent-{uid}/127.0.0.1_{}", a.port())).exists();
        if !left && GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(a.port()) {
            return a;
        }
    }
}

/// Polls `f` every 20 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit within `timeout`; past it, kills it and
/// panics naming `what`.
pub fn wait_within(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let end = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("waiting for {what}: {e}")) {
            return status;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {timeout:?} waiting for {what} to exit (killed)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a pipe of a child said, read to its end on a thread: handed over
/// when the pipe closes, or `None` past `end` (a grandchild that holds it).
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    match pipe {
        Some(mut p) => {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = p.read_to_end(&mut buf);
                let _ = tx.send(buf);
            });
        }
        None => {
            let _ = tx.send(Vec::new());
        }
    }
    rx
}

/// `child.wait_with_output()` within `timeout`: its piped stdout and stderr
/// read on threads while it runs; past the deadline it is killed and the
/// test panics naming `what`.
pub fn wait_with_output_within(mut child: Child, timeout: Duration, what: &str) -> std::process::Output {
    let end = Instant::now() + timeout;
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let status = wait_within(&mut child, timeout, what);
    let left = end.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
    let read = |rx: std::sync::mpsc::Receiver<Vec<u8>>, which: &str| {
        rx.recv_timeout(left)
            .unwrap_or_else(|_| panic!("{what} exited but its {which} stayed open past {timeout:?}"))
    };
    std::process::Output {
        status,
        stdout: read(out, "stdout"),
        stderr: read(err, "stderr"),
    }
}

/// `cmd.output()` within `timeout` (stdin null, stdout and stderr piped, as
/// `output()` has them); past it the process is killed and the test
/// panics naming `what`.
pub fn output_within(cmd: &mut Command, timeout: Duration, what: &str) -> std::process::Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    wait_with_output_within(child, timeout, what)
}

/// `cmd.status()` within `timeout` (stdio as the caller set it).
pub fn status_within(cmd: &mut Command, timeout: Duration, what: &str) -> ExitStatus {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    wait_within(&mut child, timeout, what)
}

/// The longest a test's program (a Python program, a launcher, a tool) may
/// run to its end.
pub const RUN_WITHIN: Duration = Duration::from_secs(180);

/// [`output_within`], [`status_within`] as methods, naming the command.
pub trait CommandWithin {
    /// `output()` within `timeout`.
    fn output_within(&mut self, timeout: Duration) -> std::process::Output;
    /// `status()` within `timeout`.
    fn status_within(&mut self, timeout: Duration) -> ExitStatus;
}

impl CommandWithin for Command {
    fn output_within(&mut self, timeout: Duration) -> std::process::Output {
        let what = format!("{self:?}");
        output_within(self, timeout, &what)
    }

    fn status_within(&mut self, timeout: Duration) -> ExitStatus {
        let what = format!("{self:?}");
        status_within(self, timeout, &what)
    }
}

/// Starts `cmd` to talk to: its stdin and stdout piped, its stderr dropped.
pub fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"))
}

/// The lines of a pipe, read on a thread so that each can be awaited with a
/// deadline.
pub struct Lines {
    rx: std::sync::mpsc::Receiver<std::io::Result<String>>,
    ended: bool,
}

impl Lines {
    pub fn new(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let stop = line.is_err();
                if tx.send(line).is_err() || stop {
                    return;
                }
            }
        });
        Lines { rx, ended: false }
    }

    /// The next line (without its end), `None` at the end of the pipe; panics
    /// naming `what` if none comes within `timeout`.
    pub fn next_within(&mut self, timeout: Duration, what: &str) -> Option<String> {
        self.next_or(timeout, || what.to_string())
    }

    /// [`Lines::next_within`], the wait named by `what()` only if it fails.
    pub fn next_or(&mut self, timeout: Duration, what: impl FnOnce() -> String) -> Option<String> {
        if self.ended {
            return None;
        }
        match self.rx.recv_timeout(timeout) {
            Ok(Ok(line)) => Some(line),
            Ok(Err(e)) => panic!("reading {}: {e}", what()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                self.ended = true;
                None
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("timed out after {timeout:?} waiting for {}", what())
            }
        }
    }

    /// Reads up to the line `line` (its end trimmed), which must come within
    /// `timeout`; panics naming `what` if the pipe ends first.
    pub fn skip_to(&mut self, line: &str, timeout: Duration, what: &str) {
        let end = Instant::now() + timeout;
        loop {
            let got = self.next_within(end.saturating_duration_since(Instant::now()), what);
            match got {
                Some(l) if l.trim_end() == line => return,
                Some(_) => {}
                None => panic!("the pipe ended before {what}"),
            }
        }
    }

    /// Every line up to the end of the pipe, which must come within
    /// `timeout`.
    pub fn rest_within(&mut self, timeout: Duration, what: &str) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut out = Vec::new();
        while let Some(l) = self.next_within(end.saturating_duration_since(Instant::now()), what) {
            out.push(l);
        }
        out
    }
}

/// A response from [`get`].
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A blocking HTTP/1.1 GET with `Connection: close`.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    request(addr, "GET", path, &[])
}

pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    // Each read is bounded by the socket's timeout, the whole response by
    // a deadline (a server that trickles bytes cannot hold the test).
    let (mut raw, mut chunk) = (Vec::new(), [0u8; 16 << 10]);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
        if Instant::now() > end {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{method} {path} on {addr}: the response did not end within 30 s"),
            ));
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Ok(Response { status, headers, body })
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

/// `promtool check metrics` on an exposition prints nothing and passes.
pub fn assert_promtool_clean(body: &str) {
    let mut lint = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    lint.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = wait_with_output_within(lint, Duration::from_secs(60), "promtool check metrics");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
}

/// Scrapes /metrics as text 0.0.4.
pub fn scrape(addr: SocketAddr) -> Scrape {
    let r = get(addr, "/metrics").expect("scrape /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    Scrape::parse(&r.body)
}

/// A `nixl-agent` process, logging JSON, listening on a free loopback port.
pub struct AgentProcess {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// How to start an [`AgentProcess`].
#[derive(Default)]
pub struct Spawn<'a> {
    /// Config file text (written to a temp file and passed with --config).
    pub config: Option<&'a str>,
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
    /// Leave NIXL_LIB_DIR out of the child's environment.
    pub no_nixl: bool,
}

pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nixl-agent"))
}

impl AgentProcess {
    pub fn spawn(s: Spawn) -> AgentProcess {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = binary();
        cmd.env_remove("NIXL_LIB_DIR")
            .env_remove("NIXL_AGENT_CONFIG")
            .env_remove("NIXL_PLUGIN_DIR");
        if !s.no_nixl {
            cmd.env("NIXL_LIB_DIR", nixl_lib_dir());
        }
        for (k, v) in s.env {
            cmd.env(k, v);
        }
        cmd.arg("run").args(["--log-format", "json"]);
        if !s.args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if let Some(text) = s.config {
            let path = dir.path().join("agent.toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(path);
        }
        cmd.args(s.args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn nixl-agent");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let addr = {
            let log = log.clone();
            wait_for(Duration::from_secs(20), "the agent's listen address in its log", || {
                log.lock().unwrap().iter().find_map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).ok()?;
                    v.get("listen")?.as_str()?.parse().ok()
                })
            })
        };
        AgentProcess {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// Log lines so far (JSON).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Parsed JSON log lines whose message is `msg`.
    pub fn events(&self, msg: &str) -> Vec<serde_json::Value> {
        self.log()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("message").and_then(|m| m.as_str()) == Some(msg))
            .collect()
    }

    pub fn get(&self, path: &str) -> Response {
        get(self.addr, path).unwrap_or_else(|e| panic!("GET {path}: {e}\nlog:\n{}", self.log().join("\n")))
    }

    pub fn scrape(&self) -> Scrape {
        scrape(self.addr)
    }

    /// This process's own recording: the one rank of its /v1/status
    /// document.
    pub fn status(&self) -> serde_json::Value {
        own_status(&self.status_document()).clone()
    }

    /// The /v1/status document, checked against docs/status.schema.json.
    pub fn status_document(&self) -> serde_json::Value {
        let doc = serde_json::from_str(&self.get("/v1/status").body).expect("status is JSON");
        assert_status_schema(&doc);
        doc
    }

    pub fn wait_ready(&self, timeout: Duration) {
        wait_for(timeout, "readyz 200", || {
            (self.get("/readyz").status == 200).then_some(())
        });
    }

    /// Waits until `f(scrape)` holds.
    pub fn wait_metrics(&self, what: &str, timeout: Duration, f: impl Fn(&Scrape) -> bool) -> Scrape {
        wait_for(timeout, what, || {
            let s = self.scrape();
            f(&s).then_some(s)
        })
    }

    pub fn signal(&self, sig: &str) {
        signal(self.child.id(), sig);
    }

    /// Waits for exit and returns the status.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = &mut self.child;
        wait_for(timeout, "the agent to exit", || child.try_wait().unwrap())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed and reaped when dropped, so that a test that
/// fails half-way leaves nothing running behind it.
pub struct Killed(pub Child);

impl std::ops::Deref for Killed {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Killed {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `nixl-agent pod` serving the pod directory `dir` for `ranks` ranks on
/// a free loopback port, once its /livez answers (killed when dropped).
pub fn pod_server(dir: &std::path::Path, ranks: u32) -> (Killed, SocketAddr) {
    let addr = free_port();
    let child = binary()
        .args([
            "pod",
            "--ranks",
            &ranks.to_string(),
            "--listen",
            &addr.to_string(),
            "--dir",
        ])
        .arg(dir)
        .env_remove("NIXL_AGENT_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Killed(child);
    wait_for(Duration::from_secs(20), "the pod agent", || {
        get(addr, "/livez").ok().filter(|r| r.status == 200)
    });
    (child, addr)
}

/// An example binary built beside this test (cargo test and nextest build
/// examples with the tests); built here when a filtered run skipped it.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(std::path::Path::parent).unwrap().to_path_buf();
    let bin = profile_dir.join("examples").join(name);
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(repo())
            .args(["build", "--quiet", "--features", "bench", "--example", name]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        assert!(
            status_within(
                &mut cmd,
                Duration::from_secs(900),
                &format!("cargo build --example {name}")
            )
            .success(),
            "cargo build --example {name} failed"
        );
    }
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}

/// Sends `sig` (a name such as `TERM`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = status_within(
        Command::new("kill").args(["-s", sig, &pid.to_string()]),
        Duration::from_secs(10),
        &format!("kill -s {sig} {pid}"),
    );
    assert!(ok.success());
}

/// A library config for tests: port 0, the wheel's NIXL, quick retries, no
/// configured groups (the test's plan brings its own).
pub fn library_config(agent_name: &str) -> nixl_agent::Config {
    nixl_agent::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        agent_name: agent_name.to_string(),
        nixl_lib_dir: Some(nixl_lib_dir()),
        retry: nixl_agent::config::RetryConfig {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(100),
            max_attempts: 0,
        },
        groups: vec![],
        ..nixl_agent::Config::default()
    }
}

/// What /metrics, /v1/status and /readyz say of an agent at `addr` is one
/// truth: for every group, `group_registered` and `group_state` follow the
/// status's state, the registered descriptors and bytes are the status's;
/// every backend's `backend_up` is the status's `up`; the data path's
/// transfers by op and outcome, and in flight, are the status's; and
/// `nixl_agent_ready`, `status.ready` and /readyz agree. The three are
/// read at one instant: the status's generation is read before and after
/// the others, and the reading is taken again while it moved (a busy agent
/// fails after a few tries). Returns the process's own status it compared.
pub fn assert_projections_agree(addr: SocketAddr) -> serde_json::Value {
    let read = || -> (serde_json::Value, Scrape, u16) {
        let status: serde_json::Value = serde_json::from_str(&get(addr, "/v1/status").unwrap().body).unwrap();
        (status, scrape(addr), get(addr, "/readyz").unwrap().status)
    };
    let generation = |st: &serde_json::Value| own_status(st)["generation"].as_u64();
    let (status, s, readyz) = (0..20)
        .find_map(|_| {
            let (status, s, readyz) = read();
            let after: serde_json::Value = serde_json::from_str(&get(addr, "/v1/status").unwrap().body).unwrap();
            if generation(&status) == generation(&after) {
                Some((status, s, readyz))
            } else {
                std::thread::sleep(Duration::from_millis(50));
                None
            }
        })
        .expect("the agent kept recording for 20 readings: not idle");
    assert_status_schema(&status);
    let st = own_status(&status);
    let ready = st["ready"].as_bool().unwrap();
    assert_eq!(
        status["ready"], st["ready"],
        "the document's readiness is its rank's: {status}"
    );
    assert_eq!(
        s.metric("nixl_agent_ready").value(),
        f64::from(u8::from(ready)),
        "{status}"
    );
    assert_eq!(readyz == 200, ready, "/readyz {readyz} against status {status}");
    for g in st["groups"].as_array().unwrap() {
        let name = g["name"].as_str().unwrap();
        let state = g["state"].as_str().unwrap();
        let m = |family: &str| s.metric(family).label("group", name);
        assert_eq!(
            m("nixl_agent_group_registered").value(),
            f64::from(u8::from(state == "registered")),
            "{name}: {g}"
        );
        assert_eq!(
            m("nixl_agent_group_state").label("state", state).value(),
            1.0,
            "{name}: {g}"
        );
        assert_eq!(m("nixl_agent_group_state").sum(), 1.0, "one state at a time: {g}");
        assert_eq!(
            m("nixl_agent_registered_descriptors").value(),
            g["descriptors"].as_f64().unwrap(),
            "{name}: {g}"
        );
        assert_eq!(
            m("nixl_agent_registered_bytes").value(),
            g["bytes"].as_f64().unwrap(),
            "{name}: {g}"
        );
    }
    let backends = st["backends"].as_array().unwrap();
    assert_eq!(
        s.metric("nixl_agent_backend_up").samples().len(),
        backends.len(),
        "one backend_up series per backend in the status: {backends:?}"
    );
    for b in backends {
        let name = b["name"].as_str().unwrap();
        assert_eq!(
            s.metric("nixl_agent_backend_up").label("backend", name).value(),
            f64::from(u8::from(b["up"].as_bool().unwrap())),
            "{b}"
        );
    }
    // The data path's families, where this recording has them.
    if s.families().iter().any(|f| f == "nixl_agent_transfers_total") {
        for op in st["transfers"]["ops"].as_array().unwrap() {
            let name = op["op"].as_str().unwrap();
            for outcome in ["done", "error", "released_in_flight"] {
                let m = s
                    .metric("nixl_agent_transfers_total")
                    .label("op", name)
                    .label("outcome", outcome)
                    .get()
                    .unwrap_or(0.0);
                assert_eq!(m, op[outcome].as_f64().unwrap(), "{name} {outcome}: {op}");
            }
            assert_eq!(
                s.metric("nixl_agent_transfers_in_flight").label("op", name).value(),
                op["in_flight"].as_f64().unwrap(),
                "{op}"
            );
        }
    }
    st.clone()
}

/// The inode of the socket listening on `port` (from /proc/net/tcp).
pub fn listening_inode(port: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        (local_port == port && f.get(3) == Some(&"0A")).then(|| f.get(9).map(|s| s.to_string()))?
    })
}

/// The socket inodes a process holds open.
pub fn socket_inodes(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|t| {
                    let t = t.to_string_lossy().into_owned();
                    t.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A lone process's own recording from its /v1/status document (a pod of
/// one: `ranks[0].status`).
pub fn own_status(doc: &serde_json::Value) -> &serde_json::Value {
    assert_eq!(doc["shape"], "process", "a lone process's document: {doc}");
    let ranks = doc["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 1, "one rank: {doc}");
    &ranks[0]["status"]
}

/// The /v1/status document at `addr`, checked against the schema.
pub fn status_document(addr: SocketAddr) -> serde_json::Value {
    let doc = serde_json::from_str(&get(addr, "/v1/status").unwrap().body).expect("status is JSON");
    assert_status_schema(&doc);
    doc
}

/// Validates a /v1/status document against docs/status.schema.json with
/// the `jsonschema` package of the project's virtualenv (installed with
/// kubernetes-validate by scripts/setup.sh); panics naming every error.
pub fn assert_status_schema(doc: &serde_json::Value) {
    if let Err(e) = status_schema_errors(doc) {
        panic!("/v1/status does not validate against docs/status.schema.json:\n{e}\ndocument: {doc:#}");
    }
}

/// What docs/status.schema.json finds wrong with `doc`, one error a line.
pub fn status_schema_errors(doc: &serde_json::Value) -> Result<(), String> {
    const CHECK: &str = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(schema)\n\
        errors = [f'{list(e.absolute_path)}: {e.message}' for e in jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin))]\n\
        print('\\n'.join(errors))\n\
        sys.exit(1 if errors else 0)\n";
    let mut child = Command::new(python())
        .arg("-c")
        .arg(CHECK)
        .arg(repo().join("docs/status.schema.json"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the venv python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = wait_with_output_within(child, Duration::from_secs(60), "the status schema check (venv python)");
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}
