//! Maintainer workflows on a synthetic root: authoring a patch, refresh,
//! check failures, apply idempotence, retire rules.

mod common;

use buzz_fork::cmd::refresh::{self, ChangeKind};
use buzz_fork::cmd::{apply, retire};
use common::{DATE, Fixture, git, write};

fn problems(f: &Fixture) -> String {
    f.check().problems().join("\n")
}

#[test]
fn empty_series_is_valid() {
    let f = Fixture::new();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    insta::assert_snapshot!(report.render(), @r"
    series is empty

    checks: 14 of 14 passed

    check passed
    ");
}

#[test]
fn authored_patch_passes_check_and_git_am_applies_it() {
    let f = Fixture::new();
    f.add_resume_patch();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    let patch = f.read("patches/session-resume.patch");
    insta::assert_snapshot!("session_resume_patch", patch);
    insta::assert_snapshot!(
        "session_resume_content",
        f.read("patches/content/session-resume.txt")
    );
    insta::assert_snapshot!("inventory", f.read("FORK_PATCHES.md"));
    let reg = f.registry();
    assert_eq!(reg.patches[0].paths, vec!["crates/up/src/pool.rs"]);
    assert_eq!(
        reg.patches[0].last_update, DATE,
        "a new patch gets the refresh date"
    );

    // Plain `git am` applies the exported file onto a repo with the baseline at its path.
    let am = tempfile::tempdir().unwrap();
    git(am.path(), &["init", "-q"]);
    write(&am.path().join("crates/up/src/pool.rs"), common::POOL);
    write(
        &am.path().join("crates/up/src/lib.rs"),
        &f.read("crates/up/src/lib.rs"),
    );
    git(am.path(), &["add", "-A"]);
    git(am.path(), &["commit", "-qm", "baseline"]);
    git(
        am.path(),
        &[
            "am",
            "-q",
            f.root
                .join("patches/session-resume.patch")
                .to_str()
                .unwrap(),
        ],
    );
    assert_eq!(
        std::fs::read_to_string(am.path().join("crates/up/src/pool.rs")).unwrap(),
        common::POOL_RESUMED
    );
    let trailer = git(
        am.path(),
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Fork-Patch-Id,valueonly)",
        ],
    );
    assert_eq!(trailer.trim(), "session-resume");
}

