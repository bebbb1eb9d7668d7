//! Where turn tasks report to the lifecycle while they run.
//!
//! A turn task runs beside the event loop and never touches the lifecycle: it posts what it did
//! (the session it opened, the context window it used, a plan it could not carry out) to a
//! [`Mailbox`], and the driver takes the mail in on the event loop before every decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::gate::RestoreMethod;

/// A session a turn task opened, reported as soon as it is open (before the prompt), so the
/// receipt is written even if the process stops in the middle of a long turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// `session/new` succeeded.
    Created {
        /// The new session id.
        session_id: String,
        /// The model actually applied (`None`: the agent's default, also when it rejected the
        /// requested one).
        model: Option<String>,
        /// The permission mode actually applied (`None`: the agent's default).
        permission_mode: Option<String>,
    },
    /// The stored session was reopened.
    Restored {
        /// Its id.
        session_id: String,
        /// The method actually sent.
        method: RestoreMethod,
    },
    /// The agent answered that it no longer has the stored session: the turn opens a new one,
    /// and the thread is told its earlier context is gone.
    Lost {
        /// The stored session.
        session_id: String,
        /// The method that was sent.
        method: RestoreMethod,
        /// What the agent said.
        detail: String,
    },
}

/// What a turn task reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// It opened the scope's session.
    Opened(Opened),
    /// The ids of the context window its prompt used.
    Window(Vec<String>),
    /// The worker no longer holds the session the plan continues.
    Stale,
    /// Reopening the stored session failed without a definitive answer.
    Undecided {
        /// The method that was sent.
        method: RestoreMethod,
        /// What the agent said (or the timeout).
        detail: String,
    },
    /// The session took the plan's model switch in place.
    ModelSwitched {
        /// The model.
        model: String,
    },
    /// The session refused the plan's model switch in place.
    ModelRefused {
        /// The model.
        model: String,
        /// What the agent said.
        detail: String,
        /// Whether the session's `model` option offers the model (`None`: its options were not
        /// seen). A model it does not offer, a new session would not get either.
        offered: Option<bool>,
    },
    /// The retiring session answered the handoff instruction.
    HandoffTaken {
        /// The retiring session.
        from_session_id: String,
        /// Its answer.
        text: String,
    },
    /// The retiring session could not answer the handoff instruction.
    HandoffUnavailable {
        /// The retiring session.
        from_session_id: String,
        /// Why (what the agent said, the timeout, its death).
        detail: String,
    },
}

/// Where turn tasks report. Cheap to clone; shared by the event loop (which drains it) and every
/// turn task (which posts).
#[derive(Debug)]
pub struct Mailbox<K>(Arc<Mutex<Vec<(K, Report)>>>);

impl<K> Clone for Mailbox<K> {
    fn clone(&self) -> Self {
        Mailbox(Arc::clone(&self.0))
    }
}

impl<K> Default for Mailbox<K> {
    fn default() -> Self {
        Mailbox(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<K: Clone> Mailbox<K> {
    fn lock(&self) -> MutexGuard<'_, Vec<(K, Report)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Posts a report about `scope`.
    pub fn post(&self, scope: &K, report: Report) {
        self.lock().push((scope.clone(), report));
    }

    /// A reporter for the turns of `scope` (handed to a turn with its plan).
    pub fn reporter(&self, scope: &K) -> Reporter
    where
        K: Send + Sync + 'static,
    {
        let mailbox = self.clone();
        let scope = scope.clone();
        Reporter(Some(Destination {
            id: NEXT_REPORTER.fetch_add(1, Ordering::Relaxed),
            post: Arc::new(move |report| mailbox.post(&scope, report)),
        }))
    }

    /// Takes every report posted so far, in order.
    pub fn drain(&self) -> Vec<(K, Report)> {
        std::mem::take(&mut *self.lock())
    }
}

/// Where one turn task reports: its scope's mailbox, travelling with the turn's
/// [`Plan`](crate::Plan). A detached reporter (a plan made outside a driver, e.g. in tests) drops what
/// it is told. Two reporters are equal when they are the same one (a clone of the one the
/// driver attached, or both detached), so plans compare by what they decide.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Reporter(Option<Destination>);

/// Identities of the reporters the mailboxes hand out.
static NEXT_REPORTER: AtomicU64 = AtomicU64::new(0);

/// A scope's mailbox, as one reporter posts to it.
#[derive(Clone)]
struct Destination {
    /// Which reporter this is (clones share it).
    id: u64,
    post: Arc<dyn Fn(Report) + Send + Sync>,
}

impl PartialEq for Destination {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Destination {}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Reporter"
        } else {
            "Reporter(detached)"
        })
    }
}

impl Reporter {
    /// Reports `report`.
    pub fn post(&self, report: Report) {
        if let Some(destination) = &self.0 {
            (destination.post)(report);
        }
    }

    /// `session/new` created `session_id`, with the model and permission mode actually applied
    /// (`None`: the agent's default).
    pub fn created(
        &self,
        session_id: &str,
        model: &Option<String>,
        permission_mode: &Option<String>,
    ) {
        self.post(Report::Opened(Opened::Created {
            session_id: session_id.to_string(),
            model: model.clone(),
            permission_mode: permission_mode.clone(),
        }));
    }

    /// The stored session `session_id` was reopened with `method`.
    pub fn restored(&self, session_id: &str, method: RestoreMethod) {
        let session_id = session_id.to_string();
        self.post(Report::Opened(Opened::Restored { session_id, method }));
    }

    /// The agent answered `method` with `detail`: it no longer has `session_id`.
    pub fn lost(&self, session_id: &str, method: RestoreMethod, detail: String) {
        self.post(Report::Opened(Opened::Lost {
            session_id: session_id.to_string(),
            method,
            detail,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::TestScope;

    #[test]
    fn a_reporter_equals_its_clones_and_no_other() {
        let mailbox: Mailbox<TestScope> = Mailbox::default();
        let scope = TestScope::thread("c1", "root");
        let one = mailbox.reporter(&scope);
        let again = mailbox.reporter(&scope);
        assert_eq!(one, one.clone());
        assert_ne!(one, again, "each turn's reporter is its own");
        assert_eq!(Reporter::default(), Reporter::default());
        assert_ne!(one, Reporter::default());
        one.post(Report::Stale);
        again.post(Report::Stale);
        assert_eq!(mailbox.drain().len(), 2, "both post to the scope's mailbox");
    }
}
