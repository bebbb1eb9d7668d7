//! How a turn reaches its scope's session: hot, warm or cold — decided once, at start.
//!
//! The decision is made by the lifecycle when the turn starts, from facts only: the session the
//! claimed worker holds for the scope (if any), what the lifecycle knows of the scope's receipt,
//! the configuration a new session would get, what the agent allows (`session/resume` or
//! `session/load`), and whether the scope's session was abandoned on purpose. The turn task
//! carries the [`Plan`] and does exactly what it says; when reality disagrees (the worker no
//! longer holds the session the plan continues), the task reports that and the lifecycle decides
//! again for the next attempt — the task never decides on its own.

use buzz_session_store::SessionRecord;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::gate::RestoreMethod;
use crate::receipt_view::{Belief, Freshness, ReceiptView};
use crate::scope::Scope;
use crate::session_config::SessionConfig;

/// How the turn reaches the scope's session.
#[allow(clippy::large_enum_variant)] // a receipt (with continuity) is large; moved once per turn or store call, never kept in bulk
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Continue on the live session the turn's worker holds: no `session/load`, no
    /// `session/new`.
    Hot {
        /// The live session.
        session_id: String,
    },
    /// Reopen the stored session with `method`, falling back to a new session if the agent
    /// answers that it no longer has it.
    Warm {
        /// The receipt (its delivery ledger seeds the reopened session, when delivery is
        /// persisted).
        record: SessionRecord,
        /// The restore method the agent allows.
        method: RestoreMethod,
    },
    /// Open a new session (`session/new`), which gets the whole context window.
    Cold {
        /// Why no session is continued or reopened.
        reason: ColdReason,
    },
}

impl Reach {
    /// The kind, for telemetry.
    pub fn kind(&self) -> ReachKind {
        match self {
            Reach::Hot { .. } => ReachKind::Hot,
            Reach::Warm { .. } => ReachKind::Warm,
            Reach::Cold { .. } => ReachKind::Cold,
        }
    }
}

/// [`Reach`] without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReachKind {
    /// See [`Reach::Hot`].
    Hot,
    /// See [`Reach::Warm`].
    Warm,
    /// See [`Reach::Cold`].
    Cold,
}

/// Why a turn opens a new session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdReason {
    /// Restart resume is turned off (`--no-resume-sessions`).
    ResumeOff,
    /// The scope has no receipt.
    NoReceipt,
    /// The receipt was written under another requested model.
    ModelChanged,
    /// The receipt was written under another requested permission mode.
    PermissionModeChanged,
    /// The agent offers no way to reopen a stored session.
    CannotRestore,
    /// The session was abandoned on purpose (`!rotate`, a model switch, a rotation).
    Abandoned,
    /// Reopening the stored session kept failing without a definitive answer; the harness gave
    /// up on it (the thread was told).
    RestoreAbandoned,
    /// The receipt could not be read in time and this harness knew nothing of it.
    StoreUnavailable,
    /// The harness retired the session (a turn limit, a full context, a configuration the
    /// agent cannot change in place); the new session starts from its handoff.
    Retired,
    /// The session refused the prompt as too long; the new session gets the whole thread.
    Exhausted,
    /// The agent no longer had the stored session; the new session gets the whole thread.
    SessionLost,
}

/// What a scope's next session must be, apart from what the receipt says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NextSession {
    /// Continue or reopen the scope's session where possible.
    #[default]
    Continue,
    /// The session was abandoned on purpose: the next one is new, and asks a gateway that keys
    /// state by channel for a fresh conversation (`_meta.freshSession`), until a `session/new`
    /// succeeds.
    Fresh,
    /// The harness gave up reopening the stored session: the next one is new.
    GaveUp,
    /// The harness retires the session: at the next turn it asks it for a handoff, then opens a
    /// new session that starts from it (with continuity).
    Retire {
        /// Why.
        reason: crate::retirement::RetireReason,
    },
    /// The next session is new and starts from `context`, because of `reason` (with
    /// continuity).
    Replace {
        /// Why the old session cannot go on.
        reason: ColdReason,
        /// What the new session gets first.
        context: FirstContext,
    },
}

