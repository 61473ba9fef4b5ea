//! Architecture: no import circles — between the crate's top-level modules,
//! between the modules inside each of them, and in the Python package — and
//! the layers ARCHITECTURE.md names are the code's.
//!
//! A module of `src/` must not import, directly or through others, a module
//! that imports it back. Checked on the source text so that it cannot rot:
//!
//! - nodes: the top-level modules, `src/X.rs` and everything under `src/X/`
//!   (`src/lib.rs` is the crate root, `src/main.rs` the binary: neither is a
//!   node);
//! - edges: `crate::Y` paths in code (imports and expressions alike; of a
//!   grouped import `use crate::{a::B, c, d::{e, f}}` the first segment of
//!   each item: `a`, `c`, `d`), and `super::` chains long enough to reach the
//!   crate root (`super::Y` in `src/X.rs`). Shorter `super::` and `self::`
//!   stay inside a node;
//! - `crate::Name` where `Name` is not a module (a root re-export such as
//!   `crate::Observer`) hides the edge, so it fails too, naming the file and
//!   line and the module path to write instead; the edge it hides (found
//!   through `src/lib.rs`'s `pub use`) still counts.
//!
//! References in `#[cfg(test)]` code count like any other; they are marked
//! `(test)` so the fixer knows a test helper, not the module, made the edge.
//!
//! Comments (doc comments included) and the contents of string, raw string
//! and char literals are masked out first, so doc links such as
//! ``[`crate::lifecycle::Registrar`]`` are not edges.
//!
//! Every strongly connected component with more than one module is reported
//! with cycles that together use each of its edges, one `file:line` per edge,
//! and every reference inside the component, so the fixer sees which `use`
//! to move.
//!
//! The same rule holds inside every module with modules of its own
//! (`rooms`: `telemetry::metrics` ⇄ `telemetry::exposition` would fail), and
//! in the Python package (`python_imports`). The layers ARCHITECTURE.md
//! names are the code's (`no_module_imports_from_a_layer_above_its_own`,
//! which prints the whole graph when they are not).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

#[path = "support/rust_source.rs"]
mod rust_source;
use rust_source::{mask, repo, rust_files};

#[path = "architecture/rooms.rs"]
mod rooms;

#[path = "architecture/python_imports.rs"]
mod python_imports;

// ---- Masking -------------------------------------------------------------

// ---- Tokens --------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// 1-based.
    line: usize,
}

/// Tokens of masked source: identifiers, `::`, braces, `,`, `;`, `*`, and
/// every other non-space character on its own.
fn tokens(masked: &str) -> Vec<Token> {
    let b: Vec<char> = masked.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            out.push(Token {
                tok: if c.is_ascii_digit() {
                    Tok::Other('0')
                } else {
                    Tok::Ident(word)
                },
                line,
            });
            continue;
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            i += 1;
            Tok::Sep
        } else {
            match c {
                '{' => Tok::Open,
                '}' => Tok::Close,
                ',' => Tok::Comma,
                ';' => Tok::Semi,
                '*' => Tok::Star,
                other => Tok::Other(other),
            }
        };
        out.push(Token { tok, line });
        i += 1;
    }
    out
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn is(t: Option<&Token>, want: &Tok) -> bool {
    t.is_some_and(|t| &t.tok == want)
}

// ---- Root references -----------------------------------------------------

/// One path that starts at the crate root: the segment right after the root
/// (`crate::` or a `super::` chain that reaches it), `*` for a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RootRef {
    line: usize,
    name: String,
    /// Inside an inline `#[cfg(test)] mod`.
    test: bool,
}

/// What one file says: its root references, and the file modules it
/// declares `#[cfg(test)] mod name;` (test-only files).
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    refs: Vec<RootRef>,
    test_mods: Vec<String>,
}

/// The first segment of the path at `toks[j]`, just after the root: one
/// name, a glob, or a group whose items each contribute their first segment.
fn after_root(toks: &[Token], j: usize, out: &mut Vec<RootRef>) {
    match toks.get(j).map(|t| &t.tok) {
        Some(Tok::Ident(name)) if name != "self" => out.push(RootRef {
            line: toks[j].line,
            name: name.clone(),
            test: false,
        }),
        Some(Tok::Star) => out.push(RootRef {
            line: toks[j].line,
            name: "*".into(),
            test: false,
        }),
        Some(Tok::Open) => {
            group(toks, j, out);
        }
        _ => {}
    }
}

/// A `{ .. }` group after the root at `toks[open]`: the first segment of each
/// top-level item (nested groups at an item's start count as items too).
/// Returns the index after the closing brace.
fn group(toks: &[Token], open: usize, out: &mut Vec<RootRef>) -> usize {
    let mut j = open + 1;
    let mut item_start = true;
    while j < toks.len() {
        match toks[j].tok {
            Tok::Close => return j + 1,
            Tok::Comma => {
                item_start = true;
                j += 1;
            }
            Tok::Open if item_start => {
                j = group(toks, j, out);
                item_start = false;
            }
            Tok::Open => {
                j = group(toks, j, &mut Vec::new());
            }
            _ => {
                if item_start {
                    after_root(toks, j, out);
                }
                item_start = false;
                j += 1;
            }
        }
    }
    j
}