#[test]
fn refresh_twice_is_byte_identical_and_dry_run_then_lists_nothing() {
    let f = Fixture::new();
    f.add_resume_patch();
    let files = [
        "patches/session-resume.patch",
        "patches/content/session-resume.txt",
        "patches.json",
        "FORK_PATCHES.md",
    ];
    let before: Vec<String> = files.iter().map(|p| f.read(p)).collect();
    let second = f.refresh();
    assert!(second.is_noop(), "{:?}", second.writes.keys());
    let after: Vec<String> = files.iter().map(|p| f.read(p)).collect();
    assert_eq!(before, after);
    let (plan, _) = refresh::plan(&f.ctx(), &f.registry(), "2030-01-01").unwrap();
    assert!(
        plan.is_noop(),
        "a dry run after refresh lists nothing: {:?}",
        plan.writes.keys()
    );
    assert_eq!(plan.changes[0].kind, ChangeKind::Unchanged);
    // The real binary agrees.
    let (code, out, _) = common::run_bin(&f.root, &["refresh", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to write"), "{out}");
}

#[test]
fn refresh_tells_mechanical_from_content_changes() {
    let f = Fixture::new();
    f.add_resume_patch();
    // Metadata only (the title): the file changes, its content does not.
    let mut reg = f.registry();
    reg.patches[0].title = "Resume stored sessions".into();
    reg.save(&f.root).unwrap();
    assert!(
        problems(&f).contains("Subject is"),
        "check sees the header drift"
    );
    let (plan, _) = refresh::plan(&f.ctx(), &f.registry(), "2027-02-02").unwrap();
    assert_eq!(plan.changes[0].kind, ChangeKind::Mechanical);
    assert_eq!(
        plan.registry.patches[0].last_update, DATE,
        "Last-Update moves only on content"
    );
    assert!(plan.writes.contains_key("patches/session-resume.patch"));
    assert!(
        !plan
            .writes
            .contains_key("patches/content/session-resume.txt")
    );

    // A changed added line is content: Last-Update moves to the refresh date.
    let repo = f.work_repo();
    let edited =
        common::POOL_RESUMED.replace("            return n;", "            return n; // resumed");
    write(&repo.join("crates/up/src/pool.rs"), &edited);
    git(
        &repo,
        &[
            "commit",
            "-q",
            "--amend",
            "-am",
            "Resume\n\nFork-Patch-Id: session-resume",
        ],
    );
    let (plan, _) = refresh::plan(&f.ctx(), &f.registry(), "2027-02-02").unwrap();
    assert_eq!(plan.changes[0].kind, ChangeKind::Content);
    refresh::write(&f.ctx(), &plan).unwrap();
    assert_eq!(f.registry().patches[0].last_update, "2027-02-02");
    assert!(
        f.read("patches/content/session-resume.txt")
            .contains("+            return n; // resumed")
    );
    assert!(f.check().is_ok(), "{}", f.check().render());
}

#[test]
fn refresh_rejects_commits_without_trailer() {
    let f = Fixture::new();
    f.add_resume_patch();
    let repo = f.work_repo();
    write(&repo.join("crates/up/src/extra.rs"), "pub fn extra() {}\n");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stray work"]);
    let err = refresh::plan(&f.ctx(), &f.registry(), DATE)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no `Fork-Patch-Id:` trailer"), "{err}");
    // Apply refuses to discard the stray commit…
    let err = apply::apply(&f.ctx(), &f.registry(), None, apply::Force::No).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("is dirty"), "{err}");
    // …unless forced.
    apply::apply(&f.ctx(), &f.registry(), None, apply::Force::Yes).unwrap();
    assert!(!f.work_repo().join("crates/up/src/extra.rs").exists());
}

#[test]
fn check_fails_on_an_edited_baseline() {
    let f = Fixture::new();
    f.add_resume_patch();
    write(
        &f.root.join("crates/up/src/lib.rs"),
        "//! edited\npub mod pool;\n",
    );
    let p = problems(&f);
    assert!(p.contains("[baseline] crates/up has tree"), "{p}");
    assert!(
        p.contains("fork work must go into a patch or a fork crate"),
        "{p}"
    );
    // A build directory inside the baseline is not an edit.
    let f = Fixture::new();
    write(&f.root.join("crates/up/target/debug/junk"), "x");
    assert!(f.check().is_ok(), "{}", f.check().render());
}

#[test]
fn check_fails_on_an_offset_patch() {
    let f = Fixture::new();
    f.add_resume_patch();
    // Shift the hunk by editing the patch's line numbers (context intact).
    let text = f
        .read("patches/session-resume.patch")
        .replace("@@ -17,6 +17,9 @@", "@@ -15,6 +15,9 @@");
    assert!(
        text.contains("@@ -15,6 +15,9 @@"),
        "fixture hunk header changed:\n{text}"
    );
    write(&f.root.join("patches/session-resume.patch"), &text);
    let report = f.check();
    let p = report.problems().join("\n");
    assert!(p.contains("context matches only at offset +2"), "{p}");
    assert_eq!(report.rows[0].apply, "offset");
}

#[test]
fn check_fails_on_an_undeclared_path_and_a_missing_snapshot() {
    let f = Fixture::new();
    f.add_resume_patch();
    let mut reg = f.registry();
    reg.patches[0].paths = vec!["crates/up/src/lib.rs".into()];
    reg.save(&f.root).unwrap();
    std::fs::remove_file(f.root.join("tests/snapshots/session_resume__resumes.snap")).unwrap();
    f.render();
    let report = f.check();
    let p = report.problems().join("\n");
    assert!(
        p.contains("touches crates/up/src/pool.rs, which `paths` does not declare"),
        "{p}"
    );
    assert!(
        p.contains("declares crates/up/src/lib.rs in `paths` but does not touch it"),
        "{p}"
    );
    assert!(
        p.contains("[unregistered] crates/up/src/pool.rs differs from the baseline"),
        "{p}"
    );
    assert!(
        p.contains("snapshot tests/snapshots/session_resume__resumes.snap does not exist"),
        "{p}"
    );
    assert_eq!(report.rows[0].paths, "FAIL");
    assert_eq!(report.rows[0].guards, "FAIL");
}

#[test]
fn check_fails_on_a_stale_inventory_and_missing_guards() {
    let f = Fixture::new();
    f.add_resume_patch();
    write(&f.root.join("FORK_PATCHES.md"), "# stale\n");
    assert!(problems(&f).contains("[inventory] FORK_PATCHES.md is stale"));
    let mut reg = f.registry();
    reg.patches[0].required_symbols[0].symbol = "Pool::gone".into();
    reg.patches[0].seams[0].callee = "helpers::resume".into();
    reg.patches[0].guard_tests.clear();
    reg.save(&f.root).unwrap();
    f.render();
    let p = problems(&f);
    assert!(
        p.contains("required symbol Pool::gone is not defined in crates/up/src/pool.rs"),
        "{p}"
    );
    assert!(
        p.contains("Pool::ensure_session does not call helpers::resume"),
        "{p}"
    );
    assert!(p.contains("no guard test"), "{p}");
    assert!(!p.contains("[inventory]"), "{p}");
}

#[test]
fn check_reports_orphans_and_stale_headers() {
    let f = Fixture::new();
    f.add_resume_patch();
    write(&f.root.join("patches/stray.patch"), "not registered\n");
    let text = f
        .read("patches/session-resume.patch")
        .replace("Last-Update: 2026-11-30", "Last-Update: 2020-01-01");
    write(&f.root.join("patches/session-resume.patch"), &text);
    let p = problems(&f);
    assert!(
        p.contains("[orphan] patches/stray.patch is not registered"),
        "{p}"
    );
    assert!(
        p.contains("header: Last-Update is \"2020-01-01\", registry renders \"2026-11-30\""),
        "{p}"
    );
}

#[test]
fn apply_is_idempotent_and_survives_a_corrupt_state_record() {
    let f = Fixture::new();
    f.add_resume_patch();
    let first = f.apply();
    assert_eq!(
        std::fs::read_to_string(first.tree.join("crates/up/src/pool.rs")).unwrap(),
        common::POOL_RESUMED
    );
    let manifest = std::fs::read_to_string(first.tree.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("members = [\"crates/up\", \"tests\"]"),
        "{manifest}"
    );
    assert!(first.tree.join("tests/tests/session_resume.rs").is_file());
    let second = f.apply();
    assert!(!second.rebuilt, "an unchanged tree is reused");
    assert_eq!(first.series.tip(), second.series.tip());
    let state = f.root.join("target/fork-work/state.json");
    write(&state, "{ this is not json");
    let third = f.apply();
    assert_eq!(third.series.tip(), first.series.tip());
    let text = std::fs::read_to_string(&state).unwrap();
    let parsed: buzz_fork::workarea::State = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed.patches.len(), 1);
    assert_eq!(parsed.series_tip, first.series.tip().to_string());
    // Changing a copied member rebuilds the tree.
    write(
        &f.root.join("tests/tests/extra.rs"),
        "#[test]\nfn extra() {}\n",
    );
    let fourth = f.apply();
    assert!(fourth.rebuilt);
    assert!(fourth.tree.join("tests/tests/extra.rs").is_file());
}

