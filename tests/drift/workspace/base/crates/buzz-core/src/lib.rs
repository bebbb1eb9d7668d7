//! Shared rules of the upstream workspace (drift corpus).

/// How many sessions a channel may hold.
pub fn session_limit() -> usize {
    1
}
