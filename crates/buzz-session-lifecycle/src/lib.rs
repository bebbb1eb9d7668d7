//! One owner per thread: the session lifecycle of every `SessionScope` of the buzz-acp fork.
//!
//! Upstream buzz-acp keeps a thread's provider session in worker memory only, so the session dies
//! with the worker (idle pool sleep, restart, crash) and the next message starts over. The fork's
//! patch series fixes that. This crate holds the logic; the patches add hooks at the harness's
//! lifecycle points (admission, dispatch, session creation, turn end, maintenance tick, shutdown)
//! that feed it and execute what it decides. Each patch that adds behaviour here switches on one
//! [`Behaviour`] with one line in the harness's glue (`BEHAVIOURS` in
//! `crates/buzz-acp/src/session_lifecycle.rs`), so retiring the patch switches its part off.
//! Every behaviour is always compiled, linted and tested; the lifecycle consults the
//! [`Behaviours`] of its [`LifecycleConfig`] at run time ([`behaviours`]):
//!
//! | behaviour | patch | adds |
//! |---|---|---|
//! | — | `session-store-resume` | receipts, restore, retries, the store worker, dispatch |
//! | `ScopeKeys` | `store-key-session-scope` | receipts keyed by the full scope ([`args::key_scheme`]) |
//! | `CapabilityGate` | `load-session-capability-gate` | only advertised restore and close methods |
//! | `DeltaContext` | `delta-context-delivery` | the delivery ledger persisted and re-seeded |
//! | `Residency` | `resident-background-controllers` | [`residency`]: hot follow-ups |
//! | `Continuity` | `continuity-handoff` | [`rotation`], [`retirement`], [`exhaustion`]: durable limits, handoffs, whole thread |
//! | `ConfigInPlace` | `model-switch-in-place` | [`config_change`]: `!model` applied in place per thread (brings `Continuity`) |
//! | `Metrics` | `operator-metrics` | [`telemetry_metrics`]: Prometheus metrics on `--metrics-listen` |
//!
//! The pure core, one concept per module:
//!
//! | module | concept |
//! |---|---|
//! | [`placement`] | which scope runs now, and on which worker |
//! | [`reach`] | how a turn reaches its session: hot, warm or cold ([`Plan`]) |
//! | [`outcome`] | what a turn task reports and how a turn ended |
//! | [`settlement`] | the ledger committed after a successful turn (bounded here only) |
//! | [`release`] | abandoning and releasing sessions |
//! | [`residency`], [`residents`] | resident sessions: the rules, and the LRU table they consult (with `Residency`) |
//! | [`retry`] | bounded retries of an undecided restore |
//! | [`receipt_view`] | what the lifecycle knows of a receipt; write conditions |
//! | [`lifecycle`] | [`Lifecycle`]: the per-scope phases tying these together |
//! | `phase` | the phases themselves, a settling turn included |
//! | [`decision`], [`telemetry`] | what the harness executes, what the driver executes, what happened |
//! | [`classify`] | what an agent's error says about a stored session (gone or not) |
//! | [`gate`] | which session methods the agent advertised, read by the negotiated ACP version |
//! | [`notice`] | what a thread is told |
//! | `test_values`, `testing` | plain test values; the in-memory receipt store (feature `test-support`, for tests only) |
//!
//! The imperative shell: [`driver`] (clock, mailbox, record sink), [`store_io`] with
//! [`write_queue`] and [`receipts`] (the store off the event loop), [`dispatch`] (queue → turns,
//! the one path the harness and the property tests share), [`mailbox`], [`wire`] (the frame
//! tap), [`args`].

pub mod abandonment;
pub mod args;
pub mod behaviours;
pub mod classify;
pub mod clock;
pub mod config_change;
pub mod decision;
pub mod dispatch;
pub mod driver;
pub mod exhaustion;
pub mod gate;
pub mod lifecycle;
pub mod mailbox;
pub mod notice;
pub mod outcome;
pub mod placement;
pub mod reach;
pub mod receipt_ops;
pub mod receipt_view;
pub mod receipts;
pub mod release;
pub mod residency;
pub mod residents;
pub mod retirement;
pub mod retry;
pub mod rotation;
pub mod scope;
pub mod session_config;
pub mod settlement;
pub mod startup_probe;
pub mod store_io;
pub mod telemetry;
pub mod telemetry_metrics;
#[cfg(any(test, feature = "test-support"))]
pub mod test_values;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod turn_start;
pub mod wire;
pub mod write_queue;

mod phase;

pub use behaviours::{Behaviour, Behaviours};
pub use buzz_session_store as store;
pub use clock::Moment;
pub use decision::{Command, Notice, NoticeCause, StoreOp};
pub use dispatch::{Claimed, Inbox, Step, Workers};
pub use driver::{Driver, Handled, HarnessInput};
pub use gate::{AgentCaps, Negotiated, RestoreMethod, restore_method};
pub use lifecycle::{Lifecycle, LifecycleConfig};
pub use mailbox::Opened;
pub use mailbox::{Mailbox, Report, Reporter};
pub use outcome::{AfterTurn, Delivered, TurnOutcome};
pub use placement::{Placed, Ready, SlotView, StoreHealth, Target};
pub use reach::{ColdReason, Plan, Reach, ReachKind, restore_params, scope_meta};
pub use retry::RetryPolicy;
pub use scope::{Input, Scope};
pub use session_config::SessionConfig;
pub use telemetry::Record;
