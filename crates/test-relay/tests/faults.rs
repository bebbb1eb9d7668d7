//! Each injected fault, once.

mod common;

use std::time::Duration;

use hyper::StatusCode;
use nostr::{
    ClientMessage, Filter, JsonUtil as _, Keys, Kind, RelayMessage, SubscriptionId, Timestamp,
};
use serde_json::json;
use tokio::time::Instant;

use buzz_test_relay::{ClosedFault, Faults, RestFailure, RestFailureKind};
use common::{WsClient, chat, post, publish, start, start_with};

/// A channel id for the events these tests publish.
const CHANNEL: &str = "3f9a1c2e-5b7d-4e8f-a1c3-5d7e9f1a3b5c";

#[tokio::test]
async fn refuse_auth_refuses_everyone() {
    let relay = start_with(Faults {
        refuse_auth: true,
        ..Faults::default()
    })
    .await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    let challenge = client.challenge().await;
    let (ok, message) = client.answer(&Keys::generate(), &challenge).await;
    assert!(!ok);
    assert!(message.starts_with("restricted:"), "{message}");
    // Still unauthenticated: reads are refused.
    client
        .subscribe("s", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    loop {
        match client.next().await {
            RelayMessage::Closed { message, .. } => {
                assert!(message.starts_with("auth-required:"), "{message}");
                break;
            }
            RelayMessage::Auth { .. } => {}
            other => panic!("unexpected {}", other.as_json()),
        }
    }
}

#[tokio::test]
async fn drop_connections_after_cuts_the_socket() {
    let after = Duration::from_secs(1);
    let relay = start_with(Faults {
        drop_connections_after: Some(after),
        ..Faults::default()
    })
    .await;
    let opened = Instant::now();
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    // Wait for the end itself (the hang guard is 30 s); nothing else arrives before it.
    assert!(client.next_or_end().await.is_none());
    // A lower bound only: a timer never fires early.
    assert!(opened.elapsed() >= after);
}

#[tokio::test]
async fn rest_failures_answer_the_next_requests_then_stop() {
    let relay = start_with(Faults {
        rest_failure: Some(RestFailure {
            kind: RestFailureKind::RateLimited {
                retry_after_secs: 3,
            },
            count: 2,
        }),
        ..Faults::default()
    })
    .await;
    let keys = Keys::generate();
    for _ in 0..2 {
        let answer = post(&relay, &keys, "/count", b"[]").await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            answer.body,
            json!({"error": "rate-limited: quota exceeded; retry in 3s"})
        );
        assert_eq!(answer.headers["retry-after"], "3");
    }
    assert_eq!(
        post(&relay, &keys, "/count", b"[]").await.status,
        StatusCode::OK
    );

    // Re-armed at run time, as a 503.
    relay.set_faults(Faults {
        rest_failure: Some(RestFailure {
            kind: RestFailureKind::Unavailable,
            count: 1,
        }),
        ..Faults::default()
    });
    let answer = post(&relay, &keys, "/count", b"[]").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.body["error"].is_string());
    assert_eq!(
        post(&relay, &keys, "/count", b"[]").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn notice_follows_the_challenge() {
    let relay = start_with(Faults {
        notice: Some("rate-limited: slow down; retry in 5 s".into()),
        ..Faults::default()
    })
    .await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.challenge().await;
    match client.next().await {
        RelayMessage::Notice(message) => {
            assert_eq!(message, "rate-limited: slow down; retry in 5 s");
        }
        other => panic!("expected NOTICE, got {}", other.as_json()),
    }
}

#[tokio::test]
async fn closed_answers_the_next_req_then_serves() {
    let relay = start_with(Faults {
        closed: Some(ClosedFault {
            reason: "restricted: not a channel member".into(),
            count: 1,
        }),
        ..Faults::default()
    })
    .await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    let filter = || vec![Filter::new().kind(Kind::Custom(9))];

    client.subscribe("first", filter()).await;
    match client.next().await {
        RelayMessage::Closed {
            subscription_id,
            message,
        } => {
            assert_eq!(subscription_id.as_str(), "first");
            assert_eq!(message, "restricted: not a channel member");
        }
        other => panic!("expected CLOSED, got {}", other.as_json()),
    }
    client.subscribe("second", filter()).await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "second"),
        other => panic!("expected EOSE, got {}", other.as_json()),
    }
}

#[tokio::test]
async fn faults_are_off_by_default() {
    let relay = start().await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    client
        .subscribe("s", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    assert!(matches!(
        client.next().await,
        RelayMessage::EndOfStoredEvents(_)
    ));
    assert_eq!(
        post(&relay, &Keys::generate(), "/count", b"[]")
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn close_subscriptions_ends_the_live_ones_and_keeps_the_connection() {
    let relay = start().await;
    let keys = Keys::generate();
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&keys).await;
    let filter = || vec![Filter::new().kind(Kind::Custom(9))];
    for id in ["a", "b", "gone"] {
        client.subscribe(id, filter()).await;
        match client.next().await {
            RelayMessage::EndOfStoredEvents(eose) => assert_eq!(eose.as_str(), id),
            other => panic!("expected EOSE, got {}", other.as_json()),
        }
    }
    // The client ends one itself: it is not live any more, so it gets no CLOSED. (The front
    // reads the client's frames in order: once `sync` is answered, the CLOSE was read.)
    client
        .send(ClientMessage::close(SubscriptionId::new("gone")))
        .await;
    client.subscribe("sync", filter()).await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(eose) => assert_eq!(eose.as_str(), "sync"),
        other => panic!("expected EOSE, got {}", other.as_json()),
    }

    assert_eq!(
        relay.close_subscriptions("restricted: channel access revoked"),
        1
    );
    for id in ["a", "b", "sync"] {
        match client.next().await {
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                assert_eq!(subscription_id.as_str(), id);
                assert_eq!(message, "restricted: channel access revoked");
            }
            other => panic!("expected CLOSED for {id}, got {}", other.as_json()),
        }
    }

    // The connection serves on; only the new subscription gets a new event.
    client.subscribe("after", filter()).await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(eose) => assert_eq!(eose.as_str(), "after"),
        other => panic!("expected EOSE, got {}", other.as_json()),
    }
    let event = chat(
        &keys,
        CHANNEL,
        &[],
        "after the close",
        Timestamp::now().as_secs(),
    );
    publish(&relay, &keys, &event).await;
    match client.next().await {
        RelayMessage::Event {
            subscription_id,
            event: got,
        } => {
            assert_eq!(subscription_id.as_str(), "after");
            assert_eq!(got.id, event.id);
        }
        other => panic!("expected the event for `after`, got {}", other.as_json()),
    }
    client.subscribe("probe", filter()).await;
    loop {
        match client.next().await {
            RelayMessage::Event {
                subscription_id, ..
            } => assert_eq!(
                subscription_id.as_str(),
                "probe",
                "a closed subscription got an event"
            ),
            RelayMessage::EndOfStoredEvents(eose) => {
                assert_eq!(eose.as_str(), "probe");
                break;
            }
            other => panic!("unexpected {}", other.as_json()),
        }
    }
}
