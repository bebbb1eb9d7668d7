//! `scripts/fork ci` on a timeline of synthetic upstream versions, fetched
//! from a local bare repository: a shift (ready), a conflict (blocked), the
//! maintainer's committed resolution (ready), an upstream that merged a patch
//! (ready, retires it), no change (no_update). Every ready result is proven
//! by `verify --mutation` on the synced series, with real cargo builds of the
//! fixture's tiny crates.

mod common;

use std::path::{Path, PathBuf};

use buzz_fork::cmd::ci::{CiReport, CiResult};
use buzz_fork::cmd::sync::SyncStatus;
use common::{Fixture, add_channels_patch, git, git_output, run_bin, set_package_version, write};

/// A checkout of "upstream" (crate at `crates/up`) that publishes versions
/// as tags to a bare repository.
struct Upstream {
    _dir: tempfile::TempDir,
    src: PathBuf,
    bare: PathBuf,
}

impl Upstream {
    fn new(f: &Fixture) -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let bare = dir.path().join("upstream.git");
        std::fs::create_dir_all(&src).unwrap();
        git(&src, &["init", "-q"]);
        buzz_fork::fsutil::copy_dir(&f.root.join("crates/up"), &src.join("crates/up")).unwrap();
        git(&src, &["add", "-A"]);
        git(&src, &["commit", "-qm", "0.9.0"]);
        git(dir.path(), &["init", "-q", "--bare", "upstream.git"]);
        Upstream {
            _dir: dir,
            src,
            bare,
        }
    }

    fn edit(&self, rel: &str, edit: impl FnOnce(String) -> String) {
        let path = self.src.join("crates/up").join(rel);
        let before = std::fs::read_to_string(&path).unwrap();
        let after = edit(before.clone());
        assert_ne!(before, after, "{rel} unchanged");
        write(&path, &after);
    }

    fn publish(&self, version: &str) {
        self.edit("Cargo.toml", |t| set_package_version(&t, version));
        git(&self.src, &["add", "-A"]);
        git(&self.src, &["commit", "-qm", version]);
        git(&self.src, &["tag", &format!("v{version}")]);
        git(
            &self.src,
            &[
                "push",
                "-q",
                self.bare.to_str().unwrap(),
                &format!("v{version}"),
            ],
        );
    }

    fn url(&self) -> &str {
        self.bare.to_str().unwrap()
    }
}

/// Bytes of everything in the repository outside `target/`.
fn snapshot_repo(root: &Path) -> Vec<(String, Vec<u8>)> {
    buzz_fork::fsutil::list_files(root)
        .unwrap()
        .into_iter()
        .filter(|f| !f.starts_with("target/"))
        .map(|f| {
            let bytes = std::fs::read(root.join(&f)).unwrap();
            (f, bytes)
        })
        .collect()
}

fn ci(f: &Fixture, up: &Upstream, tag: &str, write_flag: bool) -> (i32, String, CiReport) {
    let mut args = vec![
        "ci",
        "--upstream-git",
        up.url(),
        "--ref",
        tag,
        "--date",
        "2027-01-01",
    ];
    if write_flag {
        args.push("--write");
    }
    let (code, out, err) = run_bin(&f.root, &args);
    assert_eq!(
        out.lines().count(),
        1,
        "exactly one line on stdout:\n{out}\n{err}"
    );
    let report: CiReport = serde_json::from_str(
        &std::fs::read_to_string(f.root.join("target/fork-work/ci/report.json")).unwrap(),
    )
    .unwrap_or_else(|e| panic!("report: {e}\n{err}"));
    assert!(
        f.root.join("target/fork-work/ci/report.md").is_file()
            && f.root
                .join("target/fork-work/ci/report.range-diff.txt")
                .is_file()
    );
    assert_eq!(format!("{}\n", report.summary), out);
    (code, out, report)
}

fn statuses(report: &CiReport) -> Vec<(String, SyncStatus)> {
    report
        .sync
        .patches
        .iter()
        .map(|p| (p.id.clone(), p.status))
        .collect()
}

