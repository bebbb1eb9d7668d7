//! `refresh`: deterministic re-export of `patches/` from the work repo's
//! `series` branch.
//!
//! Commits map to registry entries by their `Fork-Patch-Id` trailer and must
//! follow the registry order. Each commit is rebuilt canonically (same tree,
//! message rendered from the registry, fixed identity and date) and exported
//! with pinned `git format-patch` flags, so a second refresh is
//! byte-identical. Per patch the change is classified as mechanical (only
//! context, offsets, index lines or headers moved) or content (the added or
//! removed lines changed), using the normalized snapshot
//! `patches/content/<id>.txt`. `Last-Update` moves only on content changes.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cli::RefreshArgs;
use crate::context::{Context, Outcome};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::git::{Oid, Repo};
use crate::patchfile;
use crate::patchfile::content_path;
use crate::registry::{PATCH_ID_TRAILER, PatchEntry, PatchId, REGISTRY_FILE, Registry};
use crate::render::{self, INVENTORY_FILE};
use crate::ui::{self, Table};
use crate::workarea::{self, LAST_APPLIED_REF, SERIES_BRANCH, UPSTREAM_HEAD_REF};

/// What a refresh does to one patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Byte-identical.
    Unchanged,
    /// Only context, offsets, index lines or headers changed.
    Mechanical,
    /// Added or removed lines changed.
    Content,
    /// The patch file does not exist yet.
    New,
}

impl ChangeKind {
    /// Label for reports.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            ChangeKind::Unchanged => "unchanged",
            ChangeKind::Mechanical => "mechanical",
            ChangeKind::Content => "content",
            ChangeKind::New => "new",
        }
    }
}

/// One patch in an export.
#[derive(Debug, Clone)]
pub struct PatchChange {
    /// Patch id.
    pub id: PatchId,
    /// Classification.
    pub kind: ChangeKind,
}

/// Everything an export would write.
#[derive(Debug, Clone)]
pub struct Export {
    /// Per patch classification, in series order.
    pub changes: Vec<PatchChange>,
    /// Repo-relative files whose content would change, with their new content.
    pub writes: BTreeMap<String, String>,
    /// The registry after the export (Last-Update, paths).
    pub registry: Registry,
    /// Canonical series tip.
    pub tip: Oid,
}

impl Export {
    /// Whether anything would be written.
    #[must_use]
    pub fn is_noop(&self) -> bool {
        self.writes.is_empty()
    }

    /// Writes every changed file.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn write(&self, root: &Path) -> Result<()> {
        for (rel, content) in &self.writes {
            fsutil::write_atomic(&root.join(rel), content.as_bytes())?;
        }
        Ok(())
    }

    /// Table of changes plus the files that would be written.
    #[must_use]
    pub fn render(&self, dry_run: bool) -> String {
        let mut t = Table::new(&["id", "change"]);
        for c in &self.changes {
            t.row(vec![c.id.to_string(), c.kind.label().to_owned()]);
        }
        let mut out = if t.is_empty() {
            "series is empty\n".to_owned()
        } else {
            t.render()
        };
        let files: Vec<String> = self.writes.keys().cloned().collect();
        let title = if dry_run {
            "\nwould write:"
        } else {
            "\nwrote:"
        };
        match ui::bullets(title, &files) {
            Some(list) => out.push_str(&list),
            None => out.push_str("\nnothing to write: patches/ is up to date\n"),
        }
        out
    }
}

