//! Support for the store-outage scenarios (`e2e/store_outage.rs`): the receipt store frozen,
//! stopped, refusing the harness's role, or write-locked by another process, while the real
//! patched harness serves a relay.
//!
//! Two rules shape these helpers.
//!
//! * **The fork's settings go in through the environment** (`BUZZ_ACP_SESSION_STORE_URL`,
//!   `BUZZ_ACP_SESSION_STORE_WAIT_SECS`), never as flags. Every flag of the harness also reads
//!   its `BUZZ_ACP_*` variable, and a harness without the series ignores variables it does not
//!   know where it would refuse an unknown flag. So the same scenario runs on the tree without
//!   the series too, and fails there by what it observes (no receipt ever reaches the store, no
//!   notice is posted), which is what `scripts/fork verify --mutation` requires of a guard.
//! * **Nothing waits for a guess at a duration.** A scenario waits for an event (an answer in the
//!   relay, a receipt in the store, a line from the lock holder) with a generous bound that only
//!   turns a hang into a failure, and then asserts on what it found: without the series the
//!   scenarios fail by an assertion, which is what the mutation check counts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use buzz_acp::relay::{ChannelId, ChannelInfo, ChannelKind, Event, EventBuilder, write_channels};
use buzz_acp::testing::{AGENT, Scenario, USER, direct, general, reply_turns, wait_until_every};
use buzz_session_store::{
    KeyScheme, PgStore, ReceiptStore, SqliteStore, StoreError, StoreScope, StoredReceipt,
};
use pg_fixture::{Options, PgServer};

use crate::{agent, harness_bin, relay_identity, store_path};

/// A second stream channel, `#ops`, for threads whose receipts must not share a key with
/// `#general`'s: without `store-key-session-scope` receipts are keyed by channel.
pub const OPS: &str = "5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d";

/// How long a scenario waits for the store to catch up after an outage: a write in flight when
/// the store went away first runs into its own deadline (10 s for PostgreSQL, 5 s of SQLite busy
/// waiting), and replays back off up to 30 s. Only a bound that turns a hang into a failure.
pub const CATCH_UP: Duration = Duration::from_secs(120);

/// `#ops` as a channel id.
pub fn ops() -> ChannelId {
    ChannelId::parse(OPS).unwrap_or_else(|e| panic!("{e}"))
}

/// Adds `#ops` to the scenario's relay (call before the harness starts).
pub fn add_ops_channel(s: &Scenario) {
    let stream = |name: &str| ChannelInfo {
        name: name.into(),
        kind: ChannelKind::Stream,
    };
    let dm = ChannelInfo {
        name: "dm".into(),
        kind: ChannelKind::Dm,
    };
    write_channels(
        &s.relay_dir,
        &[
            (general(), stream("general")),
            (direct(), dm),
            (ops(), stream("ops")),
        ],
    )
    .expect("write channels.json");
}

/// A top-level message mentioning the agent in `#ops`: a new thread there.
pub fn post_top_in_ops(s: &mut Scenario, text: &str) -> Event {
    s.post_with(|at| {
        EventBuilder::message(USER, &ops(), text)
            .created_at(at)
            .mention(AGENT)
            .build()
    })
    .expect("post in #ops")
}

/// A direct message to the agent: its scope is the whole DM conversation, so its turn needs the
/// conversation's receipt.
pub fn post_dm(s: &mut Scenario, text: &str) -> Event {
    s.post_with(|at| {
        EventBuilder::message(USER, &direct(), text)
            .created_at(at)
            .mention(AGENT)
            .build()
    })
    .expect("post a direct message")
}

// ----- the harness, configured through its environment ---------------------------------------

/// A harness running in the background with extra environment; killed when dropped.
///
/// `buzz_acp::testing::Running` cannot carry environment (the scenario builds the command), so
/// this is its counterpart for these scenarios.
#[derive(Debug)]
pub struct Background {
    child: Child,
    log_path: PathBuf,
}

impl Background {
    /// Asks the harness to stop (SIGTERM: it finishes its turns and waits, bounded, for its
    /// queued receipt writes) and waits for it.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if !term.is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        self.child.wait().expect("wait for buzz-acp")
    }

    /// SIGKILL: nothing of the harness's own runs any more (no flush, no cursor save).
    pub fn kill(mut self) {
        self.child.kill().expect("kill buzz-acp");
        self.child.wait().expect("reap buzz-acp");
    }

    /// The harness's log (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The harness's command line for `s` with `env` added to its environment.
pub fn command(s: &Scenario, env: &[(&str, &str)]) -> Command {
    let mut cmd = s.harness_command(&harness_bin(), &agent(s, &[]), &[]);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd
}

/// Starts the harness in the background with `env` added to its environment.
pub fn start_with(s: &Scenario, env: &[(&str, &str)]) -> Background {
    let n = std::fs::read_dir(&s.root).map_or(0, |d| d.count());
    let log_path = s.root.join(format!("harness-outage-{n}.log"));
    let log = std::fs::File::create(&log_path).expect("harness log");
    let mut cmd = command(s, env);
    cmd.stdout(Stdio::null()).stderr(log);
    Background {
        child: cmd.spawn().expect("start buzz-acp"),
        log_path,
    }
}

/// The environment that puts the receipts in the database at `url`.
pub fn store_at(url: &str) -> (&'static str, &str) {
    ("BUZZ_ACP_SESSION_STORE_URL", url)
}

/// The environment that bounds how long a turn waits for its receipt.
pub fn store_wait_secs(secs: &str) -> (&'static str, &str) {
    ("BUZZ_ACP_SESSION_STORE_WAIT_SECS", secs)
}

