//! The receipt-store contract against the embedded SQLite backend, plus what only a file-backed
//! store can get wrong: file modes, symlinks, a file that is not a database, a newer schema, and
//! writers in separate processes.

mod contract;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};

use buzz_session_store::{
    Backend, Expect, KeyScheme, PutOutcome, ReceiptStore, SqliteStore, StoreError, UnixMillis,
};
use contract::{Medium, commit, put_new, record, scope, thread};

fn medium() -> Option<Medium> {
    let state_dir = tempfile::tempdir().unwrap();
    let backend = Backend::from_url(None, state_dir.path()).unwrap();
    Some(Medium {
        backend,
        state_dir,
        cleanup: None,
    })
}

contract_tests!(medium);

fn db_path(dir: &Path) -> std::path::PathBuf {
    dir.join("sessions.sqlite3")
}

fn open(path: &Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(path, scope(), KeyScheme::Scope, 1_000)
}

#[test]
fn files_are_owner_only_and_a_clean_close_leaves_only_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let store = open(&db_path(&state)).unwrap();
    put_new(&store, &thread(1), "s", 1);
    assert_eq!(
        fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for entry in fs::read_dir(&state).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{:?}", entry.file_name());
    }
    store.integrity_check().unwrap();
    drop(store);
    let names: Vec<String> = fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["sessions.sqlite3"]);
}

#[test]
fn a_symlink_at_the_database_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.db");
    fs::write(&target, b"").unwrap();
    symlink(&target, db_path(dir.path())).unwrap();
    let err = open(&db_path(dir.path())).unwrap_err();
    assert!(
        matches!(err, StoreError::Io { .. } | StoreError::Sqlite { .. }),
        "{err:?}"
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        b"",
        "the link target is untouched"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_moved_aside_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let garbage = vec![0x5a_u8; 8192];
    fs::write(&path, &garbage).unwrap();
    let store = open(&path).unwrap();
    put_new(&store, &thread(1), "s", 1);
    let moved: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(moved.len(), 1);
    assert_eq!(fs::read(&moved[0]).unwrap(), garbage, "nothing is lost");
}

#[test]
fn a_database_from_a_newer_harness_is_not_touched() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    drop(open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
    }
    let before = fs::read(&path).unwrap();
    let err = open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SchemaTooNew {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn an_unreadable_row_is_reported_with_its_key_and_a_put_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let store = open(&path).unwrap();
    put_new(&store, &thread(1), "s", 1);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE buzz_receipts SET delivered_event_ids = 'nope'", [])
            .unwrap();
    }
    let err = store.get(&thread(1)).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRow { key, .. } if *key == thread(1).to_storage_key()),
        "{err:?}"
    );
    // A harness that cannot read the receipt replaces it, bounded by the time it decided.
    assert_eq!(
        store
            .put(
                &thread(1),
                &record("s-2"),
                &Expect::NotWrittenSince(UnixMillis(2)),
                UnixMillis(2)
            )
            .unwrap(),
        PutOutcome::Written {
            created: false,
            evicted: 0
        }
    );
    assert_eq!(store.get(&thread(1)).unwrap().unwrap().session_id, "s-2");
}

/// A child process writing its own keys: `WRITER_DB`, `WRITER_ID`, `WRITER_COUNT`.
#[test]
#[ignore = "run as a child process by two_processes_writing_at_once_lose_nothing"]
fn writer_child() {
    let Ok(db) = std::env::var("WRITER_DB") else {
        return;
    };
    let id: usize = std::env::var("WRITER_ID").unwrap().parse().unwrap();
    let count: usize = std::env::var("WRITER_COUNT").unwrap().parse().unwrap();
    let store = open(Path::new(&db)).unwrap();
    for i in 0..count {
        let n = 1 + id * count + i;
        put_new(&store, &thread(n), &format!("s-{n}"), n as u64);
    }
}

#[test]
fn two_processes_writing_at_once_lose_nothing() {
    const COUNT: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    drop(open(&path).unwrap());
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(&exe)
                .args(["--exact", "writer_child", "--ignored", "--nocapture"])
                .env("WRITER_DB", &path)
                .env("WRITER_ID", id.to_string())
                .env("WRITER_COUNT", COUNT.to_string())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let store = open(&path).unwrap();
    assert_eq!(store.len().unwrap(), 2 * COUNT);
    assert_eq!(store.receipts().unwrap().len(), 2 * COUNT);
    store.integrity_check().unwrap();
}

