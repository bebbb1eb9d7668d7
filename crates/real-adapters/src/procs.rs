//! Finding the processes of one agent home: every process whose environment has
//! `HOME=<that home>`. Only processes the tier started carry such a home, so this never matches
//! anything else on the machine.

use std::path::Path;

/// Pids of live processes whose environment contains `HOME=<home>` (zombies excluded).
#[must_use]
pub fn processes_with_home(home: &Path) -> Vec<u32> {
    let needle = format!("HOME={}", home.display()).into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let dir = Path::new("/proc").join(pid.to_string());
            let alive = std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st != "Z"))
                })
                .unwrap_or(false);
            alive
                && std::fs::read(dir.join("environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_slice()))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Kills (SIGKILL, by pid) every live process whose environment contains `HOME=<home>`, so a
/// run never leaves an agent behind, even when the harness did. Best effort: a process that is
/// already gone is no failure.
pub fn kill_processes_with_home(home: &Path) {
    for pid in processes_with_home(home) {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_child_by_its_home_and_forgets_it_once_gone() {
        let home = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("HOME", home.path())
            .spawn()
            .unwrap();
        // The parent may run again before the exec has laid out the new environment (the
        // kernel wakes it early in exec), so wait for the process to show its HOME.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while processes_with_home(home.path()).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(processes_with_home(home.path()), [child.id()]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(processes_with_home(home.path()).is_empty());
    }
}
