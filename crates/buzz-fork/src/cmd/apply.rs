//! `apply`: build the work repo's series from the registered patches and
//! write the patched tree.

use std::path::{Path, PathBuf};

use crate::cli::ApplyArgs;
use crate::context::{Context, Outcome};
use crate::error::{Error, Result};
use crate::registry::Registry;
use crate::tree;
use crate::workarea::{self, Series, State, TreeStamp};

/// The result of an apply.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The patched tree.
    pub tree: PathBuf,
    /// The series built in the work repo.
    pub series: Series,
    /// Whether the tree was rewritten (false when reused).
    pub rebuilt: bool,
}

/// Whether unsaved work in the work repo may be discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    /// Refuse when work would be lost.
    No,
    /// Discard it.
    Yes,
}

/// Builds the series and writes the patched tree to `to` (default
/// `target/fork-work/tree`).
///
/// # Errors
/// A series `check` would refuse ([`Error::SeriesInvalid`]), a dirty or
/// unusable work repo (unless forced), git, I/O or manifest failures.
pub fn apply(
    ctx: &Context,
    registry: &Registry,
    to: Option<&Path>,
    force: Force,
) -> Result<Applied> {
    let layout = &ctx.layout;
    // The same verdict as `check` (exit 1, one root problem and a count)
    // instead of whatever git says about the first patch it cannot apply.
    crate::checks::preflight(&ctx.root, registry)?;
    let corrupt = match force {
        Force::No => workarea::Corrupt::Refuse,
        Force::Yes => workarea::Corrupt::Rebuild,
    };
    let repo = workarea::ensure_repo_with(&ctx.git, layout, corrupt)?;
    let hint = State::load(layout);
    let series = workarea::build_active_series(&repo, layout, registry, hint.as_ref())?;
    if let Some(reason) = workarea::unsaved_work(&repo, series.tip())? {
        if force == Force::No {
            return Err(Error::DirtyWorkRepo {
                repo: layout.repo(),
                reason,
            });
        }
        crate::ui::warn(&format!("discarding work repo changes (--force): {reason}"));
    }
    workarea::install_series(&repo, &series)?;
    let result_tree = repo
        .subtree(series.tip(), &registry.upstream.path)?
        .ok_or_else(|| Error::GitOutput {
            cmd: "rev-parse".into(),
            detail: format!("series tip has no {}", registry.upstream.path),
        })?;
    let dest = match to {
        Some(p) => crate::fsutil::absolute(p)?,
        None => layout.tree(),
    };
    let (stamp, rebuilt) = tree::write_tree(&repo, layout, registry, series.tip(), &dest)?;
    let state = State::for_series(
        &series,
        &result_tree,
        Some(TreeStamp {
            dir: dest.display().to_string(),
            stamp,
        }),
    );
    state.save(layout)?;
    Ok(Applied {
        tree: dest,
        series,
        rebuilt,
    })
}

/// `scripts/fork apply`.
///
/// # Errors
/// See [`apply`].
pub fn run(ctx: &Context, args: &ApplyArgs) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let force = if args.force { Force::Yes } else { Force::No };
    let applied = apply(ctx, &registry, args.to.as_deref(), force)?;
    crate::ui::note(&format!(
        "{} patch(es) applied; tree {}",
        applied.series.commits.len(),
        if applied.rebuilt {
            "rebuilt"
        } else {
            "already current"
        }
    ));
    crate::ui::report(&format!("{}\n", applied.tree.display()));
    Ok(Outcome::Ok)
}
