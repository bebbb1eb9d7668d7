//! The REST routes the Buzz relay serves beside its websocket, in its shapes.
//!
//! * `POST /events`: one bare signed event. 200 `{"event_id","accepted","message"}`;
//!   400 `{"error":"invalid event JSON: …"}` for a body that is not an event and
//!   400 `{"error":"invalid: …"}` (or another NIP-01 reason) for one the relay refuses;
//!   403 when the event's author is not the NIP-98 signer (gift wraps, kind 1059, excepted).
//! * `POST /query`: a JSON array of NIP-01 filters. 200 with a bare array of events: each
//!   filter's hits newest first (`created_at` descending, then id ascending), the filters'
//!   results appended in order, not de-duplicated.
//! * `POST /count`: a JSON array of filters. 200 `{"count": N}`, N the number of distinct
//!   events matching any of them.
//! * `GET /info`, and `GET /` with `Accept: application/nostr+json`: the NIP-11 document.
//!
//! Every `POST` is first checked against the REST fault (429/503), then NIP-98 (401); errors
//! use the envelope `{"error": "<message>"}`.

use std::collections::HashSet;
use std::net::SocketAddr;

use hyper::StatusCode;
use nostr::{Event, EventId, Filter, JsonUtil as _, Kind, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::RestFailureKind;
use crate::ingest::{self, Verdict};
use crate::nip98::HttpRequest;
use crate::state::{RestCall, Shared};

/// Every event a query can return at most per filter (the Buzz relay's `max_limit`).
pub const MAX_LIMIT: usize = 10_000;

/// A route's answer: a status and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, sent as `application/json` (NIP-11 documents as `application/nostr+json`).
    pub body: Value,
    /// `Retry-After`, in seconds, for a 429.
    pub retry_after_secs: Option<u64>,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Self {
            status: StatusCode::OK,
            body,
            retry_after_secs: None,
        }
    }

    /// `{"error": message}` with `status`.
    #[must_use]
    pub fn error(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "error": message.into() }),
            retry_after_secs: None,
        }
    }
}

/// The `POST` routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /events`
    Events,
    /// `POST /query`
    Query,
    /// `POST /count`
    Count,
}

impl Route {
    /// The route for a path, if it is one.
    #[must_use]
    pub fn from_path(path: &str) -> Option<Self> {
        match path.trim_end_matches('/') {
            "/events" => Some(Self::Events),
            "/query" => Some(Self::Query),
            "/count" => Some(Self::Count),
            _ => None,
        }
    }

    /// The route's path.
    #[must_use]
    pub fn path(self) -> &'static str {
        match self {
            Self::Events => "/events",
            Self::Query => "/query",
            Self::Count => "/count",
        }
    }
}

/// One `POST` request, as the server read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post<'a> {
    pub route: Route,
    /// `http://` + the `Host` header + the path: what the NIP-98 `u` tag must name.
    pub url: &'a str,
    pub authorization: Option<&'a str>,
    /// The `x-auth-tag` header (an owner's attestation of the signer), if any.
    pub auth_tag: Option<&'a str>,
    pub body: &'a [u8],
    pub peer: SocketAddr,
}

/// Answers a `POST` route.
pub(crate) async fn post(shared: &Shared, request: Post<'_>) -> Reply {
    if let Some(failure) = shared.faults.take_rest_failure() {
        tracing::info!(route = ?request.route, "fault: {failure:?}");
        return failure_reply(failure);
    }
    let signer = match shared.nip98.verify(
        HttpRequest {
            authorization: request.authorization,
            url: request.url,
            method: "POST",
            body: request.body,
        },
        Timestamp::now(),
    ) {
        Ok(signer) => signer,
        Err(e) => return Reply::error(StatusCode::UNAUTHORIZED, e.http_message()),
    };
    shared.record_rest_call(RestCall {
        path: request.route.path(),
        signer,
        auth_tag: request.auth_tag.map(str::to_owned),
    });
    if let Some(members) = &shared.members
        && !members.contains(&signer)
        && request.auth_tag.is_none()
    {
        return Reply {
            status: StatusCode::FORBIDDEN,
            body: json!({"error": "relay_membership_required",
                "message": "this relay serves its members: the signer is not one, and no x-auth-tag names its owner"}),
            retry_after_secs: None,
        };
    }
    match request.route {
        Route::Events => {
            let event = match Event::from_json(request.body) {
                Ok(event) => event,
                Err(e) => {
                    return Reply::error(
                        StatusCode::BAD_REQUEST,
                        format!("invalid event JSON: {e}"),
                    );
                }
            };
            if event.pubkey != signer && event.kind != Kind::GiftWrap {
                return Reply::error(
                    StatusCode::FORBIDDEN,
                    "invalid: event pubkey does not match authenticated identity",
                );
            }
            publish(shared, request.peer, event).await
        }
        Route::Query => match parse_filters(request.body) {
            Ok(filters) => query(shared, filters).await,
            Err(reply) => reply,
        },
        Route::Count => match parse_filters(request.body) {
            Ok(filters) => count(shared, filters).await,
            Err(reply) => reply,
        },
    }
}

