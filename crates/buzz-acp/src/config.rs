//! Command line and environment: every flag with upstream's name and default.
//!
//! [`CliArgs`] is what clap parses (flags and `BUZZ_ACP_*` variables);
//! [`Config`] is the validated, resolved form the harness runs on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use clap::builder::BoolishValueParser;

use crate::auth_tag::AuthTag;
use crate::scope::SessionPolicy;

/// Per-turn silence limit when none is configured.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 900;
/// Hard wall clock per turn when none is configured.
pub const DEFAULT_MAX_TURN_DURATION_SECS: u64 = 7200;
/// The largest accepted hard limit (one week).
pub const MAX_TURN_DURATION_CEILING_SECS: u64 = 604_800;
/// Timeout of non-prompt requests (initialize, session/new, …).
pub const RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout of model and permission-mode requests after `session/new`.
pub const CONFIG_RPC_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a cancelled turn may take to answer before the worker is respawned.
pub const CANCEL_DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long a thread waits for its busy owning worker before forking onto
/// another worker (and therefore onto a fresh session).
pub const OWNER_HOLD: Duration = Duration::from_secs(10);
/// Attempts before a failing batch is dead-lettered.
pub const MAX_BATCH_ATTEMPTS: u32 = 3;

/// Errors turning arguments into a [`Config`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is out of range or malformed.
    #[error("invalid {flag}: {message}")]
    Invalid {
        /// The flag (and its environment variable).
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A file named by a flag cannot be read.
    #[error("cannot read {flag} file {path}: {source}")]
    File {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Permission mode requested after `session/new` (when the agent offers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum PermissionMode {
    /// Leave the agent's default; nothing is sent.
    Default,
    /// Auto-accept file edits.
    AcceptEdits,
    /// Skip permission prompts (upstream's default for unattended agents).
    #[default]
    BypassPermissions,
    /// Planning only.
    Plan,
}

impl PermissionMode {
    /// The ACP mode id the adapters use.
    pub fn wire(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::Plan => "plan",
        }
    }
}

/// What to do with a mention that arrives while its scope has a turn in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MultipleEventHandling {
    /// Hand it to the running turn, which cancels and re-runs with both.
    #[default]
    Steer,
    /// Queue it for the next turn of the scope.
    Queue,
}

/// The command line. Every flag also reads its `BUZZ_ACP_*` variable.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "buzz-acp",
    version,
    about = "Bridge Buzz chat events to an ACP coding agent"
)]
pub struct CliArgs {
    /// The Nostr relay, ws:// or wss:// (upstream's transport). Give this or --relay-dir.
    #[arg(long, env = "BUZZ_RELAY_URL", conflicts_with = "relay_dir")]
    pub relay_url: Option<String>,

    /// The file relay directory (events.jsonl, channels.json): the model's embedded transport
    /// for tests that drive time. Give this or --relay-url.
    #[arg(long, env = "BUZZ_ACP_RELAY_DIR")]
    pub relay_dir: Option<PathBuf>,

    /// The agent's secret key, hex or nsec (required with --relay-url: it signs AUTH, NIP-98
    /// and replies). Read from the environment rather than the command line where possible.
    #[arg(long, env = "BUZZ_PRIVATE_KEY", hide = true)]
    pub private_key: Option<String>,

    /// The owner's attestation of the agent's key (NIP-OA): the JSON of an `auth` tag, sent in
    /// the `x-auth-tag` header of every REST request to the relay (a members-only relay admits
    /// the agent through its owner). It must name the same owner as --owner-pubkey.
    #[arg(long, env = "BUZZ_AUTH_TAG")]
    pub auth_tag: Option<String>,

    /// The agent command line, e.g. "claude-agent-acp" or "node agent.js --flag".
    #[arg(long, env = "BUZZ_ACP_AGENT_COMMAND")]
    pub agent_command: String,

    /// This agent's public key (64 hex characters). Derived from --private-key when that is
    /// given (both given: they must match).
    #[arg(long, env = "BUZZ_ACP_AGENT_PUBKEY")]
    pub agent_pubkey: Option<String>,

