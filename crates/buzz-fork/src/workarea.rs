//! The work area `target/fork-work/`: the scratch git repository holding the
//! pristine upstream and the series as commits, and the state record.
//!
//! Layout:
//! * `repo/` – branch `upstream` (one commit, the baseline at its path; also
//!   `refs/fork/upstream-head`), branch `series` (one commit per active patch,
//!   checked out so a maintainer can edit), `refs/fork/last-applied` (the
//!   series tip the tool last wrote, to tell tool output from human work).
//! * `state.json` – a hint: base tree, per-patch sha256 and commit, result
//!   tree, patched-tree stamp. Rebuilt from scratch when missing, corrupt or stale.
//! * `tree/` – the default patched tree (`verify` also writes its prefix and
//!   mutant trees here, one after the other, and restores the full tree);
//!   `sync/` – default location of sync reports.
//!
//! Every commit the tool writes is deterministic (fixed identity and date,
//! message rendered from the registry), so the same registry and patch files
//! always produce the same commit ids.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::git::{ApplyMode, ApplyOutcome, Direction, Git, Oid, Repo, TreePart};
use crate::patchfile;
use crate::registry::{PatchEntry, PatchId, Registry};

/// Ref of the pristine upstream commit.
pub const UPSTREAM_HEAD_REF: &str = "refs/fork/upstream-head";
/// Branch of the pristine upstream line.
pub const UPSTREAM_BRANCH: &str = "refs/heads/upstream";
/// Branch of the series.
pub const SERIES_BRANCH: &str = "refs/heads/series";
/// The series tip the tool last wrote.
pub const LAST_APPLIED_REF: &str = "refs/fork/last-applied";
/// New upstream imported by the last sync.
pub const SYNC_UPSTREAM_REF: &str = "refs/fork/sync/upstream";
/// Series re-applied by the last sync.
pub const SYNC_SERIES_REF: &str = "refs/fork/sync/series";
/// `info/exclude` of the work repo.
const EXCLUDES: &str = "target/\n";
/// Version of `state.json`.
const STATE_VERSION: u32 = 1;

/// Paths of the work area under a repository root.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Repository root.
    pub root: PathBuf,
    /// `target/fork-work`.
    pub work: PathBuf,
    /// Cargo's target directory for patched trees (`<root>/target`).
    pub target: PathBuf,
}

impl Layout {
    /// The layout under `root`.
    #[must_use]
    pub fn new(root: &Path) -> Self {
        Layout {
            root: root.to_path_buf(),
            work: root.join("target").join("fork-work"),
            target: root.join("target"),
        }
    }

    /// The fork-CI area (`target/fork-work/ci`): the fetched upstream, the
    /// candidate copy of the repository and its cargo target directory.
    #[must_use]
    pub fn ci_dir(&self) -> PathBuf {
        self.work.join("ci")
    }

    /// The scratch repository.
    #[must_use]
    pub fn repo(&self) -> PathBuf {
        self.work.join("repo")
    }

    /// The state record.
    #[must_use]
    pub fn state(&self) -> PathBuf {
        self.work.join("state.json")
    }

    /// Default patched tree.
    #[must_use]
    pub fn tree(&self) -> PathBuf {
        self.work.join("tree")
    }

    /// Default directory of sync reports.
    #[must_use]
    pub fn sync_dir(&self) -> PathBuf {
        self.work.join("sync")
    }

    /// Cargo's target directory (shared with the root workspace, except
    /// for a fork-CI candidate, which has its own).
    #[must_use]
    pub fn target_dir(&self) -> PathBuf {
        self.target.clone()
    }

    /// The baseline directory.
    #[must_use]
    pub fn baseline(&self, registry: &Registry) -> PathBuf {
        self.root.join(&registry.upstream.path)
    }
}

/// Opens the work repository, creating it when missing.
///
/// # Errors
/// [`Error::WorkRepoCorrupt`] when the repository exists but git cannot use
/// it; git or I/O failures.
pub fn ensure_repo<'g>(git: &'g Git, layout: &Layout) -> Result<Repo<'g>> {
    ensure_repo_with(git, layout, Corrupt::Refuse)
}

