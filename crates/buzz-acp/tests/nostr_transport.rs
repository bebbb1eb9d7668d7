//! The harness over upstream's transport: the real `buzz-acp` binary against a real Nostr relay
//! (a NIP-01/NIP-42 websocket with the REST bridge and NIP-98 beside it, started in this
//! process) and the real test agent. Events are signed by their authors' keys; the harness signs
//! its replies with the agent's.

mod common;

use std::time::Duration;

use buzz_acp::nostr_relay::MAX_FRAME_BYTES;
use buzz_acp::relay::Event;
use buzz_acp::rest::RestClient;
use buzz_acp::testing::{ChatMessage, Scenario, agent_messages, answer_among, post_chat};
use buzz_test_relay::{
    ClosedFault, ClosedSubscriptionFault, Faults, RawFrame, ReceivedRequest, RelayConfig,
    RestFailure, RestFailureKind, TestRelay,
};
use common::*;
use nostr::{Filter, Keys, Timestamp};
use tempfile::TempDir;

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
/// A second channel of the agent's, for the tests that tell "dropped" from "slow".
const OTHER_CHANNEL: &str = "7c1d9e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f";

/// The harness's subscription id for `channel`.
fn subscription(channel: &str) -> String {
    format!("ch-{channel}")
}

/// A relay, the people on it, and a scenario for the agent's files.
struct World {
    relay: TestRelay,
    agent: Keys,
    owner: Keys,
    _dir: TempDir,
    s: Scenario,
}

impl World {
    /// A relay where the agent is a member of `#general` (kind 39002 names it, kind 39000
    /// describes the channel).
    async fn start(faults: Faults) -> World {
        Self::start_with(faults, Membership::Open).await
    }

    /// As [`World::start`], on a relay open to all or to its members only (the owner).
    async fn start_with(faults: Faults, membership: Membership) -> World {
        let owner = Keys::generate();
        let config = match membership {
            Membership::Open => RelayConfig::default(),
            Membership::OwnerOnly => RelayConfig::default().members_only(vec![owner.public_key()]),
        };
        let relay = TestRelay::start(config.faults(faults))
            .await
            .expect("the relay starts");
        let (dir, s) = scenario();
        let world = World {
            relay,
            agent: Keys::generate(),
            owner,
            _dir: dir,
            s,
        };
        world
            .relay
            .add_channel(CHANNEL, "general", "stream", &[world.agent.public_key()])
            .await
            .expect("the agent's channel");
        world
    }

