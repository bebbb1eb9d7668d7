//! The series' command-line flags. Every flag also reads its `BUZZ_ACP_*` environment variable,
//! like upstream's own flags. The harness flattens [`SessionArgs`] into its command line once.
//!
//! Every flag exists in every build, whichever patches of the series it carries. A flag that
//! belongs to a behaviour the harness does not carry (see [`crate::behaviours`]) changes nothing:
//! set to anything but its default, it is ignored with one warning at startup that names the
//! patch it needs ([`SessionArgs::ignored_flags`]), as a harness without the patch ignores its
//! environment variable.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use buzz_session_store::{KeyScheme, ReceiptStore, StoreArgs, StoreConfig, StoreError, StoreScope};
use clap::builder::BoolishValueParser;

use crate::behaviours::{Behaviour, Behaviours};
use crate::lifecycle::LifecycleConfig;
use crate::receipts::Receipts;
use crate::retry::RetryPolicy;
use crate::store_io::Opener;

/// How receipts are keyed: by the full scope with `store-key-session-scope` (each thread of a
/// channel comes back to its own session), else by channel, as block/buzz#6088 does. Receipts
/// keyed by channel read as conversation scopes under the scope scheme.
pub fn key_scheme(behaviours: Behaviours) -> KeyScheme {
    if behaviours.has(Behaviour::ScopeKeys) {
        KeyScheme::Scope
    } else {
        KeyScheme::Channel
    }
}

/// `--max-resident-sessions` by default.
pub const DEFAULT_MAX_RESIDENT_SESSIONS: usize = 8;

/// `--whole-thread-budget-kb` by default.
pub const DEFAULT_WHOLE_THREAD_BUDGET_KB: usize =
    crate::retirement::DEFAULT_WHOLE_THREAD_BUDGET_BYTES / 1024;

/// Every flag of the series.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct SessionArgs {
    /// Restart resume.
    #[command(flatten)]
    pub resume: ResumeArgs,
    /// Resident sessions (patch `resident-background-controllers`).
    #[command(flatten)]
    pub residency: ResidencyArgs,
    /// Handoffs and whole-thread replacements (patch `continuity-handoff`).
    #[command(flatten)]
    pub continuity: ContinuityArgs,
    /// The operator's metrics endpoint (patch `operator-metrics`).
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Mentions missed while the harness was away (patch `mentions-while-away`).
    #[command(flatten)]
    pub catch_up: CatchUpArgs,
    /// One live harness per (relay, agent key) (patch `one-harness-per-agent`).
    #[command(flatten)]
    pub lease: LeaseArgs,
}

/// Restart resume: durable receipts and `session/load` / `session/resume`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ResumeArgs {
    /// Never reopen a stored session (upstream behaviour: every new worker session is a
    /// `session/new`).
    #[arg(long, env = "BUZZ_ACP_NO_RESUME_SESSIONS", value_parser = BoolishValueParser::new(),
          default_value = "false", default_missing_value = "true", num_args = 0..=1)]
    pub no_resume_sessions: bool,

    /// Seconds before the first retry of a restore that failed without a definitive answer
    /// (each further retry waits twice as long, at most a minute).
    #[arg(long, env = "BUZZ_ACP_RESUME_RETRY_SECS", default_value_t = 15)]
    pub resume_retry_secs: u64,

    /// Failed restore attempts after which the harness gives up on the stored session, answers
    /// in a new session and tells the thread.
    #[arg(long, env = "BUZZ_ACP_RESUME_MAX_ATTEMPTS", default_value_t = 4)]
    pub resume_max_attempts: u32,

    /// Seconds after the first failed restore after which the harness gives up (whatever the
    /// attempt count).
    #[arg(long, env = "BUZZ_ACP_RESUME_GIVE_UP_SECS", default_value_t = 180)]
    pub resume_give_up_secs: u64,

    /// Seconds a thread's turn waits for its receipt when the receipt store does not answer;
    /// then it goes on without it (from the session this harness last recorded, or a new one,
    /// with a notice).
    #[arg(long, env = "BUZZ_ACP_SESSION_STORE_WAIT_SECS", default_value_t = 10)]
    pub session_store_wait_secs: u64,

    /// Where the receipts live and how many are kept.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Resident sessions: hot continuation on the live session.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ResidencyArgs {
    /// Live sessions kept resident after a successful turn, for hot follow-ups (least recently
    /// used disposed first; 0 restores upstream routing). With patch
    /// resident-background-controllers.
    #[arg(long, env = "BUZZ_ACP_MAX_RESIDENT_SESSIONS", default_value_t = DEFAULT_MAX_RESIDENT_SESSIONS)]
    pub max_resident_sessions: usize,
}

