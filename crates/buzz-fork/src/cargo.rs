//! Cargo invocations for a patched tree.
//!
//! Every call uses `--manifest-path <tree>/Cargo.toml`, `--profile patched`
//! and `CARGO_TARGET_DIR=<root>/target`: dependency builds are shared with
//! the root workspace, while patched binaries land in `target/patched/` and
//! never overwrite the baseline's `target/debug/`. Test runs set
//! `INSTA_UPDATE=no` and `CI=true`, so snapshots are never written and a
//! mismatch fails. Cargo's own output streams to our stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use cargo_metadata::TargetKind;

use crate::error::{Error, Result};
use crate::registry::TestRef;

/// The profile patched trees build with (defined in the root manifest).
pub const PROFILE: &str = "patched";

/// Environment variables from an enclosing cargo or insta run that must not
/// leak into the patched tree's cargo.
const SCRUBBED_ENV: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_PKG_NAME",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "INSTA_WORKSPACE_ROOT",
    "INSTA_FORCE_PASS",
    "INSTA_FORCE_UPDATE",
    "INSTA_GLOB_FILTER",
    "INSTA_PENDING_DIR",
    "RUST_TEST_THREADS",
];

/// How a run of one named test went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TestRun {
    /// It passed.
    Passed,
    /// It compiled and failed; `failure` is the panic libtest printed for
    /// it, if one could be read.
    Failed {
        /// The failing assertion.
        failure: Option<crate::libtest::Failure>,
    },
    /// The test target did not compile.
    CompileFailed,
    /// No test has that name (nothing ran).
    NotFound,
}

impl TestRun {
    /// How the run ended, without its evidence.
    #[must_use]
    pub fn kind(&self) -> TestRunKind {
        match self {
            TestRun::Passed => TestRunKind::Passed,
            TestRun::Failed { .. } => TestRunKind::Failed,
            TestRun::CompileFailed => TestRunKind::CompileFailed,
            TestRun::NotFound => TestRunKind::NotFound,
        }
    }

    /// Lower-case label for reports.
    #[must_use]
    pub fn label(&self) -> &'static str {
        self.kind().label()
    }
}

/// How a run of one named test ended, without the evidence a [`TestRun`]
/// carries: what a report counts runs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TestRunKind {
    /// It passed.
    Passed,
    /// It compiled and failed.
    Failed,
    /// The test target did not compile.
    CompileFailed,
    /// No test has that name.
    NotFound,
}

impl TestRunKind {
    /// Every kind.
    pub const ALL: [TestRunKind; 4] = [
        TestRunKind::Passed,
        TestRunKind::Failed,
        TestRunKind::CompileFailed,
        TestRunKind::NotFound,
    ];

    /// Lower-case label for reports.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            TestRunKind::Passed => "passed",
            TestRunKind::Failed => "failed",
            TestRunKind::CompileFailed => "failed to compile",
            TestRunKind::NotFound => "not found",
        }
    }

    /// The kind whose [`label`](Self::label) is `label`.
    #[must_use]
    pub fn from_label(label: &str) -> Option<TestRunKind> {
        Self::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// A compiled test target, run without cargo: libtest's own executable,
/// started in its package's directory as `cargo test` starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The executable.
    pub path: PathBuf,
    /// The directory of the package's manifest.
    pub package_dir: PathBuf,
}

/// The test executables one build produced, by (package, target); a
/// package's unit tests are under the target `lib`.
#[derive(Debug, Clone, Default)]
pub struct TestBinaries {
    by_target: BTreeMap<(String, String), TestBinary>,
}

impl TestBinaries {
    /// Removes the executables. Trees whose packages resolve differently (a
    /// tree without the lifecycle crate, or without the in-process registry)
    /// build the tests package's targets under other names, so cargo keeps
    /// every such tree's (about 100 MB each, fifteen per tree): removed once
    /// their tree's guards ran, they never pile up in `target/`.
    ///
    /// # Errors
    /// When a file cannot be removed (a missing one is fine).
    pub fn remove(self) -> Result<()> {
        for binary in self.by_target.into_values() {
            match std::fs::remove_file(&binary.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::io("removing a test executable", binary.path, source));
                }
            }
        }
        Ok(())
    }

    /// The executable of `test`'s target; `None` when it did not compile
    /// (or the package has no such target).
    #[must_use]
    pub fn get(&self, test: &TestRef) -> Option<&TestBinary> {
        self.by_target
            .get(&(test.package.clone(), test.target.clone()))
    }
}

