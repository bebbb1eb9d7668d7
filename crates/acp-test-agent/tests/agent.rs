//! End-to-end tests: the real `acp-test-agent` binary as a subprocess, driven by a real ACP
//! client from the same SDK.
//!
//! Cases, by section:
//! - initialize: capabilities follow `--no-load-session`, `--session-resume`, `--session-close`;
//!   switched-off methods answer -32601.
//! - prompts: replies prove memory (turns, digest, nonces), stream as two chunks plus usage,
//!   per-prompt stop reasons, transcript on disk.
//! - restart and load: a second process replays the history before answering and continues the
//!   turn count; unknown ids and `--load-error`; resume and close.
//! - config options, permission round trip, prompt delay with cancel (and `--ignore-cancel`).
//! - process faults: `--exit-on-request`, stdin EOF with and without `--ignore-stdin-eof`.
//! - wire log: documented fields, and a snapshot of the normalized view.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acp_test_agent::harness::{self, FrameKind, WireFrame};
use acp_test_agent::reply;
use acp_test_agent::transcript::Transcript;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, CloseSessionRequest, ContentBlock, ContentChunk,
    Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PermissionOptionKind, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    ResumeSessionRequest, SelectedPermissionOutcome, SessionConfigKind, SessionConfigOption,
    SessionConfigSelectOptions, SessionId, SessionNotification, SessionUpdate,
    SetSessionConfigOptionRequest, StopReason, TextContent,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, Error, ErrorCode};

const TIMEOUT: Duration = Duration::from_secs(30);
const BIN: &str = env!("CARGO_BIN_EXE_acp-test-agent");
/// A fixed, not necessarily existing, cwd: it travels on the wire, so a temp path would make the
/// recorded byte counts differ between machines.
const PROJECT: &str = "/work/demo-project";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// What the client saw from the agent besides responses.
#[derive(Clone, Default)]
struct Seen {
    updates: Arc<Mutex<Vec<SessionNotification>>>,
    permissions: Arc<Mutex<Vec<RequestPermissionRequest>>>,
}

impl Seen {
    /// Removes and returns every update received so far.
    fn take_updates(&self) -> Vec<SessionNotification> {
        std::mem::take(&mut *self.updates.lock().unwrap())
    }
}

fn agent(state_dir: &Path, extra: &[&str]) -> AcpAgent {
    let state = state_dir.to_str().unwrap().to_owned();
    AcpAgent::new(
        AcpAgentConfig::new(BIN)
            .arg("--state-dir")
            .arg(state)
            .args(extra.iter().copied())
            .env("RUST_LOG", "warn"),
    )
}

/// Runs `body` against a freshly spawned agent, with a client that records every session/update
/// and answers every permission request with `allow`.
async fn with_agent<R>(
    agent: AcpAgent,
    body: impl AsyncFnOnce(ConnectionTo<Agent>, Seen) -> Result<R, Error>,
) -> Result<R, Error> {
    let seen = Seen::default();
    let (updates, permissions) = (seen.updates.clone(), seen.permissions.clone());
    let run = Client
        .v1()
        .name("acp-test-agent-tests")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                updates.lock().unwrap().push(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                permissions.lock().unwrap().push(req);
                responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new("allow")),
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, async move |cx| body(cx, seen).await);
    tokio::time::timeout(TIMEOUT, run)
        .await
        .expect("test scenario timed out")
}

async fn initialize(cx: &ConnectionTo<Agent>) -> Result<InitializeResponse, Error> {
    cx.send_request(
        InitializeRequest::new(ProtocolVersion::V1)
            .client_info(Implementation::new("tests", "0.0.0"))
            .client_capabilities(ClientCapabilities::default()),
    )
    .block_task()
    .await
}

async fn new_session(cx: &ConnectionTo<Agent>) -> Result<NewSessionResponse, Error> {
    let meta =
        serde_json::json!({ "sessionTitle": "demo", "channelId": "c-1", "freshSession": true });
    cx.send_request(NewSessionRequest::new(PROJECT).meta(meta.as_object().unwrap().clone()))
        .block_task()
        .await
}

fn text_prompt(session_id: &SessionId, text: &str) -> PromptRequest {
    PromptRequest::new(
        session_id.clone(),
        vec![ContentBlock::Text(TextContent::new(text))],
    )
}

