//! The relay as a Buzz client sees it: NIP-42 on the websocket, the REST bridge with NIP-98,
//! and one store behind both.

mod common;

use hyper::{Method, StatusCode};
use nostr::{
    Alphabet, Filter, JsonUtil as _, Keys, Kind, RelayMessage, SingleLetterTag, Timestamp,
};
use serde_json::{Value, json};

use buzz_test_relay::RelayInfo;
use common::{AuthSpec, WsClient, chat, post, post_with, publish, request, start};

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
const OTHER_CHANNEL: &str = "7c1d9e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f";

fn h() -> SingleLetterTag {
    SingleLetterTag::lowercase(Alphabet::H)
}

#[tokio::test]
async fn auth_round_trip() {
    let relay = start().await;
    let keys = Keys::generate();
    let mut client = WsClient::connect(&relay.ws_url()).await;

    // The challenge comes first, unasked.
    let challenge = client.challenge().await;

    // Before AUTH, a read is refused (with a fresh challenge) and so is a write.
    client
        .subscribe("early", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    loop {
        match client.next().await {
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                assert_eq!(subscription_id.as_str(), "early");
                assert!(message.starts_with("auth-required:"), "{message}");
                break;
            }
            RelayMessage::Auth { .. } => {}
            other => panic!("unexpected {}", other.as_json()),
        }
    }
    let early = chat(&keys, CHANNEL, &[], "too early", Timestamp::now().as_secs());
    client
        .send(nostr::ClientMessage::event(early.clone()))
        .await;
    let (ok, message) = client.ok_for(early.id).await;
    assert!(!ok);
    assert!(message.starts_with("auth-required:"), "{message}");

    // An AUTH naming another relay is refused before the builder sees it.
    let wrong = nostr::EventBuilder::auth(
        challenge.clone(),
        nostr::RelayUrl::parse("ws://127.0.0.1:1").expect("url"),
    )
    .sign_with_keys(&keys)
    .expect("sign");
    let wrong_id = wrong.id;
    client.send(nostr::ClientMessage::auth(wrong)).await;
    let (ok, message) = client.ok_for(wrong_id).await;
    assert!(!ok);
    assert!(message.starts_with("invalid:"), "{message}");

    // The right answer is accepted; reads and writes then work.
    let (ok, message) = client.answer(&keys, &challenge).await;
    assert!(ok, "{message}");
    client
        .subscribe("late", vec![Filter::new().kind(Kind::Custom(9))])
        .await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "late"),
        other => panic!("unexpected {}", other.as_json()),
    }
    client
        .send(nostr::ClientMessage::event(early.clone()))
        .await;
    let (ok, message) = client.ok_for(early.id).await;
    assert!(ok, "{message}");
}

#[tokio::test]
async fn pings_are_answered() {
    let relay = start().await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.ping(b"keepalive").await;
}

#[tokio::test]
async fn an_unreadable_frame_gets_a_notice_and_the_connection_lives_on() {
    let relay = start().await;
    let mut client = WsClient::connect(&relay.ws_url()).await;
    let challenge = client.challenge().await;
    client.send_raw("not a nostr message").await;
    match client.next().await {
        RelayMessage::Notice(message) => assert!(message.starts_with("invalid:"), "{message}"),
        other => panic!("expected NOTICE, got {}", other.as_json()),
    }
    let (ok, message) = client.answer(&Keys::generate(), &challenge).await;
    assert!(ok, "{message}");
}

#[tokio::test]
async fn a_close_is_answered_and_a_stopped_relay_ends_its_connections() {
    let relay = start().await;
    let mut leaving = WsClient::connect(&relay.ws_url()).await;
    leaving.challenge().await;
    assert!(leaving.close().await, "the relay answers a close frame");

    let mut staying = WsClient::connect(&relay.ws_url()).await;
    staying.authenticate(&Keys::generate()).await;
    drop(relay);
    assert!(staying.next_or_end().await.is_none());
}

#[tokio::test]
async fn an_auth_answer_may_name_the_relay_as_localhost() {
    let relay = start().await;
    let keys = Keys::generate();
    let url = relay.ws_url().replace("127.0.0.1", "localhost");
    let mut client = WsClient::connect(&url).await;
    client.authenticate(&keys).await;
}

