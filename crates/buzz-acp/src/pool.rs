//! Workers, their sessions, and one turn.
//!
//! * [`SessionState`] — per worker: which provider session serves each scope,
//!   what each session has been shown, turn counts and usage. A plain
//!   synchronous type, testable without a process.
//! * [`OwnedAgent`] — one worker: an [`AcpClient`] plus its `SessionState`.
//! * [`AgentPool`] — the slots. A worker is **moved out** of its slot for a turn
//!   and moved back when the turn ends; while it is out the pool cannot see its
//!   sessions, which is why scope owners, holds and deferred invalidations are
//!   tracked here.
//! * [`run_prompt_task`] — one turn: find or create the scope's session, build
//!   the prompt from the context delta, run it, commit delivery on success.
//!
//! Sessions live only in worker memory. Whatever ends a worker (idle pool sleep,
//! a crash, a restart) ends its sessions, and the next turn of those scopes
//! starts a fresh `session/new` with the whole context window again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    SessionConfigKind, SessionConfigOption, SessionConfigOptionCategory, StopReason,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::acp::{AcpClient, AcpError, NewSessionParams, TurnEnd, TurnLimits, TurnOutput};
use crate::config::{CONFIG_RPC_TIMEOUT, Config, OWNER_HOLD, PermissionMode};
use crate::context::{ContextWindow, PromptInput, conversation_context_delta, format_prompt};
use crate::lifecycle::SlotCircuit;
use crate::observer::Observer;
use crate::queue::FlushBatch;
use crate::relay::{ChannelId, ChannelInfo, Event};
use crate::scope::SessionScope;

/// What a live session has been shown, per scope (named after upstream's
/// type, which predates thread scopes). Created empty with the session;
/// cleared by every invalidation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelDeliveryState {
    /// A legacy agent (no system-prompt capability) already got the standing
    /// context in a user message.
    pub standing_context_sent: bool,
    /// Relay event ids already delivered to this live session, as triggers or
    /// as context.
    pub delivered_event_ids: HashSet<String>,
}

/// How usage is counted for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBaseline {
    /// The harness created the session: usage starts at zero, so the first
    /// cumulative report gives a reliable per-turn delta.
    Zero,
    /// The session existed before (its prior usage is unknown).
    Unknown,
}

/// Usage of one turn, derived from cumulative `usage_update`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnUsage {
    /// Cumulative usage reported by the agent.
    pub cumulative: u64,
    /// This turn's share, when the previous cumulative value is known.
    pub delta: Option<u64>,
}

/// Per-worker session bookkeeping.
#[derive(Debug, Default)]
pub struct SessionState {
    sessions: HashMap<SessionScope, String>,
    deliveries: HashMap<SessionScope, ChannelDeliveryState>,
    turn_counts: HashMap<SessionScope, u32>,
    usage: HashMap<SessionScope, Option<u64>>,
}

impl SessionState {
    /// The live session serving `scope`.
    pub fn session_id(&self, scope: &SessionScope) -> Option<&str> {
        self.sessions.get(scope).map(String::as_str)
    }

    /// Whether `scope` has a live session.
    pub fn has_session(&self, scope: &SessionScope) -> bool {
        self.sessions.contains_key(scope)
    }

    /// Records `session_id` as the live session of `scope`, with a fresh
    /// delivery state and turn count.
    pub fn attach_session(
        &mut self,
        scope: &SessionScope,
        session_id: &str,
        baseline: UsageBaseline,
    ) {
        self.sessions.insert(scope.clone(), session_id.to_string());
        self.deliveries
            .insert(scope.clone(), ChannelDeliveryState::default());
        self.turn_counts.insert(scope.clone(), 0);
        self.usage.insert(
            scope.clone(),
            match baseline {
                UsageBaseline::Zero => Some(0),
                UsageBaseline::Unknown => None,
            },
        );
    }

    /// Forgets every per-scope entry of `scope`; returns the session id it had.
    pub fn invalidate_scope(&mut self, scope: &SessionScope) -> Option<String> {
        self.deliveries.remove(scope);
        self.turn_counts.remove(scope);
        self.usage.remove(scope);
        self.sessions.remove(scope)
    }

    /// Invalidates every scope of `channel`; returns how many had a session.
    pub fn invalidate_channel(&mut self, channel: &ChannelId) -> usize {
        let scopes: Vec<SessionScope> = self
            .sessions
            .keys()
            .chain(self.deliveries.keys())
            .chain(self.turn_counts.keys())
            .filter(|s| s.channel_id() == channel)
            .cloned()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        scopes
            .iter()
            .filter(|s| self.invalidate_scope(s).is_some())
            .count()
    }

    /// Forgets everything (the worker is presumed dead).
    pub fn invalidate_all(&mut self) {
        self.sessions.clear();
        self.deliveries.clear();
        self.turn_counts.clear();
        self.usage.clear();
    }

    /// What the live session of `scope` has been shown.
    pub fn delivery(&self, scope: &SessionScope) -> Option<&ChannelDeliveryState> {
        self.deliveries.get(scope)
    }

    /// Commits what a successful turn delivered. Called only after the agent
    /// reported success.
    pub fn mark_scope_delivery_success(
        &mut self,
        scope: &SessionScope,
        standing_sent: bool,
        ids: impl IntoIterator<Item = String>,
    ) {
        let entry = self.deliveries.entry(scope.clone()).or_default();
        entry.standing_context_sent |= standing_sent;
        entry.delivered_event_ids.extend(ids);
    }

