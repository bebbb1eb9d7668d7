//! Store tests: real files in temp directories, real processes for the lost-update case.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::*;
use crate::test_support::WarnCounter;

const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
const OTHER_CHANNEL: &str = "11111111-2222-4333-8444-555555555555";
const RELAY: &str = "wss://relay.example";

fn pubkey() -> String {
    "ab".repeat(32)
}

fn scope() -> StoreScope {
    StoreScope {
        relay: RELAY.into(),
        agent_pubkey: pubkey(),
    }
}

fn root(n: usize) -> String {
    format!("{n:064x}")
}

fn conversation() -> ScopeKey {
    ScopeKey::conversation(CHANNEL)
}

fn thread(n: usize) -> ScopeKey {
    ScopeKey::thread(CHANNEL, root(n))
}

fn open(dir: &Path, scheme: KeyScheme) -> SessionStore {
    SessionStore::open(dir, scope(), scheme)
}

fn rec(id: &str) -> SessionRecord {
    SessionRecord::new(id)
}

fn store_path(dir: &Path) -> PathBuf {
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

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

fn ids(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn corrupt_files(dir: &Path) -> Vec<PathBuf> {
    file_names(dir)
        .into_iter()
        .filter(|n| n.contains(".corrupt-"))
        .map(|n| dir.join(n))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Basic operations
// ---------------------------------------------------------------------------------------------

#[test]
fn a_disabled_store_remembers_nothing() {
    let store = SessionStore::disabled();
    assert_eq!(store.status(), StoreStatus::Disabled);
    assert_eq!(store.path(), None);
    store.put(&conversation(), rec("s1")).unwrap();
    assert_eq!(store.get(&conversation()), None);
    assert_eq!(store.remove(&conversation()).unwrap(), None);
    assert!(!store.remove_if_session(&conversation(), "s1").unwrap());
    assert_eq!(store.remove_channel(CHANNEL).unwrap(), 0);
    assert!(
        !store
            .commit_delivery(&conversation(), "s1", true, &[], &HashSet::new())
            .unwrap()
    );
    assert!(store.records().is_empty());
}

#[test]
fn an_unusable_agent_key_disables_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let bad = StoreScope {
        relay: RELAY.into(),
        agent_pubkey: "../escape".into(),
    };
    let store = SessionStore::open(dir.path(), bad, KeyScheme::Scope);
    assert_eq!(store.status(), StoreStatus::Disabled);
    store.put(&conversation(), rec("s1")).unwrap();
    assert!(file_names(dir.path()).is_empty());
}

#[test]
fn a_put_survives_reopen_and_get_reads_other_writers_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let reader = open(dir.path(), KeyScheme::Scope);
    let writer = open(dir.path(), KeyScheme::Scope);
    let mut record = rec("s1");
    record.model = Some("opus".into());
    record.requested_model = Some("opus".into());
    writer.put(&thread(1), record.clone()).unwrap();
    assert_eq!(reader.get(&thread(1)), Some(record.clone()), "no caching");
    drop((reader, writer));
    let reopened = open(dir.path(), KeyScheme::Scope);
    assert_eq!(reopened.status(), StoreStatus::Enabled);
    assert_eq!(reopened.path(), Some(store_path(dir.path()).as_path()));
    assert_eq!(reopened.get(&thread(1)), Some(record));
    assert_eq!(reopened.get(&thread(2)), None);
    assert_eq!(reopened.get(&conversation()), None);
}

#[test]
fn remove_forgets_and_returns_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    store.put(&thread(1), rec("s1")).unwrap();
    store.put(&thread(2), rec("s2")).unwrap();
    assert_eq!(store.remove(&thread(1)).unwrap(), Some(rec("s1")));
    assert_eq!(store.remove(&thread(1)).unwrap(), None);
    assert_eq!(
        open(dir.path(), KeyScheme::Scope).records(),
        vec![(thread(2), rec("s2"))]
    );
}

#[test]
fn remove_if_session_only_removes_the_named_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    store.put(&thread(1), rec("old")).unwrap();
    // Another process replaced the session meanwhile.
    open(dir.path(), KeyScheme::Scope)
        .put(&thread(1), rec("new"))
        .unwrap();
    assert!(!store.remove_if_session(&thread(1), "old").unwrap());
    assert_eq!(store.get(&thread(1)), Some(rec("new")));
    assert!(!store.remove_if_session(&thread(2), "new").unwrap());
    assert!(store.remove_if_session(&thread(1), "new").unwrap());
    assert_eq!(store.get(&thread(1)), None);
}

