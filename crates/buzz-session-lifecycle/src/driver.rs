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
use crate::write_queue::{Target, Write};

/// Where telemetry goes: the harness's observer (`kind`, fields).
pub type RecordSink = Box<dyn Fn(&str, Value) + Send>;

/// How long a turn waits for its scope's receipt before it goes on without it, by default.
pub const DEFAULT_READ_WAIT: Duration = Duration::from_secs(10);

/// How long the harness waits for queued receipt writes when it stops.
pub const FLUSH_AT_SHUTDOWN: Duration = Duration::from_secs(5);

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

    /// The owner switched the model in `scope`'s thread (`!model`). New sessions get it. Without
    /// in-place changes the thread's session is abandoned (`live` lists its copies on idle
    /// workers) and other threads' sessions opened under the old model are not continued; with
    /// them every session takes the model at its next turn, and none is abandoned.
    pub fn model_switched(&mut self, scope: &K, model: &str, live: Vec<(usize, String)>) {
        self.set_model(model);
        if self.lifecycle.has(Behaviour::ConfigInPlace) {
            self.lifecycle.model_addressed(scope);
        } else {
            self.abandon(scope, live);
        }
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

    /// See [`Lifecycle::admitted`].
    pub fn admitted(&mut self, scope: &K, input: &I) {
        self.lifecycle.admitted(scope, input);
    }

    /// See [`Lifecycle::turn_end`].
    pub fn turn_end(&mut self, scope: &K, outcome: TurnOutcome) -> AfterTurn<I> {
        self.take_in();
        if let Some(metrics) = &mut self.metrics {
            metrics.turn_ended(scope);
        }
        let now = self.now();
        let after = self.lifecycle.turn_end(scope, outcome, now);
        self.take_out();
        after
    }

    /// See [`Lifecycle::replied`].
    pub fn replied(&mut self, scope: &K, reply_id: &str) {
        self.lifecycle.replied(scope, reply_id);
    }

    /// See [`Lifecycle::settling`].
    pub fn settling(&self) -> Vec<(K, usize)> {
        self.lifecycle.settling()
    }

    /// See [`Lifecycle::settled`].
    pub fn settled(&mut self, scope: &K, delivered: Option<Delivered>) {
        let now = self.now();
        self.lifecycle.settled(scope, delivered, now);
        self.take_out();
    }

    /// See [`Lifecycle::released`].
    pub fn released(&mut self, scope: &K, session_id: &str) {
        self.lifecycle.released(scope, session_id);
    }

    /// See [`Lifecycle::abandon`].
    pub fn abandon(&mut self, scope: &K, live: Vec<(usize, String)>) {
        self.take_in();
        let now = self.now();
        self.lifecycle.abandon(scope, live, now);
        self.take_out();
    }

    /// See [`Lifecycle::abandon_channel`].
    pub fn abandon_channel(&mut self, channel: &str) {
        self.take_in();
        self.lifecycle.abandon_channel(channel);
        self.take_out();
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
                    self.lifecycle.model_switched(&scope, &model, now)
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
                IoEvent::Down { error } => {
                    tracing::warn!(%error, "receipt store unavailable; serving without it until it answers");
                    (self.records)("store_health", json!({"up": false, "error": error}));
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
                        target: Target::Record(record),
                    },
                ),
                StoreOp::Commit { scope, commit } => self.io.write(
                    scope,
                    Write {
                        expect: None,
                        decided: now,
                        target: Target::Turn(commit),
                    },
                ),
                StoreOp::Remove { scope, expect } => self.io.write(
                    scope,
                    Write {
                        expect: Some(expect),
                        decided: now,
                        target: Target::Absent,
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
    /// See [`Lifecycle::cancel_requested`].
    pub fn cancel_requested(&mut self, scope: &K) {
        self.lifecycle.cancel_requested(scope);
    }

    /// See [`Lifecycle::pool_slept`].
    pub fn pool_slept(&mut self) {
        self.lifecycle.pool_slept();
        self.take_out();
    }

    /// See [`Lifecycle::shutdown`].
    pub fn shutdown(&mut self) {
        self.take_in();
        self.lifecycle.shutdown();
        self.take_out();
    }
}
