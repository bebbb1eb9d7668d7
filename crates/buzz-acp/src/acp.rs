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
//! # Protocol versions
//!
//! `initialize` asks for protocol version 2, in the request shape of the v2
//! specification (`protocolVersion`, `info`, `capabilities`), and the harness
//! then speaks whichever version the agent answers. That is the negotiation of
//! ACP's "Initialization" page (the client sends the latest version it
//! supports; an agent that does not support it answers the latest version it
//! does; <https://agentclientprotocol.com/protocol/v1/initialization>) and the
//! side-by-side support the v2 migration guide asks of clients
//! (<https://agentclientprotocol.com/protocol/v2/migration>). The SDK's
//! protocol connector does the negotiation: an agent answering 1 goes on over
//! the same connection with the v1 implementation (its `initialize` is the
//! v2 one read as v1, so nothing is sent again). An agent that refuses the
//! request outright (a JSON-RPC error) is started once more and asked for
//! version 1 only.
//!
//! The two versions differ where a turn ends: in v1 the `session/prompt`
//! answer carries the stop reason; in v2 it only says the prompt was accepted,
//! and the turn ends with a `state_update` whose state is `idle` (v2 "Prompt
//! Lifecycle", <https://agentclientprotocol.com/protocol/v2/prompt-lifecycle>).
//! Both arrive here as [`TurnEvent`]s, so the turn loop is one.
//!
//! Every frame read or written is tapped for the [`Observer`].

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::{MaybeUndefined, ProtocolVersion};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    BooleanConfigOptionCapabilities, CancelNotification, ClientCapabilities,
    ClientSessionCapabilities, ContentBlock, EnvVariable, Implementation, InitializeRequest,
    InitializeResponse, McpServer, McpServerStdio, NewSessionRequest, NewSessionResponse,
    PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionConfigOption,
    SessionConfigOptionsCapabilities, SessionNotification, SessionUpdate,
    SetSessionConfigOptionRequest, StopReason, SystemPrompt, TextContent,
};
use agent_client_protocol::v2::schema as v2;
use agent_client_protocol::v2::{ConnectionTo as V2ConnectionTo, InitializeOutcome};
use agent_client_protocol::{
    AcpAgent, Agent, Client, ConnectTo, DynConnectTo, JsonRpcNotification, JsonRpcRequest,
    LineDirection,
};
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

/// What a turn hears from its session, in the terms both protocol versions share.
#[derive(Debug, Clone, PartialEq)]
enum TurnEvent {
    /// Agent text. `message` names the message it belongs to (v2 message ids;
    /// `None` in v1, where all of a turn's chunks form one text). A chunk is
    /// appended to its message; a whole message (`whole`, v2 upserts) replaces it.
    Text {
        message: Option<String>,
        text: String,
        whole: bool,
    },
    /// The cumulative `usage_update.used`.
    Usage(u64),
    /// v2: the session went idle, which ends the turn (`Err`: it ended with an
    /// error, which v1 would have answered to the prompt).
    Idle(Result<StopReason, AgentFailure>),
}

/// An error an agent reported: a JSON-RPC error, or a v2 turn that ended with one.
#[derive(Debug, Clone, PartialEq)]
struct AgentFailure {
    code: i32,
    message: String,
    data: Option<Value>,
}

impl AgentFailure {
    fn into_error(self, method: &str) -> AcpError {
        AcpError::Agent {
            method: method.to_string(),
            code: self.code,
            message: self.message,
            data: self.data,
        }
    }
}

impl TurnEvent {
    /// The turn event a v1 `session/update` carries, if any.
    fn of_v1(update: SessionUpdate) -> Option<TurnEvent> {
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                ContentBlock::Text(text) => Some(TurnEvent::Text {
                    message: None,
                    text: text.text,
                    whole: false,
                }),
                _ => None,
            },
            SessionUpdate::UsageUpdate(usage) => Some(TurnEvent::Usage(usage.used)),
            _ => None,
        }
    }

    /// The turn event a v2 `session/update` carries, if any.
    fn of_v2(update: v2::SessionUpdate) -> Option<TurnEvent> {
        match update {
            v2::SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                v2::ContentBlock::Text(text) => Some(TurnEvent::Text {
                    message: Some(chunk.message_id.0.to_string()),
                    text: text.text,
                    whole: false,
                }),
                _ => None,
            },
            // An upsert: content omitted leaves the message as it was, `null`
            // clears it, a value replaces it.
            v2::SessionUpdate::AgentMessage(message) => {
                let blocks = match message.content {
                    MaybeUndefined::Undefined => return None,
                    MaybeUndefined::Null => Vec::new(),
                    MaybeUndefined::Value(blocks) => blocks,
                };
                let text = blocks
                    .into_iter()
                    .filter_map(|block| match block {
                        v2::ContentBlock::Text(text) => Some(text.text),
                        _ => None,
                    })
                    .collect();
                Some(TurnEvent::Text {
                    message: Some(message.message_id.0.to_string()),
                    text,
                    whole: true,
                })
            }
            v2::SessionUpdate::UsageUpdate(usage) => Some(TurnEvent::Usage(usage.used)),
            v2::SessionUpdate::StateUpdate(v2::StateUpdate::Idle(idle)) => {
                Some(TurnEvent::Idle(stop_of_v2(idle.stop_reason)))
            }
            _ => None,
        }
    }
}

