//! UCX's protocol selection tables (`UCX_PROTO_INFO=y`), read back into
//! facts: which transport and device UCX picked for a put or a get between
//! two memory types on one worker's endpoint.
//!
//! UCX prints one table per endpoint configuration and operation, on
//! stdout, each line behind a `[time] [host:pid:thread]` prefix:
//!
//! ```text
//! +--------+-------------+-----------------------------------+
//! | check-a intra-node cfg#1                                 |
//! | remote memory write by ucp_put* from host memory to host |
//! +--------+-------------+-----------------------------------+
//! | 0..inf | zero-copy   | cma/memory                        |
//! +--------+-------------+-----------------------------------+
//! ```
//!
//! Pure functions; the lines are collected by the output tap (nixl-agent-sys, `stderr`).

/// The most table lines kept from one run of `check`.
pub const MAX_TABLE_LINES: usize = 16_384;

/// One protocol table: whose endpoint, what operation, which transports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProtoTable {
    /// The UCX worker's name: NIXL names it after its agent.
    pub worker: String,
    /// "self", "intra-node", "inter-node" (UCX's words for the endpoint).
    pub scope: String,
    /// UCX's description, e.g. "remote memory write by ucp_put* from host
    /// memory to host".
    pub operation: String,
    /// Each size range and the `transport/device` lanes UCX picked for it.
    pub ranges: Vec<ProtoRange>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProtoRange {
    pub range: String,
    pub protocol: String,
    /// `transport/device` pairs, e.g. `rc_mlx5/mlx5_0:1`, `tcp/eth0`.
    pub lanes: Vec<String>,
}

impl ProtoTable {
    /// Whether this is the table of `op` ("put" or "get") between the
    /// initiator's `local` memory and the peer's `remote` memory (UCX's
    /// words: "host", "cuda"). UCX says "write … from host memory to host"
    /// and "read … into host memory from host".
    pub fn is(&self, op: &str, local: &str, remote: &str) -> bool {
        let between = match op {
            "get" => format!("into {local} memory from {remote}"),
            _ => format!("from {local} memory to {remote}"),
        };
        self.operation.contains(&format!("ucp_{op}*")) && self.operation.ends_with(&between)
    }

    /// Every transport (the part before `/`) of every range, deduplicated
    /// in the order first seen.
    pub fn transports(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for lane in self.ranges.iter().flat_map(|r| &r.lanes) {
            let t = lane.split('/').next().unwrap_or(lane).to_string();
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// Every `transport/device` lane, deduplicated in the order first seen.
    pub fn lanes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for lane in self.ranges.iter().flat_map(|r| &r.lanes) {
            if !out.contains(lane) {
                out.push(lane.clone());
            }
        }
        out
    }
}

/// The table text of a line UCX printed (`+---` or `| … |`), without its
/// `[time] [host:pid:thread]` prefix; `None` for any other line.
pub fn table_line(line: &str) -> Option<&str> {
    let mut rest = line.trim_end_matches(['\n', '\r']);
    for _ in 0..2 {
        let r = rest.trim_start();
        if !r.starts_with('[') {
            return None;
        }
        let end = r.find(']')?;
        rest = &r[end + 1..];
    }
    let body = rest.trim_start();
    (body.starts_with('|') || body.starts_with("+-")).then_some(body)
}

/// What the start of a line says of whose it is: UCX prefixes each line it
/// prints with `[seconds.micros] [host:pid` (then `:thread]`, the pid
/// left-aligned in 5 columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcxPrefix {
    /// Too short to tell: what is there could still be one.
    Partial,
    /// A UCX prefix, of the process with this pid.
    Pid(u32),
    /// Not a UCX prefix.
    Not,
}

/// Reads UCX's `[seconds.micros] [host:pid` at the start of `bytes`.
pub fn ucx_prefix(bytes: &[u8]) -> UcxPrefix {
    scan_prefix(bytes).unwrap_or_else(|e| e)
}

