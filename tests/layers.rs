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
//!   whose items it may re-export, does not count);
//! - no file circle in any crate: with each source file a node and each
//!   path it names (`crate::…`, `super::…`, `self::…`, or a child module
//!   it declares) an arrow to the file of the deepest module named, the
//!   arrows have no cycle — a child that imports its parent's items while
//!   the parent imports the child's is a circle too (inline `mod tests`
//!   blocks aside: test code);
//! - the two control planes, `api` (HTTP) and `sip` (the SIP edge), share
//!   the top layer and never use each other; `sip` reaches rooms, media and
//!   the cluster through `session` only;
//! - inside the server, imports only go down the layers, file by file:
//!   `api` (the HTTP control plane) and `sip` ▸ `session` ▸ `cluster` ▸ `refusal` ▸
//!   `media` ▸ `outputs` (wiring) ▸ `config` ▸ `room` ▸ the leaves (the
//!   outputs' recording, Ogg, webhook and RTP-out files among them);
//!   nothing below reaches up into a handler.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file as a module path (`room::registry`) and its code with comments removed.
struct Module {
    path: String,
    file: PathBuf,
    code: String,
}

/// `text` without its inline `#[cfg(test)] mod … { … }` blocks (test
/// code, whose `super` is the file itself), other attributes between the
/// two allowed.
fn strip_inline_tests(text: &str) -> String {
    let mut text = text.to_owned();
    let mut from = 0;
    while let Some(found) = text[from..].find("#[cfg(test)]\n") {
        let start = from + found;
        let mut line_start = start + "#[cfg(test)]\n".len();
        while text[line_start..].starts_with("#[") {
            line_start += text[line_start..].find('\n').map_or(text.len() - line_start, |i| i + 1);
        }
        let line_end = text[line_start..].find('\n').map_or(text.len(), |i| line_start + i);
        let line = text[line_start..line_end].trim_end();
        let module = line.strip_prefix("pub(crate) ").unwrap_or(line).starts_with("mod ");
        if !module || !line.ends_with('{') {
            from = line_end.min(text.len());
            continue;
        }
        let body = line_end - 1;
        let mut depth = 0usize;
        let mut end = text.len();
        for (i, c) in text[body..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = body + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        text.replace_range(start..end, "");
        from = start;
    }
    text
}

/// `text` without its `#[cfg(doc)]` imports (there for doc links only).
fn strip_doc_only(text: &str) -> String {
    let mut out = Vec::new();
    let mut skip = false;
    for line in text.lines() {
        if skip && line.trim_start().starts_with("use ") {
            skip = !line.trim_end().ends_with(';');
            continue;
        }
        skip = line.trim() == "#[cfg(doc)]";
        if !skip {
            out.push(line);
        }
    }
    out.join("\n")
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
            let code = strip_doc_only(&strip_inline_tests(&strip_comments(
                &std::fs::read_to_string(&p).expect("readable source"),
            )));
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
            if (path.is_empty() || path.ends_with("::")) && after.starts_with('{') {
                // A brace list names its items (`self` names the module itself).
                let inner: String = after[1..].chars().take_while(|c| *c != '}').collect();
                for item in inner.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim().to_owned();
                    if first == "self" {
                        refs.push(segs.join("::"));
                    } else if !first.is_empty() {
                        let mut s = segs.clone();
                        s.push(first);
                        refs.push(s.join("::"));
                    }
                }
                continue;
            }
            refs.push(segs.join("::"));
        }
    }
    refs
}

