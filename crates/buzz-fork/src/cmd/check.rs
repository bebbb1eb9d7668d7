//! `check`: everything that can be verified without building.
//!
//! 1. the baseline directory's tree id equals `upstream.tree`;
//! 2. registry and `patches/` agree (files exist and parse, no orphans,
//!    dependencies, DEP-3 headers and trailer, content snapshots);
//! 3. every patch applies in order with exact context and zero offset;
//! 4. declared `paths` equal the touched files, and every changed path is
//!    declared by a patch that touches it;
//! 5. required symbols and seams exist at each patch's prefix;
//! 6. guard tests and snapshots exist, no snapshot names a dropped patch,
//!    fork crates exist;
//! 7. `FORK_PATCHES.md` is current.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::cmd::{Context, Outcome};
use crate::error::{Error, Result};
use crate::exact::{ApplyReport, Overlay, Strictness};
use crate::fsutil;
use crate::guards;
use crate::patchfile::{self, ParsedPatch};
use crate::registry::{PatchEntry, Registry, Status};
use crate::render::INVENTORY_FILE;
use crate::ui::{self, Table};
use crate::workarea;

/// Directory of the normalized content snapshots.
pub const CONTENT_DIR: &str = "patches/content";

/// Content snapshot path of a patch.
#[must_use]
pub fn content_path(id: &str) -> String {
    format!("{CONTENT_DIR}/{id}.txt")
}

/// What a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    /// A registered patch.
    Patch(String),
    /// The baseline directory.
    Baseline,
    /// A changed path no patch owns.
    Unregistered,
    /// A file no registry entry owns.
    Orphan,
    /// `FORK_PATCHES.md`.
    Inventory,
    /// The series' surface limits.
    Surface,
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Patch(id) => write!(f, "[{id}]"),
            Subject::Baseline => f.write_str("[baseline]"),
            Subject::Unregistered => f.write_str("[unregistered]"),
            Subject::Orphan => f.write_str("[orphan]"),
            Subject::Inventory => f.write_str("[inventory]"),
            Subject::Surface => f.write_str("[surface]"),
        }
    }
}

/// The kind of a finding; the table columns and `apply`'s preflight read
/// this, never the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// The patch file is missing or does not parse.
    PatchFile,
    /// `depends_on` names an unknown, inactive or later patch.
    Dependency,
    /// DEP-3 header or trailer out of step with the registry.
    Header,
    /// The content snapshot is missing or stale.
    ContentSnapshot,
    /// Declared `paths` disagree with the touched files, or a path is
    /// outside the baseline.
    Paths,
    /// The patch applies only at shifted lines.
    ApplyOffset,
    /// The patch does not apply at all.
    ApplyFails,
    /// A required symbol or seam is missing at the patch's prefix.
    Symbol,
    /// Guard tests, snapshots or fork crates are missing.
    GuardFile,
    /// A snapshot still names a dropped patch.
    DroppedSnapshot,
    /// The baseline is not pristine.
    Baseline,
    /// A changed path no patch declares.
    Unregistered,
    /// A patch file or content snapshot no active patch owns.
    Orphan,
    /// `FORK_PATCHES.md` is stale or missing.
    Inventory,
    /// A surface limit is exceeded.
    Surface,
}

impl FindingKind {
    /// Whether the series cannot be built while this finding stands:
    /// `apply` (and every command built on it) refuses with the first one.
    #[must_use]
    pub fn blocks_apply(self) -> bool {
        matches!(
            self,
            FindingKind::PatchFile | FindingKind::Dependency | FindingKind::ApplyFails
        )
    }
}

/// One problem found by `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub subject: Subject,
    /// What kind of problem it is.
    pub kind: FindingKind,
    /// The explanation (without the subject).
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.subject, self.message)
    }
}

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
    /// Every finding, patch findings first in series order.
    pub findings: Vec<Finding>,
    /// Application problems of patches after one that does not apply: they
    /// follow from it, so they are counted, not listed.
    pub consequences: usize,
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

    /// Table plus problem list.
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

