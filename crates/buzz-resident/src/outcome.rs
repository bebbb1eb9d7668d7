//! The values the table exchanges with the harness: what a turn reports, and what routing,
//! finishing and disposal decided.
//!
//! They are plain data so the harness can act on them after the table's lock is released;
//! nothing here owns a session or performs cleanup.

use crate::ids::{Fingerprint, HandleId, StartId};

/// A live ACP session kept for a scope after a successful turn.
///
/// This is a description, not an owner: dropping it frees nothing. Whoever receives one from a
/// disposal is responsible for dropping the session from worker `slot` (and sending
/// `session/close` if the agent supports it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    /// The registration this session was kept under; see [`HandleId`].
    pub handle: HandleId,
    /// The worker (agent process) slot in the pool that holds the session.
    pub slot: usize,
    /// The ACP `sessionId` to prompt on a hot continuation.
    pub session_id: String,
    /// The configuration the session was created with; compared at every continue.
    pub fingerprint: Fingerprint,
}

/// What the scope's latest turn did.
///
/// Deliberately has no "idle" or "resident" variant: `Completed` keeps meaning "the latest
/// turn completed", and whether a live session is kept for it is an internal fact of the table
/// (see [`crate::ControllerTable::resident`]), not something users or the wire should see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnStatus {
    /// A turn was started and has not reported a terminal outcome yet.
    Running,
    /// The latest turn ended successfully.
    Completed,
    /// The latest turn failed (transport error, agent error, …).
    Failed,
    /// The latest turn was cancelled.
    Cancelled,
}

/// How [`crate::ControllerTable::route`] disposed of a follow-up input.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a routed input is either held by the table or handed back; dropping the route loses it"]
pub enum Route<I> {
    /// A turn is running and not finishing: the input was queued for the *same* session. The
    /// running turn claims it when it ends successfully ([`Finish::Claimed`]), or it is handed
    /// back by a failed/cancelled finish ([`Finish::Failed`] / [`Finish::Cancelled`]).
    Queued,
    /// The latest turn completed but the harness has not settled it yet (publishing, returning
    /// the worker). The table holds the input; [`crate::ControllerTable::settle`] hands it back
    /// and the caller routes it again from scratch.
    WaitFinishing,
    /// The scope completed and its resident session is compatible and free. The table has
    /// already flipped the scope to `Running` under a new start, so a concurrent `route` gets
    /// `Queued`, never a second `Continue`. The caller runs the turn on `resident.slot` with
    /// `resident.session_id`.
    Continue(Continuation<I>),
    /// The scope completed and has a compatible resident, but its worker slot is busy. Nothing
    /// was changed. The caller keeps the input and retries later; it must **not** open a cold
    /// session for it, or the resident's context would be forked.
    CapacityWait(I),
    /// No usable resident (none ever, disposed, failed, cancelled, incompatible, unknown
    /// scope): the caller queues `inputs` for its load-then-new dispatch and calls
    /// [`crate::ControllerTable::begin`] when it dispatches them.
    Fallback(Fallback<I>),
}

/// A hot continuation granted by [`Route::Continue`].
#[derive(Debug, PartialEq, Eq)]
pub struct Continuation<I> {
    /// The start the continuation turn must report with.
    pub start: StartId,
    /// The resident session to prompt (same handle as before: no replacement happened).
    pub resident: Resident,
    /// The inputs for the turn, oldest first.
    pub inputs: Vec<I>,
}

/// A cold/warm dispatch request granted by [`Route::Fallback`].
#[derive(Debug, PartialEq, Eq)]
pub struct Fallback<I> {
    /// The inputs to dispatch, oldest first.
    pub inputs: Vec<I>,
    /// A resident that was disposed on the way because its configuration no longer matches;
    /// the caller frees it.
    pub disposed: Option<Resident>,
}

/// The typed result of a continue attempt, as the ACP mapping in the design notes asks for
/// (a boolean made callers cold-revive even when capacity was the only obstacle).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContinueOutcome {
    /// Continued hot on the resident session.
    Continued,
    /// No usable resident; the cold/warm path takes over.
    Fallback,
    /// A resident exists but its worker is busy; retry, do not go cold.
    CapacityWait,
    /// The scope was not completed (running or finishing), so no continue was attempted.
    NotCompleted,
}

/// Classifies a [`Route`] as a continue outcome.
#[must_use]
pub fn continue_outcome<I>(route: &Route<I>) -> ContinueOutcome {
    match route {
        Route::Queued | Route::WaitFinishing => ContinueOutcome::NotCompleted,
        Route::Continue(_) => ContinueOutcome::Continued,
        Route::CapacityWait(_) => ContinueOutcome::CapacityWait,
        Route::Fallback(_) => ContinueOutcome::Fallback,
    }
}

