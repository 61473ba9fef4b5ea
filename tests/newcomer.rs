//! The first hour (#32): the steps README and docs/ give a newcomer work as
//! written — the wheel's path, the keys a `[[group]]` needs, the flags each
//! command takes, the variables the docs name — so that following the docs
//! literally never meets a path that does not exist or a flag that does
//! nothing.

mod support;

use std::path::PathBuf;
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
/// a profile's wheel in `target/wheels/<profile>`). A build of the release
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
        script.contains(r#"OUT="$ROOT/target/wheels/$PROFILE""#),
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
    assert_eq!(listed_after(&read("docs/alerts.md"), "variables "), want, "docs/alerts.md");
    assert_eq!(
        listed_after(&read("dashboards/README.md"), "Variables: "),
        want,
        "dashboards/README.md"
    );
}
