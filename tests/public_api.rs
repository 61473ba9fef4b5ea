//! The public API is a deliberate list: `src/lib.rs` names every public item
//! in its "Public API" doc section, and this test holds that list equal to
//! what lib.rs exports. Public signatures name no type of axum, prometheus,
//! hyper or tokio (the router is re-exported as `nixl_agent::Router`, on
//! purpose and documented), and no integration test reaches the benchmark's
//! internals.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The names the "Public API" doc section lists (in backticks and brackets).
fn documented(lib: &str) -> BTreeSet<String> {
    let section = lib
        .split("//! # Public API")
        .nth(1)
        .expect("lib.rs has a `# Public API` section")
        .split("#![")
        .next()
        .unwrap();
    let mut out = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("//! - ")) {
        for part in line.split("[`").skip(1) {
            out.insert(part.split('`').next().unwrap().to_string());
        }
    }
    out
}

/// What lib.rs exports at its top level: `pub mod`, `pub use` and `pub fn`
/// names.
fn exported(lib: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut depth = 0usize;
    let mut pending = String::new();
    for raw in lib.lines() {
        let line = raw.trim();
        // A `pub use` that rustfmt wrapped over several lines is read whole.
        if depth == 0 || !pending.is_empty() {
            if !pending.is_empty() || line.starts_with("pub use ") {
                pending.push_str(line);
                pending.push(' ');
                if line.ends_with(';') {
                    let body = pending.trim_start_matches("pub use ").trim_end().trim_end_matches(';');
                    let names = match body.split_once('{') {
                        Some((_, rest)) => rest.trim_end_matches('}').split(',').map(str::to_string).collect(),
                        None => vec![body.rsplit("::").next().unwrap().to_string()],
                    };
                    for n in names {
                        let n = n.trim();
                        if n.is_empty() {
                            continue;
                        }
                        let name = n.rsplit(" as ").next().unwrap().rsplit("::").next().unwrap();
                        out.insert(name.trim().to_string());
                    }
                    pending.clear();
                }
            } else if let Some(rest) = line.strip_prefix("pub fn ") {
                out.insert(rest.split(['(', '<']).next().unwrap().trim().to_string());
            } else if let Some(rest) = line.strip_prefix("pub mod ") {
                let name = rest.trim_end_matches(';').trim_end_matches('{').trim();
                out.insert(name.to_string());
            } else {
                assert!(
                    !line.starts_with("pub ") && !line.starts_with("pub("),
                    "lib.rs exports something neither `pub mod`, `pub use` nor `pub fn`: {line}"
                );
            }
        }
        if pending.is_empty() && !line.starts_with("pub use ") {
            depth += line.matches('{').count();
            depth = depth.saturating_sub(line.matches('}').count());
        }
    }
    out
}

#[test]
fn the_documented_list_is_exactly_what_lib_rs_exports() {
    let lib = read(&repo().join("src/lib.rs"));
    let (doc, code) = (documented(&lib), exported(&lib));
    let undocumented: Vec<_> = code.difference(&doc).collect();
    let missing: Vec<_> = doc.difference(&code).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "exported but not in the Public API list: {undocumented:?}; listed but not exported: {missing:?}"
    );
    assert!(code.len() > 30, "the parser found too little: {code:?}");
    assert!(lib.contains("\nmod agent;"), "`agent` is crate-private");
    // The layers below are this crate's to use, not to hand out: only what
    // the list names is re-exported from them.
    for m in [
        "ledger",
        "nixl",
        "record",
        "lifecycle",
        "http",
        "otlp",
        "telemetry",
        "pod",
        "engine",
    ] {
        assert!(!code.contains(m), "`{m}` is exported");
    }
}

/// Files whose `pub` items are reachable from outside the crate: the public
/// modules and the files that define re-exported types. (The layers' files
/// have `pub` items of their own for the crates above them: only those this
/// crate re-exports count. `telemetry/exposition.rs` gives `Format`, an
/// enum, and no signature.)
const PUBLIC_FILES: &[&str] = &[
    "src/agent.rs",
    "src/cli.rs",
    "crates/core/src/config.rs",
    "crates/core/src/model.rs",
    "crates/core/src/plan.rs",
    "crates/sys/src/descriptor.rs",
    "crates/sys/src/stderr.rs",
    "crates/engine/src/observe.rs",
    "crates/engine/src/observe/observed_agent.rs",
    "crates/engine/src/observe/observed_xfer.rs",
    "crates/pod/src/publish.rs",
    "crates/ledger/src/status.rs",
    "crates/ledger/src/telemetry/metrics.rs",
    "crates/ledger/src/telemetry/traces.rs",
    "crates/admin/src/otlp.rs",
];

const FOREIGN: &[&str] = &[
    "axum::",
    "prometheus::",
    "hyper::",
    "tokio::",
    "Registry",
    "watch::",
    "runtime::",
];

#[test]
fn public_signatures_name_no_axum_prometheus_or_tokio_type() {
    let mut found = Vec::new();
    for f in PUBLIC_FILES {
        let text = read(&repo().join(f));
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (i, line) in code.lines().enumerate() {
            let t = line.trim_start();
            let public = t.starts_with("pub fn ")
                || t.starts_with("pub async fn ")
                || t.starts_with("pub struct ")
                || t.starts_with("pub type ")
                || (t.starts_with("pub ") && t.contains(": ") && !t.contains("fn "));
            if public && FOREIGN.iter().any(|w| t.contains(w)) {
                found.push(format!("{f}:{}: {t}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "public signatures naming foreign types:\n{}",
        found.join("\n")
    );
}
