//! The flags of a network door (`flowbox serve`, `flowbox mcp --listen`): who may come in and
//! how long a client may take.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use flowbox_door::{Door, Limits, Token};

use crate::Failure;

/// The environment variable that may hold the token itself, instead of `--token-file`.
const TOKEN_VAR: &str = "FLOWBOX_TOKEN";

/// Who may come in through the door, and how long a client may take.
#[derive(Debug, Args)]
pub(crate) struct DoorOptions {
    /// A file holding the token every request must carry (`Authorization: Bearer TOKEN`; a
    /// browser logs in to `flowbox serve` through the one-time links it prints), at least 16
    /// printable characters; or put the token itself in FLOWBOX_TOKEN. Required to listen on
    /// an address other machines can reach, unless --insecure.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Also admit browser requests from this origin (repeatable): `scheme://host`,
    /// `scheme://host:port` or `scheme://host:*`. Loopback origins are always admitted; any
    /// other `Origin` is answered 403, so a web page cannot drive the server.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Listen on an address other machines can reach without a token, and answer any `Host`:
    /// anyone who can reach the port can then use it. Only on a network you trust.
    #[arg(long)]
    insecure: bool,
    /// The most connections open at once; the next ones wait until one closes [default: 512].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Seconds a client has to send a request's head, and again its body; a slower one is cut
    /// off [default: 10].
    #[arg(long, value_name = "SECS")]
    read_timeout: Option<f64>,
    /// Seconds a connection may stay silent both ways while a request is served before it is
    /// closed [default: 120].
    #[arg(long, value_name = "SECS")]
    idle_timeout: Option<f64>,
}

impl DoorOptions {
    /// Whether any of the flags was given.
    pub(crate) fn given(&self) -> bool {
        self.token_file.is_some()
            || !self.allow_origins.is_empty()
            || self.insecure
            || self.max_connections.is_some()
            || self.read_timeout.is_some()
            || self.idle_timeout.is_some()
    }

    /// The door the flags describe: a bad token, origin or timeout is a usage error.
    pub(crate) fn door(&self) -> Result<Door, Failure> {
        let mut door = Door::new().insecure(self.insecure);
        let from_env = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
        let token = match (&self.token_file, from_env) {
            (Some(_), Some(_)) => {
                return Err(Failure::input(anyhow::anyhow!(
                    "give the token either with --token-file or in {TOKEN_VAR}, not both"
                )));
            }
            (Some(path), None) => Some(Token::from_file(path)),
            (None, Some(secret)) => Some(
                Token::new(secret.trim())
                    .map_err(|e| flowbox_door::DoorError::Token(format!("in {TOKEN_VAR}: {e}"))),
            ),
            (None, None) => None,
        };
        if let Some(token) = token {
            door = door.with_token(token.map_err(Failure::input)?);
        }
        for origin in &self.allow_origins {
            door = door
                .allow_origin(origin)
                .map_err(|e| Failure::input(anyhow::anyhow!("--allow-origin: {e}")))?;
        }
        let mut limits = Limits::default();
        if let Some(max) = self.max_connections {
            limits = limits.with_max_connections(max as usize);
        }
        if let Some(secs) = self.read_timeout {
            limits = limits.with_request_timeout(seconds("--read-timeout", secs)?);
        }
        if let Some(secs) = self.idle_timeout {
            limits = limits.with_idle_timeout(seconds("--idle-timeout", secs)?);
        }
        Ok(door.with_limits(limits))
    }
}

/// `secs` as a duration: more than 0 and at most a day.
fn seconds(flag: &str, secs: f64) -> Result<Duration, Failure> {
    if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(Failure::input(anyhow::anyhow!(
            "{flag} must be more than 0 and at most 86400 seconds, not {secs}"
        )))
    }
}

/// The failure of a door that cannot open: a usage error, with what to do for an exposed one.
pub(crate) fn door_failure(error: flowbox_door::DoorError) -> Failure {
    match error {
        flowbox_door::DoorError::Exposed { .. } => Failure::input(anyhow::anyhow!(
            "{error}; give a token (--token-file FILE or {TOKEN_VAR}), listen on loopback \
             (127.0.0.1), or pass --insecure on a network you trust"
        )),
        error => Failure::input(error),
    }
}
