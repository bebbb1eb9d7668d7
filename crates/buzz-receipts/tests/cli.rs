//! `buzz-receipts` run as an operator runs it, against SQLite (a temporary state directory) and
//! PostgreSQL (a private server from `pg-fixture`).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use buzz_session_store::{
    Backend, Expect, KeyScheme, OpenMode, ReceiptStore, ScopeKey, SessionRecord, StoreScope,
    UnixMillis, open_backend,
};

const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
const OTHER: &str = "11111111-2222-4333-8444-555555555555";
const RELAY: &str = "wss://relay.example";

fn agent() -> String {
    "ab".repeat(32)
}

fn thread(n: u8) -> ScopeKey {
    ScopeKey::thread(CHANNEL, format!("{n:064x}"))
}

/// A store location for the command: a state directory, or a URL.
enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Place {
    fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(dir) => Backend::from_url(None, dir.path()).unwrap(),
            Self::Postgres(url) => Backend::Postgres { url: url.clone() },
        }
    }

    fn store(&self, relay: &str) -> Box<dyn ReceiptStore> {
        let scope = StoreScope {
            relay: relay.into(),
            agent_pubkey: agent(),
        };
        match self.backend() {
            Backend::Sqlite { path } => Box::new(
                buzz_session_store::SqliteStore::open(&path, scope, KeyScheme::Scope, 100).unwrap(),
            ),
            backend => {
                open_backend(&backend, scope, KeyScheme::Scope, 100, OpenMode::ReadWrite).unwrap()
            }
        }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_buzz-receipts"));
        command
            .env_remove("BUZZ_ACP_SESSION_STORE_URL")
            .env_remove("BUZZ_ACP_AGENT_PUBKEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match self {
            Self::Sqlite(dir) => command.arg("--state-dir").arg(dir.path()),
            Self::Postgres(url) => command
                .arg("--state-dir")
                .arg("/nonexistent")
                .arg("--session-store-url")
                .arg(url),
        };
        let mut child = command.args(args).spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn failure(output: Output) -> String {
    assert!(!output.status.success());
    let text = String::from_utf8(output.stderr).unwrap();
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    text
}

/// Seeds: thread 1 used at t=1 (old), thread 2 now, a conversation of another channel, and a
/// receipt of another relay.
fn seed(place: &Place) {
    let now = UnixMillis::now();
    let store = place.store(RELAY);
    let mut rich = SessionRecord::new("s-old");
    rich.model = Some("opus".into());
    rich.turns = Some(4);
    store
        .put(&thread(1), &rich, &Expect::Absent, UnixMillis(1))
        .unwrap();
    store
        .put(
            &thread(2),
            &SessionRecord::new("s-new"),
            &Expect::Absent,
            now,
        )
        .unwrap();
    store
        .put(
            &ScopeKey::conversation(OTHER),
            &SessionRecord::new("s-other"),
            &Expect::Absent,
            now,
        )
        .unwrap();
    place
        .store("wss://second.example")
        .put(
            &thread(1),
            &SessionRecord::new("s-second"),
            &Expect::Absent,
            now,
        )
        .unwrap();
}

fn scenario(place: &Place) {
    seed(place);
    let scoped = ["--relay", RELAY, "--agent-pubkey", &agent()].map(str::to_owned);
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        v.extend(scoped.iter().cloned());
        v
    };
    let run =
        |args: Vec<String>| place.run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);

    // Every store scope without --relay/--agent-pubkey.
    let all = ok(place.run(&["list", "--json"], None));
    assert_eq!(all.lines().count(), 4, "{all}");
    assert!(all.contains("s-second"));
    let listed = ok(run(with(&["list", "--json", "--channel", CHANNEL])));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    let old = ok(run(with(&["list", "--json", "--older-than", "1d"])));
    assert_eq!(old.lines().count(), 1, "{old}");
    let line: serde_json::Value = serde_json::from_str(old.lines().next().unwrap()).unwrap();
    assert_eq!(line["record"]["sessionId"], "s-old");
    assert_eq!(line["record"]["turns"], 4);
    let table = ok(run(with(&["list"])));
    assert!(table.contains("s-old") && table.contains("opus"), "{table}");

    let shown = ok(run(with(&[
        "show",
        &thread(1).to_storage_key().to_uppercase(),
    ])));
    assert!(shown.contains("\"sessionId\": \"s-old\""), "{shown}");
    let err = failure(run(with(&["show", "general"])));
    assert!(err.contains("not a scope"), "{err}");

    // Export, then forget with a dry run first.
    let exported = ok(run(with(&["export"])));
    assert_eq!(exported.lines().count(), 3);
    let dry = ok(run(with(&["forget", "--older-than", "1d", "--dry-run"])));
    assert!(
        dry.contains("would forget") && dry.contains("s-old"),
        "{dry}"
    );
    assert_eq!(
        ok(run(with(&["list", "--json"]))).lines().count(),
        3,
        "a dry run changes nothing"
    );
    let forgot = ok(run(with(&["forget", "--older-than", "1d"])));
    assert!(forgot.contains("forgot 1 receipt"), "{forgot}");
    let forgot = ok(run(with(&["forget", "--channel", OTHER])));
    assert!(forgot.contains("forgot 1 receipt"), "{forgot}");
    let left = ok(run(with(&["list", "--json"])));
    assert_eq!(left.lines().count(), 1, "{left}");
    assert!(left.contains("s-new"));
    // A write the harness decided before the forget stays refused.
    let store = place.store(RELAY);
    let refused = store
        .put(
            &thread(1),
            &SessionRecord::new("queued"),
            &Expect::Absent,
            UnixMillis(2),
        )
        .unwrap();
    assert!(
        matches!(refused, buzz_session_store::PutOutcome::Forgotten { .. }),
        "{refused:?}"
    );
    let forgot = ok(run(with(&["forget", &thread(2).to_storage_key()])));
    assert!(forgot.contains("s-new"), "{forgot}");

    // Import brings the exported receipts back into keys that have none... except those forgotten
    // after the receipt was last used.
    let imported = ok(place.run(
        &with(&["import"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        Some(&exported),
    ));
    assert!(imported.contains("imported 0"), "{imported}");
    let err = failure(place.run(&["import"], Some("{\"relay\": 1}\n")));
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn list_show_forget_export_import_on_sqlite() {
    let place = Place::Sqlite(tempfile::tempdir().unwrap());
    scenario(&place);
}

#[test]
fn read_only_commands_create_nothing_and_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let place = Place::Sqlite(dir);
    let err = failure(place.run(&["list"], None));
    assert!(err.contains("no receipt store"), "{err}");
    let Place::Sqlite(dir) = &place else {
        unreachable!()
    };
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let mut command = Command::new(env!("CARGO_BIN_EXE_buzz-receipts"));
    let output = command
        .args([
            "--state-dir",
            "/tmp",
            "--session-store-url",
            "mysql://db/x",
            "list",
        ])
        .output()
        .unwrap();
    let err = failure(output);
    assert!(err.contains("unsupported session store URL"), "{err}");
}

#[test]
fn moving_receipts_from_sqlite_to_postgres_and_back() {
    if std::env::var("BUZZ_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        return;
    }
    let server = pg_fixture::PgServer::start(pg_fixture::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let pg = Place::Postgres(server.url());
    scenario(&pg);
    // SQLite → PostgreSQL: everything the SQLite store holds arrives with its time.
    let sqlite = Place::Sqlite(tempfile::tempdir().unwrap());
    seed(&sqlite);
    let exported = ok(sqlite.run(&["export"], None));
    let fresh = pg_fixture::PgServer::start(pg_fixture::Options::default()).unwrap();
    let target = Place::Postgres(fresh.url());
    let imported = ok(target.run(&["import"], Some(&exported)));
    assert!(
        imported.contains("imported 3") && imported.contains("imported 1"),
        "{imported}"
    );
    assert_eq!(ok(target.run(&["export"], None)), exported);
}

/// 2024-03-01T12:00:00Z.
const MARCH: u64 = 1_709_294_400;

fn now_secs() -> u64 {
    UnixMillis::now().0 / 1000
}

fn watermark_of(place: &Place, relay: &str) -> Option<u64> {
    place.store(relay).watermark().unwrap()
}

fn watermark_scenario(place: &Place) {
    seed(place);
    let scoped = ["--relay", RELAY, "--agent-pubkey", &agent()].map(str::to_owned);
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(scoped.iter().map(String::as_str));
        place.run(&args, None)
    };

    // show: every store scope without --relay/--agent-pubkey, none recorded yet.
    let shown = ok(place.run(&["watermark", "show"], None));
    assert_eq!(shown.lines().count(), 2, "{shown}");
    assert!(
        shown.lines().all(|l| l.ends_with("no watermark recorded")),
        "{shown}"
    );

    // set: RFC 3339 with any offset, shown in UTC with its unix seconds.
    let set = ok(run(&["watermark", "set", "2024-03-01T13:00:00+01:00"]));
    assert!(
        set.contains("set to 2024-03-01T12:00:00Z (unix 1709294400) (was none)"),
        "{set}"
    );
    assert_eq!(watermark_of(place, RELAY), Some(MARCH));
    assert_eq!(
        watermark_of(place, "wss://second.example"),
        None,
        "only the named store scope"
    );
    let shown = ok(run(&["watermark", "show"]));
    assert_eq!(
        shown.trim_end(),
        format!(
            "{RELAY} {}…: watermark 2024-03-01T12:00:00Z (unix {MARCH})",
            &agent()[..8]
        )
    );
    let json: serde_json::Value =
        serde_json::from_str(ok(run(&["watermark", "show", "--json"])).trim()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "relay": RELAY,
            "agentPubkey": agent(),
            "watermark": "2024-03-01T12:00:00Z",
            "unixSeconds": MARCH,
        })
    );

    // Unix seconds, and back in time: the operator's set is not forward-only.
    let set = ok(run(&["watermark", "set", "1700000000"]));
    assert!(set.contains("(was 2024-03-01T12:00:00Z"), "{set}");
    assert_eq!(watermark_of(place, RELAY), Some(1_700_000_000));

    // A duration: that long ago.
    let before = now_secs();
    ok(run(&["watermark", "set", "2h"]));
    let after = now_secs();
    let stored = watermark_of(place, RELAY).unwrap();
    assert!(
        (before - 7200..=after - 7200).contains(&stored),
        "{stored} not 2h before {before}..{after}"
    );

    // Times that cannot be a watermark: one line each, nothing written.
    for (time, says) in [
        ("yesterday", "not a time"),
        ("2024-03-01T12:00:00", "offset"),
        ("2024-02-30T12:00:00Z", "not a time"),
        ("1969-12-31T23:59:59Z", "before 1970"),
        ("2999-01-01T00:00:00Z", "in the future"),
        (&(now_secs() + 3600).to_string(), "in the future"),
        ("99999999999999999999", "unix seconds"),
    ] {
        let err = failure(run(&["watermark", "set", time]));
        assert!(err.contains(says), "{time}: {err}");
    }
    assert_eq!(watermark_of(place, RELAY), Some(stored));

    // clear.
    let cleared = ok(run(&["watermark", "clear"]));
    assert!(cleared.contains("watermark cleared (was "), "{cleared}");
    assert_eq!(watermark_of(place, RELAY), None);
    let shown = ok(run(&["watermark", "show", "--json"]));
    let json: serde_json::Value = serde_json::from_str(shown.trim()).unwrap();
    assert_eq!(json["watermark"], serde_json::Value::Null);
    assert_eq!(json["unixSeconds"], serde_json::Value::Null);

    // Without --relay/--agent-pubkey, set and clear apply to every store scope.
    let set = ok(place.run(&["watermark", "set", &MARCH.to_string()], None));
    assert_eq!(set.lines().count(), 2, "{set}");
    assert_eq!(watermark_of(place, RELAY), Some(MARCH));
    assert_eq!(watermark_of(place, "wss://second.example"), Some(MARCH));
    ok(place.run(&["watermark", "clear"], None));
    assert_eq!(watermark_of(place, "wss://second.example"), None);

    // The harness's advance from here on is forward-only, whatever the operator set.
    ok(run(&["watermark", "set", &MARCH.to_string()]));
    assert_eq!(
        place.store(RELAY).advance_watermark(MARCH - 1).unwrap(),
        Some(MARCH)
    );
}