#[test]
fn remove_channel_removes_the_conversation_and_every_thread_of_that_channel_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    let other = ScopeKey::thread(OTHER_CHANNEL, root(1));
    for (key, id) in [
        (conversation(), "c"),
        (thread(1), "t1"),
        (thread(2), "t2"),
        (other.clone(), "o"),
    ] {
        store.put(&key, rec(id)).unwrap();
    }
    assert_eq!(store.remove_channel(&CHANNEL.to_uppercase()).unwrap(), 3);
    assert_eq!(store.records(), vec![(other, rec("o"))]);
    assert_eq!(store.remove_channel(CHANNEL).unwrap(), 0);
}

#[test]
fn commit_delivery_is_guarded_by_the_session_and_bounded_by_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    let window: HashSet<String> = ids(&["e1", "e2", "e3"]).into_iter().collect();
    assert!(
        !store
            .commit_delivery(&thread(1), "s1", true, &ids(&["e1"]), &window)
            .unwrap(),
        "no record"
    );
    store.put(&thread(1), rec("s1")).unwrap();

    assert!(
        store
            .commit_delivery(
                &thread(1),
                "s1",
                false,
                &ids(&["e2", "e1", "gone"]),
                &window
            )
            .unwrap()
    );
    let delivery = store.get(&thread(1)).unwrap().delivery.unwrap();
    assert_eq!(
        delivery,
        DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: ids(&["e1", "e2", "gone"])
        }
    );

    // "gone" has left the window, so it is not remembered any more; the standing flag is ORed.
    assert!(
        store
            .commit_delivery(&thread(1), "s1", true, &ids(&["e3"]), &window)
            .unwrap()
    );
    assert!(
        store
            .commit_delivery(&thread(1), "s1", false, &[], &window)
            .unwrap()
    );
    let delivery = store.get(&thread(1)).unwrap().delivery.unwrap();
    assert_eq!(
        delivery,
        DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: ids(&["e1", "e2", "e3"])
        }
    );

    // A late commit from a replaced session must not touch the successor's receipt.
    store.put(&thread(1), rec("s2")).unwrap();
    assert!(
        !store
            .commit_delivery(&thread(1), "s1", true, &ids(&["e1"]), &window)
            .unwrap()
    );
    assert_eq!(store.get(&thread(1)), Some(rec("s2")));
}

#[test]
fn invalid_keys_and_empty_session_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    let err = store
        .put(&ScopeKey::conversation("general"), rec("s"))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { ref key, .. } if key == "general"),
        "{err}"
    );
    let err = store.put(&conversation(), rec(" ")).unwrap_err();
    assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
    assert!(!store_path(dir.path()).exists());
}

#[test]
fn the_channel_scheme_collapses_threads_into_one_version_1_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), KeyScheme::Channel);
    store.put(&thread(1), rec("t1")).unwrap();
    store.put(&thread(2), rec("t2")).unwrap();
    assert_eq!(
        store.get(&thread(1)),
        Some(rec("t2")),
        "threads share the channel record"
    );
    assert_eq!(store.get(&conversation()), Some(rec("t2")));
    assert_eq!(store.records(), vec![(conversation(), rec("t2"))]);
    let file = read_json(&store_path(dir.path()));
    assert_eq!(file["version"], 1);
    assert_eq!(
        file["sessions"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        [CHANNEL]
    );
    assert!(store.remove_if_session(&thread(7), "t2").unwrap());
    assert!(store.records().is_empty());
}

#[test]
fn the_store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SessionStore>();
}

// ---------------------------------------------------------------------------------------------
// File safety
// ---------------------------------------------------------------------------------------------

#[test]
fn store_file_and_directory_are_owner_only_and_no_temp_is_left() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("state").join("nested");
    let store = open(&dir, KeyScheme::Scope);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&base.path().join("state")), 0o700);
    for n in 0..5 {
        store.put(&thread(n), rec("s")).unwrap();
    }
    store.remove(&thread(0)).unwrap();
    let path = store_path(&dir);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&fsio::with_suffix(&path, ".lock")), 0o600);
    let names = file_names(&dir);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    assert!(fs::read_to_string(&path).unwrap().ends_with("}\n"));
}

