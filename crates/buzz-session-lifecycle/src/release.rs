//! Abandoning and releasing sessions: the decisions that end a scope's session on purpose.
//!
//! An abandonment (`!rotate`, a model switch, a rotation after a limit, the agent removed from
//! the channel) forgets the receipt in the same step and makes the next session a fresh one. A
//! release frees one session on its worker; the scope does not start again before the release
//! finished, so a session is never closed while it is being reopened. Agent death is neither: the
//! sessions died with the process, and the receipt stays so the next turn can reopen it.

use crate::behaviours::Behaviour;
use crate::decision::{Command, StoreOp};
use crate::lifecycle::Lifecycle;
use crate::phase::Phase;
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
        if matches!(state.phase, Phase::RetryWait { .. }) {
            state.phase = Phase::Idle;
        }
        state.next = NextSession::Fresh;
        state.known = None;
    }

    /// Asks the harness to free a session, once: a session already being released (e.g. a
    /// resident disposed by `!rotate` whose turn then ends rotated) is not released again.
    pub(crate) fn release(&mut self, scope: &K, slot: usize, session_id: &str) {
        let releasing = &mut self.state(scope).releasing;
        if releasing.iter().any(|s| s == session_id) {
            return;
        }
        releasing.push(session_id.to_string());
        self.out.commands.push(Command::Release {
            scope: scope.clone(),
            slot,
            session_id: session_id.to_string(),
        });
    }

    /// A [`Command::Release`] of `scope` finished (or was given up because the worker is gone).
    pub fn released(&mut self, scope: &K, session_id: &str) {
        if let Some(state) = self.scopes.get_mut(scope) {
            state.releasing.retain(|s| s != session_id);
        }
        self.forget_if_bare(scope);
    }

    /// Sessions of scopes being released, with their scopes.
    pub fn releasing(&self) -> Vec<(K, String)> {
        self.scopes
            .iter()
            .flat_map(|(k, s)| s.releasing.iter().map(move |id| (k.clone(), id.clone())))
            .collect()
    }
}