    /// `author` says `text` in the channel, mentioning the agent; `thread` = (root, parent).
    async fn say(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&nostr::Event, &nostr::Event)>,
    ) -> nostr::Event {
        self.said(author, text, thread, Timestamp::now()).await
    }

    /// As [`World::say`], dated `at`.
    async fn said(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&nostr::Event, &nostr::Event)>,
        at: Timestamp,
    ) -> nostr::Event {
        self.said_in(CHANNEL, author, text, thread, at).await
    }

    /// As [`World::said`], in `channel`.
    async fn said_in(
        &self,
        channel: &str,
        author: &Keys,
        text: &str,
        thread: Option<(&nostr::Event, &nostr::Event)>,
        at: Timestamp,
    ) -> nostr::Event {
        let ids = thread.map(|(root, parent)| (root.id.to_hex(), parent.id.to_hex()));
        let message = ChatMessage {
            channel,
            mention: Some(self.agent.public_key()),
            text,
            thread: ids.as_ref().map(|(r, p)| (r.as_str(), p.as_str())),
            at,
        };
        post_chat(&self.relay.ws_url(), author, message)
            .await
            .expect("posted")
    }

    /// The agent also belongs to `#random` ([`OTHER_CHANNEL`]).
    async fn add_other_channel(&self) {
        self.relay
            .add_channel(
                OTHER_CHANNEL,
                "random",
                "stream",
                &[self.agent.public_key()],
            )
            .await
            .expect("the agent's second channel");
    }

    /// The `REQ`s the relay received for `subscription`, in order.
    fn requests_for(&self, subscription: &str) -> Vec<ReceivedRequest> {
        self.relay
            .requests()
            .into_iter()
            .filter(|r| r.subscription_id == subscription)
            .collect()
    }

    /// Waits until the relay has received `n` `REQ`s for `subscription`; them.
    async fn wait_for_requests(&self, subscription: &str, n: usize) -> Vec<ReceivedRequest> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let seen = self.requests_for(subscription);
            if seen.len() >= n {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} REQs for {subscription}, got {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every chat event the agent wrote, as the relay returns them (signatures checked).
    async fn agent_events(&self) -> Vec<Event> {
        agent_messages(&self.relay.ws_url(), &self.owner, self.agent.public_key())
            .await
            .expect("the agent's messages")
    }

    /// The agent's answer to `trigger`, waiting for it.
    async fn answer_to(&self, trigger: &nostr::Event) -> Event {
        let id = trigger.id.to_hex();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(answer) = answer_among(self.agent_events().await, &id) {
                return answer;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no answer to {:?}",
                trigger.content
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the harness without waiting for it.
    fn spawn_harness(&self, extra: &[&str]) -> std::process::Child {
        let log = std::fs::File::create(self.s.root.join("harness.log")).unwrap();
        let url = self.relay.ws_url();
        let secret = self.agent.secret_key().to_secret_hex();
        let owner = self.owner.public_key().to_hex();
        self.s
            .nostr_harness_command(
                &harness_bin(),
                &agent(&self.s, &[]),
                buzz_acp::testing::NostrRelayArgs {
                    url: &url,
                    secret_key_hex: &secret,
                    owner_hex: &owner,
                },
                extra,
            )
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the harness starts")
    }

    /// Starts the harness and waits until it is subscribed: like upstream's, its subscription
    /// starts at its own start, so a mention posted before that is not delivered.
    async fn harness(&self, extra: &[&str]) -> Stop {
        let child = Stop(self.spawn_harness(extra));
        self.wait_for_log("connected, authenticated and subscribed")
            .await;
        child
    }

    /// Waits for a line of the harness's log (a readiness signal, never a proof).
    async fn wait_for_log(&self, line: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.log().contains(line) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {line:?} in:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.s.root.join("harness.log")).unwrap_or_default()
    }
}

/// Who a test's relay serves over REST.
enum Membership {
    /// Everyone.
    Open,
    /// The owner, and whoever carries an `x-auth-tag` (the agent, through its owner).
    OwnerOnly,
}

struct Stop(std::process::Child);

impl Stop {
    /// Whether the harness is still running (it has not exited, crashed or given up).
    fn is_running(&mut self) -> bool {
        self.0.try_wait().expect("the harness's status").is_none()
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The owner's mention reaches the agent through the websocket subscription, and the answer
/// comes back as a kind 9 event signed with the agent's key, threaded on the mention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_mention_is_answered_with_a_reply_signed_by_the_agent() {
    let w = World::start(Faults::default()).await;
    let _h = w.harness(&[]).await;
    let root = w.say(&w.owner, "remember alpha-7301", None).await;
    let answer = w.answer_to(&root).await;
    // `agent_events` checked its id and signature.
    assert_eq!(answer.pubkey, w.agent.public_key().to_hex());
    assert!(
        answer.tags.iter().any(|t| t.as_slice() == ["h", CHANNEL]),
        "{answer:?}"
    );
    assert_eq!(turns(&answer), 1);
    let frames = wire(&w.s);
    assert_eq!(count(&frames, "session/new"), 1);
    assert!(prompts(&frames)[0].contains("remember alpha-7301"));
}

/// On a relay anyone can mention the agent, and the agent runs tools: by default only its owner
/// is answered. A stranger's mention never reaches the agent; the owner's, after it, does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_mention_never_reaches_the_agent_by_default() {
    let w = World::start(Faults::default()).await;
    let _h = w.harness(&[]).await;
    let stranger = Keys::generate();
    let theirs = w.say(&stranger, "run rm -rf for me", None).await;
    let mine = w.say(&w.owner, "hello", None).await;
    w.answer_to(&mine).await;
    let frames = wire(&w.s);
    let texts = prompts(&frames);
    assert_eq!(texts.len(), 1, "one turn: the owner's");
    assert!(!texts[0].contains("rm -rf"), "{}", texts[0]);
    let answered_theirs = w.agent_events().await.into_iter().any(|e| {
        e.tags
            .iter()
            .any(|t| t.as_slice().get(1) == Some(&theirs.id.to_hex()))
    });
    assert!(!answered_theirs);
}

/// `--respond-to allowlist` admits the listed keys besides the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlisted_key_is_answered() {
    let w = World::start(Faults::default()).await;
    let friend = Keys::generate();
    let friend_hex = friend.public_key().to_hex();
    let _h = w
        .harness(&[
            "--respond-to",
            "allowlist",
            "--respond-to-allowlist",
            &friend_hex,
        ])
        .await;
    let theirs = w.say(&friend, "hi from a friend", None).await;
    w.answer_to(&theirs).await;
}

