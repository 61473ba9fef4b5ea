//! The first hour (#32): the steps README and docs/ give a newcomer work as
//! written — the wheel's path, the keys a `[[group]]` needs, the flags each
//! command takes, the variables the docs name, the synopsis's commands,
//! where the interposer is looked for, the virtualenv's packages — so that
//! following the docs literally never meets a path that does not exist or
//! a flag that does nothing.

use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README and docs/python.md install the wheel from
/// `target/wheels/release`: the step before it, `make wheel`, is what
/// writes there (make's dry run shows the command; `scripts/python.sh` puts
/// a profile's wheel in `target/wheels/<profile>` unless
/// `NIXL_AGENT_WHEEL_DIR` names another). A build of the release
/// wheel takes minutes, so the command is checked here and run by hand
/// (`make wheel`, then the documented `pip install` into a fresh venv).
#[test]
fn the_documented_wheel_is_what_make_wheel_builds() {
    for page in ["README.md", "docs/python.md"] {
        let text = read(page);
        let lines: Vec<&str> = text.lines().collect();
        let i = lines
            .iter()
            .position(|l| l.starts_with("pip install ./target/wheels/"))
            .unwrap_or_else(|| panic!("{page}: no pip install of the wheel"));
        assert!(
            lines[i].starts_with("pip install ./target/wheels/release/nixl_agent_instrument-*.whl"),
            "{page}: {}",
            lines[i]
        );
        assert!(
            lines[i - 1].starts_with("make wheel "),
            "{page}: the step before is `make wheel`"
        );
    }
    let dry = Command::new("make")
        .args(["-n", "wheel"])
        .current_dir(root())
        .output()
        .expect("make");
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    let dry = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.lines()
            .any(|l| l.ends_with("scripts/python.sh\" release --build-only")),
        "{dry}"
    );
    let script = read("scripts/python.sh");
    assert!(
        script.contains(r#"OUT="${NIXL_AGENT_WHEEL_DIR:-$ROOT/target/wheels/$PROFILE}""#),
        "scripts/python.sh writes elsewhere"
    );
    assert!(
        script.contains(r#"if [ "$BUILD_ONLY" = "--build-only" ]; then"#),
        "--build-only installs nothing"
    );
}

/// docs/configuration.md names the keys a `[[group]]` requires: the list
/// the config checks (`GROUP_REQUIRED_KEYS`), never "every key is optional".
#[test]
fn configuration_docs_name_the_keys_a_group_requires() {
    let text = read("docs/configuration.md");
    assert!(!text.contains("every key is optional and"), "the old claim is back");
    let keys: Vec<String> = nixl_agent::config::GROUP_REQUIRED_KEYS
        .iter()
        .map(|k| format!("`{k}`"))
        .collect();
    let needs = format!(
        "every `[[group]]`\nneeds {}, {}, {}, {} and {}",
        keys[0], keys[1], keys[2], keys[3], keys[4]
    );
    assert!(text.contains(&needs), "docs/configuration.md does not say: {needs}");
}

/// The backticked words of `text` from `marker` up to the sentence's end.
fn listed_after(text: &str, marker: &str) -> Vec<String> {
    let start = text.find(marker).unwrap_or_else(|| panic!("no {marker:?}")) + marker.len();
    let rest = &text[start..];
    let end = rest.find(". ").or_else(|| rest.find(')')).unwrap_or(rest.len());
    rest[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.contains(' ') && !w.contains('_'))
        .map(str::to_string)
        .collect()
}

/// docs/alerts.md and dashboards/README.md list the dashboard's variables
/// as the JSON has them.
#[test]
fn dashboard_variables_in_the_docs_are_the_dashboards() {
    let json: serde_json::Value = serde_json::from_str(&read("dashboards/nixl-agent.json")).unwrap();
    let want: Vec<String> = json["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        listed_after(&read("docs/alerts.md"), "variables "),
        want,
        "docs/alerts.md"
    );
    assert_eq!(
        listed_after(&read("dashboards/README.md"), "Variables: "),
        want,
        "dashboards/README.md"
    );
}

/// Every file under `dir` (recursively) whose name ends with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            files(&p, exts, out);
        } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
            out.push(p);
        }
    }
}

/// README and docs/, as one text.
fn all_docs() -> String {
    let mut pages = vec![root().join("README.md")];
    files(&root().join("docs"), &[".md"], &mut pages);
    pages.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
}

/// Every `NIXL_AGENT_*` variable the code reads (a string literal in src/,
/// crates/ or python/, but the build's own `env!` ones) is in README or docs/.
#[test]
fn every_variable_the_code_reads_is_documented() {
    let mut sources = Vec::new();
    files(&root().join("src"), &[".rs"], &mut sources);
    files(&root().join("crates"), &[".rs"], &mut sources);
    files(&root().join("python"), &[".rs", ".py", ".pth"], &mut sources);
    let mut read_vars = std::collections::BTreeSet::new();
    for p in &sources {
        let text = std::fs::read_to_string(p).unwrap();
        for (i, _) in text.match_indices("\"NIXL_AGENT_") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            let before = &text[i.saturating_sub(12)..i];
            if !before.ends_with("env!(") {
                read_vars.insert(name);
            }
        }
    }
    assert!(read_vars.contains("NIXL_AGENT_RANKS"), "{read_vars:?}");
    let docs = all_docs();
    let missing: Vec<&String> = read_vars.iter().filter(|v| !docs.contains(v.as_str())).collect();
    assert!(missing.is_empty(), "read by the code, in no doc: {missing:?}");
}