/// What a new (or not yet informed) session is given before the turn's own prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FirstContext {
    /// Nothing beyond upstream's context window.
    #[default]
    Window,
    /// The whole thread (the whole conversation for a conversation scope), newest first within
    /// `budget_bytes`, instead of upstream's message-count window.
    WholeThread {
        /// The byte budget.
        budget_bytes: usize,
    },
    /// A handoff from the retired session, labelled as such, then upstream's window.
    Handoff(buzz_session_store::Handoff),
}

/// The old session a turn must ask for a handoff before it opens the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetireStep {
    /// How the old session is reached.
    pub from: RetireFrom,
    /// Why it is retired (for the receipt and the thread).
    pub reason: crate::retirement::RetireReason,
    /// What the old session is asked.
    pub instruction: String,
}

/// How a retiring session is reached for its handoff: only a session that exists can be asked,
/// so there is no cold case (a plan with nothing to ask gives the successor the whole thread).
#[allow(clippy::large_enum_variant)] // as Reach: moved once per retirement, never kept in bulk
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetireFrom {
    /// Live on the turn's worker.
    Hot {
        /// The live session.
        session_id: String,
    },
    /// Reopened from its receipt first, with `method`.
    Warm {
        /// The receipt.
        record: SessionRecord,
        /// The restore method the agent allows.
        method: RestoreMethod,
    },
}

impl RetireFrom {
    /// The retiring session's id.
    pub fn session_id(&self) -> &str {
        match self {
            RetireFrom::Hot { session_id } => session_id,
            RetireFrom::Warm { record, .. } => &record.session_id,
        }
    }
}

/// What the turn task needs to know about its session, carried to it with the turn's input,
/// with where the task reports what it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// How the session is reached.
    pub reach: Reach,
    /// A live session of the scope that the worker holds but that must not be continued (it was
    /// opened under another configuration): the task drops it from the worker before anything
    /// else (the lifecycle closes it once the worker is idle again).
    pub discard: Option<String>,
    /// The next `session/new` asks for a fresh conversation (see [`NextSession::Fresh`]).
    pub fresh: bool,
    /// Where the turn task reports (the driver attaches its scope's mailbox).
    pub report: crate::mailbox::Reporter,
    /// Whether a turn whose stored session turned out to be gone goes on in a new session at
    /// once (see [`Plan::continues_after_loss`]).
    pub continues_after_loss: bool,
    /// What the session gets before the turn's own prompt (with continuity).
    pub context: FirstContext,
    /// The session to retire first, with a handoff (with continuity).
    pub retire: Option<RetireStep>,
    /// The model the continued or reopened session must be switched to before the prompt (with
    /// in-place configuration changes).
    pub switch_model: Option<ModelSwitch>,
}

/// A model switch to apply in place (`session/set_config_option`, config `model`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSwitch {
    /// The model.
    pub model: String,
    /// The owner asked this thread for it: if the session cannot take it in place, the turn
    /// stops and the session is retired (with a handoff) for one that has it. Other threads keep
    /// their session and its model.
    pub required: bool,
}

impl Default for Plan {
    /// What upstream does: a new session, no special meta.
    fn default() -> Self {
        Plan {
            reach: Reach::Cold {
                reason: ColdReason::ResumeOff,
            },
            discard: None,
            fresh: false,
            report: crate::mailbox::Reporter::default(),
            continues_after_loss: true,
            context: FirstContext::Window,
            retire: None,
            switch_model: None,
        }
    }
}

impl Plan {
    /// The session the plan continues, if it continues one (hot).
    pub fn hot_session(&self) -> Option<&str> {
        match &self.reach {
            Reach::Hot { session_id } => Some(session_id),
            _ => None,
        }
    }

