//! What the lifecycle knows about a scope's receipt.
//!
//! The receipt store is shared (other harnesses, an operator's tool) and may be unreachable, so
//! the lifecycle never assumes: before a turn that cannot continue a live session it asks for the
//! receipt to be read, and it remembers what its own reads and writes told it. When the read does
//! not answer in time, that memory decides (see [`crate::reach`]); every write it asks for
//! carries the belief it was decided under as its condition (see [`Expect`]), so a write that
//! reaches the store late never overwrites what someone else wrote meanwhile.

use buzz_session_store::SessionRecord;

use crate::clock::Moment;

/// What this process believes the store holds for a scope.
#[allow(clippy::large_enum_variant)] // a receipt (with `continuity`) is large; moved once per turn or store call, never kept in bulk
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Belief {
    /// Nothing is known (never read, or the read failed before anything was learned).
    #[default]
    Unknown,
    /// The store holds no receipt.
    Absent,
    /// The store holds this receipt.
    Present(SessionRecord),
}

impl Belief {
    /// The receipt, if one is believed to exist.
    pub fn record(&self) -> Option<&SessionRecord> {
        match self {
            Belief::Present(record) => Some(record),
            Belief::Unknown | Belief::Absent => None,
        }
    }

    /// The condition a write decided under this belief carries, decided at `now`.
    pub fn expectation(&self, now: Moment) -> Expect {
        match self {
            Belief::Present(record) => Expect::Session(record.session_id.clone()),
            Belief::Absent => Expect::Absent,
            Belief::Unknown => Expect::UnchangedSince(now),
        }
    }
}

/// The condition a receipt write is applied under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The store holds no receipt for the scope.
    Absent,
    /// The stored receipt names this session.
    Session(String),
    /// Whatever the store holds was written no later than this moment (the harness could not
    /// read it and decided to replace it then).
    UnchangedSince(Moment),
}

/// How current a [`Belief`] is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Freshness {
    /// Learned earlier (a previous read, or this process's own write): read again before the
    /// next start that needs the receipt.
    #[default]
    Stale,
    /// A read is in flight since this moment; the scope's next start waits for it.
    Reading { since: Moment },
    /// A check is in flight since this moment: the read of the receipt of a live session that a
    /// turn continues meanwhile. Nothing waits for it; if it finds the receipt gone (an
    /// operator's forget), the session is released after that turn and the next one is new.
    Checking { since: Moment },
    /// Read for the coming start.
    Fresh,
    /// The last read failed or did not answer in time; the coming start decides from the belief.
    Unreadable,
}

/// A scope's receipt, as far as the lifecycle knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptView {
    /// What the store is believed to hold.
    pub belief: Belief,
    /// How current that is.
    pub freshness: Freshness,
}

impl ReceiptView {
    /// Whether a start may proceed without reading first.
    pub fn ready_for_start(&self) -> bool {
        matches!(self.freshness, Freshness::Fresh | Freshness::Unreadable)
    }

    /// The start consumed the belief: the next one reads again.
    pub fn consumed(&mut self) {
        self.freshness = Freshness::Stale;
    }
}

impl From<Option<SessionRecord>> for Belief {
    fn from(record: Option<SessionRecord>) -> Self {
        match record {
            Some(record) => Belief::Present(record),
            None => Belief::Absent,
        }
    }
}