/// The `--flags` a command's `--help` lists.
fn flags(command: &[&str]) -> Vec<String> {
    let out = support::binary().args(command).arg("--help").output().unwrap();
    assert!(out.status.success(), "{command:?} --help");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .strip_prefix("--")
                .or_else(|| l.trim_start().strip_prefix("-h, --"))
        })
        .map(|l| format!("--{}", l.split([' ', '=']).next().unwrap()))
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// Each command's `--help` lists only flags that do something there
/// (`rules` loads no config and serves nothing; `pod` loads no NIXL;
/// `check` serves and logs nothing), a flag given where it does not apply is
/// refused, and every flag of every command is in README or docs/.
#[test]
fn every_flag_applies_where_it_is_listed_and_is_documented() {
    let not_here: [(&str, &[&str]); 3] = [
        ("rules", &["--config", "--listen", "--nixl-lib-dir", "--log-format"]),
        ("pod", &["--nixl-lib-dir"]),
        ("check", &["--listen", "--log-format"]),
    ];
    for (cmd, absent) in not_here {
        let listed = flags(&[cmd]);
        for f in absent {
            assert!(!listed.iter().any(|l| l == f), "`{cmd} --help` lists {f}: {listed:?}");
            let out = support::binary().args([cmd, f, "x"]).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "`{cmd} {f}` is refused");
        }
    }
    let docs = all_docs();
    for cmd in [&[][..], &["run"], &["config"], &["check"], &["pod"], &["rules"]] {
        for f in flags(cmd) {
            assert!(docs.contains(&f), "{cmd:?}: {f} is in no doc");
        }
    }
}

/// The runbooks send an operator whose job has another name to
/// `nixl-agent rules --selector`, never to edit matchers by hand, and that
/// command renders rules selecting exactly that job.
#[test]
fn runbooks_render_rules_for_another_job_instead_of_editing_them() {
    let text = read("docs/runbooks.md");
    for stale in [
        "change that matcher throughout",
        "change the `job` matcher in the rules",
    ] {
        assert!(!text.contains(stale), "docs/runbooks.md still says: {stale}");
    }
    assert!(
        text.contains("nixl-agent rules --selector 'job=\"my-job\"'"),
        "no rules --selector"
    );
    let out = support::binary()
        .args(["rules", "--selector", "job=\"my-job\""])
        .output()
        .unwrap();
    assert!(out.status.success());
    let rules = String::from_utf8_lossy(&out.stdout);
    assert!(
        rules.contains("job=\"my-job\"") && !rules.contains("{job=\"nixl-agent\""),
        "{rules}"
    );
}

/// docs/embedding.md's dependency line works as written (the crate is
/// `publish = false`, so a path or git source): a crate depending on this
/// checkout by the doc's `path =` form resolves offline and pulls no clap;
/// with the default features it would.
#[test]
fn the_embedding_dependency_line_resolves_without_the_cli() {
    let text = read("docs/embedding.md");
    let line = text
        .lines()
        .map(|l| l.trim_start_matches("# "))
        .find(|l| l.starts_with("nixl-agent = { path = "))
        .expect("docs/embedding.md: a path dependency line");
    assert!(line.contains("default-features = false"), "{line}");
    assert!(
        text.contains("nixl-agent = { git = ") && read("Cargo.toml").contains("publish = false"),
        "the git form, since the crate is not published"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let tree = |dep: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(
            dir.path().join("Cargo.toml"),
            format!(
                "[package]\nname = \"embedder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n{dep}\n"
            ),
        )
        .unwrap();
        let out = Command::new(&cargo)
            .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
            .current_dir(dir.path())
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{dep}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let here = root().display().to_string();
    let doc = tree(&line.replace("../nixl-agent", &here));
    assert!(
        doc.contains(&format!("nixl-agent v{}", env!("CARGO_PKG_VERSION"))),
        "{doc}"
    );
    assert!(
        !doc.lines().any(|l| l.starts_with("clap ")),
        "the embedder gets clap: {doc}"
    );
    let full = tree(&format!("nixl-agent = {{ path = {here:?} }}"));
    assert!(
        full.lines().any(|l| l.starts_with("clap ")),
        "the CLI feature pulls clap: {full}"
    );
}

/// The commands and flags of `nixl-agent --help`, in its order.
fn help_lists() -> (Vec<String>, Vec<String>) {
    let out = support::binary().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let section = |title: &str| -> Vec<String> {
        help.split(title)
            .nth(1)
            .unwrap_or_else(|| panic!("--help has no {title}: {help}"))
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().find(|w| !w.ends_with(',')))
            .map(str::to_string)
            .collect()
    };
    let commands = section("Commands:").into_iter().filter(|c| c != "help").collect();
    let flags = section("Options:")
        .into_iter()
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    (commands, flags)
}

