//! Provider credentials never leave the process. An API key planted in the environment and a
//! password in `--base-url`, both quoted back by a provider's error bodies (as some proxies
//! do), show in no output of `run`, `show`, `threads`, `resume`, `serve` or `mcp`, and in no
//! byte of the events file or of the journal's files; the errors that quoted them are there,
//! redacted.

use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use flowbox_testkit::{Protocol, Reply, TestServer};
use serde_json::{Value, json};

use crate::support::{
    assert_exit, command_with_db, events_of, finish, http, no_panic, stdout_json, write_file,
};

/// What stands where a secret was.
const REDACTED: &str = "[redacted]";

/// One leaf of each kind, each error caught: answered; refused with the credentials quoted
/// back (401 in the provider's JSON error, 400 in plain text); a 500 once, retried, then
/// answered; a 500 every time, retried, then given up.
const LEAVES: &str = r#"
out = {}
for prompt in ["say hi", "fail 401", "fail 400", "flaky", "fail 500"]:
    try:
        out[prompt] = await agent(prompt, label=prompt)
    except AgentError as e:
        out[prompt] = "error: " + str(e)
return out
"#;

/// A run ended by a refused leaf.
const UNCAUGHT: &str = "return await agent('fail 401', label='fail 401')\n";

#[test]
fn an_openai_key_quoted_back_by_the_provider_is_in_no_output() {
    planted_credentials_never_show(Protocol::OpenAi);
}

#[test]
fn an_anthropic_key_quoted_back_by_the_provider_is_in_no_output() {
    planted_credentials_never_show(Protocol::Anthropic);
}

fn planted_credentials_never_show(protocol: Protocol) {
    let random = canary();
    let key = format!("sk-flowbox-canary-{random}");
    let password = format!("pw-canary-{}", canary());
    let provider = quoting_provider(protocol);
    let dir = tempfile::tempdir().unwrap();
    let flowbox = Flowbox::new(protocol, &provider, &key, &password, dir.path());
    let mut said = Said::default();

    run_and_read_back(&flowbox, protocol, dir.path(), &mut said);
    over_mcp(&flowbox, protocol, dir.path(), &mut said);
    over_serve(&flowbox, &mut said);

    // The provider really got the credentials it quoted back.
    let requests = provider.requests();
    let sent = |name: &str, value: &str| {
        requests
            .iter()
            .all(|request| request.header(name) == Some(value))
    };
    let mut secrets = vec![key.clone(), random, password];
    match protocol {
        Protocol::OpenAi => assert!(sent("authorization", &format!("Bearer {key}"))),
        Protocol::Anthropic => {
            assert!(sent("x-api-key", &key));
            // The base URL's user and password, as reqwest sends them.
            let basic = requests[0].header("authorization").unwrap();
            secrets.push(basic.strip_prefix("Basic ").unwrap().to_owned());
        }
    }
    // Eight requests for each run of the caught leaves (two for `flaky`, three for `fail 500`),
    // one for each of the three uncaught runs; none for a resumed finished thread.
    assert_eq!(requests.len(), 2 * 8 + 3, "{requests:?}");

    said.files(dir.path());
    for (what, bytes) in &said.heard {
        for secret in &secrets {
            if let Some(at) = bytes
                .windows(secret.len())
                .position(|window| window == secret.as_bytes())
            {
                let around = &bytes[at.saturating_sub(200)..(at + 200).min(bytes.len())];
                panic!("{secret} in {what}: …{}…", String::from_utf8_lossy(around));
            }
        }
    }
}

/// `flowbox` on one journal, with the key in its environment whether it talks to the
/// provider or not.
struct Flowbox {
    db: PathBuf,
    key_variable: &'static str,
    key: String,
    /// The flags of a command that talks to the provider: its backend, at a base URL holding
    /// the password, retrying quickly.
    provider_flags: Vec<String>,
}

