//! The ACP agent: handler registration and the prompt task.
//!
//! Handlers run inside the SDK's dispatch loop, so each one does only short synchronous work
//! (through [`Sessions`]) and moves anything that waits (prompt delay, permission round trip, load
//! delay) into a `cx.spawn`ed task. That keeps `session/cancel` and other sessions' requests
//! flowing while a prompt is pending.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest,
    ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities, SessionId,
    SessionListCapabilities, SessionNotification, SessionResumeCapabilities, SessionUpdate,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, StopReason, TextContent,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, LineDirection, Lines, Stdio};
use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use futures::{SinkExt, StreamExt};

use crate::cli::Args;
use crate::error::AgentError;
use crate::mimic::MissingSessionAnswer;
use crate::processes;
use crate::protocol::{self, Front, Protocol};
use crate::reply::{self, StopReasonName};
use crate::sessions::{SessionError, Sessions, TurnTicket};
use crate::transcript::Transcript;
use crate::wire::WireTap;

/// The context window reported as `size` in `usage_update`; `used` counts user-text bytes, so any
/// realistic test stays far below it.
const CONTEXT_SIZE: u64 = 200_000;

/// Prompt text that makes the agent ask the client for permission before replying.
const PERMISSION_TRIGGER: &str = "!perm";

/// The behaviour switches the handlers need, copied out of [`Args`] once.
#[derive(Debug)]
struct Settings {
    /// Advertised as `agentCapabilities.loadSession` (load is served either way, so a client
    /// that ignores the capability can be caught).
    load_session: bool,
    /// Advertise and serve `session/resume`.
    session_resume: bool,
    /// Advertise and serve `session/close`.
    session_close: bool,
    /// Stop reason of prompts without a `!stop:` token.
    stop_reason: StopReasonName,
    /// `--context-limit-bytes`.
    context_limit: Option<u64>,
    /// Wait before answering each prompt (cancellable).
    prompt_delay: Duration,
    /// Leave `session/cancel` without effect (it still shows in the wire log).
    ignore_cancel: bool,
    /// Wait between the load replay and the load response.
    load_delay: Duration,
    /// Answer every load with this error code instead.
    load_error: Option<i32>,
    /// Advertise and serve `session/list` (v1 `sessionCapabilities.list`).
    session_list: bool,
    /// The v2 front of this connection, when the agent supports v2 (`--protocol v2|both`).
    front: Option<Arc<Front>>,
    /// The answer to load/resume of an unknown session (`None`: -32002 with `data.sessionId`).
    missing_session: Option<MissingSessionAnswer>,
    /// `agentInfo` name.
    agent_name: String,
    /// `agentInfo` version.
    agent_version: String,
    /// Where `!gate:<name>` looks for the file `<name>` that releases a held prompt.
    gates_dir: PathBuf,
}

/// How often a held prompt looks for its gate file.
const GATE_POLL: Duration = Duration::from_millis(10);

impl From<&Args> for Settings {
    fn from(args: &Args) -> Self {
        Self {
            load_session: !args.no_load_session,
            context_limit: args.context_limit_bytes,
            session_resume: args.session_resume,
            session_close: args.session_close,
            stop_reason: args.stop_reason,
            prompt_delay: Duration::from_millis(args.prompt_delay_ms),
            ignore_cancel: args.ignore_cancel,
            load_delay: Duration::from_millis(args.load_delay_ms),
            load_error: args.load_error,
            session_list: args.session_list,
            front: None,
            missing_session: args.missing_session.clone(),
            agent_name: args.agent_name.clone(),
            agent_version: args.agent_version.clone(),
            gates_dir: args.state_dir.join("gates"),
        }
    }
}