/// Continuity across rotations: handoffs, limits that survive restores, whole-thread
/// replacements. (The turn limit itself is upstream's `--max-turns-per-session`.)
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ContinuityArgs {
    /// What a session the harness retires is asked for its handoff to its successor. With patch
    /// continuity-handoff.
    #[arg(long, env = "BUZZ_ACP_HANDOFF_PROMPT",
          default_value = crate::retirement::DEFAULT_HANDOFF_INSTRUCTION, hide_default_value = true)]
    pub handoff_prompt: String,

    /// Retire a session (with a handoff) once its reported usage reaches this share of its
    /// context window, in percent (0: never; agents that compact their own context need not).
    /// With patch continuity-handoff.
    #[arg(long, env = "BUZZ_ACP_ROTATE_AT_CONTEXT_PERCENT", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rotate_at_context_percent: u8,

    /// Kilobytes of the whole thread given to a session that replaces a lost, exhausted or
    /// unanswering one (instead of the last messages only). With patch continuity-handoff.
    #[arg(long, env = "BUZZ_ACP_WHOLE_THREAD_BUDGET_KB", default_value_t = DEFAULT_WHOLE_THREAD_BUDGET_KB)]
    pub whole_thread_budget_kb: usize,
}

/// Mentions posted while no harness of this (relay, agent key) was listening: read back from the
/// watermark kept with the receipts and answered once (crate `buzz-catch-up`).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct CatchUpArgs {
    /// Mentions posted while the harness was away that are older than this when it comes back
    /// are not answered: their thread is told once (e.g. 30m, 2h). With patch
    /// mentions-while-away.
    #[arg(long, env = "BUZZ_ACP_MISSED_MENTION_MAX_AGE", default_value = "1h",
          value_parser = humantime::parse_duration)]
    pub missed_mention_max_age: Duration,

    /// Do not read back what was posted while the harness was away (upstream behaviour: the
    /// subscription starts when the harness does). With patch mentions-while-away.
    #[arg(long, env = "BUZZ_ACP_NO_CATCH_UP", value_parser = BoolishValueParser::new(),
          default_value = "false", default_missing_value = "true", num_args = 0..=1)]
    pub no_catch_up: bool,
}

/// One live harness per (relay, agent key) (crate `buzz-lease`): a lease file on this host, or,
/// with `--lease-across-machines` on PostgreSQL, a lease kept in the database.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct LeaseArgs {
    /// Where the harness takes its lease on (relay, agent key) before it connects; a second
    /// harness for the same pair on this host refuses to start (exit status 75). Default:
    /// buzz/buzz-acp-runtime-leases under $XDG_DATA_HOME or ~/.local/share. With patch
    /// one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_DIR", value_name = "DIR")]
    pub lease_dir: Option<std::path::PathBuf>,

    /// This agent runs on several machines that share the PostgreSQL store: serve only while
    /// holding the agent's lease in the database, and wait as a standby otherwise (a standby
    /// takes over when the holder dies, freezes or loses the database). A harness that cannot
    /// reach the database then answers nothing until it can (the mentions are read back after).
    /// Without it, the lease is this host's, as on the embedded store. With patch
    /// one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_ACROSS_MACHINES", value_parser = BoolishValueParser::new(),
          default_value = "false", default_missing_value = "true", num_args = 0..=1)]
    pub lease_across_machines: bool,

    /// With --lease-across-machines, how long the agent's lease lasts by the
    /// database's clock: a holder that dies or freezes is replaced within about this long.
    /// Default 30s. With patch one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_LIFETIME", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    pub lease_lifetime: Option<Duration>,

    /// How often the lease's holder renews it. Default 5s. With patch one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_RENEW_EVERY", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    pub lease_renew_every: Option<Duration>,

    /// How long before its lease could end the holder stops answering: at least one publish
    /// attempt. Default 10s. With patch one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_MARGIN", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    pub lease_margin: Option<Duration>,

    /// How often a standby asks for the lease. Default 2s. With patch one-harness-per-agent.
    #[arg(long, env = "BUZZ_ACP_LEASE_RETRY_EVERY", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    pub lease_retry_every: Option<Duration>,
}

