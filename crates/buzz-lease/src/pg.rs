//! The lease across machines kept in the PostgreSQL receipt store (table `buzz_receipt_leases`,
//! see `buzz_session_store::pg`): the [`LeaseStore`] the keeper drives.

use std::time::Duration;

use buzz_session_store::{LeaseAnswer, PgStore, StoreError};

use crate::fenced::Token;
use crate::keeper::{Grant, LeaseStore};

/// One harness's requests for its agent's lease, over a store connection of their own (a
/// receipt write that waits on the server never holds up a renewal).
#[derive(Debug)]
pub struct PgLeaseStore {
    store: PgStore,
    holder: String,
    lifetime: Duration,
}

impl PgLeaseStore {
    /// Requests by `holder` (unique per process: see [`holder_name`]) for leases of `lifetime`,
    /// through `store` (opened read-write for the harness's relay and agent key).
    pub fn new(store: PgStore, holder: String, lifetime: Duration) -> Self {
        Self {
            store,
            holder,
            lifetime,
        }
    }
}

fn grant(answer: LeaseAnswer) -> Grant {
    match answer {
        LeaseAnswer::Held { token } => Grant::Held(Token(token)),
        LeaseAnswer::HeldBy { holder, token } => Grant::HeldBy(format!("{holder} (token {token})")),
    }
}

impl LeaseStore for PgLeaseStore {
    type Error = StoreError;

    fn acquire(&self) -> Result<Grant, StoreError> {
        self.store
            .acquire_lease(&self.holder, self.lifetime)
            .map(grant)
    }

    fn renew(&self, token: Token) -> Result<Grant, StoreError> {
        self.store
            .renew_lease(&self.holder, token.0, self.lifetime)
            .map(grant)
    }

    fn release(&self, token: Token) -> Result<(), StoreError> {
        self.store.release_lease(&self.holder, token.0).map(|_| ())
    }

    fn holder(&self) -> &str {
        &self.holder
    }
}

/// A holder's name that no other process shares: the host, the process id and when it started
/// (a pid is reused after a restart; the start time tells the two apart).
pub fn holder_name(host: &str, pid: u32, since_unix_ms: u128) -> String {
    format!("{host} pid {pid} since {since_unix_ms}")
}

/// This process's holder name ([`holder_name`]), `since` being its start as a time since the
/// Unix epoch. The host is the kernel's host name (`$HOSTNAME` where /proc is not mounted).
pub fn this_holder(since: std::time::Duration) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    holder_name(&host, std::process::id(), since.as_millis())
}
