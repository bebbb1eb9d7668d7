//! The state machine: one owner for the session lifecycle of every scope.
//!
//! Per scope it holds a `Phase` (idle, waiting for its resident's worker,
//! running, waiting for a restore retry, settling), what it knows of the scope's receipt, what
//! the next session must be, and the sessions being released. It is synchronous and clock-free:
//! every input that depends on time carries a [`Moment`](crate::Moment), and every decision comes back as data
//! ([`Command`]s for the harness, [`StoreOp`]s for the driver, [`Record`]s of what happened). It
//! performs no I/O and writes no log, so every rule is tested without processes.
//!
//! The life of one turn:
//!
//! ```text
//! placed (placement.rs): the scope's receipt is read first (for a live session: checked, so an
//!   operator's forget is seen); then it runs on the resident's worker, a free worker, a spawn —
//!   or waits
//!   ──► start (turn_start.rs): how the session is reached is decided once (reach.rs) ──► the task
//!   reports what it opened (outcome.rs: `opened`) ──► turn_end (outcome.rs) ──► settled or
//!   released (settlement.rs, release.rs)
//! ```
//!
//! This module holds the scope table, the outbox and the primitives every concept uses; the
//! concepts live one per module, layered (see `tests/layers.rs`), and a scope's phase changes
//! only through the transitions of `phase.rs`.
//!
//! Pending input is not kept here: it waits in the harness's own queue (upstream's), which
//! already keeps each scope's input in order and hands a failed batch back to the front. The
//! lifecycle only decides when and where a scope runs, and how its session is reached.
//!
//! Invariants (pinned by `tests/rules.rs` and the property test `tests/properties.rs`): at most
//! one turn per scope; each resident is disposed exactly once; a session being released is never
//! reopened before its release finished; a receipt write always carries the belief it was
//! decided under.

use std::collections::BTreeMap;

use crate::behaviours::{Behaviour, Behaviours};
use crate::decision::{Command, Notice, NoticeCause, StoreOp};
use crate::gate::{AgentCaps, RestoreMethod};
use crate::phase::{KnownSession, ScopeState};
use crate::reach::Plan;
use crate::receipt_view::Belief;
use crate::retry::RetryPolicy;
use crate::scope::{Input, Scope};
use crate::session_config::SessionConfig;
use crate::telemetry::Record;

/// How the lifecycle behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// The series' behaviours this harness carries (see [`crate::behaviours`]); the settings
    /// of a behaviour that is off are not consulted.
    pub behaviours: Behaviours,
    /// Reopen stored sessions (receipts) instead of always creating new ones.
    pub resume: bool,
    /// Bounded retries of a restore that failed without a definitive answer.
    pub retry: RetryPolicy,
    /// An owner is configured (notices may mention `!rotate`).
    pub owner_configured: bool,
    /// Live sessions kept resident for hot follow-ups (0: upstream routing, no residency). With
    /// [`Behaviour::Residency`].
    pub max_residents: usize,
    /// Durable limits, handoffs and whole-thread replacements. With [`Behaviour::Continuity`].
    pub continuity: crate::retirement::ContinuityConfig,
    /// Mid-turn input is steered into the running turn (`--multiple-event-handling steer`):
    /// resident sessions track it until a turn absorbs it. With [`Behaviour::Residency`].
    pub steer: bool,
}

impl Default for LifecycleConfig {
    /// No behaviour of the series on (the port of block/buzz#6088 alone), with each behaviour's
    /// default settings.
    fn default() -> Self {
        LifecycleConfig {
            behaviours: Behaviours::default(),
            resume: true,
            retry: RetryPolicy::default(),
            owner_configured: false,
            max_residents: 8,
            steer: true,
            continuity: crate::retirement::ContinuityConfig::default(),
        }
    }
}

impl LifecycleConfig {
    /// The default settings with `behaviours` on.
    pub fn with_behaviours(behaviours: Behaviours) -> Self {
        LifecycleConfig {
            behaviours,
            ..LifecycleConfig::default()
        }
    }
}

/// Everything the lifecycle decided since it was last asked.
#[derive(Debug)]
pub struct Outbox<K, I> {
    /// For the harness.
    pub commands: Vec<Command<K, I>>,
    /// For the driver's store worker.
    pub store: Vec<StoreOp<K>>,
    /// What happened.
    pub records: Vec<crate::telemetry::Record>,
}

impl<K, I> Default for Outbox<K, I> {
    fn default() -> Self {
        Outbox {
            commands: Vec::new(),
            store: Vec::new(),
            records: Vec::new(),
        }
    }
}

