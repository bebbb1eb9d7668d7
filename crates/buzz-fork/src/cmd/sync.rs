//! `sync`: re-target the series onto a new upstream tree.
//!
//! The new upstream is imported as a commit on the work repo's upstream line
//! (`refs/fork/sync/upstream`, child of the current baseline commit). Each
//! active patch is then classified, in order, on top of the new base plus
//! the patches already re-applied:
//!
//! * `already-upstream` – the reverse of the patch applies (`git apply -R --check`);
//! * `exact` – applies with exact context at the stated lines;
//! * `offset` – applies only at shifted lines (never with fuzz);
//! * `merged` – needs a 3-way merge (`git merge-tree --write-tree`, an
//!   in-memory cherry-pick of the old patch commit), or was resolved by a
//!   maintainer in the work repo;
//! * `conflict` – the 3-way merge conflicts (patch, files and hunks named);
//! * `empty` – applies but changes nothing;
//! * `guard-failed` – applies, but its required symbols or seams are gone.
//!
//! A JSON report, a Markdown summary and a `git range-diff` of the old and
//! new series are written. Nothing in the repository changes unless
//! `--write` is given and nothing blocks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::classify::SyncStatus;
use crate::classify::{self, Decision, Facts, Forward, Leaves};
use crate::cli::SyncArgs;
use crate::cmd::refresh;
use crate::context::{Context, Outcome};
use crate::error::{Error, Result};
use crate::exact::{HunkFit, Overlay, Strictness, locate, split_lines};
use crate::fsutil::{self, StagedDir};
use crate::git::{ApplyMode, ApplyOutcome, Direction, MergeOutcome, Oid, Repo};
use crate::guards;
use crate::patchfile::content_path;
use crate::patchfile::{self, ParsedPatch};
use crate::registry::{PATCH_ID_TRAILER, PatchEntry, PatchId, Registry, Retired, Status};
use crate::ui::{self, Table};
use crate::workarea::{self, BaselineSource, SERIES_BRANCH, SYNC_SERIES_REF, SYNC_UPSTREAM_REF};

/// Overall sync state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncResult {
    /// Nothing blocks; `--write` may adopt the new upstream.
    Ready,
    /// A conflict or failed guard blocks the sync.
    Blocked,
    /// The new upstream tree equals the baseline.
    NoUpdate,
}

impl SyncResult {
    /// Report spelling (the JSON spelling too).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SyncResult::Ready => "ready",
            SyncResult::Blocked => "blocked",
            SyncResult::NoUpdate => "no_update",
        }
    }
}

/// Old and new baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamReport {
    /// `owner/name`.
    pub repository: String,
    /// Crate name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Baseline path.
    pub path: String,
    /// Registered version.
    pub old_version: String,
    /// `--version`, if given.
    pub new_version: Option<String>,
    /// Registered baseline tree.
    pub old_tree: String,
    /// New upstream tree.
    pub new_tree: String,
}

/// One patch in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchReport {
    /// Patch id.
    pub id: String,
    /// Classification.
    pub status: SyncStatus,
    /// Files concerned (conflicted files for a conflict, else touched files).
    pub files: Vec<String>,
    /// Hunks concerned (failing hunks of a conflict, shifted hunks of an offset).
    pub hunks: Vec<String>,
    /// Explanation.
    pub detail: Option<String>,
}

/// The sync report (deterministic: no times, no absolute paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncReport {
    /// Old and new baseline.
    pub upstream: UpstreamReport,
    /// Every active patch, in order.
    pub patches: Vec<PatchReport>,
    /// Overall state.
    pub result: SyncResult,
}

/// A computed sync, before anything is written to the repository.
pub struct SyncRun {
    /// The report.
    pub report: SyncReport,
    /// `git range-diff` of the old and new series.
    pub range_diff: String,
    /// New upstream baseline commit (in the work repo).
    pub new_base: Oid,
    /// New baseline directory tree.
    pub new_tree: Oid,
    /// Re-applied patches (id, resulting tree), in order.
    pub stack: Vec<(PatchId, Oid)>,
}