    /// The owner's public key; only the owner may send `!rotate`, `!cancel`, `!model`.
    #[arg(long, alias = "agent-owner", env = "BUZZ_ACP_OWNER_PUBKEY")]
    pub owner_pubkey: Option<String>,

    /// Who may address the agent: owner-only, allowlist, anyone or nobody. Anyone on a relay
    /// can mention the agent, and the agent runs tools: the default is the owner only.
    #[arg(long, env = "BUZZ_ACP_RESPOND_TO", value_enum, default_value_t = RespondToMode::OwnerOnly)]
    pub respond_to: RespondToMode,

    /// With --respond-to allowlist: the public keys (64 hex, comma-separated) who may address
    /// the agent besides its owner.
    #[arg(long, env = "BUZZ_ACP_RESPOND_TO_ALLOWLIST", value_delimiter = ',')]
    pub respond_to_allowlist: Vec<String>,

    /// Directory for durable harness state (the processed-event cursor).
    /// Default: $XDG_STATE_HOME/buzz-acp (or ~/.local/state/buzz-acp).
    #[arg(long, env = "BUZZ_ACP_STATE_DIR")]
    pub state_dir: Option<PathBuf>,

    /// Exit once every relay event is processed and no turn is in flight.
    #[arg(long)]
    pub once: bool,

    /// One session per channel or per thread.
    #[arg(long, env = "BUZZ_ACP_SESSION_POLICY", value_enum, default_value_t = SessionPolicy::Thread)]
    pub session_policy: SessionPolicy,

    /// Number of agent worker processes (1–32).
    #[arg(long, env = "BUZZ_ACP_AGENTS", default_value_t = 1)]
    pub agents: usize,

    /// Spawn workers only when accepted work arrives.
    #[arg(long, env = "BUZZ_ACP_LAZY_POOL", value_parser = BoolishValueParser::new(),
          default_value = "false", default_missing_value = "true", num_args = 0..=1)]
    pub lazy_pool: bool,

    /// Seconds of quiet before a woken lazy pool is torn back to empty slots (0 = never).
    #[arg(long, env = "BUZZ_ACP_IDLE_POOL_SLEEP", default_value_t = 0)]
    pub idle_pool_sleep: u64,

    /// Messages of thread/DM history fetched before a prompt (0–100; 0 disables).
    #[arg(long, env = "BUZZ_ACP_CONTEXT_MESSAGE_LIMIT", default_value_t = 12)]
    pub context_message_limit: usize,

    /// Rotate a session after N successful turns (0 = never).
    #[arg(long, env = "BUZZ_ACP_MAX_TURNS_PER_SESSION", default_value_t = 0)]
    pub max_turns_per_session: u32,

    /// Per-turn silence limit in seconds.
    #[arg(long, env = "BUZZ_ACP_IDLE_TIMEOUT", default_value_t = DEFAULT_IDLE_TIMEOUT_SECS)]
    pub idle_timeout: u64,

    /// Hard wall-clock limit per turn in seconds.
    #[arg(long, env = "BUZZ_ACP_MAX_TURN_DURATION", default_value_t = DEFAULT_MAX_TURN_DURATION_SECS)]
    pub max_turn_duration: u64,

    /// Exit after N seconds with no dispatched event and no turn in flight (0 = never).
    #[arg(long, env = "BUZZ_ACP_EXIT_AFTER_INACTIVITY", default_value_t = 0)]
    pub exit_after_inactivity: u64,

    /// Desired model, applied after every `session/new` when the agent offers it.
    #[arg(long, env = "BUZZ_ACP_MODEL")]
    pub model: Option<String>,

    /// Permission mode applied after `session/new` when the agent offers it.
    #[arg(long, env = "BUZZ_ACP_PERMISSION_MODE", value_enum, default_value_t = PermissionMode::BypassPermissions)]
    pub permission_mode: PermissionMode,

    /// A first prompt sent on every new session.
    #[arg(long, env = "BUZZ_ACP_INITIAL_MESSAGE")]
    pub initial_message: Option<String>,

    /// Text of the system prompt.
    #[arg(long, env = "BUZZ_ACP_SYSTEM_PROMPT")]
    pub system_prompt: Option<String>,

    /// File holding the system prompt (wins over --system-prompt).
    #[arg(long, env = "BUZZ_ACP_SYSTEM_PROMPT_FILE")]
    pub system_prompt_file: Option<PathBuf>,

    /// Agent name used in session titles.
    #[arg(long, env = "BUZZ_ACP_SESSION_TITLE")]
    pub session_title: Option<String>,

    /// Mid-turn mentions: steer the running turn or queue for the next.
    #[arg(long, env = "BUZZ_ACP_MULTIPLE_EVENT_HANDLING", value_enum, default_value_t = MultipleEventHandling::Steer)]
    pub multiple_event_handling: MultipleEventHandling,

    /// Only answer events that mention this agent.
    #[arg(long, env = "BUZZ_ACP_REQUIRE_MENTION", value_parser = BoolishValueParser::new(),
          default_value = "true", default_missing_value = "true", num_args = 0..=1)]
    pub require_mention: bool,

    /// Record every ACP frame and lifecycle event to this JSONL file.
    #[arg(long, env = "BUZZ_ACP_OBSERVER_LOG")]
    pub observer_log: Option<PathBuf>,

    /// Working directory sent to the agent (default: the current directory).
    #[arg(long, env = "BUZZ_ACP_CWD")]
    pub cwd: Option<PathBuf>,

    /// MCP servers as JSON: [{"name":..,"command":..,"args":[..],"env":[{"name":..,"value":..}]}].
    #[arg(long, env = "BUZZ_ACP_MCP_SERVERS")]
    pub mcp_servers: Option<String>,

    /// How often the file relay is polled, in milliseconds.
    #[arg(long, env = "BUZZ_ACP_RELAY_POLL_MS", default_value_t = 100)]
    pub relay_poll_ms: u64,
}

