//! Every git subprocess the tool runs goes through this module.
//!
//! Like StGit's `stupid` seam, each method calls one git command for one
//! intent, passes its arguments as a vector (never a shell string) and reads
//! results from exit codes and machine-readable output (`-z`, object ids, raw
//! commit objects). A failure reads `git <cmd>: <stderr>`.
//!
//! Each call runs isolated from the machine and the user: no system or global
//! config, `HOME` pointing at an empty scratch directory, `LC_ALL=C`, a fixed
//! identity and date (so commits, and therefore exported patches, are
//! byte-for-byte reproducible), no hooks, no signing, no autocrlf.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

use crate::error::{Error, Result};

/// Identity used for every commit the tool creates.
pub const IDENTITY_NAME: &str = "Buzz Fork Maintenance";
/// E-mail used for every commit the tool creates.
pub const IDENTITY_EMAIL: &str = "fork@buzz.invalid";
/// Author and committer date used for every commit the tool creates.
pub const FIXED_DATE: &str = "2000-01-01T00:00:00Z";
/// Oldest git with `merge-tree --write-tree`.
pub const MIN_VERSION: GitVersion = GitVersion {
    major: 2,
    minor: 38,
    patch: 0,
};
const MIN_VERSION_TEXT: &str = "2.38";

/// Settings passed with `-c` to every git call.
const FIXED_CONFIG: &[&str] = &[
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.abbrev=12",
    "core.quotePath=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "diff.algorithm=myers",
    "diff.renames=false",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "init.defaultBranch=series",
    "advice.detachedHead=false",
];

/// Environment variables that could leak a caller's repository into a call.
const SCRUBBED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_COMMON_DIR",
    "XDG_CONFIG_HOME",
];

/// A parsed `git version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GitVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl FromStr for GitVersion {
    type Err = String;

    /// Parses `git version 2.47.3` (vendor suffixes such as
    /// ` (Apple Git-143)` or `.windows.1` are ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .trim()
            .strip_prefix("git version ")
            .ok_or_else(|| format!("not a git version line: {s:?}"))?;
        let number = rest.split_whitespace().next().unwrap_or_default();
        let mut parts = number.split('.').map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u32>()
        });
        let mut next = |name: &str| -> Result<u32, String> {
            match parts.next() {
                Some(Ok(n)) => Ok(n),
                Some(Err(_)) => Err(format!("bad {name} version in {s:?}")),
                None => Ok(0),
            }
        };
        let major = next("major")?;
        let minor = next("minor")?;
        let patch = next("patch")?;
        Ok(GitVersion {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for GitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A git object id (hex).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid(String);

impl Oid {
    /// Validates a hex object id (SHA-1 or SHA-256).
    pub fn parse(cmd: &str, text: &str) -> Result<Self> {
        let t = text.trim();
        if (t.len() == 40 || t.len() == 64) && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Oid(t.to_ascii_lowercase()))
        } else {
            Err(Error::GitOutput {
                cmd: cmd.to_owned(),
                detail: format!("expected an object id, got {t:?}"),
            })
        }
    }

    /// The hex text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A 12-character abbreviation for messages.
    #[must_use]
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The raw parts of a commit object.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    /// Root tree.
    pub tree: Oid,
    /// Parent commits.
    pub parents: Vec<Oid>,
    /// Full message.
    pub message: String,
}

/// Result of applying a patch to a tree.
#[derive(Debug, Clone)]
pub enum ApplyOutcome {
    /// The patch applied; the resulting tree (or the unchanged base tree for `--check`).
    Applied(Oid),
    /// git refused the patch (exit code 1); its explanation.
    Rejected(String),
}

/// Direction for `git apply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Apply as written.
    Forward,
    /// Apply the reverse (`-R`).
    Reverse,
}

/// Whether `git apply` only checks or also writes the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// `--check`: report only.
    CheckOnly,
    /// Apply and write the resulting tree.
    Write,
}

/// A part of a composed tree (see [`Repo::compose_tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreePart {
    /// A whole directory tree.
    Tree(Oid),
    /// One file.
    Blob {
        /// The blob.
        oid: Oid,
        /// Whether it is executable.
        executable: bool,
    },
}

/// Result of an in-memory three-way merge.
#[derive(Debug, Clone)]
pub enum MergeOutcome {
    /// The merge is clean; the resulting tree.
    Clean(Oid),
    /// The merge conflicts in these files.
    Conflicted(Vec<String>),
}

