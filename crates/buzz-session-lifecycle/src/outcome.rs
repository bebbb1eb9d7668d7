//! Turn outcomes: what a turn task reports while it runs, how a turn ended, and what each means
//! for the scope.

use crate::behaviours::Behaviour;
use crate::clock::Moment;
use crate::decision::NoticeCause;
use crate::gate::RestoreMethod;
use crate::lifecycle::Lifecycle;
use crate::mailbox::Opened;
use crate::phase::{Settle, TaskSaid};
use crate::reach::NextSession;
use crate::retry::AfterFailure;
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

/// How a turn ended, in the lifecycle's terms.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutcome {
    /// The agent answered; the reply is being published.
    Replied {
        /// The session that answered.
        session_id: String,
        /// Upstream's turn limit rotated the session after this turn (see the glossary in
        /// docs/ARCHITECTURE.md). With continuity the lifecycle retires sessions itself and the
        /// glue's hook no longer rotates: always `false` there.
        rotated: bool,
    },
    /// The owner cancelled the turn; its input is dropped.
    Cancelled,
    /// The owner rotated the session during the turn; its input is dropped.
    Rotated,
    /// The turn stopped to run again (a steer merge, a model switch, a stale plan): the harness
    /// hands its input back to the front of its queue, with these absorbed inputs merged in.
    Requeued {
        /// Ids of steered inputs the turn absorbed.
        extra: Vec<String>,
    },
    /// The agent reported an error (or the restore failed without a definitive answer, which
    /// the task reported separately); the input comes back.
    Failed {
        /// What the agent said (`None`: not an agent error, e.g. a protocol error), and who it
        /// is.
        failure: Option<(
            crate::classify::AgentFailure,
            crate::classify::AgentIdentity,
        )>,
    },
    /// The worker process died or the turn task crashed; the input comes back.
    WorkerLost,
}

/// What the harness does with a turn's input after [`Lifecycle::turn_end`].
#[derive(Debug, PartialEq, Eq)]
pub struct AfterTurn<I> {
    /// The failure does not count towards dead-lettering: the input goes back as a plain
    /// requeue (a restore retry, a stale plan).
    pub requeue_without_attempt: bool,
    /// Steered input the turn did not absorb: put back at the front of the scope's queue, before
    /// the harness hands back the turn's own input (so the order is kept).
    pub requeue_front: Vec<I>,
}

impl<I> Default for AfterTurn<I> {
    /// Nothing special: the harness handles the turn's input as upstream does.
    fn default() -> Self {
        AfterTurn {
            requeue_without_attempt: false,
            requeue_front: Vec::new(),
        }
    }
}

/// What a live session has been shown, read from the worker after a successful turn (after the
/// reply was published, so the agent's own reply is included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The session.
    pub session_id: String,
    /// A legacy agent already got the standing context in a user message.
    pub standing_context_sent: bool,
    /// Event ids shown to the session, as triggers or as context.
    pub event_ids: Vec<String>,
    /// The last usage the session reported.
    pub usage: Option<buzz_session_store::Usage>,
}

