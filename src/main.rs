//! `tutti`: the MCU audio-conference server.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tutti_server::{Config, Server};

/// Packets are allocated on the I/O thread and freed on mixer threads;
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

#[derive(clap::Args)]
struct ServeArgs {
    /// HTTP API address.
    #[arg(long, env = "TUTTI_HTTP", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// UDP media address (one port for all participants).
    #[arg(long, env = "TUTTI_MEDIA", default_value = "127.0.0.1:4000")]
    media: SocketAddr,
    /// Address to advertise in ICE candidates (default: the media address).
    #[arg(long, env = "TUTTI_ADVERTISE")]
    advertise: Option<SocketAddr>,
    /// Mixer threads; 0 = one per core.
    #[arg(long, env = "TUTTI_MIX_THREADS", default_value_t = 0)]
    mix_threads: usize,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TUTTI_LOG_JSON")]
    log_json: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Load(args) => return exit_with(tutti_load::run_load(&args)?),
        Command::Capacity(args) => return exit_with(tutti_load::run_capacity(&args)?),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TUTTI_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,rtc=warn,rtc_ice=warn,rtc_dtls=warn,rtc_srtp=warn")
    });
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_thread_names(true);
    if args.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name_fn(|| {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            format!("api-{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        })
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let cfg = Config {
            http: args.http,
            media: args.media,
            advertise: args.advertise,
            mix_threads: args.mix_threads,
            ..Config::default()
        };
        let server = Server::start(cfg).await.context("starting tutti")?;
        println!("tutti: API on http://{}  media on udp://{}", server.http_addr(), server.media_addr());
        println!("create a room:  curl -X POST http://{}/v1/rooms -H 'content-type: application/json' -d '{{\"id\":\"demo\"}}'", server.http_addr());
        wait_for_signal().await;
        tracing::info!("shutting down");
        if tokio::time::timeout(Duration::from_secs(5), server.shutdown()).await.is_err() {
            tracing::warn!("shutdown took longer than 5 s; exiting anyway");
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