/// `--missed-mention-max-age` by default.
pub const DEFAULT_MISSED_MENTION_MAX_AGE: Duration = Duration::from_secs(3600);

/// The operator's metrics: Prometheus text exposition over HTTP (see
/// [`crate::telemetry_metrics`]).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (hot / warm / cold turns, restores, notices, residents, the
    /// receipt store's operations and health) over HTTP at this address, e.g. 127.0.0.1:9464.
    /// Off by default; the address is bound at startup. With patch operator-metrics.
    #[arg(long, env = "BUZZ_ACP_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl SessionArgs {
    /// The lifecycle's configuration for a harness that carries `behaviours`.
    /// `owner_configured`: notices may mention `!rotate`; `steer`: mid-turn input is steered
    /// into the running turn; `max_turns`: upstream's `--max-turns-per-session` (the lifecycle
    /// enforces it across restores, with continuity). Each flag of a behaviour the harness does
    /// not carry that is set anyway is logged as ignored, once (the harness calls this once, at
    /// startup).
    pub fn lifecycle_config(
        &self,
        behaviours: Behaviours,
        owner_configured: bool,
        steer: bool,
        max_turns: Option<u32>,
    ) -> LifecycleConfig {
        for (flag, behaviour) in self.ignored_flags(behaviours) {
            tracing::warn!(
                flag,
                patch = behaviour.patch(),
                "this harness does not carry the patch this flag belongs to; the flag is ignored"
            );
        }
        LifecycleConfig {
            behaviours,
            resume: !self.resume.no_resume_sessions,
            retry: self.resume.retry_policy(),
            owner_configured,
            max_residents: self.residency.max_resident_sessions,
            steer,
            continuity: crate::retirement::ContinuityConfig {
                max_turns,
                rotate_at_context_percent: (self.continuity.rotate_at_context_percent > 0)
                    .then_some(self.continuity.rotate_at_context_percent),
                handoff_instruction: self.continuity.handoff_prompt.clone(),
                whole_thread_budget_bytes: self.continuity.whole_thread_budget_kb * 1024,
            },
        }
    }

    /// The flags set to something other than their default (on the command line or by their
    /// environment variable) that belong to a behaviour `behaviours` does not carry, each with
    /// that behaviour: they change nothing.
    pub fn ignored_flags(&self, behaviours: Behaviours) -> Vec<(&'static str, Behaviour)> {
        let continuity = &self.continuity;
        let set = [
            (
                "--max-resident-sessions",
                Behaviour::Residency,
                self.residency.max_resident_sessions != DEFAULT_MAX_RESIDENT_SESSIONS,
            ),
            (
                "--handoff-prompt",
                Behaviour::Continuity,
                continuity.handoff_prompt != crate::retirement::DEFAULT_HANDOFF_INSTRUCTION,
            ),
            (
                "--rotate-at-context-percent",
                Behaviour::Continuity,
                continuity.rotate_at_context_percent != 0,
            ),
            (
                "--whole-thread-budget-kb",
                Behaviour::Continuity,
                continuity.whole_thread_budget_kb != DEFAULT_WHOLE_THREAD_BUDGET_KB,
            ),
            (
                "--metrics-listen",
                Behaviour::Metrics,
                self.metrics.metrics_listen.is_some(),
            ),
            (
                "--missed-mention-max-age",
                Behaviour::CatchUp,
                self.catch_up.missed_mention_max_age != DEFAULT_MISSED_MENTION_MAX_AGE,
            ),
            (
                "--no-catch-up",
                Behaviour::CatchUp,
                self.catch_up.no_catch_up,
            ),
            (
                "--lease-dir",
                Behaviour::OneHarness,
                self.lease.lease_dir.is_some(),
            ),
            (
                "--lease-across-machines",
                Behaviour::OneHarness,
                self.lease.lease_across_machines,
            ),
            (
                "--lease-lifetime",
                Behaviour::OneHarness,
                self.lease.lease_lifetime.is_some(),
            ),
            (
                "--lease-renew-every",
                Behaviour::OneHarness,
                self.lease.lease_renew_every.is_some(),
            ),
            (
                "--lease-margin",
                Behaviour::OneHarness,
                self.lease.lease_margin.is_some(),
            ),
            (
                "--lease-retry-every",
                Behaviour::OneHarness,
                self.lease.lease_retry_every.is_some(),
            ),
        ];
        set.into_iter()
            .filter(|(_, behaviour, set)| *set && !behaviours.has(*behaviour))
            .map(|(flag, behaviour, _)| (flag, behaviour))
            .collect()
    }

    /// How long a turn waits for its receipt.
    pub fn read_wait(&self) -> Duration {
        Duration::from_secs(self.resume.session_store_wait_secs)
    }

    /// Opens the receipt store of agent `agent_pubkey` on relay `relay` for a harness that carries
    /// `behaviours` (they choose the key scheme, [`key_scheme`]; nothing is stored with
    /// `--no-resume-sessions`); an old JSON store in `state_dir` is imported on first open. The
    /// configuration is checked now; the store itself is opened by the driver, in the background,
    /// so a database that is down when the harness starts does not stop it.
    ///
    /// The harness calls this once, when it starts, right before it builds the
    /// [`Driver`](crate::Driver): with `--metrics-listen` (and [`Behaviour::Metrics`]) the
    /// metrics endpoint starts here too (its recorder then sees everything the driver does).
    ///
    /// # Errors
    /// A store configuration that can never work (an unparsable or unsupported URL), or a store
    /// that refuses this harness for a reason that lasts ([`StoreError::Refused`]: a certificate
    /// that does not verify, wrong credentials, a missing database or role, a state directory it
    /// may not write; tried once, for at most [`crate::startup_probe::STARTUP_PROBE_WAIT`]): the
    /// harness refuses to start rather than run without its sessions. With `--metrics-listen`, an
    /// address that cannot be listened on (reported as a configuration error: it is the only
    /// error the harness's start-up path carries from here).
    pub fn opener(
        &self,
        behaviours: Behaviours,
        relay: &str,
        agent_pubkey: &str,
        state_dir: &Path,
    ) -> Result<Opener, StoreError> {
        if behaviours.has(Behaviour::Metrics)
            && let Some(addr) = self.metrics.metrics_listen
        {
            crate::telemetry_metrics::serve(addr).map_err(|e| StoreError::Config {
                reason: e.to_string(),
            })?;
        }
        let scope = StoreScope {
            relay: relay.to_string(),
            agent_pubkey: agent_pubkey.to_string(),
        };
        let scheme = key_scheme(behaviours);
        if self.resume.no_resume_sessions {
            let disabled: Arc<dyn ReceiptStore> =
                Arc::new(buzz_session_store::DisabledStore::new(scope, scheme));
            return Ok(Arc::new(move || {
                Ok(Arc::new(Arc::clone(&disabled)) as Arc<dyn Receipts>)
            }));
        }
        let config = StoreConfig::from_args(&self.resume.store, scope, scheme, state_dir)?;
        let opener: Opener = Arc::new(move || {
            let store: Arc<dyn ReceiptStore> = Arc::from(buzz_session_store::open(&config)?);
            tracing::info!(backend = %store.kind(), location = %store.location(), "session receipts");
            Ok(Arc::new(store) as Arc<dyn Receipts>)
        });
        // A store that refuses for a reason that lasts stops the harness here (see
        // `startup_probe`); an outage does not.
        crate::startup_probe::probe(&opener, crate::startup_probe::STARTUP_PROBE_WAIT)?;
        Ok(opener)
    }
}

