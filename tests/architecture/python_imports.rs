//! The Python package's imports (`python/nixl_agent_instrument`): which of
//! its modules imports which, read from the source text so that it cannot
//! rot. Every form counts, wherever it is written (at the top or inside a
//! function, where the package defers its imports to keep start-up cheap):
//!
//! - `from . import a, b as c` and `from . import (a,\n b)`: the modules `a`
//!   and `b` when they are files of the package, else the package itself
//!   (`__init__`: a name it defines) — but for the extension (`_native`,
//!   known by its `.pyi` stub), which is no Python module;
//! - `from ._x import y`, `from .x.y import z`, `from .. import x` (from a
//!   subpackage): the module named;
//! - `import nixl_agent_instrument._x [as y]`, `from nixl_agent_instrument
//!   import _x`, `from nixl_agent_instrument._x import y`: the same, by the
//!   package's full name.
//!
//! Comments and string literals (docstrings included) are blanked first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub(crate) const PACKAGE: &str = "nixl_agent_instrument";

/// The source with comments and the contents of strings blanked; lines kept.
pub(crate) fn mask_python(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '#' {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        if c == '"' || c == '\'' {
            let triple = b.get(i + 1) == Some(&c) && b.get(i + 2) == Some(&c);
            let q = if triple { 3 } else { 1 };
            for _ in 0..q {
                out.push(c);
            }
            i += q;
            while i < b.len() {
                if b[i] == '\\' {
                    blank(&mut out, b[i]);
                    if i + 1 < b.len() {
                        blank(&mut out, b[i + 1]);
                    }
                    i += 2;
                    continue;
                }
                if b[i] == c && (!triple || (b.get(i + 1) == Some(&c) && b.get(i + 2) == Some(&c))) {
                    for _ in 0..q {
                        out.push(c);
                    }
                    i += q;
                    break;
                }
                if b[i] == '\n' && !triple {
                    break; // an unterminated string: stop at the line's end
                }
                blank(&mut out, b[i]);
                i += 1;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// One import of a module of the package: the importing line and the
/// module imported (dotted, inside the package; `__init__` is the package).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Import {
    pub line: usize,
    pub module: String,
}

/// The package's imports in the source of module `here` (dotted, e.g.
/// `_hook`, `_bootstrap.sitecustomize`, `__init__`). `is_module(m)` says
/// whether `m` is a Python module of the package; `is_extension(m)` whether
/// it is the compiled extension.
pub(crate) fn imports(
    src: &str,
    here: &str,
    is_package: bool,
    is_module: &dyn Fn(&str) -> bool,
    is_extension: &dyn Fn(&str) -> bool,
) -> Vec<Import> {
    // Logical lines: a parenthesised import continues on the next lines.
    let masked = mask_python(src);
    let mut logical: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in masked.lines().enumerate() {
        let n = n + 1;
        match open.take() {
            Some((start, mut text)) => {
                text.push(' ');
                text.push_str(line);
                if line.contains(')') {
                    logical.push((start, text));
                } else {
                    open = Some((start, text));
                }
            }
            None => {
                let t = line.trim_start();
                if (t.starts_with("from ") || t.starts_with("import ")) && t.contains('(') && !t.contains(')') {
                    open = Some((n, t.to_string()));
                } else {
                    // `a; import b` and a backslash continuation are not used here.
                    for stmt in t.split(';') {
                        logical.push((n, stmt.trim().to_string()));
                    }
                }
            }
        }
    }
    // The package a module sits in, dotted (`` for the top).
    let mut pkg: Vec<&str> = if here == "__init__" {
        Vec::new()
    } else {
        here.split('.').collect()
    };
    if !is_package {
        pkg.pop();
    }
    let target = |dotted: &str| -> Option<String> {
        let m = dotted.trim_matches('.');
        if m.is_empty() {
            Some("__init__".to_string())
        } else if is_extension(m) {
            None
        } else if is_module(m) {
            Some(m.to_string())
        } else {
            // `a.b` where `b` is a name in module `a`.
            let (parent, _) = m.rsplit_once('.')?;
            is_module(parent).then(|| parent.to_string())
        }
    };
    let name_of = |s: &str| {
        let s = s.replace(['(', ')'], " ");
        s.split_whitespace().next().unwrap_or("").to_string()
    };
    let mut out = Vec::new();
    for (line, stmt) in logical {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if words.first() == Some(&"import") {
            let rest = stmt["import".len()..].trim();
            for item in rest.split(',') {
                let name = name_of(item);
                if let Some(inside) = name.strip_prefix(PACKAGE) {
                    if inside.is_empty() || inside.starts_with('.') {
                        // `import pkg.a.b` runs pkg, pkg.a, pkg.a.b: the deepest is the one named.
                        if let Some(t) = target(inside) {
                            out.push(Import { line, module: t });
                        }
                    }
                }
            }
        } else if words.first() == Some(&"from") && words.get(2) == Some(&"import") {
            let from = words[1];
            let base: Option<String> = if let Some(rel) = from.strip_prefix('.') {
                let ups = from.len() - from.trim_start_matches('.').len();
                let rest = &rel[ups - 1..];
                if ups - 1 > pkg.len() {
                    None
                } else {
                    let mut p: Vec<&str> = pkg[..pkg.len() - (ups - 1)].to_vec();
                    p.extend(rest.split('.').filter(|s| !s.is_empty()));
                    Some(p.join("."))
                }
            } else {
                from.strip_prefix(PACKAGE)
                    .filter(|r| r.is_empty() || r.starts_with('.'))
                    .map(|r| r.trim_start_matches('.').to_string())
            };
            let Some(base) = base else { continue };
            let names = stmt.split_once(" import ").map_or("", |(_, n)| n);
            for item in names.split(',') {
                let name = name_of(item);
                if name.is_empty() {
                    continue;
                }
                let sub = if base.is_empty() {
                    name.clone()
                } else {
                    format!("{base}.{name}")
                };
                let t = if name != "*" && (is_module(&sub) || is_extension(&sub)) {
                    target(&sub)
                } else {
                    target(&base)
                };
                if let Some(t) = t {
                    out.push(Import { line, module: t });
                }
            }
        }
    }
    out.retain(|i| i.module != here);
    out.sort();
    out.dedup();
    out
}

/// A module of the package: its file, whether it is a package
/// (`__init__.py`), its source.
pub(crate) type Module = (String, bool, String);

/// The package's modules (dotted, `__init__` for the package itself) with
/// their source, and the extension modules (a `.pyi` stub without `.py`).
pub(crate) fn package(dir: &Path) -> (BTreeMap<String, Module>, BTreeSet<String>) {
    fn walk(dir: &Path, prefix: &str, mods: &mut BTreeMap<String, Module>, ext: &mut BTreeSet<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let dotted = if prefix.is_empty() {
                stem.clone()
            } else {
                format!("{prefix}.{stem}")
            };
            if p.is_dir() {
                if stem != "__pycache__" && !stem.starts_with('.') {
                    walk(&p, &dotted, mods, ext);
                }
            } else if p.extension().is_some_and(|x| x == "py") {
                let (name, is_pkg) = if stem == "__init__" {
                    (
                        if prefix.is_empty() {
                            "__init__".to_string()
                        } else {
                            prefix.to_string()
                        },
                        true,
                    )
                } else {
                    (dotted, false)
                };
                let rel = p.to_string_lossy().into_owned();
                mods.insert(name, (rel, is_pkg, std::fs::read_to_string(&p).unwrap()));
            } else if p.extension().is_some_and(|x| x == "pyi") && !p.with_extension("py").exists() {
                ext.insert(dotted);
            }
        }
    }
    let mut mods = BTreeMap::new();
    let mut ext = BTreeSet::new();
    walk(dir, "", &mut mods, &mut ext);
    (mods, ext)
}

fn on_small_input(src: &str, here: &str) -> Vec<(usize, String)> {
    let mods = [
        "__init__",
        "_hook",
        "_xfer",
        "_site",
        "_bootstrap",
        "_bootstrap.sitecustomize",
    ];
    imports(
        src,
        here,
        here == "__init__" || here == "_bootstrap",
        &|m| mods.contains(&m),
        &|m| m == "_native",
    )
    .into_iter()
    .map(|i| (i.line, i.module))
    .collect()
}

#[test]
fn every_form_of_import_is_read_and_strings_are_not() {
    let src = r#""""Docs: from . import _xfer, and import nixl_agent_instrument._site."""
import sys
from ._hook import _MARK  # a comment: from . import _site
def f():
    from . import _native as native, _site as site
    from . import (
        _xfer,
        VERSION,
    )
    import nixl_agent_instrument._hook as h
    from nixl_agent_instrument import _site
    x = "from . import _xfer"
from nixl_agent_instrument._bootstrap import sitecustomize
import nixl_agent_instrument
"#;
    assert_eq!(
        on_small_input(src, "_launcher"),
        [
            (3, "_hook".to_string()),
            (5, "_site".to_string()),
            (6, "__init__".to_string()),
            (6, "_xfer".to_string()),
            (10, "_hook".to_string()),
            (11, "_site".to_string()),
            (13, "_bootstrap.sitecustomize".to_string()),
            (14, "__init__".to_string()),
        ]
    );
    // From inside a subpackage: `..` is the top.
    assert_eq!(
        on_small_input(
            "from .. import _hook\nfrom . import sitecustomize\n",
            "_bootstrap.other"
        ),
        [(1, "_hook".to_string()), (2, "_bootstrap.sitecustomize".to_string())]
    );
}
