//! The functional core shared by the SQL backends: one receipt as one row, the checks a write
//! must pass, and the stale-commit decision. No I/O here, so every rule is tested once and both
//! backends agree by construction.
//!
//! ```text
//! buzz_receipts(scope_id, scope_key, session_id, model, permission_mode, requested_model,
//!               requested_permission_mode, standing_context_sent, delivered_event_ids, last_used_ms)
//! ```
//!
//! `delivered_event_ids` is a JSON array of strings, or NULL when the receipt has no delivery
//! ledger yet (`standing_context_sent` is then false and ignored).

use std::collections::HashSet;

use crate::delivery::bound_delivered;
use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::receipt_store::{CommitOutcome, Removal, StoredReceipt, UnixMillis};
use crate::record::{DeliveryRecord, SessionRecord};

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

/// Refuses a key or record that could never be read back: one rule for every store, the SQL
/// backends and the old JSON file alike. `key` is already mapped by the store's scheme.
pub(crate) fn check_put(key: &ScopeKey, record: &SessionRecord) -> Result<(), StoreError> {
    if let Err(e) = key.validate() {
        return Err(StoreError::Invalid {
            key: key.to_storage_key(),
            reason: e.to_string(),
        });
    }
    if record.session_id.trim().is_empty() {
        return Err(StoreError::Invalid {
            key: key.to_storage_key(),
            reason: "empty session id".into(),
        });
    }
    Ok(())
}

/// Checks a `put` and returns the key as stored and the record in the form written.
pub(crate) fn prepare_put(
    scheme: KeyScheme,
    key: &ScopeKey,
    record: &SessionRecord,
) -> Result<(ScopeKey, SessionRecord), StoreError> {
    let key = scheme.map(key);
    check_put(&key, record)?;
    Ok((key, record.clone().normalized()))
}

/// The row a `put` writes: checked and mapped (see [`prepare_put`]), used `now`.
pub(crate) fn put_row(
    scheme: KeyScheme,
    key: &ScopeKey,
    record: &SessionRecord,
    now: UnixMillis,
) -> Result<Row, StoreError> {
    let (key, record) = prepare_put(scheme, key, record)?;
    Row::from_record(&key, &record, now)
}

/// The rows an `import` writes: each record checked and mapped as a `put` would be, used `now`.
pub(crate) fn prepare_import(
    scheme: KeyScheme,
    records: &[(ScopeKey, SessionRecord)],
    now: UnixMillis,
) -> Result<Vec<Row>, StoreError> {
    records
        .iter()
        .map(|(key, record)| put_row(scheme, key, record, now))
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

/// Decides a `remove` (`only_session: None`) or `remove_if_session` from the session the stored
/// receipt names: `Ok(session)` means delete the row and report it removed; `Err` is the final
/// answer, and nothing is deleted.
pub(crate) fn plan_removal(
    stored: Option<String>,
    only_session: Option<&str>,
) -> Result<String, Removal> {
    let Some(stored) = stored else {
        return Err(Removal::Absent);
    };
    if only_session.is_some_and(|wanted| wanted != stored) {
        return Err(Removal::OtherSession {
            stored_session_id: stored,
        });
    }
    Ok(stored)
}

impl Row {
    /// The row for a checked `put` (see [`prepare_put`]).
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
        })
    }

    /// Decodes a stored row strictly: a key the harness would never derive, an empty session id
    /// or a malformed ledger is reported, not resumed.
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
        Ok(StoredReceipt {
            key,
            record: SessionRecord {
                session_id: self.session_id,
                model: self.model,
                permission_mode: self.permission_mode,
                requested_model: self.requested_model,
                requested_permission_mode: self.requested_permission_mode,
                delivery,
            },
            last_used: UnixMillis::from_sql(self.last_used_ms),
        })
    }
}

/// What a `commit_delivery` must do, decided from the stored receipt's session and ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitPlan {
    /// No receipt for the key.
    NoReceipt,
    /// The receipt names another session: refuse.
    OtherSession(String),
    /// The ledger already is the committed one: refresh recency only.
    Unchanged,
    /// Write these ledger columns (and the recency), guarded by the session id.
    Write(LedgerColumns),
}