/// What to do with a work repository that git cannot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corrupt {
    /// Stop with [`Error::WorkRepoCorrupt`] (it may hold someone's work).
    Refuse,
    /// Delete it and start a fresh one (`apply --force`).
    Rebuild,
}

/// Opens the work repository, creating it when missing; a repository git
/// cannot use is refused or rebuilt as `corrupt` says.
///
/// # Errors
/// As [`ensure_repo`].
pub fn ensure_repo_with<'g>(git: &'g Git, layout: &Layout, corrupt: Corrupt) -> Result<Repo<'g>> {
    let dir = layout.repo();
    let mut repo = git.open(&dir);
    if repo.exists()
        && let Err(detail) = repo.check_usable()?
    {
        if corrupt == Corrupt::Refuse {
            return Err(Error::WorkRepoCorrupt { repo: dir, detail });
        }
        crate::ui::warn(&format!(
            "deleting the unusable work repo {} (--force): {detail}",
            dir.display()
        ));
        crate::fsutil::remove_dir_if_present(&dir)?;
    }
    if !repo.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        repo = git.init_repo(&dir)?;
    }
    // Build directories are never part of a hashed or committed tree.
    let exclude = dir.join(".git").join("info").join("exclude");
    if crate::fsutil::read_optional(&exclude)?.as_deref() != Some(EXCLUDES) {
        crate::fsutil::write_atomic(&exclude, EXCLUDES.as_bytes())?;
    }
    Ok(repo)
}

/// Opens the work repository, which must exist and be usable.
///
/// # Errors
/// [`Error::NoWorkRepo`], [`Error::WorkRepoCorrupt`].
pub fn open_repo<'g>(git: &'g Git, layout: &Layout) -> Result<Repo<'g>> {
    let repo = git.open(&layout.repo());
    if !repo.exists() {
        return Err(Error::NoWorkRepo {
            repo: layout.repo(),
        });
    }
    if let Err(detail) = repo.check_usable()? {
        return Err(Error::WorkRepoCorrupt {
            repo: layout.repo(),
            detail,
        });
    }
    Ok(repo)
}

/// An exclusive lock on a work area, held for the whole of one command.
///
/// Two commands that share `target/fork-work/` (two `apply`, an `apply`
/// during a `verify`, …) would otherwise race on the work repo's index and
/// refs. The second one waits: it prints one line naming the holder, then
/// continues as soon as the first one ends. The lock is an OS file lock
/// (`flock`), so a crashed holder never leaves it behind.
#[derive(Debug)]
pub struct WorkAreaLock {
    _file: std::fs::File,
}

/// Name of the lock file inside the work area.
pub const LOCK_FILE: &str = "lock";

/// Takes the work-area lock for `command`, waiting for a current holder.
///
/// # Errors
/// When the lock file cannot be created or locked.
pub fn lock_work_area(layout: &Layout, command: &str) -> Result<WorkAreaLock> {
    use std::io::Write as _;
    std::fs::create_dir_all(&layout.work).map_err(|e| Error::io("creating", &layout.work, e))?;
    let path = layout.work.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("opening", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            crate::ui::note(&format!(
                "waiting for the work area {} ({}) …",
                layout.work.display(),
                if holder.is_empty() {
                    "held by another scripts/fork"
                } else {
                    holder
                }
            ));
            file.lock().map_err(|e| Error::io("locking", &path, e))?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("locking", &path, e)),
    }
    let record = format!(
        "held by pid {} running `scripts/fork {command}`\n",
        std::process::id()
    );
    file.set_len(0)
        .and_then(|()| file.write_all(record.as_bytes()))
        .and_then(|()| file.flush())
        .map_err(|e| Error::io("writing", &path, e))?;
    Ok(WorkAreaLock { _file: file })
}

/// The git tree id of a crate directory's content (`target/` excluded, the
/// root `.gitignore` honoured).
///
/// # Errors
/// [`Error::BaselineMissing`] when `dir` is not a directory.
pub fn directory_tree(repo: &Repo<'_>, layout: &Layout, dir: &Path) -> Result<Oid> {
    if !dir.is_dir() {
        return Err(Error::BaselineMissing {
            path: dir.to_path_buf(),
        });
    }
    let gitignore = layout.root.join(".gitignore");
    let excludes = gitignore.is_file().then_some(gitignore.as_path());
    repo.hash_directory(dir, excludes)
}