/// An MCP server handed to every `session/new`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Server name.
    pub name: String,
    /// Executable.
    pub command: String,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables.
    #[serde(default)]
    pub env: Vec<EnvVar>,
}

/// One environment variable of an MCP server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// `--respond-to`: who may address the agent (upstream's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RespondToMode {
    /// Only the owner (`--agent-owner`).
    OwnerOnly,
    /// The owner and the keys of `--respond-to-allowlist`.
    Allowlist,
    /// Everyone.
    Anyone,
    /// No one: the agent answers nothing.
    Nobody,
}

/// Who may address the agent, resolved: the rule [`RespondTo::admits`] applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespondTo {
    /// Only the owner, if one is configured.
    OwnerOnly,
    /// The owner and these keys (lowercase hex).
    Allowlist(std::collections::BTreeSet<String>),
    /// Everyone.
    Anyone,
    /// No one.
    Nobody,
}

impl RespondTo {
    /// Whether an event by `author` may reach the agent, given the configured owner.
    pub fn admits(&self, author: &str, owner: Option<&str>) -> bool {
        let is_owner = owner.is_some_and(|o| o.eq_ignore_ascii_case(author));
        match self {
            RespondTo::OwnerOnly => is_owner,
            RespondTo::Allowlist(keys) => is_owner || keys.contains(&author.to_ascii_lowercase()),
            RespondTo::Anyone => true,
            RespondTo::Nobody => false,
        }
    }
}

/// Where events come from and replies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEndpoint {
    /// A Nostr relay (ws:// or wss://), as upstream.
    Nostr {
        /// The relay's URL as given (validated).
        url: String,
    },
    /// The model's embedded file relay (a directory).
    File(PathBuf),
}

/// What the agent shows a relay: its signing keys, and its owner's attestation of them (a
/// NIP-OA auth tag) when configured. `Debug` shows the public key only.
#[derive(Clone)]
pub struct AgentKeys {
    /// The agent's keys (AUTH, NIP-98, replies).
    pub keys: nostr::Keys,
    /// Sent with every REST request, for relays that admit the agent through its owner.
    pub auth_tag: Option<AuthTag>,
}

impl AgentKeys {
    /// `keys`, without an attestation.
    pub fn new(keys: nostr::Keys) -> Self {
        AgentKeys {
            keys,
            auth_tag: None,
        }
    }
}

