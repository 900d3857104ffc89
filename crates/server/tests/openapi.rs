//! The API description against the API: `GET /v1/openapi.json` from a real
//! server names every route the router is built from, with the methods the
//! router answers (probed over real HTTP), and nothing else; it parses as
//! OpenAPI 3.1 (oas3, a parser other than the generator); real answers match
//! the schemas it gives them; `docs/api/openapi.json` is what the server
//! serves. The room WebSocket speaks protocol 1 (`?protocol=`), and the
//! messages a real socket exchanges match docs/api/websocket.schema.json.
//!
//! After a change of the API: `TUTTI_BLESS=1 cargo test -p tutti-server --test openapi`
//! rewrites docs/api/openapi.json; commit it with the change.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{http, start, start_with, test_config};
use serde_json::{Value, json};

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn spec(api: SocketAddr) -> Value {
    let r = http(api, "GET", "/v1/openapi.json", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{:?}", r.headers);
    serde_json::from_str(&r.body).expect("the description is JSON")
}

/// The paths the router is built from: every `.route("…"` under
/// crates/server/src/api (a route whose path is not a literal fails here,
/// so that none escapes the check).
fn routed_paths() -> BTreeSet<String> {
    let mut files = vec![repo().join("crates/server/src/api")];
    let mut paths = BTreeSet::new();
    let mut calls = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).expect("api dir").map(|e| e.expect("entry").path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("source");
        for other in [".nest(", ".nest_service(", ".route_service("] {
            assert!(!text.contains(other), "{}: {other} routes are not read here yet: teach this test", p.display());
        }
        for (at, _) in text.match_indices(".route(") {
            calls += 1;
            let rest = text[at + ".route(".len()..].trim_start();
            let path = rest.strip_prefix('"').and_then(|r| r.split_once('"')).map(|(p, _)| p);
            let path = path.unwrap_or_else(|| panic!("{}: a route whose path is not a literal", p.display()));
            paths.insert(path.to_owned());
        }
    }
    assert!(calls >= 15, "the router's routes were not found ({calls})");
    paths
}

/// `path` with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{room}", "probe-room").replace("{id}", "1")
}

/// Whether the router serves `method` on `path`: anything but the
/// fallback's 404 `no such endpoint` and the 405 `method_not_allowed`.
fn routed(api: SocketAddr, method: &str, path: &str) -> bool {
    let r = http(api, method, &concrete(path), None, b"");
    let body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    let fallback = r.status == 404 && body["message"] == "no such endpoint";
    let not_allowed = r.status == 405 && body["code"] == "method_not_allowed";
    !(fallback || not_allowed)
}

#[test]
fn the_description_names_every_route_and_method_and_nothing_else() {
    let (_rt, server) = start();
    let api = server.http_addr();
    let doc = spec(api);
    let described: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .map(|(p, item)| {
            let methods =
                METHODS.iter().filter(|m| item.get(m.to_lowercase()).is_some()).map(|m| (*m).to_owned()).collect();
            (p.clone(), methods)
        })
        .collect();
    let routes = routed_paths();
    let undescribed: Vec<_> = routes.iter().filter(|p| !described.contains_key(*p)).collect();
    assert!(undescribed.is_empty(), "routes missing from /v1/openapi.json: {undescribed:?}");
    let stale: Vec<_> = described.keys().filter(|p| !routes.contains(*p)).collect();
    assert!(stale.is_empty(), "described paths no route serves: {stale:?}");
    // Every method, probed: described ⇔ routed. The drain goes last (it drains this server).
    let mut order: Vec<&String> = described.keys().collect();
    order.sort_by_key(|p| p.as_str() == "/v1/node/drain");
    let mut wrong = Vec::new();
    for path in order {
        for method in METHODS {
            let is_described = described[path].contains(method);
            if routed(api, method, path) != is_described {
                wrong.push(format!("{method} {path}: described {is_described}, routed {}", !is_described));
            }
        }
    }
    assert!(wrong.is_empty(), "the description and the router differ:\n{}", wrong.join("\n"));
}

