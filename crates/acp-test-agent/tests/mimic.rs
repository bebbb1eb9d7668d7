//! The mimicry flags over real stdio: `--missing-session` answers load and resume of an unknown
//! session like a chosen real adapter, `--agent-name` changes the identity. Without the flags
//! nothing changes. (The v2 protocol is tested by acp-schema-check's `test_agent` tests, which
//! also check every frame against the schema.)

use std::path::Path;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, Implementation, InitializeRequest, LoadSessionRequest, NewSessionRequest,
    ResumeSessionRequest,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, Error, UntypedMessage};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);
const BIN: &str = env!("CARGO_BIN_EXE_acp-test-agent");
const PROJECT: &str = "/work/demo-project";

fn agent(state_dir: &Path, extra: &[&str]) -> AcpAgent {
    AcpAgent::new(
        AcpAgentConfig::new(BIN)
            .arg("--state-dir")
            .arg(state_dir.to_str().unwrap_or_default())
            .args(extra.iter().copied())
            .env("RUST_LOG", "warn"),
    )
}

async fn with_agent<R>(
    agent: AcpAgent,
    body: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<R, Error>,
) -> Result<R, Error> {
    let run = Client
        .v1()
        .name("mimic-tests")
        .connect_with(agent, async move |cx| body(cx).await);
    tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("test scenario timed out")
}

/// `initialize` as raw JSON, so either layout can be inspected.
async fn raw_initialize(cx: &ConnectionTo<Agent>) -> Result<Value, Error> {
    let request = InitializeRequest::new(ProtocolVersion::V1)
        .client_info(Implementation::new("tests", "0.0.0"))
        .client_capabilities(ClientCapabilities::default());
    cx.send_request(UntypedMessage::new("initialize", request)?)
        .block_task()
        .await
}

fn error_of<T: std::fmt::Debug>(result: Result<T, Error>) -> (i32, String, Option<Value>) {
    let err = result.expect_err("expected an error response");
    (err.code.value(), err.message, err.data)
}

#[tokio::test]
async fn v1_layout_is_unchanged_by_default() {
    let state = tempfile::tempdir().unwrap();
    let init = with_agent(
        agent(
            state.path(),
            &["--agent-name", "OpenCode", "--agent-version", "1.18.33"],
        ),
        async |cx| raw_initialize(&cx).await,
    )
    .await
    .unwrap();
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentInfo"]["name"], "OpenCode");
    assert_eq!(init["agentInfo"]["version"], "1.18.33");
    assert!(init.get("capabilities").is_none());
}

#[tokio::test]
async fn missing_session_answers_mimic_each_adapter_on_load_and_resume() {
    let state = tempfile::tempdir().unwrap();
    let cases: [(&str, i32, &str, Option<Value>); 4] = [
        ("codex-acp", -32002, "Resource not found", None),
        (
            "claude-agent-acp",
            -32002,
            "Resource not found",
            Some(json!({"sessionId": "gone-1234"})),
        ),
        (
            "opencode",
            -32603,
            "Internal error: OpenCode service failure",
            Some(json!({"service": "session"})),
        ),
        (
            r#"{"code": -32602, "message": "Invalid params", "data": {"error": "$SESSION_ID"}}"#,
            -32602,
            "Invalid params",
            Some(json!({"error": "gone-1234"})),
        ),
    ];
    for (answer, code, message, data) in cases {
        let flags = ["--session-resume", "--missing-session", answer];
        let (load, resume, known) = with_agent(agent(state.path(), &flags), async |cx| {
            raw_initialize(&cx).await?;
            let load = cx
                .send_request(LoadSessionRequest::new("gone-1234", PROJECT))
                .block_task()
                .await;
            let resume = cx
                .send_request(ResumeSessionRequest::new("gone-1234", PROJECT))
                .block_task()
                .await;
            // A session the agent does have still loads.
            let id = cx
                .send_request(NewSessionRequest::new(PROJECT))
                .block_task()
                .await?
                .session_id;
            let known = cx
                .send_request(LoadSessionRequest::new(id, PROJECT))
                .block_task()
                .await;
            Ok((load, resume, known))
        })
        .await
        .unwrap();
        let expected = (code, message.to_owned(), data.clone());
        assert_eq!(error_of(load), expected, "{answer}");
        assert_eq!(error_of(resume), expected, "{answer}");
        assert!(known.is_ok(), "{answer}: {known:?}");
    }
}
