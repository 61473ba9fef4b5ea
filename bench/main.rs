//! nixl-bench: the agent's overhead against raw NIXL (nixl-sys), the Python
//! nixl API from the same wheel and NIXL's own Prometheus exporter. Every
//! figure is compared with a peer measured in the same run; the tables are
//! printed as Markdown and everything is written as JSON.
//!
//! ```text
//! nixl-bench [--smoke] [--out PATH] [--agent-bin PATH] [--python PATH]
//!            [--sizes 1,64,1024,4096,16384] [--reps 7] [--warmup 1]
//!            [--load-secs 10] [--idle-secs 60] [--ttr-reps 5]
//!            [--sections registration,embedding,transfers,scrape,pod,memory,ttr,idle,check,canary,interposer]
//!            [--interposer-samples 12]
//!            [--embed-procs 6]
//!            [--contenders raw,raw_reverse,agent,agent_novalidate,batched_capi,python[,agent_group_only,batched_capi_in_agent]]
//! nixl-bench hold-raw --groups COUNTxSIZE[,...]     (internal: a bare nixl-sys process)
//! nixl-bench worker raw|agent|batched               (internal: a contender process)
//! nixl-bench embed-worker direct|observe SIZES REPS  (internal: an embedding process)
//! nixl-bench xfer-worker REPS                        (internal: the transfers section)
//! nixl-bench canary-worker ROUNDS WARMUP IDLE_SECS   (internal: the canary section)
//! ```
//!
//! Run through `make bench` (scripts/bench.sh), which sets everything up.
//! `--smoke` is the tiny run tests/bench_smoke.rs uses (N ≤ 64, 1 s of load).
//!
//! The benchmark is a program beside the product, not part of it: its raw
//! contenders (bare mmap, rusage, a descriptor of its own) call libc as any
//! NIXL program would, so `unsafe` is allowed here, each block with a
//! `// Safety:` comment like nixl-agent-sys's.
#![allow(unsafe_code)]

mod capi;
mod check;
mod common;
mod embedding;
mod interposer;
mod load;
mod pod_dir;
mod procs;
mod registration;
mod report;
mod sections;
mod transfers;
mod worker;

use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Args {
    smoke: bool,
    out: Option<PathBuf>,
    agent_bin: PathBuf,
    python: Option<String>,
    sizes: Vec<usize>,
    reps: usize,
    warmup: usize,
    load_secs: f64,
    idle_secs: u64,
    ttr_reps: usize,
    /// Pause after each registration repetition, ms.
    settle_ms: u64,
    embed_procs: usize,
    sections: Vec<String>,
    contenders: Vec<String>,
    interposer_samples: usize,
}

const SECTIONS: &[&str] = &[
    "registration",
    "embedding",
    "transfers",
    "scrape",
    "pod",
    "memory",
    "ttr",
    "idle",
    "check",
    "canary",
    "interposer",
];

/// Sections a `--smoke` run leaves out unless `--sections` names them: the
/// interposer's needs the interposer library built beside the agent binary
/// (scripts/bench.sh builds it in release).
const NOT_IN_SMOKE: &[&str] = &["interposer"];

fn usage() -> ! {
    eprintln!(
        "usage: nixl-bench [--smoke] [--out PATH] [--agent-bin PATH] [--python PATH] [--sizes N,...] \
         [--reps K] [--warmup K] [--load-secs S] [--idle-secs S] [--ttr-reps K] [--settle-ms MS] [--interposer-samples K] [--sections {}] [--contenders {}]\n       \
         nixl-bench hold-raw --groups COUNTxSIZE[,...]",
        SECTIONS.join(","),
        registration::CONTENDERS.join(",")
    );
    std::process::exit(2)
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',')
        .map(|x| x.trim().parse().unwrap_or_else(|_| usage()))
        .collect()
}

