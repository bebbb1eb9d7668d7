//! Reading libtest's output (the standard Rust test harness): which tests
//! failed, and where and why each panicked.
//!
//! A failing test's captured output is printed after the run; a panic in it
//! reads
//!
//! ```text
//! thread 'module::name' panicked at tests/e2e/x.rs:42:5:
//! assertion `left == right` failed
//!   left: 1
//!  right: 2
//! note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
//! ```
//!
//! (newer toolchains write the thread id after its name: `thread 'name'
//! (1234) panicked at …`). A message that starts with `assertion` is a
//! failed assertion; any other is a plain panic (`expect`, `panic!`), unless
//! the source at its location is an assertion macro: an `assert!` with a
//! message of its own panics with that message alone ([`Failure::placed_in`]
//! reads the source to tell). An insta snapshot mismatch panics inside insta
//! with `snapshot assertion for 'name' failed in line N`, after a summary
//! that names the assertion's `Source: FILE:LINE`; the failure is then
//! placed there.

use serde::{Deserialize, Serialize};

/// What kind of assertion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// A failed assertion (`assert!`, `assert_eq!`, …: the message starts
    /// with `assertion`).
    Assertion,
    /// Any other panic of the test (`panic!`, `expect`, `unwrap`, a helper
    /// that gave up).
    Panic,
    /// An insta snapshot did not match.
    SnapshotMismatch,
}

/// One panic read from the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// The panicking thread (libtest names a test's thread after the test).
    pub thread: String,
    /// `FILE:LINE:COL` (for a snapshot mismatch, `FILE:LINE` of the
    /// assertion).
    pub location: String,
    /// The panic message, every line of it.
    pub message: String,
    /// Assertion or snapshot mismatch.
    pub kind: FailureKind,
}

/// The assertion macros a test's own code uses.
const ASSERTION_MACROS: &[&str] = &["assert!", "assert_eq!", "assert_ne!", "debug_assert"];

impl Failure {
    /// This failure, read against the test's source under `root` (the tree whose tests ran;
    /// locations are relative to it): a plain panic whose location is an assertion macro is an
    /// assertion. `assert!(cond, "why")` panics with "why" alone, which the message cannot tell
    /// from a `panic!("why")`. A source that cannot be read leaves the failure as it was.
    #[must_use]
    pub fn placed_in(mut self, root: &std::path::Path) -> Failure {
        if self.kind == FailureKind::Panic && is_assertion_at(root, &self.location) {
            self.kind = FailureKind::Assertion;
        }
        self
    }
}

/// Whether the source at `location` (`FILE:LINE:COL`, 1-based) under `root` starts an
/// assertion macro.
fn is_assertion_at(root: &std::path::Path, location: &str) -> bool {
    let mut parts = location.rsplitn(3, ':');
    let (Some(column), Some(line), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(column), Ok(line)) = (column.parse::<usize>(), line.parse::<usize>()) else {
        return false;
    };
    let Ok(source) = std::fs::read_to_string(root.join(file)) else {
        return false;
    };
    let Some(text) = source.lines().nth(line.saturating_sub(1)) else {
        return false;
    };
    let at: String = text.chars().skip(column.saturating_sub(1)).collect();
    ASSERTION_MACROS.iter().any(|m| at.starts_with(m))
}

/// Parses `thread 'NAME' panicked at LOCATION:` (or `thread 'NAME' (ID)
/// panicked at LOCATION:`).
fn panic_header(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("thread '")?;
    let (thread, rest) = rest.split_once('\'')?;
    let (_, at) = rest.split_once("panicked at ")?;
    let location = at.trim_end().strip_suffix(':').unwrap_or(at.trim_end());
    Some((thread.to_owned(), location.to_owned()))
}

/// Whether a line ends a panic message.
fn ends_message(line: &str) -> bool {
    line.trim().is_empty()
        || line.starts_with("note: ")
        || line.starts_with("stack backtrace:")
        || line.starts_with("---- ")
        || line.starts_with("failures:")
        || line.starts_with("thread '")
}

/// Every panic in `output`, in order.
#[must_use]
pub fn failures(output: &str) -> Vec<Failure> {
    let lines: Vec<&str> = output.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((thread, location)) = panic_header(line) else {
            continue;
        };
        let message: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| !ends_message(l))
            .copied()
            .collect();
        let message = message.join("\n");
        let snapshot_source = message
            .starts_with("snapshot assertion for ")
            .then(|| {
                lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| !l.starts_with("---- "))
                    .find_map(|l| l.trim().strip_prefix("Source: "))
            })
            .flatten();
        out.push(match snapshot_source {
            Some(source) => Failure {
                thread,
                location: source.trim().to_owned(),
                message,
                kind: FailureKind::SnapshotMismatch,
            },
            None => Failure {
                thread,
                location,
                kind: if message.starts_with("assertion") {
                    FailureKind::Assertion
                } else {
                    FailureKind::Panic
                },
                message,
            },
        });
    }
    out
}

