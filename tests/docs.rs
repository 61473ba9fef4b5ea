//! Keeps the documentation true: the README metrics and reason tables, the
//! example config, and the endpoint list against the code.

use nixl_agent::config::Config;
use nixl_agent::telemetry::names::{Reason, FAMILIES};
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// Rows of the README table whose first cell is a backticked word starting with `prefix`.
fn rows(readme: &str, prefix: &str) -> Vec<Vec<String>> {
    readme
        .lines()
        .filter(|l| l.starts_with(&format!("| `{prefix}")))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

#[test]
fn readme_metrics_table_matches_the_code() {
    let readme = read("README.md");
    let table = rows(&readme, "nixl_agent_");
    let names: Vec<&str> = table.iter().map(|r| r[0].trim_matches('`')).collect();
    let want: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
    assert_eq!(names, want, "README metrics table rows, in order");
    for (row, f) in table.iter().zip(FAMILIES) {
        assert_eq!(row[1], f.kind.as_str(), "{}: type", f.name);
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels.join(", ")
        };
        assert_eq!(row[2], labels, "{}: labels", f.name);
        assert_eq!(row[3], f.help, "{}: help", f.name);
    }
}

#[test]
fn readme_reason_table_matches_the_vocabulary() {
    let readme = read("README.md");
    let table: Vec<Vec<String>> = rows(&readme, "")
        .into_iter()
        .filter(|r| Reason::ALL.iter().any(|x| r[0] == format!("`{}`", x.as_str())))
        .collect();
    assert_eq!(table.len(), Reason::ALL.len(), "one README row per reason");
    for (row, r) in table.iter().zip(Reason::ALL) {
        assert_eq!(row[0], format!("`{}`", r.as_str()));
        assert_eq!(row[1], r.describe());
    }
}

#[test]
fn example_config_is_the_default_and_names_every_key() {
    let text = read("examples/agent.toml");
    let parsed = Config::from_toml(&text, Path::new("examples/agent.toml")).unwrap();
    assert_eq!(
        parsed,
        Config::default(),
        "examples/agent.toml drifted from the defaults"
    );
    // Every key the defaults serialize appears set (not only commented out).
    let defaults = toml::to_string(&Config::default()).unwrap();
    for line in defaults.lines() {
        if let Some((key, _)) = line.split_once(" = ") {
            assert!(
                text.lines().any(|l| l.trim_start().starts_with(&format!("{key} ="))),
                "examples/agent.toml does not set `{key}`"
            );
        }
    }
    assert!(text.contains("# nixl_lib_dir ="), "the optional key is documented");
}

#[test]
fn readme_lists_every_endpoint_and_the_two_commands() {
    let readme = read("README.md");
    for (path, _) in nixl_agent::http::ENDPOINTS {
        assert!(
            readme.contains(&format!("| `{path}` |")),
            "README endpoint table lacks {path}"
        );
    }
    assert!(readme.contains("make run") && readme.contains("make test"));
    assert!(
        read(".ci/run").contains("make test"),
        ".ci/run calls the README's test command"
    );
    assert!(readme.contains(nixl_agent::config::DEFAULT_LISTEN));
}

/// Every line of the README's Embedding code blocks is a line of the
/// example that tests/example.rs runs, so the README shows code that works.
#[test]
fn readme_embedding_code_comes_from_the_example() {
    let readme = read("README.md");
    let example = read("examples/serving.rs");
    let section = readme
        .split("## Embedding\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Embedding section");
    let example_lines: Vec<&str> = example.lines().map(str::trim).collect();
    let mut checked = 0;
    for block in section.split("```rust\n").skip(1) {
        let code = block.split("```").next().unwrap_or_default();
        for line in code.lines().map(str::trim).filter(|l| !l.is_empty()) {
            assert!(
                example_lines.contains(&line),
                "README Embedding shows `{line}`, which examples/serving.rs does not have"
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "README Embedding shows too little code ({checked} lines)");
}

/// The block of README between `<!-- FILE -->` and `<!-- end FILE -->`
/// equals the committed FILE, the output of `command`.
fn assert_readme_block_is(file: &str, command: &str) {
    let readme = read("README.md");
    let block = readme
        .split(&format!("<!-- {file} -->\n"))
        .nth(1)
        .and_then(|s| s.split(&format!("\n<!-- end {file} -->")).next())
        .unwrap_or_else(|| panic!("README has no block of {file}"));
    assert_eq!(
        block.trim(),
        read(file).trim(),
        "README differs from {file}: rerun `{command}` and copy it"
    );
}

/// The benchmark figures in README are the committed output of `make bench`.
#[test]
fn readme_benchmark_block_is_the_committed_bench_output() {
    assert_readme_block_is("bench/results/latest.md", "make bench");
}

/// The Python benchmark figures in README are the committed output of
/// `make bench-python`.
#[test]
fn readme_python_benchmark_block_is_the_committed_output() {
    assert_readme_block_is("bench/results/python.md", "make bench-python");
}

/// README's Python settings table names exactly the variables the
/// instrumentation reads.
#[test]
fn readme_python_settings_are_the_ones_read() {
    use nixl_agent::instrument as i;
    let readme = read("README.md");
    let section = readme
        .split("## Python serving processes")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Python serving processes section");
    let rows: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `NIXL_AGENT_"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let mut documented: Vec<String> = rows.iter().map(|r| format!("NIXL_AGENT_{r}")).collect();
    documented.sort();
    let mut read_by_code = vec![
        i::ENV_INSTRUMENT.to_string(),
        nixl_agent::config::ENV_LISTEN.to_string(),
        i::ENV_VALIDATE.to_string(),
        i::ENV_EXPECT.to_string(),
        i::ENV_GROUPS.to_string(),
        i::ENV_MAX_GROUPS.to_string(),
        i::ENV_CAPTURE.to_string(),
        i::ENV_BACKEND.to_string(),
        "NIXL_AGENT_LOG".to_string(),
    ];
    read_by_code.sort();
    assert_eq!(documented, read_by_code);
    assert!(section.contains(nixl_agent::config::DEFAULT_LISTEN));
}

/// README's soak figures are those of the committed `make soak` result.
#[test]
fn readme_soak_figures_are_the_committed_soak_result() {
    let readme = read("README.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let soak: serde_json::Value = serde_json::from_str(&read("bench/results/soak.json")).unwrap();
    let n = |k: &str| soak[k].as_f64().unwrap_or_else(|| panic!("soak.json has no {k}"));
    let thousands = |v: f64| {
        let s = format!("{}", v as u64);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    for figure in [
        format!(
            "{} requests at {:.1} req/s",
            thousands(n("requests")),
            n("achieved_rps")
        ),
        format!("{} errors", n("errors")),
        format!("p50 {} µs", n("p50_us")),
        format!("p99 {:.2} ms", n("p99_us") / 1000.0),
        format!("max {:.1} ms", n("max_us") / 1000.0),
        format!(
            "RSS {:.1} MB with {:.2} % drift",
            n("rss_peak_kib") / 1000.0,
            n("rss_drift_pct")
        ),
        format!(
            "{} re-registrations ({} attempts of `kv`; {} `/readyz` answers of 503",
            n("reregistrations"),
            n("kv_attempts"),
            n("readyz_503_during_reregistration")
        ),
    ] {
        assert!(
            readme.contains(&figure),
            "README Reliability lacks `{figure}` (from bench/results/soak.json)"
        );
    }
}
