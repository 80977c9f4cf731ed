//! The network doors end to end — `flowbox serve` and `flowbox mcp --listen` as real processes:
//! no listening where other machines reach without a token, the `Host`/`Origin`/fetch-metadata
//! rules, bearer tokens and the web view's one-time login links, MCP's header rules, and slow or
//! silent clients cut off while a real one is served.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::http::{Answer, exchange};
use crate::support::{RunToEnd, assert_exit, command_with_db, wait_until, write_file};

/// A token long enough for the door.
const TOKEN: &str = "door-test-token-0123456789";

/// A listening `flowbox serve` or `flowbox mcp --listen`, stopped by its pid when dropped, and
/// every line it wrote to stderr.
struct Listening {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Listening {
    /// Starts `command` and waits for the line that names its address (`http://ADDR:PORT`).
    fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (found, port) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let seen = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(number) = line
                    .split("http://")
                    .nth(1)
                    .and_then(|rest| rest.split('/').next())
                    .and_then(|address| address.rsplit(':').next())
                    .and_then(|number| number.parse::<u16>().ok())
                {
                    seen.lock().unwrap().push(line);
                    let _ = found.send(number);
                } else {
                    seen.lock().unwrap().push(line);
                }
            }
        });
        let port = port
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("never listened: {:?}", lines.lock().unwrap()));
        Self { child, port, lines }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends `method path` with the extra header lines `headers` (each ending in CRLF) and
    /// `body`.
    fn send(&self, method: &str, path: &str, headers: &str, body: &str) -> Answer {
        let host = self.host();
        let has_host = headers
            .lines()
            .any(|line| line.to_lowercase().starts_with("host:"));
        let host_line = if has_host {
            String::new()
        } else {
            format!("Host: {host}\r\n")
        };
        exchange(
            &host,
            &format!(
                "{method} {path} HTTP/1.1\r\n{host_line}{headers}Connection: close\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    }

    /// The stderr lines so far.
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The newest login code the server printed once there is one not in `spent`.
    fn login_code(&self, spent: &[String]) -> String {
        let mut code = None;
        wait_until(Duration::from_secs(10), "no new login link", || {
            code = self
                .lines()
                .iter()
                .filter_map(|line| line.split("/login?code=").nth(1))
                .map(|code| code.trim().to_owned())
                .rfind(|code| !spent.contains(code));
            code.is_some()
        });
        code.unwrap()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(db: &Path, args: &[&str]) -> Command {
    let mut command = command_with_db(db, &["serve"]);
    command.args(args).env_remove("FLOWBOX_TOKEN");
    command
}

fn mcp(db: &Path, args: &[&str]) -> Command {
    let mut command = command_with_db(db, &["mcp", "--backend", "fake"]);
    command.args(args).env_remove("FLOWBOX_TOKEN");
    command
}

/// An MCP `initialize` request.
fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "doors", "version": "1"}}})
    .to_string()
}

const MCP_HEADERS: &str =
    "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n";

#[test]
fn a_door_where_other_machines_reach_needs_a_token_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    for command in [
        serve(&db, &["--listen", "0.0.0.0:0"]),
        mcp(&db, &["--listen", "0.0.0.0:0"]),
    ] {
        let mut command = command;
        let output = command.run_to_end();
        assert_exit(&output, 2);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("0.0.0.0")
                && stderr.contains("--token-file")
                && stderr.contains("--insecure"),
            "{stderr}"
        );
    }
    // Said in so many words, it starts, and says so.
    let open = Listening::start(serve(&db, &["--listen", "0.0.0.0:0", "--insecure"]));
    assert!(
        open.lines()[0].contains("insecure: anyone who reaches it"),
        "{:?}",
        open.lines()
    );
    assert_eq!(open.send("GET", "/api/threads", "", "").status, 200);
    drop(open);
    let open = Listening::start(mcp(&db, &["--listen", "0.0.0.0:0", "--insecure"]));
    wait_until(Duration::from_secs(10), "no scope line", || {
        open.lines().iter().any(|l| l.contains("insecure"))
    });
}

