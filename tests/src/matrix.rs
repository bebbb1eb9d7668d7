//! The continuity matrix (docs/CONTINUITY.md): what a thread's agent still knows after each cause
//! of a reset, and what the thread is told.
//!
//! Every cell plays the same thread, the way a thread's users would: a root that mentions the
//! agent, a reply that tells it a code word ([`CODE`], a nonce for the test agent), then fourteen
//! replies that do not mention it — so the code word is older than upstream's context window (the
//! root and the last 12 replies) and only the agent's session can still know it. Then one cause
//! of a reset ([`Cause`]), then the question. The test agent's answer lists every nonce its
//! session has seen (`nonces=…`): the code word is among them exactly when the model received it
//! after the cause ([`Knows`]).
//!
//! A cell is played against any build of the harness ([`Build`]): the guards
//! (`e2e/continuity_matrix.rs`) play it against the patched binary, the demo
//! (`scripts/demo`, binary `continuity-matrix`) against the baseline and the patched binary side
//! by side. Each cell runs over a Nostr relay of its own (the fork's test relay, [`Chat`]): the
//! harness connects as the agent, the owner posts signed events through the relay's REST side,
//! and what the agent published is read back from the relay. Only binaries, the relay and files
//! are used (the agent's wire log, the observer log), and the series' own settings reach the
//! harness as `BUZZ_ACP_*` variables, which a build without them ignores: so a cell runs the same
//! on every build and tells what that build does.
//!
//! As upstream's, the harness only hears what is posted while it is subscribed, so a restart is
//! played the way its users meet one: the harness is started, the thread is posted and answered,
//! the harness is stopped; then it is started again and the question is posted.
//!
//! Time: the cells that need it use short settings (a one-second idle pool sleep, one-second
//! restore retries) and wait for the event (the harness subscribed, an answer on the relay, the
//! pool's `pool_sleep` record), never for a guessed duration; the same causes with the default
//! settings run on tokio's paused clock in `inproc/continuity_matrix.rs`.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;

use buzz_acp::relay::{Event, RelayError};
use buzz_acp::testing::{ChatError, Scenario, wait_until, wait_until_every};
use tempfile::TempDir;

use crate::relay::{Chat, ChatSetupError, Launch, RELAY_POLL};
use crate::{Background, FrameKind, WAIT, WireFrame, agent_bin, harness_bin, reply_nonces};

/// The code word (a nonce for the test agent: letters, a dash, four digits or more).
pub const CODE: &str = "quebec-5150";

/// Replies after the code word: more than upstream's window of 12, so only the session can know
/// the code word.
pub const FILLERS: usize = 14;

/// The question that ends every cell.
pub const QUESTION: &str = "what was the code word?";

/// A cause of a reset: a row of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Cause {
    /// The harness restarts (stopped, then started again on the same state directory).
    Restart,
    /// The question is posted while the harness is stopped; then it starts again.
    MentionWhileStopped,
    /// The worker pool sleeps after an idle period (`--lazy-pool --idle-pool-sleep`).
    IdleSleep,
    /// The agent process dies between turns (killed).
    AgentCrash,
    /// The agent lost the stored session (its transcripts are gone) before a restart.
    TranscriptLost,
    /// The session reached `--max-turns-per-session 1` (a long-running harness).
    TurnLimit,
    /// The session reached `--max-turns-per-session 2` across restarts.
    TurnLimitAcrossRestart,
    /// The turn before the question stopped with `max_tokens`.
    MaxTokens,
    /// The session refuses the question as too long (the test agent's `!full`).
    ContextExhausted,
    /// The owner's `!model test-large` in the thread, and the agent offers the model in place;
    /// another thread goes on too.
    ModelInPlace,
    /// The owner's `!model test-large`; the agent offers the model but a prompted session cannot
    /// take it in place (`--model-fixed-after-prompt`): only a new session can.
    ModelNotInPlace,
    /// The owner's `!model test-large`, and the agent does not offer that model at all.
    ModelNotOffered,
    /// Every restore fails without a definitive answer (`-32000`) until the harness gives up.
    RestoreGivenUp,
    /// The PostgreSQL receipt store is stopped across a restart.
    StoreOutage,
    /// The owner's `!rotate`: a clean slate by design.
    OwnerRotate,
}

