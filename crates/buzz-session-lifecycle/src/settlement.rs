//! Settlement: after a successful turn's reply is published, what its session has been shown is
//! committed to the receipt — bounded, in this one place, to what can still come back.

use buzz_session_store::TurnCommit;

use crate::behaviours::Behaviour;
use crate::decision::StoreOp;
use crate::lifecycle::Lifecycle;
use crate::outcome::Delivered;
use crate::phase::{Phase, Settle};
use crate::scope::{Input, Scope};

/// The ledger worth persisting: of everything the session has been shown, only what can still
/// appear in a context window — the turn's window, its triggers and its reply. Older ids have
/// left the window for good (it only moves forward), so remembering them would only grow the
/// receipt in long threads. Sorted and unique.
pub fn bound_ledger(
    shown: &[String],
    window: &[String],
    triggers: &[String],
    reply: Option<&str>,
) -> Vec<String> {
    let mut kept: Vec<String> = shown
        .iter()
        .filter(|id| window.contains(id) || triggers.contains(id) || reply == Some(id.as_str()))
        .cloned()
        .collect();
    kept.sort_unstable();
    kept.dedup();
    kept
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// The reply to `scope`'s successful turn was published as event `reply_id`. It belongs to
    /// the session that wrote it and must never come back to it as context.
    pub fn replied(&mut self, scope: &K, reply_id: &str) {
        if let Some(settle) = self.scopes.get_mut(scope).and_then(|s| s.settling_mut()) {
            settle.reply = Some(reply_id.to_string());
        }
    }

    /// Successful turns waiting for [`Lifecycle::settled`], with their worker slots.
    pub fn settling(&self) -> Vec<(K, usize)> {
        self.scopes
            .iter()
            .filter_map(|(k, s)| match s.phase() {
                Phase::Settling(settle) => Some((k.clone(), settle.slot)),
                _ => None,
            })
            .collect()
    }

    /// After a successful turn was published and marked handled: what the session has been
    /// shown (`delivered`, read from the worker; `None` if the worker no longer holds the
    /// session). The turn's updates are committed to the receipt: the bounded ledger (with
    /// delivery persisted), the turn count, the usage and a delivered handoff (with continuity).
    pub fn settled(&mut self, scope: &K, delivered: Option<Delivered>, now: crate::clock::Moment) {
        let Some(state) = self.scopes.get_mut(scope) else {
            return;
        };
        let Some(settle) = state.finish_settling() else {
            return;
        };
        let delivered = delivered.filter(|d| d.session_id == settle.session_id);
        let continuity = self.has(Behaviour::Continuity);
        if let Some(delivered) = delivered
            && self.config.resume
            && (self.has(Behaviour::DeltaContext) || continuity)
        {
            if continuity && let Some(usage) = &delivered.usage {
                self.usage_settled(scope, &settle.session_id, usage, now);
            }
            let commit = self.turn_commit(scope, &settle, delivered);
            self.store(StoreOp::Commit {
                scope: scope.clone(),
                commit,
            });
        }
        self.forget_if_bare(scope);
    }

    /// What a settled turn writes into the receipt.
    fn turn_commit(&mut self, scope: &K, settle: &Settle, delivered: Delivered) -> TurnCommit {
        let ledger = if self.has(Behaviour::DeltaContext) {
            bound_ledger(
                &delivered.event_ids,
                &settle.window,
                &settle.triggers,
                settle.reply.as_deref(),
            )
        } else {
            Vec::new()
        };
        let mut commit = TurnCommit {
            session_id: settle.session_id.clone(),
            delivered_event_ids: ledger,
            standing_context_sent: delivered.standing_context_sent,
            turns: None,
            usage: None,
            handoff_delivered: false,
        };
        if self.has(Behaviour::Continuity) {
            commit.turns = self
                .scopes
                .get(scope)
                .and_then(|s| s.known.as_ref())
                .filter(|k| k.session_id == settle.session_id)
                .and_then(|k| k.turns);
            commit.usage = delivered.usage;
            commit.handoff_delivered = settle.handoff_delivered;
        }
        // The store merges the commit into the receipt that names its session; believe what it
        // will hold (the receipts this process writes later start from the belief).
        if let crate::receipt_view::Belief::Present(record) = &mut self.state(scope).receipt.belief
            && record.session_id == settle.session_id
        {
            buzz_session_store::rules::apply_commit(record, &commit);
        }
        commit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_ledger_keeps_only_what_can_come_back() {
        let shown = ids(&["old1", "w2", "t1", "r1", "w1", "old2", "w1"]);
        let kept = bound_ledger(&shown, &ids(&["w1", "w2", "w3"]), &ids(&["t1"]), Some("r1"));
        assert_eq!(kept, ids(&["r1", "t1", "w1", "w2"]));
        assert!(bound_ledger(&shown, &[], &[], None).is_empty());
    }
}