/// The thread's earlier messages, posted before the harness started, come from the relay
/// (`POST /query`) into the first prompt of a follow-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_gets_its_thread_from_the_relay() {
    let w = World::start(Faults::default()).await;
    // Dated before the harness starts: history, not news.
    let earlier = Timestamp::from(Timestamp::now().as_secs() - 60);
    let root = w
        .said(&w.owner, "the code word is quebec-5150", None, earlier)
        .await;
    let chatter = w
        .said(
            &Keys::generate(),
            "noted, quebec-5150",
            Some((&root, &root)),
            earlier,
        )
        .await;
    let _h = w.harness(&[]).await;
    let follow_up = w
        .say(&w.owner, "what was the code word?", Some((&root, &chatter)))
        .await;
    w.answer_to(&follow_up).await;
    let texts = prompts(&wire(&w.s));
    assert_eq!(texts.len(), 1, "only the follow-up is new: {texts:?}");
    assert!(
        texts[0].contains("the code word is quebec-5150"),
        "{}",
        texts[0]
    );
}

/// Messages of one second tie on `created_at`, and a reply may be dated before what it answers:
/// the history still puts each reply after the message it answers, so the window holds the
/// thread's last messages, not a random few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_written_within_one_second_keeps_its_order() {
    let w = World::start(Faults::default()).await;
    let second = Timestamp::from(Timestamp::now().as_secs() - 60);
    let root = w.said(&w.owner, "the root", None, second).await;
    let mut parent = root.clone();
    let someone = Keys::generate();
    for word in ["one", "two", "three", "four", "five"] {
        parent = w
            .said(
                &someone,
                &format!("message {word}"),
                Some((&root, &parent)),
                second,
            )
            .await;
    }
    // Dated a second before the message it answers (clocks differ; the harness itself dates its
    // replies a second after their trigger): it is still the last of the thread.
    let earlier = Timestamp::from(second.as_secs() - 1);
    parent = w
        .said(&someone, "message six", Some((&root, &parent)), earlier)
        .await;
    let _h = w.harness(&["--context-message-limit", "2"]).await;
    let follow_up = w
        .say(&w.owner, "what came last?", Some((&root, &parent)))
        .await;
    w.answer_to(&follow_up).await;
    let prompt = prompts(&wire(&w.s)).remove(0);
    for kept in ["message five", "message six"] {
        assert!(
            prompt.contains(kept),
            "{kept} is among the last two: {prompt}"
        );
    }
    for dropped in [
        "message one",
        "message two",
        "message three",
        "message four",
    ] {
        assert!(!prompt.contains(dropped), "{dropped} is not: {prompt}");
    }
}

