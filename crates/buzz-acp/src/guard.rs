//! The agent guard: the agent's whole process tree ends with the harness,
//! however the harness ends.
//!
//! The SDK starts an agent as the leader of its own process group. When the
//! connection closes it closes the agent's stdin, then signals the group
//! (SIGTERM, then SIGKILL). None of that happens when the harness itself is
//! SIGKILLed or OOM-killed: nobody is left to send the signals. Real adapters
//! make it worse: codex-acp ignores end of input, and adapters start native
//! children that may leave the group.
//!
//! On Linux the harness therefore starts each agent through its own
//! executable, `buzz-acp __agent-guard <harness pid> -- <agent command…>`. The
//! SDK's process transport offers no `pre_exec` hook, so a small supervisor
//! process is the place to set this up:
//!
//! * the guard asks the kernel for SIGTERM when the harness dies
//!   (`PR_SET_PDEATHSIG`), then checks that the harness is still its parent,
//!   since it may have died before the request;
//! * it becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`), so processes
//!   orphaned anywhere in the agent's tree re-parent to the guard, not to
//!   init: the whole tree stays visible, even children that left the group;
//! * it runs the agent with inherited stdio (the protocol passes straight
//!   through) and gives the agent `PR_SET_PDEATHSIG(SIGKILL)`, in case the
//!   guard itself is killed;
//! * when the harness dies, when the SDK stops the agent (SIGTERM to the
//!   group), or when the agent exits, the guard sends SIGTERM to every
//!   remaining descendant, waits up to [`SWEEP_GRACE`] (less than the SDK's
//!   two-second SIGKILL grace), SIGKILLs whatever is left until nothing is,
//!   and exits with the agent's status.
//!
//! A failed `exec` of the agent is reported on stderr with the OS reason and
//! exit status 127 (not found) or 126 (not executable), which the harness
//! shows as the reason the agent could not be started.
//!
//! The parent-death signal follows the harness *thread* that started the
//! guard; agents are started from the runtime's worker threads, which live as
//! long as the harness.
//!
//! One gap remains: when the SDK SIGKILLs the agent's process group at once
//! (a connection dropped without a shutdown, e.g. a turn aborted at the end
//! of the harness's shutdown grace), the guard dies with the group before it
//! can sweep. The agent still dies (it is in the group, and its parent-death
//! signal fires), but a descendant that had left the group re-parents to
//! init.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use agent_client_protocol::AcpAgentConfig;

/// The first argument that makes `buzz-acp` run as the agent guard.
pub const GUARD_COMMAND: &str = "__agent-guard";

/// How long descendants get to exit after SIGTERM before SIGKILL.
pub const SWEEP_GRACE: Duration = Duration::from_secs(1);

/// A guard command line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage: buzz-acp {GUARD_COMMAND} <harness pid> -- <agent command> [args…] (started by the \
     harness, not by hand): {0}"
)]
pub struct GuardUsageError(String);

/// What the guard was asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardInvocation {
    /// The harness: the guard's expected parent.
    pub parent: i32,
    /// The agent executable.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// The guard invocation in a full argument list (`argv[0]` first), if the
/// process was started as the guard.
pub fn invocation(argv: &[OsString]) -> Option<Result<GuardInvocation, GuardUsageError>> {
    if argv.get(1).and_then(|a| a.to_str()) != Some(GUARD_COMMAND) {
        return None;
    }
    Some(parse(&argv[2..]))
}

fn parse(rest: &[OsString]) -> Result<GuardInvocation, GuardUsageError> {
    let usage = |m: &str| GuardUsageError(m.to_string());
    let parent = rest
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<i32>().ok())
        .filter(|pid| *pid > 1)
        .ok_or_else(|| usage("the harness pid is missing or not a pid"))?;
    if rest.get(1).and_then(|a| a.to_str()) != Some("--") {
        return Err(usage("`--` must follow the harness pid"));
    }
    let program = rest
        .get(2)
        .cloned()
        .ok_or_else(|| usage("the agent command is missing"))?;
    Ok(GuardInvocation {
        parent,
        program,
        args: rest[3..].to_vec(),
    })
}

