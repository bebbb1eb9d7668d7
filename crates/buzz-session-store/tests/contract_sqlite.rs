//! The receipt-store contract against the embedded SQLite backend, plus what only a file-backed
//! store can get wrong: file modes, symlinks, a file that is not a database, a newer schema, and
//! writers in separate processes.

mod contract;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};

use buzz_session_store::{
    Backend, KeyScheme, PutOutcome, ReceiptStore, SqliteStore, StoreError, UnixMillis,
};
use contract::{Medium, record, scope, thread};

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
    store.put(&thread(1), &record("s"), UnixMillis(1)).unwrap();
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
    store.put(&thread(1), &record("s"), UnixMillis(1)).unwrap();
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
    store.put(&thread(1), &record("s"), UnixMillis(1)).unwrap();
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
    assert_eq!(
        store
            .put(&thread(1), &record("s-2"), UnixMillis(2))
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
        let outcome = store
            .put(&thread(n), &record(&format!("s-{n}")), UnixMillis(n as u64))
            .unwrap();
        assert_eq!(
            outcome,
            PutOutcome::Written {
                created: true,
                evicted: 0
            }
        );
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
