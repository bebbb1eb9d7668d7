//! The patched harness inside the test process, on tokio's paused clock.
//!
//! The agents are served in-process (series `in-process-agents`: the agent command
//! `in-process:NAME`) and the relay is the scenario's file relay, which the harness reads and
//! writes synchronously. So every wait is virtual: tokio moves its clock only when every task is
//! idle, a 15 s retry takes no real time, and no test races a real sleep against a wall-clock
//! bound. Tests run with `#[tokio::test(start_paused = true)]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use buzz_acp::config::{CliArgs, Config};
use buzz_acp::relay::Event;
use buzz_acp::testing::{AGENT, AGENT_CWD, OWNER, Scenario};
use buzz_acp::{Harness, HarnessError, RunStats};
use clap::Parser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use futures::StreamExt;
use tokio::task::JoinHandle;

/// Registers an in-process test agent with the scenario's state dir and wire log plus `args`,
/// and returns the agent command that reaches it. Every spawn of the command starts one agent
/// instance; the wire log tells instances apart by their `pid`.
pub fn agent(s: &Scenario, args: &[&str]) -> String {
    agent_starting_in(s, args, Duration::ZERO)
}

/// Like [`agent`], but each instance answers its first request (`initialize`) only after
/// `startup` of virtual time: a worker spawn that takes a while, as a real adapter's does.
pub fn agent_starting_in(s: &Scenario, args: &[&str], startup: Duration) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let name = format!("test-agent-{n}");
    let state = s.agent_state_dir.display().to_string();
    let wire = s.wire_log.display().to_string();
    let mut argv = vec![
        "acp-test-agent",
        "--state-dir",
        &state,
        "--wire-log",
        &wire,
        "--wire-log-sent",
    ];
    argv.extend_from_slice(args);
    let parsed = acp_test_agent::Args::try_parse_from(argv).expect("test-agent flags");
    let instances = Arc::new(AtomicU32::new(0));
    let factory = move || {
        let instance = 1_000_000 * n + instances.fetch_add(1, Ordering::SeqCst);
        let (to_agent, mut from_agent) =
            acp_test_agent::serve_in_process(&parsed, instance).map_err(|e| e.to_string())?;
        if startup.is_zero() {
            return Ok((to_agent, from_agent));
        }
        let (delayed, out) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            let mut first = true;
            while let Some(line) = from_agent.next().await {
                if std::mem::take(&mut first) {
                    tokio::time::sleep(startup).await;
                }
                if delayed.unbounded_send(line).is_err() {
                    break;
                }
            }
        });
        Ok((to_agent, out))
    };
    buzz_in_process::register(&name, Arc::new(factory));
    format!("in-process:{name}")
}

/// The harness's configuration for scenario `s` with an in-process agent.
pub fn config(s: &Scenario, agent_command: &str, extra: &[&str]) -> Config {
    let state = s.state_dir.display().to_string();
    let relay = s.relay_dir.display().to_string();
    let observer = s.observer_log.display().to_string();
    let poll = s.poll_ms.to_string();
    let mut argv = vec![
        "buzz-acp",
        "--relay-dir",
        &relay,
        "--agent-command",
        agent_command,
        "--agent-pubkey",
        AGENT,
        "--owner-pubkey",
        OWNER,
        // The scenarios' users are several people, not only the owner.
        "--respond-to",
        "anyone",
        "--state-dir",
        &state,
        "--observer-log",
        &observer,
        "--cwd",
        AGENT_CWD,
        "--relay-poll-ms",
        &poll,
    ];
    argv.extend_from_slice(extra);
    Config::from_args(parse_known(argv)).expect("config")
}

/// The harness's flags, leaving out (with a note) any flag this build does not know: a guard run
/// without the patch that adds a flag then runs the harness without it, and fails by what the
/// harness does, not by a command line it rejects. (The series' flags exist in every build that
/// carries `session-store-resume`; a flag whose patch is missing there is ignored by the harness
/// itself, with a warning, to the same effect.)
fn parse_known(mut argv: Vec<&str>) -> CliArgs {
    loop {
        let error = match CliArgs::try_parse_from(&argv) {
            Ok(args) => return args,
            Err(error) => error,
        };
        let unknown = match (error.kind(), error.get(ContextKind::InvalidArg)) {
            (ErrorKind::UnknownArgument, Some(ContextValue::String(flag))) => flag.clone(),
            _ => panic!("harness flags: {error}"),
        };
        let at = argv
            .iter()
            .position(|a| *a == unknown)
            .unwrap_or_else(|| panic!("harness flags: {error}"));
        eprintln!("note: this harness has no {unknown}; running without it");
        argv.remove(at);
        if argv.get(at).is_some_and(|value| !value.starts_with("--")) {
            argv.remove(at);
        }
    }
}

/// Runs the harness as a task of the current runtime, with an in-process test agent (`agent_args`)
/// and `extra` harness flags. It ends like the binary would: `--once`, or
/// `--exit-after-inactivity` (virtual seconds).
pub fn start(
    s: &Scenario,
    agent_args: &[&str],
    extra: &[&str],
) -> JoinHandle<Result<RunStats, HarnessError>> {
    let config = config(s, &agent(s, agent_args), extra);
    let harness = Harness::open(config).expect("harness");
    tokio::spawn(harness.run())
}

/// Waits (on the paused clock) until the agent replied to `event`, at most `within` of virtual
/// time.
pub async fn reply(s: &Scenario, event: &Event, within: Duration) -> Event {
    wait_for(within, || s.reply_to(&event.id))
        .await
        .unwrap_or_else(|| panic!("no reply to {:?} within {within:?}", event.content))
}

/// Polls `probe` every 10 ms of virtual time until it yields, at most `within`.
pub async fn wait_for<T>(within: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
