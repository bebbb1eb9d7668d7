//! The functional core shared by the SQL backends: one receipt as one row, the checks a write
//! must pass, and the store's rules ([`crate::rules`]) applied to columns. No I/O here, so every
//! rule is tested once and both backends agree by construction.
//!
//! ```text
//! buzz_receipts(scope_id, scope_key, session_id, model, permission_mode, requested_model,
//!               requested_permission_mode, standing_context_sent, delivered_event_ids,
//!               last_used_ms, ext)
//! buzz_receipt_forgets(scope_id, scope_key, forgotten_ms)          the tombstones
//! buzz_receipt_scopes(id, relay, agent_pubkey, receipts, watermark_s)  one per (relay, agent key)
//! ```
//!
//! `delivered_event_ids` is a JSON array of strings, or NULL when the receipt has no delivery
//! ledger yet (`standing_context_sent` is then false and ignored). `ext` holds the fields added in
//! schema revision 1 (turns, usage, handoff, retirement) as a JSON object that names the session
//! it belongs to ([`Ext::session_id`]): a harness that predates the revision rewrites the other
//! columns and leaves `ext` as it was, and the binding is what stops those stale values from being
//! read as the new session's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::receipt_store::{
    CommitOutcome, Expect, ForgetOutcome, PutOutcome, Removal, StoredReceipt, TurnCommit,
    UnixMillis,
};
use crate::record::{self, DeliveryRecord, Handoff, Retirement, SessionRecord, Usage};
use crate::rules;
pub(crate) use crate::rules::{Refusal, State, admit};

/// How long a tombstone is kept. A queued write older than its tombstone is refused only while the
/// tombstone exists, so this must outlast any write queue: the harness's worker gives up on a
/// queued write long before (its replay follows an outage of minutes or hours, not weeks).
/// Tombstones are a few dozen bytes each and there is one per forgotten scope at most.
pub const TOMBSTONE_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// One receipt in column form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) scope_key: String,
    pub(crate) session_id: String,
    pub(crate) model: Option<String>,
    pub(crate) permission_mode: Option<String>,
    pub(crate) requested_model: Option<String>,
    pub(crate) requested_permission_mode: Option<String>,
    pub(crate) standing_context_sent: bool,
    pub(crate) delivered_event_ids: Option<String>,
    pub(crate) last_used_ms: i64,
    pub(crate) ext: Option<String>,
}

/// The `ext` column: the fields of schema revision 1, bound to the session they belong to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Ext {
    /// The session these fields describe; a row that names another session reads them as unknown.
    pub(crate) session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) handoff: Option<Handoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retired: Option<Retirement>,
}

impl Ext {
    /// The fields of `record`, bound to its session.
    fn of(record: &SessionRecord) -> Self {
        Self {
            session_id: record.session_id.clone(),
            turns: record.turns,
            usage: record.usage,
            handoff: record.handoff.clone(),
            retired: record.retired.clone(),
        }
    }

    /// The column value: `None` (NULL) when every field is unknown.
    fn encode(&self) -> Result<Option<String>, StoreError> {
        let empty = self.turns.is_none()
            && self.usage.is_none()
            && self.handoff.is_none()
            && self.retired.is_none();
        if empty {
            return Ok(None);
        }
        Ok(Some(serde_json::to_string(self)?))
    }

    /// The fields stored in `column` for the row of `key` naming `session_id`; all unknown when
    /// the column is NULL or was written for another session.
    fn decode(column: Option<&str>, key: &str, session_id: &str) -> Result<Self, StoreError> {
        let unknown = Self {
            session_id: session_id.to_owned(),
            ..Self::default()
        };
        let Some(text) = column else {
            return Ok(unknown);
        };
        let ext: Self = serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
            key: key.to_owned(),
            reason: format!("ext is not a receipt extension: {e}"),
        })?;
        Ok(if ext.session_id == session_id {
            ext
        } else {
            unknown
        })
    }
}