/// Per-patch analysis shared by `check` and `status`.
pub struct PatchAnalysis<'r> {
    /// The entry.
    pub entry: &'r PatchEntry,
    /// The parsed file, when it exists and parses.
    pub parsed: Option<ParsedPatch>,
    /// Raw file text.
    pub text: Option<String>,
    /// Why the file could not be used.
    pub file_problem: Option<String>,
    /// Strict application report (None when the file was unusable).
    pub exact: Option<ApplyReport>,
    /// Whether the patch applies at all (exact or shifted).
    pub applies: bool,
    /// The earlier patch that did not apply, if any: this patch's
    /// application and guards are then measured on a tree without it.
    pub after_failure: Option<String>,
    /// Missing symbols and seams at this prefix.
    pub guard_problems: Vec<String>,
}

/// Reads a baseline file for the overlay; paths outside the baseline (and
/// build output under a baseline crate's `target/`) are absent.
pub fn baseline_reader<'a>(
    root: &'a Path,
    upstream: &'a crate::registry::Upstream,
) -> crate::exact::BaseReader<'a> {
    Box::new(move |path: &str| {
        if !in_baseline(upstream, path) {
            return Ok(None);
        }
        let full = root.join(path);
        if full.is_file() {
            fsutil::read_optional(&full)
        } else {
            Ok(None)
        }
    })
}

/// Whether a repo-relative file path is part of the baseline.
#[must_use]
pub fn in_baseline(upstream: &crate::registry::Upstream, path: &str) -> bool {
    upstream.all_paths().iter().any(|(local, _)| {
        path == local
            || path
                .strip_prefix(local.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.starts_with("target/"))
    })
}

/// Applies the active series in process over the baseline directory,
/// strictly, checking guards at each prefix, and measures the series'
/// surface.
///
/// # Errors
/// I/O errors reading the baseline.
pub fn analyze<'r>(root: &Path, registry: &'r Registry) -> Result<Analysis<'r>> {
    analyze_with(root, registry, true)
}

/// [`analyze`], measuring the surface only when `surface` is true: the
/// measurement parses every patched Rust file, which `preflight` (run by
/// every `apply` and `sync`) does not need.
///
/// # Errors
/// I/O errors reading the baseline.
pub fn analyze_with<'r>(
    root: &Path,
    registry: &'r Registry,
    surface: bool,
) -> Result<Analysis<'r>> {
    let mut overlay = Overlay::new(baseline_reader(root, &registry.upstream));
    let mut out = Vec::new();
    let mut broken: Option<String> = None;
    for entry in registry.active() {
        let mut a = PatchAnalysis {
            entry,
            parsed: None,
            text: None,
            file_problem: None,
            exact: None,
            applies: false,
            after_failure: broken.clone(),
            guard_problems: Vec::new(),
        };
        match fsutil::read_optional(&root.join(&entry.file))? {
            None => a.file_problem = Some(format!("patch file {} does not exist", entry.file)),
            Some(text) => {
                match patchfile::parse(&text) {
                    Ok(p) => a.parsed = Some(p),
                    Err(e) => {
                        a.file_problem =
                            Some(format!("{} does not parse as a patch: {e}", entry.file));
                    }
                }
                a.text = Some(text);
            }
        }
        if let Some(parsed) = &a.parsed {
            let report = overlay.apply(parsed, Strictness::Exact)?;
            if report.applied {
                a.applies = true;
            } else {
                // Keep going with the shifted application so later patches
                // and guards are still checked.
                a.applies = overlay.apply(parsed, Strictness::AllowOffset)?.applied;
            }
            a.exact = Some(report);
            if a.applies && broken.is_none() {
                a.guard_problems = guard_problems(&overlay, entry)?;
            }
        }
        if !a.applies && broken.is_none() {
            broken = Some(entry.id.to_string());
        }
        out.push(a);
    }
    let differing = overlay.differing_paths()?;
    let surface = if surface && broken.is_none() {
        let parsed: Vec<(&str, &ParsedPatch)> = out
            .iter()
            .filter_map(|a| a.parsed.as_ref().map(|p| (a.entry.id.as_str(), p)))
            .collect();
        Some(crate::surface::measure(
            registry,
            &parsed,
            &mut |path: &str| Ok(in_baseline(&registry.upstream, path) && root.join(path).is_file()),
            &mut |path: &str| overlay.read(path),
        )?)
    } else {
        None
    };
    Ok(Analysis {
        patches: out,
        differing,
        surface,
    })
}

