//! End-to-end scenario support: a file relay, a state directory and an agent
//! command line in one temporary root, and the real `buzz-acp` binary run
//! against them (to completion with `--once`, or in the background).
//!
//! Timestamps are deterministic: posted events start at 2100-01-01 and advance
//! a minute per post, and the harness stamps a reply one second after its
//! trigger when the trigger is in the future. Wire logs and prompts are
//! therefore byte-stable and can be snapshotted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::relay::{
    ChannelId, ChannelInfo, ChannelKind, Event, EventBuilder, RelayError, append_events,
    write_channels,
};

/// The agent's public key in scenarios.
pub const AGENT: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
/// A user's public key.
pub const USER: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
/// The owner's public key (may send `!rotate`, `!cancel`, `!model`).
pub const OWNER: &str = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3";
/// The stream channel of a scenario.
pub const GENERAL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
/// The DM channel of a scenario.
pub const DIRECT: &str = "7c1d9e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f";
/// The working directory the harness hands the agent (never touched; fixed so
/// wire logs are identical on every machine).
/// Where and as whom a harness meets a Nostr relay ([`Scenario::nostr_harness_command`]).
#[derive(Debug, Clone, Copy)]
pub struct NostrRelayArgs<'a> {
    /// `ws://…` of the relay.
    pub url: &'a str,
    /// The agent's secret key, hex.
    pub secret_key_hex: &'a str,
    /// The owner's public key, hex.
    pub owner_hex: &'a str,
}

pub const AGENT_CWD: &str = "/srv/buzz-scenario";
/// First timestamp of a scenario: 2100-01-01T00:00:00Z.
pub const EPOCH: u64 = 4_102_444_800;

/// A scenario's directories and clock.
#[derive(Debug)]
pub struct Scenario {
    /// The temporary root.
    pub root: PathBuf,
    /// The file relay.
    pub relay_dir: PathBuf,
    /// The harness's `--state-dir`.
    pub state_dir: PathBuf,
    /// The test agent's `--state-dir` (its transcripts).
    pub agent_state_dir: PathBuf,
    /// The test agent's wire log.
    pub wire_log: PathBuf,
    /// The harness's observer log.
    pub observer_log: PathBuf,
    /// The harness's `--relay-poll-ms` (20 by default; measurements use less).
    pub poll_ms: u64,
    clock: u64,
}