async fn prompt(
    cx: &ConnectionTo<Agent>,
    session_id: &SessionId,
    text: &str,
) -> Result<PromptResponse, Error> {
    cx.send_request(text_prompt(session_id, text))
        .block_task()
        .await
}

fn chunk_text(chunk: &ContentChunk) -> &str {
    match &chunk.content {
        ContentBlock::Text(text) => &text.text,
        other => panic!("expected a text chunk, got {other:?}"),
    }
}

/// The agent text chunks among `updates`, in order.
fn agent_chunks(updates: &[SessionNotification]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::AgentMessageChunk(c) => Some(chunk_text(c).to_owned()),
            _ => None,
        })
        .collect()
}

/// The fields of a reply, parsed back.
#[derive(Debug)]
struct Reply {
    turns: usize,
    digest: String,
    nonces: String,
    echo: String,
}

fn parse_reply(text: &str) -> Reply {
    let (head, echo) = text
        .split_once(" | echo: ")
        .unwrap_or_else(|| panic!("bad reply {text:?}"));
    let field = |name: &str| {
        head.split(' ')
            .find_map(|kv| kv.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
            .to_owned()
    };
    Reply {
        turns: field("turns=").parse().unwrap(),
        digest: field("digest="),
        nonces: field("nonces="),
        echo: echo.to_owned(),
    }
}

fn select_state(options: &[SessionConfigOption], id: &str) -> (String, Vec<String>) {
    let option = options
        .iter()
        .find(|o| o.id.0.as_ref() == id)
        .unwrap_or_else(|| panic!("no option {id}"));
    let SessionConfigKind::Select(select) = &option.kind else {
        panic!("{id} is not a select")
    };
    let SessionConfigSelectOptions::Ungrouped(values) = &select.options else {
        panic!("grouped")
    };
    (
        select.current_value.0.to_string(),
        values.iter().map(|v| v.value.0.to_string()).collect(),
    )
}

fn error_code(result: Result<impl std::fmt::Debug, Error>) -> (i32, Option<serde_json::Value>) {
    let err = result.expect_err("expected an error response");
    (err.code.value(), err.data)
}

// ---------------------------------------------------------------------------------------------
// initialize
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn initialize_capabilities_follow_flags() {
    let state = tempfile::tempdir().unwrap();
    let cases: [(&[&str], bool, bool, bool); 3] = [
        (&[], true, false, false),
        (&["--no-load-session"], false, false, false),
        (&["--session-resume", "--session-close"], true, true, true),
    ];
    for (flags, load, resume, close) in cases {
        let init = with_agent(agent(state.path(), flags), async |cx, _| {
            initialize(&cx).await
        })
        .await
        .unwrap();
        let caps = &init.agent_capabilities;
        assert_eq!(caps.load_session, load, "{flags:?}");
        assert_eq!(
            caps.session_capabilities.resume.is_some(),
            resume,
            "{flags:?}"
        );
        assert_eq!(
            caps.session_capabilities.close.is_some(),
            close,
            "{flags:?}"
        );
        let info = init.agent_info.unwrap();
        assert_eq!(
            (info.name.as_str(), info.version.as_str()),
            ("acp-test-agent", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(init.protocol_version, ProtocolVersion::V1);
    }
}

#[tokio::test]
async fn resume_and_close_are_method_not_found_unless_enabled() {
    let state = tempfile::tempdir().unwrap();
    with_agent(agent(state.path(), &[]), async |cx, _| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        let resume = cx
            .send_request(ResumeSessionRequest::new(id.clone(), PROJECT))
            .block_task()
            .await;
        assert_eq!(error_code(resume).0, -32601);
        let close = cx
            .send_request(CloseSessionRequest::new(id))
            .block_task()
            .await;
        assert_eq!(error_code(close).0, -32601);
        Ok(())
    })
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// prompts
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn prompts_prove_memory_and_stream_two_chunks_plus_usage() {
    let state = tempfile::tempdir().unwrap();
    let first = "please remember alpha-7301";
    let second = "and bravo-1234 too\nsecond line is echoed";
    let (id, replies) = with_agent(agent(state.path(), &[]), async |cx, seen| {
        initialize(&cx).await?;
        let session = new_session(&cx).await?;
        let options = session.config_options.clone().unwrap();
        assert_eq!(
            select_state(&options, "model"),
            (
                "test-small".into(),
                vec!["test-small".into(), "test-large".into()]
            )
        );
        assert_eq!(
            select_state(&options, "mode"),
            (
                "default".into(),
                ["default", "acceptEdits", "bypassPermissions", "plan"]
                    .map(String::from)
                    .to_vec()
            )
        );
        let id = session.session_id;
        assert!(id.0.starts_with("ts-") && id.0.len() == 19, "{id}");

        let mut replies = Vec::new();
        let mut used = 0;
        for text in [first, second] {
            let response = prompt(&cx, &id, text).await?;
            assert_eq!(response.stop_reason, StopReason::EndTurn);
            let updates = seen.take_updates();
            // Exactly: two agent chunks, then one usage update, all before the response.
            assert_eq!(updates.len(), 3, "{updates:?}");
            assert!(updates.iter().all(|u| u.session_id == id));
            let chunks = agent_chunks(&updates[..2]);
            assert_eq!(chunks.len(), 2);
            assert!(!chunks[0].is_empty() && !chunks[1].is_empty());
            used += text.len() as u64;
            let SessionUpdate::UsageUpdate(usage) = &updates[2].update else {
                panic!("{:?}", updates[2])
            };
            assert_eq!((usage.used, usage.size), (used, 200_000));
            replies.push(chunks.concat());
        }
        Ok((id, replies))
    })
    .await
    .unwrap();

    let (r1, r2) = (parse_reply(&replies[0]), parse_reply(&replies[1]));
    assert_eq!(
        (r1.turns, r1.nonces.as_str(), r1.echo.as_str()),
        (1, "alpha-7301", first)
    );
    assert_eq!(
        (r2.turns, r2.nonces.as_str(), r2.echo.as_str()),
        (2, "alpha-7301,bravo-1234", "second line is echoed")
    );
    assert_ne!(r1.digest, r2.digest);
    assert_eq!(r2.digest, format!("{:08x}", reply::digest([first, second])));

    let transcript = Transcript::read(state.path(), &id.0).unwrap();
    assert_eq!(transcript.cwd, PathBuf::from(PROJECT));
    assert_eq!(transcript.meta.as_ref().unwrap()["sessionTitle"], "demo");
    assert_eq!(transcript.meta.as_ref().unwrap()["freshSession"], true);
    let turns: Vec<(&str, &str)> = transcript
        .turns
        .iter()
        .map(|t| (t.user.as_str(), t.agent.as_str()))
        .collect();
    assert_eq!(
        turns,
        [(first, replies[0].as_str()), (second, replies[1].as_str())]
    );
}

#[tokio::test]
async fn stop_reason_flag_and_per_prompt_override() {
    let state = tempfile::tempdir().unwrap();
    with_agent(
        agent(state.path(), &["--stop-reason", "refusal"]),
        async |cx, _| {
            initialize(&cx).await?;
            let id = new_session(&cx).await?.session_id;
            assert_eq!(
                prompt(&cx, &id, "plain").await?.stop_reason,
                StopReason::Refusal
            );
            assert_eq!(
                prompt(&cx, &id, "x !stop:max_tokens").await?.stop_reason,
                StopReason::MaxTokens
            );
            assert_eq!(
                prompt(&cx, &id, "!stop:max_turn_requests")
                    .await?
                    .stop_reason,
                StopReason::MaxTurnRequests
            );
            assert_eq!(
                prompt(&cx, &id, "!stop:end_turn").await?.stop_reason,
                StopReason::EndTurn
            );
            let unknown = prompt(&cx, &SessionId::new("ts-does-not-exist"), "hi").await;
            let (code, data) = error_code(unknown);
            assert_eq!(code, -32002);
            assert_eq!(data.unwrap()["sessionId"], "ts-does-not-exist");
            Ok(())
        },
    )
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// restart and load
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn restart_then_load_replays_history_and_continues() {
    let state = tempfile::tempdir().unwrap();
    let wire = state.path().join("wire.jsonl");
    let wire_flag = wire.to_str().unwrap();
    let texts = ["remember alpha-7301", "then bravo-1234"];
    let (id, first_replies) = with_agent(
        agent(state.path(), &["--wire-log", wire_flag]),
        async |cx, seen| {
            initialize(&cx).await?;
            let id = new_session(&cx).await?.session_id;
            cx.send_request(SetSessionConfigOptionRequest::new(
                id.clone(),
                "model",
                "test-large",
            ))
            .block_task()
            .await?;
            let mut replies = Vec::new();
            for text in texts {
                prompt(&cx, &id, text).await?;
                replies.push(agent_chunks(&seen.take_updates()).concat());
            }
            Ok((id, replies))
        },
    )
    .await
    .unwrap();

    // A second process on the same state dir (and the same wire log).
    let (replayed, load, third) = with_agent(
        agent(state.path(), &["--wire-log", wire_flag]),
        async |cx, seen| {
            initialize(&cx).await?;
            let load: LoadSessionResponse = cx
                .send_request(LoadSessionRequest::new(id.clone(), PROJECT))
                .block_task()
                .await?;
            // The global handler ran for every replayed update before the response was routed.
            let replayed = seen.take_updates();
            prompt(&cx, &id, "what do you remember?").await?;
            let third = agent_chunks(&seen.take_updates()).concat();
            Ok((replayed, load, third))
        },
    )
    .await
    .unwrap();

    let replay: Vec<(&str, &str)> = replayed
        .iter()
        .map(|n| match &n.update {
            SessionUpdate::UserMessageChunk(c) => ("user", chunk_text(c)),
            SessionUpdate::AgentMessageChunk(c) => ("agent", chunk_text(c)),
            other => panic!("unexpected replay update {other:?}"),
        })
        .collect();
    assert_eq!(
        replay,
        [
            ("user", texts[0]),
            ("agent", first_replies[0].as_str()),
            ("user", texts[1]),
            ("agent", first_replies[1].as_str())
        ]
    );
    assert!(replayed.iter().all(|n| n.session_id == id));
    assert_eq!(
        select_state(&load.config_options.unwrap(), "model").0,
        "test-large"
    );

    let third = parse_reply(&third);
    assert_eq!(third.turns, 3);
    assert_eq!(
        third.nonces, "alpha-7301,bravo-1234",
        "a nonce from turn 1 survived the restart"
    );
    assert_eq!(
        third.digest,
        format!(
            "{:08x}",
            reply::digest([texts[0], texts[1], "what do you remember?"])
        )
    );

    // Both processes appended to the shared wire log.
    let frames = harness::read_wire_log(&wire).unwrap();
    let pids: std::collections::BTreeSet<u32> = frames.iter().map(|f| f.pid).collect();
    assert_eq!(pids.len(), 2);
    assert_eq!(harness::count_method(&frames, "session/load"), 1);
    assert_eq!(harness::prompt_texts(&frames).len(), 3);
}

#[tokio::test]
async fn load_unknown_session_is_resource_not_found() {
    let state = tempfile::tempdir().unwrap();
    with_agent(agent(state.path(), &[]), async |cx, seen| {
        initialize(&cx).await?;
        let load = cx
            .send_request(LoadSessionRequest::new("ts-0000000000000000", PROJECT))
            .block_task()
            .await;
        let (code, data) = error_code(load);
        assert_eq!(code, -32002);
        assert_eq!(data.unwrap()["sessionId"], "ts-0000000000000000");
        assert!(seen.take_updates().is_empty());
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn load_error_flag_answers_that_code_without_replay() {
    let state = tempfile::tempdir().unwrap();
    let id = with_agent(agent(state.path(), &[]), async |cx, _| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        prompt(&cx, &id, "hello").await?;
        Ok(id)
    })
    .await
    .unwrap();
    with_agent(
        agent(state.path(), &["--load-error", "-32000"]),
        async |cx, seen| {
            initialize(&cx).await?;
            let load = cx
                .send_request(LoadSessionRequest::new(id.clone(), PROJECT))
                .block_task()
                .await;
            assert_eq!(error_code(load).0, -32000);
            assert!(
                seen.take_updates().is_empty(),
                "no replay on an injected error"
            );
            Ok(())
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn load_delay_holds_the_response_after_replay() {
    let state = tempfile::tempdir().unwrap();
    let id = with_agent(agent(state.path(), &[]), async |cx, _| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        prompt(&cx, &id, "hello").await?;
        Ok(id)
    })
    .await
    .unwrap();
    with_agent(
        agent(state.path(), &["--load-delay-ms", "400"]),
        async |cx, seen| {
            initialize(&cx).await?;
            let started = Instant::now();
            cx.send_request(LoadSessionRequest::new(id.clone(), PROJECT))
                .block_task()
                .await?;
            assert!(
                started.elapsed() >= Duration::from_millis(400),
                "{:?}",
                started.elapsed()
            );
            assert_eq!(seen.take_updates().len(), 2);
            Ok(())
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn resume_restores_without_replay_and_close_keeps_transcript() {
    let state = tempfile::tempdir().unwrap();
    let flags = ["--session-resume", "--session-close"];
    let id = with_agent(agent(state.path(), &flags), async |cx, _| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        prompt(&cx, &id, "keep charlie-5555").await?;
        Ok(id)
    })
    .await
    .unwrap();
    with_agent(agent(state.path(), &flags), async |cx, seen| {
        initialize(&cx).await?;
        let unknown = cx
            .send_request(ResumeSessionRequest::new("ts-nope", PROJECT))
            .block_task()
            .await;
        assert_eq!(error_code(unknown).0, -32002);
        cx.send_request(ResumeSessionRequest::new(id.clone(), PROJECT))
            .block_task()
            .await?;
        assert!(seen.take_updates().is_empty(), "resume must not replay");
        prompt(&cx, &id, "again").await?;
        let reply = parse_reply(&agent_chunks(&seen.take_updates()).concat());
        assert_eq!((reply.turns, reply.nonces.as_str()), (2, "charlie-5555"));

        cx.send_request(CloseSessionRequest::new(id.clone()))
            .block_task()
            .await?;
        assert_eq!(error_code(prompt(&cx, &id, "closed?").await).0, -32002);
        // The transcript is still on disk: load brings the session back.
        cx.send_request(LoadSessionRequest::new(id.clone(), PROJECT))
            .block_task()
            .await?;
        assert_eq!(seen.take_updates().len(), 4);
        Ok(())
    })
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// config options, permission, cancel
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn set_config_option_valid_and_invalid() {
    let state = tempfile::tempdir().unwrap();
    let id = with_agent(
        agent(state.path(), &["--models", "m-one,m-two,m-three"]),
        async |cx, _| {
            initialize(&cx).await?;
            let session = new_session(&cx).await?;
            let id = session.session_id;
            assert_eq!(
                select_state(&session.config_options.unwrap(), "model").0,
                "m-one"
            );

            let set = |config: &'static str, value: &'static str| {
                cx.send_request(SetSessionConfigOptionRequest::new(
                    id.clone(),
                    config,
                    value,
                ))
                .block_task()
            };
            let updated = set("mode", "plan").await?;
            assert_eq!(select_state(&updated.config_options, "mode").0, "plan");
            let updated = set("model", "m-three").await?;
            assert_eq!(select_state(&updated.config_options, "model").0, "m-three");
            assert_eq!(select_state(&updated.config_options, "mode").0, "plan");

            assert_eq!(error_code(set("model", "gpt-9").await).0, -32602);
            assert_eq!(error_code(set("mode", "yolo").await).0, -32602);
            assert_eq!(error_code(set("temperature", "hot").await).0, -32602);
            Ok(id)
        },
    )
    .await
    .unwrap();
    let transcript = Transcript::read(state.path(), &id.0).unwrap();
    assert_eq!(
        (transcript.model.as_str(), transcript.mode.as_str()),
        ("m-three", "plan")
    );
}

#[tokio::test]
async fn permission_round_trip() {
    let state = tempfile::tempdir().unwrap();
    with_agent(agent(state.path(), &[]), async |cx, seen| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        assert_eq!(
            prompt(&cx, &id, "do it !perm").await?.stop_reason,
            StopReason::EndTurn
        );
        let reply = agent_chunks(&seen.take_updates()).concat();
        assert!(reply.ends_with(" permission=allow"), "{reply}");

        let requests = std::mem::take(&mut *seen.permissions.lock().unwrap());
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].session_id, id);
        let options: Vec<(String, PermissionOptionKind)> = requests[0]
            .options
            .iter()
            .map(|o| (o.option_id.to_string(), o.kind))
            .collect();
        assert_eq!(
            options,
            [
                ("allow".into(), PermissionOptionKind::AllowOnce),
                ("reject".into(), PermissionOptionKind::RejectOnce)
            ]
        );

        prompt(&cx, &id, "no permission needed").await?;
        assert!(seen.permissions.lock().unwrap().is_empty());
        Ok(())
    })
    .await
    .unwrap();
}

/// Waits until the agent has received a `method` frame (its wire log records every frame it
/// reads as it reads it): the event, not a guess at how long delivery takes.
async fn received(wire: &Path, method: &str) {
    loop {
        let frames = harness::read_wire_log(wire).unwrap_or_default();
        if frames.iter().any(|f| f.method.as_deref() == Some(method)) {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn cancel_during_prompt_delay_answers_cancelled() {
    let state = tempfile::tempdir().unwrap();
    let wire = state.path().join("wire.jsonl");
    let flags = [
        "--prompt-delay-ms",
        "600000",
        "--wire-log",
        wire.to_str().unwrap(),
    ];
    let id = with_agent(agent(state.path(), &flags), async |cx, seen| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        let pending = cx.send_request(text_prompt(&id, "slow delta-4242"));
        received(&wire, "session/prompt").await;
        cx.send_notification(CancelNotification::new(id.clone()))?;
        // Answered at all: with a ten-minute delay, only the cancel can end the prompt.
        let response = pending.block_task().await?;
        assert_eq!(response.stop_reason, StopReason::Cancelled);
        assert!(agent_chunks(&seen.take_updates()).is_empty());
        Ok(id)
    })
    .await
    .unwrap();
    let transcript = Transcript::read(state.path(), &id.0).unwrap();
    assert_eq!(transcript.turns.len(), 1);
    assert_eq!(
        (
            transcript.turns[0].user.as_str(),
            transcript.turns[0].agent.as_str()
        ),
        ("slow delta-4242", "")
    );
}

#[tokio::test]
async fn ignore_cancel_logs_the_cancel_and_answers_normally() {
    let state = tempfile::tempdir().unwrap();
    let wire = state.path().join("wire.jsonl");
    let flags = [
        "--prompt-delay-ms",
        "600",
        "--ignore-cancel",
        "--wire-log",
        wire.to_str().unwrap(),
    ];
    with_agent(agent(state.path(), &flags), async |cx, seen| {
        initialize(&cx).await?;
        let id = new_session(&cx).await?.session_id;
        let pending = cx.send_request(text_prompt(&id, "slow"));
        received(&wire, "session/prompt").await;
        cx.send_notification(CancelNotification::new(id.clone()))?;
        assert_eq!(pending.block_task().await?.stop_reason, StopReason::EndTurn);
        assert_eq!(
            parse_reply(&agent_chunks(&seen.take_updates()).concat()).turns,
            1
        );
        Ok(())
    })
    .await
    .unwrap();
    let frames = harness::read_wire_log(&wire).unwrap();
    let cancels: Vec<&WireFrame> = frames
        .iter()
        .filter(|f| f.method.as_deref() == Some("session/cancel"))
        .collect();
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].kind, FrameKind::Notification);
}

// ---------------------------------------------------------------------------------------------
// process faults
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn exit_on_request_ends_the_connection() {
    let state = tempfile::tempdir().unwrap();
    let wire = state.path().join("wire.jsonl");
    let flags = [
        "--exit-on-method",
        "session/prompt",
        "--exit-on-request",
        "2",
        "--wire-log",
        wire.to_str().unwrap(),
    ];
    let second = Arc::new(Mutex::new(None));
    let outcome = with_agent(agent(state.path(), &flags), {
        let second = second.clone();
        async move |cx: ConnectionTo<Agent>, _| {
            initialize(&cx).await?;
            let id = new_session(&cx).await?.session_id;
            prompt(&cx, &id, "first is fine").await?;
            let result = prompt(&cx, &id, "second kills the agent").await;
            *second.lock().unwrap() = Some(result.is_ok());
            result.map(drop)
        }
    })
    .await;
    assert!(
        outcome.is_err(),
        "the client must see the agent die: {outcome:?}"
    );
    assert_ne!(
        *second.lock().unwrap(),
        Some(true),
        "the second prompt must not be answered"
    );
    // The fatal request was logged before the exit.
    let frames = harness::read_wire_log(&wire).unwrap();
    assert_eq!(
        harness::prompt_texts(&frames).last().unwrap().1,
        "second kills the agent"
    );
}

/// Spawns the binary with piped stdin and no client, for exit-status tests.
fn spawn_raw(state_dir: &Path, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(BIN)
        .arg("--state-dir")
        .arg(state_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    deadline: Duration,
) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn exit_on_request_exits_with_status_3() {
    use std::io::Write;
    let state = tempfile::tempdir().unwrap();
    let mut child = spawn_raw(state.path(), &["--exit-on-request", "1"]);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .unwrap();
    let status =
        wait_with_deadline(&mut child, Duration::from_secs(10)).expect("agent did not exit");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn stdin_eof_exits_unless_ignored() {
    let state = tempfile::tempdir().unwrap();
    let mut plain = spawn_raw(state.path(), &[]);
    drop(plain.stdin.take());
    let status =
        wait_with_deadline(&mut plain, Duration::from_secs(10)).expect("agent ignored EOF");
    assert!(status.success(), "{status}");

    let mut stubborn = spawn_raw(state.path(), &["--ignore-stdin-eof"]);
    drop(stubborn.stdin.take());
    assert!(
        wait_with_deadline(&mut stubborn, Duration::from_millis(1500)).is_none(),
        "agent exited on EOF"
    );
    stubborn.kill().unwrap();
    stubborn.wait().unwrap();
}

// ---------------------------------------------------------------------------------------------
// wire log
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn wire_log_has_documented_fields_and_a_stable_normalized_view() {
    let state = tempfile::tempdir().unwrap();
    let wire = state.path().join("wire.jsonl");
    with_agent(
        agent(state.path(), &["--wire-log", wire.to_str().unwrap()]),
        async |cx, _| {
            initialize(&cx).await?;
            let id = new_session(&cx).await?.session_id;
            prompt(&cx, &id, "hello alpha-7301").await?;
            cx.send_request(SetSessionConfigOptionRequest::new(
                id.clone(),
                "mode",
                "plan",
            ))
            .block_task()
            .await?;
            prompt(&cx, &id, &format!("check {PROJECT}/src !perm")).await?;
            cx.send_notification(CancelNotification::new(id.clone()))?;
            // A last request makes sure the cancel notification was read before the agent stops.
            let unknown = cx
                .send_request(LoadSessionRequest::new("ts-ffffffffffffffff", PROJECT))
                .block_task()
                .await;
            assert_eq!(unknown.unwrap_err().code, ErrorCode::RESOURCE_NOT_FOUND);
            Ok(())
        },
    )
    .await
    .unwrap();

    let raw = std::fs::read_to_string(&wire).unwrap();
    for line in raw.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["bytes", "id", "kind", "method", "params", "pid", "ts_ms"],
            "{line}"
        );
        assert!(value["ts_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert!(value["bytes"].as_u64().unwrap() > 0);
    }
    let frames = harness::read_wire_log(&wire).unwrap();
    assert_eq!(
        harness::methods(&frames),
        [
            "initialize",
            "session/new",
            "session/prompt",
            "session/set_config_option",
            "session/prompt",
            "session/cancel",
            "session/load",
        ]
    );
    let response = frames
        .iter()
        .find(|f| f.kind == FrameKind::Response)
        .unwrap();
    assert_eq!(response.method, None);
    assert_eq!(response.params["outcome"]["optionId"], "allow");
    assert!(
        frames
            .iter()
            .filter(|f| f.kind == FrameKind::Request)
            .all(|f| f.id.is_some())
    );
    assert_eq!(harness::requests_of(&frames, "session/prompt").len(), 2);

    let view = harness::normalize_wire_log(&frames, &[(Path::new(PROJECT), "<project>")]);
    insta::assert_json_snapshot!("normalized_wire_log", view);
}

#[test]
fn bin_path_finds_this_crates_binary() {
    assert_eq!(harness::test_agent_bin(), PathBuf::from(BIN));
}
