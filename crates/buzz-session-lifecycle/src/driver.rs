//! The imperative shell around [`Lifecycle`]: the clock, the store worker, the mailbox and the
//! record sink.
//!
//! The harness's event loop owns one [`Driver`] and calls it at upstream's lifecycle points. A
//! call never waits: the driver takes in the mailbox and the store worker's finished operations,
//! feeds the lifecycle, hands the lifecycle's store operations to the worker, and keeps the
//! commands for the harness. Reads that do not answer within the bound are given up on here.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::behaviours::Behaviour;
use crate::clock::Moment;
use crate::decision::{Command, Notice, StoreOp};
use crate::gate::AgentCaps;
use crate::lifecycle::{Lifecycle, LifecycleConfig};
use crate::mailbox::{Mailbox, Report};
use crate::outcome::{AfterTurn, Delivered, TurnOutcome};
use crate::scope::{Input, Scope};
use crate::session_config::SessionConfig;
use crate::store_io::{IoEvent, Opener, StoreIo};
use crate::telemetry::{Level, Record};
use crate::write_queue::{ReceiptChange, Write};

/// Where telemetry goes: the harness's observer (`kind`, fields).
pub type RecordSink = Box<dyn Fn(&str, Value) + Send>;

/// How long a turn waits for its scope's receipt before it goes on without it, by default.
pub const DEFAULT_READ_WAIT: Duration = Duration::from_secs(10);

/// How long the harness waits for queued receipt writes when it stops.
pub const FLUSH_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// Something the harness tells the driver, at upstream's lifecycle points (see
/// [`Driver::handle`]; the methods named after each variant are shorthands for it).
#[derive(Debug)]
pub enum HarnessInput<K, I> {
    /// A message for `scope` was admitted to the harness's queue ([`Lifecycle::admitted`]).
    Admitted {
        /// The scope.
        scope: K,
        /// The message.
        input: I,
    },
    /// `scope`'s turn task ended ([`Lifecycle::turn_end`]); answered with
    /// [`Handled::AfterTurn`].
    TurnEnded {
        /// The scope.
        scope: K,
        /// How it ended.
        outcome: TurnOutcome,
    },
    /// The turn's reply was published as `reply_id` ([`Lifecycle::replied`]).
    Replied {
        /// The scope.
        scope: K,
        /// The reply's event id.
        reply_id: String,
    },
    /// A settling turn's delivery ledger, read from its idle worker ([`Lifecycle::settled`]).
    Settled {
        /// The scope.
        scope: K,
        /// What the session was shown, if the worker still knew.
        delivered: Option<Delivered>,
    },
    /// A release the lifecycle asked for is done ([`Lifecycle::released`]).
    Released {
        /// The scope.
        scope: K,
        /// The released session.
        session_id: String,
    },
    /// The owner's `!rotate` ([`Lifecycle::abandon`]); `live`: the scope's sessions idle workers
    /// hold (slot, session id).
    Abandoned {
        /// The scope.
        scope: K,
        /// Its sessions on idle workers.
        live: Vec<(usize, String)>,
    },
    /// The agent was removed from `channel` ([`Lifecycle::abandon_channel`]).
    ChannelRemoved {
        /// The channel.
        channel: String,
    },
    /// The owner switched the model in `scope`'s thread (`!model`). New sessions get it. Without
    /// in-place changes the thread's session is abandoned (`live` lists its copies on idle
    /// workers) and other threads' sessions opened under the old model are not continued; with
    /// them every session takes the model at its next turn, and none is abandoned.
    OwnerSwitchedModel {
        /// The thread where the owner asked.
        scope: K,
        /// The model.
        model: String,
        /// The scope's sessions on idle workers.
        live: Vec<(usize, String)>,
    },
    /// The owner asked to cancel `scope`'s running turn (`Lifecycle::cancel_requested`).
    CancelRequested {
        /// The scope.
        scope: K,
    },
    /// The lazy pool went to sleep: its workers and their sessions are gone.
    PoolSlept,
    /// The harness is stopping.
    Shutdown,
}

/// What [`Driver::handle`] answers.
#[derive(Debug)]
pub enum Handled<I> {
    /// The input was taken in; what it caused comes out of the driver's outputs.
    Done,
    /// What the harness does with the ended turn's input.
    AfterTurn(AfterTurn<I>),
}