/// The schema and the writes of the harness that predates schema revision 1, as it ran them.
const OLD_SCHEMA: &str = "
CREATE TABLE buzz_receipt_scopes (
    id INTEGER PRIMARY KEY, relay TEXT NOT NULL, agent_pubkey TEXT NOT NULL,
    receipts INTEGER NOT NULL DEFAULT 0, UNIQUE (relay, agent_pubkey));
CREATE TABLE buzz_receipts (
    id INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key TEXT NOT NULL, session_id TEXT NOT NULL, model TEXT, permission_mode TEXT,
    requested_model TEXT, requested_permission_mode TEXT,
    standing_context_sent INTEGER NOT NULL DEFAULT 0, delivered_event_ids TEXT,
    last_used_ms INTEGER NOT NULL, UNIQUE (scope_id, scope_key));
CREATE INDEX buzz_receipts_lru ON buzz_receipts (scope_id, last_used_ms, scope_key);
PRAGMA user_version = 1;
";

const OLD_UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms";

const OLD_COMMIT: &str = "UPDATE buzz_receipts SET standing_context_sent = ?4,
         delivered_event_ids = ?5, last_used_ms = ?6
     WHERE scope_id = ?1 AND scope_key = ?2 AND session_id = ?3";

/// What the old harness checks at open: the schema version it knows, exactly.
fn old_harness_accepts(conn: &rusqlite::Connection) -> bool {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .unwrap()
        == 1
}

fn old_put(conn: &rusqlite::Connection, session: &str, used: i64) {
    conn.execute(
        OLD_UPSERT,
        rusqlite::params![
            1,
            thread(1).to_storage_key(),
            session,
            "opus",
            None::<String>,
            "opus",
            "plan",
            false,
            None::<String>,
            used
        ],
    )
    .unwrap();
}

#[test]
fn a_revision_0_database_is_migrated_and_the_old_harness_keeps_working_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(OLD_SCHEMA).unwrap();
    old.execute(
        "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey, receipts) VALUES (?1, ?2, 1)",
        rusqlite::params![scope().relay, scope().agent_pubkey],
    )
    .unwrap();
    old_put(&old, "s-1", 1);

    // A reader before the upgrade sees the old receipt, and changes nothing.
    let reader = SqliteStore::open_read_only(&path, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 0);
    assert_eq!(reader.get(&thread(1)).unwrap().unwrap().session_id, "s-1");
    assert_eq!(reader.watermark().unwrap(), None);
    drop(reader);

    let new = open(&path).unwrap();
    assert_eq!(new.revision(), 3, "revisions 1, 2 and 3");
    assert_eq!(recorded_revision(&old), 3);
    assert_eq!(new.watermark().unwrap(), None);
    assert!(old_harness_accepts(&old), "the old harness still opens it");
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!(read.session_id, "s-1");
    assert_eq!(read.turns, None, "unknown for a row the old harness wrote");
    new.commit_turn(&thread(1), &commit("s-1", &["e1"], 3), UnixMillis(2))
        .unwrap();
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().turns, Some(3));

    // The old harness replaces the session with its own write path: the new fields it does not
    // know must not be read as the new session's.
    old_put(&old, "s-2", 3);
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!(read.session_id, "s-2");
    assert_eq!(read.turns, None);
    assert_eq!(read.delivery, None);
    // Its commits still land, and the new harness's commits on the old harness's session too.
    old.execute(
        OLD_COMMIT,
        rusqlite::params![1, thread(1).to_storage_key(), "s-2", true, r#"["x"]"#, 4],
    )
    .unwrap();
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!(read.delivery.unwrap().delivered_event_ids, ["x"]);
    assert_eq!(
        new.commit_turn(&thread(1), &commit("s-2", &["y"], 1), UnixMillis(5))
            .unwrap(),
        buzz_session_store::CommitOutcome::Written
    );
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!(read.turns, Some(1));
    assert!(read.delivery.unwrap().standing_context_sent);
    new.integrity_check().unwrap();
}

/// What the revision-1 harness added to [`OLD_SCHEMA`] when it migrated a database.
const REVISION_1_ADDITIONS: &str = "
ALTER TABLE buzz_receipts ADD COLUMN ext TEXT;
CREATE TABLE buzz_receipt_forgets (
    scope_id INTEGER NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key TEXT NOT NULL, forgotten_ms INTEGER NOT NULL, PRIMARY KEY (scope_id, scope_key));
CREATE TABLE buzz_receipt_revision (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1), revision INTEGER NOT NULL);
INSERT INTO buzz_receipt_revision (singleton, revision) VALUES (1, 1);
";

