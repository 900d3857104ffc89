//! The client SDK (`sdk/js`): the build committed in `sdk/js/dist/` (which
//! the server embeds and serves at `/tutti.js`, so that building the server
//! needs no Node.js) is what its TypeScript sources build to, and the ten-
//! line app of its README type-checks against the built types.
//!
//! A copy of `sdk/js` (package files and `src/`, no `node_modules`, no
//! `dist`) goes to `target/tmp/sdk-build`, where `npm ci` installs the
//! pinned TypeScript and `npm run build` runs `tsc` in strict mode (the
//! SDK's type check); then every file of the fresh `dist/` must equal the
//! committed one, and no committed file may be missing from it. The
//! browser tests (`tests/browser.rs`) run the README's app against a real
//! server in Chromium. Needs Node.js 20+ with npm, as the browser tests do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use tutti_client::process::run_bounded as run;

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/js")
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_unstable();
    names
}

/// `npm ci` then `npm run build` in a fresh copy of the package's sources, once per run.
fn build_afresh() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let src = sdk_dir();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-build");
    // Keep an installed node_modules between runs when the lock is the same; everything else is fresh.
    let lock = std::fs::read(src.join("package-lock.json")).expect("sdk/js/package-lock.json");
    let installed = dir.join("node_modules/typescript/package.json").exists()
        && std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock);
    for stale in ["src", "dist"] {
        let _ = std::fs::remove_dir_all(dir.join(stale));
    }
    std::fs::create_dir_all(dir.join("src")).expect("create the build folder");
    for file in ["package.json", "package-lock.json", "tsconfig.json", "README.md"] {
        std::fs::copy(src.join(file), dir.join(file)).unwrap_or_else(|e| panic!("copy {file}: {e}"));
    }
    for file in files(&src.join("src")) {
        std::fs::copy(src.join("src").join(&file), dir.join("src").join(&file))
            .unwrap_or_else(|e| panic!("copy src/{file}: {e}"));
    }
    let npm = run(Command::new("npm").arg("--version"), "npm --version", Duration::from_secs(30));
    assert!(npm.is_ok(), "the SDK test needs Node.js 20+ with npm (Debian: `apt-get install -y nodejs npm`)");
    if !installed {
        let mut ci = Command::new("npm");
        ci.args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir);
        if let Err(e) = run(&mut ci, "npm ci (sdk/js)", Duration::from_secs(300)) {
            panic!("{e}");
        }
    }
    let mut build = Command::new("npm");
    build.args(["run", "build"]).current_dir(&dir);
    if let Err(e) = run(&mut build, "npm run build (sdk/js)", Duration::from_secs(300)) {
        panic!("the SDK does not build (or type-check): {e}");
    }
    dir
}

/// The ```js block of the README's "A ten-line app".
fn readme_app(readme: &str) -> String {
    let section = readme.split("## A ten-line app").nth(1).expect("the README has 'A ten-line app'");
    let block = section.split("```js\n").nth(1).expect("a js block").split("```").next().expect("closed");
    block.to_owned()
}

#[test]
fn the_committed_sdk_build_is_what_its_sources_build_to() {
    let dir = build_afresh();
    let committed = sdk_dir().join("dist");
    let fresh = dir.join("dist");
    let names = files(&fresh);
    assert!(names.contains(&"tutti.js".to_owned()) && names.contains(&"tutti.d.ts".to_owned()), "{names:?}");
    assert_eq!(files(&committed), names, "sdk/js/dist holds exactly what the build makes");
    for name in &names {
        let (want, have) = (std::fs::read(fresh.join(name)).expect("built"), std::fs::read(committed.join(name)));
        assert!(
            have.is_ok_and(|h| h == want),
            "sdk/js/dist/{name} is not the build of sdk/js/src: run `npm ci && npm run build` in sdk/js and commit dist/"
        );
    }
    // No runtime dependency: the module imports nothing.
    let module = std::fs::read_to_string(committed.join("tutti.js")).expect("tutti.js");
    assert!(!module.lines().any(|l| l.starts_with("import ")), "tutti.js imports nothing");
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sdk_dir().join("package.json")).expect("package.json"))
            .expect("JSON");
    assert!(package.get("dependencies").is_none(), "no runtime dependencies: {package}");
}

#[test]
fn the_readme_app_type_checks_against_the_built_types() {
    let dir = build_afresh();
    let readme = std::fs::read_to_string(sdk_dir().join("README.md")).expect("sdk/js/README.md");
    let app = readme_app(&readme).replace("from './tutti.js'", "from './dist/tutti.js'");
    assert!(app.lines().count() <= 12, "the ten-line app has grown:\n{app}");
    std::fs::write(dir.join("app.js"), &app).expect("write app.js");
    // A mistake in it (a method that is not there, an option of the wrong type) fails here.
    let bad = app.replace("room.on('track'", "room.on('trak'");
    std::fs::write(dir.join("bad.js"), &bad).expect("write bad.js");
    let check = |file: &str| {
        let mut tsc = Command::new(dir.join("node_modules/.bin/tsc"));
        tsc.args([
            "--noEmit",
            "--allowJs",
            "--checkJs",
            "--target",
            "es2022",
            "--module",
            "es2022",
            "--moduleResolution",
            "bundler",
            "--lib",
            "es2022,dom",
            file,
        ])
        .current_dir(&dir);
        run(&mut tsc, "tsc --checkJs", Duration::from_secs(120))
    };
    if let Err(e) = check("app.js") {
        panic!("the README's app does not type-check against the SDK:\n{app}\n{e}");
    }
    assert!(check("bad.js").is_err(), "the check finds a misspelt event");
}