/// An I/O error talking to a cargo child process.
fn cargo_io_error(source: std::io::Error) -> Error {
    Error::Spawn {
        program: "cargo".into(),
        source,
    }
}

/// What `cargo build --workspace` of a tree gave: whether it built, and
/// the binaries it placed in the profile's directory.
#[derive(Debug, Clone)]
pub struct WorkspaceBuild {
    /// Whether every unit built.
    pub built: bool,
    /// The binaries' paths (`target/patched/buzz-acp`, …).
    pub binaries: Vec<PathBuf>,
}

impl WorkspaceBuild {
    /// Removes the copies cargo keeps of this build's binaries in the
    /// profile's `deps/` (the file a binary in the profile's directory is a
    /// hard link of). Trees whose packages resolve differently link their
    /// binaries under other names, so cargo keeps each such tree's copies
    /// (about 50 MB each); the binaries themselves stay until the next tree's
    /// build replaces them. A copy that cannot be identified is left alone.
    ///
    /// # Errors
    /// When a copy cannot be removed.
    pub fn remove_kept_copies(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        for binary in &self.binaries {
            let (Some(dir), Some(stem)) =
                (binary.parent(), binary.file_stem().and_then(|s| s.to_str()))
            else {
                continue;
            };
            let Ok(linked) = std::fs::metadata(binary) else {
                continue;
            };
            let prefix = format!("{}-", stem.replace('-', "_"));
            let deps = dir.join("deps");
            let Ok(entries) = std::fs::read_dir(&deps) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !name.to_string_lossy().starts_with(&prefix) {
                    continue;
                }
                let path = entry.path();
                let same_file = std::fs::metadata(&path)
                    .is_ok_and(|m| m.ino() == linked.ino() && m.dev() == linked.dev());
                if same_file {
                    std::fs::remove_file(&path)
                        .map_err(|e| Error::io("removing a binary's copy", &path, e))?;
                }
            }
        }
        Ok(())
    }
}

/// Whether a target of this kind is the package's library (whose unit tests
/// `cargo test --lib` selects).
#[must_use]
pub fn is_library(kind: &TargetKind) -> bool {
    matches!(
        kind,
        TargetKind::Lib
            | TargetKind::RLib
            | TargetKind::DyLib
            | TargetKind::CDyLib
            | TargetKind::StaticLib
            | TargetKind::ProcMacro
    )
}

/// The key a test artifact is found under: its package and its target's
/// name, `lib` for a library's unit tests.
fn artifact_target(artifact: &cargo_metadata::Artifact) -> String {
    if artifact.target.kind.iter().any(is_library) {
        "lib".to_owned()
    } else {
        artifact.target.name.clone()
    }
}

/// Cargo for one patched tree.
pub struct Cargo {
    program: OsString,
    manifest: PathBuf,
    target_dir: PathBuf,
    /// Variables the tests get (the services of the run).
    env: Vec<(&'static str, String)>,
    /// Variables the tests must not get.
    removed_env: Vec<&'static str>,
}

impl Cargo {
    /// The tree's root (its workspace manifest's directory): test panics name their files
    /// relative to it.
    #[must_use]
    pub fn workspace_root(&self) -> &Path {
        self.manifest.parent().unwrap_or(&self.manifest)
    }

    /// Cargo for the tree at `tree`, building into `target_dir`.
    #[must_use]
    pub fn new(tree: &Path, target_dir: &Path) -> Self {
        Cargo {
            program: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            // Absolute, as cargo runs in the tree's directory.
            manifest: std::path::absolute(tree.join("Cargo.toml"))
                .unwrap_or_else(|_| tree.join("Cargo.toml")),
            target_dir: std::path::absolute(target_dir)
                .unwrap_or_else(|_| target_dir.to_path_buf()),
            env: Vec::new(),
            removed_env: Vec::new(),
        }
    }