/// Output of one git process.
struct RawOutput {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// One prepared git invocation.
struct Call<'a> {
    sub: &'static str,
    args: Vec<OsString>,
    git_dir: Option<&'a Path>,
    work_tree: Option<&'a Path>,
    index: Option<&'a Path>,
    cwd: Option<&'a Path>,
    stdin: Option<&'a [u8]>,
    extra_config: Vec<String>,
}

impl<'a> Call<'a> {
    fn new(sub: &'static str) -> Self {
        Call {
            sub,
            args: Vec::new(),
            git_dir: None,
            work_tree: None,
            index: None,
            cwd: None,
            stdin: None,
            extra_config: Vec::new(),
        }
    }

    fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    fn args<I, S>(mut self, items: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(items.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }
}

/// The isolated git environment. Cheap to share by reference.
pub struct Git {
    home: tempfile::TempDir,
    version: GitVersion,
}

impl Git {
    /// Finds git, checks its version once and prepares the scratch `HOME`.
    ///
    /// # Errors
    /// [`Error::GitMissing`] or [`Error::GitTooOld`].
    pub fn new() -> Result<Self> {
        let home = tempfile::Builder::new()
            .prefix("buzz-fork-home-")
            .tempdir()
            .map_err(|e| Error::io("creating a scratch HOME in", std::env::temp_dir(), e))?;
        let mut git = Git {
            home,
            version: MIN_VERSION,
        };
        let out = match git.exec(Call::new("version")) {
            Ok(out) => out,
            Err(Error::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::GitMissing {
                    need: MIN_VERSION_TEXT,
                });
            }
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let version = text
            .parse::<GitVersion>()
            .map_err(|detail| Error::GitOutput {
                cmd: "version".into(),
                detail,
            })?;
        if version < MIN_VERSION {
            return Err(Error::GitTooOld {
                found: version.to_string(),
                need: MIN_VERSION_TEXT,
            });
        }
        git.version = version;
        Ok(git)
    }

    /// The version found by [`Git::new`].
    #[must_use]
    pub fn version(&self) -> GitVersion {
        self.version
    }