/// The in-process application of the active series.
pub struct Analysis<'r> {
    /// One analysis per active patch, in order.
    pub patches: Vec<PatchAnalysis<'r>>,
    /// Paths the applied patches changed.
    pub differing: Vec<String>,
    /// The series' surface; `None` when a patch does not apply (the patched
    /// tree is then not the series' tree) or it was not asked for.
    pub surface: Option<crate::surface::Surface>,
}

impl Analysis<'_> {
    /// Added/removed line counts of each active patch whose file parses,
    /// from the files this analysis already read and parsed (the inventory
    /// needs them next to the surface).
    #[must_use]
    pub fn line_counts(&self) -> BTreeMap<String, (usize, usize)> {
        self.patches
            .iter()
            .filter_map(|a| Some((a.entry.id.to_string(), a.parsed.as_ref()?.line_counts())))
            .collect()
    }
}

/// Missing required symbols and seams of `entry` in the current overlay.
///
/// # Errors
/// I/O errors reading the baseline.
pub fn guard_problems(overlay: &Overlay<'_>, entry: &PatchEntry) -> Result<Vec<String>> {
    let mut sources: BTreeMap<String, Option<String>> = BTreeMap::new();
    guards::entry_problems(entry, |path: &str| -> Result<Option<String>> {
        if let Some(s) = sources.get(path) {
            return Ok(s.clone());
        }
        let s = overlay.read(path)?;
        sources.insert(path.to_owned(), s.clone());
        Ok(s)
    })
}