#[test]
fn the_description_is_openapi_3_1_and_every_reference_resolves() {
    let (_rt, server) = start();
    let doc = spec(server.http_addr());
    let text = doc.to_string();
    let parsed = oas3::from_json(&text).expect("oas3 parses the description");
    let version = parsed.validate_version().expect("a 3.1 version");
    assert_eq!((version.major, version.minor), (3, 1), "{}", parsed.openapi);
    let mut operation_ids = BTreeSet::new();
    let mut operations = 0;
    for (path, method, op) in parsed.operations() {
        operations += 1;
        let id = op.operation_id.clone().unwrap_or_else(|| panic!("{method} {path}: no operationId"));
        assert!(operation_ids.insert(id.clone()), "operationId {id} twice");
        let params = op.parameters(&parsed).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        for name in path.split('{').skip(1).filter_map(|s| s.split_once('}')).map(|(n, _)| n) {
            assert!(
                params.iter().any(|p| p.name == name && p.location == oas3::spec::ParameterIn::Path),
                "{method} {path}: path parameter {name} undeclared"
            );
        }
        op.request_body(&parsed).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let responses = op.responses(&parsed);
        assert!(!responses.is_empty(), "{method} {path}: no responses");
        // Every error answer carries the error body.
        for (status, response) in &responses {
            if status.starts_with('4') || status.starts_with('5') {
                let schema = response.content.get("application/json").and_then(|m| m.schema.as_ref());
                let reference = serde_json::to_value(schema).unwrap_or_default();
                assert_eq!(
                    reference["$ref"], "#/components/schemas/ErrorBody",
                    "{method} {path} {status}: not the error body"
                );
            }
        }
    }
    assert!(operations >= 25, "{operations} operations");
    // Every $ref anywhere points into the document.
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for r in refs {
        assert!(pointer(&doc, &r).is_some(), "dangling $ref {r}");
    }
    // Bearer JWT by default; the public routes say they need none.
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["bearerFormat"], "JWT");
    assert_eq!(doc["security"], json!([{ "bearer": [] }]));
    for public in ["/healthz", "/readyz", "/v1/openapi.json"] {
        assert_eq!(doc["paths"][public]["get"]["security"], json!([{}]), "{public}");
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                out.push(r.clone());
            }
            o.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// `#/a/b` in `root`.
fn pointer<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

