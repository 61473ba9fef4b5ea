//! Unsafe audit: the "only room with FFI" invariant of ARCHITECTURE.md,
//! checked on the source text so that it cannot rot.
//!
//! (a) `unsafe` (blocks, fns, impls, traits, extern blocks) appears only under
//!     `src/nixl/`, and so does `allow(unsafe_code)`;
//! (b) every `unsafe {` block and `unsafe impl` has a `// Safety:` comment in
//!     the contiguous comment lines just above it (or above the statement
//!     that contains it), and every `unsafe fn` a comment that mentions Safety;
//! (c) `src/lib.rs` has `#![deny(unsafe_code)]` and `src/nixl/mod.rs`
//!     `#![allow(unsafe_code)]`.
//!
//! Comments and string/char literals are masked out before looking for the
//! `unsafe` keyword, so prose and test strings never count. Failures print
//! `file:line: what`.

#[path = "support/rust_source.rs"]
mod rust_source;
use rust_source::{mask, repo, rust_files};

/// The folder where unsafe code is allowed.
const FFI_ROOM: &str = "src/nixl/";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Finding {
    file: String,
    line: usize,
    what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.what)
    }
}

/// What follows an `unsafe` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnsafeKind {
    Block,
    Fn,
    Impl,
    Trait,
    Extern,
    Other,
}

/// Every `unsafe` keyword in masked code: (0-based line, kind).
fn unsafe_sites(masked: &str) -> Vec<(usize, UnsafeKind)> {
    let mut out = Vec::new();
    let text: Vec<char> = masked.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let word: Vec<char> = "unsafe".chars().collect();
    let mut line = 0;
    let mut i = 0;
    while i < text.len() {
        if text[i] == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        let at_word = text[i..].starts_with(&word)
            && (i == 0 || !is_ident(text[i - 1]))
            && text.get(i + word.len()).is_none_or(|&c| !is_ident(c));
        if !at_word {
            i += 1;
            continue;
        }
        let mut j = i + word.len();
        while j < text.len() && text[j].is_whitespace() {
            j += 1;
        }
        let rest: String = text[j..text.len().min(j + 8)].iter().collect();
        let starts = |w: &str| rest.starts_with(w) && rest[w.len()..].chars().next().is_none_or(|c| !is_ident(c));
        let kind = if rest.starts_with('{') {
            UnsafeKind::Block
        } else if starts("fn") {
            UnsafeKind::Fn
        } else if starts("impl") {
            UnsafeKind::Impl
        } else if starts("trait") {
            UnsafeKind::Trait
        } else if starts("extern") {
            UnsafeKind::Extern
        } else {
            UnsafeKind::Other
        };
        out.push((line, kind));
        i += word.len();
    }
    out
}

/// The contiguous comment lines just above the statement that holds line
/// `at` (attributes between the comment and the item are skipped).
fn comment_above(orig: &[&str], masked: &[&str], at: usize) -> String {
    // Walk up to the first line of the statement: a line above belongs to it
    // while it holds code that does not end a statement or open/close a block.
    let mut start = at;
    for _ in 0..12 {
        if start == 0 {
            break;
        }
        let prev = masked[start - 1].trim();
        let continues = !prev.is_empty()
            && !prev.ends_with(';')
            && !prev.ends_with('{')
            && !prev.ends_with('}')
            && !prev.starts_with("#[");
        if !continues {
            break;
        }
        start -= 1;
    }
    let mut lines = Vec::new();
    let mut k = start;
    while k > 0 {
        let t = orig[k - 1].trim();
        if t.starts_with("#[") {
            k -= 1;
            continue;
        }
        let is_comment = t.starts_with("//") || t.starts_with("/*") || t.starts_with('*') || t.ends_with("*/");
        if !is_comment {
            break;
        }
        lines.push(t);
        k -= 1;
    }
    lines.reverse();
    lines.join("\n")
}

/// Audits one file's text; `rel` is its path relative to the repository.
fn audit_source(rel: &str, src: &str) -> Vec<Finding> {
    let masked = mask(src);
    let orig: Vec<&str> = src.lines().collect();
    let mlines: Vec<&str> = masked.lines().collect();
    let in_room = rel.starts_with(FFI_ROOM);
    let mut out = Vec::new();
    let mut find = |line: usize, what: String| {
        out.push(Finding {
            file: rel.to_string(),
            line: line + 1,
            what,
        })
    };
    for (line, kind) in unsafe_sites(&masked) {
        if !in_room {
            find(
                line,
                format!("`unsafe` ({kind:?}) outside {FFI_ROOM}: move the FFI into src/nixl/ behind a safe API"),
            );
        }
        let comment = comment_above(&orig, &mlines, line);
        match kind {
            UnsafeKind::Block | UnsafeKind::Impl | UnsafeKind::Extern | UnsafeKind::Trait => {
                if !(comment.contains("Safety:") || comment.contains("SAFETY:")) {
                    find(
                        line,
                        format!("`unsafe` {kind:?} without a `// Safety:` comment just above it"),
                    );
                }
            }
            UnsafeKind::Fn => {
                if !comment.to_ascii_lowercase().contains("safety") {
                    find(
                        line,
                        "`unsafe fn` without a comment mentioning Safety just above it".into(),
                    );
                }
            }
            UnsafeKind::Other => {}
        }
    }
    if !in_room {
        for (line, l) in mlines.iter().enumerate() {
            let compact: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            if compact.contains("allow(unsafe_code)") {
                find(line, format!("`allow(unsafe_code)` outside {FFI_ROOM}"));
            }
        }
    }
    out
}