/// Where the new upstream's baseline is, validated before anything is
/// imported.
#[derive(Debug, Clone)]
pub enum UpstreamDir {
    /// A checkout root holding every baseline path at its upstream location.
    Checkout(PathBuf),
    /// The crate directory on its own (single-crate baselines only).
    CrateDir(PathBuf),
}

impl UpstreamDir {
    fn source(&self) -> BaselineSource<'_> {
        match self {
            UpstreamDir::Checkout(p) => BaselineSource::Checkout(p),
            UpstreamDir::CrateDir(p) => BaselineSource::CrateDir(p),
        }
    }
}

/// The package name a `Cargo.toml` declares.
pub(crate) fn package_name(manifest: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        format!(
            "{} does not parse: {}",
            manifest.display(),
            crate::error::first_line(&e.to_string())
        )
    })?;
    Ok(table
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .map(str::to_owned))
}

/// Finds and validates the new upstream in `dir`: the crate (by its
/// package name) and, for a workspace baseline, every baseline path.
///
/// # Errors
/// [`Error::UpstreamInvalid`] naming what is missing.
pub fn upstream_dir(dir: &Path, registry: &Registry) -> Result<UpstreamDir> {
    let up = &registry.upstream;
    let invalid = |detail: String| Error::UpstreamInvalid {
        dir: dir.to_path_buf(),
        detail,
    };
    if !dir.is_dir() {
        return Err(invalid("is not a directory".into()));
    }
    let nested = dir.join(&up.path).join("Cargo.toml");
    let (found, manifest) = if nested.is_file() {
        (UpstreamDir::Checkout(dir.to_path_buf()), nested)
    } else if up.baseline_paths.is_empty() && dir.join("Cargo.toml").is_file() {
        (
            UpstreamDir::CrateDir(dir.to_path_buf()),
            dir.join("Cargo.toml"),
        )
    } else {
        return Err(invalid(format!(
            "does not contain the crate `{}`: no {}/Cargo.toml{}",
            up.crate_name,
            up.path,
            if up.baseline_paths.is_empty() {
                " and no Cargo.toml of the crate itself"
            } else {
                " (a workspace baseline needs the checkout root)"
            }
        )));
    };
    match package_name(&manifest) {
        Ok(Some(name)) if name == up.crate_name => {}
        Ok(Some(name)) => {
            return Err(invalid(format!(
                "{} is package `{name}`, not `{}`",
                manifest.display(),
                up.crate_name
            )));
        }
        Ok(None) => {
            return Err(invalid(format!(
                "{} has no [package] (expected the crate `{}`)",
                manifest.display(),
                up.crate_name
            )));
        }
        Err(e) => return Err(invalid(e)),
    }
    for (i, b) in up.baseline_paths.iter().enumerate() {
        if !dir.join(b.upstream_path()).exists() {
            return Err(invalid(format!(
                "does not contain {} (upstream.baseline_paths[{i}])",
                b.upstream_path()
            )));
        }
    }
    Ok(found)
}

/// `git range-diff` of the old and new series; an empty side (everything
/// upstream, or the first patch blocked) is described instead, since git
/// needs two non-empty ranges.
fn series_range_diff(repo: &Repo<'_>, old: (&Oid, &Oid), new: (&Oid, &Oid)) -> Result<String> {
    let describe = |base: &Oid, tip: &Oid| -> Result<String> {
        let mut out = String::new();
        for (i, c) in repo.commits_between(base, tip)?.iter().enumerate() {
            let info = repo.read_commit(c)?;
            let subject = info.message.lines().next().unwrap_or_default().to_owned();
            let _ = writeln!(out, "{}:  {} {subject}", i + 1, c.short());
        }
        Ok(out)
    };
    match (old.0 == old.1, new.0 == new.1) {
        (true, true) => Ok("Both the old and the new series are empty.\n".to_owned()),
        (false, true) => Ok(format!(
            "The new series is empty: no patch was re-applied on the new upstream \
             (every patch is already upstream, empty or blocked; see the report).\n\n\
             Old series:\n{}",
            describe(old.0, old.1)?
        )),
        (true, false) => Ok(format!(
            "The old series is empty.\n\nNew series:\n{}",
            describe(new.0, new.1)?
        )),
        (false, false) => repo.range_diff(old, new),
    }
}