/// Checks `value` against `schema` (resolved in `root`), strictly: an
/// object may carry only the properties its schema names. The subset of
/// JSON Schema 2020-12 that utoipa and docs/api/websocket.schema.json use.
fn check(root: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => pointer(root, r).ok_or_else(|| format!("{at}: dangling {r}"))?,
        None => schema,
    };
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        // Merged into one object (utoipa's `flatten`), then checked strictly.
        let mut merged = json!({ "type": "object", "properties": {}, "required": [] });
        for part in all {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(r) => pointer(root, r).ok_or_else(|| format!("{at}: dangling {r}"))?,
                None => part,
            };
            for (k, v) in part["properties"].as_object().into_iter().flatten() {
                merged["properties"][k] = v.clone();
            }
            let required = part["required"].as_array().cloned().unwrap_or_default();
            merged["required"].as_array_mut().expect("array").extend(required);
        }
        return check(root, &merged, value, at);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let errors: Vec<String> = options.iter().filter_map(|o| check(root, o, value, at).err()).collect();
            let matched = options.len() - errors.len();
            let ok = if key == "oneOf" { matched == 1 } else { matched >= 1 };
            if !ok {
                return Err(format!("{at}: {matched} of {key} match {value}: {errors:?}"));
            }
        }
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        return Err(format!("{at}: {value} is not {c}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(value)
    {
        return Err(format!("{at}: {value} not in {e:?}"));
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
        if !ok {
            return Err(format!("{at}: {value} is not {t}"));
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && value.as_f64().is_some_and(|v| v < min)
        {
            return Err(format!("{at}: {value} below {min}"));
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), value.as_array()) {
        for (i, v) in a.iter().enumerate() {
            check(root, items, v, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(o) = value.as_object()
        && (schema.get("properties").is_some() || schema.get("required").is_some())
    {
        let props = schema["properties"].as_object().cloned().unwrap_or_default();
        for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !o.contains_key(r) {
                return Err(format!("{at}: '{r}' missing from {value}"));
            }
        }
        for (k, v) in o {
            match props.get(k) {
                Some(s) => check(root, s, v, &format!("{at}.{k}"))?,
                None => return Err(format!("{at}: '{k}' is not described (in {value})")),
            }
        }
    }
    Ok(())
}

/// Checks a real answer against the description's schema for it.
fn answer_matches(doc: &Value, method: &str, path: &str, r: &tutti_client::Response) {
    let status = r.status.to_string();
    let response = &doc["paths"][path][method.to_lowercase()]["responses"][&status];
    assert!(response.is_object(), "{method} {path}: {status} is not described; body {}", r.body);
    let schema = &response["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path} {status}: no JSON schema");
    let body: Value = serde_json::from_str(&r.body).expect("a JSON answer");
    if let Err(e) = check(doc, schema, &body, &format!("{method} {path} {status}")) {
        panic!("the answer does not match its description: {e}");
    }
}

#[test]
fn real_answers_match_their_schemas() {
    let dir = std::env::temp_dir().join(format!("tutti-openapi-{}", std::process::id()));
    let mut cfg = test_config();
    cfg.recording.enabled = true;
    cfg.recording.dir = dir.display().to_string();
    cfg.rtp_out.allowed = vec!["127.0.0.1/32".to_owned()];
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    let doc = spec(api);
    let call = |method: &str, path: &str, template: &str, body: Option<Value>| {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let ct = (!bytes.is_empty()).then_some("application/json");
        let r = http(api, method, path, ct, bytes.as_bytes());
        answer_matches(&doc, method, template, &r);
        r
    };
    let r = call("POST", "/v1/rooms", "/v1/rooms", Some(json!({ "id": "described", "max_speakers": 3 })));
    assert_eq!(r.status, 201);
    // A participant, joined over the socket (it shows in the room's answers).
    let mut ws = RawWs::connect(api, "/v1/rooms/described/ws?protocol=1");
    let first = ws.next_message();
    assert_eq!(first["type"], "room", "{first}");
    let (mut client, offer) = tutti_client::ToneClient::offer(440.0).expect("offer");
    ws.send(json!({ "type": "join", "sdp": offer, "name": "ann" }));
    let answer = ws.wait_for(|v| v["type"] == "answer" || v["type"] == "error");
    assert_eq!(answer["type"], "answer", "{answer}");
    let id = answer["id"].as_u64().expect("id");
    client.accept_answer(answer["sdp"].as_str().expect("sdp"), id).expect("answer applied");
    let room = call("GET", "/v1/rooms/described", "/v1/rooms/{room}", None);
    assert_eq!(room.status, 200);
    assert!(room.body.contains("\"ann\""), "{}", room.body);
    assert_eq!(call("GET", "/v1/rooms", "/v1/rooms", None).status, 200);
    let p = "/v1/rooms/{room}/participants/{id}";
    let patch = call("PATCH", &format!("/v1/rooms/described/participants/{id}"), p, Some(json!({ "muted": true })));
    assert_eq!(patch.status, 200, "{}", patch.body);
    assert_eq!(call("PATCH", "/v1/rooms/described", "/v1/rooms/{room}", Some(json!({ "locked": false }))).status, 200);
    assert_eq!(call("POST", "/v1/rooms/described/invites", "/v1/rooms/{room}/invites", None).status, 201);
    assert_eq!(call("GET", "/v1/rooms/described/ice-servers", "/v1/rooms/{room}/ice-servers", None).status, 200);
    assert_eq!(call("GET", "/v1/node", "/v1/node", None).status, 200);
    let rec = "/v1/rooms/{room}/recording";
    assert_eq!(call("GET", "/v1/rooms/described/recording", rec, None).status, 200);
    assert_eq!(call("POST", "/v1/rooms/described/recording", rec, None).status, 201);
    assert_eq!(call("GET", "/v1/rooms/described/recording", rec, None).status, 200);
    assert_eq!(call("POST", "/v1/rooms/described/recording", rec, None).status, 409);
    assert_eq!(call("DELETE", "/v1/rooms/described/recording", rec, None).status, 200);
    let out = "/v1/rooms/{room}/rtp_out";
    let to = json!({ "address": "127.0.0.1:5004" });
    assert_eq!(call("POST", "/v1/rooms/described/rtp_out", out, Some(to)).status, 201);
    assert_eq!(call("GET", "/v1/rooms/described/rtp_out", out, None).status, 200);
    assert_eq!(call("DELETE", "/v1/rooms/described/rtp_out", out, None).status, 200);
    let far = json!({ "address": "127.0.0.2:5004" });
    assert_eq!(call("POST", "/v1/rooms/described/rtp_out", out, Some(far)).status, 403);
    // Errors: the error body, with a described status.
    assert_eq!(call("GET", "/v1/rooms/nowhere", "/v1/rooms/{room}", None).status, 404);
    assert_eq!(call("POST", "/v1/rooms", "/v1/rooms", Some(json!({ "id": "described" }))).status, 409);
    assert_eq!(call("POST", "/v1/rooms", "/v1/rooms", Some(json!({ "what": 1 }))).status, 400);
    assert_eq!(call("GET", "/v1/rooms/described/rtp_out", "/v1/rooms/{room}/rtp_out", None).status, 404);
    let r = call("DELETE", &format!("/v1/rooms/described/participants/{}", id + 1000), p, None);
    assert_eq!(r.status, 404);
    // Last: the node drains.
    assert_eq!(call("POST", "/v1/node/drain", "/v1/node/drain", None).status, 202);
    drop(client);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn docs_api_openapi_json_is_what_the_server_serves() {
    let (_rt, server) = start();
    let served = spec(server.http_addr());
    let file = repo().join("docs/api/openapi.json");
    let pretty = serde_json::to_string_pretty(&served).expect("json") + "\n";
    if std::env::var_os("TUTTI_BLESS").is_some() {
        std::fs::write(&file, &pretty).expect("write docs/api/openapi.json");
    }
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("docs/api/openapi.json")).expect("JSON");
    assert!(
        committed == served,
        "docs/api/openapi.json differs from GET /v1/openapi.json: run \
         `TUTTI_BLESS=1 cargo test -p tutti-server --test openapi` and commit it"
    );
}

#[test]
fn the_description_needs_no_token() {
    let mut cfg = test_config();
    cfg.auth.disabled = false;
    cfg.auth.secret = "a secret of thirty-two bytes or more, for tests".to_owned();
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    assert_eq!(http(api, "GET", "/v1/rooms", None, b"").status, 401, "the API itself does");
    assert_eq!(spec(api)["openapi"], "3.1.0");
}

/// A blocking WebSocket client that sees messages as the server sends them
/// (batches whole).
struct RawWs(tungstenite::WebSocket<TcpStream>);

impl RawWs {
    fn connect(api: SocketAddr, path: &str) -> Self {
        let stream = TcpStream::connect(api).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let (ws, _) = tungstenite::client(format!("ws://{api}{path}"), stream).expect("WebSocket handshake");
        Self(ws)
    }

    fn send(&mut self, value: Value) {
        self.0.send(tungstenite::Message::text(value.to_string())).expect("send");
    }

    /// The next text message (10 s at most).
    fn next_message(&mut self) -> Value {
        loop {
            match self.0.read().expect("a message") {
                tungstenite::Message::Text(t) => return serde_json::from_str(t.as_str()).expect("JSON"),
                tungstenite::Message::Close(c) => panic!("closed: {c:?}"),
                _ => {}
            }
        }
    }

    fn wait_for(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let m = self.next_message();
            if want(&m) {
                return m;
            }
        }
        panic!("no such message");
    }
}

#[test]
fn the_socket_speaks_protocol_1_and_refuses_another() {
    let (_rt, server) = start();
    let api = server.http_addr();
    common::create_room(api, "versions");
    for bad in ["2", "0", "one", ""] {
        let r = http(api, "GET", &format!("/v1/rooms/versions/ws?protocol={bad}"), None, b"");
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        let body: Value = serde_json::from_str(&r.body).expect("JSON error");
        assert_eq!(body["code"], "unsupported_protocol", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| m.contains("protocol 1")), "{body}");
    }
    // Refused before the upgrade: a real handshake gets the 400 too.
    let stream = TcpStream::connect(api).expect("connect");
    let refused = tungstenite::client(format!("ws://{api}/v1/rooms/versions/ws?protocol=2"), stream);
    assert!(
        matches!(refused, Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(ref r))) if r.status() == 400),
        "{refused:?}"
    );
    for path in ["/v1/rooms/versions/ws?protocol=1", "/v1/rooms/versions/ws"] {
        let mut ws = RawWs::connect(api, path);
        let first = ws.next_message();
        assert_eq!((&first["type"], &first["protocol"]), (&json!("room"), &json!(1)), "{path}: {first}");
    }
}

