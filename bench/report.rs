//! The results: targets judged against same-run peers, the printed tables
//! (Markdown, ready for docs/performance.md) and the JSON document.

use crate::common::Machine;
use crate::registration::{self, Report as Registration};
use crate::sections::{IdleReport, MemoryRow, PodReport, ReadyReport, ScrapeReport};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub schema: u32,
    pub generated_unix: u64,
    pub smoke: bool,
    pub wall_seconds: f64,
    pub machine: Machine,
    pub registration: Option<Registration>,
    pub scrape: Option<ScrapeReport>,
    pub pod: Option<PodReport>,
    pub memory: Option<Vec<MemoryRow>>,
    pub time_to_ready: Option<ReadyReport>,
    pub idle_cpu: Option<IdleReport>,
    pub embedding: Option<crate::embedding::Report>,
    pub transfers: Option<crate::transfers::Report>,
    pub check: Option<crate::check::CheckReport>,
    pub canary: Option<crate::check::CanaryReport>,
    pub interposer: Option<crate::interposer::Report>,
    pub targets: Vec<Target>,
    /// Sections that could not run, and why.
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub id: String,
    pub target: String,
    pub measured: String,
    /// None when the run did not measure it.
    pub met: Option<bool>,
    /// The status to print when it is not plain met/missed (a row whose
    /// spread is wider than its target: not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

fn target(id: &str, what: &str, measured: String, met: Option<bool>) -> Target {
    Target {
        id: id.into(),
        target: what.into(),
        measured,
        met,
        verdict: None,
    }
}

/// The worst ratio `num/den` over the rows with `n` in range, and where.
fn worst(
    reg: &Registration,
    num: &str,
    den: &str,
    max_n: usize,
    f: fn(&registration::Timing) -> f64,
) -> Option<(f64, usize)> {
    worst_in(reg, num, den, 0..=max_n, f)
}

/// The same over the rows with `n ≥ min_n`.
fn worst_from(
    reg: &Registration,
    num: &str,
    den: &str,
    min_n: usize,
    f: fn(&registration::Timing) -> f64,
) -> Option<(f64, usize)> {
    worst_in(reg, num, den, min_n..=usize::MAX, f)
}

