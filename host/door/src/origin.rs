//! Origins as browsers send them (`scheme://host[:port]`), and the ones a door allows.

use axum::http::Uri;
use axum::http::uri::Authority;

use crate::DoorError;

/// The loopback origins every door allows, any port: a page served from this machine.
pub(crate) const LOOPBACK: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// An `Origin` header's scheme, host (lower case, IPv6 in brackets) and port (the scheme's own
/// when it names none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin in an `Origin` header; `None` for `null` or anything that is not one.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let uri: Uri = text.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let authority = uri.authority()?;
        if uri
            .path_and_query()
            .is_some_and(|p| !matches!(p.as_str(), "" | "/"))
            || authority.as_str().contains('@')
        {
            return None;
        }
        let port = authority.port_u16().or_else(|| default_port(&scheme))?;
        Some(Self {
            host: authority.host().to_ascii_lowercase(),
            scheme,
            port,
        })
    }

    /// Whether it names this machine's loopback.
    pub(crate) fn is_loopback(&self) -> bool {
        matches!(self.host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
            && matches!(self.scheme.as_str(), "http" | "https")
    }

    /// Whether it is the origin of a server reached as `host` (a `Host` header; without a
    /// port, the origin's scheme's own).
    pub(crate) fn is_at(&self, host: &str) -> bool {
        let Ok(host) = host.parse::<Authority>() else {
            return false;
        };
        host.host().eq_ignore_ascii_case(&self.host)
            && host.port_u16().or_else(|| default_port(&self.scheme)) == Some(self.port)
    }
}

/// An origin a door allows: a port, or any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allowed {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Allowed {
    /// `scheme://host`, `scheme://host:port` or `scheme://host:*`.
    pub(crate) fn parse(text: &str) -> Result<Self, DoorError> {
        let refuse = |reason: &str| DoorError::Origin {
            origin: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (pattern, any_port) = match text.strip_suffix(":*") {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        let origin = Origin::parse(pattern).ok_or_else(|| {
            refuse("write it as scheme://host or scheme://host:port, such as https://app.example")
        })?;
        if !matches!(origin.scheme.as_str(), "http" | "https") {
            return Err(refuse("the scheme must be http or https"));
        }
        Ok(Self {
            scheme: origin.scheme,
            host: origin.host,
            port: (!any_port).then_some(origin.port),
        })
    }

    pub(crate) fn matches(&self, origin: &Origin) -> bool {
        self.scheme == origin.scheme
            && self.host == origin.host
            && self.port.is_none_or(|port| port == origin.port)
    }

    /// As `scheme://host:port` or `scheme://host:*`.
    pub(crate) fn pattern(&self) -> String {
        match self.port {
            Some(port) => format!("{}://{}:{port}", self.scheme, self.host),
            None => format!("{}://{}:*", self.scheme, self.host),
        }
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}