    /// Counts a successful turn; returns the session's turn count.
    pub fn record_turn(&mut self, scope: &SessionScope) -> u32 {
        let n = self.turn_counts.entry(scope.clone()).or_default();
        *n += 1;
        *n
    }

    /// Applies a cumulative usage report to the scope's session.
    pub fn record_usage(&mut self, scope: &SessionScope, cumulative: u64) -> TurnUsage {
        let slot = self.usage.entry(scope.clone()).or_insert(None);
        let delta = slot.map(|prev| cumulative.saturating_sub(prev));
        *slot = Some(cumulative);
        TurnUsage { cumulative, delta }
    }

    /// Number of live sessions.
    pub fn live_count(&self) -> usize {
        self.sessions.len()
    }
}

/// One worker: an agent process and its sessions.
#[derive(Debug)]
pub struct OwnedAgent {
    /// The slot it belongs to.
    pub index: usize,
    /// The ACP connection.
    pub acp: AcpClient,
    /// Its sessions.
    pub state: SessionState,
    /// Model applied after every `session/new` (changed by `!model`).
    pub desired_model: Option<String>,
}

/// What the pool needs to know about a worker. [`OwnedAgent`] is the real
/// one; tests use plain structs, so slot and affinity logic runs without
/// processes.
pub trait PoolWorker {
    /// The slot the worker belongs to.
    fn index(&self) -> usize;
    /// Its session bookkeeping.
    fn state(&self) -> &SessionState;
    /// Its session bookkeeping, mutably.
    fn state_mut(&mut self) -> &mut SessionState;
    /// Sets the model applied to its future sessions.
    fn set_desired_model(&mut self, model: Option<String>);
}

impl PoolWorker for OwnedAgent {
    fn index(&self) -> usize {
        self.index
    }
    fn state(&self) -> &SessionState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SessionState {
        &mut self.state
    }
    fn set_desired_model(&mut self, model: Option<String>) {
        self.desired_model = model;
    }
}

impl OwnedAgent {
    /// A fresh worker around a spawned client.
    pub fn new(index: usize, acp: AcpClient, desired_model: Option<String>) -> Self {
        OwnedAgent {
            index,
            acp,
            state: SessionState::default(),
            desired_model,
        }
    }
}

/// A deferred invalidation for a checked-out worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Invalidation {
    Scope(SessionScope),
    Channel(ChannelId),
}

/// One pool slot.
#[derive(Debug)]
pub enum Slot<W = OwnedAgent> {
    /// No worker (lazy pool, or after a sleep).
    Empty,
    /// A worker is being spawned.
    Spawning,
    /// An idle worker.
    Idle(Box<W>),
    /// The worker is checked out for a turn.
    Busy,
    /// The worker died; the slot may respawn at `until`.
    Backoff {
        /// Earliest respawn.
        until: Instant,
    },
}

/// What [`AgentPool::try_claim`] decided.
#[derive(Debug)]
pub enum Claim<W = OwnedAgent> {
    /// Run the turn on this worker.
    Agent(Box<W>),
    /// The thread's owning worker is busy: wait for it a little.
    Hold,
    /// No idle worker, but slot `n` may spawn one.
    Spawn(usize),
    /// No capacity now.
    Busy,
}

/// The worker slots.
#[derive(Debug)]
pub struct AgentPool<W = OwnedAgent> {
    slots: Vec<Slot<W>>,
    circuits: Vec<SlotCircuit>,
    session_owners: HashMap<SessionScope, usize>,
    held_since: HashMap<SessionScope, Instant>,
    pending_invalidations: HashMap<usize, HashSet<Invalidation>>,
    desired_model: Option<String>,
}

impl<W: PoolWorker> AgentPool<W> {
    /// A pool of `n` empty slots (the lazy pool; the eager pool spawns into
    /// them at once).
    pub fn from_slots(n: usize, desired_model: Option<String>) -> Self {
        AgentPool {
            slots: (0..n).map(|_| Slot::Empty).collect(),
            circuits: vec![SlotCircuit::default(); n],
            session_owners: HashMap::new(),
            held_since: HashMap::new(),
            pending_invalidations: HashMap::new(),
            desired_model,
        }
    }

    /// Number of slots.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// The slot states (for tests and diagnostics).
    pub fn slots(&self) -> &[Slot<W>] {
        &self.slots
    }

