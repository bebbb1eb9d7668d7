//! Guard of `one-harness-per-agent`: on one host, one harness serves an agent on a relay.
//!
//! Both harnesses run over the test relay with the embedded store, each with a state directory
//! of its own (a second checkout, a second service file) and the host's one leases directory.
//! Without the patch the second harness starts, subscribes and answers too (as upstream's does,
//! block/buzz#3832): the guard fails by the second harness's exit status.

use buzz_acp::relay::Event;
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

/// The lease across machines (`--lease-across-machines`), short so that a takeover takes seconds: a 3 s lease renewed every
/// 500 ms, serving stopped 1 s before its end, a standby asking every 250 ms.
const SHORT_LEASE: [(&str, &str); 5] = [
    ("BUZZ_ACP_LEASE_ACROSS_MACHINES", "1"),
    ("BUZZ_ACP_LEASE_LIFETIME", "3s"),
    ("BUZZ_ACP_LEASE_RENEW_EVERY", "500ms"),
    ("BUZZ_ACP_LEASE_MARGIN", "1s"),
    ("BUZZ_ACP_LEASE_RETRY_EVERY", "250ms"),
];

/// Machine A's harness is up and serving (subscribed); machine B's is started from a state
/// directory of its own with the same database, and is up once it waits for the lease (or, in
/// a build without the patch, once it is subscribed too).
struct TwoMachines {
    w: RelayWorld,
    a: Background,
    b: Background,
    b_log: std::path::PathBuf,
}

fn two_machines(url: &str, a_agent: &[&str]) -> TwoMachines {
    two_machines_with(url, a_agent, &[], false)
}

/// [`two_machines`], B's agent started with `b_agent`; `own_disk`: B's agent keeps its
/// transcripts on a disk of its own (it cannot read A's).
fn two_machines_with(url: &str, a_agent: &[&str], b_agent: &[&str], own_disk: bool) -> TwoMachines {
    let mut w = RelayWorld::new();
    let mut env: Vec<(&str, &str)> = vec![("BUZZ_ACP_SESSION_STORE_URL", url)];
    env.extend(SHORT_LEASE);
    let a = w.start_env(a_agent, &[], &env);
    w.s.state_dir = w.s.root.join("machine-b");
    std::fs::create_dir_all(&w.s.state_dir).expect("machine B's state directory");
    if own_disk {
        w.s.agent_state_dir = w.s.root.join("machine-b-agent");
    }
    let (b, b_log) = w.spawn_env(b_agent, &env, "machine-b.log");
    let up = wait_until(WAIT, || {
        let log = std::fs::read_to_string(&b_log).unwrap_or_default();
        (log.contains("standby: waiting")
            || log.contains("connected, authenticated and subscribed"))
        .then_some(())
    });
    assert!(
        up.is_some(),
        "machine B's harness did not start; its log:\n{}",
        std::fs::read_to_string(&b_log).unwrap_or_default()
    );
    TwoMachines { w, a, b, b_log }
}

/// Posts a thread's first mention, whose answer the test agent holds for two seconds
/// (`!delay:`). A harness checks whether a mention already has an answer when it admits it, so
/// in a build without the patch a second harness that received the mention a little late would
/// skip it and leave the thread to the first one — and the guard would pass by chance. With the
/// answer held, every serving harness admits the mention before any answer exists: without the
/// patch both open a session for the thread, always.
fn first_mention(w: &RelayWorld, text: &str) -> Event {
    w.post_top(&format!("{text} !delay:2000"))
}

/// Waits until the agent of some machine has been sent a prompt containing `text` (its turn is
/// running).
fn wait_prompted(w: &RelayWorld, text: &str) {
    let prompted = wait_until(WAIT, || {
        prompts(&wire(&w.s))
            .iter()
            .any(|p| p.contains(text))
            .then_some(())
    });
    assert!(
        prompted.is_some(),
        "no prompt with {text:?} reached an agent"
    );
}

