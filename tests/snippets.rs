//! Every shell snippet in README.md and docs/ is either run here, as
//! written, against the real binary and a live agent on the real NIXL
//! runtime (its paths, flags, endpoints and, where the docs print one, its
//! output), or named below with the reason it cannot run on a CPU-only
//! machine without a cluster and the test that covers it instead. A new
//! snippet that is neither fails the test.

use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Snippets that cannot run here: (how the command starts, why, and where
/// it is covered instead).
const ELSEWHERE: &[(&str, &str)] = &[
    (
        "make run",
        "this test runs the agent as `make run` does (the binary, NIXL_LIB_DIR of .deps)",
    ),
    ("make test", "the whole suite"),
    (
        "make wheel",
        "a release build of minutes: tests/newcomer.rs checks the target and its path",
    ),
    (
        "pip install ./target/wheels/",
        "installs into an environment: tests/python.rs installs that wheel",
    ),
    (
        "nixl-agent-instrument python -m sglang",
        "no SGLang here: tests/python.rs runs its call shapes",
    ),
    (
        "nixl-agent instrument -- ",
        "placeholder programs: tests/interposer.rs runs C++, Rust and Python programs under it",
    ),
    (
        "nixl-agent-instrument ./my_cpp_server",
        "a placeholder program: tests/interposer.rs runs the wheel's launcher alone on a C++ program",
    ),
    (
        "nixl-agent-instrument vllm serve",
        "no vLLM here: tests/python.rs runs its call shapes",
    ),
    (
        "export NIXL_AGENT_MULTIPROC_DIR=/run/",
        "a pod's emptyDir: tests/pod.rs runs ranks and the sidecar",
    ),
    (
        "curl -s $A/v1/status | jq '.ranks[].status.nixl.interposer'",
        "a process under a NIXL the interposer cannot prove: tests/interposer.rs a_nixl_the_interposer_cannot_prove_runs_untouched_and_readiness_is_left_alone reads both",
    ),
    (
        "curl -s \"$A/readyz?verbose\" | grep interposer",
        "the same process: tests/interposer.rs a_nixl_the_interposer_cannot_prove_runs_untouched_and_readiness_is_left_alone",
    ),
    (
        "nixl-agent pod --dir /run/",
        "a pod's emptyDir: tests/pod.rs runs `nixl-agent pod`",
    ),
    (
        "nixl-agent check --serve",
        "two nodes: tests/check_transfer.rs runs the pair",
    ),
    (
        "nixl-agent check --peer",
        "two nodes: tests/check_transfer.rs runs the pair",
    ),
    ("docker ", "no container engine here: tests/image.rs checks the recipe"),
    ("kubectl ", "no cluster here: tests/deploy.rs checks the manifests"),
    ("bash scripts/gpu-check.sh", "a GPU host: tests/gpu.rs"),
    ("OTEL_EXPORTER_OTLP", "an OTLP collector: tests/traces.rs runs one"),
];

/// One command of a snippet, with the output lines the docs print after it.
#[derive(Debug)]
struct Snippet {
    page: String,
    command: String,
    output: Vec<String>,
}

/// The commands of every ```sh block of README.md and docs/*.md:
/// continuation lines joined, comments dropped, `# ` lines right after a
/// command taken as its printed output.
fn snippets() -> Vec<Snippet> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let mut out = Vec::new();
    for page in pages {
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&page).unwrap();
        let mut in_sh = false;
        let mut pending = String::new();
        let mut last: Option<usize> = None;
        for line in text.lines() {
            if line.starts_with("```") {
                in_sh = !in_sh && (line == "```sh" || line == "```bash");
                last = None;
                pending.clear();
                continue;
            }
            if !in_sh {
                continue;
            }
            if pending.is_empty() && line.trim_start().starts_with('#') {
                if let (Some(i), Some(o)) = (last, line.strip_prefix("# ")) {
                    if o.starts_with('[') || o == "ok" {
                        let s: &mut Snippet = &mut out[i];
                        s.output.push(o.to_string());
                    }
                }
                continue;
            }
            pending.push_str(&strip_comment(line.trim_end_matches('\\')));
            pending.push(' ');
            let quotes = pending.matches('\'').count();
            if line.ends_with('\\') || quotes % 2 == 1 {
                continue;
            }
            let command = strip_comment(pending.trim());
            pending.clear();
            if command.is_empty() {
                continue;
            }
            out.push(Snippet {
                page: name.clone(),
                command,
                output: Vec::new(),
            });
            last = Some(out.len() - 1);
        }
    }
    out
}

