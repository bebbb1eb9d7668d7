//! What the harness tells the lifecycle: how a session was opened, how a turn ended, and what
//! the session has been shown.

use crate::gate::RestoreMethod;

/// A session a turn task opened, reported as soon as it is open (before the prompt), so the
/// receipt is durable even if the process stops in the middle of a long turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// `session/new` succeeded. (What was *requested* is known to the lifecycle: the
    /// configuration the turn started under.)
    Created {
        /// The new session id.
        session_id: String,
        /// The model actually applied (`None`: the agent's default, also when it rejected the
        /// requested one, #6990).
        model: Option<String>,
        /// The permission mode actually applied (`None`: the agent's default).
        permission_mode: Option<String>,
    },
    /// A stored session was reopened.
    Restored {
        /// Its id.
        session_id: String,
        /// The method that was actually sent.
        method: RestoreMethod,
    },
    /// The agent answered that it no longer has the stored session (or cannot reopen sessions
    /// at all): the turn opens a new one, and the thread is told its earlier context is gone.
    Lost {
        /// The stored session.
        session_id: String,
        /// The method that was sent.
        method: RestoreMethod,
        /// What the agent said.
        detail: String,
    },
}

impl Opened {
    /// The session id.
    pub fn session_id(&self) -> &str {
        match self {
            Opened::Created { session_id, .. }
            | Opened::Restored { session_id, .. }
            | Opened::Lost { session_id, .. } => session_id,
        }
    }
}

/// How a turn ended, in the lifecycle's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The agent answered; the reply is published.
    Replied {
        /// The session that answered.
        session_id: String,
        /// The session was rotated after this turn (a limit was hit): it is abandoned.
        rotated: bool,
    },
    /// The owner cancelled the turn; its input is dropped.
    Cancelled,
    /// The owner rotated the session during the turn; its input is dropped.
    Rotated,
    /// The turn stopped to run again (a steer merge, a model switch); its input comes back
    /// through the harness's queue, with these extra inputs merged in.
    Requeued {
        /// Ids of inputs the turn absorbed while running (a steer).
        extra: Vec<String>,
    },
    /// The agent reported an error; the input comes back for another attempt or is
    /// dead-lettered by the harness.
    Failed,
    /// Reopening the stored session failed and the agent's answer did not say it is gone: keep
    /// the receipt, open no competing session, retry later (bounded). The input comes back
    /// through the harness's queue.
    RestoreUndecided {
        /// The method that was sent.
        method: RestoreMethod,
        /// What the agent said (or the timeout), for the thread and the logs.
        detail: String,
    },
    /// The worker process died or the turn task crashed; the input comes back or is
    /// dead-lettered.
    WorkerLost,
}

/// What a live session has been shown, read from the worker after a successful turn (and after
/// the reply was published, so the agent's own reply is included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The session.
    pub session_id: String,
    /// A legacy agent already got the standing context in a user message.
    pub standing_context_sent: bool,
    /// Event ids shown to the session, as triggers or as context.
    pub event_ids: Vec<String>,
}