/// The messages a real socket exchanges, each checked against
/// docs/api/websocket.schema.json (`client` for what the test sends,
/// `server` for what it gets).
#[test]
fn real_socket_messages_match_the_websocket_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/api/websocket.schema.json")).expect("the schema"),
    )
    .expect("JSON");
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let server_schema = json!({ "$ref": "#/$defs/server_message" });
    let client_schema = json!({ "$ref": "#/$defs/client_message" });
    let (_rt, server) = start();
    let api = server.http_addr();
    common::create_room(api, "schema");
    let mut watcher = RawWs::connect(api, "/v1/rooms/schema/ws");
    let mut ws = RawWs::connect(api, "/v1/rooms/schema/ws?protocol=1");
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    let got = |m: Value, seen: &mut BTreeMap<String, Value>| {
        if let Err(e) = check(&schema, &server_schema, &m, "server") {
            panic!("a server message does not match the schema: {e}");
        }
        let kind = m["type"].as_str().unwrap_or("?").to_owned();
        if kind == "events" {
            for e in m["events"].as_array().into_iter().flatten() {
                seen.insert(format!("event:{}", e["type"].as_str().unwrap_or("?")), e.clone());
            }
        }
        seen.insert(kind, m.clone());
        m
    };
    let send = |ws: &mut RawWs, m: Value| {
        if let Err(e) = check(&schema, &client_schema, &m, "client") {
            panic!("a client message does not match the schema: {e}");
        }
        ws.send(m);
    };
    got(watcher.next_message(), &mut seen);
    got(ws.next_message(), &mut seen);
    let (mut client, offer) = tutti_client::ToneClient::offer(440.0).expect("offer");
    send(&mut ws, json!({ "type": "subscribe", "events": ["joined", "left", "muted", "hand", "talking"] }));
    send(&mut ws, json!({ "type": "join", "sdp": offer, "name": "bo" }));
    let answer = loop {
        let m = got(ws.next_message(), &mut seen);
        if m["type"] == "answer" {
            break m;
        }
        assert_ne!(m["type"], "error", "{m}");
    };
    let id = answer["id"].as_u64().expect("id");
    client.accept_answer(answer["sdp"].as_str().expect("sdp"), id).expect("answer applied");
    send(&mut ws, json!({ "type": "mute", "muted": true }));
    send(&mut ws, json!({ "type": "hand", "raised": true }));
    send(&mut ws, json!({ "type": "join", "sdp": "v=0" }));
    got(ws.wait_for(|m| m["type"] == "error"), &mut seen);
    send(&mut ws, json!({ "type": "token", "token": "x" }));
    send(&mut ws, json!({ "type": "leave" }));
    // The watcher sees the events of all that, batched.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains_key("event:left") && Instant::now() < deadline {
        got(watcher.next_message(), &mut seen);
    }
    for kind in ["room", "answer", "error", "events", "event:joined", "event:muted", "event:hand", "event:left"] {
        assert!(seen.contains_key(kind), "no {kind} seen: {:?}", seen.keys());
    }
    assert_eq!(seen["room"]["protocol"], 1);
    // And the schema is not a blank cheque: a message with an unknown field, or a wrong type, fails it.
    let mut extra = seen["room"].clone();
    extra["surprise"] = json!(1);
    assert!(check(&schema, &server_schema, &extra, "server").is_err());
    let wrong_type = json!({ "type": "events", "events": [{ "type": "muted", "id": "1", "muted": true }] });
    assert!(check(&schema, &server_schema, &wrong_type, "server").is_err());
    assert!(check(&schema, &client_schema, &json!({ "type": "mute" }), "client").is_err());
    drop(client);
}

