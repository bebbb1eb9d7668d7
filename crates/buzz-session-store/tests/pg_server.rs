//! The PostgreSQL backend against private servers of its own (crate `pg-fixture`): TLS with
//! libpq's `sslmode` meanings, and bounded calls against a frozen server.
//!
//! These need the PostgreSQL server binaries (`scripts/pg start` installs them as root). Without
//! them they FAIL, unless `BUZZ_TEST_SKIP_POSTGRES=1` asks to skip them deliberately.

use std::time::Duration;

use buzz_session_store::{
    Expect, KeyScheme, PgOptions, PgStore, ReceiptStore, SessionRecord, StoreError, StoreScope,
    UnixMillis,
};
use pg_fixture::{Options, PgServer};

fn scope() -> StoreScope {
    StoreScope {
        relay: "wss://relay.example".into(),
        agent_pubkey: "ab".repeat(32),
    }
}

fn thread() -> buzz_session_store::ScopeKey {
    buzz_session_store::ScopeKey::thread("0b9f3a52-6c1e-4d2a-9f00-1234567890ab", "ab".repeat(32))
}

/// A server as `options` say, or `None` when skipping was asked for.
fn server(options: Options) -> Option<PgServer> {
    if std::env::var("BUZZ_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        eprintln!("skipped: BUZZ_TEST_SKIP_POSTGRES=1");
        return None;
    }
    Some(PgServer::start(options).unwrap_or_else(|e| panic!("{e}")))
}

fn tls_server() -> Option<PgServer> {
    server(Options {
        tcp: true,
        tls: true,
    })
}

fn open(url: &str) -> Result<PgStore, StoreError> {
    PgStore::open(url, scope(), KeyScheme::Scope, 100)
}

#[test]
fn verify_full_connects_to_a_server_whose_certificate_names_it() {
    let Some(pg) = tls_server() else { return };
    let ca = pg.tls().unwrap().ca_cert.display().to_string();
    let url = pg
        .tcp_url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        )
        .unwrap();
    let store = open(&url).unwrap();
    store
        .put(
            &thread(),
            &SessionRecord::new("s-1"),
            &Expect::Absent,
            UnixMillis(1),
        )
        .unwrap();
    assert_eq!(store.get(&thread()).unwrap().unwrap().session_id, "s-1");
    // The server saw an encrypted connection from the store.
    let mut admin =
        postgres::Client::connect(&pg.url(), postgres::NoTls).expect("admin over the socket");
    let encrypted: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE s.ssl AND a.application_name = 'buzz-acp session store'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(encrypted, 1);
}

#[test]
fn a_wrong_host_name_or_a_wrong_ca_is_refused_naming_the_certificate_problem() {
    let Some(pg) = tls_server() else { return };
    let files = pg.tls().unwrap();
    let ca = files.ca_cert.display().to_string();
    let other = files.other_ca_cert.display().to_string();
    // The certificate names localhost and 127.0.0.1, not this name (reached at 127.0.0.1).
    let wrong_name = format!(
        "postgresql://postgres@db.example:{}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}",
        pg.port()
    );
    let err = open(&wrong_name).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(
        text.contains("certificate") && text.contains("db.example"),
        "{text}"
    );
    // verify-ca checks the chain only: the same name is accepted.
    let chain_only = wrong_name.replace("verify-full", "verify-ca");
    open(&chain_only).unwrap();
    // A CA that did not sign the server's certificate.
    let wrong_ca = pg
        .tcp_url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={other}"),
        )
        .unwrap();
    let text = open(&wrong_ca).unwrap_err().to_string();
    assert!(
        text.contains("certificate") && text.contains("UnknownIssuer"),
        "{text}"
    );
    let text = open(&wrong_ca.replace("verify-full", "verify-ca"))
        .unwrap_err()
        .to_string();
    assert!(text.contains("UnknownIssuer"), "{text}");
}

#[test]
fn require_and_prefer_encrypt_without_verifying_as_libpq() {
    let Some(pg) = tls_server() else { return };
    // The fixture's certificate is not trusted by the system: require and prefer still connect.
    for params in ["sslmode=require", "sslmode=prefer", ""] {
        let url = pg.tcp_url("127.0.0.1", params).unwrap();
        open(&url).unwrap_or_else(|e| panic!("{params}: {e}"));
    }
    // require with sslrootcert checks the chain, as libpq does.
    let other = pg.tls().unwrap().other_ca_cert.display().to_string();
    let url = pg
        .tcp_url("localhost", &format!("sslmode=require&sslrootcert={other}"))
        .unwrap();
    assert!(
        open(&url)
            .unwrap_err()
            .to_string()
            .contains("UnknownIssuer")
    );
}

#[test]
fn prefer_falls_back_to_plaintext_and_unix_sockets_never_use_tls() {
    let Some(pg) = server(Options {
        tcp: true,
        tls: false,
    }) else {
        return;
    };
    // No TLS on the server: the default (prefer) connects in plaintext; require is refused.
    open(&pg.tcp_url("127.0.0.1", "").unwrap()).unwrap();
    let err = open(&pg.tcp_url("127.0.0.1", "sslmode=require").unwrap()).unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    // Over the unix socket sslmode is ignored, as libpq ignores it.
    open(&format!("{}&sslmode=verify-full", pg.url())).unwrap();
}

#[test]
fn a_call_against_a_frozen_server_returns_within_its_deadline_and_the_store_recovers() {
    let Some(pg) = server(Options::default()) else {
        return;
    };
    let options = PgOptions {
        call_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    let store = PgStore::open_with(&pg.url(), scope(), KeyScheme::Scope, 100, options).unwrap();
    store
        .put(
            &thread(),
            &SessionRecord::new("s-1"),
            &Expect::Absent,
            UnixMillis(1),
        )
        .unwrap();
    pg.freeze().unwrap();
    // Neither answers: each returns an error instead of waiting for the server.
    let err = store.get(&thread()).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    let err = store
        .put(
            &thread(),
            &SessionRecord::new("s-2"),
            &Expect::NotWrittenSince(UnixMillis(2)),
            UnixMillis(2),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    pg.thaw().unwrap();
    // The next call connects afresh and succeeds.
    let mut answer = store.get(&thread());
    for _ in 0..3 {
        if answer.is_ok() {
            break;
        }
        answer = store.get(&thread());
    }
    let session = answer.unwrap().unwrap().session_id;
    assert!(session == "s-1" || session == "s-2", "{session}");
}

#[test]
fn a_restarted_server_is_reconnected_to() {
    let Some(mut pg) = server(Options::default()) else {
        return;
    };
    let store = open(&pg.url()).unwrap();
    store
        .put(
            &thread(),
            &SessionRecord::new("s-1"),
            &Expect::Absent,
            UnixMillis(1),
        )
        .unwrap();
    pg.restart().unwrap();
    let mut answer = store.get(&thread());
    if answer.is_err() {
        answer = store.get(&thread());
    }
    assert_eq!(answer.unwrap().unwrap().session_id, "s-1");
}
