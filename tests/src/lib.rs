//! Shared support for the patched tree's end-to-end scenarios.
//!
//! Every end-to-end scenario runs the real patched `buzz-acp` binary against
//! the real `acp-test-agent` binary over a real Nostr relay (the fork's test
//! relay, started in the test's process: [`relay::RelayWorld`]), and asserts
//! on what crossed the wire (the agent's wire log), what reached the relay,
//! the observer log, and the durable store. The in-process guards (`inproc/`,
//! tokio's paused clock) use the model's file relay ([`inproc`]). The tests only use the
//! binaries and files, never patched Rust APIs, so the same test compiles
//! with or without any patch: that is what lets `scripts/fork verify
//! --mutation` prove each guard fails when its patch is missing.

pub mod inproc;
pub mod matrix;
pub mod outage;
pub mod relay;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

pub use acp_test_agent::harness::{
    Direction, FrameKind, WireFrame, count_method, prompt_texts, read_wire_log, requests_of,
};
use buzz_acp::relay::Event;
pub use buzz_acp::testing::{
    AGENT, OWNER, Running, Scenario, USER, context_entries, reply_turns, wait_until,
};
use buzz_session_store::{KeyScheme, ReceiptStore, SqliteStore, StoreScope, StoredReceipt};
use serde_json::Value;
use tempfile::TempDir;

/// Generous: a turn against the test agent takes milliseconds.
pub const WAIT: Duration = Duration::from_secs(20);

/// Returns once the wall clock's second has changed. Nostr dates events to the second and a
/// harness subscribes from the second it starts (`since` includes it), so a message posted before
/// this returns is dated before any harness started after it: it was posted while none listened.
/// Waits for the clock (at most a second), not for a guessed duration.
pub fn wait_for_the_next_second() {
    let second = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    let posted = second();
    let next = buzz_acp::testing::wait_until_every(
        Duration::from_secs(2),
        Duration::from_millis(10),
        || (second() > posted).then_some(()),
    );
    assert!(next.is_some(), "the clock stands still");
}

/// The patched harness binary.
pub fn harness_bin() -> PathBuf {
    acp_test_agent::harness::bin_path("buzz-acp")
}

/// The test agent binary.
pub fn agent_bin() -> PathBuf {
    acp_test_agent::harness::test_agent_bin()
}

/// A fresh scenario in a temporary directory. The directory is a [`CheckedDir`]: when the test
/// lets go of it, every frame of the scenario's wire log is checked against the ACP schema.
pub fn scenario() -> (CheckedDir, Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Scenario::new(dir.path()).expect("scenario");
    let checked = CheckedDir {
        wire_log: s.wire_log.clone(),
        dir,
    };
    (checked, s)
}

/// A scenario's temporary directory whose wire log must be valid ACP.
///
/// Every scenario's agents log both directions (`--wire-log-sent`), so the log holds each
/// request and notification the harness wrote, each answer it read and each request the agent
/// made. When the test ends without a panic, [`acp_schema_check::check_wire_log`] checks every
/// frame against the schema of the version its agent process negotiated; a frame outside the
/// schema fails the test with the method and the JSON pointer of the offending field. The
/// directory is removed afterwards, as a `TempDir` is.
pub struct CheckedDir {
    wire_log: PathBuf,
    dir: TempDir,
}

impl CheckedDir {
    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for CheckedDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(violations) = check_schema(&self.wire_log) {
            panic!("the wire log is not valid ACP:\n{violations}");
        }
    }
}

/// Checks a wire log against the ACP schema: `Err` lists every violation, one per line.
pub fn check_schema(wire_log: &std::path::Path) -> Result<usize, String> {
    static CHECKER: std::sync::OnceLock<acp_schema_check::Checker> = std::sync::OnceLock::new();
    if !wire_log.exists() {
        return Ok(0);
    }
    let frames = read_wire_log(wire_log).map_err(|e| format!("unreadable wire log: {e}"))?;
    let checker = CHECKER.get_or_init(|| {
        acp_schema_check::Checker::new(acp_schema_check::Closure::Closed).expect("ACP schemas")
    });
    let report = acp_schema_check::check_wire_log(checker, &frames, None);
    if report.violations.is_empty() {
        return Ok(report.checked);
    }
    let lines: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    Err(lines.join("\n"))
}

