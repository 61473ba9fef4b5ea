//! Every benchmark figure the docs cite in their prose is the committed
//! result's (#55): `bench/results/*.md` are the output of `make bench` and
//! `make bench-python`, docs/performance.md and docs/python.md carry them
//! whole (the block tests of tests/docs.rs), and what README and the other
//! pages quote from them is read here from the same files, so a rerun that
//! moves a figure fails this test until the sentence says the new one.

/// A committed result file.
struct Results {
    file: &'static str,
    text: String,
}

/// The number at the start of `s` as written (sign, digits, `.` and `,`).
fn number(s: &str) -> Option<String> {
    let sign = s.chars().next().filter(|c| "+-−".contains(*c));
    let body: String = s[sign.map_or(0, char::len_utf8)..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    let body = body.trim_end_matches(['.', ',']);
    (!body.is_empty()).then(|| format!("{}{body}", sign.map(String::from).unwrap_or_default()))
}

/// A figure as a value (`−` and `,` read as `-` and nothing).
fn value(figure: &str) -> f64 {
    figure
        .replace('−', "-")
        .replace(',', "")
        .parse()
        .unwrap_or_else(|e| panic!("{figure:?}: {e}"))
}

/// `x` with `d` decimals, halves rounded away from zero as people do
/// (4.85 → 4.9).
fn fixed(x: f64, d: usize) -> String {
    format!("{:.*}", d, x + x.signum() * 1e-9)
}

/// `x` to the nearest ten (627 → 630).
fn tens(x: f64) -> String {
    format!("{}", ((x + 1e-9) / 10.0).round() as i64 * 10)
}

/// A whole number with `,` between thousands (5495 → 5,495).
fn thousands(x: f64) -> String {
    let s = format!("{}", x.round() as i64);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The lowest and highest of `xs`.
fn span(xs: &[f64]) -> (f64, f64) {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

impl Results {
    fn load(file: &'static str) -> Self {
        Results {
            file,
            text: super::read(file),
        }
    }

    /// The figure right after the last of `markers`, each looked for after
    /// the one before.
    fn at(&self, markers: &[&str]) -> String {
        let mut at = 0;
        for m in markers {
            at += self.text[at..]
                .find(m)
                .unwrap_or_else(|| panic!("{}: no {m:?} after {markers:?}", self.file))
                + m.len();
        }
        number(&self.text[at..]).unwrap_or_else(|| panic!("{}: no figure after {markers:?}", self.file))
    }

    /// The cells of the first table row after `after` whose first cell is
    /// `first`, each a figure where it starts with one.
    fn row(&self, after: &str, first: &str) -> Vec<String> {
        let start = self
            .text
            .find(after)
            .unwrap_or_else(|| panic!("{}: no {after:?}", self.file));
        let line = self.text[start..]
            .lines()
            .find(|l| l.starts_with(&format!("| {first} |")))
            .unwrap_or_else(|| panic!("{}: no row {first:?} after {after:?}", self.file));
        line.trim_matches('|')
            .split('|')
            .map(|c| number(c.trim()).unwrap_or_else(|| c.trim().to_string()))
            .collect()
    }

    /// Column `col` of the rows `firsts` of the table after `after`.
    fn column(&self, after: &str, firsts: &[&str], col: usize) -> Vec<f64> {
        firsts.iter().map(|f| value(&self.row(after, f)[col])).collect()
    }
}

/// `page`, its lines joined by single spaces, so a phrase may wrap.
fn page(rel: &str) -> String {
    super::read(rel).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn figures_the_docs_cite_are_the_committed_results() {
    let latest = Results::load("bench/results/latest.md");
    let interposer = Results::load("bench/results/interposer.md");
    let python = Results::load("bench/results/python.md");
    let probe: serde_json::Value = serde_json::from_str(&super::read("bench/results/latest.json")).unwrap();
    let probe = &probe["registration"]["validation_probe"];
    let ns = |k: &str| probe[k].as_f64().unwrap_or_else(|| panic!("latest.json: no {k}"));
    let mut cites: Vec<(&str, String)> = Vec::new();

    // `nixl-agent check`, section `check`.
    let target = "check with the loopback transfer ≤ 2 s (median wall) | ";
    let (check, bare) = (latest.at(&[target]), latest.at(&[target, " s ("]));
    let adds = latest.at(&[target, "--no-transfer: "]).replace('+', "");
    let with = latest.row("`nixl-agent check --json`", "with the loopback transfer (default)");
    cites.extend([
        (
            "README.md",
            format!("With the loopback it takes {check} s on a 2-core VM ({bare} s with `--no-transfer`"),
        ),
        (
            "docs/check.md",
            format!("With the loopback it takes {check} s on this 2-core VM ({bare} s with `--no-transfer`"),
        ),
        (
            "docs/performance.md",
            format!(
                "takes {check} s with its loopback transfer and {bare} s with `--no-transfer` (medians of 7 fresh processes each): the transfer adds {adds} s ({}×)",
                with[2]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "The loopback's own time is {} s, most of it creating the two UCX backends (in parallel threads); its 16 MiB WRITE ran at {} GB/s and READ at {} GB/s",
                fixed(value(&with[3]), 2),
                with[4],
                with[5]
            ),
        ),
    ]);

    // The canary's round, section `canary`.
    let warm = latest.row("Canary round", "warm round (wall: median; CPU: mean)");
    let open = latest.row("Canary round", "open both agents (cold)");
    let first = latest.row("Canary round", "first round (cold)");
    let share = latest.at(&["One warm round a 60 s interval: "]);
    let idle = latest.at(&["Idle with the loopback open over 5 s: "]);
    let idle_cpu = value(&latest.at(&["Idle with the loopback open over 5 s: ", " core ("]));
    cites.extend([
        (
            "docs/check.md",
            format!("{} ms of CPU a round, {share} % of a core at a 60 s interval", warm[2]),
        ),
        (
            "docs/performance.md",
            format!(
                "costs {} ms of CPU warm ({} ms wall: the poll spins, and the round fills and compares its buffers), which at a 60 s interval is {share} % of one core",
                fixed(value(&warm[2]), 1),
                fixed(value(&warm[1]), 1)
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "opening the two agents takes {} ms wall and {} ms of CPU (about 80 warm rounds' worth, paid once) and the first round {} ms ({}× a",
                open[1],
                open[2],
                first[1],
                fixed(value(&first[3]), 1)
            ),
        ),
        (
            "docs/performance.md",
            format!("the process used {} ms of CPU in 5 s ({idle} % of a core)", fixed(idle_cpu, 2)),
        ),
    ]);

    // Scrape targets.
    let p99 = |e: &str| fixed(value(&latest.at(&[&format!("{e} p99 ≤ 2 ms at 64 connections | ")])), 1);
    let ratio = |e: &str| {
        let t = format!("{e} throughput ≥ NIXL exporter's /metrics (64 connections) | ");
        fixed(value(&latest.at(&[&t, " req/s ("])), 1)
    };
    cites.push((
        "docs/performance.md",
        format!(
            "missed ({} ms for /metrics, {} ms for /readyz, the client's one thread and the server on 2 cores); the throughput ratios against NIXL's own exporter held ({}× and {}×)",
            p99("/metrics"),
            p99("/readyz"),
            ratio("/metrics"),
            ratio("/readyz")
        ),
    ));

    // Registration and deregistration.
    let reg = |n: &str| latest.row("Registration, ms", n);
    let cold = |col| latest.column("Cold first registration", &["1", "64", "1024", "4096"], col);
    let dereg = |n: &str| latest.row("Deregistration, ms", n);
    let k = |who: &str| {
        let r = latest.row("Growth with N", who);
        (value(&r[3]), value(&r[4]))
    };
    let (d4, d16) = (dereg("4096"), dereg("16384"));
    let (r1, r64, r1k, r4k, r16k) = (reg("1"), reg("64"), reg("1024"), reg("4096"), reg("16384"));
    let ((py_lo, py_hi), (capi_lo, capi_hi)) = (span(&cold(7)), span(&cold(8)));
    let cold16 = latest.row("Cold first registration", "16384");
    cites.extend([
        (
            "docs/performance.md",
            format!("the drain of 4,096 regions took **{} ms**", d4[3]),
        ),
        (
            "docs/performance.md",
            format!(
                "**{}×** NIXL's batched C API call ({} ms) and {}× NIXL's Python API; at 16,384 regions {} ms, {}× and {}×.",
                d4[9], d4[6], d4[8], d16[3], d16[9], d16[8]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "The agent's deregistration grows as k ≈ {}–{}, the batched C API call as {}–{} and Python as {}–{}",
                fixed(k("agent").0, 2),
                fixed(k("agent").1, 2),
                fixed(k("batched_capi").0, 2),
                fixed(k("batched_capi").1, 2),
                fixed(k("python").0, 2),
                fixed(k("python").1, 2)
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "still reads k ≈ {}–{})",
                fixed(k("raw").0, 1),
                fixed(k("raw").1, 1)
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "warm registration of 4,096 regions took **{} ms** (14.4 ms before batching): **{}×** the batched C API call and {}× Python; at 1,024, {}× and {}×.",
                r4k[2], r4k[9], r4k[8], r1k[9], r1k[8]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "{}× the C API call at N = 64 ({} against {} ms) and {}× at N = 1.",
                r64[9], r64[2], r64[5], r1[9]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "{}–{}× Python and {}–{}× the C API call at N ≤ 4,096; at 16,384, {}× and {}×,",
                fixed(py_lo, 2),
                fixed(py_hi, 2),
                fixed(capi_lo, 2),
                fixed(capi_hi, 2),
                cold16[7],
                cold16[8]
            ),
        ),
        (
            "docs/metrics.md",
            format!("16,384 regions {} ms", r16k[2]),
        ),
    ]);

    // Observe mode: the recording, the embedding, the clock.
    let alone = |n: &str| latest.row("The recording alone", n);
    let (a1, a64, a16k) = (alone("1"), alone("64"), alone("16384"));
    let all = ["1", "64", "1024", "4096", "16384"];
    let (ns_lo, ns_hi) = span(&latest.column("Embedding, ms", &all, 4));
    let (x_lo, x_hi) = span(&latest.column("Embedding, ms", &all, 3));
    let per_call: Vec<f64> = all[1..]
        .iter()
        .map(|n| value(&latest.row("Embedding, ms", n)[1]) * 1000.0 / value(n))
        .collect();
    let (c_lo, c_hi) = span(&per_call);
    let clock = latest.at(&["two clock reads (its start and its elapsed time) take "]);
    let cold_observe = latest.at(&["direct nixl-sys cold (fresh processes, largest N) | "]);
    let share_of_call = latest.at(&["of which two clock reads ", " ns, "]);
    cites.extend([
        (
            "docs/performance.md",
            format!(
                "a call of 64 regions costs {} ns ({} ns a region) and one of 16,384 regions {} µs ({} ns a region)",
                a64[1],
                a64[2],
                fixed(value(&a16k[1]) / 1000.0, 1),
                a16k[2]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "+{}–{} ns in place in this run against NIXL's own {}–{} µs a call, {}–{}× warm",
                tens(ns_lo),
                tens(ns_hi),
                fixed(c_lo, 1),
                fixed(c_hi, 1),
                fixed(x_lo, 2),
                fixed(x_hi, 2)
            ),
        ),
        (
            "docs/performance.md",
            format!("cold at 16,384 it read {cold_observe}×"),
        ),
        (
            "docs/performance.md",
            format!(
                "a call's recording alone is {} ns, of which the two clock reads any timed recording needs (its start and its elapsed time) are {clock} ns, {share_of_call} % of NIXL's call",
                a1[1]
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "({} ns for the system call on this VM, {} ns for the kept reading",
                fixed(ns("getrlimit_ns"), 0),
                fixed(ns("memlock_warm_ns"), 0)
            ),
        ),
        (
            "docs/python.md",
            format!(
                "`getrlimit`, {} µs on the VM of docs/performance.md's latest run",
                fixed(ns("getrlimit_ns") / 1000.0, 2)
            ),
        ),
    ]);

    // Transfers, publishing, the pod directory.
    let post = latest.row("Transfers (", "post_xfer_req, 4 KiB, ns");
    let whole = latest.row("Transfers (", "64 MiB WRITE: create, post, poll to DONE, release, ms");
    let published = "One observed registration call (64 regions, no NIXL call): ";
    let watch = latest.at(&["`nixl-agent pod` takes "]);
    cites.extend([
        (
            "docs/performance.md",
            format!(
                "a post adds about {} µs to `post_xfer_req` ({} against {} ns for 4 KiB in this run",
                fixed((value(&post[2]) - value(&post[1])) / 1000.0, 2),
                thousands(value(&post[2])),
                thousands(value(&post[1]))
            ),
        ),
        (
            "docs/performance.md",
            format!("A 64 MiB WRITE, whole, read {}× the direct one", whole[3]),
        ),
        (
            "docs/performance.md",
            format!(
                "read {}× a recording that does not publish in this run ({} against {} ns a call of 64 regions)",
                latest.at(&[published, " not publishing ("]),
                latest.at(&[published]),
                latest.at(&[published, " directory, "])
            ),
        ),
        (
            "docs/performance.md",
            format!(
                "**{watch} % of a core** over 20 s of watching (target ≤ 5 %); its first view, reading all 1 GiB once, came {} s after start",
                latest.at(&["its first view after "])
            ),
        ),
        (
            "docs/kubernetes.md",
            format!("do not change costs the sidecar {} % of a core", fixed(value(&watch), 1)),
        ),
    ]);

    // The interposer (section `interposer`).
    let call = |name: &str| {
        let row = interposer.row("The interposer", name);
        fixed(value(&row[3]), 0)
    };
    cites.push((
        "docs/instrument.md",
        format!(
            "a post about +{} ns and a poll about +{} ns (targets +100 ns)",
            call("C++: postXferReq, 1 × 64 B WRITE reposted (median of 2,000 in the process)"),
            call("C++: getXferStatus of a done request (mean of 200000 in one loop)")
        ),
    ));

    // `make bench-python`.
    let pair = |n: &str| python.row("register_memory + deregister_memory", n);
    let (p1, p64, p1k, p4k, p16k) = (pair("1"), pair("64"), pair("1024"), pair("4096"), pair("16384"));
    let only = |n: &str| python.row("The instrumentation alone", n);
    let (o_lo, o_hi) = span(&python.column("The instrumentation alone", &["1024", "4096", "16384"], 2));
    let (dr_lo, dr_hi) = span(&python.column(
        "register_memory + deregister_memory",
        &["64", "1024", "4096", "16384"],
        7,
    ));
    let array = |n: &str| python.row("N×3 uint64 descriptor array", n);
    let first_call = python.at(&[
        "The first register_memory of a fresh process",
        "\n|---",
        "\n| ",
        " | ",
        " | ",
    ]);
    let start = python.row("Interpreter start-up", "`pass`");
    let path = |call: &str| python.row("The data path", call);
    let poll = path("check_xfer_state, transfer in flight (ns per call)");
    let shm = path("transfer(), 4 KiB WRITE, loopback, shared memory (ns per call)");
    let tcp = path("transfer(), 4 KiB WRITE, to the peer, TCP (ns per call)");
    let big = path("64 MiB WRITE to the peer: create, post, poll to DONE, release (ms)");
    let descs = path("get_xfer_descs of a 4,096×3 array, loopback (µs)");
    let init = path("initialize_xfer over two 4,096-descriptor lists, loopback (µs)");
    let request = path("the request whole: two get_xfer_descs + initialize_xfer, loopback (µs)");
    let prepped = path("make_prepped_xfer of 4,096 indices, loopback (µs)");
    let us = |f: &str| fixed(value(f), 0);
    cites.extend([
        (
            "docs/python.md",
            format!("1,024-region registration took {} µs in this run", us(&p1k[1])),
        ),
        (
            "docs/python.md",
            format!("**met** ({} µs warm)", fixed(value(&p1[4]), 1)),
        ),
        (
            "docs/python.md",
            format!(
                "({}× at 64, {}× at 1,024, {}× at 4,096, {}× at 16,384;",
                p64[3], p1k[3], p4k[3], p16k[3]
            ),
        ),
        (
            "docs/python.md",
            format!(
                "costs {}–{} ns a region from N = 1,024 on and {} µs a call of 64 ({} µs fixed",
                fixed(o_lo, 0),
                fixed(o_hi, 0),
                fixed(value(&only("64")[1]), 1),
                fixed(value(&only("1")[1]), 1)
            ),
        ),
        (
            "docs/python.md",
            format!("Deregistration: {}–{}×.", fixed(dr_lo, 2), fixed(dr_hi, 2)),
        ),
        (
            "docs/python.md",
            format!(
                "at 1,024 ({}×, +{} ns a region) and met at 16,384 ({}×)",
                array("1024")[3],
                array("1024")[4],
                array("16384")[3]
            ),
        ),
        (
            "docs/python.md",
            format!(
                "(bare {} µs here against {} µs for the same regions as tuples)",
                us(&array("1024")[1]),
                us(&p1k[1])
            ),
        ),
        ("docs/python.md", format!("**met** ({first_call}×;")),
        ("docs/python.md", format!("**met** (a pure-Python finder, {} ms;", start[3])),
        (
            "docs/python.md",
            format!("`initialize_xfer` is **{}×** bare", init[4]),
        ),
        (
            "docs/python.md",
            format!(
                "into lists of equal descriptors is **{}×** ({} µs, counted",
                prepped[4], prepped[3]
            ),
        ),
        (
            "docs/python.md",
            format!("`get_xfer_descs` of an N×3 array: **{}×** ({} µs)", descs[4], descs[3]),
        ),
        (
            "docs/python.md",
            format!("SGLang's request whole (two lists and `initialize_xfer`) is **{}×** bare", request[4]),
        ),
        (
            "docs/python.md",
            format!("**met** ({} ns, within the spread", poll[3].replace('-', "−")),
        ),
        (
            "docs/python.md",
            format!(
                "**missed** ({} ns on shared memory in this run, +450–830 ns in other runs; {} ns to the peer over TCP)",
                shm[3], tcp[3]
            ),
        ),
        (
            "docs/python.md",
            format!("A 64 MiB WRITE loop ≤ 1.02× bare: **met** ({}×", big[4]),
        ),
    ]);

    let wrong: Vec<String> = cites
        .iter()
        .filter(|(p, phrase)| !page(p).contains(phrase.as_str()))
        .map(|(p, phrase)| format!("{p} does not say: {phrase}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "figures that are not the committed results' (bench/results/):\n{}",
        wrong.join("\n")
    );
    assert!(cites.len() > 40, "{} figures checked", cites.len());
}