/// The failure that failed `test`: a panic on the test's own thread (libtest
/// names it after the test's path), else the first panic.
#[must_use]
pub fn failure_of(output: &str, test: &str) -> Option<Failure> {
    let all = failures(output);
    let own = all
        .iter()
        .position(|f| f.thread == test || test.ends_with(&format!("::{}", f.thread)));
    match own {
        Some(i) => all.into_iter().nth(i),
        None => all.into_iter().next(),
    }
}

/// The names of the tests libtest reports as failed (`test NAME ... FAILED`).
#[must_use]
pub fn failed_tests(output: &str) -> Vec<String> {
    let mut out: Vec<String> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test "))
        .filter_map(|l| l.strip_suffix(" ... FAILED"))
        .map(str::to_owned)
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASSERT: &str = "\
running 1 test
test restart_resumes ... FAILED

failures:

---- restart_resumes stdout ----

thread 'restart_resumes' (4242) panicked at tests/e2e/session_store_resume.rs:57:5:
assertion `left == right` failed: the restart must load the stored session
  left: \"session/new\"
 right: \"session/load\"
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    restart_resumes

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 11 filtered out; finished in 0.31s
";

    #[test]
    fn a_panic_at_an_assertion_macro_with_its_own_message_is_an_assertion() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("tests")).unwrap();
        std::fs::write(
            root.path().join("tests/g.rs"),
            "fn g() {\n    assert!(\n        answered,\n        \"the mention is answered\"\n    );\n    let a = x.expect(\"no answer\");\n}\n",
        )
        .unwrap();
        let panic = |location: &str| Failure {
            thread: "g".into(),
            location: location.into(),
            message: "the mention is answered".into(),
            kind: FailureKind::Panic,
        };
        let at_assert = panic("tests/g.rs:2:5").placed_in(root.path());
        assert_eq!(at_assert.kind, FailureKind::Assertion);
        let at_expect = panic("tests/g.rs:6:15").placed_in(root.path());
        assert_eq!(at_expect.kind, FailureKind::Panic);
        let unreadable = panic("tests/missing.rs:2:5").placed_in(root.path());
        assert_eq!(unreadable.kind, FailureKind::Panic);
    }

    #[test]
    fn an_assertion_names_its_file_line_and_whole_message() {
        let f = failure_of(ASSERT, "restart_resumes").unwrap();
        assert_eq!(f.location, "tests/e2e/session_store_resume.rs:57:5");
        assert_eq!(f.kind, FailureKind::Assertion);
        assert_eq!(
            f.message,
            "assertion `left == right` failed: the restart must load the stored session\n  left: \"session/new\"\n right: \"session/load\""
        );
        assert_eq!(failed_tests(ASSERT), ["restart_resumes"]);
        // The older header (no thread id) reads the same.
        let old = ASSERT.replace(
            "'restart_resumes' (4242) panicked",
            "'restart_resumes' panicked",
        );
        assert_eq!(failure_of(&old, "restart_resumes").unwrap(), f);
    }

    #[test]
    fn a_snapshot_mismatch_is_placed_at_its_assertion() {
        let output = "\
---- inproc::resident stdout ----
━━━━ Snapshot Summary ━━━━
Snapshot: resident
Source: tests/inproc/resident.rs:88
-old snapshot
+new results

thread 'inproc::resident' panicked at /home/u/.cargo/registry/src/index.crates.io-x/insta-1.49.0/src/runtime.rs:734:13:
snapshot assertion for 'resident' failed in line 88
stack backtrace:
";
        let f = failure_of(output, "inproc::resident").unwrap();
        assert_eq!(f.kind, FailureKind::SnapshotMismatch);
        assert_eq!(f.location, "tests/inproc/resident.rs:88");
        assert_eq!(
            f.message,
            "snapshot assertion for 'resident' failed in line 88"
        );
    }

    #[test]
    fn the_test_threads_panic_wins_over_a_background_one() {
        let output = "\
thread 'tokio-runtime-worker' panicked at crates/x/src/lib.rs:3:9:
background
thread 'a::b' panicked at tests/t.rs:9:5:
foreground
";
        let f = failure_of(output, "a::b").unwrap();
        assert_eq!(f.message, "foreground");
        assert_eq!(f.kind, FailureKind::Panic);
        assert_eq!(failures(output).len(), 2);
        assert!(failure_of("test a ... FAILED\n", "a").is_none());
    }
}
