//! Guard of `one-harness-per-agent`: on one host, one harness serves an agent on a relay.
//!
//! Both harnesses run over the test relay with the embedded store, each with a state directory
//! of its own (a second checkout, a second service file) and the host's one leases directory.
//! Without the patch the second harness starts, subscribes and answers too (as upstream's does,
//! block/buzz#3832): the guard fails by the second harness's exit status.

use buzz_acp_fork_tests::relay::{Launch, RelayWorld};
use buzz_acp_fork_tests::*;

/// A second harness for the agent on the same relay stops before connecting, with exit status 75
/// and a message naming the first; the first answers the next mention, once. Once the first is
/// killed, its lease goes with it: the second starts and answers.
#[test]
fn a_second_harness_for_the_same_agent_and_relay_refuses_to_start() {
    let w = RelayWorld::new();
    let host = tempfile::tempdir().expect("a leases directory");
    let leases = host.path().display().to_string();
    let env = [("BUZZ_ACP_LEASE_DIR", leases.as_str())];
    let first = w.start_env(&[], &[], &env);
    let first_pid = first.id();

    let (_second_dir, second) = scenario();
    let agent_command = agent(&second, &[]);
    let log = second.root.join("second-harness.log");
    let launch = Launch {
        scenario: &second,
        harness: &harness_bin(),
        agent_command: &agent_command,
        extra: &[],
        env: &env,
        log: log.clone(),
    };
    let mut child = w.spawn_harness(&launch).expect("the second harness starts");
    let exited = wait_until(WAIT, || child.try_wait().ok().flatten());
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let status = exited.and_then(|status| status.code());
    assert_eq!(
        status,
        Some(75),
        "the second harness for the same agent and relay stops with exit status 75; its log:\n{said}"
    );
    assert!(
        said.contains(&format!("pid {first_pid}")),
        "the refusal names the harness that holds the lease; the log:\n{said}"
    );

    let root = w.post_top("Who is answering here?");
    assert!(
        w.wait_for_reply(&root.id, WAIT).is_some(),
        "the first harness answers"
    );
    drop(first);
    let answers = w.answers_to(&root.id);
    assert_eq!(answers, 1, "one harness answered");

    // What an operator sees of the second harness: its exit status and its one line.
    let refusal: Vec<String> = said
        .lines()
        .filter(|line| line.starts_with("buzz-acp: "))
        .map(|line| {
            // Whole fields only: the pid's digits may also occur in the port, the start time or
            // a key.
            let line = match line.split_once("since unix time ") {
                Some((head, tail)) => {
                    let rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
                    format!("{head}since unix time <start>{rest}")
                }
                None => line.to_owned(),
            };
            let line = line
                .replace(&format!("(pid {first_pid},"), "(pid <first harness's pid>,")
                .replace(&leases, "<leases>")
                .replace(w.relay.ws_url().trim_end_matches('/'), "<relay>");
            redact_relay_digest(&line)
        })
        .collect();
    insta::assert_json_snapshot!(
        "second_harness_refused",
        w.redacted(serde_json::json!({
            "second harness": { "exit status": status, "says": refusal },
            "answers to the next mention": answers,
        }))
    );

    // Killed (SIGKILL above), the first holds nothing: the second now starts and answers.
    let again = w.start_env(&[], &[], &env);
    let next = w.post_top("And now?");
    assert!(
        w.wait_for_reply(&next.id, WAIT).is_some(),
        "a harness started after the holder died takes the lease and answers"
    );
    drop(again);
}

/// The lease file's name ends in the relay's digest (`__<64 hex>.lock`), which changes with the
/// test relay's port.
fn redact_relay_digest(line: &str) -> String {
    match line.split_once("__") {
        Some((head, tail))
            if tail.len() >= 64 && tail[..64].bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{head}__<sha256 of the relay>{}", &tail[64..])
        }
        _ => line.to_owned(),
    }
}
