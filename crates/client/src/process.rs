//! Helper programs run by tests and tools (npm, pip, apt-get, a browser
//! driver): to their end, or killed after a bound, with what they printed.

use std::io::Read;
use std::process::{Command, Stdio};
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
    if status.success() { Ok(out) } else { Err(format!("{what} failed ({status}):\n{out}{err}")) }
}
