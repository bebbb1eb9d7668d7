//! What the lifecycle decides for a turn: where it runs and how its session is opened.

use buzz_session_store::SessionRecord;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::scope::Scope;

/// How a turn reaches the scope's session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "SessionRecord grew with the receipt fields of schema revision 1; left for the lifecycle rewrite"
)]
pub enum Via {
    /// Continue on the live session kept resident on the turn's worker: no `session/load`, no
    /// `session/new`.
    Hot {
        /// The resident session.
        session_id: String,
    },
    /// Reopen the stored session of the receipt (`session/resume` or `session/load`, whichever
    /// the agent advertises), falling back to a new session if the agent no longer has it.
    Warm {
        /// The receipt.
        record: SessionRecord,
    },
    /// Open a new session (`session/new`), which gets the whole context window.
    Cold {
        /// Why no stored session is reopened.
        reason: ColdReason,
    },
}

impl Via {
    /// The kind, for telemetry.
    pub fn kind(&self) -> ViaKind {
        match self {
            Via::Hot { .. } => ViaKind::Hot,
            Via::Warm { .. } => ViaKind::Warm,
            Via::Cold { .. } => ViaKind::Cold,
        }
    }
}

/// [`Via`] without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViaKind {
    /// See [`Via::Hot`].
    Hot,
    /// See [`Via::Warm`].
    Warm,
    /// See [`Via::Cold`].
    Cold,
}

/// Why a turn opens a new session instead of reopening a stored one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdReason {
    /// Restart resume is turned off (`--no-resume-sessions`).
    ResumeOff,
    /// No receipt for this scope.
    NoReceipt,
    /// The receipt was written under another requested model.
    ModelChanged,
    /// The receipt was written under another requested permission mode.
    PermissionModeChanged,
    /// The session was abandoned on purpose (rotate, model switch, rotation after a limit).
    Abandoned,
    /// Reopening the stored session kept failing without a definitive answer; the harness gave
    /// up on it (the thread was told).
    RestoreAbandoned,
    /// The receipt store could not be read.
    StoreUnavailable,
}

/// What the turn task needs to know about its session, carried to it with the turn's input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// How the session is reached.
    pub via: Via,
    /// The next `session/new` must ask a channel-keyed gateway for a fresh conversation
    /// (`_meta.freshSession`, #6103). Cleared only once a `session/new` succeeds.
    pub fresh: bool,
}

impl Plan {
    /// Extends the `_meta` of a `session/new` with the scope (so a gateway that keys state by
    /// channel can tell the threads of a channel apart) and, until a new session succeeds after
    /// an abandonment, `freshSession: true` (#6103).
    pub fn extend_meta(
        &self,
        mut meta: Map<String, Value>,
        scope: &impl Scope,
    ) -> Map<String, Value> {
        meta.extend(scope_meta(scope));
        if self.fresh {
            meta.insert("freshSession".into(), Value::Bool(true));
        }
        meta
    }
}

/// The params of a `session/load` or `session/resume` (the same shape): the stored session, the
/// working directory, the MCP servers (as sent with `session/new`) and the scope's `_meta`.
pub fn restore_params(
    session_id: &str,
    cwd: &std::path::Path,
    mcp_servers: Value,
    scope: &impl Scope,
) -> Value {
    serde_json::json!({
        "sessionId": session_id,
        "cwd": cwd,
        "mcpServers": mcp_servers,
        "_meta": scope_meta(scope),
    })
}

/// The `_meta` naming a scope, sent with `session/new`, `session/load` and `session/resume`:
/// `channelId` always, `threadRootEventId` for thread scopes.
pub fn scope_meta(scope: &impl Scope) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("channelId".into(), scope.channel().into());
    if let Some(root) = scope.thread_root() {
        meta.insert("threadRootEventId".into(), root.into());
    }
    meta
}

impl Default for Plan {
    /// What upstream does: a new session, no special meta.
    fn default() -> Self {
        Plan {
            via: Via::Cold {
                reason: ColdReason::ResumeOff,
            },
            fresh: false,
        }
    }
}

