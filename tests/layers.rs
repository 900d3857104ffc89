//! The layering rules of the workspace, checked by reading the sources
//! (see "Layout" in docs/architecture.md):
//!
//! - `room` (the domain) uses neither `api` nor `media` nor axum;
//! - `media` (the real-time plane) uses neither `api` nor `auth`;
//! - `api` reaches `media` only through its handle (`MediaHandle`, `MediaStats`);
//! - nothing in the server uses `fuzz`, which only exists with the `fuzzing` feature;
//! - `tutti-load` does not depend on `tutti-server`;
//! - no module circle in any crate: among the modules under one parent,
//!   the "uses" relation has no cycle (a module's use of its own ancestors,
//!   whose items it may re-export, does not count).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file as a module path (`room::registry`) and its code with comments removed.
struct Module {
    path: String,
    file: PathBuf,
    code: String,
}

fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") {
                return "";
            }
            // A trailing comment (not inside a string: good enough for our sources).
            match l.find(" // ") {
                Some(i) if !l[..i].contains('"') => &l[..i],
                _ => l,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn modules(src: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source folder").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src").with_extension("");
            let mut segs: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if segs.last().is_some_and(|s| s == "mod" || s == "lib" || s == "main") {
                segs.pop();
            }
            let code = strip_comments(&std::fs::read_to_string(&p).expect("readable source"));
            out.push(Module { path: segs.join("::"), file: p, code });
        }
    }
    out
}

