//! Bad input, one case per test: each gets one clear line on stderr and its
//! documented exit code (1 for a series `check` refuses, 2 for usage or
//! environment), changes nothing, and never shows git's usage text or advice.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{Fixture, git, redact, run_bin, write};

/// Asserts one line on stderr, equal to `want` once the root is redacted.
fn one_line(err: &str, root: &std::path::Path, want: &str) {
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(redact(err, root).trim_end(), want);
    for noise in ["usage:", "hint:", "remove the file manually"] {
        assert!(!err.contains(noise), "{err}");
    }
}

#[test]
fn a_second_command_waits_for_the_work_area_lock() {
    let f = Fixture::new();
    f.add_resume_patch();
    let ctx = f.ctx();
    let held = buzz_fork::workarea::lock_work_area(&ctx.layout, "test").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_buzz-fork"))
        .arg("--root")
        .arg(&f.root)
        .arg("apply")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the event itself: the child says it is waiting.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert_eq!(
        redact(&line, &f.root),
        format!(
            "waiting for the work area <root>/target/fork-work (held by pid {} running `scripts/fork test`) …\n",
            std::process::id()
        )
    );
    drop(held);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", f.root.join("target/fork-work/tree").display())
    );
    // Commands that never touch the work repo do not wait.
    let _held = buzz_fork::workarea::lock_work_area(&ctx.layout, "test").unwrap();
    let (code, _, err) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn two_applies_at_once_both_succeed() {
    let f = Fixture::new();
    f.add_resume_patch();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_buzz-fork"))
            .arg("--root")
            .arg(&f.root)
            .args(["apply", "--force"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children = [spawn(), spawn(), spawn()];
    for child in children {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(!err.contains("index.lock"), "{err}");
    }
}

#[test]
fn a_broken_hunk_exits_1_from_check_and_apply_alike() {
    let f = Fixture::new();
    f.add_resume_patch();
    let patch = f.read("patches/session-resume.patch");
    let broken = patch.replacen(
        "         let fresh = self.open(channel);\n",
        "         let fresh = self.open(channel); \n",
        1,
    );
    assert_ne!(patch, broken);
    write(&f.root.join("patches/session-resume.patch"), &broken);
    let (code, out, _) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("[session-resume] crates/up/src/pool.rs hunk #1 @@ -17,6 +17,9 @@: removed/context lines not found"),
        "{out}"
    );
    let (code, _, err) = run_bin(&f.root, &["apply"]);
    assert_eq!(code, 1);
    one_line(
        &err,
        &f.root,
        "error: [session-resume] crates/up/src/pool.rs hunk #1 @@ -17,6 +17,9 @@: removed/context lines not found \
         (run `scripts/fork check` for the full report)",
    );
}

#[test]
fn apply_refuses_an_unknown_dependency_as_check_does() {
    let f = Fixture::new();
    f.add_resume_patch();
    let text = f
        .read("patches.json")
        .replace("\"depends_on\": []", "\"depends_on\": [\"nope\"]");
    write(&f.root.join("patches.json"), &text);
    let (code, out, _) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("[session-resume] depends_on nope, which is not registered in patches.json"),
        "{out}"
    );
    let (code, _, err) = run_bin(&f.root, &["apply"]);
    assert_eq!(code, 1);
    one_line(
        &err,
        &f.root,
        "error: [session-resume] depends_on nope, which is not registered in patches.json \
         (run `scripts/fork check` for the full report)",
    );
}

