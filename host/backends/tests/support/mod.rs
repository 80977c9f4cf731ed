//! A loopback HTTP/1.1 server for provider tests: it records every request it reads and
//! answers each with the next reply from a queue the test scripted, including the failures a
//! real provider or network produces (a hang, a body cut short, a body that is not JSON).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then never answer (the connection stays open).
    Hang,
    /// Headers announcing more body than is sent, part of the body, then the connection closes.
    Truncated { status: u16, body: String },
    /// A response without `Content-Length`, its body sent in 64 KiB chunks
    /// (`Transfer-Encoding: chunked`), so the client learns its size only by reading it.
    Chunked { status: u16, body: String },
}

impl Reply {
    /// A JSON response.
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, &body.to_string())
    }

    /// A response whose body is `body` as is (not necessarily JSON).
    pub fn raw(status: u16, body: &str) -> Self {
        Self::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_owned(),
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Self::Full { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

/// A request as the server read it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the whole request had been read.
    pub at: Instant,
}

impl Recorded {
    /// The value of header `name` (any case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<Recorded>,
}

/// The server; it stops accepting when dropped.
pub struct TestServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl TestServer {
    /// Listens on 127.0.0.1 on a free port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Self {
            addr,
            state,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the answer to the next request.
    pub fn push(&self, reply: Reply) {
        self.state.lock().unwrap().replies.push_back(reply);
    }

    /// Every request read so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves one connection: requests one after another (clients keep connections alive).
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let reply = {
            let mut state = state.lock().unwrap();
            state.requests.push(request);
            state.replies.pop_front()
        };
        // A request nobody scripted gets a non-retryable status, so the test fails fast and
        // says why.
        let reply = reply.unwrap_or_else(|| Reply::raw(418, "test server: no scripted reply left"));
        match reply {
            Reply::Full {
                status,
                headers,
                body,
            } => {
                let mut head = status_line(status);
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
                let written = async {
                    stream.write_all(head.as_bytes()).await?;
                    stream.write_all(body.as_bytes()).await?;
                    stream.flush().await
                };
                if written.await.is_err() {
                    return;
                }
            }
            Reply::Chunked { status, body } => {
                let written = async {
                    let head = format!(
                        "{}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                        status_line(status)
                    );
                    stream.write_all(head.as_bytes()).await?;
                    for chunk in body.as_bytes().chunks(64 << 10) {
                        stream
                            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                            .await?;
                        stream.write_all(chunk).await?;
                        stream.write_all(b"\r\n").await?;
                    }
                    stream.write_all(b"0\r\n\r\n").await?;
                    stream.flush().await
                };
                if written.await.is_err() {
                    return;
                }
            }
            Reply::Hang => std::future::pending::<()>().await,
            Reply::Truncated { status, body } => {
                let head = format!(
                    "{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    status_line(status),
                    body.len() + 100
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.flush().await;
                return;
            }
        }
    }
}

fn status_line(status: u16) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        418 => "I'm a teapot",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    };
    format!("HTTP/1.1 {status} {reason}\r\n")
}

/// Reads one request (request line, headers, `Content-Length` body); `None` at end of stream.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at;
        }
        if read_more(stream, buffer).await == 0 {
            return None;
        }
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).expect("request head is UTF-8");
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| {
            value.parse().expect("Content-Length is a number")
        });
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        if read_more(stream, buffer).await == 0 {
            return None;
        }
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    Some(Recorded {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> usize {
    let mut chunk = [0u8; 8192];
    let read = stream.read(&mut chunk).await.unwrap_or(0);
    buffer.extend_from_slice(&chunk[..read]);
    read
}
