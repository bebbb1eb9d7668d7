//! The lifecycle's store operations for one scope: when its receipt must be read before a start
//! or checked beside a hot turn, and the conditional write of a new receipt. The answers come
//! back as inputs ([`Lifecycle::read_done`](crate::placement), the driver's settled writes).

use crate::clock::Moment;
use crate::lifecycle::Lifecycle;
use crate::placement::StoreHealth;
use crate::reach::NextSession;
use crate::receipt_view::{Belief, Freshness};
use crate::scope::{Input, Scope};

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// Whether `scope`'s next start needs its receipt read first: with resume on, before every
    /// start that would continue or reopen the scope's session (not before a new session the
    /// lifecycle already decided on).
    pub(crate) fn needs_read(&self, scope: &K) -> bool {
        if !self.config.resume {
            return false;
        }
        match self.scopes.get(scope) {
            None => true,
            Some(state) => state.next == NextSession::Continue && !state.receipt.ready_for_start(),
        }
    }

    /// Whether `scope`'s live session should have its receipt checked beside the turn that
    /// continues it: the store answers, the receipt has not been read for this start, and no
    /// check of it is in flight already.
    pub(crate) fn needs_check(&self, scope: &K, store: StoreHealth) -> bool {
        let checking = self
            .scopes
            .get(scope)
            .is_some_and(|s| matches!(s.receipt.freshness, Freshness::Checking { .. }));
        store == StoreHealth::Answering && !checking && self.needs_read(scope)
    }

    /// Reads `scope`'s receipt (placement asked for it): the scope waits until the read answers
    /// or the driver gives up on it.
    pub fn read_receipt(&mut self, scope: &K, now: Moment) {
        self.state(scope).receipt.freshness = Freshness::Reading { since: now };
        self.store(crate::decision::StoreOp::Read {
            scope: scope.clone(),
        });
    }

    /// Checks `scope`'s receipt beside the turn that now continues its live session (placement
    /// asked for it with [`Placed::RunChecked`](crate::placement::Placed::RunChecked); called after [`Lifecycle::start`]): nothing
    /// waits for the answer, which [`Lifecycle::read_done`] applies when it comes.
    pub fn check_receipt(&mut self, scope: &K, now: Moment) {
        self.state(scope).receipt.freshness = Freshness::Checking { since: now };
        self.store(crate::decision::StoreOp::Read {
            scope: scope.clone(),
        });
    }

    /// Writes `record` as `scope`'s receipt, conditionally on what the lifecycle believes the
    /// store holds now; from then on it believes `record`.
    pub(crate) fn put(
        &mut self,
        scope: &K,
        record: buzz_session_store::SessionRecord,
        now: Moment,
    ) {
        let state = self.state(scope);
        let expect = state.receipt.belief.expectation(now);
        state.receipt.belief = Belief::Present(record.clone());
        self.store(crate::decision::StoreOp::Put {
            scope: scope.clone(),
            record,
            expect,
        });
    }
}
