//! A Restate server for tests: the pinned binary `make restate-setup` installs, started on free
//! loopback ports with its data in a folder of the test's, healthy before [`RestateServer::start`]
//! returns, and killed by its pid (`kill -9`) when dropped — or on purpose, to be restarted on
//! the same data. Also what a test needs to speak to a worker the way the server does: a fresh
//! request-identity key pair that signs as the server signs, and one HTTP/2 request.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ring::signature::{Ed25519KeyPair, KeyPair};

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
    /// admin API and its ingress answer. Its requests to deployments are unsigned.
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, None)
    }

    /// [`Self::start`] a server that signs its requests to deployments with `identity`'s
    /// private key, as a worker given its public key (`--identity-key`) requires.
    pub fn start_signing(dir: &Path, identity: &IdentityKeyPair) -> Self {
        Self::start_with(dir, Some(identity))
    }

    fn start_with(dir: &Path, identity: Option<&IdentityKeyPair>) -> Self {
        let (fabric, admin, ingress) = (free_port(), free_port(), free_port());
        let config = dir.join("restate.toml");
        let mut text = format!(
            "disable-telemetry = true\nlisten-mode = \"tcp\"\nbind-ip = \"127.0.0.1\"\n\
             bind-port = {fabric}\ndefault-num-partitions = 4\n\
             rocksdb-total-memory-size = \"256 MiB\"\n\
             [admin]\nbind-port = {admin}\ndisable-web-ui = true\n\
             [ingress]\nbind-port = {ingress}\n"
        );
        if let Some(identity) = identity {
            let pem = dir.join("restate-identity.pem");
            std::fs::write(&pem, identity.private_pem()).expect("writing the server's key");
            // A TOML literal string: the path as it is, no escapes.
            text.push_str(&format!(
                "[worker.invoker]\nrequest-identity-private-key-pem-file = '{}'\n",
                pem.display()
            ));
        }
        std::fs::write(&config, text).expect("writing the server's configuration");
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

/// The DER of an unencrypted PKCS#8 v1 Ed25519 private key before its 32-byte seed (RFC 8410):
/// the one form of key file the server reads.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// A fresh Ed25519 key pair for Restate's request identity: the server signs with its private
/// key ([`RestateServer::start_signing`]), a worker verifies with its public one.
pub struct IdentityKeyPair {
    seed: [u8; 32],
    pair: Ed25519KeyPair,
    /// The public key as a worker takes it: `publickeyv1_` and the key's base58.
    pub public: String,
}

impl std::fmt::Debug for IdentityKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityKeyPair")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl IdentityKeyPair {
    /// A key pair from fresh random bytes.
    pub fn generate() -> Self {
        let mut seed = [0; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
            .expect("the system's randomness");
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("any 32 bytes are a seed");
        let public = format!(
            "publickeyv1_{}",
            bs58::encode(pair.public_key().as_ref()).into_string()
        );
        Self { seed, pair, public }
    }

    /// The private key as the server reads it: one unencrypted PKCS#8 PEM block.
    pub fn private_pem(&self) -> String {
        let der = [PKCS8_ED25519_PREFIX.as_slice(), &self.seed].concat();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(der)
        )
    }

    /// The headers the server signs a request to `path` with: the scheme, and an EdDSA JWT
    /// whose audience is the path, valid for a minute from now.
    pub fn sign(&self, path: &str) -> Vec<(String, String)> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let header = serde_json::json!({"alg": "EdDSA", "typ": "JWT"});
        let claims = serde_json::json!({"aud": path, "iat": now, "nbf": now, "exp": now + 60});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = URL_SAFE_NO_PAD.encode(self.pair.sign(signed.as_bytes()));
        vec![
            ("x-restate-signature-scheme".into(), "v1".into()),
            ("x-restate-jwt-v1".into(), format!("{signed}.{signature}")),
        ]
    }
}

/// An HTTP/2 answer.
#[derive(Debug)]
pub struct H2Answer {
    /// The status code.
    pub status: u16,
    /// The `content-type` header, if any.
    pub content_type: String,
    /// The body, as text.
    pub body: String,
}

/// Sends one HTTP/2 request over cleartext (h2c with prior knowledge: all a worker speaks) to
/// `address` (`HOST:PORT`): `method path` with `headers` and `body`. Fails the test after 30 s.
pub fn h2c_request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> H2Answer {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .unwrap_or_else(|error| panic!("nothing listens on {address}: {error}"));
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("an HTTP/2 handshake");
        tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{address}{path}"));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body)))
            .expect("a valid request");
        let response = sender.send_request(request).await.expect("an answer");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the whole body")
            .to_bytes();
        H2Answer {
            status,
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    };
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), exchange).await })
        .unwrap_or_else(|_| panic!("{method} {path} to {address} got no answer in 30 s"))
}
