//! The bearer token a door asks for: kept only as its SHA-256 digest, and compared in constant
//! time.

use std::path::Path;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

use crate::DoorError;

/// The fewest characters a token may have: fewer could be guessed.
const MIN_LEN: usize = 16;

/// A secret that admits its holder. `Debug` never shows it.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token `secret`: at least 16 characters, printable ASCII without spaces (it travels
    /// in a header).
    pub fn new(secret: &str) -> Result<Self, DoorError> {
        if secret.len() < MIN_LEN {
            return Err(DoorError::Token(format!(
                "has {} characters; a token needs at least {MIN_LEN}",
                secret.len()
            )));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(DoorError::Token(
                "must be printable ASCII without spaces (it travels in a header)".into(),
            ));
        }
        Ok(Self {
            digest: Sha256::digest(secret.as_bytes()).into(),
        })
    }

    /// The token in the file at `path`, less the whitespace around it (a trailing newline).
    pub fn from_file(path: &Path) -> Result<Self, DoorError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            DoorError::Token(format!("file {} cannot be read: {e}", path.display()))
        })?;
        Self::new(text.trim()).map_err(|error| match error {
            DoorError::Token(reason) => DoorError::Token(format!("in {} {reason}", path.display())),
            other => other,
        })
    }

    /// Whether `presented` is the token. The time taken does not depend on how much of it is
    /// right: the digests are compared, every byte of them.
    pub fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.digest
            .iter()
            .zip(presented)
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
    }

    /// Whether the request's `Authorization: Bearer TOKEN` header carries the token.
    pub fn authorizes(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.split_once(' '))
            .any(|(scheme, secret)| {
                scheme.eq_ignore_ascii_case("bearer") && self.matches(secret.trim())
            })
    }
}

/// A fresh secret: 32 bytes from the operating system's random source, as 64 hex digits.
pub fn random_secret() -> Result<String, DoorError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        DoorError::Io(std::io::Error::other(format!(
            "the system's random source failed: {e}"
        )))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
