//! `check`: everything that can be verified without building. The facts are
//! gathered here (the baseline's tree id through the work repo's git, the
//! [`crate::analysis`] of the series); the named checks are in
//! [`crate::checks`]. The report is a table per patch, a table of the checks
//! and every problem.

use crate::analysis::{self, Analysis, Measure};
use crate::checks::{self, CheckOutcome, Facts, Finding, FindingKind, Subject};
use crate::context::{Context, Outcome};
use crate::error::Result;
use crate::registry::Registry;
use crate::ui::{self, Table};
use crate::workarea;

/// One row of the per-patch table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchRow {
    /// Patch id.
    pub id: String,
    /// exact / offset / FAIL / blocked / - (inactive).
    pub apply: String,
    /// ok / FAIL.
    pub paths: String,
    /// ok / FAIL.
    pub symbols: String,
    /// ok / FAIL.
    pub guards: String,
    /// Short notes.
    pub notes: String,
}

/// The result of a check.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// One row per registered patch.
    pub rows: Vec<PatchRow>,
    /// Every named check with its findings.
    pub checks: Vec<CheckOutcome>,
    /// Every finding: each patch's in series order, then the rest.
    pub findings: Vec<Finding>,
    /// Application problems of patches after one that does not apply: they
    /// follow from it, so they are counted, not listed.
    pub consequences: usize,
    /// Notes that are not problems (deprecated registry fields).
    pub notes: Vec<String>,
}

impl CheckReport {
    /// True when no problem was found.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// Every finding as `[subject] message`.
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        self.findings.iter().map(ToString::to_string).collect()
    }

    /// The per-patch table, the checks, then the problems.
    #[must_use]
    pub fn render(&self) -> String {
        let mut t = Table::new(&["id", "apply", "paths", "symbols/seams", "guards", "notes"]);
        for r in &self.rows {
            t.row(vec![
                r.id.clone(),
                r.apply.clone(),
                r.paths.clone(),
                r.symbols.clone(),
                r.guards.clone(),
                r.notes.clone(),
            ]);
        }
        let mut out = String::new();
        if t.is_empty() {
            out.push_str("series is empty\n");
        } else {
            out.push_str(&t.render());
        }
        let passed = self
            .checks
            .iter()
            .filter(|c| !c.skipped && c.findings.is_empty())
            .count();
        out.push_str(&format!(
            "\nchecks: {passed} of {} passed{}\n",
            self.checks.len(),
            self.checks
                .iter()
                .filter(|c| c.skipped || !c.findings.is_empty())
                .map(|c| format!("; {} {}", c.name.as_str(), c.label()))
                .collect::<String>()
        ));
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        match ui::bullets(
            &format!("\n{} problem(s):", self.findings.len()),
            &self.problems(),
        ) {
            Some(list) => out.push_str(&list),
            None => out.push_str("\ncheck passed\n"),
        }
        if self.consequences > 0 {
            out.push_str(&format!(
                "(+{} application problem(s) in later patches that follow from the first patch that does not apply; fix it first)\n",
                self.consequences
            ));
        }
        out
    }
}

/// The per-patch rows from the findings.
fn rows(registry: &Registry, analysis: &Analysis<'_>, findings: &[Finding]) -> Vec<PatchRow> {
    registry
        .patches
        .iter()
        .map(|entry| {
            let id = entry.id.to_string();
            let own: Vec<&Finding> = findings
                .iter()
                .filter(|f| f.subject == Subject::Patch(id.clone()))
                .collect();
            let has = |kind: FindingKind| own.iter().any(|f| f.kind == kind);
            let count = |n: usize| format!("{n} problem(s)");
            match analysis.patch(&id) {
                None => PatchRow {
                    id,
                    apply: "-".into(),
                    paths: "-".into(),
                    symbols: "-".into(),
                    guards: "-".into(),
                    notes: if own.is_empty() {
                        entry.status.as_str().into()
                    } else {
                        format!("{} ({})", entry.status.as_str(), count(own.len()))
                    },
                },
                Some(a) => {
                    let ok = |bad: bool| if bad { "FAIL" } else { "ok" }.to_owned();
                    let mut notes: Vec<String> = Vec::new();
                    if !own.is_empty() {
                        notes.push(count(own.len()));
                    }
                    if let Some(first) = &a.after_failure {
                        notes.push(format!("after {first}, which does not apply"));
                    }
                    PatchRow {
                        id,
                        apply: a.fit_label().into(),
                        paths: ok(has(FindingKind::Paths)),
                        symbols: if a.after_failure.is_some() {
                            "-".into()
                        } else {
                            ok(has(FindingKind::Symbol))
                        },
                        guards: ok(has(FindingKind::GuardFile)),
                        notes: notes.join("; "),
                    }
                }
            }
        })
        .collect()
}

/// Runs every check.
///
/// # Errors
/// Environment errors only (registry, baseline missing, git); findings are
/// problems in the report.
pub fn check(ctx: &Context) -> Result<CheckReport> {
    let registry = ctx.registry()?;
    let repo = workarea::ensure_repo(&ctx.git, &ctx.layout)?;
    let tree = workarea::baseline_tree(&repo, &ctx.layout, &registry)?;
    let analyzed = analysis::analyze(&ctx.root, &registry, Measure::Surface)?;
    let facts = Facts {
        root: &ctx.root,
        registry: &registry,
        baseline_tree: tree.as_str(),
        analysis: &analyzed,
    };
    let outcomes = checks::run_all(&facts)?;
    let all: Vec<Finding> = outcomes
        .iter()
        .flat_map(|c| c.findings.iter().cloned())
        .collect();
    // Each patch's findings in series order, then everything else in check
    // order.
    let mut findings: Vec<Finding> = Vec::new();
    for entry in &registry.patches {
        let subject = Subject::Patch(entry.id.to_string());
        findings.extend(all.iter().filter(|f| f.subject == subject).cloned());
    }
    findings.extend(
        all.iter()
            .filter(|f| !matches!(f.subject, Subject::Patch(_)))
            .cloned(),
    );
    let mut notes = Vec::new();
    if registry
        .surface
        .as_ref()
        .is_some_and(|s| s.max_glue_module_lines.is_some())
    {
        notes.push(
            "surface.max_glue_module_lines is deprecated and ignored: a glue module is bounded by belonging to one patch \
             (the glue-ownership check); remove it from patches.json"
                .to_owned(),
        );
    }
    Ok(CheckReport {
        rows: rows(&registry, &analyzed, &findings),
        consequences: outcomes.iter().map(|c| c.consequences).sum(),
        checks: outcomes,
        findings,
        notes,
    })
}

/// `scripts/fork check`.
///
/// # Errors
/// Environment errors (see [`check`]).
pub fn run(ctx: &Context) -> Result<Outcome> {
    let report = check(ctx)?;
    ui::report(&report.render());
    Ok(if report.is_ok() {
        Outcome::Ok
    } else {
        Outcome::Failed
    })
}