/// The playback routes' real answers match their descriptions, and the
/// playback events a real socket gets match docs/api/websocket.schema.json.
#[test]
fn playback_answers_and_events_match_their_schemas() {
    let ws_schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/api/websocket.schema.json")).expect("the schema"),
    )
    .expect("JSON");
    // A one-second tone, as real Opus in the recorder's Ogg writer.
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Audio).expect("encoder");
    let head = tutti_server::outputs::ogg::OpusHead { channels: 1, pre_skip: 312, input_rate: 48_000 };
    let mut w = tutti_server::outputs::ogg::OggOpusWriter::new(Vec::new(), 5, head, "t", &[]).expect("headers");
    for n in 0..50u64 {
        let packet = enc.encode_vec_float(&tutti_mix::tone(440.0, 0.3, n * 960), 1500).expect("encode");
        w.push_packet(&packet, 960).expect("write");
    }
    w.finish().expect("finish");
    let file = std::mem::take(w.get_mut());
    let dir = std::env::temp_dir().join(format!("tutti-openapi-sounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("tone.opus"), &file).expect("write");
    let mut cfg = test_config();
    cfg.playback.dir = dir.display().to_string();
    let (_rt, server) = start_with(cfg);
    let api = server.http_addr();
    let doc = spec(api);
    common::create_room(api, "played");
    let mut ws = RawWs::connect(api, "/v1/rooms/played/ws");
    let first = ws.next_message();
    assert_eq!(first["type"], "room", "{first}");
    let call = |method: &str, path: &str, template: &str, ct: Option<&str>, body: &[u8]| {
        let r = http(api, method, path, ct, body);
        answer_matches(&doc, method, template, &r);
        r
    };
    let list = "/v1/rooms/{room}/playbacks";
    let json_ct = Some("application/json");
    let r = call("POST", "/v1/rooms/played/playbacks", list, json_ct, br#"{"file":"tone.opus","loop":true}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let id = serde_json::from_str::<Value>(&r.body).expect("JSON")["id"].as_u64().expect("id");
    let r = call("POST", "/v1/rooms/played/playbacks", list, Some("audio/ogg"), &file);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(call("GET", "/v1/rooms/played/playbacks", list, None, b"").status, 200);
    let one = "/v1/rooms/{room}/playbacks/{id}";
    assert_eq!(call("DELETE", &format!("/v1/rooms/played/playbacks/{id}"), one, None, b"").status, 200);
    assert_eq!(call("DELETE", &format!("/v1/rooms/played/playbacks/{id}"), one, None, b"").status, 404);
    assert_eq!(call("POST", "/v1/rooms/played/playbacks", list, Some("audio/ogg"), b"nothing").status, 422);
    assert_eq!(call("POST", "/v1/rooms/played/playbacks", list, json_ct, br#"{"file":"../x"}"#).status, 400);
    let sounds = "/v1/rooms/{room}/sounds";
    assert_eq!(call("GET", "/v1/rooms/played/sounds", sounds, None, b"").status, 200);
    let r = call("PUT", "/v1/rooms/played/sounds", sounds, json_ct, br#"{"hold":"tone.opus","enter":null}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(call("PUT", "/v1/rooms/played/sounds", sounds, json_ct, br#"{"leave":"gone.opus"}"#).status, 404);
    // A socket opened while the upload plays: the snapshot names it.
    let mut late = RawWs::connect(api, "/v1/rooms/played/ws");
    let snapshot = late.next_message();
    assert_eq!(snapshot["playbacks"][0]["file"], "upload", "{snapshot}");
    if let Err(e) = check(&ws_schema, &json!({ "$ref": "#/$defs/server_message" }), &snapshot, "server") {
        panic!("the snapshot does not match the schema: {e}");
    }
    // The events: started (twice), stopped, finished (the upload, after its second).
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 && Instant::now() < deadline {
        let m = ws.next_message();
        if let Err(e) = check(&ws_schema, &json!({ "$ref": "#/$defs/server_message" }), &m, "server") {
            panic!("a server message does not match the schema: {e}");
        }
        for e in m["events"].as_array().into_iter().flatten() {
            if let Some(kind) = e["type"].as_str().filter(|k| k.starts_with("playback_")) {
                seen.insert(kind.to_owned());
            }
        }
    }
    assert_eq!(seen.len(), 3, "playback_started, _stopped and _finished seen: {seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The move route's real answers match their descriptions, and the
/// `room_changed` message the moved participant's socket gets matches
/// docs/api/websocket.schema.json.
#[test]
fn move_answers_and_room_changed_match_their_schemas() {
    let ws_schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/api/websocket.schema.json")).expect("the schema"),
    )
    .expect("JSON");
    let server_schema = json!({ "$ref": "#/$defs/server_message" });
    let (_rt, server) = start();
    let api = server.http_addr();
    let doc = spec(api);
    common::create_room(api, "hall");
    common::create_room(api, "nook");
    let mut ws = RawWs::connect(api, "/v1/rooms/hall/ws");
    assert_eq!(ws.next_message()["type"], "room");
    let (_client, offer) = tutti_client::ToneClient::offer(440.0).expect("offer");
    ws.send(json!({ "type": "join", "sdp": offer }));
    let id = ws.wait_for(|m| m["type"] == "answer")["id"].as_u64().expect("id");
    let template = "/v1/rooms/{room}/participants/{id}/move";
    let call = |room: &str, id: u64, body: &str| {
        let r = http(
            api,
            "POST",
            &format!("/v1/rooms/{room}/participants/{id}/move"),
            Some("application/json"),
            body.as_bytes(),
        );
        answer_matches(&doc, "POST", template, &r);
        r
    };
    assert_eq!(call("hall", id, r#"{"to":"hall"}"#).status, 400);
    assert_eq!(call("hall", id, r#"{"to":"gone"}"#).status, 404);
    assert_eq!(call("hall", id + 1, r#"{"to":"nook"}"#).status, 404);
    assert_eq!(call("hall", id, r#"{"to":"nook","speak":false}"#).status, 200);
    let changed = ws.wait_for(|m| m["type"] == "room_changed");
    assert_eq!(changed, json!({ "type": "room_changed", "room": "nook", "from": "hall", "id": id }));
    let snapshot = ws.next_message();
    assert_eq!((snapshot["type"].as_str(), snapshot["room"].as_str()), (Some("room"), Some("nook")));
    for m in [&changed, &snapshot] {
        if let Err(e) = check(&ws_schema, &server_schema, m, "server") {
            panic!("a server message does not match the schema: {e}");
        }
    }
    let mut wrong = changed.clone();
    wrong["id"] = json!("1");
    assert!(check(&ws_schema, &server_schema, &wrong, "server").is_err());
}

/// The whisper routes' real answers match their descriptions, and the
/// whisper events a real socket gets match docs/api/websocket.schema.json.
#[test]
fn whisper_answers_and_events_match_their_schemas() {
    let ws_schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/api/websocket.schema.json")).expect("the schema"),
    )
    .expect("JSON");
    let (_rt, server) = start();
    let api = server.http_addr();
    let doc = spec(api);
    common::create_room(api, "whispered");
    let mut ws = RawWs::connect(api, "/v1/rooms/whispered/ws");
    assert_eq!(ws.next_message()["type"], "room");
    let ids: Vec<u64> = (0..2)
        .map(|_| {
            let (client, offer) = tutti_client::ToneClient::offer(440.0).expect("offer");
            drop(client);
            let r = http(api, "POST", "/v1/rooms/whispered/participants", Some("application/sdp"), offer.as_bytes());
            assert_eq!(r.status, 201, "{}", r.body);
            r.header("location").and_then(|l| l.rsplit('/').next()?.parse().ok()).expect("an id")
        })
        .collect();
    let call = |method: &str, path: &str, template: &str, body: &str| {
        let ct = (!body.is_empty()).then_some("application/json");
        let r = http(api, method, path, ct, body.as_bytes());
        answer_matches(&doc, method, template, &r);
        r
    };
    let list = "/v1/rooms/{room}/whispers";
    let one = "/v1/rooms/{room}/whispers/{id}";
    let body = json!({ "speakers": [ids[0]], "listeners": [ids[1]] }).to_string();
    let r = call("POST", "/v1/rooms/whispered/whispers", list, &body);
    assert_eq!(r.status, 201, "{}", r.body);
    let id = serde_json::from_str::<Value>(&r.body).expect("JSON")["id"].as_u64().expect("id");
    assert_eq!(call("POST", "/v1/rooms/whispered/whispers", list, &body).status, 409);
    assert_eq!(call("GET", "/v1/rooms/whispered/whispers", list, "").status, 200);
    let r = call("PATCH", &format!("/v1/rooms/whispered/whispers/{id}"), one, r#"{"listeners":[424242]}"#);
    assert_eq!(r.status, 404, "{}", r.body);
    let r =
        call("PATCH", &format!("/v1/rooms/whispered/whispers/{id}"), one, &json!({"listeners": [ids[1]]}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    // A socket opened while the channel is open: the snapshot names it.
    let mut late = RawWs::connect(api, "/v1/rooms/whispered/ws");
    let snapshot = late.next_message();
    assert_eq!(snapshot["whispers"][0]["speakers"], json!([ids[0]]), "{snapshot}");
    if let Err(e) = check(&ws_schema, &json!({ "$ref": "#/$defs/server_message" }), &snapshot, "server") {
        panic!("the snapshot does not match the schema: {e}");
    }
    assert_eq!(call("DELETE", &format!("/v1/rooms/whispered/whispers/{id}"), one, "").status, 200);
    assert_eq!(call("DELETE", &format!("/v1/rooms/whispered/whispers/{id}"), one, "").status, 404);
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 && Instant::now() < deadline {
        let m = ws.next_message();
        if let Err(e) = check(&ws_schema, &json!({ "$ref": "#/$defs/server_message" }), &m, "server") {
            panic!("a server message does not match the schema: {e}");
        }
        for e in m["events"].as_array().into_iter().flatten() {
            if let Some(kind) = e["type"].as_str().filter(|k| k.starts_with("whisper_")) {
                seen.insert(kind.to_owned());
            }
        }
    }
    assert_eq!(seen.len(), 3, "whisper_opened, _changed and _closed seen: {seen:?}");
}
