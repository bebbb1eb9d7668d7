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
    Backend, CommitOutcome, Healing, KeyScheme, PgStore, ReceiptStore, StoreError, UnixMillis,
};
use contract::{Medium, commit, put_new, scope, thread};

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
    assert_eq!(err.healing(), Healing::Transient, "{err}");
}

#[test]
fn unusable_urls_are_refused_and_passwords_never_show() {
    for url in [
        "postgres://buzz:hunter2@db.internal/receipts?sslmode=allow",
        "postgres://buzz:hunter2@db.internal/receipts?sslcert=/c.pem",
        "postgres://buzz:hunter2@db/x?port=notaport",
    ] {
        let err = PgStore::open(url, scope(), KeyScheme::Scope, 10).unwrap_err();
        assert!(matches!(err, StoreError::Config { .. }), "{err:?}");
        assert!(!format!("{err} {err:?}").contains("hunter2"));
    }
}

#[test]
fn a_dropped_connection_is_reported_then_reopened() {
    let Some(m) = medium() else { return };
    // A name of its own, so only this store's connection is ended (tests run in parallel).
    let name = format!("buzz-drop-test-{}", std::process::id());
    let url = format!("{}&application_name={name}", pg_url(&m));
    let store = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap();
    put_new(&store, &thread(1), "s-1", 1);
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
            .commit_turn(&thread(1), &commit("s-1", &["e"], 1), UnixMillis(2))
            .unwrap(),
        CommitOutcome::Written
    );
}

/// The schema and the writes of the harness that predates schema revision 1, as it ran them.
const OLD_SCHEMA: &str = r#"
CREATE TABLE buzz_receipt_schema (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton), version BIGINT NOT NULL);
INSERT INTO buzz_receipt_schema (version) VALUES (1);
CREATE TABLE buzz_receipt_scopes (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, relay TEXT NOT NULL,
    agent_pubkey TEXT NOT NULL, receipts BIGINT NOT NULL DEFAULT 0, UNIQUE (relay, agent_pubkey));
CREATE TABLE buzz_receipts (
    scope_id BIGINT NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key TEXT COLLATE "C" NOT NULL, session_id TEXT NOT NULL, model TEXT,
    permission_mode TEXT, requested_model TEXT, requested_permission_mode TEXT,
    standing_context_sent BOOLEAN NOT NULL DEFAULT FALSE, delivered_event_ids TEXT,
    last_used_ms BIGINT NOT NULL, PRIMARY KEY (scope_id, scope_key));
CREATE INDEX buzz_receipts_lru ON buzz_receipts (scope_id, last_used_ms, scope_key);
"#;

const OLD_UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode,
         standing_context_sent, delivered_event_ids, last_used_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms";

const OLD_SELECT: &str = "SELECT scope_key, session_id, model, permission_mode, requested_model,
         requested_permission_mode, standing_context_sent, delivered_event_ids, last_used_ms
     FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2";

fn old_put(old: &mut postgres::Client, scope_id: i64, session: &str, used: i64) {
    old.execute(
        OLD_UPSERT,
        &[
            &scope_id,
            &thread(1).to_storage_key(),
            &session,
            &Some("opus"),
            &None::<String>,
            &Some("opus"),
            &Some("plan"),
            &false,
            &None::<String>,
            &used,
        ],
    )
    .unwrap();
}