/// The crate-level attributes that make the compiler enforce the room.
fn audit_roots(lib_rs: &str, nixl_mod_rs: &str) -> Vec<Finding> {
    let has = |src: &str, attr: &str| {
        mask(src)
            .lines()
            .any(|l| l.chars().filter(|c| !c.is_whitespace()).collect::<String>() == attr)
    };
    let mut out = Vec::new();
    if !has(lib_rs, "#![deny(unsafe_code)]") {
        out.push(Finding {
            file: "src/lib.rs".into(),
            line: 1,
            what: "missing `#![deny(unsafe_code)]` at the crate root".into(),
        });
    }
    if !has(nixl_mod_rs, "#![allow(unsafe_code)]") {
        out.push(Finding {
            file: "src/nixl/mod.rs".into(),
            line: 1,
            what: "missing `#![allow(unsafe_code)]` (the one room where unsafe is allowed)".into(),
        });
    }
    out
}

fn report(findings: &[Finding]) -> String {
    findings.iter().map(|f| format!("  {f}\n")).collect()
}

#[test]
fn unsafe_lives_only_in_src_nixl_and_every_site_says_why_it_is_safe() {
    let root = repo();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 10, "found only {} files under src/", files.len());
    // The Python extension crate: no unsafe of its own (PyO3 holds it).
    rust_files(&root.join("python/native/src"), &mut files);
    let mut findings = Vec::new();
    let mut sites = 0;
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        sites += unsafe_sites(&mask(&src)).len();
        findings.extend(audit_source(&rel, &src));
    }
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    findings.extend(audit_roots(&read("src/lib.rs"), &read("src/nixl/mod.rs")));
    assert!(
        read("python/native/src/lib.rs").contains("#![deny(unsafe_code)]"),
        "python/native/src/lib.rs must deny unsafe_code"
    );
    assert!(
        findings.is_empty(),
        "unsafe audit failed ({} findings in {} files):\n{}",
        findings.len(),
        files.len(),
        report(&findings)
    );
    // The audit must actually see the FFI room's unsafe code, or it proves nothing.
    assert!(
        sites >= 10,
        "only {sites} unsafe sites found under src/: is the scanner blind?"
    );
    println!(
        "audited {} files, {sites} unsafe sites, all under {FFI_ROOM}",
        files.len()
    );
}

// The checker itself: it must flag what it is meant to flag, and only that.

/// The real FFI files, mutated in memory: with their Safety comments removed
/// every site is flagged, and moved out of src/nixl/ every site is flagged
/// again. Proves the audit above is not passing by being blind.
#[test]
fn audit_fails_on_the_real_ffi_files_once_mutated() {
    let root = repo();
    let mut files = Vec::new();
    rust_files(&root.join("src/nixl"), &mut files);
    let mut total = 0;
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let src = std::fs::read_to_string(f).unwrap();
        let sites = unsafe_sites(&mask(&src)).len();
        total += sites;
        let stripped: String = src
            .lines()
            .filter(|l| !(l.trim_start().starts_with("//") && l.to_ascii_lowercase().contains("safety")))
            .map(|l| format!("{l}\n"))
            .collect();
        let flagged = audit_source(&rel, &stripped);
        assert_eq!(
            flagged.len(),
            sites,
            "{rel}: stripped of Safety comments:\n{}",
            report(&flagged)
        );
        let moved = audit_source("src/plan.rs", &src);
        let outside = moved.iter().filter(|f| f.what.starts_with("`unsafe` (")).count();
        assert_eq!(outside, sites, "{rel} moved to src/plan.rs:\n{}", report(&moved));
    }
    assert!(total >= 10, "only {total} sites in src/nixl");
}

#[test]
fn audit_flags_unsafe_outside_the_ffi_room() {
    let src = "fn f() {\n    // Safety: fine.\n    unsafe { g() }\n}\n";
    let f = audit_source("src/plan.rs", src);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].line, 3);
    assert!(f[0]
        .to_string()
        .starts_with("src/plan.rs:3: `unsafe` (Block) outside src/nixl/"));
    assert!(audit_source("src/nixl/x.rs", src).is_empty());
    let f = audit_source("src/http/mod.rs", "#![allow(unsafe_code)]\n");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].what.contains("allow(unsafe_code)"));
    let f = audit_source("src/main.rs", "unsafe impl Send for X {}\n");
    assert_eq!(f.len(), 2, "outside the room and without Safety: {f:?}");
}

