//! Helper programs run by tests and tools (npm, pip, apt-get, a browser
//! driver): to their end, or killed after a bound, with what they printed;
//! and Debian's packages the tests need, installed when missing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Reads a pipe to its end on a thread of its own (a full pipe never
/// blocks the program writing it).
pub fn drain_pipe(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

/// Runs `cmd` (stdin closed) to its end, or kills it after `timeout`.
/// Its standard output when it succeeds; else why it failed, named by
/// `what`, with everything it printed.
pub fn run_bounded(cmd: &mut Command, what: &str, timeout: Duration) -> Result<String, String> {
    run_bounded_output(cmd, what, timeout).map(|(out, _)| out)
}

/// [`run_bounded`], with its standard output and standard error when it succeeds.
pub fn run_bounded_output(cmd: &mut Command, what: &str, timeout: Duration) -> Result<(String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    let (out, err) = (drain_pipe(child.stdout.take()), drain_pipe(child.stderr.take()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: still running after {timeout:?}, killed"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if status.success() { Ok((out, err)) } else { Err(format!("{what} failed ({status}):\n{out}{err}")) }
}

/// `binary` (a path), installing Debian's `package` with apt-get when it is
/// missing and this runs as root (one install at a time); panics saying
/// what to install otherwise. For the tests that need a real tool or server.
pub fn ensure_debian_package(binary: &str, package: &str) -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let path = PathBuf::from(binary);
    if path.exists() {
        return path;
    }
    let root =
        run_bounded(Command::new("id").arg("-u"), "id -u", Duration::from_secs(10)).is_ok_and(|u| u.trim() == "0");
    assert!(
        root,
        "this test needs {binary}: install it (Debian: `sudo apt-get install -y {package}`), or run it as root"
    );
    eprintln!("{binary} is missing: installing Debian's {package} with apt-get");
    for args in [&["update"][..], &["install", "-y", "--no-install-recommends", package][..]] {
        let mut cmd = Command::new("apt-get");
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        if let Err(e) = run_bounded(&mut cmd, "apt-get", Duration::from_secs(600)) {
            panic!("installing {package} failed: {e}");
        }
    }
    assert!(Path::new(binary).exists(), "apt-get installed {package}, but {binary} is still missing");
    path
}