impl std::fmt::Debug for AgentKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AgentKeys({})", self.keys.public_key().to_hex())
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The relay.
    pub relay: RelayEndpoint,
    /// The agent's secret key (required by a Nostr relay) and its owner's attestation.
    pub agent_keys: Option<AgentKeys>,
    /// Who may address the agent.
    pub respond_to: RespondTo,
    /// Agent command line.
    pub agent_command: String,
    /// Agent public key, lowercase hex.
    pub agent_pubkey: String,
    /// Owner public key, lowercase hex.
    pub owner_pubkey: Option<String>,
    /// Durable state directory.
    pub state_dir: PathBuf,
    /// Exit when idle and drained.
    pub once: bool,
    /// Session split policy.
    pub session_policy: SessionPolicy,
    /// Pool size.
    pub agents: usize,
    /// Lazy pool.
    pub lazy_pool: bool,
    /// Idle pool sleep (None = never).
    pub idle_pool_sleep: Option<Duration>,
    /// Context window size.
    pub context_message_limit: usize,
    /// Proactive rotation bound (None = never).
    pub max_turns_per_session: Option<u32>,
    /// Per-turn silence limit.
    pub idle_timeout: Duration,
    /// Per-turn hard limit.
    pub max_turn_duration: Duration,
    /// Inactivity exit (None = never).
    pub exit_after_inactivity: Option<Duration>,
    /// Desired model.
    pub model: Option<String>,
    /// Permission mode.
    pub permission_mode: PermissionMode,
    /// First prompt of every new session.
    pub initial_message: Option<String>,
    /// System prompt (policy session model appended).
    pub system_prompt: String,
    /// Agent name for session titles (sanitized).
    pub session_title: Option<String>,
    /// Mid-turn mention handling.
    pub multiple_event_handling: MultipleEventHandling,
    /// Mention filter.
    pub require_mention: bool,
    /// Observer log path.
    pub observer_log: Option<PathBuf>,
    /// Agent working directory (absolute).
    pub cwd: PathBuf,
    /// MCP servers.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Relay poll interval.
    pub relay_poll: Duration,
    /// The executable that runs agents under the agent guard (the harness
    /// binary itself, set by `main`); `None` starts agents directly. See
    /// [`crate::guard`].
    pub agent_guard: Option<PathBuf>,
}

fn invalid(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag,
        message: message.into(),
    }
}

fn pubkey(flag: &'static str, raw: &str) -> Result<String, ConfigError> {
    if crate::relay::is_event_id(raw) {
        Ok(raw.to_ascii_lowercase())
    } else {
        Err(invalid(flag, "expected 64 hex characters"))
    }
}

/// The platform state directory: `$XDG_STATE_HOME/buzz-acp`, else
/// `$HOME/.local/state/buzz-acp`.
pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("buzz-acp"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".local/state/buzz-acp"))
}

/// Strips control characters, collapses whitespace and caps at 80 chars.
pub fn sanitize_session_title(raw: &str) -> Option<String> {
    let cleaned: String = raw
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let capped: String = cleaned.chars().take(80).collect();
    (!capped.is_empty()).then_some(capped)
}

