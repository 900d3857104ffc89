//! Docs tested like code: every shell block (```` ```sh ````, `bash`,
//! `console`, `shell`) and JavaScript block (`js`, `javascript`, `mjs`) of
//! README.md and docs/**/*.md is either run here or marked as not runnable,
//! with why, by an HTML comment on the nearest non-blank line above its
//! fence:
//!
//! ```text
//! <!-- not-run: needs a Kubernetes cluster -->
//! ```
//!
//! A marker without a reason fails the test. How a block is run:
//!
//! - A `console` block whose lines show a `$ ` prompt runs those lines'
//!   commands only (the other lines are their output, not compared).
//!
//! - Shell blocks run, page by page in the page's order, with `bash -e` in
//!   one temporary directory per page (so a file one block makes is there
//!   for the next), against one `tutti serve --dev` per page started here
//!   on loopback ports. The docs' fixed addresses (`127.0.0.1:8080`,
//!   `localhost:8080`, and `:9464` for the metrics) are replaced by that
//!   server's. `PATH` starts with the built `tutti` and a `curl` that adds
//!   `--fail-with-body`, so an HTTP error fails the block as a shell error
//!   would. The environment holds what the docs promise a reader:
//!   `TUTTI_TOKEN` (an admin token for every room, as the dev banner's
//!   `export TUTTI_TOKEN=` line) and `TUTTI_URL`. Each block must exit 0
//!   within [`BLOCK_TIMEOUT`]; what it left running is killed.
//! - JavaScript blocks are syntax-checked as ES modules (`node --check`):
//!   they run in a browser or need a backend's packages.
//!
//! `TUTTI_DOC_PAGES=rest,cli cargo test --test doc_blocks` runs the shell
//! blocks of the pages whose path holds one of those words only.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one shell block may take.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker's opening; its reason follows, then `-->`.
const NOT_RUN: &str = "<!-- not-run:";

#[derive(Debug, PartialEq)]
enum Kind {
    Shell,
    Js,
}

/// One fenced block: where it is, what it is, whether and why it is not run.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    kind: Kind,
    text: String,
    not_run: Option<String>,
}

fn kind(lang: &str) -> Option<Kind> {
    match lang {
        "sh" | "bash" | "console" | "shell" => Some(Kind::Shell),
        "js" | "javascript" | "mjs" => Some(Kind::Js),
        _ => None,
    }
}

/// The shell and JavaScript blocks of one Markdown file.
fn blocks(file: &str, markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len()).find(|&j| lines[j].trim_start().starts_with("```")).unwrap_or(lines.len());
        if let Some(kind) = kind(lang.trim()) {
            let above = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim());
            let not_run =
                above.and_then(|l| l.strip_prefix(NOT_RUN)).map(|r| r.trim_end_matches("-->").trim().to_owned());
            // A block inside a list item is indented like its fence: its lines are read without that.
            let indent = lines[i].len() - lines[i].trim_start().len();
            let body: Vec<&str> =
                lines[i + 1..end].iter().map(|l| &l[(l.len() - l.trim_start().len()).min(indent)..]).collect();
            // A `console` block shows commands after `$ ` and their output: only the commands run.
            let prompted = lang.trim() == "console" && body.iter().any(|l| l.starts_with("$ "));
            let commands = body.iter().filter_map(|l| if prompted { l.strip_prefix("$ ") } else { Some(l) });
            let text = commands.map(|l| format!("{l}\n")).collect();
            found.push(Block { file: file.to_owned(), line: i + 1, kind, text, not_run });
        }
        i = end + 1;
    }
    found
}

/// README.md and every page under docs/, in a stable order.
fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("docs/").flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out
}