/// Whether a turn gave its session a pending handoff (only a plan shaped by continuity carries
/// one).
fn delivers_handoff<I>(running: &crate::phase::Running<I>) -> bool {
    matches!(running.plan.context, crate::reach::FirstContext::Handoff(_))
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// A turn task opened `scope`'s session.
    pub fn opened(&mut self, scope: &K, opened: Opened, now: Moment) {
        let label = scope.label();
        let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) else {
            return;
        };
        match opened {
            Opened::Restored { session_id, method } => {
                running.session_id = Some(session_id.clone());
                running.retry = None;
                let fingerprint = running.config.fingerprint;
                let abandoned = running.abandoned;
                self.record(Record::SessionRestored {
                    scope: label,
                    session_id: session_id.clone(),
                    method,
                });
                if !abandoned {
                    let record = self
                        .scopes
                        .get(scope)
                        .and_then(|s| s.receipt.belief.record())
                        .filter(|r| r.session_id == session_id);
                    let turns = record.and_then(|r| r.turns);
                    let model = record.and_then(|r| r.model.clone());
                    self.know(scope, &session_id, fingerprint, turns, model);
                }
            }
            Opened::Lost {
                session_id,
                method,
                detail,
            } => {
                running.retry = None;
                self.record(Record::SessionLost {
                    scope: label,
                    session_id,
                    method,
                });
                let gets = self.replacement_gets();
                let text = crate::notice::restore_lost(&detail, &gets);
                self.notice(scope, NoticeCause::SessionLost, text);
                if self.has(Behaviour::Continuity) {
                    self.lost_replan(scope);
                }
            }
            Opened::Created {
                session_id,
                model,
                permission_mode,
            } => {
                let handoff = match &running.plan.context {
                    crate::reach::FirstContext::Handoff(handoff) => Some(handoff.clone()),
                    _ => None,
                };
                running.session_id = Some(session_id.clone());
                running.retry = None;
                if running.abandoned {
                    // Opened by a turn that started before the scope was abandoned: it must not
                    // become the scope's receipt, and the fresh-session request still stands.
                    return;
                }
                let requested = running.config.clone();
                let state = self.state(scope);
                state.next = NextSession::Continue;
                self.know(
                    scope,
                    &session_id,
                    requested.fingerprint,
                    Some(0),
                    model.clone(),
                );
                if self.config.resume {
                    let mut record = buzz_session_store::SessionRecord::new(session_id);
                    record.model = model;
                    record.permission_mode = permission_mode;
                    record.requested_model = requested.requested_model;
                    record.requested_permission_mode = requested.requested_permission_mode;
                    if self.has(Behaviour::Continuity) {
                        record.turns = Some(0);
                        record.handoff = handoff;
                    }
                    self.put(scope, record, now);
                }
            }
        }
    }

    /// A turn task reported that its plan could not be carried out as decided: the worker no
    /// longer holds the session the plan continues.
    pub fn plan_stale(&mut self, scope: &K) {
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) {
            running.said = Some(TaskSaid::Stale);
        }
    }

    /// A turn task reported that reopening the stored session failed without a definitive
    /// answer (`detail` is what the agent said, or the timeout).
    pub fn restore_undecided(&mut self, scope: &K, method: RestoreMethod, detail: String) {
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) {
            running.said = Some(TaskSaid::Undecided { method, detail });
        }
    }

    /// `scope`'s turn ended with `outcome`.
    pub fn turn_end(&mut self, scope: &K, outcome: TurnOutcome, now: Moment) -> AfterTurn<I> {
        let mut after = AfterTurn {
            requeue_without_attempt: false,
            requeue_front: Vec::new(),
        };
        let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.end_turn()) else {
            return after;
        };
        let residency = self.has(Behaviour::Residency);
        if residency {
            after.requeue_front = self.unabsorbed(&outcome, &running);
        }
        let slot = running.slot;
        match (outcome, running.said.clone()) {
            (TurnOutcome::WorkerLost, _) => {
                if residency {
                    self.worker_lost(slot);
                }
                if let Some(streak) = running.retry {
                    // A restore that never got an answer keeps its streak: the next attempt
                    // continues it rather than starting over.
                    self.state(scope).wait_to_retry(streak);
                }
            }
            (_, Some(TaskSaid::Stale)) => {
                after.requeue_without_attempt = true;
                let stale = running.plan.hot_session().unwrap_or_default().to_string();
                if residency {
                    let reason = crate::residents::DisposeReason::AgentExit;
                    self.drop_live(scope, slot, &stale, reason);
                }
                self.record(Record::PlanStale {
                    scope: scope.label(),
                    session_id: stale,
                });
            }
            (_, Some(TaskSaid::Undecided { method, detail })) => {
                after.requeue_without_attempt = true;
                self.restore_failed(scope, running.retry, method, &detail, &running.inputs, now);
            }
            (
                TurnOutcome::Replied {
                    session_id,
                    rotated,
                },
                None,
            ) => {
                self.replied_turn(scope, &running, &session_id, rotated, now);
            }
            (TurnOutcome::Cancelled, None) => {
                if residency && let Some(session_id) = &running.session_id {
                    let reason = crate::residents::DisposeReason::Cancelled;
                    self.drop_live(scope, slot, session_id, reason);
                }
            }
            (TurnOutcome::Rotated, None) => {
                // The owner's `!rotate` already abandoned the scope; the turn's own session,
                // which the task dropped from memory, is closed.
                if let Some(session_id) = &running.session_id {
                    self.release(scope, slot, session_id);
                }
            }
            (TurnOutcome::Requeued { .. }, None) => {
                // Handed back to run again. If the scope was abandoned meanwhile (a model
                // switch, or a steer taken before the owner's `!rotate`), the turn's session is
                // released: the worker may still hold it, and nothing may continue it. Else (a
                // steered message merged) the re-run continues on the live session: it stays
                // resident, so the re-run goes to its worker, hot.
                if let Some(session_id) = &running.session_id {
                    if running.abandoned {
                        self.release(scope, slot, session_id);
                    } else if residency {
                        self.after_success(scope, &running, session_id);
                    }
                }
            }
            (TurnOutcome::Failed { failure }, None) => {
                if self.has(Behaviour::Continuity)
                    && let Some((failure, agent)) = &failure
                    && crate::exhaustion::is_exhausted(failure, agent)
                {
                    after.requeue_without_attempt = true;
                    let whole = matches!(
                        running.plan.context,
                        crate::reach::FirstContext::WholeThread { .. }
                    );
                    let session_id = running.session_id.as_deref();
                    let trigger = running.inputs.last().cloned();
                    let detail = &failure.message;
                    self.exhausted(scope, trigger, slot, session_id, whole, detail, now);
                    self.forget_if_bare(scope);
                    return after;
                }
                if residency && let Some(session_id) = &running.session_id {
                    let reason = crate::residents::DisposeReason::TurnFailed;
                    self.drop_live(scope, slot, session_id, reason);
                }
            }
        }
        self.forget_if_bare(scope);
        after
    }

    /// A successful turn: settle its ledger; rotate, release or keep its session.
    fn replied_turn(
        &mut self,
        scope: &K,
        running: &crate::phase::Running<I>,
        session_id: &str,
        rotated: bool,
        now: Moment,
    ) {
        let slot = running.slot;
        // An abandoned session's ledger is not committed: its receipt is gone.
        if !running.abandoned {
            self.state(scope).settle(Settle {
                slot,
                session_id: session_id.to_string(),
                window: running.window.clone(),
                triggers: running.inputs.iter().map(|i| i.id().to_string()).collect(),
                reply: None,
                handoff_delivered: delivers_handoff(running),
            });
        }
        if running.abandoned {
            self.release(scope, slot, session_id);
        } else if rotated {
            self.abandon(scope, vec![(slot, session_id.to_string())], now);
        } else {
            if self.has(Behaviour::Continuity) {
                self.count_turn(scope, session_id, now);
            }
            if self.has(Behaviour::Residency) {
                self.after_success(scope, running, session_id);
            }
        }
    }

    /// A restore failed without a definitive answer: keep the receipt and retry (bounded), or
    /// give up and answer from a new session.
    fn restore_failed(
        &mut self,
        scope: &K,
        streak: Option<crate::retry::Streak>,
        method: RestoreMethod,
        detail: &str,
        inputs: &[I],
        now: Moment,
    ) {
        let trigger = inputs.last().cloned();
        match self.config.retry.after_failure(streak, now) {
            AfterFailure::Retry { streak, first } => {
                self.state(scope).wait_to_retry(streak);
                self.record(Record::RestoreRetry {
                    scope: scope.label(),
                    method,
                    attempts: streak.attempts,
                    retry_in_ms: u64::try_from(streak.next_at.since(now).as_millis())
                        .unwrap_or(u64::MAX),
                });
                if first && let Some(trigger) = trigger {
                    let gets = self.replacement_gets();
                    let text = crate::notice::restore_retrying(
                        detail,
                        self.config.retry.give_up_after,
                        &gets,
                        self.config.owner_configured,
                    );
                    self.notice_about(scope, trigger, NoticeCause::RestoreRetrying, text);
                }
            }
            AfterFailure::GiveUp { attempts, waited } => {
                self.state(scope).next = NextSession::GaveUp;
                self.record(Record::RestoreAbandoned {
                    scope: scope.label(),
                    method,
                    attempts,
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
                if let Some(trigger) = trigger {
                    let gets = self.replacement_gets();
                    let text = crate::notice::restore_abandoned(detail, &gets);
                    self.notice_about(scope, trigger, NoticeCause::RestoreAbandoned, text);
                }
            }
        }
    }
}
