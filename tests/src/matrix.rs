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
//! by side. Only binaries and files are used (the relay, the agent's wire log, the observer
//! log), and the series' own settings reach the harness as `BUZZ_ACP_*` variables, which a build
//! without them ignores: so a cell runs the same on every build and tells what that build does.
//!
//! Time: the cells that need it use short settings (a one-second idle pool sleep, one-second
//! restore retries) and wait for the event (the pool's `pool_sleep` record, the end of a `--once`
//! run), never for a guessed duration; the same causes with the default settings run on tokio's
//! paused clock in `inproc/continuity_matrix.rs`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use buzz_acp::relay::{Event, RelayError};
use buzz_acp::testing::{OWNER, Scenario, wait_until};
use tempfile::TempDir;

use crate::{FrameKind, WAIT, WireFrame, agent_bin, harness_bin, notices_about, reply_nonces};

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
    /// The harness restarts (`--once` twice, the same state directory).
    Restart,
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
    pub const ALL: [Cause; 14] = [
        Cause::Restart,
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
    /// The relay could not be written or read.
    #[error("relay: {0}")]
    Relay(#[from] RelayError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The harness exited unsuccessfully.
    #[error("buzz-acp exited with {status}:\n{stderr}")]
    Harness {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The tail of its stderr.
        stderr: String,
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

/// A played cell: the scenario as it stands after the question was answered (or not).
#[derive(Debug)]
pub struct Played {
    /// What was played.
    pub cause: Cause,
    /// The relay, the agent's wire log, the observer log.
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
        self.scenario
            .reply_to(&self.question.id)
            .filter(|r| !is_notice(r))
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
        notices_about(&self.scenario, &self.question.id)
    }

    /// Every notice the harness posted in the thread, about any of its messages.
    pub fn thread_notices(&self) -> Vec<Event> {
        self.scenario
            .replies()
            .into_iter()
            .filter(|e| e.thread_refs().root.as_deref() == Some(self.root.id.as_str()))
            .filter(is_notice)
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

/// Plays `cause`'s cell against `build`.
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
        pid_file: dir.path().join("agents.pids"),
    };
    let played = match cause {
        Cause::Restart => cell.restart()?,
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
    Ok(Played {
        cause,
        scenario: cell.s,
        root: played.root,
        question: played.question,
        frames_before_cause: played.frames_before_cause,
        command: played.command,
        other_thread: played.other_thread,
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

/// One cell being played.
struct Cell<'a> {
    build: &'a Build,
    s: Scenario,
    pid_file: PathBuf,
}

impl Cell<'_> {
    fn agent_command(&self, agent_args: &[&str]) -> String {
        let pid_file = self.pid_file.display().to_string();
        let mut args = vec!["--pid-file", pid_file.as_str()];
        args.extend_from_slice(agent_args);
        self.s.agent_command(&self.build.agent, &args)
    }

    /// One `--once` run: the harness answers what is pending and exits.
    fn once(
        &self,
        agent_args: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<(), CellError> {
        let mut cmd =
            self.s
                .harness_command(&self.build.harness, &self.agent_command(agent_args), extra);
        cmd.arg("--once").envs(env.iter().copied());
        let out = cmd.output().map_err(io("running buzz-acp"))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        Err(CellError::Harness {
            status: out.status,
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        })
    }

    /// A long-running harness.
    fn live(
        &self,
        agent_args: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Live, CellError> {
        Live::start(
            &self.s,
            &self.build.harness,
            &self.agent_command(agent_args),
            extra,
            env,
        )
    }

    /// Waits for the agent's answer to `event` from a long-running harness.
    fn wait_answer(&self, event: &Event) -> Result<Event, CellError> {
        wait_until(WAIT, || {
            self.s.reply_to(&event.id).filter(|r| !is_notice(r))
        })
        .ok_or_else(|| CellError::Setup(format!("no answer to {:?}", event.content)))
    }

    /// The answer to `event` after a `--once` run.
    fn answered(&self, event: &Event) -> Result<Event, CellError> {
        self.s
            .reply_to(&event.id)
            .filter(|r| !is_notice(r))
            .ok_or_else(|| CellError::Setup(format!("no answer to {:?}", event.content)))
    }

    /// Posts the thread; `answer` has the harness answer the message just posted. `cause`, when
    /// given, is one more message for the agent right after the code word's answer (a cause
    /// that is a turn of its own): the fillers then push its answer out of the window too, since
    /// the test agent's answers list the nonces they have seen.
    fn thread(
        &mut self,
        cause: Option<&str>,
        mut answer: impl FnMut(&Cell<'_>, &Event) -> Result<Event, CellError>,
    ) -> Result<Thread, CellError> {
        let root = self.s.post_top("a long thread starts here")?;
        let first = answer(self, &root)?;
        let code = self
            .s
            .post_reply(&root, &first, &format!("remember the code word {CODE}"))?;
        let mut last = answer(self, &code)?;
        let frames_before_cause = self.frames_now();
        if let Some(text) = cause {
            let turn = self.s.post_reply(&root, &last, text)?;
            last = answer(self, &turn)?;
        }
        for i in 1..=FILLERS {
            last = self
                .s
                .post_chatter(&root, &last, &format!("filler message number {i}"))?;
        }
        Ok(Thread {
            root,
            last,
            frames_before_cause,
        })
    }

    /// The thread with a `--once` run after each mention.
    fn thread_once(
        &mut self,
        agent_args: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Thread, CellError> {
        self.thread(None, |cell, event| {
            cell.once(agent_args, extra, env)?;
            cell.answered(event)
        })
    }

    /// The thread, answered by a long-running harness.
    fn thread_live(&mut self) -> Result<Thread, CellError> {
        self.thread(None, |cell, event| cell.wait_answer(event))
    }

    fn frames_now(&self) -> usize {
        acp_test_agent::harness::read_wire_log(&self.s.wire_log)
            .map(|f| f.len())
            .unwrap_or(0)
    }

    fn ask(&mut self, t: &Thread, text: &str) -> Result<Event, CellError> {
        Ok(self.s.post_reply(&t.root, &t.last, text)?)
    }

    // ----- the cells ---------------------------------------------------------------------------

    fn restart(&mut self) -> Result<Script, CellError> {
        let t = self.thread_once(&[], &[], &[])?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        self.once(&[], &[], &[])?;
        Ok(Script::new(t.root, question, at))
    }

    fn idle_sleep(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &["--lazy-pool", "--idle-pool-sleep", "1"], &[])?;
        let t = self.thread_live()?;
        let at = self.frames_now();
        // The pool sleeps once the code word's turn is over and nothing happens for a second: the
        // event, not a guess at how long that takes.
        wait_until(WAIT, || {
            (!self.s.observer_records("pool_sleep").is_empty()).then_some(())
        })
        .ok_or_else(|| CellError::Setup("the pool did not sleep".into()))?;
        let question = self.ask(&t, QUESTION)?;
        let _ = wait_until(WAIT, || self.s.reply_to(&question.id));
        live.stop()?;
        Ok(Script::new(t.root, question, at))
    }

    fn agent_crash(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &[], &[])?;
        let t = self.thread_live()?;
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
        let _ = wait_until(WAIT, || self.s.reply_to(&question.id));
        live.stop()?;
        Ok(Script::new(t.root, question, at))
    }

    fn transcript_lost(&mut self) -> Result<Script, CellError> {
        let t = self.thread_once(&[], &[], &[])?;
        let at = self.frames_now();
        let sessions = self.s.agent_state_dir.join("sessions");
        std::fs::remove_dir_all(&sessions).map_err(io("removing the agent's transcripts"))?;
        let question = self.ask(&t, QUESTION)?;
        self.once(&[], &[], &[])?;
        Ok(Script::new(t.root, question, at))
    }

    fn turn_limit(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &["--max-turns-per-session", "1"], &[])?;
        let t = self.thread_live()?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        let _ = wait_until(WAIT, || {
            self.s.reply_to(&question.id).filter(|r| !is_notice(r))
        });
        live.stop()?;
        Ok(Script::new(t.root, question, at))
    }

    fn turn_limit_across_restart(&mut self) -> Result<Script, CellError> {
        let limit = ["--max-turns-per-session", "2"];
        let t = self.thread_once(&[], &limit, &[])?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        self.once(&[], &limit, &[])?;
        Ok(Script::new(t.root, question, at))
    }

    fn max_tokens(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &[], &[])?;
        let long = "write a lot !stop:max_tokens";
        let t = self.thread(Some(long), |cell, event| cell.wait_answer(event))?;
        let question = self.ask(&t, QUESTION)?;
        let _ = wait_until(WAIT, || self.s.reply_to(&question.id));
        live.stop()?;
        Ok(Script::new(t.root, question, t.frames_before_cause))
    }

    fn context_exhausted(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &[], &[])?;
        let t = self.thread_live()?;
        let at = self.frames_now();
        let question = self.ask(&t, &format!("{QUESTION} !full"))?;
        let _ = wait_until(WAIT, || {
            self.s.reply_to(&question.id).filter(|r| !is_notice(r))
        });
        live.stop()?;
        Ok(Script::new(t.root, question, at))
    }

    /// The owner switches the model in the code word's thread; another thread, answered before,
    /// asks again after.
    fn model(&mut self, agent_args: &[&str]) -> Result<Script, CellError> {
        let live = self.live(agent_args, &[], &[])?;
        let t = self.thread_live()?;
        let other = self.s.post_top("another thread")?;
        let other_answer = self.wait_answer(&other)?;
        let at = self.frames_now();
        let switch = self
            .s
            .post_reply_as(OWNER, &t.root, &t.last, "!model test-large")?;
        let switched = wait_until(WAIT, || self.s.reply_to(&switch.id));
        let after_switch = switched.clone().unwrap_or_else(|| switch.clone());
        let question = self.s.post_reply(&t.root, &after_switch, QUESTION)?;
        let _ = wait_until(WAIT, || {
            self.s.reply_to(&question.id).filter(|r| !is_notice(r))
        });
        let follow_up = self
            .s
            .post_reply(&other, &other_answer, "and this thread?")?;
        let _ = wait_until(WAIT, || self.s.reply_to(&follow_up.id));
        live.stop()?;
        let mut script = Script::new(t.root, question, at);
        script.command = Some((switch, switched));
        script.other_thread = Some(OtherThread {
            root: other,
            follow_up,
        });
        Ok(script)
    }

    fn restore_given_up(&mut self) -> Result<Script, CellError> {
        let t = self.thread_once(&[], &[], &[])?;
        let at = self.frames_now();
        let question = self.ask(&t, QUESTION)?;
        // The series' retry bounds, shortened (a build without them ignores the variables): one
        // retry a second later, then the harness gives up.
        let bounds = [
            ("BUZZ_ACP_RESUME_RETRY_SECS", "1"),
            ("BUZZ_ACP_RESUME_MAX_ATTEMPTS", "2"),
        ];
        self.once(&["--load-error", "-32000"], &[], &bounds)?;
        Ok(Script::new(t.root, question, at))
    }

    fn store_outage(&mut self) -> Result<Script, CellError> {
        let mut pg = pg_fixture::PgServer::start(pg_fixture::Options::default())?;
        let url = pg.url();
        let store = [("BUZZ_ACP_SESSION_STORE_URL", url.as_str())];
        let t = self.thread_once(&[], &[], &store)?;
        let at = self.frames_now();
        pg.stop()?;
        let question = self.ask(&t, QUESTION)?;
        let down = [
            ("BUZZ_ACP_SESSION_STORE_URL", url.as_str()),
            ("BUZZ_ACP_SESSION_STORE_WAIT_SECS", "1"),
        ];
        self.once(&[], &[], &down)?;
        let mut script = Script::new(t.root, question, at);
        script.postgres = Some(pg);
        Ok(script)
    }

    fn owner_rotate(&mut self) -> Result<Script, CellError> {
        let live = self.live(&[], &[], &[])?;
        let t = self.thread_live()?;
        let at = self.frames_now();
        let rotate = self.s.post_reply_as(OWNER, &t.root, &t.last, "!rotate")?;
        let rotated = wait_until(WAIT, || self.s.reply_to(&rotate.id));
        let after = rotated.clone().unwrap_or_else(|| rotate.clone());
        let question = self.s.post_reply(&t.root, &after, QUESTION)?;
        let _ = wait_until(WAIT, || {
            self.s.reply_to(&question.id).filter(|r| !is_notice(r))
        });
        live.stop()?;
        let mut script = Script::new(t.root, question, at);
        script.command = Some((rotate, rotated));
        Ok(script)
    }
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

/// A harness running in the background, with the environment a cell gives it; killed when
/// dropped.
struct Live {
    child: Child,
}

impl Live {
    fn start(
        s: &Scenario,
        harness: &Path,
        agent_command: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Live, CellError> {
        let log_path = s.root.join("harness.log");
        let log = std::fs::File::create(&log_path).map_err(io("creating the harness log"))?;
        let mut cmd = s.harness_command(harness, agent_command, extra);
        cmd.envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd.spawn().map_err(io("starting buzz-acp"))?;
        Ok(Live { child })
    }

    /// Asks the harness to stop (SIGTERM) and waits for it.
    fn stop(mut self) -> Result<(), CellError> {
        let pid = self.child.id().to_string();
        let term = Command::new("kill").args(["-TERM", &pid]).status();
        if !term.is_ok_and(|s| s.success()) {
            self.child.kill().map_err(io("killing buzz-acp"))?;
        }
        self.child.wait().map_err(io("waiting for buzz-acp"))?;
        Ok(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
