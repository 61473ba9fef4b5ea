//! How a check report looks: an aligned report for people (colours only on
//! a terminal), JSON for machines. The progress lines while steps run are
//! [`super::progress`]'s.

use super::progress::{plain, word};
use super::{BackendCheck, CheckOutcome, CudaCheck, GroupCheck, HostCheck, MemlockCheck, NixlCheck, Report, UcxCheck};
use super::{PeerCheck, TransferCheck, TransportSeen};
use crate::datapath::Measured;
use crate::units::format_size;

fn limit(v: Option<u64>) -> String {
    v.map_or("unlimited".to_string(), format_size)
}

pub(super) fn nixl_summary(check: &NixlCheck) -> String {
    let n = &check.runtime;
    match &n.library {
        // Loaded, but no NIXL agent could be made: say why.
        Some(lib) if check.outcome == CheckOutcome::Fail && n.error.is_some() => format!(
            "{lib} (found by {}, NIXL {}) loads, but {}{}",
            n.found_by.as_deref().unwrap_or("?"),
            n.version.as_deref().unwrap_or("version unknown"),
            n.error.as_deref().unwrap_or_default(),
            n.fix.as_deref().map(|f| format!(" — fix: {f}")).unwrap_or_default()
        ),
        Some(lib) => format!(
            "{lib} (found by {}, NIXL {}), {} plugins: {}",
            n.found_by.as_deref().unwrap_or("?"),
            n.version.as_deref().unwrap_or("version unknown"),
            n.plugins.len(),
            n.plugins.join(" ")
        ),
        None => format!(
            "{}{}; searched: {}",
            n.error.as_deref().unwrap_or("not found"),
            n.fix.as_deref().map(|f| format!("; fix: {f}")).unwrap_or_default(),
            if n.searched.is_empty() {
                "-".to_string()
            } else {
                n.searched.join(", ")
            }
        ),
    }
}

