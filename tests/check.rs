//! `nixl-agent check` end to end against the real NIXL runtime: exit codes,
//! the JSON report, the fix it names, and a snapshot of the human report.

use crate::support;
use std::process::{Command, Output};

fn check(args: &[&str], config: Option<&str>, wrap: &[&str], nixl: bool) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = match wrap.split_first() {
        Some((prog, rest)) => {
            let mut c = Command::new(prog);
            c.args(rest).arg(env!("CARGO_BIN_EXE_nixl-agent"));
            c
        }
        None => support::binary(),
    };
    cmd.env_remove("NIXL_LIB_DIR")
        .env_remove("NIXL_AGENT_CONFIG")
        .env_remove("NIXL_PLUGIN_DIR");
    if nixl {
        cmd.env("NIXL_LIB_DIR", support::nixl_lib_dir());
    } else {
        cmd.env("NIXL_LIB_DIR", "/nonexistent/nixl");
    }
    cmd.arg("check").args(args);
    if let Some(text) = config {
        let p = dir.path().join("agent.toml");
        std::fs::write(&p, text).unwrap();
        cmd.arg("--config").arg(p);
    }
    let out = cmd.output().unwrap();
    let json = if args.contains(&"--json") {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    } else {
        serde_json::Value::Null
    };
    (out, json)
}

