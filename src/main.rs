//! `tutti`: the MCU audio-conference server.

mod admin;
mod duration;
mod offer;

use duration::parse_duration;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tutti_server::auth::{Auth, Grant, unix_now};
use tutti_server::{Config, Server};

/// How long the admin token printed at start (generated secret) lasts.
const BANNER_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
/// The room the banner's browser link joins.
const BANNER_ROOM: &str = "demo";
/// The line the banner's browser link follows (tests and the README look for it).
const OPEN_IN_A_BROWSER: &str = "Open in a browser:";

/// `tutti --version`: the package version and the commit it was built from
/// (build.rs: `git rev-parse --short HEAD`, else `TUTTI_COMMIT`, else "unknown").
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("BUILD_COMMIT"), ")");

/// Packets are allocated on the I/O threads and freed on mixer threads;
/// mimalloc does that without the lock glibc takes (see the mixer bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tutti", version = VERSION, about = "An MCU audio-conference server: everyone hears everyone but themselves.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (embedded defaults: API on 127.0.0.1:8080, media on UDP 127.0.0.1:4000).
    Serve(ServeArgs),
    /// Load a running server with N simulated WebRTC participants and report quality per client.
    Load(tutti_load::LoadArgs),
    /// Find the largest room that meets the quality SLO (starts a local server unless --url).
    Capacity(tutti_load::CapacityArgs),
    /// Print an access token signed with the configured secret (`auth.secret`).
    Token(TokenArgs),
    /// Check that a server answers `GET /healthz` with 200 (exit 0) or not (exit 1): for container health checks.
    Healthcheck(HealthcheckArgs),
    /// Manage rooms on a running server: list, get, create, delete, set, lock, unlock, mute-all.
    Rooms(admin::RoomsArgs),
    /// Manage a room's participants: list, kick, mute, unmute, speak, unspeak.
    Participants(admin::ParticipantsArgs),
    /// Print a WebRTC SDP offer, read the server's answer from stdin, then send a tone until the call ends
    /// (a client for curl joins: docs/api/rest.md).
    Offer(offer::OfferArgs),
}

/// `GET /healthz` (`http://` or `https://`) with a bounded wait: the container
/// image has no curl.
#[derive(clap::Args)]
struct HealthcheckArgs {
    /// The URL to get (`http://` or `https://`). Default: `/healthz` on the configured
    /// `http` address (`TUTTI_HTTP`, `--config`), on loopback when that
    /// listens on every address.
    #[arg(long)]
    url: Option<String>,
    /// How long to wait for the answer, e.g. `3s`.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    timeout: Duration,
    /// A TOML configuration file (the one the server reads).
    #[arg(long, short)]
    config: Option<PathBuf>,
}

/// Mints a token (a JWT, HS256) with the secret the configuration sets
/// (`--config`, `TUTTI_AUTH_SECRET`, `--set auth.secret=…`). A server
/// running on a generated secret (none configured) accepts only the tokens
/// it printed itself: set `auth.secret` on both sides.
#[derive(clap::Args)]
struct TokenArgs {
    /// The room it admits to; `*` = every room (with --admin).
    #[arg(long)]
    room: String,
    /// The participant's identity (the token's `sub`; their name if they give none).
    #[arg(long)]
    identity: String,
    /// May listen only: their audio is dropped and they cannot unmute.
    #[arg(long, conflicts_with = "admin")]
    listen_only: bool,
    /// May also manage the room (`*`: every room): create, delete, list, mute others.
    #[arg(long)]
    admin: bool,
    /// Lifetime: `3600` (seconds), `90m`, `1h`, `1h30m`, `7d`.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    ttl: Duration,
    /// An attribute the participant starts with: `--attribute role=host` (repeatable).
    #[arg(long = "attribute", value_name = "KEY=VALUE")]
    attributes: Vec<String>,
    /// A TOML configuration file (the one the server reads).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Any key: `--set auth.secret=…` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// A token for a `tutti serve --dev` server (its fixed development secret).
    #[arg(long, conflicts_with = "config")]
    dev: bool,
}

