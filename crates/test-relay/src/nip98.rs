//! NIP-98 HTTP authorization, checked the way the Buzz relay's REST bridge checks it.
//!
//! A request carries `Authorization: Nostr <base64 of an event>`. The event must be:
//!
//! 1. kind 27235 (`HttpAuth`);
//! 2. correctly identified and signed (id and Schnorr signature, checked by the `nostr` crate);
//! 3. fresh: `created_at` within ±60 s of now;
//! 4. for this request: its first `u` tag names the URL the request was sent to (compared after
//!    normalising, see [`same_url`]), its `method` tag the request's method (any case), and its
//!    `payload` tag the lowercase hex SHA-256 of the exact body bytes (required here: the Buzz
//!    bridge has a mode that requires it, and buzz-acp always sends it);
//! 5. new: an auth event id that was accepted once is refused after that (the replay guard).
//!
//! The `nostr` crate's own `nip98::verify_auth_header` is not used: it compares URLs byte for
//! byte, allows only 30 s into the future, and has no replay guard. Its pieces (event parsing,
//! `Event::verify`, the SHA-256 type) are.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use nostr::hashes::Hash as _;
use nostr::hashes::sha256::Hash as Sha256Hash;
use nostr::types::url::Host;
use nostr::{Event, EventId, JsonUtil as _, Kind, PublicKey, Timestamp, Url};

/// How far `created_at` may be from the relay's clock, either way.
pub const MAX_SKEW_SECS: u64 = 60;

/// Auth events larger than this are refused before they are decoded (they are a few hundred
/// bytes in practice).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Why a request's authorization was refused. The REST answer is 401 with
/// `{"error": "missing Nostr auth"}` for [`Nip98Error::Missing`] and
/// `{"error": "NIP-98: <this error>"}` for every other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nip98Error {
    /// No `Authorization: Nostr …` header.
    #[error("missing Nostr auth")]
    Missing,
    /// The header is too large to be an auth event.
    #[error("authorization header too large")]
    TooLarge,
    /// The part after `Nostr ` is not standard base64.
    #[error("invalid base64: {0}")]
    Base64(String),
    /// The decoded bytes are not an event.
    #[error("invalid event JSON: {0}")]
    Json(String),
    /// The event is not kind 27235.
    #[error("wrong kind {0}, expected 27235")]
    WrongKind(u16),
    /// The id or the signature does not verify.
    #[error("invalid id or signature: {0}")]
    Signature(String),
    /// `created_at` is too far from now.
    #[error(
        "created_at {created_at} is {off_by} s from the relay's clock (limit {MAX_SKEW_SECS} s)"
    )]
    Stale {
        /// The event's `created_at`.
        created_at: u64,
        /// How far it is from now, in seconds.
        off_by: u64,
    },
    /// A required tag is absent.
    #[error("missing {0} tag")]
    MissingTag(&'static str),
    /// The `u` tag names another URL.
    #[error("u tag {found:?} does not match the request URL {expected:?}")]
    WrongUrl {
        /// The tag's URL.
        found: String,
        /// The URL the request was sent to.
        expected: String,
    },
    /// The `method` tag names another method.
    #[error("method tag {found:?} does not match the request method {expected}")]
    WrongMethod {
        /// The tag's method.
        found: String,
        /// The request's method.
        expected: String,
    },
    /// The `payload` tag is not the body's hash.
    #[error("payload tag does not match sha256 of the body")]
    WrongPayload,
    /// The auth event was used before.
    #[error("auth event {0} already used")]
    Replayed(String),
}

impl Nip98Error {
    /// The `error` text of the 401 answer.
    #[must_use]
    pub fn http_message(&self) -> String {
        match self {
            Self::Missing => self.to_string(),
            other => format!("NIP-98: {other}"),
        }
    }
}

/// What one request presents to the verifier.
#[derive(Debug, Clone, Copy)]
pub struct HttpRequest<'a> {
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// The URL the request was sent to: scheme, the `Host` header, the path.
    pub url: &'a str,
    /// `POST`, `GET`, …
    pub method: &'a str,
    /// The exact body bytes.
    pub body: &'a [u8],
}

/// Checks NIP-98 headers and remembers the auth events it accepted (the replay guard).
#[derive(Debug, Default)]
pub struct Nip98Verifier {
    /// Accepted auth event ids and their `created_at`. An entry older than twice the allowed
    /// skew is pruned: such an event would be refused as stale anyway.
    seen: Mutex<HashMap<EventId, Timestamp>>,
}

