//! The admin CLI, `tutti rooms …` and `tutti participants …`, run as the
//! real binary against a real `tutti serve`, with a real WebRTC participant
//! (`ToneClient`) to list, mute and kick: tables by default, the API's JSON
//! with `--json`, and the API's refusals as one clear line and exit status 1;
//! and in a two-node cluster (real redis-server), through the node that does
//! not hold the room.

mod common;

use common::cluster::{Node, Redis, holder, shared_ports};
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_client::{JoinAs, Requester, ToneClient, request_as, run_until};
use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "a secret for the admin CLI tests";
const ROOM: &str = "cli-room";

/// A `tutti serve`, killed when the test ends (passed or not).
struct Served(common::Served);

impl std::ops::Deref for Served {
    type Target = common::Served;
    fn deref(&self) -> &common::Served {
        &self.0
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

/// `tutti serve` on ephemeral loopback ports with a known secret.
fn serve() -> Served {
    let set = format!("auth.secret={SECRET}");
    Served(common::serve_loopback(&["--set", &set]))
}

fn mint(grant: &Grant) -> String {
    Auth::new(SECRET).expect("secret").mint(grant, Duration::from_secs(600), unix_now()).expect("token")
}

/// Runs `tutti ARGS…` against `served` (`TUTTI_URL`), with `token` (`TUTTI_TOKEN`) if any,
/// pumping `client` (so that its call stays up) until it exits.
fn tutti(served: &Served, token: Option<&str>, client: Option<&mut ToneClient>, args: &[&str]) -> Output {
    tutti_at(served.api, token, client, args)
}

/// [`tutti`] against the API at `api`.
fn tutti_at(api: SocketAddr, token: Option<&str>, client: Option<&mut ToneClient>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tutti"));
    cmd.args(args)
        .env_remove("TUTTI_TOKEN")
        .env("TUTTI_URL", format!("http://{api}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        cmd.env("TUTTI_TOKEN", token);
    }
    let mut child = cmd.spawn().expect("tutti runs");
    if let Some(client) = client {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && child.try_wait().ok().flatten().is_none() {
            run_until(&mut [&mut *client], Instant::now() + Duration::from_millis(5), |_| false);
        }
    }
    child.wait_with_output().expect("tutti ends")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command that worked: its stdout.
fn ok(out: Output) -> String {
    assert!(out.status.success(), "exit {:?}: {}{}", out.status.code(), stderr(&out), stdout(&out));
    stdout(&out)
}

/// A command that failed: exit status 1, one line on stderr, nothing on stdout.
fn refused(out: Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}{}", stderr(&out), stdout(&out));
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    err
}

/// The row of a table whose first cell is `first`, split into cells.
fn row(table: &str, first: &str) -> Option<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cells| cells.first().is_some_and(|c| c == first))
}

/// The participant `id` as the API shows it (`GET /v1/rooms/{room}`).
fn member(served: &Served, token: &str, id: u64) -> Option<Value> {
    let r = request_as(served.api, &Requester::token(token), "GET", &format!("/v1/rooms/{ROOM}"), None, b"")
        .expect("the API answers");
    assert_eq!(r.status, 200, "{}", r.body);
    let body: Value = serde_json::from_str(&r.body).expect("JSON");
    body["participants"].as_array().expect("participants").iter().find(|p| p["id"] == id).cloned()
}

#[test]
fn an_admin_manages_rooms_and_participants_with_the_cli() {
    let served = serve();
    let token = mint(&Grant::admin("ops"));
    let admin = Some(token.as_str());

    let out =
        ok(tutti(&served, admin, None, &["rooms", "create", ROOM, "--max-participants", "7", "--max-speakers", "2"]));
    assert!(out.contains(&format!("created room {ROOM}")), "{out}");

    // The table: a header row, then the room's row with its limits.
    let table = ok(tutti(&served, admin, None, &["rooms", "list"]));
    assert!(table.lines().next().is_some_and(|h| h.starts_with("ROOM") && h.contains("MAX SPEAKERS")), "{table}");
    let cells = row(&table, ROOM).unwrap_or_else(|| panic!("no row for {ROOM}: {table}"));
    assert_eq!(cells[1..5], ["0", "7", "2", "no"], "{table}");
    // --json: the API's answer, one document.
    let json: Value = serde_json::from_str(&ok(tutti(&served, admin, None, &["rooms", "list", "--json"])))
        .expect("rooms list --json is JSON");
    let listed = json.as_array().expect("an array").iter().find(|r| r["id"] == ROOM).cloned().expect("the room");
    assert_eq!((listed["max_participants"].as_u64(), listed["max_speakers"].as_u64()), (Some(7), Some(2)));

    // A real participant joins: the CLI lists it.
    let alice = mint(&Grant::participant(ROOM, "alice"));
    let mut client =
        ToneClient::join_as(served.api, &Requester::token(&alice), ROOM, 440.0, JoinAs::Json).expect("alice joins");
    let id = client.id;
    assert!(run_until(&mut [&mut client], Instant::now() + Duration::from_secs(10), |c| c[0].connected), "connects");
    let id_text = id.to_string();
    let table = ok(tutti(&served, admin, Some(&mut client), &["participants", "list", ROOM]));
    let cells = row(&table, &id_text).unwrap_or_else(|| panic!("no row for participant {id}: {table}"));
    // ID NAME("440 Hz") IDENTITY CONNECTED MUTED MAY-SPEAK …
    assert_eq!(cells[1..7], ["440", "Hz", "alice", "yes", "no", "yes"], "{table}");
    let json: Value =
        serde_json::from_str(&ok(tutti(&served, admin, Some(&mut client), &["participants", "list", ROOM, "--json"])))
            .expect("participants list --json is JSON");
    assert_eq!(json.as_array().map(|a| a.iter().filter(|p| p["identity"] == "alice").count()), Some(1), "{json}");

    // Attributes: set two, remove one; the API and the table show the rest.
    let out = ok(tutti(
        &served,
        admin,
        Some(&mut client),
        &["participants", "attributes", ROOM, &id_text, "seat=3", "team=red"],
    ));
    assert!(out.contains("seat=3,team=red"), "{out}");
    let out = ok(tutti(&served, admin, Some(&mut client), &["participants", "attributes", ROOM, &id_text, "team="]));
    assert!(out.contains("seat=3") && !out.contains("team"), "KEY= removes: {out}");
    assert_eq!(member(&served, &token, id).map(|m| m["attributes"].clone()), Some(serde_json::json!({"seat": "3"})));
    let table = ok(tutti(&served, admin, Some(&mut client), &["participants", "list", ROOM]));
    assert!(row(&table, &id_text).is_some_and(|cells| cells.last().map(String::as_str) == Some("seat=3")), "{table}");

    // Mute: the API says it is muted.
    let out = ok(tutti(&served, admin, Some(&mut client), &["participants", "mute", ROOM, &id_text]));
    assert!(out.contains("muted"), "{out}");
    assert_eq!(member(&served, &token, id).map(|m| m["muted"] == true), Some(true), "muted after `participants mute`");
    // Unspeak, with --json: the API's answer.
    let json: Value = serde_json::from_str(&ok(tutti(
        &served,
        admin,
        Some(&mut client),
        &["participants", "unspeak", ROOM, &id_text, "--json"],
    )))
    .expect("JSON");
    assert_eq!(json["speak"], false, "{json}");
    assert_eq!(member(&served, &token, id).map(|m| m["listen_only"] == true), Some(true), "listens only");

    // Kick, with a ban: gone from the room, its call closed, and its identity kept out.
    let out = ok(tutti(&served, admin, Some(&mut client), &["participants", "kick", ROOM, &id_text, "--ban", "10m"]));
    assert!(out.contains("banned for 600 s"), "{out}");
    assert!(member(&served, &token, id).is_none(), "kicked participant {id} is gone");
    assert!(run_until(&mut [&mut client], Instant::now() + Duration::from_secs(5), |c| c[0].closed), "its call ends");
    let out = ok(tutti(&served, admin, None, &["rooms", "get", ROOM]));
    assert!(row(&out, &id_text).is_none() && out.contains("banned identities: 1"), "{out}");
    match ToneClient::join_as(served.api, &Requester::token(&alice), ROOM, 440.0, JoinAs::Json) {
        Err(tutti_client::JoinError::Refused { status, body }) => assert_eq!(status, 403, "{body}"),
        other => panic!("a banned identity rejoined: {other:?}"),
    }

    // A data message from the backend; a room created to wait for its moderator.
    let out = ok(tutti(&served, admin, None, &["rooms", "send", ROOM, "notice", r#"{"text":"5 min left"}"#]));
    assert!(out.contains("sent to room"), "{out}");
    let json: Value = serde_json::from_str(&ok(tutti(
        &served,
        admin,
        None,
        &[
            "rooms",
            "create",
            "waiting-room",
            "--wait-for-moderator",
            "--on-moderator-leave",
            "end",
            "--spatial",
            "--json",
        ],
    )))
    .expect("JSON");
    assert_eq!((&json["waiting"], &json["moderation"]["on_moderator_leave"]), (&json!(true), &json!("end")), "{json}");
    assert_eq!((&json["spatial"], &json["spatial_mode"]), (&json!(true), &json!("panned")), "{json}");
    let json: Value = serde_json::from_str(&ok(tutti(
        &served,
        admin,
        None,
        &["rooms", "create", "headphones", "--spatial", "binaural", "--json"],
    )))
    .expect("JSON");
    assert_eq!((&json["spatial"], &json["spatial_mode"]), (&json!(true), &json!("binaural")), "{json}");

    // Lock shows in the table; delete removes the room.
    let out = ok(tutti(&served, admin, None, &["rooms", "lock", ROOM]));
    assert_eq!(row(&out, ROOM).map(|c| c[4].clone()).as_deref(), Some("yes"), "{out}");
    ok(tutti(&served, admin, None, &["rooms", "delete", ROOM]));
    let table = ok(tutti(&served, admin, None, &["rooms", "list"]));
    assert!(row(&table, ROOM).is_none(), "deleted: {table}");
    client.close();
}

#[test]
fn the_cli_says_why_the_api_refused() {
    let served = serve();
    let admin = mint(&Grant::admin("ops"));
    ok(tutti(&served, Some(&admin), None, &["rooms", "create", ROOM]));

    // No token: the API's 401, and what to do about it.
    let err = refused(tutti(&served, None, None, &["rooms", "list"]));
    assert!(err.contains("401 token_missing") && err.contains("--token") && err.contains("TUTTI_TOKEN"), "{err}");

    // A listen-only participant's token may not manage the room.
    let listener = mint(&Grant::listener(ROOM, "bob"));
    let err = refused(tutti(&served, Some(&listener), None, &["rooms", "delete", ROOM]));
    assert!(err.contains("403 forbidden") && err.contains("admin"), "{err}");
    let err = refused(tutti(&served, Some(&listener), None, &["rooms", "list"]));
    assert!(err.contains("403"), "{err}");

    // An unknown room, an unknown participant.
    let err = refused(tutti(&served, Some(&admin), None, &["rooms", "get", "no-such-room"]));
    assert!(err.contains("404 room_not_found") && err.contains("no-such-room"), "{err}");
    let err = refused(tutti(&served, Some(&admin), None, &["participants", "mute", ROOM, "999999"]));
    assert!(err.contains("404 participant_not_found"), "{err}");

    // Nothing listening at --url.
    let err = refused(tutti(&served, Some(&admin), None, &["rooms", "list", "--url", "http://127.0.0.1:1"]));
    assert!(err.contains("cannot reach http://127.0.0.1:1"), "{err}");
    // The room is still there: nothing refused changed anything.
    let table = ok(tutti(&served, Some(&admin), None, &["rooms", "list"]));
    assert!(row(&table, ROOM).is_some(), "{table}");
}

/// In a cluster, the CLI works against any node: a change to a room held
/// by another node follows the `307`, and a room held elsewhere is read from
/// its node (`api_url`).
#[test]
fn the_cli_works_against_any_node_of_a_cluster() {
    let redis = Redis::start();
    let ports = shared_ports();
    let nodes: Vec<Node> = (2..=3).map(|n| Node::start(n, ports, &redis)).collect();
    for node in &nodes {
        node.wait_ready();
    }
    let auth = Auth::new(common::cluster::SECRET).expect("secret");
    let token = auth.mint(&Grant::admin("ops"), Duration::from_secs(600), unix_now()).expect("token");
    let admin = Some(token.as_str());
    let room = "across";

    ok(tutti_at(nodes[0].api, admin, None, &["rooms", "create", room]));
    let owner = holder(nodes[0].api, &token, room).expect("the room is held");
    let (here, there) = if owner == nodes[0].id { (&nodes[0], &nodes[1]) } else { (&nodes[1], &nodes[0]) };
    assert_eq!(here.id, owner);

    let alice = auth.mint(&Grant::participant(room, "alice"), Duration::from_secs(600), unix_now()).expect("token");
    let mut client =
        ToneClient::join_as(here.api, &Requester::token(&alice), room, 440.0, JoinAs::Json).expect("alice joins");
    assert!(run_until(&mut [&mut client], Instant::now() + Duration::from_secs(10), |c| c[0].connected), "connects");
    let id_text = client.id.to_string();

    // Through the node that does not hold the room.
    let table = ok(tutti_at(there.api, admin, None, &["rooms", "list"]));
    let cells = row(&table, room).unwrap_or_else(|| panic!("no row for {room}: {table}"));
    assert_eq!(cells.last().map(String::as_str), Some(owner.as_str()), "{table}");
    let table = ok(tutti_at(there.api, admin, Some(&mut client), &["participants", "list", room]));
    let cells = row(&table, &id_text).unwrap_or_else(|| panic!("no row for participant {id_text}: {table}"));
    assert_eq!(cells[3..6], ["alice", "yes", "no"], "{table}");
    let json: Value = serde_json::from_str(&ok(tutti_at(
        there.api,
        admin,
        Some(&mut client),
        &["participants", "mute", room, &id_text, "--json"],
    )))
    .expect("JSON");
    assert_eq!(json["muted"], true, "{json}");
    ok(tutti_at(there.api, admin, Some(&mut client), &["participants", "kick", room, &id_text]));
    let table = ok(tutti_at(there.api, admin, None, &["participants", "list", room]));
    assert!(row(&table, &id_text).is_none(), "kicked: {table}");
    ok(tutti_at(there.api, admin, None, &["rooms", "delete", room]));
    let err = refused(tutti_at(here.api, admin, None, &["rooms", "get", room]));
    assert!(err.contains("404 room_not_found"), "{err}");
    client.close();
}
