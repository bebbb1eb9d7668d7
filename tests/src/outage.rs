//! Support for the store-outage scenarios (`e2e/store_outage.rs`): the receipt store frozen,
//! stopped, refusing the harness's role, or write-locked by another process, while the real
//! patched harness serves the test relay ([`RelayWorld`]) as the agent.
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
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use buzz_acp::relay::Event;
use buzz_acp::testing::{reply_turns, wait_until_every};
use buzz_session_store::{
    KeyScheme, PgStore, ReceiptStore, SqliteStore, StoreError, StoredReceipt,
};
use pg_fixture::{Options, PgServer};

use crate::relay::{Launch, RelayWorld};
use crate::{HarnessFiles, agent, harness_bin, store_path};

/// A second stream channel, `#ops`, for threads whose receipts must not share a key with
/// `#general`'s: without `store-key-session-scope` receipts are keyed by channel.
pub const OPS: &str = "5d3c2b1a-9e8f-4a7b-8c6d-1e2f3a4b5c6d";

/// How long a scenario waits for the store to catch up after an outage: a write in flight when
/// the store went away first runs into its own deadline (10 s for PostgreSQL, 5 s of SQLite busy
/// waiting), and replays back off up to 30 s. Only a bound that turns a hang into a failure.
pub const CATCH_UP: Duration = Duration::from_secs(120);

/// Adds `#ops` to the world's relay with the agent as a member (call before the harness starts:
/// it finds its channels when it connects).
pub fn add_ops_channel(w: &RelayWorld) {
    w.block_on(
        w.relay
            .add_channel(OPS, "ops", "stream", &[w.agent.public_key()]),
    )
    .unwrap_or_else(|e| panic!("add #ops to the relay: {e}"));
}

/// The owner opens a thread in `#ops` mentioning the agent.
pub fn post_top_in_ops(w: &RelayWorld, text: &str) -> Event {
    let event = w
        .post_in(OPS, &w.owner, text, None, true)
        .unwrap_or_else(|e| panic!("posting {text:?} in #ops: {e}"));
    Event::from(&event)
}

// ----- the harness, configured through its environment ---------------------------------------

/// A harness running in the background on the world's relay with extra environment; killed
/// when dropped.
///
/// [`RelayWorld::start_env`]'s handle can only be stopped; these scenarios also kill a harness
/// outright and read what it logged, so this wraps the same handle with its log's path.
#[derive(Debug)]
pub struct Background {
    harness: crate::Background,
    log_path: PathBuf,
}

impl Background {
    /// Asks the harness to stop (SIGTERM: it finishes its turns and waits, bounded, for its
    /// queued receipt writes) and waits for it.
    pub fn stop(self) -> ExitStatus {
        self.harness.stop().expect("wait for buzz-acp")
    }

    /// SIGKILL: nothing of the harness's own runs any more (no flush, no shutdown).
    pub fn kill(mut self) {
        self.harness.child.kill().expect("kill buzz-acp");
        self.harness.child.wait().expect("reap buzz-acp");
    }

    /// The harness's log (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Starts the harness on the world's relay with `env` added to its environment, and returns once
/// it is subscribed (it hears only what is posted from then on). Its log goes to
/// `harness-outage-N.log` in the scenario's root.
pub fn start_with(w: &RelayWorld, env: &[(&str, &str)]) -> Background {
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    let n = STARTS.fetch_add(1, Ordering::Relaxed);
    let log_path = w.s.root.join(format!("harness-outage-{n}.log"));
    let agent_command = agent(&w.s, &[]);
    let launch = Launch {
        scenario: &w.s,
        harness: &harness_bin(),
        agent_command: &agent_command,
        extra: &[],
        env,
        log: log_path.clone(),
    };
    let harness = w.start_harness(launch).unwrap_or_else(|e| panic!("{e}"));
    Background { harness, log_path }
}

/// Runs the harness on the world's relay with `env` and waits up to [`crate::WAIT`] for it to
/// exit: its exit status (`None` when it was still running, and then killed) and its stderr.
pub fn run_until_exit(w: &RelayWorld, env: &[(&str, &str)]) -> (Option<ExitStatus>, String) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let log_path = w.s.root.join(format!("harness-exit-{n}.log"));
    let log = std::fs::File::create(&log_path).expect("harness log");
    let agent_command = agent(&w.s, &[]);
    let launch = Launch {
        scenario: &w.s,
        harness: &harness_bin(),
        agent_command: &agent_command,
        extra: &[],
        env,
        log: log_path.clone(),
    };
    let mut child = w
        .harness_command(&launch)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start buzz-acp");
    let exited = crate::wait_until(crate::WAIT, || child.try_wait().ok().flatten());
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    (
        exited,
        std::fs::read_to_string(&log_path).unwrap_or_default(),
    )
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
pub fn answer_to(w: &RelayWorld, event_id: &str) -> Option<Event> {
    w.replies()
        .into_iter()
        .find(|r| reply_turns(r).is_some() && r.answered_ids().iter().any(|id| id == event_id))
}

/// Waits for the answer to `event`, asserting that it comes.
pub fn wait_answer(w: &RelayWorld, event: &Event) -> Event {
    let answer = wait_until_every(crate::WAIT, Duration::from_millis(50), || {
        answer_to(w, &event.id)
    });
    assert_ne!(answer, None, "no answer to {:?}", event.content);
    answer.unwrap_or_else(|| unreachable!("asserted above"))
}

/// Notices the harness posted in `root`'s thread (its events that quote a message), in order.
pub fn notices_in_thread(w: &RelayWorld, root: &Event) -> Vec<Event> {
    w.replies()
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

/// A read-write handle on the harness's receipts in the database at `url` (its store scope: the
/// relay's identity and the agent's key): another harness (or an operator's tool) sharing the
/// store.
pub fn pg_store(url: &str, w: &impl HarnessFiles) -> PgStore {
    PgStore::open(url, w.store_scope(), KeyScheme::Scope, 1_000)
        .unwrap_or_else(|e| panic!("open the receipts at {url}: {e}"))
}

/// Every receipt of the harness in the database at `url` (none before the harness created its
/// tables). Only while the server answers: a frozen server would hold this up to its deadline.
pub fn pg_receipts(url: &str, w: &impl HarnessFiles) -> Vec<StoredReceipt> {
    match PgStore::open_read_only(url, w.store_scope(), KeyScheme::Scope) {
        Ok(store) => store.receipts().expect("list receipts"),
        Err(StoreError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("open the receipts at {url}: {e}"),
    }
}

/// Every receipt of the harness in its embedded store, read without taking the write lock.
pub fn sqlite_receipts(w: &impl HarnessFiles) -> Vec<StoredReceipt> {
    let path = store_path(w);
    if !path.exists() {
        return Vec::new();
    }
    SqliteStore::open_read_only(&path, w.store_scope(), KeyScheme::Scope)
        .and_then(|store| store.receipts())
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
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
