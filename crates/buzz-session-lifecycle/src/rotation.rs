//! Continuity across rotations (patch `continuity-handoff`, [`Behaviour::Continuity`]).
//!
//! When the harness itself must replace a thread's live session, the thread must not lose what
//! its agent knew. The rules:
//!
//! * **Limits survive restores.** A session's completed turns are counted here and carried with
//!   the receipt, so a session reopened after a restart is retired where one that never left
//!   memory would be (`--max-turns-per-session`). A receipt written before the count existed
//!   reads as unknown: the session is counted from its reopening.
//! * **Retire with a handoff.** A session that reaches the turn limit, whose reported usage
//!   reaches `--rotate-at-context-percent` of its context, or that cannot take a configuration
//!   change in place is *retired*: the receipt says so at once; the thread's next turn first asks
//!   the old session for a handoff (an instruction in our words, `--handoff-prompt`; the answer
//!   is never published and permission requests during it are refused), keeps the answer in the
//!   receipt, closes the old session and opens a new one that gets the handoff as its first
//!   context, labelled as such. The receipt holds the handoff until the new session has received
//!   it, so a restart or an idle sleep in between loses nothing.
//! * **Exhausted or gone: the whole thread.** A session that refuses a prompt as too long
//!   ([`crate::exhaustion`]), a stored session the agent no longer has, an old session that
//!   cannot answer the handoff, and a restore the harness gave up on are replaced by a new
//!   session that gets the whole thread (the whole conversation for a conversation scope),
//!   newest first within `--whole-thread-budget-kb`, instead of the last messages only. The same
//!   prompt is never sent again into the session that refused it.
//! * **The thread is told once**, in one line, what happened and what the new session was given.
//!
//! The owner's `!rotate` stays a clean slate: no handoff (see [`crate::release`]).

use buzz_session_store::{Handoff, MAX_HANDOFF_TEXT_BYTES, Retirement, Usage};

use crate::behaviours::Behaviour;
use crate::clock::Moment;
use crate::decision::NoticeCause;
use crate::lifecycle::Lifecycle;
use crate::reach::{ColdReason, FirstContext, NextSession, Plan, Reach, RetireFrom, RetireStep};
pub use crate::retirement::{
    ContinuityConfig, DEFAULT_HANDOFF_INSTRUCTION, DEFAULT_WHOLE_THREAD_BUDGET_BYTES, RetireReason,
    used_percent,
};
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

impl<K: Scope, I: Input> Lifecycle<K, I> {
    fn budget(&self) -> usize {
        self.config.continuity.whole_thread_budget_bytes
    }

    fn whole_thread(&self) -> FirstContext {
        FirstContext::WholeThread {
            budget_bytes: self.budget(),
        }
    }

    /// Shapes a plan decided by [`crate::reach::decide`] for continuity: a retiring session is
    /// asked for its handoff first, a replacement gets its first context, and what a receipt says
    /// about retirement and pending handoffs is honoured after a restart.
    pub(crate) fn shape_continuity(
        &mut self,
        scope: &K,
        plan: &mut Plan,
        retiring: Option<RetireReason>,
    ) {
        let state = self.state(scope);
        let next = state.next.clone();
        let record = state.receipt.belief.record().cloned();
        let retire_from_receipt = match (&plan.reach, &record) {
            (Reach::Warm { record, .. }, _) if record.handoff.is_none() => record
                .retired
                .as_ref()
                .map(|r| RetireReason::from_code(&r.reason)),
            _ => None,
        };
        if let Some(reason) = retiring.or(retire_from_receipt) {
            if reason == RetireReason::Exhausted {
                plan.reach = Reach::Cold {
                    reason: ColdReason::Exhausted,
                };
                plan.context = self.whole_thread();
                return;
            }
            let reached = std::mem::replace(
                &mut plan.reach,
                Reach::Cold {
                    reason: ColdReason::Retired,
                },
            );
            let from = match reached {
                Reach::Hot { session_id } => RetireFrom::Hot { session_id },
                Reach::Warm { record, method } => RetireFrom::Warm { record, method },
                Reach::Cold { .. } => {
                    // Nothing left to ask: the replacement gets the whole thread.
                    plan.context = self.whole_thread();
                    return;
                }
            };
            plan.discard = None;
            plan.retire = Some(RetireStep {
                from,
                reason,
                instruction: self.config.continuity.handoff_instruction.clone(),
            });
            return;
        }
        if let NextSession::Replace { context, .. } = next {
            plan.context = context;
            return;
        }
        // A new session the harness did not choose (a restore given up on, a store that did not
        // answer in time) gets the whole thread rather than the last messages only.
        if let Reach::Cold {
            reason: ColdReason::RestoreAbandoned | ColdReason::StoreUnavailable,
        } = plan.reach
        {
            plan.context = self.whole_thread();
            return;
        }
        // A receipt that holds a handoff: the retired session's successor has not received it
        // yet (or has not been opened yet).
        let Some(record) = record else {
            return;
        };
        let Some(handoff) = record.handoff.clone() else {
            return;
        };
        match &plan.reach {
            Reach::Warm { record: warm, .. } if warm.retired.is_some() => {
                plan.reach = Reach::Cold {
                    reason: ColdReason::Retired,
                };
                plan.context = FirstContext::Handoff(handoff);
            }
            Reach::Warm { .. } => plan.context = FirstContext::Handoff(handoff),
            Reach::Hot { session_id } if *session_id == record.session_id => {
                plan.context = FirstContext::Handoff(handoff);
            }
            _ => {}
        }
    }

