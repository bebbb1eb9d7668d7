//! The ACP client: one agent process, spoken to over stdio.
//!
//! [`AcpClient::spawn`] starts the agent (in its own process group, via the
//! SDK's process transport), runs `initialize` and records what the agent
//! advertised. The connection itself is driven by a background task; the
//! client keeps a cheap handle on it to send requests from whichever task owns
//! the worker. Agent-to-client traffic is handled in the connection's dispatch
//! loop:
//! * `session/update` notifications are routed to the turn that registered for
//!   their session (anything else, e.g. history an agent replays, is dropped);
//! * `session/request_permission` is answered with the `allow_once` option
//!   (else `reject_once`, else cancelled) — the harness runs unattended.
//!
//! Every frame read or written is tapped for the [`Observer`].

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, EnvVariable, Implementation,
    InitializeRequest, McpServer, McpServerStdio, NewSessionRequest, NewSessionResponse,
    PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionConfigOption, SessionNotification,
    SessionUpdate, SetSessionConfigOptionRequest, StopReason, SystemPrompt, TextContent,
};
use agent_client_protocol::{AcpAgent, Agent, Client, JsonRpcRequest, LineDirection};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{CANCEL_DRAIN_GRACE, McpServerConfig, RPC_TIMEOUT};
use crate::observer::{FrameDirection, Observer};

/// What went wrong talking to an agent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AcpError {
    /// The agent answered with a JSON-RPC error. The agent is alive.
    #[error("{method}: agent error {code}: {message}")]
    Agent {
        /// The request that failed.
        method: String,
        /// JSON-RPC error code (e.g. -32002 resource not found, -32000 auth).
        code: i32,
        /// The error message.
        message: String,
        /// Optional error data.
        data: Option<Value>,
    },
    /// The connection failed without a JSON-RPC answer (I/O, framing).
    #[error("{method}: transport error: {message}")]
    Transport {
        /// The request in flight.
        method: String,
        /// What the SDK reported.
        message: String,
    },
    /// No answer within the deadline.
    #[error("{method}: no answer within {after:?} ({kind:?})")]
    Timeout {
        /// The request in flight.
        method: String,
        /// The deadline that passed.
        after: Duration,
        /// Which limit.
        kind: TimeoutKind,
    },
    /// The agent process is gone.
    #[error("{method}: agent process exited")]
    Exited {
        /// The request in flight.
        method: String,
    },
    /// The agent answered something the harness cannot use.
    #[error("{method}: protocol error: {message}")]
    Protocol {
        /// The request.
        method: String,
        /// What was wrong.
        message: String,
    },
    /// The agent could not be started.
    #[error("cannot start agent {command:?}: {message}")]
    Spawn {
        /// The configured command.
        command: String,
        /// Why.
        message: String,
    },
}

impl AcpError {
    /// The JSON-RPC code of an agent error.
    pub fn agent_code(&self) -> Option<i32> {
        match self {
            AcpError::Agent { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the agent process must be considered dead.
    pub fn is_fatal(&self) -> bool {
        matches!(self, AcpError::Exited { .. } | AcpError::Transport { .. })
    }
}

/// Which deadline expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// A non-prompt request.
    Request,
    /// No output from the agent for the idle limit.
    Idle,
    /// The turn exceeded its wall-clock limit.
    Hard,
    /// The agent did not answer a cancel within the grace.
    CancelDrain,
}

/// What the agent advertised at `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentInfo {
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// `agentCapabilities.loadSession`.
    pub load_session: bool,
    /// `agentCapabilities.sessionCapabilities.close` present.
    pub session_close: bool,
    /// `agentCapabilities.sessionCapabilities.resume` present.
    pub session_resume: bool,
    /// `agentCapabilities.sessionCapabilities.systemPrompt` present.
    pub system_prompt: bool,
    /// `agentInfo.name`.
    pub name: Option<String>,
    /// `agentInfo.version`.
    pub version: Option<String>,
}

/// Everything a `session/new` carries.
#[derive(Debug, Clone)]
pub struct NewSessionParams {
    /// Absolute working directory.
    pub cwd: std::path::PathBuf,
    /// MCP servers.
    pub mcp_servers: Vec<McpServerConfig>,
    /// System prompt (sent only when the agent advertises the capability).
    pub system_prompt: Option<String>,
    /// `_meta` members (`sessionTitle`, …). Omitted when empty.
    pub meta: Map<String, Value>,
}

/// The result of a `session/new`.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// The provider session id.
    pub session_id: String,
    /// The session's configuration options (model, mode, …).
    pub config_options: Vec<SessionConfigOption>,
}