/// The lifecycle of every scope.
#[derive(Debug)]
pub struct Lifecycle<K, I> {
    pub(crate) config: LifecycleConfig,
    pub(crate) scopes: BTreeMap<K, ScopeState<I>>,
    /// The configuration a new session would get now.
    pub(crate) session: SessionConfig,
    /// Resident sessions (empty unless [`Behaviour::Residency`] is on).
    pub(crate) residents: crate::residents::Residents<K>,
    pub(crate) next_start: u64,
    pub(crate) out: Outbox<K, I>,
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// An empty lifecycle.
    pub fn new(config: LifecycleConfig) -> Self {
        Lifecycle {
            residents: crate::residents::Residents::new(config.max_residents),
            config,
            scopes: BTreeMap::new(),
            session: SessionConfig::default(),
            next_start: 0,
            out: Outbox::default(),
        }
    }

    /// The series' behaviours this lifecycle carries.
    pub fn behaviours(&self) -> Behaviours {
        self.config.behaviours
    }

    /// Whether `behaviour` is on.
    pub(crate) fn has(&self, behaviour: Behaviour) -> bool {
        self.config.behaviours.has(behaviour)
    }

    pub(crate) fn state(&mut self, scope: &K) -> &mut ScopeState<I> {
        self.scopes.entry(scope.clone()).or_default()
    }

    pub(crate) fn forget_if_bare(&mut self, scope: &K) {
        if self.scopes.get(scope).is_some_and(ScopeState::is_bare) {
            self.scopes.remove(scope);
        }
    }

    /// The configuration a new session gets from now on (set at startup, changed by the owner's
    /// model switch).
    pub fn configure_sessions(&mut self, session: SessionConfig) {
        self.session = session;
    }

    /// The configuration a new session would get now.
    pub fn session_config(&self) -> &SessionConfig {
        &self.session
    }

    /// Everything decided since the last call.
    pub fn take_outbox(&mut self) -> Outbox<K, I> {
        std::mem::take(&mut self.out)
    }

    // ----- queries -------------------------------------------------------------------------

    /// Whether a turn of `scope` runs.
    pub fn is_running(&self, scope: &K) -> bool {
        self.scopes.get(scope).and_then(|s| s.running()).is_some()
    }

    /// The plan of `scope`'s running turn.
    pub fn running_plan(&self, scope: &K) -> Option<&Plan> {
        self.scopes
            .get(scope)
            .and_then(|s| s.running())
            .map(|r| &r.plan)
    }

    /// Scopes the lifecycle currently remembers anything about.
    pub fn tracked_scopes(&self) -> usize {
        self.scopes.len()
    }

    /// What the lifecycle believes the store holds for `scope`.
    pub fn belief(&self, scope: &K) -> Option<&Belief> {
        self.scopes.get(scope).map(|s| &s.receipt.belief)
    }

    // ----- helpers shared by the concept modules -------------------------------------------

    pub(crate) fn record(&mut self, record: Record) {
        self.out.records.push(record);
    }

    pub(crate) fn store(&mut self, op: StoreOp<K>) {
        self.out.store.push(op);
    }

    /// A notice about `scope`'s running turn's last input (the message still waiting for its
    /// answer).
    pub(crate) fn notice(&mut self, scope: &K, cause: NoticeCause, text: String) {
        let trigger = self
            .scopes
            .get(scope)
            .and_then(|s| s.running())
            .and_then(|r| r.inputs.last().cloned());
        if let Some(trigger) = trigger {
            self.notice_about(scope, trigger, cause, text);
        }
    }

    pub(crate) fn notice_about(&mut self, scope: &K, trigger: I, cause: NoticeCause, text: String) {
        self.out.commands.push(Command::Notice(Notice {
            scope: scope.clone(),
            trigger,
            cause,
            text,
        }));
    }

    /// What a new session that replaces a lost one is given, in the thread's words.
    pub(crate) fn replacement_gets(&self) -> String {
        if self.has(Behaviour::Continuity) {
            crate::notice::whole_thread(self.config.continuity.whole_thread_budget_bytes)
        } else {
            crate::notice::RECENT_MESSAGES.to_string()
        }
    }

    /// A session of `scope` was opened or reopened under `fingerprint`, with `turns` completed
    /// turns so far.
    pub(crate) fn know(
        &mut self,
        scope: &K,
        session_id: &str,
        fingerprint: u64,
        turns: Option<u32>,
        model: Option<String>,
    ) {
        self.state(scope).known = Some(KnownSession {
            session_id: session_id.to_string(),
            fingerprint,
            turns,
            model,
            refused_model: None,
        });
    }

    /// How the agent lets a stored session be reopened. With the capability gate, only what it
    /// advertised; without it, `session/load` for every receipt, as block/buzz#6088 does.
    pub fn restore_method(&self, caps: Option<AgentCaps>) -> Option<RestoreMethod> {
        if self.has(Behaviour::CapabilityGate) {
            caps.and_then(crate::gate::restore_method)
        } else {
            Some(RestoreMethod::Load)
        }
    }

    /// Whether a released session may be closed with `session/close`: with the capability gate,
    /// when the agent advertised it; without it, never (block/buzz#6088 does not close sessions).
    pub fn close_allowed(&self, caps: Option<AgentCaps>) -> bool {
        self.has(Behaviour::CapabilityGate) && caps.is_some_and(|caps| caps.close)
    }
}