/// Serves ACP v1 on this process's stdin/stdout until stdin closes (or forever, with
/// `--ignore-stdin-eof`).
///
/// # Errors
///
/// Invalid flags, an unusable state dir or wire log, or a failed connection.
pub async fn run(args: Args) -> Result<(), AgentError> {
    if args.helper {
        processes::run_helper().await;
        return Ok(());
    }
    let (settings, sessions) = prepare(&args)?;
    let tap = WireTap::new(
        args.wire_log.as_deref(),
        args.exit_on_request,
        args.exit_on_method.clone(),
    )?
    .logging_sent(args.wire_log_sent);
    if let Some(pid_file) = &args.pid_file {
        processes::record_pid(pid_file, "agent", std::process::id())?;
    }
    if args.spawn_helper {
        let helper = processes::spawn_helper(&args.state_dir)?;
        tracing::info!(helper, "started a helper in its own process group");
        if let Some(pid_file) = &args.pid_file {
            processes::record_pid(pid_file, "helper", helper)?;
        }
    }
    tracing::info!(pid = std::process::id(), state_dir = %args.state_dir.display(), "serving ACP on stdio");

    match settings.front.clone() {
        None => {
            let transport = Stdio::new().with_debug(move |line, direction| match direction {
                LineDirection::Stdin => tap.on_received_line(line),
                LineDirection::Stdout => tap.on_sent_line(line),
                LineDirection::Stderr => {}
            });
            serve(settings, sessions, transport).await?;
        }
        Some(front) => {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let client_in = futures::stream::unfold(stdin, |mut lines| async move {
                match lines.next_line().await {
                    Ok(Some(line)) => Some((line, lines)),
                    _ => None,
                }
            });
            let (client_out, mut to_stdout) = mpsc::unbounded::<String>();
            let tap = Arc::new(tap);
            let writer_tap = Arc::clone(&tap);
            let writer = tokio::spawn(async move {
                let mut stdout = tokio::io::stdout();
                while let Some(line) = to_stdout.next().await {
                    writer_tap.on_sent_line(&line);
                    let written = stdout.write_all(format!("{line}\n").as_bytes()).await;
                    if written.and(stdout.flush().await).is_err() {
                        break;
                    }
                }
            });
            let transport = fronted(front, tap, client_in, client_out);
            serve(settings, sessions, transport).await?;
            let _ = writer.await;
        }
    }

    if args.ignore_stdin_eof {
        tracing::info!("stdin closed; --ignore-stdin-eof: staying alive until killed");
        std::future::pending::<()>().await;
    }
    tracing::info!("stdin closed; exiting");
    Ok(())
}

/// The client's ends of an in-process agent's line channels: JSON-RPC lines for the agent, and
/// the agent's lines.
pub type InProcessLines = (UnboundedSender<String>, UnboundedReceiver<String>);

/// Serves ACP v1 inside the caller's process, on the current tokio runtime, over in-memory line
/// channels: for clients tested on tokio's paused clock, where a child process could not follow
/// the clock. Behaves like [`run`] (same flags, same transcripts and wire log, whose frames
/// carry `instance` as their pid). The agent stops when the returned sender is dropped.
///
/// # Errors
///
/// As for [`run`]; and `--exit-on-request` / `--ignore-stdin-eof` are refused, since there is
/// no process of the agent's own to exit or keep alive.
pub fn serve_in_process(args: &Args, instance: u32) -> Result<InProcessLines, AgentError> {
    if args.exit_on_request.is_some() || args.ignore_stdin_eof || args.spawn_helper {
        return Err(AgentError::InProcess(
            "--exit-on-request, --ignore-stdin-eof and --spawn-helper need an agent process",
        ));
    }
    let (settings, sessions) = prepare(args)?;
    let tap = Arc::new(
        WireTap::in_process(args.wire_log.as_deref(), instance)?.logging_sent(args.wire_log_sent),
    );
    let (to_agent, from_client) = mpsc::unbounded::<String>();
    let (to_client, from_agent) = mpsc::unbounded::<String>();
    match settings.front.clone() {
        None => {
            let sent_tap = Arc::clone(&tap);
            let incoming = from_client.map(move |line| {
                tap.on_received_line(&line);
                Ok(line)
            });
            let outgoing =
                to_client
                    .sink_map_err(std::io::Error::other)
                    .with(move |line: String| {
                        sent_tap.on_sent_line(&line);
                        futures::future::ready(Ok::<_, std::io::Error>(line))
                    });
            spawn_serve(settings, sessions, Lines::new(outgoing, incoming), instance);
        }
        Some(front) => {
            let (client_out, mut to_client_lines) = mpsc::unbounded::<String>();
            let writer_tap = Arc::clone(&tap);
            tokio::spawn(async move {
                while let Some(line) = to_client_lines.next().await {
                    writer_tap.on_sent_line(&line);
                    if to_client.unbounded_send(line).is_err() {
                        break;
                    }
                }
            });
            let transport = fronted(front, tap, from_client, client_out);
            spawn_serve(settings, sessions, transport, instance);
        }
    }
    Ok((to_agent, from_agent))
}

