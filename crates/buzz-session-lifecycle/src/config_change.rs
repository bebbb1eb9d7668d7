//! Configuration changes in place (patch `model-switch-in-place`, behaviour `ConfigInPlace`).
//!
//! Upstream's `!model` applies to the whole harness by starting over: the addressed thread's
//! session is dropped, and every other thread whose session was opened under the old model loses
//! it at its next message (and after a restart, the same switch restored those sessions instead:
//! two paths, two behaviours). With this behaviour a model switch is applied to each thread's
//! session at its next turn with `session/set_config_option` (config `model`) — hot, and after a
//! restore too — and the receipt records the applied model; the session goes on. Only where the
//! agent cannot switch in place is a session replaced, and only for the thread the owner
//! addressed: its session is retired with a handoff (see [`crate::rotation`]). No other thread
//! loses its session over a configuration change; a restart with another `--model` behaves the
//! same way as `!model`.

use crate::clock::Moment;
use crate::decision::NoticeCause;
use crate::lifecycle::Lifecycle;
use crate::reach::{ModelSwitch, Plan, Reach};
use crate::retirement::RetireReason;
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// The owner switched the model in `scope`'s thread (`!model`): every session takes it at its
    /// next turn; this thread's must.
    pub(crate) fn model_addressed(&mut self, scope: &K) {
        self.state(scope).model_addressed = true;
    }

    /// Adds the model switch a continued or reopened session needs to `plan`.
    pub(crate) fn plan_model_switch(&mut self, scope: &K, plan: &mut Plan) {
        let Some(desired) = self.session.requested_model.clone() else {
            return;
        };
        let state = self.state(scope);
        let applied = match &plan.reach {
            Reach::Hot { session_id } => {
                let known = state.known.as_ref().filter(|k| k.session_id == *session_id);
                if known.is_some_and(|k| k.refused_model.as_deref() == Some(desired.as_str())) {
                    // Asked once, refused: the session keeps its model.
                    return;
                }
                known.and_then(|k| k.model.clone())
            }
            Reach::Warm { record, .. } => record.model.clone(),
            Reach::Cold { .. } => return,
        };
        if applied.as_deref() == Some(desired.as_str()) {
            state.model_addressed = false;
            return;
        }
        plan.switch_model = Some(ModelSwitch {
            model: desired,
            required: state.model_addressed,
        });
    }

    /// The running turn switched its session to `model` in place: the receipt records it.
    pub fn model_switched_in_place(&mut self, scope: &K, model: &str, now: Moment) {
        let session_id = self
            .scopes
            .get(scope)
            .and_then(|s| s.running())
            .and_then(|r| r.session_id.clone());
        let state = self.state(scope);
        state.model_addressed = false;
        if let Some(known) = state.known.as_mut() {
            known.model = Some(model.to_string());
        }
        self.record(Record::ModelSwitched {
            scope: scope.label(),
            model: model.to_string(),
        });
        let record = self
            .state(scope)
            .receipt
            .belief
            .record()
            .filter(|r| Some(r.session_id.as_str()) == session_id.as_deref())
            .cloned();
        if let Some(mut record) = record.filter(|_| self.config.resume) {
            record.model = Some(model.to_string());
            record.requested_model = Some(model.to_string());
            self.put(scope, record, now);
        }
    }

    /// The running turn's session refused `model` in place (`detail`); `offered` says whether
    /// its `model` option lists the model. The session is not asked again. For the thread the
    /// owner addressed:
    ///
    /// * a model the session does not offer, a new session would not get either (new sessions
    ///   take a model only when they offer it): the thread goes on in its session, and is told
    ///   once that the model is not offered;
    /// * otherwise the session is retired (its turn stopped and comes back): the next turn hands
    ///   off to a new session that has the model.
    ///
    /// Other threads go on with the session's model.
    pub fn model_refused(
        &mut self,
        scope: &K,
        model: &str,
        detail: &str,
        offered: Option<bool>,
        now: Moment,
    ) {
        let running = self.scopes.get(scope).and_then(|s| s.running());
        let session_id = running.and_then(|r| r.session_id.clone());
        let required = running
            .and_then(|r| r.plan.switch_model.as_ref())
            .is_some_and(|s| s.required);
        self.record(Record::ModelNotSwitched {
            scope: scope.label(),
            model: model.to_string(),
            detail: detail.to_string(),
        });
        let state = self.state(scope);
        if let Some(known) = state.known.as_mut() {
            known.refused_model = Some(model.to_string());
        }
        if !required {
            return;
        }
        state.model_addressed = false;
        if offered == Some(false) {
            let text = crate::notice::model_not_offered(model);
            self.notice(scope, NoticeCause::ModelNotOffered, text);
            return;
        }
        if let Some(session_id) = session_id {
            self.retire(scope, &session_id, RetireReason::ModelChange, now);
        }
    }
}
