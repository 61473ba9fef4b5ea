//! HTTP hardening against the real binary: unknown paths, wrong methods,
//! oversized headers and bodies, slowloris and idle connections, the
//! connection cap — and the probes keep answering through all of it.

use crate::support::{self, AgentProcess, Spawn};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const READY: Duration = Duration::from_secs(30);

fn agent(http: &str) -> AgentProcess {
    let cfg = format!("[http]\n{http}\n[[group]]\nname='kv'\nkind='kv'\nmem_type='DRAM'\ncount=2\nsize='64KiB'\n");
    let a = AgentProcess::spawn(Spawn {
        config: Some(Box::leak(cfg.into_boxed_str())),
        ..Default::default()
    });
    a.wait_ready(READY);
    a
}

fn status_of(agent: &AgentProcess, raw: &[u8]) -> u16 {
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(raw);
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// What the server did with a connection, as seen by the client.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The server closed it (EOF or reset) without an answer.
    Closed,
    /// It answered; the bytes read.
    Answered(String),
    /// Nothing within the timeout: a server that leaves the client hanging.
    Hung,
}

fn seen(s: &mut TcpStream, timeout: Duration) -> Seen {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => Seen::Closed,
        Ok(n) => Seen::Answered(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Seen::Hung,
        Err(_) => Seen::Closed,
    }
}

/// A probe that must answer 200 quickly.
fn probe_fast(agent: &AgentProcess) {
    for path in ["/livez", "/readyz", "/metrics"] {
        let t = Instant::now();
        let r = support::get(agent.addr, path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(r.status, 200, "{path}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{path} took {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn unknown_paths_wrong_methods_and_oversized_requests_are_refused() {
    let a = agent("max_header_bytes = '8KiB'");
    assert_eq!(support::get(a.addr, "/nope").unwrap().status, 404);
    assert_eq!(support::get(a.addr, "/metrics/extra").unwrap().status, 404);
    for (m, p) in [("POST", "/metrics"), ("DELETE", "/readyz"), ("PUT", "/v1/status")] {
        assert_eq!(support::request(a.addr, m, p, &[]).unwrap().status, 405, "{m} {p}");
    }
    assert_eq!(support::request(a.addr, "HEAD", "/livez", &[]).unwrap().status, 200);
    let big = "x".repeat(20_000);
    assert_eq!(
        support::request(a.addr, "GET", "/metrics", &[("X-Big", &big)])
            .unwrap()
            .status,
        431
    );
    let body = b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n";
    assert_eq!(status_of(&a, body), 413);
    let junk = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage-tls-hello\r\n\r\n";
    assert_eq!(status_of(&a, junk), 400);
    probe_fast(&a);
}

#[test]
fn slowloris_connections_are_cut_and_probes_keep_answering() {
    let a = agent("header_read_timeout = '1s'\nmax_connections = 256");
    let mut slow: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut s = TcpStream::connect(a.addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    // Trickle a header byte now and then; meanwhile the probes answer.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(800) {
        for s in &mut slow {
            let _ = s.write_all(b"X");
        }
        probe_fast(&a);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(700));
    // Past the header deadline every slow connection has been answered
    // (408) or closed by the server.
    // A connection still open and silent fails the test.
    for s in &mut slow {
        match seen(s, Duration::from_secs(2)) {
            Seen::Closed => {}
            Seen::Answered(text) => assert!(text.contains(" 408 "), "{text:?}"),
            Seen::Hung => panic!("a slowloris connection was neither answered nor cut past the header deadline"),
        }
    }
    probe_fast(&a);
}

#[test]
fn connections_over_the_cap_are_closed_and_service_recovers() {
    let a = agent("header_read_timeout = '1s'\nmax_connections = 8");
    let idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(a.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    // The ninth is accepted and closed at once: no response, and no hang.
    let mut ninth = TcpStream::connect(a.addr).unwrap();
    let _ = ninth.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    let t0 = Instant::now();
    assert_eq!(seen(&mut ninth, Duration::from_secs(2)), Seen::Closed);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "closed at once, not after {:?}",
        t0.elapsed()
    );
    // Idle connections hit the header deadline and free their slots.
    std::thread::sleep(Duration::from_millis(1300));
    probe_fast(&a);
    drop(idle);
    let log = a.log().join("\n");
    assert!(log.contains("connection cap reached"), "the cap is logged");
}

#[test]
fn default_bind_is_loopback_and_all_interfaces_need_an_explicit_address() {
    assert!(nixl_agent::Config::default().listen.ip().is_loopback());
    let out = support::binary().args(["config"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("listen = \"127.0.0.1:10915\""));
}
