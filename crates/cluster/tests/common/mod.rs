//! The cluster's tests: a real `redis-server` (tutti-client's, with TLS and
//! plain commands added here) and nodes with short timings.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tutti_cluster::{Cluster, ClusterConfig};

pub const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test";

pub use tutti_client::redis::RedisServer;

/// What the cluster's own tests add to the shared redis-server.
pub trait TestRedis {
    /// TLS only, with a certificate for 127.0.0.1 signed by a fresh CA
    /// (rcgen) and a password; the CA's PEM file is at [`TestRedis::ca_file`].
    fn with_tls(password: &str) -> Self;
    /// The CA file of a server made by [`TestRedis::with_tls`].
    fn ca_file(&self) -> String;
    /// A plain command over a fresh connection (for checking keys).
    fn command(&self, args: &[&str]) -> redis::Value;
}

impl TestRedis for RedisServer {
    fn with_tls(password: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.distinguished_name.push(DnType::CommonName, "tutti test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &Issuer::new(ca_params, ca_key)).expect("server certificate");
        let dir = tutti_client::redis::fresh_dir("tls");
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write a PEM file");
            path.to_str().expect("utf-8 path").to_owned()
        };
        let (ca_file, cert_file, key_file) =
            (write("ca.pem", ca.pem()), write("cert.pem", cert.pem()), write("key.pem", key.serialize_pem()));
        let extra = ["--tls-cert-file", &cert_file, "--tls-key-file", &key_file, "--tls-ca-cert-file", &ca_file];
        let extra = extra.iter().chain(&["--tls-auth-clients", "no"]).map(|s| (*s).to_owned()).collect();
        RedisServer::start_with(Some(password), extra, true)
    }

    fn ca_file(&self) -> String {
        let file = self.extra.iter().skip_while(|a| *a != "--tls-ca-cert-file").nth(1);
        file.cloned().expect("a TLS server")
    }

    fn command(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.url()).expect("client");
        let mut con = client.get_connection().expect("connect");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con).expect("command")
    }
}

/// A node config with short timings (node TTL 2 s) so the tests stay short.
pub fn config(redis: &RedisServer, id: &str) -> ClusterConfig {
    ClusterConfig {
        redis_url: redis.url(),
        node_id: id.into(),
        api_url: format!("http://{id}.test:8080"),
        media_addr: format!("{id}.test:3478"),
        heartbeat_interval_seconds: 0.5,
        node_ttl_seconds: 2.0,
        lease_ttl_seconds: 4.0,
        capacity: 100,
        ..ClusterConfig::default()
    }
}

pub async fn start(redis: &RedisServer, id: &str) -> Cluster {
    Cluster::start(config(redis, id), SECRET).await.expect("start cluster node")
}

/// Polls `check` every 50 ms until it holds or `limit` passes; returns the time it took.
pub async fn wait_for<F, Fut>(limit: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
