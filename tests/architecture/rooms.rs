//! Inside a room: no circles between the modules of one module.
//!
//! The crate-wide check (`no_module_imports_a_module_that_imports_it_back`)
//! sees a top-level module with everything under it as one node, so a
//! circle between two files of one room (`telemetry::metrics` ⇄
//! `telemetry::exposition`) stays hidden there. Here every module that has
//! child modules is a room of its own: its children, each with everything
//! under it, are the nodes, and a reference from a file under one child to
//! a module under another is an edge. Every room, at every depth, must be
//! free of circles — the same rule, one level down, and so on.
//!
//! Paths are resolved as the compiler resolves them, from where they are
//! written: `crate::`, any `super::` chain, `self::`, and `child::` where the
//! file declares `mod child;`; the items of a `use` tree one by one; a path
//! through a name that a module imports (`pub use metrics::Metrics`, or a
//! plain `use`, which its children may name too) is followed to the module
//! that defines it, so a re-export cannot hide an edge.
//!
//! A module and the modules inside it are one room: a child naming its
//! parent's items (`super::Thing`) and a parent naming its children's are
//! containment, not edges between rooms; a circle that leaves the parent
//! is a circle between rooms one level up, and is found there.

use super::*;

/// A path as written, resolved from the crate root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathRef {
    pub line: usize,
    pub path: Vec<String>,
    pub test: bool,
}

/// What one file says, resolved: every path it writes, and the names its
/// top-level `use` items bind (name → the path it stands for).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    pub paths: Vec<PathRef>,
    pub binds: BTreeMap<String, Vec<String>>,
}

fn alias(toks: &[Token], j: &mut usize) -> Option<String> {
    if ident(toks.get(*j)) == Some("as") {
        *j += 2;
        ident(toks.get(*j - 1)).map(str::to_string)
    } else {
        None
    }
}

/// The paths of the tree at `toks[j]` under `prefix`, each with the name it
/// binds in a `use` (its last segment or its alias; none for a glob).
/// Returns the index after the tree.
fn tree(
    toks: &[Token],
    mut j: usize,
    mut path: Vec<String>,
    out: &mut Vec<(Vec<String>, usize, Option<String>)>,
) -> usize {
    loop {
        match toks.get(j).map(|t| &t.tok) {
            Some(Tok::Ident(s)) if s == "self" && !is(toks.get(j + 1), &Tok::Sep) => {
                let line = toks[j].line;
                j += 1;
                let bind = alias(toks, &mut j).or_else(|| path.last().cloned());
                out.push((path, line, bind));
                return j;
            }
            Some(Tok::Ident(s)) => {
                let line = toks[j].line;
                path.push(s.clone());
                if is(toks.get(j + 1), &Tok::Sep) {
                    j += 2;
                    continue;
                }
                j += 1;
                let bind = alias(toks, &mut j).or_else(|| path.last().cloned());
                out.push((path, line, bind));
                return j;
            }
            Some(Tok::Star) => {
                path.push("*".into());
                out.push((path, toks[j].line, None));
                return j + 1;
            }
            Some(Tok::Open) => {
                j += 1;
                while j < toks.len() && !is(toks.get(j), &Tok::Close) {
                    let before = j;
                    j = tree(toks, j, path.clone(), out);
                    if is(toks.get(j), &Tok::Comma) || j == before {
                        j += 1;
                    }
                }
                return j + 1;
            }
            // `crate::a::B::<T>`, `super::super)`: the path so far.
            _ => {
                let line = toks.get(j.saturating_sub(1)).map_or(0, |t| t.line);
                out.push((path, line, None));
                return j;
            }
        }
    }
}