impl Cause {
    /// Every row, in the order of docs/CONTINUITY.md.
    pub const ALL: [Cause; 15] = [
        Cause::Restart,
        Cause::MentionWhileStopped,
        Cause::IdleSleep,
        Cause::AgentCrash,
        Cause::TranscriptLost,
        Cause::TurnLimit,
        Cause::TurnLimitAcrossRestart,
        Cause::MaxTokens,
        Cause::ContextExhausted,
        Cause::ModelInPlace,
        Cause::ModelNotInPlace,
        Cause::ModelNotOffered,
        Cause::RestoreGivenUp,
        Cause::StoreOutage,
        Cause::OwnerRotate,
    ];

    /// The row's name, as in docs/CONTINUITY.md.
    pub fn row(self) -> &'static str {
        match self {
            Cause::Restart => "restart",
            Cause::MentionWhileStopped => "mention while stopped",
            Cause::IdleSleep => "idle pool sleep",
            Cause::AgentCrash => "agent crash between turns",
            Cause::TranscriptLost => "agent lost the stored session",
            Cause::TurnLimit => "turn limit (--max-turns-per-session 1)",
            Cause::TurnLimitAcrossRestart => "turn limit across restarts",
            Cause::MaxTokens => "a turn stopped with max_tokens",
            Cause::ContextExhausted => "context exhausted",
            Cause::ModelInPlace => "!model, switchable in place",
            Cause::ModelNotInPlace => "!model, not switchable in place",
            Cause::ModelNotOffered => "!model, a model the agent does not offer",
            Cause::RestoreGivenUp => "restore given up",
            Cause::StoreOutage => "store outage (PostgreSQL stopped)",
            Cause::OwnerRotate => "owner's !rotate",
        }
    }

    /// What the patched harness's agent must still know. Only the owner's `!rotate` forgets, by
    /// design; the baseline forgets in every row.
    pub fn patched_knows(self) -> Knows {
        match self {
            Cause::OwnerRotate => Knows::Lost,
            _ => Knows::Kept,
        }
    }

    /// Whether the cell needs a PostgreSQL server (`pg-fixture`).
    pub fn needs_postgres(self) -> bool {
        self == Cause::StoreOutage
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.row())
    }
}

/// Whether the agent still knew the code word when it answered the question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knows {
    /// The answering session had seen the code word.
    Kept,
    /// It had not, or the question got no answer from the agent.
    Lost,
}

impl fmt::Display for Knows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Knows::Kept => "kept",
            Knows::Lost => "lost",
        })
    }
}

/// The binaries a cell runs.
#[derive(Clone, Debug)]
pub struct Build {
    /// A `buzz-acp` binary (baseline or patched).
    pub harness: PathBuf,
    /// The `acp-test-agent` binary.
    pub agent: PathBuf,
}

impl Build {
    /// The harness and agent of the tree under test (the patched tree's `target/patched/`).
    pub fn under_test() -> Build {
        Build {
            harness: harness_bin(),
            agent: agent_bin(),
        }
    }
}