/// The revision-1 harness's upsert of a receipt (every column it knows, `ext` included).
const REVISION_1_UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id,
         model, permission_mode, requested_model, requested_permission_mode,
         standing_context_sent, delivered_event_ids, last_used_ms, ext)
     VALUES (?1, ?2, ?3, NULL, NULL, NULL, NULL, 0, NULL, ?4, ?5)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms, ext = excluded.ext";

/// What the revision-1 harness runs at open to register its scope; returns the scope id.
fn revision_1_register(conn: &rusqlite::Connection) -> i64 {
    conn.execute(
        "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey) VALUES (?1, ?2)
         ON CONFLICT (relay, agent_pubkey) DO NOTHING",
        rusqlite::params![scope().relay, scope().agent_pubkey],
    )
    .unwrap();
    let id: i64 = conn
        .query_row(
            "SELECT id FROM buzz_receipt_scopes WHERE relay = ?1 AND agent_pubkey = ?2",
            rusqlite::params![scope().relay, scope().agent_pubkey],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "UPDATE buzz_receipt_scopes
         SET receipts = (SELECT count(*) FROM buzz_receipts WHERE scope_id = ?1) WHERE id = ?1",
        rusqlite::params![id],
    )
    .unwrap();
    id
}

fn revision_1_put(conn: &rusqlite::Connection, scope_id: i64, session: &str, used: i64) {
    let ext = format!(r#"{{"sessionId":"{session}","turns":7}}"#);
    conn.execute(
        REVISION_1_UPSERT,
        rusqlite::params![scope_id, thread(1).to_storage_key(), session, used, ext],
    )
    .unwrap();
}

fn recorded_revision(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("SELECT revision FROM buzz_receipt_revision", [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn a_revision_1_database_is_migrated_forward_and_the_revision_1_harness_keeps_working_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(OLD_SCHEMA).unwrap();
    old.execute_batch(REVISION_1_ADDITIONS).unwrap();
    let scope_id = revision_1_register(&old);
    revision_1_put(&old, scope_id, "s-1", 1);
    revision_1_register(&old);

    // A reader before the upgrade reads the receipt, and no watermark (there is no column yet).
    let reader = SqliteStore::open_read_only(&path, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 1);
    assert_eq!(reader.get(&thread(1)).unwrap().unwrap().turns, Some(7));
    assert_eq!(reader.watermark().unwrap(), None);
    assert_eq!(reader.advance_watermark(5).unwrap(), None);
    drop(reader);
    assert_eq!(
        recorded_revision(&old),
        1,
        "a read-only open migrates nothing"
    );

    let new = open(&path).unwrap();
    assert_eq!(new.revision(), 3);
    assert_eq!(recorded_revision(&old), 3);
    assert!(old_harness_accepts(&old), "the schema line is still 1");
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!((read.session_id.as_str(), read.turns), ("s-1", Some(7)));
    assert_eq!(new.len().unwrap(), 1);
    assert_eq!(new.watermark().unwrap(), None);
    assert_eq!(new.advance_watermark(100).unwrap(), Some(100));

    // The revision-1 harness, beside it: it starts (registers its scope) and writes receipts with
    // its own statements, which never name the watermark, so they leave it as it is.
    revision_1_register(&old);
    revision_1_put(&old, scope_id, "s-2", 3);
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().session_id, "s-2");
    assert_eq!(new.watermark().unwrap(), Some(100));
    assert_eq!(new.len().unwrap(), 1);
    let reader = SqliteStore::open_read_only(&path, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 3);
    assert_eq!(reader.watermark().unwrap(), Some(100));
    drop(reader);
    // Opening a migrated database again migrates nothing.
    drop(new);
    let again = open(&path).unwrap();
    assert_eq!(again.revision(), 3);
    assert_eq!(again.watermark().unwrap(), Some(100));
    again.integrity_check().unwrap();
}

#[test]
fn a_negative_watermark_written_by_hand_is_reported_not_read_as_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let store = open(&path).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("UPDATE buzz_receipt_scopes SET watermark_s = -5", [])
            .unwrap();
    }
    let err = store.watermark().unwrap_err();
    assert!(matches!(err, StoreError::CorruptRow { .. }), "{err:?}");
    assert!(err.to_string().contains("watermark"), "{err}");
    // The operator's set replaces it.
    store.set_watermark(Some(5)).unwrap();
    assert_eq!(store.watermark().unwrap(), Some(5));
}

#[test]
fn a_read_only_open_of_a_missing_database_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let err = SqliteStore::open_read_only(&path, scope(), KeyScheme::Scope).unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}
