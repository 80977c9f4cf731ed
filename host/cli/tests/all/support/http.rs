//! A bare HTTP/1.1 client for the loopback servers the tests start (`flowbox serve`, Restate's
//! admin API): one request a connection, its answer read to the close, a chunked body joined.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// An HTTP answer.
pub(crate) struct Answer {
    pub status: u16,
    /// The status line and the headers, lowercased.
    pub head: String,
    pub body: String,
}

/// Sends `request` (its head and body, as written on the wire) to `host` (`ADDR:PORT`).
pub(crate) fn exchange(host: &str, request: &str) -> Answer {
    let mut stream = TcpStream::connect(host).expect("the server listens");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = String::from_utf8(body).expect("a UTF-8 body");
    Answer { status, head, body }
}

/// `GET path` from `host`.
pub(crate) fn get(host: &str, path: &str) -> Answer {
    exchange(
        host,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}

/// POSTs `body` to `url` and returns the JSON answer, which must be a 200.
pub(crate) fn post_json(url: &str, body: &Value) -> Value {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let body = body.to_string();
    let answer = exchange(
        host,
        &format!(
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nAccept: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(answer.status, 200, "{}\r\n\r\n{}", answer.head, answer.body);
    serde_json::from_str(&answer.body).unwrap_or_else(|error| panic!("{error}: {}", answer.body))
}

/// The body of a chunked answer.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|size| usize::from_str_radix(size.trim(), 16).ok())
            .unwrap_or(0);
        let after = &rest[end + 2..];
        if size == 0 || size > after.len() {
            break;
        }
        body.extend_from_slice(&after[..size]);
        rest = after[size..]
            .strip_prefix(b"\r\n")
            .unwrap_or(&after[size..]);
    }
    body
}