/// The ledger columns of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerColumns {
    pub(crate) standing_context_sent: bool,
    pub(crate) delivered_event_ids: Option<String>,
}

impl LedgerColumns {
    /// Encodes a ledger (already normalized).
    pub(crate) fn encode(delivery: Option<&DeliveryRecord>) -> Result<Self, StoreError> {
        Ok(match delivery {
            None => Self {
                standing_context_sent: false,
                delivered_event_ids: None,
            },
            Some(d) => Self {
                standing_context_sent: d.standing_context_sent,
                delivered_event_ids: Some(serde_json::to_string(&d.delivered_event_ids)?),
            },
        })
    }

    /// Decodes the ledger of the row stored under `key`.
    pub(crate) fn decode(&self, key: &str) -> Result<Option<DeliveryRecord>, StoreError> {
        let Some(text) = &self.delivered_event_ids else {
            return Ok(None);
        };
        let ids: Vec<String> = serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
            key: key.to_owned(),
            reason: format!("delivered_event_ids is not a JSON array of strings: {e}"),
        })?;
        let mut delivery = DeliveryRecord {
            standing_context_sent: self.standing_context_sent,
            delivered_event_ids: ids,
        };
        delivery.normalize();
        Ok(Some(delivery))
    }
}

/// Refuses a key that could never be read back: one rule for every backend. `key` is already
/// mapped by the store's scheme.
pub(crate) fn check_key(key: &ScopeKey) -> Result<(), StoreError> {
    key.validate().map_err(|e| StoreError::Invalid {
        key: key.to_storage_key(),
        reason: e.to_string(),
    })
}

/// Checks a `put` and returns the row it writes: mapped by the scheme, normalized, last written
/// `now`.
pub(crate) fn put_row(
    scheme: KeyScheme,
    key: &ScopeKey,
    record: &SessionRecord,
    now: UnixMillis,
) -> Result<Row, StoreError> {
    let key = scheme.map(key);
    check_key(&key)?;
    record.check(&key.to_storage_key())?;
    Row::from_record(&key, &record.clone().normalized(), now)
}

/// The rows an `import` writes: each receipt checked and mapped as a `put` would be, with its own
/// time.
pub(crate) fn import_rows(
    scheme: KeyScheme,
    receipts: &[StoredReceipt],
) -> Result<Vec<Row>, StoreError> {
    receipts
        .iter()
        .map(|r| put_row(scheme, &r.key, &r.record, r.last_used))
        .collect()
}

/// Refuses a zero receipt cap at open: a store that evicts every receipt it writes would look
/// enabled while remembering nothing.
pub(crate) fn check_cap(max_receipts: usize) -> Result<(), StoreError> {
    if max_receipts == 0 {
        return Err(StoreError::Config {
            reason: "the receipt cap must be at least 1".into(),
        });
    }
    Ok(())
}

/// How many receipts to evict so that `count` fits `cap`, or `None` when it already fits. In
/// `i64` because both databases count in signed 64-bit columns.
pub(crate) fn excess_over_cap(count: i64, cap: usize) -> Option<i64> {
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    (count > cap).then(|| count - cap)
}

/// How a watermark is named in errors: the column, for the store's (relay, agent key).
const WATERMARK: &str = "buzz_receipt_scopes.watermark_s";

/// A watermark as stored in `watermark_s` (a signed 64-bit column). A value past `i64::MAX` is
/// refused, not wrapped or saturated: stored, it would say something else than was asked.
pub(crate) fn watermark_to_sql(secs: u64) -> Result<i64, StoreError> {
    i64::try_from(secs).map_err(|_| StoreError::Invalid {
        key: WATERMARK.into(),
        reason: format!(
            "a watermark of {secs} s is past the largest storable time ({} s)",
            i64::MAX
        ),
    })
}