/// The synopsis lines of README and docs/ (`nixl-agent [run|...] [--flag X]
/// ...`) list the commands and the global flags `--help` lists, in its
/// order: a command added to the binary is added to the synopsis.
#[test]
fn every_synopsis_lists_the_commands_and_flags_of_help() {
    let (commands, flags) = help_lists();
    assert!(commands.iter().any(|c| c == "instrument"), "{commands:?}");
    let mut pages = vec![root().join("README.md")];
    files(&root().join("docs"), &[".md"], &mut pages);
    let mut seen = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for line in text.lines().filter(|l| l.starts_with("nixl-agent [")) {
            let listed: Vec<String> = line["nixl-agent [".len()..]
                .split(']')
                .next()
                .unwrap()
                .split('|')
                .map(str::to_string)
                .collect();
            let listed_flags: Vec<String> = line
                .split('[')
                .skip(2)
                .map(|o| o.split([' ', ']']).next().unwrap().to_string())
                .collect();
            let page = page.strip_prefix(root()).unwrap().display();
            assert_eq!(listed, commands, "{page}: the synopsis's commands");
            assert_eq!(listed_flags, flags, "{page}: the synopsis's flags");
            seen += 1;
        }
    }
    assert!(
        seen >= 2,
        "README and docs/configuration.md have a synopsis ({seen} found)"
    );
}

/// The text of `text` from `start` up to `end`, lines joined by spaces.
fn passage(text: &str, start: &str, end: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = text.find(start).unwrap_or_else(|| panic!("no {start:?}")) + start.len();
    let rest = &text[at..];
    rest[..rest.find(end).unwrap_or(rest.len())].to_string()
}

/// The backticked words of a text.
fn backticked(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Where `nixl-agent instrument` looks for the interposer, as its own
/// error names the places (run from a directory of its own, where there is
/// none), is what docs/instrument.md and docs/configuration.md say:
/// `NIXL_AGENT_INTERPOSER`, beside the binary, then each `../` directory.
#[test]
fn the_interposer_search_list_in_the_docs_is_the_binarys() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = bin.join("nixl-agent");
    // A hard link: the binary's own path (/proc/self/exe) is this one.
    if std::fs::hard_link(env!("CARGO_BIN_EXE_nixl-agent"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_nixl-agent"), &exe).unwrap();
    }
    let out = Command::new(&exe)
        .args(["instrument", "--", "true"])
        .env_remove(nixl_agent::launch::ENV_INTERPOSER)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let looked = err
        .split("(looked at: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("{err}"));
    let prefix = format!("{}/", bin.display());
    let places: Vec<String> = looked
        .split(", ")
        .map(|p| {
            p.strip_prefix(&prefix)
                .and_then(|p| p.strip_suffix(nixl_agent::launch::INTERPOSER))
                .unwrap_or_else(|| panic!("{p} is not under {prefix}"))
                .to_string()
        })
        .collect();
    assert_eq!(
        places.first().map(String::as_str),
        Some(""),
        "beside the binary first: {places:?}"
    );
    let mut want = vec![nixl_agent::launch::ENV_INTERPOSER.to_string()];
    want.extend(places.into_iter().skip(1));
    assert!(want.len() > 2, "{want:?}");
    for (page, start, end) in [
        (
            "docs/instrument.md",
            "Where the interposer is looked for:",
            "In the image",
        ),
        ("docs/configuration.md", "It finds the interposer at", ";"),
    ] {
        let said = passage(&read(page), start, end);
        assert_eq!(backticked(&said), want, "{page}: where the interposer is looked for");
        assert!(said.contains("beside the binary"), "{page}: {said}");
    }
}

/// README's set-up paragraph names every package scripts/setup.sh installs
/// into the virtualenv (each `name==$VERSION` it pip-installs or downloads
/// for it, the NIXL wheel by `$NIXL_WHEEL_NAME`), and no other.
#[test]
fn readme_names_the_packages_setup_installs_into_the_venv() {
    let script = read("scripts/setup.sh");
    let wheel = script
        .lines()
        .find_map(|l| l.strip_prefix("NIXL_WHEEL_NAME="))
        .expect("setup.sh: NIXL_WHEEL_NAME=");
    let script = script.replace("${NIXL_WHEEL_NAME}", wheel);
    let mut installed = std::collections::BTreeSet::new();
    for line in script.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for (i, _) in line.match_indices("==$") {
            let name: String = line[..i]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !name.is_empty() {
                installed.insert(name);
            }
        }
    }
    assert!(
        installed.contains("nixl-cu12") && installed.contains("mypy"),
        "{installed:?}"
    );
    let said = passage(&read("README.md"), "a Python 3.11 virtualenv `.deps/venv` with", ". ");
    let said: std::collections::BTreeSet<String> = backticked(&said)
        .into_iter()
        .filter(|w| !w.starts_with(['-', '.']) && !w.contains('/'))
        .collect();
    assert_eq!(said, installed, "README's set-up paragraph: the virtualenv's packages");
}