    fn exec(&self, call: Call<'_>) -> Result<RawOutput> {
        let mut cmd = Command::new("git");
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", self.home.path())
            .env("LC_ALL", "C")
            .env("LANGUAGE", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat")
            .env("GIT_EDITOR", "true")
            .env("GIT_AUTHOR_NAME", IDENTITY_NAME)
            .env("GIT_AUTHOR_EMAIL", IDENTITY_EMAIL)
            .env("GIT_COMMITTER_NAME", IDENTITY_NAME)
            .env("GIT_COMMITTER_EMAIL", IDENTITY_EMAIL)
            .env("GIT_AUTHOR_DATE", FIXED_DATE)
            .env("GIT_COMMITTER_DATE", FIXED_DATE);
        for setting in FIXED_CONFIG {
            cmd.arg("-c").arg(setting);
        }
        for setting in &call.extra_config {
            cmd.arg("-c").arg(setting);
        }
        if let Some(dir) = call.git_dir {
            cmd.arg("--git-dir").arg(dir);
        }
        if let Some(dir) = call.work_tree {
            cmd.arg("--work-tree").arg(dir);
        }
        if let Some(index) = call.index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        if let Some(dir) = call.cwd {
            cmd.current_dir(dir);
        }
        cmd.arg(call.sub).args(&call.args);
        cmd.stdin(if call.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            program: "git".into(),
            source,
        })?;
        // Feed stdin from a scoped thread so a full pipe cannot deadlock.
        let output = std::thread::scope(|scope| {
            let feeder = match (call.stdin, child.stdin.take()) {
                (Some(bytes), Some(mut pipe)) => Some(scope.spawn(move || {
                    // A child that exits early closes the pipe; its exit code
                    // tells the real story, so a write error here is ignored.
                    let _ignored = pipe.write_all(bytes);
                })),
                _ => None,
            };
            let out = child.wait_with_output();
            if let Some(handle) = feeder {
                let _joined = handle.join();
            }
            out
        })
        .map_err(|source| Error::Spawn {
            program: format!("git {}", call.sub),
            source,
        })?;
        Ok(RawOutput {
            code: output.status.code(),
            stdout: output.stdout,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }

    /// Runs a call and requires exit code 0; returns stdout.
    fn exec_ok(&self, call: Call<'_>) -> Result<Vec<u8>> {
        let sub = call.sub;
        let out = self.exec(call)?;
        if out.code == Some(0) {
            Ok(out.stdout)
        } else {
            Err(failure(sub, &out))
        }
    }

    /// `git rev-parse --show-toplevel` from `dir`.
    ///
    /// # Errors
    /// When `dir` is not inside a git work tree.
    pub fn toplevel(&self, dir: &Path) -> Result<PathBuf> {
        let mut call = Call::new("rev-parse").arg("--show-toplevel");
        call.cwd = Some(dir);
        let out = self.exec_ok(call)?;
        Ok(PathBuf::from(text("rev-parse", out)?.trim()))
    }

    /// `git init` a fresh repository whose first branch is `series`.
    ///
    /// # Errors
    /// When git fails.
    pub fn init_repo(&self, dir: &Path) -> Result<Repo<'_>> {
        self.exec_ok(
            Call::new("init")
                .args(["-q", "--initial-branch=series"])
                .arg(dir),
        )?;
        Ok(self.open(dir))
    }

    /// A handle on an existing non-bare repository at `dir`.
    #[must_use]
    pub fn open(&self, dir: &Path) -> Repo<'_> {
        Repo {
            git: self,
            git_dir: dir.join(".git"),
            work_tree: dir.to_path_buf(),
        }
    }
}

fn failure(sub: &str, out: &RawOutput) -> Error {
    let stderr = if out.stderr.is_empty() {
        match out.code {
            Some(c) => format!("exited with code {c}"),
            None => "killed by a signal".to_owned(),
        }
    } else {
        // git's stderr can run to usage text and advice; the first
        // explaining line is the message, so errors stay on one line.
        crate::error::first_line(&out.stderr)
    };
    Error::Git {
        cmd: sub.to_owned(),
        stderr,
    }
}

fn text(cmd: &str, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| Error::GitOutput {
        cmd: cmd.to_owned(),
        detail: "output is not UTF-8".into(),
    })
}

/// Creates a scratch directory holding a not-yet-existing index file path.
fn temp_index() -> Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("buzz-fork-index-")
        .tempdir()
        .map_err(|e| Error::io("creating a temporary index in", std::env::temp_dir(), e))?;
    let path = dir.path().join("index");
    Ok((dir, path))
}

/// A repository (the work repo) with its work tree.
pub struct Repo<'g> {
    git: &'g Git,
    git_dir: PathBuf,
    work_tree: PathBuf,
}