/// A relay that drops every connection after two seconds: the harness reconnects,
/// re-authenticates and resubscribes, and a mention posted after a drop is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_keeps_dropping_the_connection_loses_no_mention() {
    let w = World::start(Faults {
        drop_connections_after: Some(Duration::from_secs(2)),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let first = w.say(&w.owner, "first", None).await;
    w.answer_to(&first).await;
    // After a reconnect the harness reports, mention again.
    w.wait_for_log("reconnected to the relay").await;
    let second = w.say(&w.owner, "second", None).await;
    w.answer_to(&second).await;
    let answers = w.agent_events().await;
    assert_eq!(answers.len(), 2, "each mention answered once: {answers:?}");
}

/// The REST client tries a request again after 0.5 and 1 s when the relay answers 503 (each
/// time with a fresh NIP-98 authorization, which the relay's replay guard demands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_with_503_twice_succeeds_on_the_third_try() {
    let w = World::start(Faults::default()).await;
    w.relay.set_faults(Faults {
        rest_failure: Some(RestFailure {
            kind: RestFailureKind::Unavailable,
            count: 2,
        }),
        ..Faults::default()
    });
    w.say(&w.owner, "published despite two 503s", None).await;
    let client = RestClient::new(&w.relay.ws_url(), w.owner.clone());
    let found = client
        .query(&[Filter::new().author(w.owner.public_key())])
        .await
        .expect("query");
    assert_eq!(found.len(), 1);
}

/// Four 503s in a row outlast the three retries: the error names the route and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_more_often_than_it_retries_fails_with_the_relays_answer() {
    let w = World::start(Faults::default()).await;
    w.relay.set_faults(Faults {
        rest_failure: Some(RestFailure {
            kind: RestFailureKind::Unavailable,
            count: 4,
        }),
        ..Faults::default()
    });
    let err = RestClient::new(&w.relay.ws_url(), w.owner.clone())
        .query(&[Filter::new().limit(1)])
        .await
        .expect_err("four failures");
    let text = err.to_string();
    assert!(text.contains("/query") && text.contains("503"), "{text}");
}

/// The relay closes both of the harness's first subscriptions with a reason that is neither
/// about membership nor about auth (e.g. a relay restarting its subscription layer): the
/// channel's subscription is requested again, and a mention is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_closed_for_another_reason_is_requested_again() {
    let w = World::start(Faults {
        closed: Some(ClosedFault {
            reason: "error: shutting down idle subscriptions".into(),
            count: 2,
        }),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let root = w.say(&w.owner, "still there?", None).await;
    w.answer_to(&root).await;
}

/// `CLOSED` with an auth reason: the harness reconnects, authenticates again and
/// resubscribes; the mention is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_closed_for_auth_makes_the_harness_reconnect() {
    let w = World::start(Faults {
        closed: Some(ClosedFault {
            reason: "auth-required: session expired".into(),
            count: 2,
        }),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let root = w.say(&w.owner, "after a new AUTH", None).await;
    w.answer_to(&root).await;
}

/// A `NOTICE` right after the challenge that is not about rate limits is logged and changes
/// nothing: the mention is answered on the first connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_changes_nothing() {
    let w = World::start(Faults {
        notice: Some("info: maintenance at midnight".into()),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let root = w.say(&w.owner, "hello", None).await;
    w.answer_to(&root).await;
    assert_eq!(w.relay.connections(), 1);
}

/// Nothing listens at the relay's address: the harness tries six times (after 1, 2, 4, 8 and
/// 16 s) and then stops with the reason. On tokio's paused clock the waits take no time.
#[tokio::test(start_paused = true)]
async fn an_unreachable_relay_is_tried_six_times_then_reported() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let started = tokio::time::Instant::now();
    let err = buzz_acp::nostr_relay::NostrRelay::connect(
        &url,
        buzz_acp::config::AgentKeys::new(Keys::generate()),
    )
    .await
    .expect_err("nothing listens there");
    assert!(err.to_string().contains("connecting to the relay"), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(1 + 2 + 4 + 8 + 16),
        "five waits between six tries: {:?}",
        started.elapsed()
    );
}

/// A relay that refuses the agent's AUTH: the harness stops at once with the reason.
#[test]
fn a_refused_auth_stops_the_harness_with_the_reason() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let w = runtime.block_on(World::start(Faults {
        refuse_auth: true,
        ..Faults::default()
    }));
    let mut child = w.spawn_harness(&[]);
    let status = child.wait().expect("the harness exits");
    assert!(!status.success());
    assert!(
        w.log().contains("refused the agent's authentication"),
        "{}",
        w.log()
    );
    drop(runtime);
}

/// Frames that are no relay message (not JSON; JSON of no message; an `EVENT` without an
/// event) right after AUTH: each is skipped, the connection stays, and the mention after them
/// is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_that_are_no_relay_message_are_skipped_on_the_same_connection() {
    let w = World::start(Faults {
        after_auth: [
            "this is not json",
            r#"["NOPE",1]"#,
            r#"{"kind":9}"#,
            r#"["EVENT","ch-x",{"id":"broken"}]"#,
        ]
        .map(|text| RawFrame::Text(text.into()))
        .to_vec(),
        ..Faults::default()
    })
    .await;
    let mut h = w.harness(&[]).await;
    // On the wire the mention's event comes after the bad frames, so answering it means they
    // were read; a connection they broke would have been replaced before the answer.
    let root = w.say(&w.owner, "still reading?", None).await;
    w.answer_to(&root).await;
    assert!(h.is_running());
    assert_eq!(w.relay.connections(), 1);
    assert_eq!(w.requests_for(&subscription(CHANNEL)).len(), 1);
}

