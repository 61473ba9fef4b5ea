//! Keeps the documentation true: the metrics and reason tables
//! (docs/metrics.md), the example config, the endpoint list
//! (docs/configuration.md) against the code, the benchmark and soak figures
//! against the committed results, the README's size and every relative link;
//! and (#55) every figure the prose quotes from a benchmark (`figures`),
//! every repository path the docs name (`paths`) and where `unsafe` may be
//! (`unsafe_code`), in its modules under tests/docs/.

mod figures;
mod paths;
mod unsafe_code;

use nixl_agent::config::Config;
use nixl_agent::names::{Reason, FAMILIES};
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A page of docs/ by file name, e.g. `doc("metrics.md")`: where the README's
/// reference sections live.
fn doc(name: &str) -> String {
    read(&format!("docs/{name}"))
}

/// Rows of the table whose first cell is a backticked word starting with `prefix`.
fn rows(text: &str, prefix: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with(&format!("| `{prefix}")))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// docs/metrics.md's families table is generated from the declarations
/// (`names::FAMILIES`): regenerated here and compared; `make docs`
/// (`NIXL_AGENT_BLESS=1`) writes it.
#[test]
fn metrics_table_is_generated_from_the_declarations() {
    const BEGIN: &str = "<!-- generated from crates/ledger/src/telemetry/names.rs (FAMILIES) by `make docs`; tests/docs.rs compares -->\n";
    const END: &str = "<!-- end of the generated table -->\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let text = doc("metrics.md");
    let start = text
        .find(BEGIN)
        .expect("docs/metrics.md: the generated table's first marker")
        + BEGIN.len();
    let end = start
        + text[start..]
            .find(END)
            .expect("docs/metrics.md: the generated table's last marker");
    let want = nixl_agent::names::markdown_table();
    if std::env::var_os("NIXL_AGENT_BLESS").is_some() {
        std::fs::write(&path, format!("{}{want}{}", &text[..start], &text[end..])).unwrap();
        return;
    }
    assert!(
        text[start..end] == want,
        "docs/metrics.md's families table is not what names::FAMILIES declares: run `make docs`"
    );
    // Every family has its row, and every row is a family.
    assert_eq!(rows(&text, "nixl_agent_").len(), FAMILIES.len());
}

#[test]
fn reason_table_matches_the_vocabulary() {
    let table: Vec<Vec<String>> = rows(&doc("metrics.md"), "")
        .into_iter()
        .filter(|r| Reason::ALL.iter().any(|x| r[0] == format!("`{}`", x.as_str())))
        .collect();
    assert_eq!(table.len(), Reason::ALL.len(), "one docs/metrics.md row per reason");
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
fn docs_list_every_endpoint_and_readme_the_two_commands() {
    let configuration = doc("configuration.md");
    for (path, _) in nixl_agent::endpoints::ENDPOINTS {
        assert!(
            configuration.contains(&format!("| `{path}` |")),
            "docs/configuration.md endpoint table lacks {path}"
        );
    }
    for (path, _) in nixl_agent::endpoints::POD_ENDPOINTS {
        assert!(
            configuration.contains(&format!("| `{path}` |")),
            "docs/configuration.md pod endpoint table lacks {path}"
        );
    }
    assert!(configuration.contains(nixl_agent::config::DEFAULT_LISTEN));
    let readme = read("README.md");
    assert!(readme.contains("make run") && readme.contains("make test"));
    assert!(
        read(".ci/run").contains("make test"),
        ".ci/run calls the README's test command"
    );
    assert!(readme.contains(nixl_agent::config::DEFAULT_LISTEN));
}

/// Lines of the `rust` code blocks of `text` that are not lines of the
/// example tests/example.rs runs (trimmed), and how many lines were checked.
fn rust_lines_not_in_the_example(text: &str) -> (Vec<String>, usize) {
    let example = read("examples/serving.rs");
    let example_lines: Vec<&str> = example.lines().map(str::trim).collect();
    let (mut missing, mut checked) = (Vec::new(), 0);
    for block in text.split("```rust\n").skip(1) {
        let code = block.split("```").next().unwrap_or_default();
        for line in code.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !example_lines.contains(&line) {
                missing.push(line.to_string());
            }
            checked += 1;
        }
    }
    (missing, checked)
}