/// Every path of a file at module path `here`, resolved from the crate root.
pub(crate) fn resolve_paths(src: &str, here: &[String]) -> Resolved {
    let toks = tokens(&mask(src));
    let mut out = Resolved::default();
    // `mod child;` at the file's top level.
    let mut children = BTreeSet::new();
    let mut braces = 0usize;
    for i in 0..toks.len() {
        match toks[i].tok {
            Tok::Open => braces += 1,
            Tok::Close => braces = braces.saturating_sub(1),
            _ if braces == 0 && ident(toks.get(i)) == Some("mod") && is(toks.get(i + 2), &Tok::Semi) => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    children.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    let mut braces = 0usize;
    // Open inline modules: brace depth outside, name, `#[cfg(test)]`.
    let mut inline: Vec<(usize, String, bool)> = Vec::new();
    // Inside a top-level `use` item, until its `;`.
    let mut in_use = false;
    // Tokens a tree already read (a group's items are not paths of their own).
    let mut read_to = 0;
    for i in 0..toks.len() {
        let prev = i.checked_sub(1).map(|p| &toks[p]);
        let cur: Vec<String> = here.iter().cloned().chain(inline.iter().map(|m| m.1.clone())).collect();
        let start: Option<(Vec<String>, usize)> = match &toks[i].tok {
            Tok::Open => {
                if let (Some(name), Some("mod")) = (ident(prev), ident(i.checked_sub(2).map(|p| &toks[p]))) {
                    inline.push((braces, name.to_string(), has_cfg_test(&toks, i - 2)));
                }
                braces += 1;
                None
            }
            Tok::Close => {
                braces = braces.saturating_sub(1);
                if inline.last().is_some_and(|m| m.0 == braces) {
                    inline.pop();
                }
                None
            }
            Tok::Semi => {
                in_use = false;
                None
            }
            Tok::Ident(w) if w == "use" && braces == 0 => {
                in_use = true;
                None
            }
            Tok::Ident(_) if i < read_to || is(prev, &Tok::Sep) || is(prev, &Tok::Other('$')) => None,
            Tok::Ident(w) if w == "crate" && is(toks.get(i + 1), &Tok::Sep) => Some((Vec::new(), i + 2)),
            Tok::Ident(w) if w == "self" && is(toks.get(i + 1), &Tok::Sep) => Some((cur.clone(), i + 2)),
            Tok::Ident(w) if w == "super" => {
                let mut j = i;
                let mut ups = 0;
                while ident(toks.get(j)) == Some("super") && is(toks.get(j + 1), &Tok::Sep) {
                    ups += 1;
                    j += 2;
                }
                (ups > 0 && ups <= cur.len()).then(|| (cur[..cur.len() - ups].to_vec(), j))
            }
            Tok::Ident(w) if inline.is_empty() && children.contains(w) && is(toks.get(i + 1), &Tok::Sep) => {
                Some((here.to_vec(), i))
            }
            _ => None,
        };
        if let Some((prefix, j)) = start {
            let mut found = Vec::new();
            read_to = tree(&toks, j, prefix, &mut found);
            let test = inline.iter().any(|m| m.2);
            for (path, line, bind) in found {
                if in_use && inline.is_empty() {
                    if let Some(b) = bind.filter(|b| b != "_") {
                        out.binds.insert(b, path.clone());
                    }
                }
                out.paths.push(PathRef { line, path, test });
            }
        }
    }
    out
}

/// The module a path lands in: the longest prefix that is a module (``
/// for the crate root), followed through the names modules import.
pub(crate) fn land(path: &[String], modules: &BTreeMap<String, Resolved>, hops: usize) -> Option<String> {
    for k in (0..=path.len()).rev() {
        let key = path[..k].join("::");
        let Some(m) = modules.get(&key) else { continue };
        if let Some(via) = path.get(k).and_then(|name| m.binds.get(name)) {
            if hops < 8 && via.as_slice() != &path[..=k] {
                let mut next = via.clone();
                next.extend_from_slice(&path[k + 1..]);
                if let Some(t) = land(&next, modules, hops + 1) {
                    return Some(t);
                }
            }
        }
        return Some(key);
    }
    None
}

/// Each room (a module with child modules, the crate root left to the
/// crate-wide check) with the graph between its children.
pub(crate) fn rooms(files: &[SourceFile], lib_rs: &str) -> BTreeMap<String, Graph> {
    let mut modules: BTreeMap<String, Resolved> = BTreeMap::new();
    let mut where_: Vec<(&SourceFile, Vec<String>)> = Vec::new();
    modules.insert(String::new(), resolve_paths(lib_rs, &[]));
    for f in files {
        let inside: Vec<String> = f.rel["src/".len()..f.rel.len() - ".rs".len()]
            .split('/')
            .map(String::from)
            .collect();
        let path = module_path(&inside);
        modules.insert(path.join("::"), resolve_paths(&f.text, &path));
        where_.push((f, path));
    }
    let mut rooms: BTreeMap<String, Graph> = BTreeMap::new();
    for (_, path) in &where_ {
        for depth in 1..path.len() {
            let room = rooms.entry(path[..depth].join("::")).or_default();
            room.nodes.insert(path[depth].clone());
        }
    }
    for (f, path) in &where_ {
        let resolved = &modules[&path.join("::")];
        for r in &resolved.paths {
            let Some(target) = land(&r.path, &modules, 0) else {
                continue;
            };
            let target: Vec<&str> = if target.is_empty() {
                Vec::new()
            } else {
                target.split("::").collect()
            };
            // The deepest room both lie strictly inside.
            let common = path.iter().zip(&target).take_while(|(a, b)| a == *b).count();
            if common >= path.len() || common >= target.len() || common == 0 {
                continue; // containment, the same module, or the crate-wide check's
            }
            let room = rooms.entry(path[..common].join("::")).or_default();
            room.edges
                .entry(path[common].clone())
                .or_default()
                .entry(target[common].to_string())
                .or_default()
                .push(Site {
                    file: f.rel.clone(),
                    line: r.line,
                    test: r.test || f.test_only,
                });
        }
    }
    for g in rooms.values_mut() {
        for sites in g.edges.values_mut().flat_map(|m| m.values_mut()) {
            sites.sort();
            sites.dedup();
        }
    }
    rooms.retain(|_, g| g.nodes.len() > 1);
    rooms
}

/// The readable failure for every room with a circle; empty when none has.
pub(crate) fn report_rooms(rooms: &BTreeMap<String, Graph>) -> String {
    let mut out = String::new();
    for (room, g) in rooms {
        let text = report(g, &BTreeMap::new()).replace("in src/:", &format!("in `{room}`:"));
        if !text.is_empty() {
            let _ = writeln!(
                out,
                "Inside `{room}` (its child modules, each with what is under it):\n{text}"
            );
        }
    }
    out
}

#[test]
fn paths_resolve_from_where_they_are_written() {
    let here = ["telemetry".to_string(), "metrics".to_string()];
    let src = "mod inner;\nuse super::names::{self, Family as F};\nuse crate::ledger::{Applied, State};\n\
               fn f() { super::super::model::X; self::g(); inner::h(); crate::Observer::new(); }\n\
               #[cfg(test)]\nmod tests { use super::*; use super::super::exposition::Format; }";
    let got = resolve_paths(src, &here);
    let paths: Vec<(String, bool)> = got.paths.iter().map(|p| (p.path.join("::"), p.test)).collect();
    let want = [
        ("telemetry::names", false),
        ("telemetry::names::Family", false),
        ("ledger::Applied", false),
        ("ledger::State", false),
        ("model::X", false),
        ("telemetry::metrics::g", false),
        ("telemetry::metrics::inner::h", false),
        ("Observer::new", false),
        ("telemetry::metrics::*", true),
        ("telemetry::exposition::Format", true),
    ];
    assert_eq!(paths, want.map(|(p, t)| (p.to_string(), t)));
    assert_eq!(got.binds["names"], ["telemetry", "names"]);
    assert_eq!(got.binds["F"], ["telemetry", "names", "Family"]);
    assert!(
        !got.binds.contains_key("Format"),
        "a test module's imports bind nothing at the top"
    );
}

#[test]
fn a_circle_between_the_files_of_one_room_is_found_through_a_reexport() {
    let files = [
        file(
            "t",
            "src/t/mod.rs",
            "mod a;\nmod b;\nmod c;\npub use a::Thing;\npub use b::Other;",
        ),
        // a -> b (through the room's re-export), b -> a: a circle in `t`.
        file("t", "src/t/a.rs", "use super::Other;\npub struct Thing;"),
        file("t", "src/t/b.rs", "pub struct Other;\nfn f() { super::a::Thing; }"),
        // c names its parent and the crate: containment and the crate-wide check's.
        file("t", "src/t/c.rs", "use super::Thing as T;\nuse crate::u::V;"),
        file("u", "src/u.rs", "pub struct V;\nfn g() { crate::t::Other; }"),
    ];
    let rooms = rooms(&files, "mod t;\nmod u;\npub use t::Thing;");
    assert_eq!(rooms.keys().collect::<Vec<_>>(), ["t"]);
    let text = report_rooms(&rooms);
    for want in [
        "Inside `t`",
        "[1] {a, b}",
        "a -> b: src/t/a.rs:1",
        "b -> a: src/t/b.rs:2",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(
        !text.contains("c ->") && !text.contains("-> c"),
        "c is on no circle:\n{text}"
    );
    // Break it (b no longer names a): nothing to report.
    let mut fixed = files;
    fixed[2] = file("t", "src/t/b.rs", "pub struct Other;");
    assert_eq!(report_rooms(&super::rooms::rooms(&fixed, "mod t;\nmod u;")), "");
}