/// Settings come from the defaults, then `--config`, then `TUTTI_*`
/// environment variables (`room.max_speakers` is `TUTTI_ROOM_MAX_SPEAKERS`),
/// then these flags. `deploy/tutti.toml` lists every key.
#[derive(clap::Args)]
struct ServeArgs {
    /// A TOML configuration file (unknown keys are refused).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// HTTP API address (key `http`).
    #[arg(long)]
    http: Option<SocketAddr>,
    /// UDP media address, one port for all participants (key `media`).
    #[arg(long)]
    media: Option<SocketAddr>,
    /// Addresses to advertise in ICE candidates, the first preferred: comma-separated or
    /// repeated; a bare IP takes the media port (key `advertise`; default: the media address).
    #[arg(long, value_delimiter = ',', value_name = "ADDR")]
    advertise: Vec<String>,
    /// Prometheus /metrics address, or `off` (key `metrics`).
    #[arg(long)]
    metrics: Option<String>,
    /// I/O threads; 0 = one per core (key `io_threads`).
    #[arg(long)]
    io_threads: Option<usize>,
    /// Mixer threads; 0 = one per core (key `mix_threads`).
    #[arg(long)]
    mix_threads: Option<usize>,
    /// Log as JSON lines (key `log.format = "json"`).
    #[arg(long)]
    log_json: bool,
    /// Any key: `--set room.max_speakers=3` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Development on this machine: a fixed, public secret (links and
    /// `tutti token --dev` survive restarts), SDK apps on any loopback port
    /// allowed (CORS), no drain wait on Ctrl-C. Refused on a non-loopback address.
    #[arg(long)]
    dev: bool,
}

impl ServeArgs {
    /// The flags as `key=value` overrides, in the config's key paths.
    fn overrides(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push((k.to_owned(), v));
            }
        };
        put("http", self.http.map(|a| a.to_string()));
        put("media", self.media.map(|a| a.to_string()));
        put("advertise", (!self.advertise.is_empty()).then(|| self.advertise.join(",")));
        put("metrics", self.metrics.clone().map(|m| if m == "off" { String::new() } else { m }));
        put("io_threads", self.io_threads.map(|n| n.to_string()));
        put("mix_threads", self.mix_threads.map(|n| n.to_string()));
        put("log.format", self.log_json.then(|| "json".to_owned()));
        out.extend(key_values(&self.set)?);
        Ok(out)
    }
}

/// `--set KEY=VALUE` flags as pairs.
fn key_values(set: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    set.iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("--set {kv}: expected KEY=VALUE"))?;
            Ok((k.trim().to_owned(), v.to_owned()))
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Token(args) => token(&args),
        Command::Healthcheck(args) => healthcheck(&args),
        Command::Rooms(args) => admin::exit_on_error(admin::rooms(&args)),
        Command::Participants(args) => admin::exit_on_error(admin::participants(&args)),
        Command::Offer(args) => offer::offer(&args),
        // 0 PASS, 1 FAIL (missed the SLO), 2 INVALID (the generator fell behind).
        Command::Load(args) => match tutti_load::run_load(&args)? {
            tutti_load::Verdict::Pass => Ok(()),
            tutti_load::Verdict::Fail(_) => std::process::exit(1),
            tutti_load::Verdict::Invalid(_) => std::process::exit(2),
        },
        Command::Capacity(args) => exit_with(tutti_load::run_capacity(&args)?),
    }
}