/// Why a cell could not be played (as opposed to what it showed).
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// The scenario's files could not be set up.
    #[error("relay: {0}")]
    Relay(#[from] RelayError),
    /// The test relay, or a harness on it, could not be started.
    #[error(transparent)]
    Chat(#[from] ChatSetupError),
    /// A message could not be posted, or the agent's messages read.
    #[error("the relay: {0}")]
    Posting(#[from] ChatError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Something the cell waits for before its cause did not happen (the thread is not set up).
    #[error("the cell's setup did not happen: {0}")]
    Setup(String),
    /// The PostgreSQL fixture failed.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] pg_fixture::FixtureError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CellError {
    let what = what.into();
    move |source| CellError::Io { what, source }
}

/// A played cell: what the agent published and the scenario's files, as they stand after the
/// question was answered (or not).
#[derive(Debug)]
pub struct Played {
    /// What was played.
    pub cause: Cause,
    /// The agent's files: its wire log, the observer log.
    pub scenario: Scenario,
    /// The thread's root.
    pub root: Event,
    /// The question after the cause.
    pub question: Event,
    /// How many wire frames were logged before the cause.
    pub frames_before_cause: usize,
    /// The owner's command that is the cause (`!model`, `!rotate`), and the harness's answer to
    /// it, in the cells that have one.
    pub command: Option<(Event, Option<Event>)>,
    /// In [`Cause::ModelInPlace`]: another thread, answered before the switch, and its follow-up's
    /// answer after it.
    pub other_thread: Option<OtherThread>,
    /// Every message the agent published, as the relay held them once the cell was over.
    published: Vec<Event>,
    _postgres: Option<pg_fixture::PgServer>,
    _dir: TempDir,
}

/// A second thread that the cause did not address.
#[derive(Debug)]
pub struct OtherThread {
    /// Its root.
    pub root: Event,
    /// Its follow-up after the cause.
    pub follow_up: Event,
}

impl Played {
    /// The agent's answer to the question (never a notice: notices are not answers).
    pub fn answer(&self) -> Option<Event> {
        self.reply_to(&self.question.id)
    }

    /// The agent's answer to `event_id` (its `e` tag marked `reply`; never a notice).
    pub fn reply_to(&self, event_id: &str) -> Option<Event> {
        answer_in(&self.published, event_id)
    }

    /// How many of the agent's messages answer `event_id` (as its reply, or as one more trigger
    /// of a batch).
    pub fn answers_to(&self, event_id: &str) -> usize {
        self.published
            .iter()
            .filter(|r| r.answered_ids().iter().any(|id| id == event_id))
            .count()
    }

    /// Whether the answering session had seen the code word.
    pub fn knows(&self) -> Knows {
        let kept = self
            .answer()
            .is_some_and(|a| reply_nonces(&a).iter().any(|n| n == CODE));
        if kept { Knows::Kept } else { Knows::Lost }
    }

    /// The notices about the question (they quote it; none answers it).
    pub fn notices(&self) -> Vec<Event> {
        self.published
            .iter()
            .filter(|e| e.tag_values("q").any(|q| q == self.question.id))
            .cloned()
            .collect()
    }

    /// Every notice the harness posted in the thread, about any of its messages.
    pub fn thread_notices(&self) -> Vec<Event> {
        self.published
            .iter()
            .filter(|e| e.thread_refs().root.as_deref() == Some(self.root.id.as_str()))
            .filter(|e| is_notice(e))
            .cloned()
            .collect()
    }

    /// The wire log.
    pub fn frames(&self) -> Vec<WireFrame> {
        crate::wire(&self.scenario)
    }

    /// How the question reached its session, read from the wire: `new`, `restored` or
    /// `continued` (see [`crate::served_as`]).
    pub fn question_served_as(&self) -> Option<&'static str> {
        crate::served_as(&self.frames(), &self.root.id)
            .last()
            .copied()
    }

    /// Whether the code word reached the agent after the cause, by the wire alone: a prompt after
    /// the cause carries it (a handoff, the whole thread), or a session that had received it
    /// before the cause is reopened or prompted again after it.
    pub fn code_reached_after_cause(&self) -> bool {
        let frames = self.frames();
        let (before, after) = frames.split_at(self.frames_before_cause.min(frames.len()));
        let knowing: Vec<String> = before
            .iter()
            .filter(|f| f.kind == FrameKind::Request)
            .filter(|f| f.method.as_deref() == Some("session/prompt"))
            .filter(|f| f.params["prompt"].to_string().contains(CODE))
            .filter_map(|f| f.params["sessionId"].as_str().map(str::to_string))
            .collect();
        after
            .iter()
            .filter(|f| f.kind == FrameKind::Request)
            .any(|f| match f.method.as_deref() {
                Some("session/prompt") => {
                    f.params["prompt"].to_string().contains(CODE)
                        || knowing.iter().any(|k| f.params["sessionId"] == k.as_str())
                }
                Some("session/load" | "session/resume") => {
                    knowing.iter().any(|k| f.params["sessionId"] == k.as_str())
                }
                _ => false,
            })
    }

    /// What the thread was told, in one line for a table: the notices about the question and the
    /// harness's answer to the owner's command, or "nothing".
    pub fn told(&self) -> String {
        let mut lines: Vec<String> = Vec::new();
        if let Some((_, Some(answer))) = &self.command {
            lines.push(answer.content.clone());
        }
        lines.extend(self.notices().into_iter().map(|n| n.content));
        if lines.is_empty() {
            "nothing".to_string()
        } else {
            lines.join(" / ")
        }
    }
}

/// Whether the harness posted `event` as a notice: it quotes the message it is about (`q` tag).
pub fn is_notice(event: &Event) -> bool {
    event.tag_values("q").next().is_some()
}

/// The agent's answer to `event_id` among `published`: its `e` tag marked `reply`, never a
/// notice.
fn answer_in(published: &[Event], event_id: &str) -> Option<Event> {
    published
        .iter()
        .filter(|e| !is_notice(e))
        .find(|e| e.thread_refs().reply.as_deref() == Some(event_id))
        .cloned()
}

/// Plays `cause`'s cell against `build`, over a test relay of its own.
///
/// # Errors
/// The cell could not be set up or run (see [`CellError`]); what the build did with the cause is
/// in the returned [`Played`], never an error.
pub fn play(build: &Build, cause: Cause) -> Result<Played, CellError> {
    let dir = tempfile::tempdir().map_err(io("creating a temporary directory"))?;
    let scenario = Scenario::new(dir.path())?;
    let mut cell = Cell {
        build,
        s: scenario,
        chat: Chat::start()?,
        pid_file: dir.path().join("agents.pids"),
        starts: 0,
    };
    let played = match cause {
        Cause::Restart => cell.restart()?,
        Cause::MentionWhileStopped => cell.mention_while_stopped()?,
        Cause::IdleSleep => cell.idle_sleep()?,
        Cause::AgentCrash => cell.agent_crash()?,
        Cause::TranscriptLost => cell.transcript_lost()?,
        Cause::TurnLimit => cell.turn_limit()?,
        Cause::TurnLimitAcrossRestart => cell.turn_limit_across_restart()?,
        Cause::MaxTokens => cell.max_tokens()?,
        Cause::ContextExhausted => cell.context_exhausted()?,
        Cause::ModelInPlace => cell.model(&[])?,
        Cause::ModelNotInPlace => cell.model(&["--model-fixed-after-prompt"])?,
        Cause::ModelNotOffered => cell.model(&["--models", "test-small"])?,
        Cause::RestoreGivenUp => cell.restore_given_up()?,
        Cause::StoreOutage => cell.store_outage()?,
        Cause::OwnerRotate => cell.owner_rotate()?,
    };
    let published = cell.chat.agent_messages()?;
    Ok(Played {
        cause,
        scenario: cell.s,
        root: played.root,
        question: played.question,
        frames_before_cause: played.frames_before_cause,
        command: played.command,
        other_thread: played.other_thread,
        published,
        _postgres: played.postgres,
        _dir: dir,
    })
}

/// What a cell's script hands back.
struct Script {
    root: Event,
    question: Event,
    frames_before_cause: usize,
    command: Option<(Event, Option<Event>)>,
    other_thread: Option<OtherThread>,
    postgres: Option<pg_fixture::PgServer>,
}

impl Script {
    fn new(root: Event, question: Event, frames_before_cause: usize) -> Script {
        Script {
            root,
            question,
            frames_before_cause,
            command: None,
            other_thread: None,
            postgres: None,
        }
    }
}

/// The thread of a cell.
struct Thread {
    root: Event,
    /// The last message (a filler), which the question answers.
    last: Event,
    /// How many wire frames were logged before a cause posted within the thread.
    frames_before_cause: usize,
}

/// A harness's flags and environment for one run of it.
#[derive(Clone, Copy, Default)]
struct Setup<'a> {
    /// More test-agent flags.
    agent_args: &'a [&'a str],
    /// More harness flags.
    extra: &'a [&'a str],
    /// More environment (the series' `BUZZ_ACP_*` settings, which a build without them ignores).
    env: &'a [(&'a str, &'a str)],
}