#[test]
fn an_existing_state_dir_keeps_its_permissions() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o750)).unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    store.put(&conversation(), rec("s")).unwrap();
    assert_eq!(mode(dir.path()), 0o750);
}

#[test]
fn a_symlink_at_the_store_path_is_not_followed_and_a_write_replaces_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.json");
    // The target even holds a valid store document: it must still not be read through the link.
    let valid =
        json!({"version": 2, "scope": scope(), "sessions": {CHANNEL: {"sessionId": "victim"}}});
    let target_bytes = serde_json::to_vec_pretty(&valid).unwrap();
    fs::write(&target, &target_bytes).unwrap();
    let path = store_path(dir.path());
    symlink(&target, &path).unwrap();

    let warnings = WarnCounter::default();
    let store = warnings.run(|| {
        let store = open(dir.path(), KeyScheme::Scope);
        assert_eq!(store.get(&conversation()), None);
        assert_eq!(store.get(&conversation()), None);
        store
    });
    assert_eq!(warnings.count(), 1, "one warning per store instance");
    assert_eq!(store.status(), StoreStatus::Enabled);

    store.put(&thread(1), rec("mine")).unwrap();
    assert!(
        fs::symlink_metadata(&path).unwrap().file_type().is_file(),
        "the link itself was replaced"
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        target_bytes,
        "the target is untouched"
    );
    assert_eq!(store.records(), vec![(thread(1), rec("mine"))]);
}

#[test]
fn a_symlinked_lock_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("victim");
    fs::write(&target, b"precious").unwrap();
    let lock = fsio::with_suffix(&store_path(dir.path()), ".lock");
    symlink(&target, &lock).unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    let err = store.put(&conversation(), rec("s")).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Io {
                op: "open lock file",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fs::read(&target).unwrap(), b"precious");
    assert!(!store_path(dir.path()).exists());
}

#[test]
fn a_corrupt_file_reads_empty_and_is_moved_aside_before_it_is_replaced() {
    let cases: [(&str, Vec<u8>); 4] = [
        ("not json", b"{\"version\": 2, \"scope\": ".to_vec()),
        ("wrong shape", serde_json::to_vec(&json!({"version": 2, "scope": scope(), "sessions": [], })).unwrap()),
        (
            "unknown record field",
            serde_json::to_vec(&json!({"version": 2, "scope": scope(), "sessions": {CHANNEL: {"sessionId": "s", "prompt": "x"}}})).unwrap(),
        ),
        ("oversize", vec![b' '; MAX_STORE_BYTES + 1]),
    ];
    for (name, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = store_path(dir.path());
        fs::write(&path, &bytes).unwrap();
        let warnings = WarnCounter::default();
        let store = warnings.run(|| {
            let store = open(dir.path(), KeyScheme::Scope);
            assert_eq!(store.get(&conversation()), None, "{name}");
            assert!(store.records().is_empty(), "{name}");
            store
        });
        assert_eq!(
            warnings.count(),
            1,
            "{name}: one warning per store instance"
        );
        assert_eq!(
            store.status(),
            StoreStatus::Enabled,
            "{name}: stays writable"
        );
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "{name}: reading changes nothing"
        );
        assert!(corrupt_files(dir.path()).is_empty());

        let warnings = WarnCounter::default();
        warnings.run(|| store.put(&conversation(), rec("fresh")).unwrap());
        assert_eq!(warnings.count(), 1, "{name}: the move is logged");
        let moved = corrupt_files(dir.path());
        assert_eq!(moved.len(), 1, "{name}");
        assert_eq!(fs::read(&moved[0]).unwrap(), bytes, "{name}: nothing lost");
        assert_eq!(store.get(&conversation()), Some(rec("fresh")), "{name}");

        store.put(&thread(1), rec("more")).unwrap();
        assert_eq!(
            corrupt_files(dir.path()).len(),
            1,
            "{name}: a valid file is not moved again"
        );
    }
}

