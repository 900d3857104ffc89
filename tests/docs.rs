//! The documentation holds together: in README.md, docs/**/*.md,
//! deploy/README.md and sdk/js/README.md every relative link `[text](target)` names a file that
//! exists, and every `#anchor` (on the same page or another markdown page)
//! names a heading there, by GitHub's rules for heading anchors; the README
//! stays short and opens with its two commands (CI and people copy them).
//!
//! Links to `http://`, `https://` and `mailto:` are not checked (no network
//! in tests). Markdown is read the simple way: fenced code blocks and inline
//! code spans are skipped, headings are ATX (`# …`), links inline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The README is a first screen and a map, not a manual.
const README_MAX_LINES: usize = 400;
/// The commands the README's first `sh` block must hold.
const README_COMMANDS: [&str; 2] = ["cargo run --release -- serve", "cargo test --workspace --locked"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files the check covers, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out =
        vec![PathBuf::from("README.md"), PathBuf::from("deploy/README.md"), PathBuf::from("sdk/js/README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p.strip_prefix(root).expect("under the root").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` without its inline code spans (`` `…` ``), which hold no links.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => {
                out.push_str("code");
                rest = &after[end + ticks..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of inline links `[text](target)` (and images) on one line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b']' || bytes.get(i + 1) != Some(&b'(') {
            i += 1;
            continue;
        }
        let start = i + 2;
        let mut depth = 1;
        let mut j = start;
        while j < bytes.len() && depth > 0 {
            match bytes[j] {
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        if depth == 0 {
            let inner = line[start..j - 1].trim();
            // `[text](target "title")`: the target is the first word.
            let target = inner.split_whitespace().next().unwrap_or("");
            out.push(target.trim_start_matches('<').trim_end_matches('>').to_owned());
        }
        i = j.max(i + 1);
    }
    out
}

/// GitHub's anchor for a heading's text: markup and link targets dropped,
/// lowercase, every character but letters, digits, `-`, `_` and spaces
/// removed, spaces turned into `-`.
fn slug(heading: &str) -> String {
    // `[text](target)` reads as `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map(|c| open + c + 1).unwrap_or(rest.len());
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings; repeated ones get `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// `base/rel` with `.` and `..` resolved, or None when it climbs above the root.
fn join(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = base.components().collect();
    for c in Path::new(rel).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.iter().collect())
}

/// Every broken link of `docs` (paths relative to `root`), as "file:line: why".
fn broken_links(root: &Path, docs: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |file: &Path| -> BTreeSet<String> {
        anchor_cache
            .entry(file.to_path_buf())
            .or_insert_with(|| anchors(&std::fs::read_to_string(root.join(file)).unwrap_or_default()))
            .clone()
    };
    for doc in docs {
        let text = std::fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let dir = doc.parent().unwrap_or(Path::new(""));
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                let at = format!("{}:{n}: ({target})", doc.display());
                if target.is_empty() {
                    problems.push(format!("{at} an empty link"));
                    continue;
                }
                if ["http://", "https://", "mailto:"].iter().any(|s| target.starts_with(s)) {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    match join(dir, path) {
                        Some(f) => f,
                        None => {
                            problems.push(format!("{at} climbs out of the repository"));
                            continue;
                        }
                    }
                };
                if !root.join(&file).exists() {
                    problems.push(format!("{at} no such file {}", file.display()));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if file.extension().is_none_or(|e| e != "md") {
                        problems.push(format!("{at} an anchor into a file that is not markdown"));
                    } else if !anchors_of(&file).contains(anchor) {
                        problems.push(format!("{at} no heading #{anchor} in {}", file.display()));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = root();
    let docs = documents(&root);
    assert!(docs.len() > 10, "README.md, deploy/README.md and the docs/ pages: {docs:?}");
    let problems = broken_links(&root, &docs);
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn the_readme_is_short_and_opens_with_its_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines; keep it under {README_MAX_LINES}: move detail to docs/"
    );
    let mut in_block = false;
    let mut block = Vec::new();
    for (i, line) in readme.lines().enumerate() {
        if !in_block && line.trim_start().starts_with("```") {
            assert!(line.trim() == "```sh", "README.md's first code block (line {}) is a sh block: {line}", i + 1);
            assert!(i < 10, "README.md's first sh block is in its first lines, not at line {}", i + 1);
            in_block = true;
        } else if in_block && line.trim_start().starts_with("```") {
            break;
        } else if in_block {
            block.push(line);
        }
    }
    for command in README_COMMANDS {
        assert!(
            block.iter().any(|l| l.trim_start().starts_with(command)),
            "README.md's first sh block runs `{command}`: {block:?}"
        );
    }
}

#[test]
fn anchors_follow_github_rules() {
    assert_eq!(
        slug("Per packet: the lean send and receive paths (issue 16)"),
        "per-packet-the-lean-send-and-receive-paths-issue-16"
    );
    assert_eq!(slug("RTP in (SIP gateways)"), "rtp-in-sip-gateways");
    assert_eq!(slug("`tutti load` and `tutti capacity`"), "tutti-load-and-tutti-capacity");
    assert_eq!(slug("The [web client](web-client.md)"), "the-web-client");
    assert_eq!(slug("Networks: UDP, TCP, TURN"), "networks-udp-tcp-turn");
    let page = "# Title\n## Runs\n```sh\n# not a heading\n```\n## Runs\n## Runs\n";
    let found = anchors(page);
    assert_eq!(found, ["title", "runs", "runs-1", "runs-2"].iter().map(|s| s.to_string()).collect());
}

#[test]
fn the_check_finds_a_missing_file_and_a_missing_anchor() {
    let dir = std::env::temp_dir().join(format!("tutti-docs-check-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("docs")).expect("temp dir");
    std::fs::write(
        dir.join("README.md"),
        "# Top\n\nSee [the design](DESIGN.md), [a page](docs/a.md#there), [b](docs/a.md#nowhere),\n\
         [self](#top), [gone](#gone), [web](https://example.org/x), `[code](not-a-link.md)`.\n\
         ```sh\n[fenced](nope.md)\n```\n",
    )
    .expect("write");
    std::fs::write(dir.join("docs/a.md"), "# A\n\n## There\n\n[back](../README.md#top)\n").expect("write");
    let docs = [PathBuf::from("README.md"), PathBuf::from("docs/a.md")];
    let problems = broken_links(&dir, &docs);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("(DESIGN.md) no such file"), "{problems:#?}");
    assert!(problems[1].contains("no heading #nowhere"), "{problems:#?}");
    assert!(problems[2].contains("no heading #gone"), "{problems:#?}");
}