    /// The same cargo, with the services of the run in the tests'
    /// environment.
    #[must_use]
    pub fn with_services(mut self, services: &crate::services::Services) -> Self {
        self.env = services.env();
        self.removed_env = services.removed_env();
        self
    }

    /// The tree's lock file.
    #[must_use]
    pub fn lock_path(&self) -> PathBuf {
        self.manifest.with_file_name("Cargo.lock")
    }

    fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new(&self.program);
        for var in SCRUBBED_ENV.iter().chain(&self.removed_env) {
            cmd.env_remove(var);
        }
        for (var, value) in &self.env {
            cmd.env(var, value);
        }
        // Cargo reads its configuration (`.cargo/config.toml`) from the
        // directories above the one it runs in: from the tree's own, a tree
        // under the repository builds with the repository's configuration
        // wherever the tool was started.
        if let Some(dir) = self.manifest.parent() {
            cmd.current_dir(dir);
        }
        cmd.env("CARGO_TARGET_DIR", &self.target_dir)
            .env("INSTA_UPDATE", "no")
            .env("CI", "true")
            .arg(sub)
            .arg("--manifest-path")
            .arg(&self.manifest)
            .arg("--profile")
            .arg(PROFILE)
            .stdin(Stdio::null());
        cmd
    }

    fn describe(cmd: &Command) -> String {
        // Cargo (whatever path `CARGO` gives) reads as `cargo`; a test
        // executable run directly by its path.
        let program = Path::new(cmd.get_program());
        let mut s = if program.file_stem().is_some_and(|n| n == "cargo") {
            String::from("cargo")
        } else {
            program.display().to_string()
        };
        for a in cmd.get_args() {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }

    /// Runs with stdout and stderr streamed to our stderr; true on success.
    fn stream(&self, mut cmd: Command) -> Result<bool> {
        crate::ui::step(&Self::describe(&cmd));
        cmd.stdout(Stdio::from(std::io::stderr()))
            .stderr(Stdio::inherit());
        let status = cmd.status().map_err(|source| Error::Spawn {
            program: "cargo".into(),
            source,
        })?;
        Ok(status.success())
    }

    /// `cargo build --workspace`: every library and binary of the tree (the
    /// e2e tests find the binaries in `target/patched/`). One build, never a
    /// `cargo check` before it: check output is not reused by a build.
    ///
    /// # Errors
    /// When cargo cannot be started or its messages cannot be read.
    pub fn build_workspace(&self) -> Result<WorkspaceBuild> {
        let (built, artifacts) = self.build_reporting(&["--workspace".to_owned()])?;
        let binaries = artifacts
            .into_iter()
            .filter(|a| !a.profile.test)
            .filter_map(|a| {
                a.executable
                    .map(cargo_metadata::camino::Utf8PathBuf::into_std_path_buf)
            })
            .collect();
        Ok(WorkspaceBuild { built, binaries })
    }

    /// Compiles the test targets `selection` names in one invocation
    /// (`cargo build --keep-going`, so every target that compiles is built
    /// even when another does not) and returns their executables.
    /// A target missing from the result did not compile.
    ///
    /// # Errors
    /// When cargo cannot be started or its messages cannot be read.
    pub fn build_test_binaries(&self, selection: &[String]) -> Result<(bool, TestBinaries)> {
        let packages: BTreeMap<PathBuf, String> = self
            .metadata()?
            .workspace_packages()
            .into_iter()
            .map(|p| {
                (
                    p.manifest_path.clone().into_std_path_buf(),
                    p.name.to_string(),
                )
            })
            .collect();
        let mut selection = selection.to_vec();
        selection.push("--keep-going".to_owned());
        let (built, artifacts) = self.build_reporting(&selection)?;
        let mut binaries = TestBinaries::default();
        for artifact in artifacts {
            let (true, Some(exe)) = (artifact.profile.test, &artifact.executable) else {
                continue;
            };
            let manifest = artifact.manifest_path.clone().into_std_path_buf();
            let Some(package) = packages.get(&manifest) else {
                continue;
            };
            let package_dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
            binaries.by_target.insert(
                (package.clone(), artifact_target(&artifact)),
                TestBinary {
                    path: exe.clone().into_std_path_buf(),
                    package_dir,
                },
            );
        }
        Ok((built, binaries))
    }

    /// `cargo build SELECTION` with cargo's JSON messages read (diagnostics
    /// still rendered to our stderr): whether it succeeded, and the
    /// artifacts it reported.
    fn build_reporting(
        &self,
        selection: &[String],
    ) -> Result<(bool, Vec<cargo_metadata::Artifact>)> {
        let mut cmd = self.command("build");
        cmd.args(selection)
            .arg("--message-format=json-render-diagnostics");
        let mut child = Self::spawn_piped(cmd)?;
        let mut artifacts = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let reader = std::io::BufReader::new(stdout);
            for message in cargo_metadata::Message::parse_stream(reader) {
                if let cargo_metadata::Message::CompilerArtifact(artifact) =
                    message.map_err(cargo_io_error)?
                {
                    artifacts.push(artifact);
                }
            }
        }
        let status = child.wait().map_err(cargo_io_error)?;
        Ok((status.success(), artifacts))
    }

