//! What the lifecycle decides, as data: [`Command`]s the harness executes, [`StoreOp`]s the
//! driver executes itself (off the event loop), and [`Record`](crate::telemetry::Record)s of what
//! happened. The state machine returns these and performs no I/O; the two vocabularies are kept
//! apart so the harness never sees a store write and the store never sees a worker.

use buzz_session_store::{SessionRecord, TurnCommit};
use serde::Serialize;

use crate::receipt_view::Expect;

/// Something the harness must do with its own resources (workers, the relay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<K, I> {
    /// Free a session that is no longer the scope's: drop it from worker `slot`'s memory (only if
    /// the worker still holds *this* session; a busy worker's release waits until it is idle)
    /// and close it when the agent allows `session/close`. Then report
    /// [`crate::Driver::released`]: the scope does not start again before that, so a later
    /// reopen of the same session is never closed behind its back. A dead worker's sessions died
    /// with it and are never released.
    Release {
        /// The scope.
        scope: K,
        /// The worker.
        slot: usize,
        /// The session.
        session_id: String,
    },
    /// Post a notice in the scope's thread.
    Notice(Notice<K, I>),
}

/// A notice for a scope's thread, about `trigger`. A notice is never the answer to `trigger`:
/// the message still waits for one, so it must not be published in a way that marks it
/// answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice<K, I> {
    /// The scope.
    pub scope: K,
    /// The message the notice is about (not yet answered).
    pub trigger: I,
    /// Why the thread is told.
    pub cause: NoticeCause,
    /// The text.
    pub text: String,
}

/// Why a thread gets a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeCause {
    /// Reopening the stored session failed without a definitive answer; retrying.
    RestoreRetrying,
    /// The agent no longer has the stored session.
    SessionLost,
    /// The harness gave up reopening the stored session.
    RestoreAbandoned,
    /// The receipt store could not be read in time; the answer comes from a new session.
    StoreUnavailable,
    /// The harness retired the session (a limit, a configuration change) and continued in a new
    /// one.
    Retired,
    /// The session ran out of context space; the answer comes from a new session.
    Exhausted,
    /// The owner's model is not offered by the thread's session; the thread goes on unchanged.
    ModelNotOffered,
}

/// A store operation, executed by the driver off the event loop, in order per scope.
#[allow(clippy::large_enum_variant)] // a receipt (with `continuity`) is large; moved once per turn or store call, never kept in bulk
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreOp<K> {
    /// Read the scope's receipt (answered with [`crate::Driver`]'s read report).
    Read {
        /// The scope.
        scope: K,
    },
    /// A session was opened: its receipt replaces the stored one, if that is still what the
    /// lifecycle believed when it decided.
    Put {
        /// The scope.
        scope: K,
        /// The receipt.
        record: SessionRecord,
        /// The condition.
        expect: Expect,
    },
    /// After a successful turn: what the session has been shown (and, as the series grows, its
    /// turn count and usage), while the receipt still names the turn's session (a late commit
    /// never touches a newer session's receipt).
    Commit {
        /// The scope.
        scope: K,
        /// The turn's updates.
        commit: TurnCommit,
    },
    /// The session was abandoned on purpose: forget the receipt, if it is still the one the
    /// lifecycle believed in.
    Remove {
        /// The scope.
        scope: K,
        /// The condition.
        expect: Expect,
    },
    /// The agent was removed from a channel: forget every receipt of it.
    RemoveChannel {
        /// The channel id.
        channel: String,
    },
}

impl<K> StoreOp<K> {
    /// The scope the operation is about (`None` for channel-wide removals).
    pub fn scope(&self) -> Option<&K> {
        match self {
            StoreOp::Read { scope }
            | StoreOp::Put { scope, .. }
            | StoreOp::Commit { scope, .. }
            | StoreOp::Remove { scope, .. } => Some(scope),
            StoreOp::RemoveChannel { .. } => None,
        }
    }
}

/// A kind of store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Opening the store (at startup, again after each failure).
    Open,
    /// Reading a scope's receipt.
    Read,
    /// Writing a new receipt.
    Put,
    /// Committing a turn to the receipt.
    Commit,
    /// Removing a scope's receipt.
    Remove,
    /// Removing every receipt of a channel.
    RemoveChannel,
}