/// A frame one byte over the websocket frame limit (tungstenite's default, 16 MiB, which
/// upstream keeps) right after AUTH: the connection is treated as broken, the harness connects
/// again and resubscribes with its `since` overlap. The mention, posted while it is between
/// connections and dated three seconds back (a sender's clock a little behind), reaches it only
/// through that overlap, and is answered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_breaks_the_connection_and_a_mention_around_it_is_answered_once() {
    let w = World::start(Faults {
        after_auth: vec![RawFrame::PaddedNotice {
            bytes: MAX_FRAME_BYTES + 1,
        }],
        ..Faults::default()
    })
    .await;
    let mut h = w.harness(&[]).await;
    // The first connection delivers no event: the oversized frame precedes every one on it.
    let three_seconds_ago = Timestamp::from(Timestamp::now().as_secs() - 3);
    let root = w
        .said(&w.owner, "around the big frame", None, three_seconds_ago)
        .await;
    w.answer_to(&root).await;
    assert!(h.is_running());
    assert_eq!(w.relay.connections(), 2, "one more connection");
    let last = w.requests_for(&subscription(CHANNEL)).pop();
    assert_eq!(
        last.map(|r| r.connection),
        Some(2),
        "subscribed again on the second"
    );
    let answers = w.agent_events().await;
    assert_eq!(answers.len(), 1, "answered once: {answers:?}");
    let texts = prompts(&wire(&w.s));
    assert_eq!(texts.len(), 1, "one turn: {texts:?}");
    assert!(texts[0].contains("around the big frame"), "{}", texts[0]);
}

/// What the two membership tests share: the agent in two channels; `CHANNEL`'s subscription
/// is closed with `reason` (by `closed_on_req` when the relay answers its first `REQ`, else
/// while it is live). The channel is dropped: the harness does not request it again, while it
/// does request the other one again after a `CLOSED` for another reason (sent after, so read
/// after: when that `REQ` has arrived, a second `REQ` for the dropped channel would have come
/// before it on the same socket). The other channel is still answered; one connection.
async fn a_closed_channel_is_dropped(reason: &str, closed_on_req: bool) {
    let faults = if closed_on_req {
        Faults {
            closed_subscription: Some(ClosedSubscriptionFault {
                subscription: subscription(CHANNEL),
                reason: reason.into(),
                count: 1,
            }),
            ..Faults::default()
        }
    } else {
        Faults::default()
    };
    let w = World::start(faults).await;
    w.add_other_channel().await;
    let mut h = w.harness(&[]).await;
    // Both `REQ`s were read (so the `CLOSED` for the first is already on its way).
    w.wait_for_requests(&subscription(CHANNEL), 1).await;
    w.wait_for_requests(&subscription(OTHER_CHANNEL), 1).await;
    if !closed_on_req {
        assert_eq!(
            w.relay.close_subscription(&subscription(CHANNEL), reason),
            1
        );
    }
    w.relay.close_subscription(
        &subscription(OTHER_CHANNEL),
        "error: shutting down idle subscriptions",
    );
    w.wait_for_requests(&subscription(OTHER_CHANNEL), 2).await;
    assert_eq!(
        w.requests_for(&subscription(CHANNEL)).len(),
        1,
        "the dropped channel was requested again"
    );

    let there = w
        .said_in(
            OTHER_CHANNEL,
            &w.owner,
            "still here?",
            None,
            Timestamp::now(),
        )
        .await;
    w.answer_to(&there).await;
    assert!(h.is_running());
    assert_eq!(w.relay.connections(), 1, "the socket stays");
    assert_eq!(w.requests_for("members").len(), 1);
}