impl CommitPlan {
    /// The guarded `UPDATE` a backend runs for this plan: `Ok((outcome, ledger))` writes `ledger`
    /// (`None`: only the recency) and reports `outcome` if the guard matched (see
    /// [`guarded_outcome`]); `Err` is the final answer, and nothing is written.
    pub(crate) fn into_update(
        self,
    ) -> Result<(CommitOutcome, Option<LedgerColumns>), CommitOutcome> {
        match self {
            Self::NoReceipt => Err(CommitOutcome::NoReceipt),
            Self::OtherSession(stored_session_id) => {
                Err(CommitOutcome::OtherSession { stored_session_id })
            }
            Self::Unchanged => Ok((CommitOutcome::Unchanged, None)),
            Self::Write(ledger) => Ok((CommitOutcome::Written, Some(ledger))),
        }
    }
}

/// The stale-commit guard and the ledger bound, as one pure decision. Takes the stored receipt
/// by value (the caller has no further use for it), so nothing is copied on the per-turn path.
pub(crate) fn plan_commit(
    stored: Option<(String, Option<DeliveryRecord>)>,
    session_id: &str,
    standing_sent: bool,
    new_ids: &[String],
    live_window: &HashSet<String>,
) -> Result<CommitPlan, StoreError> {
    let Some((stored_session, old)) = stored else {
        return Ok(CommitPlan::NoReceipt);
    };
    if stored_session != session_id {
        return Ok(CommitPlan::OtherSession(stored_session));
    }
    let (old_standing, old_ids) = old.as_ref().map_or((false, &[][..]), |d| {
        (d.standing_context_sent, d.delivered_event_ids.as_slice())
    });
    let new = DeliveryRecord {
        standing_context_sent: old_standing || standing_sent,
        delivered_event_ids: bound_delivered(old_ids, new_ids, live_window),
    };
    if old.as_ref() == Some(&new) {
        return Ok(CommitPlan::Unchanged);
    }
    Ok(CommitPlan::Write(LedgerColumns::encode(Some(&new))?))
}

/// [`plan_commit`] from the columns a backend read for `storage_key` (its session id and ledger
/// columns, `None` for no row). The ledger is decoded before the session is compared, so an
/// unreadable row is reported whichever session asks.
pub(crate) fn plan_commit_row(
    storage_key: &str,
    stored: Option<(String, LedgerColumns)>,
    session_id: &str,
    standing_sent: bool,
    new_ids: &[String],
    live_window: &HashSet<String>,
) -> Result<CommitPlan, StoreError> {
    let stored = stored
        .map(|(session, columns)| Ok::<_, StoreError>((session, columns.decode(storage_key)?)))
        .transpose()?;
    plan_commit(stored, session_id, standing_sent, new_ids, live_window)
}

