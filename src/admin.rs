//! `tutti rooms …` and `tutti participants …`: the admin CLI, over the REST
//! API of any node (`--url`, `TUTTI_URL`) with a token (`--token`,
//! `TUTTI_TOKEN`). Human tables by default; `--json` prints the API's JSON.
//!
//! Every command is one or two requests through `tutti_client::Client`
//! (blocking, one connection each, 10 s timeout), `http://` or `https://`
//! (the system's roots and `--ca-file`'s); a cluster node's `307` to the
//! room's node is followed (its ticket stands in for the token). An API
//! error (`{code, message}`) becomes one line on stderr and exit status 1.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use tutti_client::{Client, HttpError, Origin, Requester, Response};

/// How many `307`s a request follows (a cluster node to the room's node).
const MAX_REDIRECTS: usize = 3;

/// Where the API is and who calls it: shared by every admin command.
#[derive(clap::Args)]
pub struct Connection {
    /// The node's API (any node of a cluster): `http://HOST:PORT`, or
    /// `https://HOST[:PORT]` behind a TLS proxy.
    #[arg(long, env = "TUTTI_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// A PEM file of CA certificates trusted for `https://` besides the
    /// system's (e.g. the CA of a self-signed deployment).
    #[arg(long, env = "TUTTI_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,
    /// An access token, admin for the room or for every room (`*`); needed
    /// unless the server runs with `auth.disabled`. `tutti token --room '*'
    /// --identity ops --admin` mints one; a server with no `auth.secret`
    /// prints one at start (`export TUTTI_TOKEN=…`).
    #[arg(long, env = "TUTTI_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Print the API's JSON answer (one document) instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

/// `tutti rooms …`.
#[derive(clap::Args)]
pub struct RoomsArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(subcommand)]
    command: RoomsCommand,
}

