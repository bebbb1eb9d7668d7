//! The contract every receipt backend passes, written once against `dyn ReceiptStore`.
//!
//! A backend's test target supplies a [`Medium`] factory (a fresh, empty database plus a state
//! directory per test) and expands [`contract_tests!`] with it. Stores are opened through the
//! crate's real entry point ([`buzz_session_store::open_with_report`]), so the URL handling and the
//! JSON import are part of what is tested.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use buzz_session_store::{
    Backend, ChannelRemoval, CommitOutcome, DeliveryRecord, Expect, ForgetOutcome, Handoff,
    ImportOutcome, KeyScheme, MAX_HANDOFF_TEXT_BYTES, Migration, OpenMode, Opened, PutOutcome,
    ReceiptStore, Removal, Retirement, ScopeKey, SessionRecord, StoreConfig, StoreError,
    StoreScope, StoredReceipt, TOMBSTONE_RETENTION, TurnCommit, UnixMillis, Usage,
    WatermarkOutcome, WriteRefusal, open_backend, open_with_report, rules, store_scopes,
};
use serde_json::json;

pub const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
pub const OTHER_CHANNEL: &str = "11111111-2222-4333-8444-555555555555";
pub const RELAY: &str = "wss://relay.example";
pub const OTHER_RELAY: &str = "wss://other-relay.example";

/// A fresh, empty place for receipts: a backend location plus a state directory.
pub struct Medium {
    pub backend: Backend,
    pub state_dir: tempfile::TempDir,
    /// Dropped with the medium (e.g. drops a PostgreSQL schema).
    pub cleanup: Option<Box<dyn FnOnce()>>,
}

impl Drop for Medium {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            cleanup();
        }
    }
}

impl Medium {
    pub fn config(&self, scope: StoreScope, scheme: KeyScheme, cap: usize) -> StoreConfig {
        StoreConfig {
            backend: self.backend.clone(),
            scope,
            scheme,
            max_receipts: cap,
            state_dir: self.state_dir.path().to_path_buf(),
            fence: None,
        }
    }

    /// Opens a store handle for `scope`, asserting that there was nothing to import.
    pub fn open_scope(
        &self,
        scope: StoreScope,
        scheme: KeyScheme,
        cap: usize,
    ) -> Box<dyn ReceiptStore> {
        let Opened { store, migration } =
            open_with_report(&self.config(scope, scheme, cap), UnixMillis(1)).unwrap();
        assert_eq!(migration.unwrap(), Migration::NoLegacyFile);
        store
    }

    pub fn open(&self) -> Box<dyn ReceiptStore> {
        self.open_scope(scope(), KeyScheme::Scope, 1_000)
    }

    pub fn open_with_cap(&self, cap: usize) -> Box<dyn ReceiptStore> {
        self.open_scope(scope(), KeyScheme::Scope, cap)
    }

    pub fn dir(&self) -> &Path {
        self.state_dir.path()
    }
}

pub fn pubkey() -> String {
    "ab".repeat(32)
}

pub fn scope() -> StoreScope {
    StoreScope {
        relay: RELAY.into(),
        agent_pubkey: pubkey(),
    }
}

pub fn root(n: usize) -> String {
    format!("{n:064x}")
}

pub fn conversation() -> ScopeKey {
    ScopeKey::conversation(CHANNEL)
}

pub fn thread(n: usize) -> ScopeKey {
    ScopeKey::thread(CHANNEL, root(n))
}

