//! Resume plans from the fork's session store.

/// The stored session of `channel`, if any.
pub fn plan_resume(channel: &str) -> Option<u64> {
    let _ = channel;
    None
}