#[test]
fn default_plan_passes_and_reports_every_fact() {
    let (out, r) = check(&["--json"], None, &[], true);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(r["ok"], true);
    assert_eq!(r["nixl"]["outcome"], "ok");
    assert_eq!(r["nixl"]["found_by"], "configured");
    assert_eq!(r["nixl"]["version"], "1.5.1");
    assert!(r["nixl"]["library"].as_str().unwrap().ends_with("libnixl_capi.so"));
    assert!(r["nixl"]["plugin_dir"].as_str().unwrap().ends_with("plugins"));
    assert!(r["nixl"]["plugins"].as_array().unwrap().iter().any(|p| p == "UCX"));
    assert_eq!(r["backends"][0]["name"], "UCX");
    assert_eq!(r["backends"][0]["outcome"], "ok");
    assert!(
        r["ucx"]["version"].as_str().unwrap().starts_with('1'),
        "UCX version read from libucp"
    );
    assert!(
        !r["ucx"]["cuda_modules"].as_array().unwrap().is_empty(),
        "the wheel's UCX CUDA modules are listed"
    );
    assert!(r["memlock"]["plan_dram_bytes"].as_u64().unwrap() >= 4352 * 1024);
    assert!(r["cuda"]["required"] == false);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    for g in groups {
        assert_eq!(g["outcome"], "ok", "{g}");
        assert!(g["seconds"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(groups[0]["descriptors"], 8);
    // The host facts that bite containers, each with an outcome and a line.
    for part in ["capabilities", "gpu_rdma", "affinity", "links", "shm"] {
        let h = &r["host"][part];
        assert!(
            ["ok", "warn", "skip"].contains(&h["outcome"].as_str().unwrap()),
            "{part}: {h}"
        );
        assert!(!h["finding"].as_str().unwrap().is_empty(), "{part}: {h}");
    }
    assert_eq!(r["host"]["gpu_rdma"]["outcome"], "skip", "no VRAM in the default plan");
    // Root in this test: CAP_IPC_LOCK is effective, as memlock says.
    assert_eq!(
        r["host"]["capabilities"]["ipc_lock_effective"], r["memlock"]["cap_ipc_lock"],
        "one reading of the capability"
    );
    // Progress went to stderr, one line per step.
    let err = String::from_utf8_lossy(&out.stderr);
    for step in [
        "NIXL runtime",
        "NIXL backends",
        "UCX",
        "memlock",
        "CUDA",
        "host",
        "register kv",
        "register aux",
        "transfer UCX DRAM → DRAM",
    ] {
        assert!(
            err.contains(&format!("] {step}: ")),
            "no progress line for {step}: {err}"
        );
    }
}

#[test]
fn missing_library_fails_and_says_where_it_looked() {
    let (out, r) = check(&["--json"], None, &[], false);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(r["ok"], false);
    assert_eq!(r["nixl"]["outcome"], "fail");
    assert_eq!(r["nixl"]["searched"][0], "/nonexistent/nixl/libnixl_capi.so");
    assert_eq!(r["groups"][0]["outcome"], "skip");
    let (out, _) = check(&[], None, &[], false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("searched: /nonexistent/nixl/libnixl_capi.so"), "{text}");
    assert!(text.contains("A required check failed"), "{text}");
}

/// CI redirects `check --json` to a file: with a bad config the file is
/// still a JSON document (ok false, the error and its step), and on a NIXL
/// failure the report names the reason and the binding.
#[test]
fn json_is_a_document_whatever_fails() {
    let (out, r) = check(&["--json"], Some("[[group]]\nname = 'kv'\n"), &[], true);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["step"], "config", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("kind"), "{message}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(message));
    let (out, r) = check(&["--json", "--config", "/nonexistent/agent.toml"], None, &[], true);
    assert_eq!(out.status.code(), Some(2));
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/agent.toml"));
    let (_, r) = check(&["--json", "--no-transfer"], None, &[], false);
    assert_eq!(r["nixl"]["reason"], "nixl_unavailable", "{r}");
    assert_eq!(r["nixl"]["binding_version"], "1.5.1", "{r}");
    assert!(r["nixl"]["fix"].as_str().unwrap().contains("NIXL_LIB_DIR"), "{r}");
}

#[cfg_attr(
    nixl_agent_cuda,
    ignore = "CPU-only: a CUDA driver is present, so VRAM is available (tests/gpu.rs covers it)"
)]
#[test]
fn vram_group_without_cuda_fails_with_cuda_unavailable() {
    assert!(
        !nixl_agent::cuda_driver_present(),
        "built without a CUDA driver, but one loads now"
    );
    let cfg = "[[group]]\nname='kv'\nkind='kv'\nmem_type='VRAM'\ncount=2\nsize='1MiB'\n";
    let (out, r) = check(&["--json"], Some(cfg), &[], true);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(r["cuda"]["outcome"], "fail");
    assert_eq!(r["cuda"]["required"], true);
    assert_eq!(r["groups"][0]["reason"], "cuda_unavailable");
    assert!(r["groups"][0]["advice"].as_str().unwrap().contains("CUDA driver"));
    assert_eq!(
        r["ucx"]["outcome"], "fail",
        "UCX cannot see VRAM without its CUDA modules"
    );
}

#[test]
fn memlock_below_the_plan_fails_and_names_the_fix() {
    // 64 KiB of memlock and no CAP_IPC_LOCK (root would otherwise be exempt).
    let wrap = [
        "setpriv",
        "--bounding-set=-ipc_lock",
        "--inh-caps=-ipc_lock",
        "prlimit",
        "--memlock=65536:65536",
    ];
    let (out, r) = check(&["--json"], None, &wrap, true);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(r["memlock"]["outcome"], "fail");
    assert_eq!(r["memlock"]["soft_bytes"], 65536);
    assert_eq!(r["memlock"]["cap_ipc_lock"], false);
    let fix = r["memlock"]["fix"].as_str().unwrap();
    for needle in ["ulimit -l unlimited", "--ulimit memlock=-1", "LimitMEMLOCK=infinity"] {
        assert!(fix.contains(needle), "{fix}");
    }
    assert_eq!(
        r["groups"][0]["reason"], "memlock_limit",
        "validation refuses the group too"
    );
    assert!(r["groups"][0]["advice"].as_str().unwrap().contains("ulimit -l"));
}

/// The trap of non-root containers: IPC_LOCK "added" (in the bounding set)
/// but not effective, and a memlock limit below the plan. The host facts
/// name it, and the memlock fix does not offer CAP_IPC_LOCK.
#[test]
fn a_non_root_process_is_told_ipc_lock_does_not_help_it() {
    let wrap = [
        "prlimit",
        "--memlock=65536:65536",
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (out, r) = check(&["--json", "--no-transfer"], None, &wrap, true);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let caps = &r["host"]["capabilities"];
    assert_eq!(caps["uid"], 65534, "{caps}");
    assert_eq!(caps["ipc_lock_effective"], false, "{caps}");
    assert_eq!(caps["ipc_lock_bounding"], true, "{caps}");
    assert_eq!(caps["outcome"], "warn", "{caps}");
    assert!(caps["finding"].as_str().unwrap().contains("not effective"), "{caps}");
    let fix = r["memlock"]["fix"].as_str().unwrap();
    assert!(fix.contains("does not help this non-root process"), "{fix}");
    assert!(!fix.ends_with("or CAP_IPC_LOCK"), "{fix}");
    // Root, with the capability effective: no such finding.
    let (_, r) = check(&["--json", "--no-transfer"], None, &[], true);
    assert_eq!(r["host"]["capabilities"]["outcome"], "ok");
    assert!(r["memlock"]["fix"].is_null());
}

#[test]
fn bad_config_exits_2() {
    let (out, _) = check(&[], Some("[[group]]\nname='kv'\n"), &[], true);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing kind, mem_type, count, size;"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = support::binary().args(["check", "--jsn"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Masks what changes between machines and runs: paths, times, versions, limits.
fn mask(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut l = line.to_string();
        let lib = support::nixl_lib_dir().display().to_string();
        l = l.replace(&lib, "<NIXL_LIB_DIR>");
        l = replace_numbers_before(&l, " ms", "<T>");
        // Machine facts: outcome kept, details masked.
        for step in [
            "UCX ",
            "Memlock ",
            "CUDA ",
            "Capabilities ",
            "GPU RDMA ",
            "GPU-NIC ",
            "RDMA links ",
            "/dev/shm ",
            "Transfer ",
        ] {
            if l.starts_with(step) {
                let outcome = l[step.len()..].split_whitespace().next().unwrap_or("").to_string();
                l = format!("{:<13} {outcome:<4}  <{}>", step.trim(), step.trim().to_uppercase());
            }
        }
        if l.starts_with("nixl-agent ") {
            l = "nixl-agent <VERSION> check".to_string();
        }
        // A transfer's figures and transports, under its row.
        if l.starts_with(&" ".repeat(20)) {
            l = format!("{}<DETAIL>", " ".repeat(20));
        }
        // The group table's columns are as wide as their widest cell (a
        // time of 10 ms or more widens TIME): cells separated by two spaces.
        if l.starts_with("GROUP ") || l.contains("<T> ms  ") && !l.contains(':') {
            l = l
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace("<T> ms", "<T>ms");
            l = l.split(' ').collect::<Vec<_>>().join("  ").replace("<T>ms", "<T> ms");
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

fn replace_numbers_before(line: &str, unit: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(unit) {
        let head = &rest[..i];
        let start = head
            .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map_or(0, |p| p + 1);
        out.push_str(&head[..start]);
        out.push_str(if start < head.len() { with } else { "" });
        out.push_str(unit);
        rest = &rest[i + unit.len()..];
    }
    out.push_str(rest);
    out
}

#[test]
fn human_report_matches_the_snapshot() {
    let (out, _) = check(&[], None, &[], true);
    assert_eq!(out.status.code(), Some(0));
    let got = mask(&String::from_utf8_lossy(&out.stdout));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/check.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("tests/snapshots/check.txt (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(
        got, want,
        "check report changed; rerun with UPDATE_SNAPSHOTS=1 and review the diff"
    );
}

/// One example of docs/check.md: the command as printed, the lines shown.
struct Example {
    command: String,
    shown: Vec<String>,
}

/// The page's examples (a command in "(`...`):" followed by a plain code
/// block), and the files its ```toml blocks name in their first line.
fn doc_examples(page: &str) -> (Vec<Example>, Vec<(String, String)>) {
    let lines: Vec<&str> = page.lines().collect();
    let mut examples = Vec::new();
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l == "```toml" {
            let end = i + 1 + lines[i + 1..].iter().position(|x| *x == "```").unwrap();
            if let Some(name) = lines[i + 1].strip_prefix("# ") {
                files.push((name.to_string(), lines[i + 2..end].join("\n") + "\n"));
            }
            i = end + 1;
            continue;
        }
        if let Some(command) = l
            .find("(`")
            .and_then(|s| l[s + 2..].strip_suffix("`):"))
            .filter(|c| c.contains("nixl-agent check"))
        {
            let start = i + 1 + lines[i + 1..].iter().position(|x| *x == "```").unwrap();
            let end = start + 1 + lines[start + 1..].iter().position(|x| *x == "```").unwrap();
            examples.push(Example {
                command: command.to_string(),
                shown: lines[start + 1..end].iter().map(|s| s.to_string()).collect(),
            });
            i = end + 1;
            continue;
        }
        i += 1;
    }
    (examples, files)
}

/// What differs between this machine and the page's: the NIXL folder, the
/// root shell's HOME, times, the version, and the host's own facts (kept:
/// the row and its outcome).
fn as_on_the_page(line: &str, lib: &str, home: &str) -> String {
    let mut l = line
        .replace(lib, "/srv/.deps/nixl/.nixl_cu12.mesonpy.libs")
        .replace(home, "/root");
    l = replace_numbers_before(&l, " ms", "<T>");
    if l.starts_with("nixl-agent ") && l.ends_with(" check") {
        l = "nixl-agent <VERSION> check".to_string();
    }
    for step in ["UCX ", "GPU RDMA ", "GPU-NIC ", "RDMA links ", "/dev/shm "] {
        if l.starts_with(step) {
            let outcome = l[step.len()..].split_whitespace().next().unwrap_or("").to_string();
            l = format!("{} {outcome}", step.trim());
        }
    }
    l.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every example command of docs/check.md, run as printed from a root shell
/// (HOME a root-owned 0700 directory, the files the page shows in the
/// current directory, `nixl-agent` on PATH) prints every line the page
/// shows under it, and exits 1 exactly when the page shows a failure.
#[test]
fn every_example_of_the_page_prints_what_the_page_shows() {
    use std::os::unix::fs::PermissionsExt;
    let page = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/check.md")).unwrap();
    let (examples, files) = doc_examples(&page);
    assert!(examples.len() >= 5, "the page's examples: {}", examples.len());
    let cwd = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cwd.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, body) in &files {
        std::fs::write(cwd.path().join(name), body).unwrap();
    }
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nixl-agent"), bin.path().join("nixl-agent")).unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let lib = support::nixl_lib_dir().display().to_string();
    let home_path = home.path().display().to_string();
    for ex in &examples {
        if ex.shown.iter().any(|l| l.contains("the plan has VRAM groups")) && nixl_agent::cuda_driver_present() {
            eprintln!("skipped on this host (a CUDA driver loads): {}", ex.command);
            continue;
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&ex.command)
            .current_dir(cwd.path())
            .env_remove("NIXL_CONFIG_FILE")
            .env_remove("NIXL_TELEMETRY_ENABLE")
            .env_remove("NIXL_TELEMETRY_DIR")
            .env_remove("NIXL_AGENT_CONFIG")
            .env_remove("NIXL_PLUGIN_DIR")
            .env("NIXL_LIB_DIR", &lib)
            .env("HOME", home.path())
            .env(
                "PATH",
                format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default()),
            )
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        let got: Vec<String> = printed.lines().map(|l| as_on_the_page(l, &lib, &home_path)).collect();
        for shown in &ex.shown {
            let want = as_on_the_page(shown, &lib, &home_path);
            assert!(
                got.contains(&want),
                "`{}` does not print, as docs/check.md shows:\n{want}\nit printed:\n{}",
                ex.command,
                got.join("\n")
            );
        }
        // The page may leave out rows that pass, never one that fails or
        // warns: that is what a reader of the page runs the command for.
        let shown: Vec<String> = ex.shown.iter().map(|l| as_on_the_page(l, &lib, &home_path)).collect();
        for row in got.iter().filter(|l| {
            let mut w = l
                .split_whitespace()
                .skip_while(|w| !["ok", "warn", "FAIL", "skip"].contains(w));
            matches!(w.next(), Some("FAIL" | "warn")) && !l.starts_with("kv ") && !l.starts_with("aux ")
        }) {
            assert!(
                shown.contains(row),
                "`{}` prints a row docs/check.md does not show:\n{row}",
                ex.command
            );
        }
        let fails = ex.shown.iter().any(|l| l.split_whitespace().any(|w| w == "FAIL"));
        assert_eq!(
            out.status.code(),
            Some(if fails { 1 } else { 0 }),
            "`{}`: {}",
            ex.command,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
