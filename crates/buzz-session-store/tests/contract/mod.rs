//! The contract every receipt backend passes, written once against `dyn ReceiptStore`.
//!
//! A backend's test target supplies a [`Medium`] factory (a fresh, empty database plus a state
//! directory per test) and expands [`contract_tests!`] with it. Stores are opened through the
//! crate's real entry point ([`buzz_session_store::open_with_report`]), so the URL handling and the
//! JSON import are part of what is tested.

#![allow(dead_code)]

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use buzz_session_store::{
    Backend, ChannelRemoval, CommitOutcome, DeliveryRecord, ImportOutcome, KeyScheme,
    MAX_DELIVERED_IDS_PER_SCOPE, Migration, Opened, PutOutcome, ReceiptStore, Removal, ScopeKey,
    SessionRecord, SessionStore, StoreConfig, StoreError, StoreScope, UnixMillis, open_with_report,
};

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

pub fn window(items: &[&str]) -> HashSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
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
    assert_eq!(
        a.put(&thread(1), &r, UnixMillis(10)).unwrap(),
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

pub fn a_put_replaces_and_says_whether_it_created(m: &Medium) {
    let store = m.open();
    assert_eq!(
        store
            .put(&thread(1), &record("s-1"), UnixMillis(1))
            .unwrap(),
        written(true)
    );
    assert_eq!(
        store
            .put(&thread(1), &record("s-2"), UnixMillis(2))
            .unwrap(),
        written(false)
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-2")));
    // An identical put still refreshes recency, which is a write.
    assert_eq!(
        store
            .put(&thread(1), &record("s-2"), UnixMillis(3))
            .unwrap(),
        written(false)
    );
    assert_eq!(store.receipts().unwrap()[0].last_used, UnixMillis(3));
    assert_eq!(store.len().unwrap(), 1);
    // Spellings of one key share one receipt.
    let upper = ScopeKey::thread(CHANNEL.to_uppercase(), root(1).to_uppercase());
    assert_eq!(store.get(&upper).unwrap(), Some(record("s-2")));
}

pub fn invalid_puts_are_refused_and_write_nothing(m: &Medium) {
    let store = m.open();
    let bad_key = ScopeKey::conversation("general");
    assert!(matches!(
        store.put(&bad_key, &record("s"), UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.put(&thread(1), &record("  "), UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    let bad_import = [(thread(2), record("ok")), (thread(3), record(""))];
    assert!(matches!(
        store.import(&bad_import, UnixMillis(1)),
        Err(StoreError::Invalid { .. })
    ));
    assert!(store.is_empty().unwrap());
    assert!(store.receipts().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Removal
// ---------------------------------------------------------------------------------------------

pub fn remove_reports_what_it_removed(m: &Medium) {
    let store = m.open();
    store
        .put(&thread(1), &record("s-1"), UnixMillis(1))
        .unwrap();
    assert_eq!(
        store.remove(&thread(1)).unwrap(),
        Removal::Removed {
            session_id: "s-1".into()
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), None);
    assert_eq!(store.remove(&thread(1)).unwrap(), Removal::Absent);
    assert!(store.is_empty().unwrap());
}

pub fn remove_if_session_only_removes_the_named_session(m: &Medium) {
    let store = m.open();
    assert_eq!(
        store.remove_if_session(&thread(1), "s-1").unwrap(),
        Removal::Absent
    );
    store
        .put(&thread(1), &record("s-2"), UnixMillis(1))
        .unwrap();
    assert_eq!(
        store.remove_if_session(&thread(1), "s-1").unwrap(),
        Removal::OtherSession {
            stored_session_id: "s-2".into()
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("s-2")));
    assert_eq!(
        store.remove_if_session(&thread(1), "s-2").unwrap(),
        Removal::Removed {
            session_id: "s-2".into()
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), None);
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
        store
            .put(key, &record(&format!("s-{i}")), UnixMillis(1))
            .unwrap();
    }
    assert_eq!(
        store.remove_channel(&CHANNEL.to_uppercase()).unwrap(),
        ChannelRemoval::Removed(3)
    );
    assert_eq!(
        keys(store.as_ref()),
        sorted([other_thread, ScopeKey::conversation(OTHER_CHANNEL)])
    );
    assert_eq!(
        store.remove_channel(CHANNEL).unwrap(),
        ChannelRemoval::Removed(0)
    );
    assert_count_is_true(store.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Delivery commits
// ---------------------------------------------------------------------------------------------

pub fn commit_delivery_reports_each_outcome_truthfully(m: &Medium) {
    let store = m.open();
    let w = window(&["e1", "e2", "e3"]);
    assert_eq!(
        store
            .commit_delivery(&thread(1), "s-1", false, &ids(&["e1"]), &w, UnixMillis(5))
            .unwrap(),
        CommitOutcome::NoReceipt
    );
    assert!(
        store.is_empty().unwrap(),
        "a commit never creates a receipt"
    );

    store
        .put(&thread(1), &record("s-1"), UnixMillis(1))
        .unwrap();
    assert_eq!(
        store
            .commit_delivery(
                &thread(1),
                "s-1",
                false,
                &ids(&["e1", "e2"]),
                &w,
                UnixMillis(5)
            )
            .unwrap(),
        CommitOutcome::Written
    );
    let ledger = |store: &dyn ReceiptStore| store.get(&thread(1)).unwrap().unwrap().delivery;
    assert_eq!(
        ledger(store.as_ref()),
        Some(DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: ids(&["e1", "e2"]),
        })
    );
    assert_eq!(
        store
            .commit_delivery(&thread(1), "s-1", false, &ids(&["e2"]), &w, UnixMillis(6))
            .unwrap(),
        CommitOutcome::Unchanged,
        "the ledger already holds these ids"
    );
    assert_eq!(
        store.receipts().unwrap()[0].last_used,
        UnixMillis(6),
        "recency still refreshed"
    );

    // Standing context is ORed in and never cleared; ids that left the window are dropped.
    assert_eq!(
        store
            .commit_delivery(
                &thread(1),
                "s-1",
                true,
                &ids(&["e3"]),
                &window(&["e2"]),
                UnixMillis(7)
            )
            .unwrap(),
        CommitOutcome::Written
    );
    assert_eq!(
        ledger(store.as_ref()),
        Some(DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: ids(&["e2", "e3"]),
        })
    );
    store
        .commit_delivery(&thread(1), "s-1", false, &[], &window(&[]), UnixMillis(8))
        .unwrap();
    assert!(ledger(store.as_ref()).unwrap().standing_context_sent);
}

pub fn the_ledger_stays_bounded_per_scope(m: &Medium) {
    let store = m.open();
    store
        .put(&thread(1), &record("s-1"), UnixMillis(1))
        .unwrap();
    let many: Vec<String> = (0..MAX_DELIVERED_IDS_PER_SCOPE + 100)
        .map(|i| format!("e{i:05}"))
        .collect();
    let live: HashSet<String> = many.iter().cloned().collect();
    store
        .commit_delivery(&thread(1), "s-1", false, &many, &live, UnixMillis(2))
        .unwrap();
    let ledger = delivered(store.as_ref(), &thread(1));
    assert_eq!(ledger.len(), MAX_DELIVERED_IDS_PER_SCOPE);
    assert!(ledger.contains(&many[many.len() - 1]));
    assert!(!ledger.contains(&many[0]), "the oldest new ids go first");
    // Other scopes' ledgers are never shed to make room.
    store
        .put(&thread(2), &record("s-2"), UnixMillis(3))
        .unwrap();
    store
        .commit_delivery(
            &thread(2),
            "s-2",
            false,
            &ids(&["x"]),
            &window(&[]),
            UnixMillis(4),
        )
        .unwrap();
    assert_eq!(
        delivered(store.as_ref(), &thread(1)).len(),
        MAX_DELIVERED_IDS_PER_SCOPE
    );
}

pub fn a_late_commit_from_a_replaced_session_is_refused(m: &Medium) {
    // Handle A loaded s-1; handle B (another process) replaced it with s-2 meanwhile.
    let a = m.open();
    let b = m.open();
    a.put(&thread(1), &record("s-1"), UnixMillis(1)).unwrap();
    b.put(&thread(1), &record("s-2"), UnixMillis(2)).unwrap();
    b.commit_delivery(
        &thread(1),
        "s-2",
        false,
        &ids(&["mine"]),
        &window(&[]),
        UnixMillis(3),
    )
    .unwrap();
    assert_eq!(
        a.commit_delivery(
            &thread(1),
            "s-1",
            true,
            &ids(&["stale"]),
            &window(&["mine"]),
            UnixMillis(4)
        )
        .unwrap(),
        CommitOutcome::OtherSession {
            stored_session_id: "s-2".into()
        }
    );
    let kept = b.get(&thread(1)).unwrap().unwrap();
    assert_eq!(kept.session_id, "s-2");
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
    let theirs_agent = m.open_scope(other_agent, KeyScheme::Scope, 2);
    let theirs_relay = m.open_scope(other_relay, KeyScheme::Scope, 2);
    ours.put(&conversation(), &record("ours"), UnixMillis(1))
        .unwrap();
    theirs_agent
        .put(&conversation(), &record("agent-2"), UnixMillis(2))
        .unwrap();
    theirs_relay
        .put(&conversation(), &record("relay-2"), UnixMillis(3))
        .unwrap();
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    assert_eq!(
        session_of(theirs_agent.as_ref(), &conversation()),
        "agent-2"
    );
    assert_eq!(
        session_of(theirs_relay.as_ref(), &conversation()),
        "relay-2"
    );

    // Guards, removals and eviction see only their own scope.
    assert_eq!(
        theirs_relay
            .commit_delivery(
                &conversation(),
                "ours",
                false,
                &[],
                &window(&[]),
                UnixMillis(4)
            )
            .unwrap(),
        CommitOutcome::OtherSession {
            stored_session_id: "relay-2".into()
        }
    );
    assert_eq!(
        theirs_agent.remove_channel(CHANNEL).unwrap(),
        ChannelRemoval::Removed(1)
    );
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    theirs_relay
        .put(&thread(1), &record("r-1"), UnixMillis(5))
        .unwrap();
    theirs_relay
        .put(&thread(2), &record("r-2"), UnixMillis(6))
        .unwrap();
    assert_eq!(
        theirs_relay.len().unwrap(),
        2,
        "its own cap evicted its own oldest"
    );
    assert_eq!(ours.len().unwrap(), 1);
    assert_eq!(session_of(ours.as_ref(), &conversation()), "ours");
    assert_eq!(ours.receipts().unwrap().len(), 1);
    assert_eq!(theirs_agent.receipts().unwrap().len(), 0);
}

pub fn the_channel_scheme_keeps_one_receipt_per_channel(m: &Medium) {
    let store = m.open_scope(scope(), KeyScheme::Channel, 100);
    store
        .put(&thread(1), &record("s-1"), UnixMillis(1))
        .unwrap();
    assert_eq!(
        store
            .put(&thread(2), &record("s-2"), UnixMillis(2))
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
        assert_eq!(
            store
                .put(
                    &thread(n),
                    &record(&format!("s-{n}")),
                    UnixMillis(n as u64 * 10)
                )
                .unwrap(),
            written(true)
        );
    }
    // Thread 1 is used again (a turn committed), so thread 2 is now the least recently used.
    store
        .commit_delivery(
            &thread(1),
            "s-1",
            false,
            &ids(&["e"]),
            &window(&[]),
            UnixMillis(40),
        )
        .unwrap();
    assert_eq!(
        store
            .put(&thread(4), &record("s-4"), UnixMillis(50))
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
    store
        .put(&thread(5), &record("s-5"), UnixMillis(60))
        .unwrap();
    assert_eq!(store.get(&thread(3)).unwrap(), None);
    // Replacing an existing receipt evicts nothing.
    assert_eq!(
        store
            .put(&thread(5), &record("s-5b"), UnixMillis(70))
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
        tied.put(&thread(n), &record("t"), UnixMillis(1)).unwrap();
    }
    assert_eq!(keys(tied.as_ref()), [thread(7), thread(9)]);
    assert_eq!(store.len().unwrap(), 3);
    assert_count_is_true(store.as_ref());
    assert_count_is_true(tied.as_ref());
}

pub fn a_lower_cap_on_reopen_evicts_down_to_it_on_the_next_new_receipt(m: &Medium) {
    let store = m.open_with_cap(10);
    for n in 1..=6 {
        store
            .put(&thread(n), &record("s"), UnixMillis(n as u64))
            .unwrap();
    }
    drop(store);
    let store = m.open_with_cap(3);
    assert_eq!(
        store.put(&thread(7), &record("s"), UnixMillis(7)).unwrap(),
        PutOutcome::Written {
            created: true,
            evicted: 4
        }
    );
    assert_eq!(keys(store.as_ref()), [thread(5), thread(6), thread(7)]);
    assert_count_is_true(store.as_ref());
}

// ---------------------------------------------------------------------------------------------
// Import and JSON migration
// ---------------------------------------------------------------------------------------------

pub fn import_inserts_only_missing_keys(m: &Medium) {
    let store = m.open_with_cap(3);
    store
        .put(&thread(1), &record("newer"), UnixMillis(100))
        .unwrap();
    let outcome = store
        .import(
            &[
                (thread(1), record("older")),
                (thread(2), record("s-2")),
                (thread(3), record("s-3")),
                (thread(4), record("s-4")),
            ],
            UnixMillis(50),
        )
        .unwrap();
    assert_eq!(
        outcome,
        ImportOutcome::Imported {
            inserted: 3,
            kept_existing: 1,
            evicted: 1
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap(), Some(record("newer")));
    assert_eq!(store.len().unwrap(), 3);
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

/// Writes a JSON store with the old store itself: format 1 under `Channel`, 2 under `Scope`.
fn write_json_store(dir: &Path, scheme: KeyScheme, scope: StoreScope) {
    let old = SessionStore::open(dir, scope, scheme);
    let mut with_ledger = record("json-conv");
    with_ledger.delivery = Some(DeliveryRecord {
        standing_context_sent: true,
        delivered_event_ids: ids(&["a", "b"]),
    });
    old.put(&conversation(), with_ledger).unwrap();
    if scheme == KeyScheme::Scope {
        old.put(&thread(1), record("json-thread")).unwrap();
    }
    old.put(&ScopeKey::conversation(OTHER_CHANNEL), record("json-other"))
        .unwrap();
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
        elsewhere
            .put(
                &ScopeKey::conversation(OTHER_CHANNEL),
                &record("db-newer"),
                UnixMillis(1),
            )
            .unwrap();
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

    // Malformed: left as it is, reported, and the store works.
    fs::write(json_path(m.dir()), b"{\"version\": 2, \"scope\": tru").unwrap();
    let Opened { store, migration } =
        open_with_report(&m.config(scope(), KeyScheme::Scope, 100), UnixMillis(1)).unwrap();
    assert!(
        matches!(migration.unwrap(), Migration::Skipped { reason, .. } if reason.starts_with("malformed"))
    );
    assert_eq!(
        fs::read(json_path(m.dir())).unwrap(),
        b"{\"version\": 2, \"scope\": tru"
    );
    store.put(&thread(1), &record("s"), UnixMillis(2)).unwrap();
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
    handles[0]
        .put(&conversation(), &record("shared"), UnixMillis(1))
        .unwrap();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let store = Arc::clone(&handles[w % 2]);
            s.spawn(move || {
                for i in 0..EACH {
                    let n = 1 + w * EACH + i;
                    let key = thread(n);
                    let put = store
                        .put(&key, &record(&format!("s-{n}")), UnixMillis(n as u64))
                        .unwrap();
                    assert_eq!(
                        put,
                        PutOutcome::Written {
                            created: true,
                            evicted: 0
                        }
                    );
                    let mine = vec![format!("w{w}-e{i}")];
                    assert_eq!(
                        store
                            .commit_delivery(
                                &key,
                                &format!("s-{n}"),
                                false,
                                &mine,
                                &HashSet::new(),
                                UnixMillis(n as u64)
                            )
                            .unwrap(),
                        CommitOutcome::Written
                    );
                    let all: HashSet<String> = (0..WRITERS)
                        .flat_map(|w| (0..EACH).map(move |i| format!("w{w}-e{i}")))
                        .collect();
                    let outcome = store
                        .commit_delivery(
                            &conversation(),
                            "shared",
                            false,
                            &mine,
                            &all,
                            UnixMillis(n as u64),
                        )
                        .unwrap();
                    assert_eq!(outcome, CommitOutcome::Written);
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
        delivered(store.as_ref(), &conversation()).len(),
        WRITERS * EACH,
        "no commit to the shared key was lost"
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
        store
            .put(&thread(1), &record("s-1"), UnixMillis(1))
            .unwrap();
        assert_eq!(
            store
                .commit_delivery(
                    &thread(1),
                    "s-1",
                    false,
                    &ids(&["e"]),
                    &window(&[]),
                    UnixMillis(2)
                )
                .unwrap(),
            CommitOutcome::Written
        );
        assert_eq!(session_of(store.as_ref(), &thread(1)), "s-1");
        // From a spawned task too, the way the event loop's tasks would call it.
        let task_store = Arc::clone(&store);
        let removed = tokio::spawn(async move { task_store.remove(&thread(1)) })
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
            a_put_replaces_and_says_whether_it_created,
            invalid_puts_are_refused_and_write_nothing,
            remove_reports_what_it_removed,
            remove_if_session_only_removes_the_named_session,
            remove_channel_removes_the_channel_and_its_threads_only,
            commit_delivery_reports_each_outcome_truthfully,
            the_ledger_stays_bounded_per_scope,
            a_late_commit_from_a_replaced_session_is_refused,
            receipts_are_isolated_by_relay_and_by_agent_key,
            the_channel_scheme_keeps_one_receipt_per_channel,
            the_cap_evicts_the_least_recently_used_and_never_refuses,
            a_lower_cap_on_reopen_evicts_down_to_it_on_the_next_new_receipt,
            import_inserts_only_missing_keys,
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