#[test]
fn ci_classifies_a_timeline_of_upstream_versions() {
    let f = Fixture::new();
    f.add_resume_patch();
    add_channels_patch(
        &f,
        Some("the patch adds Pool::channels; without it there is nothing to count"),
    );
    let up = Upstream::new(&f);

    // v0.9.1: lines added above both patches (a shift). Ready, and without
    // --write nothing in the repository changes.
    up.edit("src/pool.rs", |t| {
        t.replacen(
            "//! Session pool.\n",
            "//! Session pool.\n//!\n//! Sessions are per channel.\n",
            1,
        )
    });
    up.publish("0.9.1");
    let before = snapshot_repo(&f.root);
    let (code, out, report) = ci(&f, &up, "v0.9.1", false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "ready 0.9.1: 2 offset; verify --mutation passed\n");
    assert_eq!(report.result, CiResult::Ready);
    let verify = report.verify.as_ref().unwrap();
    assert!(verify.passed, "{verify:?}");
    assert_eq!(verify.rows.len(), 2);
    assert!(!report.written);
    assert_eq!(
        snapshot_repo(&f.root),
        before,
        "ci without --write changed the repository"
    );

    // The same, adopted.
    let (code, out, report) = ci(&f, &up, "v0.9.1", true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "ready 0.9.1: 2 offset; verify --mutation passed; adopted (--write)\n"
    );
    assert!(report.written);
    let reg = f.registry();
    assert_eq!(reg.upstream.version, "0.9.1");
    assert_eq!(Some(&reg.upstream.commit), report.upstream_commit.as_ref());
    assert_eq!(f.check().problems(), Vec::<String>::new());

    // v0.9.2: upstream rewrites the line right after session-resume's
    // insertion. Blocked, exit 3, nothing written.
    up.edit("src/pool.rs", |t| {
        t.replacen(
            "        let fresh = self.open(channel);\n        fresh\n",
            "        let opened_now = self.open(channel);\n        opened_now\n",
            1,
        )
    });
    up.publish("0.9.2");
    let before = snapshot_repo(&f.root);
    let (code, out, report) = ci(&f, &up, "v0.9.2", true);
    assert_eq!(code, 3, "{out}");
    assert_eq!(
        out,
        "blocked 0.9.2: session-resume conflict in crates/up/src/pool.rs\n"
    );
    assert_eq!(report.result, CiResult::Blocked);
    assert!(report.verify.is_none());
    assert_eq!(
        snapshot_repo(&f.root),
        before,
        "a blocked ci changed the repository"
    );

    // The maintainer resolves the conflict in the work repo (docs/MAINTENANCE.md).
    let repo = f.work_repo();
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
    let upstream_pool = std::fs::read_to_string(up.src.join("crates/up/src/pool.rs")).unwrap();
    let resolved = upstream_pool.replacen(
        "        let opened_now = self.open(channel);\n",
        "        if let Some(n) = self.resume(channel) {\n            return n;\n        }\n        let opened_now = self.open(channel);\n",
        1,
    ).replacen(
        "    fn open(&mut self",
        "    fn resume(&self, channel: &str) -> Option<u32> {\n        self.sessions\n            .iter()\n            .position(|s| s == channel)\n            .map(|i| i as u32 + 1)\n    }\n\n    fn open(&mut self",
        1,
    );
    write(&repo.join("crates/up/src/pool.rs"), &resolved);
    git(&repo, &["add", "-A"]);
    let cont = git_output(&repo, &["-c", "core.editor=true", "rebase", "--continue"]);
    assert!(
        cont.status.success(),
        "{}",
        String::from_utf8_lossy(&cont.stderr)
    );
    let (code, out, report) = ci(&f, &up, "v0.9.2", true);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ready 0.9.2: "), "{out}");
    assert_eq!(statuses(&report)[0].1, SyncStatus::Merged);
    assert!(report.written);
    assert_eq!(f.registry().upstream.version, "0.9.2");
    assert_eq!(f.check().problems(), Vec::<String>::new());

    // v0.10.0: upstream merged session-resume (and dropped the pinned
    // defect test it fixes). Ready; --write retires the patch.
    let merged_pool = git(&repo, &["show", "series~1:crates/up/src/pool.rs"]);
    up.edit("src/pool.rs", |_| merged_pool);
    std::fs::remove_file(up.src.join("crates/up/tests/defects.rs")).unwrap();
    up.publish("0.10.0");
    let (code, out, report) = ci(&f, &up, "v0.10.0", true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        statuses(&report),
        vec![
            ("session-resume".to_owned(), SyncStatus::AlreadyUpstream),
            ("pool-channels".to_owned(), SyncStatus::Exact),
        ]
    );
    assert_eq!(
        out,
        "ready 0.10.0: 1 exact, 1 already-upstream; verify --mutation passed; adopted (--write)\n"
    );
    let reg = f.registry();
    assert_eq!(reg.patches[0].status.as_str(), "upstreamed");
    assert_eq!(reg.active().count(), 1);
    assert!(!f.root.join("patches/session-resume.patch").exists());
    assert_eq!(f.check().problems(), Vec::<String>::new());

    // The same upstream again: nothing to do.
    let before = snapshot_repo(&f.root);
    let (code, out, report) = ci(&f, &up, "v0.10.0", true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "no_update 0.10.0: upstream equals the baseline (up 0.10.0)\n"
    );
    assert_eq!(report.result, CiResult::NoUpdate);
    assert_eq!(snapshot_repo(&f.root), before);
}

#[test]
fn ci_refuses_bad_sources_on_one_line_with_exit_2() {
    let f = Fixture::new();
    let up = Upstream::new(&f);
    up.publish("0.9.1");
    let (code, out, err) = run_bin(&f.root, &["ci", "--upstream-git", up.url(), "--ref", "v9"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        err,
        format!(
            "error: cannot fetch v9 from {}: fatal: couldn't find remote ref v9\n",
            up.url()
        )
    );
    let missing = f.root.join("nowhere.git");
    let (code, _, err) = run_bin(
        &f.root,
        &[
            "ci",
            "--upstream-git",
            missing.to_str().unwrap(),
            "--ref",
            "main",
        ],
    );
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "error: cannot fetch main from {}: fatal:",
            missing.display()
        )),
        "{err}"
    );
    let (code, _, err) = run_bin(&f.root, &["ci"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run_bin(&f.root, &["ci", "--upstream-git", up.url()]);
    assert_eq!(code, 2, "{err}");
    // A ref whose tree has no crate is refused like `sync --upstream`.
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = run_bin(
        &f.root,
        &["ci", "--upstream", empty.path().to_str().unwrap()],
    );
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not contain the crate `up`"), "{err}");
}