#[test]
fn bad_door_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let short = write_file(dir.path(), "short", "tiny\n");
    let good = write_file(dir.path(), "good", TOKEN);
    let cases: Vec<(Command, &str)> = vec![
        (serve(&db, &["--token-file", &short]), "16"),
        (
            serve(
                &db,
                &["--token-file", &dir.path().join("none").to_string_lossy()],
            ),
            "none",
        ),
        (
            {
                let mut both = serve(&db, &["--token-file", &good]);
                both.env("FLOWBOX_TOKEN", TOKEN);
                both
            },
            "not both",
        ),
        (
            {
                let mut short_env = serve(&db, &[]);
                short_env.env("FLOWBOX_TOKEN", "short");
                short_env
            },
            "FLOWBOX_TOKEN",
        ),
        (
            serve(&db, &["--allow-origin", "evil.example"]),
            "--allow-origin",
        ),
        (serve(&db, &["--read-timeout", "0"]), "--read-timeout"),
        (serve(&db, &["--idle-timeout=-1"]), "--idle-timeout"),
        (serve(&db, &["--read-timeout", "inf"]), "--read-timeout"),
        (serve(&db, &["--max-connections", "0"]), "--max-connections"),
        (mcp(&db, &["--token-file", &good]), "--listen"),
        (mcp(&db, &["--insecure"]), "--listen"),
    ];
    for (mut command, says) in cases {
        let output = command.run_to_end();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_exit(&output, 2);
        assert!(stderr.contains(says), "{command:?}: {stderr}");
        assert!(!stderr.contains(TOKEN), "a token never shows: {stderr}");
    }
}

#[test]
fn the_web_view_answers_only_its_own_host_and_origins() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let view = Listening::start(serve(
        &db,
        &[
            "--listen",
            "127.0.0.1:0",
            "--allow-origin",
            "https://ok.example",
        ],
    ));
    let port = view.port;
    let ok = view.send("GET", "/api/threads", "", "");
    assert_eq!(ok.status, 200, "{}", ok.body);
    for header in [
        "x-content-type-options: nosniff",
        "cross-origin-resource-policy: same-origin",
        "x-frame-options: deny",
        "referrer-policy: no-referrer",
    ] {
        assert!(ok.head.contains(header), "{header} in {}", ok.head);
    }
    assert!(!ok.head.contains("access-control-allow"), "{}", ok.head);

    let refused = [
        // A page whose name was rebound to 127.0.0.1.
        format!("Host: attacker.example:{port}\r\n"),
        "Origin: https://evil.example\r\n".to_owned(),
        format!("Origin: http://attacker.example:{port}\r\n"),
        "Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: cors\r\n".to_owned(),
        "Sec-Fetch-Site: same-site\r\nSec-Fetch-Mode: no-cors\r\n".to_owned(),
    ];
    for headers in &refused {
        for path in ["/api/threads", "/", "/api/threads/x/events"] {
            let answer = view.send("GET", path, headers, "");
            assert_eq!(answer.status, 403, "{headers}{path}: {}", answer.body);
            let error: Value = serde_json::from_str(&answer.body).unwrap();
            assert!(error["error"].is_string(), "{error}");
        }
    }
    let admitted = [
        format!("Host: localhost:{port}\r\n"),
        format!("Origin: http://127.0.0.1:{port}\r\nSec-Fetch-Site: same-origin\r\n"),
        format!("Origin: http://localhost:{port}\r\n"),
        "Origin: https://ok.example\r\n".to_owned(),
        // Following a link from elsewhere is a navigation: allowed, the page is the view's.
        "Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: navigate\r\n".to_owned(),
    ];
    for headers in &admitted {
        let answer = view.send("GET", "/api/threads", headers, "");
        assert_eq!(answer.status, 200, "{headers}: {}", answer.body);
    }
}

