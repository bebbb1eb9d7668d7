//! Shared fixtures: a synthetic repository root holding a tiny "upstream"
//! crate (`crates/up`), a tests package with one guard test, a registry, and
//! helpers to author patches the way a maintainer does (commit in the work
//! repo with a `Fork-Patch-Id` trailer, then refresh).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use buzz_fork::Context;
use buzz_fork::cmd::{apply, refresh};
use buzz_fork::registry::Registry;

pub const DATE: &str = "2026-11-30";

pub const POOL: &str = "//! Session pool.

/// Sessions by channel.
pub struct Pool {
    sessions: Vec<String>,
    opened: u32,
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Pool {
            sessions: Vec::new(),
            opened: 0,
        }
    }

    /// The session number for `channel`.
    pub fn ensure_session(&mut self, channel: &str) -> u32 {
        let fresh = self.open(channel);
        fresh
    }

    /// Sessions opened so far.
    pub fn opened(&self) -> u32 {
        self.opened
    }

    fn open(&mut self, channel: &str) -> u32 {
        self.sessions.push(channel.to_owned());
        self.opened += 1;
        self.opened
    }
}
";

pub const POOL_RESUMED: &str = "//! Session pool.

/// Sessions by channel.
pub struct Pool {
    sessions: Vec<String>,
    opened: u32,
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Pool {
            sessions: Vec::new(),
            opened: 0,
        }
    }

    /// The session number for `channel`.
    pub fn ensure_session(&mut self, channel: &str) -> u32 {
        if let Some(n) = self.resume(channel) {
            return n;
        }
        let fresh = self.open(channel);
        fresh
    }

    /// Sessions opened so far.
    pub fn opened(&self) -> u32 {
        self.opened
    }

    fn resume(&self, channel: &str) -> Option<u32> {
        self.sessions
            .iter()
            .position(|s| s == channel)
            .map(|i| i as u32 + 1)
    }

    fn open(&mut self, channel: &str) -> u32 {
        self.sessions.push(channel.to_owned());
        self.opened += 1;
        self.opened
    }
}
";

const LIB: &str = "//! A tiny upstream crate.\n\npub mod pool;\n";

const DEFECTS: &str = "//! Pinned upstream defects: these pass on the baseline.