/// The agent command line with extra test-agent flags. The agent also logs what it writes
/// (`--wire-log-sent`), for the schema check; [`wire`] shows only what the harness wrote.
pub fn agent(s: &Scenario, args: &[&str]) -> String {
    let mut all = vec!["--wire-log-sent"];
    all.extend_from_slice(args);
    s.agent_command(&agent_bin(), &all)
}

/// A harness started in the background ([`relay::Chat::start_harness`]): stopped with SIGTERM by
/// [`Background::stop`] (it settles its turns and flushes its receipt writes), killed when dropped.
#[derive(Debug)]
pub struct Background {
    child: Child,
}

impl Background {
    /// The harness's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the harness (SIGSTOP): it runs no code, its sockets stay open, its agents run on.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen harness run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Whether the harness is still running (not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(signal)
            .arg(self.child.id().to_string())
            .status();
        assert!(
            sent.is_ok_and(|s| s.success()),
            "kill {signal} {}",
            self.child.id()
        );
    }

    /// Asks the harness to stop (SIGTERM) and waits for it.
    pub fn stop(mut self) -> std::io::Result<ExitStatus> {
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if !term.is_ok_and(|s| s.success()) {
            self.child.kill()?;
        }
        self.child.wait()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The PostgreSQL server the test command started (`scripts/pg`; `scripts/fork verify` provides
/// one), or a skip the caller asked for explicitly; without either the test fails rather than
/// pass untested.
pub fn postgres_url() -> Option<String> {
    if let Ok(url) = std::env::var("BUZZ_TEST_POSTGRES_URL") {
        return Some(url);
    }
    assert!(
        std::env::var_os("BUZZ_TEST_SKIP_POSTGRES").is_some(),
        "set BUZZ_TEST_POSTGRES_URL (scripts/pg start prints one) or BUZZ_TEST_SKIP_POSTGRES=1"
    );
    None
}

/// What the harness wrote to its agents, from the agent's wire log (the agent's own frames,
/// logged for the schema check, are left out).
pub fn wire(s: &Scenario) -> Vec<WireFrame> {
    let frames = read_wire_log(&s.wire_log).expect("wire log");
    frames
        .into_iter()
        .filter(|f| f.direction == Direction::Received)
        .collect()
}

/// `turns=N` of a reply, panicking when absent.
pub fn turns(reply: &Event) -> u32 {
    reply_turns(reply).unwrap_or_else(|| panic!("no turns= in {:?}", reply.content))
}

/// The nonces the test agent's session had seen when it wrote `reply` (`nonces=a-1234,b-5678`):
/// what the model knew.
pub fn reply_nonces(reply: &Event) -> Vec<String> {
    acp_test_agent::reply::seen_nonces(&reply.content)
}

/// How each prompt of the thread rooted at `root_id` reached its session, read from the wire
/// alone: `"new"` (a `session/new` for the thread came first), `"restored"` (a `session/load` or
/// `session/resume` for it came first, since its previous prompt) or `"continued"` (neither: the
/// live session). The thread's prompts are the ones that name its root (`thread root: …`);
/// requests that open a session name it in `_meta.threadRootEventId`.
pub fn served_as(frames: &[WireFrame], root_id: &str) -> Vec<&'static str> {
    let marker = format!("thread root: {root_id}");
    let mut opening: Option<&'static str> = None;
    let mut served = Vec::new();
    for frame in frames.iter().filter(|f| f.kind == FrameKind::Request) {
        let names_thread = frame.params["_meta"]["threadRootEventId"] == root_id;
        match frame.method.as_deref() {
            Some("session/new") if names_thread => opening = Some("new"),
            Some("session/load" | "session/resume") if names_thread => {
                opening = Some("restored");
            }
            Some("session/prompt") if prompt_of(frame).contains(&marker) => {
                served.push(opening.take().unwrap_or("continued"));
            }
            _ => {}
        }
    }
    served
}

/// The text of a `session/prompt` request.
fn prompt_of(frame: &WireFrame) -> String {
    frame.params["prompt"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

/// The `session/close` requests, as (agent process, session id), in order.
pub fn closes(frames: &[WireFrame]) -> Vec<(u32, String)> {
    requests_of(frames, "session/close")
        .into_iter()
        .map(|f| {
            let id = f.params["sessionId"].as_str().unwrap_or_default();
            (f.pid, id.to_string())
        })
        .collect()
}

/// The texts of every `session/prompt`, in order.
pub fn prompts(frames: &[WireFrame]) -> Vec<String> {
    prompt_texts(frames).into_iter().map(|(_, t)| t).collect()
}

/// Session ids in order of first appearance on the wire (the same order the
/// wire normalizer numbers them: `session-1`, `session-2`, …).
pub fn session_order(frames: &[WireFrame]) -> Vec<String> {
    let mut order = Vec::new();
    for frame in frames {
        collect_session_ids(&frame.params, &mut order);
    }
    order
}

fn collect_session_ids(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "sessionId"
                    && let Some(id) = v.as_str()
                    && !out.iter().any(|o| o == id)
                {
                    out.push(id.to_string());
                }
                collect_session_ids(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_session_ids(v, out)),
        _ => {}
    }
}

/// What the harness itself posted about `event_id` (a notice: it quotes the event with a `q`
/// tag and is never an answer to it), in relay order.
pub fn notices_about(s: &Scenario, event_id: &str) -> Vec<Event> {
    s.replies()
        .into_iter()
        .filter(|e| e.tag_values("q").any(|q| q == event_id))
        .collect()
}

/// The snapshot view of a scenario's wire log (`normalize_wire_log`: session ids, paths, and
/// the harness's own version in `initialize`, so an upstream release does not change every
/// guard's snapshot).
pub fn wire_view(s: &Scenario) -> Value {
    acp_test_agent::harness::normalize_wire_log(&wire(s), &[(s.root.as_path(), "<tmp>")])
}

/// The method-level shape of the wire log: kind, method and params, with each
/// prompt's text and the raw byte counts left out. Guards of earlier patches
/// snapshot this view, so a later patch that changes *what* a prompt carries
/// (e.g. delta delivery) does not change *their* snapshot.
pub fn wire_shape(s: &Scenario) -> Value {
    let mut view = wire_view(s);
    if let Some(frames) = view.as_array_mut() {
        for frame in frames {
            if let Some(obj) = frame.as_object_mut() {
                obj.remove("bytes");
            }
            if frame["method"] == "session/prompt" {
                frame["params"]["prompt"] = Value::String("<prompt>".into());
            }
        }
    }
    view
}

/// Where a scenario's harness keeps its files, and the scope it keys its receipts by: a
/// [`Scenario`] on the file relay, or a [`relay::RelayWorld`] on a Nostr relay.
pub trait HarnessFiles {
    /// The scenario: state directory, wire log, observer log.
    fn files(&self) -> &Scenario;
    /// The relay identity and agent key the harness stores its receipts under.
    fn store_scope(&self) -> StoreScope;
}

impl HarnessFiles for Scenario {
    fn files(&self) -> &Scenario {
        self
    }

    fn store_scope(&self) -> StoreScope {
        StoreScope {
            relay: relay_identity(self),
            agent_pubkey: AGENT.to_string(),
        }
    }
}

/// The embedded receipt store (SQLite) of the scenario's harness.
pub fn store_path(s: &impl HarnessFiles) -> PathBuf {
    s.files().state_dir.join("sessions.sqlite3")
}

/// The relay identity the harness keys its receipts by.
pub fn relay_identity(s: &Scenario) -> String {
    buzz_acp::relay::FileRelay::open(&s.relay_dir)
        .map(|r| buzz_acp::relay::Relay::identity(&r).to_string())
        .expect("relay")
}

/// Every receipt of the scenario's agent, sorted by key (empty before the store exists).
pub fn receipts(s: &impl HarnessFiles) -> Vec<StoredReceipt> {
    if !store_path(s).exists() {
        return Vec::new();
    }
    let scope = s.store_scope();
    let store = SqliteStore::open(&store_path(s), scope, KeyScheme::Scope, 1_000).expect("store");
    store.receipts().expect("receipts")
}

/// The store's sessions once it holds `n` receipts. A running harness writes receipts beside its
/// event loop, so a reply can be published before its receipt lands; this waits for the write.
pub fn stored_sessions_once(s: &impl HarnessFiles, n: usize) -> HashMap<String, String> {
    wait_until(WAIT, || {
        let stored = stored_sessions(s);
        (stored.len() == n).then_some(stored)
    })
    .unwrap_or_else(|| {
        panic!(
            "the store never held {n} receipt(s): {:?}",
            stored_sessions(s)
        )
    })
}

/// Session ids recorded in the store, by storage key.
pub fn stored_sessions(s: &impl HarnessFiles) -> HashMap<String, String> {
    receipts(s)
        .into_iter()
        .map(|r| (r.key.to_storage_key(), r.record.session_id))
        .collect()
}

/// Receipt fields that patch `continuity-handoff` fills (turn count, usage, retirement, the
/// handoff): left out of the views other patches' snapshots pin, so those snapshots read the
/// same with or without it (its own guards read them from [`receipts`]).
pub const CONTINUITY_FIELDS: [&str; 4] = ["turns", "usage", "retired", "handoff"];

/// The snapshot view of the store: every receipt of the scenario's relay and agent key, by
/// storage key, session ids numbered like the wire view, no timestamps, no continuity fields.
pub fn store_view(s: &impl HarnessFiles) -> Value {
    let order = session_order(&wire(s.files()));
    let mut sessions = serde_json::Map::new();
    for r in receipts(s) {
        let mut record = serde_json::to_value(&r.record).expect("record is JSON");
        if let Some(fields) = record.as_object_mut() {
            for field in CONTINUITY_FIELDS {
                fields.remove(field);
            }
        }
        sessions.insert(r.key.to_storage_key(), record);
    }
    let mut text = Value::Object(sessions).to_string();
    for (i, id) in order.iter().enumerate() {
        text = text.replace(id, &format!("session-{}", i + 1));
    }
    let sessions: Value = serde_json::from_str(&text).expect("normalized store is JSON");
    serde_json::json!({ "sessions": sessions })
}

/// The receipts without the parts later patches extend: per receipt (sorted by session), the
/// session id and the applied and requested model and permission mode. No storage keys and no
/// delivery ledger.
pub fn receipt_view(s: &impl HarnessFiles) -> Value {
    let store = store_view(s);
    let mut receipts: Vec<Value> = store["sessions"]
        .as_object()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    for r in &mut receipts {
        if let Some(obj) = r.as_object_mut() {
            obj.remove("delivery");
        }
    }
    receipts.sort_by_key(|r| r["sessionId"].as_str().unwrap_or_default().to_string());
    serde_json::json!({ "receipts": receipts })
}

/// Observer `acp_read` frames that are `session/update` notifications of the
/// given kind (e.g. `user_message_chunk`).
pub fn observed_updates(s: &Scenario, kind: &str) -> usize {
    s.observer_records("acp_read")
        .iter()
        .filter(|r| {
            r["frame"]["method"] == "session/update"
                && r["frame"]["params"]["update"]["sessionUpdate"] == kind
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::check_schema;

    /// One frame of a wire log: a request the harness wrote.
    fn line(method: &str, id: u32, params: &str) -> String {
        format!(
            r#"{{"ts_ms":1,"pid":7,"kind":"request","method":"{method}","id":{id},"bytes":1,"params":{params}}}"#
        )
    }

    #[test]
    fn the_schema_check_names_a_frame_outside_the_schema() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("wire.jsonl");
        let init = r#"{"protocolVersion":1,"clientCapabilities":{}}"#;
        let answer = r#"{"ts_ms":1,"pid":7,"kind":"response","method":null,"id":0,"bytes":1,"params":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]},"direction":"sent"}"#;
        let good = format!("{}\n{answer}", line("initialize", 0, init));
        std::fs::write(&log, format!("{good}\n")).expect("write");
        assert_eq!(check_schema(&log), Ok(2));

        // `session/new` without its required `cwd`, and with a field the schema does not know.
        let bad = line("session/new", 1, r#"{"mcpServers":[],"scope":"thread"}"#);
        std::fs::write(&log, format!("{good}\n{bad}\n")).expect("write");
        let violations = check_schema(&log).expect_err("outside the schema");
        assert!(violations.contains("session/new"), "{violations}");
        assert!(violations.contains("cwd"), "{violations}");
    }
}
