//! What the HTTP client never lets out of the backend: the API key, the credentials a base URL
//! may carry, and anything in a provider's answer that looks like the value of an
//! authentication header (a proxy may echo the request's `Authorization` or `x-api-key` back in
//! an error body). The client in `client.rs` passes every message it builds through
//! [`Redactor::redact`] and shows base URLs only as [`hide_userinfo`] leaves them.

use std::sync::LazyLock;

use regex::Regex;

use crate::preview;

/// What replaces a secret wherever it would have appeared.
pub(crate) const REDACTED: &str = "[redacted]";

/// Credentials as a provider or a proxy may quote them, whoever's they are: the token after
/// `Bearer`; the value after an `Authorization` or API-key name and a `:` or `=` (quoted, or
/// quoted inside a JSON string, or not), an `Authorization` value's scheme kept; and anything
/// shaped like an OpenAI or Anthropic key (`sk-…`). The part to keep is `keep`; the rest of a
/// match is the secret. A value's characters stop at white space, quotes, backslashes and list
/// separators; `[` and `]` belong to it, so that a value already redacted matches again as a
/// whole and redacting twice changes nothing.
static CREDENTIALS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?xi)
        (?P<keep>
            \b bearer \s+
          | \b (?: proxy- )? authorization [\\"']* \s* [:=] \s* [\\"']* (?: (?: bearer | basic | token ) \s+ )?
          | \b (?: x- )? api [-_\ ]? key [\\"']* \s* [:=] \s* [\\"']*
        ) [^\s"'\\,;&]+
        | \b sk- [a-z0-9_-]{16,}
        "#,
    )
    .expect("the credentials pattern is valid")
});

/// Removes secrets from text: each one given, wherever it appears, then whatever
/// [`CREDENTIALS`] recognises.
pub(crate) struct Redactor {
    /// Longest first, so that a secret containing another goes as a whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor of `secrets` (empty ones are ignored).
    pub(crate) fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|secret| !secret.is_empty())
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Self { secrets }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        CREDENTIALS
            .replace_all(&text, format!("${{keep}}{REDACTED}"))
            .into_owned()
    }

    /// The start of a body as text for an error message, its first `max_chars` characters (see
    /// [`preview`]): redacted whole before it is cut, so that a secret straddling the cut leaves
    /// no part of itself behind.
    pub(crate) fn excerpt(&self, body: &[u8], max_chars: usize) -> String {
        let text = self.redact(String::from_utf8_lossy(body).trim());
        if text.is_empty() {
            return "(empty body)".to_owned();
        }
        preview(&text, max_chars)
    }
}