    /// Workers checked out for turns.
    pub fn busy_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Busy))
            .count()
    }

    /// Spawns in flight.
    pub fn spawning_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Spawning))
            .count()
    }

    /// Live workers (idle + busy).
    pub fn live_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Idle(_) | Slot::Busy))
            .count()
    }

    /// Whether any idle worker holds a live session for `scope`.
    pub fn has_session_for(&self, scope: &SessionScope) -> bool {
        self.slots.iter().any(|s| match s {
            Slot::Idle(a) => a.state().has_session(scope),
            _ => false,
        })
    }

    /// Picks a worker for `scope`:
    /// 1. its recorded owner, if idle;
    /// 2. a thread whose owner is busy is held for up to [`OWNER_HOLD`], then
    ///    forks onto another worker (the old owner drops its copy on return);
    /// 3. an idle worker that already serves the scope, else any idle worker;
    /// 4. otherwise a slot that may spawn a worker.
    pub fn try_claim(&mut self, scope: &SessionScope, now: Instant) -> Claim<W> {
        let owner = self.session_owners.get(scope).copied();
        if let Some(i) = owner {
            match &self.slots[i] {
                Slot::Idle(_) => return Claim::Agent(self.check_out(i, scope)),
                Slot::Busy if scope.is_thread() => {
                    let since = *self.held_since.entry(scope.clone()).or_insert(now);
                    if now.duration_since(since) < OWNER_HOLD {
                        return Claim::Hold;
                    }
                }
                _ => {}
            }
        }
        let idle: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.slots[i], Slot::Idle(_)))
            .collect();
        let serving = idle.iter().copied().find(|&i| match &self.slots[i] {
            Slot::Idle(a) => a.state().has_session(scope),
            _ => false,
        });
        if let Some(i) = serving.or_else(|| idle.first().copied()) {
            if let Some(old) = owner.filter(|&o| o != i) {
                // Forking away from the recorded owner: its copy of the
                // session is stale from now on.
                self.defer(old, Invalidation::Scope(scope.clone()));
            }
            return Claim::Agent(self.check_out(i, scope));
        }
        if let Some(i) = (0..self.slots.len()).find(|&i| matches!(self.slots[i], Slot::Empty)) {
            return Claim::Spawn(i);
        }
        Claim::Busy
    }

    fn check_out(&mut self, i: usize, scope: &SessionScope) -> Box<W> {
        let Slot::Idle(mut agent) = std::mem::replace(&mut self.slots[i], Slot::Busy) else {
            unreachable!("check_out is only called on idle slots");
        };
        self.apply_deferred(&mut agent);
        self.session_owners.insert(scope.clone(), i);
        self.held_since.remove(scope);
        agent
    }

    fn defer(&mut self, slot: usize, inv: Invalidation) {
        if let Slot::Idle(agent) = &mut self.slots[slot] {
            apply(agent.state_mut(), &inv);
        } else {
            self.pending_invalidations
                .entry(slot)
                .or_default()
                .insert(inv);
        }
    }

    fn apply_deferred(&mut self, agent: &mut W) {
        if let Some(invs) = self.pending_invalidations.remove(&agent.index()) {
            for inv in invs {
                apply(agent.state_mut(), &inv);
            }
        }
    }

    /// Puts a worker back after its turn, applying deferred invalidations.
    pub fn return_agent(&mut self, mut agent: Box<W>) {
        let i = agent.index();
        self.apply_deferred(&mut agent);
        agent.set_desired_model(self.desired_model.clone());
        self.circuits[i].record_success();
        if !matches!(self.slots[i], Slot::Busy) {
            tracing::error!(
                slot = i,
                "BUG: returning a worker into a slot that is not checked out"
            );
        }
        self.slots[i] = Slot::Idle(agent);
    }

    /// Marks slot `i` as spawning.
    pub fn begin_spawn(&mut self, i: usize) {
        self.slots[i] = Slot::Spawning;
    }

    /// A spawn finished: the worker becomes idle (it should carry
    /// [`AgentPool::desired_model`]), or the slot backs off.
    pub fn finish_spawn(&mut self, i: usize, result: Result<W, AcpError>, now: Instant) -> bool {
        match result {
            Ok(worker) => {
                self.slots[i] = Slot::Idle(Box::new(worker));
                true
            }
            Err(_) => {
                self.slots[i] = Slot::Backoff {
                    until: self.circuits[i].record_crash(now),
                };
                false
            }
        }
    }

    /// Whether slot `i`'s circuit is open (its quick respawns are used up).
    pub fn circuit_open(&self, i: usize) -> bool {
        self.circuits.get(i).is_some_and(SlotCircuit::is_open)
    }

    /// Every slot is backing off with its circuit open: no worker can start
    /// before a cooldown ends.
    pub fn all_circuits_open(&self) -> bool {
        self.slots
            .iter()
            .zip(&self.circuits)
            .all(|(slot, circuit)| matches!(slot, Slot::Backoff { .. }) && circuit.is_open())
    }

    /// The worker of slot `i` died during a turn (it was checked out).
    pub fn mark_dead(&mut self, i: usize, now: Instant) {
        self.pending_invalidations.remove(&i);
        self.session_owners.retain(|_, o| *o != i);
        self.slots[i] = Slot::Backoff {
            until: self.circuits[i].record_crash(now),
        };
    }

    /// Slots whose backoff has expired become empty (ready to respawn).
    pub fn expire_backoffs(&mut self, now: Instant) -> Vec<usize> {
        let mut ready = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Slot::Backoff { until } = slot
                && *until <= now
            {
                *slot = Slot::Empty;
                ready.push(i);
            }
        }
        ready
    }

    /// Drops `scope`'s session everywhere: idle workers now, checked-out
    /// workers when they return.
    pub fn invalidate_scope_session(&mut self, scope: &SessionScope) {
        self.invalidate(Invalidation::Scope(scope.clone()));
        self.session_owners.remove(scope);
        self.held_since.remove(scope);
    }

    /// Drops every session of `channel` (the agent left the channel).
    pub fn invalidate_channel_sessions(&mut self, channel: &ChannelId) {
        self.invalidate(Invalidation::Channel(channel.clone()));
        self.session_owners.retain(|s, _| s.channel_id() != channel);
        self.held_since.retain(|s, _| s.channel_id() != channel);
    }

    fn invalidate(&mut self, inv: Invalidation) {
        for i in 0..self.slots.len() {
            match &mut self.slots[i] {
                Slot::Idle(agent) => apply(agent.state_mut(), &inv),
                Slot::Busy => {
                    self.pending_invalidations
                        .entry(i)
                        .or_default()
                        .insert(inv.clone());
                }
                _ => {}
            }
        }
    }

    /// The agent's published reply is part of the session that wrote it: mark
    /// it delivered, so the next turn does not show the agent its own words.
    /// Only if slot `slot` is idle and still serves `scope` with `session_id`.
    pub fn record_published_reply(
        &mut self,
        slot: usize,
        scope: &SessionScope,
        session_id: &str,
        event_id: &str,
    ) {
        if let Some(Slot::Idle(agent)) = self.slots.get_mut(slot)
            && agent.state().session_id(scope) == Some(session_id)
        {
            agent
                .state_mut()
                .mark_scope_delivery_success(scope, false, [event_id.to_string()]);
        }
    }

    /// Changes the model applied to future sessions of every worker.
    pub fn set_desired_model(&mut self, model: Option<String>) {
        self.desired_model = model.clone();
        for slot in &mut self.slots {
            if let Slot::Idle(agent) = slot {
                agent.set_desired_model(model.clone());
            }
        }
    }

    /// The model workers apply to new sessions.
    pub fn desired_model(&self) -> Option<&str> {
        self.desired_model.as_deref()
    }

    /// Tears the pool back to empty slots (idle pool sleep, shutdown): every
    /// idle worker is handed back for shutdown and every session is lost.
    /// Refused while any worker is checked out or spawning.
    pub fn take_all_for_sleep(&mut self) -> Option<Vec<Box<W>>> {
        if self.busy_count() > 0 || self.spawning_count() > 0 {
            return None;
        }
        let mut out = Vec::new();
        for slot in &mut self.slots {
            if let Slot::Idle(agent) = std::mem::replace(slot, Slot::Empty) {
                out.push(agent);
            }
        }
        self.session_owners.clear();
        self.held_since.clear();
        self.pending_invalidations.clear();
        Some(out)
    }

    /// Every idle worker, for shutdown (checked-out ones finish first).
    pub fn drain_idle(&mut self) -> Vec<Box<W>> {
        let mut out = Vec::new();
        for slot in &mut self.slots {
            if matches!(slot, Slot::Idle(_))
                && let Slot::Idle(agent) = std::mem::replace(slot, Slot::Empty)
            {
                out.push(agent);
            }
        }
        out
    }
}