#[derive(clap::Subcommand)]
enum RoomsCommand {
    /// The rooms (needs an admin token for every room, `*`).
    List,
    /// A room: its settings and its participants.
    Get {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
    /// Creates a room (a fresh name when ROOM is left out).
    Create {
        /// The room's id (1 to 64 letters, digits, '-' or '_').
        #[arg(value_parser = room_id)]
        room: Option<String>,
        /// At most this many participants (default: `room.max_participants`).
        #[arg(long)]
        max_participants: Option<usize>,
        /// At most this many mixed speakers, K (default: `room.max_speakers`).
        #[arg(long)]
        max_speakers: Option<usize>,
        /// Record it from its first join (needs `recording` configured).
        #[arg(long)]
        record: bool,
        /// Hold everyone muted, with the hold music, until a moderator joins.
        #[arg(long)]
        wait_for_moderator: bool,
        /// When the last moderator leaves: `stay`, `mute` everyone else, or `end` the room.
        #[arg(long, value_parser = ["stay", "mute", "end"])]
        on_moderator_leave: Option<String>,
        /// Everyone but a moderator joins muted.
        #[arg(long)]
        join_muted: bool,
        /// Speakers on seats, heard in stereo by the clients that ask for it (docs/features/spatial.md):
        /// `--spatial` (panned), `--spatial binaural` (for headphones).
        #[arg(long, num_args = 0..=1, default_missing_value = "panned", value_parser = ["off", "panned", "binaural"])]
        spatial: Option<String>,
    },
    /// Sends a data message to everyone in a room (or to `--to` participants), as the backend.
    Send {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// What it is about (`notice`, `chat`…).
        topic: String,
        /// The payload: JSON if it parses as JSON, else sent as a string.
        payload: String,
        /// Only these participants (repeatable).
        #[arg(long)]
        to: Vec<u64>,
    },
    /// Calls a phone into a room through an outbound SIP trunk (dial-out).
    Call {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// Whom: a SIP URI (`sip:alice@192.0.2.20`) or a number.
        to: String,
        /// The `[[sip.outbound]]` trunk.
        #[arg(long)]
        trunk: String,
        /// The callee's name in the room (default: TO).
        #[arg(long)]
        name: Option<String>,
        /// Keypad digits sent once it answers.
        #[arg(long)]
        digits: Option<String>,
        /// Seconds it may ring (default 30).
        #[arg(long)]
        ringing_timeout: Option<u64>,
        /// Wait for the answer (at most the API's request timeout).
        #[arg(long)]
        wait: bool,
    },
    /// Deletes a room: everyone in it is disconnected.
    Delete {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
    /// Changes a room's limits (participants already in stay).
    Set {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// At most this many participants.
        #[arg(long)]
        max_participants: Option<usize>,
        /// At most this many mixed speakers, K.
        #[arg(long)]
        max_speakers: Option<usize>,
    },
    /// Locks a room: no new joins (those in it stay).
    Lock {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
    /// Unlocks a room.
    Unlock {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
    /// Mutes everyone in a room but its admins (each may unmute).
    MuteAll {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
}

/// `tutti participants …`.
#[derive(clap::Args)]
pub struct ParticipantsArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(subcommand)]
    command: ParticipantsCommand,
}

#[derive(clap::Subcommand)]
enum ParticipantsCommand {
    /// The participants of a room.
    List {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
    },
    /// Removes a participant (reason `kicked`), optionally banning its identity.
    Kick {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
        /// Keep its identity out of the room this long: `600`, `10m`, `1h`.
        #[arg(long, value_parser = crate::duration::parse_duration)]
        ban: Option<Duration>,
    },
    /// Mutes a participant (it may unmute itself).
    Mute {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
    },
    /// Unmutes a participant.
    Unmute {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
    },
    /// Grants a participant the right to speak (unmutes it).
    Speak {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
    },
    /// Revokes a participant's right to speak (it listens only).
    Unspeak {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
    },
    /// Sets and removes a participant's attributes (the others stay).
    Attributes {
        /// The room's id.
        #[arg(value_parser = room_id)]
        room: String,
        /// The participant's id (the ID column of `participants list`).
        id: u64,
        /// `KEY=VALUE` to set, `KEY=` to remove.
        #[arg(value_name = "KEY=VALUE", required = true)]
        set: Vec<String>,
    },
}

/// A room id as the server takes it, refused here with the rule rather than
/// sent into a URL path.
fn room_id(text: &str) -> Result<String, String> {
    if tutti_server::auth::is_room_id(text) {
        Ok(text.to_owned())
    } else {
        Err(format!("'{text}' is not a room id: 1 to 64 letters, digits, '-' or '_'"))
    }
}

/// An admin command's end: an error as one line on stderr (its causes
/// joined by `: `, no backtrace) and exit status 1.
pub fn exit_on_error(result: anyhow::Result<()>) -> anyhow::Result<()> {
    if let Err(e) = result {
        eprintln!("tutti: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

/// Runs `tutti rooms …`.
pub fn rooms(args: &RoomsArgs) -> anyhow::Result<()> {
    let api = Api::new(&args.conn)?;
    let json = args.conn.json;
    match &args.command {
        RoomsCommand::List => {
            let r = api.call("GET", "/v1/rooms", None)?;
            if json {
                return print_json(&r.body);
            }
            let rooms = parse(&r)?;
            print!("{}", rooms_table(rooms.as_array().map_or(&[][..], Vec::as_slice)));
        }
        RoomsCommand::Get { room } => {
            let (r, body) = api.room(room)?;
            if json {
                return print_json(&r.body);
            }
            print!("{}", rooms_table(std::slice::from_ref(&body["room"])));
            if let Some(bans) = body["bans"].as_u64().filter(|n| *n > 0) {
                println!("banned identities: {bans}");
            }
            let participants = body["participants"].as_array().map_or(&[][..], Vec::as_slice);
            println!();
            print!("{}", participants_table(participants, &body["speakers"]));
        }
        RoomsCommand::Create {
            room,
            max_participants,
            max_speakers,
            record,
            wait_for_moderator,
            on_moderator_leave,
            join_muted,
            spatial,
        } => {
            let mut body = json!({});
            put(&mut body, "id", room.as_ref().map(|r| json!(r)));
            put(&mut body, "max_participants", max_participants.map(|n| json!(n)));
            put(&mut body, "max_speakers", max_speakers.map(|n| json!(n)));
            put(&mut body, "record", record.then_some(json!(true)));
            put(&mut body, "wait_for_moderator", wait_for_moderator.then_some(json!(true)));
            put(&mut body, "on_moderator_leave", on_moderator_leave.as_ref().map(|o| json!(o)));
            put(&mut body, "join_muted", join_muted.then_some(json!(true)));
            put(&mut body, "spatial", spatial.as_ref().map(|mode| json!(mode)));
            let r = api.call("POST", "/v1/rooms", Some(&body))?;
            if json {
                return print_json(&r.body);
            }
            let created = parse(&r)?;
            println!("created room {}", text(&created["id"]));
            print!("{}", rooms_table(std::slice::from_ref(&created)));
        }
        RoomsCommand::Send { room, topic, payload, to } => {
            let payload = serde_json::from_str::<Value>(payload).unwrap_or_else(|_| json!(payload));
            let mut body = json!({ "topic": topic, "payload": payload });
            put(&mut body, "to", (!to.is_empty()).then(|| json!(to)));
            let r = api.call("POST", &format!("/v1/rooms/{room}/data"), Some(&body))?;
            if json {
                return print_json(&r.body);
            }
            let sent = parse(&r)?;
            println!("sent to room {room}: {} socket(s) on its node", text(&sent["sockets"]));
        }
        RoomsCommand::Call { room, to, trunk, name, digits, ringing_timeout, wait } => {
            let mut body = json!({ "to": to, "trunk": trunk, "wait": wait });
            put(&mut body, "name", name.as_ref().map(|n| json!(n)));
            put(&mut body, "digits", digits.as_ref().map(|d| json!(d)));
            put(&mut body, "ringing_timeout_seconds", ringing_timeout.map(|t| json!(t)));
            let r = api.call("POST", &format!("/v1/rooms/{room}/calls"), Some(&body))?;
            if json {
                return print_json(&r.body);
            }
            let call = parse(&r)?;
            match call["id"].as_u64() {
                Some(id) => println!("call {} answered: participant {id} of room {room}", text(&call["call_id"])),
                None => println!("call {} is ringing (room {room} tells the rest)", text(&call["call_id"])),
            }
        }
        RoomsCommand::Delete { room } => {
            api.call("DELETE", &format!("/v1/rooms/{room}"), None)?;
            if !json {
                println!("deleted room {room}");
            }
        }
        RoomsCommand::Set { room, max_participants, max_speakers } => {
            if max_participants.is_none() && max_speakers.is_none() {
                bail!("nothing to change: give --max-participants and/or --max-speakers");
            }
            let mut body = json!({});
            put(&mut body, "max_participants", max_participants.map(|n| json!(n)));
            put(&mut body, "max_speakers", max_speakers.map(|n| json!(n)));
            let r = api.call("PATCH", &format!("/v1/rooms/{room}"), Some(&body))?;
            return room_changed(&r, json, &format!("room {room} changed"));
        }
        RoomsCommand::Lock { room } => {
            let r = api.call("PATCH", &format!("/v1/rooms/{room}"), Some(&json!({ "locked": true })))?;
            return room_changed(&r, json, &format!("room {room} locked: no new joins"));
        }
        RoomsCommand::Unlock { room } => {
            let r = api.call("PATCH", &format!("/v1/rooms/{room}"), Some(&json!({ "locked": false })))?;
            return room_changed(&r, json, &format!("room {room} unlocked"));
        }
        RoomsCommand::MuteAll { room } => {
            let r = api.call("PATCH", &format!("/v1/rooms/{room}"), Some(&json!({ "mute_all": true })))?;
            if json {
                return print_json(&r.body);
            }
            let body = parse(&r)?;
            let muted: Vec<String> = body["muted"].as_array().map_or(&[][..], Vec::as_slice).iter().map(text).collect();
            match muted.len() {
                0 => println!("room {room}: nobody to mute"),
                n => println!("room {room}: muted {n} participant{}: {}", plural(n), muted.join(", ")),
            }
        }
    }
    Ok(())
}

/// Runs `tutti participants …`.
pub fn participants(args: &ParticipantsArgs) -> anyhow::Result<()> {
    let api = Api::new(&args.conn)?;
    let json = args.conn.json;
    let (room, id, change) = match &args.command {
        ParticipantsCommand::List { room } => {
            let (_, body) = api.room(room)?;
            let participants = body["participants"].as_array().map_or(&[][..], Vec::as_slice);
            if json {
                return print_json(&Value::from(participants.to_vec()).to_string());
            }
            print!("{}", participants_table(participants, &body["speakers"]));
            return Ok(());
        }
        ParticipantsCommand::Kick { room, id, ban } => {
            let query = ban.map(|d| format!("?ban_seconds={}", d.as_secs())).unwrap_or_default();
            api.call("DELETE", &format!("/v1/rooms/{room}/participants/{id}{query}"), None)?;
            if !json {
                match ban {
                    Some(d) => println!("kicked participant {id} from room {room}, banned for {} s", d.as_secs()),
                    None => println!("kicked participant {id} from room {room}"),
                }
            }
            return Ok(());
        }
        ParticipantsCommand::Mute { room, id } => (room, id, json!({ "muted": true })),
        ParticipantsCommand::Unmute { room, id } => (room, id, json!({ "muted": false })),
        ParticipantsCommand::Speak { room, id } => (room, id, json!({ "speak": true })),
        ParticipantsCommand::Unspeak { room, id } => (room, id, json!({ "speak": false })),
        ParticipantsCommand::Attributes { room, id, set } => {
            let mut patch = serde_json::Map::new();
            for pair in set {
                let (k, v) =
                    pair.split_once('=').with_context(|| format!("{pair:?}: expected KEY=VALUE (KEY= removes)"))?;
                patch.insert(k.to_owned(), if v.is_empty() { Value::Null } else { Value::from(v) });
            }
            let r = api.call(
                "PATCH",
                &format!("/v1/rooms/{room}/participants/{id}"),
                Some(&json!({ "attributes": patch })),
            )?;
            if json {
                return print_json(&r.body);
            }
            let body = parse(&r)?;
            println!("participant {id} in room {room}: {}", attributes_text(&body["attributes"]));
            return Ok(());
        }
    };
    let r = api.call("PATCH", &format!("/v1/rooms/{room}/participants/{id}"), Some(&change))?;
    if json {
        return print_json(&r.body);
    }
    let body = parse(&r)?;
    let muted = if body["muted"] == true { "muted" } else { "unmuted" };
    let speak = if body["speak"] == false { "listens only" } else { "may speak" };
    println!("participant {id} in room {room}: {muted}, {speak}");
    Ok(())
}

/// The API at `--url`, called with `--token`.
struct Api<'a> {
    origin: Origin,
    http: Client,
    token: Option<&'a str>,
}

impl<'a> Api<'a> {
    fn new(conn: &'a Connection) -> anyhow::Result<Self> {
        let token = conn.token.as_deref().map(str::trim).filter(|t| !t.is_empty());
        let origin = origin(&conn.url)?;
        let http = Client::new(conn.ca_file.as_deref())?;
        Ok(Self { origin, http, token })
    }

    /// One request (JSON body if any), following a cluster's `307`s; an
    /// answer of 400 or more is the API's error as one sentence.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Response> {
        self.call_at(&self.origin, method, path, body)
    }

    fn call_at(&self, origin: &Origin, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Response> {
        let bytes = body.map(Value::to_string).unwrap_or_default();
        let content_type = body.map(|_| "application/json");
        let mut who = Requester { token: self.token, from: None };
        let (mut origin, mut path) = (origin.clone(), path.to_owned());
        for hop in 0..=MAX_REDIRECTS {
            let r =
                self.http.send(&origin, &who, method, &path, content_type, bytes.as_bytes()).map_err(unreachable)?;
            if (200..300).contains(&r.status) {
                return Ok(r);
            }
            if r.status >= 400 {
                return Err(self.error(&r));
            }
            // A cluster node sends the request to the room's node, with a
            // ticket standing in for the token.
            let location = r.header("location").unwrap_or_default();
            if r.status != 307 || hop == MAX_REDIRECTS {
                bail!("{origin} answered {} (to {location:?}), which the CLI does not follow", r.status);
            }
            (origin, path) = Origin::parse(location)
                .with_context(|| format!("{origin} sent the request on to {location:?}, which the CLI cannot reach"))?;
            who.token = None;
        }
        bail!("more than {MAX_REDIRECTS} redirects")
    }

    /// The API's `{code, message}` as one line; a hint where the token is the problem.
    fn error(&self, r: &Response) -> anyhow::Error {
        let body: Value = serde_json::from_str(&r.body).unwrap_or_default();
        let (code, message) = match (body["code"].as_str(), body["message"].as_str()) {
            (Some(code), Some(message)) => (code.to_owned(), message.to_owned()),
            // Not the API's (a proxy's page?): its start, on one line.
            _ => (String::new(), r.body.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(200).collect()),
        };
        let hint = match (r.status, self.token) {
            (401, None) => " (no token given: pass --token or set TUTTI_TOKEN)",
            (401, Some(_)) => " (check --token / TUTTI_TOKEN)",
            _ => "",
        };
        let code = if code.is_empty() { String::new() } else { format!(" {code}") };
        anyhow!("{}{code}: {message}{hint}", r.status)
    }

    /// `GET /v1/rooms/{room}`; in a cluster, a node that does not hold the
    /// room says which does (`api_url`), and that node is asked in turn.
    fn room(&self, room: &str) -> anyhow::Result<(Response, Value)> {
        let path = format!("/v1/rooms/{room}");
        let r = self.call("GET", &path, None)?;
        let body = parse(&r)?;
        let owner = body["api_url"].as_str().filter(|_| body.get("participants").is_none());
        let Some(owner) = owner else { return Ok((r, body)) };
        let (owner, _) = Origin::parse(owner)
            .with_context(|| format!("the room is on another node, {owner}, which the CLI cannot reach"))?;
        let r = self.call_at(&owner, "GET", &path, None)?;
        let body = parse(&r)?;
        Ok((r, body))
    }
}

/// `--url`: `http(s)://host[:port]`, no path.
fn origin(url: &str) -> anyhow::Result<Origin> {
    let (origin, path) = Origin::parse(url).map_err(|e| anyhow!("--url {e}"))?;
    if path != "/" {
        bail!("--url {url}: give the API as http://HOST:PORT or https://HOST[:PORT], with no path");
    }
    Ok(origin)
}

/// A request that got no answer, as one line.
fn unreachable(e: HttpError) -> anyhow::Error {
    match e {
        HttpError::Transport { origin, reason, .. } => anyhow!("cannot reach {origin}: {reason}"),
        e => anyhow!(e),
    }
}

fn parse(r: &Response) -> anyhow::Result<Value> {
    serde_json::from_str(&r.body).with_context(|| format!("the API answered {} with no JSON body", r.status))
}

/// The API's JSON as it came, one document on one line (or pretty, the same).
fn print_json(body: &str) -> anyhow::Result<()> {
    let body = body.trim();
    println!("{}", if body.is_empty() { "null" } else { body });
    Ok(())
}

fn put(body: &mut Value, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        body[key] = v;
    }
}

/// After `PATCH /v1/rooms/{room}`: a line and the room's row, or the JSON.
fn room_changed(r: &Response, json: bool, line: &str) -> anyhow::Result<()> {
    if json {
        return print_json(&r.body);
    }
    println!("{line}");
    print!("{}", rooms_table(std::slice::from_ref(&parse(r)?)));
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A JSON value as a table cell: strings bare, nothing as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_owned(),
        other => other.to_string(),
    }
}

fn rooms_table(rooms: &[Value]) -> String {
    let mut rows: Vec<Vec<String>> = rooms
        .iter()
        .map(|r| {
            ["id", "participants", "max_participants", "max_speakers", "locked", "node"]
                .iter()
                .map(|k| text(&r[*k]))
                .collect()
        })
        .collect();
    rows.sort();
    table(&["ROOM", "PARTICIPANTS", "MAX PARTICIPANTS", "MAX SPEAKERS", "LOCKED", "NODE"], &rows)
}

fn participants_table(participants: &[Value], speakers: &Value) -> String {
    let speakers = speakers.as_array().map_or(&[][..], Vec::as_slice);
    let mut list: Vec<&Value> = participants.iter().collect();
    list.sort_by_key(|p| p["id"].as_u64());
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|p| {
            let speaking = speakers.contains(&p["id"]);
            vec![
                text(&p["id"]),
                text(&p["name"]),
                text(&p["identity"]),
                text(&p["connected"]),
                text(&p["muted"]),
                text(&Value::Bool(p["listen_only"] != true)),
                text(&Value::Bool(speaking)),
                text(&p["hand"]),
                text(&p["admin"]),
                // A room spread over nodes lists every node's participants.
                text(&p["node"]),
                attributes_text(&p["attributes"]),
            ]
        })
        .collect();
    let header = [
        "ID",
        "NAME",
        "IDENTITY",
        "CONNECTED",
        "MUTED",
        "MAY SPEAK",
        "SPEAKING",
        "HAND",
        "ADMIN",
        "NODE",
        "ATTRIBUTES",
    ];
    table(&header, &rows)
}

/// A participant's attributes in a cell: `key=value` pairs, comma-separated (`-`: none).
fn attributes_text(attributes: &Value) -> String {
    let pairs: Vec<String> = attributes
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    if pairs.is_empty() { "-".to_owned() } else { pairs.join(",") }
}

/// Columns aligned on their widest cell, two spaces apart, a header row first.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(&format!("{cell:<w$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_on_the_widest_cell() {
        let rows = vec![vec!["a-long-room".to_owned(), "3".to_owned()], vec!["r".to_owned(), "12".to_owned()]];
        assert_eq!(table(&["ROOM", "N"], &rows), "ROOM         N\na-long-room  3\nr            12\n");
    }

    #[test]
    fn urls_are_http_or_https_host_and_port() {
        let addr = |url: &str| origin(url).map(|o| o.addr()).ok();
        assert_eq!(addr("http://127.0.0.1:8080"), "127.0.0.1:8080".parse().ok());
        assert_eq!(addr("http://127.0.0.1:9/"), "127.0.0.1:9".parse().ok());
        assert_eq!(addr("http://[::1]:7"), "[::1]:7".parse().ok());
        assert_eq!(addr("http://127.0.0.1"), "127.0.0.1:80".parse().ok());
        assert_eq!(addr("https://127.0.0.1"), "127.0.0.1:443".parse().ok());
        assert!(origin("https://127.0.0.1:8443").is_ok_and(|o| o.is_tls()));
        for (bad, says) in [
            ("ftp://127.0.0.1:8080", "unknown scheme"),
            ("127.0.0.1:8080", "http://HOST:PORT"),
            ("http://127.0.0.1:8080/v1", "no path"),
        ] {
            let e = origin(bad).expect_err(bad).to_string();
            assert!(e.starts_with("--url") && e.contains(says), "{bad}: {e}");
        }
    }
}