/// Two machines serve one agent through one PostgreSQL database: only the lease's holder (A)
/// answers. A is killed (SIGKILL) while its agent works on a follow-up; B takes the lease once
/// A's expires, reads back the follow-up A never answered, and answers it once, on the
/// thread's stored session (`session/load`, with what A's session knew), then serves on.
///
/// Without the patch both harnesses serve: the thread's first mention gets two answers.
#[test]
fn across_machines_a_standby_takes_over_the_threads_of_a_holder_killed_during_a_turn() {
    let Some(url) = postgres_url() else { return };
    let TwoMachines { w, a, b, b_log } = two_machines(&url, &["--prompt-delay-ms", "1500"]);

    let root = first_mention(&w, "remember alpha-7301");
    let r1 = w
        .wait_for_reply(&root.id, WAIT)
        .expect("the thread is answered");
    let q = w.post_reply(&root, &r1, "what did I say?");
    wait_prompted(&w, "what did I say?");
    drop(a); // SIGKILL: machine A dies during the turn.

    let r2 = w.wait_for_reply(&q.id, WAIT).unwrap_or_else(|| {
        panic!(
            "the standby answers the follow-up A never answered; its log:\n{}",
            std::fs::read_to_string(&b_log).unwrap_or_default()
        )
    });
    let z = w.post_reply(&root, &r2, "still there?");
    let r3 = w
        .wait_for_reply(&z.id, WAIT)
        .expect("the new holder serves on");
    b.stop().expect("machine B stops");

    let answers: Vec<usize> = [&root, &q, &z]
        .iter()
        .map(|m| w.answers_to(&m.id))
        .collect();
    assert_eq!(answers, [1, 1, 1], "every mention answered exactly once");
    assert!(
        r2.content.contains("alpha-7301"),
        "the follow-up is answered with what A's session knew: {}",
        r2.content
    );
    let frames = wire(&w.s);
    assert_eq!(
        served_as(&frames, &root.id),
        ["new", "continued", "restored", "continued"],
        "A: new, then the follow-up it never finished; B: the stored session, then live"
    );
    assert_eq!(count_method(&frames, "session/new"), 1, "no new session");
    assert_eq!(turns(&r3), turns(&r2) + 1);
}

/// A holder frozen (SIGSTOP) for twice its lease loses it: B takes over and answers what was
/// pending. A, thawed, finds its lease gone: it publishes nothing of the turn it was in, goes
/// back to waiting, and takes the lease again when B stops cleanly (B releases it at once).
///
/// Without the patch both harnesses serve: the first mention gets two answers.
#[test]
fn across_machines_a_holder_frozen_past_its_lease_stops_serving_and_answers_nothing_late() {
    let Some(url) = postgres_url() else { return };
    let TwoMachines { w, a, b, b_log } = two_machines(&url, &["--prompt-delay-ms", "500"]);

    let root = first_mention(&w, "remember beta-4410");
    let r1 = w
        .wait_for_reply(&root.id, WAIT)
        .expect("the thread is answered");
    let q = w.post_reply(&root, &r1, "and what was it?");
    wait_prompted(&w, "and what was it?");
    a.freeze(); // its agent answers into a pipe nobody reads
    let r2 = w.wait_for_reply(&q.id, WAIT).unwrap_or_else(|| {
        panic!(
            "the standby answers while A is frozen; its log:\n{}",
            std::fs::read_to_string(&b_log).unwrap_or_default()
        )
    });
    // Twice the lease in all, then A runs again: what it does now is what it does late.
    std::thread::sleep(std::time::Duration::from_secs(6));
    a.thaw();
    let z = w.post_reply(&root, &r2, "who answers now?");
    let r3 = w.wait_for_reply(&z.id, WAIT).expect("B serves on");
    let mut a = a;
    assert!(
        a.is_running(),
        "A waits as a standby again rather than exiting"
    );

    // B stops cleanly and releases the lease: A takes it and serves the next mention.
    b.stop().expect("machine B stops");
    let last = w.post_reply(&root, &r3, "and after B stopped?");
    let r4 = w.wait_for_reply(&last.id, WAIT).expect("A serves again");
    drop(a);

    let answers: Vec<usize> = [&root, &q, &z, &last]
        .iter()
        .map(|m| w.answers_to(&m.id))
        .collect();
    assert_eq!(answers, [1, 1, 1, 1], "every mention answered exactly once");
    assert!(r2.content.contains("beta-4410"), "{}", r2.content);
    assert!(r4.content.contains("beta-4410"), "{}", r4.content);
}

/// The database goes away for longer than the lease while a follow-up is posted: the holder
/// stops serving (it can no longer prove it holds the lease), nobody answers meanwhile, and once
/// the database is back one harness takes the lease, restores the thread's session and answers
/// the follow-up once.
///
/// Without the patch both harnesses serve: the thread gets two new sessions.
#[test]
fn across_machines_a_database_restart_leaves_one_harness_answering_each_mention_once() {
    if postgres_url().is_none() {
        return;
    }
    let mut pg = buzz_acp_fork_tests::outage::pg_server();
    let TwoMachines { w, a, b, b_log } = two_machines(&pg.url(), &[]);

    let root = first_mention(&w, "remember gamma-5120");
    let r1 = w
        .wait_for_reply(&root.id, WAIT)
        .expect("the thread is answered");
    pg.stop().expect("the database stops");
    let q = w.post_reply(&root, &r1, "still with me?");
    // Down for longer than the 3 s lease: the holder must stop serving.
    std::thread::sleep(std::time::Duration::from_secs(4));
    pg.restart().expect("the database starts again");
    let r2 = w.wait_for_reply(&q.id, WAIT).unwrap_or_else(|| {
        panic!(
            "a harness answers the follow-up once the database is back; B's log:\n{}",
            std::fs::read_to_string(&b_log).unwrap_or_default()
        )
    });
    let z = w.post_reply(&root, &r2, "and now?");
    let r3 = w.wait_for_reply(&z.id, WAIT).expect("answered");
    drop((a, b));

    let answers: Vec<usize> = [&root, &q, &z]
        .iter()
        .map(|m| w.answers_to(&m.id))
        .collect();
    assert_eq!(answers, [1, 1, 1], "every mention answered exactly once");
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1, "one session");
    assert!(r2.content.contains("gamma-5120"), "{}", r2.content);
    assert_eq!(turns(&r3), turns(&r2) + 1);
}