/// Findings about the registry and patch files that stop the series from
/// being built (missing or unparsable files, bad dependencies, patches that
/// do not apply) plus shifted patches, and the number of application
/// problems of later patches that follow from the first one that does not
/// apply. `apply` refuses with the first blocking one; `check` lists them all.
#[must_use]
pub fn series_findings(
    registry: &Registry,
    analysis: &[PatchAnalysis<'_>],
) -> (Vec<Finding>, usize) {
    let active_ids: Vec<&str> = registry.active().map(|p| p.id.as_str()).collect();
    let mut out = Vec::new();
    let mut consequences = 0;
    for (idx, a) in analysis.iter().enumerate() {
        let subject = Subject::Patch(a.entry.id.to_string());
        let mut push = |kind, message: String| {
            out.push(Finding {
                subject: subject.clone(),
                kind,
                message,
            });
        };
        if let Some(p) = &a.file_problem {
            push(FindingKind::PatchFile, p.clone());
        }
        for dep in &a.entry.depends_on {
            if active_ids[..idx].contains(&dep.as_str()) {
                continue;
            }
            let registered = registry.patches.iter().find(|p| p.id == *dep);
            let why = if active_ids.contains(&dep.as_str()) {
                "comes later in the series; move it before this patch in patches.json"
            } else {
                match registered.map(|p| p.status) {
                    // Upstream has it now: the dependency is in the baseline.
                    Some(Status::Upstreamed) => continue,
                    Some(_) => "was dropped",
                    None => "is not registered in patches.json",
                }
            };
            push(
                FindingKind::Dependency,
                format!("depends_on {dep}, which {why}"),
            );
        }
        if let Some(exact) = &a.exact {
            if a.after_failure.is_some() {
                if !exact.is_exact() {
                    consequences += exact.problems().len().max(1);
                }
            } else {
                for h in &exact.hunks {
                    let text = exact_hunk_problem(h);
                    match (h.fit, text) {
                        (crate::exact::HunkFit::Offset(_), Some(t)) if a.applies => {
                            push(FindingKind::ApplyOffset, t);
                        }
                        (_, Some(t)) => push(FindingKind::ApplyFails, t),
                        (_, None) => {}
                    }
                }
                for f in &exact.file_problems {
                    push(FindingKind::ApplyFails, f.clone());
                }
            }
        }
    }
    (out, consequences)
}

fn exact_hunk_problem(h: &crate::exact::HunkReport) -> Option<String> {
    match h.fit {
        crate::exact::HunkFit::Exact => None,
        crate::exact::HunkFit::Offset(d) => Some(format!(
            "{} hunk #{} {}: context matches only at offset {d:+} (exact position required; refresh the patch)",
            h.path, h.number, h.header
        )),
        crate::exact::HunkFit::Missing => Some(format!(
            "{} hunk #{} {}: removed/context lines not found",
            h.path, h.number, h.header
        )),
    }
}

/// Refuses a series that cannot be built, with the first blocking finding
/// and a count of the rest: the same verdict `check` gives (exit 1).
///
/// # Errors
/// [`Error::SeriesInvalid`]; I/O errors reading the baseline.
pub fn preflight(root: &Path, registry: &Registry) -> Result<()> {
    // Only the series findings decide; the surface is not measured.
    let analysis = analyze_with(root, registry, false)?;
    let (findings, consequences) = series_findings(registry, &analysis.patches);
    let blocking: Vec<&Finding> = findings.iter().filter(|f| f.kind.blocks_apply()).collect();
    match blocking.first() {
        None => Ok(()),
        Some(first) => Err(Error::SeriesInvalid {
            first: first.to_string(),
            more: findings.len() - 1 + consequences,
        }),
    }
}

/// Runs every check.
///
/// # Errors
/// Environment errors only (registry, baseline missing, git); findings are
/// problems in the report.
pub fn check(ctx: &Context) -> Result<CheckReport> {
    let registry = ctx.registry()?;
    let root = &ctx.root;
    let mut report = CheckReport::default();
    let mut general: Vec<Finding> = Vec::new();
    let finding = |subject: Subject, kind: FindingKind, message: String| Finding {
        subject,
        kind,
        message,
    };

    // (1) Pristine baseline.
    let repo = workarea::ensure_repo(&ctx.git, &ctx.layout)?;
    let tree = workarea::baseline_tree(&repo, &ctx.layout, &registry)?;
    if tree.as_str() != registry.upstream.tree {
        general.push(finding(
            Subject::Baseline,
            FindingKind::Baseline,
            format!(
                "{} has tree {} but upstream.tree is {}: the baseline must stay pristine; \
                 fork work must go into a patch or a fork crate (the baseline changes only through `scripts/fork sync --write`)",
                workarea::baseline_label(&registry),
                tree,
                registry.upstream.tree
            ),
        ));
    }

    // (2)-(5) Patches in order.
    let analyzed = analyze(root, &registry)?;
    let analysis = &analyzed.patches;
    let differing = &analyzed.differing;
    let (series, consequences) = series_findings(&registry, analysis);
    report.consequences = consequences;
    let mut per_patch: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for f in series {
        if let Subject::Patch(id) = &f.subject {
            per_patch.entry(id.clone()).or_default().push(f);
        }
    }
    for a in analysis {
        let id = a.entry.id.to_string();
        let subject = Subject::Patch(id.clone());
        let list = per_patch.entry(id.clone()).or_default();
        let mut push = |kind, message: String| list.push(finding(subject.clone(), kind, message));
        if let Some(parsed) = &a.parsed {
            for m in patchfile::message_mismatches(parsed, a.entry) {
                push(FindingKind::Header, format!("header: {m}"));
            }
            let snapshot_path = root.join(content_path(&id));
            let want = patchfile::content_snapshot(&id, parsed);
            match fsutil::read_optional(&snapshot_path)? {
                Some(have) if have == want => {}
                Some(_) => push(
                    FindingKind::ContentSnapshot,
                    format!(
                        "{} is stale (run `scripts/fork refresh`)",
                        content_path(&id)
                    ),
                ),
                None => push(
                    FindingKind::ContentSnapshot,
                    format!(
                        "{} is missing (run `scripts/fork refresh`)",
                        content_path(&id)
                    ),
                ),
            }
            let touched: BTreeSet<String> = parsed.paths().into_iter().collect();
            let declared: BTreeSet<String> = a.entry.paths.iter().cloned().collect();
            for p in touched.difference(&declared) {
                push(
                    FindingKind::Paths,
                    format!("touches {p}, which `paths` does not declare"),
                );
            }
            for p in declared.difference(&touched) {
                push(
                    FindingKind::Paths,
                    format!("declares {p} in `paths` but does not touch it"),
                );
            }
            for p in &touched {
                if !registry.upstream.contains(p) {
                    push(
                        FindingKind::Paths,
                        format!(
                            "touches {p}, outside the baseline {} (fork code belongs in a fork crate)",
                            workarea::baseline_label(&registry)
                        ),
                    );
                }
            }
        }
        for g in &a.guard_problems {
            push(FindingKind::Symbol, g.clone());
        }
        for g in guard_file_problems(root, a.entry) {
            push(FindingKind::GuardFile, g);
        }
    }
    // Paths changed by the series but owned by no patch; meaningless once a
    // patch did not apply (the tree is then not the series' tree).
    if analysis.iter().all(|a| a.applies) {
        for path in differing {
            let owner = analysis.iter().any(|a| {
                a.entry.paths.contains(path)
                    && a.parsed.as_ref().is_some_and(|p| p.paths().contains(path))
            });
            if !owner {
                general.push(finding(
                    Subject::Unregistered,
                    FindingKind::Unregistered,
                    format!(
                        "{path} differs from the baseline but no patch declares and touches it"
                    ),
                ));
            }
        }
    }

    // Orphan patch files and content snapshots.
    general.extend(orphans(root, &registry)?);

    // (6) No snapshot names a dropped patch.
    let snaps = snapshot_files(&root.join(&registry.workspace.tests_path))?;
    for p in registry
        .patches
        .iter()
        .filter(|p| p.status == Status::Dropped)
    {
        let prefix = p.id.snapshot_prefix();
        for s in &snaps {
            let name = s.rsplit('/').next().unwrap_or(s);
            let first = name
                .trim_end_matches(".snap")
                .split("__")
                .next()
                .unwrap_or("");
            if first == prefix {
                per_patch.entry(p.id.to_string()).or_default().push(finding(
                    Subject::Patch(p.id.to_string()),
                    FindingKind::DroppedSnapshot,
                    format!(
                        "snapshot {}/{s} still names this dropped patch; delete it",
                        registry.workspace.tests_path
                    ),
                ));
            }
        }
    }

    // (7) Inventory and surface limits.
    let inventory = crate::render::render(
        &registry,
        &analyzed.line_counts(),
        analyzed.surface.as_ref(),
    );
    match fsutil::read_optional(&root.join(INVENTORY_FILE))? {
        Some(have) if have == inventory => {}
        Some(_) => general.push(finding(
            Subject::Inventory,
            FindingKind::Inventory,
            format!("{INVENTORY_FILE} is stale (run `scripts/fork render`)"),
        )),
        None => general.push(finding(
            Subject::Inventory,
            FindingKind::Inventory,
            format!("{INVENTORY_FILE} is missing (run `scripts/fork render`)"),
        )),
    }
    if let (Some(limits), Some(surface)) = (&registry.surface, &analyzed.surface) {
        for v in surface.violations(limits) {
            general.push(finding(Subject::Surface, FindingKind::Surface, v));
        }
    }

    // Rows.
    for entry in &registry.patches {
        let id = entry.id.to_string();
        let list = per_patch.remove(&id).unwrap_or_default();
        let a = analysis.iter().find(|a| a.entry.id == entry.id);
        let has = |kind: FindingKind| list.iter().any(|f| f.kind == kind);
        let row = match a {
            None => PatchRow {
                id: id.clone(),
                apply: "-".into(),
                paths: "-".into(),
                symbols: "-".into(),
                guards: "-".into(),
                notes: if list.is_empty() {
                    entry.status.as_str().into()
                } else {
                    format!("{} ({} problem(s))", entry.status.as_str(), list.len())
                },
            },
            Some(a) => {
                let apply = match (&a.exact, a.applies, &a.after_failure) {
                    (_, _, Some(_)) => "blocked",
                    (Some(r), _, None) if r.is_exact() => "exact",
                    (Some(_), true, None) => "offset",
                    _ => "FAIL",
                };
                let ok = |bad: bool| if bad { "FAIL" } else { "ok" }.to_owned();
                let mut notes = if list.is_empty() {
                    String::new()
                } else {
                    format!("{} problem(s)", list.len())
                };
                if let Some(first) = &a.after_failure {
                    if !notes.is_empty() {
                        notes.push_str("; ");
                    }
                    notes.push_str(&format!("after {first}, which does not apply"));
                }
                PatchRow {
                    id: id.clone(),
                    apply: apply.into(),
                    paths: ok(has(FindingKind::Paths)),
                    symbols: if a.after_failure.is_some() {
                        "-".into()
                    } else {
                        ok(has(FindingKind::Symbol))
                    },
                    guards: ok(has(FindingKind::GuardFile)),
                    notes,
                }
            }
        };
        report.rows.push(row);
        report.findings.extend(list);
    }
    report.findings.extend(general);
    Ok(report)
}

/// Guard tests, snapshots and fork crates of an active entry.
fn guard_file_problems(root: &Path, entry: &PatchEntry) -> Vec<String> {
    let mut out = Vec::new();
    if entry.guard_tests.is_empty() {
        out.push("guard: no guard test (guard_tests is empty)".to_owned());
    }
    if entry.guard_snapshots.is_empty() {
        out.push("guard: no guard snapshot (guard_snapshots is empty)".to_owned());
    }
    let mut existing = 0;
    for s in &entry.guard_snapshots {
        if root.join(s).is_file() {
            existing += 1;
        } else {
            out.push(format!("guard: snapshot {s} does not exist"));
        }
    }
    if entry.guard_snapshots.len() > 1 && existing == 0 {
        out.push("guard: none of the guard snapshots exists".to_owned());
    }
    for c in &entry.fork_crates {
        if !root.join(c).join("Cargo.toml").is_file() {
            out.push(format!(
                "guard: fork crate {c} does not exist (no {c}/Cargo.toml)"
            ));
        }
    }
    out
}

/// `.patch` files no active entry owns, and content snapshots no active entry owns.
fn orphans(root: &Path, registry: &Registry) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    let mut dirs: BTreeSet<String> = BTreeSet::from(["patches".to_owned()]);
    for p in &registry.patches {
        if let Some((dir, _)) = p.file.rsplit_once('/') {
            dirs.insert(dir.to_owned());
        }
    }
    for dir in &dirs {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(std::result::Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".patch"))
            .collect();
        names.sort();
        for name in names {
            let rel = format!("{dir}/{name}");
            match registry.patches.iter().find(|p| p.file == rel) {
                Some(p) if p.is_active() => {}
                Some(p) => out.push(Finding {
                    subject: Subject::Patch(p.id.to_string()),
                    kind: FindingKind::Orphan,
                    message: format!(
                        "{rel} still exists although the patch is {}; delete it",
                        p.status.as_str()
                    ),
                }),
                None => out.push(Finding {
                    subject: Subject::Orphan,
                    kind: FindingKind::Orphan,
                    message: format!("{rel} is not registered in patches.json"),
                }),
            }
        }
    }
    let active: BTreeSet<String> = registry
        .active()
        .map(|p| content_path(p.id.as_str()))
        .collect();
    for f in fsutil::list_files(&root.join(CONTENT_DIR))? {
        let rel = format!("{CONTENT_DIR}/{f}");
        if !active.contains(&rel) {
            out.push(Finding {
                subject: Subject::Orphan,
                kind: FindingKind::Orphan,
                message: format!("{rel} belongs to no active patch; delete it"),
            });
        }
    }
    Ok(out)
}

/// `.snap` files under a directory, relative paths.
fn snapshot_files(dir: &Path) -> Result<Vec<String>> {
    Ok(fsutil::list_files(dir)?
        .into_iter()
        .filter(|f| f.ends_with(".snap"))
        .collect())
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
