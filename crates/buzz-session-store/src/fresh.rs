//! One-shot "start fresh" requests (#6103).
//!
//! Dropping the harness's session on `!rotate` is not enough when a gateway agent keys sessions by
//! `_meta.channelId`: it would hand the same conversation back. The next `session/new` for that
//! scope therefore carries `_meta.freshSession: true`, exactly once. The request lives in memory
//! only and is independent of whether the durable store is enabled: a rotation must work without
//! one. (A restart drops pending requests; the rotation has already removed the receipt, so the
//! restarted harness creates a new session anyway, only without the flag.)

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use crate::key::{KeyScheme, ScopeKey};

/// Pending fresh-session requests, keyed like the store's receipts.
#[derive(Debug)]
pub struct FreshRequests {
    /// Maps keys like the store does, so a rotation under the `Channel` scheme covers the channel.
    scheme: KeyScheme,
    /// Keys whose next `session/new` must ask for a fresh session.
    pending: Mutex<HashSet<ScopeKey>>,
}

impl FreshRequests {
    /// An empty set of requests for `scheme`.
    pub fn new(scheme: KeyScheme) -> Self {
        Self {
            scheme,
            pending: Mutex::new(HashSet::new()),
        }
    }

    /// Marks `key`'s next session as fresh. Repeating a request before it is taken is a no-op.
    pub fn request(&self, key: &ScopeKey) {
        self.pending().insert(self.scheme.map(key));
    }

    /// Consumes the request for `key`: `true` exactly once per request.
    pub fn take(&self, key: &ScopeKey) -> bool {
        self.pending().remove(&self.scheme.map(key))
    }

    /// The set survives a panic elsewhere: it holds no invariant a half-finished insert could break.
    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<ScopeKey>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
    const OTHER: &str = "11111111-2222-4333-8444-555555555555";

    fn root(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    #[test]
    fn a_request_is_taken_exactly_once_per_scope() {
        let fresh = FreshRequests::new(KeyScheme::Scope);
        let a = ScopeKey::thread(CHANNEL, root(1));
        let b = ScopeKey::thread(CHANNEL, root(2));
        assert!(!fresh.take(&a));
        fresh.request(&a);
        fresh.request(&a);
        assert!(!fresh.take(&b), "a sibling thread is not affected");
        assert!(!fresh.take(&ScopeKey::conversation(CHANNEL)));
        assert!(fresh.take(&a));
        assert!(!fresh.take(&a), "consumed");
        fresh.request(&a);
        assert!(fresh.take(&a), "a new request counts again");
    }

    #[test]
    fn channel_scheme_requests_cover_the_whole_channel() {
        let fresh = FreshRequests::new(KeyScheme::Channel);
        fresh.request(&ScopeKey::thread(CHANNEL, root(1)));
        assert!(!fresh.take(&ScopeKey::conversation(OTHER)));
        assert!(fresh.take(&ScopeKey::thread(CHANNEL, root(2))));
        assert!(!fresh.take(&ScopeKey::conversation(CHANNEL)));
    }

    #[test]
    fn is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<FreshRequests>();
    }
}
