//! One live harness per (relay, agent key).
//!
//! Two harnesses serving the same agent on the same relay both answer every mention
//! (block/buzz#3832, #5759). Upstream's proposed answer (PR #5931, open) is local: a lock file per
//! agent key × relay under the user's local data directory, which a second process on the host
//! cannot take. This crate is that lease for a harness on the embedded store ([`local`]), and
//! the rules of the lease across machines ([`fenced`]: a state machine without I/O that the
//! PostgreSQL store's shell will drive; not wired into the harness yet).
//!
//! The rules are plain functions and types ([`LeaseName`], [`default_dir`], [`FencedLease`]); the
//! one piece of I/O is taking and holding the lock file ([`LocalLease::take`]).

pub mod fenced;
pub mod local;

pub use fenced::{Effect, FencedLease, Input, LeaseSettings, SettingsError, StopReason, Token};
pub use local::{EXIT_HELD_ELSEWHERE, Holder, LeaseError, LeaseName, LocalLease, default_dir};
