//! A loopback HTTP/1.1 server for provider tests: it records every request it reads and
//! answers each with the next reply from a queue the test scripted, or from a function of the
//! request when the queue is empty, including the failures a real provider or network produces
//! (a hang, a body cut short, a body that is not JSON, a rate limit with `Retry-After`).
//!
//! It runs on a runtime of its own, so synchronous tests (the CLI's) and async ones use it
//! alike; [`Protocol`] writes the bodies each provider protocol answers with.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use flowbox_backends::{ToolCall, Usage};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Full {
        /// The HTTP status.
        status: u16,
        /// Headers besides `Content-Length`.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// Read the request, then never answer (the connection stays open).
    Hang,
    /// Headers announcing more body than is sent, part of the body, then the connection closes.
    Truncated {
        /// The HTTP status.
        status: u16,
        /// The part of the body that is sent.
        body: String,
    },
    /// A response without `Content-Length`, its body sent in 64 KiB chunks
    /// (`Transfer-Encoding: chunked`), so the client learns its size only by reading it.
    Chunked {
        /// The HTTP status.
        status: u16,
        /// The whole body.
        body: String,
    },
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
    /// `POST`, say.
    pub method: String,
    /// The request target: `/v1/chat/completions`.
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as sent.
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

/// Answers a request when no scripted reply is left.
type Responder = dyn Fn(&Recorded) -> Reply + Send + Sync;

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<Recorded>,
    responder: Option<Arc<Responder>>,
}

/// The server; it stops when dropped.
pub struct TestServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    runtime: Option<Runtime>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TestServer {
    /// Listens on 127.0.0.1 on a free port, answering from the queue ([`Self::push`]).
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the test server's runtime");
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("a tokio listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Self {
            addr,
            state,
            runtime: Some(runtime),
        }
    }

    /// Like [`Self::start`], answering every request the queue does not with `responder`.
    pub fn answering(responder: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let server = Self::start();
        server.state.lock().unwrap().responder = Some(Arc::new(responder));
        server
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
        // Without waiting: a connection may hang on purpose, and a test may drop the server
        // from inside its own runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Serves one connection: requests one after another (clients keep connections alive).
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buffer = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let reply = {
            let mut state = state.lock().unwrap();
            let reply = state.replies.pop_front().or_else(|| {
                let responder = state.responder.clone()?;
                Some(responder(&request))
            });
            state.requests.push(request);
            reply
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

/// The input and output tokens every OpenAI reply written here reports.
const OPENAI_USAGE: (u64, u64) = (21, 4);

/// A provider's wire protocol, for tests that run once per protocol: the replies and error
/// bodies each documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI-compatible Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Protocol {
    /// Both, for a table-driven test.
    pub const BOTH: [Protocol; 2] = [Protocol::OpenAi, Protocol::Anthropic];

    /// The path its requests go to, under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Self::OpenAi => "/v1/chat/completions",
            Self::Anthropic => "/v1/messages",
        }
    }

    /// The tokens each reply written here reports: 21 input and 4 output (OpenAI), 30 and 7
    /// (Anthropic).
    pub fn usage(self) -> Usage {
        match self {
            Self::OpenAi => Usage::reported(OPENAI_USAGE.0, OPENAI_USAGE.1),
            Self::Anthropic => Usage::reported(30, 7),
        }
    }

    /// A final text reply.
    pub fn text(self, text: &str) -> Value {
        match self {
            Self::OpenAi => openai_reply(
                json!({"role": "assistant", "content": text}),
                "stop",
                OPENAI_USAGE,
            ),
            Self::Anthropic => anthropic_reply(json!([{"type": "text", "text": text}]), "end_turn"),
        }
    }

    /// A reply that says `text` (nothing when it is empty) and asks for `calls`. OpenAI's
    /// arguments are JSON text, written pretty-printed so that a test sees whether a client
    /// parsed them or passed the text on.
    pub fn tool_calls(self, text: &str, calls: &[ToolCall]) -> Value {
        match self {
            Self::OpenAi => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|call| {
                        let arguments = serde_json::to_string_pretty(&call.arguments)
                            .expect("arguments serialize");
                        json!({"id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": arguments}})
                    })
                    .collect();
                // A turn that only calls tools has no content, not an empty one.
                let content = if text.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                };
                openai_reply(
                    json!({"role": "assistant", "content": content, "tool_calls": calls}),
                    "tool_calls",
                    OPENAI_USAGE,
                )
            }
            Self::Anthropic => {
                let text = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
                let calls = calls.iter().map(|call| {
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
                });
                anthropic_reply(text.into_iter().chain(calls).collect(), "tool_use")
            }
        }
    }

    /// A reply cut off at the output limit after `text`.
    pub fn cut_off(self, text: &str) -> Value {
        match self {
            Self::OpenAi => openai_reply(
                json!({"role": "assistant", "content": text}),
                "length",
                OPENAI_USAGE,
            ),
            Self::Anthropic => {
                anthropic_reply(json!([{"type": "text", "text": text}]), "max_tokens")
            }
        }
    }

    /// An error body in the provider's documented shape, `kind` its error type.
    pub fn error(self, kind: &str, message: &str) -> Value {
        match self {
            Self::OpenAi => {
                json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
            }
            Self::Anthropic => {
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        }
    }

    /// A 429 asking to wait `retry_after` (the header's text: seconds or an HTTP date).
    pub fn rate_limited(self, message: &str, retry_after: &str) -> Reply {
        let kind = match self {
            Self::OpenAi => "requests",
            Self::Anthropic => "rate_limit_error",
        };
        Reply::json(429, self.error(kind, message)).header("Retry-After", retry_after)
    }
}

/// A Chat Completions reply with one choice.
pub fn openai_reply(message: Value, finish_reason: &str, (input, output): (u64, u64)) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
    })
}

/// A Messages reply with `content` blocks; it reports 30 input and 7 output tokens.
pub fn anthropic_reply(content: Value, stop_reason: &str) -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 30, "output_tokens": 7},
    })
}
