//! Command-line flags of the `acp-test-agent` binary.

use std::path::PathBuf;

use clap::Parser;

use crate::mimic::{CapabilitiesLayout, MissingSessionAnswer};
use crate::protocol::{Protocol, SessionCapability};
use crate::reply::StopReasonName;

/// A deterministic ACP v1 agent on stdin/stdout, for tests and demos.
///
/// Every reply proves what the agent remembers (`turns=N digest=... nonces=...`), sessions are
/// persisted under `--state-dir` so a restarted agent can `session/load` them, and the remaining
/// flags inject faults (delays, errors, crashes) a client must survive.
#[derive(Debug, Clone, Parser)]
#[command(name = "acp-test-agent", version, about, long_about = None)]
pub struct Args {
    /// Directory holding `sessions/<session-id>.json`; may be shared by several agent processes.
    #[arg(long)]
    pub state_dir: PathBuf,

    /// Advertise `agentCapabilities.loadSession = false` (session/load still answers).
    #[arg(long)]
    pub no_load_session: bool,

    /// Advertise and serve `session/resume` (otherwise it answers -32601).
    #[arg(long)]
    pub session_resume: bool,

    /// Advertise and serve `session/close` (otherwise it answers -32601).
    #[arg(long)]
    pub session_close: bool,

    /// Comma-separated values of the `model` config option; the first is the default.
    #[arg(long, value_delimiter = ',', default_value = "test-small,test-large")]
    pub models: Vec<String>,

    /// Stop reason of every prompt (`!stop:<reason>` in a prompt overrides it for that prompt).
    #[arg(long, default_value = "end_turn")]
    pub stop_reason: StopReasonName,

    /// Refuse a prompt that would bring the session's user text over this many bytes, the way
    /// claude-agent-acp refuses a prompt that does not fit (`-32603` "Internal error: Prompt is
    /// too long"); the refused prompt is not added to the transcript.
    #[arg(long, value_name = "BYTES")]
    pub context_limit_bytes: Option<u64>,

    /// Wait this long before answering each prompt; `session/cancel` interrupts the wait.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub prompt_delay_ms: u64,

    /// Record `session/cancel` in the wire log but otherwise ignore it.
    #[arg(long)]
    pub ignore_cancel: bool,

    /// Wait this long before answering `session/load` (after the replay).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub load_delay_ms: u64,

    /// Answer every `session/load` with this JSON-RPC error code, without replay.
    #[arg(long, allow_negative_numbers = true, value_name = "CODE")]
    pub load_error: Option<i32>,

    /// Exit with status 3 upon receiving the Nth request (1-based), before answering it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub exit_on_request: Option<u64>,

    /// Count only requests of this method towards `--exit-on-request`.
    #[arg(long, value_name = "METHOD", requires = "exit_on_request")]
    pub exit_on_method: Option<String>,

    /// After stdin closes, stay alive until killed instead of exiting (like some real agents).
    #[arg(long)]
    pub ignore_stdin_eof: bool,

    /// Append every received JSON-RPC message to this file as one JSON object per line.
    #[arg(long, value_name = "FILE")]
    pub wire_log: Option<PathBuf>,

    /// Also log every message the agent writes (frames with `"direction": "sent"`), so the whole
    /// exchange can be checked against the ACP schemas (`acp-schema-check`).
    #[arg(long, requires = "wire_log")]
    pub wire_log_sent: bool,

    /// The ACP versions the agent supports. `initialize` is answered with the requested
    /// version if supported, else the latest supported; with v2 negotiated the agent serves the
    /// v2 draft (no `session/load`; `session/resume` with optional `replayFrom`; the v2 prompt
    /// lifecycle).
    #[arg(long, value_enum, default_value_t = Protocol::V1)]
    pub protocol: Protocol,

    /// v2: whether `initialize` includes `capabilities.session` (then `session/list`,
    /// `session/resume` and `session/close` are served, as v2 requires) or leaves it out (then
    /// they are "method not found").
    #[arg(long, value_enum, default_value_t = SessionCapability::Present)]
    pub session_capability: SessionCapability,