/// A stored watermark. A negative value (never written by this crate) is reported as unreadable
/// rather than read as some other time.
pub(crate) fn watermark_from_sql(value: Option<i64>) -> Result<Option<u64>, StoreError> {
    value
        .map(|v| {
            u64::try_from(v).map_err(|_| StoreError::CorruptRow {
                key: WATERMARK.into(),
                reason: format!("the watermark {v} is negative"),
            })
        })
        .transpose()
}

/// Tombstones forgotten before this time may be purged when a forget runs at `now`.
pub(crate) fn tombstone_purge_before(now: UnixMillis) -> i64 {
    let retention = u64::try_from(TOMBSTONE_RETENTION.as_millis()).unwrap_or(u64::MAX);
    UnixMillis(now.0.saturating_sub(retention)).to_sql()
}

/// A put's answer when [`admit`] refused it.
pub(crate) fn put_refused(refusal: Refusal) -> PutOutcome {
    match refusal {
        Refusal::Conflict(stored) => PutOutcome::Conflict { stored },
        Refusal::Forgotten(at) => PutOutcome::Forgotten { at },
    }
}

/// A commit's answer when [`admit`] refused it.
pub(crate) fn commit_refused(refusal: Refusal) -> CommitOutcome {
    match refusal {
        Refusal::Conflict(stored) => CommitOutcome::Conflict { stored },
        Refusal::Forgotten(at) => CommitOutcome::Forgotten { at },
    }
}

/// Decides a `remove` ([`rules::removal`]): `Ok(session)` means delete the row and report it
/// removed; `Err` is the final answer, and nothing is deleted.
pub(crate) fn plan_removal(state: State, expect: &Expect) -> Result<String, Removal> {
    rules::removal(&state, expect)
}

/// Decides a `forget` ([`rules::forget`]): `Ok(session)` means delete the receipt row (if any)
/// and set the tombstone, reporting the live receipt's session; `Err` is the final answer.
pub(crate) fn plan_forget(state: State, expect: &Expect) -> Result<Option<String>, ForgetOutcome> {
    rules::forget(&state, expect)
}

/// The columns of a live receipt that a commit reads and rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitColumns {
    pub(crate) ledger: LedgerColumns,
    pub(crate) ext: Option<String>,
}

/// What a `commit_turn` must do, decided from what is stored under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitPlan {
    /// Refused: the final answer; nothing is written.
    Refuse(CommitOutcome),
    /// The receipt already is the committed one: refresh recency only.
    Unchanged,
    /// Write these columns (and the recency), guarded by the session id.
    Write(CommitColumns),
}

/// The guard and the merge of a turn commit, as one pure decision over the stored columns:
/// [`rules::admit_commit`], then [`rules::apply_commit`] on the receipt the columns hold.
/// `stored` is the live receipt's columns when the state is live.
pub(crate) fn plan_commit(
    storage_key: &str,
    state: &State,
    stored: Option<CommitColumns>,
    commit: &TurnCommit,
    now: UnixMillis,
) -> Result<CommitPlan, StoreError> {
    record::check_ledger(storage_key, &commit.delivered_event_ids)?;
    if let Err(refusal) = rules::admit_commit(state, commit, now) {
        return Ok(CommitPlan::Refuse(commit_refused(refusal)));
    }
    let Some(old) = stored else {
        return Ok(CommitPlan::Refuse(CommitOutcome::Conflict { stored: None }));
    };
    // The part of the receipt a commit reads, as a record of the commit's session (an `ext`
    // bound to another session reads as unknown).
    let old_ext = Ext::decode(old.ext.as_deref(), storage_key, &commit.session_id)?;
    let mut merged = SessionRecord {
        delivery: old.ledger.decode(storage_key)?,
        turns: old_ext.turns,
        usage: old_ext.usage,
        handoff: old_ext.handoff.clone(),
        retired: old_ext.retired.clone(),
        ..SessionRecord::new(commit.session_id.clone())
    };
    rules::apply_commit(&mut merged, commit);
    let new_ext = Ext::of(&merged);
    let new = CommitColumns {
        ledger: LedgerColumns::encode(merged.delivery.as_ref())?,
        ext: new_ext.encode()?,
    };
    // The ledger is compared as stored, so a column not in canonical form is rewritten; `ext` as
    // decoded, so a NULL and one bound to another session count as equal when both mean
    // "unknown".
    if old.ledger == new.ledger && old_ext == new_ext {
        return Ok(CommitPlan::Unchanged);
    }
    Ok(CommitPlan::Write(new))
}

