//! `status`: one line per patch, then the series' surface (the hunks each
//! patch makes in upstream files and the items they touch, glue modules and
//! the patches that edit them, import cycles through glue).

use crate::analysis::{Measure, analyze};
use crate::context::{Context, Outcome};
use crate::error::Result;
use crate::ui::{self, Table};

/// `scripts/fork status`.
///
/// # Errors
/// Registry or I/O errors.
pub fn run(ctx: &Context) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let analyzed = analyze(&ctx.root, &registry, Measure::Surface)?;
    let mut t = Table::new(&["id", "status", "reason", "applies", "guards"]);
    for entry in &registry.patches {
        let applies = match analyzed.patch(entry.id.as_str()) {
            None => "-".to_owned(),
            Some(a) if a.file_problem.is_some() => "no (file)".to_owned(),
            Some(a) => match (&a.exact, a.applies) {
                (Some(r), _) if r.is_exact() => "yes".to_owned(),
                (Some(_), true) => "offset".to_owned(),
                _ => "no".to_owned(),
            },
        };
        t.row(vec![
            entry.id.to_string(),
            entry.status.as_str().to_owned(),
            entry.reason.as_str().to_owned(),
            applies,
            format!(
                "{} test(s), {} snapshot(s)",
                entry.guard_tests.len(),
                entry.guard_snapshots.len()
            ),
        ]);
    }
    let mut out = if t.is_empty() {
        "series is empty\n".to_owned()
    } else {
        t.render()
    };
    out.push('\n');
    match &analyzed.surface {
        Some(surface) => out.push_str(&surface.summary()),
        None => out
            .push_str("surface: not measured (a patch does not apply; run `scripts/fork check`)\n"),
    }
    ui::report(&out);
    Ok(Outcome::Ok)
}