pub fn ids(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A turn commit of `session` that leaves `delivered` as the ledger, counting `turns`.
pub fn commit(session: &str, delivered: &[&str], turns: u32) -> TurnCommit {
    TurnCommit {
        session_id: session.into(),
        delivered_event_ids: ids(delivered),
        standing_context_sent: false,
        turns: Some(turns),
        usage: None,
        handoff_delivered: false,
    }
}

/// `put` of a new receipt for `session` (expecting none), which must be written.
pub fn put_new(store: &dyn ReceiptStore, key: &ScopeKey, session: &str, now: u64) {
    let outcome = store
        .put(key, &record(session), &Expect::Absent, UnixMillis(now))
        .unwrap();
    assert!(
        matches!(outcome, PutOutcome::Written { created: true, .. }),
        "{outcome:?}"
    );
}

pub fn record(session: &str) -> SessionRecord {
    let mut r = SessionRecord::new(session);
    r.model = Some("opus".into());
    r.permission_mode = None;
    r.requested_model = Some("opus".into());
    r.requested_permission_mode = Some("plan".into());
    r
}

fn written(created: bool) -> PutOutcome {
    PutOutcome::Written {
        created,
        evicted: 0,
    }
}

fn keys(store: &dyn ReceiptStore) -> Vec<ScopeKey> {
    store
        .receipts()
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect()
}

/// The session the receipt for `key` names; a missing receipt fails the test.
fn session_of(store: &dyn ReceiptStore, key: &ScopeKey) -> String {
    store.get(key).unwrap().unwrap().session_id
}

/// The delivered ids of the ledger for `key`; a missing receipt or ledger fails the test.
fn delivered(store: &dyn ReceiptStore, key: &ScopeKey) -> Vec<String> {
    store
        .get(key)
        .unwrap()
        .unwrap()
        .delivery
        .unwrap()
        .delivered_event_ids
}

/// `keys` in the order (and without repeats) that [`ReceiptStore::receipts`] lists them.
fn sorted<const N: usize>(keys: [ScopeKey; N]) -> Vec<ScopeKey> {
    keys.into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The counter eviction relies on must always equal the rows actually stored.
/// A scope that never wrote: what a read-only store of it reads.
const NEVER_WRITTEN: &str = "wss://never.example";

/// A read-only store of a (relay, agent key) that never wrote.
fn never_written(m: &Medium) -> Box<dyn ReceiptStore> {
    let stranger = StoreScope {
        relay: NEVER_WRITTEN.into(),
        agent_pubkey: pubkey(),
    };
    open_backend(
        &m.backend,
        stranger,
        KeyScheme::Scope,
        10,
        OpenMode::ReadOnly,
    )
    .unwrap()
}

/// Reading [`never_written`]'s store registered nothing.
fn assert_not_registered(m: &Medium) {
    let scopes = store_scopes(&m.backend).unwrap();
    assert!(!scopes.iter().any(|(s, _)| s.relay == NEVER_WRITTEN));
}

fn assert_count_is_true(store: &dyn ReceiptStore) {
    assert_eq!(store.len().unwrap(), store.receipts().unwrap().len());
}

// ---------------------------------------------------------------------------------------------
// Put / get
// ---------------------------------------------------------------------------------------------

pub fn an_empty_store_has_no_receipt(m: &Medium) {
    let store = m.open();
    assert_eq!(store.get(&conversation()).unwrap(), None);
    assert_eq!(store.get(&thread(1)).unwrap(), None);
    assert!(store.is_empty().unwrap());
    assert!(store.receipts().unwrap().is_empty());
}

pub fn a_put_is_read_back_by_every_handle_and_survives_reopen(m: &Medium) {
    let a = m.open();
    let b = m.open();
    let mut r = record("s-1");
    r.delivery = Some(DeliveryRecord {
        standing_context_sent: true,
        delivered_event_ids: ids(&["e2", "e1", "e1", ""]),
    });
    r.turns = Some(7);
    r.usage = Some(Usage {
        used_tokens: 5_000,
        context_tokens: Some(200_000),
    });
    r.handoff = Some(Handoff {
        text: "we were fixing the parser; tests in crates/x".into(),
        reason: "context-full".into(),
        from_session_id: "s-0".into(),
    });
    assert_eq!(
        a.put(&thread(1), &r, &Expect::Absent, UnixMillis(10))
            .unwrap(),
        written(true)
    );
    let mut normalized = r.clone();
    normalized.delivery = Some(DeliveryRecord {
        standing_context_sent: true,
        delivered_event_ids: ids(&["e1", "e2"]),
    });
    assert_eq!(b.get(&thread(1)).unwrap(), Some(normalized.clone()));
    drop(a);
    drop(b);
    let c = m.open();
    assert_eq!(c.get(&thread(1)).unwrap(), Some(normalized));
    assert_eq!(
        c.get(&thread(2)).unwrap(),
        None,
        "threads are separate keys"
    );
    assert_eq!(c.get(&conversation()).unwrap(), None);
    let listed = c.receipts().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_used, UnixMillis(10));
}

pub fn a_put_replaces_what_it_expected_and_says_whether_it_created(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 1);
    assert_eq!(
        store
            .put(
                &thread(1),
                &record("s-2"),
                &Expect::Session("s-1".into()),
                UnixMillis(2)
            )
            .unwrap(),
        written(false)
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-2")));
    // An in-place change (same session, new model) rewrites it and refreshes recency.
    let mut changed = record("s-2");
    changed.model = Some("sonnet".into());
    changed.requested_model = Some("sonnet".into());
    assert_eq!(
        store
            .put(
                &thread(1),
                &changed,
                &Expect::Session("s-2".into()),
                UnixMillis(3)
            )
            .unwrap(),
        written(false)
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(changed.clone()));
    assert_eq!(store.receipts().unwrap()[0].last_used, UnixMillis(3));
    assert_eq!(store.len().unwrap(), 1);
    // Spellings of one key share one receipt.
    let upper = ScopeKey::thread(CHANNEL.to_uppercase(), root(1).to_uppercase());
    assert_eq!(store.get(&upper).unwrap(), Some(changed));
}

pub fn invalid_puts_are_refused_and_write_nothing(m: &Medium) {
    let store = m.open();
    let bad_key = ScopeKey::conversation("general");
    assert!(matches!(
        store.put(&bad_key, &record("s"), &Expect::Absent, UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.put(&thread(1), &record("  "), &Expect::Absent, UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    let mut oversize = record("s");
    oversize.handoff = Some(Handoff {
        text: "x".repeat(MAX_HANDOFF_TEXT_BYTES + 1),
        reason: "r".into(),
        from_session_id: "old".into(),
    });
    assert!(matches!(
        store.put(&thread(1), &oversize, &Expect::Absent, UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    let bad_import = [
        StoredReceipt {
            key: thread(2),
            record: record("ok"),
            last_used: UnixMillis(1),
        },
        StoredReceipt {
            key: thread(3),
            record: record(""),
            last_used: UnixMillis(1),
        },
    ];
    assert!(matches!(
        store.import(&bad_import),
        Err(StoreError::Invalid { .. })
    ));
    assert!(store.is_empty().unwrap());
    assert!(store.receipts().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Conditional writes
// ---------------------------------------------------------------------------------------------

pub fn a_put_is_refused_when_its_expectation_does_not_hold(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 10);
    let refused = |expect: Expect, now: u64| {
        store
            .put(&thread(1), &record("late"), &expect, UnixMillis(now))
            .unwrap()
    };
    let conflict = PutOutcome::Conflict {
        stored: Some("s-1".into()),
    };
    assert_eq!(refused(Expect::Absent, 20), conflict);
    assert_eq!(refused(Expect::Session("s-0".into()), 20), conflict);
    assert_eq!(
        refused(Expect::NotWrittenSince(UnixMillis(9)), 20),
        conflict
    );
    assert_eq!(
        store
            .put(
                &thread(2),
                &record("late"),
                &Expect::Session("s-0".into()),
                UnixMillis(20)
            )
            .unwrap(),
        PutOutcome::Conflict { stored: None },
        "expected a session where there is none"
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-1")));
    assert_eq!(store.receipts().unwrap()[0].last_used, UnixMillis(10));
    assert_eq!(store.len().unwrap(), 1);
    // Whatever is stored was written at or before the bound: replaced.
    assert_eq!(
        store
            .put(
                &thread(1),
                &record("s-2"),
                &Expect::NotWrittenSince(UnixMillis(10)),
                UnixMillis(20)
            )
            .unwrap(),
        written(false)
    );
    assert_eq!(
        store
            .put(
                &thread(3),
                &record("s-3"),
                &Expect::NotWrittenSince(UnixMillis(10)),
                UnixMillis(20)
            )
            .unwrap(),
        written(true),
        "nothing stored satisfies the bound"
    );
    assert_count_is_true(store.as_ref());
}

pub fn a_write_replayed_after_an_outage_never_overwrites_a_newer_receipt(m: &Medium) {
    // Harness A read s-1 at t=10 and queued its successor's receipt while the store was out of
    // reach; meanwhile harness B (another process) replaced the receipt at t=30.
    let a = m.open();
    let b = m.open();
    put_new(a.as_ref(), &thread(1), "s-1", 10);
    b.put(
        &thread(1),
        &record("b-2"),
        &Expect::Session("s-1".into()),
        UnixMillis(30),
    )
    .unwrap();
    assert_eq!(
        a.put(
            &thread(1),
            &record("a-2"),
            &Expect::Session("s-1".into()),
            UnixMillis(20)
        )
        .unwrap(),
        PutOutcome::Conflict {
            stored: Some("b-2".into())
        }
    );
    // A could not read the receipt at t=20 and decided to replace whatever was there.
    assert_eq!(
        a.put(
            &thread(1),
            &record("a-2"),
            &Expect::NotWrittenSince(UnixMillis(20)),
            UnixMillis(20)
        )
        .unwrap(),
        PutOutcome::Conflict {
            stored: Some("b-2".into())
        }
    );
    assert_eq!(
        a.commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(21))
            .unwrap(),
        CommitOutcome::Conflict {
            stored: Some("b-2".into())
        }
    );
    assert_eq!(session_of(b.as_ref(), &thread(1)), "b-2");
    assert_eq!(b.receipts().unwrap()[0].last_used, UnixMillis(30));
}

pub fn remove_is_conditional_and_reports_what_it_removed(m: &Medium) {
    let store = m.open();
    assert_eq!(
        store
            .remove(&thread(1), &Expect::Session("s-1".into()))
            .unwrap(),
        Removal::Absent
    );
    put_new(store.as_ref(), &thread(1), "s-2", 5);
    assert_eq!(
        store
            .remove(&thread(1), &Expect::Session("s-1".into()))
            .unwrap(),
        Removal::Conflict {
            stored_session_id: "s-2".into()
        }
    );
    assert_eq!(
        store
            .remove(&thread(1), &Expect::NotWrittenSince(UnixMillis(4)))
            .unwrap(),
        Removal::Conflict {
            stored_session_id: "s-2".into()
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-2")));
    assert_eq!(
        store
            .remove(&thread(1), &Expect::Session("s-2".into()))
            .unwrap(),
        Removal::Removed {
            session_id: "s-2".into()
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), None);
    // A removal leaves no tombstone: a new receipt needs no later time.
    put_new(store.as_ref(), &thread(1), "s-3", 1);
    assert_count_is_true(store.as_ref());
}

pub fn remove_channel_removes_the_channel_and_its_threads_only(m: &Medium) {
    let store = m.open();
    let other_thread = ScopeKey::thread(OTHER_CHANNEL, root(1));
    for (i, key) in [
        conversation(),
        thread(1),
        thread(2),
        ScopeKey::conversation(OTHER_CHANNEL),
        other_thread.clone(),
    ]
    .iter()
    .enumerate()
    {
        put_new(store.as_ref(), key, &format!("s-{i}"), 1);
    }
    assert_eq!(
        store
            .remove_channel(&CHANNEL.to_uppercase(), UnixMillis(10))
            .unwrap(),
        ChannelRemoval::Removed(3)
    );
    assert_eq!(
        keys(store.as_ref()),
        sorted([other_thread, ScopeKey::conversation(OTHER_CHANNEL)])
    );
    // The removed receipts stay removed for writes decided before the removal.
    assert_eq!(
        store
            .commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(9))
            .unwrap(),
        CommitOutcome::Forgotten { at: UnixMillis(10) }
    );
    assert_eq!(
        store
            .put(&thread(2), &record("late"), &Expect::Absent, UnixMillis(9))
            .unwrap(),
        PutOutcome::Forgotten { at: UnixMillis(10) }
    );
    assert_eq!(
        store.remove_channel(CHANNEL, UnixMillis(11)).unwrap(),
        ChannelRemoval::Removed(0)
    );
    assert_count_is_true(store.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Turn commits
// ---------------------------------------------------------------------------------------------

pub fn commit_turn_reports_each_outcome_truthfully(m: &Medium) {
    let store = m.open();
    assert_eq!(
        store
            .commit_turn(&thread(1), &commit("s-1", &["e1"], 1), UnixMillis(5))
            .unwrap(),
        CommitOutcome::Conflict { stored: None }
    );
    assert!(
        store.is_empty().unwrap(),
        "a commit never creates a receipt"
    );

    let mut with_handoff = record("s-1");
    with_handoff.handoff = Some(Handoff {
        text: "pick up the failing test".into(),
        reason: "rotation".into(),
        from_session_id: "s-0".into(),
    });
    store
        .put(&thread(1), &with_handoff, &Expect::Absent, UnixMillis(1))
        .unwrap();
    let mut first = commit("s-1", &["e1", "e2"], 1);
    first.usage = Some(Usage {
        used_tokens: 900,
        context_tokens: Some(100_000),
    });
    assert_eq!(
        store
            .commit_turn(&thread(1), &first, UnixMillis(5))
            .unwrap(),
        CommitOutcome::Written
    );
    let stored = store.get(&thread(1)).unwrap().unwrap();
    assert_eq!(
        stored.delivery,
        Some(DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: ids(&["e1", "e2"]),
        })
    );
    assert_eq!(stored.turns, Some(1));
    assert_eq!(stored.usage, first.usage);
    assert!(stored.handoff.is_some(), "not delivered yet");
    assert_eq!(
        store
            .commit_turn(&thread(1), &first, UnixMillis(6))
            .unwrap(),
        CommitOutcome::Unchanged,
        "the receipt already says this"
    );
    assert_eq!(
        store.receipts().unwrap()[0].last_used,
        UnixMillis(6),
        "recency still refreshed"
    );

    // The ledger is replaced by what the lifecycle keeps; standing context is ORed in and never
    // cleared; a delivered handoff is cleared.
    let mut second = commit("s-1", &["e3"], 2);
    second.standing_context_sent = true;
    second.handoff_delivered = true;
    assert_eq!(
        store
            .commit_turn(&thread(1), &second, UnixMillis(7))
            .unwrap(),
        CommitOutcome::Written
    );
    let stored = store.get(&thread(1)).unwrap().unwrap();
    assert_eq!(
        stored.delivery,
        Some(DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: ids(&["e3"]),
        })
    );
    assert_eq!(stored.turns, Some(2));
    assert_eq!(stored.usage, None, "usage is replaced too");
    assert_eq!(stored.handoff, None);
    store
        .commit_turn(&thread(1), &commit("s-1", &[], 3), UnixMillis(8))
        .unwrap();
    let stored = store.get(&thread(1)).unwrap().unwrap();
    assert!(stored.delivery.unwrap().standing_context_sent);
}

/// The SQL backends store a commit as [`rules::apply_commit`] merges it, for every combination of
/// what is stored and what is committed (turns and usage `None` or not, a ledger or none, the
/// standing context sent or not, a handoff pending or delivered, a retirement kept), and answer
/// `Unchanged` exactly when the merge changes nothing.
pub fn a_commit_stores_what_the_rules_merge(m: &Medium) {
    let store = m.open();
    let key = thread(1);
    let usage = |used| Usage {
        used_tokens: used,
        context_tokens: Some(100_000),
    };
    let handoff = Handoff {
        text: "pick up the failing test".into(),
        reason: "rotation".into(),
        from_session_id: "s-0".into(),
    };
    let mut stored = Vec::new();
    for turns in [None, Some(2)] {
        for used in [None, Some(500)] {
            for standing in [None, Some(false), Some(true)] {
                for (handoff, retired) in [
                    (None, None),
                    (
                        Some(handoff.clone()),
                        Some(Retirement {
                            reason: "rotation".into(),
                        }),
                    ),
                ] {
                    let mut r = record("s-1");
                    r.turns = turns;
                    r.usage = used.map(usage);
                    r.delivery = standing.map(|standing_context_sent| DeliveryRecord {
                        standing_context_sent,
                        delivered_event_ids: ids(&["e1"]),
                    });
                    r.handoff = handoff;
                    r.retired = retired;
                    stored.push(r);
                }
            }
        }
    }
    let mut commits = Vec::new();
    for turns in [None, Some(3)] {
        for used in [None, Some(500)] {
            for standing_context_sent in [false, true] {
                for handoff_delivered in [false, true] {
                    commits.push(TurnCommit {
                        standing_context_sent,
                        turns,
                        usage: used.map(usage),
                        handoff_delivered,
                        ..commit("s-1", &["e1"], 0)
                    });
                }
            }
        }
    }
    let mut now = 0;
    for before in &stored {
        for c in &commits {
            now += 2;
            let put = store
                .put(
                    &key,
                    before,
                    &Expect::NotWrittenSince(UnixMillis(now)),
                    UnixMillis(now),
                )
                .unwrap();
            assert!(matches!(put, PutOutcome::Written { .. }), "{put:?}");
            let mut merged = before.clone();
            rules::apply_commit(&mut merged, c);
            let outcome = store.commit_turn(&key, c, UnixMillis(now + 1)).unwrap();
            let want = if merged == *before {
                CommitOutcome::Unchanged
            } else {
                CommitOutcome::Written
            };
            assert_eq!(outcome, want, "{c:?} into {before:?}");
            assert_eq!(
                store.get(&key).unwrap().as_ref(),
                Some(&merged),
                "{c:?} into {before:?}"
            );
        }
    }
}

pub fn a_retired_receipt_keeps_its_handoff_for_the_successor(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 1);
    // Rotation: the receipt still names s-1, marked retired, holding the handoff for the next
    // session.
    let mut retired = record("s-1");
    retired.retired = Some(Retirement {
        reason: "context-full".into(),
    });
    retired.handoff = Some(Handoff {
        text: "summary of s-1".into(),
        reason: "context-full".into(),
        from_session_id: "s-1".into(),
    });
    assert_eq!(
        store
            .put(
                &thread(1),
                &retired,
                &Expect::Session("s-1".into()),
                UnixMillis(2)
            )
            .unwrap(),
        written(false)
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(retired.clone()));
    // A late commit of the retired session leaves the retirement and the handoff alone.
    store
        .commit_turn(&thread(1), &commit("s-1", &["x"], 4), UnixMillis(3))
        .unwrap();
    let kept = store.get(&thread(1)).unwrap().unwrap();
    assert_eq!(kept.retired, retired.retired);
    assert_eq!(kept.handoff, retired.handoff);
    // The successor's receipt replaces it, carrying the handoff until it is delivered.
    let mut successor = record("s-2");
    successor.handoff = retired.handoff.clone();
    successor.turns = Some(0);
    store
        .put(
            &thread(1),
            &successor,
            &Expect::Session("s-1".into()),
            UnixMillis(4),
        )
        .unwrap();
    assert_eq!(store.get(&thread(1)).unwrap(), Some(successor));
}

pub fn oversize_ledgers_are_refused_not_cut(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 1);
    let many: Vec<String> = (0..=buzz_session_store::MAX_LEDGER_IDS)
        .map(|i| format!("e{i:05}"))
        .collect();
    let mut big = commit("s-1", &[], 1);
    big.delivered_event_ids = many;
    assert!(matches!(
        store.commit_turn(&thread(1), &big, UnixMillis(2)),
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-1")));
}

pub fn a_late_commit_from_a_replaced_session_is_refused(m: &Medium) {
    // Handle A loaded s-1; handle B (another process) replaced it with s-2 meanwhile.
    let a = m.open();
    let b = m.open();
    put_new(a.as_ref(), &thread(1), "s-1", 1);
    b.put(
        &thread(1),
        &record("s-2"),
        &Expect::Session("s-1".into()),
        UnixMillis(2),
    )
    .unwrap();
    b.commit_turn(&thread(1), &commit("s-2", &["mine"], 1), UnixMillis(3))
        .unwrap();
    assert_eq!(
        a.commit_turn(&thread(1), &commit("s-1", &["stale"], 9), UnixMillis(4))
            .unwrap(),
        CommitOutcome::Conflict {
            stored: Some("s-2".into())
        }
    );
    let kept = b.get(&thread(1)).unwrap().unwrap();
    assert_eq!(kept.session_id, "s-2");
    assert_eq!(kept.turns, Some(1));
    assert_eq!(
        kept.delivery,
        Some(DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: ids(&["mine"]),
        })
    );
    assert_eq!(
        b.receipts().unwrap()[0].last_used,
        UnixMillis(3),
        "a refused commit changes nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// Forget and tombstones
// ---------------------------------------------------------------------------------------------

pub fn a_forget_wins_against_queued_writes(m: &Medium) {
    let harness = m.open();
    let operator = m.open();
    put_new(harness.as_ref(), &thread(1), "s-1", 10);
    // The operator forgets the thread at t=20 while the harness holds writes decided at t=15.
    assert_eq!(
        operator
            .forget(
                &thread(1),
                &Expect::NotWrittenSince(UnixMillis(20)),
                UnixMillis(20)
            )
            .unwrap(),
        ForgetOutcome::Forgotten {
            session_id: Some("s-1".into())
        }
    );
    assert_eq!(harness.get(&thread(1)).unwrap(), None);
    assert!(harness.receipts().unwrap().is_empty());
    assert!(harness.is_empty().unwrap());
    let gone = UnixMillis(20);
    assert_eq!(
        harness
            .commit_turn(&thread(1), &commit("s-1", &["e"], 2), UnixMillis(15))
            .unwrap(),
        CommitOutcome::Forgotten { at: gone }
    );
    for expect in [
        Expect::Absent,
        Expect::Session("s-1".into()),
        Expect::NotWrittenSince(UnixMillis(15)),
    ] {
        assert_eq!(
            harness
                .put(&thread(1), &record("queued"), &expect, UnixMillis(15))
                .unwrap(),
            PutOutcome::Forgotten { at: gone },
            "{expect:?}"
        );
    }
    // The live session's next commit, decided after the forget, finds no receipt either: the
    // harness drops the session and the thread starts fresh.
    assert_eq!(
        harness
            .commit_turn(&thread(1), &commit("s-1", &["e"], 2), UnixMillis(25))
            .unwrap(),
        CommitOutcome::Forgotten { at: gone }
    );
    assert_eq!(
        harness
            .remove(&thread(1), &Expect::Session("s-1".into()))
            .unwrap(),
        Removal::Absent
    );
    assert_eq!(harness.get(&thread(1)).unwrap(), None);
    // The thread's next message starts a new session, decided after the forget.
    assert_eq!(
        harness
            .put(&thread(1), &record("s-2"), &Expect::Absent, UnixMillis(30))
            .unwrap(),
        written(true)
    );
    assert_eq!(session_of(operator.as_ref(), &thread(1)), "s-2");
    assert_count_is_true(harness.as_ref());
}

/// A receipt written after a forget replaces the tombstone (the module docs of `receipt_store`):
/// once that receipt is removed too, the key holds nothing, and a write expecting nothing is
/// admitted whenever it was decided. The lifecycle's in-memory store (`testing::MemoryReceipts`)
/// keeps this rule too; a change here must change it there.
pub fn a_receipt_written_after_a_forget_replaces_the_tombstone(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 10);
    store
        .forget(
            &thread(1),
            &Expect::NotWrittenSince(UnixMillis(20)),
            UnixMillis(20),
        )
        .unwrap();
    put_new(store.as_ref(), &thread(1), "s-2", 21);
    assert_eq!(
        store
            .remove(&thread(1), &Expect::Session("s-2".into()))
            .unwrap(),
        Removal::Removed {
            session_id: "s-2".into()
        }
    );
    assert_eq!(
        store
            .put(&thread(1), &record("s-3"), &Expect::Absent, UnixMillis(15))
            .unwrap(),
        written(true)
    );
    assert_eq!(session_of(store.as_ref(), &thread(1)), "s-3");
}

pub fn forget_is_conditional_and_leaves_a_tombstone_even_without_a_receipt(m: &Medium) {
    let store = m.open();
    put_new(store.as_ref(), &thread(1), "s-1", 50);
    // `forget --older-than`: only receipts not written since the cutoff.
    assert_eq!(
        store
            .forget(
                &thread(1),
                &Expect::NotWrittenSince(UnixMillis(40)),
                UnixMillis(60)
            )
            .unwrap(),
        ForgetOutcome::Conflict {
            stored_session_id: "s-1".into()
        }
    );
    assert_eq!(session_of(store.as_ref(), &thread(1)), "s-1");
    // A scope with no receipt yet: the tombstone still refuses writes decided before it.
    assert_eq!(
        store
            .forget(
                &thread(2),
                &Expect::NotWrittenSince(UnixMillis(60)),
                UnixMillis(60)
            )
            .unwrap(),
        ForgetOutcome::Forgotten { session_id: None }
    );
    assert_eq!(
        store
            .put(
                &thread(2),
                &record("queued"),
                &Expect::Absent,
                UnixMillis(55)
            )
            .unwrap(),
        PutOutcome::Forgotten { at: UnixMillis(60) }
    );
    // Forgetting again keeps the later time.
    store
        .forget(&thread(2), &Expect::Absent, UnixMillis(58))
        .unwrap();
    assert_eq!(
        store
            .put(
                &thread(2),
                &record("queued"),
                &Expect::Absent,
                UnixMillis(59)
            )
            .unwrap(),
        PutOutcome::Forgotten { at: UnixMillis(60) }
    );
    assert!(matches!(
        store.forget(
            &ScopeKey::conversation("general"),
            &Expect::Absent,
            UnixMillis(1)
        ),
        Err(StoreError::Invalid { .. })
    ));
    assert_count_is_true(store.as_ref());
}

pub fn tombstones_are_purged_after_their_retention(m: &Medium) {
    let store = m.open();
    let retention = u64::try_from(TOMBSTONE_RETENTION.as_millis()).unwrap();
    let t = 1_000;
    store
        .forget(&thread(1), &Expect::Absent, UnixMillis(t))
        .unwrap();
    assert_eq!(
        store
            .put(
                &thread(1),
                &record("old"),
                &Expect::Absent,
                UnixMillis(t - 1)
            )
            .unwrap(),
        PutOutcome::Forgotten { at: UnixMillis(t) }
    );
    // A forget past the retention purges the old tombstone: it no longer refuses anything.
    store
        .forget(&thread(2), &Expect::Absent, UnixMillis(t + retention + 1))
        .unwrap();
    assert_eq!(
        store
            .put(
                &thread(1),
                &record("old"),
                &Expect::Absent,
                UnixMillis(t - 1)
            )
            .unwrap(),
        written(true)
    );
}

// ---------------------------------------------------------------------------------------------
// Scopes, schemes, recency
// ---------------------------------------------------------------------------------------------

pub fn receipts_are_isolated_by_relay_and_by_agent_key(m: &Medium) {
    let other_agent = StoreScope {
        relay: RELAY.into(),
        agent_pubkey: "cd".repeat(32),
    };
    let other_relay = StoreScope {
        relay: OTHER_RELAY.into(),
        agent_pubkey: pubkey(),
    };
    let ours = m.open_with_cap(2);
    let theirs_agent = m.open_scope(other_agent.clone(), KeyScheme::Scope, 2);
    let theirs_relay = m.open_scope(other_relay.clone(), KeyScheme::Scope, 2);
    put_new(ours.as_ref(), &conversation(), "ours", 1);
    put_new(theirs_agent.as_ref(), &conversation(), "agent-2", 2);
    put_new(theirs_relay.as_ref(), &conversation(), "relay-2", 3);
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    assert_eq!(
        session_of(theirs_agent.as_ref(), &conversation()),
        "agent-2"
    );
    assert_eq!(
        session_of(theirs_relay.as_ref(), &conversation()),
        "relay-2"
    );

    // Guards, removals, forgets and eviction see only their own scope.
    assert_eq!(
        theirs_relay
            .commit_turn(&conversation(), &commit("ours", &[], 1), UnixMillis(4))
            .unwrap(),
        CommitOutcome::Conflict {
            stored: Some("relay-2".into())
        }
    );
    assert_eq!(
        theirs_agent.remove_channel(CHANNEL, UnixMillis(4)).unwrap(),
        ChannelRemoval::Removed(1)
    );
    theirs_agent
        .forget(&thread(9), &Expect::Absent, UnixMillis(4))
        .unwrap();
    put_new(ours.as_ref(), &thread(9), "ours-9", 3);
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    put_new(theirs_relay.as_ref(), &thread(1), "r-1", 5);
    put_new(theirs_relay.as_ref(), &thread(2), "r-2", 6);
    assert_eq!(
        theirs_relay.len().unwrap(),
        2,
        "its own cap evicted its own oldest"
    );
    assert_eq!(ours.len().unwrap(), 2);
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    assert_eq!(theirs_agent.receipts().unwrap().len(), 0);
    let mut scopes: Vec<StoreScope> = store_scopes(&m.backend)
        .unwrap()
        .into_iter()
        .map(|(scope, _)| scope)
        .collect();
    scopes.sort();
    let mut want = vec![scope(), other_agent, other_relay];
    want.sort();
    assert_eq!(scopes, want, "every store scope is listed");
}

pub fn the_channel_scheme_keeps_one_receipt_per_channel(m: &Medium) {
    let store = m.open_scope(scope(), KeyScheme::Channel, 100);
    put_new(store.as_ref(), &thread(1), "s-1", 1);
    assert_eq!(
        store
            .put(
                &thread(2),
                &record("s-2"),
                &Expect::Session("s-1".into()),
                UnixMillis(2)
            )
            .unwrap(),
        written(false)
    );
    assert_eq!(store.get(&conversation()).unwrap(), Some(record("s-2")));
    assert_eq!(store.get(&thread(7)).unwrap(), Some(record("s-2")));
    assert_eq!(keys(store.as_ref()), [conversation()]);
}

pub fn the_cap_evicts_the_least_recently_used_and_never_refuses(m: &Medium) {
    let store = m.open_with_cap(3);
    for n in 1..=3 {
        put_new(store.as_ref(), &thread(n), &format!("s-{n}"), n as u64 * 10);
    }
    // Thread 1 is used again (a turn committed), so thread 2 is now the least recently used.
    store
        .commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(40))
        .unwrap();
    assert_eq!(
        store
            .put(&thread(4), &record("s-4"), &Expect::Absent, UnixMillis(50))
            .unwrap(),
        PutOutcome::Written {
            created: true,
            evicted: 1
        }
    );
    assert_eq!(store.get(&thread(2)).unwrap(), None);
    assert_eq!(
        keys(store.as_ref()),
        sorted([thread(1), thread(3), thread(4)])
    );
    // A reading does not count as use.
    store.get(&thread(3)).unwrap();
    put_new(store.as_ref(), &thread(5), "s-5", 60);
    assert_eq!(store.get(&thread(3)).unwrap(), None);
    // Replacing an existing receipt evicts nothing.
    assert_eq!(
        store
            .put(
                &thread(5),
                &record("s-5b"),
                &Expect::Session("s-5".into()),
                UnixMillis(70)
            )
            .unwrap(),
        written(false)
    );
    // Equal recency: the key order decides, and the receipt just written is never the victim.
    let tied = m.open_scope(
        StoreScope {
            relay: OTHER_RELAY.into(),
            agent_pubkey: pubkey(),
        },
        KeyScheme::Scope,
        2,
    );
    for n in [9, 8, 7] {
        put_new(tied.as_ref(), &thread(n), "t", 1);
    }
    assert_eq!(keys(tied.as_ref()), [thread(7), thread(9)]);
    assert_eq!(store.len().unwrap(), 3);
    assert_count_is_true(store.as_ref());
    assert_count_is_true(tied.as_ref());
}

pub fn a_lower_cap_on_reopen_evicts_down_to_it_on_the_next_new_receipt(m: &Medium) {
    let store = m.open_with_cap(10);
    for n in 1..=6 {
        put_new(store.as_ref(), &thread(n), "s", n as u64);
    }
    drop(store);
    let store = m.open_with_cap(3);
    assert_eq!(
        store
            .put(&thread(7), &record("s"), &Expect::Absent, UnixMillis(7))
            .unwrap(),
        PutOutcome::Written {
            created: true,
            evicted: 4
        }
    );
    assert_eq!(keys(store.as_ref()), [thread(5), thread(6), thread(7)]);
    assert_count_is_true(store.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Read-only opens (the operator's listing)
// ---------------------------------------------------------------------------------------------

pub fn a_read_only_open_creates_nothing_and_writes_nothing(m: &Medium) {
    let mut rich = record("s-1");
    rich.turns = Some(3);
    {
        let store = m.open();
        store
            .put(&thread(1), &rich, &Expect::Absent, UnixMillis(5))
            .unwrap();
    }
    let reader = open_backend(
        &m.backend,
        scope(),
        KeyScheme::Scope,
        10,
        OpenMode::ReadOnly,
    )
    .unwrap();
    assert_eq!(reader.get(&thread(1)).unwrap(), Some(rich.clone()));
    assert_eq!(reader.receipts().unwrap().len(), 1);
    let refused = WriteRefusal::ReadOnly;
    assert_eq!(
        reader
            .put(&thread(2), &record("x"), &Expect::Absent, UnixMillis(6))
            .unwrap(),
        PutOutcome::NotWritable(refused.clone())
    );
    assert_eq!(
        reader
            .forget(&thread(1), &Expect::Absent, UnixMillis(6))
            .unwrap(),
        ForgetOutcome::NotWritable(refused.clone())
    );
    assert_eq!(
        reader.remove_channel(CHANNEL, UnixMillis(6)).unwrap(),
        ChannelRemoval::NotWritable(refused)
    );
    // A scope that never wrote reads as empty, and is not registered by reading.
    let empty = never_written(m);
    assert!(empty.receipts().unwrap().is_empty());
    assert!(empty.is_empty().unwrap());
    assert_not_registered(m);
    assert_eq!(m.open().get(&thread(1)).unwrap(), Some(rich));
}

// ---------------------------------------------------------------------------------------------
// The watermark of a (relay, agent key)
// ---------------------------------------------------------------------------------------------

/// The first value the watermark column cannot hold.
fn past_the_column() -> u64 {
    u64::try_from(i64::MAX).unwrap() + 1
}

fn assert_invalid<T: std::fmt::Debug>(answer: Result<T, StoreError>) {
    match answer {
        Err(e @ StoreError::Invalid { .. }) => {
            assert!(e.to_string().contains("watermark"), "{e}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

pub fn a_new_store_has_no_watermark(m: &Medium) {
    let store = m.open();
    assert_eq!(store.watermark().unwrap(), None);
    put_new(store.as_ref(), &thread(1), "s", 1);
    assert_eq!(store.watermark().unwrap(), None, "receipts do not set it");
    drop(store);
    assert_eq!(m.open().watermark().unwrap(), None, "nor does reopening");
}

pub fn the_watermark_moves_forward_and_never_back(m: &Medium) {
    let store = m.open();
    assert_eq!(store.advance_watermark(1_000).unwrap(), Some(1_000));
    assert_eq!(store.watermark().unwrap(), Some(1_000));
    for smaller in [999, 1, 0] {
        assert_eq!(
            store.advance_watermark(smaller).unwrap(),
            Some(1_000),
            "never back ({smaller})"
        );
    }
    assert_eq!(store.advance_watermark(1_000).unwrap(), Some(1_000));
    assert_eq!(
        store.advance_watermark(1_700_000_000).unwrap(),
        Some(1_700_000_000)
    );
    assert_eq!(store.watermark().unwrap(), Some(1_700_000_000));
    // Receipt writes, forgets and channel removals leave it as it is.
    put_new(store.as_ref(), &thread(1), "s-1", 5);
    store
        .commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(6))
        .unwrap();
    store
        .forget(&thread(2), &Expect::Absent, UnixMillis(7))
        .unwrap();
    store.remove_channel(CHANNEL, UnixMillis(8)).unwrap();
    assert_eq!(store.watermark().unwrap(), Some(1_700_000_000));
    // The largest storable time is stored as it is.
    let largest = past_the_column() - 1;
    assert_eq!(store.advance_watermark(largest).unwrap(), Some(largest));
    assert_eq!(store.watermark().unwrap(), Some(largest));
}

pub fn set_watermark_overrides_and_clears(m: &Medium) {
    let store = m.open();
    assert_eq!(
        store.set_watermark(Some(2_000)).unwrap(),
        WatermarkOutcome::Written,
        "a set with none recorded"
    );
    assert_eq!(store.watermark().unwrap(), Some(2_000));
    assert_eq!(
        store.set_watermark(Some(500)).unwrap(),
        WatermarkOutcome::Written,
        "a set goes back too"
    );
    assert_eq!(store.watermark().unwrap(), Some(500));
    assert_eq!(store.advance_watermark(400).unwrap(), Some(500));
    assert_eq!(
        store.set_watermark(None).unwrap(),
        WatermarkOutcome::Written
    );
    assert_eq!(store.watermark().unwrap(), None);
    assert_eq!(
        store.set_watermark(None).unwrap(),
        WatermarkOutcome::Written,
        "clearing none is no error"
    );
    assert_eq!(
        store.advance_watermark(10).unwrap(),
        Some(10),
        "after a clear any time moves it"
    );
    assert_eq!(m.open().watermark().unwrap(), Some(10));
}

pub fn watermarks_past_the_largest_storable_time_are_refused(m: &Medium) {
    let store = m.open();
    store.advance_watermark(100).unwrap();
    for secs in [past_the_column(), u64::MAX] {
        assert_invalid(store.advance_watermark(secs));
        assert_invalid(store.set_watermark(Some(secs)));
    }
    assert_eq!(store.watermark().unwrap(), Some(100), "nothing written");
}

pub fn watermarks_are_isolated_by_relay_and_by_agent_key(m: &Medium) {
    let other_agent = StoreScope {
        relay: RELAY.into(),
        agent_pubkey: "cd".repeat(32),
    };
    let other_relay = StoreScope {
        relay: OTHER_RELAY.into(),
        agent_pubkey: pubkey(),
    };
    let ours = m.open();
    let theirs_agent = m.open_scope(other_agent, KeyScheme::Scope, 10);
    let theirs_relay = m.open_scope(other_relay, KeyScheme::Scope, 10);
    assert_eq!(ours.advance_watermark(300).unwrap(), Some(300));
    assert_eq!(theirs_agent.watermark().unwrap(), None);
    assert_eq!(theirs_relay.watermark().unwrap(), None);
    assert_eq!(
        theirs_agent.advance_watermark(100).unwrap(),
        Some(100),
        "not held back by another pair's larger watermark"
    );
    assert_eq!(theirs_relay.advance_watermark(900).unwrap(), Some(900));
    assert_eq!(ours.watermark().unwrap(), Some(300));
    theirs_relay.set_watermark(None).unwrap();
    ours.set_watermark(Some(50)).unwrap();
    assert_eq!(ours.watermark().unwrap(), Some(50));
    assert_eq!(theirs_agent.watermark().unwrap(), Some(100));
    assert_eq!(theirs_relay.watermark().unwrap(), None);
}

pub fn every_handle_of_the_pair_shares_the_watermark(m: &Medium) {
    // Two handles of one pair: two harnesses, or two machines sharing the database.
    let a = m.open();
    let b = m.open();
    assert_eq!(a.advance_watermark(500).unwrap(), Some(500));
    assert_eq!(b.watermark().unwrap(), Some(500));
    assert_eq!(
        b.advance_watermark(400).unwrap(),
        Some(500),
        "a handle behind the other does not undo its progress"
    );
    assert_eq!(b.advance_watermark(600).unwrap(), Some(600));
    assert_eq!(a.watermark().unwrap(), Some(600));
    b.set_watermark(Some(50)).unwrap();
    assert_eq!(a.watermark().unwrap(), Some(50), "the operator's set too");
    drop(a);
    drop(b);
    // The key scheme is not part of the pair: a handle of the other scheme shares it.
    let channel = m.open_scope(scope(), KeyScheme::Channel, 10);
    assert_eq!(channel.watermark().unwrap(), Some(50));
}

pub fn concurrent_advances_keep_the_largest(m: &Medium) {
    const WRITERS: u64 = 4;
    const EACH: u64 = 25;
    let handles: Vec<Arc<dyn ReceiptStore>> =
        (0..2).map(|_| Arc::from(m.open_with_cap(100))).collect();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let store = Arc::clone(&handles[usize::try_from(w % 2).unwrap()]);
            s.spawn(move || {
                for i in 0..EACH {
                    // Interleaved and out of order across writers.
                    let secs = 1_000 + (i * WRITERS + w) * 337 % 1_000;
                    let stored = store.advance_watermark(secs).unwrap().unwrap();
                    assert!(stored >= secs, "{stored} < {secs}");
                }
            });
        }
    });
    let largest = (0..WRITERS)
        .flat_map(|w| (0..EACH).map(move |i| 1_000 + (i * WRITERS + w) * 337 % 1_000))
        .max();
    assert_eq!(handles[0].watermark().unwrap(), largest);
    assert_eq!(handles[1].watermark().unwrap(), largest);
}

pub fn a_read_only_open_sees_the_watermark_and_writes_none(m: &Medium) {
    let writer = m.open();
    writer.advance_watermark(1_234).unwrap();
    let reader = open_backend(
        &m.backend,
        scope(),
        KeyScheme::Scope,
        10,
        OpenMode::ReadOnly,
    )
    .unwrap();
    assert_eq!(reader.watermark().unwrap(), Some(1_234));
    assert_eq!(
        reader.advance_watermark(2_000).unwrap(),
        None,
        "nothing stored"
    );
    for secs in [Some(1), None] {
        assert_eq!(
            reader.set_watermark(secs).unwrap(),
            WatermarkOutcome::NotWritable(WriteRefusal::ReadOnly)
        );
    }
    assert_invalid(reader.advance_watermark(past_the_column()));
    assert_eq!(writer.watermark().unwrap(), Some(1_234));
    // Every read is fresh.
    writer.advance_watermark(1_500).unwrap();
    assert_eq!(reader.watermark().unwrap(), Some(1_500));
    // A pair that never wrote has none, and is not registered by reading.
    let empty = never_written(m);
    assert_eq!(empty.watermark().unwrap(), None);
    assert_eq!(empty.advance_watermark(5).unwrap(), None);
    assert_not_registered(m);
}

// ---------------------------------------------------------------------------------------------
// Import and JSON migration
// ---------------------------------------------------------------------------------------------

fn receipt(key: ScopeKey, session: &str, used: u64) -> StoredReceipt {
    StoredReceipt {
        key,
        record: record(session),
        last_used: UnixMillis(used),
    }
}

pub fn import_inserts_only_missing_keys_and_keeps_their_time(m: &Medium) {
    let store = m.open_with_cap(4);
    put_new(store.as_ref(), &thread(1), "newer", 100);
    store
        .forget(&thread(5), &Expect::Absent, UnixMillis(60))
        .unwrap();
    let mut rich = receipt(thread(2), "s-2", 40);
    rich.record.turns = Some(12);
    rich.record.usage = Some(Usage {
        used_tokens: 1,
        context_tokens: None,
    });
    let outcome = store
        .import(&[
            receipt(thread(1), "older", 50),
            rich.clone(),
            receipt(thread(3), "s-3", 30),
            receipt(thread(4), "s-4", 20),
            receipt(thread(5), "forgotten-later", 50),
            receipt(thread(6), "s-6", 10),
        ])
        .unwrap();
    assert_eq!(
        outcome,
        ImportOutcome::Imported {
            inserted: 4,
            kept_existing: 1,
            forgotten: 1,
            evicted: 1
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("newer")));
    assert_eq!(
        store.get(&thread(6)).unwrap(),
        None,
        "the oldest is evicted"
    );
    assert_eq!(store.get(&thread(5)).unwrap(), None);
    let listed = store.receipts().unwrap();
    let two = listed.iter().find(|r| r.key == thread(2)).unwrap();
    assert_eq!(*two, rich, "record and time are kept as exported");
    assert_eq!(store.len().unwrap(), 4);
    assert_count_is_true(store.as_ref());
}

fn json_path(dir: &Path) -> PathBuf {
    dir.join(format!("sessions-{}.json", pubkey()))
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes a file in the old JSON store's format: version 1 (per channel) under `Channel`,
/// version 2 (per scope) under `Scope`, as the old store wrote it.
fn write_json_store(dir: &Path, scheme: KeyScheme, scope: StoreScope) {
    let version = if scheme == KeyScheme::Scope { 2 } else { 1 };
    let mut sessions = serde_json::Map::new();
    sessions.insert(
        CHANNEL.into(),
        json!({"sessionId": "json-conv", "model": "opus", "permissionMode": null,
               "requestedModel": "opus", "requestedPermissionMode": "plan",
               "delivery": {"standingContextSent": true, "deliveredEventIds": ["a", "b"]}}),
    );
    if scheme == KeyScheme::Scope {
        sessions.insert(
            thread(1).to_storage_key(),
            json!({"sessionId": "json-thread", "model": "opus", "permissionMode": null,
                   "requestedModel": "opus", "requestedPermissionMode": "plan"}),
        );
    }
    sessions.insert(
        OTHER_CHANNEL.into(),
        json!({"sessionId": "json-other", "model": "opus", "permissionMode": null}),
    );
    let document = json!({"version": version, "scope": scope, "sessions": sessions});
    let mut bytes = serde_json::to_vec_pretty(&document).unwrap();
    bytes.push(b'\n');
    fs::write(json_path(dir), bytes).unwrap();
}

pub fn json_stores_of_both_formats_are_imported_once_and_kept_as_backup(m: &Medium) {
    for scheme in [KeyScheme::Channel, KeyScheme::Scope] {
        let relay = format!("wss://{scheme:?}.example").to_lowercase();
        let scope = StoreScope {
            relay,
            agent_pubkey: pubkey(),
        };
        // Another harness sharing the database already wrote a newer receipt for one key.
        let elsewhere = m.open_scope(scope.clone(), scheme, 100);
        put_new(
            elsewhere.as_ref(),
            &ScopeKey::conversation(OTHER_CHANNEL),
            "db-newer",
            1,
        );
        drop(elsewhere);
        write_json_store(m.dir(), scheme, scope.clone());
        let original = fs::read(json_path(m.dir())).unwrap();
        let Opened { store, migration } =
            open_with_report(&m.config(scope.clone(), scheme, 100), UnixMillis(77)).unwrap();
        let Migration::Imported {
            from,
            backup,
            outcome,
            dropped,
        } = migration.unwrap()
        else {
            panic!("expected an import");
        };
        assert_eq!(from, json_path(m.dir()));
        assert_eq!(dropped, 0);
        let json_keys = if scheme == KeyScheme::Scope { 3 } else { 2 };
        assert_eq!(
            outcome,
            ImportOutcome::Imported {
                inserted: json_keys - 1,
                kept_existing: 1,
                forgotten: 0,
                evicted: 0
            }
        );
        assert_eq!(
            fs::read(&backup).unwrap(),
            original,
            "the backup is the file, byte for byte"
        );
        assert!(!json_path(m.dir()).exists());
        let conv = store.get(&conversation()).unwrap().unwrap();
        assert_eq!(conv.session_id, "json-conv");
        assert_eq!(conv.requested_permission_mode.as_deref(), Some("plan"));
        assert_eq!(conv.turns, None, "unknown for an imported receipt");
        assert_eq!(conv.delivery.unwrap().delivered_event_ids, ids(&["a", "b"]));
        assert_eq!(
            session_of(store.as_ref(), &ScopeKey::conversation(OTHER_CHANNEL)),
            "db-newer",
            "a receipt already in the database is newer than the file"
        );
        if scheme == KeyScheme::Scope {
            assert_eq!(session_of(store.as_ref(), &thread(1)), "json-thread");
        }
        assert!(
            store
                .receipts()
                .unwrap()
                .iter()
                .all(|r| r.last_used <= UnixMillis(77))
        );
        drop(store);
        // Second open: nothing left to import.
        let Opened {
            store: _,
            migration: again,
        } = open_with_report(&m.config(scope, scheme, 100), UnixMillis(78)).unwrap();
        assert_eq!(again.unwrap(), Migration::NoLegacyFile);
        fs::remove_file(backup).unwrap();
    }
}

pub fn json_stores_that_are_not_ours_are_left_untouched(m: &Medium) {
    // Another relay's file in a shared state directory: it is theirs to import.
    write_json_store(
        m.dir(),
        KeyScheme::Scope,
        StoreScope {
            relay: OTHER_RELAY.into(),
            agent_pubkey: pubkey(),
        },
    );
    let foreign = fs::read(json_path(m.dir())).unwrap();
    let Opened { store, migration } =
        open_with_report(&m.config(scope(), KeyScheme::Scope, 100), UnixMillis(1)).unwrap();
    assert!(
        matches!(migration.unwrap(), Migration::Skipped { reason, .. } if reason.contains(OTHER_RELAY))
    );
    assert_eq!(fs::read(json_path(m.dir())).unwrap(), foreign);
    assert!(store.is_empty().unwrap());
    drop(store);

    // A format-2 file is newer than the Channel scheme reads.
    let other = StoreScope {
        relay: OTHER_RELAY.into(),
        agent_pubkey: pubkey(),
    };
    let Opened { store, migration } =
        open_with_report(&m.config(other, KeyScheme::Channel, 100), UnixMillis(1)).unwrap();
    assert!(
        matches!(migration.unwrap(), Migration::Skipped { reason, .. } if reason.contains("version 2"))
    );
    assert!(store.is_empty().unwrap());
    drop(store);

    // Malformed (or holding fields the old store never wrote): left as it is, reported, and the
    // store works.
    for bytes in [
        &b"{\"version\": 2, \"scope\": tru"[..],
        br#"{"version": 2, "scope": {"relay": "wss://relay.example", "agentPubkey": "ABAB"}, "sessions": {}}"#,
    ] {
        fs::write(json_path(m.dir()), bytes).unwrap();
        let Opened { store, migration } =
            open_with_report(&m.config(scope(), KeyScheme::Scope, 100), UnixMillis(1)).unwrap();
        assert!(
            matches!(migration.unwrap(), Migration::Skipped { .. }),
            "{}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(fs::read(json_path(m.dir())).unwrap(), bytes);
        put_new(store.as_ref(), &thread(1), "s", 2);
        store.remove(&thread(1), &Expect::Session("s".into())).unwrap();
    }
    let newer_fields = json!({"version": 2, "scope": scope(), "sessions": {
        CHANNEL: {"sessionId": "s", "model": null, "permissionMode": null, "turns": 3}}});
    fs::write(json_path(m.dir()), newer_fields.to_string()).unwrap();
    let Opened { migration, .. } =
        open_with_report(&m.config(scope(), KeyScheme::Scope, 100), UnixMillis(1)).unwrap();
    assert!(
        matches!(migration.unwrap(), Migration::Skipped { reason, .. } if reason.starts_with("malformed")),
        "the old format never had these fields"
    );
    assert!(!file_names(m.dir()).iter().any(|n| n.contains(".migrated")));
}

// ---------------------------------------------------------------------------------------------
// Concurrency and runtime safety
// ---------------------------------------------------------------------------------------------

pub fn concurrent_writers_through_several_handles_lose_nothing(m: &Medium) {
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    let handles: Vec<Arc<dyn ReceiptStore>> =
        (0..2).map(|_| Arc::from(m.open_with_cap(10_000))).collect();
    // One shared key every writer commits to, plus each writer's own keys.
    put_new(handles[0].as_ref(), &conversation(), "shared", 1);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let store = Arc::clone(&handles[w % 2]);
            s.spawn(move || {
                for i in 0..EACH {
                    let n = 1 + w * EACH + i;
                    let key = thread(n);
                    put_new(store.as_ref(), &key, &format!("s-{n}"), n as u64);
                    let mine = format!("w{w}-e{i}");
                    assert_eq!(
                        store
                            .commit_turn(
                                &key,
                                &commit(&format!("s-{n}"), &[&mine], 1),
                                UnixMillis(n as u64)
                            )
                            .unwrap(),
                        CommitOutcome::Written
                    );
                    let outcome = store
                        .commit_turn(
                            &conversation(),
                            &commit("shared", &[&mine], 1),
                            UnixMillis(n as u64),
                        )
                        .unwrap();
                    assert!(matches!(outcome, CommitOutcome::Written), "{outcome:?}");
                }
            });
        }
    });
    let store = &handles[1];
    assert_eq!(store.len().unwrap(), 1 + WRITERS * EACH);
    assert_count_is_true(store.as_ref());
    for n in 1..=WRITERS * EACH {
        let r = store.get(&thread(n)).unwrap().unwrap();
        assert_eq!(r.session_id, format!("s-{n}"));
        assert_eq!(r.delivery.unwrap().delivered_event_ids.len(), 1);
    }
    assert_eq!(
        store
            .get(&conversation())
            .unwrap()
            .unwrap()
            .delivery
            .unwrap()
            .delivered_event_ids
            .len(),
        1,
        "every commit replaced the shared ledger whole"
    );
}

pub fn calls_from_a_paused_current_thread_runtime_do_not_panic_or_hang(m: &Medium) {
    let store: Arc<dyn ReceiptStore> = Arc::from(m.open());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let before = tokio::time::Instant::now();
        put_new(store.as_ref(), &thread(1), "s-1", 1);
        assert_eq!(
            store
                .commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(2))
                .unwrap(),
            CommitOutcome::Written
        );
        assert_eq!(session_of(store.as_ref(), &thread(1)), "s-1");
        // From a spawned task too.
        let task_store = Arc::clone(&store);
        let removed =
            tokio::spawn(
                async move { task_store.remove(&thread(1), &Expect::Session("s-1".into())) },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            removed,
            Removal::Removed {
                session_id: "s-1".into()
            }
        );
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        assert!(before.elapsed() >= std::time::Duration::from_secs(3600));
    });
}

/// Expands one `#[test]` per contract case, each on a fresh medium from `$medium()`, which
/// returns `None` only when the backend is explicitly skipped.
#[macro_export]
macro_rules! contract_tests {
    ($medium:path) => {
        $crate::contract_tests!(@cases $medium;
            an_empty_store_has_no_receipt,
            a_put_is_read_back_by_every_handle_and_survives_reopen,
            a_put_replaces_what_it_expected_and_says_whether_it_created,
            invalid_puts_are_refused_and_write_nothing,
            a_put_is_refused_when_its_expectation_does_not_hold,
            a_write_replayed_after_an_outage_never_overwrites_a_newer_receipt,
            remove_is_conditional_and_reports_what_it_removed,
            remove_channel_removes_the_channel_and_its_threads_only,
            commit_turn_reports_each_outcome_truthfully,
            a_commit_stores_what_the_rules_merge,
            a_retired_receipt_keeps_its_handoff_for_the_successor,
            oversize_ledgers_are_refused_not_cut,
            a_late_commit_from_a_replaced_session_is_refused,
            a_forget_wins_against_queued_writes,
            a_receipt_written_after_a_forget_replaces_the_tombstone,
            forget_is_conditional_and_leaves_a_tombstone_even_without_a_receipt,
            tombstones_are_purged_after_their_retention,
            receipts_are_isolated_by_relay_and_by_agent_key,
            the_channel_scheme_keeps_one_receipt_per_channel,
            the_cap_evicts_the_least_recently_used_and_never_refuses,
            a_lower_cap_on_reopen_evicts_down_to_it_on_the_next_new_receipt,
            a_read_only_open_creates_nothing_and_writes_nothing,
            a_new_store_has_no_watermark,
            the_watermark_moves_forward_and_never_back,
            set_watermark_overrides_and_clears,
            watermarks_past_the_largest_storable_time_are_refused,
            watermarks_are_isolated_by_relay_and_by_agent_key,
            every_handle_of_the_pair_shares_the_watermark,
            concurrent_advances_keep_the_largest,
            a_read_only_open_sees_the_watermark_and_writes_none,
            import_inserts_only_missing_keys_and_keeps_their_time,
            json_stores_of_both_formats_are_imported_once_and_kept_as_backup,
            json_stores_that_are_not_ours_are_left_untouched,
            concurrent_writers_through_several_handles_lose_nothing,
            calls_from_a_paused_current_thread_runtime_do_not_panic_or_hang,
        );
    };
    (@cases $medium:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                if let Some(medium) = $medium() {
                    contract::$case(&medium);
                }
            }
        )*
    };
}
