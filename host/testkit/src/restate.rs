//! A Restate server for tests: the pinned binary `make restate-setup` installs, started on free
//! loopback ports with its data in a folder of the test's, healthy before [`RestateServer::start`]
//! returns, and killed by its pid (`kill -9`) when dropped — or on purpose, to be restarted on
//! the same data.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace's root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A port nothing listens on now, on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The server binary `make restate-setup` installs; a panic saying so when it is missing.
pub fn server_binary() -> PathBuf {
    let path = workspace_root().join(
        "target/restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server",
    );
    assert!(
        path.exists(),
        "no Restate server at {}: run `make restate-setup` (part of `make test`)",
        path.display()
    );
    path
}

/// A Restate server on loopback.
#[derive(Debug)]
pub struct RestateServer {
    process: Option<Child>,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// The ingress URL, `http://127.0.0.1:PORT`.
    pub ingress: String,
    /// The admin API's URL.
    pub admin: String,
}

impl RestateServer {
    /// Starts a server whose configuration, data and log live in `dir`, and waits until its
    /// admin API and its ingress answer.
    pub fn start(dir: &Path) -> Self {
        let (fabric, admin, ingress) = (free_port(), free_port(), free_port());
        let config = dir.join("restate.toml");
        std::fs::write(
            &config,
            format!(
                "disable-telemetry = true\nlisten-mode = \"tcp\"\nbind-ip = \"127.0.0.1\"\n\
                 bind-port = {fabric}\ndefault-num-partitions = 4\n\
                 rocksdb-total-memory-size = \"256 MiB\"\n\
                 [admin]\nbind-port = {admin}\ndisable-web-ui = true\n\
                 [ingress]\nbind-port = {ingress}\n"
            ),
        )
        .expect("writing the server's configuration");
        let mut server = Self {
            process: None,
            config,
            data: dir.join("restate-data"),
            log: dir.join("restate-server.log"),
            ingress: format!("http://127.0.0.1:{ingress}"),
            admin: format!("http://127.0.0.1:{admin}"),
        };
        server.restart();
        server
    }

    /// Starts the server again on the same data (after [`Self::kill9`]) and waits until it
    /// answers.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the server's log file");
        let child = Command::new(server_binary())
            .arg("--config-file")
            .arg(&self.config)
            .arg("--base-dir")
            .arg(&self.data)
            .args(["--node-name", "n1", "--no-logo"])
            .args(["--log-disable-ansi-codes", "true"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the Restate server starts");
        self.process = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(&format!("{}/health", self.admin))
            || !healthy(&format!("{}/restate/health", self.ingress))
        {
            assert!(
                Instant::now() < deadline,
                "the Restate server never came up; its log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// Kills the server at once (`kill -9`), as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Whether `url` answers 200 to one plain HTTP/1.1 GET.
pub fn healthy(url: &str) -> bool {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}