/// Exports `stack` (entry id and tree, in order, on top of `base`) into
/// patch files, content snapshots, the registry and the inventory.
///
/// # Errors
/// Git failures, or a commit that changes nothing.
pub fn export(
    root: &Path,
    repo: &Repo<'_>,
    registry: &Registry,
    base: &Oid,
    stack: &[(PatchId, Oid)],
    date: &str,
) -> Result<Export> {
    let mut updated = registry.clone();
    let mut writes = BTreeMap::new();
    let mut changes = Vec::new();
    let mut parsed_patches = Vec::new();
    let mut parent = base.clone();
    let mut parent_tree = repo.read_commit(base)?.tree;
    for (id, tree) in stack {
        if *tree == parent_tree {
            return Err(Error::SeriesMismatch {
                detail: format!("the commit for {id} changes nothing; drop it or retire the patch"),
            });
        }
        let entry = updated.find_mut(id.as_str())?;
        let old_text = fsutil::read_optional(&root.join(&entry.file))?;
        let old_content = old_text
            .as_deref()
            .and_then(|t| patchfile::parse(t).ok())
            .map(|p| patchfile::content_snapshot(id.as_str(), &p));
        let (mut commit, mut text) = canonical(repo, entry, tree, &parent)?;
        let mut parsed = parse_export(id, &text)?;
        let content = patchfile::content_snapshot(id.as_str(), &parsed);
        let kind = match (&old_text, &old_content) {
            (None, _) => ChangeKind::New,
            (Some(old), _) if *old == text => ChangeKind::Unchanged,
            (Some(_), Some(old)) if *old == content => ChangeKind::Mechanical,
            _ => ChangeKind::Content,
        };
        let mut entry_changed = false;
        if matches!(kind, ChangeKind::New | ChangeKind::Content) && entry.last_update != date {
            entry.last_update = date.to_owned();
            entry_changed = true;
        }
        let paths = parsed.paths();
        if entry.paths != paths {
            entry.paths = paths;
            entry_changed = true;
        }
        if entry_changed {
            (commit, text) = canonical(repo, entry, tree, &parent)?;
            parsed = parse_export(id, &text)?;
        }
        let kind = if kind == ChangeKind::Unchanged && old_text.as_deref() != Some(text.as_str()) {
            ChangeKind::Mechanical
        } else {
            kind
        };
        if old_text.as_deref() != Some(text.as_str()) {
            writes.insert(entry.file.clone(), text.clone());
        }
        let content_rel = content_path(id.as_str());
        if fsutil::read_optional(&root.join(&content_rel))?.as_deref() != Some(content.as_str()) {
            writes.insert(content_rel, content);
        }
        parsed_patches.push((id.to_string(), parsed));
        changes.push(PatchChange {
            id: id.clone(),
            kind,
        });
        parent = commit;
        parent_tree = tree.clone();
    }
    let registry_text = updated.to_json()?;
    if fsutil::read_optional(&root.join(REGISTRY_FILE))?.as_deref() != Some(registry_text.as_str())
    {
        writes.insert(REGISTRY_FILE.to_owned(), registry_text);
    }
    let parsed_refs: Vec<(&str, &patchfile::ParsedPatch)> = parsed_patches
        .iter()
        .map(|(id, p)| (id.as_str(), p))
        .collect();
    let counts: BTreeMap<String, (usize, usize)> = parsed_patches
        .iter()
        .map(|(id, p)| (id.clone(), p.line_counts()))
        .collect();
    // Patch `i` finds the files of the tree before it: the base, then each
    // re-exported patch's tree in turn.
    let mut trees_before: Vec<Oid> = vec![repo.read_commit(base)?.tree];
    trees_before.extend(stack.iter().map(|(_, tree)| tree.clone()));
    let read = |tree: &Oid, path: &str| -> Result<Option<String>> {
        Ok(repo
            .read_file(tree, path)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    };
    let surface = crate::surface::measure(
        &updated,
        &parsed_refs,
        crate::surface::Trees {
            in_baseline: &mut |path: &str| Ok(repo.resolve(&format!("{base}:{path}"))?.is_some()),
            before: &mut |index: usize, path: &str| match trees_before.get(index) {
                Some(tree) => read(tree, path),
                None => Ok(None),
            },
            patched: &mut |path: &str| read(&parent_tree, path),
        },
    )?;
    let inventory = render::render(&updated, &counts, Some(&surface));
    if fsutil::read_optional(&root.join(INVENTORY_FILE))?.as_deref() != Some(inventory.as_str()) {
        writes.insert(INVENTORY_FILE.to_owned(), inventory);
    }
    Ok(Export {
        changes,
        writes,
        registry: updated,
        tip: parent,
    })
}

fn canonical(
    repo: &Repo<'_>,
    entry: &PatchEntry,
    tree: &Oid,
    parent: &Oid,
) -> Result<(Oid, String)> {
    let commit = repo.commit_tree(tree, &[parent], &patchfile::render_message(entry))?;
    let text = repo.format_patch(&commit)?;
    Ok((commit, text))
}

fn parse_export(id: &PatchId, text: &str) -> Result<patchfile::ParsedPatch> {
    patchfile::parse(text).map_err(|message| Error::PatchParse {
        id: id.to_string(),
        file: "(format-patch output)".into(),
        message,
    })
}

/// The series branch as (id, tree) pairs on top of the upstream head,
/// validated against the registry.
///
/// # Errors
/// [`Error::SeriesMismatch`] when the branch cannot be mapped.
pub fn series_stack(
    ctx: &Context,
    repo: &Repo<'_>,
    registry: &Registry,
) -> Result<(Oid, Vec<(PatchId, Oid)>)> {
    let upstream = repo
        .resolve(UPSTREAM_HEAD_REF)?
        .ok_or_else(|| Error::NoWorkRepo {
            repo: ctx.layout.repo(),
        })?;
    let base_tree = workarea::baseline_tree(repo, &ctx.layout, registry)?;
    let expected =
        workarea::upstream_commit(repo, registry, &base_tree, None, &registry.upstream.version)?;
    if expected != upstream {
        return Err(Error::SeriesMismatch {
            detail: format!(
                "the work repo was built on another baseline (upstream-head {} ≠ {}); run `scripts/fork apply` first",
                upstream.short(),
                expected.short()
            ),
        });
    }
    let tip = repo
        .resolve(SERIES_BRANCH)?
        .ok_or_else(|| Error::SeriesMismatch {
            detail: "the work repo has no `series` branch; run `scripts/fork apply`".into(),
        })?;
    let mut stack = Vec::new();
    let mut parent = upstream.clone();
    for commit in repo.commits_between(&upstream, &tip)? {
        let info = repo.read_commit(&commit)?;
        if info.parents != [parent.clone()] {
            return Err(Error::SeriesMismatch {
                detail: format!(
                    "commit {} is not a single-parent child of the previous series commit; \
                     the series must be a linear stack on refs/fork/upstream-head (a series rebased onto a new upstream is adopted by `sync --write`)",
                    commit.short()
                ),
            });
        }
        let ids = repo.trailer_values(&info.message, PATCH_ID_TRAILER)?;
        let subject = info.message.lines().next().unwrap_or_default();
        let id = match ids.as_slice() {
            [one] => one.parse::<PatchId>().map_err(|e| Error::SeriesMismatch {
                detail: format!("commit {} ({subject}): {e}", commit.short()),
            })?,
            [] => {
                return Err(Error::SeriesMismatch {
                    detail: format!(
                        "commit {} ({subject}) has no `{PATCH_ID_TRAILER}:` trailer; amend it or squash it into its patch's commit",
                        commit.short()
                    ),
                });
            }
            _ => {
                return Err(Error::SeriesMismatch {
                    detail: format!(
                        "commit {} ({subject}) has several `{PATCH_ID_TRAILER}:` trailers",
                        commit.short()
                    ),
                });
            }
        };
        stack.push((id, info.tree));
        parent = commit;
    }
    let got: Vec<&str> = stack.iter().map(|(id, _)| id.as_str()).collect();
    let want: Vec<&str> = registry.active().map(|p| p.id.as_str()).collect();
    if got != want {
        for id in &got {
            registry.find(id)?;
        }
        return Err(Error::SeriesMismatch {
            detail: format!(
                "series commits are [{}] but the active patches in patches.json are [{}] (same ids, same order required)",
                got.join(", "),
                want.join(", ")
            ),
        });
    }
    Ok((upstream, stack))
}

/// Plans a refresh from the series branch.
///
/// # Errors
/// See [`series_stack`] and [`export`].
pub fn plan(ctx: &Context, registry: &Registry, date: &str) -> Result<(Export, bool)> {
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    let (base, stack) = series_stack(ctx, &repo, registry)?;
    let export = export(&ctx.root, &repo, registry, &base, &stack, date)?;
    let dirty = !repo.work_tree_changes()?.is_empty();
    Ok((export, dirty))
}

/// `scripts/fork refresh`.
///
/// # Errors
/// See [`plan`]; a work tree with uncommitted changes.
pub fn run(ctx: &Context, args: &RefreshArgs) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let date = crate::dates::or_today(args.date);
    let (export, dirty) = plan(ctx, &registry, &date)?;
    if args.dry_run {
        ui::report(&export.render(true));
    }
    // A dry run must not say "nothing to write" while edits it cannot see
    // sit uncommitted: it refuses exactly as the real refresh would.
    if dirty {
        return Err(Error::DirtyWorkRepo {
            repo: ctx.layout.repo(),
            reason: "uncommitted changes in the work tree are not part of the series; commit them (with a `Fork-Patch-Id:` trailer) before refresh".into(),
        });
    }
    if args.dry_run {
        return Ok(Outcome::Ok);
    }
    write(ctx, &export)?;
    ui::report(&export.render(false));
    Ok(Outcome::Ok)
}

/// Writes a planned export and points `series` (and the last-applied
/// marker) at its canonical commits.
///
/// # Errors
/// I/O or git failures.
pub fn write(ctx: &Context, export: &Export) -> Result<()> {
    export.write(&ctx.root)?;
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    repo.set_ref(SERIES_BRANCH, &export.tip, "fork: refresh")?;
    repo.set_ref(LAST_APPLIED_REF, &export.tip, "fork: refresh")?;
    if repo.head_branch()?.as_deref() == Some(SERIES_BRANCH) {
        repo.reset_work_tree(&export.tip)?;
    }
    Ok(())
}
