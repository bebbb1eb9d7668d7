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
use serde_json::Value;

use crate::{Background, CheckedDir, WAIT, agent, harness_bin, scenario};

/// The channel every relay scenario talks in.
pub const RELAY_CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";

/// How often a scenario reads the relay while it waits for the agent: each read is a signed
/// `POST /query` whose answer is verified event by event, so reading every 20 ms (the files'
/// pace) would keep a core busy in a debug build.
pub const RELAY_POLL: std::time::Duration = std::time::Duration::from_millis(100);

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
    /// On a members-only relay: the owner's attestation of the agent's key the harness is
    /// started with (`--auth-tag`), the JSON of its NIP-OA `auth` tag.
    pub auth_tag: Option<String>,
    /// The id of every message posted through [`Chat::post_in`], in order.
    posted: std::sync::Mutex<Vec<String>>,
    runtime: tokio::runtime::Runtime,
}

impl Chat {
    /// Starts a relay where the agent belongs to [`RELAY_CHANNEL`] (`#general`, a stream, as the
    /// relay's own group events say).
    ///
    /// # Errors
    /// The runtime, the relay or its channel could not be set up.
    pub fn start() -> Result<Chat, ChatSetupError> {
        Self::start_with(Membership::Open)
    }

    /// As [`Chat::start`], on a relay open to all, or serving over REST only its members
    /// (`members`) and whoever carries an `x-auth-tag`: the harness is then started with its
    /// owner's auth tag ([`Chat::auth_tag`]).
    ///
    /// # Errors
    /// The runtime, the relay or its channel could not be set up.
    pub fn start_with(membership: Membership<'_>) -> Result<Chat, ChatSetupError> {
        let owner = Keys::generate();
        let (config, auth_tag) = match membership {
            Membership::Open => (RelayConfig::default(), None),
            Membership::Members(people) => {
                let mut members: Vec<_> = people.iter().map(Keys::public_key).collect();
                members.push(owner.public_key());
                // The shape of an owner's NIP-OA attestation; the signature is not a real one
                // (neither the harness nor the test relay verifies it; the Buzz relay does).
                let tag = format!(
                    r#"["auth","{}","","{}"]"#,
                    owner.public_key().to_hex(),
                    "5a".repeat(64)
                );
                (RelayConfig::default().members_only(members), Some(tag))
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| ChatSetupError::Io {
                what: "building a runtime for the relay".into(),
                source,
            })?;
        let relay = runtime
            .block_on(TestRelay::start(config))
            .map_err(|e| ChatSetupError::Relay(e.to_string()))?;
        let chat = Chat {
            relay,
            agent: Keys::generate(),
            owner,
            auth_tag,
            posted: std::sync::Mutex::default(),
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
        self.post_in(RELAY_CHANNEL, author, text, thread, mention)
    }

    /// [`Chat::post`] in `channel`.
    ///
    /// # Errors
    /// The relay refused the event or could not be reached.
    pub fn post_in(
        &self,
        channel: &str,
        author: &Keys,
        text: &str,
        thread: Option<(&str, &str)>,
        mention: bool,
    ) -> Result<nostr::Event, ChatError> {
        self.post_in_at(channel, author, text, thread, mention, Timestamp::now())
    }

    /// [`Chat::post_in`], dated `at` (a message written earlier, e.g. while the harness was
    /// away, or by a client whose clock is off).
    ///
    /// # Errors
    /// The relay refused the event or could not be reached.
    pub fn post_in_at(
        &self,
        channel: &str,
        author: &Keys,
        text: &str,
        thread: Option<(&str, &str)>,
        mention: bool,
        at: Timestamp,
    ) -> Result<nostr::Event, ChatError> {
        let message = ChatMessage {
            channel,
            mention: mention.then(|| self.agent.public_key()),
            text,
            thread,
            at,
        };
        let event = self
            .runtime
            .block_on(post_chat(&self.relay.ws_url(), author, message))?;
        if let Ok(mut posted) = self.posted.lock() {
            posted.push(event.id.to_hex());
        }
        Ok(event)
    }

    /// Stable names for what differs between runs over a relay, so a snapshot reads the same
    /// every time: the people's keys (`<agent>`, `<owner>`), each posted message by its order
    /// (`m1`, `m2`, …), and each of the agent's messages by what it answers or quotes
    /// (`reply-to-m2`, `notice-about-m3`).
    pub fn labels(&self) -> Vec<(String, String)> {
        let posted = self.posted.lock().map(|p| p.clone()).unwrap_or_default();
        let mut labels: Vec<(String, String)> = vec![
            (self.agent.public_key().to_hex(), "<agent>".into()),
            (self.owner.public_key().to_hex(), "<owner>".into()),
        ];
        labels.extend(
            posted
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), format!("m{}", i + 1))),
        );
        let name = |labels: &[(String, String)], id: &str| {
            labels
                .iter()
                .find(|(from, _)| from == id)
                .map(|(_, to)| to.clone())
        };
        for message in self.agent_messages().unwrap_or_default() {
            let quoted = message.tag_values("q").next().map(str::to_string);
            let label = match (quoted, message.thread_refs().reply) {
                (Some(q), _) => name(&labels, &q).map(|l| format!("notice-about-{l}")),
                (None, Some(r)) => name(&labels, &r).map(|l| format!("reply-to-{l}")),
                (None, None) => None,
            };
            if let Some(label) = label {
                labels.push((message.id.clone(), label));
            }
        }
        labels
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
        buzz_acp::testing::wait_until_every(WAIT, RELAY_POLL, || self.answer_now(trigger))
            .unwrap_or_else(|| panic!("no answer to {:?}", trigger.content))
    }

    /// Starts `harness` on the relay as the agent, with the files of `s` (state, wire log,
    /// observer log), and waits until it is subscribed. Its stderr goes to `log`.
    ///
    /// # Errors
    /// The harness could not be started, or did not subscribe within [`WAIT`].
    pub fn start_harness(&self, launch: Launch<'_>) -> Result<Background, ChatSetupError> {
        let background = Background {
            child: self.spawn_harness(&launch)?,
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

impl Chat {
    /// Starts `launch`'s harness on this relay, its stderr in `launch.log`, without waiting for
    /// anything.
    ///
    /// # Errors
    /// The log could not be created or the harness could not be started.
    pub fn spawn_harness(
        &self,
        launch: &Launch<'_>,
    ) -> Result<std::process::Child, ChatSetupError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| ChatSetupError::Io { what, source }
        };
        let log = std::fs::File::create(&launch.log).map_err(io("creating the harness log"))?;
        let mut cmd = self.harness_command(launch);
        cmd.stdout(Stdio::null()).stderr(log);
        cmd.spawn().map_err(io("starting buzz-acp"))
    }

    /// The command line of `launch`'s harness on this relay, as the agent (its secret key in
    /// `BUZZ_PRIVATE_KEY`), with `launch`'s environment; its output is left to the caller.
    pub fn harness_command(&self, launch: &Launch<'_>) -> std::process::Command {
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
        // The host-wide lease of `one-harness-per-agent` goes in the scenario, not in the
        // user's data directory (`launch.env` may name a directory several scenarios share).
        cmd.env("BUZZ_ACP_LEASE_DIR", launch.scenario.root.join("leases"));
        if let Some(tag) = &self.auth_tag {
            cmd.env("BUZZ_AUTH_TAG", tag);
        }
        cmd.envs(launch.env.iter().copied());
        cmd
    }
}

