//! One live harness per (relay, agent key).
//!
//! Two harnesses serving the same agent on the same relay both answer every mention
//! (block/buzz#3832, #5759). Upstream's proposed answer (PR #5931, open) is local: a lock file per
//! agent key × relay under the user's local data directory, which a second process on the host
//! cannot take. This crate is that lease for a harness on the embedded store ([`local`]), and
//! the lease across machines on the PostgreSQL store: its rules ([`fenced`], a state machine
//! without I/O), the shell that drives it beside the harness ([`keeper`]) and the store's side
//! ([`pg`]).
//!
//! The rules are plain functions and types ([`LeaseName`], [`default_dir`], [`FencedLease`]); the
//! I/O is taking and holding the lock file ([`LocalLease::take`]) and the keeper's requests to
//! the store ([`Keeper`]).

pub mod fenced;
pub mod keeper;
pub mod local;
pub mod metrics;
pub mod pg;

pub use fenced::{Effect, FencedLease, Input, LeaseSettings, SettingsError, StopReason, Token};
pub use keeper::{Grant, Keeper, LeaseStore, PublishGate, Status};
pub use local::{EXIT_HELD_ELSEWHERE, Holder, LeaseError, LeaseName, LocalLease, default_dir};
pub use pg::{PgLeaseStore, holder_name, this_holder};
