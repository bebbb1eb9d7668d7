//! The drift corpus (`tests/drift/<case>/` at the repository root): every
//! sync classification, plus `--write`, blocked writes and the conflict
//! resolution flow.

mod common;

use std::path::{Path, PathBuf};

use buzz_fork::Context;
use buzz_fork::cmd::sync::{self, SyncResult, SyncStatus};
use common::{git, git_output, run_bin, write};

fn corpus(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/drift")
        .join(case)
}

fn copy_dir(from: &Path, to: &Path) {
    buzz_fork::fsutil::copy_dir(from, to).unwrap();
}

/// A scratch root holding the case's baseline, registry and patches.
fn setup(case: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let src = corpus(case);
    copy_dir(&src.join("base"), &root.join("crates/buzz-acp"));
    copy_dir(&src.join("patches"), &root.join("patches"));
    std::fs::copy(src.join("patches.json"), root.join("patches.json")).unwrap();
    write(&root.join(".gitignore"), "/target\n");
    for id in ["session_store_resume", "fresh_session_reset"] {
        write(
            &root.join(format!("tests/snapshots/{id}__guard.snap")),
            "---\n---\nok\n",
        );
    }
    (dir, root)
}

fn classify(case: &str) -> sync::SyncReport {
    let (_dir, root) = setup(case);
    let ctx = Context::new(Some(&root)).unwrap();
    let registry = ctx.registry().unwrap();
    let run = sync::compute(
        &ctx,
        &registry,
        &corpus(case).join("upstream"),
        Some("0.9.1"),
    )
    .unwrap();
    assert!(!run.range_diff.is_empty());
    run.report
}

fn statuses(report: &sync::SyncReport) -> Vec<(String, SyncStatus)> {
    report
        .patches
        .iter()
        .map(|p| (p.id.clone(), p.status))
        .collect()
}

fn expect(
    case: &str,
    first: SyncStatus,
    second: SyncStatus,
    result: SyncResult,
) -> sync::SyncReport {
    let report = classify(case);
    assert_eq!(
        statuses(&report),
        vec![
            ("session-store-resume".to_owned(), first),
            ("fresh-session-reset".to_owned(), second)
        ],
        "{}",
        report.to_json()
    );
    assert_eq!(report.result, result, "{}", report.to_json());
    report
}

#[test]
fn exact() {
    let r = expect(
        "exact",
        SyncStatus::Exact,
        SyncStatus::Exact,
        SyncResult::Ready,
    );
    insta::assert_json_snapshot!("drift_exact", r);
}

#[test]
fn benign_line_shift_is_offset() {
    let r = expect(
        "offset",
        SyncStatus::Offset,
        SyncStatus::Offset,
        SyncResult::Ready,
    );
    assert_eq!(
        r.patches[0].hunks,
        vec!["crates/buzz-acp/src/pool.rs hunk #1 @@ -19,6 +19,10 @@ offset +4"]
    );
    insta::assert_json_snapshot!("drift_offset", r);
}

#[test]
fn edit_beside_a_hunk_is_merged() {
    let r = expect(
        "merged",
        SyncStatus::Merged,
        SyncStatus::Exact,
        SyncResult::Ready,
    );
    insta::assert_json_snapshot!("drift_merged", r);
}

#[test]
fn conflicting_edit_names_patch_file_and_hunk() {
    let r = expect(
        "conflict",
        SyncStatus::Conflict,
        SyncStatus::Offset,
        SyncResult::Blocked,
    );
    let p = &r.patches[0];
    assert_eq!(p.files, vec!["crates/buzz-acp/src/pool.rs"]);
    assert_eq!(
        p.hunks,
        vec!["crates/buzz-acp/src/pool.rs hunk #1 @@ -19,6 +19,10 @@"]
    );
    assert!(
        p.detail
            .as_deref()
            .unwrap()
            .contains("patch session-store-resume conflicts")
    );
    insta::assert_json_snapshot!("drift_conflict", r);
}