    /// A successful turn on `session_id` completed: count it, and retire the session when it
    /// reached the turn limit.
    pub(crate) fn count_turn(&mut self, scope: &K, session_id: &str, now: Moment) {
        let max = self.config.continuity.max_turns;
        let Some(known) = self.state(scope).known.as_mut() else {
            return;
        };
        if known.session_id != session_id {
            return;
        }
        let turns = known.turns.unwrap_or(0) + 1;
        known.turns = Some(turns);
        if max.is_some_and(|max| turns >= max) {
            self.retire(scope, session_id, RetireReason::TurnLimit, now);
        }
    }

    /// `session_id` reported `usage` after a successful turn: retire it when it reached the
    /// configured share of its context.
    pub(crate) fn usage_settled(
        &mut self,
        scope: &K,
        session_id: &str,
        usage: &Usage,
        now: Moment,
    ) {
        let Some(threshold) = self.config.continuity.rotate_at_context_percent else {
            return;
        };
        let retiring = matches!(self.state(scope).next, NextSession::Retire { .. });
        if !retiring && used_percent(usage).is_some_and(|p| p >= u64::from(threshold)) {
            self.retire(scope, session_id, RetireReason::ContextNearlyFull, now);
        }
    }

    /// Retires `session_id`: its next turn asks it for a handoff first. The receipt says so at
    /// once, so a restart in between still retires it.
    pub(crate) fn retire(
        &mut self,
        scope: &K,
        session_id: &str,
        reason: RetireReason,
        now: Moment,
    ) {
        let state = self.state(scope);
        state.next = NextSession::Retire { reason };
        let record = state
            .receipt
            .belief
            .record()
            .filter(|r| r.session_id == session_id)
            .cloned();
        self.record(Record::SessionRetired {
            scope: scope.label(),
            session_id: session_id.to_string(),
            reason,
        });
        if let Some(mut record) = record.filter(|_| self.config.resume) {
            record.retired = Some(Retirement {
                reason: reason.code().to_string(),
            });
            self.put(scope, record, now);
        }
    }

