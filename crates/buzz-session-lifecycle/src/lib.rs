//! One owner per thread: the session lifecycle of every `SessionScope` of the buzz-acp fork.
//!
//! (Under construction: the lifecycle state machine lands here; see issue "One owner per
//! thread".)

pub mod classify;