/// The child modules a file declares (`mod x;`, `pub(crate) mod x;`).
fn declared_children(m: &Module) -> Vec<String> {
    m.code
        .lines()
        .filter_map(|l| {
            let t = l.trim();
            let rest = t.strip_prefix("pub ").or_else(|| t.strip_prefix("pub(crate) ")).unwrap_or(t);
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// Every module path a file refers to ([`references`]), plus its relative
/// paths: `self::x::…` and `x::…` for a child `x` it declares.
fn file_references(m: &Module) -> Vec<String> {
    let mut refs = references(m);
    let base: Vec<&str> = if m.path.is_empty() { vec![] } else { m.path.split("::").collect() };
    for child in declared_children(m) {
        for prefix in [format!("{child}::"), format!("self::{child}::")] {
            let mut rest = m.code.as_str();
            while let Some(i) = rest.find(&prefix) {
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') && !prefix.starts_with("self") {
                    continue;
                }
                let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                let mut segs: Vec<String> = base.iter().map(|s| s.to_string()).collect();
                segs.push(child.clone());
                segs.extend(path.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
                if path.is_empty() && rest.starts_with('{') {
                    let inner: String = rest[1..].chars().take_while(|c| *c != '}').collect();
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
    }
    refs
}

/// Arrows between files: each file to the file of each module it names
/// (the deepest known), itself aside.
fn file_arrows(mods: &[Module]) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<String> = mods.iter().map(|m| m.path.clone()).collect();
    let exports = reexports(mods, &known);
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in mods {
        let entry = arrows.entry(m.path.clone()).or_default();
        for r in file_references(m) {
            let to = resolve_through(&r, &known, &exports);
            if to != m.path {
                entry.insert(to);
            }
        }
    }
    arrows
}

/// Every circle of a graph, each once (a found circle's first arrow is
/// taken out before the next search; at most 64).
fn all_cycles(mut arrows: BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    while let Some(c) = cycle(&arrows)
        && found.len() < 64
    {
        if let Some(tos) = arrows.get_mut(&c[0]) {
            tos.remove(&c[1]);
        }
        found.push(c.iter().map(|m| if m.is_empty() { "lib" } else { m.as_str() }).collect::<Vec<_>>().join(" → "));
    }
    found
}

/// What each module re-exports (`pub use x::Item;`, `pub(crate) use …`):
/// (module, item) → the module that defines it. A path through a
/// re-export names the defining file, not the one that re-exports it.
fn reexports(mods: &[Module], known: &BTreeSet<String>) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for m in mods {
        let base: Vec<&str> = if m.path.is_empty() { vec![] } else { m.path.split("::").collect() };
        for statement in m.code.split(';') {
            let t = statement.trim();
            let start = t.find("pub use ").or_else(|| t.find("pub(crate) use "));
            let Some(rest) = start.map(|i| &t[i..]) else { continue };
            let rest = rest.trim_start_matches("pub use ").trim_start_matches("pub(crate) use ");
            let rest: String = rest.split_whitespace().collect::<Vec<_>>().join(" ");
            let rest = rest.replace("{ ", "{").replace(" }", "}").replace(", ", ",");
            let rest = rest.trim_end_matches(',');
            let (path, items): (&str, Vec<&str>) = match rest.split_once("::{") {
                Some((p, i)) => (p, i.trim_end_matches('}').trim_end_matches(',').split(',').collect()),
                None => match rest.rsplit_once("::") {
                    Some((p, i)) => (p, vec![i]),
                    None => continue,
                },
            };
            let mut segs: Vec<String> = match path.split("::").next() {
                Some("crate") => vec![],
                Some("super") => base[..base.len().saturating_sub(1)].iter().map(|s| s.to_string()).collect(),
                Some("self") => base.iter().map(|s| s.to_string()).collect(),
                _ => base.iter().map(|s| s.to_string()).collect(),
            };
            segs.extend(path.split("::").filter(|s| !matches!(*s, "crate" | "super" | "self" | "")).map(str::to_owned));
            let target = resolve(&segs.join("::"), known);
            for item in items {
                let item = item.trim().split(" as ").last().unwrap_or("").trim();
                if !item.is_empty() && item != "self" && target != m.path {
                    out.insert((m.path.clone(), item.to_owned()), target.clone());
                }
            }
        }
    }
    out
}

/// [`resolve`], through re-exports.
fn resolve_through(path: &str, known: &BTreeSet<String>, exports: &BTreeMap<(String, String), String>) -> String {
    let mut to = resolve(path, known);
    for _ in 0..4 {
        let depth = if to.is_empty() { 0 } else { to.split("::").count() };
        let Some(next) = path.split("::").nth(depth) else { break };
        match exports.get(&(to.clone(), next.to_owned())) {
            Some(target) => to = target.clone(),
            None => break,
        }
    }
    to
}

/// A cycle in a graph (of modules, or of files), if any: its nodes, the
/// first repeated at the end (a depth-first search for a back edge).
fn cycle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
    for n in arrows.keys() {
        if let Some(c) = visit(n, arrows, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The server's layers, top first: a file may name modules of its own
/// layer or below, never above. The crate root, `server` (the wiring) and
/// `fuzz` sit above them all.
const SERVER_LAYERS: [&[&str]; 9] = [
    &["api", "sip"],
    &["session"],
    &["cluster"],
    &["refusal"],
    &["media"],
    &["outputs"],
    &["config"],
    &["room"],
    &["attributes", "auth", "metrics", "limit", "cidr", "ice", "priority", "sync"],
];

/// The outputs' leaves (recording, Ogg, webhooks, RTP out): in the leaf
/// layer, below the wiring in `outputs/mod.rs` and `outputs/hooks.rs`.
const OUTPUT_LEAVES: [&str; 4] = ["outputs::ogg", "outputs::recording", "outputs::rtp_out", "outputs::webhook"];

/// The layer of a server module (0 = top), `None` for the root, `server`, `fuzz`.
fn layer_of(path: &str) -> Option<usize> {
    if OUTPUT_LEAVES.iter().any(|l| path == *l || path.starts_with(&format!("{l}::"))) {
        return Some(SERVER_LAYERS.len() - 1);
    }
    let top = path.split("::").next().unwrap_or("");
    SERVER_LAYERS.iter().position(|l| l.contains(&top))
}

/// Arrows that go up a layer: (file, what it names).
fn upward(mods: &[Module]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (from, tos) in file_arrows(mods) {
        let Some(lf) = layer_of(&from) else { continue };
        for to in tos {
            // A leaf may use another leaf (their order is not a layering).
            if let Some(lt) = layer_of(&to)
                && lt < lf
            {
                out.push((from.clone(), to));
            }
        }
    }
    out
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
            // The outputs' leaf files are used from below their folder (the
            // room domain reads Ogg clips): the file check covers them.
            if OUTPUT_LEAVES.iter().any(|l| to == *l) {
                continue;
            }
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
        if let Some(c) = cycle(g) {
            found.push(format!("under `{}`: {}", if parent.is_empty() { "crate" } else { parent }, c.join(" → ")));
        }
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The source folders of the binary and of every crate.
fn source_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("src")];
    for e in std::fs::read_dir(root().join("crates")).expect("crates").flatten() {
        dirs.push(e.path().join("src"));
    }
    dirs.retain(|d| d.is_dir());
    dirs
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
fn the_sip_edge_and_the_api_never_use_each_other() {
    let under = |m: &Module, top: &str| m.path == top || m.path.starts_with(&format!("{top}::"));
    let mods = server_modules();
    assert!(mods.iter().any(|m| under(m, "sip")), "the sip module exists");
    for m in &mods {
        if under(m, "sip") {
            for below in ["crate::api", "crate::media", "crate::cluster"] {
                assert!(
                    !uses(m, below),
                    "{}: the SIP edge uses `{below}`; it calls down into session",
                    m.file.display()
                );
            }
        }
        if under(m, "api") {
            assert!(!uses(m, "crate::sip"), "{}: the API uses the SIP edge", m.file.display());
        }
    }
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
    let mut all = Vec::new();
    for d in &source_dirs() {
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

#[test]
fn no_file_circle_in_any_crate() {
    let mut all = Vec::new();
    for d in &source_dirs() {
        let mods = modules(d);
        assert!(mods.len() > 1 || d.ends_with("procfs/src"), "{} has its files read", d.display());
        for c in all_cycles(file_arrows(&mods)) {
            all.push(format!("{}: {c}", d.display()));
        }
    }
    assert!(all.is_empty(), "file circles (a file names a module whose file names it back):\n{}", all.join("\n"));
}

#[test]
fn inside_the_server_imports_only_go_down_the_layers() {
    let up = upward(&server_modules());
    let lines: Vec<String> = up.iter().map(|(f, t)| format!("{f} → {t}")).collect();
    assert!(lines.is_empty(), "imports up a layer (see SERVER_LAYERS):\n{}", lines.join("\n"));
}

#[test]
fn the_file_checks_find_a_circle_and_an_upward_import() {
    let m = |path: &str, code: &str| Module { path: path.into(), file: PathBuf::from(path), code: code.into() };
    // Yesterday's api: a child using its parent's helper while the parent routes to the child.
    let parent_child = vec![
        m("", "mod api;"),
        m("api", "mod rooms;\npub(crate) struct ApiState;\nfn router() { rooms::join(); }"),
        m("api::rooms", "use super::ApiState;\npub fn join() {}"),
    ];
    let c = cycle(&file_arrows(&parent_child)).expect("a circle through the parent");
    assert!(c.contains(&"api".to_owned()) && c.contains(&"api::rooms".to_owned()), "{c:?}");
    // Siblings through a brace list right after `super::`.
    let siblings = vec![
        m("", "mod api;"),
        m("api", "mod a;\nmod b;"),
        m("api::a", "use super::{b, Other};"),
        m("api::b", "use crate::api::a::X;"),
    ];
    assert!(cycle(&file_arrows(&siblings)).is_some(), "a → b → a");
    // Shared state in a file of its own: no circle.
    let fine = vec![
        m("", "mod api;"),
        m("api", "mod rooms;\nmod state;\nfn router() { rooms::join(); }"),
        m("api::state", "pub(crate) struct ApiState;"),
        m("api::rooms", "use super::state::ApiState;\npub fn join() {}"),
    ];
    assert_eq!(cycle(&file_arrows(&fine)), None);
    // Test code inside a file does not count.
    assert!(!strip_inline_tests("fn a() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n").contains("super"));
    // The cluster reaching up into a handler, and the room domain into the session layer.
    let up = upward(&[
        m("cluster::locate", "use crate::api::access::here;"),
        m("room::stage", "use crate::session::grants::may_see;"),
        m("api::rooms", "use crate::session::join::Joined;"),
        m("api::access", ""),
        m("session::grants", ""),
        m("session::join", ""),
    ]);
    assert_eq!(
        up,
        vec![
            ("cluster::locate".to_owned(), "api::access".to_owned()),
            ("room::stage".to_owned(), "session::grants".to_owned())
        ]
    );
}