fn apply(state: &mut SessionState, inv: &Invalidation) {
    match inv {
        Invalidation::Scope(scope) => {
            state.invalidate_scope(scope);
        }
        Invalidation::Channel(channel) => {
            state.invalidate_channel(channel);
        }
    }
}

/// Settings every turn shares, built once from the [`Config`].
#[derive(Debug)]
pub struct PromptContext {
    /// Agent working directory.
    pub cwd: std::path::PathBuf,
    /// MCP servers for `session/new`.
    pub mcp_servers: Vec<crate::config::McpServerConfig>,
    /// The system prompt (policy session model appended).
    pub system_prompt: String,
    /// First prompt of every new session.
    pub initial_message: Option<String>,
    /// Turn limits.
    pub limits: TurnLimits,
    /// Proactive rotation bound.
    pub max_turns_per_session: Option<u32>,
    /// Requested permission mode.
    pub permission_mode: PermissionMode,
    /// Agent name for session titles.
    pub session_title: Option<String>,
    /// This agent's pubkey.
    pub agent_pubkey: String,
    /// Observer.
    pub observer: Observer,
}

impl PromptContext {
    /// Builds the shared context from the configuration.
    pub fn from_config(config: &Config, observer: Observer) -> Self {
        PromptContext {
            cwd: config.cwd.clone(),
            mcp_servers: config.mcp_servers.clone(),
            system_prompt: config.system_prompt.clone(),
            initial_message: config.initial_message.clone(),
            limits: TurnLimits {
                idle: config.idle_timeout,
                hard: config.max_turn_duration,
            },
            max_turns_per_session: config.max_turns_per_session,
            permission_mode: config.permission_mode,
            session_title: config.session_title.clone(),
            agent_pubkey: config.agent_pubkey.clone(),
            observer,
        }
    }
}

/// Per-turn input resolved by the event loop at dispatch.
#[derive(Debug, Clone)]
pub struct TurnInput {
    /// Channel metadata.
    pub channel: ChannelInfo,
    /// The history window (None when no history applies).
    pub window: Option<ContextWindow>,
}

/// A control signal sent to a running turn.
#[derive(Debug, Clone)]
pub enum ControlSignal {
    /// Stop the turn and drop its batch.
    Cancel,
    /// Stop the turn, drop its batch, and drop the scope's session.
    Rotate,
    /// Stop the turn, switch model (a fresh session), and re-run the batch.
    SwitchModel(String),
    /// New events for the scope: stop the turn and re-run with them merged.
    Steer(Vec<Event>),
}

