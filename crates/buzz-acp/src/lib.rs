//! buzz-acp: bridges Buzz chat events to coding agents over the Agent Client
//! Protocol.
//!
//! This crate is a clean-room model of upstream buzz-acp's session lifecycle,
//! with the same seams and, where upstream has an analogue, the same names
//! (`docs/UPSTREAM_SEAMS.md` maps them): [`scope`] (which session an event
//! belongs to), [`acp`] (the ACP client), [`pool`] (workers, sessions, one
//! turn), [`context`] (history windows and delivered-id deltas), [`queue`]
//! (one turn in flight per scope), [`config`], [`relay`], [`observer`],
//! [`cursor`] and [`lifecycle`]. [`tokio_main`] runs the [`Harness`] event
//! loop:
//!
//! ```text
//! relay line ─► admission (own events, mention filter, owner controls)
//!            ─► SessionScope::derive ─► EventQueue (or steer a running turn)
//!            ─► dispatch_pending: AgentPool::try_claim ─► run_prompt_task (spawned)
//!            ─► handle_prompt_result: publish reply, return worker, mark handled
//! ```
//!
//! Like upstream `main`, it only ever creates sessions: provider sessions live
//! in worker memory and die with the worker (idle pool sleep, restart, crash).

pub mod acp;
pub mod auth_tag;
pub mod config;
pub mod context;
pub mod cursor;
pub mod event_index;
pub mod eventlog;
pub mod guard;
pub mod lifecycle;
pub mod nostr_relay;
pub mod observer;
pub mod pool;
pub mod queue;
pub mod relay;
pub mod rest;
pub mod scope;
pub mod state_dir;
pub mod testing;
pub mod tls;
pub mod typing;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::{Id as TaskId, JoinError, JoinSet};
use tokio::time::Instant;

use crate::acp::{AcpClient, AcpError};
use crate::config::{Config, MAX_BATCH_ATTEMPTS, MultipleEventHandling};
use crate::context::resolve_window;
use crate::cursor::{Cursor, CursorError};
use crate::lifecycle::{
    CIRCUIT_COOLDOWN, CRASHES_TO_OPEN, SleepInputs, idle_pool_sleep_due, inactivity_expired,
};
use crate::observer::Observer;
use crate::pool::{
    AgentPool, Claim, ControlSignal, OwnedAgent, PromptContext, PromptOutcome, PromptResult,
    TurnInput, run_prompt_task,
};
use crate::queue::{EventQueue, FlushBatch};
use crate::relay::{Event, EventBuilder, FileRelay, Incoming, Relay, RelayError, Reset, Typing};
use crate::scope::SessionScope;
use crate::state_dir::StateDirError;
use crate::typing::TypingClock;

/// Fatal harness errors (the process exits non-zero).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The relay cannot be read or written.
    #[error(transparent)]
    Relay(#[from] RelayError),
    /// The processed-event cursor is unusable.
    #[error(transparent)]
    Cursor(#[from] CursorError),
    /// The observer log cannot be opened.
    #[error("observer log {path}: {source}")]
    Observer {
        /// The configured file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The state directory cannot be used.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// `--once` has work waiting, and no worker can be started: every pool
    /// slot used up its respawn attempts and is backing off.
    #[error(
        "{reason}; every worker slot used up its {CRASHES_TO_OPEN} attempts to start agent \
         {command:?}, giving up (--once)"
    )]
    AgentUnavailable {
        /// The configured agent command.
        command: String,
        /// The last failure (the OS reason for a spawn, e.g. ENOENT).
        reason: String,
    },
}

/// Counters reported when the harness stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Events admitted for a turn.
    pub admitted: usize,
    /// Turns that ended with a published reply.
    pub replies: usize,
    /// Batches dead-lettered after repeated failures.
    pub dead_lettered: usize,
    /// Idle pool sleeps.
    pub pool_sleeps: usize,
}

/// A turn in flight.
#[derive(Debug)]
struct TurnMeta {
    scope: SessionScope,
    slot: usize,
    /// A copy of the batch, to requeue it if the task panics.
    batch: FlushBatch,
    control: mpsc::Sender<ControlSignal>,
}