fn failure_reply(failure: RestFailureKind) -> Reply {
    match failure {
        RestFailureKind::RateLimited { retry_after_secs } => Reply {
            retry_after_secs: Some(retry_after_secs),
            ..Reply::error(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate-limited: quota exceeded; retry in {retry_after_secs}s"),
            )
        },
        RestFailureKind::Unavailable => Reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable: the relay's rate limiter is down (test relay fault)",
        ),
    }
}

/// The body of a 200 from `POST /events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsAnswer {
    /// The event's id, hex.
    pub event_id: String,
    /// Whether the relay has it.
    pub accepted: bool,
    /// Empty, or a reason such as `duplicate: …`.
    pub message: String,
}

async fn publish(shared: &Shared, peer: SocketAddr, event: Event) -> Reply {
    match ingest::publish(&shared.relay, &shared.keys, &shared.relay_url, peer, event).await {
        Ok(Verdict {
            event_id,
            accepted: true,
            message,
        }) => Reply::ok(json!(EventsAnswer {
            event_id: event_id.to_hex(),
            accepted: true,
            message,
        })),
        // The builder's reasons already carry NIP-01's prefixes (`invalid: …`, `blocked: …`).
        Ok(Verdict { message, .. }) => Reply::error(StatusCode::BAD_REQUEST, message),
        Err(e) => {
            tracing::error!("REST publish: {e}");
            Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "internal server error")
        }
    }
}

/// One filter of a `/query` or `/count` body, with the bridge's paging cursor: `before_id` (with
/// `until`) asks for the events after the one it names, in the answer's order (older, or as old
/// with a greater id), so a client pages backwards through a channel.
struct Paged {
    filter: Filter,
    before_id: Option<EventId>,
}

/// A `/query` or `/count` body: a JSON array of filters, each possibly with `before_id`.
fn parse_filters(body: &[u8]) -> Result<Vec<Paged>, Reply> {
    let invalid =
        |why: String| Reply::error(StatusCode::BAD_REQUEST, format!("invalid filters: {why}"));
    let objects = serde_json::from_slice::<Vec<serde_json::Map<String, serde_json::Value>>>(body)
        .map_err(|e| invalid(e.to_string()))?;
    objects
        .into_iter()
        .map(|mut object| {
            let before_id = match object.remove("before_id") {
                None => None,
                Some(serde_json::Value::String(hex)) if is_event_id(&hex) => {
                    Some(EventId::from_hex(&hex).map_err(|e| invalid(format!("before_id: {e}")))?)
                }
                Some(_) => return Err(invalid("before_id must be 64 hex characters".into())),
            };
            let filter: Filter = serde_json::from_value(serde_json::Value::Object(object))
                .map_err(|e| invalid(e.to_string()))?;
            if before_id.is_some() && filter.until.is_none() {
                return Err(invalid("before_id needs until".into()));
            }
            Ok(Paged { filter, before_id })
        })
        .collect()
}

/// 64 lowercase hex characters, as event ids are written.
fn is_event_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

async fn query(shared: &Shared, filters: Vec<Paged>) -> Reply {
    let mut events: Vec<Event> = Vec::new();
    for filter in filters {
        match matching(shared, filter).await {
            Ok(mut hits) => events.append(&mut hits),
            Err(reply) => return reply,
        }
    }
    Reply::ok(json!(events))
}

async fn count(shared: &Shared, filters: Vec<Paged>) -> Reply {
    let mut ids = HashSet::new();
    for filter in filters {
        match matching(shared, filter).await {
            Ok(hits) => ids.extend(hits.into_iter().map(|event| event.id)),
            Err(reply) => return reply,
        }
    }
    Reply::ok(json!({ "count": ids.len() }))
}