#[test]
fn the_web_view_behind_a_token_takes_a_bearer_or_a_one_time_login() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let mut command = serve(&db, &["--listen", "0.0.0.0:0"]);
    command.env("FLOWBOX_TOKEN", TOKEN);
    let view = Listening::start(command);
    assert!(
        view.lines()[0].contains("token required"),
        "{:?}",
        view.lines()
    );

    let refused = view.send("GET", "/api/threads", "", "");
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(
        refused.head.contains("www-authenticate: bearer"),
        "{}",
        refused.head
    );
    assert!(serde_json::from_str::<Value>(&refused.body).unwrap()["error"].is_string());
    for wrong in [
        "Authorization: Bearer door-test-token-0123456788\r\n",
        "Authorization: Bearer door-test-token\r\n",
        "Authorization: Basic ZG9vcjp0ZXN0\r\n",
        "Cookie: flowbox_session=door-test-token-0123456789\r\n",
    ] {
        assert_eq!(view.send("GET", "/", wrong, "").status, 401, "{wrong}");
    }
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(view.send("GET", "/api/threads", &bearer, "").status, 200);
    // With a token, any name may reach it (a reverse proxy, a machine's own name).
    let named = format!("{bearer}Host: flowbox.internal:8080\r\n");
    assert_eq!(view.send("GET", "/api/threads", &named, "").status, 200);

    // A browser: the printed link sets a session cookie, once.
    let code = view.login_code(&[]);
    let login = view.send("GET", &format!("/login?code={code}"), "", "");
    assert_eq!(login.status, 303, "{}", login.body);
    assert!(login.head.contains("location: /\r\n"), "{}", login.head);
    let cookie = login
        .head
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie in {}", login.head))
        .to_owned();
    assert!(
        cookie.contains("httponly") && cookie.contains("samesite=strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap();
    // The head was lowercased; the cookie's value is lowercase hex, its name lowercase too.
    let with_cookie = format!("Cookie: theme=dark; {session}\r\n");
    assert_eq!(
        view.send("GET", "/api/threads", &with_cookie, "").status,
        200
    );
    assert_eq!(view.send("GET", "/", &with_cookie, "").status, 200);
    let again = view.send("GET", &format!("/login?code={code}"), "", "");
    assert_eq!(again.status, 401, "a spent code: {}", again.body);
    assert_eq!(view.send("GET", "/login?code=nonsense", "", "").status, 401);
    assert_eq!(view.send("GET", "/login", "", "").status, 401);
    // A new link was printed after the use, and works once; 64 browser sessions are kept, the
    // oldest dropped first.
    let mut spent = vec![code];
    let mut newest = String::new();
    for _ in 0..64 {
        let next = view.login_code(&spent);
        let login = view.send("GET", &format!("/login?code={next}"), "", "");
        assert_eq!(login.status, 303, "{}", login.body);
        newest = login
            .head
            .lines()
            .find_map(|line| line.strip_prefix("set-cookie: "))
            .and_then(|cookie| cookie.split(';').next())
            .expect("a session cookie")
            .to_owned();
        spent.push(next);
    }
    let newest = format!("Cookie: {newest}\r\n");
    assert_eq!(view.send("GET", "/api/threads", &newest, "").status, 200);
    assert_eq!(
        view.send("GET", "/api/threads", &with_cookie, "").status,
        401,
        "the 65th session pushed out the first"
    );
    assert!(
        !view.lines().iter().any(|line| line.contains(TOKEN)),
        "the token never shows"
    );
}

#[test]
fn mcp_over_http_checks_origin_host_and_its_headers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let server = Listening::start(mcp(
        &db,
        &[
            "--listen",
            "127.0.0.1:0",
            "--allow-origin",
            "https://ok.example:*",
        ],
    ));
    let port = server.port;
    let post = |headers: &str| {
        server.send(
            "POST",
            "/mcp",
            &format!("{MCP_HEADERS}{headers}"),
            &initialize(),
        )
    };
    assert_eq!(post("").status, 200);
    for origin in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
        "https://ok.example:8443".to_owned(),
    ] {
        let answer = post(&format!("Origin: {origin}\r\n"));
        assert_eq!(answer.status, 200, "{origin}: {}", answer.body);
    }
    for refused in [
        "Origin: https://evil.example\r\n".to_owned(),
        "Origin: null\r\n".to_owned(),
        format!("Origin: http://attacker.example:{port}\r\n"),
        format!("Host: attacker.example:{port}\r\n"),
    ] {
        let answer = post(&refused);
        assert_eq!(answer.status, 403, "{refused}: {}", answer.body);
    }

    // The 2026-07-28 revision's headers say what the body is: a mismatch is a 400.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "doors", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let stateless = |method: &str| {
        server.send(
            "POST",
            "/mcp",
            &format!("{MCP_HEADERS}MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"),
            &list,
        )
    };
    let listed = stateless("tools/list");
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains("run_workflow"), "{}", listed.body);
    let mismatch = stateless("tools/call");
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    assert!(mismatch.body.contains("Mcp-Method"), "{}", mismatch.body);
}

