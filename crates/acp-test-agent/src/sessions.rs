//! The table of live sessions of one agent process.
//!
//! A cheap-to-clone handle over a std `Mutex`: every method is short and synchronous and nothing
//! awaits under the lock, so the handlers (which run in the SDK's dispatch loop) never block each
//! other for long. Every change to a session is written to its transcript while the lock is held,
//! so the file order always matches the in-memory order, even with several prompts in flight.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    self, SessionConfigOption, SessionConfigOptionCategory, SessionConfigOptionValue,
    SessionConfigSelectOption,
};
use tokio::sync::oneshot;

use crate::reply;
use crate::transcript::{TRANSCRIPT_VERSION, Transcript, TranscriptError, Turn};

/// The `mode` config option's values and labels, in the order they are offered.
const MODES: [(&str, &str); 4] = [
    ("default", "Default"),
    ("acceptEdits", "Accept edits"),
    ("bypassPermissions", "Bypass permissions"),
    ("plan", "Plan"),
];

/// Why a session operation failed; converts into the JSON-RPC error the client sees.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// The session is neither live in this process nor (for restore) on disk.
    #[error("session {0} not found")]
    NotFound(String),
    /// `session/set_config_option` named an unknown option or an unoffered value.
    #[error("invalid config option {config_id}={value}: {reason}")]
    InvalidConfig {
        /// The `configId` the client sent.
        config_id: String,
        /// The value the client sent, rendered for the message.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The prompt would bring the session over `--context-limit-bytes`.
    #[error("prompt is too long: {used} bytes > {limit} maximum")]
    ContextFull {
        /// The session's user text with the prompt.
        used: u64,
        /// The limit.
        limit: u64,
    },
    /// The transcript could not be read or written.
    #[error(transparent)]
    Store(#[from] TranscriptError),
}

impl From<SessionError> for Error {
    fn from(err: SessionError) -> Self {
        match err {
            SessionError::NotFound(id) => schema::Error::session_not_found(id).into(),
            SessionError::InvalidConfig {
                config_id,
                value,
                reason,
            } => Error::invalid_params().data(
                serde_json::json!({ "configId": config_id, "value": value, "reason": reason }),
            ),
            // claude-agent-acp's words for a prompt that does not fit (no `data`).
            SessionError::ContextFull { .. } => {
                Error::new(-32603, "Internal error: Prompt is too long")
            }
            SessionError::Store(e) => Error::internal_error().data(e.to_string()),
        }
    }
}

/// What a prompt task needs after `begin_turn` recorded the user turn.
#[derive(Debug)]
pub(crate) struct TurnTicket {
    /// Identifies this prompt among the session's in-flight prompts.
    pub seq: u64,
    /// Index of the turn in the transcript, to attach the reply to.
    pub index: usize,
    /// Every user text of the session, this turn last.
    pub user_texts: Vec<String>,
    /// Cumulative bytes of user text, this turn included.
    pub used_bytes: u64,
    /// Fires when `session/cancel` (or `session/close`) asks this prompt to stop.
    pub cancelled: oneshot::Receiver<()>,
}

/// A session that is live in this process.
struct Live {
    /// The same content as the file on disk.
    transcript: Transcript,
    /// Cancel triggers of the prompts still running, by prompt sequence number.
    in_flight: HashMap<u64, oneshot::Sender<()>>,
}

/// All live sessions plus the prompt sequence counter.
#[derive(Default)]
struct Table {
    live: HashMap<String, Live>,
    next_seq: u64,
}

/// Handle to the live session table and the state dir backing it.
#[derive(Clone)]
pub(crate) struct Sessions {
    table: Arc<Mutex<Table>>,
    state_dir: Arc<PathBuf>,
    models: Arc<Vec<String>>,
}

impl Sessions {
    /// A table persisting into `state_dir` and offering `models` (first = default).
    pub fn new(state_dir: PathBuf, models: Vec<String>) -> Self {
        Self {
            table: Arc::default(),
            state_dir: Arc::new(state_dir),
            models: Arc::new(models),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A poisoned lock means a handler panicked mid-update; the table itself is still
        // consistent (every update is a single insert/assignment), so keep serving.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Creates, persists and registers a new session; returns its id and config options.
    pub fn create(
        &self,
        cwd: PathBuf,
        mcp_servers: serde_json::Value,
        meta: Option<serde_json::Value>,
    ) -> Result<(String, Vec<SessionConfigOption>), SessionError> {
        let mut session_id = fresh_session_id();
        // 64 random-ish bits make a clash practically impossible; the check makes it impossible
        // to silently overwrite another process's session should it ever happen.
        while Transcript::path(self.state_dir(), &session_id).exists() {
            session_id = fresh_session_id();
        }
        let transcript = Transcript {
            version: TRANSCRIPT_VERSION,
            session_id: session_id.clone(),
            cwd,
            mcp_servers,
            meta,
            model: self.models.first().cloned().unwrap_or_default(),
            mode: MODES[0].0.to_owned(),
            turns: Vec::new(),
        };
        let options = self.config_options(&transcript);
        let mut table = self.lock();
        transcript.write(self.state_dir())?;
        table.live.insert(
            session_id.clone(),
            Live {
                transcript,
                in_flight: HashMap::new(),
            },
        );
        Ok((session_id, options))
    }

    /// Reads the transcript from disk and makes the session live (replacing the in-memory copy if
    /// it already was, since another process sharing the state dir may have advanced it).
    /// Returns the transcript for replay.
    pub fn restore(&self, session_id: &str) -> Result<Transcript, SessionError> {
        let transcript = match Transcript::read(self.state_dir(), session_id) {
            Ok(t) => t,
            Err(TranscriptError::NotFound { .. }) => {
                return Err(SessionError::NotFound(session_id.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        let mut table = self.lock();
        match table.live.get_mut(session_id) {
            Some(live) => live.transcript = transcript.clone(),
            None => {
                table.live.insert(
                    session_id.to_owned(),
                    Live {
                        transcript: transcript.clone(),
                        in_flight: HashMap::new(),
                    },
                );
            }
        }
        Ok(transcript)
    }

    /// Every stored session (in `cwd` only, when given), ordered by id.
    pub fn list(&self, cwd: Option<&Path>) -> Result<Vec<schema::SessionInfo>, SessionError> {
        let dir = Transcript::dir(self.state_dir());
        let entries = std::fs::read_dir(&dir).map_err(|source| {
            SessionError::Store(TranscriptError::Io {
                action: "listing",
                path: dir.clone(),
                source,
            })
        })?;
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_owned)
            })
            .collect();
        ids.sort();
        let mut sessions = Vec::new();
        for id in ids {
            let transcript = match Transcript::read(self.state_dir(), &id) {
                Ok(t) => t,
                Err(TranscriptError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            if cwd.is_none_or(|cwd| cwd == transcript.cwd) {
                sessions.push(schema::SessionInfo::new(id, transcript.cwd));
            }
        }
        Ok(sessions)
    }

    /// Drops a live session (the transcript stays on disk) and cancels its running prompts.
    pub fn close(&self, session_id: &str) -> Result<(), SessionError> {
        let live = self
            .lock()
            .live
            .remove(session_id)
            .ok_or_else(|| SessionError::NotFound(session_id.to_owned()))?;
        for (_, trigger) in live.in_flight {
            // The prompt may have finished meanwhile; then nobody listens and that is fine.
            let _ = trigger.send(());
        }
        Ok(())
    }

    /// Signals every running prompt of the session to stop; returns how many were signalled.
    pub fn cancel(&self, session_id: &str) -> usize {
        let mut table = self.lock();
        let Some(live) = table.live.get_mut(session_id) else {
            return 0;
        };
        live.in_flight
            .drain()
            .map(|(_, trigger)| trigger.send(()))
            .filter(Result::is_ok)
            .count()
    }

    /// Records the user turn (with an empty reply, persisted at once so even a turn interrupted
    /// by a crash or cancel is on disk) and registers the prompt as in flight.
    pub fn begin_turn(
        &self,
        session_id: &str,
        user_text: String,
        limit: Option<u64>,
    ) -> Result<TurnTicket, SessionError> {
        let overflows = reply::full_override(&user_text);
        let mut table = self.lock();
        let seq = table.next_seq;
        table.next_seq += 1;
        let live = table
            .live
            .get_mut(session_id)
            .ok_or_else(|| SessionError::NotFound(session_id.to_owned()))?;
        live.transcript.turns.push(Turn {
            user: user_text,
            agent: String::new(),
        });
        let used = live.transcript.user_bytes();
        let earlier = live.transcript.turns.len() - 1;
        let limit = match (limit, overflows && earlier > 0) {
            (_, true) => Some(used - 1),
            (limit, false) => limit,
        };
        if let Some(limit) = limit.filter(|limit| used > *limit) {
            live.transcript.turns.pop();
            return Err(SessionError::ContextFull { used, limit });
        }
        if let Err(e) = live.transcript.write(&self.state_dir) {
            live.transcript.turns.pop();
            return Err(e.into());
        }
        let (trigger, cancelled) = oneshot::channel();
        live.in_flight.insert(seq, trigger);
        Ok(TurnTicket {
            seq,
            index: live.transcript.turns.len() - 1,
            user_texts: live.transcript.user_texts().map(str::to_owned).collect(),
            used_bytes: live.transcript.user_bytes(),
            cancelled,
        })
    }

    /// Stores the reply of a turn (empty when cancelled) and persists it.
    ///
    /// If the session was closed or reloaded meanwhile and no longer holds that turn, there is
    /// nothing to update: the prompt still gets its answer.
    pub fn finish_turn(
        &self,
        session_id: &str,
        ticket_seq: u64,
        index: usize,
        user_text: &str,
        agent_text: String,
    ) -> Result<(), SessionError> {
        let mut table = self.lock();
        let Some(live) = table.live.get_mut(session_id) else {
            return Ok(());
        };
        live.in_flight.remove(&ticket_seq);
        match live.transcript.turns.get_mut(index) {
            Some(turn) if turn.user == user_text => turn.agent = agent_text,
            _ => return Ok(()),
        }
        live.transcript.write(&self.state_dir)?;
        Ok(())
    }

    /// Applies `session/set_config_option` and returns the updated options.
    pub fn set_config(
        &self,
        session_id: &str,
        config_id: &str,
        value: &SessionConfigOptionValue,
    ) -> Result<Vec<SessionConfigOption>, SessionError> {
        let mut table = self.lock();
        let live = table
            .live
            .get_mut(session_id)
            .ok_or_else(|| SessionError::NotFound(session_id.to_owned()))?;
        let invalid = |reason| SessionError::InvalidConfig {
            config_id: config_id.to_owned(),
            value: format!("{value:?}"),
            reason,
        };
        let Some(value) = value.as_value_id() else {
            return Err(invalid("expected a value id"));
        };
        let value = value.0.to_string();
        let offered = match config_id {
            "model" => offered_models(&self.models, &live.transcript.model),
            "mode" => MODES.iter().map(|(id, _)| (*id).to_owned()).collect(),
            _ => return Err(invalid("unknown config id")),
        };
        if !offered.contains(&value) {
            return Err(invalid("value not offered"));
        }
        let mut updated = live.transcript.clone();
        if config_id == "model" {
            updated.model = value;
        } else {
            updated.mode = value;
        }
        updated.write(&self.state_dir)?;
        live.transcript = updated;
        Ok(self.config_options(&live.transcript))
    }

    /// The `configOptions` describing a session's current model and mode.
    pub fn config_options(&self, transcript: &Transcript) -> Vec<SessionConfigOption> {
        let models = offered_models(&self.models, &transcript.model)
            .into_iter()
            .map(|m| SessionConfigSelectOption::new(m.clone(), m))
            .collect::<Vec<_>>();
        let modes = MODES
            .iter()
            .map(|(id, label)| SessionConfigSelectOption::new(*id, *label))
            .collect::<Vec<_>>();
        vec![
            SessionConfigOption::select("model", "Model", transcript.model.clone(), models)
                .category(SessionConfigOptionCategory::Model),
            SessionConfigOption::select("mode", "Mode", transcript.mode.clone(), modes)
                .category(SessionConfigOptionCategory::Mode),
        ]
    }
}

/// The models offered for a session: the CLI list, plus the session's stored model if it is not
/// on that list (a transcript written by an agent started with other `--models`), so the select's
/// current value is always one of its options.
fn offered_models(models: &[String], current: &str) -> Vec<String> {
    let mut offered = models.to_vec();
    if !offered.iter().any(|m| m == current) {
        offered.push(current.to_owned());
    }
    offered
}

/// A new session id: `ts-` and 16 hex digits.
///
/// Several agent processes may share one state dir, so ids must be unique across processes:
/// the pid, the wall clock in nanoseconds and a process-wide counter are hashed with a
/// `RandomState` (whose keys are seeded from the OS per process). Uniqueness matters here,
/// unpredictability does not.
fn fresh_session_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    std::process::id().hash(&mut hasher);
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
        .hash(&mut hasher);
    COUNTER.fetch_add(1, Ordering::Relaxed).hash(&mut hasher);
    format!("ts-{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_well_formed_and_distinct() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| fresh_session_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 19);
            assert!(id.starts_with("ts-"));
            assert!(id[3..].chars().all(|c| c.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn config_validation() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(dir.path().to_owned(), vec!["a".into(), "b".into()]);
        let (id, _) = sessions
            .create("/w".into(), serde_json::json!([]), None)
            .unwrap();
        let opts = sessions.set_config(&id, "model", &"b".into()).unwrap();
        assert_eq!(serde_json::to_value(&opts).unwrap()[0]["currentValue"], "b");
        assert!(matches!(
            sessions.set_config(&id, "model", &"zz".into()),
            Err(SessionError::InvalidConfig { .. })
        ));
        assert!(matches!(
            sessions.set_config(&id, "colour", &"b".into()),
            Err(SessionError::InvalidConfig { .. })
        ));
        assert!(matches!(
            sessions.set_config("ts-none", "model", &"b".into()),
            Err(SessionError::NotFound(_))
        ));
        assert_eq!(Transcript::read(dir.path(), &id).unwrap().model, "b");
    }

    #[test]
    fn cancel_signals_in_flight_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(dir.path().to_owned(), vec!["a".into()]);
        let (id, _) = sessions
            .create("/w".into(), serde_json::json!([]), None)
            .unwrap();
        let mut ticket = sessions.begin_turn(&id, "hi".into(), None).unwrap();
        assert_eq!(sessions.cancel(&id), 1);
        assert!(ticket.cancelled.try_recv().is_ok());
        sessions
            .finish_turn(&id, ticket.seq, ticket.index, "hi", String::new())
            .unwrap();
        let on_disk = Transcript::read(dir.path(), &id).unwrap();
        assert_eq!(
            on_disk.turns,
            [Turn {
                user: "hi".into(),
                agent: String::new()
            }]
        );
    }

    #[test]
    fn a_prompt_over_the_context_limit_is_refused_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(dir.path().to_path_buf(), vec!["m".into()]);
        let (id, _) = sessions
            .create("/w".into(), serde_json::json!([]), None)
            .unwrap();
        sessions.begin_turn(&id, "12345".into(), Some(8)).unwrap();
        let refused = sessions.begin_turn(&id, "67890".into(), Some(8));
        assert!(matches!(
            refused,
            Err(SessionError::ContextFull { used: 10, limit: 8 })
        ));
        let error = Error::from(refused.unwrap_err());
        assert_eq!(
            (error.code.value(), error.message.as_str()),
            (-32603, "Internal error: Prompt is too long")
        );
        assert_eq!(
            sessions
                .begin_turn(&id, "abc".into(), Some(8))
                .unwrap()
                .used_bytes,
            8
        );
    }

    #[test]
    fn a_full_prompt_overflows_a_session_with_turns_but_fits_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::new(dir.path().to_path_buf(), vec!["m".into()]);
        let (used, _) = sessions
            .create("/w".into(), serde_json::json!([]), None)
            .unwrap();
        sessions.begin_turn(&used, "first".into(), None).unwrap();
        let refused = sessions.begin_turn(&used, "more\n!full".into(), None);
        assert!(matches!(refused, Err(SessionError::ContextFull { .. })));
        let (fresh, _) = sessions
            .create("/w".into(), serde_json::json!([]), None)
            .unwrap();
        assert!(
            sessions
                .begin_turn(&fresh, "all of it\n!full".into(), None)
                .is_ok()
        );
    }
}