/// Every line of the code blocks of docs/embedding.md (and of the README's
/// quick look at embedding) is a line of the example that tests/example.rs
/// runs, so the docs show code that works.
#[test]
fn embedding_code_comes_from_the_example() {
    let (missing, checked) = rust_lines_not_in_the_example(&doc("embedding.md"));
    assert!(
        missing.is_empty(),
        "docs/embedding.md shows {missing:?}, which examples/serving.rs does not have"
    );
    assert!(
        checked > 10,
        "docs/embedding.md shows too little code ({checked} lines)"
    );
    let (missing, checked) = rust_lines_not_in_the_example(&read("README.md"));
    assert!(
        missing.is_empty(),
        "README shows {missing:?}, which examples/serving.rs does not have"
    );
    assert!(checked > 0, "README shows no embedding code");
}

/// The block of `page` between `<!-- FILE -->` and `<!-- end FILE -->`
/// equals the committed FILE, the output of `command`.
fn assert_block_is(page: &str, file: &str, command: &str) {
    let text = read(page);
    let block = text
        .split(&format!("<!-- {file} -->\n"))
        .nth(1)
        .and_then(|s| s.split(&format!("\n<!-- end {file} -->")).next())
        .unwrap_or_else(|| panic!("{page} has no block of {file}"));
    assert_eq!(
        block.trim(),
        read(file).trim(),
        "{page} differs from {file}: rerun `{command}` and copy it"
    );
}

/// The benchmark figures in docs/performance.md are the committed output of
/// `make bench`.
#[test]
fn benchmark_block_is_the_committed_bench_output() {
    assert_block_is("docs/performance.md", "bench/results/latest.md", "make bench");
}

/// The interposer's figures in docs/performance.md are the committed output
/// of its section of `make bench`.
#[test]
fn interposer_block_is_the_committed_bench_output() {
    assert_block_is(
        "docs/performance.md",
        "bench/results/interposer.md",
        "NIXL_BENCH_NAME=interposer make bench ARGS='--sections interposer'",
    );
}

/// The Python threads' figures in docs/performance.md are the committed
/// output of scripts/bench-threads.sh.
#[test]
fn threads_block_is_the_committed_bench_output() {
    assert_block_is(
        "docs/performance.md",
        "bench/results/threads.md",
        "bash scripts/bench-threads.sh 16 12500 3",
    );
}

/// The Python benchmark figures in docs/python.md are the committed output of
/// `make bench-python`.
#[test]
fn python_benchmark_block_is_the_committed_output() {
    assert_block_is("docs/python.md", "bench/results/python.md", "make bench-python");
}

// docs/python.md's settings table is checked against the variables the
// Python extension reads by that extension's own tests
// (python/native/src/instrument/tests.rs), where those names live.

/// docs/reliability.md's soak figures are those of the committed `make soak`
/// result.
#[test]
fn soak_figures_are_the_committed_soak_result() {
    let page = doc("reliability.md").split_whitespace().collect::<Vec<_>>().join(" ");
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
            page.contains(&figure),
            "docs/reliability.md lacks `{figure}` (from bench/results/soak.json)"
        );
    }
}