fn all_blocks() -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for page in pages(root) {
        let name = page.strip_prefix(root).expect("under the root").display().to_string();
        all.extend(blocks(&name, &std::fs::read_to_string(&page).expect("readable")));
    }
    all
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tutti-doc-blocks-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A directory holding a `curl` that fails on HTTP errors (the real one, from PATH, with `--fail-with-body`).
fn strict_curl(dir: &Path) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let real = std::env::split_paths(&path).map(|d| d.join("curl")).find(|c| c.is_file()).expect("curl on PATH");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let shim = bin.join("curl");
    std::fs::write(&shim, format!("#!/bin/sh\nexec '{}' --fail-with-body \"$@\"\n", real.display())).expect("shim");
    Command::new("chmod").arg("+x").arg(&shim).status().expect("chmod");
    bin
}

/// The page's server: `tutti serve --dev` on loopback ports, with its admin token.
struct PageServer {
    served: common::Served,
    metrics: SocketAddr,
    token: String,
}

impl PageServer {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
        let at = metrics.to_string();
        let mut served = common::serve(&["--dev", "--http", "127.0.0.1:0", "--media", "127.0.0.1:0", "--metrics", &at]);
        let token = served.banner_token();
        Self { served, metrics, token }
    }

    /// The block as run against this server: the docs' addresses made its.
    fn localize(&self, text: &str) -> String {
        let api = self.served.api.to_string();
        let metrics = self.metrics.to_string();
        text.replace("127.0.0.1:8080", &api)
            .replace("localhost:8080", &api)
            .replace("127.0.0.1:9464", &metrics)
            .replace("localhost:9464", &metrics)
    }

    fn stop(mut self) {
        let _ = nix::sys::signal::kill(self.served.pid(), nix::sys::signal::Signal::SIGKILL);
        let _ = self.served.child.wait();
    }
}

/// Runs one shell block with `bash -e` in `dir`; Err(what went wrong).
fn run_shell(block: &Block, script: &str, dir: &Path, path: &str, server: &PageServer) -> Result<(), String> {
    let file = dir.join(format!("block-{}.sh", block.line));
    std::fs::write(&file, script).expect("script");
    let log = dir.join(format!("block-{}.log", block.line));
    let out = std::fs::File::create(&log).expect("log");
    // Its own process group: what it leaves in the background is killed with it. Output to a
    // file, not a pipe, which a background child would hold open.
    let mut child = Command::new("bash")
        .arg("-e")
        .arg(&file)
        .current_dir(dir)
        .env("PATH", path)
        .env("TUTTI_TOKEN", &server.token)
        .env("TUTTI_URL", format!("http://{}", server.served.api))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let began = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if began.elapsed() > BLOCK_TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("exited with {s}\n--- output ---\n{output}")),
        None => Err(format!("still running after {} s\n--- output ---\n{output}", BLOCK_TIMEOUT.as_secs())),
    }
}