#[test]
fn watermark_show_set_clear_on_sqlite() {
    let place = Place::Sqlite(tempfile::tempdir().unwrap());
    // Before any store exists: one line, nothing created.
    for args in [
        &["watermark", "show"][..],
        &["watermark", "set", "2h"],
        &["watermark", "clear"],
    ] {
        let err = failure(place.run(args, None));
        assert!(err.contains("no receipt store"), "{args:?}: {err}");
    }
    let Place::Sqlite(dir) = &place else {
        unreachable!()
    };
    let err = failure(place.run(&["watermark", "set", "tomorrow"], None));
    assert!(err.contains("not a time"), "the TIME first: {err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    watermark_scenario(&place);
}

#[test]
fn watermark_show_set_clear_on_postgres() {
    if std::env::var("BUZZ_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        return;
    }
    let server = pg_fixture::PgServer::start(pg_fixture::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let place = Place::Postgres(server.url());
    let err = failure(place.run(&["watermark", "show"], None));
    assert!(err.contains("no receipt store"), "{err}");
    watermark_scenario(&place);
}

/// `forget` with a scope it cannot parse says so in one line and forgets nothing: not the channel
/// the text starts with, not anything else.
#[test]
fn forget_of_an_unparsable_scope_is_one_line_and_forgets_nothing() {
    let place = Place::Sqlite(tempfile::tempdir().unwrap());
    seed(&place);
    let before = ok(place.run(&["export"], None));
    for scope in [
        "general",
        &format!("{CHANNEL}/not-a-root"),
        &format!("{CHANNEL}/{}", "0".repeat(63)),
        "",
    ] {
        let err = failure(place.run(&["forget", scope], None));
        assert!(err.contains("not a scope"), "{scope:?}: {err}");
    }
    assert_eq!(
        ok(place.run(&["export"], None)),
        before,
        "nothing forgotten"
    );
}

/// Against PostgreSQL every error is one line and creates nothing: an unparsable URL (without
/// its password), a server that cannot be reached, a database that holds no receipt store (for
/// every read-only command, which leaves it without one), and an unparsable scope.
#[test]
fn postgres_errors_are_one_line_and_create_nothing() {
    if std::env::var("BUZZ_TEST_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        return;
    }
    let unreachable = tempfile::tempdir().unwrap();
    let gone = unreachable.path().join("no-server-here");
    let wrong = [
        (
            "postgres://operator:s3cret@db.example:notaport/receipts".to_string(),
            "unparsable PostgreSQL URL",
        ),
        (
            "postgresql://postgres@/postgres?sslmode=bogus".to_string(),
            "sslmode",
        ),
        (
            format!("postgresql://postgres@/postgres?host={}", gone.display()),
            "open on PostgreSQL",
        ),
    ];
    for (url, says) in wrong {
        let err = failure(Place::Postgres(url.clone()).run(&["list"], None));
        assert!(err.contains(says), "{url}: {err}");
        assert!(
            !err.contains("s3cret"),
            "the password is never printed: {err}"
        );
    }

    let server = pg_fixture::PgServer::start(pg_fixture::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let empty = Place::Postgres(server.url());
    let key = thread(1).to_storage_key();
    for args in [
        vec!["list"],
        vec!["show", key.as_str()],
        vec!["export"],
        vec!["forget", key.as_str(), "--dry-run"],
    ] {
        let err = failure(empty.run(&args, None));
        assert!(err.contains("no receipt store"), "{args:?}: {err}");
    }
    let err = failure(empty.run(&["forget", "general"], None));
    assert!(err.contains("not a scope"), "{err}");
    let err = failure(empty.run(&["list"], None));
    assert!(
        err.contains("no receipt store"),
        "still none after every refused command: {err}"
    );
}