/// Commits of the maintainer's `series` branch (by patch id) when that branch
/// sits on a base whose tree equals `new_base`'s: a resolution made in the
/// work repo after an earlier blocked sync.
fn resolutions(repo: &Repo<'_>, new_base: &Oid) -> Result<BTreeMap<String, (Oid, Oid)>> {
    let mut out = BTreeMap::new();
    let Some(mut cur) = repo.resolve(SERIES_BRANCH)? else {
        return Ok(out);
    };
    let mut found = Vec::new();
    loop {
        let info = repo.read_commit(&cur)?;
        let ids = repo.trailer_values(&info.message, PATCH_ID_TRAILER)?;
        match (ids.as_slice(), info.parents.as_slice()) {
            ([id], [parent]) => {
                found.push((id.clone(), cur.clone(), parent.clone()));
                cur = parent.clone();
            }
            _ => break,
        }
    }
    if repo.read_commit(&cur)?.tree == repo.read_commit(new_base)?.tree {
        for (id, commit, parent) in found {
            out.insert(id, (commit, parent));
        }
    }
    Ok(out)
}

/// In-process fit of every hunk against the files of `commit`.
fn hunk_fits(
    repo: &Repo<'_>,
    commit: &Oid,
    parsed: &ParsedPatch,
) -> Result<Vec<(String, usize, String, HunkFit)>> {
    let mut out = Vec::new();
    for file in &parsed.files {
        let content = repo
            .read_file(commit, &file.path)?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        for (i, h) in file.hunks.iter().enumerate() {
            let fit = match &content {
                Some(c) => locate(&split_lines(c), h).0,
                None => HunkFit::Missing,
            };
            out.push((file.path.clone(), i + 1, h.header(), fit));
        }
    }
    Ok(out)
}

/// Whether upstream took patch `i` together with later patches that edit
/// its lines (so neither its own reverse nor its forward form fits): the
/// smallest `j > i` whose combined change `i..=j` reverse-applies to `head`.
fn upstream_with_later(
    repo: &Repo<'_>,
    old: &workarea::Series,
    i: usize,
    head: &Oid,
) -> Result<Option<usize>> {
    for j in i + 1..old.commits.len() {
        let diff = repo.diff(old.prefix_tip(i), &old.commits[j].commit)?;
        let file = tempfile::Builder::new()
            .prefix("buzz-fork-combined-")
            .suffix(".patch")
            .tempfile()
            .map_err(|e| Error::io("creating a temporary file in", std::env::temp_dir(), e))?;
        std::fs::write(file.path(), diff.as_bytes())
            .map_err(|e| Error::io("writing", file.path(), e))?;
        if let ApplyOutcome::Applied(_) =
            repo.apply_patch(head, file.path(), Direction::Reverse, ApplyMode::CheckOnly)?
        {
            return Ok(Some(j));
        }
    }
    Ok(None)
}

/// Whether every hunk fits exactly (file creation and deletion included).
fn fits_exactly(repo: &Repo<'_>, commit: &Oid, parsed: &ParsedPatch) -> Result<bool> {
    let reader: crate::exact::BaseReader<'_> = Box::new(move |path: &str| {
        Ok(repo
            .read_file(commit, path)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    });
    let mut overlay = Overlay::new(reader);
    Ok(overlay.apply(parsed, Strictness::Exact)?.is_exact())
}

/// Where in the re-application a patch is observed.
struct Position<'a> {
    /// The old series (its commits are the 3-way merge's inputs).
    old: &'a workarea::Series,
    /// The patch's index among the active patches.
    index: usize,
    /// The patch.
    entry: &'a PatchEntry,
    /// Every active patch, in order.
    active: &'a [&'a PatchEntry],
    /// The new base plus the patches re-applied so far.
    head: &'a Oid,
    /// Its tree.
    head_tree: &'a Oid,
    /// The maintainer's resolution of this patch (commit, parent), if any.
    resolution: Option<&'a (Oid, Oid)>,
}