/// Limits of one prompt turn.
#[derive(Debug, Clone, Copy)]
pub struct TurnLimits {
    /// Longest silence.
    pub idle: Duration,
    /// Longest turn.
    pub hard: Duration,
}

/// What a turn produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnOutput {
    /// The agent's text (concatenated `agent_message_chunk`s).
    pub text: String,
    /// How the turn ended.
    pub stop_reason: Option<StopReason>,
    /// Last cumulative `usage_update.used` seen during the turn.
    pub usage_used: Option<u64>,
}

/// How a prompt call ended.
#[derive(Debug)]
pub enum TurnEnd<S> {
    /// The agent answered the prompt.
    Completed(TurnOutput),
    /// A control signal arrived; the turn was cancelled and drained.
    Interrupted {
        /// The signal.
        signal: S,
        /// What the cancelled turn produced, or why the drain failed.
        drained: Result<TurnOutput, AcpError>,
    },
}

/// Routes `session/update` notifications to the turn waiting for them.
#[derive(Debug, Default)]
struct UpdateRouter {
    sinks: Mutex<HashMap<String, mpsc::UnboundedSender<SessionUpdate>>>,
}

impl UpdateRouter {
    fn register(
        self: &Arc<Self>,
        session_id: &str,
    ) -> (RouteGuard, mpsc::UnboundedReceiver<SessionUpdate>) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(session_id.to_string(), tx);
        (
            RouteGuard {
                router: Arc::clone(self),
                session_id: session_id.to_string(),
            },
            rx,
        )
    }

    fn route(&self, notification: SessionNotification) {
        let sink = self.lock().get(notification.session_id.0.as_ref()).cloned();
        match sink {
            Some(tx) => {
                let _ = tx.send(notification.update);
            }
            None => tracing::trace!(
                session_id = %notification.session_id.0,
                "dropping session/update with no turn waiting"
            ),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<SessionUpdate>>> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Unregisters a turn's update sink when the turn ends, however it ends.
struct RouteGuard {
    router: Arc<UpdateRouter>,
    session_id: String,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.router.lock().remove(&self.session_id);
    }
}

/// Sees every line on the agent's stdio and records it for the observer.
struct FrameTap {
    observer: Observer,
    slot: usize,
}

impl FrameTap {
    fn observe(&self, line: &str, direction: LineDirection) {
        match direction {
            LineDirection::Stdin => self.observer.frame(self.slot, FrameDirection::Write, line),
            LineDirection::Stdout => self.observer.frame(self.slot, FrameDirection::Read, line),
            LineDirection::Stderr => {
                tracing::debug!(slot = self.slot, agent_stderr = %line);
            }
        }
    }
}

/// A live ACP connection to one agent process.
pub struct AcpClient {
    slot: usize,
    cx: ConnectionTo<Agent>,
    router: Arc<UpdateRouter>,
    info: AgentInfo,
    /// The connection task; yields why the connection failed, if it did.
    driver: Option<JoinHandle<Option<String>>>,
    shutdown: Option<oneshot::Sender<()>>,
    ended: watch::Receiver<bool>,
}

impl std::fmt::Debug for AcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpClient")
            .field("slot", &self.slot)
            .field("info", &self.info)
            .field("ended", &*self.ended.borrow())
            .finish_non_exhaustive()
    }
}

fn choose_permission(request: &RequestPermissionRequest) -> RequestPermissionOutcome {
    let pick = |kind: PermissionOptionKind| {
        request
            .options
            .iter()
            .find(|o| o.kind == kind)
            .map(|o| o.option_id.clone())
    };
    match pick(PermissionOptionKind::AllowOnce).or_else(|| pick(PermissionOptionKind::RejectOnce)) {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    }
}