/// The lifecycle, driven from the harness's event loop.
pub struct Driver<K, I> {
    pub(crate) lifecycle: Lifecycle<K, I>,
    io: StoreIo<K>,
    mailbox: Mailbox<K>,
    records: RecordSink,
    origin: Instant,
    read_wait: Duration,
    releases: Vec<Command<K, I>>,
    notices: Vec<Notice<K, I>>,
    fixed: Vec<String>,
    /// What the operator's metrics are told (with [`Behaviour::Metrics`]).
    metrics: Option<crate::telemetry_metrics::Metrics<K>>,
}

impl<K: std::fmt::Debug, I: std::fmt::Debug> std::fmt::Debug for Driver<K, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("lifecycle", &self.lifecycle)
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl<K: Scope + Send + Sync + 'static, I: Input> Driver<K, I> {
    /// A driver whose store is opened by `opener` (in the background), writing telemetry to
    /// `records`. A turn waits at most `read_wait` for its scope's receipt. Must be called inside
    /// a tokio runtime.
    pub fn new(
        config: LifecycleConfig,
        opener: Opener,
        read_wait: Duration,
        records: RecordSink,
    ) -> Self {
        let origin = Instant::now();
        let metrics = config
            .behaviours
            .has(Behaviour::Metrics)
            .then(crate::telemetry_metrics::Metrics::default);
        Driver {
            lifecycle: Lifecycle::new(config),
            io: StoreIo::new(opener, origin),
            mailbox: Mailbox::default(),
            records,
            origin,
            read_wait,
            releases: Vec::new(),
            notices: Vec::new(),
            fixed: Vec::new(),
            metrics,
        }
    }

    /// Now, on the lifecycle's clock (tokio's, so tests can pause it).
    pub fn now(&self) -> Moment {
        Moment::from_elapsed(Instant::now().duration_since(self.origin))
    }

    /// The configuration a new session gets: `fixed` is everything set at `session/new` that
    /// does not change at runtime (cwd, MCP servers); the model and permission mode are the
    /// requested ones.
    pub fn configure_sessions(
        &mut self,
        fixed: &[&str],
        model: Option<&str>,
        permission_mode: Option<&str>,
    ) {
        self.fixed = fixed.iter().map(|s| s.to_string()).collect();
        let behaviours = self.lifecycle.behaviours();
        let session = SessionConfig::new(behaviours, fixed, model, permission_mode);
        self.lifecycle.configure_sessions(session);
    }

    /// The owner switched the model in `scope`'s thread (`!model`): see
    /// [`HarnessInput::OwnerSwitchedModel`].
    pub fn model_switched(&mut self, scope: &K, model: &str, live: Vec<(usize, String)>) {
        self.handle(HarnessInput::OwnerSwitchedModel {
            scope: scope.clone(),
            model: model.to_string(),
            live,
        });
    }

    fn set_model(&mut self, model: &str) {
        let fixed: Vec<&str> = self.fixed.iter().map(String::as_str).collect();
        let mode = self
            .lifecycle
            .session_config()
            .requested_permission_mode
            .clone();
        let behaviours = self.lifecycle.behaviours();
        let session = SessionConfig::new(behaviours, &fixed, Some(model), mode.as_deref());
        self.lifecycle.configure_sessions(session);
    }

    /// Whether the receipt store is known to be down (its last operation failed).
    pub(crate) fn store_down(&self) -> bool {
        self.io.is_down()
    }

    /// Where turn tasks report.
    pub(crate) fn mailbox(&self) -> &Mailbox<K> {
        &self.mailbox
    }

    /// The lifecycle, for queries.
    pub fn lifecycle(&self) -> &Lifecycle<K, I> {
        &self.lifecycle
    }

    /// See [`Lifecycle::close_allowed`].
    pub fn close_allowed(&self, caps: Option<AgentCaps>) -> bool {
        self.lifecycle.close_allowed(caps)
    }

    // ----- inputs from the harness ---------------------------------------------------------

    /// Feeds one input from the harness to the lifecycle. Every input follows one rule: first
    /// take in what arrived meanwhile (turn tasks' reports, finished store operations, reads past
    /// their deadline), then apply the input at the lifecycle's current moment, then hand out what
    /// the lifecycle decided (store operations to the worker, records to the sink, releases and
    /// notices for the harness to take). Nothing here waits.
    pub fn handle(&mut self, input: HarnessInput<K, I>) -> Handled<I> {
        self.take_in();
        let now = self.now();
        let handled = match input {
            HarnessInput::Admitted { scope, input } => {
                self.lifecycle.admitted(&scope, &input);
                Handled::Done
            }
            HarnessInput::TurnEnded { scope, outcome } => {
                if let Some(metrics) = &mut self.metrics {
                    metrics.turn_ended(&scope);
                }
                Handled::AfterTurn(self.lifecycle.turn_end(&scope, outcome, now))
            }
            HarnessInput::Replied { scope, reply_id } => {
                self.lifecycle.replied(&scope, &reply_id);
                Handled::Done
            }
            HarnessInput::Settled { scope, delivered } => {
                self.lifecycle.settled(&scope, delivered, now);
                Handled::Done
            }
            HarnessInput::Released { scope, session_id } => {
                self.lifecycle.released(&scope, &session_id);
                Handled::Done
            }
            HarnessInput::Abandoned { scope, live } => {
                self.lifecycle.abandon(&scope, live, now);
                Handled::Done
            }
            HarnessInput::ChannelRemoved { channel } => {
                self.lifecycle.abandon_channel(&channel);
                Handled::Done
            }
            HarnessInput::OwnerSwitchedModel { scope, model, live } => {
                self.set_model(&model);
                if self.lifecycle.has(Behaviour::ConfigInPlace) {
                    self.lifecycle.model_addressed(&scope);
                } else {
                    self.lifecycle.abandon(&scope, live, now);
                }
                Handled::Done
            }
            HarnessInput::CancelRequested { scope } => {
                self.lifecycle.cancel_requested(&scope);
                Handled::Done
            }
            HarnessInput::PoolSlept => {
                self.lifecycle.pool_slept();
                Handled::Done
            }
            HarnessInput::Shutdown => {
                self.lifecycle.shutdown();
                Handled::Done
            }
        };
        self.take_out();
        handled
    }

    /// See [`HarnessInput::Admitted`].
    pub fn admitted(&mut self, scope: &K, input: &I) {
        self.handle(HarnessInput::Admitted {
            scope: scope.clone(),
            input: input.clone(),
        });
    }

    /// See [`HarnessInput::TurnEnded`].
    pub fn turn_end(&mut self, scope: &K, outcome: TurnOutcome) -> AfterTurn<I> {
        let handled = self.handle(HarnessInput::TurnEnded {
            scope: scope.clone(),
            outcome,
        });
        match handled {
            Handled::AfterTurn(after) => after,
            // `handle` answers a turn's end with `AfterTurn`; nothing else reaches here.
            Handled::Done => AfterTurn::default(),
        }
    }

    /// See [`HarnessInput::Replied`].
    pub fn replied(&mut self, scope: &K, reply_id: &str) {
        self.handle(HarnessInput::Replied {
            scope: scope.clone(),
            reply_id: reply_id.to_string(),
        });
    }

    /// See [`Lifecycle::settling`].
    pub fn settling(&self) -> Vec<(K, usize)> {
        self.lifecycle.settling()
    }

    /// See [`HarnessInput::Settled`].
    pub fn settled(&mut self, scope: &K, delivered: Option<Delivered>) {
        self.handle(HarnessInput::Settled {
            scope: scope.clone(),
            delivered,
        });
    }

    /// See [`HarnessInput::Released`].
    pub fn released(&mut self, scope: &K, session_id: &str) {
        self.handle(HarnessInput::Released {
            scope: scope.clone(),
            session_id: session_id.to_string(),
        });
    }

    /// See [`HarnessInput::Abandoned`].
    pub fn abandon(&mut self, scope: &K, live: Vec<(usize, String)>) {
        self.handle(HarnessInput::Abandoned {
            scope: scope.clone(),
            live,
        });
    }

    /// See [`HarnessInput::ChannelRemoved`].
    pub fn abandon_channel(&mut self, channel: &str) {
        self.handle(HarnessInput::ChannelRemoved {
            channel: channel.to_string(),
        });
    }

    // ----- outputs for the harness ---------------------------------------------------------

    /// Releases to execute now (see [`Command::Release`]), after taking in everything pending.
    pub fn take_releases(&mut self) -> Vec<Command<K, I>> {
        self.take_in();
        std::mem::take(&mut self.releases)
    }

    /// Hands back a release that cannot run yet (its worker is busy): it comes out of the next
    /// [`Driver::take_releases`] again.
    pub fn defer_release(&mut self, release: Command<K, I>) {
        self.releases.push(release);
    }

    /// Notices to post, in order (after taking in everything pending).
    pub fn take_notices(&mut self) -> Vec<Notice<K, I>> {
        self.take_in();
        std::mem::take(&mut self.notices)
    }

    // ----- the store worker ----------------------------------------------------------------

    /// Waits until a store operation finishes and takes it in (the event loop `select!`s on
    /// this; it never resolves while nothing is in flight).
    pub async fn store_progress(&mut self) {
        let events = self.io.next().await;
        self.apply_io(events);
        self.take_out();
    }

    /// Store operations running on blocking threads now (see [`StoreIo::in_flight`]). For tests:
    /// the harness never waits for the store, it `select!`s on [`Driver::store_progress`].
    pub fn store_in_flight(&self) -> usize {
        self.io.in_flight()
    }

    /// Waits up to [`FLUSH_AT_SHUTDOWN`] for queued receipt writes (when the harness stops), and
    /// says how many were lost.
    pub async fn flush(&mut self) {
        self.take_in();
        let lost = self.io.flush(FLUSH_AT_SHUTDOWN).await;
        if lost > 0 {
            tracing::warn!(
                unwritten = lost,
                "stopping with receipt writes the store did not take; those threads resume from their previous receipt"
            );
        }
    }

    /// Takes in the mailbox, the store worker's results and expired reads.
    pub(crate) fn take_in(&mut self) {
        let now = self.now();
        for (scope, report) in self.mailbox.drain() {
            if let Some(metrics) = &mut self.metrics {
                metrics.report(&scope, &report, self.lifecycle.running_plan(&scope));
            }
            match report {
                Report::Opened(opened) => self.lifecycle.opened(&scope, opened, now),
                Report::Window(ids) => self.lifecycle.window(&scope, ids),
                Report::Stale => self.lifecycle.plan_stale(&scope),
                Report::Undecided { method, detail } => {
                    self.lifecycle.restore_undecided(&scope, method, detail)
                }
                Report::ModelSwitched { model } => {
                    self.lifecycle.model_switched_in_place(&scope, &model, now)
                }
                Report::ModelRefused {
                    model,
                    detail,
                    offered,
                } => self
                    .lifecycle
                    .model_refused(&scope, &model, &detail, offered, now),
                Report::HandoffTaken {
                    from_session_id,
                    text,
                } => self
                    .lifecycle
                    .handoff_taken(&scope, &from_session_id, &text, now),
                Report::HandoffUnavailable {
                    from_session_id,
                    detail,
                } => self
                    .lifecycle
                    .handoff_unavailable(&scope, &from_session_id, &detail),
            }
        }
        let events = self.io.poll();
        self.apply_io(events);
        if let Some(bound) = now.0.checked_sub(self.read_wait.as_millis() as u64) {
            for (scope, since) in self.lifecycle.reads_started_by(Moment(bound)) {
                self.lifecycle.read_done(&scope, Err(now.since(since)));
            }
        }
        self.take_out();
    }

    fn apply_io(&mut self, events: Vec<IoEvent<K>>) {
        let now = self.now();
        for event in events {
            if let Some(metrics) = &mut self.metrics {
                metrics.store(&event);
            }
            match event {
                IoEvent::Read(scope, Ok(record)) => self.lifecycle.read_done(&scope, Ok(record)),
                IoEvent::Read(scope, Err(e)) => {
                    tracing::debug!(scope = %scope.label(), error = %e, "receipt read failed");
                    let since = self.lifecycle.read_started(&scope).unwrap_or(now);
                    self.lifecycle.read_done(&scope, Err(now.since(since)));
                }
                IoEvent::Conflict { scope, op, stored } => {
                    self.lifecycle.conflict(&scope, op, stored);
                }
                IoEvent::Forgotten(scope) => self.lifecycle.forgotten(&scope),
                IoEvent::Down {
                    error,
                    refusal: None,
                } => {
                    tracing::warn!(%error, "receipt store unavailable; serving without it until it answers");
                    (self.records)("store_health", json!({"up": false, "error": error}));
                }
                IoEvent::Down {
                    error,
                    refusal: Some(reason),
                } => {
                    // Not an outage: waiting will not fix it. Threads are answered, but a thread
                    // whose session is not live loses it until an operator fixes the store.
                    tracing::error!(
                        %error,
                        refusal = reason.code(),
                        "receipt store refuses this harness: {reason}; serving without receipts until its configuration is fixed"
                    );
                    (self.records)(
                        "store_health",
                        json!({"up": false, "error": error, "refusal": reason.code()}),
                    );
                }
                IoEvent::Up { location } => {
                    tracing::info!(%location, "receipt store available");
                    (self.records)("store_health", json!({"up": true}));
                }
                IoEvent::Finished(operation) => {
                    tracing::trace!(?operation, "receipt store operation");
                }
            }
        }
    }

    /// Sorts what the lifecycle decided: store operations to the worker, records to the sink
    /// and the log, commands to the harness.
    pub(crate) fn take_out(&mut self) {
        let now = self.now();
        let out = self.lifecycle.take_outbox();
        for op in out.store {
            match op {
                StoreOp::Read { scope } => self.io.read(scope),
                StoreOp::Put {
                    scope,
                    record,
                    expect,
                } => self.io.write(
                    scope,
                    Write {
                        expect: Some(expect),
                        decided: now,
                        change: ReceiptChange::Put(record),
                    },
                ),
                StoreOp::Commit { scope, commit } => self.io.write(
                    scope,
                    Write {
                        expect: None,
                        decided: now,
                        change: ReceiptChange::Commit(commit),
                    },
                ),
                StoreOp::Remove { scope, expect } => self.io.write(
                    scope,
                    Write {
                        expect: Some(expect),
                        decided: now,
                        change: ReceiptChange::Remove,
                    },
                ),
                StoreOp::RemoveChannel { channel } => self.io.remove_channel(channel, now),
            }
        }
        for record in out.records {
            self.emit(&record);
        }
        if let Some(metrics) = &mut self.metrics
            && self.lifecycle.has(Behaviour::Residency)
        {
            metrics.residents(self.lifecycle.residents());
        }
        for command in out.commands {
            match command {
                Command::Notice(notice) => {
                    if let Some(metrics) = &mut self.metrics {
                        metrics.notice(notice.cause);
                    }
                    self.notices.push(notice);
                }
                release @ Command::Release { .. } => self.releases.push(release),
            }
        }
    }

    fn emit(&mut self, record: &Record) {
        if let Some(metrics) = &mut self.metrics {
            metrics.record(record);
        }
        let (kind, fields) = record.observer_event();
        match record.level() {
            Level::Debug => tracing::debug!(kind = %kind, %fields, "session lifecycle"),
            Level::Info => tracing::info!(kind = %kind, %fields, "session lifecycle"),
            Level::Warn => tracing::warn!(kind = %kind, %fields, "session lifecycle"),
        }
        (self.records)(&kind, fields);
    }
}

/// Resident sessions (the hooks of patch `resident-background-controllers`; with residency off
/// there are none, and these change nothing).
impl<K: Scope + Send + Sync + 'static, I: Input> Driver<K, I> {
    /// See [`HarnessInput::CancelRequested`].
    pub fn cancel_requested(&mut self, scope: &K) {
        self.handle(HarnessInput::CancelRequested {
            scope: scope.clone(),
        });
    }

    /// See [`HarnessInput::PoolSlept`].
    pub fn pool_slept(&mut self) {
        self.handle(HarnessInput::PoolSlept);
    }

    /// See [`HarnessInput::Shutdown`].
    pub fn shutdown(&mut self) {
        self.handle(HarnessInput::Shutdown);
    }
}