#[test]
fn audit_flags_blocks_and_impls_without_a_safety_comment() {
    // No comment at all.
    let f = audit_source("src/nixl/a.rs", "fn f() {\n    let x = unsafe { g() };\n}\n");
    assert_eq!(f.iter().map(|f| f.line).collect::<Vec<_>>(), [2], "{f:?}");
    // A comment that is not a Safety comment.
    let f = audit_source("src/nixl/a.rs", "// Calls g.\nunsafe impl Send for X {}\n");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].what.contains("Impl"));
    // A Safety comment separated from the block by a blank line does not count.
    let f = audit_source("src/nixl/a.rs", "// Safety: far away.\n\nlet x = unsafe { g() };\n");
    assert_eq!(f.len(), 1, "{f:?}");
    // Nor one above an earlier statement.
    let f = audit_source(
        "src/nixl/a.rs",
        "// Safety: for the first.\nlet a = unsafe { g() };\nlet b = unsafe { h() };\n",
    );
    assert_eq!(f.iter().map(|f| f.line).collect::<Vec<_>>(), [3], "{f:?}");
    // unsafe fn in a trait impl needs a comment that mentions Safety.
    let f = audit_source("src/nixl/a.rs", "impl T for X {\n    unsafe fn p(&self) {}\n}\n");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].what.contains("unsafe fn"));
    // Lowercase `safety:` is not the convention for blocks.
    let f = audit_source("src/nixl/a.rs", "// safety: lowercase.\nunsafe { g() }\n");
    assert_eq!(f.len(), 1, "{f:?}");
}

#[test]
fn audit_accepts_the_documented_forms() {
    let ok = [
        // Directly above.
        "// Safety: g has no preconditions.\nunsafe { g() };\n",
        // Several comment lines, the Safety line first.
        "// Safety: a.\n// More words.\n// Even more.\nlet x = unsafe { g() };\n",
        // Above the statement that contains the block on a continuation line.
        "// Safety: h is fine.\nlet x = f(\n    a,\n    unsafe { h() },\n);\n",
        // Expression position, parenthesised.
        "fn t() -> u64 {\n    // Safety: gettid.\n    (unsafe { libc::gettid() }) as u64\n}\n",
        // unsafe impl.
        "// Safety: owned.\nunsafe impl Send for X {}\n",
        // unsafe fn with a Safety (of the contract) comment, or a doc section.
        "impl T for X {\n    // Safety (of the contract): never dereferenced.\n    unsafe fn p(&self) {}\n}\n",
        "/// Does p.\n///\n/// # Safety\n/// The caller keeps x alive.\n#[inline]\nunsafe fn p() {}\n",
        // SAFETY: in capitals (clippy's convention).
        "// SAFETY: fine.\nunsafe { g() }\n",
        // Attribute between the comment and the item.
        "// Safety: fine.\n#[allow(clippy::x)]\nunsafe impl Sync for X {}\n",
    ];
    for src in ok {
        assert_eq!(audit_source("src/nixl/a.rs", src), [], "{src}");
    }
}

#[test]
fn audit_ignores_unsafe_in_comments_strings_and_identifiers() {
    let src = r####"//! `unsafe` is allowed only in src/nixl.
/* an unsafe { block } in a block comment /* nested unsafe */ still comment */
fn f() -> &'static str {
    let unsafe_code = 1;
    let _c = '"';
    let _q = '\'';
    let _u = '\u{1F600}';
    let _e = '\\';
    let _l: &'static str = "unsafe { in a string }";
    let _r = r#"unsafe fn "quoted" inside a raw string"#;
    let _b = b"unsafe impl";
    let _esc = "escaped \" unsafe { quote }";
    /// doc: unsafe impl
    "not_unsafe"
}
"####;
    assert_eq!(audit_source("src/plan.rs", src), []);
    assert!(unsafe_sites(&mask(src)).is_empty());
    // Lines line up after masking.
    assert_eq!(mask(src).lines().count(), src.lines().count());
}

#[test]
fn audit_checks_the_crate_level_attributes() {
    assert_eq!(audit_roots("#![deny(unsafe_code)]\n", "#![allow(unsafe_code)]\n"), []);
    let f = audit_roots("// #![deny(unsafe_code)]\n", "#![allow(unsafe_code)]\n");
    assert_eq!(f.len(), 1, "a commented-out attribute does not count: {f:?}");
    assert_eq!(f[0].file, "src/lib.rs");
    let f = audit_roots("#![deny(unsafe_code)]\n", "");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].to_string(),
        "src/nixl/mod.rs:1: missing `#![allow(unsafe_code)]` (the one room where unsafe is allowed)"
    );
}
