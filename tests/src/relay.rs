//! Scenarios over a real Nostr relay: the fork's test relay (a NIP-42 websocket from
//! `nostr-relay-builder` with the Buzz REST bridge and NIP-98 beside it) runs in the test's
//! process, the harness connects to it as the agent (`--relay-url`, `BUZZ_PRIVATE_KEY`), and
//! people post signed events through the relay's REST side as a Buzz client does.
//!
//! Like upstream's, the harness's subscription starts when the harness starts: a mention posted
//! before it is subscribed is not delivered. [`Chat::start_harness`] therefore waits for the
//! harness to say it is subscribed (a readiness signal; no guard asserts on a log line).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};

use buzz_acp::relay::Event;
use buzz_acp::testing::{
    ChatError, ChatMessage, NostrRelayArgs, Scenario, agent_messages, answer_among, post_chat,
};
use buzz_test_relay::{RelayConfig, TestRelay};
use nostr::{Keys, Timestamp};

use crate::{Background, CheckedDir, WAIT, agent, harness_bin, scenario};

/// The channel every relay scenario talks in.
pub const RELAY_CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";

/// What the harness logs once it is connected, authenticated and subscribed.
const SUBSCRIBED: &str = "connected, authenticated and subscribed";

/// Why the relay or a harness on it could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ChatSetupError {
    /// The relay did not start, or its channel could not be seeded.
    #[error("the test relay: {0}")]
    Relay(String),
    /// A message could not be posted or the agent's messages read.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// The harness could not be started or its log written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The harness did not subscribe (it exited, or never said so within [`WAIT`]).
    #[error("the harness did not subscribe; its log:\n{log}")]
    NotSubscribed {
        /// The harness's log.
        log: String,
    },
}

/// A relay where the agent belongs to [`RELAY_CHANNEL`], the agent's keys and its owner's.
pub struct Chat {
    /// The relay (stopped when the chat is dropped).
    pub relay: TestRelay,
    /// The agent's keys: the harness runs with its secret key.
    pub agent: Keys,
    /// The owner: by default the only person the harness answers.
    pub owner: Keys,
    runtime: tokio::runtime::Runtime,
}

