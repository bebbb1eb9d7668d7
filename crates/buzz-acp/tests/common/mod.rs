//! Shared helpers for the baseline's end-to-end tests: the real `buzz-acp`
//! binary against the real `acp-test-agent` binary through a file relay.
// Each test target uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

use std::path::PathBuf;
use std::time::Duration;

use acp_test_agent::harness::{WireFrame, normalize_wire_log, read_wire_log};
use buzz_acp::relay::Event;
use buzz_acp::testing::Scenario;
use serde_json::Value;
use tempfile::TempDir;

/// Generous: a turn against the test agent takes milliseconds.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn harness_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_buzz-acp"))
}

pub fn agent_bin() -> PathBuf {
    acp_test_agent::harness::test_agent_bin()
}

pub fn scenario() -> (TempDir, Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Scenario::new(dir.path()).expect("scenario");
    (dir, s)
}

pub fn agent(s: &Scenario, args: &[&str]) -> String {
    s.agent_command(&agent_bin(), args)
}

/// Runs `--once` and asserts success.
pub fn run_once(s: &Scenario, agent_args: &[&str], extra: &[&str]) {
    if let Err(e) = s.run_once_ok(&harness_bin(), &agent(s, agent_args), extra) {
        panic!("{e}");
    }
}

pub fn wire(s: &Scenario) -> Vec<WireFrame> {
    read_wire_log(&s.wire_log).expect("wire log")
}

/// The snapshot view of a scenario's wire log.
pub fn wire_view(s: &Scenario) -> Value {
    normalize_wire_log(&wire(s), &[(s.root.as_path(), "<tmp>")])
}

pub fn count(frames: &[WireFrame], method: &str) -> usize {
    acp_test_agent::harness::count_method(frames, method)
}

/// The texts of every `session/prompt`, in order.
pub fn prompts(frames: &[WireFrame]) -> Vec<String> {
    acp_test_agent::harness::prompt_texts(frames)
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

/// `turns=N` from a test agent reply.
pub fn turns(reply: &Event) -> u32 {
    buzz_acp::testing::reply_turns(reply)
        .unwrap_or_else(|| panic!("no turns= in {:?}", reply.content))
}

pub use buzz_acp::testing::context_entries;