/// Serves an in-process agent connection in the background.
fn spawn_serve(
    settings: Arc<Settings>,
    sessions: Sessions,
    transport: impl ConnectTo<Agent> + 'static,
    instance: u32,
) {
    tokio::spawn(async move {
        if let Err(e) = serve(settings, sessions, transport).await {
            tracing::debug!(instance, error = %e, "in-process agent connection ended");
        }
    });
}

/// The transport the v1 agent serves on behind the v2 front.
type FrontedLines = Lines<
    Box<dyn futures::Sink<String, Error = std::io::Error> + Send + Unpin>,
    futures::stream::BoxStream<'static, std::io::Result<String>>,
>;

/// Runs the v2 front between the client's lines and the v1 agent: every client line is logged
/// (as received, untranslated), routed by [`Front::from_client`], and every agent line is
/// rewritten by [`Front::from_agent`] before it goes to `client_out` (whose writer logs it as
/// sent). Returns the transport the v1 agent serves on.
fn fronted(
    front: Arc<Front>,
    tap: Arc<WireTap>,
    client_in: impl futures::Stream<Item = String> + Send + 'static,
    client_out: UnboundedSender<String>,
) -> FrontedLines {
    let (to_inner, inner_in) = mpsc::unbounded::<String>();
    let (inner_out, mut from_inner) = mpsc::unbounded::<String>();
    let inbound_front = Arc::clone(&front);
    let inbound_out = client_out.clone();
    tokio::spawn(async move {
        let mut client_in = std::pin::pin!(client_in);
        while let Some(line) = client_in.next().await {
            tap.on_received_line(&line);
            let routes = inbound_front.from_client(line);
            let wait = Front::initializes_inner(&routes);
            for route in routes {
                let sent = match route {
                    protocol::Route::Agent(line) => to_inner.unbounded_send(line).is_ok(),
                    protocol::Route::Client(line) => inbound_out.unbounded_send(line).is_ok(),
                };
                if !sent {
                    return;
                }
            }
            if wait {
                inbound_front.inner_initialized().await;
            }
        }
    });
    tokio::spawn(async move {
        while let Some(line) = from_inner.next().await {
            for line in front.from_agent(line) {
                if client_out.unbounded_send(line).is_err() {
                    return;
                }
            }
        }
    });
    let sink: Box<dyn futures::Sink<String, Error = std::io::Error> + Send + Unpin> =
        Box::new(inner_out.sink_map_err(std::io::Error::other));
    Lines::new(sink, inner_in.map(Ok).boxed())
}

/// What [`run`] and [`serve_in_process`] share: the validated settings and the session store.
fn prepare(args: &Args) -> Result<(Arc<Settings>, Sessions), AgentError> {
    let models: Vec<String> = args
        .models
        .iter()
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if models.is_empty() {
        return Err(AgentError::NoModels);
    }
    let sessions_dir = Transcript::dir(&args.state_dir);
    std::fs::create_dir_all(&sessions_dir).map_err(|source| AgentError::StateDir {
        path: sessions_dir,
        source,
    })?;
    let mut settings = Settings::from(args);
    if args.protocol() != Protocol::V1 {
        settings.front = Some(Arc::new(Front::new(
            args.protocol(),
            args.session_capability,
            &args.agent_name,
            &args.agent_version,
        )));
    }
    Ok((
        Arc::new(settings),
        Sessions::new(args.state_dir.clone(), models),
    ))
}

