//! `tutti`: the MCU audio-conference server.

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

/// Packets are allocated on the I/O threads and freed on mixer threads;
/// mimalloc does that without the lock glibc takes (see the mixer bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tutti", version, about = "An MCU audio-conference server: everyone hears everyone but themselves.")]
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
    /// Lifetime, in seconds.
    #[arg(long, default_value_t = 3600)]
    ttl: u64,
    /// A TOML configuration file (the one the server reads).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Any key: `--set auth.secret=…` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
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
    /// Address to advertise in ICE candidates (key `advertise`; default: the media address).
    #[arg(long)]
    advertise: Option<SocketAddr>,
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
        put("advertise", self.advertise.map(|a| a.to_string()));
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
        Command::Load(args) => exit_with(tutti_load::run_load(&args)?),
        Command::Capacity(args) => exit_with(tutti_load::run_capacity(&args)?),
    }
}

fn token(args: &TokenArgs) -> anyhow::Result<()> {
    // A node's cluster settings (its own api_url, …) are no business of a
    // token: minting works in a shell set up to start a cluster node.
    let env = std::env::vars().filter(|(k, _)| !k.starts_with("TUTTI_CLUSTER_"));
    let cfg =
        Config::load(args.config.as_deref(), env, &key_values(&args.set)?).context("reading the configuration")?;
    if cfg.auth.disabled {
        anyhow::bail!("auth.disabled is true in this configuration: the server takes no tokens");
    }
    if cfg.auth.secret.is_empty() && cfg.auth.keys.is_empty() {
        anyhow::bail!(
            "no auth.secret is configured (--config, TUTTI_AUTH_SECRET or --set auth.secret=…). \
             A server without one generates its own at start and prints a ready token; \
             tokens minted here could not be verified by it"
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
    };
    println!("{}", auth.mint(&grant, Duration::from_secs(args.ttl), unix_now()).context("--room and --identity")?);
    Ok(())
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let cfg = Config::load(args.config.as_deref(), std::env::vars(), &args.overrides()?)
        .context("reading the configuration")?;
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
        if let Some(addr) = server.metrics_addr() {
            let _ = writeln!(out, "metrics:        curl http://{addr}/metrics");
        }
        let _ = out.write_all(banner(&server).as_bytes());
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

/// How to start using the server, after the address line.
fn banner(server: &Server) -> String {
    let api = server.http_addr();
    let mut auth_header = String::new();
    let mut text = String::new();
    if let Some(token) = server.mint_token(&Grant::admin("admin"), BANNER_TOKEN_TTL) {
        if server.secret_generated() {
            text.push_str(&format!(
                "auth: no auth.secret configured, so one was generated: tokens work until tutti stops\n\
                 admin token (24 h): export TOKEN={token}\n"
            ));
            auth_header = " -H \"authorization: Bearer $TOKEN\"".to_owned();
        } else {
            text.push_str(
                "auth: tokens from `tutti token --room ROOM --identity NAME` (same configuration), \
                 as `authorization: Bearer …`\n",
            );
            auth_header = " -H \"authorization: Bearer $TOKEN\"".to_owned();
        }
    } else {
        text.push_str("auth: DISABLED (auth.disabled = true): anyone who reaches this address may join any room\n");
    }
    text.push_str(&format!(
        "create a room:  curl -X POST http://{api}/v1/rooms{auth_header} -H 'content-type: application/json' -d '{{\"id\":\"demo\"}}'\n\
         join it:        curl -i -X POST http://{api}/v1/rooms/demo/participants{auth_header} -H 'content-type: application/sdp' --data-binary @offer.sdp\n"
    ));
    text
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