#[test]
fn a_no_op_write_does_not_move_a_corrupt_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    fs::write(&path, b"garbage").unwrap();
    let store = open(dir.path(), KeyScheme::Scope);
    assert_eq!(store.remove(&conversation()).unwrap(), None);
    assert_eq!(store.remove_channel(CHANNEL).unwrap(), 0);
    assert_eq!(fs::read(&path).unwrap(), b"garbage");
    assert!(corrupt_files(dir.path()).is_empty());
}

/// Files that belong to someone else: (case, scheme, document).
fn not_ours_cases() -> Vec<(&'static str, KeyScheme, Value)> {
    let sessions = json!({CHANNEL: {"sessionId": "theirs"}});
    let mut other_relay = scope();
    other_relay.relay = "wss://other.example".into();
    let mut other_agent = scope();
    other_agent.agent_pubkey = "cd".repeat(32);
    vec![
        (
            "future version",
            KeyScheme::Scope,
            json!({"version": 3, "scope": scope(), "sessions": sessions, "newField": true}),
        ),
        (
            "v2 under the channel scheme",
            KeyScheme::Channel,
            json!({"version": 2, "scope": scope(), "sessions": sessions}),
        ),
        (
            "foreign relay",
            KeyScheme::Scope,
            json!({"version": 2, "scope": other_relay, "sessions": sessions}),
        ),
        (
            "foreign agent",
            KeyScheme::Channel,
            json!({"version": 1, "scope": other_agent, "sessions": sessions}),
        ),
    ]
}

#[test]
fn a_file_that_belongs_to_someone_else_is_read_only_and_byte_identical() {
    for (name, scheme, doc) in not_ours_cases() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_path(dir.path());
        let bytes = serde_json::to_vec_pretty(&doc).unwrap();
        fs::write(&path, &bytes).unwrap();

        let warnings = WarnCounter::default();
        warnings.run(|| {
            let store = open(dir.path(), scheme);
            assert!(
                matches!(store.status(), StoreStatus::ReadOnly { .. }),
                "{name}"
            );
            assert_eq!(store.get(&conversation()), None, "{name}");
            store.put(&conversation(), rec("mine")).unwrap();
            store.put(&thread(1), rec("mine")).unwrap();
            assert_eq!(store.remove(&conversation()).unwrap(), None);
            assert_eq!(store.remove_channel(CHANNEL).unwrap(), 0);
        });
        assert_eq!(
            warnings.count(),
            2,
            "{name}: one for the file, one for the refused writes"
        );
        assert_eq!(fs::read(&path).unwrap(), bytes, "{name}: never written");
        assert!(corrupt_files(dir.path()).is_empty(), "{name}: never moved");
    }
}

#[test]
fn a_file_taken_over_by_a_newer_harness_mid_run_turns_the_store_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let store = open(dir.path(), KeyScheme::Scope);
    store.put(&conversation(), rec("mine")).unwrap();
    let newer =
        serde_json::to_vec(&json!({"version": 3, "scope": scope(), "sessions": {}})).unwrap();
    fs::write(&path, &newer).unwrap();
    store.put(&thread(1), rec("mine")).unwrap();
    assert!(
        matches!(store.status(), StoreStatus::ReadOnly { reason } if reason.contains("version 3"))
    );
    assert_eq!(fs::read(&path).unwrap(), newer);
}

#[test]
fn a_version_1_file_is_migrated_to_version_2_under_the_scope_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let v1 = open(dir.path(), KeyScheme::Channel);
    v1.put(&thread(1), rec("channel-session")).unwrap();
    v1.put(&ScopeKey::conversation(OTHER_CHANNEL), rec("other"))
        .unwrap();
    assert_eq!(read_json(&path)["version"], 1);

    let v2 = open(dir.path(), KeyScheme::Scope);
    assert_eq!(v2.status(), StoreStatus::Enabled);
    assert_eq!(
        v2.get(&conversation()),
        Some(rec("channel-session")),
        "read as conversation records"
    );
    assert_eq!(
        v2.get(&thread(1)),
        None,
        "a channel session is not a thread's session"
    );
    assert_eq!(read_json(&path)["version"], 1, "reading does not rewrite");

    v2.put(&thread(1), rec("thread-session")).unwrap();
    let file = read_json(&path);
    assert_eq!(file["version"], 2);
    assert_eq!(file["sessions"][CHANNEL]["sessionId"], "channel-session");
    assert_eq!(file["sessions"][OTHER_CHANNEL]["sessionId"], "other");
    assert_eq!(v2.records().len(), 3);

    // And the old harness now sees a newer file: it must leave it alone.
    let old_again = open(dir.path(), KeyScheme::Channel);
    assert!(matches!(old_again.status(), StoreStatus::ReadOnly { .. }));
}