/// One filter's hits from the store, newest first (`Event`'s order: `created_at` descending,
/// then id ascending), after its cursor if it has one, at most `limit` (capped at
/// [`MAX_LIMIT`]).
async fn matching(shared: &Shared, paged: Paged) -> Result<Vec<Event>, Reply> {
    let Paged {
        mut filter,
        before_id,
    } = paged;
    let limit = filter.limit.map_or(MAX_LIMIT, |l| l.min(MAX_LIMIT));
    let cursor = before_id.zip(filter.until);
    // With a cursor the events of its second that come before it are dropped after the query,
    // so the store is not asked to cut at `limit` first.
    filter.limit = cursor.is_none().then_some(limit);
    match shared.database.query(filter).await {
        Ok(found) => {
            let mut events = found.to_vec();
            events.sort();
            if let Some((id, until)) = cursor {
                events.retain(|e| e.created_at < until || (e.created_at == until && e.id > id));
            }
            events.truncate(limit);
            Ok(events)
        }
        Err(e) => {
            tracing::error!("REST query: {e}");
            Err(Reply::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error",
            ))
        }
    }
}

/// The NIP-11 relay information document, in the fields the Buzz relay publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayInfo {
    /// The relay's name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// The relay's own public key, hex.
    pub pubkey: String,
    /// Whom to ask (empty).
    pub contact: String,
    /// The NIPs served.
    pub supported_nips: Vec<u16>,
    /// The software.
    pub software: String,
    /// Its version.
    pub version: String,
    /// The limits.
    pub limitation: Limitation,
    /// The relay's own signing key, hex (the Buzz relay signs its group events with it).
    #[serde(rename = "self")]
    pub self_pubkey: String,
}

/// NIP-11 `limitation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limitation {
    /// Subscriptions per connection.
    pub max_subscriptions: u32,
    /// The largest `limit` served.
    pub max_limit: u32,
    /// The longest subscription id.
    pub max_subid_length: u32,
    /// Whether reads and writes need NIP-42 (always here).
    pub auth_required: bool,
    /// Whether writes are restricted (to authenticated clients).
    pub restricted_writes: bool,
    /// Whether the relay charges (never).
    pub payment_required: bool,
}

/// Subscriptions per websocket connection (the Buzz relay's `max_subscriptions`).
pub const MAX_SUBSCRIPTIONS: u32 = 1024;
/// The longest subscription id (the Buzz relay's `max_subid_length`).
pub const MAX_SUBID_LENGTH: u32 = 256;

/// The NIPs this relay serves: 1 (the protocol), 11 (this document), 42 (AUTH), 45 (COUNT,
/// the builder's), 98 (REST authorization).
pub const SUPPORTED_NIPS: [u16; 5] = [1, 11, 42, 45, 98];

pub(crate) fn info(shared: &Shared) -> RelayInfo {
    let pubkey = shared.keys.public_key().to_hex();
    RelayInfo {
        name: "buzz-test-relay".into(),
        description: "A loopback Nostr relay for Buzz end-to-end tests".into(),
        pubkey: pubkey.clone(),
        contact: String::new(),
        supported_nips: SUPPORTED_NIPS.to_vec(),
        software: "buzz-test-relay".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        limitation: Limitation {
            max_subscriptions: MAX_SUBSCRIPTIONS,
            max_limit: MAX_LIMIT as u32,
            max_subid_length: MAX_SUBID_LENGTH,
            auth_required: true,
            restricted_writes: true,
            payment_required: false,
        },
        self_pubkey: pubkey,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_ignore_a_trailing_slash() {
        assert_eq!(Route::from_path("/events/"), Some(Route::Events));
        assert_eq!(Route::from_path("/query"), Some(Route::Query));
        assert_eq!(Route::from_path("/count"), Some(Route::Count));
        assert_eq!(Route::from_path("/info"), None);
    }

    #[test]
    fn a_rate_limit_names_its_delay() {
        let reply = failure_reply(RestFailureKind::RateLimited {
            retry_after_secs: 7,
        });
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            reply.body,
            json!({"error": "rate-limited: quota exceeded; retry in 7s"})
        );
        assert_eq!(reply.retry_after_secs, Some(7));
    }
}