/// One cell being played: its relay, the agent's files, and the harness runs on them. The
/// owner writes every message (the harness's default answers only the owner); the fillers do
/// not mention the agent.
struct Cell<'a> {
    build: &'a Build,
    s: Scenario,
    chat: Chat,
    pid_file: PathBuf,
    /// How many harnesses were started (each logs to its own file).
    starts: usize,
}

impl Cell<'_> {
    fn agent_command(&self, agent_args: &[&str]) -> String {
        let pid_file = self.pid_file.display().to_string();
        let mut args = vec!["--pid-file", pid_file.as_str()];
        args.extend_from_slice(agent_args);
        self.s.agent_command(&self.build.agent, &args)
    }

    /// Starts the harness on the cell's relay and waits until it is subscribed.
    fn live(&mut self, setup: Setup<'_>) -> Result<Background, CellError> {
        self.starts += 1;
        let agent_command = self.agent_command(setup.agent_args);
        let launch = Launch {
            scenario: &self.s,
            harness: &self.build.harness,
            agent_command: &agent_command,
            extra: setup.extra,
            env: setup.env,
            log: self.s.root.join(format!("harness-{}.log", self.starts)),
        };
        Ok(self.chat.start_harness(launch)?)
    }

    /// The owner posts `text` in `thread` (root, parent) or as a new thread, mentioning the
    /// agent when `mention` is set.
    fn post(
        &self,
        text: &str,
        thread: Option<(&Event, &Event)>,
        mention: bool,
    ) -> Result<Event, CellError> {
        let ids = thread.map(|(root, parent)| (root.id.as_str(), parent.id.as_str()));
        let event = self.chat.post(&self.chat.owner, text, ids, mention)?;
        Ok(Event::from(&event))
    }

    /// The agent's answer to `event` (never a notice), if the relay holds one now.
    fn answer_now(&self, event: &Event) -> Option<Event> {
        let published = self.chat.agent_messages().ok()?;
        answer_in(&published, &event.id)
    }

    /// Whatever the agent published in reply to `event` first (an answer or a notice).
    fn reply_now(&self, event: &Event) -> Option<Event> {
        let published = self.chat.agent_messages().ok()?;
        published
            .into_iter()
            .find(|e| e.thread_refs().reply.as_deref() == Some(event.id.as_str()))
    }

    /// Waits for the agent's answer to `event`.
    fn wait_answer(&self, event: &Event) -> Result<Event, CellError> {
        wait_until_every(WAIT, RELAY_POLL, || self.answer_now(event))
            .ok_or_else(|| CellError::Setup(format!("no answer to {:?}", event.content)))
    }

    /// Waits a while for the answer to the question (the build under test may never give one:
    /// that is what the cell shows, not an error).
    fn await_answer(&self, question: &Event) {
        let _ = wait_until_every(WAIT, RELAY_POLL, || self.answer_now(question));
    }

    /// Posts the thread to a running harness, waiting for each answer. `cause`, when given, is
    /// one more message for the agent right after the code word's answer (a cause that is a turn
    /// of its own): the fillers then push its answer out of the window too, since the test
    /// agent's answers list the nonces they have seen.
    fn thread(&self, cause: Option<&str>) -> Result<Thread, CellError> {
        let root = self.post("a long thread starts here", None, true)?;
        let first = self.wait_answer(&root)?;
        let code = self.post(
            &format!("remember the code word {CODE}"),
            Some((&root, &first)),
            true,
        )?;
        let mut last = self.wait_answer(&code)?;
        let frames_before_cause = self.frames_now();
        if let Some(text) = cause {
            let turn = self.post(text, Some((&root, &last)), true)?;
            last = self.wait_answer(&turn)?;
        }
        for i in 1..=FILLERS {
            last = self.post(
                &format!("filler message number {i}"),
                Some((&root, &last)),
                false,
            )?;
        }
        Ok(Thread {
            root,
            last,
            frames_before_cause,
        })
    }

    /// The thread, posted to a harness started for it and stopped afterwards (the first run of
    /// a restart).
    fn thread_then_stop(&mut self, setup: Setup<'_>) -> Result<Thread, CellError> {
        let harness = self.live(setup)?;
        let thread = self.thread(None)?;
        stop(harness)?;
        Ok(thread)
    }

    /// Starts the harness again, asks the question and stops it once the question is answered
    /// (or it never is).
    fn ask_after_restart(&mut self, t: &Thread, setup: Setup<'_>) -> Result<Event, CellError> {
        let harness = self.live(setup)?;
        let question = self.ask(t, QUESTION)?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(question)
    }

    fn frames_now(&self) -> usize {
        acp_test_agent::harness::read_wire_log(&self.s.wire_log)
            .map(|f| f.len())
            .unwrap_or(0)
    }

    fn ask(&self, t: &Thread, text: &str) -> Result<Event, CellError> {
        self.post(text, Some((&t.root, &t.last)), true)
    }

    // ----- the cells ---------------------------------------------------------------------------

    fn restart(&mut self) -> Result<Script, CellError> {
        let t = self.thread_then_stop(Setup::default())?;
        let at = self.frames_now();
        let question = self.ask_after_restart(&t, Setup::default())?;
        Ok(Script::new(t.root, question, at))
    }

    /// The question is posted while no harness listens; the harness then starts and, like
    /// upstream's, subscribes from its start (the baseline never hears the question).
    fn mention_while_stopped(&mut self) -> Result<Script, CellError> {
        let t = self.thread_then_stop(Setup::default())?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        crate::wait_for_the_next_second();
        let harness = self.live(Setup::default())?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, at))
    }

    fn idle_sleep(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup {
            extra: &["--lazy-pool", "--idle-pool-sleep", "1"],
            ..Setup::default()
        })?;
        let t = self.thread(None)?;
        let at = self.frames_now();
        // The pool sleeps once the code word's turn is over and nothing happens for a second: the
        // event, not a guess at how long that takes.
        wait_until(WAIT, || {
            (!self.s.observer_records("pool_sleep").is_empty()).then_some(())
        })
        .ok_or_else(|| CellError::Setup("the pool did not sleep".into()))?;
        let question = self.ask(&t, QUESTION)?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, at))
    }

    fn agent_crash(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup::default())?;
        let t = self.thread(None)?;
        let at = self.frames_now();
        let pids =
            std::fs::read_to_string(&self.pid_file).map_err(io("reading the agents' pids"))?;
        let agents: Vec<&str> = pids
            .lines()
            .filter_map(|l| l.strip_prefix("agent "))
            .collect();
        for pid in &agents {
            kill(pid)?;
        }
        let gone = wait_until(WAIT, || {
            agents.iter().all(|p| !process_runs(p)).then_some(())
        });
        gone.ok_or_else(|| CellError::Setup("the agent outlived SIGKILL".into()))?;
        let question = self.ask(&t, QUESTION)?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, at))
    }

    fn transcript_lost(&mut self) -> Result<Script, CellError> {
        let t = self.thread_then_stop(Setup::default())?;
        let at = self.frames_now();
        let sessions = self.s.agent_state_dir.join("sessions");
        std::fs::remove_dir_all(&sessions).map_err(io("removing the agent's transcripts"))?;
        let question = self.ask_after_restart(&t, Setup::default())?;
        Ok(Script::new(t.root, question, at))
    }

    fn turn_limit(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup {
            extra: &["--max-turns-per-session", "1"],
            ..Setup::default()
        })?;
        let t = self.thread(None)?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, at))
    }

    fn turn_limit_across_restart(&mut self) -> Result<Script, CellError> {
        let limit = Setup {
            extra: &["--max-turns-per-session", "2"],
            ..Setup::default()
        };
        let t = self.thread_then_stop(limit)?;
        let at = self.frames_now();
        let question = self.ask_after_restart(&t, limit)?;
        Ok(Script::new(t.root, question, at))
    }

    fn max_tokens(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup::default())?;
        let t = self.thread(Some("write a lot !stop:max_tokens"))?;
        let question = self.ask(&t, QUESTION)?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, t.frames_before_cause))
    }

    fn context_exhausted(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup::default())?;
        let t = self.thread(None)?;
        let at = self.frames_now();
        let question = self.ask(&t, &format!("{QUESTION} !full"))?;
        self.await_answer(&question);
        stop(harness)?;
        Ok(Script::new(t.root, question, at))
    }

    /// The owner switches the model in the code word's thread; another thread, answered before,
    /// asks again after.
    fn model(&mut self, agent_args: &[&str]) -> Result<Script, CellError> {
        let harness = self.live(Setup {
            agent_args,
            ..Setup::default()
        })?;
        let t = self.thread(None)?;
        let other = self.post("another thread", None, true)?;
        let other_answer = self.wait_answer(&other)?;
        let at = self.frames_now();
        let switch = self.post("!model test-large", Some((&t.root, &t.last)), true)?;
        let switched = wait_until_every(WAIT, RELAY_POLL, || self.reply_now(&switch));
        let after_switch = switched.clone().unwrap_or_else(|| switch.clone());
        let question = self.post(QUESTION, Some((&t.root, &after_switch)), true)?;
        self.await_answer(&question);
        let follow_up = self.post("and this thread?", Some((&other, &other_answer)), true)?;
        self.await_answer(&follow_up);
        stop(harness)?;
        let mut script = Script::new(t.root, question, at);
        script.command = Some((switch, switched));
        script.other_thread = Some(OtherThread {
            root: other,
            follow_up,
        });
        Ok(script)
    }

    fn restore_given_up(&mut self) -> Result<Script, CellError> {
        let t = self.thread_then_stop(Setup::default())?;
        let at = self.frames_now();
        // The series' retry bounds, shortened (a build without them ignores the variables): one
        // retry a second later, then the harness gives up.
        let bounds = [
            ("BUZZ_ACP_RESUME_RETRY_SECS", "1"),
            ("BUZZ_ACP_RESUME_MAX_ATTEMPTS", "2"),
        ];
        let failing = Setup {
            agent_args: &["--load-error", "-32000"],
            env: &bounds,
            ..Setup::default()
        };
        let question = self.ask_after_restart(&t, failing)?;
        Ok(Script::new(t.root, question, at))
    }

    fn store_outage(&mut self) -> Result<Script, CellError> {
        let mut pg = pg_fixture::PgServer::start(pg_fixture::Options::default())?;
        let url = pg.url();
        let store = [("BUZZ_ACP_SESSION_STORE_URL", url.as_str())];
        let t = self.thread_then_stop(Setup {
            env: &store,
            ..Setup::default()
        })?;
        let at = self.frames_now();
        pg.stop()?;
        let down = [
            ("BUZZ_ACP_SESSION_STORE_URL", url.as_str()),
            ("BUZZ_ACP_SESSION_STORE_WAIT_SECS", "1"),
        ];
        let question = self.ask_after_restart(
            &t,
            Setup {
                env: &down,
                ..Setup::default()
            },
        )?;
        let mut script = Script::new(t.root, question, at);
        script.postgres = Some(pg);
        Ok(script)
    }

    fn owner_rotate(&mut self) -> Result<Script, CellError> {
        let harness = self.live(Setup::default())?;
        let t = self.thread(None)?;
        let at = self.frames_now();
        let rotate = self.post("!rotate", Some((&t.root, &t.last)), true)?;
        let rotated = wait_until_every(WAIT, RELAY_POLL, || self.reply_now(&rotate));
        let after = rotated.clone().unwrap_or_else(|| rotate.clone());
        let question = self.post(QUESTION, Some((&t.root, &after)), true)?;
        self.await_answer(&question);
        stop(harness)?;
        let mut script = Script::new(t.root, question, at);
        script.command = Some((rotate, rotated));
        Ok(script)
    }
}

/// Stops a harness (SIGTERM: it settles its turns and flushes its receipt writes).
fn stop(harness: Background) -> Result<(), CellError> {
    harness.stop().map_err(io("stopping buzz-acp"))?;
    Ok(())
}

/// Sends SIGKILL to process `pid`.
fn kill(pid: &str) -> Result<(), CellError> {
    let status = Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .map_err(io("running kill"))?;
    if status.success() {
        Ok(())
    } else {
        Err(CellError::Setup(format!("kill -KILL {pid}: {status}")))
    }
}

/// Whether process `pid` still runs (a zombie waiting for its parent does not).
fn process_runs(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(')')?.1.trim_start().to_string();
            after_name.chars().next()
        })
        .is_some_and(|state| state != 'Z' && state != 'X')
}