fn scan_prefix(bytes: &[u8]) -> Result<UcxPrefix, UcxPrefix> {
    // One part of the prefix: bytes `take` accepts from `from`, up to the
    // byte `ends` accepts once `min` were taken; that byte's index.
    let part = |from: usize, min: usize, take: &dyn Fn(u8) -> bool, ends: &dyn Fn(u8) -> bool| {
        let mut i = from;
        loop {
            match bytes.get(i).copied() {
                None => return Err(UcxPrefix::Partial),
                Some(b) if ends(b) && i >= from + min => return Ok(i),
                Some(b) if take(b) => i += 1,
                Some(_) => return Err(UcxPrefix::Not),
            }
        }
    };
    let open = part(0, 0, &|_| false, &|b| b == b'[')?;
    let time = part(open + 1, 1, &|b| b.is_ascii_digit() || b == b'.', &|b| b == b']')?;
    let host = part(time + 1, 0, &|b| b == b' ', &|b| b == b'[')? + 1;
    let pid = part(host, 1, &|b| b.is_ascii_graphic() && !b"[]:".contains(&b), &|b| {
        b == b':'
    })? + 1;
    let end = part(pid, 1, &|b| b.is_ascii_digit(), &|b| b == b' ' || b == b':')?;
    let pid = std::str::from_utf8(&bytes[pid..end]).ok().and_then(|p| p.parse().ok());
    Ok(pid.map_or(UcxPrefix::Not, UcxPrefix::Pid))
}

/// [`table_line`] of a line the process `pid`'s UCX printed; `None` for
/// any other line (another process's, or a program's look-alike).
pub fn own_table_line(line: &str, pid: u32) -> Option<&str> {
    match ucx_prefix(line.as_bytes()) {
        UcxPrefix::Pid(p) if p == pid => table_line(line),
        _ => None,
    }
}

