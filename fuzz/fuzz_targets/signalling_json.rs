//! The signalling surface: every REST route with any method, token, content
//! type and body, and WebSocket messages, through the real router and
//! handlers over a server state with no sockets
//! (`tutti_server::fuzz::Api`); plus the raw parsers (JSON bodies,
//! WebSocket messages, access tokens). Never a panic, never a 500, and
//! after each input every room, participant and peer is freed.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tutti_server::fuzz::{Api, Token, signalling};

const ROOMS: [&str; 3] = ["a", "b", "room-1"];

#[derive(Arbitrary, Debug)]
enum Tok<'a> {
    None,
    Admin,
    Participant(u8),
    Listener(u8),
    Expired(u8),
    Raw(&'a str),
}

#[derive(Arbitrary, Debug)]
enum Path<'a> {
    Rooms,
    Room(u8),
    Participants(u8),
    Participant(u8, u64),
    Ws(u8),
    Health,
    Raw(&'a str),
}

#[derive(Arbitrary, Debug)]
enum Body<'a> {
    Bytes(&'a [u8]),
    /// A valid offer (WHIP or JSON, with a name).
    Offer {
        json: bool,
        name: &'a str,
    },
    Json(&'a str),
}

#[derive(Arbitrary, Debug)]
enum Op<'a> {
    Parse(&'a [u8]),
    Request { method: u8, path: Path<'a>, token: Tok<'a>, content_type: u8, body: Body<'a> },
    Ws { room: u8, token: Tok<'a>, offer: bool, text: &'a str },
}

static API: LazyLock<Api> = LazyLock::new(|| Api::new().expect("a fuzzing API"));
static OFFER: LazyLock<String> = LazyLock::new(tutti_fuzz::offer);

fn token<'a>(t: &Tok<'a>) -> Token<'a> {
    let room = |i: &u8| ROOMS[usize::from(*i) % ROOMS.len()];
    match t {
        Tok::None => Token::None,
        Tok::Admin => Token::Admin,
        Tok::Participant(i) => Token::Participant(room(i)),
        Tok::Listener(i) => Token::Listener(room(i)),
        Tok::Expired(i) => Token::Expired(room(i)),
        Tok::Raw(s) => Token::Raw(s),
    }
}

fuzz_target!(|ops: Vec<Op<'_>>| {
    let api = &*API;
    let mut me = [None; ROOMS.len()];
    for op in ops.into_iter().take(32) {
        match op {
            Op::Parse(bytes) => signalling(bytes),
            Op::Request { method, path, token: t, content_type, body } => {
                let method = ["GET", "POST", "PATCH", "DELETE", "PUT"][usize::from(method) % 5];
                let room = |i: u8| ROOMS[usize::from(i) % ROOMS.len()];
                let path = match path {
                    Path::Rooms => "/v1/rooms".to_owned(),
                    Path::Room(i) => format!("/v1/rooms/{}", room(i)),
                    Path::Participants(i) => format!("/v1/rooms/{}/participants", room(i)),
                    Path::Participant(i, id) => format!("/v1/rooms/{}/participants/{}", room(i), id % 8),
                    Path::Ws(i) => format!("/v1/rooms/{}/ws", room(i)),
                    Path::Health => "/readyz".to_owned(),
                    Path::Raw(p) => p.to_owned(),
                };
                let ct = ["application/json", "application/sdp", "", "text/plain; charset=utf-8"]
                    [usize::from(content_type) % 4];
                let (ct, body): (&str, Vec<u8>) = match body {
                    Body::Bytes(b) => (ct, b.to_vec()),
                    Body::Offer { json: false, .. } => ("application/sdp", OFFER.as_bytes().to_vec()),
                    Body::Offer { json: true, name } => {
                        let b = format!(r#"{{"sdp":{},"name":{}}}"#, json_string(&OFFER), json_string(name));
                        ("application/json", b.into_bytes())
                    }
                    Body::Json(s) => ("application/json", s.as_bytes().to_vec()),
                };
                api.request(method, &path, token(&t), ct, &body);
            }
            Op::Ws { room, token: t, offer, text } => {
                let i = usize::from(room) % ROOMS.len();
                let text = if offer {
                    format!(r#"{{"type":"join","sdp":{},"name":{}}}"#, json_string(&OFFER), json_string(text))
                } else {
                    text.to_owned()
                };
                let _ = api.ws_message(ROOMS[i], token(&t), &mut me[i], &text);
            }
        }
    }
    api.reset();
});

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