/// What `sync` observed about a patch, and the tree it leaves (if any).
struct Observed {
    facts: Facts,
    tree: Option<Oid>,
}

/// Observes one patch on top of `head` with git (see [`crate::classify`]
/// for the observations and the rules that decide its status).
fn observe(repo: &Repo<'_>, at: &Position<'_>, root: &Path) -> Result<Observed> {
    let entry = at.entry;
    let (file, bytes) = workarea::read_patch_file(root, entry)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let parsed = patchfile::parse(&text).map_err(|message| Error::PatchParse {
        id: entry.id.to_string(),
        file: entry.file.clone(),
        message,
    })?;
    let mut facts = Facts {
        id: entry.id.to_string(),
        files: parsed.paths(),
        reverse_applies: false,
        forward: None,
        taken_with_later: None,
        resolution: None,
        leaves: None,
    };
    if let ApplyOutcome::Applied(_) =
        repo.apply_patch(at.head, &file, Direction::Reverse, ApplyMode::CheckOnly)?
    {
        facts.reverse_applies = true;
        return Ok(Observed { facts, tree: None });
    }
    let old_commit = &at.old.commits[at.index].commit;
    let old_parent = at.old.prefix_tip(at.index);
    let (forward, forward_tree) =
        match repo.apply_patch(at.head, &file, Direction::Forward, ApplyMode::Write)? {
            ApplyOutcome::Applied(tree) if fits_exactly(repo, at.head, &parsed)? => {
                (Forward::Exact, Some(tree))
            }
            ApplyOutcome::Applied(tree) => {
                let shifted = hunk_fits(repo, at.head, &parsed)?
                    .into_iter()
                    .filter_map(|(path, n, header, fit)| match fit {
                        HunkFit::Offset(d) => {
                            Some(format!("{path} hunk #{n} {header} offset {d:+}"))
                        }
                        _ => None,
                    })
                    .collect();
                (Forward::Shifted(shifted), Some(tree))
            }
            ApplyOutcome::Rejected(_) => match repo.merge_tree(old_parent, at.head, old_commit)? {
                MergeOutcome::Clean(tree) => (Forward::Merged, Some(tree)),
                MergeOutcome::Conflicted(files) => {
                    let hunks = failing_hunks(&hunk_fits(repo, at.head, &parsed)?, &files);
                    (Forward::Conflicted { files, hunks }, None)
                }
            },
        };
    let conflicted = matches!(forward, Forward::Conflicted { .. });
    facts.forward = Some(forward);
    if conflicted
        && at.resolution.is_none()
        && let Some(later) = upstream_with_later(repo, at.old, at.index, at.head)?
    {
        facts.taken_with_later = Some(
            at.active[at.index + 1..=later]
                .iter()
                .map(|e| e.id.to_string())
                .collect(),
        );
    }
    let mut tree = forward_tree;
    if let Some((commit, parent)) = at.resolution
        && let MergeOutcome::Clean(resolved) = repo.merge_tree(parent, at.head, commit)?
    {
        facts.resolution = Some(commit.short().to_owned());
        tree = Some(resolved);
    }
    if let Some(tree) = &tree {
        facts.leaves = Some(if tree == at.head_tree {
            Leaves::Unchanged
        } else {
            Leaves::Changed {
                missing_guards: guards::entry_problems(
                    entry,
                    |path: &str| -> Result<Option<String>> {
                        Ok(repo
                            .read_file(tree, path)?
                            .map(|b| String::from_utf8_lossy(&b).into_owned()))
                    },
                )?,
            }
        });
    }
    Ok(Observed { facts, tree })
}

/// The hunks of each conflicted file that no longer fit anywhere (every
/// hunk of the file when all of them still fit somewhere).
fn failing_hunks(fits: &[(String, usize, String, HunkFit)], files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let mut failing: Vec<String> = fits
            .iter()
            .filter(|(p, _, _, fit)| p == f && *fit == HunkFit::Missing)
            .map(|(p, n, h, _)| format!("{p} hunk #{n} {h}"))
            .collect();
        if failing.is_empty() {
            failing = fits
                .iter()
                .filter(|(p, ..)| p == f)
                .map(|(p, n, h, _)| format!("{p} hunk #{n} {h}"))
                .collect();
        }
        out.extend(failing);
    }
    out
}