impl Flowbox {
    fn new(
        protocol: Protocol,
        provider: &TestServer,
        key: &str,
        password: &str,
        dir: &Path,
    ) -> Self {
        let base_url = provider
            .url()
            .replace("http://", &format!("http://flowbox:{password}@"));
        let (backend, key_variable, base_url) = match protocol {
            Protocol::OpenAi => ("openai", "OPENAI_API_KEY", format!("{base_url}/v1")),
            Protocol::Anthropic => ("anthropic", "ANTHROPIC_API_KEY", base_url),
        };
        let provider_flags = [
            "--backend",
            backend,
            "--model",
            "m",
            "--base-url",
            &base_url,
            "--retries",
            "2",
            "--max-backoff",
            "0.05",
        ];
        Self {
            db: dir.join("journal.db"),
            key_variable,
            key: key.to_owned(),
            provider_flags: provider_flags.map(str::to_owned).to_vec(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = command_with_db(&self.db, args);
        command.env(self.key_variable, &self.key);
        command
    }

    fn with_provider(&self, args: &[&str]) -> Command {
        let mut command = self.command(args);
        command.args(&self.provider_flags);
        command
    }
}

/// `run` with caught errors (`--json`, `--events`) and an uncaught one (`--json`, and as
/// text), then `show`, `resume` and `threads` reading the threads back.
fn run_and_read_back(flowbox: &Flowbox, protocol: Protocol, dir: &Path, said: &mut Said) {
    let leaves = write_file(dir, "leaves.py", LEAVES);
    let uncaught = write_file(dir, "uncaught.py", UNCAUGHT);
    let events = dir.join("events.jsonl");
    let caught = said.output(
        "run --json",
        flowbox.with_provider(&[
            "run",
            &leaves,
            "--thread",
            "caught",
            "--json",
            "--events",
            events.to_str().unwrap(),
        ]),
    );
    assert_exit(&caught, 0);
    assert_quoted_errors(protocol, &stdout_json(&caught)["result"]);
    let redacted_events = events_of(&events)
        .iter()
        .filter(|event| event["type"] == "leaf_finished")
        .filter(|event| {
            event["error"]
                .as_str()
                .is_some_and(|e| e.contains(REDACTED))
        })
        .count();
    assert_eq!(redacted_events, 3, "{:?}", events_of(&events));
    for (thread, json) in [("uncaught-json", true), ("uncaught", false)] {
        let mut args = vec!["run", &uncaught, "--thread", thread];
        args.extend(json.then_some("--json"));
        let output = said.output(&args.join(" "), flowbox.with_provider(&args));
        assert_exit(&output, 1);
        assert_refused(if json { &output.stdout } else { &output.stderr });
    }

    for thread in ["caught", "uncaught"] {
        for args in [
            &["show", thread][..],
            &["show", thread, "--json"],
            &["show", thread, "--follow", "--json"],
        ] {
            let output = said.output(&args.join(" "), flowbox.command(args));
            assert_refused(&output.stdout);
        }
        // Its event lines shorten an error before the credentials it quotes.
        let args = ["show", thread, "--follow"];
        let output = said.output(&args.join(" "), flowbox.command(&args));
        assert!(String::from_utf8_lossy(&output.stdout).contains("HTTP 401"));
        // A finished thread's outcome, as it was recorded.
        for json in [false, true] {
            let mut args = vec!["resume", thread];
            args.extend(json.then_some("--json"));
            let output = said.output(&args.join(" "), flowbox.with_provider(&args));
            if thread == "uncaught" {
                assert_exit(&output, 1);
                assert_refused(if json { &output.stdout } else { &output.stderr });
            } else {
                assert_exit(&output, 0);
            }
        }
    }
    for args in [&["threads"][..], &["threads", "--json"]] {
        let output = said.output(&args.join(" "), flowbox.command(args));
        assert_exit(&output, 0);
    }
}

/// `mcp` over stdio: the same leaves, and the uncaught error, as tool results. The journal's
/// files are read while the server holds them open, its write-ahead log among them.
fn over_mcp(flowbox: &Flowbox, protocol: Protocol, dir: &Path, said: &mut Said) {
    let mut mcp = flowbox
        .with_provider(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowbox mcp starts");
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = BufReader::new(mcp.stdout.take().unwrap());
    let mut send = |message: Value| writeln!(stdin, "{message}").unwrap();
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, script, thread) in [(2, LEAVES, "mcp-caught"), (3, UNCAUGHT, "mcp-uncaught")] {
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": script, "thread_id": thread},
            "_meta": {"progressToken": id}}}),
        );
    }
    let mut answers = Vec::new();
    let mut lines = String::new();
    while answers.len() < 2 {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let _ = mcp.kill();
            panic!("flowbox mcp ended before answering: {lines}");
        }
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 || message["id"] == 3 {
            answers.push(message);
        }
        lines.push_str(&line);
    }
    said.files(dir);
    assert!(
        said.heard
            .iter()
            .any(|(what, _)| what.ends_with("journal.db-wal")),
        "no write-ahead log beside the journal"
    );
    drop(stdin);
    let rest = finish(mcp);
    assert_exit(&rest, 0);
    lines.push_str(&String::from_utf8_lossy(&rest.stdout));
    said.heard.push(("mcp stdout".into(), lines.into_bytes()));
    said.heard.push(("mcp stderr".into(), rest.stderr));
    let by_id = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_quoted_errors(protocol, &by_id(2)["result"]["structuredContent"]["result"]);
    let failed = &by_id(3)["result"];
    assert_eq!(failed["isError"], true, "{failed}");
    assert_refused(failed.to_string().as_bytes());
}