#[tokio::test]
async fn a_rest_event_reaches_a_filtered_subscription() {
    let relay = start().await;
    let agent = Keys::generate();
    let human = Keys::generate();
    let now = Timestamp::now().as_secs();
    let since = now - 60;

    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&agent).await;
    // As buzz-acp subscribes: the channel, mentions of the agent, since a watermark.
    client
        .subscribe(
            &format!("ch-{CHANNEL}"),
            vec![
                Filter::new()
                    .kind(Kind::Custom(9))
                    .custom_tag(h(), CHANNEL)
                    .pubkey(agent.public_key())
                    .since(Timestamp::from(since)),
            ],
        )
        .await;
    assert!(matches!(
        client.next().await,
        RelayMessage::EndOfStoredEvents(_)
    ));

    // Three that must not match, published (and acknowledged) before the one that must: the
    // relay broadcasts in order, so the first EVENT the client sees is the proof.
    let other_channel = chat(&human, OTHER_CHANNEL, &[&agent], "elsewhere", now);
    let no_mention = chat(&human, CHANNEL, &[], "not for the agent", now);
    let too_old = chat(&human, CHANNEL, &[&agent], "before since", since - 10);
    for event in [&other_channel, &no_mention, &too_old] {
        publish(&relay, &human, event).await;
    }
    let wanted = chat(&human, CHANNEL, &[&agent], "hello agent", now);
    let answer = post(&relay, &human, "/events", wanted.as_json().as_bytes()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.body,
        json!({"event_id": wanted.id.to_hex(), "accepted": true, "message": ""})
    );

    match client.next().await {
        RelayMessage::Event {
            subscription_id,
            event,
        } => {
            assert_eq!(subscription_id.as_str(), format!("ch-{CHANNEL}"));
            assert_eq!(*event, wanted);
        }
        other => panic!("expected the event, got {}", other.as_json()),
    }

    // The same event again is a duplicate: accepted, with a reason.
    let again = post(&relay, &human, "/events", wanted.as_json().as_bytes()).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["accepted"], true);
    assert!(
        again.body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("duplicate:")),
        "{}",
        again.body
    );
}

#[tokio::test]
async fn a_websocket_event_is_in_the_rest_store() {
    let relay = start().await;
    let keys = Keys::generate();
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&keys).await;
    let event = chat(
        &keys,
        CHANNEL,
        &[],
        "over the socket",
        Timestamp::now().as_secs(),
    );
    client
        .send(nostr::ClientMessage::event(event.clone()))
        .await;
    assert!(client.ok_for(event.id).await.0);

    let filters = json!([{"ids": [event.id.to_hex()]}]).to_string();
    let answer = post(&relay, &keys, "/query", filters.as_bytes()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.body,
        json!([serde_json::to_value(&event).expect("json")])
    );
}