/// Classifies the series against a new upstream directory.
///
/// # Errors
/// An invalid upstream directory; see [`compute_from`].
pub fn compute(
    ctx: &Context,
    registry: &Registry,
    upstream: &Path,
    new_version: Option<&str>,
) -> Result<SyncRun> {
    // Validated before anything else, so a refused sync leaves the work
    // repo's refs as they were.
    let source = upstream_dir(upstream, registry)?;
    compute_from(ctx, registry, &source, new_version)
}

/// Classifies the series against a new upstream already found by
/// [`upstream_dir`] (`ci` reads its version from it first, so it is not
/// validated twice).
///
/// # Errors
/// An edited baseline, a registered patch that does not apply to its own
/// baseline, git or I/O failures.
pub fn compute_from(
    ctx: &Context,
    registry: &Registry,
    source: &UpstreamDir,
    new_version: Option<&str>,
) -> Result<SyncRun> {
    let layout = &ctx.layout;
    // Everything that can be refused is checked before the work repo's refs
    // move, so a refused sync leaves them as they were.
    let repo = workarea::ensure_repo(&ctx.git, layout)?;
    let old_tree = workarea::baseline_tree(&repo, layout, registry)?;
    if old_tree.as_str() != registry.upstream.tree {
        return Err(Error::BaselineEdited {
            path: workarea::baseline_label(registry),
            expected: registry.upstream.tree.clone(),
            found: old_tree.to_string(),
        });
    }
    crate::checks::preflight(&ctx.root, registry)?;
    let new_tree = workarea::baseline_tree_from(&repo, layout, registry, source.source())?;
    let old = workarea::build_active_series(&repo, layout, registry, None)?;
    let label = new_version.map_or_else(|| format!("(tree {})", new_tree.short()), str::to_owned);
    let new_base = workarea::upstream_commit(&repo, registry, &new_tree, Some(&old.base), &label)?;
    let resolved = if new_tree == old_tree {
        BTreeMap::new()
    } else {
        resolutions(&repo, &new_base)?
    };

    let mut head = new_base.clone();
    let mut head_tree = repo.read_commit(&head)?.tree;
    let mut patches = Vec::new();
    let mut stack = Vec::new();
    let active: Vec<&PatchEntry> = registry.active().collect();
    for (i, entry) in active.iter().enumerate() {
        let observed = observe(
            &repo,
            &Position {
                old: &old,
                index: i,
                entry,
                active: &active,
                head: &head,
                head_tree: &head_tree,
                resolution: resolved.get(entry.id.as_str()),
            },
            &ctx.root,
        )?;
        let decision = classify::decide(&observed.facts);
        let described = classify::describe(&observed.facts, decision);
        patches.push(PatchReport {
            id: entry.id.to_string(),
            status: decision.status,
            files: described.files,
            hunks: described.hunks,
            detail: described.detail,
        });
        if let (
            Decision {
                reapplied: true, ..
            },
            Some(tree),
        ) = (decision, observed.tree)
        {
            let commit = repo.commit_tree(&tree, &[&head], &patchfile::render_message(entry))?;
            stack.push((entry.id.clone(), tree.clone()));
            head = commit;
            head_tree = tree;
        }
    }

    let blocked: BTreeSet<&str> = patches
        .iter()
        .filter(|p| p.status.blocks())
        .map(|p| p.id.as_str())
        .collect();
    let notes: Vec<Option<String>> = active
        .iter()
        .map(|entry| {
            let deps: Vec<&str> = entry
                .depends_on
                .iter()
                .map(PatchId::as_str)
                .filter(|d| blocked.contains(d))
                .collect();
            (!deps.is_empty()).then(|| deps.join(", "))
        })
        .collect();
    for (rep, deps) in patches.iter_mut().zip(notes) {
        if let Some(deps) = deps
            && rep.status.blocks()
        {
            let detail = rep.detail.take().unwrap_or_default();
            rep.detail = Some(format!(
                "{detail} (it depends on {deps}, which is blocked too: resolve that first)"
            ));
        }
    }
    let range_diff = series_range_diff(&repo, (&old.base, old.tip()), (&new_base, &head))?;
    // Give the maintainer the current series to rebase onto the new upstream,
    // unless the work repo holds work of theirs (e.g. such a resolution).
    if workarea::unsaved_work(&repo, old.tip())?.is_none() {
        workarea::install_series(&repo, &old)?;
    }
    repo.set_ref(SYNC_UPSTREAM_REF, &new_base, "fork: sync upstream")?;
    repo.set_ref(SYNC_SERIES_REF, &head, "fork: sync series")?;
    let result = if new_tree == old_tree {
        SyncResult::NoUpdate
    } else if patches.iter().any(|p| p.status.blocks()) {
        SyncResult::Blocked
    } else {
        SyncResult::Ready
    };
    Ok(SyncRun {
        report: SyncReport {
            upstream: UpstreamReport {
                repository: registry.upstream.repository.clone(),
                crate_name: registry.upstream.crate_name.clone(),
                path: registry.upstream.path.clone(),
                old_version: registry.upstream.version.clone(),
                new_version: new_version.map(str::to_owned),
                old_tree: old_tree.to_string(),
                new_tree: new_tree.to_string(),
            },
            patches,
            result,
        },
        range_diff,
        new_base,
        new_tree,
        stack,
    })
}

