//! `retire`: stop carrying a patch, keeping its registry entry as history.
//!
//! Allowed when the patch is already upstream (its reverse applies to the
//! current baseline plus the patches before it) — status `upstreamed` — or by
//! an owner decision — status `dropped`. The patch file and its content
//! snapshot are removed; FORK_PATCHES.md is re-rendered.

use crate::cli::RetireArgs;
use crate::context::{Context, Outcome};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::git::{ApplyMode, ApplyOutcome, Direction};
use crate::patchfile::content_path;
use crate::registry::{PatchEntry, Registry, Retired, Status};
use crate::render::INVENTORY_FILE;
use crate::workarea;

/// Retires `id`; returns the updated registry (already saved).
///
/// # Errors
/// Unknown id, an inactive patch, dependents, not upstream without an owner
/// decision, missing upstream reference, git or I/O failures.
pub fn retire(ctx: &Context, id: &str, owner_decision: Option<&str>) -> Result<Registry> {
    let mut registry = ctx.registry()?;
    let entry = registry.find(id)?.clone();
    let refuse = |reason: String| Error::RetireRefused {
        id: id.to_owned(),
        reason,
    };
    if !entry.is_active() {
        return Err(refuse(format!("it is already {}", entry.status.as_str())));
    }
    let dependents: Vec<String> = registry
        .active()
        .filter(|p| p.depends_on.iter().any(|d| d.as_str() == id))
        .map(|p| p.id.to_string())
        .collect();
    if !dependents.is_empty() {
        return Err(refuse(format!(
            "active patches depend on it: {} (retire them first or edit their depends_on)",
            dependents.join(", ")
        )));
    }
    let version = registry.upstream.version.clone();
    let (status, retired) = match owner_decision {
        Some(why) if why.trim().is_empty() => {
            return Err(Error::Usage("--owner-decision needs a reason".into()));
        }
        Some(why) => (
            Status::Dropped,
            Retired {
                reason: why.trim().to_owned(),
                upstream_version: version,
                owner_decision: true,
            },
        ),
        None => {
            if !is_upstream(ctx, &registry, &entry)? {
                return Err(refuse(
                    "its reverse does not apply to the current baseline, so upstream does not contain it; \
                     to drop it anyway, pass --owner-decision \"why\""
                        .into(),
                ));
            }
            if entry.upstream.is_empty() {
                return Err(refuse(
                    "it is upstream, but status `upstreamed` needs an upstream reference: add it to `upstream` in patches.json"
                        .into(),
                ));
            }
            (
                Status::Upstreamed,
                Retired {
                    reason: "already upstream: its reverse applies to the current baseline".into(),
                    upstream_version: version,
                    owner_decision: false,
                },
            )
        }
    };
    let e = registry.find_mut(id)?;
    e.status = status;
    e.retired = Some(retired);
    registry.save(&ctx.root)?;
    fsutil::remove_file_if_present(&ctx.root.join(&entry.file))?;
    fsutil::remove_file_if_present(&ctx.root.join(content_path(id)))?;
    let inventory = crate::cmd::render::inventory(ctx, &registry)?;
    fsutil::write_atomic(&ctx.root.join(INVENTORY_FILE), inventory.as_bytes())?;
    Ok(registry)
}

/// Whether the reverse of `entry` applies on the baseline plus the active
/// patches before it.
fn is_upstream(ctx: &Context, registry: &Registry, entry: &PatchEntry) -> Result<bool> {
    let repo = workarea::ensure_repo(&ctx.git, &ctx.layout)?;
    let base_tree = workarea::baseline_tree(&repo, &ctx.layout, registry)?;
    let base = workarea::upstream_commit(
        &repo,
        registry,
        &base_tree,
        None,
        &registry.upstream.version,
    )?;
    let before: Vec<&PatchEntry> = registry.active().take_while(|p| p.id != entry.id).collect();
    let prefix = workarea::build_series(&repo, &ctx.root, &base, &base_tree, &before, None)?;
    let (file, _) = workarea::read_patch_file(&ctx.root, entry)?;
    Ok(matches!(
        repo.apply_patch(
            prefix.tip(),
            &file,
            Direction::Reverse,
            ApplyMode::CheckOnly
        )?,
        ApplyOutcome::Applied(_)
    ))
}

/// `scripts/fork retire`.
///
/// # Errors
/// See [`retire`].
pub fn run(ctx: &Context, args: &RetireArgs) -> Result<Outcome> {
    let registry = retire(ctx, &args.id, args.owner_decision.as_deref())?;
    let entry = registry.find(&args.id)?;
    crate::ui::report(&format!(
        "retired {} as {}; removed {}\n",
        entry.id,
        entry.status.as_str(),
        entry.file
    ));
    Ok(Outcome::Ok)
}
