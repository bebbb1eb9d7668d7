//! Shared rules of the upstream workspace (drift corpus).
//!
//! 0.9.1: a channel may hold two sessions.

/// How many sessions a channel may hold.
pub fn session_limit() -> usize {
    2
}
