//! Admission and the start of a turn: the transition from waiting to running.
//!
//! A scope's turn starts once placement found it a worker (see [`crate::placement`]). How its
//! session is reached is decided here, once per turn ([`crate::reach::decide`]), then shaped by
//! the behaviours that apply (continuity's handoffs and first context, a model switched in
//! place); the scope's phase becomes `Phase::Running`.

use crate::behaviours::Behaviour;
use crate::clock::Moment;
use crate::decision::NoticeCause;
use crate::gate::AgentCaps;
use crate::lifecycle::Lifecycle;
use crate::phase::Running;
use crate::reach::{self, Live, NextSession, Plan, Reach, Situation};
use crate::receipt_view::{Belief, Freshness};
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// A message for `scope` was admitted (it waits in the harness's queue). A message that is
    /// its own thread's root starts a thread this harness has never seen: nothing can have been
    /// stored for it, so its first turn needs no receipt read. With residency and steering, a
    /// message for a running scope is tracked until the turn absorbs it.
    pub fn admitted(&mut self, scope: &K, input: &I) {
        let state = self.state(scope);
        let unknown = state.receipt.belief == Belief::Unknown;
        let reading = matches!(state.receipt.freshness, Freshness::Reading { .. });
        if unknown && !reading && scope.thread_root() == Some(input.id()) {
            state.receipt.belief = Belief::Absent;
            state.receipt.freshness = Freshness::Fresh;
        }
        if self.has(Behaviour::Residency) {
            self.steered_in(scope, input);
        }
    }

    /// Starts `scope`'s turn on worker `slot` with `inputs` (the harness claimed the worker and
    /// took the batch): decides how the session is reached, once. `live` is the session the
    /// worker holds for the scope (if any), `caps` what the agent advertised.
    pub fn start(
        &mut self,
        scope: &K,
        slot: usize,
        inputs: Vec<I>,
        live: Option<String>,
        caps: Option<AgentCaps>,
        now: Moment,
    ) -> Plan {
        let config = self.session.clone();
        let config = &config;
        if self.has(Behaviour::Residency) {
            self.leaving_resident(scope, slot, live.as_deref());
        }
        let resume = self.config.resume;
        let continuity = self.has(Behaviour::Continuity);
        let restore = self.restore_method(caps);
        let switch_models_in_place = self.has(Behaviour::ConfigInPlace);
        let delivery_persisted = self.has(Behaviour::DeltaContext);
        let state = self.state(scope);
        let retry = state.retry_streak();
        let live = live.map(|session_id| Live {
            current: state
                .known
                .as_ref()
                .is_none_or(|k| k.session_id != session_id || k.fingerprint == config.fingerprint),
            session_id,
        });
        // A retiring session is reached as if it continued: it is asked for its handoff first.
        let retiring = match &state.next {
            NextSession::Retire { reason } => Some(*reason),
            _ => None,
        };
        let next = match retiring {
            Some(_) => NextSession::Continue,
            None => state.next.clone(),
        };
        let (reach, discard) = reach::decide(Situation {
            live: live.as_ref(),
            next: &next,
            resume,
            receipt: &state.receipt,
            config,
            restore,
            switch_models_in_place,
        });
        let reach = strip_ledger(reach, delivery_persisted);
        let told = match &reach {
            Reach::Cold {
                reason: reach::ColdReason::StoreUnavailable,
            } => state.told_unreadable.replace(now).is_none(),
            _ => false,
        };
        let fresh = state.next == NextSession::Fresh;
        let mut plan = Plan {
            fresh,
            reach,
            discard,
            continues_after_loss: !continuity,
            ..Plan::default()
        };
        if continuity {
            self.shape_continuity(scope, &mut plan, retiring);
        }
        if self.has(Behaviour::ConfigInPlace) {
            self.plan_model_switch(scope, &mut plan);
        }
        let state = self.state(scope);
        state.receipt.consumed();
        state.begin_turn(Running {
            slot,
            plan: plan.clone(),
            inputs,
            steered: Vec::new(),
            cancel_requested: false,
            session_id: plan.hot_session().map(str::to_string),
            abandoned: false,
            config: config.clone(),
            window: Vec::new(),
            said: None,
            retry,
        });
        if let Some(session_id) = plan.discard.clone() {
            self.release(scope, slot, &session_id);
        }
        if told {
            let gets = self.replacement_gets();
            let text = crate::notice::store_unavailable(&gets);
            self.notice(scope, NoticeCause::StoreUnavailable, text);
        }
        self.next_start += 1;
        let cold_reason = match &plan.reach {
            Reach::Cold { reason } => Some(*reason),
            _ => None,
        };
        self.record(Record::TurnStarted {
            scope: scope.label(),
            start: self.next_start,
            slot,
            via: plan.reach.kind(),
            cold_reason,
        });
        plan
    }

    /// The ids of `scope`'s running turn's context window (reported by its task): what the
    /// persisted ledger may keep.
    pub fn window(&mut self, scope: &K, ids: Vec<String>) {
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) {
            running.window = ids;
        }
    }
}

/// A reopened session is seeded with the receipt's delivery ledger only when delivery is
/// persisted (with the delta context); otherwise it is shown the whole window again.
fn strip_ledger(reach: Reach, delivery_persisted: bool) -> Reach {
    if delivery_persisted {
        return reach;
    }
    match reach {
        Reach::Warm { mut record, method } => {
            record.delivery = None;
            Reach::Warm { record, method }
        }
        other => other,
    }
}