impl Config {
    /// Validates parsed arguments.
    pub fn from_args(args: CliArgs) -> Result<Config, ConfigError> {
        let keys = args
            .private_key
            .as_deref()
            .map(|raw| {
                nostr::Keys::parse(raw.trim()).map_err(|_| {
                    invalid(
                        "--private-key (BUZZ_PRIVATE_KEY)",
                        "expected 64 hex characters or an nsec key",
                    )
                })
            })
            .transpose()?;
        let agent_pubkey = match (&keys, args.agent_pubkey.as_deref()) {
            (Some(keys), given) => {
                let derived = keys.public_key().to_hex();
                if given.is_some_and(|g| !g.eq_ignore_ascii_case(&derived)) {
                    return Err(invalid(
                        "--agent-pubkey (BUZZ_ACP_AGENT_PUBKEY)",
                        "does not belong to --private-key (BUZZ_PRIVATE_KEY)",
                    ));
                }
                derived
            }
            (None, Some(given)) => pubkey("--agent-pubkey (BUZZ_ACP_AGENT_PUBKEY)", given)?,
            (None, None) => {
                return Err(invalid(
                    "--private-key (BUZZ_PRIVATE_KEY)",
                    "the agent needs a key: --private-key, or --agent-pubkey with --relay-dir",
                ));
            }
        };
        let relay = match (args.relay_url, args.relay_dir) {
            (Some(url), _) => {
                if !(url.starts_with("ws://") || url.starts_with("wss://")) {
                    return Err(invalid(
                        "--relay-url (BUZZ_RELAY_URL)",
                        "expected a ws:// or wss:// URL",
                    ));
                }
                if keys.is_none() {
                    return Err(invalid(
                        "--private-key (BUZZ_PRIVATE_KEY)",
                        "is required with --relay-url: it signs AUTH, requests and replies",
                    ));
                }
                RelayEndpoint::Nostr { url }
            }
            (None, Some(dir)) => RelayEndpoint::File(dir),
            (None, None) => {
                return Err(invalid(
                    "--relay-url (BUZZ_RELAY_URL)",
                    "give --relay-url or --relay-dir",
                ));
            }
        };
        let respond_to = match args.respond_to {
            RespondToMode::OwnerOnly => RespondTo::OwnerOnly,
            RespondToMode::Anyone => RespondTo::Anyone,
            RespondToMode::Nobody => RespondTo::Nobody,
            RespondToMode::Allowlist => {
                let keys = args
                    .respond_to_allowlist
                    .iter()
                    .map(|k| {
                        pubkey(
                            "--respond-to-allowlist (BUZZ_ACP_RESPOND_TO_ALLOWLIST)",
                            k.trim(),
                        )
                    })
                    .collect::<Result<std::collections::BTreeSet<_>, _>>()?;
                if keys.is_empty() {
                    return Err(invalid(
                        "--respond-to-allowlist (BUZZ_ACP_RESPOND_TO_ALLOWLIST)",
                        "is required with --respond-to allowlist",
                    ));
                }
                RespondTo::Allowlist(keys)
            }
        };
        let owner_pubkey = args
            .owner_pubkey
            .as_deref()
            .map(|o| pubkey("--owner-pubkey (BUZZ_ACP_OWNER_PUBKEY)", o))
            .transpose()?;
        let auth_tag = args
            .auth_tag
            .as_deref()
            .map(|raw| {
                AuthTag::parse(raw)
                    .map_err(|e| invalid("--auth-tag (BUZZ_AUTH_TAG)", e.to_string()))
            })
            .transpose()?;
        if let (Some(tag), Some(owner)) = (&auth_tag, &owner_pubkey)
            && tag.owner().to_hex() != *owner
        {
            return Err(invalid(
                "--auth-tag (BUZZ_AUTH_TAG)",
                format!(
                    "it attests owner {}, but --owner-pubkey (BUZZ_ACP_OWNER_PUBKEY) is {owner}",
                    tag.owner().to_hex()
                ),
            ));
        }
        let agent_keys = match (keys, auth_tag) {
            (Some(keys), auth_tag) => Some(AgentKeys { keys, auth_tag }),
            (None, Some(_)) => {
                return Err(invalid(
                    "--auth-tag (BUZZ_AUTH_TAG)",
                    "it attests the agent's key: give --private-key (BUZZ_PRIVATE_KEY) too",
                ));
            }
            (None, None) => None,
        };
        if !(1..=32).contains(&args.agents) {
            return Err(invalid("--agents (BUZZ_ACP_AGENTS)", "must be 1 to 32"));
        }
        if args.context_message_limit > 100 {
            return Err(invalid(
                "--context-message-limit (BUZZ_ACP_CONTEXT_MESSAGE_LIMIT)",
                "must be 0 to 100",
            ));
        }
        if args.max_turn_duration == 0 || args.max_turn_duration > MAX_TURN_DURATION_CEILING_SECS {
            return Err(invalid(
                "--max-turn-duration (BUZZ_ACP_MAX_TURN_DURATION)",
                format!("must be 1 to {MAX_TURN_DURATION_CEILING_SECS} seconds"),
            ));
        }
        if args.idle_timeout == 0 || args.idle_timeout >= args.max_turn_duration {
            return Err(invalid(
                "--idle-timeout (BUZZ_ACP_IDLE_TIMEOUT)",
                "must be at least 1 s and below --max-turn-duration",
            ));
        }
        if args.idle_pool_sleep > 0 && !args.lazy_pool {
            return Err(invalid(
                "--idle-pool-sleep (BUZZ_ACP_IDLE_POOL_SLEEP)",
                "needs --lazy-pool (BUZZ_ACP_LAZY_POOL)",
            ));
        }
        if args.agent_command.trim().is_empty() {
            return Err(invalid(
                "--agent-command (BUZZ_ACP_AGENT_COMMAND)",
                "is empty",
            ));
        }
        let state_dir = match args.state_dir {
            Some(dir) => dir,
            None => default_state_dir().ok_or_else(|| {
                invalid(
                    "--state-dir (BUZZ_ACP_STATE_DIR)",
                    "no XDG_STATE_HOME or HOME to derive a default from; pass --state-dir",
                )
            })?,
        };
        let cwd = match args.cwd {
            Some(dir) => dir,
            None => std::env::current_dir().map_err(|e| {
                invalid("--cwd (BUZZ_ACP_CWD)", format!("no current directory: {e}"))
            })?,
        };
        let cwd = absolute(&cwd);
        let base_prompt = match &args.system_prompt_file {
            Some(path) => std::fs::read_to_string(path).map_err(|source| ConfigError::File {
                flag: "--system-prompt-file (BUZZ_ACP_SYSTEM_PROMPT_FILE)",
                path: path.clone(),
                source,
            })?,
            None => args.system_prompt.clone().unwrap_or_default(),
        };
        let mcp_servers = match &args.mcp_servers {
            Some(raw) => serde_json::from_str(raw)
                .map_err(|e| invalid("--mcp-servers (BUZZ_ACP_MCP_SERVERS)", e.to_string()))?,
            None => Vec::new(),
        };
        if args.relay_poll_ms == 0 {
            return Err(invalid(
                "--relay-poll-ms (BUZZ_ACP_RELAY_POLL_MS)",
                "must be > 0",
            ));
        }
        Ok(Config {
            relay,
            agent_keys,
            respond_to,
            agent_command: args.agent_command,
            agent_pubkey,
            owner_pubkey,
            state_dir,
            once: args.once,
            session_policy: args.session_policy,
            agents: args.agents,
            lazy_pool: args.lazy_pool,
            idle_pool_sleep: (args.idle_pool_sleep > 0)
                .then(|| Duration::from_secs(args.idle_pool_sleep)),
            context_message_limit: args.context_message_limit,
            max_turns_per_session: (args.max_turns_per_session > 0)
                .then_some(args.max_turns_per_session),
            idle_timeout: Duration::from_secs(args.idle_timeout),
            max_turn_duration: Duration::from_secs(args.max_turn_duration),
            exit_after_inactivity: (args.exit_after_inactivity > 0)
                .then(|| Duration::from_secs(args.exit_after_inactivity)),
            model: args.model.filter(|m| !m.trim().is_empty()),
            permission_mode: args.permission_mode,
            initial_message: args.initial_message.filter(|m| !m.trim().is_empty()),
            system_prompt: args.session_policy.append_session_model(&base_prompt),
            session_title: args
                .session_title
                .as_deref()
                .and_then(sanitize_session_title),
            multiple_event_handling: args.multiple_event_handling,
            require_mention: args.require_mention,
            observer_log: args.observer_log,
            cwd,
            mcp_servers,
            relay_poll: Duration::from_millis(args.relay_poll_ms),
            agent_guard: None,
        })
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PK: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

    #[test]
    fn an_auth_tag_must_be_well_formed_and_name_the_owner() {
        const OWNER: &str = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let tag = format!(r#"["auth","{OWNER}","","{}"]"#, "ab".repeat(64));
        let secret = "01".repeat(32);
        let with = |owner: &str, tag: &str| {
            parse_argv(&[
                "--relay-url",
                "ws://127.0.0.1:3000",
                "--private-key",
                &secret,
                "--owner-pubkey",
                owner,
                "--auth-tag",
                tag,
            ])
        };
        let config = with(OWNER, &tag).unwrap();
        assert_eq!(
            config
                .agent_keys
                .and_then(|k| k.auth_tag)
                .map(|t| t.header_value().to_owned()),
            Some(tag.clone())
        );

        let other = with(PK, &tag).unwrap_err().to_string();
        assert!(
            other.contains("--auth-tag (BUZZ_AUTH_TAG)")
                && other.contains(&format!("attests owner {OWNER}")),
            "{other}"
        );
        let mangled = with(OWNER, "[\"auth\"]").unwrap_err().to_string();
        assert!(mangled.contains("expected 4 elements"), "{mangled}");
        let keyless = parse(&["--auth-tag", &tag]).unwrap_err().to_string();
        assert!(keyless.contains("give --private-key"), "{keyless}");
    }

    fn parse(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut argv = vec![
            "buzz-acp",
            "--relay-dir",
            "/tmp/relay",
            "--agent-command",
            "agent",
            "--agent-pubkey",
            PK,
            "--state-dir",
            "/tmp/state",
        ];
        argv.extend_from_slice(extra);
        Config::from_args(CliArgs::try_parse_from(argv).expect("clap parse"))
    }

    #[test]
    fn defaults_match_upstream() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.session_policy, SessionPolicy::Thread);
        assert_eq!(c.agents, 1);
        assert!(!c.lazy_pool);
        assert_eq!(c.idle_pool_sleep, None);
        assert_eq!(c.context_message_limit, 12);
        assert_eq!(c.max_turns_per_session, None);
        assert_eq!(c.idle_timeout, Duration::from_secs(900));
        assert_eq!(c.max_turn_duration, Duration::from_secs(7200));
        assert_eq!(c.permission_mode, PermissionMode::BypassPermissions);
        assert_eq!(c.multiple_event_handling, MultipleEventHandling::Steer);
        assert!(c.require_mention);
        assert!(c.system_prompt.contains("Session model"));
        assert_eq!(c.respond_to, RespondTo::OwnerOnly);
    }

