//! One scenario's rig: its directories, its own fake LLM, the harness's files and the agent's
//! throw-away home, with the readings every scenario shares. The relay, and what is posted and
//! read there, is [`crate::relay_rig`]'s.

use std::sync::{Condvar, Mutex, PoisonError};
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

/// The machine's room for scenarios side by side (`scripts/real-adapters` runs the tier with
/// two test threads). codex-acp and opencode mostly wait (on their own start-up, on the fake
/// LLM, on the harness), so two of their scenarios share a two-core machine: measured on one,
/// codex's seven took 37 s one at a time and 21 s two at a time, opencode's eight 216 s and
/// 140 s. claude-agent-acp's bundled `claude` keeps a core busy per session (its eight took 78 s
/// alone, 80 s two at a time): its scenarios take the whole room.
const ROOM: u32 = 2;

/// The room taken by running scenarios, and a signal when some is freed.
struct Room {
    taken: Mutex<u32>,
    freed: Condvar,
}

static ROOM_TAKEN: Room = Room {
    taken: Mutex::new(0),
    freed: Condvar::new(),
};

/// A scenario's share of [`ROOM`], held for its whole life and given back on drop.
struct RoomShare(u32);

impl RoomShare {
    /// Waits until the adapter's share is free, and takes it.
    fn take(adapter: Adapter) -> Self {
        let want = match adapter {
            Adapter::Claude => ROOM,
            Adapter::Codex | Adapter::Opencode => 1,
        };
        let mut taken = ROOM_TAKEN
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *taken + want > ROOM {
            taken = ROOM_TAKEN
                .freed
                .wait(taken)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *taken += want;
        Self(want)
    }
}

impl Drop for RoomShare {
    fn drop(&mut self) {
        let mut taken = ROOM_TAKEN
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *taken -= self.0;
        ROOM_TAKEN.freed.notify_all();
    }
}

/// One scenario's directories, fake LLM and agent home.
pub struct Rig {
    _dir: tempfile::TempDir,
    pub llm: Llm,
    /// The harness's files: its state directory, its observer log (the wire) and its logs.
    pub s: Scenario,
    pub agent: AgentHome,
    /// Dropped last: the room is given back once everything above is gone.
    _room: RoomShare,
}

impl Rig {
    pub fn new(adapter: Adapter) -> Result<Self> {
        let room = RoomShare::take(adapter);
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
            _room: room,
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