/// Every module path a file refers to with `crate::…` or `super::…`,
/// braces expanded one level (`crate::room::{Claim, registry::X}`).
fn references(m: &Module) -> Vec<String> {
    let base: Vec<&str> = if m.path.is_empty() { vec![] } else { m.path.split("::").collect() };
    let mut refs = Vec::new();
    for (start, prefix) in [("crate::", None), ("super::", Some(()))] {
        let mut rest = m.code.as_str();
        while let Some(i) = rest.find(start) {
            let before = rest[..i].chars().last();
            rest = &rest[i + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let root: Vec<String> = match prefix {
                None => vec![],
                Some(()) => {
                    // `super` of a file module is its parent; of a mod.rs, the parent's parent.
                    let mut b: Vec<String> = base.iter().map(|s| s.to_string()).collect();
                    b.pop();
                    b
                }
            };
            let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            let mut segs = root.clone();
            segs.extend(path.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
            let after = &rest[path.len()..];
            if path.ends_with("::") && after.starts_with('{') {
                let inner: String = after[1..].chars().take_while(|c| *c != '}').collect();
                for item in inner.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim().to_owned();
                    if !first.is_empty() && first != "self" {
                        let mut s = segs.clone();
                        s.push(first);
                        refs.push(s.join("::"));
                    }
                }
            }
            refs.push(segs.join("::"));
        }
    }
    refs
}

/// The longest known module that `path` starts with.
fn resolve(path: &str, known: &BTreeSet<String>) -> String {
    let segs: Vec<&str> = path.split("::").collect();
    (0..=segs.len()).rev().map(|n| segs[..n].join("::")).find(|p| known.contains(p)).unwrap_or_default()
}

/// Cycles among sibling modules, in one crate.
fn circles(mods: &[Module]) -> Vec<String> {
    let known: BTreeSet<String> = mods.iter().map(|m| m.path.clone()).collect();
    // Edges at every level: for a use a::b::c → a::d::e, the edge b → d under parent a.
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for m in mods {
        for r in references(m) {
            let to = resolve(&r, &known);
            let from_segs: Vec<&str> = m.path.split("::").filter(|s| !s.is_empty()).collect();
            let to_segs: Vec<&str> = to.split("::").filter(|s| !s.is_empty()).collect();
            let common = from_segs.iter().zip(&to_segs).take_while(|(a, b)| a == b).count();
            if common == from_segs.len() || common == to_segs.len() {
                continue; // itself, an ancestor or a descendant
            }
            let parent = from_segs[..common].join("::");
            graphs
                .entry(parent)
                .or_default()
                .entry(from_segs[common].to_owned())
                .or_default()
                .insert(to_segs[common].to_owned());
        }
    }
    let mut found = Vec::new();
    for (parent, g) in &graphs {
        // Depth-first search for a back edge.
        fn visit(
            n: &str,
            g: &BTreeMap<String, BTreeSet<String>>,
            state: &mut BTreeMap<String, u8>,
            path: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            match state.get(n) {
                Some(1) => {
                    let i = path.iter().position(|p| p == n).unwrap_or(0);
                    let mut cycle = path[i..].to_vec();
                    cycle.push(n.to_owned());
                    return Some(cycle);
                }
                Some(2) => return None,
                _ => {}
            }
            state.insert(n.to_owned(), 1);
            path.push(n.to_owned());
            for next in g.get(n).into_iter().flatten() {
                if let Some(c) = visit(next, g, state, path) {
                    return Some(c);
                }
            }
            path.pop();
            state.insert(n.to_owned(), 2);
            None
        }
        let mut state = BTreeMap::new();
        for n in g.keys() {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                found.push(format!("under `{}`: {}", if parent.is_empty() { "crate" } else { parent }, c.join(" → ")));
                break;
            }
        }
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn server_modules() -> Vec<Module> {
    modules(&root().join("crates/server/src"))
}

fn uses(m: &Module, needle: &str) -> bool {
    m.code.contains(needle)
}

#[test]
fn the_room_domain_uses_neither_api_nor_media_nor_axum() {
    let bad: Vec<_> = server_modules()
        .into_iter()
        .filter(|m| m.path == "room" || m.path.starts_with("room::"))
        .filter(|m| uses(m, "crate::api") || uses(m, "crate::media") || uses(m, "axum"))
        .map(|m| m.file.display().to_string())
        .collect();
    assert!(bad.is_empty(), "room must not use api, media or axum: {bad:?}");
}

#[test]
fn the_media_plane_uses_neither_api_nor_auth() {
    let bad: Vec<_> = server_modules()
        .into_iter()
        .filter(|m| m.path == "media" || m.path.starts_with("media::"))
        .filter(|m| uses(m, "crate::api") || uses(m, "crate::auth"))
        .map(|m| m.file.display().to_string())
        .collect();
    assert!(bad.is_empty(), "media must not use api or auth: {bad:?}");
}

#[test]
fn the_api_reaches_media_only_through_its_handle() {
    let allowed = ["MediaHandle", "MediaStats"];
    for m in server_modules().into_iter().filter(|m| m.path == "api" || m.path.starts_with("api::")) {
        for r in references(&m).into_iter().filter(|r| r == "media" || r.starts_with("media::")) {
            let item = r.strip_prefix("media::").unwrap_or("");
            assert!(
                allowed.contains(&item),
                "{}: uses `crate::{r}`; the API may use only {allowed:?}",
                m.file.display()
            );
        }
    }
}

#[test]
fn fuzzing_entry_points_are_behind_a_feature_and_unused_by_the_server() {
    let mods = server_modules();
    for m in &mods {
        if m.path != "fuzz" && !m.path.is_empty() {
            assert!(!uses(m, "crate::fuzz"), "{} uses the fuzz module", m.file.display());
        }
    }
    let lib = &mods.iter().find(|m| m.path.is_empty()).expect("lib.rs").code;
    let line = lib.lines().position(|l| l.trim() == "pub mod fuzz;").expect("lib.rs declares `pub mod fuzz;`");
    let above: Vec<&str> = lib.lines().take(line).collect();
    assert!(
        above.iter().rev().take(3).any(|l| l.contains("#[cfg(feature = \"fuzzing\")]")),
        "`mod fuzz` must be behind #[cfg(feature = \"fuzzing\")]"
    );
    let rtc = std::fs::read_to_string(root().join("crates/rtc/Cargo.toml")).expect("rtc manifest");
    assert!(rtc.contains("fuzzing = []"), "tutti-rtc has a `fuzzing` feature for its raw-packet helpers");
}

#[test]
fn the_load_tester_does_not_depend_on_the_server() {
    let manifest = std::fs::read_to_string(root().join("crates/load/Cargo.toml")).expect("load manifest");
    assert!(!manifest.contains("tutti-server"), "tutti-load must not depend on tutti-server");
    let client = std::fs::read_to_string(root().join("crates/client/Cargo.toml")).expect("client manifest");
    assert!(!client.contains("tutti-server"), "tutti-client must not depend on tutti-server");
}

#[test]
fn no_module_circle_in_any_crate() {
    let mut dirs = vec![root().join("src")];
    for e in std::fs::read_dir(root().join("crates")).expect("crates").flatten() {
        dirs.push(e.path().join("src"));
    }
    let mut all = Vec::new();
    for d in dirs.iter().filter(|d| d.is_dir()) {
        for c in circles(&modules(d)) {
            all.push(format!("{}: {c}", d.display()));
        }
    }
    assert!(all.is_empty(), "module circles:\n{}", all.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let m = |path: &str, code: &str| Module { path: path.into(), file: PathBuf::from(path), code: code.into() };
    let mods = vec![
        m("", "mod a; mod b;"),
        m("a", "use crate::b::Thing;"),
        m("b", "use crate::a::{Other, self};"),
        m("c", "use super::a;"),
        m("d::x", "use super::y::Z;"),
        m("d::y", "use crate::d::x::W;"),
        m("d", "pub use x::W;"),
    ];
    let found = circles(&mods);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("a → b → a"), "{found:?}");
    assert!(found[1].contains("under `d`: x → y → x"), "{found:?}");
    let ok = vec![m("", ""), m("a", "use crate::b::T;"), m("b", "use crate::c::U;"), m("c", "use super::X;")];
    assert!(circles(&ok).is_empty());
}