fn token(args: &TokenArgs) -> anyhow::Result<()> {
    // A node's cluster settings (its own api_url, …) are no business of a
    // token: minting works in a shell set up to start a cluster node.
    let env = std::env::vars().filter(|(k, _)| !k.starts_with("TUTTI_CLUSTER_"));
    let mut cfg =
        Config::load(args.config.as_deref(), env, &key_values(&args.set)?).context("reading the configuration")?;
    if args.dev && cfg.auth.secret.is_empty() && cfg.auth.keys.is_empty() {
        cfg.auth.secret = tutti_server::DEV_SECRET.to_owned();
    }
    if cfg.auth.disabled {
        anyhow::bail!("auth.disabled is true in this configuration: the server takes no tokens");
    }
    if cfg.auth.secret.is_empty() && cfg.auth.keys.is_empty() {
        anyhow::bail!(
            "no auth.secret is configured (--config, TUTTI_AUTH_SECRET or --set auth.secret=…). \
             A server without one generates its own at start and prints a ready token; \
             tokens minted here could not be verified by it. For a `tutti serve --dev` server: tutti token --dev …"
        );
    }
    if args.room == "*" && !args.admin {
        anyhow::bail!("--room '*' (every room) is for --admin tokens only");
    }
    // Minted with the first of auth.keys (its id in `kid`) when keys are listed.
    let auth = Auth::with_keys(&cfg.auth.secret, &cfg.auth.key_pairs()).context("auth.secret / auth.keys")?;
    let grant = Grant {
        room: args.room.clone(),
        identity: args.identity.clone(),
        speak: !args.listen_only,
        listen: true,
        admin: args.admin,
        attributes: args
            .attributes
            .iter()
            .map(|a| {
                let (k, v) = a.split_once('=').with_context(|| format!("--attribute {a:?}: expected KEY=VALUE"))?;
                Ok((k.to_owned(), v.to_owned()))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    println!("{}", auth.mint(&grant, args.ttl, unix_now()).context("--room, --identity and --attribute")?);
    Ok(())
}

/// What `--dev` changes of a loaded configuration; refused on a non-loopback address.
fn dev_mode(cfg: &mut Config) -> anyhow::Result<()> {
    if !cfg.http.ip().is_loopback() {
        anyhow::bail!(
            "--dev is for development on this machine only: its secret is public. The API address is {};              use a loopback one (127.0.0.1 or [::1]), or leave --dev out and configure auth.secret",
            cfg.http
        );
    }
    if cfg.auth.secret.is_empty() && cfg.auth.keys.is_empty() && !cfg.auth.disabled {
        cfg.auth.secret = tutti_server::DEV_SECRET.to_owned();
    }
    if !cfg.cors.allowed_origins.iter().any(|o| o == "*") {
        for o in tutti_server::LOOPBACK_ORIGINS {
            if !cfg.cors.allowed_origins.iter().any(|a| a == o) {
                cfg.cors.allowed_origins.push(o.to_owned());
            }
        }
    }
    cfg.drain_seconds = 0.0;
    Ok(())
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let mut cfg = Config::load(args.config.as_deref(), std::env::vars(), &args.overrides()?)
        .context("reading the configuration")?;
    if args.dev {
        dev_mode(&mut cfg)?;
    }
    let dev = args.dev && cfg.auth.secret == tutti_server::DEV_SECRET;
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.log.filter)
        .with_context(|| format!("log.filter '{}' is not a valid filter", cfg.log.filter))?;
    // Logs go to stderr (stdout carries the banner), coloured only on a terminal.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_thread_names(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if cfg.log.format == "json" {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    for name in Config::unknown_env(std::env::vars()) {
        tracing::warn!(variable = %name, "unknown TUTTI_* environment variable ignored");
    }
    let runtime = tutti_server::api_runtime(2).context("starting the tokio runtime")?;
    runtime.block_on(async {
        let shutdown_timeout = cfg.shutdown_timeout();
        let server_drain_time = cfg.drain_time();
        let server = Server::start(cfg).await.context("starting tutti")?;
        // A closed stdout (a supervisor that stopped reading) must not stop the server.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "tutti: API on http://{}  media on udp://{}", server.http_addr(), server.media_addr());
        if args.dev {
            let _ = writeln!(
                out,
                "DEVELOPMENT MODE (--dev), for this machine only: {}; SDK apps on any loopback port may call the API;                  Ctrl-C stops at once (no drain)",
                if dev { "a fixed, public secret (tokens survive restarts: `tutti token --dev …`)" } else { "your auth settings" }
            );
        }
        let _ = out.write_all(browser_link(&server, dev).as_bytes());
        if let Some(addr) = server.metrics_addr() {
            let _ = writeln!(out, "metrics:        curl http://{addr}/metrics");
        }
        let _ = out.write_all(banner(&server, dev).as_bytes());
        let _ = out.flush();
        // A deploy is not an outage: the first signal (or an admin's
        // `POST /v1/node/drain`) drains, a second one stops at once.
        tokio::select! {
            _ = wait_for_signal() => {}
            _ = server.drain_requested() => {}
        }
        let drain_time = server_drain_time;
        if !drain_time.is_zero() {
            tracing::info!(seconds = drain_time.as_secs_f64(), "draining (a second SIGTERM or Ctrl-C stops at once)");
        }
        tokio::select! {
            end = server.drain(drain_time) => match end {
                tutti_server::DrainEnd::TimedOut { participants } => {
                    tracing::warn!(participants, "the drain time ran out with participants still here");
                }
                tutti_server::DrainEnd::Empty => tracing::info!("drained: no participant left"),
                tutti_server::DrainEnd::Skipped => {}
            },
            _ = wait_for_signal() => tracing::warn!("second signal: stopping now"),
        }
        tracing::info!("shutting down");
        if tokio::time::timeout(shutdown_timeout, server.shutdown()).await.is_err() {
            tracing::warn!(?shutdown_timeout, "shutdown took too long; exiting anyway");
        }
        Ok(())
    })
}

/// Exit status 2 when a load run was invalid or no room size met the SLO.
fn exit_with(ok: bool) -> anyhow::Result<()> {
    if !ok {
        std::process::exit(2);
    }
    Ok(())
}

/// How to start using the server with curl, after the address line, the
/// browser link (below [`OPEN_IN_A_BROWSER`]) and the metrics line.
fn banner(server: &Server, dev: bool) -> String {
    let api = server.http_addr();
    let mut text = String::new();
    let mut auth_header = String::new();
    if let Some(token) = server.mint_token(&Grant::admin("admin"), BANNER_TOKEN_TTL) {
        if dev {
            text.push_str(&format!(
                "auth: the development secret (--dev): more tokens from `tutti token --dev --room ROOM --identity NAME`
                 admin token (24 h): export TUTTI_TOKEN={token}
"
            ));
        } else if server.secret_generated() {
            text.push_str(&format!(
                "auth: no auth.secret configured, so one was generated: tokens work until tutti stops\n\
                 admin token (24 h): export TUTTI_TOKEN={token}\n"
            ));
        } else {
            text.push_str(
                "auth: tokens from `tutti token --room ROOM --identity NAME` (same configuration), \
                 as `authorization: Bearer …`\n",
            );
        }
        auth_header = " -H \"authorization: Bearer $TUTTI_TOKEN\"".to_owned();
    } else {
        text.push_str("auth: DISABLED (auth.disabled = true): anyone who reaches this address may join any room\n");
    }
    text.push_str(&format!(
        "create a room:  curl -X POST http://{api}/v1/rooms{auth_header} -H 'content-type: application/json' -d '{{\"id\":\"demo\"}}'\n\
         join it:        curl -i -X POST http://{api}/v1/rooms/demo/participants{auth_header} -H 'content-type: application/sdp' --data-binary @offer.sdp\n"
    ));
    text
}

/// The banner's browser link: the page for room `demo`, created on the
/// first join, as its moderator. The token (admin of `demo` only, not of
/// every room: the link lands in browser history and gets pasted around)
/// rides in the fragment, which the browser never sends (no server log,
/// no `Referer`). It lives as long as the banner's admin token (24 h) and
/// dies with the process anyway (a generated secret). A configured secret
/// gets no token printed (a production log is no place for one): the line
/// says how to make one.
fn browser_link(server: &Server, dev: bool) -> String {
    let addr = server.http_addr();
    // A browser cannot open 0.0.0.0; loopback is also a secure context (the microphone needs one).
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        ip if ip.is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    let page = format!("http://{host}/?room={BANNER_ROOM}");
    let host_grant = Grant { admin: true, ..Grant::participant(BANNER_ROOM, "host") };
    match server.mint_token(&host_grant, BANNER_TOKEN_TTL) {
        Some(token) if server.secret_generated() || dev => format!(
            "{OPEN_IN_A_BROWSER}\n  {page}#token={token}\n  \
             (joins room '{BANNER_ROOM}' as its moderator, for 24 h; the page's Invite button copies a link for others)\n"
        ),
        Some(_) => format!(
            "{OPEN_IN_A_BROWSER}\n  {page}#token=HOST_TOKEN\n  \
             (HOST_TOKEN from `tutti token --room {BANNER_ROOM} --identity host --admin --ttl 1h`)\n"
        ),
        None => format!("{OPEN_IN_A_BROWSER}\n  {page}\n"),
    }
}

/// Exit 0 when the URL answers 200, else an error (exit 1) saying what it got.
fn healthcheck(args: &HealthcheckArgs) -> anyhow::Result<()> {
    let url = match &args.url {
        Some(url) => url.clone(),
        None => {
            let env = std::env::vars().filter(|(k, _)| !k.starts_with("TUTTI_CLUSTER_"));
            let cfg = Config::load(args.config.as_deref(), env, &[]).context("reading the configuration")?;
            let mut addr = cfg.http;
            if addr.ip().is_unspecified() {
                addr.set_ip(if addr.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
            }
            format!("http://{addr}/healthz")
        }
    };
    let status = http_get_status(&url, args.timeout)?;
    if status != 200 {
        anyhow::bail!("{url} answered {status}");
    }
    println!("ok: {url} answered 200");
    Ok(())
}

/// The status of `GET url` (`http://`, or `https://` checked against the
/// system's roots), within `timeout`.
fn http_get_status(url: &str, timeout: Duration) -> anyhow::Result<u16> {
    let (origin, path) = tutti_client::Origin::parse(url)?;
    let http = if origin.is_tls() { tutti_client::Client::new(None)? } else { tutti_client::Client::plain() };
    Ok(http.with_timeout(timeout).send(&origin, &Default::default(), "GET", &path, None, b"")?.status)
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        for (text, secs) in
            [("3600", 3600), ("45s", 45), ("90m", 5400), ("1h", 3600), ("1h30m", 5400), ("7d", 604_800), (" 2h ", 7200)]
        {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        for bad in ["", "0", "h", "1x", "1h30", "-5", "1.5h", "0s", "99999999999999999999", "4000d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