#[tokio::test]
async fn nip98_failures_are_401_with_the_reason() {
    let relay = start().await;
    let keys = Keys::generate();
    let body = b"[{\"kinds\":[9]}]";
    let url = format!("{}/query", relay.http_url());
    let good = AuthSpec::for_post(&url, body);

    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("missing header", None, "missing Nostr auth"),
        (
            "wrong u",
            Some(
                AuthSpec {
                    url: format!("{}/count", relay.http_url()),
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: u tag",
        ),
        (
            "wrong payload hash",
            Some(
                AuthSpec {
                    payload: Some(AuthSpec::for_post(&url, b"[]").payload.expect("hash")),
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: payload tag does not match",
        ),
        (
            "no payload tag",
            Some(
                AuthSpec {
                    payload: None,
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: missing payload tag",
        ),
        (
            "stale created_at",
            Some(
                AuthSpec {
                    created_at: Timestamp::from(Timestamp::now().as_secs() - 120),
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: created_at",
        ),
        (
            "created_at in the future",
            Some(
                AuthSpec {
                    created_at: Timestamp::from(Timestamp::now().as_secs() + 120),
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: created_at",
        ),
        (
            "wrong method",
            Some(
                AuthSpec {
                    method: "GET".into(),
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: method tag",
        ),
        (
            "wrong kind",
            Some(
                AuthSpec {
                    kind: Kind::TextNote,
                    ..good.clone()
                }
                .header(&keys),
            ),
            "NIP-98: wrong kind",
        ),
        (
            "not base64",
            Some("Nostr !!!".into()),
            "NIP-98: invalid base64",
        ),
    ];
    for (case, header, expected) in cases {
        let answer = post_with(&relay, "/query", header.as_deref(), body).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{case}: {}",
            answer.body
        );
        let error = answer.body["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(expected), "{case}: {error}");
    }

    // The same header twice: served once, then refused as a replay.
    let header = good.header(&keys);
    let first = post_with(&relay, "/query", Some(&header), body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let replay = post_with(&relay, "/query", Some(&header), body).await;
    assert_eq!(replay.status, StatusCode::UNAUTHORIZED);
    let error = replay.body["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("NIP-98: auth event") && error.ends_with("already used"),
        "{error}"
    );
}

#[tokio::test]
async fn nip98_urls_compare_loopback_spellings_and_trailing_slashes_alike() {
    let relay = start().await;
    let keys = Keys::generate();
    let body = b"[]";
    let port = relay.addr().port();
    for url in [
        format!("http://localhost:{port}/count"),
        format!("HTTP://LOCALHOST:{port}/count/"),
        format!("http://[::1]:{port}/count"),
    ] {
        let header = AuthSpec::for_post(&url, body).header(&keys);
        let answer = post_with(&relay, "/count", Some(&header), body).await;
        assert_eq!(answer.status, StatusCode::OK, "{url}: {}", answer.body);
        assert_eq!(answer.body, json!({"count": 0}));
    }
}

#[tokio::test]
async fn a_forged_signature_is_400_and_another_author_403() {
    let relay = start().await;
    let keys = Keys::generate();
    let now = Timestamp::now().as_secs();
    let event = chat(&keys, CHANNEL, &[], "original", now);
    let other = chat(&keys, CHANNEL, &[], "another", now);

    // The id is right, the signature is another event's.
    let mut forged: Value = serde_json::to_value(&event).expect("json");
    forged["sig"] = json!(other.sig.to_string());
    let answer = post(&relay, &keys, "/events", forged.to_string().as_bytes()).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    let error = answer.body["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("invalid:"), "{error}");

    // The content changed under a valid signature: the id no longer matches.
    let mut tampered: Value = serde_json::to_value(&event).expect("json");
    tampered["content"] = json!("changed");
    let answer = post(&relay, &keys, "/events", tampered.to_string().as_bytes()).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(
        answer.body["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("invalid:")
    );

    // Not an event at all.
    let answer = post(&relay, &keys, "/events", b"{\"kind\":9}").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer.body["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("invalid event JSON:")
    );

    // Signed by one key, authorised by another.
    let answer = post(
        &relay,
        &Keys::generate(),
        "/events",
        event.as_json().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        answer.body,
        json!({"error": "invalid: event pubkey does not match authenticated identity"})
    );

    // Nothing of it was stored.
    let answer = post(&relay, &keys, "/count", b"[{\"kinds\":[9]}]").await;
    assert_eq!(answer.body, json!({"count": 0}));
}

#[tokio::test]
async fn query_answers_each_filter_newest_first_in_filter_order() {
    let relay = start().await;
    let keys = Keys::generate();
    let base = Timestamp::now().as_secs() - 100;
    let a_old = chat(&keys, CHANNEL, &[], "a old", base);
    let a_new = chat(&keys, CHANNEL, &[], "a new", base + 20);
    let a_mid_1 = chat(&keys, CHANNEL, &[], "a mid 1", base + 10);
    let a_mid_2 = chat(&keys, CHANNEL, &[], "a mid 2", base + 10);
    let b_only = chat(&keys, OTHER_CHANNEL, &[], "b", base + 5);
    for event in [&a_old, &a_new, &a_mid_1, &a_mid_2, &b_only] {
        publish(&relay, &keys, event).await;
    }
    // Equal created_at: id ascending.
    let (mid_first, mid_second) = if a_mid_1.id < a_mid_2.id {
        (&a_mid_1, &a_mid_2)
    } else {
        (&a_mid_2, &a_mid_1)
    };

    let filters = json!([
        {"kinds": [9], "#h": [CHANNEL]},
        {"kinds": [9], "#h": [OTHER_CHANNEL]},
        {"ids": [a_new.id.to_hex()]},
    ])
    .to_string();
    let answer = post(&relay, &keys, "/query", filters.as_bytes()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let ids: Vec<&str> = answer
        .body
        .as_array()
        .expect("a bare array")
        .iter()
        .map(|event| event["id"].as_str().expect("id"))
        .collect();
    let expected: Vec<String> = [&a_new, mid_first, mid_second, &a_old, &b_only, &a_new]
        .iter()
        .map(|event| event.id.to_hex())
        .collect();
    assert_eq!(ids, expected);

    // A limit keeps the newest.
    let limited = json!([{"kinds": [9], "#h": [CHANNEL], "limit": 2}]).to_string();
    let answer = post(&relay, &keys, "/query", limited.as_bytes()).await;
    let ids: Vec<&str> = answer
        .body
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![a_new.id.to_hex(), mid_first.id.to_hex()]);

    // /count counts distinct events across filters.
    let answer = post(&relay, &keys, "/count", filters.as_bytes()).await;
    assert_eq!(answer.body, json!({"count": 5}));

    // Filters must be an array.
    let answer = post(&relay, &keys, "/query", b"{\"filters\":[]}").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(
        answer.body["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("invalid filters:")
    );
}

#[tokio::test]
async fn info_is_nip11() {
    let relay = start().await;
    let from_info = request(&relay.http_url(), Method::GET, "/info", &[], Vec::new()).await;
    let from_root = request(
        &relay.http_url(),
        Method::GET,
        "/",
        &[("accept", "application/nostr+json")],
        Vec::new(),
    )
    .await;
    for answer in [&from_info, &from_root] {
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.headers["content-type"], "application/nostr+json");
        let info: RelayInfo = serde_json::from_value(answer.body.clone()).expect("NIP-11 shape");
        for nip in [1, 11, 42] {
            assert!(info.supported_nips.contains(&nip), "NIP-{nip}");
        }
        assert!(info.limitation.auth_required);
        assert_eq!(info.self_pubkey, relay.public_key().to_hex());
        assert_eq!(info.pubkey, relay.public_key().to_hex());
    }
}

#[tokio::test]
async fn query_pages_backwards_with_until_and_before_id() {
    let relay = start().await;
    let keys = Keys::generate();
    let base = Timestamp::now().as_secs() - 100;
    // Three events share one second, so a page boundary falls inside it.
    let events = [
        chat(&keys, CHANNEL, &[], "newest", base + 30),
        chat(&keys, CHANNEL, &[], "same second 1", base + 20),
        chat(&keys, CHANNEL, &[], "same second 2", base + 20),
        chat(&keys, CHANNEL, &[], "same second 3", base + 20),
        chat(&keys, CHANNEL, &[], "oldest", base + 10),
    ];
    for event in &events {
        publish(&relay, &keys, event).await;
    }
    let ids_of = |answer: &common::Answer| -> Vec<String> {
        answer
            .body
            .as_array()
            .expect("a bare array")
            .iter()
            .map(|e| e["id"].as_str().expect("id").to_string())
            .collect()
    };
    let all = post(
        &relay,
        &keys,
        "/query",
        json!([{"kinds": [9], "#h": [CHANNEL]}])
            .to_string()
            .as_bytes(),
    )
    .await;
    let everything = ids_of(&all);
    assert_eq!(everything.len(), 5);

    // Pages of two, each after the last event of the one before.
    let mut paged: Vec<String> = Vec::new();
    let mut page = json!([{"kinds": [9], "#h": [CHANNEL], "limit": 2}]);
    loop {
        let answer = post(&relay, &keys, "/query", page.to_string().as_bytes()).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let ids = ids_of(&answer);
        let Some(last) = answer.body.as_array().and_then(|a| a.last()).cloned() else {
            break;
        };
        paged.extend(ids);
        page = json!([{
            "kinds": [9], "#h": [CHANNEL], "limit": 2,
            "until": last["created_at"], "before_id": last["id"],
        }]);
        assert!(paged.len() <= 5, "pages end: {paged:?}");
    }
    assert_eq!(
        paged, everything,
        "the pages, in order, are the whole answer"
    );

    // A cursor needs `until`, and an id of 64 hex characters.
    for bad in [
        json!([{"kinds": [9], "before_id": everything[0]}]),
        json!([{"kinds": [9], "until": base + 20, "before_id": "not-an-id"}]),
    ] {
        let answer = post(&relay, &keys, "/query", bad.to_string().as_bytes()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            answer.body["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("invalid filters: before_id")),
            "{}",
            answer.body
        );
    }
}

#[tokio::test]
async fn a_seeded_channel_is_found_by_its_members_and_signed_by_the_relay() {
    let relay = start().await;
    let member = Keys::generate();
    relay
        .add_channel(CHANNEL, "general", "stream", &[member.public_key()])
        .await
        .expect("seeded");
    let filters = json!([{"kinds": [39002], "#p": [member.public_key().to_hex()]}]).to_string();
    let answer = post(&relay, &member, "/query", filters.as_bytes()).await;
    assert_eq!(answer.status, StatusCode::OK);
    let events: Vec<nostr::Event> = serde_json::from_value(answer.body).expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].pubkey,
        relay.public_key(),
        "signed by the relay's own key"
    );
    events[0].verify().expect("a valid signature");
    let d: Vec<&str> = events[0]
        .tags
        .iter()
        .filter(|t| t.as_slice()[0] == "d")
        .map(|t| t.as_slice()[1].as_str())
        .collect();
    assert_eq!(d, [CHANNEL]);
    let filters = json!([{"kinds": [39000], "#d": [CHANNEL]}]).to_string();
    let answer = post(&relay, &member, "/query", filters.as_bytes()).await;
    let events: Vec<nostr::Event> = serde_json::from_value(answer.body).expect("events");
    let tags: Vec<Vec<String>> = events[0]
        .tags
        .iter()
        .map(|t| t.as_slice().to_vec())
        .collect();
    assert!(
        tags.contains(&vec!["name".to_owned(), "general".to_owned()]),
        "{tags:?}"
    );
    assert!(
        tags.contains(&vec!["t".to_owned(), "stream".to_owned()]),
        "{tags:?}"
    );
}

#[tokio::test]
async fn a_removed_member_is_told_live_and_leaves_the_members_list() {
    let relay = start().await;
    let (removed, staying) = (Keys::generate(), Keys::generate());
    relay
        .add_channel(
            CHANNEL,
            "general",
            "stream",
            &[removed.public_key(), staying.public_key()],
        )
        .await
        .expect("seeded");
    // The member listens for membership changes naming it, as a client does.
    let mut client = WsClient::connect(&relay.ws_url()).await;
    client.authenticate(&removed).await;
    client
        .subscribe(
            "members",
            vec![
                Filter::new()
                    .kind(Kind::Custom(9001))
                    .pubkey(removed.public_key()),
            ],
        )
        .await;
    match client.next().await {
        RelayMessage::EndOfStoredEvents(id) => assert_eq!(id.as_str(), "members"),
        other => panic!("unexpected {}", other.as_json()),
    }

    relay
        .remove_member(CHANNEL, removed.public_key())
        .await
        .expect("removed");

    let removal = match client.next().await {
        RelayMessage::Event { event, .. } => event.into_owned(),
        other => panic!("expected the removal, got {}", other.as_json()),
    };
    assert_eq!(removal.kind, Kind::Custom(9001));
    assert_eq!(removal.pubkey, relay.public_key(), "signed by the relay");
    removal.verify().expect("a valid signature");
    let tags: Vec<Vec<String>> = removal.tags.iter().map(|t| t.as_slice().to_vec()).collect();
    assert_eq!(
        tags,
        [
            vec!["h".to_owned(), CHANNEL.to_owned()],
            vec!["p".to_owned(), removed.public_key().to_hex()],
        ]
    );

    // The members list no longer names the removed member; the other one is still in it.
    let members_of =
        |keys: &Keys| json!([{"kinds": [39002], "#p": [keys.public_key().to_hex()]}]).to_string();
    let answer = post(&relay, &removed, "/query", members_of(&removed).as_bytes()).await;
    assert_eq!(answer.body, json!([]), "the channel is not found any more");
    let filters = json!([{"kinds": [39002], "#d": [CHANNEL]}]).to_string();
    let answer = post(&relay, &staying, "/query", filters.as_bytes()).await;
    let lists: Vec<nostr::Event> = serde_json::from_value(answer.body).expect("events");
    assert_eq!(lists.len(), 1, "the new list replaced the old one");
    assert_eq!(lists[0].pubkey, relay.public_key());
    let members: Vec<String> = lists[0]
        .tags
        .iter()
        .filter(|t| t.as_slice()[0] == "p")
        .map(|t| t.as_slice()[1].clone())
        .collect();
    assert_eq!(members, [staying.public_key().to_hex()]);
    let answer = post(&relay, &staying, "/query", members_of(&staying).as_bytes()).await;
    let found: Vec<nostr::Event> = serde_json::from_value(answer.body).expect("events");
    assert_eq!(found.len(), 1, "the other member still finds the channel");

    // A channel that was never added has no members list to change.
    let unknown = relay
        .remove_member(OTHER_CHANNEL, staying.public_key())
        .await;
    assert!(
        matches!(unknown, Err(buzz_test_relay::RelayError::Removal { .. })),
        "{unknown:?}"
    );
}