    /// The turn's prompt with what the session gets first: a pending handoff, labelled as such
    /// (the whole thread is already in upstream's window, widened by the harness).
    pub fn first_context(&self, prompt: String) -> String {
        let FirstContext::Handoff(handoff) = &self.context else {
            return prompt;
        };
        format!(
            "<handoff from-session=\"{}\" reason=\"{}\">\nThis is the handoff your previous \
             session in this thread wrote for you before it was retired. Continue from it.\n\n{}\n\
             </handoff>\n\n{prompt}",
            handoff.from_session_id, handoff.reason, handoff.text
        )
    }

    /// The byte budget of the whole thread, when the turn is given the whole thread.
    pub fn whole_thread_budget(&self) -> Option<usize> {
        match self.context {
            FirstContext::WholeThread { budget_bytes } => Some(budget_bytes),
            _ => None,
        }
    }

    /// Whether a turn whose stored session turned out to be gone goes on in a new session at
    /// once (with upstream's window), or stops so the lifecycle can plan the new session with the
    /// whole thread (with continuity).
    pub fn continues_after_loss(&self) -> bool {
        self.continues_after_loss
    }

    /// Extends the `_meta` of a `session/new` with the scope (so a gateway that keys state by
    /// channel can tell the threads of a channel apart) and, until a new session succeeds after
    /// an abandonment, `freshSession: true`.
    pub fn extend_meta(
        &self,
        mut meta: Map<String, Value>,
        scope: &impl Scope,
    ) -> Map<String, Value> {
        meta.extend(scope_meta(scope));
        if self.fresh {
            meta.insert("freshSession".into(), Value::Bool(true));
        }
        meta
    }
}

/// The live session the claimed worker holds for the scope, and whether it was opened under
/// the configuration a new session would get now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// The session id.
    pub session_id: String,
    /// Opened under the current configuration (or under one the lifecycle does not know, which
    /// it then trusts: upstream kept it).
    pub current: bool,
}

/// Everything [`decide`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct Situation<'a> {
    /// The claimed worker's session for the scope.
    pub live: Option<&'a Live>,
    /// What the scope's next session must be.
    pub next: &'a NextSession,
    /// Restart resume is on.
    pub resume: bool,
    /// The scope's receipt, as known.
    pub receipt: &'a ReceiptView,
    /// The configuration a new session would get.
    pub config: &'a SessionConfig,
    /// How the agent lets a stored session be reopened (`None`: it does not).
    pub restore: Option<RestoreMethod>,
    /// A session opened under another model is switched in place, not replaced (with in-place
    /// configuration changes).
    pub switch_models_in_place: bool,
}

/// How the turn reaches the session, and what the worker must drop first.
pub fn decide(s: Situation<'_>) -> (Reach, Option<String>) {
    let mut discard = None;
    if let Some(live) = s.live {
        if live.current && *s.next == NextSession::Continue {
            let reach = Reach::Hot {
                session_id: live.session_id.clone(),
            };
            return (reach, None);
        }
        discard = Some(live.session_id.clone());
    }
    let reason = match s.next {
        NextSession::Fresh => ColdReason::Abandoned,
        NextSession::GaveUp => ColdReason::RestoreAbandoned,
        // The lifecycle reaches a retiring session as if it continued (to ask it for its
        // handoff); asked here, it is simply not continued.
        NextSession::Retire { .. } => ColdReason::Retired,
        NextSession::Replace { reason, .. } => *reason,
        NextSession::Continue if !s.resume => ColdReason::ResumeOff,
        NextSession::Continue => match stored(s) {
            Ok(reach) => return (reach, discard),
            Err(reason) => reason,
        },
    };
    (Reach::Cold { reason }, discard)
}