/// `CLOSED restricted: not a channel member` for one of two channels, on its first `REQ`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_agent_is_no_member_of_is_dropped_and_the_other_still_answered() {
    a_closed_channel_is_dropped("restricted: not a channel member", true).await;
}

/// `CLOSED restricted: channel access revoked` for one of two live channel subscriptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_whose_access_is_revoked_is_dropped_and_the_other_still_answered() {
    a_closed_channel_is_dropped("restricted: channel access revoked", false).await;
}

/// `CLOSED rate-limited: … retry in 1 s` on a channel's first `REQ`: the subscription is
/// parked, not requested at once: again no sooner than 5 s later (a hint under 2 s counts as
/// 5 s), on the same connection, from the connection's `since`, so the mention posted while it
/// was parked is answered once. The other channel is not parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_subscription_is_parked_then_requested_again_and_loses_nothing() {
    let w = World::start(Faults {
        closed_subscription: Some(ClosedSubscriptionFault {
            subscription: subscription(CHANNEL),
            reason: "rate-limited: too many subscriptions; retry in 1 s".into(),
            count: 1,
        }),
        ..Faults::default()
    })
    .await;
    w.add_other_channel().await;
    let mut h = w.harness(&[]).await;
    w.wait_for_requests(&subscription(CHANNEL), 1).await;
    let parked = w.say(&w.owner, "posted while parked", None).await;
    let there = w
        .said_in(OTHER_CHANNEL, &w.owner, "and here", None, Timestamp::now())
        .await;
    w.answer_to(&there).await;
    w.answer_to(&parked).await;
    let requests = w.requests_for(&subscription(CHANNEL));
    assert_eq!(requests.len(), 2, "{requests:?}");
    // A lower bound only: the park starts after the relay read the first REQ, and a timer
    // never fires early.
    let waited = requests[1].at - requests[0].at;
    assert!(waited >= Duration::from_secs(5), "parked {waited:?}");
    assert_eq!(
        requests.iter().map(|r| r.connection).collect::<Vec<_>>(),
        [1, 1]
    );
    assert_eq!(w.requests_for(&subscription(OTHER_CHANNEL)).len(), 1);
    assert_eq!(
        w.agent_events().await.len(),
        2,
        "each mention answered once"
    );
    assert!(h.is_running());
}

/// `NOTICE rate-limited: … retry in 1 s` on a live connection, then a `CLOSED` for another
/// reason: the harness holds the resubscription until the pause is over (at least 5 s: a hint
/// under 2 s counts as 5 s), then sends it on the same connection; the mention posted
/// meanwhile is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_notice_holds_the_next_subscription_for_its_pause() {
    let w = World::start(Faults::default()).await;
    let h = w.harness(&[]).await;
    w.wait_for_requests(&subscription(CHANNEL), 1).await;
    let asked = tokio::time::Instant::now();
    // One queue of actions per connection: the NOTICE is read before the CLOSED.
    assert_eq!(
        w.relay.send_notice("rate-limited: slow down; retry in 1 s"),
        1
    );
    held_for_the_pause(&w, h, asked).await;
}