// ----- what reached the relay ----------------------------------------------------------------

/// The agent's answer to `event_id` (a test-agent reply, `turns=N …`, that names it), if
/// published. Notices never count: they quote their event and answer nothing.
pub fn answer_to(s: &Scenario, event_id: &str) -> Option<Event> {
    s.replies()
        .into_iter()
        .find(|r| reply_turns(r).is_some() && r.answered_ids().iter().any(|id| id == event_id))
}

/// Waits for the answer to `event`, asserting that it comes.
pub fn wait_answer(s: &Scenario, event: &Event) -> Event {
    let answer = wait_until_every(crate::WAIT, Duration::from_millis(20), || {
        answer_to(s, &event.id)
    });
    assert_ne!(answer, None, "no answer to {:?}", event.content);
    answer.unwrap_or_else(|| unreachable!("asserted above"))
}

/// Notices the harness posted in `root`'s thread (its events that quote a message), in order.
pub fn notices_in_thread(s: &Scenario, root: &Event) -> Vec<Event> {
    s.replies()
        .into_iter()
        .filter(|e| e.tag_values("q").next().is_some())
        .filter(|e| e.thread_refs().root.as_deref() == Some(root.id.as_str()))
        .collect()
}

// ----- what reached the store ----------------------------------------------------------------

/// A private PostgreSQL server for one scenario (stopped and deleted when dropped).
pub fn pg_server() -> PgServer {
    pg_server_with(Options::default())
}

/// A private PostgreSQL server started with `options` (TCP, TLS).
pub fn pg_server_with(options: Options) -> PgServer {
    PgServer::start(options).unwrap_or_else(|e| panic!("PostgreSQL fixture: {e}"))
}

/// `url` with its user replaced by `role` (the fixture's URLs name `postgres`).
pub fn url_as(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// Runs SQL statements on the server at `url`.
pub fn sql(url: &str, statements: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    client
        .batch_execute(statements)
        .unwrap_or_else(|e| panic!("{statements}: {e}"));
}

fn store_scope(s: &Scenario) -> StoreScope {
    StoreScope {
        relay: relay_identity(s),
        agent_pubkey: AGENT.to_string(),
    }
}

/// A read-write handle on the scenario's receipts in the database at `url`: another harness
/// (or an operator's tool) sharing the store.
pub fn pg_store(url: &str, s: &Scenario) -> PgStore {
    PgStore::open(url, store_scope(s), KeyScheme::Scope, 1_000)
        .unwrap_or_else(|e| panic!("open the receipts at {url}: {e}"))
}

/// Every receipt of the scenario in the database at `url` (none before the harness created its
/// tables). Only while the server answers: a frozen server would hold this up to its deadline.
pub fn pg_receipts(url: &str, s: &Scenario) -> Vec<StoredReceipt> {
    match PgStore::open_read_only(url, store_scope(s), KeyScheme::Scope) {
        Ok(store) => store.receipts().expect("list receipts"),
        Err(StoreError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("open the receipts at {url}: {e}"),
    }
}

/// Every receipt of the scenario in its embedded store, read without taking the write lock.
pub fn sqlite_receipts(s: &Scenario) -> Vec<StoredReceipt> {
    if !store_path(s).exists() {
        return Vec::new();
    }
    SqliteStore::open_read_only(&store_path(s), store_scope(s), KeyScheme::Scope)
        .and_then(|store| store.receipts())
        .unwrap_or_else(|e| panic!("read {}: {e}", store_path(s).display()))
}

/// Stored session ids by channel. With receipts keyed by channel (without
/// `store-key-session-scope`) or by thread, a scenario with one thread per channel finds the
/// thread's receipt under its channel either way.
pub fn sessions_by_channel(receipts: &[StoredReceipt]) -> BTreeMap<String, String> {
    receipts
        .iter()
        .map(|r| (r.key.channel_id().to_string(), r.record.session_id.clone()))
        .collect()
}

/// The stored session ids by channel once `until` holds for them, or as they are when
/// [`CATCH_UP`] has passed (polling every 100 ms): the caller asserts on what it gets.
pub fn sessions_when(
    receipts: impl Fn() -> Vec<StoredReceipt>,
    until: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let settled = wait_until_every(CATCH_UP, Duration::from_millis(100), || {
        let sessions = sessions_by_channel(&receipts());
        until(&sessions).then_some(sessions)
    });
    settled.unwrap_or_else(|| sessions_by_channel(&receipts()))
}

// ----- another process holding the embedded store's write lock ------------------------------

/// The `sqlite-write-lock` helper of this package, holding an exclusive transaction on a
/// database until released.
#[derive(Debug)]
pub struct WriteLock {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl WriteLock {
    /// Starts `bin` (the helper, `env!("CARGO_BIN_EXE_sqlite-write-lock")` in a test) on `db` and
    /// returns once it holds the lock (it says so on its stdout).
    pub fn hold(bin: &Path, db: &Path) -> WriteLock {
        let mut child = Command::new(bin)
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut lock = WriteLock {
            child,
            stdin,
            stdout,
        };
        assert_eq!(lock.line(), "locked", "the helper holds the write lock");
        lock
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("helper stdout");
        line.trim().to_string()
    }

    /// Ends the transaction (rolled back) and waits for the helper to exit.
    pub fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            stdin.write_all(b"release\n").expect("helper stdin");
        }
        assert_eq!(self.line(), "released");
        let status = self.child.wait().expect("wait for the helper");
        assert!(status.success(), "the helper exited with {status}");
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
