//! The crates of the workspace are the layers ARCHITECTURE.md names, and
//! none depends on a crate of its own layer or above. Cargo already refuses
//! a circle; this holds the direction to the document (its `## Layers`
//! section: `- N: `crate`` lines, lowest first), so that a new crate is
//! placed where a reader can see it and an upward arrow — the ledger on the
//! engine, the sys crate on the ledger — fails here, naming both ends.
//!
//! Packages under tests/programs/ are test programs, in no layer: plain NIXL
//! users that must depend on no `nixl-agent*` crate at all.
//!
//! And the root package builds at most three test binaries, every file of
//! tests/ a module of one (tests/main.rs says why).

use std::collections::BTreeMap;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `crate name → layer` from ARCHITECTURE.md's `## Layers` section.
fn documented() -> BTreeMap<String, u32> {
    let doc = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("\n## Layers\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Layers` section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in section.lines() {
        let Some((n, rest)) = line.strip_prefix("- ").and_then(|l| l.split_once(": ")) else {
            continue;
        };
        let layer: u32 = n
            .parse()
            .unwrap_or_else(|_| panic!("`{line}`: the layer is not a number"));
        for name in rest.split('`').skip(1).step_by(2) {
            assert!(out.insert(name.to_string(), layer).is_none(), "{name} is listed twice");
        }
    }
    out
}

/// Where the test programs live: plain NIXL users, in no layer.
const PROGRAMS: &str = "tests/programs/";

/// `cargo metadata --no-deps`'s packages.
fn packages() -> Vec<serde_json::Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"].as_array().unwrap().clone()
}

fn is_program(package: &serde_json::Value) -> bool {
    Path::new(package["manifest_path"].as_str().unwrap()).starts_with(repo().join(PROGRAMS))
}

