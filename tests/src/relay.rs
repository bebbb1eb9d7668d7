//! Scenarios over a real Nostr relay: the fork's test relay (a NIP-42 websocket from
//! `nostr-relay-builder` with the Buzz REST bridge and NIP-98 beside it) runs in the test's
//! process, the patched harness connects to it as the agent (`--relay-url`, `BUZZ_PRIVATE_KEY`),
//! and people post signed events through the relay's REST side as a Buzz client does.
//!
//! Like upstream's, the harness's subscription starts when the harness starts: a mention posted
//! before it is subscribed is not delivered. [`RelayWorld::start`] therefore waits for the
//! harness to say it is subscribed (a readiness signal; no guard asserts on a log line).

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};

use buzz_acp::relay::Event;
use buzz_acp::testing::{
    ChatMessage, NostrRelayArgs, Scenario, agent_messages, answer_among, post_chat,
};
use buzz_test_relay::{RelayConfig, TestRelay};
use nostr::{Keys, Timestamp};

use crate::{Background, CheckedDir, WAIT, agent, harness_bin, scenario};

/// The channel every relay scenario talks in.
pub const RELAY_CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";

/// What the harness logs once it is connected, authenticated and subscribed.
const SUBSCRIBED: &str = "connected, authenticated and subscribed";

/// A relay with the agent as a member of one channel, its owner, and a scenario for the
/// agent's files (state, wire log).
pub struct RelayWorld {
    /// The relay (stopped when the world is dropped).
    pub relay: TestRelay,
    /// The agent's keys: the harness runs with its secret key.
    pub agent: Keys,
    /// The owner: by default the only person the harness answers.
    pub owner: Keys,
    /// The scenario (state directory, wire log, observer log).
    pub s: Scenario,
    _dir: CheckedDir,
    runtime: tokio::runtime::Runtime,
}

impl RelayWorld {
    /// Starts a relay where the agent belongs to [`RELAY_CHANNEL`] (`#general`, a stream, as the
    /// relay's own group events say).
    pub fn new() -> RelayWorld {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the relay");
        let relay = runtime
            .block_on(TestRelay::start(RelayConfig::default()))
            .expect("the relay starts");
        let (dir, s) = scenario();
        let world = RelayWorld {
            relay,
            agent: Keys::generate(),
            owner: Keys::generate(),
            s,
            _dir: dir,
            runtime,
        };
        world
            .runtime
            .block_on(world.relay.add_channel(
                RELAY_CHANNEL,
                "general",
                "stream",
                &[world.agent.public_key()],
            ))
            .expect("the agent's channel");
        world
    }

    /// `author` says `text` in the channel mentioning the agent; `thread` = the ids of the
    /// thread's root and of the message answered.
    pub fn say(&self, author: &Keys, text: &str, thread: Option<(&str, &str)>) -> nostr::Event {
        let message = ChatMessage {
            channel: RELAY_CHANNEL,
            mention: Some(self.agent.public_key()),
            text,
            thread,
            at: Timestamp::now(),
        };
        self.runtime
            .block_on(post_chat(&self.relay.ws_url(), author, message))
            .expect("posted")
    }

    /// Every chat event the agent published, as the relay holds them (each one's id and
    /// signature checked).
    pub fn agent_events(&self) -> Vec<Event> {
        self.runtime
            .block_on(agent_messages(
                &self.relay.ws_url(),
                &self.owner,
                self.agent.public_key(),
            ))
            .expect("the agent's messages")
    }

    /// The agent's answer to `trigger` (its `e` tag marked `reply`), if the relay holds one now.
    pub fn answer_now(&self, trigger: &nostr::Event) -> Option<Event> {
        answer_among(self.agent_events(), &trigger.id.to_hex())
    }

    /// The agent's answer to `trigger`, waiting up to [`WAIT`].
    pub fn answer_to(&self, trigger: &nostr::Event) -> Event {
        crate::wait_until(WAIT, || self.answer_now(trigger))
            .unwrap_or_else(|| panic!("no answer to {:?}", trigger.content))
    }

    /// Starts the patched harness on the relay as the agent and waits until it is subscribed.
    /// Its log goes to `harness-relay-N.log` in the scenario's root.
    pub fn start(&self, agent_args: &[&str], extra: &[&str]) -> Background {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let log_path = self.s.root.join(format!("harness-relay-{n}.log"));
        let log = std::fs::File::create(&log_path).expect("harness log");
        let url = self.relay.ws_url();
        let secret = self.agent.secret_key().to_secret_hex();
        let owner = self.owner.public_key().to_hex();
        let relay = NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner,
        };
        let mut cmd = self.s.nostr_harness_command(
            &harness_bin(),
            &agent(&self.s, agent_args),
            relay,
            extra,
        );
        cmd.stdout(Stdio::null()).stderr(log);
        let background = Background {
            child: cmd.spawn().expect("start buzz-acp"),
        };
        let subscribed = crate::wait_until(WAIT, || {
            std::fs::read_to_string(&log_path)
                .ok()
                .filter(|log| log.contains(SUBSCRIBED))
                .map(|_| ())
        });
        assert!(
            subscribed.is_some(),
            "the harness did not subscribe:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        background
    }
}

impl Default for RelayWorld {
    fn default() -> Self {
        Self::new()
    }
}
