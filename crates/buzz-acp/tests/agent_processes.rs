//! Agent processes and the harness's own state: an agent binary that does
//! not exist, a harness that is SIGKILLed while its agents (which ignore end
//! of input and leave a detached child) run, and a state directory that is a
//! file.
//!
//! The real `buzz-acp` binary and the real test agent; the tests wait for
//! process exits, observer records and pids to vanish, with generous bounds
//! that only a broken harness reaches.

mod common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use buzz_acp::testing::{Scenario, wait_until};
use common::*;

/// No agent binary lives here.
const MISSING_AGENT: &str = "/nonexistent/buzz-test/agent-acp";

/// Waits for `child` to exit; a harness that never exits fails the test
/// after `bound` instead of hanging it.
fn exit_within(mut child: Child, bound: Duration) -> Output {
    let status = wait_until(bound, || child.try_wait().ok().flatten());
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the harness did not exit within {bound:?}");
    }
    child.wait_with_output().expect("harness output")
}

fn run_once_capturing(s: &Scenario, agent_command: &str, extra: &[&str]) -> Output {
    let child = s
        .harness_command(&harness_bin(), agent_command, extra)
        .arg("--once")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start harness");
    exit_within(child, WAIT * 3)
}

#[test]
fn a_missing_agent_binary_is_reported_with_the_os_reason_and_once_exits_non_zero() {
    let (_dir, mut s) = scenario();
    let m = s.post_top("is anyone there?").unwrap();
    let out = run_once_capturing(&s, MISSING_AGENT, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {}", out.status);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("buzz-acp: cannot start agent")
            && last.contains(MISSING_AGENT)
            && last.contains("No such file or directory (os error 2)"),
        "the final error names the agent and the OS reason: {last}"
    );
    let failures = s.observer_records("agent_spawn_failed");
    assert_eq!(
        failures.len(),
        3,
        "three attempts, then give up: {failures:?}"
    );
    assert_eq!(s.observer_records("agent_unavailable").len(), 1);

    // Nothing is lost: with a working agent the same mention is answered.
    run_once(&s, &[], &[]);
    assert_eq!(s.answers_to(&m.id), 1);
}

#[test]
fn a_long_running_harness_reports_an_agent_outage_once() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(&harness_bin(), MISSING_AGENT, &["--agents", "2"])
        .unwrap();
    s.post_top("hello?").unwrap();
    // Both slots use up their attempts and back off for minutes.
    wait_until(WAIT, || {
        let open = s
            .observer_records("agent_spawn_failed")
            .iter()
            .filter(|r| r["circuitOpen"] == true)
            .count();
        (open >= 2).then_some(())
    })
    .expect("both slots gave up");
    let log_path = running.log_path().to_path_buf();
    running.stop().unwrap();

    let unavailable = s.observer_records("agent_unavailable");
    assert_eq!(
        unavailable.len(),
        1,
        "one report for the outage: {unavailable:?}"
    );
    assert!(
        unavailable[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("No such file or directory")),
        "{unavailable:?}"
    );
    let log = std::fs::read_to_string(log_path).unwrap();
    assert_eq!(
        log.matches("agent cannot be started").count(),
        1,
        "logged once:\n{log}"
    );
}

/// Pids the test agents wrote to their pid file.
fn recorded_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => buzz_acp::guard::parse_proc_stat(&stat).is_some_and(|p| !p.exited),
        Err(_) => false,
    }
}

/// Kills whatever a failed run left behind, so a failure does not leak.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
            }
        }
    }
}

#[test]
fn a_sigkilled_harness_leaves_no_agent_process_behind() {
    let (_dir, s) = scenario();
    let pid_file = s.root.join("agent-pids");
    let pid_arg = pid_file.display().to_string();
    let agent_args = [
        "--ignore-stdin-eof",
        "--spawn-helper",
        "--pid-file",
        pid_arg.as_str(),
    ];
    let running = s
        .start(&harness_bin(), &agent(&s, &agent_args), &["--agents", "2"])
        .unwrap();
    // Two agents, each with a helper in a process group of its own.
    let pids = wait_until(WAIT, || {
        let pids = recorded_pids(&pid_file);
        (pids.len() == 4).then_some(pids)
    })
    .expect("two agents and their helpers started");
    let _cleanup = KillOnDrop(pids.clone());
    assert!(pids.iter().all(|&p| alive(p)));

    let status: ExitStatus = running.kill().unwrap();
    assert!(!status.success());
    let gone = wait_until(WAIT, || pids.iter().all(|&p| !alive(p)).then_some(()));
    let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        gone.is_some(),
        "still running after the harness died: {left:?}"
    );
}

#[test]
fn a_state_directory_that_is_a_file_is_a_clear_error() {
    let (_dir, mut s) = scenario();
    s.post_top("hi").unwrap();
    let file = s.root.join("state-is-a-file");
    std::fs::write(&file, b"").unwrap();
    let state = file.display().to_string();
    s.state_dir = file;
    let out = run_once_capturing(&s, &agent(&s, &[]), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{state} is a file, not a directory")),
        "{stderr}"
    );
    assert!(stderr.contains("--state-dir"), "{stderr}");
}