/// Registers every handler and runs the connection until the client goes away.
async fn serve(
    settings: Arc<Settings>,
    sessions: Sessions,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), Error> {
    let init_settings = Arc::clone(&settings);
    let (list_settings, list_sessions) = (Arc::clone(&settings), sessions.clone());
    let new_sessions = sessions.clone();
    let config_sessions = sessions.clone();
    let (prompt_settings, prompt_sessions) = (Arc::clone(&settings), sessions.clone());
    let (cancel_settings, cancel_sessions) = (Arc::clone(&settings), sessions.clone());
    let (load_settings, load_sessions) = (Arc::clone(&settings), sessions.clone());
    let (resume_settings, resume_sessions) = (Arc::clone(&settings), sessions.clone());
    let (close_settings, close_sessions) = (settings, sessions);

    Agent
        .v1()
        .name("acp-test-agent")
        .on_receive_request(
            async move |_req: InitializeRequest, responder, _cx| {
                responder.respond(initialize_response(&init_settings))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| {
                let mcp_servers = serde_json::to_value(&req.mcp_servers)
                    .unwrap_or_else(|_| serde_json::Value::Array(Vec::new()));
                let meta = req.meta.map(serde_json::Value::Object);
                match new_sessions.create(req.cwd, mcp_servers, meta) {
                    Ok((id, options)) => {
                        tracing::info!(session = %id, "session/new");
                        responder.respond(NewSessionResponse::new(id).config_options(options))
                    }
                    Err(e) => responder.respond_with_error(e.into()),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionConfigOptionRequest, responder, _cx| {
                match config_sessions.set_config(&req.session_id.0, &req.config_id.0, &req.value) {
                    Ok(options) => responder.respond(SetSessionConfigOptionResponse::new(options)),
                    Err(e) => responder.respond_with_error(e.into()),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx: ConnectionTo<Client>| {
                let user_text = prompt_text(&req.prompt);
                let limit = prompt_settings.context_limit;
                let ticket = match prompt_sessions.begin_turn(&req.session_id.0, user_text.clone(), limit) {
                    Ok(ticket) => ticket,
                    Err(e) => return responder.respond_with_error(e.into()),
                };
                let stop = reply::stop_override(&user_text).unwrap_or(prompt_settings.stop_reason);
                let turn = PromptTurn {
                    cx: cx.clone(),
                    sessions: prompt_sessions.clone(),
                    settings: Arc::clone(&prompt_settings),
                    session_id: req.session_id,
                    user_text,
                    stop,
                };
                cx.spawn(turn.run(ticket, responder))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx| {
                if cancel_settings.ignore_cancel {
                    tracing::info!(session = %note.session_id, "session/cancel ignored (--ignore-cancel)");
                } else {
                    let stopped = cancel_sessions.cancel(&note.session_id.0);
                    tracing::info!(session = %note.session_id, stopped, "session/cancel");
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                if let Some(code) = load_settings.load_error {
                    return responder.respond_with_error(
                        Error::new(code, "injected session/load failure (--load-error)")
                            .data(serde_json::json!({ "sessionId": req.session_id })),
                    );
                }
                let transcript = match load_sessions.restore(&req.session_id.0) {
                    Ok(transcript) => transcript,
                    Err(e) => {
                        return responder
                            .respond_with_error(restore_error(&load_settings, &req.session_id, e));
                    }
                };
                // The replay must reach the client before the response: it is queued first on the
                // same outgoing channel, even when the response itself is delayed below.
                for (index, turn) in transcript.turns.iter().enumerate() {
                    cx.send_notification(chunk(&req.session_id, Role::User, &turn.user, index))?;
                    cx.send_notification(chunk(&req.session_id, Role::Agent, &turn.agent, index))?;
                }
                tracing::info!(session = %req.session_id, turns = transcript.turns.len(), "session/load replayed");
                let response = LoadSessionResponse::new()
                    .config_options(load_sessions.config_options(&transcript));
                let delay = load_settings.load_delay;
                if delay.is_zero() {
                    responder.respond(response)
                } else {
                    cx.spawn(async move {
                        tokio::time::sleep(delay).await;
                        responder.respond(response)
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest, responder, _cx| {
                if !resume_settings.serves_resume() {
                    return responder.respond_with_error(method_not_found("session/resume"));
                }
                match resume_sessions.restore(&req.session_id.0) {
                    Ok(transcript) => responder.respond(
                        ResumeSessionResponse::new()
                            .config_options(resume_sessions.config_options(&transcript)),
                    ),
                    Err(e) => responder.respond_with_error(restore_error(
                        &resume_settings,
                        &req.session_id,
                        e,
                    )),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest, responder, _cx| {
                if !close_settings.serves_close() {
                    return responder.respond_with_error(method_not_found("session/close"));
                }
                match close_sessions.close(&req.session_id.0) {
                    Ok(()) => responder.respond(CloseSessionResponse::new()),
                    Err(e) => responder.respond_with_error(e.into()),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest, responder, _cx| {
                if !list_settings.serves_list() {
                    return responder.respond_with_error(method_not_found("session/list"));
                }
                match list_sessions.list(req.cwd.as_deref()) {
                    Ok(sessions) => responder.respond(ListSessionsResponse::new(sessions)),
                    Err(e) => responder.respond_with_error(e.into()),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await
}

impl Settings {
    /// Whether v2 was negotiated (the front then decides which methods exist).
    fn v2(&self) -> bool {
        self.front.as_ref().is_some_and(|front| front.is_v2())
    }

    /// `session/resume` is served: advertised in v1, required with the v2 session surface.
    fn serves_resume(&self) -> bool {
        self.session_resume || self.v2()
    }

    /// `session/close` is served.
    fn serves_close(&self) -> bool {
        self.session_close || self.v2()
    }

    /// `session/list` is served.
    fn serves_list(&self) -> bool {
        self.session_list || self.v2()
    }
}

/// The error for a failed restore: the `--missing-session` answer when the session is unknown,
/// the default conversion otherwise.
fn restore_error(settings: &Settings, session_id: &SessionId, e: SessionError) -> Error {
    match (&settings.missing_session, e) {
        (Some(answer), SessionError::NotFound(_)) => {
            tracing::info!(session = %session_id, answer = %answer, "unknown session: mimicked answer");
            answer.to_error(&session_id.0)
        }
        (_, e) => e.into(),
    }
}

/// The `initialize` answer: capabilities follow the flags so clients' capability checks can be
/// tested both ways.
fn initialize_response(settings: &Settings) -> InitializeResponse {
    let mut session_capabilities = SessionCapabilities::new();
    if settings.session_resume {
        session_capabilities = session_capabilities.resume(SessionResumeCapabilities::new());
    }
    if settings.session_close {
        session_capabilities = session_capabilities.close(SessionCloseCapabilities::new());
    }
    if settings.session_list {
        session_capabilities = session_capabilities.list(SessionListCapabilities::new());
    }
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(settings.load_session)
                .session_capabilities(session_capabilities),
        )
        .agent_info(Implementation::new(
            settings.agent_name.clone(),
            settings.agent_version.clone(),
        ))
}

/// -32601 for a method that exists in the protocol but is switched off by a flag.
fn method_not_found(method: &str) -> Error {
    Error::method_not_found().data(serde_json::json!({ "method": method }))
}

/// The prompt's text blocks joined with `\n`; other block kinds carry no text to remember.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Who a replayed or streamed message chunk belongs to.
#[derive(Debug, Clone, Copy)]
enum Role {
    User,
    Agent,
}

/// A `session/update` carrying one text chunk of transcript turn `turn` (named in `_meta`, for
/// the v2 front's message ids).
fn chunk(session_id: &SessionId, role: Role, text: &str, turn: usize) -> SessionNotification {
    let content =
        ContentChunk::new(ContentBlock::Text(TextContent::new(text))).meta(turn_meta(turn));
    let update = match role {
        Role::User => SessionUpdate::UserMessageChunk(content),
        Role::Agent => SessionUpdate::AgentMessageChunk(content),
    };
    SessionNotification::new(session_id.clone(), update)
}

/// `_meta` naming a transcript turn ([`protocol::TURN_META`]).
fn turn_meta(turn: usize) -> serde_json::Map<String, serde_json::Value> {
    let mut meta = serde_json::Map::new();
    meta.insert(protocol::TURN_META.into(), turn.into());
    meta
}

fn stop_reason(name: StopReasonName) -> StopReason {
    match name {
        StopReasonName::EndTurn => StopReason::EndTurn,
        StopReasonName::MaxTokens => StopReason::MaxTokens,
        StopReasonName::MaxTurnRequests => StopReason::MaxTurnRequests,
        StopReasonName::Refusal => StopReason::Refusal,
    }
}

/// Everything the spawned part of a prompt needs.
struct PromptTurn {
    /// To stream updates and ask for permission from outside the dispatch loop.
    cx: ConnectionTo<Client>,
    /// To record the reply (or the cancellation) before answering.
    sessions: Sessions,
    /// Delay and cancel behaviour.
    settings: Arc<Settings>,
    /// The session the prompt belongs to.
    session_id: SessionId,
    /// This turn's user text, also used to find the turn again when finishing it.
    user_text: String,
    /// The stop reason to answer with when not cancelled.
    stop: StopReasonName,
}

impl PromptTurn {
    /// Waits (delay, gate, permission), then persists and streams the reply and answers the prompt; or
    /// answers `cancelled` as soon as the session is cancelled during the wait.
    async fn run(
        self,
        ticket: TurnTicket,
        responder: Responder<PromptResponse>,
    ) -> Result<(), Error> {
        let TurnTicket {
            seq,
            index,
            user_texts,
            used_bytes,
            cancelled,
        } = ticket;
        let work = async {
            let delay =
                reply::delay_override(&self.user_text).unwrap_or(self.settings.prompt_delay);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let Some(gate) = reply::gate_override(&self.user_text) {
                let path = self.settings.gates_dir.join(gate);
                tracing::info!(gate = %path.display(), "prompt held until the gate file exists");
                while !path.exists() {
                    tokio::time::sleep(GATE_POLL).await;
                }
            }
            if self.user_text.contains(PERMISSION_TRIGGER) {
                Some(self.ask_permission(index).await)
            } else {
                None
            }
        };
        // A dropped trigger (never fired) must not count as a cancel: only an explicit signal does.
        let cancel = async {
            if cancelled.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let outcome = tokio::select! {
            biased;
            () = cancel => None,
            permission = work => Some(permission),
        };
        let sid = &self.session_id.0;

        let Some(permission) = outcome else {
            tracing::info!(session = %sid, "prompt cancelled");
            if let Err(e) =
                self.sessions
                    .finish_turn(sid, seq, index, &self.user_text, String::new())
            {
                return responder.respond_with_error(e.into());
            }
            return responder
                .respond(PromptResponse::new(StopReason::Cancelled).meta(turn_meta(index)));
        };

        let turns: Vec<&str> = user_texts.iter().map(String::as_str).collect();
        let reply = reply::reply_text(&turns, permission.as_deref());
        if let Err(e) = self
            .sessions
            .finish_turn(sid, seq, index, &self.user_text, reply.clone())
        {
            return responder.respond_with_error(e.into());
        }
        let (first, second) = reply::split_halves(&reply);
        for part in [first, second] {
            self.cx
                .send_notification(chunk(&self.session_id, Role::Agent, part, index))?;
        }
        self.cx.send_notification(SessionNotification::new(
            self.session_id.clone(),
            SessionUpdate::UsageUpdate(UsageUpdate::new(used_bytes, CONTEXT_SIZE)),
        ))?;
        tracing::info!(session = %sid, turns = turns.len(), stop = %self.stop, "prompt answered");
        responder.respond(PromptResponse::new(stop_reason(self.stop)).meta(turn_meta(index)))
    }

    /// Asks the client to allow or reject a fake tool call; returns the chosen option id,
    /// `cancelled`, or `error` if the request failed.
    async fn ask_permission(&self, index: usize) -> String {
        let tool_call = ToolCallUpdate::new(
            format!("perm-{index}"),
            ToolCallUpdateFields::new()
                .title("acp-test-agent permission check")
                .kind(ToolKind::Other),
        );
        let options = vec![
            PermissionOption::new("allow", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject once", PermissionOptionKind::RejectOnce),
        ];
        let request = RequestPermissionRequest::new(self.session_id.clone(), tool_call, options);
        match self.cx.send_request(request).block_task().await {
            Ok(response) => match response.outcome {
                RequestPermissionOutcome::Selected(selected) => selected.option_id.to_string(),
                RequestPermissionOutcome::Cancelled => "cancelled".to_owned(),
                other => {
                    tracing::warn!(?other, "unexpected permission outcome");
                    "unknown".to_owned()
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "session/request_permission failed");
                "error".to_owned()
            }
        }
    }
}
