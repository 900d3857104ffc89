//! The files in deploy/ agree with the server and with each other: the
//! Kubernetes PrometheusRule carries exactly deploy/prometheus/alerts.yml,
//! and every metric the alerts, the dashboard and the metrics page
//! (docs/operating/metrics.md) name is one tutti exports (and that page
//! lists them all).

use std::collections::BTreeSet;
use std::path::Path;

use tutti_server::metrics::HISTOGRAMS;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Metric names a text mentions: words of lowercase letters, digits and `_`
/// that start `process_`, or `tutti_` with two `_` at least (so not a crate
/// name such as tutti_server).
fn mentioned(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .filter(|w| {
            (w.starts_with("tutti_") && w.matches('_').count() >= 2) || (w.starts_with("process_") && w.len() > 8)
        })
        .map(str::to_owned)
        .collect()
}

fn exported(name: &str) -> bool {
    tutti_server::metrics::all_names().contains(&name)
        || HISTOGRAMS.iter().any(|h| ["_bucket", "_sum", "_count"].iter().any(|s| name == format!("{h}{s}")))
}

#[test]
fn the_prometheus_rule_carries_the_alerts_unchanged() {
    let alerts = read("deploy/prometheus/alerts.yml");
    let rule = read("deploy/k8s/prometheusrule.yaml");
    let spec = rule.split_once("\nspec:\n").expect("a spec").1;
    let expected: String = alerts
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| if l.is_empty() { "\n".to_owned() } else { format!("  {l}\n") })
        .collect();
    assert!(
        spec == expected,
        "deploy/k8s/prometheusrule.yaml differs from deploy/prometheus/alerts.yml: run deploy/k8s/gen-prometheusrule.sh"
    );
}

#[test]
fn alerts_dashboard_and_metrics_page_name_only_exported_metrics() {
    for path in ["deploy/prometheus/alerts.yml", "deploy/grafana/tutti.json", "docs/operating/metrics.md"] {
        let unknown: Vec<String> = mentioned(&read(path)).into_iter().filter(|n| !exported(n)).collect();
        assert!(unknown.is_empty(), "{path} names metrics tutti does not export: {unknown:?}");
    }
    let page = mentioned(&read("docs/operating/metrics.md"));
    let all = tutti_server::metrics::all_names();
    let missing: Vec<&&str> = all.iter().filter(|n| !page.contains(**n)).collect();
    assert!(missing.is_empty(), "docs/operating/metrics.md's metric list lacks {missing:?}");
}

#[test]
fn the_dashboard_is_grafana_json_with_a_query_in_every_panel() {
    let dashboard: serde_json::Value = serde_json::from_str(&read("deploy/grafana/tutti.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let graphs: Vec<&serde_json::Value> = panels.iter().filter(|p| p["type"] != "row").collect();
    assert!(graphs.len() >= 10);
    for p in &graphs {
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        assert!(!targets.is_empty() && targets.iter().all(|t| t["expr"].is_string()), "panel {}", p["title"]);
    }
    let ids: BTreeSet<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let exprs: String = graphs
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].to_string())
        .collect();
    for shown in ["tutti_thread_cpu_seconds_total", "tutti_mix_tick_duration_seconds_bucket", "tutti_mix_participants"]
    {
        assert!(exprs.contains(shown), "the dashboard shows {shown}");
    }
}

#[test]
fn the_kubernetes_config_map_and_environment_are_a_valid_tutti_config() {
    let map = read("deploy/k8s/configmap.yaml");
    let toml: String = map
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("tutti.toml: |"))
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(toml.contains("media"), "the ConfigMap carries tutti.toml: {toml}");
    let dir = std::env::temp_dir().join(format!("tutti-k8s-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tutti.toml");
    std::fs::write(&path, &toml).expect("write");
    // The Deployment's environment, as the pod gets it.
    let deployment = read("deploy/k8s/deployment.yaml");
    let env: Vec<(String, String)> = deployment
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: TUTTI_"))
        .map(|name| {
            let value = match name {
                "ADVERTISE" => "10.0.0.7:4000".to_owned(),
                // "$(NODE_IP):8080" and ":9464", as Kubernetes expands them (checked below).
                "HTTP" => "10.0.0.7:8080".to_owned(),
                "METRICS" => "10.0.0.7:9464".to_owned(),
                "LOG_FORMAT" => "json".to_owned(),
                // From the Secret tutti-redis (cluster mode; unused while redis_url is empty).
                "CLUSTER_REDIS_PASSWORD" => "a password".to_owned(),
                // From the Secret tutti-auth, which the operator creates.
                "AUTH_SECRET" => "0123456789abcdef0123456789abcdef".to_owned(),
                other => panic!("a TUTTI_{other} the test does not know: add it"),
            };
            (format!("TUTTI_{name}"), value)
        })
        .collect();
    assert!(!env.is_empty(), "the Deployment sets TUTTI_ADVERTISE");
    assert!(tutti_server::Config::unknown_env(env.clone()).is_empty(), "every TUTTI_* variable is a key: {env:?}");
    let cfg = tutti_server::Config::load(Some(&path), env, &[]).expect("the ConfigMap's tutti.toml loads");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(cfg.advertise, "10.0.0.7:4000");
    assert_eq!(cfg.log.format, "json");
    // The API and /metrics listen on the node's own address, not on every
    // address the node has (the pod is on the host network).
    for (name, port) in [("TUTTI_HTTP", 8080), ("TUTTI_METRICS", 9464)] {
        let set = format!("- name: {name}\n              value: \"$(NODE_IP):{port}\"");
        assert!(deployment.contains(&set), "the Deployment sets {name} to the node's address: {set}");
    }
    assert_eq!(cfg.http.to_string(), "10.0.0.7:8080", "the API's address");
    assert_eq!(cfg.metrics, "10.0.0.7:9464", "/metrics' address");
}

/// The raw manifests hold no secret value (nobody applies a committed
/// placeholder), and a pod cannot start without the auth secret: the server
/// never generates an admin token and prints it to the pod's log.
#[test]
fn the_kubernetes_manifests_commit_no_secret_and_require_the_auth_secret() {
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/k8s")).expect("deploy/k8s") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            !text.lines().any(|l| l.trim() == "kind: Secret"),
            "{} commits a Secret: create it with kubectl create secret instead",
            path.display()
        );
    }
    let deployment = read("deploy/k8s/deployment.yaml");
    let auth = deployment.split("- name: TUTTI_AUTH_SECRET").nth(1).expect("the Deployment sets TUTTI_AUTH_SECRET");
    let auth: String = auth.lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(auth.contains("name: tutti-auth") && auth.contains("key: secret"), "from the Secret tutti-auth: {auth}");
    assert!(!auth.contains("optional: true"), "the auth secret is not optional: {auth}");
}
