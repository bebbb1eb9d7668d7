//! One scenario's rig: its directories, its own fake LLM, the harness's files and the agent's
//! throw-away home, with the readings every scenario shares. The relay, and what is posted and
//! read there, is [`crate::relay_rig`]'s.

use std::time::Duration;

use buzz_acp::testing::{Scenario, wait_until};
use real_adapters::adapter::{create_agent_cwd, install_dir};
use real_adapters::llm::Llm;
use real_adapters::procs::{kill_processes_with_home, processes_with_home};
use real_adapters::wire::Wire;
use real_adapters::{Adapter, AgentHome, TierError};

/// A single reply from a real adapter, cold start included.
pub const REPLY: Duration = Duration::from_secs(90);
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
    /// The harness's files: its state directory, its observer log (the wire) and its logs.
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
    fn kill_agents(&self) {
        kill_processes_with_home(&self.agent.home);
    }
}

impl Drop for Rig {
    /// A scenario that failed half-way drops its harness (killed, so it cannot stop its agent)
    /// and then its rig: whatever the agent left running goes with it.
    fn drop(&mut self) {
        self.kill_agents();
    }
}

/// The session the last `session/prompt` on `wire` went to.
pub fn last_prompted_session(wire: &Wire) -> Result<String> {
    wire.prompts()
        .last()
        .map(|(_, session, _)| session.clone())
        .ok_or_else(|| fail("no session/prompt on the wire"))
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