impl AcpClient {
    /// Spawns the agent command for worker `slot` and runs `initialize`.
    ///
    /// With `guard` (the harness's own executable, on Linux) the agent runs
    /// under the agent guard, which ends its whole process tree when the
    /// harness goes away, even when the harness is SIGKILLed (see
    /// [`crate::guard`]).
    ///
    /// An agent that cannot be started, or that exits before answering
    /// `initialize`, is an [`AcpError::Spawn`] carrying the reason: the OS
    /// error (e.g. "No such file or directory (os error 2)") or the tail of
    /// what the agent wrote to stderr.
    pub async fn spawn(
        command: &str,
        guard: Option<&Path>,
        slot: usize,
        observer: Observer,
    ) -> Result<AcpClient, AcpError> {
        let spawn_err = |message: String| AcpError::Spawn {
            command: command.to_string(),
            message,
        };
        let launch = AcpAgent::from_str(command)
            .map_err(|e| spawn_err(describe_connection_error(&e)))?
            .into_config();
        let launch = match guard {
            Some(exe) => crate::guard::wrap(&launch, exe),
            None => launch,
        };
        let tap = Arc::new(FrameTap { observer, slot });
        let agent =
            AcpAgent::new(launch).with_debug(move |line, direction| tap.observe(line, direction));

        let router = Arc::new(UpdateRouter::default());
        let (cx_tx, cx_rx) = oneshot::channel();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let (ended_tx, ended_rx) = watch::channel(false);
        let handler_router = Arc::clone(&router);

        let driver = tokio::spawn(async move {
            let result = Client
                .v1()
                .name("buzz-acp")
                .on_receive_notification(
                    async move |n: SessionNotification, _cx| {
                        handler_router.route(n);
                        Ok(())
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    async move |req: RequestPermissionRequest, responder, _cx| {
                        responder.respond(RequestPermissionResponse::new(choose_permission(&req)))
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
                    let closed = cx.clone();
                    if cx_tx.send(cx).is_err() {
                        return Ok(());
                    }
                    tokio::select! {
                        _ = shutdown_rx => {}
                        () = closed.incoming_closed() => {}
                    }
                    Ok(())
                })
                .await;
            let failure = result.err().map(|e| describe_connection_error(&e));
            if let Some(failure) = &failure {
                tracing::debug!(slot, error = %failure, "agent connection ended with an error");
            }
            let _ = ended_tx.send(true);
            failure
        });

        let cx = match cx_rx.await {
            Ok(cx) => cx,
            Err(_) => {
                let failure = driver.await.ok().flatten();
                return Err(spawn_err(
                    failure.unwrap_or_else(|| "the agent process did not start".to_string()),
                ));
            }
        };
        let mut client = AcpClient {
            slot,
            cx,
            router,
            info: AgentInfo::default(),
            driver: Some(driver),
            shutdown: Some(shutdown_tx),
            ended: ended_rx,
        };
        let init = client
            .request(
                InitializeRequest::new(ProtocolVersion::V1)
                    .client_capabilities(ClientCapabilities::default())
                    .client_info(Implementation::new("buzz-acp", env!("CARGO_PKG_VERSION"))),
                RPC_TIMEOUT,
            )
            .await;
        let init = match init {
            Ok(init) => init,
            Err(e) => {
                let failure = client.finish().await;
                return Err(match e {
                    AcpError::Exited { .. } | AcpError::Transport { .. } => {
                        spawn_err(failure.unwrap_or_else(|| {
                            "the agent exited before answering initialize".to_string()
                        }))
                    }
                    other => other,
                });
            }
        };
        let caps = &init.agent_capabilities;
        client.info = AgentInfo {
            protocol_version: serde_json::to_value(init.protocol_version)
                .map(|v| v.to_string())
                .unwrap_or_default(),
            load_session: caps.load_session,
            session_close: caps.session_capabilities.close.is_some(),
            session_resume: caps.session_capabilities.resume.is_some(),
            system_prompt: caps.session_capabilities.system_prompt.is_some(),
            name: init.agent_info.as_ref().map(|i| i.name.clone()),
            version: init.agent_info.as_ref().map(|i| i.version.clone()),
        };
        tracing::info!(
            slot,
            agent = client.info.name.as_deref().unwrap_or("?"),
            load_session = client.info.load_session,
            "agent initialized"
        );
        Ok(client)
    }

    /// The worker slot this client serves.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// What the agent advertised at `initialize`.
    pub fn info(&self) -> &AgentInfo {
        &self.info
    }

    /// Whether the connection (and so the process) has ended.
    pub fn has_exited(&self) -> bool {
        *self.ended.borrow()
    }

    /// Sends a typed request and waits for its answer, mapping SDK errors to
    /// [`AcpError`].
    pub async fn request<Req: JsonRpcRequest>(
        &self,
        request: Req,
        timeout: Duration,
    ) -> Result<Req::Response, AcpError> {
        let method = request.method().to_string();
        if self.has_exited() {
            return Err(AcpError::Exited { method });
        }
        let sent = self.cx.send_request(request);
        let mut ended = self.ended.clone();
        tokio::select! {
            result = tokio::time::timeout(timeout, sent.block_task()) => match result {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(e)) => Err(self.map_error(&method, e)),
                Err(_) => Err(AcpError::Timeout { method, after: timeout, kind: TimeoutKind::Request }),
            },
            () = wait_ended(&mut ended) => Err(AcpError::Exited { method }),
        }
    }