#[test]
fn apply_refuses_uncommitted_work_repo_changes() {
    let f = Fixture::new();
    f.add_resume_patch();
    write(&f.work_repo().join("crates/up/src/lib.rs"), "//! wip\n");
    let (code, _, err) = common::run_bin(&f.root, &["apply"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("uncommitted changes (crates/up/src/lib.rs)"),
        "{err}"
    );
    let (code, out, _) = common::run_bin(&f.root, &["apply", "--force"]);
    assert_eq!(code, 0);
    assert!(out.trim_end().ends_with("target/fork-work/tree"), "{out}");
}

#[test]
fn retire_requires_upstream_or_an_owner_decision() {
    let f = Fixture::new();
    f.add_resume_patch();
    let ctx = f.ctx();
    let err = retire::retire(&ctx, "session-resume", None).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(
        err.to_string().contains("its reverse does not apply"),
        "{err}"
    );
    let err = retire::retire(&ctx, "nope", None).unwrap_err();
    assert!(err.to_string().contains("unknown patch id `nope`"), "{err}");

    // Upstream adopts the change: the baseline now holds it.
    write(&f.root.join("crates/up/src/pool.rs"), common::POOL_RESUMED);
    let err = retire::retire(&ctx, "session-resume", None).unwrap_err();
    assert!(
        err.to_string().contains("needs an upstream reference"),
        "{err}"
    );
    let mut reg = f.registry();
    reg.patches[0].upstream = vec!["block/buzz#6088".into()];
    reg.save(&f.root).unwrap();
    let reg = retire::retire(&ctx, "session-resume", None).unwrap();
    let e = &reg.patches[0];
    assert_eq!(e.status.as_str(), "upstreamed");
    assert!(!e.retired.as_ref().unwrap().owner_decision);
    assert!(!f.root.join("patches/session-resume.patch").exists());
    assert!(!f.root.join("patches/content/session-resume.txt").exists());
    assert!(
        f.read("FORK_PATCHES.md")
            .contains("- Retired: already upstream")
    );
    let err = retire::retire(&ctx, "session-resume", None).unwrap_err();
    assert!(err.to_string().contains("already upstreamed"), "{err}");
}

#[test]
fn retire_by_owner_decision_drops_and_flags_leftover_snapshots() {
    let f = Fixture::new();
    f.add_resume_patch();
    let reg = retire::retire(
        &f.ctx(),
        "session-resume",
        Some("superseded by the store rewrite"),
    )
    .unwrap();
    assert_eq!(reg.patches[0].status.as_str(), "dropped");
    assert!(reg.patches[0].retired.as_ref().unwrap().owner_decision);
    // The guard snapshot of a dropped patch must go.
    let p = problems(&f);
    assert!(
        p.contains(
            "snapshot tests/snapshots/session_resume__resumes.snap still names this dropped patch"
        ),
        "{p}"
    );
    std::fs::remove_file(f.root.join("tests/snapshots/session_resume__resumes.snap")).unwrap();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    // The series is empty again; apply reflects that.
    let applied = f.apply();
    assert!(applied.series.commits.is_empty());
}

#[test]
fn check_enforces_surface_limits_naming_the_offender() {
    let f = Fixture::new();
    f.add_resume_patch();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    let text = f.read("patches.json").replacen(
        "\"patches\": [",
        "\"surface\": {\"max_added_lines_in_upstream_files\": 5, \"max_glue_module_lines\": 80, \"forbid_glue_import_cycles\": true},\n  \"patches\": [",
        1,
    );
    write(&f.root.join("patches.json"), &text);
    f.render();
    let p = problems(&f);
    assert_eq!(
        p,
        "[surface] the series adds 10 lines to upstream files, over the limit of 5 (session-resume 10)"
    );
    assert!(f.read("FORK_PATCHES.md").contains("+10 (limit 5) / -0"));
    // Within the limits, nothing is reported; the registry keeps the limits.
    let text = f.read("patches.json").replace(
        "\"max_added_lines_in_upstream_files\": 5",
        "\"max_added_lines_in_upstream_files\": 150",
    );
    write(&f.root.join("patches.json"), &text);
    f.render();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    assert_eq!(
        f.registry()
            .surface
            .unwrap()
            .max_added_lines_in_upstream_files,
        Some(150)
    );
    // The retired per-module line limit is read, ignored and named.
    assert!(
        report
            .render()
            .contains("note: surface.max_glue_module_lines is deprecated and ignored"),
        "{}",
        report.render()
    );
}

/// Registers a patch committed on top of the work repo's series, with a
/// guard file, and refreshes.
fn register_patch(f: &Fixture, id: &str, depends_on: &[&str]) {
    let mut reg = f.registry();
    let entry: buzz_fork::registry::PatchEntry = serde_json::from_value(serde_json::json!({
        "id": id,
        "file": format!("patches/{id}.patch"),
        "title": format!("The {id} patch"),
        "description": "A fixture patch.",
        "reason": "fork-only",
        "status": "carried",
        "upstream": [],
        "last_update": "2026-01-01",
        "depends_on": depends_on,
        "fork_crates": [],
        "paths": [],
        "required_symbols": [],
        "seams": [],
        "guard_tests": ["session_resume::unrelated"],
        "guard_snapshots": ["tests/snapshots/session_resume__resumes.snap"],
        "fixes_defects": [],
        "retired": null
    }))
    .unwrap();
    reg.patches.push(entry);
    reg.save(&f.root).unwrap();
    f.refresh();
}

#[test]
fn a_glue_module_edited_by_two_patches_fails_check_naming_the_file_and_the_patches() {
    let f = Fixture::new();
    f.add_resume_patch();
    // A patch that adds a glue module, wired in by one line of lib.rs.
    f.apply();
    let repo = f.work_repo();
    let lib = std::fs::read_to_string(repo.join("crates/up/src/lib.rs")).unwrap();
    write(
        &repo.join("crates/up/src/lib.rs"),
        &format!("{lib}pub mod glue;\n"),
    );
    write(
        &repo.join("crates/up/src/glue.rs"),
        "//! Glue.\n\npub fn first() {}\n",
    );
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &["commit", "-qm", "Add glue\n\nFork-Patch-Id: add-glue"],
    );
    register_patch(&f, "add-glue", &[]);
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
    assert!(
        f.read("FORK_PATCHES.md")
            .contains("| `crates/up/src/glue.rs` | 3 | `add-glue` |"),
        "{}",
        f.read("FORK_PATCHES.md")
    );

    // A later patch edits the same glue module.
    f.apply();
    write(
        &repo.join("crates/up/src/glue.rs"),
        "//! Glue.\n\npub fn first() {}\n\npub fn second() {}\n",
    );
    git(
        &repo,
        &[
            "commit",
            "-qam",
            "Extend glue\n\nFork-Patch-Id: extend-glue",
        ],
    );
    register_patch(&f, "extend-glue", &["add-glue"]);
    let report = f.check();
    assert!(!report.is_ok());
    assert_eq!(
        problems(&f),
        "[surface] glue module crates/up/src/glue.rs is edited by 2 patches: add-glue, extend-glue (created by add-glue); \
         a new file belongs to the one patch that creates it: move the later edits into that patch, or the shared code into a fork crate"
    );
    assert!(
        report.render().contains("glue-ownership FAIL (1)"),
        "{}",
        report.render()
    );
    assert!(
        f.read("FORK_PATCHES.md").contains(
            "| `crates/up/src/glue.rs` | 5 | `add-glue`, `extend-glue` (**more than one patch**) |"
        ),
        "{}",
        f.read("FORK_PATCHES.md")
    );
}
