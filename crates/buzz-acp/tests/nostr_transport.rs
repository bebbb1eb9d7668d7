//! The harness over upstream's transport: the real `buzz-acp` binary against a real Nostr relay
//! (a NIP-01/NIP-42 websocket with the REST bridge and NIP-98 beside it, started in this
//! process) and the real test agent. Events are signed by their authors' keys; the harness signs
//! its replies with the agent's.

mod common;

use std::time::Duration;

use buzz_acp::relay::Event;
use buzz_acp::rest::RestClient;
use buzz_acp::testing::{ChatMessage, Scenario, agent_messages, answer_among, post_chat};
use buzz_test_relay::{ClosedFault, Faults, RelayConfig, RestFailure, RestFailureKind, TestRelay};
use common::*;
use nostr::{Filter, Keys, Timestamp};
use tempfile::TempDir;

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";

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
        let relay = TestRelay::start(RelayConfig::default().faults(faults))
            .await
            .expect("the relay starts");
        let (dir, s) = scenario();
        let world = World {
            relay,
            agent: Keys::generate(),
            owner: Keys::generate(),
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
        let ids = thread.map(|(root, parent)| (root.id.to_hex(), parent.id.to_hex()));
        let message = ChatMessage {
            channel: CHANNEL,
            mention: Some(self.agent.public_key()),
            text,
            thread: ids.as_ref().map(|(r, p)| (r.as_str(), p.as_str())),
            at,
        };
        post_chat(&self.relay.ws_url(), author, message)
            .await
            .expect("posted")
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

struct Stop(std::process::Child);

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

/// A `NOTICE` right after the challenge is logged and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_changes_nothing() {
    let w = World::start(Faults {
        notice: Some("rate-limited: slow down".into()),
        ..Faults::default()
    })
    .await;
    let _h = w.harness(&[]).await;
    let root = w.say(&w.owner, "hello", None).await;
    w.answer_to(&root).await;
}

/// Nothing listens at the relay's address: the harness tries six times (after 1, 2, 4, 8 and
/// 16 s) and then stops with the reason. On tokio's paused clock the waits take no time.
#[tokio::test(start_paused = true)]
async fn an_unreachable_relay_is_tried_six_times_then_reported() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let started = tokio::time::Instant::now();
    let err = buzz_acp::nostr_relay::NostrRelay::connect(&url, Keys::generate())
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