fn parse(mut argv: impl Iterator<Item = String>) -> Args {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let mut a = Args {
        smoke,
        out: None,
        agent_bin: common::repo().join("target/release/nixl-agent"),
        python: None,
        sizes: if smoke {
            vec![1, 64]
        } else {
            vec![1, 64, 1024, 4096, 16384]
        },
        reps: if smoke { 2 } else { 7 },
        warmup: if smoke { 0 } else { 1 },
        load_secs: if smoke { 1.0 } else { 10.0 },
        idle_secs: if smoke { 2 } else { 60 },
        ttr_reps: if smoke { 1 } else { 5 },
        settle_ms: if smoke { 0 } else { 50 },
        embed_procs: if smoke { 2 } else { 6 },
        sections: SECTIONS
            .iter()
            .filter(|s| !(smoke && NOT_IN_SMOKE.contains(s)))
            .map(|s| s.to_string())
            .collect(),
        contenders: registration::DEFAULT_CONTENDERS.iter().map(|s| s.to_string()).collect(),
        // Twelve: each of the six orders of bare A, instrumented, bare B twice.
        interposer_samples: if smoke { 1 } else { 12 },
    };
    while let Some(flag) = argv.next() {
        let mut val = || argv.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--smoke" => {}
            "--out" => a.out = Some(PathBuf::from(val())),
            "--agent-bin" => a.agent_bin = PathBuf::from(val()),
            "--python" => a.python = Some(val()),
            "--sizes" => a.sizes = parse_list(&val()),
            "--reps" => a.reps = val().parse().unwrap_or_else(|_| usage()),
            "--warmup" => a.warmup = val().parse().unwrap_or_else(|_| usage()),
            "--load-secs" => a.load_secs = val().parse().unwrap_or_else(|_| usage()),
            "--idle-secs" => a.idle_secs = val().parse().unwrap_or_else(|_| usage()),
            "--ttr-reps" => a.ttr_reps = val().parse().unwrap_or_else(|_| usage()),
            "--settle-ms" => a.settle_ms = val().parse().unwrap_or_else(|_| usage()),
            "--embed-procs" => a.embed_procs = val().parse().unwrap_or_else(|_| usage()),
            "--interposer-samples" => a.interposer_samples = val().parse().unwrap_or_else(|_| usage()),
            "--sections" => {
                a.sections = parse_list(&val());
                if a.sections.iter().any(|s| !SECTIONS.contains(&s.as_str())) {
                    usage()
                }
            }
            "--contenders" => {
                a.contenders = parse_list(&val());
                if a.contenders
                    .iter()
                    .any(|c| !registration::CONTENDERS.contains(&c.as_str()))
                {
                    usage()
                }
            }
            _ => usage(),
        }
    }
    a
}

fn main() {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("hold-raw") {
        argv.next();
        let groups = match (argv.next().as_deref(), argv.next()) {
            (Some("--groups"), Some(g)) => procs::parse_shapes(&g).unwrap_or_else(|e| {
                eprintln!("{e}");
                usage()
            }),
            _ => usage(),
        };
        if let Err(e) = procs::hold_raw(&groups) {
            println!("{}", serde_json::json!({ "ready": false, "error": e }));
            std::process::exit(1);
        }
        return;
    }
    if argv.peek().map(String::as_str) == Some("xfer-worker") {
        argv.next();
        let reps = argv.next().and_then(|r| r.parse().ok()).unwrap_or_else(|| usage());
        if let Err(e) = transfers::worker_main(reps) {
            println!("{}", serde_json::json!({ "error": e }));
            std::process::exit(1);
        }
        return;
    }
    if argv.peek().map(String::as_str) == Some("canary-worker") {
        argv.next();
        let mut num = || {
            argv.next()
                .and_then(|r| r.parse::<f64>().ok())
                .unwrap_or_else(|| usage())
        };
        let (rounds, warmup, idle) = (num() as usize, num() as usize, num());
        if let Err(e) = check::worker_main(rounds, warmup, Duration::from_secs_f64(idle)) {
            println!("{}", serde_json::json!({ "error": e }));
            std::process::exit(1);
        }
        return;
    }
    if argv.peek().map(String::as_str) == Some("embed-worker") {
        argv.next();
        let first = argv.next().unwrap_or_else(|| usage());
        let sizes: Vec<usize> = parse_list(&argv.next().unwrap_or_else(|| usage()));
        let reps = argv.next().and_then(|r| r.parse().ok()).unwrap_or_else(|| usage());
        if let Err(e) = embedding::worker_main(&first, &sizes, reps) {
            println!("{}", serde_json::json!({ "error": e }));
            std::process::exit(1);
        }
        return;
    }
    if argv.peek().map(String::as_str) == Some("worker") {
        argv.next();
        let kind = argv.next().unwrap_or_else(|| usage());
        if let Err(e) = registration::worker_main(&kind) {
            println!("{}", serde_json::json!({ "ready": false, "error": e }));
            std::process::exit(1);
        }
        return;
    }
    let args = parse(argv);
    std::process::exit(match run(&args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("nixl-bench: {e}");
            2
        }
    });
}

