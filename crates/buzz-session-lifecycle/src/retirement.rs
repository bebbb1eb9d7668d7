//! What retiring a session means (patch `continuity-handoff`, behaviour `Continuity`): the
//! continuity settings, the reasons the harness retires a session, and how full a session is.
//!
//! Plain values shared by the rules that retire sessions ([`crate::rotation`]), the plans that
//! carry a retirement ([`crate::reach`]) and the thread's notices ([`crate::notice`]).

use buzz_session_store::Usage;
use serde::Serialize;

/// What the old session is asked by default (in our words).
pub const DEFAULT_HANDOFF_INSTRUCTION: &str = "This conversation is about to continue in a fresh \
    session that will not see anything said here. Write a handoff for it: the goal of this \
    thread, what has been decided and done, the facts, names, numbers and files it will need, \
    open questions and the next steps. Be concise and complete; answer with the handoff only.";

/// Default byte budget of the whole thread given to a replacement session.
pub const DEFAULT_WHOLE_THREAD_BUDGET_BYTES: usize = 64 * 1024;

/// How continuity behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContinuityConfig {
    /// Turns after which a session is retired (`None`: never).
    pub max_turns: Option<u32>,
    /// Share of the context window, in percent, at which a session is retired (`None`: never;
    /// every real adapter in the tier compacts its own context, so this is off by default).
    pub rotate_at_context_percent: Option<u8>,
    /// What the old session is asked for its handoff.
    pub handoff_instruction: String,
    /// Byte budget of the whole thread.
    pub whole_thread_budget_bytes: usize,
}

impl Default for ContinuityConfig {
    fn default() -> Self {
        ContinuityConfig {
            max_turns: None,
            rotate_at_context_percent: None,
            handoff_instruction: DEFAULT_HANDOFF_INSTRUCTION.to_string(),
            whole_thread_budget_bytes: DEFAULT_WHOLE_THREAD_BUDGET_BYTES,
        }
    }
}

/// Why the harness retires a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetireReason {
    /// It completed `--max-turns-per-session` turns.
    TurnLimit,
    /// Its reported usage reached `--rotate-at-context-percent` of its context.
    ContextNearlyFull,
    /// The agent cannot change its model in place.
    ModelChange,
    /// It refused a prompt as too long.
    Exhausted,
}

impl RetireReason {
    /// The receipt's spelling.
    pub fn code(self) -> &'static str {
        match self {
            RetireReason::TurnLimit => "turn_limit",
            RetireReason::ContextNearlyFull => "context_nearly_full",
            RetireReason::ModelChange => "model_change",
            RetireReason::Exhausted => "exhausted",
        }
    }

    /// The receipt's reason read back (an unknown spelling reads as a turn limit: the session is
    /// retired with a handoff, the safe default).
    pub fn from_code(code: &str) -> RetireReason {
        [
            RetireReason::ContextNearlyFull,
            RetireReason::ModelChange,
            RetireReason::Exhausted,
        ]
        .into_iter()
        .find(|r| r.code() == code)
        .unwrap_or(RetireReason::TurnLimit)
    }
}

/// The share of its context a session has used, in percent (`None`: the agent did not say how
/// large the context is).
pub fn used_percent(usage: &Usage) -> Option<u64> {
    let size = usage.context_tokens.filter(|s| *s > 0)?;
    Some(usage.used_tokens.saturating_mul(100) / size)
}