/// The state of one worker slot, as the pool reports it to the lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotView {
    /// No worker (lazy pool, after an idle sleep, or a respawn that may start now).
    Empty,
    /// A worker is being spawned.
    Spawning,
    /// An idle worker.
    Idle,
    /// The worker is checked out for a turn.
    Busy,
    /// The worker died; the slot waits before respawning.
    Backoff,
}

/// Where a scope's next turn should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Claim this idle worker.
    Slot(usize),
    /// Spawn a worker into this empty slot; the scope runs once it is up.
    Spawn(usize),
    /// Let the pool choose (upstream's routing: owner affinity, the busy-owner hold, any idle
    /// worker). Used when residency is off.
    Any,
}

/// The configuration a new session would get now. A resident created under another one is not
/// continued, and a receipt requested under another model or permission mode is not reopened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionConfig {
    /// A digest of everything fixed at `session/new` (cwd, MCP servers, model, permission mode).
    pub fingerprint: u64,
    /// The model the harness asks for now.
    pub requested_model: Option<String>,
    /// The permission mode the harness asks for now.
    pub requested_permission_mode: Option<String>,
}

impl SessionConfig {
    /// The configuration of a new session created now: `fixed` holds everything else fixed at
    /// `session/new` (cwd, MCP servers, …), and the requested model and permission mode are part
    /// of the fingerprint too.
    pub fn new(fixed: &[&str], model: Option<&str>, permission_mode: Option<&str>) -> Self {
        let mut parts = fixed.to_vec();
        parts.extend([model.unwrap_or(""), permission_mode.unwrap_or("")]);
        SessionConfig {
            fingerprint: fingerprint_of(&parts),
            requested_model: model.map(str::to_string),
            requested_permission_mode: permission_mode.map(str::to_string),
        }
    }
}

/// A stable 64-bit digest of configuration parts (FNV-1a; the parts are length-prefixed so
/// `["ab", "c"]` and `["a", "bc"]` differ). Stable across processes and releases, unlike
/// `std`'s hasher.
pub fn fingerprint_of(parts: &[&str]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for part in parts {
        feed(&(part.len() as u64).to_le_bytes());
        feed(part.as_bytes());
    }
    hash
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::TestScope;

    #[test]
    fn restore_params_have_the_shape_of_both_restore_requests() {
        let params = restore_params(
            "s1",
            std::path::Path::new("/srv"),
            json!([]),
            &TestScope::thread("c1", "r1"),
        );
        assert_eq!(
            params,
            json!({"sessionId": "s1", "cwd": "/srv", "mcpServers": [],
                   "_meta": {"channelId": "c1", "threadRootEventId": "r1"}})
        );
    }

    #[test]
    fn meta_names_the_scope_and_asks_for_a_fresh_session_only_when_planned() {
        let mut base = Map::new();
        base.insert("sessionTitle".into(), "Dev".into());
        let plan = Plan::default();
        let thread = TestScope::thread("c1", "r1");
        assert_eq!(
            Value::Object(plan.extend_meta(base.clone(), &thread)),
            json!({"sessionTitle": "Dev", "channelId": "c1", "threadRootEventId": "r1"})
        );
        let fresh = Plan {
            fresh: true,
            ..Plan::default()
        };
        assert_eq!(
            Value::Object(fresh.extend_meta(Map::new(), &TestScope::conversation("c2"))),
            json!({"channelId": "c2", "freshSession": true})
        );
    }

    #[test]
    fn fingerprints_are_stable_and_separate_parts() {
        assert_eq!(fingerprint_of(&["a", "b"]), fingerprint_of(&["a", "b"]));
        assert_ne!(fingerprint_of(&["ab", "c"]), fingerprint_of(&["a", "bc"]));
        assert_ne!(fingerprint_of(&[]), fingerprint_of(&[""]));
        assert_ne!(
            fingerprint_of(&["cwd", "m1"]),
            fingerprint_of(&["cwd", "m2"])
        );
    }
}
