//! A small closed-loop HTTP/1.1 load generator: C connections, each sending
//! GET requests back to back (keep-alive when the server allows it, a new
//! connection when it closes, or every time when asked), for a fixed time. Every request's latency
//! (connect when needed, write, full response read) is recorded, so the
//! percentiles are exact. One thread (a current-thread tokio runtime), so the
//! client never takes more than one core from the server on a small machine.

use crate::common::percentile;
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    pub target: String,
    /// False when every request asked for `Connection: close`.
    pub keep_alive: bool,
    pub connections: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub reconnects: u64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub response_bytes: usize,
}

struct Conn {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

/// Reads one response; returns (status, body length, keep-alive).
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<(u16, usize, bool)> {
    buf.clear();
    let eof = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed");
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p + 4;
        }
        if read_more(stream, buf).await? == 0 {
            return Err(eof());
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("non-UTF-8 head"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let http10 = status_line.starts_with("HTTP/1.0");
    let (mut length, mut chunked, mut close) = (None, false, http10);
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
            match k.as_str() {
                "content-length" => length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.contains("chunked"),
                "connection" => close = v.contains("close"),
                _ => {}
            }
        }
    }
    if chunked {
        // Body: size line, data, CRLF ... until a zero-size chunk.
        let mut pos = head_end;
        let mut body = 0;
        loop {
            let line_end = loop {
                if let Some(p) = find(&buf[pos..], b"\r\n") {
                    break pos + p;
                }
                if read_more(stream, buf).await? == 0 {
                    return Err(eof());
                }
            };
            let size_txt = std::str::from_utf8(&buf[pos..line_end]).map_err(|_| bad("chunk size"))?;
            let size = usize::from_str_radix(size_txt.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("chunk size"))?;
            let need = line_end + 2 + size + 2;
            while buf.len() < need {
                if read_more(stream, buf).await? == 0 {
                    return Err(eof());
                }
            }
            pos = need;
            body += size;
            if size == 0 {
                break;
            }
        }
        return Ok((status, body, !close));
    }
    match length {
        Some(n) => {
            while buf.len() < head_end + n {
                if read_more(stream, buf).await? == 0 {
                    return Err(eof());
                }
            }
            Ok((status, n, !close))
        }
        None => {
            // Body until the server closes.
            while read_more(stream, buf).await? > 0 {}
            Ok((status, buf.len() - head_end, false))
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let old = buf.len();
    buf.resize(old + 64 * 1024, 0);
    let n = stream.read(&mut buf[old..]).await?;
    buf.truncate(old + n);
    Ok(n)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    reconnects: u64,
    bytes: usize,
}

async fn one_connection(
    addr: SocketAddr,
    request: std::sync::Arc<Vec<u8>>,
    record_from: Instant,
    end: Instant,
) -> Tally {
    let mut c = Conn {
        stream: None,
        buf: Vec::with_capacity(64 * 1024),
    };
    let mut t = Tally {
        latencies_us: Vec::with_capacity(1 << 16),
        errors: 0,
        reconnects: 0,
        bytes: 0,
    };
    while Instant::now() < end {
        let start = Instant::now();
        if c.stream.is_none() {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    c.stream = Some(s);
                    t.reconnects += 1;
                }
                Err(_) => {
                    t.errors += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
            }
        }
        let Some(stream) = c.stream.as_mut() else { continue };
        let outcome = async {
            stream.write_all(&request).await?;
            read_response(stream, &mut c.buf).await
        }
        .await;
        let done = Instant::now();
        match outcome {
            Ok((status, body, keep)) => {
                if done >= record_from {
                    if (200..300).contains(&status) {
                        t.latencies_us
                            .push((done - start).as_micros().min(u128::from(u32::MAX)) as u32);
                        t.bytes = body;
                    } else {
                        t.errors += 1;
                    }
                }
                if !keep {
                    c.stream = None;
                }
            }
            Err(_) => {
                // A keep-alive connection the server closed: reconnect and
                // do not count it (the request was not answered).
                c.stream = None;
            }
        }
    }
    t
}

/// How the client treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conns {
    /// Reuse a connection for as long as the server keeps it open.
    KeepAlive,
    /// Ask for `Connection: close`: a new connection per request.
    Close,
}

/// Runs `connections` closed-loop clients against `http://addr{path}` for
/// `warmup` + `duration`; only the last `duration` is recorded.
pub fn run(
    addr: SocketAddr,
    path: &str,
    connections: usize,
    conns: Conns,
    warmup: Duration,
    duration: Duration,
) -> LoadResult {
    let close = if conns == Conns::Close {
        "Connection: close\r\n"
    } else {
        ""
    };
    let request = std::sync::Arc::new(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: nixl-bench\r\nAccept: */*\r\n{close}\r\n")
            .into_bytes(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let tallies = rt.block_on(async {
        let begin = Instant::now();
        let record_from = begin + warmup;
        let end = record_from + duration;
        let tasks: Vec<_> = (0..connections)
            .map(|_| tokio::spawn(one_connection(addr, request.clone(), record_from, end)))
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            if let Ok(v) = t.await {
                out.push(v);
            }
        }
        out
    });
    let mut all: Vec<f64> = tallies
        .iter()
        .flat_map(|t| t.latencies_us.iter().map(|&u| f64::from(u) / 1000.0))
        .collect();
    all.sort_by(f64::total_cmp);
    let requests = all.len() as u64;
    LoadResult {
        target: format!("http://{addr}{path}"),
        keep_alive: conns == Conns::KeepAlive,
        connections,
        seconds: duration.as_secs_f64(),
        requests,
        errors: tallies.iter().map(|t| t.errors).sum(),
        reconnects: tallies.iter().map(|t| t.reconnects).sum(),
        rps: requests as f64 / duration.as_secs_f64(),
        p50_ms: percentile(&all, 0.50),
        p90_ms: percentile(&all, 0.90),
        p99_ms: percentile(&all, 0.99),
        max_ms: all.last().copied().unwrap_or(f64::NAN),
        response_bytes: tallies.iter().map(|t| t.bytes).max().unwrap_or(0),
    }
}