#[test]
fn second_ensure_opens_a_new_session() {
    let mut pool = up::pool::Pool::new();
    pool.ensure_session(\"c\");
    pool.ensure_session(\"c\");
    assert_eq!(pool.opened(), 2);
}
";

const GUARD: &str = "//! Guard of the session-resume patch.

#[test]
fn resumes() {
    let mut pool = up::pool::Pool::new();
    let first = pool.ensure_session(\"c\");
    let again = pool.ensure_session(\"c\");
    assert_eq!(first, again);
    assert_eq!(pool.opened(), 1);
}

#[test]
fn unrelated() {
    assert_eq!(1 + 1, 2);
}
";

/// A scratch repository root.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

pub fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Runs git in `dir` isolated from the user's configuration, identity and
/// editor, and returns its output whatever the exit status (a rebase that
/// stops on a conflict is an expected failure).
pub fn git_output(dir: &Path, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", home.path())
        .env("GIT_EDITOR", "true")
        .env("GIT_AUTHOR_NAME", "Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.invalid")
        .env("GIT_COMMITTER_NAME", "Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.invalid")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap()
}

/// A git command isolated from the user's configuration that must succeed;
/// its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `manifest` (a `Cargo.toml` text) with its first `version = "…"` value
/// replaced by `version`: how the tests publish a new upstream version.
pub fn set_package_version(manifest: &str, version: &str) -> String {
    let start = manifest.find("version = \"").unwrap() + "version = \"".len();
    let end = start + manifest[start..].find('"').unwrap();
    format!("{}{version}{}", &manifest[..start], &manifest[end..])
}

impl Fixture {
    /// A root with an empty series and a correct `upstream.tree`.
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        write(
            &root.join("Cargo.toml"),
            "[workspace]\nresolver = \"3\"\nmembers = [\"crates/up\"]\nexclude = [\"tests\"]\n\n\
             [workspace.package]\nedition = \"2024\"\n\n[profile.patched]\ninherits = \"dev\"\n",
        );
        write(
            &root.join("Cargo.lock"),
            "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n",
        );
        write(&root.join(".gitignore"), "/target\n");
        write(
            &root.join("crates/up/Cargo.toml"),
            "[package]\nname = \"up\"\nversion = \"0.9.0\"\nedition.workspace = true\n",
        );
        write(&root.join("crates/up/src/lib.rs"), LIB);
        write(&root.join("crates/up/src/pool.rs"), POOL);
        write(&root.join("crates/up/tests/defects.rs"), DEFECTS);
        write(
            &root.join("tests/Cargo.toml"),
            "[package]\nname = \"up-fork-tests\"\nversion = \"0.0.0\"\nedition.workspace = true\npublish = false\n\n\
             [dev-dependencies]\nup = { path = \"../crates/up\" }\n",
        );
        write(
            &root.join("tests/src/lib.rs"),
            "//! Tests of the patched tree.\n",
        );
        write(&root.join("tests/tests/session_resume.rs"), GUARD);
        let registry = serde_json::json!({
            "format_version": 1,
            "upstream": {
                "repository": "block/buzz",
                "crate": "up",
                "path": "crates/up",
                "version": "0.9.0",
                "commit": "v0.9.0",
                "tree": "0000000000000000000000000000000000000000"
            },
            "workspace": {
                "support_paths": [],
                "tests_path": "tests",
                "tests_package": "up-fork-tests"
            },
            "patches": []
        });
        write(
            &root.join("patches.json"),
            &serde_json::to_string_pretty(&registry).unwrap(),
        );
        let fixture = Fixture { _dir: dir, root };
        let tree = fixture.baseline_tree();
        let mut reg = fixture.registry();
        reg.upstream.tree = tree;
        reg.save(&fixture.root).unwrap();
        fixture.render();
        fixture
    }

    pub fn ctx(&self) -> Context {
        Context::new(Some(&self.root)).unwrap()
    }

    pub fn registry(&self) -> Registry {
        Registry::load(&self.root).unwrap()
    }

    pub fn baseline_tree(&self) -> String {
        let ctx = self.ctx();
        let repo = buzz_fork::workarea::ensure_repo(&ctx.git, &ctx.layout).unwrap();
        buzz_fork::workarea::directory_tree(&repo, &ctx.layout, &self.root.join("crates/up"))
            .unwrap()
            .to_string()
    }

    pub fn render(&self) {
        let ctx = self.ctx();
        let reg = self.registry();
        let text = buzz_fork::cmd::render::inventory(&ctx, &reg).unwrap();
        write(&self.root.join("FORK_PATCHES.md"), &text);
    }

    pub fn work_repo(&self) -> PathBuf {
        self.root.join("target/fork-work/repo")
    }

    pub fn apply(&self) -> apply::Applied {
        let ctx = self.ctx();
        apply::apply(&ctx, &self.registry(), None, apply::Force::No).unwrap()
    }

    /// Adds the `session-resume` patch like a maintainer: apply, edit and
    /// commit in the work repo, register, refresh, add the guard snapshot.
    pub fn add_resume_patch(&self) {
        self.apply();
        let repo = self.work_repo();
        write(&repo.join("crates/up/src/pool.rs"), POOL_RESUMED);
        git(
            &repo,
            &[
                "commit",
                "-qam",
                "Resume stored sessions\n\nFork-Patch-Id: session-resume",
            ],
        );
        let mut reg = self.registry();
        let entry: buzz_fork::registry::PatchEntry = serde_json::from_value(serde_json::json!({
            "id": "session-resume",
            "file": "patches/session-resume.patch",
            "title": "Resume a stored session instead of opening a new one",
            "description": "Restarting the bridge opened a second session.\n\nThe pool now resumes it.",
            "reason": "upstreamable",
            "status": "carried",
            "upstream": [],
            "last_update": "2026-01-01",
            "depends_on": [],
            "fork_crates": [],
            "paths": [],
            "required_symbols": [{"path": "crates/up/src/pool.rs", "symbol": "Pool::resume"}],
            "seams": [{"path": "crates/up/src/pool.rs", "caller": "Pool::ensure_session", "callee": ".resume"}],
            "guard_tests": ["session_resume::resumes"],
            "guard_snapshots": ["tests/snapshots/session_resume__resumes.snap"],
            "fixes_defects": ["up::defects::second_ensure_opens_a_new_session"],
            "retired": null
        }))
        .unwrap();
        reg.patches.push(entry);
        reg.save(&self.root).unwrap();
        write(
            &self
                .root
                .join("tests/snapshots/session_resume__resumes.snap"),
            "---\nsource: tests/session_resume.rs\n---\n1\n",
        );
        self.refresh();
    }

    pub fn refresh(&self) -> refresh::Export {
        let ctx = self.ctx();
        let (export, _) = refresh::plan(&ctx, &self.registry(), DATE).unwrap();
        refresh::write(&ctx, &export).unwrap();
        export
    }

    pub fn check(&self) -> buzz_fork::cmd::check::CheckReport {
        buzz_fork::cmd::check::check(&self.ctx()).unwrap()
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }
}

/// The second patch of the fixture series: `Pool::channels`, inserted after
/// `Pool::new` (independent of `session-resume`). Its guard calls the new
/// method, so it does not compile without the patch: an API guard when
/// `api_reason` says why.
pub fn add_channels_patch(f: &Fixture, api_reason: Option<&str>) {
    f.apply();
    let repo = f.work_repo();
    let pool = std::fs::read_to_string(repo.join("crates/up/src/pool.rs")).unwrap();
    let patched = pool.replacen(
        "            opened: 0,\n        }\n    }\n",
        "            opened: 0,\n        }\n    }\n\n    /// Channels with a session.\n    pub fn channels(&self) -> usize {\n        self.sessions.len()\n    }\n",
        1,
    );
    assert_ne!(pool, patched);
    write(&repo.join("crates/up/src/pool.rs"), &patched);
    git(
        &repo,
        &[
            "commit",
            "-qam",
            "Count channels\n\nFork-Patch-Id: pool-channels",
        ],
    );
    let mut reg = f.registry();
    reg.patches[0].upstream = vec!["block/buzz#6088".into()];
    reg.patches[0].status = buzz_fork::registry::Status::Submitted;
    let entry: buzz_fork::registry::PatchEntry = serde_json::from_value(serde_json::json!({
        "id": "pool-channels",
        "file": "patches/pool-channels.patch",
        "title": "Count the channels that have a session",
        "description": "Operators asked how many channels hold a session.",
        "reason": "fork-only",
        "status": "carried",
        "upstream": [],
        "last_update": "2026-01-01",
        "depends_on": [],
        "fork_crates": [],
        "paths": [],
        "required_symbols": [{"path": "crates/up/src/pool.rs", "symbol": "Pool::channels"}],
        "seams": [],
        "guard_tests": ["pool_channels::counts_channels"],
        "guard_snapshots": ["tests/snapshots/pool_channels__counts.snap"],
        "api_guards": api_reason
            .map(|reason| vec![serde_json::json!({"test": "pool_channels::counts_channels", "reason": reason})])
            .unwrap_or_default(),
        "fixes_defects": [],
        "retired": null
    }))
    .unwrap();
    reg.patches.push(entry);
    reg.save(&f.root).unwrap();
    write(
        &f.root.join("tests/tests/pool_channels.rs"),
        "//! Guard of the pool-channels patch.\n\n#[test]\nfn counts_channels() {\n    \
         let mut pool = up::pool::Pool::new();\n    pool.ensure_session(\"a\");\n    \
         pool.ensure_session(\"b\");\n    assert_eq!(pool.channels(), 2);\n}\n",
    );
    write(
        &f.root.join("tests/snapshots/pool_channels__counts.snap"),
        "---\nsource: tests/pool_channels.rs\n---\n2\n",
    );
    f.refresh();
    let report = f.check();
    assert!(report.is_ok(), "{}", report.render());
}

/// Runs the real binary; returns (exit code, stdout, stderr).
pub fn run_bin(root: &Path, args: &[&str]) -> (i32, String, String) {
    run_bin_env(root, args, &[])
}

pub fn run_bin_env(root: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_buzz-fork"));
    cmd.arg("--root").arg(root).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replaces the temp root in text with `<root>`.
pub fn redact(text: &str, root: &Path) -> String {
    text.replace(&root.display().to_string(), "<root>")
}
