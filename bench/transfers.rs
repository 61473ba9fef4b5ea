//! The data path's section: what observe mode adds to a transfer, against
//! the same calls on nixl-sys directly, in one process (a fresh worker, two
//! NIXL agents, UCX, DRAM), interleaved. `post_xfer_req` alone (4 KiB; the
//! request made and its completion awaited outside the clock), and whole
//! cycles — create, post, poll to DONE, release — of 4 KiB and 64 MiB.

use crate::common::{median, ms};
use nixl_agent::{Descriptor, ObserveSettings, Observer};
use nixl_sys::{Agent, XferDescList, XferOp, XferStatus};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

const SMALL: usize = 4 << 10;
const BIG: usize = 64 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub reps: usize,
    /// Median ns of one `post_xfer_req`, direct and observed.
    pub post_ns: (f64, f64),
    /// Median ms of a whole 4 KiB cycle, direct and observed.
    pub cycle_small_ms: (f64, f64),
    /// Median ms of a whole 64 MiB cycle, and the median of paired ratios.
    pub cycle_big_ms: (f64, f64),
    pub cycle_big_paired_ratio: f64,
}

fn dlist(addr: usize, len: usize) -> XferDescList<'static> {
    let mut l = XferDescList::new(nixl_sys::MemType::Dram).expect("descriptor list");
    l.add_desc(addr, len, 0);
    l
}

fn agent(name: &str) -> Result<(Agent, nixl_sys::Backend), String> {
    let a = Agent::new(name).map_err(|e| e.to_string())?;
    let (_, params) = a.get_plugin_params("UCX").map_err(|e| e.to_string())?;
    let b = a.create_backend("UCX", &params).map_err(|e| e.to_string())?;
    Ok((a, b))
}

/// The worker: prints one JSON line.
pub fn worker_main(reps: usize) -> Result<(), String> {
    crate::common::load_nixl()?;
    let (a, _ba) = agent("bench-prefill")?;
    let (b, _bb) = agent("bench-decode")?;
    let src = vec![3u8; BIG];
    let dst = vec![0u8; BIG];
    let _ra = a
        .register_memory(&Descriptor::host(&src), None)
        .map_err(|e| e.to_string())?;
    let _rb = b
        .register_memory(&Descriptor::host(&dst), None)
        .map_err(|e| e.to_string())?;
    let observer = Observer::new(ObserveSettings::default());
    let on_a = observer.agent(&a);
    a.load_remote_md(&b.get_local_md().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let (s, d) = (src.as_ptr() as usize, dst.as_ptr() as usize);
    let err = |e: nixl_sys::NixlError| e.to_string();

    // One cycle, direct or observed; the post alone is timed too.
    let cycle = |observed: bool, len: usize| -> Result<(f64, f64), String> {
        let t0 = Instant::now();
        let post_ns;
        if observed {
            let req = on_a
                .create_xfer_req(XferOp::Write, &dlist(s, len), &dlist(d, len), "bench-decode", None)
                .map_err(err)?;
            let p0 = Instant::now();
            let busy = on_a.post_xfer_req(&req, None).map_err(err)?;
            post_ns = p0.elapsed().as_nanos() as f64;
            if busy {
                while on_a.get_xfer_status(&req).map_err(err)? != XferStatus::Success {}
            }
        } else {
            let req = a
                .create_xfer_req(XferOp::Write, &dlist(s, len), &dlist(d, len), "bench-decode", None)
                .map_err(err)?;
            let p0 = Instant::now();
            let busy = a.post_xfer_req(&req, None).map_err(err)?;
            post_ns = p0.elapsed().as_nanos() as f64;
            if busy {
                while a.get_xfer_status(&req).map_err(err)? != XferStatus::Success {}
            }
        }
        Ok((ms(t0.elapsed()), post_ns))
    };
    let mut post = (Vec::new(), Vec::new());
    let mut small = (Vec::new(), Vec::new());
    for rep in 0..=reps * 100 {
        for observed in if rep % 2 == 0 { [false, true] } else { [true, false] } {
            let (t, p) = cycle(observed, SMALL)?;
            if rep > 0 {
                let (c, q) = if observed {
                    (&mut small.1, &mut post.1)
                } else {
                    (&mut small.0, &mut post.0)
                };
                c.push(t);
                q.push(p);
            }
        }
    }
    let mut big = (Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    // A 64 MiB copy moves by ±20 % from one cycle to the next on a VM:
    // enough pairs that their median ratio is steady to a percent.
    for rep in 0..=reps * 15 {
        let mut pair = [0.0; 2];
        for observed in if rep % 2 == 0 { [false, true] } else { [true, false] } {
            pair[usize::from(observed)] = cycle(observed, BIG)?.0;
        }
        if rep > 0 {
            big.0.push(pair[0]);
            big.1.push(pair[1]);
            ratios.push(pair[1] / pair[0]);
        }
    }
    let m = |v: &Vec<f64>| median(v);
    let report = Report {
        reps,
        post_ns: (m(&post.0), m(&post.1)),
        cycle_small_ms: (m(&small.0), m(&small.1)),
        cycle_big_ms: (m(&big.0), m(&big.1)),
        cycle_big_paired_ratio: m(&ratios),
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    Ok(())
}

/// Runs the worker in a fresh process.
pub fn run(reps: usize) -> Result<Report, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(me)
        .args(["xfer-worker", &reps.to_string()])
        .env("NIXL_LIB_DIR", crate::common::nixl_lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("xfer-worker: {e}"))?;
    let line = BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("xfer-worker printed nothing ({})", out.status))?;
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
        if let Some(e) = v.get("error") {
            return Err(format!("xfer-worker: {e}"));
        }
    }
    let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
    let pair = |k: &str| {
        (
            v[k][0].as_f64().unwrap_or(f64::NAN),
            v[k][1].as_f64().unwrap_or(f64::NAN),
        )
    };
    Ok(Report {
        reps,
        post_ns: pair("post_ns"),
        cycle_small_ms: pair("cycle_small_ms"),
        cycle_big_ms: pair("cycle_big_ms"),
        cycle_big_paired_ratio: v["cycle_big_paired_ratio"].as_f64().unwrap_or(f64::NAN),
    })
}
