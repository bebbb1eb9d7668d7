//! Where each scope stands, as one enum of phases plus the facts that outlive a phase.
//!
//! A scope's phase changes only here: the field is private to this module, and each change is
//! a named transition of [`ScopeState`]. The whole machine of phases:
//!
//! ```text
//!  Idle ──wait_for_resident──► WaitingForResident ──stop_waiting_for_resident──► Idle
//!  Idle | WaitingForResident | RetryWait ──begin_turn──► Running
//!  Running ──end_turn──► Idle, then at once (same input) one of:
//!          ├─ (nothing)                  the turn failed, was cancelled or handed back
//!          ├─ wait_to_retry ──► RetryWait   its restore failed without a definitive answer
//!          └─ settle ──► Settling           it answered: the reply is published, then settled
//!  RetryWait ──give_up_retry──► Idle         (the scope was abandoned meanwhile)
//!  Settling ──finish_settling──► Idle
//! ```
//!
//! A transition asked of a phase it does not start from changes nothing (and says so to a debug
//! build): a late report cannot wipe out a turn that runs.

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
    /// Changed only by the transitions below.
    phase: Phase<I>,
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

    /// Where the scope stands.
    pub(crate) fn phase(&self) -> &Phase<I> {
        &self.phase
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

    /// The successful turn waiting to be settled, if the scope is settling.
    pub(crate) fn settling_mut(&mut self) -> Option<&mut Settle> {
        match &mut self.phase {
            Phase::Settling(settle) => Some(settle),
            _ => None,
        }
    }

    /// Idle or waiting → `WaitingForResident { slot }`. `false`: it already waited for `slot`.
    pub(crate) fn wait_for_resident(&mut self, slot: usize) -> bool {
        match self.phase {
            Phase::WaitingForResident { slot: waited } if waited == slot => false,
            Phase::Idle | Phase::WaitingForResident { .. } => {
                self.phase = Phase::WaitingForResident { slot };
                true
            }
            _ => {
                debug_assert!(
                    false,
                    "a scope that is {:?} cannot wait for its resident",
                    self.kind()
                );
                false
            }
        }
    }

    /// `WaitingForResident` → Idle (its resident is gone); any other phase is kept.
    pub(crate) fn stop_waiting_for_resident(&mut self) {
        if let Phase::WaitingForResident { .. } = self.phase {
            self.phase = Phase::Idle;
        }
    }

    /// The restore failures a scope waiting to retry has had (its next attempt continues them).
    pub(crate) fn retry_streak(&self) -> Option<Streak> {
        match self.phase {
            Phase::RetryWait { streak } => Some(streak),
            _ => None,
        }
    }

    /// Idle, waiting or `RetryWait` → `Running`.
    pub(crate) fn begin_turn(&mut self, running: Running<I>) {
        debug_assert!(
            matches!(
                self.phase,
                Phase::Idle | Phase::WaitingForResident { .. } | Phase::RetryWait { .. }
            ),
            "a scope that is {:?} cannot begin a turn",
            self.kind()
        );
        self.phase = Phase::Running(Box::new(running));
    }

    /// `Running` → Idle: the turn is over, and is handed back to decide what follows
    /// ([`ScopeState::wait_to_retry`], [`ScopeState::settle`] or nothing). Any other phase is
    /// kept (`None`: no turn runs).
    pub(crate) fn end_turn(&mut self) -> Option<Running<I>> {
        match std::mem::take(&mut self.phase) {
            Phase::Running(running) => Some(*running),
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// Idle, right after [`ScopeState::end_turn`] → `RetryWait`.
    pub(crate) fn wait_to_retry(&mut self, streak: Streak) {
        self.after_turn(Phase::RetryWait { streak });
    }

    /// Idle, right after [`ScopeState::end_turn`] → `Settling`.
    pub(crate) fn settle(&mut self, settle: Settle) {
        self.after_turn(Phase::Settling(settle));
    }

    fn after_turn(&mut self, next: Phase<I>) {
        match self.phase {
            Phase::Idle => self.phase = next,
            _ => debug_assert!(
                false,
                "a scope that is {:?} did not just end a turn",
                self.kind()
            ),
        }
    }

    /// `RetryWait` → Idle: no restore is pending any more (the scope was abandoned).
    pub(crate) fn give_up_retry(&mut self) {
        if let Phase::RetryWait { .. } = self.phase {
            self.phase = Phase::Idle;
        }
    }

    /// `Settling` → Idle, handing back what was settling; any other phase is kept.
    pub(crate) fn finish_settling(&mut self) -> Option<Settle> {
        match std::mem::take(&mut self.phase) {
            Phase::Settling(settle) => Some(settle),
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// The phase's name, for assertions.
    fn kind(&self) -> &'static str {
        match self.phase {
            Phase::Idle => "idle",
            Phase::WaitingForResident { .. } => "waiting for its resident",
            Phase::Running(_) => "running",
            Phase::RetryWait { .. } => "waiting to retry",
            Phase::Settling(_) => "settling",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Moment;

    fn running(slot: usize) -> Running<String> {
        Running {
            slot,
            plan: Plan::default(),
            inputs: vec!["e1".to_string()],
            steered: Vec::new(),
            cancel_requested: false,
            session_id: None,
            abandoned: false,
            config: SessionConfig::default(),
            window: Vec::new(),
            said: None,
            retry: None,
        }
    }

    fn settle() -> Settle {
        Settle {
            slot: 0,
            session_id: "s1".to_string(),
            window: Vec::new(),
            triggers: vec!["e1".to_string()],
            reply: None,
            handoff_delivered: false,
        }
    }

    fn streak() -> Streak {
        Streak {
            attempts: 1,
            first_at: Moment::from_elapsed(std::time::Duration::ZERO),
            next_at: Moment::from_elapsed(std::time::Duration::from_secs(1)),
        }
    }

    #[test]
    fn a_turn_runs_ends_and_settles_then_the_scope_is_idle() {
        let mut state = ScopeState::<String>::default();
        state.begin_turn(running(2));
        assert_eq!(state.running().map(|r| r.slot), Some(2));
        let ended = state.end_turn().expect("a turn ran");
        assert_eq!(ended.slot, 2);
        assert!(matches!(state.phase(), Phase::Idle));
        state.settle(settle());
        assert!(state.settling_mut().is_some());
        assert_eq!(state.finish_settling(), Some(settle()));
        assert!(matches!(state.phase(), Phase::Idle));
    }

    #[test]
    fn a_retry_wait_hands_its_streak_to_the_next_turn_or_is_given_up() {
        let mut state = ScopeState::<String>::default();
        state.begin_turn(running(0));
        state.end_turn();
        state.wait_to_retry(streak());
        assert_eq!(state.retry_streak(), Some(streak()));
        state.give_up_retry();
        assert!(matches!(state.phase(), Phase::Idle));
        assert_eq!(state.retry_streak(), None);
    }

    #[test]
    fn a_late_settlement_or_turn_end_leaves_a_running_turn_alone() {
        let mut state = ScopeState::<String>::default();
        state.begin_turn(running(1));
        assert_eq!(state.finish_settling(), None);
        state.stop_waiting_for_resident();
        state.give_up_retry();
        assert_eq!(state.running().map(|r| r.slot), Some(1));
        let mut settling = ScopeState::<String>::default();
        settling.begin_turn(running(1));
        settling.end_turn();
        settling.settle(settle());
        assert!(settling.end_turn().is_none());
        assert!(settling.settling_mut().is_some());
    }

    #[test]
    fn waiting_for_a_resident_is_recorded_once_per_slot() {
        let mut state = ScopeState::<String>::default();
        assert!(state.wait_for_resident(3));
        assert!(!state.wait_for_resident(3));
        assert!(state.wait_for_resident(4));
        state.stop_waiting_for_resident();
        assert!(matches!(state.phase(), Phase::Idle));
    }

    #[test]
    #[should_panic(expected = "did not just end a turn")]
    fn settling_a_running_scope_is_refused() {
        let mut state = ScopeState::<String>::default();
        state.begin_turn(running(0));
        state.settle(settle());
    }
}