#[test]
fn apply_refuses_a_wrong_dependency_order_before_git_sees_it() {
    let f = Fixture::new();
    f.add_resume_patch();
    // A second patch that edits lines the first one adds.
    f.apply();
    let repo = f.work_repo();
    let pool = std::fs::read_to_string(repo.join("crates/up/src/pool.rs")).unwrap();
    write(
        &repo.join("crates/up/src/pool.rs"),
        &pool.replacen(
            "    fn resume(&self",
            "    /// The stored session of `channel`.\n    fn resume(&self",
            1,
        ),
    );
    git(
        &repo,
        &[
            "commit",
            "-qam",
            "Document resume\n\nFork-Patch-Id: resume-doc",
        ],
    );
    let mut reg = f.registry();
    let mut entry = reg.patches[0].clone();
    entry.id = "resume-doc".parse().unwrap();
    entry.file = "patches/resume-doc.patch".into();
    entry.title = "Document resume".into();
    entry.depends_on = vec!["session-resume".parse().unwrap()];
    entry.guard_snapshots = vec!["tests/snapshots/resume_doc__doc.snap".into()];
    entry.fixes_defects = vec![];
    reg.patches.push(entry);
    reg.save(&f.root).unwrap();
    write(
        &f.root.join("tests/snapshots/resume_doc__doc.snap"),
        "---\n---\n1\n",
    );
    f.refresh();
    assert!(f.check().is_ok(), "{}", f.check().render());
    // Now the registry lists them the wrong way round.
    let mut reg = f.registry();
    reg.patches.swap(0, 1);
    reg.save(&f.root).unwrap();
    let (code, _, err) = run_bin(&f.root, &["apply"]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        redact(&err, &f.root).starts_with(
            "error: [resume-doc] depends_on session-resume, which comes later in the series; \
             move it before this patch in patches.json (and "
        ),
        "{err}"
    );
    assert!(!err.contains("does not exist in index"), "{err}");
}

#[test]
fn a_corrupt_work_repo_names_the_fix_and_apply_force_rebuilds_it() {
    let f = Fixture::new();
    f.add_resume_patch();
    f.apply();
    let head = f.root.join("target/fork-work/repo/.git/HEAD");
    write(&head, "garbage\n");
    for cmd in ["apply", "check", "refresh"] {
        let (code, _, err) = run_bin(&f.root, &[cmd]);
        assert_eq!(code, 2, "{cmd}: {err}");
        one_line(
            &err,
            &f.root,
            "error: work repo <root>/target/fork-work/repo is not a usable git repository \
             (fatal: not a git repository: '<root>/target/fork-work/repo/.git'); \
             delete it (rm -rf <root>/target/fork-work/repo) or run `scripts/fork apply --force`, which rebuilds it",
        );
    }
    let (code, out, err) = run_bin(&f.root, &["apply", "--force"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("deleting the unusable work repo"), "{err}");
    let (code, out, _) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn refresh_dry_run_does_not_hide_uncommitted_edits() {
    let f = Fixture::new();
    f.add_resume_patch();
    f.apply();
    let pool = f.work_repo().join("crates/up/src/pool.rs");
    let text = std::fs::read_to_string(&pool).unwrap();
    write(&pool, &format!("{text}// an edit\n"));
    for args in [&["refresh", "--dry-run"][..], &["refresh"][..]] {
        let (code, _, err) = run_bin(&f.root, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        one_line(
            &err,
            &f.root,
            "error: work repo <root>/target/fork-work/repo is dirty: uncommitted changes in the work tree \
             are not part of the series; commit them (with a `Fork-Patch-Id:` trailer) before refresh",
        );
    }
}

#[test]
fn an_impossible_registry_date_is_refused() {
    let f = Fixture::new();
    f.add_resume_patch();
    let text = f.read("patches.json").replace(
        "\"last_update\": \"2026-11-30\"",
        "\"last_update\": \"2026-02-31\"",
    );
    write(&f.root.join("patches.json"), &text);
    let (code, _, err) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        redact(&err, &f.root).starts_with(
            "error: invalid registry <root>/patches.json: patches[0] (session-resume).last_update: \
             \"2026-02-31\" is not a calendar date"
        ),
        "{err}"
    );
    write(
        &f.root.join("patches.json"),
        &text.replace("2026-02-31", "2026-02-28"),
    );
    let (code, _, err) = run_bin(&f.root, &["refresh", "--date", "2026-02-31"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with(
            "error: invalid value '2026-02-31' for '--date <YYYY-MM-DD>': \
             \"2026-02-31\" is not a calendar date"
        ),
        "{err}"
    );
}

#[test]
fn cargo_metadata_failures_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("Cargo.toml"), "[package\nname = \n");
    let cargo = buzz_fork::cargo::Cargo::new(dir.path(), &dir.path().join("target"));
    let err = cargo.package_targets("x").unwrap_err();
    let text = buzz_fork::ui::error_line(&err);
    assert!(text.starts_with("error: cargo metadata for "), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(err.exit_code(), 2);
}