    /// A test executable's command: the environment `cargo test` would give
    /// it (the run's services, the package's directory, snapshots never
    /// written), and no `CARGO`, so a test never starts a build of its own:
    /// the tree's binaries are already built.
    fn binary_command(&self, binary: &TestBinary) -> Command {
        let mut cmd = Command::new(&binary.path);
        for var in SCRUBBED_ENV.iter().chain(&self.removed_env) {
            cmd.env_remove(var);
        }
        cmd.env_remove("CARGO");
        for (var, value) in &self.env {
            cmd.env(var, value);
        }
        cmd.env("CARGO_TARGET_DIR", &self.target_dir)
            .env("CARGO_MANIFEST_DIR", &binary.package_dir)
            .env("INSTA_UPDATE", "no")
            .env("CI", "true")
            .current_dir(&binary.package_dir)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs one named test of a compiled target directly, as
    /// [`Cargo::run_test`] does through cargo: whether it exists, passed or
    /// failed (with libtest's panic read from its output), and how long the
    /// run took. Its output is printed to our stderr in one piece when it
    /// ends, so runs side by side never interleave their lines.
    ///
    /// # Errors
    /// When the executable cannot be started.
    pub fn run_test_binary(&self, binary: &TestBinary, name: &str) -> Result<(TestRun, Duration)> {
        use std::io::Write;
        let spawn_error = |source| Error::Spawn {
            program: binary.path.display().to_string(),
            source,
        };
        let listed = self
            .binary_command(binary)
            .args(["--list", "--format", "terse", "--exact", name])
            .stderr(Stdio::inherit())
            .output()
            .map_err(spawn_error)?;
        let exists = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l.strip_suffix(": test") == Some(name));
        if !exists {
            return Ok((TestRun::NotFound, Duration::ZERO));
        }
        let mut cmd = self.binary_command(binary);
        cmd.args(["--exact", name]);
        let started = Instant::now();
        let output = cmd.output().map_err(spawn_error)?;
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let run = if output.status.success() {
            TestRun::Passed
        } else {
            TestRun::Failed {
                failure: crate::libtest::failure_of(&stdout, name)
                    .map(|f| f.placed_in(self.workspace_root())),
            }
        };
        let block = format!(
            "==> {}\n{stdout}{}",
            Self::describe(&cmd),
            String::from_utf8_lossy(&output.stderr)
        );
        let _ = std::io::stderr().lock().write_all(block.as_bytes());
        Ok((run, took))
    }

    /// `cargo test` with extra selection arguments and libtest arguments.
    ///
    /// # Errors
    /// When cargo cannot be started.
    pub fn test(&self, selection: &[String], libtest: &[String]) -> Result<bool> {
        let mut cmd = self.command("test");
        cmd.args(selection);
        if !libtest.is_empty() {
            cmd.arg("--").args(libtest);
        }
        self.stream(cmd)
    }