impl Scenario {
    /// Lays out a scenario under `root` with a stream channel `#general` and a
    /// DM channel.
    pub fn new(root: &Path) -> Result<Self, RelayError> {
        let s = Scenario {
            root: root.to_path_buf(),
            relay_dir: root.join("relay"),
            state_dir: root.join("harness-state"),
            agent_state_dir: root.join("agent-state"),
            wire_log: root.join("wire.jsonl"),
            observer_log: root.join("observer.jsonl"),
            poll_ms: 20,
            clock: EPOCH,
        };
        for dir in [&s.relay_dir, &s.state_dir, &s.agent_state_dir] {
            std::fs::create_dir_all(dir).map_err(|source| RelayError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        write_channels(
            &s.relay_dir,
            &[
                (
                    general(),
                    ChannelInfo {
                        name: "general".into(),
                        kind: ChannelKind::Stream,
                    },
                ),
                (
                    direct(),
                    ChannelInfo {
                        name: "dm".into(),
                        kind: ChannelKind::Dm,
                    },
                ),
            ],
        )?;
        Ok(s)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 60;
        self.clock
    }

    /// Appends an event built by `build` (given the next timestamp).
    pub fn post_with(&mut self, build: impl FnOnce(u64) -> Event) -> Result<Event, RelayError> {
        let event = build(self.tick());
        append_events(&self.relay_dir, std::slice::from_ref(&event))?;
        Ok(event)
    }

    /// A top-level message mentioning the agent in `#general`: a new thread.
    pub fn post_top(&mut self, text: &str) -> Result<Event, RelayError> {
        self.post_with(|at| {
            EventBuilder::message(USER, &general(), text)
                .created_at(at)
                .mention(AGENT)
                .build()
        })
    }

    /// A reply in `root`'s thread (to `parent`) mentioning the agent.
    pub fn post_reply(
        &mut self,
        root: &Event,
        parent: &Event,
        text: &str,
    ) -> Result<Event, RelayError> {
        self.post_reply_as(USER, root, parent, text)
    }

    /// A reply by `author` in `root`'s thread (to `parent`) mentioning the agent.
    pub fn post_reply_as(
        &mut self,
        author: &str,
        root: &Event,
        parent: &Event,
        text: &str,
    ) -> Result<Event, RelayError> {
        let channel = root.channel_id().unwrap_or_else(general);
        self.post_with(|at| {
            EventBuilder::message(author, &channel, text)
                .created_at(at)
                .thread(&root.id, &parent.id)
                .mention(AGENT)
                .build()
        })
    }

    /// A reply in `root`'s thread that does not mention the agent (history only).
    pub fn post_chatter(
        &mut self,
        root: &Event,
        parent: &Event,
        text: &str,
    ) -> Result<Event, RelayError> {
        let channel = root.channel_id().unwrap_or_else(general);
        self.post_with(|at| {
            EventBuilder::message(USER, &channel, text)
                .created_at(at)
                .thread(&root.id, &parent.id)
                .build()
        })
    }

    /// The agent is removed from `#general` (its sessions there are abandoned).
    pub fn post_removal(&mut self) -> Result<Event, RelayError> {
        self.post_with(|at| {
            EventBuilder::new(crate::relay::KIND_REMOVE_MEMBER, OWNER, &general(), "")
                .created_at(at)
                .mention(AGENT)
                .build()
        })
    }

    /// Every event in the relay, in order (malformed lines skipped).
    pub fn events(&self) -> Vec<Event> {
        std::fs::read_to_string(self.relay_dir.join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Events the agent published.
    pub fn replies(&self) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.pubkey == AGENT)
            .collect()
    }

    /// The agent's reply to `event_id`, if published.
    pub fn reply_to(&self, event_id: &str) -> Option<Event> {
        self.replies()
            .into_iter()
            .find(|r| r.thread_refs().reply.as_deref() == Some(event_id))
    }

    /// How many of the agent's events in the relay answer `event_id` (as
    /// its reply, or as one more trigger of a batch).
    pub fn answers_to(&self, event_id: &str) -> usize {
        self.replies()
            .iter()
            .filter(|r| r.answered_ids().iter().any(|id| id == event_id))
            .count()
    }

    /// The relay's `events.jsonl`.
    pub fn events_path(&self) -> PathBuf {
        self.relay_dir.join("events.jsonl")
    }

    /// Releases a test-agent prompt held by `!gate:<name>`.
    pub fn open_gate(&self, name: &str) -> std::io::Result<()> {
        let gates = self.agent_state_dir.join("gates");
        std::fs::create_dir_all(&gates)?;
        std::fs::write(gates.join(name), b"open\n")
    }

    /// The harness's processed-event cursor file (it may not exist yet).
    pub fn cursor_path(&self) -> std::io::Result<PathBuf> {
        let relay = std::fs::canonicalize(&self.relay_dir)?;
        Ok(crate::cursor::cursor_path(
            &self.state_dir,
            AGENT,
            &format!("file://{}", relay.display()),
        ))
    }

    /// The agent command line for the test agent at `agent_bin`.
    pub fn agent_command(&self, agent_bin: &Path, agent_args: &[&str]) -> String {
        let mut parts = vec![
            quote(&agent_bin.display().to_string()),
            "--state-dir".into(),
            quote(&self.agent_state_dir.display().to_string()),
            "--wire-log".into(),
            quote(&self.wire_log.display().to_string()),
        ];
        parts.extend(agent_args.iter().map(|a| quote(a)));
        parts.join(" ")
    }

    /// The harness command on the scenario's file relay (environment scrubbed of `BUZZ_ACP_*`).
    pub fn harness_command(
        &self,
        harness_bin: &Path,
        agent_command: &str,
        extra: &[&str],
    ) -> Command {
        let mut cmd = self.command_without_relay(harness_bin, agent_command);
        cmd.arg("--relay-dir")
            .arg(&self.relay_dir)
            .arg("--agent-pubkey")
            .arg(AGENT)
            .arg("--owner-pubkey")
            .arg(OWNER)
            // The scenarios' users are several people, not only the owner.
            .arg("--respond-to")
            .arg("anyone")
            .args(extra);
        cmd
    }

    /// The harness command on a Nostr relay at `relay_url`, as the agent whose secret key is
    /// `secret_key_hex` (passed in `BUZZ_PRIVATE_KEY`, as an operator would), owned by
    /// `owner_hex`.
    pub fn nostr_harness_command(
        &self,
        harness_bin: &Path,
        agent_command: &str,
        relay: NostrRelayArgs<'_>,
        extra: &[&str],
    ) -> Command {
        let mut cmd = self.command_without_relay(harness_bin, agent_command);
        cmd.arg("--relay-url")
            .arg(relay.url)
            .arg("--agent-owner")
            .arg(relay.owner_hex)
            .env("BUZZ_PRIVATE_KEY", relay.secret_key_hex)
            .args(extra);
        cmd
    }

    /// Everything but the relay, the agent's key and who may address it.
    fn command_without_relay(&self, harness_bin: &Path, agent_command: &str) -> Command {
        let mut cmd = Command::new(harness_bin);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("BUZZ_ACP_")
                || key.starts_with("BUZZ_RELAY")
                || key == "BUZZ_PRIVATE_KEY"
                || key == "BUZZ_AUTH_TAG"
            {
                cmd.env_remove(key.as_ref());
            }
        }
        cmd.arg("--agent-command")
            .arg(agent_command)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--observer-log")
            .arg(&self.observer_log)
            .arg("--cwd")
            .arg(AGENT_CWD)
            .arg("--relay-poll-ms")
            .arg(self.poll_ms.to_string())
            .env("BUZZ_ACP_LOG", "buzz_acp=debug,info")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs the harness with `--once`; an unsuccessful exit is an error
    /// carrying its stderr.
    pub fn run_once_ok(
        &self,
        harness_bin: &Path,
        agent_command: &str,
        extra: &[&str],
    ) -> Result<Output, String> {
        let out = self
            .run_once(harness_bin, agent_command, extra)
            .map_err(|e| format!("cannot run {}: {e}", harness_bin.display()))?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(format!(
                "buzz-acp exited with {}:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Runs the harness with `--once` and returns its output.
    pub fn run_once(
        &self,
        harness_bin: &Path,
        agent_command: &str,
        extra: &[&str],
    ) -> std::io::Result<Output> {
        let mut cmd = self.harness_command(harness_bin, agent_command, extra);
        cmd.arg("--once");
        cmd.output()
    }

    /// Starts the harness in the background.
    pub fn start(
        &self,
        harness_bin: &Path,
        agent_command: &str,
        extra: &[&str],
    ) -> std::io::Result<Running> {
        let log_path = self.root.join(format!("harness-{}.log", self.clock));
        let log = std::fs::File::create(&log_path)?;
        let mut cmd = self.harness_command(harness_bin, agent_command, extra);
        cmd.stdout(Stdio::null()).stderr(log);
        Ok(Running {
            child: cmd.spawn()?,
            log_path,
        })
    }

    /// Waits until the agent has replied to `event_id`.
    pub fn wait_for_reply(&self, event_id: &str, timeout: Duration) -> Option<Event> {
        wait_until(timeout, || self.reply_to(event_id))
    }

    /// Like [`Scenario::wait_for_reply`], polling every `every` (for timing).
    pub fn wait_for_reply_every(
        &self,
        event_id: &str,
        timeout: Duration,
        every: Duration,
    ) -> Option<Event> {
        wait_until_every(timeout, every, || self.reply_to(event_id))
    }

    /// Observer records of type `kind`.
    pub fn observer_records(&self, kind: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.observer_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == kind)
            .collect()
    }
}

/// A harness running in the background; killed when dropped.
#[derive(Debug)]
pub struct Running {
    child: Child,
    log_path: PathBuf,
}

impl Running {
    /// Asks the harness to stop (SIGTERM) and waits for it.
    pub fn stop(mut self) -> std::io::Result<std::process::ExitStatus> {
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if !term.map(|s| s.success()).unwrap_or(false) {
            self.child.kill()?;
        }
        self.child.wait()
    }

    /// Kills the harness with SIGKILL (no cleanup of its own can run) and
    /// reaps it.
    pub fn kill(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.kill()?;
        self.child.wait()
    }

    /// The file its stderr (the log) goes to.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` every 20 ms until it yields or `timeout` passes.
pub fn wait_until<T>(timeout: Duration, probe: impl FnMut() -> Option<T>) -> Option<T> {
    wait_until_every(timeout, Duration::from_millis(20), probe)
}

/// Polls `probe` every `every` until it yields or `timeout` passes.
pub fn wait_until_every<T>(
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// `turns=N` of a test-agent reply: how many user turns the answering
/// session held. `None` when the text is not a test-agent reply.
pub fn reply_turns(reply: &Event) -> Option<u32> {
    reply
        .content
        .split_whitespace()
        .find_map(|w| w.strip_prefix("turns="))
        .and_then(|n| n.parse().ok())
}

/// Number of history entries (`[n] …` lines) in a prompt's
/// `<thread-context>` block; 0 when the prompt has none.
pub fn context_entries(prompt: &str) -> usize {
    let Some(start) = prompt.find("<thread-context") else {
        return 0;
    };
    let end = prompt[start..]
        .find("</thread-context>")
        .map_or(prompt.len(), |e| start + e);
    prompt[start..end]
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("] "))
        .count()
}

/// The scenario's stream channel.
pub fn general() -> ChannelId {
    ChannelId::parse(GENERAL).unwrap_or_else(|_| unreachable!("GENERAL is a valid UUID"))
}

/// The scenario's DM channel.
pub fn direct() -> ChannelId {
    ChannelId::parse(DIRECT).unwrap_or_else(|_| unreachable!("DIRECT is a valid UUID"))
}

fn quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A chat message a person posts on a Nostr relay ([`post_chat`]).
#[derive(Debug, Clone, Copy)]
pub struct ChatMessage<'a> {
    /// The channel (`h` tag).
    pub channel: &'a str,
    /// Whom it mentions (`p` tag), usually the agent.
    pub mention: Option<nostr::PublicKey>,
    /// The text.
    pub text: &'a str,
    /// (root id, parent id) for a reply in a thread (NIP-10 `root` and `reply` markers).
    pub thread: Option<(&'a str, &'a str)>,
    /// When it was written.
    pub at: nostr::Timestamp,
}

/// Why a chat message could not be posted or the agent's messages read.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The relay's REST side failed.
    #[error(transparent)]
    Rest(#[from] crate::rest::RestError),
    /// A tag or the signature could not be made.
    #[error("building the message: {0}")]
    Build(String),
    /// The relay answered but did not store the message.
    #[error("the relay refused the message: {0}")]
    Refused(String),
    /// One of the agent's messages does not verify.
    #[error("an event of the agent fails verification: {0}")]
    Forged(String),
}

/// Signs `message` as `author` and publishes it through the REST side of the relay at
/// `relay_url` (`POST /events` with NIP-98), as a Buzz client posts. The signed event.
pub async fn post_chat(
    relay_url: &str,
    author: &nostr::Keys,
    message: ChatMessage<'_>,
) -> Result<nostr::Event, ChatError> {
    let tag = |parts: &[&str]| {
        nostr::Tag::parse(parts.iter().copied()).map_err(|e| ChatError::Build(e.to_string()))
    };
    let mut tags = vec![tag(&["h", message.channel])?];
    tags.extend(message.mention.map(nostr::Tag::public_key));
    if let Some((root, parent)) = message.thread {
        tags.push(tag(&["e", root, "", "root"])?);
        tags.push(tag(&["e", parent, "", "reply"])?);
    }
    let event = nostr::EventBuilder::new(nostr::Kind::Custom(9), message.text)
        .tags(tags)
        .custom_created_at(message.at)
        .sign_with_keys(author)
        .map_err(|e| ChatError::Build(e.to_string()))?;
    let published = crate::rest::RestClient::new(relay_url, author.clone())
        .publish(&event)
        .await?;
    if !published.accepted {
        return Err(ChatError::Refused(published.message));
    }
    Ok(event)
}

/// Every chat message (kind 9) `agent` published on the relay at `relay_url`, read as `reader`,
/// each one's id and signature checked.
pub async fn agent_messages(
    relay_url: &str,
    reader: &nostr::Keys,
    agent: nostr::PublicKey,
) -> Result<Vec<Event>, ChatError> {
    let filter = nostr::Filter::new()
        .author(agent)
        .kind(nostr::Kind::Custom(9));
    let events = crate::rest::RestClient::new(relay_url, reader.clone())
        .query(&[filter])
        .await?;
    events
        .iter()
        .map(|e| {
            e.verify()
                .map(|()| Event::from(e))
                .map_err(|err| ChatError::Forged(err.to_string()))
        })
        .collect()
}

/// The message among `messages` that answers `trigger_id` (its `reply` marker names it).
pub fn answer_among(messages: Vec<Event>, trigger_id: &str) -> Option<Event> {
    messages
        .into_iter()
        .find(|e| e.thread_refs().reply.as_deref() == Some(trigger_id))
}
