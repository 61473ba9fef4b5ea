//! Sustained load: /metrics and /readyz at a steady request rate over
//! keep-alive connections while every group is re-registered periodically
//! (SIGUSR1). Zero errors, bounded p99, flat RSS, nothing left registered.
//!
//! 30 seconds in `make test`; `scripts/soak.sh` runs the 10-minute version
//! against the release binary (SOAK_SECONDS, SOAK_RPS, SOAK_REREGISTER_SECS).

use crate::support::{AgentProcess, Spawn};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    addr: SocketAddr,
    r: Option<BufReader<TcpStream>>,
}

impl Conn {
    fn get(&mut self, path: &str) -> std::io::Result<u16> {
        if self.r.is_none() {
            let s = TcpStream::connect(self.addr)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.set_nodelay(true)?;
            self.r = Some(BufReader::new(s));
        }
        let r = self.r.as_mut().unwrap();
        let res = (|| {
            r.get_mut()
                .write_all(format!("GET {path} HTTP/1.1\r\nHost: soak\r\n\r\n").as_bytes())?;
            let mut line = String::new();
            r.read_line(&mut line)?;
            let status: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h)? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                if h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0u8; len];
            r.read_exact(&mut body)?;
            Ok(status)
        })();
        if res.is_err() {
            self.r = None;
        }
        res
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
    not_ready: u64,
    ok: u64,
}

#[test]
fn sustained_scrapes_with_periodic_reregistration() {
    let seconds = env_u64("SOAK_SECONDS", 30);
    let rps = env_u64("SOAK_RPS", 500);
    let rereg = env_u64("SOAK_REREGISTER_SECS", 5);
    let clients = 8u64;
    let mut agent = AgentProcess::spawn(Spawn::default());
    agent.wait_ready(Duration::from_secs(30));
    let pid = agent.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let per_client = Duration::from_secs_f64(clients as f64 / rps as f64);
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (stop, tally, addr) = (stop.clone(), tally.clone(), agent.addr);
            std::thread::spawn(move || {
                let mut conn = Conn { addr, r: None };
                let mut next = Instant::now();
                let mut n = i;
                while !stop.load(Ordering::Relaxed) {
                    let path = if n % 2 == 0 { "/metrics" } else { "/readyz" };
                    n += 1;
                    let t = Instant::now();
                    let r = conn.get(path);
                    let us = t.elapsed().as_micros() as u64;
                    let mut t = tally.lock().unwrap();
                    t.latencies_us.push(us);
                    match r {
                        Ok(200) => t.ok += 1,
                        Ok(503) if path == "/readyz" => t.not_ready += 1,
                        _ => t.errors += 1,
                    }
                    drop(t);
                    next += per_client;
                    if let Some(d) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                }
            })
        })
        .collect();

    let start = Instant::now();
    let mut rss = Vec::new();
    let mut last_rereg = Instant::now();
    let mut reregistrations = 0;
    while start.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(rss_kib(pid));
        if last_rereg.elapsed() >= Duration::from_secs(rereg) {
            agent.signal("USR1");
            reregistrations += 1;
            last_rereg = Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // The last SIGUSR1 may have been sent a moment ago: its re-registration
    // is counted once it ends (bounded wait; the assertion below judges).
    let kv_attempts = || {
        agent
            .scrape()
            .metric("nixl_agent_registration_attempts_total")
            .label("group", "kv")
            .value()
    };
    let settle = Instant::now() + Duration::from_secs(10);
    let mut attempts = kv_attempts();
    while attempts < 1.0 + reregistrations as f64 && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(50));
        attempts = kv_attempts();
    }
    agent.signal("TERM");
    assert_eq!(agent.wait_exit(Duration::from_secs(30)).code(), Some(0));
    let drained = agent.events("drain complete");

    let mut t = tally.lock().unwrap();
    t.latencies_us.sort_unstable();
    let q = |p: f64| t.latencies_us[((t.latencies_us.len() as f64 * p) as usize).min(t.latencies_us.len() - 1)];
    let (p50, p99, max) = (q(0.50), q(0.99), *t.latencies_us.last().unwrap());
    let warm = rss[(rss.len() / 5).max(1) - 1].max(1);
    let peak = *rss.iter().skip(rss.len() / 5).max().unwrap_or(&warm);
    let drift = (peak as f64 - warm as f64) / warm as f64 * 100.0;
    let achieved = t.latencies_us.len() as f64 / seconds as f64;
    let summary = serde_json::json!({
        "seconds": seconds, "target_rps": rps, "achieved_rps": achieved, "requests": t.latencies_us.len(),
        "ok": t.ok, "readyz_503_during_reregistration": t.not_ready, "errors": t.errors,
        "p50_us": p50, "p99_us": p99, "max_us": max,
        "rss_warm_kib": warm, "rss_peak_kib": peak, "rss_drift_pct": drift,
        "reregistrations": reregistrations, "kv_attempts": attempts,
    });
    println!("soak summary: {summary}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak-summary.json");
    let _ = std::fs::write(out, serde_json::to_string_pretty(&summary).unwrap());

    assert_eq!(t.errors, 0, "{summary}");
    assert!(achieved >= rps as f64 * 0.9, "load generator fell behind: {summary}");
    assert!(p99 < 50_000, "p99 {p99} µs: {summary}");
    assert!(drift <= 5.0, "RSS grew {drift:.1}%: {summary}");
    assert!(
        attempts >= 1.0 + reregistrations as f64,
        "every SIGUSR1 re-registered kv: {summary}"
    );
    assert_eq!(drained[0]["registered_descriptors"], 0);
}