/// `serve`: the API and the page of every thread, every leaf of each, and the app's files.
fn over_serve(flowbox: &Flowbox, said: &mut Said) {
    let mut server = flowbox
        .command(&["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowbox serve starts");
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let host = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    let mut get = |path: &str| {
        let answer = http::get(&host, path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        said.heard
            .push((format!("GET {path}"), answer.body.clone().into_bytes()));
        answer.body
    };
    let listing: Value = serde_json::from_str(&get("/api/threads")).unwrap();
    let threads: Vec<String> = listing["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(threads.len(), 5, "{listing}");
    let mut refused_leaves = 0;
    for thread in &threads {
        get(&format!("/api/threads/{thread}"));
        get(&format!("/api/threads/{thread}/stream"));
        get(&format!("/runs/{thread}"));
        let events: Value =
            serde_json::from_str(&get(&format!("/api/threads/{thread}/events"))).unwrap();
        for started in events["events"].as_array().unwrap() {
            if started["type"] == "leaf_started" {
                let call = started["call_id"].as_u64().unwrap();
                let leaf = get(&format!("/api/threads/{thread}/leaves/{call}"));
                if started["label"] == "fail 401" {
                    assert_refused(leaf.as_bytes());
                    refused_leaves += 1;
                }
            }
        }
    }
    assert_eq!(refused_leaves, 5, "a refused leaf in each thread");
    for page in ["/", "/assets/app.js", "/assets/app.css"] {
        get(page);
    }
    let _ = server.kill();
    let _ = server.wait();
    let mut rest = first;
    stderr.read_to_string(&mut rest).unwrap();
    said.heard.push(("serve stderr".into(), rest.into_bytes()));
}

/// Everything the processes said and wrote, each with where it came from.
#[derive(Default)]
struct Said {
    heard: Vec<(String, Vec<u8>)>,
}

impl Said {
    /// Runs `command` to its end, keeping its stdout and stderr.
    fn output(&mut self, what: &str, mut command: Command) -> Output {
        let output = no_panic(command.output().expect("the flowbox binary runs"));
        self.heard
            .push((format!("{what}: stdout"), output.stdout.clone()));
        self.heard
            .push((format!("{what}: stderr"), output.stderr.clone()));
        output
    }

    /// Keeps the bytes of every file under `dir` as they are now.
    fn files(&mut self, dir: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                self.files(&path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                self.heard.push((path.display().to_string(), bytes));
            }
        }
    }
}

/// 16 random hex digits.
fn canary() -> String {
    format!("{:016x}", RandomState::new().hash_one(0))
}

/// A provider speaking `protocol` that answers by what a leaf's prompt asks for: `fail 401`
/// and `fail 500` get that status and an error in the provider's JSON shape quoting back the
/// request's authentication headers, as some proxies do; `fail 400` gets a 400 quoting them
/// in plain text; `flaky` gets such a 500 every other time; anything else, an answer.
fn quoting_provider(protocol: Protocol) -> TestServer {
    let flaky = AtomicUsize::new(0);
    TestServer::answering(move |request| {
        let body = String::from_utf8_lossy(&request.body);
        let quoted = format!(
            "the request had Authorization: {}, x-api-key: {}",
            request.header("authorization").unwrap_or("none"),
            request.header("x-api-key").unwrap_or("none")
        );
        let refused = |status| {
            let error = protocol.error("invalid_request_error", &format!("refused; {quoted}"));
            Reply::json(status, error)
        };
        if body.contains("fail 401") {
            refused(401)
        } else if body.contains("fail 400") {
            Reply::raw(400, &format!("proxy error; {quoted}"))
        } else if body.contains("fail 500")
            || (body.contains("flaky") && flaky.fetch_add(1, Ordering::SeqCst).is_multiple_of(2))
        {
            refused(500)
        } else {
            Reply::json(200, protocol.text("all good"))
        }
    })
}

/// The caught errors of [`LEAVES`]: the key and the URL's credentials redacted, in errors that
/// say what happened.
fn assert_quoted_errors(protocol: Protocol, result: &Value) {
    assert_eq!(result["say hi"], "all good", "{result}");
    assert_eq!(result["flaky"], "all good", "{result}");
    // An authentication header's value is redacted whoever's it is, the missing one's too.
    let credentials = match protocol {
        Protocol::OpenAi => "Authorization: Bearer [redacted], x-api-key: [redacted]",
        Protocol::Anthropic => "Authorization: Basic [redacted], x-api-key: [redacted]",
    };
    for (prompt, status, says) in [
        (
            "fail 401",
            "HTTP 401 Unauthorized: ",
            "refused; the request had",
        ),
        (
            "fail 400",
            "HTTP 400 Bad Request: ",
            "proxy error; the request had",
        ),
        (
            "fail 500",
            "HTTP 500 Internal Server Error: ",
            "refused; the request had",
        ),
    ] {
        let error = result[prompt].as_str().unwrap();
        assert!(
            error.contains(status) && error.contains(says) && error.contains(credentials),
            "{prompt}: {error}"
        );
        assert!(error.contains("@127.0.0.1:"), "{error}");
        assert!(error.contains(&format!("http://{REDACTED}@")), "{error}");
    }
    assert!(
        result["fail 500"]
            .as_str()
            .unwrap()
            .contains("gave up after 3 attempts"),
        "{result}"
    );
}

/// `output` tells of the refused leaf, its credentials redacted.
#[track_caller]
fn assert_refused(output: &[u8]) {
    let text = String::from_utf8_lossy(output);
    assert!(
        text.contains("HTTP 401")
            && (text.contains(&format!("Bearer {REDACTED}"))
                || text.contains(&format!("x-api-key: {REDACTED}"))),
        "{text}"
    );
}