impl Nip98Verifier {
    /// An empty replay guard.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies `request`'s authorization against the clock `now`; the signer's key.
    ///
    /// # Errors
    ///
    /// The first check that fails, in the order of the module's list.
    pub fn verify(
        &self,
        request: HttpRequest<'_>,
        now: Timestamp,
    ) -> Result<PublicKey, Nip98Error> {
        let event = decode_header(request.authorization)?;
        if event.kind != Kind::HttpAuth {
            return Err(Nip98Error::WrongKind(event.kind.as_u16()));
        }
        event
            .verify()
            .map_err(|e| Nip98Error::Signature(e.to_string()))?;
        let off_by = now.as_secs().abs_diff(event.created_at.as_secs());
        if off_by > MAX_SKEW_SECS {
            return Err(Nip98Error::Stale {
                created_at: event.created_at.as_secs(),
                off_by,
            });
        }
        let url = tag_value(&event, "u").ok_or(Nip98Error::MissingTag("u"))?;
        if !same_url(url, request.url) {
            return Err(Nip98Error::WrongUrl {
                found: url.to_owned(),
                expected: request.url.to_owned(),
            });
        }
        let method = tag_value(&event, "method").ok_or(Nip98Error::MissingTag("method"))?;
        if !method.eq_ignore_ascii_case(request.method) {
            return Err(Nip98Error::WrongMethod {
                found: method.to_owned(),
                expected: request.method.to_owned(),
            });
        }
        let payload = tag_value(&event, "payload").ok_or(Nip98Error::MissingTag("payload"))?;
        // Sha256Hash's Display is lowercase hex; the tag must be exactly that.
        if payload != Sha256Hash::hash(request.body).to_string() {
            return Err(Nip98Error::WrongPayload);
        }
        self.remember(event.id, event.created_at, now)?;
        Ok(event.pubkey)
    }

    /// Records an accepted auth event; refuses one seen before.
    fn remember(
        &self,
        id: EventId,
        created_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), Nip98Error> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let horizon = now.as_secs().saturating_sub(2 * MAX_SKEW_SECS);
        seen.retain(|_, at| at.as_secs() >= horizon);
        if seen.insert(id, created_at).is_some() {
            return Err(Nip98Error::Replayed(id.to_hex()));
        }
        Ok(())
    }
}

/// The event inside `Authorization: Nostr <base64>`.
fn decode_header(header: Option<&str>) -> Result<Event, Nip98Error> {
    let encoded = header
        .and_then(|h| h.strip_prefix("Nostr "))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .ok_or(Nip98Error::Missing)?;
    if encoded.len() > MAX_HEADER_BYTES {
        return Err(Nip98Error::TooLarge);
    }
    let json = BASE64
        .decode(encoded)
        .map_err(|e| Nip98Error::Base64(e.to_string()))?;
    Event::from_json(json).map_err(|e| Nip98Error::Json(e.to_string()))
}

/// The second element of the event's first tag named `name`.
fn tag_value<'a>(event: &'a Event, name: &str) -> Option<&'a str> {
    event.tags.iter().find_map(|tag| match tag.as_slice() {
        [tag_name, value, ..] if tag_name == name => Some(value.as_str()),
        _ => None,
    })
}

/// Whether two URLs name the same resource, as the Buzz relay compares them: scheme and host
/// ignore case, a trailing slash does not count, and `localhost`, `127.x.y.z` and `::1` are one
/// host. Ports are compared (a missing port is the scheme's default), and so are query strings.
/// A string that is not an absolute URL matches nothing.
#[must_use]
pub fn same_url(a: &str, b: &str) -> bool {
    match (normalise(a), normalise(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `scheme://host:port/path?query` with the rules of [`same_url`] applied.
fn normalise(text: &str) -> Option<String> {
    // The url crate lowercases the scheme and a domain host, and fills in the default port.
    let url = Url::parse(text).ok()?;
    let host = match url.host()? {
        Host::Domain(domain) if domain.eq_ignore_ascii_case("localhost") => "loopback".into(),
        Host::Ipv4(ip) if ip.is_loopback() => "loopback".into(),
        Host::Ipv6(ip) if ip.is_loopback() => "loopback".into(),
        other => other.to_string(),
    };
    let port = url
        .port_or_known_default()
        .map_or(String::new(), |p| format!(":{p}"));
    let path = url.path().trim_end_matches('/');
    let query = url.query().map_or(String::new(), |q| format!("?{q}"));
    Some(format!("{}://{host}{port}{path}{query}", url.scheme()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_compare_as_the_buzz_relay_compares_them() {
        assert!(same_url(
            "http://127.0.0.1:3000/events",
            "http://localhost:3000/events/"
        ));
        assert!(same_url(
            "HTTP://LOCALHOST:3000/query",
            "http://[::1]:3000/query"
        ));
        assert!(same_url("http://127.0.0.2:80/", "http://localhost"));
        assert!(!same_url(
            "http://127.0.0.1:3000/events",
            "http://127.0.0.1:3001/events"
        ));
        assert!(!same_url(
            "http://127.0.0.1:3000/events",
            "http://127.0.0.1:3000/query"
        ));
        assert!(!same_url(
            "https://127.0.0.1:3000/events",
            "http://127.0.0.1:3000/events"
        ));
        assert!(!same_url("/events", "/events"));
    }

    #[test]
    fn messages_carry_the_prefix() {
        assert_eq!(Nip98Error::Missing.http_message(), "missing Nostr auth");
        assert_eq!(
            Nip98Error::MissingTag("payload").http_message(),
            "NIP-98: missing payload tag"
        );
    }
}
