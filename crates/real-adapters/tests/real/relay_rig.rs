//! The tier over a real Nostr relay: the fork's test relay runs in the test's process, the
//! harness connects to it as the agent (`--relay-url`, its key in `BUZZ_PRIVATE_KEY`), and the
//! owner and other people post signed events through the relay's REST side, as a Buzz client
//! does. The agent, the fake LLM and the readings (the observer log, what the model received)
//! are the [`Rig`]'s.
//!
//! Like upstream's, the harness's subscription starts when it starts: [`Rig::live_on_relay`]
//! returns once the harness says it is subscribed, and messages for it are posted after that.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use buzz_acp::relay::Event;
use buzz_acp::testing::{ChatMessage, NostrRelayArgs, agent_messages, post_chat, wait_until};
use buzz_test_relay::{RelayConfig, TestRelay};
use fake_llm::Observation;
use nostr::{Keys, PublicKey, Timestamp};

use crate::rig::{Result, Rig, fail};

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
const SUBSCRIBED: &str = "connected, authenticated and subscribed";
/// How long a harness may take to connect and subscribe.
const CONNECT: Duration = Duration::from_secs(30);
/// How long a running harness may take to answer an owner command (no agent involved).
const PUBLISHED: Duration = Duration::from_secs(30);

/// The relay, the agent's and the people's keys.
pub struct RelaySide {
    pub relay: TestRelay,
    pub agent: Keys,
    pub owner: Keys,
    /// Someone in the channel who is not the owner (their messages are context only).
    pub someone: Keys,
    runtime: tokio::runtime::Runtime,
}

impl RelaySide {
    /// A relay where the agent belongs to one stream channel.
    pub fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| fail(format!("a runtime for the relay: {e}")))?;
        let relay = runtime
            .block_on(TestRelay::start(RelayConfig::default()))
            .map_err(|e| fail(e.to_string()))?;
        let agent = Keys::generate();
        runtime
            .block_on(relay.add_channel(CHANNEL, "general", "stream", &[agent.public_key()]))
            .map_err(|e| fail(e.to_string()))?;
        Ok(RelaySide {
            relay,
            agent,
            owner: Keys::generate(),
            someone: Keys::generate(),
            runtime,
        })
    }

    /// `author` says `text` in the channel, mentioning the agent; `thread` = (root, parent).
    pub fn say(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&Event, &Event)>,
    ) -> Result<Event> {
        self.post(author, text, thread, Some(self.agent.public_key()))
    }

    /// [`RelaySide::someone`] writes `n` replies in `root`'s thread after `parent`, each
    /// answering the one before, that mention nobody: history only, enough of it to push
    /// everything before out of a window. The harness never answers them; posted while it is
    /// stopped, they are history it reads at its next start. The last one.
    pub fn chatter(&self, root: &Event, mut parent: Event, n: usize) -> Result<Event> {
        for i in 0..n {
            let text = format!("chatter {i}: nothing to remember here");
            parent = self.post(&self.someone, &text, Some((root, &parent)), None)?;
        }
        Ok(parent)
    }

    fn post(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&Event, &Event)>,
        mention: Option<PublicKey>,
    ) -> Result<Event> {
        let message = ChatMessage {
            channel: CHANNEL,
            mention,
            text,
            thread: thread.map(|(root, parent)| (root.id.as_str(), parent.id.as_str())),
            at: Timestamp::now(),
        };
        let event = self
            .runtime
            .block_on(post_chat(&self.relay.ws_url(), author, message))
            .map_err(|e| fail(format!("posting {text:.60?}: {e}")))?;
        Ok(Event::from(&event))
    }

    /// Every chat event the agent published, ids and signatures checked.
    pub fn agent_events(&self) -> Result<Vec<Event>> {
        self.runtime
            .block_on(agent_messages(
                &self.relay.ws_url(),
                &self.owner,
                self.agent.public_key(),
            ))
            .map_err(|e| fail(e.to_string()))
    }

    /// The harness's own answer to `event` (an owner command's): an agent message that answers
    /// it and carries no fake-LLM tag.
    pub fn harness_reply_to(&self, event: &Event, within: Duration) -> Result<Event> {
        wait_until(within, || {
            let published = self.agent_events().ok()?;
            published.into_iter().find(|e| {
                e.thread_refs().reply.as_deref() == Some(event.id.as_str())
                    && Observation::parse(&e.content).is_none()
            })
        })
        .ok_or_else(|| fail(format!("the harness never answered {:?}", event.content)))
    }

    /// The harness's notices about `event`: agent messages that quote it (`q` tag), the patched
    /// harness's continuity notices. Read after [`RelaySide::all_published`], the count is
    /// final.
    pub fn notices_about(&self, event: &Event) -> Result<Vec<Event>> {
        Ok(self
            .agent_events()?
            .into_iter()
            .filter(|e| e.tag_values("q").any(|q| q == event.id))
            .collect())
    }

    /// Waits until everything the running harness has published so far is on the relay.
    ///
    /// The harness hands its messages to one publisher that posts them in order, and it may
    /// still hold some when the answer a scenario waited for is already on the relay (notices
    /// follow their turn's answer), while a stopped harness drops what it has not posted yet.
    /// So the owner opens a thread of its own with `!cancel`: the harness answers an owner
    /// command itself, without the agent ("Nothing is running here."), after everything it
    /// queued before it read the command; once that answer is on the relay, so is the rest. The
    /// command touches no session (its thread has none), so the wire and the model see nothing
    /// of it.
    pub fn all_published(&self) -> Result<()> {
        let barrier = self.say(&self.owner, "!cancel", None)?;
        self.harness_reply_to(&barrier, PUBLISHED).map(drop)
    }
}