    /// The running turn asked the retiring session `from_session_id` for its handoff and got
    /// `text`: the receipt keeps it, the old session is released, and the new session the turn
    /// opens starts from it.
    pub fn handoff_taken(&mut self, scope: &K, from_session_id: &str, text: &str, now: Moment) {
        let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) else {
            return;
        };
        let Some(step) = running.plan.retire.take() else {
            return;
        };
        let slot = running.slot;
        let handoff = handoff_of(&step, text);
        running.plan.context = FirstContext::Handoff(handoff.clone());
        self.record(Record::HandoffTaken {
            scope: scope.label(),
            from_session_id: from_session_id.to_string(),
            bytes: handoff.text.len(),
        });
        let state = self.state(scope);
        state.next = NextSession::Replace {
            reason: ColdReason::Retired,
            context: FirstContext::Handoff(handoff.clone()),
        };
        let record = state
            .receipt
            .belief
            .record()
            .filter(|r| r.session_id == from_session_id)
            .cloned();
        if let Some(mut record) = record.filter(|_| self.config.resume) {
            record.retired = Some(Retirement {
                reason: step.reason.code().to_string(),
            });
            record.handoff = Some(handoff);
            self.put(scope, record, now);
        }
        self.drop_retired(scope, slot, from_session_id);
        let text = crate::notice::handed_off(step.reason, &self.config.continuity);
        self.notice(scope, NoticeCause::Retired, text);
    }

    /// The retiring session `from_session_id` could not answer the handoff (`detail`): the turn
    /// stops, and the thread continues in a new session that gets the whole thread.
    pub fn handoff_unavailable(&mut self, scope: &K, from_session_id: &str, detail: &str) {
        let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) else {
            return;
        };
        let slot = running.slot;
        running.plan.retire = None;
        self.record(Record::HandoffUnavailable {
            scope: scope.label(),
            from_session_id: from_session_id.to_string(),
        });
        let context = self.whole_thread();
        self.state(scope).next = NextSession::Replace {
            reason: ColdReason::Retired,
            context,
        };
        self.drop_retired(scope, slot, from_session_id);
        let text = crate::notice::handoff_unavailable(detail, self.budget());
        self.notice(scope, NoticeCause::Retired, text);
    }

    /// The running turn's session refused its prompt as too long (`detail`): the session ends,
    /// the input goes back (not a failed attempt), and the next session gets the whole thread —
    /// or, if that is what just overflowed, only upstream's window.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exhausted(
        &mut self,
        scope: &K,
        trigger: Option<I>,
        slot: usize,
        session_id: Option<&str>,
        was_whole_thread: bool,
        detail: &str,
        now: Moment,
    ) {
        let context = if was_whole_thread {
            FirstContext::Window
        } else {
            self.whole_thread()
        };
        self.state(scope).next = NextSession::Replace {
            reason: ColdReason::Exhausted,
            context,
        };
        if let Some(session_id) = session_id {
            self.record(Record::SessionExhausted {
                scope: scope.label(),
                session_id: session_id.to_string(),
            });
            let record = self
                .state(scope)
                .receipt
                .belief
                .record()
                .filter(|r| r.session_id == session_id)
                .cloned();
            if let Some(mut record) = record.filter(|_| self.config.resume) {
                record.retired = Some(Retirement {
                    reason: RetireReason::Exhausted.code().to_string(),
                });
                self.put(scope, record, now);
            }
            self.drop_retired(scope, slot, session_id);
        }
        if let Some(trigger) = trigger {
            let text = crate::notice::exhausted(detail, self.budget(), was_whole_thread);
            self.notice_about(scope, trigger, NoticeCause::Exhausted, text);
        }
    }

    /// The agent no longer has the stored session (the turn stopped to be planned again): the
    /// next session gets the whole thread.
    pub(crate) fn lost_replan(&mut self, scope: &K) {
        let context = self.whole_thread();
        self.state(scope).next = NextSession::Replace {
            reason: ColdReason::SessionLost,
            context,
        };
    }

    /// A retired or exhausted session leaves: its resident is disposed, or it is released.
    fn drop_retired(&mut self, scope: &K, slot: usize, session_id: &str) {
        if self.has(Behaviour::Residency) {
            let reason = crate::residents::DisposeReason::Replaced;
            self.drop_live(scope, slot, session_id, reason);
        } else {
            self.release(scope, slot, session_id);
        }
        if let Some(state) = self.scopes.get_mut(scope)
            && state
                .known
                .as_ref()
                .is_some_and(|k| k.session_id == session_id)
        {
            state.known = None;
        }
    }
}

/// The handoff the session `step` retires gave, as its successor receives it.
pub fn handoff_of(step: &RetireStep, text: &str) -> Handoff {
    Handoff {
        text: bounded(text),
        reason: step.reason.code().to_string(),
        from_session_id: step.from.session_id().to_string(),
    }
}

/// A handoff text within the receipt's bound (cut at a character boundary).
fn bounded(text: &str) -> String {
    if text.len() <= MAX_HANDOFF_TEXT_BYTES {
        return text.to_string();
    }
    let mut cut = MAX_HANDOFF_TEXT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_through_the_receipt_and_usage_reads_as_a_share() {
        for r in [
            RetireReason::TurnLimit,
            RetireReason::ContextNearlyFull,
            RetireReason::ModelChange,
            RetireReason::Exhausted,
        ] {
            assert_eq!(RetireReason::from_code(r.code()), r);
        }
        assert_eq!(RetireReason::from_code("later"), RetireReason::TurnLimit);
        let usage = |used, size| Usage {
            used_tokens: used,
            context_tokens: size,
        };
        assert_eq!(used_percent(&usage(150_000, Some(200_000))), Some(75));
        assert_eq!(used_percent(&usage(150_000, None)), None);
        assert_eq!(used_percent(&usage(1, Some(0))), None);
        let long = "é".repeat(MAX_HANDOFF_TEXT_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_HANDOFF_TEXT_BYTES && long.starts_with(&cut));
    }
}
