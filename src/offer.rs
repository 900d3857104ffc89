//! `tutti offer`: a WebRTC client from the shell, for the REST walk-through
//! (docs/api/rest.md). It prints a real SDP offer (tutti-rtc's client, the
//! one the tests and `tutti load` use, sending a tone), closes its stdout
//! so that `curl --data-binary @-` can post it, reads the server's answer
//! from stdin until end of file, connects, and sends its tone until the
//! server ends the call (a `DELETE` of the participant, the room closing)
//! or `--seconds` pass. A client on this machine: it binds 127.0.0.1.
//!
//! The shell joins the two ends with a FIFO (both opened at once, so
//! neither waits for the other):
//!
//! ```sh
//! mkfifo answer.sdp
//! tutti offer < answer.sdp | curl -s -X POST …/participants -H 'content-type: application/sdp' --data-binary @- > answer.sdp &
//! ```

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tutti_client::ToneClient;

/// How long after its answer the client must have connected. The server
/// drops a participant none of whose packets came within
/// `peer_timeout_seconds` (10 s by default) of its join.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// `tutti offer`'s options.
#[derive(clap::Args)]
pub(crate) struct OfferArgs {
    /// The tone it sends, in Hz.
    #[arg(long, default_value_t = 440.0)]
    tone: f32,
    /// Hang up after this many seconds (0: when the server ends the call, or Ctrl-C).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

/// Offer on stdout, answer from stdin, then the call.
pub(crate) fn offer(args: &OfferArgs) -> anyhow::Result<()> {
    let (mut client, sdp) = ToneClient::offer(args.tone).map_err(|e| anyhow::anyhow!("making the offer: {e}"))?;
    let mut out = std::io::stdout().lock();
    out.write_all(sdp.as_bytes()).and_then(|()| out.flush()).context("writing the offer to stdout")?;
    drop(out);
    // End of file for whoever reads the offer (curl's `@-` reads to it).
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").context("opening /dev/null")?;
    rustix::stdio::dup2_stdout(&null).context("closing stdout")?;

    let mut answer = String::new();
    std::io::stdin().read_to_string(&mut answer).context("reading the answer from stdin")?;
    if !answer.trim_start().starts_with("v=0") {
        let said = answer.trim();
        bail!(
            "no SDP answer on stdin{}",
            if said.is_empty() { " (it was empty)".to_owned() } else { format!(", but: {said}") }
        );
    }
    client.accept_answer(&answer, 0).map_err(|e| anyhow::anyhow!("applying the answer: {e}"))?;

    let answered = Instant::now();
    let end = (args.seconds > 0).then(|| answered + Duration::from_secs(args.seconds));
    loop {
        let now = Instant::now();
        client.pump(now);
        if client.closed {
            eprintln!("tutti offer: the server ended the call");
            return Ok(());
        }
        if !client.connected && now >= answered + CONNECT_WITHIN {
            bail!(
                "not connected {} s after the answer: is the server on this machine, and was the answer applied \
                 within its peer_timeout_seconds?",
                CONNECT_WITHIN.as_secs()
            );
        }
        if end.is_some_and(|end| now >= end) {
            client.close();
            eprintln!("tutti offer: hung up after {} s", args.seconds);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
