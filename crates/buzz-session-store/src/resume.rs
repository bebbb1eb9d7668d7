//! Deciding whether to load a stored session, and what a failed load means.
//!
//! # Lifecycle contract
//!
//! Before `session/new` for a scope with no live session, the harness asks [`plan_resume`]:
//!
//! * [`ResumePlan::Fresh`] — resume is disabled, there is no receipt, or the operator changed the
//!   requested model or permission mode since the receipt was written (those are applied only at
//!   `session/new` and `session/load` does not re-apply them). Create a session; its receipt
//!   replaces the old one.
//! * [`ResumePlan::Load`] — restore the stored session with the method [`crate::gate`] allows.
//!
//! When the restore request fails, [`classify_load_failure`] maps the JSON-RPC error code to a
//! [`LoadVerdict`]. The code convention is *defined* here, not guessed from messages (#2633 item
//! 14: auth failures also arrive as agent errors, and an expired token must not clear a live
//! binding):
//!
//! | code | verdict | harness action |
//! |---|---|---|
//! | −32002 (resource / session not found) | [`LoadVerdict::Gone`] | remove the receipt (conditionally), `session/new` |
//! | −32601 (method not found) | [`LoadVerdict::Unsupported`] | `session/new`; its receipt replaces the old one |
//! | anything else: no code (timeout, transport error, process exit), −32000 (auth required), −32603, other | [`LoadVerdict::Indeterminate`] | keep the receipt, open NO competing session, requeue, post [`indeterminate_notice`] |
//!
//! An indeterminate failure never ages into deleting the receipt or into a fresh session (#6990
//! item 8); only an explicit rotation (`!rotate`, a model switch, a max-turns or max-tokens
//! rotation) abandons a session. Agent death is not such a decision: it keeps the receipt.

use std::fmt;

use crate::record::SessionRecord;

/// JSON-RPC "resource not found": the agent no longer has the session.
pub const RESOURCE_NOT_FOUND: i32 = -32002;
/// JSON-RPC "method not found": the agent cannot restore sessions at all.
pub const METHOD_NOT_FOUND: i32 = -32601;

/// The configuration a stored session must have been created under to be reused.
///
/// Deliberately narrow (#6088 item 1): prompt, team instructions, MCP list and core memory are per
/// turn or re-sent, and abandoning every session on a prompt tweak would wipe every channel's
/// history. Model and permission mode are applied only at `session/new`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compat {
    /// The model the harness is configured to request now.
    pub requested_model: Option<String>,
    /// The permission mode the harness is configured to request now.
    pub requested_permission_mode: Option<String>,
}

/// Why a fresh session is created instead of loading a stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreshReason {
    /// Restart resume is turned off.
    ResumeDisabled,
    /// No receipt for this scope.
    NoRecord,
    /// The configured model differs from the one the session was requested with.
    ModelChanged,
    /// The configured permission mode differs from the one the session was requested with.
    PermissionModeChanged,
}

impl fmt::Display for FreshReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ResumeDisabled => "resume disabled",
            Self::NoRecord => "no stored session",
            Self::ModelChanged => "model changed",
            Self::PermissionModeChanged => "permission mode changed",
        })
    }
}

/// What to do for a scope that has no live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumePlan {
    /// Restore this stored session.
    Load(SessionRecord),
    /// Create a new session.
    Fresh(FreshReason),
}

/// Chooses between restoring the stored session and creating a new one.
///
/// Compares the *requested* configuration (see [`SessionRecord::requested_model`]); the model is
/// checked before the permission mode, so the reason names the first difference.
pub fn plan_resume(enabled: bool, record: Option<SessionRecord>, compat: &Compat) -> ResumePlan {
    if !enabled {
        return ResumePlan::Fresh(FreshReason::ResumeDisabled);
    }
    let Some(record) = record else {
        return ResumePlan::Fresh(FreshReason::NoRecord);
    };
    if record.requested_model != compat.requested_model {
        return ResumePlan::Fresh(FreshReason::ModelChanged);
    }
    if record.requested_permission_mode != compat.requested_permission_mode {
        return ResumePlan::Fresh(FreshReason::PermissionModeChanged);
    }
    ResumePlan::Load(record)
}

/// What a failed `session/load` (or `session/resume`) says about the stored session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadVerdict {
    /// The agent definitively no longer has the session: forget the receipt, create a new one.
    Gone,
    /// The agent cannot restore sessions: create a new one, whose receipt replaces the old.
    Unsupported,
    /// Nothing is known: keep the receipt, open no competing session, retry later.
    Indeterminate,
}

/// Classifies a restore failure by its JSON-RPC error code (`None` = no response at all).
///
/// Only the two codes in the module-level table are definitive; everything else, including
/// authentication errors and internal errors, is [`LoadVerdict::Indeterminate`].
pub fn classify_load_failure(code: Option<i32>) -> LoadVerdict {
    match code {
        Some(RESOURCE_NOT_FOUND) => LoadVerdict::Gone,
        Some(METHOD_NOT_FOUND) => LoadVerdict::Unsupported,
        _ => LoadVerdict::Indeterminate,
    }
}