    /// v1: advertise and serve `session/list` (`sessionCapabilities.list`).
    #[arg(long)]
    pub session_list: bool,

    /// Deprecated: `v2` is `--protocol v2` (the real v2 layout, protocol version 2, not the
    /// invented v1-numbered layout this flag used to give); `v1` changes nothing.
    #[arg(long, value_enum, hide = true)]
    pub capabilities_layout: Option<CapabilitiesLayout>,

    /// How `session/load` and `session/resume` of a session this agent does not have are
    /// answered: a preset mimicking a real adapter (`codex-acp`, `claude-agent-acp`, `opencode`)
    /// or a JSON object `{"code": N, "message": "...", "data": ...}` (a `data` string
    /// `$SESSION_ID` becomes the requested id). Default: -32002 with `data.sessionId`.
    #[arg(long, value_name = "PRESET|JSON")]
    pub missing_session: Option<MissingSessionAnswer>,

    /// The `agentInfo` name to report (to mimic a real adapter's identity).
    #[arg(long, value_name = "NAME", default_value = "acp-test-agent")]
    pub agent_name: String,

    /// The `agentInfo` version to report.
    #[arg(long, value_name = "VERSION", default_value = env!("CARGO_PKG_VERSION"))]
    pub agent_version: String,

    /// Append `agent <pid>` (and `helper <pid>` with `--spawn-helper`) to this file at startup, so
    /// a test can check which processes outlive their client.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,

    /// Start a long-lived helper process in its own process group, like the native children some
    /// real adapters spawn: a client that kills only the agent's process group misses it.
    #[arg(long)]
    pub spawn_helper: bool,

    /// Internal: run as the helper started by `--spawn-helper` (sleep, then exit).
    #[arg(long, hide = true)]
    pub helper: bool,
}

impl Args {
    /// The supported versions, with the deprecated `--capabilities-layout v2` read as
    /// `--protocol v2`.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        match self.capabilities_layout {
            Some(CapabilitiesLayout::V2) => Protocol::V2,
            _ => self.protocol,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_flags() {
        let args = Args::try_parse_from([
            "acp-test-agent",
            "--state-dir",
            "/s",
            "--models",
            "a,b,c",
            "--stop-reason",
            "max_turn_requests",
            "--load-error",
            "-32000",
            "--exit-on-method",
            "session/prompt",
            "--exit-on-request",
            "2",
        ])
        .unwrap();
        assert_eq!(args.models, ["a", "b", "c"]);
        assert_eq!(args.stop_reason, StopReasonName::MaxTurnRequests);
        assert_eq!(args.load_error, Some(-32000));
        assert_eq!(args.exit_on_request, Some(2));
        assert!(Args::try_parse_from(["x", "--state-dir", "/s", "--exit-on-method", "m"]).is_err());
        assert!(Args::try_parse_from(["x", "--state-dir", "/s", "--stop-reason", "nope"]).is_err());
        assert!(Args::try_parse_from(["x"]).is_err());
    }

    #[test]
    fn mimicry_flags_default_to_the_old_behaviour() {
        let args = Args::try_parse_from(["x", "--state-dir", "/s"]).unwrap();
        assert_eq!(args.protocol(), Protocol::V1);
        assert!(args.missing_session.is_none());
        assert_eq!(args.agent_name, "acp-test-agent");
        let args = Args::try_parse_from([
            "x",
            "--state-dir",
            "/s",
            "--capabilities-layout",
            "v2",
            "--missing-session",
            "opencode",
            "--agent-name",
            "OpenCode",
        ])
        .unwrap();
        assert_eq!(args.protocol(), Protocol::V2);
        assert_eq!(args.missing_session.map(|m| m.code), Some(-32603));
        assert!(
            Args::try_parse_from(["x", "--state-dir", "/s", "--missing-session", "nope"]).is_err()
        );
    }
}
