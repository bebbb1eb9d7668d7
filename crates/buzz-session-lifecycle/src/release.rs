//! Abandoning and releasing sessions: the decisions that end a scope's session on purpose.
//!
//! An abandonment (`!rotate`, a model switch, a rotation after a limit, the agent removed from
//! the channel) forgets the receipt in the same step and makes the next session a fresh one. A
//! release frees one session on its worker; the scope does not start again before the release
//! finished, so a session is never closed while it is being reopened. Agent death is neither: the
//! sessions died with the process, and the receipt stays so the next turn can reopen it.

use crate::decision::Command;
use crate::lifecycle::Lifecycle;
use crate::scope::{Input, Scope};

impl<K: Scope, I: Input> Lifecycle<K, I> {
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