    fn parse_argv(argv: &[&str]) -> Result<Config, ConfigError> {
        let mut full = vec![
            "buzz-acp",
            "--agent-command",
            "agent",
            "--state-dir",
            "/tmp/state",
        ];
        full.extend_from_slice(argv);
        Config::from_args(CliArgs::try_parse_from(full).expect("clap parse"))
    }

    #[test]
    fn a_nostr_relay_takes_the_agent_key_and_derives_the_public_key() {
        let keys = nostr::Keys::generate();
        let secret = keys.secret_key().to_secret_hex();
        let c = parse_argv(&[
            "--relay-url",
            "ws://127.0.0.1:3000",
            "--private-key",
            &secret,
        ])
        .unwrap();
        assert_eq!(c.agent_pubkey, keys.public_key().to_hex());
        assert_eq!(
            c.relay,
            RelayEndpoint::Nostr {
                url: "ws://127.0.0.1:3000".into()
            }
        );
        assert!(
            !format!("{c:?}").contains(&secret),
            "Debug never shows the secret key"
        );
    }

    #[test]
    fn the_relay_and_the_key_are_checked() {
        let secret = nostr::Keys::generate().secret_key().to_secret_hex();
        let no_key =
            parse_argv(&["--relay-url", "ws://127.0.0.1:3000", "--agent-pubkey", PK]).unwrap_err();
        assert!(no_key.to_string().contains("--private-key"), "{no_key}");
        let not_ws =
            parse_argv(&["--relay-url", "http://relay", "--private-key", &secret]).unwrap_err();
        assert!(not_ws.to_string().contains("ws://"), "{not_ws}");
        let bad_key =
            parse_argv(&["--relay-url", "ws://relay", "--private-key", "nope"]).unwrap_err();
        assert!(bad_key.to_string().contains("nsec"), "{bad_key}");
        assert!(
            !bad_key.to_string().contains("nope"),
            "the error does not echo the key"
        );
        let mismatch = parse_argv(&[
            "--relay-url",
            "ws://relay",
            "--private-key",
            &secret,
            "--agent-pubkey",
            PK,
        ])
        .unwrap_err();
        assert!(
            mismatch.to_string().contains("does not belong"),
            "{mismatch}"
        );
        let neither = parse_argv(&["--agent-pubkey", PK]).unwrap_err();
        assert!(neither.to_string().contains("--relay-url"), "{neither}");
        assert!(
            CliArgs::try_parse_from([
                "buzz-acp",
                "--agent-command",
                "a",
                "--relay-url",
                "ws://r",
                "--relay-dir",
                "/r"
            ])
            .is_err()
        );
    }

