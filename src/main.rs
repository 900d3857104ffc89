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
    /// Prometheus metrics address (`GET /metrics`), or `off` to record no metrics at all.
    #[arg(long, env = "TUTTI_METRICS", default_value = "127.0.0.1:9464")]
    metrics: MetricsAddr,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TUTTI_LOG_JSON")]
    log_json: bool,
}

/// `--metrics`: an address, or `off`.
#[derive(Debug, Clone, Copy)]
struct MetricsAddr(Option<SocketAddr>);

impl std::str::FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "none" | "" => Ok(Self(None)),
            addr => addr
                .parse()
                .map(|a| Self(Some(a)))
                .map_err(|e| format!("{e}: give an address such as 0.0.0.0:9464, or off")),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TUTTI_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,rtc=warn,rtc_ice=warn,rtc_dtls=warn,rtc_srtp=warn")
    });
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_thread_names(true);
    if args.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    let runtime = tutti_server::api_runtime(2).context("starting the tokio runtime")?;
    runtime.block_on(async {
        let cfg = Config {
            http: args.http,
            media: args.media,
            advertise: args.advertise,
            mix_threads: args.mix_threads,
            metrics: args.metrics.0,
            ..Config::default()
        };
        let server = Server::start(cfg).await.context("starting tutti")?;
        println!("tutti: API on http://{}  media on udp://{}", server.http_addr(), server.media_addr());
        if let Some(addr) = server.metrics_addr() {
            println!("metrics:        curl http://{addr}/metrics");
        }
        println!("create a room:  curl -X POST http://{}/v1/rooms -H 'content-type: application/json' -d '{{\"id\":\"demo\"}}'", server.http_addr());
        wait_for_signal().await;
        tracing::info!("shutting down");
        if tokio::time::timeout(Duration::from_secs(5), server.shutdown()).await.is_err() {
            tracing::warn!("shutdown took longer than 5 s; exiting anyway");
        }
        Ok(())
    })
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
    use super::MetricsAddr;

    #[test]
    fn metrics_is_an_address_or_off() {
        assert_eq!("0.0.0.0:9464".parse::<MetricsAddr>().map(|m| m.0), Ok(Some("0.0.0.0:9464".parse().expect("addr"))));
        assert_eq!("off".parse::<MetricsAddr>().map(|m| m.0), Ok(None));
        assert!("9464".parse::<MetricsAddr>().is_err());
    }
}
