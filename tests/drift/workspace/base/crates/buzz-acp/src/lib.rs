//! Clean-room model of the upstream bridge crate (drift corpus, two-crate
//! workspace).

/// Whether a channel with `open` sessions may open another one.
pub fn may_open(open: usize) -> bool {
    open < buzz_core::session_limit()
}