#[test]
fn bad_entries_are_dropped_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let good_thread = format!("{CHANNEL}/{}", root(1));
    let doc = json!({"version": 2, "scope": scope(), "sessions": {
        CHANNEL: {"sessionId": "good"},
        good_thread.clone(): {"sessionId": "good-thread"},
        "general": {"sessionId": "bad-key"},
        format!("{CHANNEL}/{}", "AB".repeat(32)): {"sessionId": "bad-root"},
        OTHER_CHANNEL: {"sessionId": ""},
    }});
    fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let warnings = WarnCounter::default();
    let store = warnings.run(|| {
        let store = open(dir.path(), KeyScheme::Scope);
        assert_eq!(
            store.records(),
            vec![
                (conversation(), rec("good")),
                (thread(1), rec("good-thread"))
            ]
        );
        assert_eq!(
            store.get(&ScopeKey::conversation(OTHER_CHANNEL)),
            None,
            "deleted, not resumed"
        );
        store
    });
    assert_eq!(
        warnings.count(),
        2,
        "one per kind: invalid keys, empty session id"
    );
    store.put(&thread(3), rec("new")).unwrap();
    let file = read_json(&path);
    let keys: BTreeSet<String> = file["sessions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let want: BTreeSet<String> =
        [CHANNEL.to_owned(), good_thread, thread(3).to_storage_key()].into();
    assert_eq!(keys, want, "dropped entries disappear on the next write");
}

#[test]
fn writes_over_the_cap_shed_delivery_ledgers_then_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 4096;
    let store = open(dir.path(), KeyScheme::Scope).with_limit(limit);
    let many: Vec<String> = (0..40).map(|i| format!("{i:064x}")).collect();
    let window: HashSet<String> = many.iter().cloned().collect();
    store.put(&thread(1), rec("s1")).unwrap();
    store
        .commit_delivery(&thread(1), "s1", false, &many[..20], &window)
        .unwrap();
    assert!(fs::metadata(store_path(dir.path())).unwrap().len() <= limit as u64);
    store.put(&thread(2), rec("s2")).unwrap();
    // Thread 2's bigger ledger would push the file over the cap: the other scope's ledger goes,
    // the one just committed stays.
    assert!(
        store
            .commit_delivery(&thread(2), "s2", true, &many, &window)
            .unwrap()
    );
    let len = fs::metadata(store_path(dir.path())).unwrap().len();
    assert!(len <= limit as u64, "{len}");
    let records = store.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].1.delivery, None, "thread 1's ledger was shed");
    assert_eq!(
        records[1]
            .1
            .delivery
            .as_ref()
            .unwrap()
            .delivered_event_ids
            .len(),
        40
    );

    // Fillers shed the remaining ledger, then a document over the cap even without ledgers is
    // refused, and the file is left exactly as it was before that write.
    let mut refused = None;
    for n in 10..60 {
        let before = fs::read(store_path(dir.path())).unwrap();
        if let Err(e) = store.put(&thread(n), rec("filler")) {
            refused = Some((n, e, before));
            break;
        }
    }
    let (n, err, before) = refused.expect("the cap must be reached");
    assert!(
        matches!(err, StoreError::TooLarge { limit: 4096, .. }),
        "{err}"
    );
    assert_eq!(fs::read(store_path(dir.path())).unwrap(), before);
    let records = open(dir.path(), KeyScheme::Scope)
        .with_limit(limit)
        .records();
    assert!(
        records.iter().all(|(_, r)| r.delivery.is_none()),
        "every ledger was shed first"
    );
    assert!(!records.iter().any(|(k, _)| *k == thread(n)));
    assert!(before.len() <= limit);
}