    fn map_error(&self, method: &str, e: agent_client_protocol::Error) -> AcpError {
        if agent_client_protocol::is_incoming_transport_closed(&e) || self.has_exited() {
            return AcpError::Exited {
                method: method.to_string(),
            };
        }
        AcpError::Agent {
            method: method.to_string(),
            code: e.code.value(),
            message: e.message,
            data: e.data,
        }
    }

    /// `session/new`.
    pub async fn session_new_full(&self, params: NewSessionParams) -> Result<NewSession, AcpError> {
        let mcp: Vec<McpServer> = params.mcp_servers.iter().map(to_mcp_server).collect();
        let mut request = NewSessionRequest::new(params.cwd).mcp_servers(mcp);
        if let Some(prompt) = params.system_prompt.filter(|_| self.info.system_prompt) {
            request = request.system_prompt(SystemPrompt::new(vec![ContentBlock::Text(
                TextContent::new(prompt),
            )]));
        }
        if !params.meta.is_empty() {
            request = request.meta(params.meta);
        }
        let response: NewSessionResponse = self.request(request, RPC_TIMEOUT).await?;
        let session_id = response.session_id.0.to_string();
        if session_id.is_empty() {
            return Err(AcpError::Protocol {
                method: "session/new".into(),
                message: "empty sessionId".into(),
            });
        }
        Ok(NewSession {
            session_id,
            config_options: response.config_options.unwrap_or_default(),
        })
    }

    /// `session/set_config_option` with a select value.
    pub async fn session_set_config_option(
        &self,
        session_id: &str,
        config_id: &str,
        value: &str,
        timeout: Duration,
    ) -> Result<(), AcpError> {
        self.request(
            SetSessionConfigOptionRequest::new(
                session_id.to_string(),
                config_id.to_string(),
                value,
            ),
            timeout,
        )
        .await
        .map(|_| ())
    }

    /// `session/cancel` (a notification).
    pub fn session_cancel(&self, session_id: &str) -> Result<(), AcpError> {
        self.cx
            .send_notification(CancelNotification::new(session_id.to_string()))
            .map_err(|e| AcpError::Transport {
                method: "session/cancel".into(),
                message: e.to_string(),
            })
    }

