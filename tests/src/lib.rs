//! Shared support for the patched tree's end-to-end scenarios.
//!
//! Every scenario runs the real patched `buzz-acp` binary against the real
//! `acp-test-agent` binary through a file relay (see `buzz_acp::testing`), and
//! asserts on what crossed the wire (the agent's wire log), what reached the
//! relay, the observer log, and the durable store file. The tests only use the
//! binaries and files, never patched Rust APIs, so the same test compiles
//! with or without any patch: that is what lets `scripts/fork verify
//! --mutation` prove each guard fails when its patch is missing.

pub mod inproc;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

pub use acp_test_agent::harness::{
    WireFrame, count_method, prompt_texts, read_wire_log, requests_of,
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

/// The patched harness binary.
pub fn harness_bin() -> PathBuf {
    acp_test_agent::harness::bin_path("buzz-acp")
}

/// The test agent binary.
pub fn agent_bin() -> PathBuf {
    acp_test_agent::harness::test_agent_bin()
}

/// A fresh scenario in a temporary directory.
pub fn scenario() -> (TempDir, Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Scenario::new(dir.path()).expect("scenario");
    (dir, s)
}

/// The agent command line with extra test-agent flags.
pub fn agent(s: &Scenario, args: &[&str]) -> String {
    s.agent_command(&agent_bin(), args)
}

/// Runs the harness with `--once`, panicking with its stderr on failure.
pub fn run_once(s: &Scenario, agent_args: &[&str], extra: &[&str]) {
    if let Err(e) = s.run_once_ok(&harness_bin(), &agent(s, agent_args), extra) {
        panic!("{e}");
    }
}

/// Starts the harness in the background.
pub fn start(s: &Scenario, agent_args: &[&str], extra: &[&str]) -> Running {
    s.start(&harness_bin(), &agent(s, agent_args), extra)
        .expect("start buzz-acp")
}

/// Waits until the running harness has admitted `event_id` (its log's `admitted` line names
/// it): the event, not a guess at how long a poll takes.
pub fn wait_admitted(running: &Running, event_id: &str) -> Option<()> {
    wait_until(WAIT, || {
        let log = std::fs::read_to_string(running.log_path()).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("admitted") && l.contains(event_id))
            .then_some(())
    })
}

/// The agent's wire log.
pub fn wire(s: &Scenario) -> Vec<WireFrame> {
    read_wire_log(&s.wire_log).expect("wire log")
}

/// `turns=N` of a reply, panicking when absent.
pub fn turns(reply: &Event) -> u32 {
    reply_turns(reply).unwrap_or_else(|| panic!("no turns= in {:?}", reply.content))
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

/// Waits until the harness has posted a notice about `event_id`.
pub fn wait_for_notice(s: &Scenario, event_id: &str, timeout: Duration) -> Option<Event> {
    wait_until(timeout, || notices_about(s, event_id).into_iter().next())
}

/// The snapshot view of a scenario's wire log. The harness names its own version in
/// `initialize` (`info.version` in the v2 shape it sends since 0.11.0, `clientInfo.version` in
/// the v1 shape before); it is replaced by `<harness version>` and that frame's byte count left
/// out, so an upstream release does not change every guard's snapshot.
pub fn wire_view(s: &Scenario) -> Value {
    let mut view =
        acp_test_agent::harness::normalize_wire_log(&wire(s), &[(s.root.as_path(), "<tmp>")]);
    for frame in view.as_array_mut().into_iter().flatten() {
        if frame.get("method").and_then(Value::as_str) != Some("initialize") {
            continue;
        }
        let version = ["/params/info/version", "/params/clientInfo/version"]
            .into_iter()
            .find(|path| frame.pointer(path).is_some());
        if let Some(version) = version.and_then(|path| frame.pointer_mut(path)) {
            *version = Value::String("<harness version>".into());
            if let Some(obj) = frame.as_object_mut() {
                obj.remove("bytes");
            }
        }
    }
    view
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

/// The embedded receipt store (SQLite) of the scenario's harness.
pub fn store_path(s: &Scenario) -> PathBuf {
    s.state_dir.join("sessions.sqlite3")
}

/// The relay identity the harness keys its receipts by.
pub fn relay_identity(s: &Scenario) -> String {
    buzz_acp::relay::FileRelay::open(&s.relay_dir)
        .map(|r| buzz_acp::relay::Relay::identity(&r).to_string())
        .expect("relay")
}

/// Every receipt of the scenario's agent, sorted by key (empty before the store exists).
pub fn receipts(s: &Scenario) -> Vec<StoredReceipt> {
    if !store_path(s).exists() {
        return Vec::new();
    }
    let scope = StoreScope {
        relay: relay_identity(s),
        agent_pubkey: AGENT.to_string(),
    };
    let store = SqliteStore::open(&store_path(s), scope, KeyScheme::Scope, 1_000).expect("store");
    store.receipts().expect("receipts")
}

/// Session ids recorded in the store, by storage key.
pub fn stored_sessions(s: &Scenario) -> HashMap<String, String> {
    receipts(s)
        .into_iter()
        .map(|r| (r.key.to_storage_key(), r.record.session_id))
        .collect()
}

/// The snapshot view of the store: every receipt of the scenario's relay and agent key, by
/// storage key, session ids numbered like the wire view, no timestamps.
pub fn store_view(s: &Scenario) -> Value {
    let order = session_order(&wire(s));
    let mut sessions = serde_json::Map::new();
    for r in receipts(s) {
        let record = serde_json::to_value(&r.record).expect("record is JSON");
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
pub fn receipt_view(s: &Scenario) -> Value {
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