/// The event loop and everything it owns.
pub struct Harness<R: Relay = FileRelay> {
    config: Config,
    relay: R,
    cursor: Cursor,
    queue: EventQueue,
    pool: AgentPool,
    ctx: Arc<PromptContext>,
    observer: Observer,
    turns: JoinSet<PromptResult>,
    turn_meta: HashMap<TaskId, TurnMeta>,
    in_flight: HashMap<SessionScope, TaskId>,
    spawns: JoinSet<(usize, Result<AcpClient, AcpError>)>,
    /// When the last event was admitted: the idle-pool-sleep and inactivity
    /// clocks run from here (a turn ending does not restart them).
    last_activity: Instant,
    pool_woken: bool,
    /// Notices for owner controls, published by the loop (admission is sync).
    pending_notices: Vec<(SessionScope, Event, String)>,
    /// The last reason a worker could not be started or died.
    last_agent_failure: Option<String>,
    /// An outage (a slot's respawn attempts used up) was reported and no
    /// worker has started since: it is reported once, not per attempt.
    outage_reported: bool,
    /// When each running turn's typing indicator was last said.
    typing: TypingClock,
    stats: RunStats,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Opens the file relay named by `config` and runs the event loop until it
/// stops (upstream's `tokio_main`, which also chooses the lazy or the eager
/// pool).
pub async fn tokio_main(config: Config) -> Result<RunStats, HarnessError> {
    match (&config.relay, &config.agent_keys) {
        (config::RelayEndpoint::Nostr { url }, Some(keys)) => {
            let relay = nostr_relay::NostrRelay::connect(url, keys.clone()).await?;
            Harness::with_relay(config, relay)?.run().await
        }
        _ => Harness::open(config)?.run().await,
    }
}

impl Harness<FileRelay> {
    /// Opens the file relay, the cursor and the observer named by `config`.
    pub fn open(config: Config) -> Result<Self, HarnessError> {
        let relay = match &config.relay {
            config::RelayEndpoint::File(dir) => FileRelay::open(dir)?,
            config::RelayEndpoint::Nostr { url } => {
                return Err(HarnessError::Relay(RelayError::Network {
                    what: format!("opening {url}"),
                    reason: "a Nostr relay is connected with NostrRelay::connect, not opened"
                        .into(),
                }));
            }
        };
        Harness::with_relay(config, relay)
    }
}

impl<R: Relay> Harness<R> {
    /// Builds a harness over any relay.
    pub fn with_relay(config: Config, relay: R) -> Result<Self, HarnessError> {
        state_dir::prepare(&config.state_dir)?;
        let observer = match &config.observer_log {
            Some(path) => Observer::open(path).map_err(|source| HarnessError::Observer {
                path: path.clone(),
                source,
            })?,
            None => Observer::disabled(),
        };
        let cursor = Cursor::load(&config.state_dir, &config.agent_pubkey, relay.identity())?;
        if let Some(version) = cursor.upgraded_from() {
            tracing::info!(
                cursor = %cursor.path().display(),
                version,
                "upgrading the processed-event cursor; it is rewritten in the current format"
            );
        }
        let mut relay = relay;
        relay.resume_from(cursor.position().cloned());
        let pool = AgentPool::from_slots(config.agents, config.model.clone());
        let ctx = Arc::new(PromptContext::from_config(&config, observer.clone()));
        Ok(Harness {
            relay,
            cursor,
            queue: EventQueue::new(),
            pool,
            ctx,
            observer,
            turns: JoinSet::new(),
            turn_meta: HashMap::new(),
            in_flight: HashMap::new(),
            spawns: JoinSet::new(),
            last_activity: Instant::now(),
            pool_woken: false,
            pending_notices: Vec::new(),
            last_agent_failure: None,
            outage_reported: false,
            typing: TypingClock::default(),
            stats: RunStats::default(),
            config,
        })
    }

