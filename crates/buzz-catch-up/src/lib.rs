//! The mentions a harness missed while it was away (fork patch `mentions-while-away`).
//!
//! Upstream subscribes to its relay from the moment it starts, so a mention posted while the
//! harness was stopped, restarting or crashed is never delivered to it. This crate holds what the
//! harness needs to answer those mentions once, and only genuine ones:
//!
//! * [`watermark`]: the *watermark*, a time before which every mention was settled by a harness of
//!   this (relay, agent key). It is derived from the harness's own record of what is still in
//!   progress and kept with the session receipts, so another machine sharing the store sees it.
//! * [`window`]: where the catch-up starts after a start (the watermark minus the relay's skew,
//!   bounded by [`window::LOOK_BACK_LIMIT`]) and where it ends (where the live subscription
//!   begins).
//! * [`pager`]: the catch-up's reads, page by page (`POST /query` with `until`), as a state
//!   machine without I/O.
//! * [`genuine`]: id and signature checks on every event the relay hands over (upstream checks
//!   neither).
//! * [`staleness`]: mentions older than the configured age are not answered out of context: their
//!   thread is told once.
//! * [`writer`]: the only I/O of the crate, the task that writes the watermark beside the event
//!   loop with bounded waits.
//!
//! Everything but the writer is plain synchronous code, tested without processes.

pub mod genuine;
pub mod pager;
pub mod staleness;
pub mod watermark;
pub mod window;
pub mod writer;

pub use genuine::{Forgery, check};
pub use pager::{Page, Pager};
pub use staleness::{Staleness, Verdict};
pub use watermark::Tracker;
pub use window::{CatchUpWindow, DEFAULT_MAX_AGE, LOOK_BACK_LIMIT, SINCE_SKEW_SECS, Start};
pub use writer::{Writer, WriterHandle};
