//! The real-adapter tier: codex-acp, opencode and claude-agent-acp, offline against the fake
//! LLM, driven through the real buzz-acp binaries by the file relay.
//!
//! Run with `scripts/real-adapters` (it installs the adapters, builds both harnesses and runs
//! these ignored tests). Every scenario proves what the MODEL received, from the tag the fake
//! LLM puts in each reply (`[fake-llm user_messages=N nonces=…]`):
//!
//! - `*_resumes_after_restart`: a fact told early in a thread, far outside the context window
//!   (`--context-message-limit 3`), reaches the model after a restart on the patched harness;
//!   the baseline's fresh session has lost it (side by side).
//! - `*_resumes_after_idle_pool_sleep`: the same across an idle pool sleep of a running harness
//!   (`--lazy-pool --idle-pool-sleep 1`), baseline side by side.
//! - `*_lost_session_gets_a_fresh_session`: the agent's session storage is deleted between
//!   runs; the patched harness must answer on a fresh session, post a notice in the thread, and
//!   `--once` must exit 0 (within 4 minutes, the bound of issue 11).
//! - `*_continues_hot`: a follow-up on a running harness continues the live session: no
//!   `session/new`, `session/load` or `session/resume` for it.
//!
//! After every harness exit, no process of the agent's throw-away home may be left.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Scenario, wait_until};
use fake_llm::Observation;
use real_adapters::adapter::{create_agent_cwd, install_dir};
use real_adapters::binaries::{baseline_harness, patched_harness};
use real_adapters::llm::Llm;
use real_adapters::procs::{kill_processes_with_home, processes_with_home};
use real_adapters::{Adapter, AgentHome, TierError};

/// A single reply from a real adapter, cold start included.
const REPLY: Duration = Duration::from_secs(90);
/// A `--once` run that has to answer one message.
const ONCE: Duration = Duration::from_secs(120);
/// The bound issue 11 sets for answering a thread whose session the agent lost.
const LOST_SESSION_BOUND: Duration = Duration::from_secs(240);
/// How long the agent's processes may take to go after the harness exited.
const REAP: Duration = Duration::from_secs(10);
/// The context window of every scenario: the root plus the last three replies.
const WINDOW: &[&str] = &["--context-message-limit", "3"];

type Result<T> = std::result::Result<T, TierError>;

fn fail(msg: impl Into<String>) -> TierError {
    TierError::Scenario(msg.into())
}

/// One scenario's directories, fake LLM and agent home.
struct Rig {
    _dir: tempfile::TempDir,
    llm: Llm,
    s: Scenario,
    agent: AgentHome,
}

