//! `render`: write FORK_PATCHES.md.

use crate::analysis::{Measure, analyze};
use crate::context::{Context, Outcome};
use crate::error::Result;
use crate::registry::Registry;
use crate::render::{INVENTORY_FILE, render};

/// The inventory text for the current registry, patch files and baseline
/// (the series is applied in process to measure its surface).
///
/// # Errors
/// I/O errors reading the baseline.
pub fn inventory(ctx: &Context, registry: &Registry) -> Result<String> {
    let analysis = analyze(&ctx.root, registry, Measure::Surface)?;
    Ok(render(
        registry,
        &analysis.line_counts(),
        analysis.surface.as_ref(),
    ))
}

/// Writes FORK_PATCHES.md.
///
/// # Errors
/// Registry or I/O errors.
pub fn run(ctx: &Context) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let path = ctx.root.join(INVENTORY_FILE);
    crate::fsutil::write_atomic(&path, inventory(ctx, &registry)?.as_bytes())?;
    crate::ui::report(&format!("{}\n", path.display()));
    Ok(Outcome::Ok)
}