/// The same `NOTICE` right after the AUTH challenge, while the harness waits for the relay's
/// `OK`: it is not lost to the wait but handled after it, so the resubscription after a later
/// `CLOSED` is held for the pause as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_notice_during_the_handshake_is_not_lost() {
    let w = World::start(Faults {
        notice: Some("rate-limited: slow down; retry in 1 s".into()),
        ..Faults::default()
    })
    .await;
    // Before the relay sends the NOTICE.
    let asked = tokio::time::Instant::now();
    let h = w.harness(&[]).await;
    w.wait_for_requests(&subscription(CHANNEL), 1).await;
    held_for_the_pause(&w, h, asked).await;
}

/// The relay closes the channel's subscription for a reason that asks for a resubscription;
/// that `REQ` arrives at least 5 s after `asked` (a lower bound only: the pause starts after
/// it, and a timer never fires early), on the same connection, and a mention posted meanwhile
/// is answered once.
async fn held_for_the_pause(w: &World, mut h: Stop, asked: tokio::time::Instant) {
    assert_eq!(
        w.relay.close_subscription(
            &subscription(CHANNEL),
            "error: shutting down idle subscriptions"
        ),
        1
    );
    let root = w.say(&w.owner, "during the pause", None).await;
    w.answer_to(&root).await;
    let requests = w.wait_for_requests(&subscription(CHANNEL), 2).await;
    assert_eq!(requests.len(), 2, "{requests:?}");
    let held = requests[1].at - asked;
    assert!(held >= Duration::from_secs(5), "held {held:?}");
    assert_eq!(requests[1].connection, 1);
    assert_eq!(w.agent_events().await.len(), 1, "answered once");
    assert!(h.is_running());
}

/// The agent's ephemeral events of `kind` the relay read on its websocket, in order (checked:
/// signed by the agent).
fn socket_events_of(w: &World, kind: u16) -> Vec<nostr::Event> {
    w.relay
        .socket_events()
        .into_iter()
        .map(|e| e.event)
        .filter(|e| e.kind.as_u16() == kind && e.pubkey == w.agent.public_key())
        .inspect(|e| e.verify().expect("signed by the agent"))
        .collect()
}

/// Waits until the relay has read `n` of the agent's events of `kind` on its websocket; them.
async fn wait_for_socket_events(w: &World, kind: u16, n: usize) -> Vec<nostr::Event> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let seen = socket_events_of(w, kind);
        if seen.len() >= n {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} events of kind {kind} on the socket, got {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An event's tags as plain strings.
fn tags_of(event: &nostr::Event) -> Vec<Vec<String>> {
    event.tags.iter().map(|t| t.as_slice().to_vec()).collect()
}

/// While the agent works on an answer, the thread shows it typing: a kind 20002 event over the
/// websocket (never REST: relays keep no ephemeral event), said again while the turn runs, with
/// the channel's `h` tag and the thread's `e` tags — the mention itself marked `reply` for a
/// thread's first mention; the root marked `root` and the follow-up `reply` after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_turn_shows_the_agent_typing_in_its_thread_until_it_answers() {
    use buzz_acp::nostr_relay::KIND_TYPING;
    let w = World::start(Faults::default()).await;
    let _h = w.harness(&[]).await;

    // Held until the test has seen the indicator said twice: it is kept up, not said once.
    let root = w
        .say(&w.owner, "remember alpha-7301 !gate:first", None)
        .await;
    let typing = wait_for_socket_events(&w, KIND_TYPING, 2).await;
    for t in &typing {
        assert_eq!(t.content, "");
        assert_eq!(
            tags_of(t),
            [
                vec!["h".to_owned(), CHANNEL.to_owned()],
                vec!["e".into(), root.id.to_hex(), String::new(), "reply".into()],
            ],
            "a thread's first mention: the mention is both root and the event answered"
        );
    }
    w.s.open_gate("first").expect("the gate opens");
    w.answer_to(&root).await;

    let before = socket_events_of(&w, KIND_TYPING).len();
    let follow_up = w
        .say(
            &w.owner,
            "what did I say? !gate:second",
            Some((&root, &root)),
        )
        .await;
    let typing = wait_for_socket_events(&w, KIND_TYPING, before + 1).await;
    assert_eq!(
        tags_of(&typing[before]),
        [
            vec!["h".to_owned(), CHANNEL.to_owned()],
            vec!["e".into(), root.id.to_hex(), String::new(), "root".into()],
            vec![
                "e".into(),
                follow_up.id.to_hex(),
                String::new(),
                "reply".into()
            ],
        ],
        "a follow-up: the thread's root, then the follow-up answered"
    );
    w.s.open_gate("second").expect("the gate opens");
    w.answer_to(&follow_up).await;
    assert!(
        agent_messages(&w.relay.ws_url(), &w.owner, w.agent.public_key())
            .await
            .expect("the agent's stored events")
            .iter()
            .all(|e| e.kind == 9),
        "nothing ephemeral was stored"
    );
    assert_eq!(
        w.relay.connections(),
        1,
        "the relay took the indicators on the one connection"
    );
}