    /// `cargo test` with extra selection and libtest arguments, its stdout
    /// captured (and echoed to our stderr): whether it passed, and the
    /// stdout, for [`crate::libtest`] to read.
    ///
    /// # Errors
    /// When cargo cannot be started.
    pub fn test_captured(
        &self,
        selection: &[String],
        libtest: &[String],
    ) -> Result<(bool, String)> {
        let mut cmd = self.command("test");
        cmd.args(selection);
        if !libtest.is_empty() {
            cmd.arg("--").args(libtest);
        }
        self.stream_captured(cmd)
    }

    /// Starts `cmd`, printed as a step, with its stdout piped to us and its
    /// stderr streamed to ours.
    fn spawn_piped(mut cmd: Command) -> Result<std::process::Child> {
        crate::ui::step(&Self::describe(&cmd));
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        cmd.spawn().map_err(cargo_io_error)
    }

    /// Runs with stdout captured (and echoed to our stderr line by line)
    /// and stderr streamed; whether it succeeded, and the stdout.
    fn stream_captured(&self, cmd: Command) -> Result<(bool, String)> {
        use std::io::{BufRead, Write};
        let mut child = Self::spawn_piped(cmd)?;
        let mut captured = String::new();
        if let Some(stdout) = child.stdout.take() {
            let mut err = std::io::stderr();
            for line in std::io::BufReader::new(stdout).split(b'\n') {
                let line = line.map_err(cargo_io_error)?;
                let text = String::from_utf8_lossy(&line);
                let _ = writeln!(err, "{text}");
                captured.push_str(&text);
                captured.push('\n');
            }
        }
        let status = child.wait().map_err(cargo_io_error)?;
        Ok((status.success(), captured))
    }

    /// Workspace packages of this tree that build exactly as in the
    /// workspace at `root`: the same relative path, and the same package,
    /// version and resolved features for it and for everything it depends
    /// on (normal, dev and build dependencies), none of it under `patched`
    /// (the paths the series changes). Their tests are the root workspace's
    /// tests, byte for byte.
    ///
    /// # Errors
    /// [`Error::CargoMetadata`] when cargo fails for either workspace.
    pub fn packages_built_as_in(
        &self,
        root: &Path,
        patched: &[String],
    ) -> Result<BTreeSet<String>> {
        let tree = self.resolved_metadata(&self.manifest)?;
        let root_meta = self.resolved_metadata(&root.join("Cargo.toml"))?;
        let tree_closures = closures(&tree, patched);
        let root_closures = closures(&root_meta, &[]);
        Ok(tree_closures
            .into_iter()
            .filter_map(|(name, closure)| {
                let closure = closure?;
                (root_closures.get(&name) == Some(&Some(closure))).then_some(name)
            })
            .collect())
    }

    /// `cargo metadata` with the resolved dependency graph (features
    /// unified over the whole workspace, as `--workspace` builds it).
    fn resolved_metadata(&self, manifest: &Path) -> Result<cargo_metadata::Metadata> {
        let mut cmd = cargo_metadata::MetadataCommand::new();
        cmd.cargo_path(&self.program).manifest_path(manifest);
        for var in SCRUBBED_ENV {
            cmd.env_remove(*var);
        }
        // The host's platform only: a resolve for every platform needs
        // crates that were never fetched (offline) and never built here.
        let mut options = vec!["--locked".to_owned(), "--offline".to_owned()];
        if let Some(host) = host_triple(&self.program) {
            options.extend(["--filter-platform".to_owned(), host]);
        }
        cmd.other_options(options);
        cmd.exec().map_err(|e| Error::CargoMetadata {
            manifest: manifest.to_path_buf(),
            detail: crate::error::first_line(&e.to_string()),
        })
    }

    /// `cargo metadata --no-deps` of the tree, through the `cargo_metadata`
    /// crate (which checks cargo's exit status and parses the JSON into types).
    fn metadata(&self) -> Result<cargo_metadata::Metadata> {
        let mut cmd = cargo_metadata::MetadataCommand::new();
        cmd.cargo_path(&self.program)
            .manifest_path(&self.manifest)
            .no_deps();
        for var in SCRUBBED_ENV {
            cmd.env_remove(*var);
        }
        cmd.env("CARGO_TARGET_DIR", &self.target_dir);
        cmd.exec().map_err(|e| Error::CargoMetadata {
            manifest: self.manifest.clone(),
            detail: crate::error::first_line(&e.to_string()),
        })
    }