#[test]
fn mcp_over_http_behind_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let file = write_file(dir.path(), "token", &format!("{TOKEN}\n"));
    let server = Listening::start(mcp(&db, &["--listen", "0.0.0.0:0", "--token-file", &file]));
    wait_until(Duration::from_secs(10), "no scope line", || {
        server.lines().iter().any(|l| l.ends_with("token required"))
    });
    let refused = server.send("POST", "/mcp", MCP_HEADERS, &initialize());
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(
        refused.head.contains("www-authenticate: bearer"),
        "{}",
        refused.head
    );
    let wrong = format!("{MCP_HEADERS}Authorization: Bearer {TOKEN}x\r\n");
    assert_eq!(
        server.send("POST", "/mcp", &wrong, &initialize()).status,
        401
    );
    let right = format!("{MCP_HEADERS}Authorization: Bearer {TOKEN}\r\nHost: mcp.internal\r\n");
    let answer = server.send("POST", "/mcp", &right, &initialize());
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body.contains("run_workflow"), "{}", answer.body);
}

/// Opens `count` connections that send half a request head and then nothing.
fn stalled(port: u16, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.write_all(b"GET /api/threads HTTP/1.1\r\n").unwrap();
            stream
        })
        .collect()
}

/// Whether the server closed `stream` within `limit`.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn slow_clients_are_cut_off_and_the_connection_bound_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let view = Listening::start(serve(
        &db,
        &[
            "--listen",
            "127.0.0.1:0",
            "--read-timeout",
            "1",
            "--max-connections",
            "20",
        ],
    ));
    let pid = view.child.id();
    // Twice the bound of clients that never finish their request.
    let mut silent = stalled(view.port, 40);
    std::thread::sleep(Duration::from_millis(300));
    #[cfg(target_os = "linux")]
    {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count();
        assert!(fds < 20 + 32, "{fds} descriptors open for a bound of 20");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pid;
    // A real client waits its turn behind them, and is served once they are cut off.
    let started = Instant::now();
    let answer = view.send("GET", "/api/threads", "", "");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(started.elapsed() < Duration::from_secs(20));
    for stream in &mut silent {
        assert!(
            closed_within(stream, Duration::from_secs(10)),
            "a stalled client is cut off"
        );
    }
    // Under the bound, a real client is served at once while 600 stalled ones are open, and a
    // body that trickles in is cut off too (MCP reads bodies; the web view reads none).
    let server = Listening::start(mcp(
        &db,
        &[
            "--listen",
            "127.0.0.1:0",
            "--read-timeout",
            "1",
            "--max-connections",
            "1000",
        ],
    ));
    let mut silent = stalled(server.port, 600);
    let answer = server.send("POST", "/mcp", MCP_HEADERS, &initialize());
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut trickle = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let body = initialize();
    write!(
        trickle,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\n{MCP_HEADERS}Content-Length: {}\r\n\r\n",
        server.host(),
        body.len()
    )
    .unwrap();
    let cut = Instant::now();
    let mut cut_off = false;
    for byte in body.as_bytes() {
        if trickle.write_all(&[*byte]).is_err() {
            cut_off = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if cut.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    assert!(
        cut_off || closed_within(&mut trickle, Duration::from_secs(10)),
        "a trickling body is cut off"
    );
    for stream in &mut silent {
        assert!(
            closed_within(stream, Duration::from_secs(10)),
            "a stalled client is cut off"
        );
    }
}