/// How a turn ended.
#[derive(Debug)]
pub enum PromptOutcome {
    /// The agent answered.
    Replied {
        /// The session that answered.
        session_id: String,
        /// Its text.
        text: String,
        /// Why it stopped.
        stop_reason: StopReason,
        /// The session was rotated after this turn.
        rotated: bool,
    },
    /// An owner `!cancel` stopped the turn; the batch is dropped.
    Cancelled,
    /// An owner `!rotate` stopped the turn; the batch is dropped.
    Rotated,
    /// Run the batch again (model switch, steer); `extra` joins it.
    Requeue {
        /// Events to merge into the batch.
        extra: Vec<Event>,
        /// The batch is a steer merge.
        steered: bool,
    },
    /// The agent reported an error; the worker is healthy.
    Failed(AcpError),
    /// The worker is unusable (exit, transport failure, timeout, a cancel
    /// that was never answered) and must be replaced.
    AgentDead(AcpError),
}

/// What a turn task hands back to the event loop.
#[derive(Debug)]
pub struct PromptResult {
    /// The worker (always returned, alive or not).
    pub agent: Box<OwnedAgent>,
    /// The batch the turn served.
    pub batch: FlushBatch,
    /// How it ended.
    pub outcome: PromptOutcome,
}

/// What `session/new` plus configuration actually produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSession {
    /// The new session id.
    pub session_id: String,
    /// The model actually applied (None = the agent's default).
    pub model: Option<String>,
    /// The permission mode actually applied (None = the agent's default).
    pub permission_mode: Option<String>,
}

/// Composes the per-session title: "Agent · #channel", with the thread root's
/// prefix for thread scopes. DMs and unnamed channels get no channel suffix.
pub fn compose_session_title(base: &str, scope: &SessionScope, channel: &ChannelInfo) -> String {
    let mut title = base.to_string();
    if !channel.is_dm() && !channel.name.is_empty() && channel.name != "unknown" {
        title.push_str(&format!(" · #{}", channel.name));
    }
    if let Some(root) = scope.root_event_id() {
        title.push_str(&format!(" · thread {}", &root[..8.min(root.len())]));
    }
    title
}

/// The `_meta` of a `session/new`.
pub fn session_meta(
    ctx: &PromptContext,
    scope: &SessionScope,
    channel: &ChannelInfo,
) -> Map<String, Value> {
    let mut meta = Map::new();
    if let Some(base) = &ctx.session_title {
        meta.insert(
            "sessionTitle".into(),
            Value::String(compose_session_title(base, scope, channel)),
        );
    }
    meta
}

/// `session/new`, then the desired model and the permission mode, recording
/// what was actually applied. Timeouts and transport failures while applying
/// configuration are fatal for the worker; an agent that rejects a value keeps
/// its default.
pub async fn create_session_and_apply_model(
    agent: &mut OwnedAgent,
    scope: &SessionScope,
    ctx: &PromptContext,
    input: &TurnInput,
) -> Result<CreatedSession, AcpError> {
    let params = NewSessionParams {
        cwd: ctx.cwd.clone(),
        mcp_servers: ctx.mcp_servers.clone(),
        system_prompt: Some(ctx.system_prompt.clone()),
        meta: session_meta(ctx, scope, &input.channel),
    };
    let new = agent.acp.session_new_full(params).await?;
    let model = match agent.desired_model.clone() {
        Some(desired) => {
            apply_select(
                agent,
                &new.session_id,
                &new.config_options,
                SessionConfigOptionCategory::Model,
                "model",
                &desired,
                ctx,
            )
            .await?
        }
        None => None,
    };
    let permission_mode = match ctx.permission_mode {
        PermissionMode::Default => None,
        mode => {
            apply_select(
                agent,
                &new.session_id,
                &new.config_options,
                SessionConfigOptionCategory::Mode,
                "mode",
                mode.wire(),
                ctx,
            )
            .await?
        }
    };
    agent
        .state
        .attach_session(scope, &new.session_id, crate::pool::UsageBaseline::Zero);
    ctx.observer.event(
        "session_created",
        json!({
            "slot": agent.index,
            "scope": scope.telemetry_label(),
            "sessionId": new.session_id,
            "model": model,
            "permissionMode": permission_mode,
        }),
    );
    tracing::info!(
        slot = agent.index,
        scope = %scope.telemetry_label(),
        session_id = %new.session_id,
        "session/new"
    );
    Ok(CreatedSession {
        session_id: new.session_id,
        model,
        permission_mode,
    })
}

