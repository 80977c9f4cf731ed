//! Request identity: which Restate servers a worker serves. Restate signs each request to a
//! deployment with its private key (an EdDSA JWT in `x-restate-jwt-v1` whose audience is the
//! request's path); an endpoint given public keys refuses (401) a request signed by none of
//! them before routing it, so `/discover` and `/health` need a signature too.

use std::str::FromStr;

use restate_sdk::endpoint::Endpoint;

/// The public key of a Restate server's request identity: `publickeyv1_` and the base58 of an
/// Ed25519 public key, as the server logs it at start (`Loaded request identity key kid: …`).
/// Parsed, surrounding whitespace aside, by the SDK's own parser, so a key that parses is one
/// the endpoint accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityKey(String);

impl IdentityKey {
    /// The key, `publickeyv1_…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IdentityKey {
    type Err = IdentityKeyError;

    fn from_str(key: &str) -> Result<Self, Self::Err> {
        let key = key.trim();
        match Endpoint::builder().identity_key(key) {
            Ok(_) => Ok(Self(key.to_owned())),
            Err(error) => Err(IdentityKeyError(error.to_string())),
        }
    }
}

/// Text that is not a request-identity public key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Restate request-identity public key (publickeyv1_…): {0}")]
pub struct IdentityKeyError(String);

#[cfg(test)]
mod tests {
    use super::*;

    /// The example key of the SDK's documentation.
    const KEY: &str = "publickeyv1_w7YHemBctH5Ck2nQRQ47iBBqhNHy4FV7t2Usbye2A6f";

    #[test]
    fn a_v1_public_key_parses_and_keeps_its_text() {
        let key: IdentityKey = format!(" {KEY}\n").parse().unwrap();
        assert_eq!(key.as_str(), KEY);
    }

    #[test]
    fn what_is_not_a_v1_public_key_is_refused_with_the_reason() {
        for (text, reason) in [
            ("", "publickeyv1_"),
            (
                "w7YHemBctH5Ck2nQRQ47iBBqhNHy4FV7t2Usbye2A6f",
                "publickeyv1_",
            ),
            ("publickeyv1_0OIl", "base58"),
            // Fewer than 32 bytes.
            (&KEY[..KEY.len() - 2], "length"),
        ] {
            let error = text.parse::<IdentityKey>().unwrap_err().to_string();
            assert!(
                error.starts_with("not a Restate request-identity public key"),
                "{error}"
            );
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }
}