/// Short description of the baseline for messages: its path, plus the
/// number of further baseline paths.
#[must_use]
pub fn baseline_label(registry: &Registry) -> String {
    match registry.upstream.baseline_paths.len() {
        0 => registry.upstream.path.clone(),
        n => format!("{} (+{n} baseline path(s))", registry.upstream.path),
    }
}

/// Where a baseline is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineSource<'a> {
    /// This repository: every path at its local location under the root.
    Local(&'a Path),
    /// An upstream checkout root: every path at its upstream location.
    Checkout(&'a Path),
    /// The crate directory on its own (single-crate baselines only).
    CrateDir(&'a Path),
}

/// The registered form of a baseline's tree id (`upstream.tree`): the crate
/// directory's tree for a single-crate baseline, else the root tree holding
/// every baseline path at its local location.
///
/// # Errors
/// [`Error::BaselineMissing`] for a missing path; git failures.
pub fn baseline_tree_from(
    repo: &Repo<'_>,
    layout: &Layout,
    registry: &Registry,
    source: BaselineSource<'_>,
) -> Result<Oid> {
    let upstream = &registry.upstream;
    if upstream.baseline_paths.is_empty() {
        let dir = match source {
            BaselineSource::Local(root) | BaselineSource::Checkout(root) => {
                root.join(&upstream.path)
            }
            BaselineSource::CrateDir(dir) => dir.to_path_buf(),
        };
        return directory_tree(repo, layout, &dir);
    }
    let mut parts = Vec::new();
    for (local, remote) in upstream.all_paths() {
        let at = match source {
            BaselineSource::Local(root) => root.join(&local),
            BaselineSource::Checkout(root) | BaselineSource::CrateDir(root) => root.join(&remote),
        };
        let part = if at.is_dir() {
            TreePart::Tree(directory_tree(repo, layout, &at)?)
        } else if at.is_file() {
            TreePart::Blob {
                oid: repo.hash_file(&at)?,
                executable: is_executable(&at),
            }
        } else {
            return Err(Error::BaselineMissing { path: at });
        };
        parts.push((local, part));
    }
    repo.compose_tree(&parts)
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(_path: &Path) -> bool {
    false
}

/// The tree id of this repository's baseline, comparable with `upstream.tree`.
///
/// # Errors
/// As [`baseline_tree_from`].
pub fn baseline_tree(repo: &Repo<'_>, layout: &Layout, registry: &Registry) -> Result<Oid> {
    baseline_tree_from(repo, layout, registry, BaselineSource::Local(&layout.root))
}

/// The commit holding `tree` (a baseline tree, see [`baseline_tree_from`]) at
/// its paths.
///
/// # Errors
/// When git fails.
pub fn upstream_commit(
    repo: &Repo<'_>,
    registry: &Registry,
    tree: &Oid,
    parent: Option<&Oid>,
    version: &str,
) -> Result<Oid> {
    let root_tree = if registry.upstream.baseline_paths.is_empty() {
        repo.tree_at_prefix(tree, &registry.upstream.path)?
    } else {
        tree.clone()
    };
    let message = format!("upstream: {} {}\n", registry.upstream.crate_name, version);
    let parents: Vec<&Oid> = parent.into_iter().collect();
    repo.commit_tree(&root_tree, &parents, &message)
}

/// One commit of a built series.
#[derive(Debug, Clone)]
pub struct SeriesCommit {
    /// Patch id.
    pub id: PatchId,
    /// sha256 of the patch file.
    pub sha256: String,
    /// The commit.
    pub commit: Oid,
}

/// A built series on top of an upstream commit.
#[derive(Debug, Clone)]
pub struct Series {
    /// The upstream commit.
    pub base: Oid,
    /// The baseline directory tree.
    pub base_tree: Oid,
    /// One commit per patch, in order.
    pub commits: Vec<SeriesCommit>,
}

impl Series {
    /// The last commit (or the base for an empty series).
    #[must_use]
    pub fn tip(&self) -> &Oid {
        self.commits.last().map_or(&self.base, |c| &c.commit)
    }

    /// The commit after the first `n` patches.
    #[must_use]
    pub fn prefix_tip(&self, n: usize) -> &Oid {
        if n == 0 {
            &self.base
        } else {
            &self.commits[n - 1].commit
        }
    }
}

/// sha256 of bytes, hex.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Reads a registered patch file.
///
/// # Errors
/// [`Error::PatchMissing`].
pub fn read_patch_file(root: &Path, entry: &PatchEntry) -> Result<(PathBuf, Vec<u8>)> {
    let path = root.join(&entry.file);
    match std::fs::read(&path) {
        Ok(bytes) => Ok((path, bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::PatchMissing {
            id: entry.id.to_string(),
            file: entry.file.clone(),
        }),
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

/// Builds (as objects only; no ref moves) the series of `patches` on top of
/// `base`. Each commit's message is rendered from the registry. A commit
/// recorded in `hint` for the same base and identical patch bytes is reused.
///
/// # Errors
/// [`Error::PatchDoesNotApply`], [`Error::PatchMissing`], git failures.
pub fn build_series(
    repo: &Repo<'_>,
    root: &Path,
    base: &Oid,
    base_tree: &Oid,
    patches: &[&PatchEntry],
    hint: Option<&State>,
) -> Result<Series> {
    let mut commits: Vec<SeriesCommit> = Vec::new();
    let mut parent = base.clone();
    let mut hint_valid = hint.is_some_and(|h| h.base_tree == base_tree.as_str());
    for (i, entry) in patches.iter().enumerate() {
        let (path, bytes) = read_patch_file(root, entry)?;
        patchfile::parse(&String::from_utf8_lossy(&bytes)).map_err(|message| {
            Error::PatchParse {
                id: entry.id.to_string(),
                file: entry.file.clone(),
                message,
            }
        })?;
        let sha = sha256_hex(&bytes);
        let hinted = hint
            .filter(|_| hint_valid)
            .and_then(|h| h.patches.get(i))
            .filter(|p| p.id == entry.id.as_str() && p.sha256 == sha);
        let reused = match hinted {
            Some(p) => {
                let candidate = repo.resolve(&format!("{}^{{commit}}", p.commit))?;
                match candidate {
                    Some(c) if repo.read_commit(&c)?.parents == [parent.clone()] => Some(c),
                    _ => None,
                }
            }
            None => None,
        };
        let commit = match reused {
            Some(c) => c,
            None => {
                hint_valid = false;
                let tree = match repo.apply_patch(
                    &parent,
                    &path,
                    Direction::Forward,
                    ApplyMode::Write,
                )? {
                    ApplyOutcome::Applied(tree) => tree,
                    ApplyOutcome::Rejected(detail) => {
                        return Err(Error::PatchDoesNotApply {
                            id: entry.id.to_string(),
                            detail: format!(
                                "{} (run `scripts/fork check` for a per-hunk report, or `scripts/fork sync` after an upstream change)",
                                crate::error::first_line(&detail)
                            ),
                        });
                    }
                };
                repo.commit_tree(&tree, &[&parent], &patchfile::render_message(entry))?
            }
        };
        commits.push(SeriesCommit {
            id: entry.id.clone(),
            sha256: sha,
            commit: commit.clone(),
        });
        parent = commit;
    }
    Ok(Series {
        base: base.clone(),
        base_tree: base_tree.clone(),
        commits,
    })
}

/// Builds the registered active series on the current baseline.
///
/// # Errors
/// As [`build_series`], plus a missing baseline.
pub fn build_active_series(
    repo: &Repo<'_>,
    layout: &Layout,
    registry: &Registry,
    hint: Option<&State>,
) -> Result<Series> {
    let base_tree = baseline_tree(repo, layout, registry)?;
    let base = upstream_commit(repo, registry, &base_tree, None, &registry.upstream.version)?;
    let active: Vec<&PatchEntry> = registry.active().collect();
    build_series(repo, &layout.root, &base, &base_tree, &active, hint)
}

/// Whether the work repo holds human work that moving `series` would lose.
/// Returns the reason, or `None` when it is safe.
///
/// # Errors
/// When git fails.
pub fn unsaved_work(repo: &Repo<'_>, expected_tip: &Oid) -> Result<Option<String>> {
    let series = repo.resolve(SERIES_BRANCH)?;
    let last = repo.resolve(LAST_APPLIED_REF)?;
    if let Some(current) = &series
        && current != expected_tip
        && Some(current) != last.as_ref()
    {
        let since = last.as_ref().unwrap_or(expected_tip);
        let extra = repo.commits_between(since, current).map_or(0, |c| c.len());
        return Ok(Some(format!(
            "branch `series` is at {} which the registered patches do not produce ({extra} commit(s) since the last apply); \
             export them with `scripts/fork refresh`, or discard them with `apply --force`",
            current.short()
        )));
    }
    match repo.head_branch()? {
        Some(b) if b == SERIES_BRANCH => {}
        Some(b) => {
            return Ok(Some(format!(
                "HEAD is on `{b}`, not `series`; switch back (git checkout series) or use --force"
            )));
        }
        None => {
            return Ok(Some(
                "HEAD is detached; switch back to `series` (git checkout series) or use --force"
                    .into(),
            ));
        }
    }
    let changes = repo.work_tree_changes()?;
    if !changes.is_empty() {
        let shown: Vec<&str> = changes.iter().take(5).map(String::as_str).collect();
        return Ok(Some(format!(
            "uncommitted changes ({}{}); commit them with a `Fork-Patch-Id:` trailer and run refresh, or use --force",
            shown.join(", "),
            if changes.len() > 5 { ", …" } else { "" }
        )));
    }
    Ok(None)
}

/// Points `upstream`, `refs/fork/upstream-head`, `series` and
/// `refs/fork/last-applied` at a freshly built series and checks it out.
///
/// # Errors
/// When git fails.
pub fn install_series(repo: &Repo<'_>, series: &Series) -> Result<()> {
    repo.set_ref(UPSTREAM_BRANCH, &series.base, "fork: upstream")?;
    repo.set_ref(UPSTREAM_HEAD_REF, &series.base, "fork: upstream head")?;
    repo.set_ref(SERIES_BRANCH, series.tip(), "fork: series")?;
    repo.set_ref(LAST_APPLIED_REF, series.tip(), "fork: last applied")?;
    repo.point_head_at(SERIES_BRANCH)?;
    repo.reset_work_tree(series.tip())?;
    Ok(())
}

/// The state record (a hint only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Always 1.
    pub format_version: u32,
    /// Baseline directory tree the series was built on.
    pub base_tree: String,
    /// Upstream commit in the work repo.
    pub upstream_commit: String,
    /// Per patch: id, sha256 of the file, commit.
    pub patches: Vec<StatePatch>,
    /// Tip of the series.
    pub series_tip: String,
    /// Tree id of the patched crate directory.
    pub result_tree: String,
    /// The last patched tree written.
    pub tree: Option<TreeStamp>,
}

/// One patch in the state record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatePatch {
    /// Patch id.
    pub id: String,
    /// sha256 of the patch file.
    pub sha256: String,
    /// Commit in the work repo.
    pub commit: String,
}

/// Identifies a written patched tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeStamp {
    /// Directory (as given).
    pub dir: String,
    /// Digest of everything the tree was generated from.
    pub stamp: String,
}

impl State {
    /// Reads the state record; `None` when missing, corrupt or of another version.
    #[must_use]
    pub fn load(layout: &Layout) -> Option<State> {
        let text = std::fs::read_to_string(layout.state()).ok()?;
        let state: State = serde_json::from_str(&text).ok()?;
        (state.format_version == STATE_VERSION).then_some(state)
    }

    /// Builds the record for a series.
    #[must_use]
    pub fn for_series(series: &Series, result_tree: &Oid, tree: Option<TreeStamp>) -> State {
        State {
            format_version: STATE_VERSION,
            base_tree: series.base_tree.to_string(),
            upstream_commit: series.base.to_string(),
            patches: series
                .commits
                .iter()
                .map(|c| StatePatch {
                    id: c.id.to_string(),
                    sha256: c.sha256.clone(),
                    commit: c.commit.to_string(),
                })
                .collect(),
            series_tip: series.tip().to_string(),
            result_tree: result_tree.to_string(),
            tree,
        }
    }

    /// Writes the record atomically.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn save(&self, layout: &Layout) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| Error::JsonMalformed {
            what: "state record",
            path: layout.state(),
            message: e.to_string(),
        })?;
        text.push('\n');
        crate::fsutil::write_atomic(&layout.state(), text.as_bytes())
    }
}
