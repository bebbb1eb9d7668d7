//! What the thread is told when its earlier session cannot be reopened.
//!
//! Notices name only actions the reader can take. `!rotate` is an owner command, so it is
//! mentioned only when an owner is configured; everyone else just learns what happens next.

use std::time::Duration;

/// Longest agent detail quoted; agent errors can carry whole stack traces.
const DETAIL_CHARS: usize = 160;

fn quoted(detail: &str) -> String {
    let flat = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(DETAIL_CHARS) {
        Some((cut, _)) => format!(" ({}…)", &flat[..cut]),
        None if flat.is_empty() => String::new(),
        None => format!(" ({flat})"),
    }
}

fn minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60).max(1)
}

/// The first failure of a streak: the harness keeps trying for a while; if it gives up, the
/// new session has `gets`.
pub fn restore_retrying(
    detail: &str,
    give_up_after: Duration,
    gets: &str,
    owner_configured: bool,
) -> String {
    let mut text = format!(
        "I could not reopen this thread's earlier session{}. I will keep trying for up to {} \
         minute(s); if it still fails, I will answer in a new session that has {gets}.",
        quoted(detail),
        minutes(give_up_after)
    );
    if owner_configured {
        text.push_str(" The owner can send !rotate to start a new session right away.");
    }
    text
}

/// What a new session that replaces a lost one is given: upstream's window ("only the recent
/// messages") or, with continuity, the whole thread.
pub const RECENT_MESSAGES: &str = "only the recent messages";

/// The agent answered that it no longer has the thread's session; the new session has `gets`.
pub fn restore_lost(detail: &str, gets: &str) -> String {
    format!(
        "This thread's earlier session is gone on the agent's side{}, so I am continuing in a \
         new session that has {gets}.",
        quoted(detail)
    )
}

/// The harness gave up: the answer comes from a new session that has `gets`.
pub fn restore_abandoned(detail: &str, gets: &str) -> String {
    format!(
        "I could not restore this thread's earlier context{}, so I am continuing in a new \
         session that has {gets}.",
        quoted(detail)
    )
}

/// "the whole thread (up to N KB)".
pub fn whole_thread(budget_bytes: usize) -> String {
    format!(
        "the whole thread (up to {} KB)",
        budget_bytes.div_ceil(1024)
    )
}

/// A retired session handed off: the new session starts from its handoff.
pub fn handed_off(
    reason: crate::retirement::RetireReason,
    config: &crate::retirement::ContinuityConfig,
) -> String {
    use crate::retirement::RetireReason;
    let why = match reason {
        RetireReason::TurnLimit => match config.max_turns {
            Some(max) => format!("reached its limit of {max} turns"),
            None => "reached its turn limit".to_string(),
        },
        RetireReason::ContextNearlyFull => "was nearly out of context space".to_string(),
        RetireReason::ModelChange => "cannot switch models in place".to_string(),
        RetireReason::Exhausted => "ran out of context space".to_string(),
    };
    format!(
        "This thread's session {why}, so I asked it for a handoff and continued in a new session \
         that starts from that handoff."
    )
}

/// A retired session could not hand off: the new session has the whole thread.
pub fn handoff_unavailable(detail: &str, budget_bytes: usize) -> String {
    format!(
        "This thread's session had to be replaced but could not hand off{}, so I am continuing \
         in a new session that has {}.",
        quoted(detail),
        whole_thread(budget_bytes)
    )
}

/// A session refused the prompt as too long.
pub fn exhausted(detail: &str, budget_bytes: usize, was_whole_thread: bool) -> String {
    let gets = if was_whole_thread {
        "only the recent messages (the whole thread did not fit either)".to_string()
    } else {
        whole_thread(budget_bytes)
    };
    format!(
        "This thread's session ran out of context space{}, so I am continuing in a new session \
         that has {gets}.",
        quoted(detail)
    )
}

/// The receipt store did not answer in time and this harness knew nothing of the thread's
/// session: the answer comes from a new session, which becomes the thread's session.
pub fn store_unavailable(gets: &str) -> String {
    format!(
        "I could not reach the record of this thread's earlier session in time (the session store \
         is unavailable), so I am continuing in a new session that has {gets}."
    )
}

/// The owner's model is not offered by the thread's session (nor would a new one get it).
pub fn model_not_offered(model: &str) -> String {
    format!(
        "This thread's session does not offer the model {model}, so it goes on as it was \
         (a new session would not get {model} either)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_quote_a_short_detail_and_mention_rotate_only_with_an_owner() {
        let t = restore_retrying(
            "agent error -32603:\n  service\tfailure",
            Duration::from_secs(180),
            RECENT_MESSAGES,
            false,
        );
        assert!(t.contains("(agent error -32603: service failure)"), "{t}");
        assert!(t.contains("up to 3 minute(s)"), "{t}");
        assert!(!t.contains("!rotate"));
        assert!(
            t.contains("a new session that has only the recent messages"),
            "{t}"
        );
        assert!(
            restore_retrying("x", Duration::from_secs(30), RECENT_MESSAGES, true)
                .contains("!rotate")
        );
        let long = "y".repeat(500);
        let t = restore_abandoned(&long, RECENT_MESSAGES);
        assert!(
            t.contains(&format!("({}…)", "y".repeat(DETAIL_CHARS))),
            "{t}"
        );
        assert!(!restore_abandoned("", RECENT_MESSAGES).contains("()"));
    }
}