/// Decides the rows of an import from what is stored under each key: `Ok(row)` is inserted (over a
/// receipt row that is not live), `Err` is why it was skipped.
pub(crate) fn plan_import(row: &Row, state: &State) -> Result<(), ImportSkip> {
    match state {
        State::Live { .. } => Err(ImportSkip::Existing),
        State::Forgotten { at } if UnixMillis::from_sql(row.last_used_ms) <= *at => {
            Err(ImportSkip::Forgotten)
        }
        State::Forgotten { .. } | State::Nothing => Ok(()),
    }
}

/// Why an imported receipt was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImportSkip {
    /// The key has a live receipt.
    Existing,
    /// The key was forgotten after the receipt was last written.
    Forgotten,
}

impl Row {
    /// The row for a checked, normalized record.
    pub(crate) fn from_record(
        key: &ScopeKey,
        record: &SessionRecord,
        now: UnixMillis,
    ) -> Result<Self, StoreError> {
        let ledger = LedgerColumns::encode(record.delivery.as_ref())?;
        Ok(Self {
            scope_key: key.to_storage_key(),
            session_id: record.session_id.clone(),
            model: record.model.clone(),
            permission_mode: record.permission_mode.clone(),
            requested_model: record.requested_model.clone(),
            requested_permission_mode: record.requested_permission_mode.clone(),
            standing_context_sent: ledger.standing_context_sent,
            delivered_event_ids: ledger.delivered_event_ids,
            last_used_ms: now.to_sql(),
            ext: Ext::of(record).encode()?,
        })
    }

    /// Decodes a stored row strictly: a key the harness would never derive, an empty session id
    /// or a malformed ledger or extension is reported, not resumed.
    pub(crate) fn into_receipt(self) -> Result<StoredReceipt, StoreError> {
        let key =
            ScopeKey::parse_storage_key(&self.scope_key).map_err(|e| StoreError::CorruptRow {
                key: self.scope_key.clone(),
                reason: e.to_string(),
            })?;
        if self.session_id.trim().is_empty() {
            return Err(StoreError::CorruptRow {
                key: self.scope_key,
                reason: "empty session id".into(),
            });
        }
        let delivery = LedgerColumns {
            standing_context_sent: self.standing_context_sent,
            delivered_event_ids: self.delivered_event_ids,
        }
        .decode(&self.scope_key)?;
        let ext = Ext::decode(self.ext.as_deref(), &self.scope_key, &self.session_id)?;
        Ok(StoredReceipt {
            key,
            record: SessionRecord {
                session_id: self.session_id,
                model: self.model,
                permission_mode: self.permission_mode,
                requested_model: self.requested_model,
                requested_permission_mode: self.requested_permission_mode,
                delivery,
                turns: ext.turns,
                usage: ext.usage,
                handoff: ext.handoff,
                retired: ext.retired,
            },
            last_used: UnixMillis::from_sql(self.last_used_ms),
        })
    }
}

/// The storage keys of one channel form the range `[channel, channel + "0")`: the conversation key
/// is the channel itself and every thread key is `channel/…` (`/` sorts just before `0`, and no
/// canonical key of another channel falls inside). Returns (exact key, thread lower bound, upper
/// bound), so the delete is an index range scan in byte order.
pub(crate) fn channel_key_range(channel_id: &str) -> (String, String, String) {
    let channel = channel_id.to_ascii_lowercase();
    let lower = format!("{channel}/");
    let upper = format!("{channel}0");
    (channel, lower, upper)
}

#[cfg(test)]
mod tests;