/// Runs the selected sections; Ok(false) when a section failed to run.
fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    if !args.agent_bin.is_file() {
        return Err(format!(
            "no agent binary at {} (cargo build --release, or --agent-bin)",
            args.agent_bin.display()
        ));
    }
    let on = |s: &str| args.sections.iter().any(|x| x == s);
    let mut results = report::Results {
        schema: 1,
        generated_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        smoke: args.smoke,
        wall_seconds: 0.0,
        machine: common::Machine::describe(),
        registration: None,
        scrape: None,
        pod: None,
        memory: None,
        time_to_ready: None,
        idle_cpu: None,
        embedding: None,
        transfers: None,
        check: None,
        canary: None,
        interposer: None,
        targets: Vec::new(),
        errors: Vec::new(),
    };
    let mut section = |name: &str, f: &mut dyn FnMut(&mut report::Results) -> Result<(), String>| {
        let t = Instant::now();
        eprintln!("nixl-bench: {name} ...");
        let r = f(&mut results);
        eprintln!("nixl-bench: {name} done in {:.1} s", t.elapsed().as_secs_f64());
        if let Err(e) = r {
            eprintln!("nixl-bench: {name} failed: {e}");
            results.errors.push(format!("{name}: {e}"));
        }
    };
    if on("registration") {
        section("registration", &mut |r| {
            let cfg = registration::Config {
                contenders: args.contenders.clone(),
                sizes: args.sizes.clone(),
                region_size: 64 << 10,
                warmup: args.warmup,
                reps: args.reps,
                settle: Duration::from_millis(args.settle_ms),
                cold_samples: if args.smoke { 1 } else { 5 },
            };
            let (report, python_error) = registration::run(&cfg, &worker::interpreter(args.python.as_deref()))?;
            r.registration = Some(report);
            if let Some(e) = python_error {
                r.errors.push(format!("python contender: {e}"));
            }
            Ok(())
        });
    }
    if on("embedding") {
        section("embedding", &mut |r| {
            r.embedding = Some(embedding::run(&args.sizes, args.reps, args.embed_procs)?);
            Ok(())
        });
    }
    if on("transfers") {
        section("transfers", &mut |r| {
            r.transfers = Some(transfers::run(args.reps)?);
            Ok(())
        });
    }
    let load = Duration::from_secs_f64(args.load_secs);
    let warm = Duration::from_secs_f64((args.load_secs / 10.0).min(1.0));
    if on("scrape") {
        section("scrape", &mut |r| {
            r.scrape = Some(sections::scrape(&args.agent_bin, 64, warm, load)?);
            Ok(())
        });
    }
    if on("pod") {
        section("pod", &mut |r| {
            // A directory of 256 × 4 MiB rank files watched for 20 s (8 for 2 s
            // in a smoke run).
            let big_dir = if args.smoke {
                (8, Duration::from_secs(2))
            } else {
                (256, Duration::from_secs(20))
            };
            r.pod = Some(sections::pod(&args.agent_bin, 8, 64, warm, load, args.reps, big_dir)?);
            Ok(())
        });
    }
    if on("memory") {
        section("memory", &mut |r| {
            let big = if args.smoke { 64 } else { 4096 };
            let plans = [
                ("default plan", None),
                (
                    if args.smoke { "64 x 64 KiB" } else { "4096 x 64 KiB" },
                    Some(vec![procs::GroupShape {
                        count: big,
                        size: 64 << 10,
                    }]),
                ),
            ];
            r.memory = Some(sections::memory(&args.agent_bin, &plans)?);
            Ok(())
        });
    }
    if on("ttr") {
        section("time to ready", &mut |r| {
            r.time_to_ready = Some(sections::time_to_ready(&args.agent_bin, args.ttr_reps)?);
            Ok(())
        });
    }
    if on("idle") {
        section("idle cpu", &mut |r| {
            r.idle_cpu = Some(sections::idle_cpu(&args.agent_bin, args.idle_secs)?);
            Ok(())
        });
    }
    if on("check") {
        section("check", &mut |r| {
            r.check = Some(check::check(&args.agent_bin, args.reps)?);
            Ok(())
        });
    }
    if on("canary") {
        section("canary", &mut |r| {
            let (rounds, warmup, idle) = if args.smoke { (10, 1, 1.0) } else { (100, 3, 5.0) };
            r.canary = Some(check::canary(rounds, warmup, Duration::from_secs_f64(idle))?);
            Ok(())
        });
    }
    if on("interposer") {
        section("interposer", &mut |r| {
            let so = args.agent_bin.with_file_name("libnixl_agent_interpose.so");
            if !so.is_file() {
                return Err(format!(
                    "no interposer at {} (cargo build --release -p nixl-agent-interpose)",
                    so.display()
                ));
            }
            let cfg = interposer::Config {
                samples: args.interposer_samples,
                regions: if args.smoke { 64 } else { 4096 },
                reg_reps: if args.smoke { 3 } else { 21 },
                status_reps: if args.smoke { 10_000 } else { 200_000 },
                agent_bin: args.agent_bin.clone(),
                python: worker::interpreter(args.python.as_deref()),
            };
            r.interposer = Some(interposer::run(&cfg)?);
            Ok(())
        });
    }
    results.wall_seconds = started.elapsed().as_secs_f64();
    results.targets = report::judge(&results);
    println!("{}", report::render(&results));
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(out, json + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("nixl-bench: wrote {}", out.display());
    }
    eprintln!("nixl-bench: {:.0} s in all", results.wall_seconds);
    Ok(results.errors.is_empty())
}