impl ResumeArgs {
    /// The retry policy these flags describe.
    pub fn retry_policy(&self) -> RetryPolicy {
        let first = Duration::from_secs(self.resume_retry_secs.max(1));
        RetryPolicy {
            first_delay: first,
            max_delay: first.max(Duration::from_secs(60)),
            max_attempts: self.resume_max_attempts.max(1),
            give_up_after: Duration::from_secs(self.resume_give_up_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        session: SessionArgs,
    }

    #[test]
    fn defaults_and_overrides() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert!(!cli.session.resume.no_resume_sessions);
        assert_eq!(cli.session.resume.retry_policy(), RetryPolicy::default());
        assert_eq!(cli.session.read_wait(), Duration::from_secs(10));
        let cli = Cli::try_parse_from([
            "x",
            "--no-resume-sessions",
            "--resume-retry-secs",
            "2",
            "--resume-max-attempts",
            "0",
            "--session-store-wait-secs",
            "3",
        ])
        .unwrap();
        assert!(cli.session.resume.no_resume_sessions);
        let p = cli.session.resume.retry_policy();
        assert_eq!(p.first_delay, Duration::from_secs(2));
        assert_eq!(p.max_attempts, 1, "at least one attempt");
        assert_eq!(cli.session.read_wait(), Duration::from_secs(3));
    }

    #[test]
    fn residency_flag() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.session.residency.max_resident_sessions, 8);
        let cli = Cli::try_parse_from(["x", "--max-resident-sessions", "0"]).unwrap();
        assert_eq!(cli.session.residency.max_resident_sessions, 0);
        let config = cli
            .session
            .lifecycle_config(Behaviours::all(), false, true, None);
        assert_eq!(config.max_residents, 0);
    }

    /// Every flag exists whatever the harness carries; one set for a behaviour it does not carry
    /// is reported as ignored, with its patch, and a default value is never reported.
    #[test]
    fn flags_of_a_behaviour_the_harness_does_not_carry_are_ignored() {
        let defaults = Cli::try_parse_from(["x"]).unwrap().session;
        assert_eq!(defaults.ignored_flags(Behaviours::default()), []);
        let cli = Cli::try_parse_from([
            "x",
            "--max-resident-sessions",
            "1",
            "--handoff-prompt",
            "write it down",
            "--rotate-at-context-percent",
            "80",
            "--whole-thread-budget-kb",
            "32",
            "--metrics-listen",
            "127.0.0.1:9464",
            "--lease-dir",
            "/run/buzz-leases",
        ])
        .unwrap()
        .session;
        assert_eq!(cli.ignored_flags(Behaviours::all()), []);
        let flags = |behaviours| {
            cli.ignored_flags(behaviours)
                .into_iter()
                .map(|(flag, behaviour)| format!("{flag} {}", behaviour.patch()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            flags(Behaviours::default()),
            [
                "--max-resident-sessions resident-background-controllers",
                "--handoff-prompt continuity-handoff",
                "--rotate-at-context-percent continuity-handoff",
                "--whole-thread-budget-kb continuity-handoff",
                "--metrics-listen operator-metrics",
                "--lease-dir one-harness-per-agent",
            ]
        );
        let residency = Behaviours::of(&[Behaviour::Residency, Behaviour::ConfigInPlace]);
        assert_eq!(
            flags(residency),
            [
                "--metrics-listen operator-metrics",
                "--lease-dir one-harness-per-agent"
            ]
        );
        let config = cli.lifecycle_config(Behaviours::default(), true, false, Some(3));
        assert_eq!(config.behaviours, Behaviours::default());
        assert_eq!(config.continuity.whole_thread_budget_bytes, 32 * 1024);
        assert_eq!(config.continuity.max_turns, Some(3));
    }

    #[test]
    fn receipts_are_keyed_by_scope_only_with_scope_keys() {
        assert_eq!(key_scheme(Behaviours::default()), KeyScheme::Channel);
        assert_eq!(
            key_scheme(Behaviours::all().without(Behaviour::ScopeKeys)),
            KeyScheme::Channel
        );
        assert_eq!(
            key_scheme(Behaviours::of(&[Behaviour::ScopeKeys])),
            KeyScheme::Scope
        );
    }
}