/// docs/reliability.md's stress figures are those of the committed `make
/// stress` result (tests/interposer.rs writes it; scripts/stress.sh copies
/// it to bench/results/stress.json).
#[test]
fn stress_figures_are_the_committed_stress_result() {
    let page = doc("reliability.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let run: serde_json::Value = serde_json::from_str(&read("bench/results/stress.json")).unwrap();
    let n = |path: &[&str]| {
        path.iter()
            .fold(&run, |v, k| &v[*k])
            .as_f64()
            .unwrap_or_else(|| panic!("stress.json has no {path:?}"))
    };
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
    let mb = |k: &str| format!("{:.1} MB", n(&[k]) * 1024.0 / 1e6);
    for figure in [
        format!(
            "`NIXL_AGENT_STRESS_SECS={}` ({} build, {:.1} s of the program) on {}",
            n(&["requested_seconds"]),
            run["build"].as_str().unwrap(),
            n(&["seconds"]),
            run["machine"].as_str().unwrap()
        ),
        format!(
            "{} transfers posted and done by the program, {} recorded as done",
            thousands(n(&["program", "posted"])),
            thousands(n(&["recorded", "done"]))
        ),
        format!(
            "{} bytes by the program, {} recorded",
            thousands(n(&["program", "bytes"])),
            thousands(n(&["recorded", "bytes"]))
        ),
        format!(
            "{} registrations and {} deregistrations by the program, {} and {} recorded",
            thousands(n(&["program", "registrations"])),
            thousands(n(&["program", "deregistrations"])),
            thousands(n(&["recorded", "registrations"])),
            thousands(n(&["recorded", "deregistrations"]))
        ),
        format!(
            "{} agents created and destroyed",
            thousands(n(&["program", "agents_created"]))
        ),
        format!(
            "{} forks ({} children that call no NIXL, {} that does)",
            n(&["program", "forks"]),
            n(&["program", "children_ok"]),
            n(&["program", "nixl_children_ok"])
        ),
        format!(
            "{} scrapes of /metrics, {} failed",
            thousands(n(&["scrapes"])),
            n(&["scrape_failures"])
        ),
        format!(
            "RSS {} at the first sample, {} after warm-up, {} at its peak and {} at the last sample",
            mb("rss_start_kib"),
            mb("rss_warm_kib"),
            mb("rss_peak_kib"),
            mb("rss_end_kib")
        ),
        format!(
            "growth after warm-up {} KiB, {:.2} bytes per transfer",
            thousands(n(&["rss_growth_kib"])),
            n(&["rss_growth_bytes_per_transfer"])
        ),
    ] {
        assert!(
            page.contains(&figure),
            "docs/reliability.md lacks `{figure}` (from bench/results/stress.json)"
        );
    }
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors of a Markdown text's headings (duplicates get `-1`, `-2`, ...).
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in prose(text).filter(|l| l.starts_with('#')) {
        let base = anchor(line.trim_start_matches('#').trim());
        let mut a = base.clone();
        let mut n = 0;
        while out.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        out.push(a);
    }
    out
}

/// Targets of the Markdown links `[text](target)` of a text, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        // Drop inline code spans, so `](` inside code is not a link.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect();
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// The README stays a front door (the reference lives in docs/), and every
/// relative link of README.md and docs/*.md points to a file that exists
/// (and, for `page.md#anchor`, to a heading that page has).
/// ARCHITECTURE.md is a map, not a manual: under 200 lines.
#[test]
fn architecture_is_under_200_lines() {
    let lines = read("ARCHITECTURE.md").lines().count();
    assert!(
        lines < 200,
        "ARCHITECTURE.md has {lines} lines: say less, or say it in the code"
    );
}

#[test]
fn readme_is_short_and_relative_links_resolve() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 260, "README.md has {lines} lines: move detail into docs/");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    assert!(pages.len() > 10, "docs/ has its pages ({} found)", pages.len());
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(root).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            checked += 1;
            if !path.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
            } else if !fragment.is_empty()
                && path.extension().is_some_and(|e| e == "md")
                && !anchors(&std::fs::read_to_string(&path).unwrap()).contains(&fragment.to_string())
            {
                broken.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken relative links:\n{}", broken.join("\n"));
    assert!(checked > 50, "too few relative links checked ({checked})");
}

/// Every test docs/python.md's transparency contract names exists, in the
/// file it names (tests/python.rs unless the row says otherwise).
#[test]
fn the_transparency_contract_names_tests_that_exist() {
    let text = doc("python.md");
    let start = text.find("## The transparency contract").expect("the contract section");
    let end = start + text[start..].find("**Reasons from what Python sees.**").unwrap();
    let section = &text[start..end];
    let mut checked = 0;
    for row in section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Point"))
    {
        let held_by = row.rsplit('|').nth(1).unwrap_or("");
        let mut file = "tests/python.rs".to_string();
        for tick in held_by.split('`').skip(1).step_by(2) {
            if tick.ends_with(".rs") {
                file = tick.to_string();
                continue;
            }
            if !tick
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            let src = read(&file);
            assert!(
                src.contains(&format!("fn {tick}(")),
                "docs/python.md names test `{tick}`, which {file} does not define"
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} tests named");
}