#[test]
fn a_revision_0_database_is_migrated_and_the_old_harness_keeps_working_beside_it() {
    let Some(m) = medium() else { return };
    let url = pg_url(&m);
    let mut old = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    old.batch_execute(OLD_SCHEMA).unwrap();
    let scope_id: i64 = old
        .query_one(
            "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey, receipts) VALUES ($1, $2, 1)
             RETURNING id",
            &[&scope().relay, &scope().agent_pubkey],
        )
        .unwrap()
        .get(0);
    old_put(&mut old, scope_id, "s-1", 1);
    // Prepared before the upgrade, as a running old harness holds its statements.
    let old_select = old.prepare(OLD_SELECT).unwrap();

    let reader = PgStore::open_read_only(&url, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 0);
    assert_eq!(reader.get(&thread(1)).unwrap().unwrap().session_id, "s-1");
    assert_eq!(reader.watermark().unwrap(), None);
    drop(reader);

    let new = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap();
    assert_eq!(new.revision(), 3, "revisions 1, 2 and 3");
    assert_eq!(recorded_revision(&mut old), 3);
    assert_eq!(new.watermark().unwrap(), None);
    let version: i64 = old
        .query_one("SELECT version FROM buzz_receipt_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, 1, "the old harness still accepts the database");
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().turns, None);
    new.commit_turn(&thread(1), &commit("s-1", &["e1"], 3), UnixMillis(2))
        .unwrap();
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().turns, Some(3));

    // The old harness replaces the session with its own write path.
    old_put(&mut old, scope_id, "s-2", 3);
    let row = old
        .query_one(&old_select, &[&scope_id, &thread(1).to_storage_key()])
        .unwrap();
    assert_eq!(row.get::<_, String>(1), "s-2", "its reads still work");
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!(read.session_id, "s-2");
    assert_eq!(
        read.turns, None,
        "no stale count attached to the new session"
    );
    assert_eq!(
        new.commit_turn(&thread(1), &commit("s-2", &["y"], 1), UnixMillis(5))
            .unwrap(),
        CommitOutcome::Written
    );
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().turns, Some(1));
}

/// What the revision-1 harness added to [`OLD_SCHEMA`] when it migrated a database.
const REVISION_1_ADDITIONS: &str = r#"
ALTER TABLE buzz_receipt_schema ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE buzz_receipts ADD COLUMN ext TEXT;
CREATE TABLE buzz_receipt_forgets (
    scope_id BIGINT NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key TEXT COLLATE "C" NOT NULL, forgotten_ms BIGINT NOT NULL,
    PRIMARY KEY (scope_id, scope_key));
UPDATE buzz_receipt_schema SET revision = 1;
"#;

/// The revision-1 harness's upsert of a receipt (every column it knows, `ext` included).
const REVISION_1_UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id,
         model, permission_mode, requested_model, requested_permission_mode,
         standing_context_sent, delivered_event_ids, last_used_ms, ext)
     VALUES ($1, $2, $3, NULL, NULL, NULL, NULL, FALSE, NULL, $4, $5)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms, ext = excluded.ext";

/// The revision-1 harness's statements that touch the scope row: registering it at open, and
/// locking and setting its receipt count around every insert and delete.
const REVISION_1_REGISTER: &str = "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey)
     VALUES ($1, $2) ON CONFLICT (relay, agent_pubkey) DO NOTHING";
const REVISION_1_SCOPE_ID: &str =
    "SELECT id FROM buzz_receipt_scopes WHERE relay = $1 AND agent_pubkey = $2";
const REVISION_1_LOCK_COUNT: &str =
    "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1 FOR UPDATE";
const REVISION_1_SET_COUNT: &str = "UPDATE buzz_receipt_scopes SET receipts = $2 WHERE id = $1";

/// A revision-1 harness's connection, with its statements prepared (as a running one holds them).
struct Revision1 {
    client: postgres::Client,
    register: postgres::Statement,
    scope_id: postgres::Statement,
    lock_count: postgres::Statement,
    set_count: postgres::Statement,
    upsert: postgres::Statement,
}

impl Revision1 {
    fn connect(url: &str) -> Self {
        let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
        let register = client.prepare(REVISION_1_REGISTER).unwrap();
        let scope_id = client.prepare(REVISION_1_SCOPE_ID).unwrap();
        let lock_count = client.prepare(REVISION_1_LOCK_COUNT).unwrap();
        let set_count = client.prepare(REVISION_1_SET_COUNT).unwrap();
        let upsert = client.prepare(REVISION_1_UPSERT).unwrap();
        Self {
            client,
            register,
            scope_id,
            lock_count,
            set_count,
            upsert,
        }
    }

    fn register(&mut self) -> i64 {
        let (relay, agent) = (scope().relay, scope().agent_pubkey);
        self.client
            .execute(&self.register, &[&relay, &agent])
            .unwrap();
        self.client
            .query_one(&self.scope_id, &[&relay, &agent])
            .unwrap()
            .get(0)
    }

