//! The controller table behind resident sessions in buzz-acp.
//!
//! buzz-acp runs chat *scopes* (one thread of a channel is one scope) as turns on ACP agent
//! sessions held by a pool of worker processes. Without residency every follow-up message
//! pays for `session/load` ("warm") or `session/new` plus re-injected context ("cold"). With
//! it, the live session of a scope whose turn succeeded stays registered here as a
//! [`Resident`], and the next message continues on it ("hot").
//!
//! The table is the part of that design that must be exactly right under concurrency, so it
//! is a plain synchronous state machine with no I/O and no async:
//!
//! * [`ControllerTable::route`] decides where a follow-up goes: the running turn's queue, a
//!   wait for an unsettled completion, a hot continuation, a capacity wait, or the cold/warm
//!   path ([`Route`]).
//! * [`ControllerTable::begin`], [`ControllerTable::finish`] and [`ControllerTable::settle`]
//!   bracket each turn; `finish` performs the final atomic claim of queued input and decides
//!   residency ([`Finish`]).
//! * The `dispose*` methods remove residents for every lifecycle trigger ([`DisposeReason`]);
//!   they return the residents and the caller frees the sessions.
//!
//! Behaviour follows the resident background-agent design of QwenLM/qwen-code (PR #7426 and
//! follow-ups), mapped onto ACP sessions; see `shared/resident-agents.md` in the fork
//! workspace for the checklist this crate implements.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ids;
mod outcome;
mod stats;
mod table;

#[cfg(test)]
mod tests;

pub use ids::{Fingerprint, HandleId, StartId, fingerprint_of};
pub use outcome::{
    BeginError, Continuation, ContinueOutcome, DisposeReason, Fallback, Finish, Keep,
    NotResidentReason, Resident, Route, TurnEnd, TurnStatus, continue_outcome,
};
pub use stats::TableStats;
pub use table::{ControllerTable, DEFAULT_RETAINED_STATUSES};