/// Pretty JSON with a trailing newline: the form of every report file
/// (`sync`'s and `ci`'s), so both read and diff alike.
pub(crate) fn pretty_json<T: Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_default();
    s.push('\n');
    s
}

impl SyncReport {
    /// Pretty JSON with a trailing newline.
    #[must_use]
    pub fn to_json(&self) -> String {
        pretty_json(self)
    }

    /// The Markdown summary.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let u = &self.upstream;
        let mut m = String::new();
        let _ = writeln!(m, "# Upstream sync report: `{}`", u.crate_name);
        m.push('\n');
        let _ = writeln!(m, "Result: **{}**", self.result.as_str());
        m.push('\n');
        let _ = writeln!(
            m,
            "- From {} (tree `{}`) to {} (tree `{}`)",
            u.old_version,
            u.old_tree,
            u.new_version.as_deref().unwrap_or("an unnamed version"),
            u.new_tree
        );
        m.push('\n');
        if self.patches.is_empty() {
            let _ = writeln!(m, "The series is empty.");
        } else {
            let _ = writeln!(m, "| id | status | files | hunks | detail |");
            let _ = writeln!(m, "|----|--------|-------|-------|--------|");
            for p in &self.patches {
                let _ = writeln!(
                    m,
                    "| `{}` | {} | {} | {} | {} |",
                    p.id,
                    p.status.as_str(),
                    p.files.join("<br>"),
                    p.hunks.join("<br>").replace('|', "\\|"),
                    p.detail.as_deref().unwrap_or("").replace('|', "\\|")
                );
            }
        }
        m.push('\n');
        let reapplied = self
            .patches
            .iter()
            .filter(|p| {
                matches!(
                    p.status,
                    SyncStatus::Exact
                        | SyncStatus::Offset
                        | SyncStatus::Merged
                        | SyncStatus::GuardFailed
                )
            })
            .count();
        if reapplied == 0 {
            let _ = writeln!(
                m,
                "Range-diff: the new series is empty (no patch is re-applied on the new upstream)."
            );
        } else {
            let _ = writeln!(
                m,
                "Range-diff: {reapplied} patch(es) re-applied; see the `.range-diff.txt` file next to this report."
            );
        }
        m.push('\n');
        let next = match self.result {
            SyncResult::Ready => {
                "Review the range-diff, then run `scripts/fork sync --upstream DIR --write`, `scripts/fork verify`, and commit."
            }
            SyncResult::Blocked => {
                "Resolve each conflict or failed guard in the work repo (see docs/MAINTENANCE.md), then re-run sync."
            }
            SyncResult::NoUpdate => "Nothing to do: the new upstream equals the baseline.",
        };
        let _ = writeln!(m, "Next: {next}");
        m
    }

    /// A terminal table.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut t = Table::new(&["id", "status", "files", "detail"]);
        for p in &self.patches {
            t.row(vec![
                p.id.clone(),
                p.status.as_str().to_owned(),
                p.files.join(", "),
                p.hunks
                    .first()
                    .cloned()
                    .or_else(|| p.detail.clone())
                    .unwrap_or_default(),
            ]);
        }
        let mut out = if t.is_empty() {
            "series is empty\n".to_owned()
        } else {
            t.render()
        };
        let _ = writeln!(out, "\nresult: {}", self.result.as_str());
        out
    }
}