/// Sets a select configuration option when the session offers `value`.
/// Returns the value now in effect (None = the agent default).
async fn apply_select(
    agent: &OwnedAgent,
    session_id: &str,
    options: &[SessionConfigOption],
    category: SessionConfigOptionCategory,
    fallback_id: &str,
    value: &str,
    ctx: &PromptContext,
) -> Result<Option<String>, AcpError> {
    let option = options
        .iter()
        .find(|o| o.category.as_ref() == Some(&category))
        .or_else(|| options.iter().find(|o| o.id.0.as_ref() == fallback_id));
    let Some(option) = option else {
        ctx.observer.event(
            "control_result",
            json!({"type": fallback_id, "status": "unsupported", "value": value}),
        );
        return Ok(None);
    };
    let SessionConfigKind::Select(select) = &option.kind else {
        return Ok(None);
    };
    let offered = serde_json::to_value(&select.options)
        .map(|v| v.to_string().contains(&format!("\"{value}\"")))
        .unwrap_or(false);
    if !offered {
        ctx.observer.event(
            "control_result",
            json!({"type": fallback_id, "status": "unsupported_value", "value": value}),
        );
        return Ok(None);
    }
    if select.current_value.0.as_ref() == value {
        return Ok(Some(value.to_string()));
    }
    match agent
        .acp
        .session_set_config_option(session_id, option.id.0.as_ref(), value, CONFIG_RPC_TIMEOUT)
        .await
    {
        Ok(()) => Ok(Some(value.to_string())),
        Err(e @ AcpError::Agent { .. }) => {
            tracing::warn!(error = %e, option = fallback_id, "agent rejected configuration; keeping its default");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// One turn on a checked-out worker. Always hands the worker back.
pub async fn run_prompt_task(
    mut agent: Box<OwnedAgent>,
    batch: FlushBatch,
    ctx: Arc<PromptContext>,
    input: TurnInput,
    mut control: mpsc::Receiver<ControlSignal>,
) -> PromptResult {
    let outcome = run_turn(&mut agent, &batch, &ctx, &input, &mut control).await;
    PromptResult {
        agent,
        batch,
        outcome,
    }
}

fn classify_failure(e: AcpError) -> PromptOutcome {
    match e {
        AcpError::Agent { .. } | AcpError::Protocol { .. } => PromptOutcome::Failed(e),
        _ => PromptOutcome::AgentDead(e),
    }
}

async fn run_turn(
    agent: &mut OwnedAgent,
    batch: &FlushBatch,
    ctx: &PromptContext,
    input: &TurnInput,
    control: &mut mpsc::Receiver<ControlSignal>,
) -> PromptOutcome {
    let scope = &batch.scope;
    let session_id = match agent.state.session_id(scope) {
        Some(id) => id.to_string(),
        None => match create_session_and_apply_model(agent, scope, ctx, input).await {
            Ok(created) => {
                if let Some(initial) = &ctx.initial_message
                    && let Err(e) =
                        run_initial_message(agent, &created.session_id, initial, ctx).await
                {
                    return classify_failure(e);
                }
                created.session_id
            }
            Err(e) => return classify_failure(e),
        },
    };

    let delivered = agent.state.delivery(scope).cloned().unwrap_or_default();
    let delta = conversation_context_delta(
        input.window.as_ref(),
        &delivered.delivered_event_ids,
        &batch.events,
    );
    let standing = (!agent.acp.info().system_prompt && !delivered.standing_context_sent)
        .then_some(ctx.system_prompt.as_str());
    let text = format_prompt(&PromptInput {
        scope,
        channel: &input.channel,
        window: input.window.as_ref(),
        delta: &delta,
        triggers: &batch.events,
        standing,
        steered: batch.steered,
        agent_pubkey: &ctx.agent_pubkey,
    });
    ctx.observer.event(
        "prompt_context_delivery",
        json!({
            "slot": agent.index,
            "scope": scope.telemetry_label(),
            "sessionId": session_id,
            "promptBytes": text.len(),
            "standingContextIncluded": standing.is_some(),
            "contextEventCount": delta.entries.len(),
            "triggerCount": batch.events.len(),
        }),
    );

    let end = agent
        .acp
        .session_prompt_with_idle_timeout(&session_id, text, ctx.limits, control)
        .await;
    match end {
        Ok(TurnEnd::Completed(output)) => complete_turn(
            agent,
            scope,
            &session_id,
            ctx,
            standing.is_some(),
            delta.pending_ids,
            output,
        ),
        Ok(TurnEnd::Interrupted { signal, drained }) => {
            if let Err(e) = drained {
                return PromptOutcome::AgentDead(e);
            }
            match signal {
                ControlSignal::Cancel => PromptOutcome::Cancelled,
                ControlSignal::Rotate => {
                    agent.state.invalidate_scope(scope);
                    PromptOutcome::Rotated
                }
                ControlSignal::SwitchModel(model) => {
                    agent.desired_model = Some(model);
                    agent.state.invalidate_scope(scope);
                    PromptOutcome::Requeue {
                        extra: Vec::new(),
                        steered: false,
                    }
                }
                ControlSignal::Steer(extra) => PromptOutcome::Requeue {
                    extra,
                    steered: true,
                },
            }
        }
        Err(e @ AcpError::Agent { .. }) => PromptOutcome::Failed(e),
        Err(e) => {
            agent.state.invalidate_all();
            PromptOutcome::AgentDead(e)
        }
    }
}

fn complete_turn(
    agent: &mut OwnedAgent,
    scope: &SessionScope,
    session_id: &str,
    ctx: &PromptContext,
    standing_sent: bool,
    pending_ids: Vec<String>,
    output: TurnOutput,
) -> PromptOutcome {
    let stop_reason = output.stop_reason.unwrap_or(StopReason::EndTurn);
    agent
        .state
        .mark_scope_delivery_success(scope, standing_sent, pending_ids);
    let turns = agent.state.record_turn(scope);
    if let Some(used) = output.usage_used {
        let usage = agent.state.record_usage(scope, used);
        ctx.observer.event(
            "turn_usage",
            json!({
                "sessionId": session_id,
                "cumulative": usage.cumulative,
                "turnDelta": usage.delta,
                "deltaReliable": usage.delta.is_some(),
            }),
        );
    }
    let max_turns_reached = ctx.max_turns_per_session.is_some_and(|max| turns >= max);
    let hit_limit = matches!(
        stop_reason,
        StopReason::MaxTokens | StopReason::MaxTurnRequests
    );
    let rotated = max_turns_reached || hit_limit;
    if rotated {
        tracing::info!(
            scope = %scope.telemetry_label(),
            session_id,
            turns,
            ?stop_reason,
            "rotating session"
        );
        agent.state.invalidate_scope(scope);
    }
    PromptOutcome::Replied {
        session_id: session_id.to_string(),
        text: output.text,
        stop_reason,
        rotated,
    }
}

async fn run_initial_message(
    agent: &OwnedAgent,
    session_id: &str,
    text: &str,
    ctx: &PromptContext,
) -> Result<(), AcpError> {
    // The initial message's own reply is not published; no control signal can
    // reach it (its channel is closed), so it runs to completion or timeout.
    let (_tx, mut rx) = mpsc::channel::<()>(1);
    match agent
        .acp
        .session_prompt_with_idle_timeout(session_id, text.to_string(), ctx.limits, &mut rx)
        .await?
    {
        TurnEnd::Completed(_) | TurnEnd::Interrupted { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ch(n: u8) -> ChannelId {
        ChannelId::parse(&format!("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b{n:02x}")).unwrap()
    }

    fn thread(channel: u8, root: char) -> SessionScope {
        SessionScope::Thread {
            channel_id: ch(channel),
            root_event_id: root.to_string().repeat(64),
        }
    }

    #[test]
    fn invalidate_channel_clears_every_thread_scope() {
        let mut s = SessionState::default();
        for (scope, id) in [
            (thread(1, 'a'), "s1"),
            (thread(1, 'b'), "s2"),
            (thread(1, 'c'), "s3"),
            (thread(2, 'a'), "s4"),
        ] {
            s.attach_session(&scope, id, UsageBaseline::Zero);
        }
        assert_eq!(s.invalidate_channel(&ch(1)), 3);
        assert_eq!(s.live_count(), 1);
        assert_eq!(s.session_id(&thread(2, 'a')), Some("s4"));
    }

    #[test]
    fn delivery_is_committed_only_by_mark_success_and_cleared_by_invalidation() {
        let mut s = SessionState::default();
        let scope = thread(1, 'a');
        s.attach_session(&scope, "s1", UsageBaseline::Zero);
        assert!(s.delivery(&scope).unwrap().delivered_event_ids.is_empty());
        s.mark_scope_delivery_success(&scope, true, ["e1".to_string(), "e2".to_string()]);
        let d = s.delivery(&scope).unwrap();
        assert!(d.standing_context_sent);
        assert_eq!(d.delivered_event_ids.len(), 2);
        s.invalidate_scope(&scope);
        assert!(s.delivery(&scope).is_none());
        assert_eq!(s.session_id(&scope), None);
    }

    #[test]
    fn usage_delta_is_reliable_only_from_a_zero_baseline() {
        let mut s = SessionState::default();
        let fresh = thread(1, 'a');
        let attached = thread(1, 'b');
        s.attach_session(&fresh, "s1", UsageBaseline::Zero);
        s.attach_session(&attached, "s2", UsageBaseline::Unknown);
        assert_eq!(s.record_usage(&fresh, 100).delta, Some(100));
        assert_eq!(s.record_usage(&fresh, 150).delta, Some(50));
        assert_eq!(s.record_usage(&attached, 900).delta, None);
        assert_eq!(s.record_usage(&attached, 950).delta, Some(50));
    }

    #[test]
    fn invalidate_all_forgets_every_session() {
        let mut s = SessionState::default();
        s.attach_session(&thread(1, 'a'), "s1", UsageBaseline::Zero);
        s.record_turn(&thread(1, 'a'));
        s.invalidate_all();
        assert_eq!(s.live_count(), 0);
        assert!(s.delivery(&thread(1, 'a')).is_none());
    }

    #[test]
    fn session_titles_name_channel_and_thread() {
        let stream = ChannelInfo {
            name: "general".into(),
            kind: crate::relay::ChannelKind::Stream,
        };
        let dm = ChannelInfo {
            name: "x".into(),
            kind: crate::relay::ChannelKind::Dm,
        };
        let scope = thread(1, 'a');
        assert_eq!(
            compose_session_title("Dev", &scope, &stream),
            "Dev · #general · thread aaaaaaaa"
        );
        let conv = SessionScope::Conversation { channel_id: ch(1) };
        assert_eq!(compose_session_title("Dev", &conv, &dm), "Dev");
    }

    #[derive(Debug)]
    struct Fake {
        index: usize,
        state: SessionState,
        model: Option<String>,
    }

    impl PoolWorker for Fake {
        fn index(&self) -> usize {
            self.index
        }
        fn state(&self) -> &SessionState {
            &self.state
        }
        fn state_mut(&mut self) -> &mut SessionState {
            &mut self.state
        }
        fn set_desired_model(&mut self, model: Option<String>) {
            self.model = model;
        }
    }

    fn pool_of(n: usize) -> AgentPool<Fake> {
        let mut pool = AgentPool::from_slots(n, None);
        let now = Instant::now();
        for i in 0..n {
            pool.begin_spawn(i);
            assert!(pool.finish_spawn(
                i,
                Ok(Fake {
                    index: i,
                    state: SessionState::default(),
                    model: None
                }),
                now
            ));
        }
        pool
    }

    fn claim(pool: &mut AgentPool<Fake>, scope: &SessionScope, now: Instant) -> Box<Fake> {
        match pool.try_claim(scope, now) {
            Claim::Agent(a) => a,
            other => panic!("expected a worker, got {other:?}"),
        }
    }

    #[test]
    fn thread_returns_to_its_owner_and_waits_for_it_while_busy() {
        let mut pool = pool_of(2);
        let a = thread(1, 'a');
        let now = Instant::now();
        let mut w = claim(&mut pool, &a, now);
        w.state.attach_session(&a, "s1", UsageBaseline::Zero);
        let owner = w.index;
        pool.return_agent(w);
        // Another scope takes the owner; the thread must hold, not fork.
        let other = claim(&mut pool, &thread(1, 'b'), now);
        assert_eq!(other.index, owner, "first idle worker is the owner");
        assert!(matches!(pool.try_claim(&a, now), Claim::Hold));
        assert!(matches!(
            pool.try_claim(&a, now + Duration::from_secs(9)),
            Claim::Hold
        ));
        // After the hold the thread forks onto the other worker: a fresh session.
        let forked = claim(&mut pool, &a, now + OWNER_HOLD);
        assert_ne!(forked.index, owner);
        assert!(!forked.state.has_session(&a));
        // The former owner drops its stale copy when it comes back.
        pool.return_agent(other);
        let former = pool.slots().iter().find_map(|s| match s {
            Slot::Idle(w) if w.index == owner => Some(w),
            _ => None,
        });
        assert!(!former.unwrap().state.has_session(&a));
    }

    #[test]
    fn invalidate_scope_session_targets_one_thread_and_defers_for_busy_workers() {
        let mut pool = pool_of(2);
        let (a, b) = (thread(1, 'a'), thread(1, 'b'));
        let now = Instant::now();
        let mut wa = claim(&mut pool, &a, now);
        wa.state.attach_session(&a, "sa", UsageBaseline::Zero);
        pool.return_agent(wa);
        let mut wb = claim(&mut pool, &b, now);
        wb.state.attach_session(&b, "sb", UsageBaseline::Zero);
        wb.state.attach_session(&a, "stale", UsageBaseline::Zero);
        // wb is checked out: its copy of `a` is dropped when it returns.
        pool.invalidate_scope_session(&a);
        assert!(!pool.has_session_for(&a));
        pool.return_agent(wb);
        assert!(!pool.has_session_for(&a));
        assert!(pool.has_session_for(&b), "sibling thread keeps its session");
    }

    #[test]
    fn sleep_tears_every_slot_back_to_empty_and_loses_sessions() {
        let mut pool = pool_of(2);
        let a = thread(1, 'a');
        let now = Instant::now();
        let mut w = claim(&mut pool, &a, now);
        w.state.attach_session(&a, "s1", UsageBaseline::Zero);
        assert!(
            pool.take_all_for_sleep().is_none(),
            "a busy worker blocks sleep"
        );
        pool.return_agent(w);
        let taken = pool.take_all_for_sleep().unwrap();
        assert_eq!(taken.len(), 2);
        assert!(pool.slots().iter().all(|s| matches!(s, Slot::Empty)));
        assert!(!pool.has_session_for(&a));
        assert!(matches!(pool.try_claim(&a, now), Claim::Spawn(0)));
    }

    #[test]
    fn desired_model_reaches_idle_workers() {
        let mut pool = pool_of(1);
        pool.set_desired_model(Some("big".into()));
        let w = claim(&mut pool, &thread(1, 'a'), Instant::now());
        assert_eq!(w.model.as_deref(), Some("big"));
    }

    #[test]
    fn empty_pool_claims_spawn_then_busy() {
        let mut pool: AgentPool<Fake> = AgentPool::from_slots(2, None);
        let now = Instant::now();
        assert!(matches!(
            pool.try_claim(&thread(1, 'a'), now),
            Claim::Spawn(0)
        ));
        pool.begin_spawn(0);
        assert!(matches!(
            pool.try_claim(&thread(1, 'a'), now),
            Claim::Spawn(1)
        ));
        pool.begin_spawn(1);
        assert!(matches!(pool.try_claim(&thread(1, 'a'), now), Claim::Busy));
        assert_eq!(pool.spawning_count(), 2);
        assert!(
            pool.take_all_for_sleep().is_none(),
            "never sleeps while spawning"
        );
    }

    #[test]
    fn dead_slot_backs_off_then_becomes_empty() {
        let mut pool: AgentPool<Fake> = AgentPool::from_slots(1, None);
        let now = Instant::now();
        pool.begin_spawn(0);
        let ok = pool.finish_spawn(
            0,
            Err(AcpError::Spawn {
                command: "x".into(),
                message: "nope".into(),
            }),
            now,
        );
        assert!(!ok);
        assert!(matches!(pool.slots()[0], Slot::Backoff { .. }));
        assert!(pool.expire_backoffs(now).is_empty());
        assert_eq!(pool.expire_backoffs(now + Duration::from_secs(1)), vec![0]);
        assert!(matches!(pool.slots()[0], Slot::Empty));
    }
}