pub(super) fn backends_summary(b: &[BackendCheck]) -> String {
    b.iter()
        .map(|b| match (&b.outcome, &b.error) {
            (CheckOutcome::Ok, _) => format!("{} created in {:.0} ms", b.name, b.seconds * 1e3),
            (_, Some(e)) => format!("{} {}: {e}", b.name, b.reason.map_or("", |r| r.as_str())),
            _ => format!("{} skipped", b.name),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn ucx_summary(u: &UcxCheck) -> String {
    if u.outcome == CheckOutcome::Skip && u.facts.version.is_none() {
        return "no UCX backend".to_string();
    }
    let mods: Vec<String> = u
        .facts
        .cuda_modules
        .iter()
        .map(|(p, r)| {
            let name = p.rsplit('/').next().unwrap_or(p);
            match r {
                Ok(()) => format!("{name} loads"),
                Err(e) => format!("{name} does not load ({})", missing_lib(e)),
            }
        })
        .collect();
    let env: Vec<String> = u.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut s = format!(
        "UCX {}; CUDA modules: {}; env: {}",
        u.facts.version.as_deref().unwrap_or("version unknown"),
        if mods.is_empty() {
            "none".into()
        } else {
            mods.join(", ")
        },
        if env.is_empty() {
            "UCX_TLS/UCX_NET_DEVICES/UCX_MODULE_DIR unset".into()
        } else {
            env.join(" ")
        }
    );
    if let Some(n) = &u.note {
        s.push_str(&format!(" — {n}"));
    }
    s
}

/// "needs libcuda.so.1" from a dlerror text, else the text itself.
fn missing_lib(e: &str) -> String {
    match e.split_once(": cannot open shared object file") {
        Some((head, _)) => format!("needs {}", head.rsplit(": ").next().unwrap_or(head)),
        None => e.to_string(),
    }
}

pub(super) fn memlock_summary(m: &MemlockCheck) -> String {
    let mut s = format!(
        "soft {}, hard {}; plan DRAM {}{}",
        limit(m.soft_bytes),
        limit(m.hard_bytes),
        format_size(m.plan_dram_bytes),
        if m.cap_ipc_lock {
            "; CAP_IPC_LOCK held (limit does not apply)"
        } else {
            ""
        }
    );
    if let Some(f) = &m.fix {
        s.push_str(&format!(" — fix: {f}"));
    }
    s
}

pub(super) fn cuda_summary(c: &CudaCheck) -> String {
    if c.devices.is_empty() {
        return format!(
            "{}{}",
            c.error.as_deref().unwrap_or("no devices"),
            if c.required {
                " — the plan has VRAM groups"
            } else {
                " (no VRAM groups in the plan)"
            }
        );
    }
    c.devices
        .iter()
        .map(|d| {
            format!(
                "#{} {} {} sm_{}",
                d.ordinal,
                d.name,
                format_size(d.memory_bytes),
                d.compute_capability.replace('.', "")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn group_summary(g: &GroupCheck) -> String {
    match g.reason {
        None => format!(
            "{} descriptors, {} in {:.1} ms",
            g.descriptors,
            format_size(g.bytes),
            g.seconds * 1e3
        ),
        Some(r) if g.outcome == CheckOutcome::Skip => format!("skipped ({r})"),
        Some(r) => format!("{r}: {}", g.error.as_deref().unwrap_or("")),
    }
}

/// The host row's one line: each sub-check that is not plainly fine.
pub(super) fn host_summary(h: &HostCheck) -> String {
    let rows = super::host::summary(h);
    let notable: Vec<String> = rows
        .iter()
        .filter(|(_, o, _)| *o == CheckOutcome::Warn)
        .map(|(name, _, s)| format!("{name}: {s}"))
        .collect();
    if notable.is_empty() {
        rows.iter()
            .map(|(name, _, s)| format!("{name}: {s}"))
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        notable.join("; ")
    }
}

/// "WRITE 4KiB 21 µs" (latency), "WRITE 16MiB 5.2 ms (3.10 GB/s)".
fn figure(m: &Measured) -> String {
    let us = m.seconds * 1e6;
    let time = if us < 1000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1e3)
    };
    let op = m.op.as_str().to_uppercase();
    if m.bytes < 1 << 20 {
        return format!("{op} {} {time}", format_size(m.bytes));
    }
    format!(
        "{op} {} {time} ({:.2} GB/s)",
        format_size(m.bytes),
        m.bytes_per_second / 1e9
    )
}

fn transports(t: &[TransportSeen]) -> String {
    t.iter()
        .map(|t| {
            format!(
                "{} over {} ({})",
                t.op.as_str().to_uppercase(),
                t.lanes.join(","),
                t.scope
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn measured_line(measured: &[Measured], seen: &[TransportSeen]) -> String {
    let mut s = measured.iter().map(figure).collect::<Vec<_>>().join("; ");
    if !seen.is_empty() {
        s.push_str(&format!("; {}", transports(seen)));
    }
    s
}

pub(super) fn transfer_summary(t: &TransferCheck) -> String {
    let mut s = match (&t.error, t.reason) {
        (Some(e), Some(r)) => format!("{r}: {e}"),
        _ => format!(
            "{} in {:.0} ms: {}",
            t.backend,
            t.seconds * 1e3,
            measured_line(&t.measured, &t.transports)
        ),
    };
    if let Some(f) = &t.finding {
        s.push_str(&format!(" — {f}"));
    }
    s
}

pub(super) fn peer_summary(p: &PeerCheck) -> String {
    let mut s = format!("{} {}", p.role, p.address);
    if let Some(n) = &p.peer_agent {
        s.push_str(&format!(" (peer {n})"));
    }
    for side in &p.sides {
        s.push_str(&format!(
            "; {}: {}",
            side.who,
            measured_line(&side.measured, &side.transports)
        ));
    }
    if let (Some(r), Some(e)) = (p.reason, &p.error) {
        s.push_str(&format!("; {r}: {e}"));
    }
    if let Some(f) = &p.finding {
        s.push_str(&format!(" — {f}"));
    }
    s
}

/// The report for people.
pub fn render_human(r: &Report, color: bool) -> String {
    let mut out = format!("nixl-agent {} check\n\n", r.version);
    let rows = [
        ("NIXL runtime", r.nixl.outcome, nixl_summary(&r.nixl)),
        (
            "Backends",
            super::worst(r.backends.iter().map(|b| b.outcome)),
            backends_summary(&r.backends),
        ),
        ("UCX", r.ucx.outcome, ucx_summary(&r.ucx)),
        ("Memlock", r.memlock.outcome, memlock_summary(&r.memlock)),
        ("CUDA", r.cuda.outcome, cuda_summary(&r.cuda)),
    ];
    let host: Vec<(&str, CheckOutcome, String)> = super::host::summary(&r.host);
    let rows = rows.into_iter().chain(host);
    for (name, o, s) in rows {
        out.push_str(&format!("{:<13} {}  {s}\n", name, word(o, color)));
    }
    out.push('\n');
    let header = [
        "GROUP",
        "KIND",
        "MEM",
        "REQUIRED",
        "DESCRIPTORS",
        "BYTES",
        "TIME",
        "RESULT",
    ];
    let mut table: Vec<[String; 8]> = vec![header.map(String::from)];
    for g in &r.groups {
        table.push([
            g.name.clone(),
            g.kind.clone(),
            g.mem_type.to_string(),
            if g.required { "yes" } else { "no" }.to_string(),
            g.descriptors.to_string(),
            format_size(g.bytes),
            format!("{:.1} ms", g.seconds * 1e3),
            match g.reason {
                None => plain(g.outcome).to_string(),
                Some(reason) => format!("{} {reason}", plain(g.outcome)),
            },
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    for (i, row) in table.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c == 7 && i > 0 && color {
                line.push_str(&word(r.groups[i - 1].outcome, true).replace(plain(r.groups[i - 1].outcome), cell));
            } else {
                line.push_str(&format!("{:<w$}  ", cell, w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if !r.transfers.is_empty() || r.peer.is_some() {
        out.push('\n');
    }
    // Under the row: one line of figures and one of transports per
    // direction, aligned with the summaries.
    let indent = " ".repeat(20);
    let detail = |out: &mut String, measured: &[Measured], seen: &[TransportSeen]| {
        if !measured.is_empty() {
            out.push_str(&format!(
                "{indent}{}\n",
                measured.iter().map(figure).collect::<Vec<_>>().join("; ")
            ));
        }
        if !seen.is_empty() {
            out.push_str(&format!("{indent}{}\n", transports(seen)));
        }
    };
    for t in &r.transfers {
        let head = match (&t.error, t.reason) {
            (Some(e), Some(reason)) => format!("{reason}: {e}"),
            _ => format!("{} in {:.0} ms", t.backend, t.seconds * 1e3),
        };
        out.push_str(&format!(
            "{:<13} {}  {}: {head}\n",
            "Transfer",
            word(t.outcome, color),
            t.name
        ));
        detail(&mut out, &t.measured, &t.transports);
        if let Some(f) = &t.finding {
            out.push_str(&format!("{indent}finding: {f}\n"));
        }
    }
    if let Some(p) = &r.peer {
        let mut head = format!("{} {}", p.role, p.address);
        if let Some(n) = &p.peer_agent {
            head.push_str(&format!(" (peer {n})"));
        }
        if let (Some(reason), Some(e)) = (p.reason, &p.error) {
            head.push_str(&format!(" — {reason}: {e}"));
        }
        out.push_str(&format!("{:<13} {}  {head}\n", "Peer", word(p.outcome, color)));
        for side in &p.sides {
            out.push_str(&format!("{indent}{}:\n", side.who));
            detail(&mut out, &side.measured, &side.transports);
        }
        if let Some(f) = &p.finding {
            out.push_str(&format!("{indent}finding: {f}\n"));
        }
    }
    if let Some(u) = &r.transports_unknown {
        out.push_str(&format!(
            "{:<13} {}  {u}\n",
            "Transports",
            word(CheckOutcome::Skip, color)
        ));
    }
    for g in r.groups.iter().filter(|g| g.error.is_some()) {
        out.push_str(&format!(
            "\n{} ({}): {}\n",
            g.name,
            g.reason.map_or("", |r| r.as_str()),
            g.error.as_deref().unwrap_or("")
        ));
        for l in &g.diagnostics {
            out.push_str(&format!("    | {l}\n"));
        }
        if let Some(a) = g.advice {
            out.push_str(&format!("  fix: {a}\n"));
        }
    }
    out.push_str(if r.ok {
        "\nAll required checks passed; nothing is left registered.\n"
    } else {
        "\nA required check failed (exit code 1); nothing is left registered.\n"
    });
    out
}