/// Who a [`Chat`]'s relay serves over REST.
#[derive(Debug, Clone, Copy)]
pub enum Membership<'a> {
    /// Everyone.
    Open,
    /// These people and the owner; the agent through its owner's auth tag.
    Members(&'a [Keys]),
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

/// The DM channel between the owner and the agent (the file relay's `DIRECT`).
pub const DM_CHANNEL: &str = buzz_acp::testing::DIRECT;

/// A [`Chat`] and a scenario for the agent's files (state, wire log), checked against the ACP
/// schema when the test ends ([`CheckedDir`]).
///
/// Besides the stream [`RELAY_CHANNEL`] (`#general`, the file relay's `GENERAL`), the agent and
/// its owner share the DM [`DM_CHANNEL`]. The `post_*` methods and the readers mirror
/// [`Scenario`]'s, with [`Event`]s: the owner writes, a colleague ([`RelayWorld::user`]) chats
/// without mentioning the agent, and the relay is read back for what the agent published.
pub struct RelayWorld {
    chat: Chat,
    /// A colleague of the owner: the harness answers them only with `--respond-to anyone`.
    pub user: Keys,
    /// The scenario (state directory, wire log, observer log).
    pub s: Scenario,
    _dir: CheckedDir,
}

impl RelayWorld {
    /// Starts a relay where the agent belongs to [`RELAY_CHANNEL`] and [`DM_CHANNEL`].
    pub fn new() -> RelayWorld {
        Self::with_membership(false)
    }

    /// As [`RelayWorld::new`], on a members-only relay: the owner and the colleague are members,
    /// and the harness reaches the relay's REST side only through the owner's auth tag.
    pub fn members_only() -> RelayWorld {
        Self::with_membership(true)
    }

    fn with_membership(members_only: bool) -> RelayWorld {
        let (dir, s) = scenario();
        let user = Keys::generate();
        let people = [user.clone()];
        let membership = if members_only {
            Membership::Members(&people)
        } else {
            Membership::Open
        };
        let chat = Chat::start_with(membership).expect("the relay starts");
        let members = [chat.agent.public_key(), chat.owner.public_key()];
        chat.runtime
            .block_on(chat.relay.add_channel(DM_CHANNEL, "owner", "dm", &members))
            .expect("the DM channel");
        RelayWorld {
            chat,
            user,
            s,
            _dir: dir,
        }
    }

    /// Runs `f` on the relay's runtime (e.g. a [`TestRelay`] call).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.chat.runtime.block_on(f)
    }

    fn posted(
        &self,
        channel: &str,
        author: &Keys,
        text: &str,
        thread: Option<(&Event, &Event)>,
        mention: bool,
    ) -> Event {
        let ids = thread.map(|(root, parent)| (root.id.as_str(), parent.id.as_str()));
        let event = self
            .chat
            .post_in(channel, author, text, ids, mention)
            .unwrap_or_else(|e| panic!("posting {text:?}: {e}"));
        Event::from(&event)
    }

    /// The owner opens a thread in [`RELAY_CHANNEL`] mentioning the agent.
    pub fn post_top(&self, text: &str) -> Event {
        self.posted(RELAY_CHANNEL, &self.owner, text, None, true)
    }

    /// The owner writes to the agent in [`DM_CHANNEL`].
    pub fn post_dm(&self, text: &str) -> Event {
        self.posted(DM_CHANNEL, &self.owner, text, None, true)
    }

    /// The owner replies in `root`'s thread (to `parent`) mentioning the agent.
    pub fn post_reply(&self, root: &Event, parent: &Event, text: &str) -> Event {
        self.post_reply_as(&self.chat.owner, root, parent, text)
    }

    /// `author` replies in `root`'s thread (to `parent`) mentioning the agent.
    pub fn post_reply_as(&self, author: &Keys, root: &Event, parent: &Event, text: &str) -> Event {
        let channel = root.channel_id().map(|c| c.to_string());
        let channel = channel.as_deref().unwrap_or(RELAY_CHANNEL);
        self.posted(channel, author, text, Some((root, parent)), true)
    }

    /// The colleague replies in `root`'s thread (to `parent`) without mentioning the agent
    /// (history only).
    pub fn post_chatter(&self, root: &Event, parent: &Event, text: &str) -> Event {
        let channel = root.channel_id().map(|c| c.to_string());
        let channel = channel.as_deref().unwrap_or(RELAY_CHANNEL);
        self.posted(channel, &self.user, text, Some((root, parent)), false)
    }

    /// Every message the agent published, oldest first.
    pub fn replies(&self) -> Vec<Event> {
        self.chat.agent_events()
    }

    /// The agent's reply to `event_id` (its `e` tag marked `reply`), if published.
    pub fn reply_to(&self, event_id: &str) -> Option<Event> {
        answer_among(self.replies(), event_id)
    }

    /// Waits up to `timeout` for the agent's reply to `event_id`.
    pub fn wait_for_reply(&self, event_id: &str, timeout: std::time::Duration) -> Option<Event> {
        buzz_acp::testing::wait_until_every(timeout, RELAY_POLL, || self.reply_to(event_id))
    }

    /// How many of the agent's messages answer `event_id` (as its reply, or as one more trigger
    /// of a batch).
    pub fn answers_to(&self, event_id: &str) -> usize {
        self.replies()
            .iter()
            .filter(|r| r.answered_ids().iter().any(|id| id == event_id))
            .count()
    }

    /// What the harness posted about `event_id` (a notice: it quotes the event with a `q` tag
    /// and is never an answer to it), oldest first.
    pub fn notices_about(&self, event_id: &str) -> Vec<Event> {
        self.replies()
            .into_iter()
            .filter(|e| e.tag_values("q").any(|q| q == event_id))
            .collect()
    }

    /// Starts the patched harness with `env` too (e.g. a fork flag's `BUZZ_ACP_*` variable: a
    /// harness without the patch that reads it ignores it).
    pub fn start_env(
        &self,
        agent_args: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Background {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let agent_command = agent(&self.s, agent_args);
        let launch = Launch {
            scenario: &self.s,
            harness: &harness_bin(),
            agent_command: &agent_command,
            extra,
            env,
            log: self.s.root.join(format!("harness-relay-{n}.log")),
        };
        self.chat
            .start_harness(launch)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the patched harness with `env` too, its log in the scenario's `log_name`, without
    /// waiting for anything (e.g. a standby that waits for the agent's lease).
    pub fn spawn_env(
        &self,
        agent_args: &[&str],
        env: &[(&str, &str)],
        log_name: &str,
    ) -> (Background, PathBuf) {
        let agent_command = agent(&self.s, agent_args);
        let log = self.s.root.join(log_name);
        let launch = Launch {
            scenario: &self.s,
            harness: &harness_bin(),
            agent_command: &agent_command,
            extra: &[],
            env,
            log: log.clone(),
        };
        let child = self
            .chat
            .spawn_harness(&launch)
            .unwrap_or_else(|e| panic!("{e}"));
        (Background { child }, log)
    }

    /// Starts the patched harness on the relay as the agent and waits until it is subscribed.
    /// Its log goes to `harness-relay-N.log` in the scenario's root.
    pub fn start(&self, agent_args: &[&str], extra: &[&str]) -> Background {
        self.start_env(agent_args, extra, &[])
    }

    /// [`Chat::labels`], and `<user>` for the colleague.
    pub fn labels(&self) -> Vec<(String, String)> {
        let mut labels = self.chat.labels();
        labels.push((self.user.public_key().to_hex(), "<user>".into()));
        labels
    }

    /// `value` with what differs between runs over a relay replaced by stable names
    /// ([`RelayWorld::labels`]; the times messages were written become `<time>`).
    pub fn redacted(&self, value: Value) -> Value {
        redact(value, &self.labels())
    }

    /// The snapshot view of the wire log ([`crate::wire_view`]), [`RelayWorld::redacted`].
    pub fn wire_view(&self) -> Value {
        self.redacted(crate::wire_view(&self.s))
    }

    /// The snapshot view of the store ([`crate::store_view`]), [`RelayWorld::redacted`]. A
    /// ledger's `deliveredEventIds` is a set the store keeps sorted by id; ids differ between
    /// runs, so the view sorts their names instead.
    pub fn store_view(&self) -> Value {
        let mut view = self.redacted(crate::store_view(self));
        if let Some(sessions) = view["sessions"].as_object_mut() {
            for receipt in sessions.values_mut() {
                if let Some(ids) = receipt["delivery"]["deliveredEventIds"].as_array_mut() {
                    ids.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
                }
            }
        }
        view
    }
}

/// `value` with every string's occurrences of `labels`' keys (64-character hex keys and ids),
/// and of their first 8 characters (how the thread context names authors and messages),
/// replaced by their names, and every time to the second replaced by `<time>`.
pub fn redact(value: Value, labels: &[(String, String)]) -> Value {
    let mut all: Vec<(String, String)> = labels.to_vec();
    all.extend(
        labels
            .iter()
            .filter(|(from, _)| from.len() > 8)
            .map(|(from, to)| (from[..8].to_string(), to.clone())),
    );
    // Longest first, so a whole id is replaced before its prefix.
    all.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    replace_all(value, &all)
}

fn replace_all(value: Value, labels: &[(String, String)]) -> Value {
    match value {
        Value::String(text) => Value::String(redact_text(&text, labels)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| replace_all(v, labels)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (redact_text(&k, labels), replace_all(v, labels)))
                .collect(),
        ),
        other => other,
    }
}

fn redact_text(text: &str, labels: &[(String, String)]) -> String {
    let mut text = text.to_string();
    for (from, to) in labels {
        if text.contains(from.as_str()) {
            text = text.replace(from.as_str(), to);
        }
    }
    without_times(&text)
}

/// `text` with every RFC 3339 UTC time to the second (`2026-12-05T11:06:42Z`) replaced by
/// `<time>`.
fn without_times(text: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = text.as_bytes();
    let fits = |at: usize| {
        bytes.len() >= at + SHAPE.len()
            && SHAPE
                .iter()
                .zip(&bytes[at..])
                .all(|(shape, b)| match shape {
                    b'd' => b.is_ascii_digit(),
                    other => b == other,
                })
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if fits(at) {
            out.push_str(&text[copied..at]);
            out.push_str("<time>");
            at += SHAPE.len();
            copied = at;
        } else {
            at += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

impl crate::HarnessFiles for RelayWorld {
    fn files(&self) -> &Scenario {
        &self.s
    }

    fn store_scope(&self) -> buzz_session_store::StoreScope {
        buzz_session_store::StoreScope {
            relay: self.relay.ws_url().trim_end_matches('/').to_string(),
            agent_pubkey: self.agent.public_key().to_hex(),
        }
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

/// Reading the whole of a channel back (the `session_store_resume` guards: what reached the
/// relay).
impl RelayWorld {
    /// Every event the relay holds in `channel` (its `h` tag), of any kind, read as the owner
    /// through the REST side.
    pub fn events_in(&self, channel: &str) -> Vec<nostr::Event> {
        let filter = nostr::Filter::new().custom_tag(
            nostr::SingleLetterTag::lowercase(nostr::Alphabet::H),
            channel,
        );
        let reader = buzz_acp::rest::RestClient::new(&self.relay.ws_url(), self.owner.clone());
        self.block_on(reader.query(&[filter]))
            .unwrap_or_else(|e| panic!("reading channel {channel}: {e}"))
    }
}

/// What a running harness has read from its subscription (known without reading its log), and a
/// wire view whose prompts quote the test agent's earlier replies.
impl RelayWorld {
    /// Waits up to [`WAIT`] until the running harness has read `event` (a message it admits for a
    /// turn, or any other) from the relay, shown by what it does with a probe posted after it:
    /// the owner's `!cancel` as a new thread in `event`'s channel. The harness handles an owner's
    /// command as soon as it reads it, whatever its workers are doing: it records a
    /// `control_result` naming the command in the observer log (and answers "Nothing is running
    /// here.", touching no session). The relay sends a channel's events in the order it stored
    /// them and the harness handles them in that order, so once the probe is handled, `event`
    /// was handled before it. `event` must be in a stream: in a DM every message belongs to the
    /// one conversation, and the probe would cancel its turn.
    pub fn wait_read_by_harness(&self, event: &Event) -> Option<()> {
        let channel = event.channel_id().map(|c| c.to_string());
        let channel = channel.as_deref().unwrap_or(RELAY_CHANNEL);
        assert_ne!(channel, DM_CHANNEL, "the probe would cancel the DM's turn");
        let probe = self.posted(channel, &self.chat.owner, "!cancel", None, true);
        crate::wait_until(WAIT, || {
            self.s
                .observer_records("control_result")
                .iter()
                .any(|r| r["eventId"] == probe.id.as_str())
                .then_some(())
        })
    }

    /// [`RelayWorld::wire_view`] with each of the test agent's digests (`digest=1a2b3c4d` in its
    /// replies, which the harness quotes back in later prompts' thread context) shown as
    /// `digest=<digest>`: a digest hashes what the session saw, the relay's ids and times
    /// included, so it differs between runs. What the session saw is in the view itself.
    pub fn wire_view_without_digests(&self) -> Value {
        let text = self.wire_view().to_string();
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find("digest=") {
            let (before, from) = rest.split_at(at + "digest=".len());
            out.push_str(before);
            let hex = from
                .char_indices()
                .take_while(|(_, c)| c.is_ascii_hexdigit())
                .count();
            if hex == 8 {
                out.push_str("<digest>");
                rest = &from[hex..];
            } else {
                rest = from;
            }
        }
        out.push_str(rest);
        serde_json::from_str(&out).expect("the wire view is JSON")
    }
}