/// `node --check` on the block as an ES module.
fn check_js(block: &Block, dir: &Path) -> Result<(), String> {
    let file = dir.join(format!("{}-{}.mjs", block.file.replace('/', "_"), block.line));
    std::fs::write(&file, &block.text).expect("script");
    let out =
        Command::new("node").arg("--check").arg(&file).output().map_err(|e| format!("node: {e} (is it on PATH?)"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

#[test]
fn every_shell_and_js_block_in_the_docs_runs_or_says_why_not() {
    let all = all_blocks();
    assert!(all.len() > 20, "the blocks are found: {}", all.len());
    let mut failures = Vec::new();
    for b in all.iter().filter(|b| b.not_run.as_ref().is_some_and(|r| r.is_empty())) {
        failures.push(format!("{}:{}: `{NOT_RUN} -->` needs a reason after the colon", b.file, b.line));
    }

    let scratch = temp_dir("js");
    for b in all.iter().filter(|b| b.kind == Kind::Js) {
        if let Err(e) = check_js(b, &scratch) {
            failures.push(format!("{}:{}: node --check: {e}", b.file, b.line));
        }
    }

    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tutti")).parent().expect("bin dir").to_owned();
    let shims = strict_curl(&scratch);
    let path = std::env::join_paths(
        [shims, bin_dir].into_iter().chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH")
    .into_string()
    .expect("UTF-8 PATH");

    // TUTTI_DOC_PAGES=rest,cli runs only the pages whose path holds one of those.
    let only = std::env::var("TUTTI_DOC_PAGES").unwrap_or_default();
    let chosen = |file: &str| only.is_empty() || only.split(',').any(|p| file.contains(p));
    let mut by_page: BTreeMap<&str, Vec<&Block>> = BTreeMap::new();
    for b in all.iter().filter(|b| b.kind == Kind::Shell && b.not_run.is_none() && chosen(&b.file)) {
        by_page.entry(&b.file).or_default().push(b);
    }
    let mut ran = 0;
    for (page, page_blocks) in &by_page {
        let dir = temp_dir(&page.replace('/', "_"));
        let server = PageServer::start();
        for b in page_blocks {
            let began = Instant::now();
            let result = run_shell(b, &server.localize(&b.text), &dir, &path, &server);
            println!("{page}:{}: {:?} in {:.1} s", b.line, result.is_ok(), began.elapsed().as_secs_f64());
            if let Err(e) = result {
                failures.push(format!("{page}:{}: {e}\n--- block ---\n{}", b.line, b.text));
            }
            ran += 1;
        }
        server.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let skipped = all.iter().filter(|b| b.kind == Kind::Shell && b.not_run.is_some()).count();
    println!("{ran} shell blocks run, {skipped} marked not-run");
    assert!(failures.is_empty(), "{} doc blocks failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn a_marker_needs_the_nearest_line_above_and_a_reason() {
    let md = "text\n\n<!-- not-run: needs a TLS certificate -->\n```sh\ntutti serve\n```\n\n```bash\necho hi\n```\n\
              <!-- not-run: -->\n```js\nx(\n```\n```toml\na = 1\n```\n";
    let found = blocks("t.md", md);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(found[0].not_run.as_deref(), Some("needs a TLS certificate"));
    assert_eq!((found[1].line, found[1].not_run.as_deref()), (8, None), "unmarked: run");
    assert_eq!((found[2].kind == Kind::Js, found[2].not_run.as_deref()), (true, Some("")), "a marker without a reason");
    let session = blocks("t.md", "```console\n$ tutti rooms list\nROOM  PARTICIPANTS\n$ echo done\ndone\n```\n");
    assert_eq!(session[0].text, "tutti rooms list\necho done\n", "a console block runs its prompted commands");
    let listed = "- a step:\n\n  <!-- not-run: needs a room -->\n  ```sh\n  cat <<EOF\n  x\n  EOF\n  ```\n- then:\n  ```console\n  $ echo done\n  done\n  ```\n";
    let in_items = blocks("t.md", listed);
    assert_eq!(in_items.len(), 2, "blocks in list items are found: {in_items:#?}");
    assert_eq!(in_items[0].not_run.as_deref(), Some("needs a room"), "the item's marker is read");
    assert_eq!(in_items[0].text, "cat <<EOF\nx\nEOF\n", "the item's indentation is not part of the block");
    assert_eq!(in_items[1].text, "echo done\n", "an indented console block runs its prompted commands only");
}

#[test]
fn tutti_offer_prints_an_offer_and_says_what_came_instead_of_an_answer() {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .arg("offer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tutti offer runs");
    let refusal = r#"{"code":"room_not_found","message":"there is no room 'demo'"}"#;
    child.stdin.take().expect("stdin").write_all(refusal.as_bytes()).expect("written");
    let out = child.wait_with_output().expect("it ends");
    let offer = String::from_utf8_lossy(&out.stdout);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(offer.starts_with("v=0") && offer.contains("m=audio") && offer.contains("opus/48000"), "{offer}");
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("no SDP answer on stdin, but: {refusal}")), "{said}");
}
