//! The store's rules, as pure functions over plain values: which conditional writes a key admits,
//! and what a turn commit does to a receipt. No I/O: the SQL backends ([`crate::sqlite`],
//! [`crate::pg`]) call these inside their transactions, and anything that models the store (the
//! session lifecycle's in-memory store and its write queue) calls the same functions, so a test
//! against a model checks the store's rules, not a copy of them.
//!
//! # Admission
//!
//! A conditional write is decided from what its key holds ([`State`]), what the write expects
//! ([`Expect`]) and when it was decided:
//!
//! ```
//! use buzz_session_store::rules::{self, Refusal, State};
//! use buzz_session_store::{Expect, UnixMillis};
//!
//! let held = State::classify(Some(("s1".to_owned(), UnixMillis(10))), None);
//! assert_eq!(rules::admit(&held, &Expect::Session("s1".into()), UnixMillis(20)), Ok(()));
//! assert_eq!(
//!     rules::admit(&held, &Expect::Absent, UnixMillis(20)),
//!     Err(Refusal::Conflict(Some("s1".into())))
//! );
//! // An operator forgot the key at 30: nothing decided at or before 30 writes it again.
//! let forgotten = State::classify(None, Some(UnixMillis(30)));
//! assert_eq!(
//!     rules::admit(&forgotten, &Expect::Absent, UnixMillis(30)),
//!     Err(Refusal::Forgotten(UnixMillis(30)))
//! );
//! ```
//!
//! # Turn commits
//!
//! A [`TurnCommit`] admitted by [`admit_commit`] is merged into the stored receipt by
//! [`apply_commit`]; two commits of one session waiting in a queue fold into one by
//! [`fold_commits`], with the same effect as applying both in order. Every field of a commit
//! REPLACES the stored one, `None` included (`None` means "unknown", and a receipt must not claim
//! a count or a usage its session never reported), except two that only ever grow: the
//! standing-context flag is ORed in (what was sent cannot be unsent), and a delivered handoff is
//! cleared (a handoff not reported delivered is kept).

use crate::receipt_store::{Expect, ForgetOutcome, Removal, TurnCommit, UnixMillis};
use crate::record::{DeliveryRecord, SessionRecord};

/// What is stored under one key, as far as the conditions care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No receipt and no tombstone.
    Nothing,
    /// A live receipt: one a read returns.
    Live {
        /// The session the receipt names.
        session_id: String,
        /// When the receipt was last written (a put or a commit).
        last_used: UnixMillis,
    },
    /// A tombstone (an operator's forget, or a channel removal), and no receipt written after it.
    Forgotten {
        /// When the key was forgotten (the latest forget, if several).
        at: UnixMillis,
    },
}

impl State {
    /// Classifies a key from its receipt (the session it names, when it was last written) and
    /// its tombstone (when it was forgotten). A receipt written after the tombstone is live (a
    /// harness that predates tombstones may write one); a receipt at or before it is not.
    pub fn classify(receipt: Option<(String, UnixMillis)>, forgotten: Option<UnixMillis>) -> Self {
        match (receipt, forgotten) {
            (Some((session_id, last_used)), at) if at.is_none_or(|at| last_used > at) => {
                Self::Live {
                    session_id,
                    last_used,
                }
            }
            (_, Some(at)) => Self::Forgotten { at },
            (_, None) => Self::Nothing,
        }
    }

    /// [`State::classify`] from the columns as SQL stores them (milliseconds in a signed 64-bit
    /// column; a negative value, never written by this crate, reads as 0).
    pub(crate) fn of(receipt: Option<(String, i64)>, forgotten_ms: Option<i64>) -> Self {
        Self::classify(
            receipt.map(|(session_id, used)| (session_id, UnixMillis::from_sql(used))),
            forgotten_ms.map(UnixMillis::from_sql),
        )
    }

    /// Whether a receipt exists that a read would return.
    pub fn is_live(&self) -> bool {
        matches!(self, Self::Live { .. })
    }

    /// The session the live receipt names; `None` when there is no live receipt.
    pub fn live_session(&self) -> Option<&str> {
        match self {
            Self::Live { session_id, .. } => Some(session_id),
            Self::Nothing | Self::Forgotten { .. } => None,
        }
    }
}

/// Why a conditional write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The expectation does not hold; the live receipt names this session (`None`: there is no
    /// live receipt).
    Conflict(Option<String>),
    /// The key was forgotten at this time, at or after the write was decided (or the receipt the
    /// write expected is gone with the forget).
    Forgotten(UnixMillis),
}