    /// Runs one `session/prompt` turn.
    ///
    /// The agent's text is collected from `session/update`. The turn ends when
    /// the agent answers, when a deadline passes (the turn is then cancelled
    /// and drained, and a [`AcpError::Timeout`] returned), or when `control`
    /// yields a signal (the turn is cancelled and drained, and the signal
    /// returned with what the turn produced).
    pub async fn session_prompt_with_idle_timeout<S>(
        &self,
        session_id: &str,
        text: String,
        limits: TurnLimits,
        control: &mut mpsc::Receiver<S>,
    ) -> Result<TurnEnd<S>, AcpError> {
        const METHOD: &str = "session/prompt";
        if self.has_exited() {
            return Err(AcpError::Exited {
                method: METHOD.into(),
            });
        }
        let (_route, mut updates) = self.router.register(session_id);
        let request = PromptRequest::new(
            session_id.to_string(),
            vec![ContentBlock::Text(TextContent::new(text))],
        );
        let mut response = Box::pin(self.cx.send_request(request).block_task());
        let mut output = TurnOutput::default();
        let started = Instant::now();
        let hard_deadline = started + limits.hard;
        let mut idle_deadline = started + limits.idle;
        let mut control_open = true;
        let mut ended = self.ended.clone();

        loop {
            let deadline = idle_deadline.min(hard_deadline);
            tokio::select! {
                biased;
                result = &mut response => {
                    drain_ready(&mut updates, &mut output);
                    let response = result.map_err(|e| self.map_error(METHOD, e))?;
                    output.stop_reason = Some(response.stop_reason);
                    return Ok(TurnEnd::Completed(output));
                }
                Some(update) = updates.recv() => {
                    collect(update, &mut output);
                    idle_deadline = Instant::now() + limits.idle;
                }
                signal = control.recv(), if control_open => match signal {
                    Some(signal) => {
                        let drained = self
                            .cancel_with_cleanup(session_id, response, &mut updates, output, CANCEL_DRAIN_GRACE)
                            .await;
                        return Ok(TurnEnd::Interrupted { signal, drained });
                    }
                    None => control_open = false,
                },
                () = wait_ended(&mut ended) => {
                    return Err(AcpError::Exited { method: METHOD.into() });
                }
                () = tokio::time::sleep_until(deadline) => {
                    let (kind, after) = if hard_deadline <= idle_deadline {
                        (TimeoutKind::Hard, limits.hard)
                    } else {
                        (TimeoutKind::Idle, limits.idle)
                    };
                    // Cancel cleanup: the agent must stop working before the
                    // worker is reused or respawned.
                    let _ = self
                        .cancel_with_cleanup(session_id, response, &mut updates, output, CANCEL_DRAIN_GRACE)
                        .await;
                    return Err(AcpError::Timeout { method: METHOD.into(), after, kind });
                }
            }
        }
    }

    async fn cancel_with_cleanup<F>(
        &self,
        session_id: &str,
        mut response: std::pin::Pin<Box<F>>,
        updates: &mut mpsc::UnboundedReceiver<SessionUpdate>,
        mut output: TurnOutput,
        grace: Duration,
    ) -> Result<TurnOutput, AcpError>
    where
        F: Future<
            Output = Result<
                agent_client_protocol::v1::schema::PromptResponse,
                agent_client_protocol::Error,
            >,
        >,
    {
        const METHOD: &str = "session/cancel";
        self.session_cancel(session_id)?;
        let deadline = Instant::now() + grace;
        loop {
            tokio::select! {
                biased;
                result = &mut response => {
                    drain_ready(updates, &mut output);
                    let response = result.map_err(|e| self.map_error(METHOD, e))?;
                    output.stop_reason = Some(response.stop_reason);
                    return Ok(output);
                }
                Some(update) = updates.recv() => collect(update, &mut output),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(AcpError::Timeout { method: METHOD.into(), after: grace, kind: TimeoutKind::CancelDrain });
                }
            }
        }
    }

    /// Ends the connection and the agent's whole process group: a graceful
    /// close (stdin EOF, then SIGTERM/SIGKILL by the SDK), and if that takes
    /// too long, dropping the connection, which SIGKILLs the group at once.
    pub async fn shutdown(&mut self) {
        let _ = self.finish().await;
    }

    /// [`AcpClient::shutdown`], returning why the connection failed, if it
    /// did (e.g. the agent exited non-zero, with the tail of its stderr).
    async fn finish(&mut self) -> Option<String> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let mut driver = self.driver.take()?;
        match tokio::time::timeout(Duration::from_secs(5), &mut driver).await {
            Ok(joined) => joined.ok().flatten(),
            Err(_) => {
                driver.abort();
                let _ = driver.await;
                None
            }
        }
    }
}