/// Each connection starts by saying the agent is online: a kind 20001 event with content
/// `online` and no tags over the websocket, on the first connection and again on the next one
/// after the relay dropped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_says_the_agent_is_online() {
    use buzz_acp::nostr_relay::KIND_PRESENCE;
    let w = World::start(Faults {
        drop_connections_after: Some(Duration::from_secs(2)),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let presence = wait_for_socket_events(&w, KIND_PRESENCE, 2).await;
    for p in &presence {
        assert_eq!(p.content, "online");
        assert!(p.tags.is_empty(), "{p:?}");
    }
    let connections: Vec<u64> = w
        .relay
        .socket_events()
        .into_iter()
        .filter(|e| e.event.kind.as_u16() == KIND_PRESENCE)
        .map(|e| e.connection)
        .take(2)
        .collect();
    assert_eq!(connections, [1, 2], "said on each connection as it starts");
}

/// A members-only relay admits the agent through its owner: the owner's attestation of the
/// agent's key (`--auth-tag`, a NIP-OA `auth` tag) travels in the `x-auth-tag` header of every
/// REST request the harness makes (channel discovery, the thread's context, the reply), and the
/// mention is answered. (The tag's signature is not a real one: neither the harness nor the
/// test relay verifies it; the Buzz relay does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_members_only_relay_every_rest_request_carries_the_owners_auth_tag() {
    let w = World::start_with(Faults::default(), Membership::OwnerOnly).await;
    let owner = w.owner.public_key().to_hex();
    let tag = format!(r#"["auth", "{owner}", "", "{}"]"#, "5a".repeat(64));
    let _h = w.harness(&["--auth-tag", &tag]).await;
    let root = w.say(&w.owner, "remember alpha-7301", None).await;
    let first = w.answer_to(&root).await;
    let follow_up = w.say(&w.owner, "and now?", Some((&root, &root))).await;
    let second = w.answer_to(&follow_up).await;
    assert_eq!([turns(&first), turns(&second)], [1, 2]);

    let calls: Vec<_> = w
        .relay
        .rest_calls()
        .into_iter()
        .filter(|c| c.signer == w.agent.public_key())
        .collect();
    let paths: Vec<_> = calls.iter().map(|c| c.path).collect();
    assert!(
        paths.contains(&"/query") && paths.iter().filter(|p| **p == "/events").count() == 2,
        "discovery, context and two replies: {paths:?}"
    );
    let compact = format!(r#"["auth","{owner}","","{}"]"#, "5a".repeat(64));
    for call in &calls {
        assert_eq!(call.auth_tag.as_deref(), Some(compact.as_str()), "{call:?}");
    }
}

/// The same relay, the harness without the tag: the relay refuses its first request (channel
/// discovery) with 403 `relay_membership_required`, and the harness stops and says so instead
/// of running without its channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_auth_tag_a_members_only_relay_refuses_the_harness_and_it_says_why() {
    let w = World::start_with(Faults::default(), Membership::OwnerOnly).await;
    let mut child = w.spawn_harness(&[]);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .expect("the harness's status");
    assert!(!status.success(), "the harness must not run without access");
    let log = w.log();
    assert!(
        log.contains("403") && log.contains("relay_membership_required"),
        "{log}"
    );
    let refused = w.relay.rest_calls();
    assert!(refused.iter().all(|c| c.auth_tag.is_none()), "{refused:?}");
}
