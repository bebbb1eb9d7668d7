//! Each injected fault, once.

mod common;

use std::time::Duration;

use hyper::StatusCode;
use nostr::{
    ClientMessage, Filter, JsonUtil as _, Keys, Kind, RelayMessage, SubscriptionId, Timestamp,
};
use serde_json::json;
use tokio::time::Instant;

use buzz_test_relay::{
    ClosedFault, ClosedSubscriptionFault, Faults, RawFrame, RestFailure, RestFailureKind,
};
use common::{WsClient, chat, post, publish, start, start_with};
use tokio_tungstenite::tungstenite::Error;
use tokio_tungstenite::tungstenite::error::CapacityError;

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

#[tokio::test]
async fn closed_subscription_closes_only_its_reqs_and_every_req_is_recorded() {
    let relay = start_with(Faults {
        closed_subscription: Some(ClosedSubscriptionFault {
            subscription: "ch-a".into(),
            reason: "restricted: not a channel member".into(),
            count: 1,
        }),
        ..Faults::default()
    })
    .await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    let filter = || vec![Filter::new().kind(Kind::Custom(9))];

    client.subscribe("ch-b", filter()).await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "ch-b"),
        other => panic!("expected EOSE for ch-b, got {}", other.as_json()),
    }
    client.subscribe("ch-a", filter()).await;
    match client.next().await {
        RelayMessage::Closed {
            subscription_id,
            message,
        } => {
            assert_eq!(subscription_id.as_str(), "ch-a");
            assert_eq!(message, "restricted: not a channel member");
        }
        other => panic!("expected CLOSED for ch-a, got {}", other.as_json()),
    }
    // Its count is used up: the next REQ for it is served.
    client.subscribe("ch-a", filter()).await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "ch-a"),
        other => panic!("expected EOSE for ch-a, got {}", other.as_json()),
    }

    // A second connection: its REQ carries its number.
    let mut second = WsClient::connect(&relay.ws_url()).await;
    second.authenticate(&Keys::generate()).await;
    second.subscribe("ch-b", filter()).await;
    assert!(matches!(
        second.next().await,
        RelayMessage::EndOfStoredEvents(_)
    ));
    let seen: Vec<(String, u64)> = relay
        .requests()
        .into_iter()
        .map(|r| (r.subscription_id, r.connection))
        .collect();
    assert_eq!(
        seen,
        [
            ("ch-b".to_owned(), 1),
            ("ch-a".to_owned(), 1),
            ("ch-a".to_owned(), 1),
            ("ch-b".to_owned(), 2),
        ]
    );
    assert_eq!(relay.connections(), 2);
    let times: Vec<Instant> = relay.requests().iter().map(|r| r.at).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[tokio::test]
async fn frames_after_auth_follow_the_ok_once_and_the_connection_stays() {
    let relay = start_with(Faults {
        after_auth: vec![
            RawFrame::Text("this is not json".into()),
            RawFrame::Text(r#"["NOPE",1]"#.into()),
            RawFrame::PaddedNotice { bytes: 1000 },
        ],
        ..Faults::default()
    })
    .await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    assert_eq!(client.next_text().await, "this is not json");
    assert_eq!(client.next_text().await, r#"["NOPE",1]"#);
    let padded = client.next_text().await;
    assert_eq!(padded.len(), 1000);
    assert!(matches!(
        RelayMessage::from_json(&padded).expect("a relay message"),
        RelayMessage::Notice(_)
    ));
    client
        .subscribe("s", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    assert!(matches!(
        client.next().await,
        RelayMessage::EndOfStoredEvents(_)
    ));

    // Taken by the first client: the next one gets none.
    let mut second = WsClient::connect(&relay.ws_url()).await;
    second.authenticate(&Keys::generate()).await;
    second
        .subscribe("s", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    match second.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "s"),
        other => panic!("expected EOSE, got {}", other.as_json()),
    }
}

#[tokio::test]
async fn a_refused_auth_gets_no_frames_after_it() {
    let relay = start_with(Faults {
        after_auth: vec![RawFrame::Text(
            "for the first one that authenticates".into(),
        )],
        ..Faults::default()
    })
    .await;
    let mut refused = WsClient::connect(&relay.ws_url()).await;
    let challenge = refused.challenge().await;
    let wrong = nostr::EventBuilder::auth(
        challenge,
        nostr::RelayUrl::parse("ws://127.0.0.1:1").expect("url"),
    )
    .sign_with_keys(&Keys::generate())
    .expect("sign");
    let id = wrong.id;
    refused.send(ClientMessage::auth(wrong)).await;
    assert!(!refused.ok_for(id).await.0);

    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    assert_eq!(
        client.next_text().await,
        "for the first one that authenticates"
    );
}

#[tokio::test]
async fn a_frame_over_16_mib_is_over_a_default_clients_limit() {
    let limit = 16 << 20;
    let relay = start_with(Faults {
        after_auth: vec![RawFrame::PaddedNotice { bytes: limit + 1 }],
        ..Faults::default()
    })
    .await;
    // tokio-tungstenite's default configuration, as buzz-acp's.
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    match client.next_frame().await {
        Some(Err(Error::Capacity(CapacityError::MessageTooLong { size, max_size }))) => {
            assert_eq!((size, max_size), (limit + 1, limit));
        }
        other => panic!("expected the frame limit, got {other:?}"),
    }
}

#[tokio::test]
async fn notices_and_targeted_closes_arrive_in_the_order_asked() {
    let relay = start().await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&Keys::generate()).await;
    for id in ["a", "b"] {
        client
            .subscribe(id, vec![Filter::new().kind(Kind::Custom(9))])
            .await;
        assert!(matches!(
            client.next().await,
            RelayMessage::EndOfStoredEvents(_)
        ));
    }
    assert_eq!(
        relay.send_notice("rate-limited: slow down; retry in 1 s"),
        1
    );
    assert_eq!(relay.close_subscription("a", "error: idle"), 1);
    // `a` is no longer live: closing it again does nothing; the NOTICE after it comes next.
    relay.close_subscription("a", "error: idle");
    relay.send_notice("done");
    match client.next().await {
        RelayMessage::Notice(text) => assert_eq!(text, "rate-limited: slow down; retry in 1 s"),
        other => panic!("expected the NOTICE, got {}", other.as_json()),
    }
    match client.next().await {
        RelayMessage::Closed {
            subscription_id,
            message,
        } => {
            assert_eq!(subscription_id.as_str(), "a");
            assert_eq!(message, "error: idle");
        }
        other => panic!("expected CLOSED for a, got {}", other.as_json()),
    }
    match client.next().await {
        RelayMessage::Notice(text) => assert_eq!(text, "done"),
        other => panic!("expected the second NOTICE, got {}", other.as_json()),
    }
    // `b` is still served.
    let keys = Keys::generate();
    let event = chat(&keys, CHANNEL, &[], "for b", Timestamp::now().as_secs());
    publish(&relay, &keys, &event).await;
    match client.next().await {
        RelayMessage::Event {
            subscription_id, ..
        } => assert_eq!(subscription_id.as_str(), "b"),
        other => panic!("expected the event for b, got {}", other.as_json()),
    }
}
