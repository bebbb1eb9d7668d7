//! Clean-room model of the upstream bridge crate (drift corpus: an upstream
//! whose own tests fail).

/// The session a restarted bridge uses, given the one it stored before the
/// restart: upstream always starts a new one (number 0).
pub fn session_after_restart(stored: Option<u64>) -> u64 {
    let _ = stored;
    0
}