    /// A put of a new or replaced receipt as that harness ran it: counter locked first.
    fn put(&mut self, scope_id: i64, session: &str, used: i64, new_key: bool) {
        let ext = format!(r#"{{"sessionId":"{session}","turns":7}}"#);
        let mut tx = self.client.transaction().unwrap();
        let count: i64 = tx.query_one(&self.lock_count, &[&scope_id]).unwrap().get(0);
        tx.execute(
            &self.upsert,
            &[
                &scope_id,
                &thread(1).to_storage_key(),
                &session,
                &used,
                &ext,
            ],
        )
        .unwrap();
        if new_key {
            tx.execute(&self.set_count, &[&scope_id, &(count + 1)])
                .unwrap();
        }
        tx.commit().unwrap();
    }
}

fn recorded_revision(client: &mut postgres::Client) -> i64 {
    client
        .query_one("SELECT revision FROM buzz_receipt_schema", &[])
        .unwrap()
        .get(0)
}

#[test]
fn a_revision_1_database_is_migrated_forward_and_the_revision_1_harness_keeps_working_beside_it() {
    let Some(m) = medium() else { return };
    let url = pg_url(&m);
    {
        let mut setup = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        setup.batch_execute(OLD_SCHEMA).unwrap();
        setup.batch_execute(REVISION_1_ADDITIONS).unwrap();
    }
    let mut old = Revision1::connect(&url);
    let scope_id = old.register();
    old.put(scope_id, "s-1", 1, true);

    // A reader before the upgrade reads the receipt, and no watermark (there is no column yet).
    let reader = PgStore::open_read_only(&url, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 1);
    assert_eq!(reader.get(&thread(1)).unwrap().unwrap().turns, Some(7));
    assert_eq!(reader.watermark().unwrap(), None);
    assert_eq!(reader.advance_watermark(5).unwrap(), None);
    drop(reader);
    assert_eq!(
        recorded_revision(&mut old.client),
        1,
        "a read-only open migrates nothing"
    );

    let new = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap();
    assert_eq!(new.revision(), 3);
    assert_eq!(recorded_revision(&mut old.client), 3);
    let read = new.get(&thread(1)).unwrap().unwrap();
    assert_eq!((read.session_id.as_str(), read.turns), ("s-1", Some(7)));
    assert_eq!(new.len().unwrap(), 1);
    assert_eq!(new.watermark().unwrap(), None);
    assert_eq!(new.advance_watermark(100).unwrap(), Some(100));

    // The revision-1 harness, beside it, with the statements it prepared before the migration:
    // it starts again (registers its scope) and writes receipts; none of its statements names
    // the watermark, so they leave it as it is.
    assert_eq!(old.register(), scope_id);
    old.put(scope_id, "s-2", 3, false);
    assert_eq!(new.get(&thread(1)).unwrap().unwrap().session_id, "s-2");
    assert_eq!(new.watermark().unwrap(), Some(100));
    assert_eq!(new.len().unwrap(), 1);
    let reader = PgStore::open_read_only(&url, scope(), KeyScheme::Scope).unwrap();
    assert_eq!(reader.revision(), 3);
    assert_eq!(reader.watermark().unwrap(), Some(100));
    drop(reader);
    // Opening a migrated database again migrates nothing.
    drop(new);
    let again = PgStore::open(&url, scope(), KeyScheme::Scope, 10).unwrap();
    assert_eq!(again.revision(), 3);
    assert_eq!(again.watermark().unwrap(), Some(100));
}

/// A store of the contract's scope on `m`, whose writes carry `fence`.
fn fenced_store(m: &Medium, fence: &buzz_session_store::Fence) -> PgStore {
    PgStore::open_with(
        &pg_url(m),
        scope(),
        KeyScheme::Scope,
        10,
        buzz_session_store::PgOptions {
            fence: Some(fence.clone()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn fenced(result: Result<buzz_session_store::PutOutcome, StoreError>) -> String {
    match result {
        Err(err @ StoreError::Fenced { .. }) => {
            assert_eq!(
                err.healing(),
                Healing::Permanent {
                    reason: buzz_session_store::PermanentReason::NotLeaseHolder
                }
            );
            err.to_string()
        }
        other => panic!("expected a fenced write, got {other:?}"),
    }
}

#[test]
fn one_holder_at_a_time_and_a_token_taken_over_writes_nothing() {
    use buzz_session_store::{Expect, Fence, LeaseAnswer};
    let Some(m) = medium() else { return };
    let lifetime = std::time::Duration::from_secs(60);
    let (fence_a, fence_b) = (Fence::new(), Fence::new());
    let a = fenced_store(&m, &fence_a);
    let b = fenced_store(&m, &fence_b);
    let key = thread(1);
    let now = UnixMillis(1_000);

    // Nobody holds the lease yet: a fenced store writes nothing.
    assert!(
        fenced(a.put(&key, &contract::record("s-a"), &Expect::Absent, now))
            .contains("holds no lease")
    );

    assert_eq!(
        a.acquire_lease("host-a", lifetime).unwrap(),
        LeaseAnswer::Held { token: 1 }
    );
    fence_a.hold(1);
    assert_eq!(
        b.acquire_lease("host-b", lifetime).unwrap(),
        LeaseAnswer::HeldBy {
            holder: "host-a".into(),
            token: 1
        }
    );
    put_new(&a, &key, "s-a", 1_000);
    fence_b.hold(1); // B pretends to hold A's token: the holder's name is not what counts.
    assert_eq!(
        a.renew_lease("host-a", 1, lifetime).unwrap(),
        LeaseAnswer::Held { token: 1 }
    );

    // A stops cleanly; B is granted the next token at once, and A's token writes nothing.
    assert!(a.release_lease("host-a", 1).unwrap());
    assert_eq!(
        b.acquire_lease("host-b", lifetime).unwrap(),
        LeaseAnswer::Held { token: 2 }
    );
    fence_b.hold(2);
    let refused = fenced(a.put(
        &key,
        &contract::record("s-late"),
        &Expect::Session("s-a".into()),
        UnixMillis(2_000),
    ));
    assert!(refused.contains("host-b with token 2"), "{refused}");
    assert!(matches!(
        a.advance_watermark(500),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        a.renew_lease("host-a", 1, lifetime).unwrap(),
        LeaseAnswer::HeldBy {
            holder: "host-b".into(),
            token: 2
        }
    );
    assert!(!a.release_lease("host-a", 1).unwrap(), "not A's to release");
    assert_eq!(
        b.get(&key).unwrap().unwrap().session_id,
        "s-a",
        "A's late write did not land"
    );
    assert_eq!(b.advance_watermark(700).unwrap(), Some(700));
    assert_eq!(a.watermark().unwrap(), Some(700), "reads are not fenced");
}

#[test]
fn an_expired_lease_writes_nothing_until_renewed_and_goes_to_whoever_asks_first() {
    use buzz_session_store::{Fence, LeaseAnswer};
    let Some(m) = medium() else { return };
    let (fence_a, fence_b) = (Fence::new(), Fence::new());
    let a = fenced_store(&m, &fence_a);
    let b = fenced_store(&m, &fence_b);

    // A lifetime of zero has expired by the next statement, by the database's clock.
    assert_eq!(
        a.acquire_lease("host-a", std::time::Duration::ZERO)
            .unwrap(),
        LeaseAnswer::Held { token: 1 }
    );
    fence_a.hold(1);
    assert!(
        fenced(
            a.advance_watermark(100)
                .map(|_| buzz_session_store::PutOutcome::Written {
                    created: false,
                    evicted: 0
                })
        )
        .contains("expired")
    );
    // Nobody took it meanwhile: A's renewal keeps its token and its writes count again.
    let minute = std::time::Duration::from_secs(60);
    assert_eq!(
        a.renew_lease("host-a", 1, minute).unwrap(),
        LeaseAnswer::Held { token: 1 }
    );
    assert_eq!(a.advance_watermark(100).unwrap(), Some(100));

    assert_eq!(
        a.renew_lease("host-a", 1, std::time::Duration::ZERO)
            .unwrap(),
        LeaseAnswer::Held { token: 1 }
    );
    assert_eq!(
        b.acquire_lease("host-b", minute).unwrap(),
        LeaseAnswer::Held { token: 2 }
    );
    assert_eq!(
        a.renew_lease("host-a", 1, minute).unwrap(),
        LeaseAnswer::HeldBy {
            holder: "host-b".into(),
            token: 2
        }
    );
    // A asking again (a standby once more) is refused while B's lease lives.
    assert_eq!(
        a.acquire_lease("host-a", minute).unwrap(),
        LeaseAnswer::HeldBy {
            holder: "host-b".into(),
            token: 2
        }
    );
}
