//! The door's rules, without a network: tokens, hosts, origins, where it may listen.

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderValue};

use super::*;

fn local(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn a_token_is_long_printable_and_compared_whole() {
    assert!(matches!(Token::new("short"), Err(DoorError::Token(_))));
    assert!(
        matches!(Token::new("sixteen chars ok"), Err(DoorError::Token(_))),
        "a space"
    );
    assert!(Token::new("é-sixteen-chars-é").is_err(), "not ASCII");
    let token = Token::new("0123456789abcdef").unwrap();
    assert!(token.matches("0123456789abcdef"));
    assert!(!token.matches("0123456789abcdeF"));
    assert!(!token.matches("0123456789abcdef0"));
    assert!(!token.matches(""));
    assert_eq!(format!("{token:?}"), "Token(..)");
    let mut headers = HeaderMap::new();
    assert!(!token.authorizes(&headers));
    headers.insert(
        "authorization",
        HeaderValue::from_static("Basic 0123456789abcdef"),
    );
    assert!(!token.authorizes(&headers));
    headers.insert(
        "authorization",
        HeaderValue::from_static("bearer 0123456789abcdef"),
    );
    assert!(token.authorizes(&headers));
}

#[test]
fn a_token_file_is_read_less_its_newline_and_named_when_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("token");
    std::fs::write(&good, "0123456789abcdef\n").unwrap();
    assert!(Token::from_file(&good).unwrap().matches("0123456789abcdef"));
    let short = dir.path().join("short");
    std::fs::write(&short, "abc\n").unwrap();
    let error = Token::from_file(&short).unwrap_err().to_string();
    assert!(
        error.contains("short") && error.contains("at least 16"),
        "{error}"
    );
    let missing = Token::from_file(&dir.path().join("none"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cannot be read"), "{missing}");
}

#[test]
fn only_loopback_without_a_token_unless_insecure() {
    let open = Door::new();
    assert!(open.admits(local("127.0.0.1:80")).is_ok());
    assert!(open.admits(local("[::1]:80")).is_ok());
    assert!(matches!(
        open.admits(local("0.0.0.0:80")),
        Err(DoorError::Exposed { .. })
    ));
    assert!(
        open.clone()
            .insecure(true)
            .admits(local("0.0.0.0:80"))
            .is_ok()
    );
    let token = Token::new("0123456789abcdef").unwrap();
    assert!(
        Door::new()
            .with_token(token)
            .admits(local("10.1.2.3:80"))
            .is_ok()
    );
}

#[test]
fn hosts_are_checked_only_when_anyone_is_admitted() {
    let door = Door::new();
    let at = local("127.0.0.1:7878");
    for host in [
        "localhost:7878",
        "127.0.0.1:7878",
        "[::1]:7878",
        "LOCALHOST",
        "127.0.0.1",
    ] {
        assert!(door.host_allowed(Some(host), at), "{host}");
    }
    for host in ["evil.example:7878", "localhost:9999", "", "10.0.0.1:7878"] {
        assert!(!door.host_allowed(Some(host), at), "{host}");
    }
    assert!(!door.host_allowed(None, at));
    let token = Token::new("0123456789abcdef").unwrap();
    assert!(
        Door::new()
            .with_token(token)
            .host_allowed(Some("evil.example"), at)
    );
    assert!(Door::new().insecure(true).host_allowed(None, at));
}

#[test]
fn origins_are_the_doors_own_loopback_or_allowed() {
    let door = Door::new()
        .allow_origin("https://app.example")
        .unwrap()
        .allow_origin("http://dev.example:*")
        .unwrap();
    let host = Some("127.0.0.1:7878");
    for origin in [
        "http://127.0.0.1:7878",
        "http://localhost:3000",
        "https://[::1]:1",
        "https://app.example",
        "https://app.example:443",
        "http://dev.example:8080",
    ] {
        assert!(door.origin_allowed(origin, host), "{origin}");
    }
    for origin in [
        "https://evil.example",
        "https://app.example:8443",
        "http://app.example",
        "null",
        "file://",
        "http://localhost.evil.example",
        "not an origin",
    ] {
        assert!(!door.origin_allowed(origin, host), "{origin}");
    }
    assert!(door.origin_allowed("http://flowbox.lan:7878", Some("flowbox.lan:7878")));
    assert!(door.origin_allowed("https://flowbox.lan", Some("flowbox.lan")));
    assert!(!door.origin_allowed("http://flowbox.lan:1", Some("flowbox.lan:7878")));
    assert_eq!(
        door.allowed_origins()[6..],
        ["https://app.example:443", "http://dev.example:*"]
    );
    for bad in [
        "app.example",
        "ftp://app.example",
        "https://app.example/path",
        "",
    ] {
        assert!(
            matches!(Door::new().allow_origin(bad), Err(DoorError::Origin { .. })),
            "{bad}"
        );
    }
}

#[test]
fn secrets_are_fresh() {
    let one = random_secret().unwrap();
    assert_eq!(one.len(), 64);
    assert_ne!(one, random_secret().unwrap());
}