/// Longest detail quoted in a notice; agent errors can carry whole stack traces.
const NOTICE_DETAIL_CHARS: usize = 160;

/// The channel notice for an indeterminate restore failure.
///
/// The turn is blocked in that case, so the channel must hear something actionable instead of
/// going silent (#2633 item 15). `detail` is flattened to one line and shortened.
pub fn indeterminate_notice(detail: &str) -> String {
    let flat = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    let detail = match flat.char_indices().nth(NOTICE_DETAIL_CHARS) {
        Some((cut, _)) => format!(" ({}…)", &flat[..cut]),
        None if flat.is_empty() => String::new(),
        None => format!(" ({flat})"),
    };
    format!(
        "I couldn't reopen my previous session for this conversation{detail}. I'll retry \
         automatically and nothing is lost; if this keeps happening, check the agent's login or \
         send !rotate to start fresh."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(model: Option<&str>, mode: Option<&str>) -> SessionRecord {
        SessionRecord {
            // The applied values differ from the requested ones on purpose: they must not matter.
            model: Some("agent-default".into()),
            permission_mode: None,
            requested_model: model.map(Into::into),
            requested_permission_mode: mode.map(Into::into),
            ..SessionRecord::new("sess")
        }
    }

    fn compat(model: Option<&str>, mode: Option<&str>) -> Compat {
        Compat {
            requested_model: model.map(Into::into),
            requested_permission_mode: mode.map(Into::into),
        }
    }

    #[test]
    fn plan_resume_table() {
        let rec = record(Some("opus"), Some("plan"));
        let same = compat(Some("opus"), Some("plan"));
        let cases = [
            (
                false,
                Some(rec.clone()),
                same.clone(),
                ResumePlan::Fresh(FreshReason::ResumeDisabled),
            ),
            (
                true,
                None,
                same.clone(),
                ResumePlan::Fresh(FreshReason::NoRecord),
            ),
            (
                true,
                Some(rec.clone()),
                same.clone(),
                ResumePlan::Load(rec.clone()),
            ),
            (
                true,
                Some(rec.clone()),
                compat(Some("sonnet"), Some("plan")),
                ResumePlan::Fresh(FreshReason::ModelChanged),
            ),
            (
                true,
                Some(rec.clone()),
                compat(None, Some("plan")),
                ResumePlan::Fresh(FreshReason::ModelChanged),
            ),
            (
                true,
                Some(rec.clone()),
                compat(Some("opus"), Some("auto")),
                ResumePlan::Fresh(FreshReason::PermissionModeChanged),
            ),
            (
                true,
                Some(rec.clone()),
                compat(Some("opus"), None),
                ResumePlan::Fresh(FreshReason::PermissionModeChanged),
            ),
            (
                true,
                Some(rec.clone()),
                compat(Some("x"), Some("y")),
                ResumePlan::Fresh(FreshReason::ModelChanged),
            ),
            (
                true,
                Some(record(None, None)),
                compat(None, None),
                ResumePlan::Load(record(None, None)),
            ),
        ];
        for (enabled, rec, compat, want) in cases {
            assert_eq!(
                plan_resume(enabled, rec.clone(), &compat),
                want,
                "{enabled} {rec:?} {compat:?}"
            );
        }
    }

    #[test]
    fn classify_load_failure_table() {
        let cases = [
            (Some(-32002), LoadVerdict::Gone),
            (Some(-32601), LoadVerdict::Unsupported),
            (None, LoadVerdict::Indeterminate),
            (Some(-32000), LoadVerdict::Indeterminate),
            (Some(-32603), LoadVerdict::Indeterminate),
            (Some(-32602), LoadVerdict::Indeterminate),
            (Some(-32700), LoadVerdict::Indeterminate),
            (Some(0), LoadVerdict::Indeterminate),
            (Some(404), LoadVerdict::Indeterminate),
        ];
        for (code, want) in cases {
            assert_eq!(classify_load_failure(code), want, "{code:?}");
        }
    }

    #[test]
    fn fresh_reasons_display_short_text() {
        assert_eq!(FreshReason::NoRecord.to_string(), "no stored session");
        assert_eq!(FreshReason::ModelChanged.to_string(), "model changed");
        assert_eq!(
            FreshReason::PermissionModeChanged.to_string(),
            "permission mode changed"
        );
        assert_eq!(FreshReason::ResumeDisabled.to_string(), "resume disabled");
    }

    #[test]
    fn indeterminate_notice_is_one_line_and_actionable() {
        let notice = indeterminate_notice("auth required:\n  token expired");
        assert!(
            notice.contains("(auth required: token expired)"),
            "{notice}"
        );
        assert!(
            notice.contains("!rotate") && notice.contains("retry"),
            "{notice}"
        );
        assert!(!notice.contains('\n'));

        let long = indeterminate_notice(&"é".repeat(1000));
        assert!(long.contains(&format!("({}…)", "é".repeat(NOTICE_DETAIL_CHARS))));
        assert!(long.chars().count() < 400, "{long}");

        let bare = indeterminate_notice("  ");
        assert!(bare.starts_with("I couldn't reopen my previous session for this conversation."));
    }
}
