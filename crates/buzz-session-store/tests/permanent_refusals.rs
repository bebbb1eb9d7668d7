//! `StoreError::healing` against real refusals: a PostgreSQL server of the test's own
//! (crate `pg-fixture`) that rejects a password, lacks a database or a role, or presents a
//! certificate the client does not trust, must each come back `Permanent` with the matching
//! reason; a server that is stopped or not there must come back `Transient`. And an SQLite store
//! whose directory may not be written is `Permanent` too.
//!
//! Each refusal is checked on the error an open returns (what the harness sees when it starts),
//! next to a positive control that the same server accepts the corrected URL, so a test cannot
//! pass because the server refused for some other reason.
//!
//! The PostgreSQL tests need the server binaries (`scripts/pg start` installs them as root).
//! Without them they FAIL, unless `BUZZ_TEST_SKIP_POSTGRES=1` asks to skip them deliberately.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use buzz_session_store::{
    Healing, KeyScheme, PermanentReason, PgStore, ReceiptStore, ScopeKey, SqliteStore, StoreError,
    StoreScope,
};
use pg_fixture::{Options, PgServer};

fn scope() -> StoreScope {
    StoreScope {
        relay: "wss://relay.example".into(),
        agent_pubkey: "ab".repeat(32),
    }
}

/// A server as `options` say, or `None` when skipping was asked for.
fn server(options: Options) -> Option<PgServer> {
    if std::env::var("BUZZ_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        eprintln!("skipped: BUZZ_TEST_SKIP_POSTGRES=1");
        return None;
    }
    Some(PgServer::start(options).unwrap_or_else(|e| panic!("{e}")))
}

fn open(url: &str) -> Result<PgStore, StoreError> {
    PgStore::open(url, scope(), KeyScheme::Scope, 100)
}

/// The error opening `url` returns; panics if it opens.
fn refusal(url: &str) -> StoreError {
    match open(url) {
        Ok(store) => panic!("{url} opened: {store:?}"),
        Err(e) => e,
    }
}

/// Asserts that `err` is a PostgreSQL error of the open classified as `Permanent { reason }`.
fn assert_permanent(err: &StoreError, reason: PermanentReason) {
    assert!(
        matches!(err, StoreError::Postgres { op: "open", .. }),
        "not a PostgreSQL error of the open: {err:?}"
    );
    assert_eq!(
        err.healing(),
        Healing::Permanent { reason },
        "classified wrongly: {err}"
    );
}

/// Asserts that `err` is a PostgreSQL error (not a timeout of this client's) classified as
/// `Transient`.
fn assert_transient(err: &StoreError) {
    assert!(
        matches!(err, StoreError::Postgres { .. }),
        "not a PostgreSQL error: {err:?}"
    );
    assert_eq!(
        err.healing(),
        Healing::Transient,
        "classified wrongly: {err}"
    );
}

/// The admin connection over the fixture's unix socket (trust authentication).
fn admin(pg: &PgServer) -> postgres::Client {
    postgres::Client::connect(&pg.url(), postgres::NoTls).expect("admin over the socket")
}

#[test]
fn a_wrong_password_is_a_permanent_authentication_failure() {
    let Some(mut pg) = server(Options {
        tcp: true,
        tls: false,
    }) else {
        return;
    };
    // The fixture trusts everyone; ask for a password over TCP (the socket stays trusted for the
    // admin connection). A restart, not a reload, so the new rules are in force when it returns.
    let mut db = admin(&pg);
    db.batch_execute("ALTER ROLE postgres PASSWORD 'right-password'")
        .unwrap();
    let hba_file: String = db.query_one("SHOW hba_file", &[]).unwrap().get(0);
    drop(db);
    fs::write(
        &hba_file,
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    pg.restart().unwrap();
    let url = |user_info: &str| {
        format!(
            "postgresql://{user_info}@127.0.0.1:{}/postgres?sslmode=disable",
            pg.port()
        )
    };

    open(&url("postgres:right-password")).expect("the right password is accepted");
    let err = refusal(&url("postgres:wrong-password"));
    assert_permanent(&err, PermanentReason::AuthenticationFailed);
    assert!(!err.to_string().contains("wrong-password"), "{err}");
    // Under password authentication the server answers a role it does not know the same way,
    // so as not to tell a client which roles exist.
    let err = refusal(&url("no_such_role:right-password"));
    assert_permanent(&err, PermanentReason::AuthenticationFailed);
}

#[test]
fn a_database_that_does_not_exist_is_permanently_missing() {
    let Some(pg) = server(Options::default()) else {
        return;
    };
    open(&pg.url()).expect("the fixture's own database opens");
    let missing = pg.url().replace("@/postgres?", "@/buzz_no_such_database?");
    assert_ne!(missing, pg.url(), "the URL names another database");
    let err = refusal(&missing);
    assert_permanent(&err, PermanentReason::DatabaseMissing);
    // The read-only open of an operator's tool meets the same refusal.
    let err = PgStore::open_read_only(&missing, scope(), KeyScheme::Scope).unwrap_err();
    assert_eq!(
        err.healing(),
        Healing::Permanent {
            reason: PermanentReason::DatabaseMissing
        },
        "{err}"
    );
}

#[test]
fn a_role_that_does_not_exist_or_may_not_log_in_is_not_admitted() {
    let Some(pg) = server(Options::default()) else {
        return;
    };
    let as_role = |role: &str| pg.url().replace("postgres@/", &format!("{role}@/"));
    // Under trust authentication the server says the role does not exist.
    let err = refusal(&as_role("buzz_no_such_role"));
    assert_permanent(&err, PermanentReason::RoleNotAdmitted);
    // A role that exists and may not log in is refused with the same SQLSTATE (28000).
    admin(&pg)
        .batch_execute("CREATE ROLE buzz_locked NOLOGIN; CREATE ROLE buzz_allowed LOGIN SUPERUSER")
        .unwrap();
    open(&as_role("buzz_allowed")).expect("a role that exists and may log in is admitted");
    let err = refusal(&as_role("buzz_locked"));
    assert_permanent(&err, PermanentReason::RoleNotAdmitted);
}

#[test]
fn a_certificate_from_an_untrusted_ca_or_for_another_name_is_permanently_rejected() {
    let Some(pg) = server(Options {
        tcp: true,
        tls: true,
    }) else {
        return;
    };
    let files = pg.tls().unwrap();
    let verify_full = |roots: &Path| {
        pg.tcp_url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", roots.display()),
        )
        .unwrap()
    };
    open(&verify_full(&files.ca_cert)).expect("the fixture's own CA is trusted");
    // A CA that did not sign the server's certificate.
    let err = refusal(&verify_full(&files.other_ca_cert));
    assert_permanent(&err, PermanentReason::CertificateRejected);
    // The right CA, a host name the certificate does not name (reached at 127.0.0.1).
    let wrong_name = format!(
        "postgresql://postgres@db.example:{}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
        pg.port(),
        files.ca_cert.display()
    );
    let err = refusal(&wrong_name);
    assert_permanent(&err, PermanentReason::CertificateRejected);
}

