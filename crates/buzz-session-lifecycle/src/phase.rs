//! Where each scope stands, as one enum of phases plus the facts that outlive a phase.

use crate::clock::Moment;
use crate::reach::{NextSession, Plan};
use crate::receipt_view::{Belief, ReceiptView};
use crate::retry::Streak;
use crate::session_config::SessionConfig;

/// A successful turn waiting for its reply to be published and its ledger to be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settle {
    /// The worker the turn ran on (its ledger is read there).
    pub(crate) slot: usize,
    /// The session that answered.
    pub(crate) session_id: String,
    /// Ids of the turn's context window.
    pub(crate) window: Vec<String>,
    /// Ids of the turn's triggers.
    pub(crate) triggers: Vec<String>,
    /// The published reply's id.
    pub(crate) reply: Option<String>,
    /// The turn gave its session a pending handoff (which the receipt may now forget).
    pub(crate) handoff_delivered: bool,
}

/// What a scope is doing now. Its pending input is not here: it waits in the harness's queue
/// until the scope starts a turn.
#[derive(Debug, Default)]
pub(crate) enum Phase<I> {
    /// Nothing runs; the scope may start when it has input.
    #[default]
    Idle,
    /// Its resident's worker is busy: the follow-up waits for it instead of going cold on
    /// another worker (recorded once per wait).
    WaitingForResident {
        /// The busy worker.
        slot: usize,
    },
    /// A turn runs.
    Running(Box<Running<I>>),
    /// A restore failed without a definitive answer: the scope waits until the streak's next
    /// attempt is due.
    RetryWait {
        /// The failures so far.
        streak: Streak,
    },
    /// A successful turn waits for its reply to be published, then for its ledger to be read.
    Settling(Settle),
}

/// A running turn.
#[derive(Debug)]
pub(crate) struct Running<I> {
    /// The worker slot it runs on.
    pub(crate) slot: usize,
    /// How it reaches its session.
    pub(crate) plan: Plan,
    /// Its triggering input (the last one is what notices are about).
    pub(crate) inputs: Vec<I>,
    /// Input steered into it while it runs, not yet absorbed (`--multiple-event-handling
    /// steer`): handed back to the queue if the turn ends without it.
    pub(crate) steered: Vec<I>,
    /// The owner asked to cancel it.
    pub(crate) cancel_requested: bool,
    /// The session it runs on, once known.
    pub(crate) session_id: Option<String>,
    /// The scope was abandoned while it ran: whatever session it ends on is released and never
    /// becomes the scope's receipt.
    pub(crate) abandoned: bool,
    /// The configuration it started under.
    pub(crate) config: SessionConfig,
    /// Ids of its context window (what the persisted ledger may keep).
    pub(crate) window: Vec<String>,
    /// What the task reported about its plan, if anything went otherwise.
    pub(crate) said: Option<TaskSaid>,
    /// The restore failures before this attempt (kept if it fails again).
    pub(crate) retry: Option<Streak>,
}

/// What a turn task reported when its plan could not be carried out as decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskSaid {
    /// The worker no longer holds the session the plan continues.
    Stale,
    /// The restore failed without a definitive answer.
    Undecided {
        method: crate::gate::RestoreMethod,
        detail: String,
    },
}

/// The session this harness last opened or reopened for a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KnownSession {
    pub(crate) session_id: String,
    pub(crate) fingerprint: u64,
    /// Completed turns of the session (`None`: unknown, e.g. reopened from a receipt that
    /// predates the count; counted from the reopening).
    pub(crate) turns: Option<u32>,
    /// The model applied to the session (`None`: the agent's default, or unknown).
    pub(crate) model: Option<String>,
    /// A model this session refused to switch to: not asked again of it.
    pub(crate) refused_model: Option<String>,
}

/// Everything the lifecycle keeps for one scope.
#[derive(Debug)]
pub(crate) struct ScopeState<I> {
    pub(crate) phase: Phase<I>,
    /// The scope's receipt, as known.
    pub(crate) receipt: ReceiptView,
    /// What the next session must be.
    pub(crate) next: NextSession,
    /// The last session opened or reopened here (to tell whether a worker's live copy is
    /// current).
    pub(crate) known: Option<KnownSession>,
    /// Sessions of the scope being released: the scope does not start before they are.
    pub(crate) releasing: Vec<String>,
    /// When the receipt store was found unreadable for this scope and the thread was told
    /// (told once per outage).
    pub(crate) told_unreadable: Option<Moment>,
    /// The owner switched this thread's model: its session must take it (in place, or by
    /// retirement).
    pub(crate) model_addressed: bool,
}

impl<I> Default for ScopeState<I> {
    fn default() -> Self {
        ScopeState {
            phase: Phase::Idle,
            receipt: ReceiptView::default(),
            next: NextSession::Continue,
            known: None,
            releasing: Vec::new(),
            told_unreadable: None,
            model_addressed: false,
        }
    }
}

impl<I> ScopeState<I> {
    /// Nothing worth remembering: the entry can go (memory stays bounded with many threads).
    /// A belief in a stored receipt is kept: it is what a turn falls back on when the store is
    /// unreadable. So is a store outage the thread was told about: it is told once per outage,
    /// not once per attempt.
    pub(crate) fn is_bare(&self) -> bool {
        matches!(self.phase, Phase::Idle)
            && !matches!(self.receipt.belief, Belief::Present(_))
            && self.next == NextSession::Continue
            && self.known.is_none()
            && self.releasing.is_empty()
            && !self.model_addressed
            && self.told_unreadable.is_none()
    }

    pub(crate) fn running(&self) -> Option<&Running<I>> {
        match &self.phase {
            Phase::Running(running) => Some(running),
            _ => None,
        }
    }

    pub(crate) fn running_mut(&mut self) -> Option<&mut Running<I>> {
        match &mut self.phase {
            Phase::Running(running) => Some(running),
            _ => None,
        }
    }
}