/// The outcome of a guarded commit `UPDATE`: the planned one if it matched the row, else
/// `NoReceipt`. Both backends read the row under a lock, so the `UPDATE` should always match; if
/// it ever does not, the row is gone and "no receipt" is the truthful answer.
pub(crate) fn guarded_outcome(outcome: CommitOutcome, rows_updated: u64) -> CommitOutcome {
    if rows_updated == 1 {
        outcome
    } else {
        CommitOutcome::NoReceipt
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
mod tests {
    use super::*;

    const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";

    fn ids(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_record_round_trips_through_a_row() {
        let key = ScopeKey::thread(CHANNEL, "ab".repeat(32));
        let mut record = SessionRecord::new("s-1");
        record.model = Some("opus".into());
        record.requested_permission_mode = Some("plan".into());
        record.delivery = Some(DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: ids(&["b", "a", "a", ""]),
        });
        let (key, record) = prepare_put(KeyScheme::Scope, &key, &record).unwrap();
        let row = Row::from_record(&key, &record, UnixMillis(42)).unwrap();
        assert_eq!(row.delivered_event_ids.as_deref(), Some(r#"["a","b"]"#));
        let back = row.into_receipt().unwrap();
        assert_eq!(back.key, key);
        assert_eq!(back.record, record);
        assert_eq!(back.last_used, UnixMillis(42));

        let bare = Row::from_record(&key, &SessionRecord::new("s-2"), UnixMillis(1)).unwrap();
        assert_eq!(bare.delivered_event_ids, None);
        assert_eq!(bare.into_receipt().unwrap().record.delivery, None);
    }

    #[test]
    fn unreadable_rows_are_reported_with_their_key() {
        let good = Row::from_record(
            &ScopeKey::conversation(CHANNEL),
            &SessionRecord::new("s"),
            UnixMillis(1),
        )
        .unwrap();
        let cases = [
            Row {
                scope_key: "general".into(),
                ..good.clone()
            },
            Row {
                session_id: " ".into(),
                ..good.clone()
            },
            Row {
                delivered_event_ids: Some("{\"not\":\"a list\"}".into()),
                ..good.clone()
            },
        ];
        for row in cases {
            let key = row.scope_key.clone();
            let err = row.into_receipt().unwrap_err();
            assert!(
                matches!(&err, StoreError::CorruptRow { key: k, .. } if *k == key),
                "{err:?}"
            );
        }
    }

    #[test]
    fn puts_are_checked_and_mapped_by_the_scheme() {
        let thread = ScopeKey::thread(CHANNEL, "cd".repeat(32));
        let (key, _) = prepare_put(KeyScheme::Channel, &thread, &SessionRecord::new("s")).unwrap();
        assert_eq!(key, ScopeKey::conversation(CHANNEL));
        assert!(matches!(
            prepare_put(KeyScheme::Scope, &thread, &SessionRecord::new("  ")),
            Err(StoreError::Invalid { .. })
        ));
        assert!(matches!(
            prepare_put(
                KeyScheme::Scope,
                &ScopeKey::conversation("general"),
                &SessionRecord::new("s")
            ),
            Err(StoreError::Invalid { .. })
        ));
    }

    #[test]
    fn the_commit_plan_guards_the_session_and_bounds_the_ledger() {
        let window: HashSet<String> = ids(&["kept"]).into_iter().collect();
        assert_eq!(
            plan_commit(None, "s", false, &ids(&["x"]), &window).unwrap(),
            CommitPlan::NoReceipt
        );
        assert_eq!(
            plan_commit(
                Some(("other".into(), None)),
                "s",
                false,
                &ids(&["x"]),
                &window
            )
            .unwrap(),
            CommitPlan::OtherSession("other".into())
        );
        let old = DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: ids(&["gone", "kept"]),
        };
        let CommitPlan::Write(cols) = plan_commit(
            Some(("s".into(), Some(old))),
            "s",
            false,
            &ids(&["x"]),
            &window,
        )
        .unwrap() else {
            panic!("expected a write");
        };
        assert!(
            cols.standing_context_sent,
            "standing is ORed, never cleared"
        );
        assert_eq!(cols.delivered_event_ids.as_deref(), Some(r#"["kept","x"]"#));
        let same = DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: ids(&["kept", "x"]),
        };
        assert_eq!(
            plan_commit(
                Some(("s".into(), Some(same))),
                "s",
                false,
                &ids(&["x"]),
                &window
            )
            .unwrap(),
            CommitPlan::Unchanged
        );
        // A first commit of nothing still creates the (empty) ledger: it records that a turn
        // succeeded in this session.
        assert!(matches!(
            plan_commit(Some(("s".into(), None)), "s", false, &[], &window).unwrap(),
            CommitPlan::Write(_)
        ));
    }

    #[test]
    fn a_channel_range_holds_its_threads_and_no_other_channel() {
        let (exact, lower, upper) = channel_key_range(&CHANNEL.to_uppercase());
        assert_eq!(exact, CHANNEL);
        let inside = ScopeKey::thread(CHANNEL, "ff".repeat(32)).to_storage_key();
        assert!(lower.as_str() <= inside.as_str() && inside.as_str() < upper.as_str());
        for other in [
            "0b9f3a52-6c1e-4d2a-9f00-1234567890ac",
            "0b9f3a52-6c1e-4d2a-9f00-1234567890aa",
        ] {
            let conv = ScopeKey::conversation(other).to_storage_key();
            let thread = ScopeKey::thread(other, "00".repeat(32)).to_storage_key();
            for key in [conv, thread] {
                assert!(
                    !(lower.as_str() <= key.as_str() && key.as_str() < upper.as_str()),
                    "{key}"
                );
                assert_ne!(key, exact);
            }
        }
    }
}