fn worst_in(
    reg: &Registration,
    num: &str,
    den: &str,
    range: std::ops::RangeInclusive<usize>,
    f: fn(&registration::Timing) -> f64,
) -> Option<(f64, usize)> {
    reg.rows
        .iter()
        .filter(|r| range.contains(&r.n))
        .filter_map(|r| Some((f(r.contenders.get(num)?) / f(r.contenders.get(den)?), r.n)))
        .filter(|(x, _)| x.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// What the agent's warm registration at `n` is made of, against `peer`'s call,
/// from the same run: NIXL's one list call through the agent's registrar
/// alone (`agent_group_only`), the driver around it (`agent_novalidate`
/// minus that: events, recording, log lines, the drain's start) and
/// validation (`agent` minus `agent_novalidate`); `allowed` is the
/// target's ratio. Empty without the diagnostic contender.
fn split(reg: &Registration, n: usize, peer: &str, allowed: f64) -> String {
    let get = |who: &str| reg.get(n, who).map(|t| t.register_ms);
    let (Some(peer_ms), Some(agent), Some(novalidate), Some(alone)) = (
        get(peer),
        get("agent"),
        get("agent_novalidate"),
        get("agent_group_only"),
    ) else {
        return String::new();
    };
    let us = |ms: f64| ms * 1000.0;
    format!(
        ": the peer {:.0} µs, so the target leaves the agent {:+.0} µs; the agent's own list call {:.0} µs \
         ({:.2}×), the driver around it {:+.0} µs (events, recording, log lines, the drain's start), validation {:+.0} µs",
        us(peer_ms),
        us(peer_ms) * (allowed - 1.0),
        us(alone),
        alone / peer_ms,
        us(novalidate - alone),
        us(agent - novalidate),
    )
}

/// How far apart the fresh processes of a cold row's two contenders were:
/// a cold first registration moves with the memory a process is given,
/// so a median of a few can land on either side of a ratio.
fn spread(reg: &Registration, n: usize, peer: &str) -> String {
    let range = |who: &str| {
        let v = &reg.get(n, who)?.cold_register_samples_ms;
        let lo = v.iter().copied().reduce(f64::min)?;
        let hi = v.iter().copied().reduce(f64::max)?;
        Some(format!("{}–{} ms", f(lo), f(hi)))
    };
    match (range("agent"), range(peer)) {
        (Some(a), Some(p)) => format!(" (fresh processes: the agent's {a}, the peer's {p})"),
        _ => String::new(),
    }
}

pub fn judge(r: &Results) -> Vec<Target> {
    let mut t = Vec::new();
    if let Some(reg) = &r.registration {
        for (who, label) in [("agent", "validation on"), ("agent_novalidate", "validation off")] {
            let w = worst(reg, who, "raw", usize::MAX, |t| t.register_ms);
            t.push(target(
                &format!("registration.{who}_vs_raw"),
                &format!("agent ({label}) registration ≤ 1.05× raw nixl-sys at every N"),
                w.map_or("not measured".into(), |(x, n)| {
                    let split = if who == "agent" {
                        split(reg, n, "raw", 1.05)
                    } else {
                        String::new()
                    };
                    format!("worst {x:.2}× at N={n}{split}")
                }),
                w.map(|(x, _)| x <= 1.05),
            ));
            let w = worst(reg, who, "python", 4096, |t| t.register_ms);
            t.push(target(
                &format!("registration.{who}_vs_python"),
                &format!("agent ({label}) registration ≤ Python nixl API at N ≤ 4096"),
                w.map_or("not measured".into(), |(x, n)| format!("worst {x:.2}× at N={n}")),
                w.map(|(x, _)| x <= 1.0),
            ));
        }
        // NIXL's own batched call, the peer users compare against: one
        // registerMem / deregisterMem of the whole list, through the C API
        // and through the Python API, in the same run.
        for (peer, name) in [
            ("batched_capi", "NIXL's batched C API call"),
            ("python", "NIXL's Python API"),
        ] {
            let w = worst_from(reg, "agent", peer, 64, |t| t.register_ms);
            t.push(target(
                &format!("registration.agent_vs_{peer}_warm"),
                &format!("agent (validation on) warm registration ≤ 1.05× {name} at N ≥ 64"),
                w.map_or("not measured".into(), |(x, n)| {
                    format!("worst {x:.2}× at N={n}{}", split(reg, n, peer, 1.05))
                }),
                w.map(|(x, _)| x <= 1.05),
            ));
            let w = worst_from(reg, "agent", peer, 64, |t| t.cold_register_ms.unwrap_or(f64::NAN));
            t.push(target(
                &format!("registration.agent_vs_{peer}_cold"),
                &format!("agent (validation on) cold registration ≤ 1.10× {name} at N ≥ 64"),
                w.map_or("not measured".into(), |(x, n)| {
                    format!("worst {x:.2}× at N={n}{}", spread(reg, n, peer))
                }),
                w.map(|(x, _)| x <= 1.10),
            ));
            // At 4096, or the largest N measured below it (smoke runs).
            let n = reg.rows.iter().map(|r| r.n).filter(|&n| n <= 4096).max();
            let ratio = n.and_then(|n| Some((reg.get(n, "agent")?.deregister_ms / reg.get(n, peer)?.deregister_ms, n)));
            t.push(target(
                &format!("deregistration.agent_vs_{peer}_4096"),
                &format!("agent drain of 4096 regions ≤ 1.5× {name}"),
                ratio.map_or("not measured".into(), |(x, n)| format!("{x:.2}× at N={n}")),
                ratio.map(|(x, _)| x <= 1.5),
            ));
        }
    }
    if let Some(s) = &r.scrape {
        let nixl = s.nixl_metrics.as_ref();
        for (label, res) in [("metrics", &s.agent_metrics), ("readyz", &s.agent_readyz)] {
            let mut measured = match nixl {
                Some(n) => format!("{:.0} vs {:.0} req/s ({:.2}×)", res.rps, n.rps, res.rps / n.rps),
                None => format!("{:.0} req/s; NIXL exporter unavailable", res.rps),
            };
            if let (Some(n), "metrics") = (nixl, label) {
                let c = &s.agent_metrics_close;
                measured.push_str(&format!(
                    "; both with a new connection per request: {:.0} ({:.2}×)",
                    c.rps,
                    c.rps / n.rps
                ));
            }
            t.push(target(
                &format!("scrape.{label}_throughput"),
                &format!("/{label} throughput ≥ NIXL exporter's /metrics (64 connections)"),
                measured,
                nixl.map(|n| res.rps >= n.rps),
            ));
            t.push(target(
                &format!("scrape.{label}_p99"),
                &format!("/{label} p99 ≤ 2 ms at 64 connections"),
                format!("{:.2} ms", res.p99_ms),
                Some(res.p99_ms <= 2.0),
            ));
        }
    }
    if let Some(rows) = &r.memory {
        for m in rows {
            t.push(target(
                &format!("memory.{}", m.plan),
                &format!("agent RSS − bare nixl-sys RSS ≤ 8 MiB ({})", m.plan),
                format!("{:.1} MiB", m.delta_rss_mib),
                Some(m.delta_rss_mib <= 8.0),
            ));
        }
    }
    if let Some(ttr) = &r.time_to_ready {
        t.push(target(
            "time_to_ready",
            "time to ready − raw (agent + backend + registration) ≤ 20 ms",
            format!("{:+.1} ms", ttr.delta_ms),
            Some(ttr.delta_ms <= 20.0),
        ));
    }
    if let Some(e) = &r.embedding {
        let worst = e
            .rows
            .iter()
            .filter(|row| row.contender == "observe" && row.n >= 64)
            .filter_map(|row| Some((row.register_ms / e.get(row.n, "direct")?.register_ms, row.n)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let max = e.rows.iter().map(|r| r.n).max().unwrap_or(0);
        let cold = e
            .get(max, "observe")
            .and_then(|o| o.cold_register_ms)
            .zip(e.get(max, "direct").and_then(|d| d.cold_register_ms));
        t.push(target(
            "embedding.observe_cold",
            "observe mode's cold first registration ≤ 1.10× direct nixl-sys cold (fresh processes, largest N)",
            cold.map_or("not measured".into(), |(o, d)| {
                format!(
                    "{:.2}× at N={max}: NIXL's first calls of one descriptor {:.0} ns each, the recording {:+.0} ns a call",
                    o / d,
                    d * 1e6 / max as f64,
                    (o - d) * 1e6 / max as f64
                )
            }),
            cold.map(|(o, d)| o / d <= 1.10),
        ));
        t.push(target(
            "embedding.observe_vs_direct",
            "observe mode warm registration ≤ 1.10× direct nixl-sys at N ≥ 64",
            worst.map_or("not measured".into(), |(x, n)| {
                // What the ratio is made of: NIXL's own call of one
                // descriptor, the recording on its own, and the two clock
                // reads no timed recording can do without.
                let direct_ns = e.get(n, "direct").map_or(f64::NAN, |d| d.register_ms * 1e6 / n as f64);
                let alone = e
                    .recording
                    .iter()
                    .find(|r| r.n == 1)
                    .map_or(f64::NAN, |r| r.ns_per_call);
                format!(
                    "worst {x:.2}× at N={n}: NIXL's call of one descriptor {direct_ns:.0} ns, the recording {:+.0} ns \
                     in place ({alone:.0} ns alone, of which two clock reads {:.0} ns, {:.1} % of NIXL's call)",
                    (x - 1.0) * direct_ns,
                    e.clock_pair_ns,
                    100.0 * e.clock_pair_ns / direct_ns
                )
            }),
            worst.map(|(x, _)| x <= 1.10),
        ));
        let added = e
            .get(1, "observe")
            .zip(e.get(1, "direct"))
            .map(|(o, d)| (o.register_ms - d.register_ms) * 1000.0);
        t.push(target(
            "embedding.observe_added_n1",
            "observe mode adds ≤ 1 µs to one registration call (N = 1, warm)",
            added.map_or("not measured".into(), |us| format!("{us:+.2} µs")),
            added.map(|us| us <= 1.0),
        ));
        let rec = e
            .recording
            .iter()
            .filter(|r| r.n >= 64)
            .max_by(|a, b| a.ns_per_region.total_cmp(&b.ns_per_region));
        t.push(target(
            "embedding.recording_per_region",
            "observe mode records a call of N regions at ≤ 50 ns a region (warm, N ≥ 64, no NIXL call)",
            rec.map_or("not measured".into(), |r| {
                format!(
                    "worst {:.1} ns a region at N={} ({:.0} ns a call)",
                    r.ns_per_region, r.n, r.ns_per_call
                )
            }),
            rec.map(|r| r.ns_per_region <= 50.0),
        ));
        t.push(target(
            "embedding.observer_rss",
            "an embedding process grows by ≤ 8 MiB (nixl-agent's own memory, no second UCX context)",
            format!("{:+.0} KiB", e.observer_rss_kib),
            Some(e.observer_rss_kib <= 8192.0),
        ));
    }
    if let Some(x) = &r.transfers {
        let added = x.post_ns.1 - x.post_ns.0;
        t.push(target(
            "transfers.post_added",
            "observe mode adds ≤ 1 µs to post_xfer_req (4 KiB)",
            format!("{added:+.0} ns ({:.0} vs {:.0} ns)", x.post_ns.1, x.post_ns.0),
            Some(added <= 1000.0),
        ));
        t.push(target(
            "transfers.write_64mib",
            "a 64 MiB WRITE (create, post, poll to DONE, release) observed ≤ 1.02× direct nixl-sys",
            format!("{:.3}× (median of paired runs)", x.cycle_big_paired_ratio),
            Some(x.cycle_big_paired_ratio <= 1.02),
        ));
    }
    if let Some(p) = &r.pod {
        let ratio = p.register_ns_publishing / p.register_ns_plain;
        t.push(target(
            "pod.publishing_free",
            "publishing to a pod directory adds nothing to the registration path (≤ 1.05× a recording that does not publish)",
            format!(
                "{ratio:.2}× ({:.0} ns vs {:.0} ns a call of 64 regions)",
                p.register_ns_publishing, p.register_ns_plain
            ),
            Some(ratio <= 1.05),
        ));
        let d = &p.big_dir;
        t.push(target(
            "pod.big_directory_cpu",
            "a directory of 256 × 4 MiB rank files costs `nixl-agent pod` ≤ 5 % of a core",
            format!(
                "{:.2} % of a core ({} × {} MiB, watched {:.0} s; first view after {:.1} s)",
                d.cpu_percent,
                d.files,
                d.file_bytes >> 20,
                d.seconds,
                d.first_view_s
            ),
            Some(d.cpu_percent <= 5.0),
        ));
    }
    if let Some(c) = &r.check {
        t.push(target(
            "check.loopback_2s",
            "check with the loopback transfer ≤ 2 s (median wall)",
            format!(
                "{:.2} s ({:.2} s with --no-transfer: {:+.2} s)",
                c.with_transfer_s, c.without_transfer_s, c.added_s
            ),
            Some(c.with_transfer_s <= 2.0),
        ));
    }
    if let Some(c) = &r.canary {
        t.push(target(
            "canary.cpu_60s",
            "the canary's transfer adds ≤ 1 % of one core at a 60 s interval",
            format!("{:.4} % ({:.0} µs CPU a round)", c.pct_at_60s, c.cpu_us_per_round),
            Some(c.pct_at_60s <= 1.0),
        ));
    }
    if let Some(x) = &r.interposer {
        for row in x.rows.iter().filter(|r| r.target.is_some()) {
            let (what, measured) = interposer_target(row);
            t.push(Target {
                id: format!("interposer.{}", row.id),
                target: what,
                measured,
                met: match row.verdict.as_str() {
                    "met" => Some(true),
                    v if v.starts_with("missed") => Some(false),
                    _ => None,
                },
                verdict: Some(row.verdict.clone()),
            });
        }
    }
    if let Some(idle) = &r.idle_cpu {
        t.push(target(
            "idle_cpu",
            "idle CPU with one scrape a second ≤ 0.5 % of a core",
            format!("{:.3} %", idle.agent_pct),
            Some(idle.agent_pct <= 0.5),
        ));
    }
    t
}

fn f(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

/// A judged interposer row as a target: what it asks, what was measured.
fn interposer_target(row: &crate::interposer::Row) -> (String, String) {
    let t = row.target.unwrap_or(f64::NAN);
    if row.unit == "ratio" {
        (
            format!("{} instrumented ≤ {t:.2}× bare", row.what),
            format!(
                "{:.3}× (bare/bare spread {:.3}..{:.3})",
                row.measured, row.noise_p25, row.noise_p75
            ),
        )
    } else {
        (
            format!("{} instrumented ≤ +{t:.0} ns over bare", row.what),
            format!(
                "{:+.1} ns (bare/bare spread {:+.1}..{:+.1} ns)",
                row.measured, row.noise_p25, row.noise_p75
            ),
        )
    }
}

/// The interposer's table (bench/interposer.rs).
fn render_interposer(o: &mut String, x: &crate::interposer::Report) {
    let _ = writeln!(
        o,
        "The interposer (plain programs, bare vs `nixl-agent instrument --`, release; {} samples, each three fresh processes \
         — bare A, instrumented, bare B — in turning order; figure: median over samples of instrumented vs bare A; \
         spread: 25th..75th percentile of bare B vs bare A, NIXL's own noise):\n",
        x.samples
    );
    let _ = writeln!(
        o,
        "| call | bare | instrumented | measured | per-pair min..max | bare/bare spread | target | verdict |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---|");
    for r in &x.rows {
        let (val, range, noise, target) = if r.unit == "ratio" {
            (
                format!("{:.3}×", r.measured),
                format!("{:.3}..{:.3}", r.pair_min, r.pair_max),
                format!("{:.3}..{:.3}", r.noise_p25, r.noise_p75),
                r.target.map_or("–".into(), |t| format!("≤ {t:.2}×")),
            )
        } else {
            (
                format!("{:+.1} ns", r.measured),
                format!("{:+.0}..{:+.0}", r.pair_min, r.pair_max),
                format!("{:+.1}..{:+.1}", r.noise_p25, r.noise_p75),
                r.target.map_or("–".into(), |t| format!("≤ +{t:.0} ns")),
            )
        };
        let ns = |v: f64| {
            if r.unit == "ratio" {
                format!("{} ms", f(v / 1e6))
            } else {
                format!("{} ns", f(v))
            }
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {val} | {range} | {noise} | {target} | {} |",
            r.what,
            ns(r.bare_ns),
            ns(r.instrumented_ns),
            r.verdict
        );
    }
    let _ = writeln!(
        o,
        "\nCommands (bare: the same without `NIXL_AGENT_INTERPOSER=…` and `nixl-agent instrument --`; NIXL_AGENT_LISTEN=off):\n"
    );
    for c in &x.commands {
        let _ = writeln!(o, "    {c}");
    }
    o.push('\n');
}

/// The tables, as Markdown.
pub fn render(r: &Results) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let _ = writeln!(
        o,
        "Machine: {}, {} cores, {} GiB, {}, kernel {}, NIXL {}{}.\n",
        m.cpu,
        m.cores,
        m.memory_gib,
        m.os,
        m.kernel,
        m.nixl_version,
        if m.gpu { "" } else { ", no GPU" }
    );
    if let Some(reg) = &r.registration {
        let g = |n: usize, who: &str, reg_side: bool| {
            reg.get(n, who)
                .map(|t| if reg_side { t.register_ms } else { t.deregister_ms })
        };
        let _ = writeln!(
            o,
            "Registration, ms (median of {}; N × {} KiB DRAM through UCX, fresh mapping each time):\n",
            reg.reps,
            reg.region_size >> 10
        );
        let _ = writeln!(o, "| N | raw nixl-sys | agent | agent, no validation | Python API | batched C API | agent / raw | agent, no val. / raw | agent / Python | agent / batched |");
        let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &reg.rows {
            let n = row.n;
            let c = |w| g(n, w, true);
            let _ = writeln!(
                o,
                "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c("raw").map_or("–".into(), f),
                c("agent").map_or("–".into(), f),
                c("agent_novalidate").map_or("–".into(), f),
                c("python").map_or("–".into(), f),
                c("batched_capi").map_or("–".into(), f),
                ratio(c("agent"), c("raw")),
                ratio(c("agent_novalidate"), c("raw")),
                ratio(c("agent"), c("python")),
                ratio(c("agent"), c("batched_capi")),
            );
        }
        let _ = writeln!(
            o,
            "\nCold first registration, ms (the first registration in a fresh process, median over fresh processes):\n"
        );
        let _ = writeln!(o, "| N | raw nixl-sys | agent | agent, no validation | Python API | batched C API | agent / raw | agent / Python | agent / batched |");
        let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &reg.rows {
            let c = |w: &str| row.contenders.get(w).and_then(|t| t.cold_register_ms);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.n,
                c("raw").map_or("–".into(), f),
                c("agent").map_or("–".into(), f),
                c("agent_novalidate").map_or("–".into(), f),
                c("python").map_or("–".into(), f),
                c("batched_capi").map_or("–".into(), f),
                ratio(c("agent"), c("raw")),
                ratio(c("agent"), c("python")),
                ratio(c("agent"), c("batched_capi")),
            );
        }
        let _ = writeln!(o, "\nDeregistration, ms (same runs):\n");
        let _ = writeln!(o, "| N | raw, registration order | raw, reverse order | agent | agent, no validation | Python API | batched C API | agent / raw | agent / Python | agent / batched |");
        let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &reg.rows {
            let n = row.n;
            let c = |w| g(n, w, false);
            let _ = writeln!(
                o,
                "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c("raw").map_or("–".into(), f),
                c("raw_reverse").map_or("–".into(), f),
                c("agent").map_or("–".into(), f),
                c("agent_novalidate").map_or("–".into(), f),
                c("python").map_or("–".into(), f),
                c("batched_capi").map_or("–".into(), f),
                ratio(c("agent"), c("raw")),
                ratio(c("agent"), c("python")),
                ratio(c("agent"), c("batched_capi")),
            );
        }
        if let Some(e) = reg.exponents.values().next() {
            let _ = writeln!(
                o,
                "\nGrowth with N (time ∝ N^k; least-squares fit over N ≥ {}, and between the two largest N):\n",
                e.fit_from_n
            );
            let _ = writeln!(
                o,
                "| contender | register k (fit) | register k (top) | deregister k (fit) | deregister k (top) |"
            );
            let _ = writeln!(o, "|---|---:|---:|---:|---:|");
            for who in registration::CONTENDERS {
                if let Some(e) = reg.exponents.get(*who) {
                    let _ = writeln!(
                        o,
                        "| {who} | {:.2} | {:.2} | {:.2} | {:.2} |",
                        e.register_fit, e.register_top, e.deregister_fit, e.deregister_top
                    );
                }
            }
        }
        o.push('\n');
    }
    if let Some(s) = &r.scrape {
        let _ = writeln!(
            o,
            "Scrape ({} concurrent connections, {:.0} s each, one client thread):\n",
            s.connections, s.seconds
        );
        let _ = writeln!(
            o,
            "| endpoint | connections | req/s | p50 ms | p99 ms | max ms | body bytes | errors |"
        );
        let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---:|---:|");
        let mut line = |name: &str, l: &crate::load::LoadResult| {
            // The server decides: NIXL's exporter closes after every response.
            let conns = if !l.keep_alive || l.reconnects as f64 > l.requests as f64 / 2.0 {
                "new per request"
            } else {
                "kept alive"
            };
            let _ = writeln!(
                o,
                "| {name} | {conns} | {:.0} | {} | {} | {} | {} | {} |",
                l.rps,
                f(l.p50_ms),
                f(l.p99_ms),
                f(l.max_ms),
                l.response_bytes,
                l.errors
            );
        };
        line("agent /metrics", &s.agent_metrics);
        line("agent /readyz", &s.agent_readyz);
        line("agent /metrics", &s.agent_metrics_close);
        match &s.nixl_metrics {
            Some(n) => line("NIXL exporter /metrics", n),
            None => {
                let _ = writeln!(
                    o,
                    "| NIXL exporter /metrics | | unavailable: {} | | | | | |",
                    s.nixl_error.clone().unwrap_or_default()
                );
            }
        }
        o.push('\n');
    }
    if let Some(p) = &r.pod {
        let _ = writeln!(
            o,
            "Pod ({} SGLang-shaped ranks, kv + aux + state each, merged by `nixl-agent pod`; {} connections kept alive, {:.0} s each):\n",
            p.ranks, p.connections, p.seconds
        );
        let _ = writeln!(o, "| endpoint | req/s | p50 ms | p99 ms | body bytes | errors |");
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
        for (name, l) in [
            (format!("pod /metrics ({} ranks)", p.ranks), &p.pod_metrics),
            ("one process's /metrics".to_string(), &p.single_metrics),
        ] {
            let _ = writeln!(
                o,
                "| {name} | {:.0} | {} | {} | {} | {} |",
                l.rps,
                f(l.p50_ms),
                f(l.p99_ms),
                l.response_bytes,
                l.errors
            );
        }
        let _ = writeln!(
            o,
            "\nOne observed registration call (64 regions, no NIXL call): {:.0} ns publishing to a pod directory, {:.0} ns not publishing ({:.2}×).\n",
            p.register_ns_publishing,
            p.register_ns_plain,
            p.register_ns_publishing / p.register_ns_plain
        );
        let d = &p.big_dir;
        let _ = writeln!(
            o,
            "A directory of {} rank files of {} MiB that do not change (dead ranks, each read once): `nixl-agent pod` takes {:.2} % of a core watching it ({:.0} s; its first view after {:.1} s).\n",
            d.files,
            d.file_bytes >> 20,
            d.cpu_percent,
            d.seconds,
            d.first_view_s
        );
    }
    if let Some(rows) = &r.memory {
        let _ = writeln!(
            o,
            "Memory (VmRSS; ready, scraped once; bare nixl-sys process holding the same registrations):\n"
        );
        let _ = writeln!(
            o,
            "| plan | agent MiB | bare nixl-sys MiB | difference MiB | private difference MiB |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|");
        for m in rows {
            let _ = writeln!(
                o,
                "| {} | {:.1} | {:.1} | {:+.1} | {:+.1} |",
                m.plan,
                m.agent_rss_kib as f64 / 1024.0,
                m.raw_rss_kib as f64 / 1024.0,
                m.delta_rss_mib,
                m.delta_private_mib
            );
        }
        o.push('\n');
    }
    if let Some(t) = &r.time_to_ready {
        let _ = writeln!(
            o,
            "Time to ready (default plan, median of {}): agent {} ms (process start → /readyz 200; its own metric says {} ms), bare nixl-sys {} ms (start → NIXL loaded, agent + UCX backend created, plan registered): difference {:+.1} ms.\n",
            t.reps,
            f(t.agent_ms),
            f(t.agent_self_reported_ms),
            f(t.raw_ms),
            t.delta_ms
        );
    }
    if let Some(i) = &r.idle_cpu {
        let _ = writeln!(
            o,
            "Idle CPU over {:.0} s, one /metrics scrape a second: agent {:.3} % of a core; bare nixl-sys (not scraped) {:.3} %; NIXL exporter process {}.\n",
            i.seconds,
            i.agent_pct,
            i.raw_pct,
            i.nixl_exporter_pct.map_or("unavailable".into(), |p| format!("{p:.3} %"))
        );
    }
    if let Some(e) = &r.embedding {
        let _ = writeln!(
            o,
            "Embedding, ms (same process and NIXL agent, {} fresh processes × {} interleaved repetitions; N × {} KiB DRAM; cold = first registration in a fresh process):\n",
            e.processes,
            e.reps,
            e.region_size >> 10
        );
        let _ = writeln!(
            o,
            "| N | direct nixl-sys | observe mode | observe / direct | recording, ns a region | direct cold | observe cold |"
        );
        let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|");
        let mut ns: Vec<usize> = e.rows.iter().map(|r| r.n).collect();
        ns.dedup();
        for n in ns {
            let (d, ob) = (e.get(n, "direct"), e.get(n, "observe"));
            // One call per region in this section: the added time a call is
            // the recording's cost a region.
            let per_call = d.zip(ob).map_or("–".into(), |(d, ob)| {
                format!("{:+.0}", (ob.register_ms - d.register_ms) * 1e6 / n as f64)
            });
            let cold = |r: Option<&crate::embedding::Row>| r.and_then(|r| r.cold_register_ms).map_or("–".into(), f);
            let _ = writeln!(
                o,
                "| {n} | {} | {} | {} | {per_call} | {} | {} |",
                d.map_or("–".into(), |r| f(r.register_ms)),
                ob.map_or("–".into(), |r| f(r.register_ms)),
                ratio(ob.map(|r| r.register_ms), d.map(|r| r.register_ms)),
                cold(d),
                cold(ob)
            );
        }
        let _ = writeln!(
            o,
            "\nRSS after the cold registration, observe-first processes minus direct-first ones: {:+.0} KiB.\n",
            e.observer_rss_kib
        );
        if !e.recording.is_empty() {
            let _ = writeln!(
                o,
                "The recording alone (one observed call of N regions, no NIXL call, warm, median):\n"
            );
            let _ = writeln!(o, "| N | ns a call | ns a region |");
            let _ = writeln!(o, "|---:|---:|---:|");
            for r in &e.recording {
                let _ = writeln!(o, "| {} | {:.0} | {:.1} |", r.n, r.ns_per_call, r.ns_per_region);
            }
            let _ = writeln!(
                o,
                "\nOf a call's recording, two clock reads (its start and its elapsed time) take {:.0} ns.",
                e.clock_pair_ns
            );
            o.push('\n');
        }
    }
    if let Some(x) = &r.transfers {
        let _ = writeln!(
            o,
            "Transfers (same process, two NIXL agents, UCX, DRAM; direct nixl-sys vs observe mode, interleaved, medians):\n"
        );
        let _ = writeln!(o, "| call | direct | observed | observed / direct |");
        let _ = writeln!(o, "|---|---:|---:|---:|");
        let _ = writeln!(
            o,
            "| post_xfer_req, 4 KiB, ns | {:.0} | {:.0} | {} |",
            x.post_ns.0,
            x.post_ns.1,
            ratio(Some(x.post_ns.1), Some(x.post_ns.0))
        );
        let _ = writeln!(
            o,
            "| 4 KiB WRITE: create, post, poll to DONE, release, ms | {} | {} | {} |",
            f(x.cycle_small_ms.0),
            f(x.cycle_small_ms.1),
            ratio(Some(x.cycle_small_ms.1), Some(x.cycle_small_ms.0))
        );
        let _ = writeln!(
            o,
            "| 64 MiB WRITE: create, post, poll to DONE, release, ms | {} | {} | {:.3}× (paired) |\n",
            f(x.cycle_big_ms.0),
            f(x.cycle_big_ms.1),
            x.cycle_big_paired_ratio
        );
    }
    if let Some(c) = &r.check {
        let _ = writeln!(
            o,
            "`nixl-agent check --json` (release binary, {} fresh processes each, alternating; median wall, process start → exit):\n",
            c.runs
        );
        let _ = writeln!(
            o,
            "| run | wall s | / no transfer | loopback's own s | 16 MiB WRITE GB/s | 16 MiB READ GB/s |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
        let _ = writeln!(
            o,
            "| with the loopback transfer (default) | {} | {} | {} | {} | {} |",
            f(c.with_transfer_s),
            ratio(Some(c.with_transfer_s), Some(c.without_transfer_s)),
            f(c.loopback_s),
            f(c.write_16mib_bps / 1e9),
            f(c.read_16mib_bps / 1e9)
        );
        let _ = writeln!(
            o,
            "| `--no-transfer` | {} | 1.00× | – | – | – |",
            f(c.without_transfer_s)
        );
        let _ = writeln!(
            o,
            "| difference: what the transfer adds | {:+.3} | | | | |\n",
            c.added_s
        );
    }
    if let Some(c) = &r.canary {
        let _ = writeln!(
            o,
            "Canary round (4 KiB × 4 and 1 MiB × 1 each way; two NIXL agents, UCX, DRAM, no progress thread, opened once; one fresh process, {} warm rounds after {} unmeasured):\n",
            c.rounds, c.warmup
        );
        let _ = writeln!(o, "| step | wall ms | CPU ms | CPU / warm round |");
        let _ = writeln!(o, "|---|---:|---:|---:|");
        let warm = c.cpu_us_per_round / 1e3;
        let _ = writeln!(
            o,
            "| open both agents (cold) | {} | {} | {} |",
            f(c.open_ms),
            f(c.open_cpu_ms),
            ratio(Some(c.open_cpu_ms), Some(warm))
        );
        let _ = writeln!(
            o,
            "| first round (cold) | {} | {} | {} |",
            f(c.first_round_ms),
            f(c.first_round_cpu_ms),
            ratio(Some(c.first_round_cpu_ms), Some(warm))
        );
        let _ = writeln!(
            o,
            "| warm round (wall: median; CPU: mean) | {} | {} | 1.00× |",
            f(c.wall_us_per_round_median / 1e3),
            f(warm)
        );
        let _ = writeln!(
            o,
            "\nOne warm round a 60 s interval: {:.4} % of one core. Idle with the loopback open over {:.0} s: {:.3} % of a core ({} ms CPU).\n",
            c.pct_at_60s,
            c.idle_seconds,
            c.idle_pct,
            f(c.idle_cpu_ms)
        );
    }
    if let Some(x) = &r.interposer {
        render_interposer(&mut o, x);
    }
    if !r.targets.is_empty() {
        let _ = writeln!(o, "| target | measured | status |");
        let _ = writeln!(o, "|---|---|---|");
        for t in &r.targets {
            let status = match (&t.verdict, t.met) {
                (Some(v), _) => v.as_str(),
                (None, Some(true)) => "met",
                (None, Some(false)) => "missed",
                (None, None) => "not measured",
            };
            let _ = writeln!(o, "| {} | {} | {status} |", t.target, t.measured);
        }
    }
    for e in &r.errors {
        let _ = writeln!(o, "\nerror: {e}");
    }
    o
}