#[test]
fn overlapping_stores_keep_each_others_records() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path(), KeyScheme::Scope);
    let b = open(dir.path(), KeyScheme::Scope);
    a.put(&thread(1), rec("a1")).unwrap();
    b.put(&thread(2), rec("b2")).unwrap();
    a.put(&conversation(), rec("a0")).unwrap();
    b.remove(&thread(9)).unwrap();
    assert_eq!(
        open(dir.path(), KeyScheme::Scope).records(),
        vec![
            (conversation(), rec("a0")),
            (thread(1), rec("a1")),
            (thread(2), rec("b2"))
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Two processes: the lost-update regression (#6088 item 4), with real processes and real locks.
// ---------------------------------------------------------------------------------------------

const CHILD_DIR_ENV: &str = "BUZZ_SESSION_STORE_TEST_CHILD_DIR";
const CHILD_ID_ENV: &str = "BUZZ_SESSION_STORE_TEST_CHILD_ID";
const PUTS_PER_CHILD: usize = 60;

fn child_key(child: usize, n: usize) -> ScopeKey {
    ScopeKey::thread(CHANNEL, format!("{child:02x}{n:062x}"))
}

/// The child half of `two_processes_never_lose_each_others_records`; does nothing when run by hand.
#[test]
#[ignore = "run as a child process by two_processes_never_lose_each_others_records"]
fn lost_update_child() {
    let (Ok(dir), Ok(child)) = (std::env::var(CHILD_DIR_ENV), std::env::var(CHILD_ID_ENV)) else {
        return;
    };
    let child: usize = child.parse().expect("child id");
    let store = open(Path::new(&dir), KeyScheme::Scope);
    for n in 0..PUTS_PER_CHILD {
        store
            .put(&child_key(child, n), rec(&format!("s-{child}-{n}")))
            .expect("put");
    }
}

#[test]
fn two_processes_never_lose_each_others_records() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2usize)
        .map(|child| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "store::tests::lost_update_child",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR_ENV, dir.path())
                .env(CHILD_ID_ENV, child.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child test must actually run: {stdout}"
        );
    }
    let store = open(dir.path(), KeyScheme::Scope);
    let mut missing = Vec::new();
    for child in 0..2 {
        for n in 0..PUTS_PER_CHILD {
            if store.get(&child_key(child, n)) != Some(rec(&format!("s-{child}-{n}"))) {
                missing.push((child, n));
            }
        }
    }
    assert!(missing.is_empty(), "lost updates: {missing:?}");
    assert_eq!(store.records().len(), 2 * PUTS_PER_CHILD);
    assert!(file_names(dir.path()).iter().all(|n| !n.contains(".tmp")));
}

// ---------------------------------------------------------------------------------------------
// The format, documented by snapshot.
// ---------------------------------------------------------------------------------------------

/// A short, realistic sequence: a DM conversation, a thread created with a model the agent
/// rejected and a committed ledger, a second thread in the same channel, and a stale commit and a
/// stale removal that must both be ignored.
fn write_sample(store: &SessionStore) {
    let requested = SessionRecord {
        model: None, // the agent rejected the requested model: recorded as its default
        permission_mode: Some("acceptEdits".into()),
        requested_model: Some("opus".into()),
        requested_permission_mode: Some("acceptEdits".into()),
        ..rec("sess-thread-1")
    };
    let window: HashSet<String> = ids(&["e-root", "e-reply"]).into_iter().collect();
    store
        .put(&ScopeKey::conversation(OTHER_CHANNEL), rec("sess-dm"))
        .unwrap();
    store.put(&thread(1), requested).unwrap();
    store
        .commit_delivery(
            &thread(1),
            "sess-thread-1",
            true,
            &ids(&["e-reply", "e-root"]),
            &window,
        )
        .unwrap();
    store.put(&thread(2), rec("sess-thread-2")).unwrap();
    // Under the channel scheme thread 2 replaced thread 1's record, so this commit is stale there.
    store
        .commit_delivery(
            &thread(1),
            "sess-thread-1",
            false,
            &ids(&["e-late"]),
            &window,
        )
        .unwrap();
    store.remove_if_session(&thread(2), "sess-older").unwrap();
}

#[test]
fn snapshot_of_the_store_file_in_both_schemes() {
    for (scheme, name) in [
        (KeyScheme::Scope, "store_file_scope_scheme_v2"),
        (KeyScheme::Channel, "store_file_channel_scheme_v1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_sample(&open(dir.path(), scheme));
        let text = fs::read_to_string(store_path(dir.path())).unwrap();
        insta::with_settings!({ description => "store file after write_sample() (store/tests.rs)" }, {
            insta::assert_snapshot!(name, text);
        });
    }
}
