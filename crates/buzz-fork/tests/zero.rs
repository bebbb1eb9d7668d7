//! The happy ending: upstream takes the only patch, `sync --write` retires
//! it, and every command keeps working on a registry with zero active
//! patches (`verify` builds and tests the pristine baseline with the fork
//! crates; `ci` reports no_update, then ready for a new upstream).
//!
//! It runs on a clone of a committed repository whose lock file cargo
//! accepts with `--locked` (as `scripts/fork` runs it): after `sync --write`
//! adopts the new upstream version, the lock is still accepted and `check`
//! passes without a manual step.

mod common;

use std::path::Path;

use common::{Fixture, POOL_RESUMED, git, run_bin, set_package_version, write};

/// An upstream crate directory: the fixture's baseline with `pool.rs`
/// replaced, without the pinned defect test (upstream fixed it), at `version`.
fn upstream_with(root: &Path, pool: &str, version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    buzz_fork::fsutil::copy_dir(&root.join("crates/up"), dir.path()).unwrap();
    write(&dir.path().join("src/pool.rs"), pool);
    buzz_fork::fsutil::remove_file_if_present(&dir.path().join("tests/defects.rs")).unwrap();
    let manifest = std::fs::read_to_string(dir.path().join("Cargo.toml")).unwrap();
    write(
        &dir.path().join("Cargo.toml"),
        &set_package_version(&manifest, version),
    );
    dir
}

/// `cargo metadata --locked` of the workspace at `root`: what `scripts/fork`
/// (`cargo run --locked`) needs of the lock file.
fn locked_metadata(root: &Path) -> std::process::Output {
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["metadata", "--locked", "--offline", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap()
}

fn ok(root: &Path, args: &[&str]) -> String {
    let (code, out, err) = run_bin(root, args);
    assert_eq!(code, 0, "{args:?}\n{out}\n{err}");
    out
}

/// The clone the rest of the test works on (the commands read only `root`).
struct ClonedRoot {
    root: std::path::PathBuf,
}

impl ClonedRoot {
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }
}

#[test]
fn every_command_works_with_zero_active_patches() {
    let f = Fixture::new();
    f.add_resume_patch();
    let mut reg = f.registry();
    reg.patches[0].upstream = vec!["block/buzz#6088".into()];
    reg.save(&f.root).unwrap();
    f.refresh();
    // Commit it with a lock cargo accepts, and work on a clone.
    let generate =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["generate-lockfile", "--offline", "--manifest-path"])
            .arg(f.root.join("Cargo.toml"))
            .output()
            .unwrap();
    assert!(generate.status.success(), "{generate:?}");
    git(&f.root, &["init", "-q"]);
    git(&f.root, &["add", "-A"]);
    git(&f.root, &["commit", "-qm", "the fork"]);
    let clone_dir = tempfile::tempdir().unwrap();
    let clone = clone_dir.path().join("fork");
    git(
        clone_dir.path(),
        &["clone", "-q", f.root.to_str().unwrap(), "fork"],
    );
    let lock_before = std::fs::read_to_string(clone.join("Cargo.lock")).unwrap();
    assert!(
        lock_before.contains("name = \"up\"\nversion = \"0.9.0\""),
        "{lock_before}"
    );
    assert!(locked_metadata(&clone).status.success());

    // Upstream took the patch: sync reports it and --write retires it.
    let took = upstream_with(&f.root, POOL_RESUMED, "0.10.0");
    let took_dir = took.path().to_str().unwrap();
    let out = ok(&clone, &["sync", "--upstream", took_dir]);
    assert!(out.contains("session-resume | already-upstream"), "{out}");
    assert!(out.contains("result: ready"), "{out}");
    let range_diff =
        std::fs::read_to_string(clone.join("target/fork-work/sync/report.range-diff.txt")).unwrap();
    assert!(
        range_diff.starts_with("The new series is empty"),
        "{range_diff}"
    );
    ok(
        &clone,
        &[
            "sync",
            "--upstream",
            took_dir,
            "--write",
            "--version",
            "0.10.0",
        ],
    );
    let reg = buzz_fork::registry::Registry::load(&clone).unwrap();
    assert_eq!(reg.active().count(), 0);
    assert_eq!(reg.patches[0].status.as_str(), "upstreamed");
    // The lock follows the new baseline's version and nothing else.
    let metadata = locked_metadata(&clone);
    assert!(
        metadata.status.success(),
        "{}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let lock_after = std::fs::read_to_string(clone.join("Cargo.lock")).unwrap();
    assert_eq!(
        lock_after,
        lock_before.replace(
            "name = \"up\"\nversion = \"0.9.0\"",
            "name = \"up\"\nversion = \"0.10.0\""
        )
    );
    let f = ClonedRoot { root: clone };

    // Every command, on zero active patches.
    let out = ok(&f.root, &["check"]);
    assert!(out.contains("session-resume | -     | -"), "{out}");
    assert!(out.ends_with("check passed\n"), "{out}");
    let out = ok(&f.root, &["status"]);
    assert!(
        out.contains("session-resume | upstreamed | upstreamable | -"),
        "{out}"
    );
    assert!(
        out.contains("surface: +0 / -0 lines in upstream files (no active patch)"),
        "{out}"
    );
    let inventory = f.read("FORK_PATCHES.md");
    ok(&f.root, &["render"]);
    assert_eq!(f.read("FORK_PATCHES.md"), inventory);
    assert!(
        inventory.contains("Patch burden: 0 active patches"),
        "{inventory}"
    );
    let out = ok(&f.root, &["apply"]);
    assert_eq!(
        out,
        format!("{}\n", f.root.join("target/fork-work/tree").display())
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("target/fork-work/tree/crates/up/src/pool.rs"))
            .unwrap(),
        POOL_RESUMED
    );
    let out = ok(&f.root, &["refresh", "--dry-run"]);
    assert!(out.contains("nothing to write"), "{out}");
    let out = ok(&f.root, &["refresh"]);
    assert!(out.contains("nothing to write"), "{out}");
    // verify builds and tests the pristine baseline with the fork crates
    // and the tests package (the guard now passes on upstream's own code).
    let out = ok(&f.root, &["verify", "--mutation"]);
    assert!(out.starts_with("series is empty\n"), "{out}");
    assert!(out.contains("whole test suite: passed"), "{out}");
    assert!(out.ends_with("verify passed\n"), "{out}");
    // ci: the same upstream is no update; a newer one is ready.
    let out = ok(&f.root, &["ci", "--upstream", took_dir]);
    assert_eq!(
        out,
        "no_update 0.10.0: upstream equals the baseline (up 0.10.0)\n"
    );
    let newer = upstream_with(
        &f.root,
        &POOL_RESUMED.replacen("//! Session pool.\n", "//! Session pool (0.10.1).\n", 1),
        "0.10.1",
    );
    let out = ok(
        &f.root,
        &["ci", "--upstream", newer.path().to_str().unwrap()],
    );
    assert_eq!(
        out,
        "ready 0.10.1: no active patch; verify --mutation passed\n"
    );
    let out = ok(
        &f.root,
        &["sync", "--upstream", newer.path().to_str().unwrap()],
    );
    assert!(out.starts_with("series is empty\n"), "{out}");
    assert!(out.contains("result: ready"), "{out}");
}
