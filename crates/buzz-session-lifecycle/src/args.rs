//! The series' command-line flags. Every flag also reads its `BUZZ_ACP_*` environment variable,
//! like upstream's own flags. The harness flattens these into its command line.

use std::path::Path;
use std::time::Duration;

use buzz_session_store::{
    DisabledStore, KeyScheme, ReceiptStore, StoreArgs, StoreConfig, StoreError, StoreScope,
};
use clap::builder::BoolishValueParser;

use crate::retry::RetryPolicy;

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

    /// Where the receipts live and how many are kept.
    #[command(flatten)]
    pub store: StoreArgs,
}

impl ResumeArgs {
    /// Opens the receipt store of agent `agent_pubkey` on relay `relay`, keyed by `scheme` (a
    /// store that remembers nothing with `--no-resume-sessions`). An old JSON store in
    /// `state_dir` is imported once.
    ///
    /// # Errors
    /// A store URL of an unsupported kind, or a store that cannot be opened (a database that is
    /// unreachable or newer than this harness): the harness refuses to start rather than
    /// silently running without its sessions.
    pub fn open_store(
        &self,
        relay: &str,
        agent_pubkey: &str,
        scheme: KeyScheme,
        state_dir: &Path,
    ) -> Result<Box<dyn ReceiptStore>, StoreError> {
        let scope = StoreScope {
            relay: relay.to_string(),
            agent_pubkey: agent_pubkey.to_string(),
        };
        if self.no_resume_sessions {
            return Ok(Box::new(DisabledStore::new(scope, scheme)));
        }
        let config = StoreConfig::from_args(&self.store, scope, scheme, state_dir)?;
        let store = buzz_session_store::open(&config)?;
        tracing::info!(backend = %store.kind(), location = %store.location(), "session receipts");
        Ok(store)
    }

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

/// Resident sessions: hot continuation on the live session.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ResidencyArgs {
    /// Live sessions kept resident after a successful turn, for hot follow-ups (least recently
    /// used disposed first; 0 restores upstream routing).
    #[arg(long, env = "BUZZ_ACP_MAX_RESIDENT_SESSIONS", default_value_t = 8)]
    pub max_resident_sessions: usize,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        resume: ResumeArgs,
        #[command(flatten)]
        residency: ResidencyArgs,
    }

    #[test]
    fn defaults_and_overrides() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert!(!cli.resume.no_resume_sessions);
        assert_eq!(cli.resume.retry_policy(), RetryPolicy::default());
        assert_eq!(cli.residency.max_resident_sessions, 8);
        let cli = Cli::try_parse_from([
            "x",
            "--no-resume-sessions",
            "--resume-retry-secs",
            "2",
            "--resume-max-attempts",
            "0",
            "--max-resident-sessions",
            "0",
        ])
        .unwrap();
        assert!(cli.resume.no_resume_sessions);
        let p = cli.resume.retry_policy();
        assert_eq!(p.first_delay, Duration::from_secs(2));
        assert_eq!(p.max_attempts, 1, "at least one attempt");
        assert_eq!(cli.residency.max_resident_sessions, 0);
    }
}
