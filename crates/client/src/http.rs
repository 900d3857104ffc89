//! A minimal blocking HTTP/1.1 client for tutti's tools and tests: no TLS,
//! one request per connection, a 10 s timeout; redirects (`307` only) followed
//! on request ([`request_following`]).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code (0 if the server answered nothing parseable).
    pub status: u16,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// Body, as text.
    pub body: String,
}

impl Response {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `code` of a JSON error body (empty when there is none).
    pub fn code(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Sends one request and reads the whole response (10 s timeout).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Response> {
    request_as(addr, &Requester::default(), method, path, content_type, body)
}

/// Who sends a request: its access token, and the local address it comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Requester<'a> {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<&'a str>,
    /// The local address to connect from (e.g. another loopback address,
    /// `127.0.0.2`, to be another client for the join rate limit).
    pub from: Option<IpAddr>,
}

impl<'a> Requester<'a> {
    /// A requester with a token.
    pub fn token(token: &'a str) -> Self {
        Self { token: Some(token), from: None }
    }
}

fn connect(addr: SocketAddr, from: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(ip) = from else { return TcpStream::connect_timeout(&addr, Duration::from_secs(10)) };
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(10))?;
    Ok(socket.into())
}

/// [`request`] as `requester`.
pub fn request_as(
    addr: SocketAddr,
    requester: &Requester<'_>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = connect(addr, requester.from)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if let Some(token) = requester.token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    // The server may answer (413) and close before reading a large body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Ok(Response { status, headers, body })
}

/// [`request_as`], following up to `max_redirects` `307`s (a cluster node
/// redirecting to the node holding the room): the request goes again, body
/// and all, to the `Location`, without the token (the redirect's ticket
/// stands in for it). Returns the last answer, the address that gave it and
/// the redirects followed. A `307` whose `Location` is not `http://ip:port/…`,
/// or one past `max_redirects`, is returned as it is.
pub fn request_following(
    addr: SocketAddr,
    requester: &Requester<'_>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
    max_redirects: usize,
) -> std::io::Result<(Response, SocketAddr, usize)> {
    let (mut addr, mut path) = (addr, path.to_owned());
    let mut who = *requester;
    let mut redirects = 0;
    loop {
        let r = request_as(addr, &who, method, &path, content_type, body)?;
        let next = (r.status == 307 && redirects < max_redirects)
            .then(|| r.header("location").and_then(crate::tone::split_location))
            .flatten();
        match next {
            Some((a, p)) => {
                (addr, path) = (a, p);
                who.token = None;
                redirects += 1;
            }
            None => return Ok((r, addr, redirects)),
        }
    }
}

/// The body of a `Transfer-Encoding: chunked` response (what could be read of it).
fn dechunk(mut raw: &str) -> String {
    let mut body = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let size = size.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else { break };
        if n == 0 {
            break;
        }
        let Some(chunk) = rest.get(..n) else {
            body.push_str(rest);
            break;
        };
        body.push_str(chunk);
        raw = rest.get(n..).unwrap_or("").trim_start_matches("\r\n");
    }
    body
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(super::dechunk("5\r\nhello\r\n7;x=1\r\n, world\r\n0\r\n\r\n"), "hello, world");
    }
}
