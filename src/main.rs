//! `tutti`: the MCU audio-conference server.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tutti_server::{Config, Server};

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
        for kv in &self.set {
            let (k, v) = kv.split_once('=').with_context(|| format!("--set {kv}: expected KEY=VALUE"))?;
            out.push((k.trim().to_owned(), v.to_owned()));
        }
        Ok(out)
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Load(args) => return exit_with(tutti_load::run_load(&args)?),
        Command::Capacity(args) => return exit_with(tutti_load::run_capacity(&args)?),
    };
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
        let server = Server::start(cfg).await.context("starting tutti")?;
        // A closed stdout (a supervisor that stopped reading) must not stop the server.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "tutti: API on http://{}  media on udp://{}", server.http_addr(), server.media_addr());
        if let Some(addr) = server.metrics_addr() {
            let _ = writeln!(out, "metrics:        curl http://{addr}/metrics");
        }
        let _ = writeln!(
            out,
            "create a room:  curl -X POST http://{}/v1/rooms -H 'content-type: application/json' -d '{{\"id\":\"demo\"}}'",
            server.http_addr()
        );
        let _ = out.flush();
        wait_for_signal().await;
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