/// A v2 stop reason in the harness's (v1) terms. An idle state without a
/// reason, or with one this crate does not know, ended the turn normally.
fn stop_of_v2(reason: Option<v2::StopReason>) -> Result<StopReason, AgentFailure> {
    match reason {
        Some(v2::StopReason::MaxTokens) => Ok(StopReason::MaxTokens),
        Some(v2::StopReason::MaxTurnRequests) => Ok(StopReason::MaxTurnRequests),
        Some(v2::StopReason::Refusal) => Ok(StopReason::Refusal),
        Some(v2::StopReason::Cancelled) => Ok(StopReason::Cancelled),
        Some(v2::StopReason::Error(ended)) => Err(match ended.error {
            Some(error) => AgentFailure {
                code: i32::from(error.code),
                message: error.message,
                data: error.data,
            },
            None => AgentFailure {
                code: -32603,
                message: "the turn ended with an error the agent did not describe".into(),
                data: None,
            },
        }),
        _ => Ok(StopReason::EndTurn),
    }
}

/// Routes `session/update` notifications to the turn waiting for them.
#[derive(Debug, Default)]
struct UpdateRouter {
    sinks: Mutex<HashMap<String, mpsc::UnboundedSender<TurnEvent>>>,
}

impl UpdateRouter {
    fn register(
        self: &Arc<Self>,
        session_id: &str,
    ) -> (RouteGuard, mpsc::UnboundedReceiver<TurnEvent>) {
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

    fn route(&self, session_id: &str, event: Option<TurnEvent>) {
        let Some(event) = event else { return };
        let sink = self.lock().get(session_id).cloned();
        match sink {
            Some(tx) => {
                let _ = tx.send(event);
            }
            None => tracing::trace!(session_id, "dropping session/update with no turn waiting"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<TurnEvent>>> {
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

/// The connection, by the protocol version the agent answered at `initialize`.
#[derive(Clone, Debug)]
enum Connection {
    V1(ConnectionTo<Agent>),
    V2(V2ConnectionTo<Agent>),
}

/// A request's answer, still to come.
type Answer<T> = Pin<Box<dyn Future<Output = Result<T, agent_client_protocol::Error>> + Send>>;

impl Connection {
    /// Sends a request (any message type: the wire shape is the caller's choice).
    fn send<Req: JsonRpcRequest>(&self, request: Req) -> Answer<Req::Response>
    where
        Req::Response: Send + 'static,
    {
        match self {
            Connection::V1(cx) => Box::pin(cx.send_request(request).block_task()),
            Connection::V2(cx) => Box::pin(cx.send_request(request).block_task()),
        }
    }

    fn notify<N: JsonRpcNotification>(
        &self,
        notification: N,
    ) -> Result<(), agent_client_protocol::Error> {
        match self {
            Connection::V1(cx) => cx.send_notification(notification),
            Connection::V2(cx) => cx.send_notification(notification),
        }
    }
}

/// A live ACP connection to one agent process.
pub struct AcpClient {
    slot: usize,
    cx: Connection,
    router: Arc<UpdateRouter>,
    info: AgentInfo,
    /// The connection task; yields why the connection failed, if it did.
    driver: Option<JoinHandle<Option<String>>>,
    shutdown: Option<watch::Sender<bool>>,
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

/// Decides a `session/request_permission`: given the session and the offered
/// options (id and kind), the option to select, or `None` to cancel.
type PermissionPolicy =
    Arc<dyn Fn(&str, &[(String, PermissionOptionKind)]) -> Option<String> + Send + Sync>;

/// The unattended choice: `allow_once`, else `reject_once`, else none.
fn choose_permission(options: &[(String, PermissionOptionKind)]) -> Option<String> {
    let pick = |kind: PermissionOptionKind| {
        options
            .iter()
            .find(|(_, k)| *k == kind)
            .map(|(id, _)| id.clone())
    };
    pick(PermissionOptionKind::AllowOnce).or_else(|| pick(PermissionOptionKind::RejectOnce))
}

/// A v2 option kind in v1 terms (the same four kinds; `None` for one this
/// crate does not know, which is never chosen).
fn kind_of_v2(kind: &v2::PermissionOptionKind) -> Option<PermissionOptionKind> {
    match kind {
        v2::PermissionOptionKind::AllowOnce => Some(PermissionOptionKind::AllowOnce),
        v2::PermissionOptionKind::AllowAlways => Some(PermissionOptionKind::AllowAlways),
        v2::PermissionOptionKind::RejectOnce => Some(PermissionOptionKind::RejectOnce),
        v2::PermissionOptionKind::RejectAlways => Some(PermissionOptionKind::RejectAlways),
        _ => None,
    }
}

/// The name and version the harness gives at `initialize`.
const CLIENT_NAME: &str = "buzz-acp";

/// The v1 `initialize`: the v2 request below as the SDK reads it in v1, field
/// for field, so that its connector hands a v1 answer to the v1
/// implementation on the same connection instead of starting the agent again.
/// Every v2 client supports boolean configuration options, which v1 names as
/// a capability.
fn v1_initialize() -> InitializeRequest {
    let session = ClientSessionCapabilities::new().config_options(
        SessionConfigOptionsCapabilities::new().boolean(BooleanConfigOptionCapabilities::new()),
    );
    InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(ClientCapabilities::new().session(session))
        .client_info(Implementation::new(CLIENT_NAME, env!("CARGO_PKG_VERSION")))
}

/// The v2 `initialize`, in the v2 request shape.
fn v2_initialize() -> v2::InitializeRequest {
    v2::InitializeRequest::new(
        ProtocolVersion::V2,
        v2::Implementation::new(CLIENT_NAME, env!("CARGO_PKG_VERSION")),
    )
}

fn info_of_v1(init: &InitializeResponse) -> AgentInfo {
    let caps = &init.agent_capabilities;
    AgentInfo {
        protocol_version: "1".into(),
        load_session: caps.load_session,
        session_close: caps.session_capabilities.close.is_some(),
        session_resume: caps.session_capabilities.resume.is_some(),
        system_prompt: caps.session_capabilities.system_prompt.is_some(),
        name: init.agent_info.as_ref().map(|i| i.name.clone()),
        version: init.agent_info.as_ref().map(|i| i.version.clone()),
    }
}

/// v2 has no `session/load`; `capabilities.session` makes resume and close
/// required methods (RFD "v2 Required Session Methods").
fn info_of_v2(init: &v2::InitializeResponse) -> AgentInfo {
    let session = init.capabilities.session.as_ref();
    AgentInfo {
        protocol_version: "2".into(),
        load_session: false,
        session_close: session.is_some(),
        session_resume: session.is_some(),
        system_prompt: session.is_some_and(|s| s.system_prompt.is_some()),
        name: Some(init.info.name.clone()),
        version: Some(init.info.version.clone()),
    }
}

/// A connection ready for sessions, and what the agent advertised on it.
struct Ready {
    cx: Connection,
    info: AgentInfo,
}

/// What the two protocol implementations share while the SDK's connector
/// chooses between them.
struct Handshake {
    router: Arc<UpdateRouter>,
    policy: PermissionPolicy,
    /// Taken by the implementation that completes `initialize` (or fails it).
    ready: Mutex<Option<oneshot::Sender<Result<Ready, agent_client_protocol::Error>>>>,
    shutdown: watch::Receiver<bool>,
}

impl Handshake {
    fn hand_over(&self, ready: Result<Ready, agent_client_protocol::Error>) {
        let sender = self.ready.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(sender) = sender {
            let _ = sender.send(ready);
        }
    }

    /// Hands `answer` (the ready connection, or why `initialize` failed) over to [`connect`];
    /// then keeps the connection until the client shuts it down or the agent closes it.
    async fn hold(
        &self,
        answer: Result<Ready, agent_client_protocol::Error>,
        closed: impl Future<Output = ()>,
    ) -> Result<(), agent_client_protocol::Error> {
        let failed = answer.as_ref().err().cloned();
        self.hand_over(answer);
        if let Some(e) = failed {
            return Err(e);
        }
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => {}
            () = closed => {}
        }
        Ok(())
    }
}

/// The v1 implementation.
struct V1Client(Arc<Handshake>);

impl ConnectTo<Agent> for V1Client {
    async fn connect_to(
        self,
        agent: impl ConnectTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let handshake = self.0;
        let router = Arc::clone(&handshake.router);
        let policy = Arc::clone(&handshake.policy);
        Client
            .v1()
            .name(CLIENT_NAME)
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    router.route(&n.session_id.0, TurnEvent::of_v1(n.update));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |req: RequestPermissionRequest, responder, _cx| {
                    let options: Vec<_> = req
                        .options
                        .iter()
                        .map(|o| (o.option_id.0.to_string(), o.kind))
                        .collect();
                    let outcome = match policy(&req.session_id.0, &options) {
                        Some(id) => {
                            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
                        }
                        None => RequestPermissionOutcome::Cancelled,
                    };
                    responder.respond(RequestPermissionResponse::new(outcome))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
                let answer = cx.send_request(v1_initialize()).block_task().await;
                let answer = answer.map(|init| Ready {
                    cx: Connection::V1(cx.clone()),
                    info: info_of_v1(&init),
                });
                handshake.hold(answer, cx.incoming_closed()).await
            })
            .await
    }
}

/// The v2 implementation.
struct V2Client(Arc<Handshake>);

impl ConnectTo<Agent> for V2Client {
    async fn connect_to(
        self,
        agent: impl ConnectTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let handshake = self.0;
        let router = Arc::clone(&handshake.router);
        let policy = Arc::clone(&handshake.policy);
        Client
            .v2()
            .name(CLIENT_NAME)
            .on_receive_notification(
                async move |n: v2::UpdateSessionNotification, _cx| {
                    router.route(&n.session_id.0, TurnEvent::of_v2(n.update));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |req: v2::RequestPermissionRequest, responder, _cx| {
                    let options: Vec<_> = req
                        .options
                        .iter()
                        .filter_map(|o| Some((o.option_id.0.to_string(), kind_of_v2(&o.kind)?)))
                        .collect();
                    let outcome = match policy(&req.session_id.0, &options) {
                        Some(id) => v2::RequestPermissionOutcome::Selected(
                            v2::SelectedPermissionOutcome::new(id),
                        ),
                        None => v2::RequestPermissionOutcome::Cancelled(
                            v2::CancelledPermissionOutcome::new(),
                        ),
                    };
                    responder.respond(v2::RequestPermissionResponse::new(outcome))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(agent, async move |cx: V2ConnectionTo<Agent>| {
                let answer = match cx.send_initialize(v2_initialize()).block_task().await {
                    Ok(InitializeOutcome::Initialized(init)) => Ok(Ready {
                        cx: Connection::V2(cx.clone()),
                        info: info_of_v2(&init),
                    }),
                    // The agent chose v1: the connector hands the connection
                    // to the v1 implementation, and this one is dropped.
                    Ok(_) => return Ok(()),
                    Err(e) => Err(e),
                };
                handshake.hold(answer, cx.incoming_closed()).await
            })
            .await
    }
}

/// Which versions a connection may negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Versions {
    /// Ask for 2; go on in 1 if the agent answers 1.
    UpToV2,
    /// Ask for 1 only (after an agent refused a request for 2).
    V1Only,
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
    /// what the agent wrote to stderr. An agent that answers the request for
    /// protocol version 2 with an error is started again and asked for 1.
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
        let observe = move |line: &str, direction: LineDirection| tap.observe(line, direction);
        let agent: AgentFactory = Arc::new(move || {
            DynConnectTo::new(AcpAgent::new(launch.clone()).with_debug(observe.clone()))
        });
        let policy: PermissionPolicy = Arc::new(|_session, options| choose_permission(options));

        let first = connect(command, slot, &agent, &policy, Versions::UpToV2).await;
        let connected = match first {
            Err(AcpError::Agent { code, message, .. }) => {
                tracing::warn!(
                    slot,
                    code,
                    %message,
                    "the agent refused initialize asking for protocol version 2; \
                     starting it again and asking for version 1"
                );
                connect(command, slot, &agent, &policy, Versions::V1Only).await?
            }
            other => other?,
        };
        let client = AcpClient {
            slot,
            cx: connected.ready.cx,
            router: connected.router,
            info: connected.ready.info,
            driver: Some(connected.driver),
            shutdown: Some(connected.shutdown),
            ended: connected.ended,
        };
        tracing::info!(
            slot,
            agent = client.info.name.as_deref().unwrap_or("?"),
            protocol_version = %client.info.protocol_version,
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
    ) -> Result<Req::Response, AcpError>
    where
        Req::Response: Send + 'static,
    {
        let method = request.method().to_string();
        if self.has_exited() {
            return Err(AcpError::Exited { method });
        }
        let sent = self.cx.send(request);
        let mut ended = self.ended.clone();
        tokio::select! {
            result = tokio::time::timeout(timeout, sent) => match result {
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
        let (session_id, config_options) = match &self.cx {
            Connection::V1(_) => {
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
                (
                    response.session_id.0.to_string(),
                    response.config_options.unwrap_or_default(),
                )
            }
            Connection::V2(_) => {
                let mcp: Vec<v2::McpServer> =
                    params.mcp_servers.iter().map(to_v2_mcp_server).collect();
                let mut request = v2::NewSessionRequest::new(params.cwd).mcp_servers(mcp);
                if let Some(prompt) = params.system_prompt.filter(|_| self.info.system_prompt) {
                    request =
                        request.system_prompt(v2::SystemPrompt::new(vec![v2::ContentBlock::Text(
                            v2::TextContent::new(prompt),
                        )]));
                }
                if !params.meta.is_empty() {
                    request = request.meta(params.meta);
                }
                let response: v2::NewSessionResponse = self.request(request, RPC_TIMEOUT).await?;
                let options = response
                    .config_options
                    .into_iter()
                    .filter_map(config_option_of_v2)
                    .collect();
                (response.session_id.0.to_string(), options)
            }
        };
        if session_id.is_empty() {
            return Err(AcpError::Protocol {
                method: "session/new".into(),
                message: "empty sessionId".into(),
            });
        }
        Ok(NewSession {
            session_id,
            config_options,
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
        match &self.cx {
            Connection::V1(_) => self
                .request(
                    SetSessionConfigOptionRequest::new(
                        session_id.to_string(),
                        config_id.to_string(),
                        value,
                    ),
                    timeout,
                )
                .await
                .map(|_| ()),
            Connection::V2(_) => self
                .request(
                    v2::SetSessionConfigOptionRequest::new(
                        session_id.to_string(),
                        config_id.to_string(),
                        value,
                    ),
                    timeout,
                )
                .await
                .map(|_| ()),
        }
    }

    /// `session/cancel` (a notification).
    pub fn session_cancel(&self, session_id: &str) -> Result<(), AcpError> {
        let sent = match &self.cx {
            Connection::V1(_) => self
                .cx
                .notify(CancelNotification::new(session_id.to_string())),
            Connection::V2(_) => self
                .cx
                .notify(v2::CancelSessionNotification::new(session_id.to_string())),
        };
        sent.map_err(|e| AcpError::Transport {
            method: "session/cancel".into(),
            message: e.to_string(),
        })
    }

    /// Sends the prompt. The answer is the turn's stop reason in v1, and
    /// `None` (accepted; the end comes as an idle state) in v2.
    fn send_prompt(&self, session_id: &str, text: String) -> Answer<Option<StopReason>> {
        match &self.cx {
            Connection::V1(_) => {
                let request = PromptRequest::new(
                    session_id.to_string(),
                    vec![ContentBlock::Text(TextContent::new(text))],
                );
                let sent = self.cx.send(request);
                Box::pin(async move { sent.await.map(|answer| Some(answer.stop_reason)) })
            }
            Connection::V2(_) => {
                let request = v2::PromptRequest::new(
                    session_id.to_string(),
                    vec![v2::ContentBlock::Text(v2::TextContent::new(text))],
                );
                let sent = self.cx.send(request);
                Box::pin(async move { sent.await.map(|_accepted| None) })
            }
        }
    }

    /// Runs one `session/prompt` turn.
    ///
    /// The agent's text is collected from `session/update`. The turn ends when
    /// the agent ends it (v1: its answer to the prompt; v2: the session going
    /// idle), when a deadline passes (the turn is then cancelled and drained,
    /// and a [`AcpError::Timeout`] returned), or when `control` yields a signal
    /// (the turn is cancelled and drained, and the signal returned with what
    /// the turn produced).
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
        let (_route, updates) = self.router.register(session_id);
        let mut turn = Turn::new(self.send_prompt(session_id, text), updates);
        let started = Instant::now();
        let hard_deadline = started + limits.hard;
        let mut idle_deadline = started + limits.idle;
        let mut control_open = true;
        let mut ended = self.ended.clone();

        loop {
            let deadline = idle_deadline.min(hard_deadline);
            tokio::select! {
                biased;
                step = turn.step() => match step {
                    Step::Heard => idle_deadline = Instant::now() + limits.idle,
                    Step::Ended(end) => {
                        return end
                            .map(TurnEnd::Completed)
                            .map_err(|e| self.turn_error(METHOD, e));
                    }
                },
                signal = control.recv(), if control_open => match signal {
                    Some(signal) => {
                        let drained = self
                            .cancel_with_cleanup(session_id, turn, CANCEL_DRAIN_GRACE)
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
                        .cancel_with_cleanup(session_id, turn, CANCEL_DRAIN_GRACE)
                        .await;
                    return Err(AcpError::Timeout { method: METHOD.into(), after, kind });
                }
            }
        }
    }

    fn turn_error(&self, method: &str, e: TurnError) -> AcpError {
        match e {
            TurnError::Rpc(e) => self.map_error(method, e),
            TurnError::Ended(failure) => failure.into_error(method),
        }
    }

    async fn cancel_with_cleanup(
        &self,
        session_id: &str,
        mut turn: Turn,
        grace: Duration,
    ) -> Result<TurnOutput, AcpError> {
        const METHOD: &str = "session/cancel";
        self.session_cancel(session_id)?;
        let deadline = Instant::now() + grace;
        loop {
            tokio::select! {
                biased;
                step = turn.step() => match step {
                    Step::Heard => {}
                    Step::Ended(end) => return end.map_err(|e| self.turn_error(METHOD, e)),
                },
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
        let driver = self.driver.take()?;
        let shutdown = self.shutdown.take()?;
        end_connection(&shutdown, driver).await
    }
}

/// Builds the agent's transport: a process started from the command (each
/// call starts one).
type AgentFactory = Arc<dyn Fn() -> DynConnectTo<Client> + Send + Sync>;

/// A connection that answered `initialize`, with what drives it.
struct Connected {
    ready: Ready,
    router: Arc<UpdateRouter>,
    driver: JoinHandle<Option<String>>,
    shutdown: watch::Sender<bool>,
    ended: watch::Receiver<bool>,
}

/// Starts one connection to the agent `agent` builds and runs `initialize`
/// on it, asking for the `versions` given.
async fn connect(
    command: &str,
    slot: usize,
    agent: &AgentFactory,
    policy: &PermissionPolicy,
    versions: Versions,
) -> Result<Connected, AcpError> {
    let spawn_err = |message: String| AcpError::Spawn {
        command: command.to_string(),
        message,
    };
    let router = Arc::new(UpdateRouter::default());
    let (ready_tx, ready_rx) = oneshot::channel();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (ended_tx, ended_rx) = watch::channel(false);
    let handshake = Arc::new(Handshake {
        router: Arc::clone(&router),
        policy: Arc::clone(policy),
        ready: Mutex::new(Some(ready_tx)),
        shutdown: shutdown_rx,
    });
    let v1 = Arc::clone(&handshake);
    let mut connector = Client
        .protocol_connector()
        .with_v1(move || V1Client(Arc::clone(&v1)));
    if versions == Versions::UpToV2 {
        connector = connector.with_v2(move || V2Client(Arc::clone(&handshake)));
    }

    let agent = Arc::clone(agent);
    let driver = tokio::spawn(async move {
        let result = connector.connect_to(move || agent()).await;
        let failure = result.err().map(|e| describe_connection_error(&e));
        if let Some(failure) = &failure {
            tracing::debug!(slot, error = %failure, "agent connection ended with an error");
        }
        let _ = ended_tx.send(true);
        failure
    });

    let ready = tokio::time::timeout(RPC_TIMEOUT, ready_rx).await;
    let ready = match ready {
        Ok(Ok(Ok(ready))) => ready,
        Ok(Ok(Err(e))) if !agent_client_protocol::is_incoming_transport_closed(&e) => {
            let _ = end_connection(&shutdown_tx, driver).await;
            return Err(AcpError::Agent {
                method: "initialize".into(),
                code: e.code.value(),
                message: e.message,
                data: e.data,
            });
        }
        Ok(_) => {
            let failure = end_connection(&shutdown_tx, driver).await;
            return Err(spawn_err(failure.unwrap_or_else(|| {
                "the agent exited before answering initialize".to_string()
            })));
        }
        Err(_) => {
            let _ = end_connection(&shutdown_tx, driver).await;
            return Err(AcpError::Timeout {
                method: "initialize".into(),
                after: RPC_TIMEOUT,
                kind: TimeoutKind::Request,
            });
        }
    };
    Ok(Connected {
        ready,
        router,
        driver,
        shutdown: shutdown_tx,
        ended: ended_rx,
    })
}

/// Asks the connection to end (stdin EOF, then SIGTERM/SIGKILL by the SDK),
/// and if that takes too long, drops it, which SIGKILLs the process group at
/// once. Returns why the connection failed, if it did.
async fn end_connection(
    shutdown: &watch::Sender<bool>,
    mut driver: JoinHandle<Option<String>>,
) -> Option<String> {
    let _ = shutdown.send(true);
    match tokio::time::timeout(Duration::from_secs(5), &mut driver).await {
        Ok(joined) => joined.ok().flatten(),
        Err(_) => {
            driver.abort();
            let _ = driver.await;
            None
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

/// One turn in flight: the prompt's answer still to come, and what the
/// session says meanwhile.
struct Turn {
    /// `None` once answered (v2: the prompt was accepted).
    answer: Option<Answer<Option<StopReason>>>,
    updates: mpsc::UnboundedReceiver<TurnEvent>,
    /// The agent's messages so far, in the order they began.
    messages: Vec<(Option<String>, String)>,
    usage_used: Option<u64>,
}

/// What a turn did next.
enum Step {
    /// The agent said something (the idle deadline starts again).
    Heard,
    /// The turn is over.
    Ended(Result<TurnOutput, TurnError>),
}

/// How a turn failed.
enum TurnError {
    /// The prompt request failed.
    Rpc(agent_client_protocol::Error),
    /// v2: the turn ended with an error.
    Ended(AgentFailure),
}

impl Turn {
    fn new(
        answer: Answer<Option<StopReason>>,
        updates: mpsc::UnboundedReceiver<TurnEvent>,
    ) -> Turn {
        Turn {
            answer: Some(answer),
            updates,
            messages: Vec::new(),
            usage_used: None,
        }
    }

    /// Waits for the next thing the turn does.
    async fn step(&mut self) -> Step {
        loop {
            let answer = async {
                match self.answer.as_mut() {
                    Some(answer) => answer.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                result = answer => {
                    self.answer = None;
                    match result {
                        // v1: the answer ends the turn. Updates sent before it
                        // are already queued.
                        Ok(Some(reason)) => {
                            self.drain();
                            return Step::Ended(Ok(self.output(reason)));
                        }
                        // v2: accepted; the end comes as an idle state.
                        Ok(None) => {}
                        Err(e) => return Step::Ended(Err(TurnError::Rpc(e))),
                    }
                }
                event = self.updates.recv() => match event {
                    Some(TurnEvent::Idle(end)) => {
                        return Step::Ended(match end {
                            Ok(reason) => Ok(self.output(reason)),
                            Err(failure) => Err(TurnError::Ended(failure)),
                        });
                    }
                    Some(event) => {
                        self.apply(event);
                        return Step::Heard;
                    }
                    // The router outlives the turn; this is never reached.
                    None => std::future::pending::<()>().await,
                },
            }
        }
    }

    fn apply(&mut self, event: TurnEvent) {
        match event {
            TurnEvent::Text {
                message,
                text,
                whole,
            } => match self.messages.iter_mut().find(|(id, _)| *id == message) {
                Some((_, kept)) if whole => *kept = text,
                Some((_, kept)) => kept.push_str(&text),
                None => self.messages.push((message, text)),
            },
            TurnEvent::Usage(used) => self.usage_used = Some(used),
            TurnEvent::Idle(_) => {}
        }
    }

    /// Applies what is already queued (v1 sends a turn's updates before its answer).
    fn drain(&mut self) {
        while let Ok(event) = self.updates.try_recv() {
            self.apply(event);
        }
    }

    fn output(&self, reason: StopReason) -> TurnOutput {
        TurnOutput {
            text: self
                .messages
                .iter()
                .map(|(_, text)| text.as_str())
                .collect(),
            stop_reason: Some(reason),
            usage_used: self.usage_used,
        }
    }
}

/// A v2 configuration option in the v1 shape the rest of the harness reads
/// (the same JSON for the select options it uses); one that does not fit is
/// left out.
fn config_option_of_v2(option: v2::SessionConfigOption) -> Option<SessionConfigOption> {
    let json = serde_json::to_value(&option).ok()?;
    match serde_json::from_value(json) {
        Ok(option) => Some(option),
        Err(e) => {
            tracing::debug!(error = %e, "a v2 configuration option has no v1 reading; left out");
            None
        }
    }
}

fn to_v2_mcp_server(server: &McpServerConfig) -> v2::McpServer {
    v2::McpServer::Stdio(
        v2::McpServerStdio::new(server.name.clone(), Path::new(&server.command))
            .args(server.args.clone())
            .env(
                server
                    .env
                    .iter()
                    .map(|v| v2::EnvVariable::new(v.name.clone(), v.value.clone()))
                    .collect(),
            ),
    )
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

    fn options(kinds: &[PermissionOptionKind]) -> Vec<(String, PermissionOptionKind)> {
        kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("opt{i}"), *k))
            .collect()
    }

    #[test]
    fn permission_prefers_allow_once_then_reject_once() {
        let r = options(&[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::AllowOnce,
        ]);
        assert_eq!(choose_permission(&r).as_deref(), Some("opt1"));
        let r = options(&[
            PermissionOptionKind::AllowAlways,
            PermissionOptionKind::RejectOnce,
        ]);
        assert_eq!(choose_permission(&r).as_deref(), Some("opt1"));
        let r = options(&[PermissionOptionKind::AllowAlways]);
        assert_eq!(choose_permission(&r), None);
    }

    fn text(message: Option<&str>, text: &str, whole: bool) -> TurnEvent {
        TurnEvent::Text {
            message: message.map(str::to_owned),
            text: text.to_owned(),
            whole,
        }
    }

    async fn run(mut turn: Turn) -> Result<TurnOutput, TurnError> {
        loop {
            if let Step::Ended(end) = turn.step().await {
                return end;
            }
        }
    }

    #[tokio::test]
    async fn a_v2_turn_ends_when_the_session_goes_idle_with_each_message_upserted() {
        let (tx, rx) = mpsc::unbounded_channel();
        let accepted: Answer<Option<StopReason>> = Box::pin(async { Ok(None) });
        for event in [
            text(Some("m1"), "Hel", false),
            text(Some("m1"), "lo. ", false),
            text(Some("m2"), "draft", true),
            TurnEvent::Usage(7),
            text(Some("m2"), "Done.", true),
            TurnEvent::Idle(Ok(StopReason::MaxTokens)),
            text(Some("m3"), "after the end", false),
        ] {
            tx.send(event).unwrap();
        }
        let Ok(output) = run(Turn::new(accepted, rx)).await else {
            panic!("the turn ended with an error");
        };
        assert_eq!(output.text, "Hello. Done.");
        assert_eq!(output.stop_reason, Some(StopReason::MaxTokens));
        assert_eq!(output.usage_used, Some(7));
    }

    #[tokio::test]
    async fn a_v1_turn_ends_with_its_answer_after_the_updates_sent_before_it() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(text(None, "one ", false)).unwrap();
        tx.send(text(None, "two", false)).unwrap();
        let answered: Answer<Option<StopReason>> =
            Box::pin(async { Ok(Some(StopReason::EndTurn)) });
        let Ok(output) = run(Turn::new(answered, rx)).await else {
            panic!("the turn ended with an error");
        };
        assert_eq!(output.text, "one two");
        assert_eq!(output.stop_reason, Some(StopReason::EndTurn));
    }

    #[tokio::test]
    async fn a_v2_turn_that_ends_with_an_error_is_the_agent_error_v1_would_have_answered() {
        let (tx, rx) = mpsc::unbounded_channel();
        let error = v2::Error::new(-32603, "Internal error: Prompt is too long");
        let reason = v2::StopReason::Error(v2::ErrorStopReason::new().error(error));
        tx.send(TurnEvent::Idle(stop_of_v2(Some(reason)))).unwrap();
        let accepted: Answer<Option<StopReason>> = Box::pin(async { Ok(None) });
        let Err(TurnError::Ended(failure)) = run(Turn::new(accepted, rx)).await else {
            panic!("the turn did not end with the agent's error");
        };
        let error = failure.into_error("session/prompt");
        assert_eq!(error.agent_code(), Some(-32603));
        assert!(error.to_string().contains("Prompt is too long"), "{error}");
        assert_eq!(stop_of_v2(None), Ok(StopReason::EndTurn));
        assert_eq!(
            stop_of_v2(Some(v2::StopReason::Cancelled)),
            Ok(StopReason::Cancelled)
        );
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