impl Repo<'_> {
    /// The work tree directory.
    #[must_use]
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// Whether the repository exists on disk (its `.git` directory).
    #[must_use]
    pub fn exists(&self) -> bool {
        self.git_dir.join("HEAD").is_file()
    }

    /// Whether git can use the repository: `Ok(Err(reason))` when it
    /// cannot (a broken `HEAD`, missing object store, …).
    ///
    /// # Errors
    /// When git cannot be started.
    pub fn check_usable(&self) -> Result<Result<(), String>> {
        let out = self.git.exec(self.call("rev-parse").arg("--git-dir"))?;
        if out.code == Some(0) {
            Ok(Ok(()))
        } else {
            Ok(Err(crate::error::first_line(&out.stderr)))
        }
    }

    fn call(&self, sub: &'static str) -> Call<'_> {
        let mut call = Call::new(sub);
        call.git_dir = Some(&self.git_dir);
        call.work_tree = Some(&self.work_tree);
        call
    }

    /// Stages `dir` (honouring `.gitignore` files inside it, `excludes_file`
    /// if given, and the repository's `info/exclude`, which the work area
    /// keeps at `target/`) into a scratch index and writes its tree: the git
    /// tree id of the directory's content.
    ///
    /// # Errors
    /// When git fails.
    pub fn hash_directory(&self, dir: &Path, excludes_file: Option<&Path>) -> Result<Oid> {
        let (_guard, index) = temp_index()?;
        let mut add = Call::new("add").args(["-A", "--", "."]);
        add.git_dir = Some(&self.git_dir);
        add.work_tree = Some(dir);
        add.cwd = Some(dir);
        add.index = Some(&index);
        if let Some(file) = excludes_file {
            add.extra_config
                .push(format!("core.excludesFile={}", file.display()));
        }
        self.git.exec_ok(add)?;
        let mut write = self.call("write-tree");
        write.index = Some(&index);
        let out = self.git.exec_ok(write)?;
        Oid::parse("write-tree", &text("write-tree", out)?)
    }

    /// Writes a root tree that holds `tree` at `prefix` (e.g. `crates/buzz-acp`).
    ///
    /// # Errors
    /// When git fails.
    pub fn tree_at_prefix(&self, tree: &Oid, prefix: &str) -> Result<Oid> {
        let (_guard, index) = temp_index()?;
        let mut read = self
            .call("read-tree")
            .arg(format!("--prefix={}/", prefix.trim_end_matches('/')))
            .arg(tree.as_str());
        read.index = Some(&index);
        self.git.exec_ok(read)?;
        let mut write = self.call("write-tree");
        write.index = Some(&index);
        let out = self.git.exec_ok(write)?;
        Oid::parse("write-tree", &text("write-tree", out)?)
    }

    /// Writes a root tree from parts placed at repo-relative paths: whole
    /// trees (`read-tree --prefix`) and single blobs (`update-index
    /// --cacheinfo`), in a scratch index.
    ///
    /// # Errors
    /// When git fails.
    pub fn compose_tree(&self, parts: &[(String, TreePart)]) -> Result<Oid> {
        let (_guard, index) = temp_index()?;
        for (path, part) in parts {
            let mut call = match part {
                TreePart::Tree(tree) => self
                    .call("read-tree")
                    .arg(format!("--prefix={}/", path.trim_end_matches('/')))
                    .arg(tree.as_str()),
                TreePart::Blob { oid, executable } => self
                    .call("update-index")
                    .args(["--add", "--cacheinfo"])
                    .arg(format!(
                        "{},{oid},{path}",
                        if *executable { "100755" } else { "100644" }
                    )),
            };
            call.index = Some(&index);
            self.git.exec_ok(call)?;
        }
        let mut write = self.call("write-tree");
        write.index = Some(&index);
        let out = self.git.exec_ok(write)?;
        Oid::parse("write-tree", &text("write-tree", out)?)
    }

    /// `git hash-object -w`: stores a file's content as a blob.
    ///
    /// # Errors
    /// When git fails.
    pub fn hash_file(&self, file: &Path) -> Result<Oid> {
        let out = self.git.exec_ok(
            self.call("hash-object")
                .args(["-w", "--no-filters", "--"])
                .arg(file),
        )?;
        Oid::parse("hash-object", &text("hash-object", out)?)
    }

    /// `git commit-tree`: a commit with the fixed identity and date.
    ///
    /// # Errors
    /// When git fails.
    pub fn commit_tree(&self, tree: &Oid, parents: &[&Oid], message: &str) -> Result<Oid> {
        let mut call = self.call("commit-tree").arg(tree.as_str());
        for parent in parents {
            call = call.arg("-p").arg(parent.as_str());
        }
        call = call.args(["-F", "-"]);
        call.stdin = Some(message.as_bytes());
        let out = self.git.exec_ok(call)?;
        Oid::parse("commit-tree", &text("commit-tree", out)?)
    }

    /// `git apply --cached` of `patch` onto the tree of `base` in a scratch
    /// index. Needs exact context (no fuzz) but accepts shifted positions,
    /// like plain `git am`.
    ///
    /// # Errors
    /// When git fails for another reason than a rejected patch.
    pub fn apply_patch(
        &self,
        base: &Oid,
        patch: &Path,
        direction: Direction,
        mode: ApplyMode,
    ) -> Result<ApplyOutcome> {
        let (_guard, index) = temp_index()?;
        let mut read = self.call("read-tree").arg(base.as_str());
        read.index = Some(&index);
        self.git.exec_ok(read)?;
        let mut apply = self.call("apply").arg("--cached");
        if direction == Direction::Reverse {
            apply = apply.arg("--reverse");
        }
        if mode == ApplyMode::CheckOnly {
            apply = apply.arg("--check");
        }
        apply = apply.arg(patch);
        apply.index = Some(&index);
        apply.cwd = Some(&self.work_tree);
        let out = self.git.exec(apply)?;
        match out.code {
            Some(0) => {}
            Some(1) => return Ok(ApplyOutcome::Rejected(out.stderr)),
            _ => return Err(failure("apply", &out)),
        }
        let mut write = self.call("write-tree");
        write.index = Some(&index);
        let tree = self.git.exec_ok(write)?;
        Ok(ApplyOutcome::Applied(Oid::parse(
            "write-tree",
            &text("write-tree", tree)?,
        )?))
    }

    /// `git merge-tree --write-tree --merge-base=<base> <ours> <theirs>`: an
    /// in-memory cherry-pick of `theirs` (whose parent is `base`) onto `ours`.
    ///
    /// # Errors
    /// When git fails for another reason than a conflict.
    pub fn merge_tree(&self, base: &Oid, ours: &Oid, theirs: &Oid) -> Result<MergeOutcome> {
        let call = self
            .call("merge-tree")
            .args(["--write-tree", "-z", "--name-only", "--no-messages"])
            .arg(format!("--merge-base={base}"))
            .arg(ours.as_str())
            .arg(theirs.as_str());
        let out = self.git.exec(call)?;
        let stdout = text("merge-tree", out.stdout.clone())?;
        let mut fields = stdout.split('\0');
        let tree = fields.next().unwrap_or_default();
        match out.code {
            Some(0) => Ok(MergeOutcome::Clean(Oid::parse("merge-tree", tree)?)),
            Some(1) => {
                let mut files: Vec<String> = fields
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned)
                    .collect();
                files.sort();
                files.dedup();
                Ok(MergeOutcome::Conflicted(files))
            }
            _ => Err(failure("merge-tree", &out)),
        }
    }

    /// `git format-patch` of one commit with every setting pinned, so the
    /// output depends only on the commit.
    ///
    /// # Errors
    /// When git fails.
    pub fn format_patch(&self, commit: &Oid) -> Result<String> {
        let call = self
            .call("format-patch")
            .args([
                "--stdout",
                "--zero-commit",
                "--no-signature",
                "--full-index",
                "--keep-subject",
                "--no-stat",
                "--no-numbered",
                "--no-thread",
                "--no-to",
                "--no-cc",
                "--no-notes",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--binary",
                "--unified=3",
                "--diff-algorithm=myers",
                "--encode-email-headers",
                "-1",
            ])
            .arg(commit.as_str());
        text("format-patch", self.git.exec_ok(call)?)
    }

    /// `git diff-tree -p` between two commits, in the form `git apply` reads.
    ///
    /// # Errors
    /// When git fails.
    pub fn diff(&self, from: &Oid, to: &Oid) -> Result<String> {
        let out = self.git.exec_ok(
            self.call("diff-tree")
                .args([
                    "-p",
                    "--full-index",
                    "--binary",
                    "--no-renames",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--unified=3",
                ])
                .arg(from.as_str())
                .arg(to.as_str()),
        )?;
        text("diff-tree", out)
    }

    /// `git fetch <url> +<rev>:<into>` and the commit it fetched;
    /// `Ok(Err(reason))` when git cannot fetch (bad URL, unknown ref).
    ///
    /// # Errors
    /// When git cannot be started or prints something unreadable.
    pub fn fetch(&self, url: &str, rev: &str, into: &str) -> Result<Result<Oid, String>> {
        let out = self.git.exec(
            self.call("fetch")
                .args(["--quiet", "--no-tags", "--force", "--no-write-fetch-head"])
                .arg("--")
                .arg(url)
                .arg(format!("+{rev}:{into}")),
        )?;
        if out.code != Some(0) {
            return Ok(Err(crate::error::first_line(&out.stderr)));
        }
        match self.resolve(&format!("{into}^{{commit}}"))? {
            Some(oid) => Ok(Ok(oid)),
            None => Ok(Err(format!("{rev} is not a commit"))),
        }
    }

    /// `git range-diff` between two versions of the series.
    ///
    /// # Errors
    /// When git fails.
    pub fn range_diff(&self, old: (&Oid, &Oid), new: (&Oid, &Oid)) -> Result<String> {
        let call = self
            .call("range-diff")
            .args(["--no-color", "--no-notes"])
            .arg(format!("{}..{}", old.0, old.1))
            .arg(format!("{}..{}", new.0, new.1));
        text("range-diff", self.git.exec_ok(call)?)
    }

    /// Resolves a revision (`rev-parse --verify --quiet`); `None` when it does
    /// not exist.
    ///
    /// # Errors
    /// When git fails for another reason.
    pub fn resolve(&self, rev: &str) -> Result<Option<Oid>> {
        let out = self
            .git
            .exec(self.call("rev-parse").args(["--verify", "--quiet", rev]))?;
        match out.code {
            Some(0) => Ok(Some(Oid::parse(
                "rev-parse",
                &text("rev-parse", out.stdout)?,
            )?)),
            Some(1) => Ok(None),
            _ => Err(failure("rev-parse", &out)),
        }
    }

    /// The tree id of `path` inside `commit` (`None` when absent).
    ///
    /// # Errors
    /// When git fails.
    pub fn subtree(&self, commit: &Oid, path: &str) -> Result<Option<Oid>> {
        self.resolve(&format!("{commit}:{path}"))
    }

    /// `git update-ref` (creates or moves a ref).
    ///
    /// # Errors
    /// When git fails.
    pub fn set_ref(&self, name: &str, oid: &Oid, reason: &str) -> Result<()> {
        self.git.exec_ok(
            self.call("update-ref")
                .args(["-m", reason, name])
                .arg(oid.as_str()),
        )?;
        Ok(())
    }

    /// `git symbolic-ref -q HEAD`: the branch HEAD points at, `None` when detached.
    ///
    /// # Errors
    /// When git fails.
    pub fn head_branch(&self) -> Result<Option<String>> {
        let out = self
            .git
            .exec(self.call("symbolic-ref").args(["-q", "HEAD"]))?;
        match out.code {
            Some(0) => Ok(Some(text("symbolic-ref", out.stdout)?.trim().to_owned())),
            Some(1) => Ok(None),
            _ => Err(failure("symbolic-ref", &out)),
        }
    }

    /// `git symbolic-ref HEAD <branch>`.
    ///
    /// # Errors
    /// When git fails.
    pub fn point_head_at(&self, branch: &str) -> Result<()> {
        self.git
            .exec_ok(self.call("symbolic-ref").args(["HEAD", branch]))?;
        Ok(())
    }

    /// `git read-tree -u --reset <commit>`: makes index and work tree match
    /// `commit`, discarding local changes to tracked files.
    ///
    /// # Errors
    /// When git fails.
    pub fn reset_work_tree(&self, commit: &Oid) -> Result<()> {
        let mut call = self
            .call("read-tree")
            .args(["-u", "--reset"])
            .arg(commit.as_str());
        call.cwd = Some(&self.work_tree);
        self.git.exec_ok(call)?;
        Ok(())
    }

    /// `git status --porcelain -z`: changed and untracked paths of the work tree.
    ///
    /// # Errors
    /// When git fails.
    pub fn work_tree_changes(&self) -> Result<Vec<String>> {
        let mut call = self.call("status").args([
            "--porcelain=v1",
            "-z",
            "--no-renames",
            "--untracked-files=all",
            "--ignored=no",
        ]);
        call.cwd = Some(&self.work_tree);
        let out = text("status", self.git.exec_ok(call)?)?;
        Ok(out
            .split('\0')
            .filter(|e| e.len() > 3)
            .map(|e| e[3..].to_owned())
            .collect())
    }

    /// `git rev-list --reverse <base>..<tip>`: commits oldest first.
    ///
    /// # Errors
    /// When git fails.
    pub fn commits_between(&self, base: &Oid, tip: &Oid) -> Result<Vec<Oid>> {
        let out = self.git.exec_ok(
            self.call("rev-list")
                .args(["--reverse", "--topo-order"])
                .arg(format!("{base}..{tip}")),
        )?;
        text("rev-list", out)?
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| Oid::parse("rev-list", l))
            .collect()
    }

    /// `git cat-file commit`: tree, parents and message of a commit.
    ///
    /// # Errors
    /// When git fails or the object is not a commit.
    pub fn read_commit(&self, commit: &Oid) -> Result<CommitInfo> {
        let raw = text(
            "cat-file",
            self.git
                .exec_ok(self.call("cat-file").arg("commit").arg(commit.as_str()))?,
        )?;
        let (headers, message) = raw.split_once("\n\n").unwrap_or((raw.as_str(), ""));
        let mut tree = None;
        let mut parents = Vec::new();
        for line in headers.lines() {
            if let Some(t) = line.strip_prefix("tree ") {
                tree = Some(Oid::parse("cat-file", t)?);
            } else if let Some(p) = line.strip_prefix("parent ") {
                parents.push(Oid::parse("cat-file", p)?);
            }
        }
        let tree = tree.ok_or_else(|| Error::GitOutput {
            cmd: "cat-file".into(),
            detail: format!("commit {commit} has no tree header"),
        })?;
        Ok(CommitInfo {
            tree,
            parents,
            message: message.to_owned(),
        })
    }

    /// `git interpret-trailers --parse`: the values of trailer `key` in `message`.
    ///
    /// # Errors
    /// When git fails.
    pub fn trailer_values(&self, message: &str, key: &str) -> Result<Vec<String>> {
        let mut call = self
            .call("interpret-trailers")
            .args(["--parse", "--no-divider"]);
        call.stdin = Some(message.as_bytes());
        let out = text("interpret-trailers", self.git.exec_ok(call)?)?;
        Ok(out
            .lines()
            .filter_map(|line| {
                let (k, v) = line.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(key)
                    .then(|| v.trim().to_owned())
            })
            .collect())
    }

    /// The content of `path` in `commit` (`None` when absent).
    ///
    /// # Errors
    /// When git fails.
    pub fn read_file(&self, commit: &Oid, path: &str) -> Result<Option<Vec<u8>>> {
        let Some(blob) = self.resolve(&format!("{commit}:{path}"))? else {
            return Ok(None);
        };
        let out = self
            .git
            .exec_ok(self.call("cat-file").arg("blob").arg(blob.as_str()))?;
        Ok(Some(out))
    }

    /// `git diff-tree -r --name-only`: paths that differ between two commits.
    ///
    /// # Errors
    /// When git fails.
    pub fn changed_paths(&self, from: &Oid, to: &Oid) -> Result<Vec<String>> {
        let out = self.git.exec_ok(
            self.call("diff-tree")
                .args(["-r", "-z", "--name-only", "--no-renames", "--no-commit-id"])
                .arg(from.as_str())
                .arg(to.as_str()),
        )?;
        Ok(text("diff-tree", out)?
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// Writes every file of `commit` into `dir` (`read-tree` into a scratch
    /// index, then `checkout-index -a`).
    ///
    /// # Errors
    /// When git fails.
    pub fn export_tree(&self, commit: &Oid, dir: &Path) -> Result<()> {
        let (_guard, index) = temp_index()?;
        let mut read = self.call("read-tree").arg(commit.as_str());
        read.index = Some(&index);
        self.git.exec_ok(read)?;
        let mut checkout = Call::new("checkout-index").args(["-a", "-f"]);
        checkout.git_dir = Some(&self.git_dir);
        checkout.work_tree = Some(dir);
        checkout.cwd = Some(dir);
        checkout.index = Some(&index);
        self.git.exec_ok(checkout)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_good_versions() {
        let cases = [
            ("git version 2.47.3", (2, 47, 3)),
            ("git version 2.38.0\n", (2, 38, 0)),
            ("git version 2.39.2 (Apple Git-143)", (2, 39, 2)),
            ("git version 2.45.1.windows.1", (2, 45, 1)),
            ("git version 3.0", (3, 0, 0)),
        ];
        for (line, (major, minor, patch)) in cases {
            let v: GitVersion = line.parse().unwrap();
            assert_eq!(
                v,
                GitVersion {
                    major,
                    minor,
                    patch
                },
                "{line}"
            );
        }
    }

    #[test]
    fn parse_bad_versions() {
        for line in ["", "version 2.47", "git version x.y"] {
            assert!(line.parse::<GitVersion>().is_err(), "{line}");
        }
    }

    #[test]
    fn version_comparisons() {
        let v = |s: &str| s.parse::<GitVersion>().unwrap();
        assert!(v("git version 2.37.9") < MIN_VERSION);
        assert!(v("git version 2.38.0") >= MIN_VERSION);
        assert!(v("git version 2.47.3") > MIN_VERSION);
    }

    #[test]
    fn oid_validation() {
        assert!(Oid::parse("t", &"a".repeat(40)).is_ok());
        assert!(Oid::parse("t", "abc").is_err());
        assert!(Oid::parse("t", &"z".repeat(40)).is_err());
    }
}