/// Paths of the Markdown summary and range-diff next to the JSON report.
#[must_use]
pub fn companion_paths(report: &Path) -> (PathBuf, PathBuf) {
    let stem = report
        .file_stem()
        .map_or_else(|| "report".to_owned(), |s| s.to_string_lossy().into_owned());
    let dir = report.parent().map_or_else(PathBuf::new, Path::to_path_buf);
    (
        dir.join(format!("{stem}.md")),
        dir.join(format!("{stem}.range-diff.txt")),
    )
}

/// Where [`write_report`] put a report and its companions.
pub struct ReportFiles {
    /// The JSON report.
    pub json: PathBuf,
    /// The Markdown summary.
    pub markdown: PathBuf,
    /// The range-diff.
    pub range_diff: PathBuf,
}

impl ReportFiles {
    /// The three paths, one `name: path` line each (no trailing newline),
    /// as `sync` and `ci` print them.
    #[must_use]
    pub fn listing(&self) -> String {
        format!(
            "report: {}\nsummary: {}\nrange-diff: {}",
            self.json.display(),
            self.markdown.display(),
            self.range_diff.display()
        )
    }
}

/// Writes a report (`json`) with its Markdown summary and range-diff next
/// to it (see [`companion_paths`]), each file atomically: `sync` and `ci`
/// leave the same three files.
///
/// # Errors
/// I/O failures.
pub fn write_report(
    path: &Path,
    json: &str,
    markdown: &str,
    range_diff: &str,
) -> Result<ReportFiles> {
    let (md_path, range_path) = companion_paths(path);
    fsutil::write_atomic(path, json.as_bytes())?;
    fsutil::write_atomic(&md_path, markdown.as_bytes())?;
    fsutil::write_atomic(&range_path, range_diff.as_bytes())?;
    Ok(ReportFiles {
        json: path.to_path_buf(),
        markdown: md_path,
        range_diff: range_path,
    })
}

/// Writes an adopted sync into the repository at `dest` (the root, or the
/// fork-CI candidate copy of it): the new baseline, the re-exported
/// patches, retirements, registry and inventory, and the root `Cargo.lock`
/// updated for the new workspace members (`cargo update --workspace`, which
/// changes no registry package that is already locked). The work repo is
/// only read.
///
/// # Errors
/// A retirement without an upstream reference; git or I/O failures.
pub fn adopt(
    ctx: &Context,
    registry: &Registry,
    run: &SyncRun,
    version: Option<&str>,
    commit_text: Option<&str>,
    date: &str,
    dest: &Path,
) -> Result<Registry> {
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    let mut updated = registry.clone();
    updated.upstream.tree = run.new_tree.to_string();
    if let Some(v) = version {
        updated.upstream.version = v.to_owned();
    }
    if let Some(c) = commit_text {
        updated.upstream.commit = c.to_owned();
    }
    let mut removed = Vec::new();
    let retired_at = updated.upstream.version.clone();
    for p in &run.report.patches {
        if !matches!(p.status, SyncStatus::AlreadyUpstream | SyncStatus::Empty) {
            continue;
        }
        let entry = updated.find_mut(&p.id)?;
        if entry.upstream.is_empty() {
            return Err(Error::RetireRefused {
                id: p.id.clone(),
                reason: "sync found it already upstream, but status `upstreamed` needs an upstream reference: \
                         add it to `upstream` in patches.json and re-run sync --write (or retire it with --owner-decision first)"
                    .into(),
            });
        }
        entry.status = Status::Upstreamed;
        entry.retired = Some(Retired {
            reason: if p.status == SyncStatus::Empty {
                "applied as an empty change on the new upstream (detected by sync)".into()
            } else {
                "already upstream: its reverse applies to the new upstream (detected by sync)"
                    .into()
            },
            upstream_version: retired_at.clone(),
            owner_decision: false,
        });
        removed.push(entry.file.clone());
        removed.push(content_path(&p.id));
    }
    let export = refresh::export(dest, &repo, &updated, &run.new_base, &run.stack, date)?;
    write_baseline(&repo, registry, &run.new_base, dest)?;
    export.write(dest)?;
    for rel in &removed {
        fsutil::remove_file_if_present(&dest.join(rel))?;
    }
    // The new baseline may change the workspace (its version, its
    // dependencies): bring the lock file along, so `cargo … --locked` (and
    // with it `scripts/fork`) accepts the repository as written.
    if crate::cargo::update_workspace_lock(dest)? {
        ui::note("updated Cargo.lock for the new baseline (cargo update --workspace)");
    }
    Ok(export.registry)
}

