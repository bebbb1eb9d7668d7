//! One scenario's rig: its directories, its own fake LLM, the relay scenario and the agent's
//! throw-away home, with the steps and readings every scenario shares.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Scenario, wait_until};
use fake_llm::Observation;
use real_adapters::adapter::{create_agent_cwd, install_dir};
use real_adapters::llm::Llm;
use real_adapters::procs::{kill_processes_with_home, processes_with_home};
use real_adapters::wire::Wire;
use real_adapters::{Adapter, AgentHome, TierError};

/// A single reply from a real adapter, cold start included.
pub const REPLY: Duration = Duration::from_secs(90);
/// A `--once` run that has to answer one message.
pub const ONCE: Duration = Duration::from_secs(120);
/// The bound issue 11 sets for answering a thread whose session the agent lost.
pub const LOST_SESSION_BOUND: Duration = Duration::from_secs(240);
/// How long the agent's processes may take to go after the harness exited.
const REAP: Duration = Duration::from_secs(10);

pub type Result<T> = std::result::Result<T, TierError>;

pub fn fail(msg: impl Into<String>) -> TierError {
    TierError::Scenario(msg.into())
}

/// One scenario's directories, fake LLM and agent home.
pub struct Rig {
    _dir: tempfile::TempDir,
    pub llm: Llm,
    pub s: Scenario,
    pub agent: AgentHome,
}

impl Rig {
    pub fn new(adapter: Adapter) -> Result<Self> {
        create_agent_cwd()?;
        let dir = tempfile::tempdir().map_err(|source| TierError::Io {
            action: "creating a temp dir",
            path: std::env::temp_dir(),
            source,
        })?;
        let llm = Llm::start(&dir.path().join("llm.jsonl"))?;
        let s = Scenario::new(&dir.path().join("scenario")).map_err(|e| fail(e.to_string()))?;
        let agent = AgentHome::prepare(
            adapter,
            &install_dir(),
            &dir.path().join("agent"),
            &llm.base_url(),
        )?;
        Ok(Self {
            _dir: dir,
            llm,
            s,
            agent,
        })
    }

    pub fn post_top(&mut self, text: &str) -> Result<Event> {
        self.s.post_top(text).map_err(|e| fail(e.to_string()))
    }

    pub fn post_reply(&mut self, root: &Event, parent: &Event, text: &str) -> Result<Event> {
        self.s
            .post_reply(root, parent, text)
            .map_err(|e| fail(e.to_string()))
    }

    pub fn post_reply_as(
        &mut self,
        author: &str,
        root: &Event,
        parent: &Event,
        text: &str,
    ) -> Result<Event> {
        self.s
            .post_reply_as(author, root, parent, text)
            .map_err(|e| fail(e.to_string()))
    }

    /// Replies in `root`'s thread that do not mention the agent: history only, enough of it to
    /// push everything before out of the window.
    pub fn post_chatter(&mut self, root: &Event, mut parent: Event, n: usize) -> Result<Event> {
        for i in 0..n {
            parent = self
                .s
                .post_chatter(
                    root,
                    &parent,
                    &format!("chatter {i}: nothing to remember here"),
                )
                .map_err(|e| fail(e.to_string()))?;
        }
        Ok(parent)
    }