/// Longest failure text kept from a connection error (an agent's stderr
/// tail can be 64 KiB).
const MAX_FAILURE_CHARS: usize = 2000;

/// A connection error as one readable reason: the OS error of a failed spawn
/// (the SDK puts it in `data`), or the message, which for an agent that
/// exited non-zero ends with its stderr tail. Long text keeps its end, where
/// the reason usually is.
fn describe_connection_error(e: &agent_client_protocol::Error) -> String {
    let text = match &e.data {
        Some(Value::String(data)) => data.clone(),
        Some(data) => format!("{}: {data}", e.message),
        None => e.message.clone(),
    };
    let text = text.trim();
    let count = text.chars().count();
    if count <= MAX_FAILURE_CHARS {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - MAX_FAILURE_CHARS).collect();
    format!("…{tail}")
}

impl Drop for AcpClient {
    fn drop(&mut self) {
        // Dropping the connection future kills the agent's process group.
        if let Some(driver) = self.driver.take() {
            driver.abort();
        }
    }
}

/// Resolves once the connection has ended (never, while it is alive).
async fn wait_ended(ended: &mut watch::Receiver<bool>) {
    // `Err` means the driver dropped its sender: the connection ended too.
    // The guard `wait_for` returns is dropped right here, so it never lives
    // inside a caller's `Send` future.
    let _ = ended.wait_for(|e| *e).await;
}

fn collect(update: SessionUpdate, output: &mut TurnOutput) {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) => {
            if let ContentBlock::Text(text) = chunk.content {
                output.text.push_str(&text.text);
            }
        }
        SessionUpdate::UsageUpdate(usage) => output.usage_used = Some(usage.used),
        _ => {}
    }
}

fn drain_ready(updates: &mut mpsc::UnboundedReceiver<SessionUpdate>, output: &mut TurnOutput) {
    while let Ok(update) = updates.try_recv() {
        collect(update, output);
    }
}

fn to_mcp_server(server: &McpServerConfig) -> McpServer {
    McpServer::Stdio(
        McpServerStdio::new(server.name.clone(), Path::new(&server.command))
            .args(server.args.clone())
            .env(
                server
                    .env
                    .iter()
                    .map(|v| EnvVariable::new(v.name.clone(), v.value.clone()))
                    .collect(),
            ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        PermissionOption, SessionId, ToolCallUpdate, ToolCallUpdateFields,
    };

    fn request(kinds: &[PermissionOptionKind]) -> RequestPermissionRequest {
        let options = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| PermissionOption::new(format!("opt{i}"), format!("o{i}"), *k))
            .collect();
        RequestPermissionRequest::new(
            SessionId::new("s"),
            ToolCallUpdate::new("t", ToolCallUpdateFields::new()),
            options,
        )
    }

    fn selected(outcome: RequestPermissionOutcome) -> Option<String> {
        match outcome {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            _ => None,
        }
    }

    #[test]
    fn permission_prefers_allow_once_then_reject_once() {
        let r = request(&[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::AllowOnce,
        ]);
        assert_eq!(selected(choose_permission(&r)).as_deref(), Some("opt1"));
        let r = request(&[
            PermissionOptionKind::AllowAlways,
            PermissionOptionKind::RejectOnce,
        ]);
        assert_eq!(selected(choose_permission(&r)).as_deref(), Some("opt1"));
        let r = request(&[PermissionOptionKind::AllowAlways]);
        assert_eq!(selected(choose_permission(&r)), None);
    }

    #[test]
    fn fatal_errors_are_exit_and_transport() {
        assert!(AcpError::Exited { method: "x".into() }.is_fatal());
        let agent = AcpError::Agent {
            method: "x".into(),
            code: -32002,
            message: "gone".into(),
            data: None,
        };
        assert!(!agent.is_fatal());
        assert_eq!(agent.agent_code(), Some(-32002));
    }
}
