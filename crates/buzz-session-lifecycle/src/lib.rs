//! One owner per thread: the session lifecycle of every `SessionScope` of the buzz-acp fork.
//!
//! Upstream buzz-acp keeps a thread's provider session in worker memory only, so the session dies
//! with the worker (idle pool sleep, restart, crash) and the next message starts over. The fork's
//! patch series fixes that. This crate holds the logic; the patches add one-line hooks at the
//! harness's lifecycle points (admission, dispatch, session creation, turn end, maintenance tick,
//! shutdown) that feed it and execute what it decides.
//!
//! | module | job |
//! |---|---|
//! | [`lifecycle`] | [`Lifecycle`]: the state machine — pending input, turns, residents, retries |
//! | [`driver`] | [`Driver`]: the imperative shell — clock, receipt store, mailbox |
//! | [`plan`] | [`Plan`], [`Via`] (hot / warm / cold), [`Target`], [`SlotView`] |
//! | [`residents`] | live sessions kept for hot continuation; exactly-once disposal |
//! | [`retry`] | bounded retries of a restore that failed without a definitive answer |
//! | [`classify`] | what an agent's error says about a stored session (gone or not) |
//! | [`gate`] | which session methods the agent advertised, read by the negotiated ACP version |
//! | [`wire`] | the frame tap: replayed history (load, or resume) stays out of the observer; raw capabilities |
//! | [`report`], [`effect`] | what the harness reports, what the lifecycle asks for |
//! | [`notice`] | what a thread is told when its session cannot be reopened |
//! | [`args`] | the command-line flags of the series |
//!
//! The state machine is synchronous and clock-free ([`clock::Moment`] is passed in); the driver
//! does the store I/O, from the harness's event loop, never from a turn task.

pub mod args;
pub mod classify;
pub mod clock;
pub mod driver;
pub mod effect;
pub mod gate;
pub mod lifecycle;
pub mod notice;
pub mod plan;
pub mod report;
pub mod residents;
pub mod retry;
pub mod scope;
pub mod testing;
pub mod wire;

mod pending;

pub use buzz_session_store as store;
pub use clock::Moment;
pub use driver::{Driver, Mailbox};
pub use effect::{Effect, Notice, Persist, Record};
pub use gate::{AgentCaps, Negotiated, RestoreMethod, restore_method};
pub use lifecycle::{Lifecycle, LifecycleConfig, RunningRoute};
pub use pending::{Batch, Seq};
pub use plan::{
    ColdReason, Plan, SessionConfig, SlotView, Target, Via, ViaKind, fingerprint_of,
    restore_params, scope_meta,
};
pub use report::{Delivered, Opened, TurnOutcome};
pub use residents::{DisposeReason, Resident};
pub use retry::RetryPolicy;
pub use scope::{Input, Scope};