impl Chat {
    /// Starts a relay where the agent belongs to [`RELAY_CHANNEL`] (`#general`, a stream, as the
    /// relay's own group events say).
    ///
    /// # Errors
    /// The runtime, the relay or its channel could not be set up.
    pub fn start() -> Result<Chat, ChatSetupError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| ChatSetupError::Io {
                what: "building a runtime for the relay".into(),
                source,
            })?;
        let relay = runtime
            .block_on(TestRelay::start(RelayConfig::default()))
            .map_err(|e| ChatSetupError::Relay(e.to_string()))?;
        let chat = Chat {
            relay,
            agent: Keys::generate(),
            owner: Keys::generate(),
            runtime,
        };
        chat.runtime
            .block_on(chat.relay.add_channel(
                RELAY_CHANNEL,
                "general",
                "stream",
                &[chat.agent.public_key()],
            ))
            .map_err(|e| ChatSetupError::Relay(e.to_string()))?;
        Ok(chat)
    }

    /// `author` posts `text` in the channel, mentioning the agent when `mention` is set;
    /// `thread` = the ids of the thread's root and of the message answered.
    ///
    /// # Errors
    /// The relay refused the event or could not be reached.
    pub fn post(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&str, &str)>,
        mention: bool,
    ) -> Result<nostr::Event, ChatError> {
        let message = ChatMessage {
            channel: RELAY_CHANNEL,
            mention: mention.then(|| self.agent.public_key()),
            text,
            thread,
            at: Timestamp::now(),
        };
        self.runtime
            .block_on(post_chat(&self.relay.ws_url(), author, message))
    }

    /// `author` says `text` in the channel mentioning the agent; `thread` = the ids of the
    /// thread's root and of the message answered.
    pub fn say(&self, author: &Keys, text: &str, thread: Option<(&str, &str)>) -> nostr::Event {
        self.post(author, text, thread, true).expect("posted")
    }

    /// Every chat event the agent published, as the relay holds them (each one's id and
    /// signature checked), oldest first. Nostr dates events to the second: messages of the same
    /// second keep the relay's order.
    ///
    /// # Errors
    /// The relay could not be queried, or it holds an event with a wrong id or signature.
    pub fn agent_messages(&self) -> Result<Vec<Event>, ChatError> {
        let mut published = self.runtime.block_on(agent_messages(
            &self.relay.ws_url(),
            &self.owner,
            self.agent.public_key(),
        ))?;
        published.sort_by_key(|e| e.created_at);
        Ok(published)
    }

    /// Every chat event the agent published (see [`Chat::agent_messages`]), panicking when the
    /// relay cannot be read.
    pub fn agent_events(&self) -> Vec<Event> {
        self.agent_messages().expect("the agent's messages")
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

    /// Starts `harness` on the relay as the agent, with the files of `s` (state, wire log,
    /// observer log), and waits until it is subscribed. Its stderr goes to `log`.
    ///
    /// # Errors
    /// The harness could not be started, or did not subscribe within [`WAIT`].
    pub fn start_harness(&self, launch: Launch<'_>) -> Result<Background, ChatSetupError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| ChatSetupError::Io { what, source }
        };
        let log = std::fs::File::create(&launch.log).map_err(io("creating the harness log"))?;
        let url = self.relay.ws_url();
        let secret = self.agent.secret_key().to_secret_hex();
        let owner = self.owner.public_key().to_hex();
        let relay = NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner,
        };
        let mut cmd = launch.scenario.nostr_harness_command(
            launch.harness,
            launch.agent_command,
            relay,
            launch.extra,
        );
        cmd.envs(launch.env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log);
        let background = Background {
            child: cmd.spawn().map_err(io("starting buzz-acp"))?,
        };
        let subscribed = crate::wait_until(WAIT, || {
            std::fs::read_to_string(&launch.log)
                .ok()
                .filter(|log| log.contains(SUBSCRIBED))
                .map(|_| ())
        });
        match subscribed {
            Some(()) => Ok(background),
            None => Err(ChatSetupError::NotSubscribed {
                log: std::fs::read_to_string(&launch.log).unwrap_or_default(),
            }),
        }
    }
}

/// What [`Chat::start_harness`] starts.
pub struct Launch<'a> {
    /// The agent's files: state directory, wire log, observer log.
    pub scenario: &'a Scenario,
    /// The `buzz-acp` binary.
    pub harness: &'a Path,
    /// The agent's command line.
    pub agent_command: &'a str,
    /// More harness flags.
    pub extra: &'a [&'a str],
    /// More environment (e.g. a fork flag's `BUZZ_ACP_*` variable: a build without it ignores
    /// it).
    pub env: &'a [(&'a str, &'a str)],
    /// Where the harness's stderr goes.
    pub log: PathBuf,
}

/// A [`Chat`] and a scenario for the agent's files (state, wire log), checked against the ACP
/// schema when the test ends ([`CheckedDir`]).
pub struct RelayWorld {
    chat: Chat,
    /// The scenario (state directory, wire log, observer log).
    pub s: Scenario,
    _dir: CheckedDir,
}

impl RelayWorld {
    /// Starts a relay where the agent belongs to [`RELAY_CHANNEL`].
    pub fn new() -> RelayWorld {
        let (dir, s) = scenario();
        RelayWorld {
            chat: Chat::start().expect("the relay starts"),
            s,
            _dir: dir,
        }
    }

    /// Starts the patched harness on the relay as the agent and waits until it is subscribed.
    /// Its log goes to `harness-relay-N.log` in the scenario's root.
    pub fn start(&self, agent_args: &[&str], extra: &[&str]) -> Background {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let agent_command = agent(&self.s, agent_args);
        let launch = Launch {
            scenario: &self.s,
            harness: &harness_bin(),
            agent_command: &agent_command,
            extra,
            env: &[],
            log: self.s.root.join(format!("harness-relay-{n}.log")),
        };
        self.chat
            .start_harness(launch)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Deref for RelayWorld {
    type Target = Chat;

    fn deref(&self) -> &Chat {
        &self.chat
    }
}

impl Default for RelayWorld {
    fn default() -> Self {
        Self::new()
    }
}