    #[test]
    fn respond_to_admits_as_upstream_decides() {
        let owner = "c3".repeat(32);
        let friend = "d4".repeat(32);
        let stranger = "e5".repeat(32);
        let owner_only = parse(&["--owner-pubkey", &owner]).unwrap();
        assert!(owner_only.respond_to.admits(&owner, Some(&owner)));
        assert!(!owner_only.respond_to.admits(&stranger, Some(&owner)));
        assert!(
            !owner_only.respond_to.admits(&stranger, None),
            "no owner: no one"
        );
        let allow = parse(&[
            "--respond-to",
            "allowlist",
            "--respond-to-allowlist",
            &friend.to_uppercase(),
        ])
        .unwrap();
        assert!(allow.respond_to.admits(&friend, None));
        assert!(!allow.respond_to.admits(&stranger, None));
        let missing = parse(&["--respond-to", "allowlist"]).unwrap_err();
        assert!(
            missing.to_string().contains("--respond-to-allowlist"),
            "{missing}"
        );
        assert!(
            parse(&["--respond-to", "anyone"])
                .unwrap()
                .respond_to
                .admits(&stranger, None)
        );
        assert!(
            !parse(&["--respond-to", "nobody"])
                .unwrap()
                .respond_to
                .admits(&owner, Some(&owner))
        );
    }