/// Cells of a `| a | b | c |` row, trimmed.
fn cells(row: &str) -> Vec<&str> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// The `transport/device` lanes of a Config cell: `cma/memory`,
/// `tcp/lo, tcp/eth0`, or UCX's split of a large message across lanes,
/// `52% on tcp/lo and 48% on tcp/eth0`.
fn lanes(cell: &str) -> Vec<String> {
    cell.split(',')
        .flat_map(|part| part.split(" and "))
        .map(|lane| {
            let lane = lane.trim();
            match lane.split_once("% on ") {
                Some((share, rest)) if share.trim().parse::<f64>().is_ok() => rest.trim(),
                _ => lane,
            }
        })
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Parses the table lines (prefix already removed, or not) into tables.
/// Tables that are not of a remote memory operation are skipped; a
/// malformed one is dropped, never guessed at.
pub fn parse(lines: &[String]) -> Vec<ProtoTable> {
    let mut out = Vec::new();
    let mut title: Vec<String> = Vec::new();
    let mut ranges: Vec<ProtoRange> = Vec::new();
    // 0: before a title, 1: in the title, 2: in the header, 3: in the rows.
    let mut part = 0;
    let finish = |title: &[String], ranges: &mut Vec<ProtoRange>, out: &mut Vec<ProtoTable>| {
        let ranges = std::mem::take(ranges);
        let Some(head) = title.first() else { return };
        let mut words = head.split_whitespace();
        let (Some(worker), Some(scope)) = (words.next(), words.next()) else {
            return;
        };
        let operation = title[1..].join(" ");
        if ranges.is_empty() || !operation.contains("remote memory") {
            return;
        }
        out.push(ProtoTable {
            worker: worker.to_string(),
            scope: scope.to_string(),
            operation,
            ranges,
        });
    };
    for raw in lines {
        let Some(l) = table_line(raw).or_else(|| {
            let t = raw.trim();
            (t.starts_with('|') || t.starts_with("+-")).then_some(t)
        }) else {
            continue;
        };
        if l.starts_with('+') {
            part = match part {
                0 => 1,
                1 => 2,
                2 => 3,
                _ => {
                    finish(&title, &mut ranges, &mut out);
                    title.clear();
                    0
                }
            };
            continue;
        }
        let c = cells(l);
        match part {
            1 => title.push(c.join(" ")),
            3 if c.len() >= 3 => ranges.push(ProtoRange {
                range: c[0].to_string(),
                protocol: c[1].to_string(),
                lanes: lanes(c[2]),
            }),
            _ => {}
        }
    }
    out
}

/// UCX's word for a memory type in its tables.
pub fn ucx_mem(vram: bool) -> &'static str {
    if vram {
        "cuda"
    } else {
        "host"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| format!("[1796185907.212271] [vm:4013 :0]   {l}"))
            .collect()
    }

    const PUT: &str = "\
+--------+-------------+-----------------------------------+
| check-a intra-node cfg#1                                 |
| remote memory write by ucp_put* from host memory to host |
+--------+-------------+-----------------------------------+
| Range  | Description |              Config               |
+--------+-------------+-----------------------------------+
| 0..8k  | short       | tcp/lo                            |
| 8k..inf| zero-copy   | cma/memory, tcp/eth0              |
+--------+-------------+-----------------------------------+
+--------+-------------+-----------------------------------+
| check-a intra-node cfg#1                                 |
| remote memory read by ucp_get*(multi) into cuda memory from host |
+--------+-------------+-----------------------------------+
| Range  | Description |              Config               |
+--------+-------------+-----------------------------------+
| 0..inf | zero-copy   | cuda_ipc/cuda                     |
+--------+-------------+-----------------------------------+
+------------+--------------------+---------------+
| check-a self cfg#0                              |
| active message by ucp_am_send* from host memory |
+------------+--------------------+---------------+
|   Range    |    Description     |    Config     |
+------------+--------------------+---------------+
|          0 | short              | tcp/lo        |
+------------+--------------------+---------------+
";

    #[test]
    fn a_put_table_is_read_with_its_lanes() {
        let t = parse(&lines(PUT));
        assert_eq!(t.len(), 2, "the active-message table is not a remote memory op: {t:?}");
        assert!(t[1].is("get", "cuda", "host"), "a read is titled by where it lands");
        assert!(!t[1].is("get", "host", "cuda"));
        assert_eq!(t[1].transports(), ["cuda_ipc"]);
        assert_eq!(t[0].worker, "check-a");
        assert_eq!(t[0].scope, "intra-node");
        assert!(t[0].is("put", "host", "host"));
        assert!(!t[0].is("get", "host", "host"));
        assert!(!t[0].is("put", "cuda", "cuda"));
        assert_eq!(t[0].transports(), ["tcp", "cma"]);
        assert_eq!(t[0].lanes(), ["tcp/lo", "cma/memory", "tcp/eth0"]);
        assert_eq!(t[0].ranges[1].protocol, "zero-copy");
    }

    #[test]
    fn a_message_split_across_lanes_names_each_lane() {
        assert_eq!(lanes("52% on tcp/lo and 48% on tcp/eth0"), ["tcp/lo", "tcp/eth0"]);
        assert_eq!(
            lanes("rc_mlx5/mlx5_0:1, rc_mlx5/mlx5_1:1"),
            ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]
        );
        assert_eq!(lanes("cma/memory"), ["cma/memory"]);
        let t = ProtoTable {
            worker: "w".into(),
            scope: "intra-node".into(),
            operation: "remote memory write by ucp_put* from host memory to host".into(),
            ranges: vec![ProtoRange {
                range: "0..inf".into(),
                protocol: "multi-frag zero-copy".into(),
                lanes: lanes("52% on tcp/lo and 48% on tcp/eth0"),
            }],
        };
        assert_eq!(t.transports(), ["tcp"], "TCP however many lanes: a fall-back is seen");
    }

    #[test]
    fn only_table_lines_are_taken_from_the_output() {
        assert_eq!(table_line("[1.2] [vm:1 :0]   | a | b |"), Some("| a | b |"));
        assert_eq!(table_line("[1.2] [vm:1 :0]   +----+"), Some("+----+"));
        assert_eq!(table_line("[1.2] [vm:1 :0]   ucp_context.c:123 UCX WARN x"), None);
        assert_eq!(table_line("| a program's own table |"), None, "no UCX prefix");
        assert_eq!(table_line("2026-12-02 NIXL INFO x"), None);
    }

    #[test]
    fn a_table_line_is_ucxs_own_only_with_this_processs_pid() {
        let line = "[1796185907.212271] [vm:4013 :0]   | a | b |";
        assert_eq!(ucx_prefix(line.as_bytes()), UcxPrefix::Pid(4013));
        assert_eq!(own_table_line(line, 4013), Some("| a | b |"));
        assert_eq!(own_table_line(line, 4014), None, "another process's");
        let wide = "[1796185907.212271] [gpu-node-7:123456:3]   +----+";
        assert_eq!(own_table_line(wide, 123456), Some("+----+"));
        // As it comes: undecided while it could still be one.
        for cut in 0..line.find(" :0]").unwrap() {
            assert_eq!(ucx_prefix(&line.as_bytes()[..cut]), UcxPrefix::Partial, "{cut}");
        }
        // A prompt, a program's own bracketed words: not UCX's at once.
        for not in [
            "[y/N] ",
            "[INFO] x",
            "[1.2]x",
            "[] [h:1 ",
            "[1.2] [h:x",
            "[1.2] [:1 ",
            "x[1.2]",
        ] {
            assert_eq!(ucx_prefix(not.as_bytes()), UcxPrefix::Not, "{not:?}");
        }
    }

    #[test]
    fn a_cut_table_is_dropped_not_guessed() {
        let cut: Vec<String> = lines(PUT).into_iter().take(5).collect();
        assert!(parse(&cut).is_empty());
        assert!(parse(&[]).is_empty());
    }
}