impl Rig {
    fn new(adapter: Adapter) -> Result<Self> {
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

    fn post_top(&mut self, text: &str) -> Result<Event> {
        self.s.post_top(text).map_err(|e| fail(e.to_string()))
    }

    fn post_reply(&mut self, root: &Event, parent: &Event, text: &str) -> Result<Event> {
        self.s
            .post_reply(root, parent, text)
            .map_err(|e| fail(e.to_string()))
    }

    /// Replies in `root`'s thread that do not mention the agent: history only, enough of it to
    /// push everything before out of the window.
    fn post_chatter(&mut self, root: &Event, mut parent: Event, n: usize) -> Result<Event> {
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
    fn run_once(&self, harness: &Path, extra: &[&str], limit: Duration) -> Result<ExitStatus> {
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
    fn reply_to(&self, event: &Event, within: Duration) -> Result<(Event, Observation)> {
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

    /// Whether the observer's last pool event is a sleep (no agent spawned since).
    fn pool_is_asleep(&self) -> bool {
        let log = std::fs::read_to_string(&self.s.observer_log).unwrap_or_default();
        let last = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|r| r["type"].as_str().map(str::to_owned))
            .rfind(|t| t == "pool_sleep" || t == "agent_spawn");
        last.as_deref() == Some("pool_sleep")
    }

    /// What the harness itself said in the thread: agent events without the fake LLM's tag.
    fn notices(&self) -> Vec<Event> {
        self.s
            .replies()
            .into_iter()
            .filter(|e| Observation::parse(&e.content).is_none())
            .collect()
    }

    /// Methods the harness sent to the agent, in order (from its observer log).
    fn methods_sent(&self) -> Vec<String> {
        self.s
            .observer_records("acp_write")
            .iter()
            .filter_map(|r| r["frame"]["method"].as_str().map(str::to_owned))
            .collect()
    }

    /// Asserts that no process of this agent's home outlives the harness.
    fn assert_no_agent_left(&self) -> Result<()> {
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
    fn kill_agents(&self) {
        kill_processes_with_home(&self.agent.home);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A fact only the model can remember: `<adapter word>-<digits>`.
fn fact_for(adapter: Adapter, salt: u32) -> String {
    let word = match adapter {
        Adapter::Codex => "walrus",
        Adapter::Opencode => "heron",
        Adapter::Claude => "marmot",
    };
    format!("{word}-{}", 7300 + salt)
}

/// Teaches a fact in a thread with `--once` runs, buries it under chatter, restarts the
/// harness for a question, and returns what the model saw when answering it.
fn restart_scenario(adapter: Adapter, harness: &Path, fact: &str) -> Result<Observation> {
    let mut rig = Rig::new(adapter)?;
    let root = rig.post_top("We are planning the storage migration.")?;
    rig.run_once(harness, WINDOW, ONCE)?;
    let (r0, _) = rig.reply_to(&root, REPLY)?;
    let told = rig.post_reply(&root, &r0, &format!("Remember the code word {fact}."))?;
    rig.run_once(harness, WINDOW, ONCE)?;
    let (r1, seen) = rig.reply_to(&told, REPLY)?;
    if !seen.nonces.contains(fact) {
        return Err(fail(format!("the model never received {fact}: {seen:?}")));
    }
    let last = rig.post_chatter(&root, r1, 4)?;
    let question = rig.post_reply(&root, &last, "What was the code word?")?;
    rig.run_once(harness, WINDOW, ONCE)?;
    let (_, seen) = rig.reply_to(&question, REPLY)?;
    rig.assert_no_agent_left()?;
    Ok(seen)
}

fn resumes_after_restart(adapter: Adapter) -> Result<()> {
    let fact = fact_for(adapter, 1);
    let patched = restart_scenario(adapter, &patched_harness()?, &fact)?;
    let baseline = restart_scenario(adapter, &baseline_harness()?, &fact)?;
    assert!(
        patched.nonces.contains(&fact),
        "{adapter}: after a restart the patched harness's model must still receive {fact}: {patched:?}"
    );
    assert!(
        !baseline.nonces.contains(&fact),
        "{adapter}: the baseline's fresh session cannot know {fact} (it is outside the window): {baseline:?}"
    );
    Ok(())
}

/// Teaches a fact to a running harness, lets the pool sleep, asks, and returns what the model
/// saw when answering.
fn idle_sleep_scenario(adapter: Adapter, harness: &Path, fact: &str) -> Result<Observation> {
    let mut rig = Rig::new(adapter)?;
    let mut flags = WINDOW.to_vec();
    flags.extend(["--lazy-pool", "--idle-pool-sleep", "1"]);
    let running = rig
        .s
        .start(harness, &rig.agent.command(), &flags)
        .map_err(|e| fail(e.to_string()))?;
    let root = rig.post_top("We are planning the storage migration.")?;
    let (r0, _) = rig.reply_to(&root, REPLY)?;
    let told = rig.post_reply(&root, &r0, &format!("Remember the code word {fact}."))?;
    let (r1, _) = rig.reply_to(&told, REPLY)?;
    let last = rig.post_chatter(&root, r1, 4)?;
    // The pool must be asleep now: a sleep recorded after the last spawn. (A sleep seen
    // earlier proves nothing: the baseline may sleep right after a long first turn and spawn
    // a fresh agent for the fact, #6378.)
    wait_until(REPLY, || rig.pool_is_asleep().then_some(()))
        .ok_or_else(|| fail(format!("{adapter}: the pool never went to sleep")))?;
    let question = rig.post_reply(&root, &last, "What was the code word?")?;
    let (_, seen) = rig.reply_to(&question, REPLY)?;
    running.stop().map_err(|e| fail(e.to_string()))?;
    rig.assert_no_agent_left()?;
    Ok(seen)
}

fn resumes_after_idle_pool_sleep(adapter: Adapter) -> Result<()> {
    let fact = fact_for(adapter, 2);
    let patched = idle_sleep_scenario(adapter, &patched_harness()?, &fact)?;
    let baseline = idle_sleep_scenario(adapter, &baseline_harness()?, &fact)?;
    assert!(
        patched.nonces.contains(&fact),
        "{adapter}: after an idle pool sleep the patched harness's model must still receive {fact}: {patched:?}"
    );
    assert!(
        !baseline.nonces.contains(&fact),
        "{adapter}: the baseline's session died with the pool: {baseline:?}"
    );
    Ok(())
}

fn lost_session_gets_a_fresh_session(adapter: Adapter) -> Result<()> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, 3);
    let mut rig = Rig::new(adapter)?;
    let root = rig.post_top("We are planning the storage migration.")?;
    rig.run_once(&harness, WINDOW, ONCE)?;
    let (r0, _) = rig.reply_to(&root, REPLY)?;
    let told = rig.post_reply(&root, &r0, &format!("Remember the code word {fact}."))?;
    rig.run_once(&harness, WINDOW, ONCE)?;
    let (r1, _) = rig.reply_to(&told, REPLY)?;
    let sessions_before = rig
        .methods_sent()
        .iter()
        .filter(|m| *m == "session/new")
        .count();

    assert!(
        rig.notices().is_empty(),
        "{adapter}: a notice before anything went wrong"
    );
    let removed = rig.agent.lose_all_sessions()?;
    assert!(removed > 0, "{adapter}: no session storage found to delete");
    let question = rig.post_reply(&root, &r1, "Do you still know the plan?")?;
    let started = Instant::now();
    rig.run_once(&harness, WINDOW, LOST_SESSION_BOUND)?;
    let took = started.elapsed();

    let (_, seen) = rig.reply_to(&question, Duration::ZERO)?;
    let methods = rig.methods_sent();
    let sessions_after = methods.iter().filter(|m| *m == "session/new").count();
    assert!(
        methods
            .iter()
            .any(|m| m == "session/load" || m == "session/resume"),
        "{adapter}: the patched harness never tried to reopen the stored session: {methods:?}"
    );
    assert_eq!(
        sessions_after,
        sessions_before + 1,
        "{adapter}: the question must be answered on one fresh session: {methods:?}"
    );
    assert!(
        seen.user_messages >= 1,
        "{adapter}: the fresh session's model got no user message: {seen:?}"
    );
    let notices = rig.notices();
    assert!(
        !notices.is_empty(),
        "{adapter}: the thread must be told that its earlier context could not be restored"
    );
    rig.assert_no_agent_left()?;
    eprintln!(
        "{adapter}: lost session answered on a fresh session in {took:?}; notice: {:?}",
        notices[0].content
    );
    Ok(())
}

fn continues_hot(adapter: Adapter) -> Result<()> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, 4);
    let mut rig = Rig::new(adapter)?;
    let running = rig
        .s
        .start(&harness, &rig.agent.command(), WINDOW)
        .map_err(|e| fail(e.to_string()))?;
    let root = rig.post_top(&format!("Remember the code word {fact}."))?;
    let (r0, _) = rig.reply_to(&root, REPLY)?;
    let before = rig.methods_sent();
    let requests_before = rig.llm.requests()?.len();
    let follow_up = rig.post_reply(&root, &r0, "And what was the code word?")?;
    let (_, seen) = rig.reply_to(&follow_up, REPLY)?;
    running.stop().map_err(|e| fail(e.to_string()))?;
    let after = rig.methods_sent();
    let for_follow_up = &after[before.len()..];
    assert!(
        for_follow_up.iter().all(|m| !matches!(
            m.as_str(),
            "session/new" | "session/load" | "session/resume" | "initialize"
        )),
        "{adapter}: a hot follow-up must continue the live session: {for_follow_up:?}"
    );
    assert!(
        for_follow_up.iter().any(|m| m == "session/prompt"),
        "{adapter}: {for_follow_up:?}"
    );
    assert!(seen.nonces.contains(&fact), "{adapter}: {seen:?}");
    assert!(rig.llm.requests()?.len() > requests_before);
    rig.assert_no_agent_left()?;
    Ok(())
}

macro_rules! tier {
    ($($name:ident => $scenario:ident($adapter:expr);)*) => {$(
        #[test]
        #[ignore = "real adapters: run scripts/real-adapters"]
        fn $name() -> Result<()> {
            $scenario($adapter)
        }
    )*};
}

tier! {
    codex_resumes_after_restart => resumes_after_restart(Adapter::Codex);
    opencode_resumes_after_restart => resumes_after_restart(Adapter::Opencode);
    claude_resumes_after_restart => resumes_after_restart(Adapter::Claude);
    codex_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Codex);
    opencode_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Opencode);
    claude_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Claude);
    codex_lost_session_gets_a_fresh_session => lost_session_gets_a_fresh_session(Adapter::Codex);
    opencode_lost_session_gets_a_fresh_session => lost_session_gets_a_fresh_session(Adapter::Opencode);
    claude_lost_session_gets_a_fresh_session => lost_session_gets_a_fresh_session(Adapter::Claude);
    codex_continues_hot => continues_hot(Adapter::Codex);
    opencode_continues_hot => continues_hot(Adapter::Opencode);
    claude_continues_hot => continues_hot(Adapter::Claude);
}