/// Whether a write decided at `decided` that expects `expect` may write a key that holds
/// `state` (see the module docs of [`crate::receipt_store`]).
///
/// A tombstone refuses every write decided at or before it, whatever it expects. Otherwise the
/// expectation decides: `Absent` holds where there is no live receipt; `Session(id)` only on a
/// live receipt naming `id` (a forgotten one is refused as forgotten); `NotWrittenSince(t)` where
/// whatever is stored (receipt or tombstone) was written at or before `t`, or nothing is.
///
/// # Errors
/// The [`Refusal`] that is the write's final answer: nothing may be written.
pub fn admit(state: &State, expect: &Expect, decided: UnixMillis) -> Result<(), Refusal> {
    if let State::Forgotten { at } = state
        && decided <= *at
    {
        return Err(Refusal::Forgotten(*at));
    }
    match (expect, state) {
        (Expect::Absent, State::Live { session_id, .. }) => {
            Err(Refusal::Conflict(Some(session_id.clone())))
        }
        (Expect::Absent, State::Nothing | State::Forgotten { .. }) => Ok(()),
        (Expect::Session(wanted), State::Live { session_id, .. }) => {
            if wanted == session_id {
                Ok(())
            } else {
                Err(Refusal::Conflict(Some(session_id.clone())))
            }
        }
        (Expect::Session(_), State::Nothing) => Err(Refusal::Conflict(None)),
        (Expect::Session(_), State::Forgotten { at }) => Err(Refusal::Forgotten(*at)),
        (
            Expect::NotWrittenSince(bound),
            State::Live {
                session_id,
                last_used,
            },
        ) => {
            if last_used <= bound {
                Ok(())
            } else {
                Err(Refusal::Conflict(Some(session_id.clone())))
            }
        }
        (Expect::NotWrittenSince(_), State::Nothing) => Ok(()),
        (Expect::NotWrittenSince(bound), State::Forgotten { at }) => {
            if at <= bound {
                Ok(())
            } else {
                Err(Refusal::Forgotten(*at))
            }
        }
    }
}

/// Whether a turn commit decided at `decided` may be merged into what `state` holds: only while
/// the live receipt names the commit's session (a commit's condition is its session).
///
/// # Errors
/// The [`Refusal`] that is the commit's final answer: nothing may be written.
pub fn admit_commit(
    state: &State,
    commit: &TurnCommit,
    decided: UnixMillis,
) -> Result<(), Refusal> {
    admit(state, &Expect::Session(commit.session_id.clone()), decided)
}

/// Decides a harness's removal (no tombstone) of the receipt of a key that holds `state`: `Ok`
/// names the session of the live receipt to delete; `Err` is the final answer and nothing is
/// deleted. Only a live receipt can be removed, and then only the expectation can refuse (a
/// tombstone older than the receipt is moot): a key without a live receipt answers
/// [`Removal::Absent`], a failed expectation [`Removal::Conflict`].
///
/// # Errors
/// [`Removal::Absent`] or [`Removal::Conflict`]: the removal's final answer.
pub fn removal(state: &State, expect: &Expect) -> Result<String, Removal> {
    let State::Live { session_id, .. } = state else {
        return Err(Removal::Absent);
    };
    // A live receipt: the decision time cannot matter, only the expectation.
    match admit(state, expect, UnixMillis(u64::MAX)) {
        Ok(()) => Ok(session_id.clone()),
        Err(_) => Err(Removal::Conflict {
            stored_session_id: session_id.clone(),
        }),
    }
}

/// Decides an operator's forget of a key that holds `state`: `Ok` means delete the receipt (if
/// any) and set the tombstone, and names the session of the live receipt it replaces (`None`:
/// there was none); `Err` is the final answer. Only a live receipt can fail the expectation; a
/// key without one is always forgotten (again).
///
/// # Errors
/// [`ForgetOutcome::Conflict`]: the receipt was written since the operator looked.
pub fn forget(state: &State, expect: &Expect) -> Result<Option<String>, ForgetOutcome> {
    let State::Live { session_id, .. } = state else {
        return Ok(None);
    };
    match admit(state, expect, UnixMillis(u64::MAX)) {
        Ok(()) => Ok(Some(session_id.clone())),
        Err(_) => Err(ForgetOutcome::Conflict {
            stored_session_id: session_id.clone(),
        }),
    }
}

/// Merges an admitted turn commit into the stored receipt (see [`admit_commit`]; this function
/// does not look at the session ids, so call it only for a receipt that names the commit's
/// session).
///
/// * the delivery ledger becomes the commit's ids, sorted, unique and without empty ids (a
///   receipt without a ledger gets one: a turn succeeded);
/// * the standing-context flag is the stored one ORed with the commit's;
/// * `turns` and `usage` are the commit's, **`None` included**: `None` means unknown, and the
///   stored value described an earlier state of the session;
/// * the handoff is cleared when the commit delivered it, else kept;
/// * everything else (session, configuration, retirement) is kept.
pub fn apply_commit(record: &mut SessionRecord, commit: &TurnCommit) {
    let standing = commit.standing_context_sent
        || record
            .delivery
            .as_ref()
            .is_some_and(|d| d.standing_context_sent);
    let mut ledger = DeliveryRecord {
        standing_context_sent: standing,
        delivered_event_ids: commit.delivered_event_ids.clone(),
    };
    ledger.normalize();
    record.delivery = Some(ledger);
    record.turns = commit.turns;
    record.usage = commit.usage;
    if commit.handoff_delivered {
        record.handoff = None;
    }
}

/// Two commits of one session as one commit with the same effect: for every receipt `r` naming
/// that session, applying `earlier` then `later` ([`apply_commit`]) leaves what applying the fold
/// once leaves. The later ledger, turns and usage win (`None` included, as the store replaces
/// them); the standing-context flag and the delivered handoff of either count.
///
/// Both must be of the same session (the caller checks): commits of two sessions can never both
/// be admitted, so no single commit stands for them.
pub fn fold_commits(earlier: TurnCommit, later: TurnCommit) -> TurnCommit {
    TurnCommit {
        standing_context_sent: earlier.standing_context_sent || later.standing_context_sent,
        handoff_delivered: earlier.handoff_delivered || later.handoff_delivered,
        ..later
    }
}

#[cfg(test)]
mod tests;
