//! What the lifecycle needs to know about the harness's types.
//!
//! The state machine is generic so it can be tested with plain values, and so this crate never
//! depends on the harness (the harness depends on it). The harness implements [`Scope`] for its
//! `SessionScope` and [`Input`] for its relay `Event` in its glue module.

use std::fmt::Debug;

/// A session scope: one provider session per channel (conversation) or per thread root.
pub trait Scope: Clone + Ord + Debug {
    /// The channel the scope belongs to (the authorization boundary).
    fn channel(&self) -> &str;
    /// The canonical thread root, for thread scopes.
    fn thread_root(&self) -> Option<&str>;
    /// A short label for logs and telemetry ("conversation", "thread:1a2b3c4d"): full ids stay
    /// out of high-cardinality telemetry.
    fn label(&self) -> String;
}

/// One admitted message (a relay event that asks the agent for a turn).
pub trait Input: Clone + Debug {
    /// The event id: unique per message, used to keep order across requeues and to de-duplicate.
    fn id(&self) -> &str;
}
