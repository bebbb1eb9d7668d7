//! The real binary: exit codes and error messages.

mod common;

use common::{Fixture, redact, run_bin, run_bin_env, write};

#[test]
fn check_and_status_on_a_healthy_root() {
    let f = Fixture::new();
    f.add_resume_patch();
    let (code, out, _) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!(out, @r"
    id             | apply | paths | symbols/seams | guards | notes
    ---------------|-------|-------|---------------|--------|------
    session-resume | exact | ok    | ok            | ok     |

    checks: 14 of 14 passed

    check passed
    ");
    let (code, out, _) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!(out, @r"
    id             | status  | reason       | applies | guards
    ---------------|---------|--------------|---------|-------------------------
    session-resume | carried | upstreamable | yes     | 1 test(s), 1 snapshot(s)

    surface: +10 / -0 lines in upstream files (session-resume +10/-0)
      session-resume: 2 hunk(s) in pool.rs: Pool::ensure_session, impl Pool
    glue modules: none
    import cycles through glue: none
    ");
}

#[test]
fn check_failure_exits_1_with_a_table_and_problems() {
    let f = Fixture::new();
    f.add_resume_patch();
    write(
        &f.root.join("patches/session-resume.patch"),
        "this is not a patch\n",
    );
    let (code, out, _) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("| FAIL "), "{out}");
    assert!(
        out.contains("[session-resume] patches/session-resume.patch does not parse as a patch"),
        "{out}"
    );
    // `apply` gives the same verdict and exit code as `check`, on one line.
    let (code, _, err) = run_bin(&f.root, &["apply"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        "error: [session-resume] patches/session-resume.patch does not parse as a patch: \
         error parsing patches at byte 0: no valid patches found (run `scripts/fork check` for the full report)\n"
    );
}

#[test]
fn malformed_registry_names_the_field() {
    let f = Fixture::new();
    f.add_resume_patch();
    let text = f
        .read("patches.json")
        .replace("\"reason\": \"upstreamable\"", "\"reason\": \"someday\"");
    write(&f.root.join("patches.json"), &text);
    let (code, _, err) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("malformed registry"), "{err}");
    assert!(err.contains("at `patches[0].reason`"), "{err}");
    assert!(err.contains("unknown variant `someday`"), "{err}");

    let text = f.read("patches.json").replace(
        "\"reason\": \"someday\"",
        "\"reason\": \"upstreamable\", \"owner\": \"me\"",
    );
    write(&f.root.join("patches.json"), &text);
    let (code, _, err) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("at `patches[0].owner`: unknown field `owner`"),
        "{err}"
    );

    let text = f
        .read("patches.json")
        .replace("\"owner\": \"me\"", "\"upstream\": [\"nope\"]")
        .replace("\"upstream\": [],", "");
    write(&f.root.join("patches.json"), &text);
    let (code, _, err) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid registry") && err.contains("patches[0] (session-resume).upstream"),
        "{err}"
    );
}

#[test]
fn missing_registry_and_missing_baseline_exit_2() {
    let f = Fixture::new();
    std::fs::remove_dir_all(f.root.join("crates/up")).unwrap();
    let (code, _, err) = run_bin(&f.root, &["check"]);
    assert_eq!(code, 2);
    assert_eq!(
        redact(&err, &f.root).trim(),
        "error: baseline directory <root>/crates/up does not exist (upstream.path in patches.json)"
    );
    std::fs::remove_file(f.root.join("patches.json")).unwrap();
    let (code, _, err) = run_bin(&f.root, &["status"]);
    assert_eq!(code, 2);
    assert!(err.contains("patches.json does not exist"), "{err}");
}

#[test]
fn unknown_patch_id_and_usage_errors_exit_2() {
    let f = Fixture::new();
    f.add_resume_patch();
    let (code, _, err) = run_bin(&f.root, &["retire", "nope"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown patch id `nope` (known: session-resume)"),
        "{err}"
    );
    let (code, _, _) = run_bin(&f.root, &["frobnicate"]);
    assert_eq!(code, 2);
    let (code, _, err) = run_bin(&f.root, &["refresh", "--date", "yesterday"]);
    assert_eq!(code, 2);
    assert!(err.contains("not YYYY-MM-DD"), "{err}");
}

#[test]
fn git_missing_or_too_old_exits_2() {
    let f = Fixture::new();
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    let (code, _, err) = run_bin_env(&f.root, &["status"], &[("PATH", path)]);
    assert_eq!(code, 2);
    assert!(err.contains("git was not found on PATH"), "{err}");
    let fake = empty.path().join("git");
    write(&fake, "#!/bin/sh\necho 'git version 2.30.1'\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (code, _, err) = run_bin_env(&f.root, &["status"], &[("PATH", path)]);
    assert_eq!(code, 2);
    assert!(err.contains("git 2.30.1 is too old"), "{err}");
}

#[test]
fn root_defaults_to_the_git_toplevel() {
    let f = Fixture::new();
    common::git(&f.root, &["init", "-q"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_buzz-fork"))
        .arg("status")
        .current_dir(f.root.join("crates/up/src"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("series is empty\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The fork-CI workflow keeps its contract: scheduled and on demand, runs
/// `scripts/fork ci` with `--write`, treats exit 3 as a verdict, uploads the
/// report, proposes a branch only on `ready`, and fails on `blocked`.
#[test]
fn fork_ci_workflow_contract() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.github/workflows/fork-sync.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    for needle in [
        "schedule:",
        "- cron: ",
        "workflow_dispatch:",
        "scripts/fork ci --upstream-git \"$UPSTREAM_GIT\" --ref \"$UPSTREAM_REF\"",
        "--report target/fork-work/ci/report.json --write > ci-line.txt",
        "if [ \"$code\" != 0 ] && [ \"$code\" != 3 ] && [ \"$code\" != 4 ]; then exit \"$code\"; fi",
        "uses: actions/upload-artifact@v4",
        "path: target/fork-work/ci/report.*",
        "if: steps.ci.outputs.result == 'ready'",
        "branch=\"fork/ready-$version\"",
        "if: steps.ci.outputs.result == 'blocked'",
        "if: steps.ci.outputs.result == 'upstream-broken'",
    ] {
        assert!(text.contains(needle), "workflow lacks {needle:?}");
    }
    assert!(
        !text.contains("continue-on-error"),
        "a failing step must fail the job"
    );
    // The guards' PostgreSQL server is started by the tool, never skipped.
    assert!(
        !text.contains("BUZZ_TEST_SKIP_POSTGRES") && !text.contains("BUZZ_TEST_POSTGRES_URL:"),
        "the workflow must not skip or stand in for the guards' server"
    );
    assert_eq!(
        buzz_fork::cmd::ci::CiResult::UpstreamBroken.as_str(),
        "upstream-broken"
    );
    // The report fields the workflow reads exist.
    let report = buzz_fork::cmd::ci::CiResult::Ready.as_str();
    assert_eq!(report, "ready");
    assert!(text.contains(".sync.upstream.new_version"));
}