/// A message, the model's answer to it and what the model received ([`Rig::one_turn`]).
pub struct Answered {
    pub asked: Event,
    pub answer: Event,
    pub seen: Observation,
}

/// A harness running on the relay: stopped with SIGTERM by [`LiveHarness::stop`], killed when
/// dropped.
pub struct LiveHarness {
    child: Child,
    /// Its stderr.
    log: PathBuf,
}

impl LiveHarness {
    /// Asks the harness to stop (SIGTERM, as an operator stops it) and waits for it; a harness
    /// that does not exit 0 is an error that carries the end of its log.
    pub fn stop(mut self) -> Result<()> {
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if !term.is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        let status = self
            .child
            .wait()
            .map_err(|e| fail(format!("waiting for the harness: {e}")))?;
        if status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        Err(fail(format!(
            "the harness exited with {status}; its log ends with:\n{}",
            lines[lines.len().saturating_sub(40)..].join("\n")
        )))
    }
}

impl Drop for LiveHarness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Rig {
    /// Starts `harness` on the relay as the agent and waits until it is subscribed.
    pub fn live_on_relay(
        &self,
        side: &RelaySide,
        harness: &Path,
        extra: &[&str],
    ) -> Result<LiveHarness> {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let log_path = self.s.root.join(format!("harness-relay-{n}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| fail(e.to_string()))?;
        let (url, secret, owner) = (
            side.relay.ws_url(),
            side.agent.secret_key().to_secret_hex(),
            side.owner.public_key().to_hex(),
        );
        let relay = NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner,
        };
        let mut cmd = self
            .s
            .nostr_harness_command(harness, &self.agent.command(), relay, extra);
        // The patched harness's host-wide lease (`one-harness-per-agent`) stays in the scenario.
        cmd.env("BUZZ_ACP_LEASE_DIR", self.s.root.join("leases"));
        cmd.env("NO_COLOR", "1").stdout(Stdio::null()).stderr(log);
        let child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", harness.display())))?;
        let live = LiveHarness {
            child,
            log: log_path.clone(),
        };
        let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
        if wait_until(CONNECT, || read().contains(SUBSCRIBED).then_some(())).is_none() {
            return Err(fail(format!(
                "{} did not subscribe:\n{}",
                harness.display(),
                read()
            )));
        }
        Ok(live)
    }

    /// A message answered by a harness started for it, the way a `--once` run answers what
    /// waits for it: starts `harness` with `flags`, the owner says `text` (in `thread` = (root,
    /// parent)), waits up to `within` for the model's answer and until everything the harness
    /// published is on the relay, stops it (it must exit 0) and checks that no agent process
    /// is left.
    pub fn one_turn(
        &self,
        side: &RelaySide,
        harness: &Path,
        flags: &[&str],
        text: &str,
        thread: Option<(&Event, &Event)>,
        within: Duration,
    ) -> Result<Answered> {
        let live = self.live_on_relay(side, harness, flags)?;
        let asked = side.say(&side.owner, text, thread)?;
        let (answer, seen) = self.relay_reply_to(side, &asked, within)?;
        side.all_published()?;
        live.stop()?;
        self.assert_no_agent_left()?;
        Ok(Answered {
            asked,
            answer,
            seen,
        })
    }

    /// The model's answer to `event` on the relay and what the model received.
    pub fn relay_reply_to(
        &self,
        side: &RelaySide,
        event: &Event,
        within: Duration,
    ) -> Result<(Event, Observation)> {
        wait_until(within, || {
            side.agent_events().ok()?.into_iter().find_map(|reply| {
                let to_event = reply.thread_refs().reply.as_deref() == Some(event.id.as_str());
                let seen = Observation::parse(&reply.content)?;
                to_event.then_some((reply, seen))
            })
        })
        .ok_or_else(|| {
            fail(format!(
                "no answer from the model to {:?} on the relay",
                event.content
            ))
        })
    }
}