    /// Runs until `--once` drains the relay, the inactivity bound passes, or
    /// the process is told to stop (SIGINT/SIGTERM).
    pub async fn run(mut self) -> Result<RunStats, HarnessError> {
        if !self.config.lazy_pool {
            for slot in 0..self.pool.size() {
                self.start_spawn(slot);
            }
        }
        let mut tick = tokio::time::interval(self.config.relay_poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = stop_signal();
        loop {
            let drained = self.poll_relay().await?;
            self.dispatch_pending();
            self.announce_typing();
            if self.maintenance().await {
                break;
            }
            if self.config.once && drained && self.is_idle() {
                tracing::info!("relay drained and no turn in flight; exiting (--once)");
                break;
            }
            if self.config.once && self.agents_exhausted() {
                self.shutdown().await?;
                return Err(HarnessError::AgentUnavailable {
                    command: self.config.agent_command.clone(),
                    reason: self
                        .last_agent_failure
                        .clone()
                        .unwrap_or_else(|| "unknown".to_string()),
                });
            }
            tokio::select! {
                Some(joined) = self.turns.join_next_with_id() => self.handle_prompt_result(joined).await?,
                Some(joined) = self.spawns.join_next() => self.handle_spawn(joined),
                _ = tick.tick() => {}
                _ = stop.recv() => {
                    tracing::info!("stop requested");
                    break;
                }
            }
        }
        self.shutdown().await?;
        tracing::info!(?self.stats, "harness stopped");
        Ok(self.stats)
    }

    /// Work is waiting, nothing runs or starts, and every slot has used up
    /// its respawn attempts: nothing will happen before the circuits' long
    /// cooldown.
    fn agents_exhausted(&self) -> bool {
        !self.queue.is_empty()
            && self.in_flight.is_empty()
            && self.spawns.is_empty()
            && self.pool.all_circuits_open()
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.in_flight.is_empty()
            && self.spawns.is_empty()
            && self.cursor.pending_count() == 0
    }

    /// Reads new relay lines and admits them. Returns whether nothing new
    /// arrived.
    async fn poll_relay(&mut self) -> Result<bool, HarnessError> {
        let poll = self.relay.poll().await?;
        if let Some(reset) = poll.reset {
            self.report_relay_reset(reset);
        }
        let drained = poll.lines.is_empty();
        for line in poll.lines {
            self.admit(line);
        }
        if !drained {
            self.save_cursor()?;
        }
        Ok(drained)
    }

    /// Says once, per detection, that the relay log stopped matching what
    /// was read, and how events are told apart from then on.
    fn report_relay_reset(&self, reset: Reset) {
        let reason = reset.divergence.to_string();
        if reset.at_startup {
            tracing::warn!(
                cursor = %self.cursor.path().display(),
                %reason,
                anchored = reset.anchored,
                "the relay log no longer matches the processed-event cursor; \
                 events are matched by id (handled ones are skipped, new ones answered)"
            );
        } else {
            tracing::warn!(
                %reason,
                "the relay log changed under the running harness; re-reading it and \
                 matching events by id"
            );
        }
        self.observer.event(
            "relay_reset",
            json!({
                "divergence": reset.divergence,
                "atStartup": reset.at_startup,
                "anchored": reset.anchored,
            }),
        );
    }

    /// Admission: decides what one relay line asks of the harness.
    fn admit(&mut self, line: Incoming) {
        if line.replayed || self.cursor.handled_before(&line) {
            // Already admitted in this run (a duplicate line, or a line read
            // again after the log changed), or handled by an earlier run.
            return;
        }
        let event = match line.event {
            Ok(event) => event,
            Err(reason) => {
                tracing::warn!(offset = line.offset, %reason, "skipping malformed relay line");
                return;
            }
        };
        let Some(channel) = event.channel_id() else {
            return;
        };
        if event.removes_member(&self.config.agent_pubkey) {
            // The agent left the channel: every session there is abandoned.
            tracing::info!(channel = %channel, "removed from channel; dropping its sessions");
            self.pool.invalidate_channel_sessions(&channel);
            self.observer
                .event("channel_removed", json!({"channel": channel.to_string()}));
            self.cursor.mark_handled(&event.id);
            return;
        }
        let addressed = event.is_message()
            && event.pubkey != self.config.agent_pubkey
            && self
                .config
                .respond_to
                .admits(&event.pubkey, self.config.owner_pubkey.as_deref())
            && (!self.config.require_mention || event.mentions(&self.config.agent_pubkey));
        if !addressed {
            return;
        }
        if let Some(reply) = self.relay.reply_by(&self.config.agent_pubkey, &event.id) {
            // The harness answered it before the cursor could record it (a
            // crash between publishing and saving): never answer twice.
            tracing::info!(event_id = %event.id, reply_id = %reply.id, "already answered; not answering again");
            self.cursor.mark_handled(&event.id);
            return;
        }
        let info = self.relay.channel_info(&channel);
        let original = event
            .edit_target()
            .and_then(|t| self.relay.find(t))
            .cloned();
        let scope = SessionScope::derive(
            self.config.session_policy,
            &channel,
            info.is_dm(),
            &event,
            original.as_ref(),
        );
        self.last_activity = Instant::now();

        if self.is_owner(&event)
            && let Some(control) = OwnerControl::parse(&event.content)
        {
            self.handle_control(control, &scope, &event);
            self.cursor.mark_handled(&event.id);
            return;
        }

        self.stats.admitted += 1;
        tracing::info!(scope = %scope.telemetry_label(), event_id = %event.id, "admitted");
        if self.config.multiple_event_handling == MultipleEventHandling::Steer
            && let Some(meta) = self
                .in_flight
                .get(&scope)
                .and_then(|id| self.turn_meta.get(id))
        {
            // Hand the event to the running turn. Once the channel accepts it
            // the event counts as delivered.
            if meta
                .control
                .try_send(ControlSignal::Steer(vec![event.clone()]))
                .is_ok()
            {
                tracing::info!(scope = %scope.telemetry_label(), event_id = %event.id, "steered into running turn");
                self.cursor.mark_handled(&event.id);
                return;
            }
        }
        self.cursor.track(&event.id);
        self.queue.push(scope, event);
    }

    /// Persists the cursor with the relay's current position.
    fn save_cursor(&mut self) -> Result<(), HarnessError> {
        self.cursor.advance(self.relay.position());
        self.cursor.save()?;
        Ok(())
    }

    fn is_owner(&self, event: &Event) -> bool {
        self.config.owner_pubkey.as_deref() == Some(event.pubkey.as_str())
    }

    fn handle_control(&mut self, control: OwnerControl, scope: &SessionScope, event: &Event) {
        let running = self
            .in_flight
            .get(scope)
            .and_then(|id| self.turn_meta.get(id))
            .map(|m| m.control.clone());
        let notice = match control {
            OwnerControl::Rotate => {
                match running {
                    Some(tx) => {
                        let _ = tx.try_send(ControlSignal::Rotate);
                    }
                    None => self.pool.invalidate_scope_session(scope),
                }
                "Session rotated: the next message here starts a fresh session.".to_string()
            }
            OwnerControl::Cancel => match running {
                Some(tx) => {
                    let _ = tx.try_send(ControlSignal::Cancel);
                    "Cancelling the running turn.".to_string()
                }
                None => "Nothing is running here.".to_string(),
            },
            OwnerControl::Model(model) => {
                self.pool.set_desired_model(Some(model.clone()));
                match running {
                    Some(tx) => {
                        let _ = tx.try_send(ControlSignal::SwitchModel(model.clone()));
                    }
                    None => self.pool.invalidate_scope_session(scope),
                }
                format!("Model set to {model}: the next turn here starts a fresh session.")
            }
        };
        self.observer.event(
            "control_result",
            json!({"scope": scope.telemetry_label(), "eventId": event.id, "notice": notice}),
        );
        self.pending_notices
            .push((scope.clone(), event.clone(), notice));
    }

    fn dispatch_pending(&mut self) {
        let now = Instant::now();
        // Spawn at most one worker per batch that is waiting for one.
        let mut spawning = self.pool.spawning_count();
        let mut waiting = 0;
        for scope in self.queue.ready_scopes() {
            match self.pool.try_claim(&scope, now) {
                Claim::Agent(agent) => {
                    let Some(batch) = self.queue.take_batch(&scope) else {
                        self.pool.return_agent(agent);
                        continue;
                    };
                    self.start_turn(agent, batch);
                }
                Claim::Hold => {}
                Claim::Spawn(slot) => {
                    waiting += 1;
                    if spawning < waiting {
                        self.start_spawn(slot);
                        spawning += 1;
                    }
                }
                Claim::Busy => waiting += 1,
            }
        }
    }

    fn turn_input(&self, batch: &FlushBatch) -> TurnInput {
        let channel = self.relay.channel_info(batch.channel_id());
        let history = self.relay.history(batch.channel_id());
        let window = resolve_window(
            &batch.scope,
            &channel,
            &batch.events,
            &history,
            self.config.context_message_limit,
        );
        TurnInput { channel, window }
    }

    fn start_turn(&mut self, agent: Box<OwnedAgent>, batch: FlushBatch) {
        let input = self.turn_input(&batch);
        let (tx, rx) = mpsc::channel(8);
        let slot = agent.index;
        let scope = batch.scope.clone();
        tracing::info!(slot, scope = %scope.telemetry_label(), events = batch.events.len(), "dispatching turn");
        let handle = self.turns.spawn(run_prompt_task(
            agent,
            batch.clone(),
            Arc::clone(&self.ctx),
            input,
            rx,
        ));
        let id = handle.id();
        self.in_flight.insert(scope.clone(), id);
        self.turn_meta.insert(
            id,
            TurnMeta {
                scope,
                slot,
                batch,
                control: tx,
            },
        );
    }

    /// Keeps a typing indicator up in the thread of every running turn (crate::typing).
    fn announce_typing(&mut self) {
        for id in self
            .typing
            .due(self.turn_meta.keys().copied(), Instant::now())
        {
            let Some(meta) = self.turn_meta.get(&id) else {
                continue;
            };
            let Some(trigger) = meta.batch.last_event() else {
                continue;
            };
            self.relay.typing(&Typing {
                channel: meta.scope.channel_id().clone(),
                root: meta.scope.answer_root(trigger),
                parent: trigger.id.clone(),
            });
        }
    }

    fn start_spawn(&mut self, slot: usize) {
        self.pool.begin_spawn(slot);
        let command = self.config.agent_command.clone();
        let guard = self.config.agent_guard.clone();
        let observer = self.observer.clone();
        self.observer.event("agent_spawn", json!({"slot": slot}));
        self.spawns.spawn(async move {
            let client = AcpClient::spawn(&command, guard.as_deref(), slot, observer).await;
            (slot, client)
        });
    }

    fn handle_spawn(&mut self, joined: Result<(usize, Result<AcpClient, AcpError>), JoinError>) {
        let Ok((slot, result)) = joined else {
            tracing::error!("agent spawn task panicked");
            return;
        };
        let model = self.pool.desired_model().map(str::to_string);
        let failure = result.as_ref().err().map(ToString::to_string);
        let ok = self.pool.finish_spawn(
            slot,
            result.map(|acp| OwnedAgent::new(slot, acp, model)),
            Instant::now(),
        );
        match failure {
            None if ok => {
                self.pool_woken = true;
                if std::mem::take(&mut self.outage_reported) {
                    tracing::info!(slot, "agent started again");
                    self.observer
                        .event("agent_available", json!({"slot": slot}));
                }
            }
            None => {}
            Some(reason) => self.note_agent_failure(slot, reason),
        }
    }

    /// A worker could not be started, or died: say why, and when its slot
    /// has used up its attempts, report the outage once (until a worker
    /// starts again) instead of backing off in silence.
    fn note_agent_failure(&mut self, slot: usize, reason: String) {
        let circuit_open = self.pool.circuit_open(slot);
        self.observer.event(
            "agent_spawn_failed",
            json!({"slot": slot, "error": reason, "circuitOpen": circuit_open}),
        );
        if circuit_open && !self.outage_reported {
            self.outage_reported = true;
            tracing::error!(
                command = %self.config.agent_command,
                error = %reason,
                attempts = CRASHES_TO_OPEN,
                retry_in_secs = CIRCUIT_COOLDOWN.as_secs(),
                "agent cannot be started; its slot backs off before trying again"
            );
            self.observer.event(
                "agent_unavailable",
                json!({
                    "command": self.config.agent_command,
                    "error": reason,
                    "retryInSecs": CIRCUIT_COOLDOWN.as_secs(),
                }),
            );
        } else if self.outage_reported {
            tracing::debug!(slot, error = %reason, "agent spawn failed again");
        } else {
            tracing::warn!(slot, error = %reason, "agent spawn failed; retrying");
        }
        self.last_agent_failure = Some(reason);
    }

    async fn handle_prompt_result(
        &mut self,
        joined: Result<(TaskId, PromptResult), JoinError>,
    ) -> Result<(), HarnessError> {
        let (id, result) = match joined {
            Ok((id, result)) => (id, Ok(result)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(meta) = self.turn_meta.remove(&id) else {
            return Ok(());
        };
        self.in_flight.remove(&meta.scope);
        self.queue.finish(&meta.scope);
        let result = match result {
            Ok(result) => result,
            Err(e) => {
                tracing::error!(slot = meta.slot, error = %e, "turn task failed; requeueing");
                self.pool.mark_dead(meta.slot, Instant::now());
                self.retry_or_dead_letter(meta.batch, "the turn task crashed")
                    .await?;
                return Ok(());
            }
        };
        let PromptResult {
            mut agent,
            batch,
            outcome,
        } = result;
        match outcome {
            PromptOutcome::Replied {
                session_id, text, ..
            } => {
                let slot = agent.index;
                self.pool.return_agent(agent);
                self.stats.replies += 1;
                if let Some(reply) = self.publish_reply(&batch, text.trim()).await? {
                    self.pool
                        .record_published_reply(slot, &batch.scope, &session_id, &reply.id);
                }
                self.mark_batch_handled(&batch)?;
            }
            PromptOutcome::Cancelled | PromptOutcome::Rotated => {
                self.pool.return_agent(agent);
                self.mark_batch_handled(&batch)?;
            }
            PromptOutcome::Requeue { extra, steered } => {
                self.pool.return_agent(agent);
                let mut batch = batch;
                batch.steered |= steered;
                batch.events.extend(extra);
                self.queue.requeue_front(batch);
            }
            PromptOutcome::Failed(e) => {
                tracing::warn!(slot = agent.index, error = %e, "turn failed; the worker stays");
                self.pool.return_agent(agent);
                self.retry_or_dead_letter(batch, &e.to_string()).await?;
            }
            PromptOutcome::AgentDead(e) => {
                tracing::warn!(slot = agent.index, error = %e, "worker unusable; replacing it");
                let slot = agent.index;
                agent.acp.shutdown().await;
                self.pool.mark_dead(slot, Instant::now());
                self.observer
                    .event("agent_dead", json!({"slot": slot, "error": e.to_string()}));
                self.last_agent_failure = Some(e.to_string());
                self.retry_or_dead_letter(batch, &e.to_string()).await?;
            }
        }
        self.flush_notices().await
    }

    async fn retry_or_dead_letter(
        &mut self,
        mut batch: FlushBatch,
        why: &str,
    ) -> Result<(), HarnessError> {
        batch.attempts += 1;
        if batch.attempts < MAX_BATCH_ATTEMPTS {
            self.queue.requeue_front(batch);
            return Ok(());
        }
        self.stats.dead_lettered += 1;
        tracing::error!(scope = %batch.scope.telemetry_label(), why, "dead-lettering batch");
        let notice = format!(
            "I could not process this after {MAX_BATCH_ATTEMPTS} attempts ({why}). Please try again."
        );
        self.publish_reply(&batch, &notice).await?;
        self.mark_batch_handled(&batch)
    }

    fn mark_batch_handled(&mut self, batch: &FlushBatch) -> Result<(), HarnessError> {
        for event in &batch.events {
            self.cursor.mark_handled(&event.id);
        }
        self.save_cursor()
    }

    /// Publishes `content` as a reply in the batch's thread. It answers the
    /// newest trigger and names every other trigger of the batch, so a
    /// restart recognises each of them as answered.
    async fn publish_reply(
        &mut self,
        batch: &FlushBatch,
        content: &str,
    ) -> Result<Option<Event>, HarnessError> {
        let Some(trigger) = batch.last_event() else {
            return Ok(None);
        };
        let others: Vec<&str> = batch
            .events
            .iter()
            .filter(|e| e.id != trigger.id)
            .map(|e| e.id.as_str())
            .collect();
        self.publish_in_thread(&batch.scope, trigger, &others, content)
            .await
    }

    async fn publish_in_thread(
        &mut self,
        scope: &SessionScope,
        trigger: &Event,
        also_answers: &[&str],
        content: &str,
    ) -> Result<Option<Event>, HarnessError> {
        if content.is_empty() {
            tracing::warn!(event_id = %trigger.id, "agent produced no text; nothing published");
            return Ok(None);
        }
        if let Some(existing) = self.relay.reply_by(&self.config.agent_pubkey, &trigger.id) {
            tracing::warn!(event_id = %trigger.id, reply_id = %existing.id, "already answered; not publishing a second reply");
            return Ok(Some(existing.clone()));
        }
        let root = scope.answer_root(trigger);
        // A reply never predates its trigger, whatever the clocks say.
        let created_at = now_unix().max(trigger.created_at + 1);
        let reply = also_answers.iter().fold(
            EventBuilder::message(&self.config.agent_pubkey, scope.channel_id(), content)
                .created_at(created_at)
                .thread(&root, &trigger.id),
            |builder, id| builder.also_answers(id),
        );
        let reply = reply.mention(&trigger.pubkey).build();
        self.relay.publish(&reply).await?;
        Ok(Some(reply))
    }

    async fn flush_notices(&mut self) -> Result<(), HarnessError> {
        for (scope, trigger, notice) in std::mem::take(&mut self.pending_notices) {
            self.publish_in_thread(&scope, &trigger, &[], &notice)
                .await?;
        }
        Ok(())
    }

    /// Respawns, idle pool sleep, inactivity exit. Returns true to exit.
    async fn maintenance(&mut self) -> bool {
        if let Err(e) = self.flush_notices().await {
            tracing::warn!(error = %e, "could not publish a notice");
        }
        let now = Instant::now();
        for slot in self.pool.expire_backoffs(now) {
            if !self.config.lazy_pool {
                self.start_spawn(slot);
            }
        }
        let quiet_for = now.duration_since(self.last_activity);
        let sleep = idle_pool_sleep_due(SleepInputs {
            bound: self.config.idle_pool_sleep,
            woken: self.pool_woken,
            turns_in_flight: self.in_flight.len(),
            queued_events: self.queue.pending_events(),
            spawns_in_flight: self.spawns.len(),
            quiet_for,
        });
        if sleep && let Some(workers) = self.pool.take_all_for_sleep() {
            tracing::info!(
                workers = workers.len(),
                "idle pool sleep bound reached; tearing pool back to lazy state"
            );
            self.observer
                .event("pool_sleep", json!({"workers": workers.len()}));
            for mut worker in workers {
                worker.acp.shutdown().await;
            }
            self.pool_woken = false;
            self.stats.pool_sleeps += 1;
        }
        if inactivity_expired(
            self.config.exit_after_inactivity,
            self.in_flight.len(),
            quiet_for,
        ) && self.queue.is_empty()
        {
            tracing::info!(?quiet_for, "no activity; exiting");
            return true;
        }
        false
    }

    /// Waits briefly for running turns, then stops every worker. Turns that
    /// do not finish stay unhandled in the cursor and run again after restart.
    async fn shutdown(&mut self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while !self.turns.is_empty() {
            match tokio::time::timeout_at(deadline, self.turns.join_next_with_id()).await {
                Ok(Some(joined)) => self.handle_prompt_result(joined).await?,
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(
                        turns = self.turns.len(),
                        "aborting turns still running at shutdown"
                    );
                    self.turns.abort_all();
                    while self.turns.join_next().await.is_some() {}
                    break;
                }
            }
        }
        self.spawns.abort_all();
        while let Some(joined) = self.spawns.join_next().await {
            if let Ok((_, Ok(mut acp))) = joined {
                acp.shutdown().await;
            }
        }
        for mut worker in self.pool.drain_idle() {
            worker.acp.shutdown().await;
        }
        self.flush_notices().await?;
        self.save_cursor()
    }
}

/// How long shutdown waits for running turns.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Owner commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerControl {
    /// `!rotate`: drop the scope's session.
    Rotate,
    /// `!cancel`: stop the running turn.
    Cancel,
    /// `!model ID`: switch model (the scope starts a fresh session).
    Model(String),
}

impl OwnerControl {
    /// Parses an owner message; the command must be the whole message
    /// (mentions of the agent aside).
    pub fn parse(content: &str) -> Option<Self> {
        let words: Vec<&str> = content
            .split_whitespace()
            .filter(|w| !w.starts_with('@') && !w.starts_with("nostr:"))
            .collect();
        match words.as_slice() {
            ["!rotate"] => Some(OwnerControl::Rotate),
            ["!cancel"] => Some(OwnerControl::Cancel),
            ["!model", model] => Some(OwnerControl::Model((*model).to_string())),
            _ => None,
        }
    }
}

/// Yields once when SIGINT or SIGTERM arrives.
fn stop_signal() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate());
            let int = signal(SignalKind::interrupt());
            if let (Ok(mut term), Ok(mut int)) = (term, int) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                let _ = tx.send(()).await;
                return;
            }
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(()).await;
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_controls_parse_whole_messages_only() {
        assert_eq!(OwnerControl::parse("!rotate"), Some(OwnerControl::Rotate));
        assert_eq!(
            OwnerControl::parse("@bot  !cancel "),
            Some(OwnerControl::Cancel)
        );
        assert_eq!(
            OwnerControl::parse("!model test-large"),
            Some(OwnerControl::Model("test-large".into()))
        );
        assert_eq!(OwnerControl::parse("please !rotate now"), None);
        assert_eq!(OwnerControl::parse("!model"), None);
    }
}
