//! The fencing token a harness holds on its (relay, agent key), shared between the lease's keeper
//! and the receipt store it fences.
//!
//! On PostgreSQL, harnesses of one agent may run on several machines, and only the one holding
//! the agent's lease (table `buzz_receipt_leases`, see [`crate::pg::LeaseAnswer`]) may write. The
//! lease's keeper (crate `buzz-lease`) puts the token it was granted into a [`Fence`]; a store
//! opened with that fence ([`crate::StoreArgs::fence`]) writes only while the database says the
//! lease is still that token's and has not expired, checked in the write's own transaction. A
//! harness that lost its lease (frozen, cut off, taken over) finds every write refused with
//! [`crate::StoreError::Fenced`], whatever its own clock says.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counter (Prometheus): receipt and watermark writes refused because the harness did not hold
/// its agent's lease (described by crate `buzz-lease`).
pub const FENCED_WRITES: &str = "buzz_acp_receipt_writes_fenced_total";

/// A shared cell holding the lease token a store's writes must carry (none: every write is
/// refused). Clones share the cell.
#[derive(Clone, Default)]
pub struct Fence(Arc<AtomicU64>);

impl Fence {
    /// A fence holding no token yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes carry `token` from now on (tokens start at 1).
    pub fn hold(&self, token: u64) {
        self.0.store(token, Ordering::SeqCst);
    }

    /// No token: every write is refused until [`Fence::hold`].
    pub fn release(&self) {
        self.0.store(0, Ordering::SeqCst);
    }

    /// The token writes carry, if one is held.
    pub fn token(&self) -> Option<u64> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            token => Some(token),
        }
    }
}

impl PartialEq for Fence {
    /// The same cell (two fences with equal tokens are still two fences).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Fence {}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Fence").field(&self.token()).finish()
    }
}

/// The agent's lease as the database has it, read in a write's own transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRow {
    /// Who holds it.
    pub(crate) holder: String,
    /// Its token.
    pub(crate) token: u64,
    /// Whether it has not expired, by the database's clock.
    pub(crate) live: bool,
}

/// Why a write carrying the token `ours` may not go on, given the lease row (`None`: none was
/// ever granted); `None` when it may.
pub(crate) fn refusal(ours: Option<u64>, lease: Option<&LeaseRow>) -> Option<String> {
    match (ours, lease) {
        (None, _) => Some("this harness holds no lease on its agent".to_owned()),
        (Some(_), None) => Some("no harness was ever granted this agent's lease".to_owned()),
        (Some(ours), Some(lease)) if lease.token != ours => Some(format!(
            "the agent's lease is {} with token {}, not this harness's token {ours}",
            lease.holder, lease.token
        )),
        (Some(ours), Some(lease)) if !lease.live => Some(format!(
            "this harness's lease (token {ours}) expired by the database's clock"
        )),
        (Some(_), Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(token: u64, live: bool) -> LeaseRow {
        LeaseRow {
            holder: "host-b pid 7".to_owned(),
            token,
            live,
        }
    }

    #[test]
    fn only_the_current_unexpired_token_writes() {
        assert_eq!(refusal(Some(3), Some(&row(3, true))), None);
        let taken = refusal(Some(3), Some(&row(4, true))).unwrap();
        assert!(taken.contains("host-b pid 7 with token 4"), "{taken}");
        let expired = refusal(Some(3), Some(&row(3, false))).unwrap();
        assert!(expired.contains("expired"), "{expired}");
        assert!(refusal(None, Some(&row(3, true))).is_some());
        assert!(refusal(Some(1), None).is_some());
    }

    #[test]
    fn clones_share_the_token_and_zero_means_none() {
        let fence = Fence::new();
        let keeper = fence.clone();
        assert_eq!(fence.token(), None);
        keeper.hold(7);
        assert_eq!(fence.token(), Some(7));
        keeper.release();
        assert_eq!(fence.token(), None);
        assert_eq!(fence, keeper);
        assert_ne!(fence, Fence::new());
    }
}
