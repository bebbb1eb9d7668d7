//! Abandonment: the in-process decisions that end a scope's session on purpose (`!rotate`, a
//! model switch the agent cannot apply in place, the agent removed from the channel). The
//! receipt goes in the same step, the scope's resident is disposed and its live sessions are
//! released, and the next `session/new` asks for a fresh conversation.

use crate::behaviours::Behaviour;
use crate::decision::StoreOp;
use crate::lifecycle::Lifecycle;
use crate::reach::NextSession;
use crate::receipt_view::Belief;
use crate::scope::{Input, Scope};

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// An in-process decision to abandon `scope`'s session: its resident goes, the receipt goes
    /// in the same step, and the next `session/new` asks for a fresh session. `live` lists the
    /// scope's sessions that idle workers still hold (worker slot, session id): they are released
    /// too.
    pub fn abandon(&mut self, scope: &K, live: Vec<(usize, String)>, now: crate::clock::Moment) {
        if self.has(Behaviour::Residency) {
            self.dispose(scope, crate::residents::DisposeReason::Abandoned);
        }
        for (slot, session_id) in live {
            self.release(scope, slot, &session_id);
        }
        self.mark_abandoned(scope);
        let state = self.state(scope);
        let expect = state.receipt.belief.expectation(now);
        state.receipt.belief = Belief::Absent;
        self.store(StoreOp::Remove {
            scope: scope.clone(),
            expect,
        });
    }

    /// The agent was removed from `channel`: every session there is abandoned (residents are
    /// released; the harness drops the channel's other sessions from its workers).
    pub fn abandon_channel(&mut self, channel: &str) {
        if self.has(Behaviour::Residency) {
            self.dispose_channel(channel);
        }
        let scopes: Vec<K> = self
            .scopes
            .keys()
            .filter(|k| k.channel() == channel)
            .cloned()
            .collect();
        for scope in scopes {
            self.mark_abandoned(&scope);
            self.state(&scope).receipt.belief = Belief::Absent;
        }
        self.store(StoreOp::RemoveChannel {
            channel: channel.to_string(),
        });
    }

    /// The bookkeeping of an abandonment: a running turn's session is not kept, the next
    /// `session/new` asks for a fresh session, and no restore is pending or given up on.
    pub(crate) fn mark_abandoned(&mut self, scope: &K) {
        let state = self.state(scope);
        if let Some(running) = state.running_mut() {
            running.abandoned = true;
        }
        state.give_up_retry();
        state.next = NextSession::Fresh;
        state.known = None;
    }
}