/// The launch configuration that runs `agent` under the guard at
/// `guard_exe`, with this process as the harness.
pub fn wrap(agent: &AcpAgentConfig, guard_exe: &Path) -> AcpAgentConfig {
    AcpAgentConfig::new(guard_exe)
        .arg(GUARD_COMMAND)
        .arg(std::process::id().to_string())
        .arg("--")
        .arg(agent.command().to_string_lossy())
        .args(agent.arguments().iter().cloned())
        .envs(agent.environment().clone())
}

/// The executable that can run the guard: this binary, on Linux. Elsewhere
/// there is no parent-death signal or subreaper, and agents are started
/// directly (the SDK's process-group handling still applies).
pub fn guard_executable() -> Option<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        std::env::current_exe().ok()
    } else {
        None
    }
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid.
    pub ppid: i32,
    /// A zombie (or dead) process cannot be signalled, only reaped.
    pub exited: bool,
}

/// Parses a `/proc/<pid>/stat` line. The command name may hold spaces and
/// parentheses, so the fields are read after its last `)`.
pub fn parse_proc_stat(line: &str) -> Option<ProcStat> {
    let pid = line.split_once(' ')?.0.parse().ok()?;
    let after = &line[line.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        ppid,
        exited: matches!(state, "Z" | "X" | "x"),
    })
}

/// Every live descendant of `root` in `table`, parents before children.
pub fn descendants(table: &[ProcStat], root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in table.iter().filter(|p| p.ppid == parent && p.pid != root) {
            if !out.contains(&p.pid) {
                if !p.exited {
                    out.push(p.pid);
                }
                frontier.push(p.pid);
            }
        }
    }
    out
}

/// Runs the guard: the agent under it, until the agent exits or the harness
/// goes away. Returns the exit code for the guard process.
#[cfg(target_os = "linux")]
pub fn run(invocation: GuardInvocation) -> ExitCode {
    match linux::run(invocation) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agent guard: {e}");
            ExitCode::from(1)
        }
    }
}

/// Without the Linux primitives the guard has nothing to add: run the agent
/// and pass its status on.
#[cfg(not(target_os = "linux"))]
pub fn run(invocation: GuardInvocation) -> ExitCode {
    match std::process::Command::new(&invocation.program)
        .args(&invocation.args)
        .status()
    {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!(
                "agent guard: cannot execute {}: {e}",
                invocation.program.to_string_lossy()
            );
            ExitCode::from(exec_failure_code(&e))
        }
    }
}

/// The shell's convention: 127 not found, 126 found but not executable.
fn exec_failure_code(e: &std::io::Error) -> u8 {
    match e.kind() {
        std::io::ErrorKind::NotFound => 127,
        std::io::ErrorKind::PermissionDenied => 126,
        _ => 1,
    }
}

#[cfg(target_os = "linux")]
mod linux {
    //! The guard's system calls. Everything here runs single-threaded, before
    //! any runtime starts (see `main.rs`).

    use std::io;
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    use std::process::{Command, ExitCode, ExitStatus};
    use std::time::Instant;

    use super::{GuardInvocation, ProcStat, SWEEP_GRACE, descendants, parse_proc_stat};

    /// How often the sweep looks at the process table again.
    const SWEEP_POLL: std::time::Duration = std::time::Duration::from_millis(10);
    /// Upper bound on SIGKILL rounds: a tree that keeps forking faster than
    /// it is killed cannot keep the guard alive for ever.
    const MAX_KILL_ROUNDS: usize = 500;