    /// Targets of a workspace package: pairs of (kind, name) such as
    /// ([`TargetKind::Lib`], `buzz_acp`), ([`TargetKind::Test`],
    /// `pinned_defects`).
    ///
    /// # Errors
    /// [`Error::CargoMetadata`] when cargo fails or prints unreadable JSON.
    pub fn package_targets(&self, package: &str) -> Result<Vec<(TargetKind, String)>> {
        let meta = self.metadata()?;
        Ok(meta
            .workspace_packages()
            .into_iter()
            .filter(|p| p.name.as_str() == package)
            .flat_map(|p| &p.targets)
            .flat_map(|t| t.kind.iter().map(|k| (k.clone(), t.name.clone())))
            .collect())
    }
}

/// The host's target triple, as the compiler next to `cargo` names it
/// (`rustc -vV`).
fn host_triple(cargo: &std::ffi::OsStr) -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| {
        Path::new(cargo)
            .parent()
            .filter(|dir| dir.join("rustc").is_file())
            .map_or_else(|| "rustc".into(), |dir| dir.join("rustc").into_os_string())
    });
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
}

/// One package as a build sees it: name, version, where it comes from (a
/// registry, or a path relative to the workspace root) and its features.
type BuildIdentity = (String, String, String, Vec<String>);

/// For each workspace package of `meta`, the identities of it and of
/// everything it depends on; `None` when any of them lies under one of
/// `patched` (relative paths).
fn closures(
    meta: &cargo_metadata::Metadata,
    patched: &[String],
) -> BTreeMap<String, Option<BTreeSet<BuildIdentity>>> {
    let root = meta.workspace_root.as_std_path();
    let packages: BTreeMap<&cargo_metadata::PackageId, &cargo_metadata::Package> =
        meta.packages.iter().map(|p| (&p.id, p)).collect();
    let Some(resolve) = &meta.resolve else {
        return BTreeMap::new();
    };
    let nodes: BTreeMap<&cargo_metadata::PackageId, &cargo_metadata::Node> =
        resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let identity = |id: &cargo_metadata::PackageId| -> Option<(BuildIdentity, bool)> {
        let package = packages.get(id)?;
        let node = nodes.get(id)?;
        let (origin, is_patched) = match &package.source {
            Some(source) => (source.repr.clone(), false),
            None => {
                let dir = package.manifest_path.as_std_path().parent().unwrap_or(root);
                let relative = dir
                    .strip_prefix(root)
                    .unwrap_or(dir)
                    .to_string_lossy()
                    .into_owned();
                let is_patched = patched
                    .iter()
                    .any(|p| relative == *p || relative.starts_with(&format!("{p}/")));
                (format!("path:{relative}"), is_patched)
            }
        };
        let mut features: Vec<String> = node.features.iter().map(ToString::to_string).collect();
        features.sort();
        Some((
            (
                package.name.to_string(),
                package.version.to_string(),
                origin,
                features,
            ),
            is_patched,
        ))
    };
    let mut out = BTreeMap::new();
    for member in &meta.workspace_members {
        let Some(package) = packages.get(member) else {
            continue;
        };
        let mut seen: BTreeSet<&cargo_metadata::PackageId> = BTreeSet::new();
        let mut stack = vec![member];
        let mut closure = Some(BTreeSet::new());
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            match identity(id) {
                Some((ident, false)) => {
                    if let Some(c) = closure.as_mut() {
                        c.insert(ident);
                    }
                }
                _ => closure = None,
            }
            if let Some(node) = nodes.get(id) {
                stack.extend(node.deps.iter().map(|d| &d.pkg));
            }
        }
        out.insert(package.name.to_string(), closure);
    }
    out
}