/// How a turn's prompt ended, as reported by the turn task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// The prompt ended normally (`end_turn` / `max_tokens`).
    Succeeded {
        /// The worker slot the session lives on.
        slot: usize,
        /// The ACP session the turn ran on.
        session_id: String,
        /// The configuration the session was created with; recorded on the resident and
        /// compared with the scope's current configuration at every continue.
        fingerprint: Fingerprint,
        /// Whether the caller considers the session safe to keep (checked at completion; the
        /// table re-checks the fingerprint at every continue).
        keep: Keep,
    },
    /// Transport error, agent error, or any stop reason the harness treats as failure.
    Failed,
    /// The turn was cancelled (`!cancel`, `refusal`, local abort).
    Cancelled,
}

/// The caller's residency verdict for a successful turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keep {
    /// The session may stay resident.
    Yes,
    /// The session must not stay resident, for this reason.
    No(NotResidentReason),
}

/// Why a successful turn's session is not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotResidentReason {
    /// The turn needed a permission mode beyond the scope's policy; re-acquiring it on every
    /// hot turn is not safe.
    ElevatedPermission,
    /// The turn ran in a per-turn working directory that the harness reaps afterwards.
    PerTurnCwd,
    /// The scope's configuration changed during the turn.
    ConfigChanged,
    /// The turn ended by abandoning its session (rotation after too many
    /// turns or a token limit): there is nothing left to keep.
    Rotated,
    /// Set by the table: `max_residents` is 0.
    ResidencyDisabled,
    /// Set by the table: a disposal was requested while the turn was running.
    DisposeRequested,
}

/// What [`crate::ControllerTable::finish`] decided.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a finish may carry inputs or residents the caller must act on"]
pub enum Finish<K, I> {
    /// Success, and inputs were queued during the turn: they were drained under the lock and
    /// belong to the *same* start. The scope stays `Running`; the caller prompts them next on
    /// the same session, then calls `finish` again with the same [`StartId`].
    ///
    /// Not used when a disposal was requested during the turn: the session is being torn
    /// down, so queued inputs are not run on it; they join the finishing window's waiters and
    /// come back from `settle` for re-routing (to the cold/warm path).
    Claimed(Vec<I>),
    /// Success with nothing queued: the scope is `Completed` and finishing until `settle`.
    ///
    /// The session the turn ran on is kept iff `resident` is `Some`; otherwise the caller
    /// frees that session itself once it has settled.
    Completed {
        /// The resident registered (or kept, on a hot turn) for this scope.
        resident: Option<Resident>,
        /// *Other* residents the caller must free: least-recently-used idle residents evicted
        /// to stay within `max_residents`, and (defensively) an older session of this scope
        /// that the turn replaced.
        evicted: Vec<(K, Resident)>,
    },
    /// The turn failed: the scope is `Failed`. The caller publishes the failure first, then
    /// frees `dispose` (if any) and re-routes `requeue` (never lost).
    Failed {
        /// The scope's resident, already removed from the table.
        dispose: Option<Resident>,
        /// Inputs that were queued for the failed turn, oldest first.
        requeue: Vec<I>,
    },
    /// The turn was cancelled: the scope is `Cancelled` and its resident was disposed at once.
    Cancelled {
        /// The scope's resident, already removed from the table; free it now.
        disposed: Option<Resident>,
        /// Inputs that were queued for the cancelled turn, oldest first.
        requeue: Vec<I>,
    },
    /// The report does not belong to the scope's current, unfinished start (a superseded
    /// start, or a second terminal report). Nothing changed and nothing was counted; the
    /// caller drops the report.
    Stale,
}

/// Why a resident was disposed; the key of [`crate::TableStats::disposals_by_reason`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DisposeReason {
    /// The turn failed.
    TurnFailed,
    /// The turn was cancelled.
    Cancelled,
    /// A cancel arrived just after the turn completed; the user stopped it, so it must not be
    /// continued.
    CancelLostRace,
    /// `!rotate`: the user asked for a fresh session.
    Rotate,
    /// The worker process exited.
    AgentExit,
    /// The harness is shutting down.
    Shutdown,
    /// The pool put idle workers to sleep.
    IdlePoolSleep,
    /// The scope's configuration (cwd, MCP servers, model, permission mode) no longer matches
    /// the session's.
    ConfigChanged,
    /// Evicted to stay within `max_residents`.
    Evicted,
    /// A new session for the scope replaced it.
    Replaced,
}

impl DisposeReason {
    /// Every reason, in declaration order.
    pub const ALL: [DisposeReason; 10] = [
        DisposeReason::TurnFailed,
        DisposeReason::Cancelled,
        DisposeReason::CancelLostRace,
        DisposeReason::Rotate,
        DisposeReason::AgentExit,
        DisposeReason::Shutdown,
        DisposeReason::IdlePoolSleep,
        DisposeReason::ConfigChanged,
        DisposeReason::Evicted,
        DisposeReason::Replaced,
    ];
}

/// Why [`crate::ControllerTable::try_begin`] refused to start a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BeginError {
    /// A turn is already running for the scope; inputs should be routed to it instead.
    #[error("a turn is already running for this scope")]
    Running,
    /// The scope's last turn completed but has not been settled yet.
    #[error("the scope's last turn has not been settled yet")]
    Finishing,
}
