//! The `buzz-test-relay` binary: serve the test relay on 127.0.0.1 until killed.
//!
//! Once it listens it prints one JSON line on stdout, `{"ws":"ws://127.0.0.1:PORT",
//! "http":"http://127.0.0.1:PORT"}`, for the process that started it to read; logs go to stderr.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use nostr::{Keys, SecretKey};
use serde::Serialize;

use buzz_test_relay::{
    ClosedFault, ClosedSubscriptionFault, Faults, RawFrame, RelayConfig, RestFailure,
    RestFailureKind, TestRelay,
};

/// A loopback Nostr relay shaped like the Buzz relay: NIP-01/NIP-42 websocket and the REST
/// bridge (NIP-98) on one port, with optional fault injection.
#[derive(Debug, Parser)]
#[command(name = "buzz-test-relay", version, about, long_about = None)]
struct Args {
    /// Port on 127.0.0.1; 0 picks a free one (printed on stdout).
    #[arg(long, default_value_t = 0)]
    port: u16,

    /// The relay's own secret key (hex or nsec); a fresh one when absent.
    #[arg(
        long,
        value_name = "KEY",
        env = "BUZZ_TEST_RELAY_KEY",
        hide_env_values = true
    )]
    relay_key: Option<String>,

    /// Fault: answer every AUTH with `OK false`.
    #[arg(long)]
    refuse_auth: bool,

    /// Fault: cut every websocket connection this many seconds after it opened.
    #[arg(long, value_name = "SECS")]
    drop_connections_after: Option<u64>,

    /// Fault: answer the next N REST requests with 429 `rate-limited: …`.
    #[arg(long, value_name = "N", conflicts_with = "rest_unavailable")]
    rest_rate_limited: Option<u32>,

    /// The delay a 429 names (`retry in Ns`, `Retry-After`).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1,
        requires = "rest_rate_limited"
    )]
    retry_after: u64,

    /// Fault: answer the next N REST requests with 503.
    #[arg(long, value_name = "N")]
    rest_unavailable: Option<u32>,

    /// Fault: send this NOTICE to every websocket client right after its AUTH challenge.
    #[arg(long, value_name = "MESSAGE")]
    notice: Option<String>,

    /// Fault: answer REQs with `CLOSED` and this reason (see --closed-count).
    #[arg(long, value_name = "REASON")]
    closed: Option<String>,

    /// How many REQs --closed answers.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "closed")]
    closed_count: u32,

    /// Fault: answer REQs for this subscription id with `CLOSED` (see --closed-subscription-reason
    /// and --closed-subscription-count).
    #[arg(long, value_name = "ID", requires = "closed_subscription_reason")]
    closed_subscription: Option<String>,

    /// The reason --closed-subscription gives.
    #[arg(long, value_name = "REASON", requires = "closed_subscription")]
    closed_subscription_reason: Option<String>,

    /// How many REQs --closed-subscription answers.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "closed_subscription"
    )]
    closed_subscription_count: u32,

    /// Fault: send this text frame as it is to the first client that authenticates, after its
    /// `OK` (repeatable; sent in order).
    #[arg(long, value_name = "TEXT")]
    after_auth_text: Vec<String>,

    /// Fault: then send that client a NOTICE frame of exactly N bytes (over 16 MiB it is over
    /// tungstenite's default frame limit).
    #[arg(long, value_name = "N")]
    after_auth_notice_bytes: Option<usize>,
}

impl Args {
    fn faults(&self) -> Faults {
        let rest_failure = match (self.rest_rate_limited, self.rest_unavailable) {
            (Some(count), _) => Some(RestFailure {
                kind: RestFailureKind::RateLimited {
                    retry_after_secs: self.retry_after,
                },
                count,
            }),
            (None, Some(count)) => Some(RestFailure {
                kind: RestFailureKind::Unavailable,
                count,
            }),
            (None, None) => None,
        };
        Faults {
            refuse_auth: self.refuse_auth,
            drop_connections_after: self.drop_connections_after.map(Duration::from_secs),
            rest_failure,
            notice: self.notice.clone(),
            closed: self.closed.clone().map(|reason| ClosedFault {
                reason,
                count: self.closed_count,
            }),
            closed_subscription: self
                .closed_subscription
                .clone()
                .zip(self.closed_subscription_reason.clone())
                .map(|(subscription, reason)| ClosedSubscriptionFault {
                    subscription,
                    reason,
                    count: self.closed_subscription_count,
                }),
            after_auth: self
                .after_auth_text
                .iter()
                .cloned()
                .map(RawFrame::Text)
                .chain(
                    self.after_auth_notice_bytes
                        .map(|bytes| RawFrame::PaddedNotice { bytes }),
                )
                .collect(),
        }
    }
}

/// The line printed once the relay listens.
#[derive(Debug, Serialize)]
#[serde(deny_unknown_fields)]
struct Listening {
    ws: String,
    http: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut config = RelayConfig::default().port(args.port).faults(args.faults());
    if let Some(key) = &args.relay_key {
        match SecretKey::parse(key) {
            Ok(secret) => config = config.keys(Keys::new(secret)),
            Err(e) => {
                eprintln!("buzz-test-relay: --relay-key: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let relay = match TestRelay::start(config).await {
        Ok(relay) => relay,
        Err(e) => {
            eprintln!("buzz-test-relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let line = Listening {
        ws: relay.ws_url(),
        http: relay.http_url(),
    };
    let mut stdout = std::io::stdout().lock();
    let printed = serde_json::to_string(&line)
        .map_err(std::io::Error::other)
        .and_then(|json| writeln!(stdout, "{json}"))
        .and_then(|()| stdout.flush());
    drop(stdout);
    if let Err(e) = printed {
        eprintln!("buzz-test-relay: writing the address: {e}");
        return ExitCode::FAILURE;
    }
    wait_for_stop().await;
    tracing::info!("stopping");
    drop(relay);
    ExitCode::SUCCESS
}

/// Until SIGINT or SIGTERM.
async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!("no SIGTERM handler ({e}); stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_fault_flags_make_their_faults() {
        let args = Args::parse_from([
            "buzz-test-relay",
            "--closed-subscription",
            "ch-a",
            "--closed-subscription-reason",
            "rate-limited: slow down",
            "--closed-subscription-count",
            "2",
            "--after-auth-text",
            "not json",
            "--after-auth-text",
            "[\"NOPE\"]",
            "--after-auth-notice-bytes",
            "100",
        ]);
        let faults = args.faults();
        assert_eq!(
            faults.closed_subscription,
            Some(ClosedSubscriptionFault {
                subscription: "ch-a".into(),
                reason: "rate-limited: slow down".into(),
                count: 2,
            })
        );
        assert_eq!(
            faults.after_auth,
            [
                RawFrame::Text("not json".into()),
                RawFrame::Text("[\"NOPE\"]".into()),
                RawFrame::PaddedNotice { bytes: 100 },
            ]
        );
    }

    #[test]
    fn a_closed_subscription_needs_its_reason() {
        assert!(
            Args::try_parse_from(["buzz-test-relay", "--closed-subscription", "ch-a"]).is_err()
        );
    }
}