/// Two harnesses of one agent started at the same moment on two machines: the database grants
/// the lease to one; the mention is answered once, in one session.
///
/// Without the patch both serve: two sessions are opened for the thread.
#[test]
fn across_machines_two_harnesses_started_together_serve_one_at_a_time() {
    let Some(url) = postgres_url() else { return };
    let mut w = RelayWorld::new();
    let mut env: Vec<(&str, &str)> = vec![("BUZZ_ACP_SESSION_STORE_URL", url.as_str())];
    env.extend(SHORT_LEASE);
    let (a, a_log) = w.spawn_env(&[], &env, "machine-a.log");
    w.s.state_dir = w.s.root.join("machine-b");
    std::fs::create_dir_all(&w.s.state_dir).expect("machine B's state directory");
    let (b, b_log) = w.spawn_env(&[], &env, "machine-b.log");
    // Up: one subscribed (and, with the patch, the other waiting for the lease).
    let subscribed = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("connected, authenticated and subscribed")
    };
    let up = wait_until(WAIT, || {
        (subscribed(&a_log) || subscribed(&b_log)).then_some(())
    });
    assert!(up.is_some(), "neither harness subscribed");
    // Give a second harness without the lease every chance to subscribe too.
    std::thread::sleep(std::time::Duration::from_secs(2));

    let root = first_mention(&w, "who is on duty?");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    let q = w.post_reply(&root, &r1, "and again?");
    w.wait_for_reply(&q.id, WAIT).expect("answered");
    drop((a, b));

    assert_eq!(w.answers_to(&root.id), 1);
    assert_eq!(w.answers_to(&q.id), 1);
    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/new"),
        1,
        "one harness served the thread"
    );
    assert_eq!(served_as(&frames, &root.id), ["new", "continued"]);
}

/// An agent whose transcripts live on its machine's disk (claude-agent-acp keeps them under
/// `~/.claude/projects`): A stops (a planned move: it releases the lease), B takes over, but its
/// agent cannot read the thread's session. The thread goes on in a new session that has its
/// whole history, and is told once.
///
/// Without the patch both harnesses serve: the thread's first mention opens a session on each.
#[test]
fn across_machines_a_standby_whose_agent_cannot_read_the_transcript_goes_on_with_the_whole_thread()
{
    let Some(url) = postgres_url() else { return };
    let b_agent = ["--missing-session", "claude-agent-acp"];
    let TwoMachines { w, a, b, b_log } = two_machines_with(&url, &[], &b_agent, true);

    let root = first_mention(&w, "remember epsilon-2290");
    let r1 = w
        .wait_for_reply(&root.id, WAIT)
        .expect("the thread is answered");
    a.stop().expect("machine A stops");
    let q = w.post_reply(&root, &r1, "what did I say?");
    let r2 = w.wait_for_reply(&q.id, WAIT).unwrap_or_else(|| {
        panic!(
            "the standby answers; its log:\n{}",
            std::fs::read_to_string(&b_log).unwrap_or_default()
        )
    });
    wait_until(WAIT, || w.notices_about(&q.id).into_iter().next());
    b.stop().expect("machine B stops");

    assert_eq!([w.answers_to(&root.id), w.answers_to(&q.id)], [1, 1]);
    let notices: Vec<String> = w
        .notices_about(&q.id)
        .into_iter()
        .map(|n| n.content)
        .collect();
    assert_eq!(notices.len(), 1, "the thread is told once: {notices:?}");
    assert!(notices[0].contains("gone"), "{}", notices[0]);
    assert!(
        r2.content.starts_with("turns=1 "),
        "a new session: {}",
        r2.content
    );
    assert!(
        r2.content.contains("epsilon-2290"),
        "with the whole thread: {}",
        r2.content
    );
    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/new"),
        2,
        "A's, then B's after the load failed"
    );
    assert_eq!(
        count_method(&frames, "session/load"),
        1,
        "B tried the stored session first"
    );
}
