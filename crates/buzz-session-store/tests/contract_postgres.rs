//! The receipt-store contract against a real PostgreSQL server, plus what only a networked store
//! can get wrong: a server that is not there, a URL asking for TLS, a connection dropped under it.
//!
//! The server comes from `BUZZ_TEST_POSTGRES_URL` (`scripts/test` starts one with `scripts/pg`).
//! Without it these tests FAIL, so CI can never pass them silently; set
//! `BUZZ_TEST_SKIP_POSTGRES=1` to skip them deliberately on a machine without PostgreSQL. Each
//! test works in a schema of its own, dropped afterwards.

mod contract;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use buzz_session_store::{
    Backend, CommitOutcome, KeyScheme, PgStore, ReceiptStore, StoreError, UnixMillis,
};
use contract::{Medium, ids, record, scope, thread, window};

const URL_VAR: &str = "BUZZ_TEST_POSTGRES_URL";
const SKIP_VAR: &str = "BUZZ_TEST_SKIP_POSTGRES";

/// The server's URL, or `None` when skipping was asked for explicitly.
fn server_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") => {
            eprintln!("skipped: {SKIP_VAR}=1");
            None
        }
        _ => panic!(
            "{URL_VAR} is not set: start a server with `scripts/pg start` (or run through \
             `scripts/pg run cargo test …`), or set {SKIP_VAR}=1 to skip the PostgreSQL contract"
        ),
    }
}

/// `url` with its `search_path` set to `schema`.
fn with_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

fn medium() -> Option<Medium> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let url = server_url()?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!(
        "contract_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let mut admin = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to {URL_VAR}: {e}"));
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let backend = Backend::Postgres {
        url: with_schema(&url, &schema),
    };
    Some(Medium {
        backend,
        state_dir: tempfile::tempdir().unwrap(),
        cleanup: Some(Box::new(move || {
            let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
        })),
    })
}

contract_tests!(medium);

fn pg_url(m: &Medium) -> String {
    match &m.backend {
        Backend::Postgres { url } => url.clone(),
        Backend::Sqlite { .. } => unreachable!(),
    }
}

#[test]
fn a_server_that_is_not_there_is_a_clear_error_not_a_hang() {
    if server_url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgresql://postgres@/postgres?host={}&connect_timeout=2",
        dir.path().display()
    );
    let err = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap_err();
    assert!(
        matches!(err, StoreError::Postgres { op: "open", .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[test]
fn a_url_that_requires_tls_is_refused_and_passwords_never_show() {
    let err = PgStore::open(
        "postgres://buzz:hunter2@db.internal/receipts?sslmode=require",
        scope(),
        KeyScheme::Scope,
        10,
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Config { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("hunter2"));
    let err = PgStore::open(
        "postgres://db/x?port=notaport",
        scope(),
        KeyScheme::Scope,
        10,
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Config { .. }), "{err:?}");
}

#[test]
fn a_dropped_connection_is_reported_then_reopened() {
    let Some(m) = medium() else { return };
    // A name of its own, so only this store's connection is ended (tests run in parallel).
    let name = format!("buzz-drop-test-{}", std::process::id());
    let url = format!("{}&application_name={name}", pg_url(&m));
    let store = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap();
    store
        .put(&thread(1), &record("s-1"), UnixMillis(1))
        .unwrap();
    // The server ends every other connection to this database (as a restart or failover would).
    let mut admin = postgres::Client::connect(&server_url().unwrap(), postgres::NoTls).unwrap();
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .unwrap();
    assert!(!ended.is_empty());
    // The first call may see the dead connection (an error, never a false success); a later one
    // reconnects and finds the receipt.
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(store.get(&thread(1)));
    }
    let last = answers.pop().unwrap();
    assert_eq!(last.unwrap().unwrap().session_id, "s-1");
    for answer in answers {
        match answer {
            Ok(found) => assert_eq!(found.unwrap().session_id, "s-1"),
            Err(e) => assert!(matches!(e, StoreError::Postgres { .. }), "{e:?}"),
        }
    }
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
}
