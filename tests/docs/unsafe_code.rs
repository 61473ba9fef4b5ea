//! Where `unsafe` may be, as ARCHITECTURE.md's invariant and
//! docs/reliability.md say it, is where it is (#55): the places the code
//! allows `unsafe_code` (an `allow`, or a workspace member that inherits
//! no deny), each of which uses it, are exactly the places both docs name,
//! and no `unsafe` is used anywhere else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of the checkout (relative), build outputs, fetched
/// dependencies and hidden directories left out.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if p.is_dir() {
            sources(&p, out);
        } else if name.ends_with(".rs") {
            out.push(p.strip_prefix(root()).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// A line without its comment and its string literals (roughly: enough
/// for `unsafe` in a message or a doc not to count).
fn code(line: &str) -> String {
    let line = line.split("//").next().unwrap_or("");
    line.split('"').step_by(2).collect::<Vec<_>>().join("\"\"")
}

/// Whether `text` uses `unsafe` (a block, fn, impl, trait, extern block or
/// attribute).
fn uses_unsafe(text: &str) -> bool {
    text.lines().map(code).any(|l| {
        l.match_indices("unsafe").any(|(i, _)| {
            let before = l[..i].chars().next_back();
            let after = l[i + "unsafe".len()..].trim_start();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && ["{", "fn ", "impl", "trait ", "extern ", "("]
                    .iter()
                    .any(|a| after.starts_with(a))
        })
    })
}

/// The place an `allow(unsafe_code)` in `file` covers: a crate (or a
/// target such as the benchmark) when the file is its root, else the file.
fn place_of_allow(file: &str) -> String {
    let path = Path::new(file);
    let name = path.file_name().unwrap().to_string_lossy();
    if name != "lib.rs" && name != "main.rs" {
        return file.to_string();
    }
    let dir = path.parent().unwrap();
    let dir = if dir.ends_with("src") {
        dir.parent().unwrap()
    } else {
        dir
    };
    format!("{}/", dir.display())
}

/// The backticked paths (words with a `/`) of the passage of `page` that
/// starts at `start` and ends at `end`.
fn named_in(page: &str, start: &str, end: &str) -> BTreeSet<String> {
    let text = super::read(page);
    let at = text.find(start).unwrap_or_else(|| panic!("{page}: no {start:?}"));
    let passage = &text[at..];
    let passage = &passage[..passage[start.len()..]
        .find(end)
        .map_or(passage.len(), |i| i + start.len())];
    passage
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.contains('/') && !w.contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn unsafe_is_where_the_docs_say_and_nowhere_else() {
    let manifest = super::read("Cargo.toml");
    assert!(
        manifest.contains("[workspace.lints.rust]\nunsafe_code = \"deny\""),
        "the workspace denies unsafe_code"
    );
    let members: Vec<&str> = manifest
        .lines()
        .find(|l| l.starts_with("members = ["))
        .expect("workspace members")
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    assert!(members.len() > 5, "{members:?}");
    let mut places = BTreeSet::new();
    for m in &members {
        let cargo = super::read(&format!("{m}/Cargo.toml"));
        if !cargo.contains("[lints]\nworkspace = true") {
            places.insert(if *m == "." { String::new() } else { format!("{m}/") });
        }
    }
    let mut files = Vec::new();
    sources(&root(), &mut files);
    let mut using = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        if text.lines().map(code).any(|l| l.contains("allow(unsafe_code)")) {
            places.insert(place_of_allow(f));
        }
        if uses_unsafe(&text) {
            using.push(f.clone());
        }
    }
    assert!(using.iter().any(|f| f == "crates/sys/src/capi.rs"), "{using:?}");
    let outside: Vec<&String> = using
        .iter()
        .filter(|f| !places.iter().any(|p| f.starts_with(p.as_str())))
        .collect();
    assert!(
        outside.is_empty(),
        "unsafe where unsafe_code is denied: {outside:?} (allowed in {places:?})"
    );
    let unused: Vec<&String> = places
        .iter()
        .filter(|p| !using.iter().any(|f| f.starts_with(p.as_str())))
        .collect();
    assert!(unused.is_empty(), "allowed but not used, deny it again: {unused:?}");
    let architecture = named_in("ARCHITECTURE.md", "Architecture Invariant: `unsafe`", "\n\n");
    let reliability = named_in("docs/reliability.md", "- **unsafe**", "\n- **");
    assert_eq!(architecture, places, "ARCHITECTURE.md names these places of `unsafe`");
    assert_eq!(
        reliability, places,
        "docs/reliability.md names these places of `unsafe`"
    );
}