    fn check(ret: libc::c_int, what: &str) -> io::Result<()> {
        if ret == -1 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
        }
        Ok(())
    }

    /// The signals the guard waits for instead of being killed by them.
    fn watched_signals() -> io::Result<libc::sigset_t> {
        // SAFETY: sigemptyset/sigaddset only write the set they are given,
        // which is a valid, owned sigset_t.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            check(libc::sigemptyset(&mut set), "sigemptyset")?;
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
                check(libc::sigaddset(&mut set, sig), "sigaddset")?;
            }
            Ok(set)
        }
    }

    pub(super) fn run(invocation: GuardInvocation) -> io::Result<ExitCode> {
        // SAFETY: prctl with PR_SET_PDEATHSIG / PR_SET_CHILD_SUBREAPER takes
        // plain integers and affects only this process.
        check(
            unsafe {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGTERM as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            },
            "prctl(PR_SET_PDEATHSIG)",
        )?;
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != invocation.parent {
            // The harness died before the request above took effect.
            eprintln!("agent guard: the harness is gone; not starting the agent");
            return Ok(ExitCode::from(1));
        }
        // SAFETY: as above.
        check(
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) },
            "prctl(PR_SET_CHILD_SUBREAPER)",
        )?;
        let watched = watched_signals()?;
        // SAFETY: blocks signals for this (only) thread; the set is valid.
        check(
            unsafe { libc::sigprocmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut()) },
            "sigprocmask",
        )?;

        let mut command = Command::new(&invocation.program);
        command.args(&invocation.args);
        // SAFETY: the closure runs in the forked child before exec and only
        // makes async-signal-safe calls (sigemptyset, sigprocmask, prctl).
        unsafe {
            command.pre_exec(|| {
                let mut empty: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut empty);
                check(
                    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()),
                    "sigprocmask",
                )?;
                check(
                    libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    ),
                    "prctl(PR_SET_PDEATHSIG)",
                )
            });
        }
        let agent = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                eprintln!(
                    "agent guard: cannot execute {}: {e}",
                    invocation.program.to_string_lossy()
                );
                return Ok(ExitCode::from(super::exec_failure_code(&e)));
            }
        };
        let agent_pid = i32::try_from(agent.id()).map_err(io::Error::other)?;
        // The child handle is not used to wait: the guard reaps with
        // waitpid(-1), which also reaps orphans that re-parented to it.
        drop(agent);
        let mut guard = Guard {
            me: std::process::id() as i32,
            agent: agent_pid,
            agent_status: None,
        };
        let signal = guard.wait_for_end(&watched)?;
        guard.sweep();
        Ok(match (signal, guard.agent_status) {
            (None, Some(status)) => exit_code_of(status),
            (Some(sig), _) => ExitCode::from(128u8.saturating_add(sig as u8)),
            (None, None) => ExitCode::from(1),
        })
    }

    struct Guard {
        me: i32,
        agent: i32,
        agent_status: Option<ExitStatus>,
    }

    impl Guard {
        /// Waits until the agent exits (returns `None`) or a stop signal
        /// arrives (returns it).
        fn wait_for_end(&mut self, watched: &libc::sigset_t) -> io::Result<Option<libc::c_int>> {
            loop {
                // SAFETY: `watched` is a valid set, and a null info pointer
                // is allowed.
                let sig = unsafe { libc::sigwaitinfo(watched, std::ptr::null_mut()) };
                if sig == -1 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                if sig == libc::SIGCHLD {
                    self.reap();
                    if self.agent_status.is_some() {
                        return Ok(None);
                    }
                } else {
                    return Ok(Some(sig));
                }
            }
        }

        /// Reaps every exited child (the agent, or orphans adopted as
        /// subreaper), remembering the agent's status.
        fn reap(&mut self) {
            loop {
                let mut status: libc::c_int = 0;
                // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    return;
                }
                if pid == self.agent {
                    self.agent_status = Some(ExitStatus::from_raw(status));
                }
            }
        }

        /// Every live process of the agent's tree. The agent itself is
        /// included while it is not reaped (its pid cannot be reused until
        /// then), so the sweep works even where `/proc` cannot be read.
        fn live_descendants(&self) -> Vec<i32> {
            let mut pids = descendants(&process_table(), self.me);
            if self.agent_status.is_none() && !pids.contains(&self.agent) {
                pids.push(self.agent);
            }
            pids
        }

        /// SIGTERM to the tree, a grace, then SIGKILL until nothing is left.
        fn sweep(&mut self) {
            signal_all(&self.live_descendants(), libc::SIGTERM);
            let deadline = Instant::now() + SWEEP_GRACE;
            loop {
                self.reap();
                if self.live_descendants().is_empty() {
                    return;
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(SWEEP_POLL);
            }
            for _ in 0..MAX_KILL_ROUNDS {
                let left = self.live_descendants();
                if left.is_empty() {
                    break;
                }
                signal_all(&left, libc::SIGKILL);
                std::thread::sleep(SWEEP_POLL);
                self.reap();
            }
            self.reap();
        }
    }

    fn signal_all(pids: &[i32], sig: libc::c_int) {
        for &pid in pids {
            // SAFETY: kill takes plain integers; ESRCH (already gone) is fine.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    /// Every process in `/proc`; unreadable entries (processes that just
    /// exited) are skipped.
    fn process_table() -> Vec<ProcStat> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter_map(|line| parse_proc_stat(&line))
            .collect()
    }

    fn exit_code_of(status: ExitStatus) -> ExitCode {
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
            (None, Some(sig)) => ExitCode::from(128u8.saturating_add(sig as u8)),
            (None, None) => ExitCode::from(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_guard_command_line_round_trips() {
        let agent = AcpAgentConfig::new("codex-acp").arg("--flag").env("K", "v");
        let wrapped = wrap(&agent, Path::new("/usr/bin/buzz-acp"));
        assert_eq!(wrapped.command(), Path::new("/usr/bin/buzz-acp"));
        assert_eq!(
            wrapped.environment().get("K").map(String::as_str),
            Some("v")
        );
        let mut argv = vec![OsString::from("/usr/bin/buzz-acp")];
        argv.extend(wrapped.arguments().iter().map(OsString::from));
        let inv = invocation(&argv).unwrap().unwrap();
        assert_eq!(inv.parent, std::process::id() as i32);
        assert_eq!(inv.program, OsString::from("codex-acp"));
        assert_eq!(inv.args, os(&["--flag"]));
    }

    #[test]
    fn other_command_lines_are_not_the_guard_and_bad_ones_say_why() {
        assert!(invocation(&os(&["buzz-acp", "--relay-dir", "r"])).is_none());
        for bad in [
            &["buzz-acp", GUARD_COMMAND][..],
            &["buzz-acp", GUARD_COMMAND, "x", "--", "a"],
            &["buzz-acp", GUARD_COMMAND, "42", "a"],
            &["buzz-acp", GUARD_COMMAND, "42", "--"],
            &["buzz-acp", GUARD_COMMAND, "1", "--", "a"],
        ] {
            let err = invocation(&os(bad)).unwrap().unwrap_err();
            assert!(err.to_string().contains("usage"), "{err}");
        }
    }

    #[test]
    fn proc_stat_lines_with_odd_command_names_parse() {
        let s = parse_proc_stat("4242 (my (weird) agent) S 17 4242 4242 0 -1").unwrap();
        assert_eq!(
            s,
            ProcStat {
                pid: 4242,
                ppid: 17,
                exited: false
            }
        );
        assert!(parse_proc_stat("9 (z) Z 1 9").unwrap().exited);
        assert_eq!(parse_proc_stat("garbage"), None);
    }

    #[test]
    fn descendants_cover_grandchildren_and_skip_zombies_and_strangers() {
        let p = |pid, ppid, exited| ProcStat { pid, ppid, exited };
        let table = [
            p(10, 1, false),
            p(11, 10, false),
            p(12, 11, false),
            p(13, 10, true),
            p(14, 1, false),
            p(15, 12, false),
        ];
        let mut d = descendants(&table, 10);
        d.sort_unstable();
        assert_eq!(d, [11, 12, 15]);
        assert!(descendants(&table, 14).is_empty());
    }
}
