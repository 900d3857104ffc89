//! Puts the commit tutti is built from into `tutti --version` (as the
//! compile-time variable `BUILD_COMMIT`: not `TUTTI_*`, which cargo also
//! sets when it runs the binaries, and `tutti serve` warns of unknown
//! `TUTTI_*` variables): `git rev-parse --short HEAD` in a git checkout, else
//! the `TUTTI_COMMIT` environment variable (the container build passes it as
//! a build argument: the image's context has no `.git`), else "unknown".
//! Never fails the build.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=TUTTI_COMMIT");
    let from_env = std::env::var("TUTTI_COMMIT").ok().filter(|c| !c.trim().is_empty());
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).or(from_env).unwrap_or_else(|| "unknown".to_owned());
    // Build again when HEAD moves (a commit, a checkout): HEAD itself, and the branch it names.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let head = Path::new(&dir).join("HEAD");
        if head.exists() {
            println!("cargo:rerun-if-changed={}", head.display());
        }
    }
    if let (Some(common), Some(branch)) =
        (git(&["rev-parse", "--git-common-dir"]), git(&["symbolic-ref", "-q", "HEAD"]))
    {
        for file in [Path::new(&common).join(&branch), Path::new(&common).join("packed-refs")] {
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
    println!("cargo:rustc-env=BUILD_COMMIT={commit}");
}