/// Whether the item whose keyword (`mod`) is at `toks[at]` has
/// `#[cfg(test)]` among its attributes.
fn has_cfg_test(toks: &[Token], at: usize) -> bool {
    let before = |j: usize| j.checked_sub(1).map(|p| &toks[p]);
    let mut j = at;
    // Visibility: `pub`, `pub(crate)`, `pub(in path)`.
    if is(before(j), &Tok::Other(')')) {
        while j > 0 && !is(before(j), &Tok::Other('(')) {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    if ident(before(j)) == Some("pub") {
        j -= 1;
    }
    // Attributes `#[..]`, nearest first.
    let cfg_test = [
        Tok::Ident("cfg".into()),
        Tok::Other('('),
        Tok::Ident("test".into()),
        Tok::Other(')'),
    ];
    while is(before(j), &Tok::Other(']')) {
        let close = j - 1;
        let mut k = close;
        let mut depth = 0usize;
        loop {
            match toks[k].tok {
                Tok::Other(']') => depth += 1,
                Tok::Other('[') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if k == 0 {
                return false;
            }
            k -= 1;
        }
        if !is(before(k), &Tok::Other('#')) {
            return false;
        }
        if toks[k + 1..close].iter().map(|t| &t.tok).eq(cfg_test.iter()) {
            return true;
        }
        j = k - 1;
    }
    false
}

/// Every path in `src` that starts at the crate root. `file_depth` is how
/// deep the file's module sits below the root (`src/x.rs` and
/// `src/x/mod.rs`: 1, `src/x/y.rs`: 2); inline `mod name { .. }` blocks add
/// to it, so `super::` is resolved as the compiler resolves it.
fn scan(src: &str, file_depth: usize) -> Scan {
    let toks = tokens(&mask(src));
    let mut out = Scan::default();
    let mut braces = 0usize;
    // Each open inline module: the brace depth outside it, and whether it is
    // `#[cfg(test)]`.
    let mut inline_mods: Vec<(usize, bool)> = Vec::new();
    for i in 0..toks.len() {
        let prev = i.checked_sub(1).map(|p| &toks[p]);
        let before = out.refs.len();
        match &toks[i].tok {
            Tok::Open => {
                let named = ident(prev).is_some();
                if named && ident(i.checked_sub(2).map(|p| &toks[p])) == Some("mod") {
                    inline_mods.push((braces, has_cfg_test(&toks, i - 2)));
                }
                braces += 1;
            }
            Tok::Close => {
                braces = braces.saturating_sub(1);
                if inline_mods.last().is_some_and(|&(b, _)| b == braces) {
                    inline_mods.pop();
                }
            }
            // `#[cfg(test)] mod name;` at the file's top level.
            Tok::Ident(w)
                if w == "mod"
                    && is(toks.get(i + 2), &Tok::Semi)
                    && inline_mods.is_empty()
                    && has_cfg_test(&toks, i) =>
            {
                if let Some(name) = ident(toks.get(i + 1)) {
                    out.test_mods.push(name.to_string());
                }
            }
            // `crate::`, but not `$crate::` (a macro's) or a continuation.
            Tok::Ident(w)
                if w == "crate"
                    && !is(prev, &Tok::Other('$'))
                    && !is(prev, &Tok::Sep)
                    && is(toks.get(i + 1), &Tok::Sep) =>
            {
                after_root(&toks, i + 2, &mut out.refs);
            }
            // A `super::super::..` chain, counted from its start.
            Tok::Ident(w) if w == "super" && !is(prev, &Tok::Sep) => {
                let mut j = i;
                let mut ups = 0;
                while ident(toks.get(j)) == Some("super") && is(toks.get(j + 1), &Tok::Sep) {
                    ups += 1;
                    j += 2;
                }
                if ups > 0 && ups == file_depth + inline_mods.len() {
                    after_root(&toks, j, &mut out.refs);
                }
            }
            _ => {}
        }
        let in_test = inline_mods.iter().any(|&(_, t)| t);
        for r in &mut out.refs[before..] {
            r.test = in_test;
        }
    }
    out
}

/// The names `src/lib.rs` re-exports at the root (`pub use a::b::{C, D as
/// E}`), each with the path it stands for (`a::b::C`, `a::b::D`).
fn root_reexports(lib_rs: &str) -> BTreeMap<String, String> {
    fn tree(toks: &[Token], mut j: usize, prefix: &mut Vec<String>, out: &mut BTreeMap<String, String>) -> usize {
        let base = prefix.len();
        loop {
            match toks.get(j).map(|t| &t.tok) {
                Some(Tok::Ident(s)) if is(toks.get(j + 1), &Tok::Sep) => {
                    prefix.push(s.clone());
                    j += 2;
                }
                Some(Tok::Ident(s)) => {
                    let (name, path) = if s == "self" {
                        (prefix.last().cloned().unwrap_or_default(), prefix.join("::"))
                    } else {
                        (
                            s.clone(),
                            [prefix.as_slice(), std::slice::from_ref(s)].concat().join("::"),
                        )
                    };
                    j += 1;
                    let alias = match ident(toks.get(j)) {
                        Some("as") => {
                            j += 2;
                            ident(toks.get(j - 1)).map(str::to_string)
                        }
                        _ => None,
                    };
                    out.insert(alias.unwrap_or(name), path);
                    break;
                }
                Some(Tok::Open) => {
                    j += 1;
                    while j < toks.len() && !is(toks.get(j), &Tok::Close) {
                        let before = j;
                        j = tree(toks, j, prefix, out);
                        // Past the comma, or past what no tree starts with.
                        if is(toks.get(j), &Tok::Comma) || j == before {
                            j += 1;
                        }
                    }
                    j += 1;
                    break;
                }
                _ => break,
            }
        }
        prefix.truncate(base);
        j
    }
    let toks = tokens(&mask(lib_rs));
    let mut out = BTreeMap::new();
    for i in 1..toks.len() {
        if ident(toks.get(i - 1)) == Some("pub") && ident(toks.get(i)) == Some("use") {
            tree(&toks, i + 1, &mut Vec::new(), &mut out);
        }
    }
    out
}

// ---- The module graph ----------------------------------------------------

/// Where a reference is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    file: String,
    line: usize,
    /// In `#[cfg(test)]` code (an inline test module or a test-only file).
    test: bool,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if self.test {
            f.write_str(" (test)")?;
        }
        Ok(())
    }
}

/// One source file of a node.
struct SourceFile {
    node: String,
    /// Relative to the repository, e.g. `src/record/mod.rs`.
    rel: String,
    depth: usize,
    /// Declared by a `#[cfg(test)] mod name;` (or below such a module).
    test_only: bool,
    text: String,
}

#[derive(Debug, Default, Clone)]
struct Graph {
    nodes: BTreeSet<String>,
    /// from -> to -> every reference that makes the edge.
    edges: BTreeMap<String, BTreeMap<String, Vec<Site>>>,
    /// `crate::Name` where `Name` is not a module.
    root_paths: Vec<(Site, String)>,
}

impl Graph {
    fn targets(&self, from: &str) -> impl Iterator<Item = &String> {
        self.edges.get(from).into_iter().flat_map(|m| m.keys())
    }

    fn sites(&self, from: &str, to: &str) -> &[Site] {
        self.edges.get(from).and_then(|m| m.get(to)).map_or(&[], Vec::as_slice)
    }

    /// The graph of the code that is compiled outside `cargo test`.
    fn without_tests(&self) -> Graph {
        let mut g = self.clone();
        for tos in g.edges.values_mut() {
            for sites in tos.values_mut() {
                sites.retain(|s| !s.test);
            }
            tos.retain(|_, sites| !sites.is_empty());
        }
        g
    }
}

/// One reference per edge for a message: a non-test one where there is one.
fn example(sites: &[Site]) -> String {
    let one = sites.iter().find(|s| !s.test).unwrap_or(&sites[0]);
    match sites.len() {
        1 => one.to_string(),
        k => format!("{one}  (+{} more)", k - 1),
    }
}

/// The module graph of `files`. `reexports` (from `root_reexports`) turns a
/// root re-export path into the edge it hides, besides reporting it.
fn analyse(nodes: &BTreeSet<String>, files: &[SourceFile], reexports: &BTreeMap<String, String>) -> Graph {
    let mut g = Graph {
        nodes: nodes.clone(),
        ..Graph::default()
    };
    for f in files {
        for r in scan(&f.text, f.depth).refs {
            let site = Site {
                file: f.rel.clone(),
                line: r.line,
                test: r.test || f.test_only,
            };
            let target = if nodes.contains(&r.name) {
                Some(r.name.clone())
            } else {
                g.root_paths.push((site.clone(), r.name.clone()));
                reexports
                    .get(&r.name)
                    .and_then(|p| p.split("::").next())
                    .map(str::to_string)
            };
            if let Some(to) = target.filter(|t| *t != f.node && nodes.contains(t)) {
                g.edges
                    .entry(f.node.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .push(site);
            }
        }
    }
    // Two references on one line are one place to fix.
    for sites in g.edges.values_mut().flat_map(|m| m.values_mut()) {
        sites.sort();
        sites.dedup();
    }
    g
}

/// Strongly connected components (Tarjan), each sorted, in a stable order.
fn sccs(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.g.targets(v) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in &g.nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Shortest path `from` .. `to` inside `within` (breadth first, names in
/// order, so the answer is stable).
fn shortest_path(g: &Graph, from: &str, to: &str, within: &BTreeSet<&str>) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = BTreeSet::from([from]);
    while let Some(v) = queue.pop_front() {
        if v == to {
            let mut path = vec![to.to_string()];
            let mut at = to;
            while at != from {
                at = came_from[at];
                path.push(at.to_string());
            }
            path.reverse();
            return Some(path);
        }
        for w in g.targets(v).map(String::as_str) {
            if within.contains(w) && seen.insert(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    None
}

/// Cycles inside one component that together use every edge of it: for
/// each edge not yet on a reported cycle, the edge plus the shortest way
/// back. Each cycle is `[a, b, .., a]`.
fn cycle_cover(g: &Graph, comp: &[String]) -> Vec<Vec<String>> {
    let within: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let mut covered: BTreeSet<(String, String)> = BTreeSet::new();
    let mut cycles = Vec::new();
    for from in comp {
        for to in g.targets(from).filter(|t| within.contains(t.as_str())) {
            if covered.contains(&(from.clone(), to.clone())) {
                continue;
            }
            let Some(back) = shortest_path(g, to, from, &within) else {
                continue;
            };
            let mut cycle = vec![from.clone()];
            cycle.extend(back);
            for w in cycle.windows(2) {
                covered.insert((w[0].clone(), w[1].clone()));
            }
            cycles.push(cycle);
        }
    }
    cycles
}

/// The readable failure: root re-export paths and module cycles; empty when
/// the tree is clean.
fn report(g: &Graph, reexports: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    if !g.root_paths.is_empty() {
        let _ = writeln!(
            out,
            "Paths through the crate root in src/ hide which module they depend on; write the module path:"
        );
        for (site, name) in &g.root_paths {
            let hint = match reexports.get(name) {
                Some(path) => format!("a root re-export: write `crate::{path}`"),
                None if name == "*" => "a glob of the crate root: import from the modules".to_string(),
                None => "not a module of src/: write the path of the module that defines it".to_string(),
            };
            let _ = writeln!(out, "  {site}: `crate::{name}` is {hint}");
        }
        out.push('\n');
    }
    let cyclic: Vec<Vec<String>> = sccs(g).into_iter().filter(|c| c.len() > 1).collect();
    if !cyclic.is_empty() {
        let _ = writeln!(
            out,
            "Module cycles in src/: {} group(s) of modules import, directly or through others, \
             a module that imports them back.\nBreak each cycle by moving or inverting one of its `use`s.",
            cyclic.len()
        );
        for (n, comp) in cyclic.iter().enumerate() {
            let _ = writeln!(out, "\n[{}] {{{}}}", n + 1, comp.join(", "));
            let _ = writeln!(out, "  cycles (together they use every edge of the group):");
            for cycle in cycle_cover(g, comp) {
                let _ = writeln!(out, "    {}", cycle.join(" -> "));
                for w in cycle.windows(2) {
                    let _ = writeln!(out, "      {} -> {}: {}", w[0], w[1], example(g.sites(&w[0], &w[1])));
                }
            }
            let _ = writeln!(out, "  every reference inside the group:");
            for from in comp {
                for to in g.targets(from).filter(|t| comp.contains(t)) {
                    let sites = g.sites(from, to);
                    let list: Vec<String> = sites.iter().map(Site::to_string).collect();
                    let _ = writeln!(out, "    {from} -> {to} ({}): {}", sites.len(), list.join(", "));
                }
            }
        }
    }
    out
}

// ---- The real tree -------------------------------------------------------

/// The module path of a file from its path inside `src/` without `.rs`:
/// `x` and `x/mod` are `[x]`, `x/y` is `[x, y]`.
fn module_path(inside_src: &[String]) -> Vec<String> {
    let mut path = inside_src.to_vec();
    if path.len() > 1 && path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// The nodes and the files of `src/`, and the text of `src/lib.rs`.
fn source_tree() -> (BTreeSet<String>, Vec<SourceFile>, String) {
    let root = repo();
    let src = root.join("src");
    let mut nodes = BTreeSet::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let is_module = if p.is_dir() {
            true
        } else {
            p.extension().is_some_and(|x| x == "rs") && name != "lib" && name != "main"
        };
        if is_module {
            nodes.insert(name);
        }
    }
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut files = Vec::new();
    let mut module_paths = Vec::new();
    // Modules declared `#[cfg(test)] mod name;`: their files are test code.
    let mut test_modules: Vec<Vec<String>> = Vec::new();
    for p in paths {
        let inside: Vec<String> = p
            .strip_prefix(&src)
            .unwrap()
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let node = inside[0].clone();
        if !nodes.contains(&node) {
            continue; // lib.rs, main.rs
        }
        let path = module_path(&inside);
        let text = std::fs::read_to_string(&p).unwrap();
        for m in scan(&text, path.len()).test_mods {
            test_modules.push([path.clone(), vec![m]].concat());
        }
        files.push(SourceFile {
            node,
            rel: p.strip_prefix(&root).unwrap().to_string_lossy().into_owned(),
            depth: path.len(),
            test_only: false,
            text,
        });
        module_paths.push(path);
    }
    for (f, path) in files.iter_mut().zip(&module_paths) {
        f.test_only = test_modules.iter().any(|t| path.starts_with(t));
    }
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    (nodes, files, lib_rs)
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let (nodes, files, lib_rs) = source_tree();
    assert!(
        nodes.len() > 5 && files.len() > nodes.len(),
        "found too little under src/: {nodes:?}"
    );
    let reexports = root_reexports(&lib_rs);
    let failures = report(&analyse(&nodes, &files, &reexports), &reexports);
    assert!(failures.is_empty(), "\n{failures}");
}

#[test]
fn no_module_imports_a_module_of_its_own_room_that_imports_it_back() {
    let (_, files, lib_rs) = source_tree();
    let rooms = rooms::rooms(&files, &lib_rs);
    for room in ["telemetry", "ledger", "pod", "nixl", "check"] {
        assert!(rooms.contains_key(room), "no room `{room}` found: {:?}", rooms.keys());
    }
    let failures = rooms::report_rooms(&rooms);
    assert!(failures.is_empty(), "\n{failures}");
}

/// The Python package's modules never import, directly or through others,
/// a module that imports them back (every form of import, top-level or
/// deferred into a function; `python_imports` says which).
#[test]
fn no_python_module_imports_a_module_that_imports_it_back() {
    let dir = repo().join("python").join(python_imports::PACKAGE);
    let (mods, ext) = python_imports::package(&dir);
    assert!(
        mods.contains_key("__init__") && mods.contains_key("_hook") && ext.contains("_native"),
        "found too little under {}: {:?}",
        dir.display(),
        mods.keys()
    );
    let mut g = Graph {
        nodes: mods.keys().cloned().collect(),
        ..Graph::default()
    };
    let is_module = |m: &str| mods.contains_key(m);
    let is_extension = |m: &str| ext.contains(m);
    for (name, (path, is_package, text)) in &mods {
        let rel = std::path::Path::new(path)
            .strip_prefix(repo())
            .map_or(path.clone(), |p| p.to_string_lossy().into_owned());
        for i in python_imports::imports(text, name, *is_package, &is_module, &is_extension) {
            g.edges
                .entry(name.clone())
                .or_default()
                .entry(i.module)
                .or_default()
                .push(Site {
                    file: rel.clone(),
                    line: i.line,
                    test: false,
                });
        }
    }
    assert!(
        g.sites("__init__", "_hook")
            .iter()
            .any(|s| s.file.ends_with("__init__.py")),
        "the package's deferred `from . import _hook` is read: {:?}",
        g.edges
    );
    let failures = report(&g, &BTreeMap::new()).replace("in src/:", "in the package:");
    assert!(
        failures.is_empty(),
        "\nIn python/{} (`module`: the file without .py):\n{failures}",
        python_imports::PACKAGE
    );
}

/// A room's name says what it holds, once: no two modules of `src/` or
/// `python/native/src` share a name (a module is named by its file, or by
/// its directory for a `mod.rs`; `tests`, `lib` and `main` aside), so a
/// newcomer looking for one finds one file, not four `transfers.rs`.
#[test]
fn every_room_has_a_name_of_its_own() {
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in ["src", "python/native/src"] {
        let mut files = Vec::new();
        rust_files(&repo().join(dir), &mut files);
        for p in files {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            let name = if stem == "mod" {
                p.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned()
            } else {
                stem
            };
            if ["tests", "lib", "main"].contains(&name.as_str()) {
                continue;
            }
            let rel = p.strip_prefix(repo()).unwrap().to_string_lossy().into_owned();
            seen.entry(name).or_default().push(rel);
        }
    }
    assert!(seen.len() > 50, "found too few modules: {seen:?}");
    let shared: Vec<String> = seen
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("  {name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "modules sharing a name (name each for what it holds):\n{}",
        shared.join("\n")
    );
}

/// The layers ARCHITECTURE.md names (its `## Layers` section: `- N:` and
/// the top-level modules of layer N) are the code's: every module of `src/`
/// is in exactly one layer, and no module imports from a layer above its
/// own (test code included) — so an arrow from a lower layer to a higher
/// one (status → lifecycle, ledger → observe) fails here, and a new module
/// is placed where a reader can see it. With a failure, the whole graph is
/// printed, with the tightest layering the code has.
#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let (nodes, files, lib_rs) = source_tree();
    let g = analyse(&nodes, &files, &root_reexports(&lib_rs));
    let doc = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("\n## Layers\n")
        .nth(1)
        .map(|s| s.split("\n## ").next().unwrap_or(s))
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let mut layer_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for line in section.lines() {
        let Some(rest) = line.strip_prefix("- ") else { continue };
        let Some((n, names)) = rest.split_once(':') else {
            continue;
        };
        let Ok(n) = n.trim().parse::<usize>() else { continue };
        for name in names
            .split(',')
            .map(|w| w.trim().trim_matches('`'))
            .filter(|w| !w.is_empty())
        {
            if let Some(old) = layer_of.insert(name.to_string(), n) {
                problems.push(format!("`{name}` is in layers {old} and {n}"));
            }
        }
    }
    if layer_of.len() <= 5 {
        problems.push(format!("the layers name too little: {layer_of:?}"));
    }
    for n in &nodes {
        if !layer_of.contains_key(n) {
            problems.push(format!("`{n}` (src/) is in no layer"));
        }
    }
    for n in layer_of.keys() {
        if !nodes.contains(n) {
            problems.push(format!("`{n}` is in a layer but is no module of src/"));
        }
    }
    for (from, tos) in &g.edges {
        for (to, sites) in tos {
            if let (Some(&a), Some(&b)) = (layer_of.get(from), layer_of.get(to)) {
                if b > a {
                    problems.push(format!(
                        "`{from}` (layer {a}) imports `{to}` (layer {b}), a higher one: {}",
                        example(sites)
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's layers and src/ disagree:\n  {}\n\n{}",
        problems.join("\n  "),
        dependency_map(&nodes, &g)
    );
}

/// The module graph, for reading: what each module imports and is
/// imported by, and the modules in layers, lowest first (a component's
/// layer is one above the highest layer it imports).
fn dependency_map(nodes: &BTreeSet<String>, g: &Graph) -> String {
    let mut importers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, tos) in &g.edges {
        for to in tos.keys() {
            importers.entry(to.as_str()).or_default().insert(from.as_str());
        }
    }
    let mut out = String::from("Module dependencies in src/ (module: imports [references] | imported by):\n");
    for n in nodes {
        let imports: Vec<String> = g
            .targets(n)
            .map(|t| {
                let sites = g.sites(n, t);
                match sites.iter().filter(|s| s.test).count() {
                    0 => format!("{t} [{}]", sites.len()),
                    k => format!("{t} [{}, {k} in tests]", sites.len()),
                }
            })
            .collect();
        let by: Vec<&str> = importers.get(n.as_str()).into_iter().flatten().copied().collect();
        let or_none = |v: String| if v.is_empty() { "-".to_string() } else { v };
        let _ = writeln!(
            out,
            "  {n}: {} | {}",
            or_none(imports.join(", ")),
            or_none(by.join(", "))
        );
    }
    let comps = sccs(g); // Tarjan yields components dependencies first.
    let comp_of: BTreeMap<&str, usize> = comps
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.iter().map(move |n| (n.as_str(), i)))
        .collect();
    let mut layer = vec![0usize; comps.len()];
    for (i, comp) in comps.iter().enumerate() {
        for n in comp {
            for t in g.targets(n) {
                let j = comp_of[t.as_str()];
                if j != i {
                    layer[i] = layer[i].max(layer[j] + 1);
                }
            }
        }
    }
    let _ = writeln!(out, "Layers the code has, lowest first ({{..}}: modules in a cycle):");
    for l in 0..=layer.iter().copied().max().unwrap_or(0) {
        let names: Vec<String> = comps
            .iter()
            .zip(&layer)
            .filter(|(_, &cl)| cl == l)
            .map(|(c, _)| {
                let c: Vec<String> = c.iter().map(|n| format!("`{n}`")).collect();
                if c.len() > 1 {
                    format!("{{{}}}", c.join(", "))
                } else {
                    c[0].clone()
                }
            })
            .collect();
        let _ = writeln!(out, "- {l}: {}", names.join(", "));
    }
    out
}

// ---- The parser and the graph on small inputs ----------------------------

fn names(src: &str, depth: usize) -> Vec<String> {
    scan(src, depth).refs.into_iter().map(|r| r.name).collect()
}

#[test]
fn grouped_imports_give_the_first_segment_of_each_item() {
    assert_eq!(names("use crate::{a::B, c, d::{e, f}};", 1), ["a", "c", "d"]);
    assert_eq!(
        names("use crate::{\n    a::{self, B},\n    self,\n    g as h,\n};", 1),
        ["a", "g"]
    );
    assert_eq!(names("use crate::{{x, y}, z};", 1), ["x", "y", "z"]);
    assert_eq!(names("use crate::*;", 1), ["*"]);
    assert_eq!(
        names("use crate::a::B;\nfn f() { crate::b::c(); crate :: d::E }", 1),
        ["a", "b", "d"]
    );
    assert_eq!(names("use crate::Observer;", 1), ["Observer"]);
}

#[test]
fn references_carry_their_line() {
    let src = "/* one\n   two */\nuse crate::a;\n\nfn f() {\n    crate::b::g();\n}\n";
    let got: Vec<(usize, String)> = scan(src, 1).refs.into_iter().map(|r| (r.line, r.name)).collect();
    assert_eq!(got, [(3, "a".to_string()), (6, "b".to_string())]);
}

#[test]
fn comments_are_not_references() {
    let src = r#"
//! Module docs: [`crate::lifecycle::Registrar`].
/// See [`crate::status`] and crate::telemetry.
// use crate::old;
/* crate::block /* crate::nested */ crate::still_comment */
/** crate::outer_doc */
fn f() {} // crate::trailing
use crate::real;
"#;
    assert_eq!(names(src, 1), ["real"]);
}

#[test]
fn strings_and_chars_are_not_references() {
    let src = concat!(
        "const A: &str = \"crate::plain \\\" crate::escaped\";\n",
        "const B: &str = r#\"crate::raw \"quoted\" crate::raw2\"#;\n",
        "const C: &[u8] = br##\"crate::rawbytes\"# still\"##;\n",
        "const D: &[u8] = b\"crate::bytes\";\n",
        "const E: char = '\"'; const F: char = '\\'';\n",
        "fn g<'a>(x: &'a str) -> &'a str { crate::after::h(x) }\n",
        "const R: u8 = r#type; use crate::last;\n",
    );
    assert_eq!(names(src, 1), ["after", "last"]);
}

#[test]
fn macro_crate_self_and_short_super_are_not_references() {
    let src = "macro_rules! m { () => { $crate::hidden::f() } }\nuse self::inner::X;\nuse super::sibling;";
    assert_eq!(names(src, 2), Vec::<String>::new());
}

#[test]
fn super_that_reaches_the_root_is_a_reference() {
    // src/x.rs: `super::` is the crate root, but not inside `mod tests`.
    let top = "use super::y::Z;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f() { super::super::w(); }\n}\nfn g() { super::v::h(); }";
    assert_eq!(names(top, 1), ["y", "w", "v"]);
    // src/x/a.rs: two steps up.
    assert_eq!(names("use super::b;\nuse super::super::{y, z::Q};", 2), ["y", "z"]);
    // `pub(super)` is visibility, not a path.
    assert_eq!(
        names("pub(super) fn f() {}\npub(in super::super) fn g() {}", 2),
        Vec::<String>::new()
    );
}

#[test]
fn test_code_is_marked_and_test_files_are_named() {
    let src = "#[cfg(test)]\nmod tests {\n    use crate::a;\n    mod deeper { fn f() { crate::b::g() } }\n}\n\
               use crate::c;\n#[cfg(test)]\npub(crate) mod more;\n#[cfg(test)] mod t2;\nmod not_test;\n\
               #[derive(Debug)]\n#[cfg(test)]\nmod x { use crate::d; }\n#[cfg(feature = \"cli\")]\nmod y { use crate::e; }";
    let got = scan(src, 1);
    let refs: Vec<(&str, bool)> = got.refs.iter().map(|r| (r.name.as_str(), r.test)).collect();
    assert_eq!(
        refs,
        [("a", true), ("b", true), ("c", false), ("d", true), ("e", false)]
    );
    assert_eq!(got.test_mods, ["more", "t2"]);
}

#[test]
fn lib_rs_reexports_are_mapped_to_their_module_path() {
    let lib = "pub mod a;\npub use observe::{Call, Observer as Obs};\npub use lifecycle::driver::DrainReport;\n\
               pub use m::{n::{self, P}, q};\n// pub use gone::Gone;\nuse private::Hidden;";
    let got = root_reexports(lib);
    let want: BTreeMap<String, String> = [
        ("Call", "observe::Call"),
        ("Obs", "observe::Observer"),
        ("DrainReport", "lifecycle::driver::DrainReport"),
        ("n", "m::n"),
        ("P", "m::n::P"),
        ("q", "m::q"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);
}

fn file(node: &str, rel: &str, text: &str) -> SourceFile {
    SourceFile {
        node: node.into(),
        rel: rel.into(),
        depth: module_path(
            &rel["src/".len()..rel.len() - ".rs".len()]
                .split('/')
                .map(String::from)
                .collect::<Vec<_>>(),
        )
        .len(),
        test_only: rel.ends_with("/tests.rs"),
        text: text.into(),
    }
}

#[test]
fn cycles_are_found_and_reported_with_a_site_per_edge() {
    let nodes: BTreeSet<String> = ["a", "b", "c", "d", "e", "model"].map(String::from).into();
    let files = [
        file("a", "src/a.rs", "use crate::b::X;\nuse crate::model;"),
        file("b", "src/b/mod.rs", "mod inner;\nuse crate::{c, model::M};"),
        file(
            "b",
            "src/b/inner.rs",
            "use crate::a::Y; // back to a\nuse super::super::model::N;",
        ),
        file("c", "src/c.rs", "\n\nfn f() { crate::a::g() }"),
        file("d", "src/d.rs", "use crate::e;\nuse crate::d::self_edge;"),
        file(
            "e",
            "src/e.rs",
            "/// [`crate::a`]\nuse crate::d::Z;\nuse crate::Observer;",
        ),
        file("model", "src/model.rs", "pub struct M;"),
    ];
    let g = analyse(&nodes, &files, &BTreeMap::new());
    let comps: Vec<Vec<String>> = sccs(&g).into_iter().filter(|c| c.len() > 1).collect();
    assert_eq!(comps, [vec!["a", "b", "c"], vec!["d", "e"]]);
    assert_eq!(
        cycle_cover(&g, &comps[0]),
        [vec!["a", "b", "a"], vec!["b", "c", "a", "b"]],
        "every edge of the group lies on a reported cycle"
    );
    let reexports = BTreeMap::from([("Observer".to_string(), "observe::Observer".to_string())]);
    let text = report(&g, &reexports);
    for want in [
        "src/e.rs:3: `crate::Observer` is a root re-export: write `crate::observe::Observer`",
        "[2] {d, e}",
        "    d -> e -> d\n      d -> e: src/d.rs:1\n      e -> d: src/e.rs:2\n",
        "[1] {a, b, c}",
        "    a -> b -> a\n      a -> b: src/a.rs:1\n      b -> a: src/b/inner.rs:1\n",
        "    b -> c -> a -> b\n      b -> c: src/b/mod.rs:2\n      c -> a: src/c.rs:3\n      a -> b: src/a.rs:1\n",
        "    b -> a (1): src/b/inner.rs:1",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(!text.contains("model"), "model is on no cycle:\n{text}");
    assert!(!text.contains("self_edge") && !text.contains("d -> d"), "{text}");
}

#[test]
fn a_clean_graph_reports_nothing() {
    let nodes: BTreeSet<String> = ["a", "b"].map(String::from).into();
    let files = [
        file("a", "src/a.rs", "use crate::b::X;"),
        file("b", "src/b.rs", "use super::b::Y;"),
    ];
    assert_eq!(report(&analyse(&nodes, &files, &BTreeMap::new()), &BTreeMap::new()), "");
}

#[test]
fn a_root_reexport_still_counts_as_the_edge_it_hides() {
    let nodes: BTreeSet<String> = ["a", "b"].map(String::from).into();
    let files = [
        file("a", "src/a.rs", "use crate::b::X;"),
        file("b", "src/b/mod.rs", "mod tests;"),
        file("b", "src/b/tests.rs", "use crate::{Thing, a};"),
    ];
    let reexports = BTreeMap::from([("Thing".to_string(), "a::thing::Thing".to_string())]);
    let g = analyse(&nodes, &files, &reexports);
    // Two references on one line: one site, marked as test code.
    assert_eq!(
        g.sites("b", "a"),
        [Site {
            file: "src/b/tests.rs".into(),
            line: 1,
            test: true
        }]
    );
    let text = report(&g, &reexports);
    assert!(
        text.contains("src/b/tests.rs:1 (test): `crate::Thing` is a root re-export: write `crate::a::thing::Thing`"),
        "{text}"
    );
    assert!(text.contains("      b -> a: src/b/tests.rs:1 (test)\n"), "{text}");
    assert!(g.without_tests().edges.get("b").is_none_or(|m| m.is_empty()));
}

/// Observe mode validates VRAM from the serving process's own threads: the
/// CUDA query it makes (`src/nixl/cuda.rs` `pointer`) asks the pointer for
/// its attributes and never makes, binds, retains or switches a context —
/// which would move the caller's current device. Checked on the code (with
/// comments and strings masked) so that it holds on machines without a GPU;
/// the GPU test `a_pointer_query_leaves_the_callers_context_alone` checks it
/// on a device.
#[test]
fn the_observe_paths_cuda_query_touches_no_context() {
    let src = std::fs::read_to_string(repo().join("src/nixl/cuda.rs")).unwrap();
    let masked = mask(&src);
    let start = masked.find("pub fn pointer(").expect("cuda::pointer");
    let body_open = start + masked[start..].find('{').unwrap();
    let mut depth = 0;
    let mut end = body_open;
    for (i, c) in masked[body_open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = body_open + i;
                    break;
                }
            }
            _ => {}
        }
    }
    let body = &masked[body_open..end];
    for forbidden in [
        "context(",
        "CudaContext",
        "bind_to_thread",
        "cuCtx",
        "PrimaryCtx",
        "cuDevicePrimary",
    ] {
        assert!(!body.contains(forbidden), "cuda::pointer calls {forbidden}");
    }
    assert!(body.contains("cuPointerGetAttribute"), "the pointer is asked itself");
}