/// The warm reach the receipt allows, or why there is none.
fn stored(s: Situation<'_>) -> Result<Reach, ColdReason> {
    let record = match (&s.receipt.belief, s.receipt.freshness) {
        (Belief::Present(record), _) => record,
        (Belief::Absent, _) => return Err(ColdReason::NoReceipt),
        (Belief::Unknown, Freshness::Fresh) => return Err(ColdReason::NoReceipt),
        (Belief::Unknown, _) => return Err(ColdReason::StoreUnavailable),
    };
    // With in-place configuration changes a session opened under another model is reopened and
    // switched, not replaced.
    if !s.switch_models_in_place && record.requested_model != s.config.requested_model {
        return Err(ColdReason::ModelChanged);
    }
    if record.requested_permission_mode != s.config.requested_permission_mode {
        return Err(ColdReason::PermissionModeChanged);
    }
    let method = s.restore.ok_or(ColdReason::CannotRestore)?;
    Ok(Reach::Warm {
        record: record.clone(),
        method,
    })
}

/// The params of a `session/load` or `session/resume` (the same shape): the stored session, the
/// working directory, the MCP servers (as sent with `session/new`) and the scope's `_meta`.
pub fn restore_params(
    session_id: &str,
    cwd: &std::path::Path,
    mcp_servers: Value,
    scope: &impl Scope,
) -> Value {
    serde_json::json!({
        "sessionId": session_id,
        "cwd": cwd,
        "mcpServers": mcp_servers,
        "_meta": scope_meta(scope),
    })
}