/// Every workspace member but the test programs and the workspace members it
/// depends on (normal, build and dev dependencies alike), from `cargo
/// metadata`.
fn workspace() -> BTreeMap<String, Vec<(String, String)>> {
    let packages: Vec<_> = packages().into_iter().filter(|p| !is_program(p)).collect();
    let members: Vec<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| members.iter().any(|m| m == d["name"].as_str().unwrap()))
                .map(|d| {
                    let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                    (d["name"].as_str().unwrap().to_string(), kind)
                })
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn every_crate_is_in_one_layer_and_depends_only_on_layers_below_it() {
    let layers = documented();
    let crates = workspace();
    assert!(crates.len() >= 6, "found too few crates: {:?}", crates.keys());
    let unlisted: Vec<_> = crates.keys().filter(|c| !layers.contains_key(*c)).collect();
    let gone: Vec<_> = layers.keys().filter(|c| !crates.contains_key(*c)).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "ARCHITECTURE.md's layers and the workspace differ: not listed {unlisted:?}, listed but absent {gone:?}"
    );
    let mut upward = Vec::new();
    for (name, deps) in &crates {
        for (dep, kind) in deps {
            if layers[dep] >= layers[name] {
                upward.push(format!(
                    "{name} (layer {}) → {dep} (layer {}, a {kind} dependency)",
                    layers[name], layers[dep]
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "dependencies that do not point down:\n{}",
        upward.join("\n")
    );
}

#[test]
fn test_programs_depend_on_no_nixl_agent_crate() {
    let programs: Vec<_> = packages().into_iter().filter(is_program).collect();
    assert!(!programs.is_empty(), "no package under {PROGRAMS}");
    let mut wrong = Vec::new();
    for p in &programs {
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            if dep.starts_with("nixl-agent") {
                wrong.push(format!("{} → {dep}", p["name"].as_str().unwrap()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "test programs under {PROGRAMS} must hold no nixl-agent code:\n{}",
        wrong.join("\n")
    );
}

/// The most test binaries the root package may build. Each is linked on its
/// own against the whole workspace, and on a small machine those links were
/// most of `make test` (one binary a file of tests/ made 34 of them).
const MAX_TEST_BINARIES: usize = 3;

/// The file that declares the module `file` is (`tests/a/b.rs` and
/// `tests/a/b/mod.rs` are declared in `tests/a.rs` or `tests/a/mod.rs`),
/// and its name there.
fn declared_in(file: &Path, roots: &[std::path::PathBuf]) -> (Vec<std::path::PathBuf>, String) {
    let (dir, name) = if file.file_name().unwrap() == "mod.rs" {
        let dir = file.parent().unwrap();
        (dir.parent().unwrap(), dir.file_name().unwrap())
    } else {
        (file.parent().unwrap(), file.file_stem().unwrap())
    };
    let parents = if dir == repo().join("tests") {
        roots.to_vec()
    } else {
        vec![dir.with_extension("rs"), dir.join("mod.rs")]
    };
    (parents, name.to_string_lossy().into_owned())
}

#[test]
fn the_integration_tests_are_at_most_three_binaries_and_every_file_of_tests_is_in_one() {
    let root = packages()
        .into_iter()
        .find(|p| p["name"] == "nixl-agent")
        .expect("the nixl-agent package");
    let roots: Vec<std::path::PathBuf> = root["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "test"))
        .map(|t| t["src_path"].as_str().unwrap().into())
        .collect();
    assert!(
        !roots.is_empty() && roots.len() <= MAX_TEST_BINARIES,
        "{} test binaries ({roots:?}); at most {MAX_TEST_BINARIES}: make a new file of tests/ a module of tests/main.rs",
        roots.len()
    );
    // With `autotests = false` a file of tests/ that no binary declares is
    // never compiled: its tests would pass by not existing.
    let mut files = Vec::new();
    let mut dirs = vec![repo().join("tests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() && !path.starts_with(repo().join(PROGRAMS)) {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !roots.contains(&path) {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 30, "found too few test files: {files:?}");
    let mut stray = Vec::new();
    for file in &files {
        let (parents, name) = declared_in(file, &roots);
        let declared = parents
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .any(|text| {
                text.lines().any(|l| {
                    let l = l.trim_start();
                    let l = l.strip_prefix("pub ").or(l.strip_prefix("pub(crate) ")).unwrap_or(l);
                    l == format!("mod {name};")
                })
            });
        if !declared {
            stray.push(format!("{} (no `mod {name};` in {parents:?})", file.display()));
        }
    }
    assert!(
        stray.is_empty(),
        "files of tests/ that no test binary compiles:\n{}",
        stray.join("\n")
    );
}

/// Type names that more than one product file defines, on purpose, each
/// with why. Anything else defined twice is one name for two concepts.
const SHARED_TYPE_NAMES: &[(&str, &str)] = &[
    (
        "Inner",
        "the private body behind an Arc'd handle (Observer, the C API's agent)",
    ),
    (
        "Shared",
        "the private state a thread and its owner share (the fd tap, the publisher)",
    ),
    (
        "Seen",
        "a table's private note of what it last saw (watchdog, peer transports, pod life)",
    ),
    (
        "Running",
        "each front-end's private per-process state (the extension, the interposer)",
    ),
    (
        "Prepped",
        "a prepXferDlist list as each front-end keeps it (the interposer's is private)",
    ),
];

/// The product's Rust files: src/, crates/*/src and python/native/src,
/// without test-only modules (`#[cfg(test)] mod x;` files and folders,
/// `tests.rs`) — each file's text up to its inline `#[cfg(test)] mod x {`.
fn product_sources() -> Vec<(std::path::PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        let mut test_only = Vec::new();
        for p in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "rs")) {
            let text = std::fs::read_to_string(p).unwrap();
            let mut lines = text.lines().peekable();
            while let Some(line) = lines.next() {
                if line == "#[cfg(test)]" {
                    if let Some(m) = lines.peek().and_then(|l| l.strip_prefix("mod ")?.strip_suffix(';')) {
                        // Beside lib.rs or mod.rs, else in the folder of the file's name.
                        let stem = p.file_stem().unwrap();
                        let base = if stem == "lib" || stem == "mod" {
                            dir.to_path_buf()
                        } else {
                            dir.join(stem)
                        };
                        test_only.extend([base.join(format!("{m}.rs")), base.join(m)]);
                    }
                }
            }
        }
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if test_only.contains(&p) || name == "tests.rs" || name == "tests" {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                let lines: Vec<&str> = text.lines().collect();
                let end = (0..lines.len())
                    .find(|&i| {
                        lines[i] == "#[cfg(test)]"
                            && lines
                                .get(i + 1)
                                .is_some_and(|l| l.starts_with("mod ") && l.ends_with('{'))
                    })
                    .unwrap_or(lines.len());
                out.push((p, lines[..end].join("\n")));
            }
        }
    }
    let mut roots = vec![repo().join("src"), repo().join("python/native/src")];
    for c in std::fs::read_dir(repo().join("crates")).unwrap() {
        roots.push(c.unwrap().path().join("src"));
    }
    let mut out = Vec::new();
    for r in roots.iter().filter(|r| r.is_dir()) {
        walk(r, &mut out);
    }
    out
}

/// `struct|enum|trait|type|union Name` at a file's top level (not an
/// associated type, not an item inside a function), whatever its `pub`.
fn defined_type(line: &str) -> Option<&str> {
    let mut rest = line;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = r
            .strip_prefix('(')
            .map_or(r, |r| r.split_once(')').map_or(r, |(_, r)| r));
        rest = rest.strip_prefix(' ')?;
    }
    let (_, rest) = ["struct ", "enum ", "trait ", "type ", "union "]
        .iter()
        .find_map(|k| rest.strip_prefix(k).map(|r| (k, r)))?;
    let name = rest.split(|c: char| !c.is_alphanumeric() && c != '_').next()?;
    (!name.is_empty()).then_some(name)
}

#[test]
fn one_type_name_is_defined_in_one_product_file() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let sources = product_sources();
    assert!(sources.len() > 100, "found too few product files: {}", sources.len());
    for (path, text) in &sources {
        let file = path.strip_prefix(repo()).unwrap().display().to_string();
        for name in text.lines().filter_map(defined_type) {
            let files = defined.entry(name.to_string()).or_default();
            if !files.contains(&file) {
                files.push(file.clone());
            }
        }
    }
    assert!(
        defined.contains_key("Ledger") && defined.contains_key("Observer"),
        "the scan found no types"
    );
    let twice: Vec<_> = defined
        .iter()
        .filter(|(name, files)| files.len() > 1 && !SHARED_TYPE_NAMES.iter().any(|(n, _)| n == name))
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "one type name for two concepts (rename one; a private helper that must keep its name goes in SHARED_TYPE_NAMES):\n{}",
        twice.join("\n")
    );
    let stale: Vec<_> = SHARED_TYPE_NAMES
        .iter()
        .filter(|(n, _)| defined.get(*n).is_none_or(|f| f.len() < 2))
        .map(|(n, _)| *n)
        .collect();
    assert!(
        stale.is_empty(),
        "SHARED_TYPE_NAMES names types defined once or not at all: {stale:?}"
    );
}