/// Brings the lock file of the workspace at `root` in line with its
/// members after they changed (a new baseline): `cargo update --workspace`,
/// which updates only the workspace's own packages and adds what they newly
/// need, never another version of a registry package already locked. Tried
/// offline first (nothing to fetch in the usual case), then online. Returns
/// whether the lock changed; a root without a `Cargo.toml` has nothing to do.
///
/// # Errors
/// [`Error::LockUpdate`] when cargo fails both ways; I/O errors.
pub fn update_workspace_lock(root: &Path) -> Result<bool> {
    let manifest = root.join("Cargo.toml");
    if !manifest.is_file() {
        return Ok(false);
    }
    let lock = root.join("Cargo.lock");
    let before = std::fs::read(&lock).ok();
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut last = String::new();
    for offline in [true, false] {
        let mut cmd = Command::new(&program);
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd.arg("update")
            .arg("--workspace")
            .arg("--manifest-path")
            .arg(&manifest)
            .stdin(Stdio::null());
        if offline {
            cmd.arg("--offline");
        }
        crate::ui::step(&Cargo::describe(&cmd));
        let out = cmd.output().map_err(|source| Error::Spawn {
            program: "cargo".into(),
            source,
        })?;
        if out.status.success() {
            return Ok(std::fs::read(&lock).ok() != before);
        }
        last = crate::error::first_line(&String::from_utf8_lossy(&out.stderr));
    }
    Err(Error::LockUpdate {
        manifest,
        detail: last,
    })
}

/// Registry packages (name, version, source) of a `Cargo.lock`.
///
/// # Errors
/// When the lock does not parse.
pub fn registry_packages(lock: &Path) -> Result<BTreeSet<(String, String, String)>> {
    let text = crate::fsutil::read(lock)?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| Error::Manifest {
        path: lock.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut out = BTreeSet::new();
    if let Some(toml::Value::Array(packages)) = table.get("package") {
        for p in packages {
            let field = |k: &str| p.get(k).and_then(toml::Value::as_str).map(str::to_owned);
            if let (Some(name), Some(version), Some(source)) =
                (field("name"), field("version"), field("source"))
            {
                out.insert((name, version, source));
            }
        }
    }
    Ok(out)
}

/// Fails when the tree's lock resolved a registry package (name, version,
/// source) that the root lock does not have: a new dependency or another
/// version. Packages only the root workspace uses (e.g. this tool's own
/// dependencies) are pruned from the tree's lock and are fine.
///
/// # Errors
/// [`Error::LockMismatch`] naming the packages.
pub fn compare_locks(tree_lock: &Path, root_lock: &Path) -> Result<()> {
    let tree = registry_packages(tree_lock)?;
    let root = registry_packages(root_lock)?;
    let added: Vec<String> = tree
        .difference(&root)
        .map(|(n, v, s)| format!("{n} {v} ({s})"))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(Error::LockMismatch {
        detail: format!(
            "not in the root lock: {} (add the dependency to the root workspace and update the root Cargo.lock)",
            added.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_comparison_ignores_path_packages() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root.lock");
        let tree = dir.path().join("tree.lock");
        let reg = "registry+https://github.com/rust-lang/crates.io-index";
        std::fs::write(
            &root,
            format!("version = 4\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\nsource = \"{reg}\"\n[[package]]\nname = \"a\"\nversion = \"0.1.0\"\n"),
        )
        .unwrap();
        std::fs::write(
            &tree,
            format!("version = 4\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\nsource = \"{reg}\"\n[[package]]\nname = \"store\"\nversion = \"0.1.0\"\n"),
        )
        .unwrap();
        compare_locks(&tree, &root).unwrap();
        // A subset (packages only the root uses are pruned) is fine.
        std::fs::write(&tree, "version = 4\n").unwrap();
        compare_locks(&tree, &root).unwrap();
        std::fs::write(
            &tree,
            format!("version = 4\n[[package]]\nname = \"serde\"\nversion = \"1.0.1\"\nsource = \"{reg}\"\n"),
        )
        .unwrap();
        let err = compare_locks(&tree, &root).unwrap_err().to_string();
        assert!(
            err.contains(
                "the patched tree must build with the root lock: not in the root lock: serde 1.0.1"
            ),
            "{err}"
        );
    }
}