/// The command without a trailing `   # comment` (two spaces before `#`).
fn strip_comment(line: &str) -> String {
    let mut in_quote = false;
    let bytes = line.as_bytes();
    for (i, c) in line.char_indices() {
        if c == '\'' {
            in_quote = !in_quote;
        }
        if !in_quote && c == '#' && i >= 2 && bytes[i - 1] == b' ' && bytes[i - 2] == b' ' {
            return line[..i].trim().to_string();
        }
    }
    line.trim().to_string()
}

/// The command made runnable here: the documented addresses are the live
/// agent's, files written go to `tmp`, `nixl-agent` is the built binary.
fn localize(command: &str, addr: &str, tmp: &Path) -> String {
    let url = format!("http://{addr}");
    let mut c = command
        .replace("http://<instance>", &url)
        .replace("http://<agent>:10915", &url)
        .replace("localhost:10915", addr)
        .replace("$A", &url);
    for target in ["/etc/prometheus/rules/", "/var/lib/grafana/dashboards/nixl-agent/"] {
        c = c.replace(target, &format!("{}/", tmp.display()));
    }
    if let Some(rest) = c.strip_prefix("nixl-agent ") {
        c = format!("{} {rest}", env!("CARGO_BIN_EXE_nixl-agent"));
    }
    c
}

#[test]
fn every_shell_snippet_runs_here_or_says_where_it_is_covered() {
    let snippets = snippets();
    assert!(snippets.len() > 40, "found {} snippets", snippets.len());
    // The agent as `make run` starts it, on a port of its own.
    let agent = support::AgentProcess::spawn(support::Spawn::default());
    agent.wait_ready(Duration::from_secs(30));
    let addr = agent.addr.to_string();
    let tmp = tempfile::tempdir().unwrap();
    let mut ran = 0;
    let mut failed = Vec::new();
    for s in &snippets {
        let c = &s.command;
        if let Some((_, why)) = ELSEWHERE.iter().find(|(p, _)| c.starts_with(p)) {
            assert!(!why.is_empty());
            continue;
        }
        // `A=http://<instance>`: the runbooks' shorthand, substituted below.
        if c.starts_with("A=") {
            continue;
        }
        let runnable = c.starts_with("curl ")
            || c.starts_with("nixl-agent rules")
            || c.starts_with("nixl-agent config")
            || (c.starts_with("nixl-agent check") && !c.contains("--serve") && !c.contains("--peer"));
        assert!(
            runnable,
            "{}: `{c}` neither runs here nor says why not (add it to ELSEWHERE)",
            s.page
        );
        let line = localize(c, &addr, tmp.path());
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", &line])
            .env("NIXL_LIB_DIR", support::nixl_lib_dir())
            .env_remove("NIXL_AGENT_CONFIG")
            .output()
            .unwrap();
        ran += 1;
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Output may be empty where the command writes a file (`-o`), a
        // filter selects what is wrong (nothing, on a healthy agent), or the
        // field is a canary's (`.probe`, null elsewhere).
        let may_be_empty = c.contains(" -o ") || c.contains("select(") || c.ends_with("jq '.ranks[].status.probe'");
        let ok = out.status.success() && (may_be_empty || !stdout.trim().is_empty() && stdout.trim() != "null");
        if !ok {
            failed.push(format!(
                "{}: `{c}` (ran `{line}`): {}\n{stdout}{}",
                s.page,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        } else if !s.output.is_empty() {
            let got: Vec<&str> = stdout.lines().collect();
            if got != s.output {
                failed.push(format!(
                    "{}: `{c}` printed {got:?}, the docs say {:?}",
                    s.page, s.output
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "snippets that do not work as written:\n{}",
        failed.join("\n")
    );
    assert!(ran > 20, "only {ran} snippets ran");
    // What the curl snippets wrote where the docs put the files.
    for f in ["nixl-agent.rules.yml", "nixl-agent.json"] {
        assert!(tmp.path().join(f).metadata().unwrap().len() > 1000, "{f}");
    }
}
