//! Joining over the server's API: creating a run's rooms (following a
//! cluster's redirect), and joining one client through the room's WebSocket
//! or over REST, with its UDP socket or ICE-TCP connection to the answer's
//! candidate.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use tutti_client::{Client, Requester};
use tutti_rtc::ClientPeer;

use super::client::NewLink;
use crate::LoadError;
use crate::arrival;
use crate::events::EventSocket;

/// The API caller the generator is: with the token, if any.
pub(crate) fn caller(token: Option<&str>) -> Requester<'_> {
    Requester { token, from: None }
}

/// Redirects (`307`, WebSocket `moved`) a request follows: a cluster
/// node sends a client to the room's owner once.
const MAX_REDIRECTS: usize = 2;

/// Creates the room unless it exists, following a cluster's redirect to the
/// node that holds it. Returns that node's API address and its id (when
/// the answer names it). With `record`, the room records from its first join;
/// with `per_speaker` too, a file per speaker beside the mix (started on the
/// room's node right after it is made).
pub(crate) fn ensure_room_at(
    http: &Client,
    api: SocketAddr,
    token: Option<&str>,
    room: &str,
    record: bool,
    per_speaker: bool,
) -> Result<(SocketAddr, Option<String>), LoadError> {
    let body = if record && !per_speaker {
        serde_json::json!({ "id": room, "record": true })
    } else {
        serde_json::json!({ "id": room })
    };
    let body = body.to_string();
    let (r, at, _) = http
        .request_following(
            api,
            &caller(token),
            "POST",
            "/v1/rooms",
            Some("application/json"),
            body.as_bytes(),
            MAX_REDIRECTS,
        )
        .map_err(|e| LoadError::Api(format!("creating room '{room}': {e}")))?;
    if r.status == 201 || r.code() == "room_exists" {
        let node =
            serde_json::from_str::<serde_json::Value>(&r.body).ok().and_then(|v| v["node"].as_str().map(str::to_owned));
        if record && per_speaker {
            let path = format!("/v1/rooms/{room}/recording");
            let (s, _, _) = http
                .request_following(
                    at,
                    &caller(token),
                    "POST",
                    &path,
                    Some("application/json"),
                    br#"{"per_speaker":true}"#,
                    MAX_REDIRECTS,
                )
                .map_err(|e| LoadError::Api(format!("recording room '{room}' per speaker: {e}")))?;
            if s.status != 201 && s.status != 200 {
                return Err(LoadError::Api(format!("recording room '{room}' per speaker: {} {}", s.status, s.body)));
            }
        }
        Ok((at, node))
    } else {
        Err(LoadError::Api(format!("creating room '{room}': {} {}", r.status, r.body)))
    }
}

/// The address of the first host candidate in an SDP: the server's media address.
fn candidate_addr(sdp: &str) -> Option<SocketAddr> {
    let line = sdp.lines().find(|l| l.starts_with("a=candidate:"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    format!("{}:{}", f.get(4)?, f.get(5)?).parse().ok()
}

/// The address of the first passive TCP candidate in an SDP (ICE-TCP).
fn tcp_candidate_addr(sdp: &str) -> Option<SocketAddr> {
    let line =
        sdp.lines().find(|l| l.starts_with("a=candidate:") && l.contains(" tcp ") && l.contains("tcptype passive"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let ip: std::net::IpAddr = f.get(4)?.parse().ok()?;
    Some(SocketAddr::new(ip, f.get(5)?.parse().ok()?))
}

/// A joined client, before its thread takes it.
pub(super) struct JoinedPeer {
    pub(super) peer: ClientPeer,
    pub(super) link: NewLink,
    pub(super) ws: Option<EventSocket>,
    pub(super) location: String,
    pub(super) media: Option<SocketAddr>,
    /// The API address that answered the join (the room's node).
    pub(super) node: SocketAddr,
    /// Redirects followed to get there.
    pub(super) redirects: usize,
}

/// Joins one client into `room`: through the room's WebSocket (`join`
/// message, the socket kept open) when `websocket`, else over REST.
pub(super) fn join_one(
    http: &Client,
    api: SocketAddr,
    token: Option<&str>,
    room: &str,
    websocket: bool,
    name: &str,
    tcp: bool,
) -> Result<JoinedPeer, String> {
    let (mut peer, offer, socket) = if tcp {
        let (peer, offer) =
            ClientPeer::new_tcp(std::net::Ipv4Addr::LOCALHOST.into(), Instant::now()).map_err(|e| e.to_string())?;
        (peer, offer, None)
    } else {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("binding a UDP socket: {e}"))?;
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        arrival::enable(&socket).map_err(|e| format!("SO_TIMESTAMPNS: {e}"))?;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        let (peer, offer) = ClientPeer::new(local, Instant::now()).map_err(|e| e.to_string())?;
        (peer, offer, Some(socket))
    };
    // ICE-TCP: the connection goes to the answer's passive TCP candidate.
    let link = |answer: &str| -> Result<NewLink, String> {
        match socket {
            Some(s) => Ok(NewLink::Udp(s)),
            None => {
                let server = tcp_candidate_addr(answer).ok_or("the answer has no TCP candidate (is media_tcp off?)")?;
                let s = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(5))
                    .map_err(|e| format!("connecting to the TCP candidate {server}: {e}"))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                let _ = s.set_nodelay(true);
                Ok(NewLink::Tcp(s, server))
            }
        }
    };
    if websocket {
        let (mut ws, node, redirects) = EventSocket::connect_following(http, api, room, token, MAX_REDIRECTS)?;
        let (id, answer) = ws.join(&offer, name)?;
        ws.set_nonblocking()?;
        peer.accept_answer(&answer, Instant::now()).map_err(|e| e.to_string())?;
        let location = format!("/v1/rooms/{room}/participants/{id}");
        let link = link(&answer)?;
        let media = candidate_addr(&answer);
        return Ok(JoinedPeer { peer, link, ws: Some(ws), location, media, node, redirects });
    }
    // JSON `{sdp, name}` rather than WHIP's bare SDP: the participant
    // carries the client's name, as a WebSocket join's does.
    let path = format!("/v1/rooms/{room}/participants");
    let body = serde_json::json!({ "sdp": offer, "name": name }).to_string();
    let (r, node, redirects) = http
        .request_following(api, &caller(token), "POST", &path, Some("application/json"), body.as_bytes(), MAX_REDIRECTS)
        .map_err(|e| format!("join request: {e}"))?;
    if r.status != 201 {
        return Err(format!("join refused: {} {}", r.status, r.body.trim()));
    }
    let answer = serde_json::from_str::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["sdp"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("join answer without an SDP: {}", r.body.trim()))?;
    peer.accept_answer(&answer, Instant::now()).map_err(|e| e.to_string())?;
    let location = r.header("location").unwrap_or_default().to_owned();
    let link = link(&answer)?;
    Ok(JoinedPeer { peer, link, ws: None, location, media: candidate_addr(&answer), node, redirects })
}