/// Replaces every baseline path under `dest` with its content in `base` (an
/// upstream commit of the work repo), each swapped in atomically.
fn write_baseline(repo: &Repo<'_>, registry: &Registry, base: &Oid, dest: &Path) -> Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("buzz-fork-baseline-")
        .tempdir()
        .map_err(|e| Error::io("creating a scratch directory in", std::env::temp_dir(), e))?;
    repo.export_tree(base, scratch.path())?;
    for (local, _) in registry.upstream.all_paths() {
        let from = scratch.path().join(&local);
        let to = dest.join(&local);
        if from.is_dir() {
            let staged = StagedDir::new(&to)?;
            fsutil::copy_dir(&from, staged.path())?;
            staged.commit()?;
        } else {
            let bytes = std::fs::read(&from).map_err(|e| Error::io("reading", &from, e))?;
            fsutil::write_atomic(&to, &bytes)?;
        }
    }
    Ok(())
}

/// Adopts a ready sync in the repository and rebuilds the work repo on it.
///
/// # Errors
/// See [`adopt`]; git failures rebuilding the work repo.
pub fn write(
    ctx: &Context,
    registry: &Registry,
    run: &SyncRun,
    version: Option<&str>,
    commit_text: Option<&str>,
    date: &str,
) -> Result<Registry> {
    let updated = adopt(ctx, registry, run, version, commit_text, date, &ctx.root)?;
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    let series = workarea::build_active_series(&repo, &ctx.layout, &updated, None)?;
    workarea::install_series(&repo, &series)?;
    Ok(updated)
}

/// `scripts/fork sync`.
///
/// # Errors
/// See [`compute`]; write failures.
pub fn run(ctx: &Context, args: &SyncArgs) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let date = crate::dates::or_today(args.date);
    let upstream = fsutil::absolute(&args.upstream)?;
    let run = compute(ctx, &registry, &upstream, args.version.as_deref())?;
    let report_path = match &args.report {
        Some(p) => p.clone(),
        None => ctx.layout.sync_dir().join("report.json"),
    };
    let files = write_report(
        &report_path,
        &run.report.to_json(),
        &run.report.to_markdown(),
        &run.range_diff,
    )?;
    ui::report(&run.report.to_table());
    ui::report(&format!("{}\n", files.listing()));
    match run.report.result {
        SyncResult::Blocked => {
            if args.write {
                ui::note(
                    "not writing: the sync is blocked (nothing in the repository was changed)",
                );
            }
            Ok(Outcome::Blocked)
        }
        SyncResult::NoUpdate => Ok(Outcome::Ok),
        SyncResult::Ready if args.write => {
            write(
                ctx,
                &registry,
                &run,
                args.version.as_deref(),
                args.commit.as_deref(),
                &date,
            )?;
            ui::report(
                "wrote the new baseline, patches/, patches.json and FORK_PATCHES.md; now run `scripts/fork verify`\n",
            );
            Ok(Outcome::Ok)
        }
        SyncResult::Ready => {
            ui::note("ready: re-run with --write to adopt the new upstream");
            Ok(Outcome::Ok)
        }
    }
}