#[test]
fn upstream_adopting_a_patch_is_already_upstream() {
    let r = expect(
        "already-upstream",
        SyncStatus::AlreadyUpstream,
        SyncStatus::Exact,
        SyncResult::Ready,
    );
    insta::assert_json_snapshot!("drift_already_upstream", r);
}

#[test]
fn renamed_callee_without_textual_conflict_is_guard_failed() {
    let r = expect(
        "guard-failed",
        SyncStatus::Exact,
        SyncStatus::GuardFailed,
        SyncResult::Blocked,
    );
    assert!(
        r.patches[1]
            .detail
            .as_deref()
            .unwrap()
            .contains("required symbol Pool::invalidate_for_fresh_session is not defined")
    );
    insta::assert_json_snapshot!("drift_guard_failed", r);
}

#[test]
fn adopted_change_with_moved_context_is_empty() {
    let r = expect(
        "empty",
        SyncStatus::Exact,
        SyncStatus::Empty,
        SyncResult::Ready,
    );
    insta::assert_json_snapshot!("drift_empty", r);
}

#[test]
fn same_tree_is_no_update() {
    let (_dir, root) = setup("exact");
    let ctx = Context::new(Some(&root)).unwrap();
    let registry = ctx.registry().unwrap();
    let run = sync::compute(&ctx, &registry, &corpus("exact").join("base"), None).unwrap();
    assert_eq!(run.report.result, SyncResult::NoUpdate);
}