    /// Runs `harness --once` until it exits, killing it after `limit`.
    pub fn run_once(&self, harness: &Path, extra: &[&str], limit: Duration) -> Result<ExitStatus> {
        let mut cmd = self
            .s
            .harness_command(harness, &self.agent.command(), extra);
        cmd.arg("--once")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", harness.display())))?;
        let stderr = child.stderr.take();
        // Drain stderr on a thread so a chatty harness never blocks on a full pipe.
        let log = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = stderr {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            }
            text
        });
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| fail(e.to_string()))? {
                break status;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                self.kill_agents();
                let log = log.join().unwrap_or_default();
                return Err(fail(format!(
                    "{} --once did not exit within {limit:?}; its log ends with:\n{}",
                    harness.display(),
                    tail(&log, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = log.join().unwrap_or_default();
        if !status.success() {
            return Err(fail(format!(
                "{} --once exited with {status}:\n{}",
                harness.display(),
                tail(&log, 40)
            )));
        }
        Ok(status)
    }

    /// Waits for the agent's reply to `event` and returns what its model received.
    /// The model's answer is the agent's reply to `event` that carries the fake LLM's tag (a
    /// harness notice in the same place carries none).
    pub fn reply_to(&self, event: &Event, within: Duration) -> Result<(Event, Observation)> {
        let answer = || {
            self.s.replies().into_iter().find_map(|reply| {
                let to_event = reply.thread_refs().reply.as_deref() == Some(event.id.as_str());
                let seen = Observation::parse(&reply.content)?;
                to_event.then_some((reply, seen))
            })
        };
        wait_until(within, answer).ok_or_else(|| {
            let other: Vec<String> = self
                .s
                .replies()
                .into_iter()
                .filter(|r| r.thread_refs().reply.as_deref() == Some(event.id.as_str()))
                .map(|r| r.content)
                .collect();
            fail(format!(
                "no answer from the model to {:?} (other replies to it: {other:?})",
                event.content
            ))
        })
    }

    /// The harness's own reply to `event` (an owner command's answer): an agent event that
    /// answers it without the fake LLM's tag.
    pub fn harness_reply_to(&self, event: &Event, within: Duration) -> Result<Event> {
        wait_until(within, || {
            self.s.replies().into_iter().find(|r| {
                r.thread_refs().reply.as_deref() == Some(event.id.as_str())
                    && Observation::parse(&r.content).is_none()
            })
        })
        .ok_or_else(|| fail(format!("the harness never answered {:?}", event.content)))
    }

    /// Whether the observer's last pool event is a sleep (no agent spawned since).
    pub fn pool_is_asleep(&self) -> bool {
        let log = std::fs::read_to_string(&self.s.observer_log).unwrap_or_default();
        let last = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|r| r["type"].as_str().map(str::to_owned))
            .rfind(|t| t == "pool_sleep" || t == "agent_spawn");
        last.as_deref() == Some("pool_sleep")
    }

    /// The harness's notices about `event`: agent events that quote it (`q` tag) and are not
    /// its answer (the patched harness's continuity notices).
    pub fn notices_about(&self, event: &Event) -> Vec<Event> {
        self.s
            .replies()
            .into_iter()
            .filter(|e| e.tag_values("q").any(|q| q == event.id))
            .collect()
    }

    /// Everything the harness exchanged with the agent so far (its observer log).
    pub fn wire(&self) -> Result<Wire> {
        Wire::read(&self.s.observer_log)
    }

    /// Methods the harness sent to the agent, in order (from its observer log).
    pub fn methods_sent(&self) -> Vec<String> {
        self.wire().map(|w| w.methods_sent()).unwrap_or_default()
    }

    /// Asserts that no process of this agent's home outlives the harness.
    pub fn assert_no_agent_left(&self) -> Result<()> {
        if wait_until(REAP, || {
            processes_with_home(&self.agent.home)
                .is_empty()
                .then_some(())
        })
        .is_some()
        {
            return Ok(());
        }
        let left = processes_with_home(&self.agent.home);
        self.kill_agents();
        Err(fail(format!(
            "{} processes still running after the harness exited: {left:?}",
            self.agent.adapter
        )))
    }

    /// Kills (by pid) whatever still runs in this agent's home, so a failed scenario leaks
    /// nothing into the next one.
    pub fn kill_agents(&self) {
        kill_processes_with_home(&self.agent.home);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A fact only the model can remember: `<adapter word>-<digits>`.
pub fn fact_for(adapter: Adapter, salt: u32) -> String {
    let word = match adapter {
        Adapter::Codex => "walrus",
        Adapter::Opencode => "heron",
        Adapter::Claude => "marmot",
    };
    format!("{word}-{}", 7300 + salt)
}
