//! Reading this crate's Rust sources as text: comments and literals masked
//! out, files listed. Shared by `tests/architecture.rs` (the module graph)
//! and `tests/unsafe_audit.rs` (where `unsafe` lives); included with
//! `#[path]`, std only.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The source with comments and the contents of string, byte-string, raw
/// string and char literals replaced by spaces; newlines are kept so lines
/// still line up.
pub fn mask(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        // Line comments, `///` and `//!` included.
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        // Block comments, nested as Rust nests them.
        if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings: r"..", r#".."#, br#".."# (not raw identifiers r#type).
        let prev_ident = i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_');
        if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while j < b.len() && b[j] == '#' {
                j += 1;
            }
            if b.get(j) == Some(&'"') {
                let hashes = j - start;
                out.extend(&b[i..=j]);
                i = j + 1;
                while i < b.len() {
                    if b[i] == '"' && (1..=hashes).all(|h| b.get(i + h) == Some(&'#')) {
                        out.push('"');
                        out.extend(std::iter::repeat_n('#', hashes));
                        i += 1 + hashes;
                        break;
                    }
                    blank(&mut out, b[i]);
                    i += 1;
                }
                continue;
            }
        }
        // Plain and byte strings.
        if c == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                let n = if b[i] == '\\' && i + 1 < b.len() { 2 } else { 1 };
                for &x in &b[i..i + n] {
                    blank(&mut out, x);
                }
                i += n;
            }
            if i < b.len() {
                out.push('"');
                i += 1;
            }
            continue;
        }
        // Char literals ('x', '\n', '\u{..}'), but not lifetimes ('a).
        if c == '\'' {
            let lit_len = if next == Some('\\') {
                b.get(i + 3..)
                    .and_then(|rest| rest.iter().position(|&x| x == '\''))
                    .map(|p| p + 4)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            if let Some(n) = lit_len {
                out.push('\'');
                for &x in &b[i + 1..i + n - 1] {
                    blank(&mut out, x);
                }
                out.push('\'');
                i += n;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