/// `url` as it may be shown, the `user:password@` it may carry replaced by [`REDACTED`], and the
/// secrets in that user information: all of it, and the part that authenticates (the password,
/// or the user name when there is no password, as in `https://TOKEN@host`). A `@` after the
/// host (in the path, the query or the fragment) is no user information.
pub(crate) fn hide_userinfo(url: &str) -> (String, Vec<String>) {
    let authority = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[authority..];
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..host_end].rfind('@') else {
        return (url.to_owned(), Vec::new());
    };
    let userinfo = &rest[..at];
    let credential = match userinfo.split_once(':') {
        Some((_, password)) if !password.is_empty() => password,
        Some((user, _)) => user,
        None => userinfo,
    };
    let shown = format!("{}{REDACTED}@{}", &url[..authority], &rest[at + 1..]);
    let mut secrets = vec![userinfo.to_owned()];
    if credential != userinfo {
        secrets.push(credential.to_owned());
    }
    (shown, secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-flowbox-test-0f3a9c2e7b";

    fn redactor() -> Redactor {
        Redactor::new([KEY.to_owned(), String::new()])
    }

    #[test]
    fn the_key_goes_wherever_it_is() {
        let redactor = redactor();
        assert_eq!(
            redactor.redact(&format!("Incorrect API key provided: {KEY}. ({KEY})")),
            "Incorrect API key provided: [redacted]. ([redacted])"
        );
        // Without a recognisable shape too: the key is known, not guessed.
        let plain = Redactor::new(["hunter2-local".to_owned()]);
        assert_eq!(
            plain.redact("token hunter2-local refused"),
            "token [redacted] refused"
        );
        // A secret holding another goes whole.
        let nested = Redactor::new(["abc".to_owned(), "xabcx-long".to_owned()]);
        assert_eq!(nested.redact("xabcx-long abc"), "[redacted] [redacted]");
        assert_eq!(
            Redactor::new(Vec::new()).redact("nothing secret"),
            "nothing secret"
        );
    }

    #[test]
    fn echoed_authentication_headers_go_whoever_they_belong_to() {
        let redactor = redactor();
        for (echoed, shown) in [
            (
                "Authorization: Bearer abc.DEF-123_x",
                "Authorization: Bearer [redacted]",
            ),
            (
                "authorization=Basic dXNlcjpwYXNz",
                "authorization=Basic [redacted]",
            ),
            (
                r#"{"headers": {"authorization": "Bearer opaque/token+1=="}}"#,
                r#"{"headers": {"authorization": "Bearer [redacted]"}}"#,
            ),
            (
                r#"{"error": "{\"x-api-key\":\"opaque-key\",\"model\":\"m\"}"}"#,
                r#"{"error": "{\"x-api-key\":\"[redacted]\",\"model\":\"m\"}"}"#,
            ),
            ("x-api-key: k1, next", "x-api-key: [redacted], next"),
            (
                "Proxy-Authorization: secret",
                "Proxy-Authorization: [redacted]",
            ),
            ("?api_key=abc&model=m", "?api_key=[redacted]&model=m"),
            ("Invalid API key: xyz", "Invalid API key: [redacted]"),
            ("sent bearer tok3n twice", "sent bearer [redacted] twice"),
            (
                "an upstream key sk-ant-api03-AbCdEf0123456789xyz",
                "an upstream key [redacted]",
            ),
            (
                &format!("Authorization: Bearer {KEY}"),
                "Authorization: Bearer [redacted]",
            ),
        ] {
            assert_eq!(redactor.redact(echoed), shown, "{echoed}");
        }
    }

    #[test]
    fn ordinary_messages_are_left_alone() {
        let redactor = redactor();
        for message in [
            "HTTP 400 Bad Request: max_tokens is too large: 100000",
            "401 Authorization Required",
            "Basic authentication is not supported",
            "the API key is empty",
            "missing api key",
            "task-0123456789abcdefghij is done",
            "rate limit reached for requests",
        ] {
            assert_eq!(redactor.redact(message), message);
        }
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        let redactor = redactor();
        for text in [
            format!("Authorization: Bearer {KEY}"),
            format!(r#"{{"x-api-key": "{KEY}"}}"#),
            format!("key {KEY} and bearer other"),
        ] {
            let once = redactor.redact(&text);
            assert!(!once.contains(KEY), "{once}");
            assert_eq!(redactor.redact(&once), once);
        }
    }

    #[test]
    fn an_excerpt_is_redacted_before_it_is_cut() {
        let redactor = Redactor::new(["0123456789abcdef".to_owned()]);
        // The key straddles the cut at 20 bytes: no part of it may survive.
        let body = "twelve bytes0123456789abcdef and more";
        let excerpt = redactor.excerpt(body.as_bytes(), 20);
        assert_eq!(excerpt, "twelve bytes[redacte…");
        assert!(!excerpt.contains("0123"), "{excerpt}");
        assert_eq!(redactor.excerpt(b"  short  ", 20), "short");
        assert_eq!(redactor.excerpt(b" \n ", 20), "(empty body)");
        // Characters, not bytes; invalid UTF-8 is replaced.
        assert_eq!(redactor.excerpt("ééé".as_bytes(), 2), "éé…");
        assert_eq!(redactor.excerpt(b"a\xffb", 20), "a\u{fffd}b");
    }

    #[test]
    fn user_information_in_a_url_is_hidden_and_kept_secret() {
        for (url, shown, secrets) in [
            (
                "https://user:pa55word@proxy.example/v1",
                "https://[redacted]@proxy.example/v1",
                vec!["user:pa55word", "pa55word"],
            ),
            (
                "https://TOKEN123@proxy.example",
                "https://[redacted]@proxy.example",
                vec!["TOKEN123"],
            ),
            (
                "http://user:@host:8080?q=1",
                "http://[redacted]@host:8080?q=1",
                vec!["user:", "user"],
            ),
            (
                "http://a:b@c@host/v1",
                "http://[redacted]@host/v1",
                vec!["a:b@c", "b@c"],
            ),
            (
                "user:pw@host/v1",
                "[redacted]@host/v1",
                vec!["user:pw", "pw"],
            ),
        ] {
            let (got, found) = hide_userinfo(url);
            assert_eq!(
                (got.as_str(), found),
                (shown, secrets.iter().map(|s| s.to_string()).collect()),
                "{url}"
            );
        }
        for url in [
            "https://api.example/v1",
            "https://host/v1/@me",
            "https://host?to=a@b",
            "https://host#a@b",
            "",
        ] {
            assert_eq!(hide_userinfo(url), (url.to_owned(), Vec::new()), "{url}");
        }
    }
}