/// The `_meta` naming a scope, sent with `session/new`, `session/load` and `session/resume`:
/// `channelId` always, `threadRootEventId` for thread scopes.
pub fn scope_meta(scope: &impl Scope) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("channelId".into(), scope.channel().into());
    if let Some(root) = scope.thread_root() {
        meta.insert("threadRootEventId".into(), root.into());
    }
    meta
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_values::TestScope;

    fn config() -> SessionConfig {
        SessionConfig {
            fingerprint: 1,
            requested_model: Some("m".into()),
            requested_permission_mode: None,
        }
    }

    fn receipt(session: &str, model: &str) -> SessionRecord {
        let mut r = SessionRecord::new(session);
        r.requested_model = Some(model.into());
        r
    }

    fn view(belief: Belief, freshness: Freshness) -> ReceiptView {
        ReceiptView { belief, freshness }
    }

    fn run(
        live: Option<Live>,
        next: NextSession,
        receipt: ReceiptView,
        restore: Option<RestoreMethod>,
        switch_models_in_place: bool,
    ) -> (Reach, Option<String>) {
        decide(Situation {
            live: live.as_ref(),
            next: &next,
            resume: true,
            receipt: &receipt,
            config: &config(),
            restore,
            switch_models_in_place,
        })
    }

    fn cold(reason: ColdReason) -> Reach {
        Reach::Cold { reason }
    }

    #[test]
    fn the_reach_table() {
        for switch_models_in_place in [false, true] {
            reach_table(switch_models_in_place);
        }
    }

    fn reach_table(switch_models_in_place: bool) {
        let fresh = |b| view(b, Freshness::Fresh);
        let load = Some(RestoreMethod::Load);
        let live = |current| {
            Some(Live {
                session_id: "live".into(),
                current,
            })
        };
        let present = Belief::Present(receipt("s1", "m"));
        let warm = Reach::Warm {
            record: receipt("s1", "m"),
            method: RestoreMethod::Load,
        };
        let hot = Reach::Hot {
            session_id: "live".into(),
        };
        // A receipt opened under another model: reopened and switched in place when the series
        // can (model-switch-in-place), else a new session.
        let other_model = if switch_models_in_place {
            Reach::Warm {
                record: receipt("s1", "other"),
                method: RestoreMethod::Load,
            }
        } else {
            cold(ColdReason::ModelChanged)
        };
        let cases = [
            // A current live session is continued, whatever the receipt says.
            (
                live(true),
                NextSession::Continue,
                fresh(present.clone()),
                load,
                hot,
                None,
            ),
            // A live session under another configuration is dropped; the receipt decides.
            (
                live(false),
                NextSession::Continue,
                fresh(present.clone()),
                load,
                warm.clone(),
                Some("live"),
            ),
            (
                None,
                NextSession::Continue,
                fresh(present.clone()),
                load,
                warm.clone(),
                None,
            ),
            (
                None,
                NextSession::Continue,
                fresh(present.clone()),
                None,
                cold(ColdReason::CannotRestore),
                None,
            ),
            // A receipt opened under another model: replaced, or (with in-place changes)
            // reopened and switched.
            (
                None,
                NextSession::Continue,
                fresh(Belief::Present(receipt("s1", "other"))),
                load,
                other_model,
                None,
            ),
            (
                None,
                NextSession::Continue,
                fresh(Belief::Absent),
                load,
                cold(ColdReason::NoReceipt),
                None,
            ),
            // An unreadable store: what this harness knew decides.
            (
                None,
                NextSession::Continue,
                view(present.clone(), Freshness::Unreadable),
                load,
                warm,
                None,
            ),
            (
                None,
                NextSession::Continue,
                view(Belief::Absent, Freshness::Unreadable),
                load,
                cold(ColdReason::NoReceipt),
                None,
            ),
            (
                None,
                NextSession::Continue,
                view(Belief::Unknown, Freshness::Unreadable),
                load,
                cold(ColdReason::StoreUnavailable),
                None,
            ),
            // Abandoned or given up: always new, a live copy is dropped.
            (
                live(true),
                NextSession::Fresh,
                fresh(present.clone()),
                load,
                cold(ColdReason::Abandoned),
                Some("live"),
            ),
            (
                None,
                NextSession::GaveUp,
                fresh(present),
                load,
                cold(ColdReason::RestoreAbandoned),
                None,
            ),
        ];
        for (i, (live, next, receipt, restore, want, discard)) in cases.into_iter().enumerate() {
            let (reach, dropped) = run(live, next, receipt, restore, switch_models_in_place);
            assert_eq!(reach, want, "case {i}, in place: {switch_models_in_place}");
            assert_eq!(
                dropped.as_deref(),
                discard,
                "case {i}, in place: {switch_models_in_place}"
            );
        }
    }

    #[test]
    fn resume_off_is_always_cold() {
        let receipt = view(Belief::Present(receipt("s1", "m")), Freshness::Fresh);
        let (reach, _) = decide(Situation {
            live: None,
            next: &NextSession::Continue,
            resume: false,
            receipt: &receipt,
            config: &config(),
            restore: Some(RestoreMethod::Resume),
            switch_models_in_place: true,
        });
        assert_eq!(reach, cold(ColdReason::ResumeOff));
    }

    #[test]
    fn restore_params_have_the_shape_of_both_restore_requests() {
        let params = restore_params(
            "s1",
            std::path::Path::new("/srv"),
            json!([]),
            &TestScope::thread("c1", "r1"),
        );
        assert_eq!(
            params,
            json!({"sessionId": "s1", "cwd": "/srv", "mcpServers": [],
                   "_meta": {"channelId": "c1", "threadRootEventId": "r1"}})
        );
    }

    #[test]
    fn meta_names_the_scope_and_asks_for_a_fresh_session_only_when_planned() {
        let mut base = Map::new();
        base.insert("sessionTitle".into(), "Dev".into());
        let thread = TestScope::thread("c1", "r1");
        assert_eq!(
            Value::Object(Plan::default().extend_meta(base, &thread)),
            json!({"sessionTitle": "Dev", "channelId": "c1", "threadRootEventId": "r1"})
        );
        let fresh = Plan {
            fresh: true,
            ..Plan::default()
        };
        assert_eq!(
            Value::Object(fresh.extend_meta(Map::new(), &TestScope::conversation("c2"))),
            json!({"channelId": "c2", "freshSession": true})
        );
    }

    #[test]
    fn plans_compare_by_what_they_decide() {
        use crate::mailbox::Reporter;
        let hot = |report: Reporter| Plan {
            reach: Reach::Hot {
                session_id: "s1".into(),
            },
            report,
            ..Plan::default()
        };
        assert_eq!(hot(Reporter::default()), hot(Reporter::default()));
        assert_ne!(hot(Reporter::default()), Plan::default());
    }
}