#[test]
fn a_stopped_or_absent_server_is_transient() {
    let Some(mut pg) = server(Options {
        tcp: true,
        tls: false,
    }) else {
        return;
    };
    let tcp = pg.tcp_url("127.0.0.1", "connect_timeout=2").unwrap();
    let store = open(&pg.url()).expect("opens while the server runs");
    pg.stop().unwrap();
    // A store that was open: the connection is gone and a new one is refused.
    let thread = ScopeKey::thread("0b9f3a52-6c1e-4d2a-9f00-1234567890ab", "ab".repeat(32));
    let mut errors = Vec::new();
    for _ in 0..2 {
        errors.push(store.get(&thread).expect_err("no server to answer"));
    }
    for err in &errors {
        assert_transient(err);
    }
    // Opening while it is stopped: nothing listens on the port or the socket.
    for url in [&tcp, &pg.url()] {
        let err = refusal(url);
        assert!(
            matches!(err, StoreError::Postgres { op: "open", .. }),
            "{err:?}"
        );
        assert_transient(&err);
    }
    // It comes back; the same store answers again, which is what Transient promised.
    pg.restart().unwrap();
    let mut answer = store.get(&thread);
    if answer.is_err() {
        answer = store.get(&thread);
    }
    assert_eq!(answer.unwrap(), None);
}

/// Runs `f` on a thread of its own whose file-system user is `nobody` when this process runs as
/// root (root passes every permission check, so a test of one must drop that first). The
/// file-system user is per thread, and a change from root clears that thread's file-system
/// capabilities; the rest of the process is unaffected.
fn without_root_file_access<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: geteuid has no preconditions and cannot fail.
            if unsafe { libc::geteuid() } == 0 {
                const NOBODY: libc::uid_t = 65_534;
                // SAFETY: setfsuid changes only this thread's file-system credentials, and has no
                // memory-safety preconditions. It returns the previous fsuid, so success is
                // checked by calling it again (an invalid id leaves it unchanged).
                unsafe {
                    libc::setfsuid(NOBODY);
                    assert_eq!(libc::setfsuid(NOBODY), NOBODY as i32, "setfsuid");
                }
            }
            f()
        })
        .join()
        .expect("the thread without root file access")
    })
}

#[test]
fn an_sqlite_store_in_a_directory_it_may_not_write_is_permanently_refused() {
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    fs::create_dir(&locked).unwrap();
    // A database made while the directory was writable, its log files gone with a clean close.
    let existing = locked.join("existing.sqlite3");
    drop(SqliteStore::open(&existing, scope(), KeyScheme::Scope, 100).unwrap());
    for side in ["-wal", "-shm"] {
        assert!(!Path::new(&format!("{}{side}", existing.display())).exists());
    }
    fs::set_permissions(&existing, fs::Permissions::from_mode(0o666)).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let cases = [
        // The database file cannot be created in the directory (std says so: `Io`).
        locked.join("sessions.sqlite3"),
        // The state directory itself cannot be created (`Io`).
        locked.join("state").join("sessions.sqlite3"),
        // The file may be written, but its log cannot be created beside it (SQLite says so).
        existing,
    ];
    let errors = without_root_file_access(|| {
        cases.clone().map(|path| {
            SqliteStore::open(&path, scope(), KeyScheme::Scope, 100)
                .expect_err("a store where it may not write")
        })
    });
    // Writable for everyone now, so also for the user the control below runs as.
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o777)).unwrap();
    for (path, err) in cases.iter().zip(&errors) {
        assert!(
            matches!(err, StoreError::Io { .. } | StoreError::Sqlite { .. }),
            "{}: {err:?}",
            path.display()
        );
        assert_eq!(
            err.healing(),
            Healing::Permanent {
                reason: PermanentReason::FilePermissionDenied
            },
            "{}: {err}",
            path.display()
        );
    }
    assert!(
        matches!(errors[2], StoreError::Sqlite { .. }),
        "{:?}",
        errors[2]
    );
    // The same paths open, as the same user, once the directory is writable: the refusal was the
    // permission.
    without_root_file_access(|| {
        for path in &cases {
            SqliteStore::open(path, scope(), KeyScheme::Scope, 100)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    });
}
