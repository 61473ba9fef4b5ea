//! Every path of this repository that README.md, ARCHITECTURE.md and the
//! pages of docs/ name exists in the checkout (#55): a moved or renamed
//! file leaves no doc pointing at where it was. Relative links are checked
//! apart (`readme_is_short_and_relative_links_resolve`); this reads the
//! text itself, code blocks included.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Directories the docs name that are not this repository's, and why. Each
/// is absent here (the test checks it), so naming one of ours under it is
/// impossible.
const NOT_OURS: &[(&str, &str)] = &[
    // NIXL's own source tree (github.com/ai-dynamo/nixl), which docs cite
    // for what NIXL does: `src/utils/common/configuration.cpp`,
    // `src/api/python/_api.py`, ...
    ("src/api/", "NIXL's source: its C++ and Python APIs"),
    ("src/utils/", "NIXL's source: its utilities (configuration, telemetry)"),
    ("src/core/", "NIXL's source: the agent"),
    ("src/plugins/", "NIXL's source: its backends"),
    ("src/bindings/", "NIXL's source: its Python and Rust bindings"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages that name paths: README.md, ARCHITECTURE.md, docs/*.md and
/// dashboards/README.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![
        root().join("README.md"),
        root().join("ARCHITECTURE.md"),
        root().join("dashboards/README.md"),
    ];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    pages
}

/// Every file of the checkout (relative, `/`-separated), build outputs,
/// fetched dependencies and hidden directories left out.
fn files(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "__pycache__" {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p.strip_prefix(root()).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// The top-level directories of the checkout but `target/`: a word that
/// starts with one of them and a `/` is a path of this repository.
fn top_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    dirs.sort();
    dirs
}

/// Trailing punctuation of a sentence or of Markdown around a word.
fn trim(word: &str) -> &str {
    word.trim_end_matches(['.', ',', ';', ':', ')', '`', '\'', '"', '*'])
}

/// A path as it stands in the checkout: without a link's `#anchor`; up to
/// a placeholder or wildcard (`<N>`, `{x}`, `*`), the directory before it.
fn stem(path: &str) -> &str {
    let path = path.split('#').next().unwrap();
    match path.find(['*', '<', '{']) {
        Some(i) => &path[..path[..i].rfind('/').map_or(0, |j| j + 1)],
        None => path,
    }
}

/// The repository paths one page names, with the line each is on and
/// whether it starts at the repository's root: words starting with a
/// top-level directory and `/` (not inside a longer path or a URL), and
/// backticked file paths, which may be relative to some directory
/// (`stderr/exit.rs`).
fn named(text: &str, tops: &[String]) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, _) in line.char_indices() {
            let before = line[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || "_./$-~=:".contains(c)) {
                continue;
            }
            let rest = &line[i..];
            if tops.iter().any(|t| rest.starts_with(&format!("{t}/"))) {
                let word = rest
                    .split(|c: char| c.is_whitespace() || "`()[]|\"'".contains(c))
                    .next()
                    .unwrap();
                out.push((n + 1, trim(word).to_string(), true));
            }
        }
        for (i, span) in line.split('`').enumerate() {
            let is_file = span.contains('/')
                && !span.contains(char::is_whitespace)
                && span.rsplit('.').next().is_some_and(|x| {
                    ["rs", "py", "pyi", "md", "yml", "yaml", "json", "sh", "toml", "h", "cpp"].contains(&x)
                });
            let elsewhere = span.starts_with(['/', '.', '$', '~'])
                || span.contains("://")
                || span.contains('=')
                || ["target/", "dist/", "site-packages/"]
                    .iter()
                    .any(|p| span.starts_with(p));
            if i % 2 == 1 && is_file && !elsewhere {
                let from_top = tops.iter().any(|t| span.starts_with(&format!("{t}/")));
                out.push((n + 1, span.to_string(), from_top));
            }
        }
    }
    out
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    for (dir, why) in NOT_OURS {
        assert!(!root().join(dir).exists(), "{dir} ({why}) is a directory of ours now");
    }
    let tops = top_dirs();
    assert!(tops.iter().any(|t| t == "crates"), "{tops:?}");
    let mut all = Vec::new();
    files(&root(), &mut all);
    let mut missing = BTreeSet::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for (line, path, from_top) in named(&text, &tops) {
            let stem = stem(&path);
            if NOT_OURS.iter().any(|(dir, _)| stem.starts_with(dir)) {
                continue;
            }
            checked += 1;
            let exists =
                root().join(stem).exists() || (!from_top && all.iter().any(|f| f.ends_with(&format!("/{stem}"))));
            if !exists {
                missing.insert(format!("{name}:{line}: {path}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that this checkout does not have:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(checked > 300, "too few paths checked ({checked})");
}