#[test]
fn write_adopts_a_shifted_upstream_and_check_passes() {
    let (_dir, root) = setup("offset");
    // A checkout root containing the crate at its path is accepted too.
    let checkout = tempfile::tempdir().unwrap();
    copy_dir(
        &corpus("offset").join("upstream"),
        &checkout.path().join("crates/buzz-acp"),
    );
    let report = root.join("out/sync.json");
    let (code, out, err) = run_bin(
        &root,
        &[
            "sync",
            "--upstream",
            checkout.path().to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            "--write",
            "--version",
            "0.9.1",
            "--commit",
            "v0.9.1",
            "--date",
            "2027-01-01",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    for f in ["out/sync.json", "out/sync.md", "out/sync.range-diff.txt"] {
        assert!(root.join(f).is_file(), "{f}");
    }
    let json = std::fs::read_to_string(&report).unwrap();
    assert!(
        !json.contains(&root.display().to_string()),
        "no absolute paths"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("crates/buzz-acp/src/pool.rs")).unwrap(),
        std::fs::read_to_string(corpus("offset").join("upstream/src/pool.rs")).unwrap()
    );
    let reg = buzz_fork::registry::Registry::load(&root).unwrap();
    assert_eq!(reg.upstream.version, "0.9.1");
    assert_eq!(reg.upstream.commit, "v0.9.1");
    // Offsets are mechanical: Last-Update stays.
    assert!(reg.patches.iter().all(|p| p.last_update == "2026-11-30"));
    let patch = std::fs::read_to_string(root.join("patches/session-store-resume.patch")).unwrap();
    assert!(patch.contains("@@ -23,6 +23,10 @@"), "{patch}");
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run_bin(&root, &["refresh", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to write"), "{out}");
}

#[test]
fn blocked_sync_writes_nothing_and_exits_3() {
    let (_dir, root) = setup("conflict");
    let before_patch = std::fs::read(root.join("patches/session-store-resume.patch")).unwrap();
    let before_pool = std::fs::read(root.join("crates/buzz-acp/src/pool.rs")).unwrap();
    let before_reg = std::fs::read(root.join("patches.json")).unwrap();
    let upstream = corpus("conflict").join("upstream");
    let (code, out, _) = run_bin(
        &root,
        &["sync", "--upstream", upstream.to_str().unwrap(), "--write"],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("result: blocked"), "{out}");
    assert_eq!(
        std::fs::read(root.join("patches/session-store-resume.patch")).unwrap(),
        before_patch
    );
    assert_eq!(
        std::fs::read(root.join("crates/buzz-acp/src/pool.rs")).unwrap(),
        before_pool
    );
    assert_eq!(
        std::fs::read(root.join("patches.json")).unwrap(),
        before_reg
    );
    let md = std::fs::read_to_string(root.join("target/fork-work/sync/report.md")).unwrap();
    assert!(md.contains("| `session-store-resume` | conflict |"), "{md}");
}

#[test]
fn conflict_resolved_in_the_work_repo_is_adopted_by_write() {
    let (_dir, root) = setup("conflict");
    let upstream = corpus("conflict").join("upstream");
    let up = upstream.to_str().unwrap();
    let (code, ..) = run_bin(&root, &["sync", "--upstream", up]);
    assert_eq!(code, 3);
    // The maintainer rebases the series onto the imported upstream and
    // resolves the conflict by hand.
    let repo = root.join("target/fork-work/repo");
    let rebase = git_output(
        &repo,
        &[
            "rebase",
            "--onto",
            "refs/fork/sync/upstream",
            "refs/fork/upstream-head",
            "series",
        ],
    );
    assert!(!rebase.status.success(), "the rebase stops on the conflict");
    let resolved = std::fs::read_to_string(upstream.join("src/pool.rs")).unwrap().replace(
        "    pub fn ensure_session(&mut self, channel: &str) -> u64 {\n",
        "    pub fn ensure_session(&mut self, channel: &str) -> u64 {\n        if let Some(id) = crate::resume::plan_resume(channel) {\n            self.sessions.insert(channel.to_owned(), id);\n            return id;\n        }\n",
    );
    write(&repo.join("crates/buzz-acp/src/pool.rs"), &resolved);
    git(&repo, &["add", "-A"]);
    let cont = git_output(&repo, &["-c", "core.editor=true", "rebase", "--continue"]);
    assert!(
        cont.status.success(),
        "{}",
        String::from_utf8_lossy(&cont.stderr)
    );
    let (code, out, err) = run_bin(
        &root,
        &[
            "sync",
            "--upstream",
            up,
            "--write",
            "--version",
            "0.9.1",
            "--date",
            "2027-01-01",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let report: sync::SyncReport = serde_json::from_str(
        &std::fs::read_to_string(root.join("target/fork-work/sync/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report.patches[0].status, SyncStatus::Merged);
    assert!(
        report.patches[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("resolution committed in the work repo")
    );
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn already_upstream_write_needs_an_upstream_reference_then_retires() {
    let (_dir, root) = setup("already-upstream");
    let up = corpus("already-upstream").join("upstream");
    let up = up.to_str().unwrap();
    let (code, _, err) = run_bin(&root, &["sync", "--upstream", up, "--write"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("needs an upstream reference"), "{err}");
    let mut reg = buzz_fork::registry::Registry::load(&root).unwrap();
    reg.patches[0].upstream = vec!["block/buzz#6088".into()];
    reg.save(&root).unwrap();
    let (code, out, err) = run_bin(
        &root,
        &["sync", "--upstream", up, "--write", "--version", "0.10.0"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let reg = buzz_fork::registry::Registry::load(&root).unwrap();
    assert_eq!(reg.patches[0].status.as_str(), "upstreamed");
    assert_eq!(
        reg.patches[0].retired.as_ref().unwrap().upstream_version,
        "0.10.0"
    );
    assert!(!root.join("patches/session-store-resume.patch").exists());
    // The retired patch's guard snapshot may stay (only dropped ones must go).
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
}

// ---------------------------------------------------------------------------
// The three-patch series (`tests/drift/three/`): conflicts at every position,
// the whole series upstream, a middle patch upstream that a later one
// depends on.
// ---------------------------------------------------------------------------

const THREE: [&str; 3] = [
    "session-store-resume",
    "fresh-session-reset",
    "reset-reports-presence",
];

/// A scratch root holding the three-patch series on its baseline.
fn setup_three() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let src = corpus("three");
    copy_dir(&src.join("base"), &root.join("crates/buzz-acp"));
    copy_dir(&src.join("patches"), &root.join("patches"));
    std::fs::copy(src.join("patches.json"), root.join("patches.json")).unwrap();
    write(&root.join(".gitignore"), "/target\n");
    for id in THREE {
        write(
            &root.join(format!(
                "tests/snapshots/{}__guard.snap",
                id.replace('-', "_")
            )),
            "---\n---\nok\n",
        );
    }
    (dir, root)
}

fn three_upstream(case: &str) -> PathBuf {
    corpus("three").join("upstream").join(case)
}

/// Runs `sync` with the real binary; returns (exit code, report, stdout, stderr).
fn sync_bin(
    root: &Path,
    upstream: &Path,
    extra: &[&str],
) -> (i32, sync::SyncReport, String, String) {
    let report = root.join("out/report.json");
    let mut args = vec![
        "sync",
        "--upstream",
        upstream.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = run_bin(root, &args);
    let json = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}): exit {code}\n{out}\n{err}"));
    (code, serde_json::from_str(&json).unwrap(), out, err)
}

fn three_statuses(report: &sync::SyncReport) -> Vec<SyncStatus> {
    let ids: Vec<&str> = report.patches.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, THREE);
    report.patches.iter().map(|p| p.status).collect()
}

fn range_diff(root: &Path) -> String {
    std::fs::read_to_string(root.join("out/report.range-diff.txt")).unwrap()
}

#[test]
fn first_patch_conflict_is_blocked_with_a_report_not_a_crash() {
    let (_dir, root) = setup_three();
    let (code, report, out, err) = sync_bin(&root, &three_upstream("first-conflict"), &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(
        three_statuses(&report),
        [SyncStatus::Conflict, SyncStatus::Offset, SyncStatus::Offset]
    );
    assert_eq!(report.result, SyncResult::Blocked);
    assert_eq!(
        report.patches[0].hunks,
        vec!["crates/buzz-acp/src/pool.rs hunk #1 @@ -19,6 +19,10 @@"]
    );
    assert!(!err.contains("usage:") && !err.contains("fatal:"), "{err}");
    let rd = range_diff(&root);
    assert!(rd.contains("Resume the stored session on restart"), "{rd}");
    let md = std::fs::read_to_string(root.join("out/report.md")).unwrap();
    assert!(md.contains("| `session-store-resume` | conflict |"), "{md}");
}

#[test]
fn first_patch_function_moved_to_a_new_file_is_blocked() {
    let (_dir, root) = setup_three();
    let (code, report, out, err) = sync_bin(&root, &three_upstream("first-moved"), &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    // Upstream moved ensure_session into src/pool/ensure.rs (patch 1's
    // hunk) and made open_session pub(super) (patch 3's context).
    assert_eq!(
        three_statuses(&report),
        [
            SyncStatus::Conflict,
            SyncStatus::Offset,
            SyncStatus::Conflict
        ]
    );
    assert_eq!(report.patches[0].files, vec!["crates/buzz-acp/src/pool.rs"]);
}

#[test]
fn middle_patch_conflict_blocks_it_and_its_dependent() {
    let (_dir, root) = setup_three();
    let (code, report, out, err) = sync_bin(&root, &three_upstream("middle-conflict"), &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(
        three_statuses(&report),
        [
            SyncStatus::Exact,
            SyncStatus::Conflict,
            SyncStatus::Conflict
        ]
    );
    let detail = report.patches[2].detail.as_deref().unwrap();
    assert!(
        detail.contains("it depends on fresh-session-reset, which is blocked too"),
        "{detail}"
    );
}

#[test]
fn last_patch_conflict_is_blocked() {
    let (_dir, root) = setup_three();
    let (code, report, out, err) = sync_bin(&root, &three_upstream("last-conflict"), &[]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(
        three_statuses(&report),
        [SyncStatus::Exact, SyncStatus::Offset, SyncStatus::Conflict]
    );
    assert!(out.contains("result: blocked"), "{out}");
}

fn add_upstream_refs(root: &Path) {
    let mut reg = buzz_fork::registry::Registry::load(root).unwrap();
    for (i, p) in reg.patches.iter_mut().enumerate() {
        if p.upstream.is_empty() {
            p.upstream = vec![format!("block/buzz#{}", 8000 + i)];
        }
    }
    reg.save(root).unwrap();
}

#[test]
fn upstream_took_the_whole_series_so_write_retires_everything() {
    let (_dir, root) = setup_three();
    let up = three_upstream("all-upstream");
    let (code, report, out, err) = sync_bin(&root, &up, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    // Patch 3 rewrote lines of patch 2; upstream has both, so patch 2 is
    // found through their combined change.
    assert_eq!(three_statuses(&report), [SyncStatus::AlreadyUpstream; 3]);
    assert_eq!(report.result, SyncResult::Ready);
    assert!(
        report.patches[1]
            .detail
            .as_deref()
            .unwrap()
            .contains("together with the later reset-reports-presence"),
        "{:?}",
        report.patches[1].detail
    );
    assert!(range_diff(&root).starts_with("The new series is empty"));
    let md = std::fs::read_to_string(root.join("out/report.md")).unwrap();
    assert!(md.contains("Range-diff: the new series is empty"), "{md}");

    add_upstream_refs(&root);
    let (code, _, out, err) = sync_bin(&root, &up, &["--write", "--version", "0.10.0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let reg = buzz_fork::registry::Registry::load(&root).unwrap();
    assert_eq!(reg.active().count(), 0);
    assert!(reg.patches.iter().all(|p| p.status.as_str() == "upstreamed"
        && p.retired.as_ref().unwrap().upstream_version == "0.10.0"));
    for id in THREE {
        assert!(!root.join(format!("patches/{id}.patch")).exists(), "{id}");
    }
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("id "), "{out}");
    let (code, out, _) = run_bin(&root, &["status"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("surface: +0 / -0 lines in upstream files (no active patch)"),
        "{out}"
    );
    // A second sync against the same upstream has nothing to do.
    let (code, report, out, err) = sync_bin(&root, &up, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(report.result, SyncResult::NoUpdate);
    assert!(report.patches.is_empty());
}

#[test]
fn upstream_took_a_middle_patch_and_its_dependent_reapplies_on_upstreams_version() {
    let (_dir, root) = setup_three();
    let up = three_upstream("middle-upstream");
    let (code, report, out, err) = sync_bin(&root, &up, &["--write", "--version", "0.9.1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        three_statuses(&report),
        [
            SyncStatus::Exact,
            SyncStatus::AlreadyUpstream,
            SyncStatus::Exact
        ]
    );
    let reg = buzz_fork::registry::Registry::load(&root).unwrap();
    let active: Vec<&str> = reg.active().map(|p| p.id.as_str()).collect();
    assert_eq!(active, ["session-store-resume", "reset-reports-presence"]);
    // The dependent still names the retired patch: upstream now provides it.
    assert_eq!(reg.patches[2].depends_on[0].as_str(), "fresh-session-reset");
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn upstream_took_the_last_patch_only() {
    let r = expect(
        "last-upstream",
        SyncStatus::Exact,
        SyncStatus::AlreadyUpstream,
        SyncResult::Ready,
    );
    assert!(
        r.patches[1]
            .detail
            .as_deref()
            .unwrap()
            .contains("reverse of the patch applies")
    );
}

/// Refs of the work repo, for "nothing moved" assertions.
fn refs(root: &Path) -> String {
    git(
        &root.join("target/fork-work/repo"),
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    )
}

#[test]
fn an_upstream_without_the_crate_is_refused_on_one_line_and_moves_nothing() {
    let (_dir, root) = setup_three();
    let (code, ..) = sync_bin(&root, &three_upstream("last-conflict"), &[]);
    assert_eq!(code, 3);
    let before_refs = refs(&root);
    let before_report = std::fs::read(root.join("out/report.json")).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let readme_only = tempfile::tempdir().unwrap();
    write(&readme_only.path().join("README.md"), "# upstream\n");
    let other_crate = tempfile::tempdir().unwrap();
    write(
        &other_crate.path().join("Cargo.toml"),
        "[package]\nname = \"something-else\"\nversion = \"1.0.0\"\n",
    );
    let cases = [
        (empty.path().to_path_buf(), "does not contain the crate `buzz-acp`: no crates/buzz-acp/Cargo.toml and no Cargo.toml of the crate itself".to_owned()),
        (readme_only.path().to_path_buf(), "does not contain the crate `buzz-acp`: no crates/buzz-acp/Cargo.toml and no Cargo.toml of the crate itself".to_owned()),
        (other_crate.path().to_path_buf(), format!("{}/Cargo.toml is package `something-else`, not `buzz-acp`", other_crate.path().display())),
        (root.join("no-such-dir"), "is not a directory".to_owned()),
    ];
    for (dir, why) in cases {
        let report = root.join("out/report.json");
        let (code, out, err) = run_bin(
            &root,
            &[
                "sync",
                "--upstream",
                dir.to_str().unwrap(),
                "--report",
                report.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 2, "{out}\n{err}");
        assert_eq!(err, format!("error: --upstream {}: {why}\n", dir.display()));
        assert!(out.is_empty(), "{out}");
        assert_eq!(refs(&root), before_refs);
        assert_eq!(std::fs::read(&report).unwrap(), before_report);
    }
}

// ---------------------------------------------------------------------------
// A workspace baseline (`tests/drift/workspace/`): upstream's crate, the
// sibling crate it depends on by path, and upstream's root manifest (kept
// here as `upstream/Cargo.toml`).
// ---------------------------------------------------------------------------

/// A scratch root for the two-crate case: our root manifest and tests
/// package, the baseline crates at their paths, upstream's root manifest
/// under `upstream/`.
fn setup_workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let src = corpus("workspace");
    copy_dir(&src.join("root"), &root);
    copy_dir(&src.join("base/crates"), &root.join("crates"));
    write(
        &root.join("upstream/Cargo.toml"),
        &std::fs::read_to_string(src.join("base/Cargo.toml")).unwrap(),
    );
    copy_dir(&src.join("patches"), &root.join("patches"));
    std::fs::copy(src.join("patches.json"), root.join("patches.json")).unwrap();
    write(&root.join(".gitignore"), "/target\n");
    let ctx = Context::new(Some(&root)).unwrap();
    let registry = ctx.registry().unwrap();
    write(
        &root.join("FORK_PATCHES.md"),
        &buzz_fork::cmd::render::inventory(&ctx, &registry).unwrap(),
    );
    write(&root.join("patches/content/resume-within-limit.txt"), &{
        let text = std::fs::read_to_string(root.join("patches/resume-within-limit.patch")).unwrap();
        buzz_fork::patchfile::content_snapshot(
            "resume-within-limit",
            &buzz_fork::patchfile::parse(&text).unwrap(),
        )
    });
    (dir, root)
}

#[test]
fn workspace_baseline_imports_the_sibling_crate_and_verify_builds_both() {
    let (_dir, root) = setup_workspace();
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
    let upstream = corpus("workspace").join("upstream");
    // Only the sibling crate (and upstream's root manifest) changed.
    let (code, report, out, err) = sync_bin(&root, &upstream, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(report.result, SyncResult::Ready);
    assert_eq!(report.patches[0].status, SyncStatus::Exact);
    assert_ne!(report.upstream.old_tree, report.upstream.new_tree);
    // The crate directory alone is not enough for a workspace baseline.
    let (code, _, err) = run_bin(
        &root,
        &[
            "sync",
            "--upstream",
            upstream.join("crates/buzz-acp").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("(a workspace baseline needs the checkout root)"),
        "{err}"
    );
    // Nor is a checkout without the sibling.
    let partial = tempfile::tempdir().unwrap();
    copy_dir(
        &upstream.join("crates/buzz-acp"),
        &partial.path().join("crates/buzz-acp"),
    );
    let (code, _, err) = run_bin(
        &root,
        &["sync", "--upstream", partial.path().to_str().unwrap()],
    );
    assert_eq!(code, 2);
    assert!(
        err.trim_end()
            .ends_with("does not contain crates/buzz-core (upstream.baseline_paths[0])"),
        "{err}"
    );

    let (code, _, out, err) = sync_bin(&root, &upstream, &["--write", "--version", "0.9.1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for (ours, theirs) in [
        ("crates/buzz-core/src/lib.rs", "crates/buzz-core/src/lib.rs"),
        ("crates/buzz-core/Cargo.toml", "crates/buzz-core/Cargo.toml"),
        ("upstream/Cargo.toml", "Cargo.toml"),
        ("crates/buzz-acp/src/lib.rs", "crates/buzz-acp/src/lib.rs"),
    ] {
        assert_eq!(
            std::fs::read_to_string(root.join(ours)).unwrap(),
            std::fs::read_to_string(upstream.join(theirs)).unwrap(),
            "{ours}"
        );
    }
    let reg = buzz_fork::registry::Registry::load(&root).unwrap();
    assert_eq!(reg.upstream.tree, report.upstream.new_tree);
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
    // verify builds the patched crate with the new sibling and runs the guard
    // (which reads buzz-core's new limit) and the mutation check.
    let (code, out, err) = run_bin(&root, &["verify", "--mutation"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("resume-within-limit | ok           | 1 passed"),
        "{out}"
    );
    // Its guard calls the function the patch adds: an API guard, said so.
    assert!(out.contains("| ok: 1 API guard"), "{out}");
    assert!(
        std::fs::read_to_string(root.join("target/fork-work/tree/crates/buzz-core/src/lib.rs"))
            .unwrap()
            .contains("    2\n")
    );
}

#[test]
fn a_broken_first_patch_is_one_root_problem_plus_a_count() {
    let (_dir, root) = setup_three();
    let patch = std::fs::read_to_string(root.join("patches/session-store-resume.patch")).unwrap();
    write(
        &root.join("patches/session-store-resume.patch"),
        &patch.replacen(" pub mod pool;\n", " pub mod pools;\n", 1),
    );
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 1, "{out}");
    let apply_problems: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("hunk #") || l.contains("does not exist"))
        .collect();
    assert_eq!(
        apply_problems,
        [
            "  - [session-store-resume] crates/buzz-acp/src/lib.rs hunk #1 @@ -1,3 +1,4 @@: removed/context lines not found"
        ]
    );
    assert!(out.contains("fresh-session-reset    | blocked |"), "{out}");
    let (code, _, err) = run_bin(&root, &["apply"]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: [session-store-resume] crates/buzz-acp/src/lib.rs hunk #1 @@ -1,3 +1,4 @@: removed/context lines not found"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Upstream first (`tests/drift/upstream-broken/`): fork CI runs the new
// upstream's own tests before it applies the series.
// ---------------------------------------------------------------------------

/// A scratch root for the `upstream-broken` case: the fork's root manifest
/// and tests package, the baseline crate, the one-patch series.
fn setup_upstream_broken() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let src = corpus("upstream-broken");
    copy_dir(&src.join("root"), &root);
    copy_dir(&src.join("base"), &root.join("crates/buzz-acp"));
    copy_dir(&src.join("patches"), &root.join("patches"));
    std::fs::copy(src.join("patches.json"), root.join("patches.json")).unwrap();
    write(&root.join(".gitignore"), "/target\n");
    let ctx = Context::new(Some(&root)).unwrap();
    let registry = ctx.registry().unwrap();
    write(
        &root.join("FORK_PATCHES.md"),
        &buzz_fork::cmd::render::inventory(&ctx, &registry).unwrap(),
    );
    let text = std::fs::read_to_string(root.join("patches/resume-stored-session.patch")).unwrap();
    write(
        &root.join("patches/content/resume-stored-session.txt"),
        &buzz_fork::patchfile::content_snapshot(
            "resume-stored-session",
            &buzz_fork::patchfile::parse(&text).unwrap(),
        ),
    );
    (dir, root)
}

fn ci_bin(root: &Path, upstream: &Path) -> (i32, buzz_fork::cmd::ci::CiReport, String, String) {
    let report = root.join("out/ci.json");
    let (code, out, err) = run_bin(
        root,
        &[
            "ci",
            "--upstream",
            upstream.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    );
    let json = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}): exit {code}\n{out}\n{err}"));
    (code, serde_json::from_str(&json).unwrap(), out, err)
}

#[test]
fn an_upstream_that_fails_its_own_tests_is_upstream_broken_and_no_patch_is_blamed() {
    use buzz_fork::cmd::ci::CiResult;
    let (_dir, root) = setup_upstream_broken();
    let (code, out, _) = run_bin(&root, &["check"]);
    assert_eq!(code, 0, "{out}");
    let before = std::fs::read(root.join("patches.json")).unwrap();
    let (code, report, out, err) = ci_bin(&root, &corpus("upstream-broken").join("upstream"));
    assert_eq!(code, 4, "{out}\n{err}");
    assert_eq!(
        out,
        "upstream-broken 0.9.1: upstream fails its own tests before any patch is applied: \
         fails buzz-acp::own::upstream_broke_this_test \
         (flaky, passed when run again: buzz-acp::own::upstream_flaky_test); \
         no patch is blamed (the series: the synced series fails verify --mutation: \
         [tree] the whole test suite of the patched tree fails)\n"
    );
    assert_eq!(report.result, CiResult::UpstreamBroken);
    // Upstream's own run, before the series.
    let up = report.upstream_tests.as_ref().unwrap();
    assert_eq!(up.packages, ["buzz-acp"]);
    assert_eq!(up.broken, ["buzz-acp::own::upstream_broke_this_test"]);
    assert_eq!(up.flaky, ["buzz-acp::own::upstream_flaky_test"]);
    // The series' run is kept: it re-applied exactly, and its guard still
    // proves the patch; only upstream's own test fails the whole suite.
    assert_eq!(report.sync.result, SyncResult::Ready);
    assert_eq!(report.sync.patches[0].status, SyncStatus::Exact);
    let series = report.verify.as_ref().unwrap();
    assert_eq!(
        series.problems,
        ["[tree] the whole test suite of the patched tree fails"]
    );
    assert_eq!(series.rows[0].mutation.to_string(), "ok: 1 killed");
    let md = std::fs::read_to_string(root.join("out/ci.md")).unwrap();
    assert!(
        md.contains("## Upstream's own tests (before the series): FAILED"),
        "{md}"
    );
    // Nothing in the repository changed.
    assert_eq!(std::fs::read(root.join("patches.json")).unwrap(), before);
}

#[test]
fn a_flaky_upstream_test_is_reported_and_the_series_is_ready() {
    use buzz_fork::cmd::ci::CiResult;
    let (_dir, root) = setup_upstream_broken();
    let (code, report, out, err) = ci_bin(&root, &corpus("upstream-broken").join("upstream-flaky"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out,
        "ready 0.9.1: 1 exact; verify --mutation passed; \
         upstream's own tests were flaky: buzz-acp::own::upstream_flaky_test\n"
    );
    assert_eq!(report.result, CiResult::Ready);
    let up = report.upstream_tests.unwrap();
    assert!(up.broken.is_empty() && up.not_built.is_empty(), "{up:?}");
}