    #[test]
    fn idle_pool_sleep_needs_lazy_pool() {
        let err = parse(&["--idle-pool-sleep", "900"]).unwrap_err();
        assert!(err.to_string().contains("--lazy-pool"), "{err}");
        let c = parse(&["--lazy-pool", "--idle-pool-sleep", "900"]).unwrap();
        assert_eq!(c.idle_pool_sleep, Some(Duration::from_secs(900)));
    }

    #[test]
    fn ranges_are_enforced() {
        assert!(parse(&["--agents", "0"]).is_err());
        assert!(parse(&["--agents", "33"]).is_err());
        assert!(parse(&["--context-message-limit", "101"]).is_err());
        assert!(parse(&["--idle-timeout", "7200"]).is_err());
        assert!(parse(&["--max-turn-duration", "604801"]).is_err());
        assert!(parse(&["--mcp-servers", "{not json"]).is_err());
    }

    #[test]
    fn pubkeys_are_validated() {
        let mut argv = vec!["buzz-acp", "--relay-dir", "r", "--agent-command", "a"];
        argv.extend(["--agent-pubkey", "nothex"]);
        let err = Config::from_args(CliArgs::try_parse_from(argv).unwrap()).unwrap_err();
        assert!(err.to_string().contains("agent-pubkey"));
    }

    #[test]
    fn session_titles_are_sanitized() {
        assert_eq!(
            sanitize_session_title("  Dev\u{7}  Bot \n x ").as_deref(),
            Some("Dev Bot x")
        );
        assert_eq!(sanitize_session_title(" \n "), None);
        assert_eq!(sanitize_session_title(&"y".repeat(200)).unwrap().len(), 80);
    }

    #[test]
    fn permission_modes_have_adapter_wire_names() {
        assert_eq!(
            PermissionMode::BypassPermissions.wire(),
            "bypassPermissions"
        );
        assert_eq!(PermissionMode::AcceptEdits.wire(), "acceptEdits");
    }
}
