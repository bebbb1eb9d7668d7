//! The checks `scripts/fork check` runs, each a named function from the
//! facts (the registry, the baseline's tree id, the repository's files and
//! the [`Analysis`]) to its findings. No check builds anything.
//!
//! | check | what it asks |
//! |---|---|
//! | `pristine-baseline` | the baseline directory's tree id equals `upstream.tree` |
//! | `series-applies` | every patch file exists and parses, `depends_on` names earlier patches, every patch applies with exact context |
//! | `headers` | each patch's DEP-3 headers and trailer agree with the registry |
//! | `content-snapshots` | `patches/content/<id>.txt` is current |
//! | `declared-paths` | `paths` equals the touched files, all inside the baseline |
//! | `symbols-and-seams` | required symbols and seams exist at each patch's prefix |
//! | `guard-files` | guard tests and snapshots are listed and exist; fork crates exist |
//! | `owned-changes` | every changed path is declared by a patch that touches it |
//! | `no-orphans` | no patch file or content snapshot without an active entry |
//! | `dropped-snapshots` | no snapshot still names a dropped patch |
//! | `inventory` | `FORK_PATCHES.md` is current |
//! | `surface-limits` | the lines added to (removed from) upstream files stay within `surface` |
//! | `glue-ownership` | no new file inside the patched crate is edited by two patches (lines added to a declared switch list do not count) |
//! | `import-cycles` | no import cycle runs through a glue module (when `surface` forbids them) |

use std::collections::BTreeSet;
use std::path::Path;

use crate::analysis::{self, Analysis, Measure, PatchAnalysis};
use crate::error::{Error, Result};
use crate::exact::{HunkFit, HunkReport};
use crate::fsutil;
use crate::patchfile::{self, CONTENT_DIR, content_path};
use crate::registry::{PatchEntry, Registry, Status};
use crate::render::INVENTORY_FILE;

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
    /// The series' surface.
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
    /// A new file inside the crate is edited by more than one patch.
    GlueOwnership,
    /// An import cycle runs through a glue module.
    ImportCycle,
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

/// One problem found by a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub subject: Subject,
    /// What kind of problem it is.
    pub kind: FindingKind,
    /// The explanation (without the subject).
    pub message: String,
}

impl Finding {
    fn new(subject: Subject, kind: FindingKind, message: impl Into<String>) -> Finding {
        Finding {
            subject,
            kind,
            message: message.into(),
        }
    }

    fn patch(id: &str, kind: FindingKind, message: impl Into<String>) -> Finding {
        Finding::new(Subject::Patch(id.to_owned()), kind, message)
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.subject, self.message)
    }
}

/// The named checks, in the order they run and are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckName {
    /// The baseline is pristine.
    PristineBaseline,
    /// The series can be built: files, dependencies, exact application.
    SeriesApplies,
    /// DEP-3 headers and trailer agree with the registry.
    Headers,
    /// Content snapshots are current.
    ContentSnapshots,
    /// Declared paths equal the touched files.
    DeclaredPaths,
    /// Required symbols and seams exist at each prefix.
    SymbolsAndSeams,
    /// Guard tests, snapshots and fork crates exist.
    GuardFiles,
    /// Every changed path has an owner.
    OwnedChanges,
    /// No orphan patch files or content snapshots.
    NoOrphans,
    /// No snapshot names a dropped patch.
    DroppedSnapshots,
    /// `FORK_PATCHES.md` is current.
    Inventory,
    /// The surface stays within its line limits.
    SurfaceLimits,
    /// Each new file of the crate belongs to one patch.
    GlueOwnership,
    /// No import cycle through a glue module.
    ImportCycles,
}

impl CheckName {
    /// Every check, in order.
    pub const ALL: [CheckName; 14] = [
        CheckName::PristineBaseline,
        CheckName::SeriesApplies,
        CheckName::Headers,
        CheckName::ContentSnapshots,
        CheckName::DeclaredPaths,
        CheckName::SymbolsAndSeams,
        CheckName::GuardFiles,
        CheckName::OwnedChanges,
        CheckName::NoOrphans,
        CheckName::DroppedSnapshots,
        CheckName::Inventory,
        CheckName::SurfaceLimits,
        CheckName::GlueOwnership,
        CheckName::ImportCycles,
    ];

    /// The check's name in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::PristineBaseline => "pristine-baseline",
            CheckName::SeriesApplies => "series-applies",
            CheckName::Headers => "headers",
            CheckName::ContentSnapshots => "content-snapshots",
            CheckName::DeclaredPaths => "declared-paths",
            CheckName::SymbolsAndSeams => "symbols-and-seams",
            CheckName::GuardFiles => "guard-files",
            CheckName::OwnedChanges => "owned-changes",
            CheckName::NoOrphans => "no-orphans",
            CheckName::DroppedSnapshots => "dropped-snapshots",
            CheckName::Inventory => "inventory",
            CheckName::SurfaceLimits => "surface-limits",
            CheckName::GlueOwnership => "glue-ownership",
            CheckName::ImportCycles => "import-cycles",
        }
    }
}

/// What the checks look at.
pub struct Facts<'a, 'r> {
    /// The repository root.
    pub root: &'a Path,
    /// The registry.
    pub registry: &'r Registry,
    /// The baseline directory's tree id, as git hashes it.
    pub baseline_tree: &'a str,
    /// The in-process application of the series (with its surface).
    pub analysis: &'a Analysis<'r>,
}

/// The outcome of one named check.
#[derive(Debug, Clone)]
pub struct CheckOutcome {
    /// Which check.
    pub name: CheckName,
    /// Its findings (none: it passed).
    pub findings: Vec<Finding>,
    /// Problems it counted but did not list (application problems of
    /// patches after the first one that does not apply).
    pub consequences: usize,
    /// Whether it could not judge (e.g. the surface of a series that does
    /// not apply).
    pub skipped: bool,
}

impl CheckOutcome {
    fn of(name: CheckName, findings: Vec<Finding>) -> CheckOutcome {
        CheckOutcome {
            name,
            findings,
            consequences: 0,
            skipped: false,
        }
    }

    fn skipped(name: CheckName) -> CheckOutcome {
        CheckOutcome {
            skipped: true,
            ..CheckOutcome::of(name, Vec::new())
        }
    }

    /// `ok`, `FAIL (n)` or `skipped`.
    #[must_use]
    pub fn label(&self) -> String {
        match (self.skipped, self.findings.len()) {
            (true, _) => "skipped".to_owned(),
            (false, 0) => "ok".to_owned(),
            (false, n) => format!("FAIL ({n})"),
        }
    }
}

/// Runs every check.
///
/// # Errors
/// I/O errors reading the repository's files.
pub fn run_all(facts: &Facts<'_, '_>) -> Result<Vec<CheckOutcome>> {
    let mut out = Vec::new();
    for name in CheckName::ALL {
        out.push(run_one(name, facts)?);
    }
    Ok(out)
}

/// Runs one named check.
///
/// # Errors
/// I/O errors reading the repository's files.
pub fn run_one(name: CheckName, facts: &Facts<'_, '_>) -> Result<CheckOutcome> {
    let patches = &facts.analysis.patches;
    Ok(match name {
        CheckName::PristineBaseline => CheckOutcome::of(name, pristine_baseline(facts)),
        CheckName::SeriesApplies => {
            let (findings, consequences) = series_applies(facts.registry, patches);
            CheckOutcome {
                consequences,
                ..CheckOutcome::of(name, findings)
            }
        }
        CheckName::Headers => CheckOutcome::of(name, headers(patches)),
        CheckName::ContentSnapshots => {
            CheckOutcome::of(name, content_snapshots(facts.root, patches)?)
        }
        CheckName::DeclaredPaths => CheckOutcome::of(name, declared_paths(facts.registry, patches)),
        CheckName::SymbolsAndSeams => CheckOutcome::of(name, symbols_and_seams(patches)),
        CheckName::GuardFiles => CheckOutcome::of(name, guard_files(facts.root, patches)),
        CheckName::OwnedChanges if facts.analysis.all_apply() => {
            CheckOutcome::of(name, owned_changes(facts.analysis))
        }
        CheckName::OwnedChanges => CheckOutcome::skipped(name),
        CheckName::NoOrphans => CheckOutcome::of(name, no_orphans(facts.root, facts.registry)?),
        CheckName::DroppedSnapshots => {
            CheckOutcome::of(name, dropped_snapshots(facts.root, facts.registry)?)
        }
        CheckName::Inventory => CheckOutcome::of(name, inventory(facts)?),
        CheckName::SurfaceLimits | CheckName::GlueOwnership | CheckName::ImportCycles => {
            match &facts.analysis.surface {
                None => CheckOutcome::skipped(name),
                Some(surface) => {
                    let (kind, messages) = match name {
                        CheckName::SurfaceLimits => (
                            FindingKind::Surface,
                            facts
                                .registry
                                .surface
                                .as_ref()
                                .map(|l| surface.violations(l))
                                .unwrap_or_default(),
                        ),
                        CheckName::GlueOwnership => {
                            (FindingKind::GlueOwnership, surface.ownership_violations())
                        }
                        _ => (
                            FindingKind::ImportCycle,
                            facts
                                .registry
                                .surface
                                .as_ref()
                                .map(|l| surface.cycle_violations(l))
                                .unwrap_or_default(),
                        ),
                    };
                    CheckOutcome::of(
                        name,
                        messages
                            .into_iter()
                            .map(|m| Finding::new(Subject::Surface, kind, m))
                            .collect(),
                    )
                }
            }
        }
    })
}

/// `pristine-baseline`: the baseline's tree id is the registered one.
#[must_use]
pub fn pristine_baseline(facts: &Facts<'_, '_>) -> Vec<Finding> {
    let registry = facts.registry;
    if facts.baseline_tree == registry.upstream.tree {
        return Vec::new();
    }
    vec![Finding::new(
        Subject::Baseline,
        FindingKind::Baseline,
        format!(
            "{} has tree {} but upstream.tree is {}: the baseline must stay pristine; \
             fork work must go into a patch or a fork crate (the baseline changes only through `scripts/fork sync --write`)",
            crate::workarea::baseline_label(registry),
            facts.baseline_tree,
            registry.upstream.tree
        ),
    )]
}

/// `series-applies`: the findings that stop the series from being built
/// (missing or unparsable files, bad dependencies, patches that do not
/// apply) plus shifted patches, and the number of application problems of
/// later patches that follow from the first one that does not apply.
/// `apply` refuses with the first blocking one; `check` lists them all.
#[must_use]
pub fn series_applies(
    registry: &Registry,
    analysis: &[PatchAnalysis<'_>],
) -> (Vec<Finding>, usize) {
    let active_ids: Vec<&str> = registry.active().map(|p| p.id.as_str()).collect();
    let mut out = Vec::new();
    let mut consequences = 0;
    for (idx, a) in analysis.iter().enumerate() {
        let id = a.entry.id.as_str();
        if let Some(p) = &a.file_problem {
            out.push(Finding::patch(id, FindingKind::PatchFile, p.clone()));
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
            out.push(Finding::patch(
                id,
                FindingKind::Dependency,
                format!("depends_on {dep}, which {why}"),
            ));
        }
        let Some(exact) = &a.exact else {
            continue;
        };
        if a.after_failure.is_some() {
            if !exact.is_exact() {
                consequences += exact.problems().len().max(1);
            }
            continue;
        }
        for h in &exact.hunks {
            match (h.fit, hunk_problem(h)) {
                (HunkFit::Offset(_), Some(t)) if a.applies => {
                    out.push(Finding::patch(id, FindingKind::ApplyOffset, t));
                }
                (_, Some(t)) => out.push(Finding::patch(id, FindingKind::ApplyFails, t)),
                (_, None) => {}
            }
        }
        for f in &exact.file_problems {
            out.push(Finding::patch(id, FindingKind::ApplyFails, f.clone()));
        }
    }
    (out, consequences)
}

fn hunk_problem(h: &HunkReport) -> Option<String> {
    match h.fit {
        HunkFit::Exact => None,
        HunkFit::Offset(d) => Some(format!(
            "{} hunk #{} {}: context matches only at offset {d:+} (exact position required; refresh the patch)",
            h.path, h.number, h.header
        )),
        HunkFit::Missing => Some(format!(
            "{} hunk #{} {}: removed/context lines not found",
            h.path, h.number, h.header
        )),
    }
}

/// `headers`: DEP-3 headers and the trailer match the registry.
#[must_use]
pub fn headers(analysis: &[PatchAnalysis<'_>]) -> Vec<Finding> {
    analysis
        .iter()
        .filter_map(|a| Some((a.entry, a.parsed.as_ref()?)))
        .flat_map(|(entry, parsed)| {
            patchfile::message_mismatches(parsed, entry)
                .into_iter()
                .map(|m| {
                    Finding::patch(
                        entry.id.as_str(),
                        FindingKind::Header,
                        format!("header: {m}"),
                    )
                })
        })
        .collect()
}

/// `content-snapshots`: each patch's normalized content snapshot is current.
///
/// # Errors
/// I/O errors reading a snapshot.
pub fn content_snapshots(root: &Path, analysis: &[PatchAnalysis<'_>]) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    for a in analysis {
        let Some(parsed) = &a.parsed else {
            continue;
        };
        let id = a.entry.id.as_str();
        let rel = content_path(id);
        let want = patchfile::content_snapshot(id, parsed);
        let state = match fsutil::read_optional(&root.join(&rel))? {
            Some(have) if have == want => continue,
            Some(_) => "stale",
            None => "missing",
        };
        out.push(Finding::patch(
            id,
            FindingKind::ContentSnapshot,
            format!("{rel} is {state} (run `scripts/fork refresh`)"),
        ));
    }
    Ok(out)
}

/// `declared-paths`: `paths` equals the files each patch touches, and they
/// are all inside the baseline.
#[must_use]
pub fn declared_paths(registry: &Registry, analysis: &[PatchAnalysis<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for a in analysis {
        let Some(parsed) = &a.parsed else {
            continue;
        };
        let id = a.entry.id.as_str();
        let touched: BTreeSet<String> = parsed.paths().into_iter().collect();
        let declared: BTreeSet<String> = a.entry.paths.iter().cloned().collect();
        for p in touched.difference(&declared) {
            out.push(Finding::patch(
                id,
                FindingKind::Paths,
                format!("touches {p}, which `paths` does not declare"),
            ));
        }
        for p in declared.difference(&touched) {
            out.push(Finding::patch(
                id,
                FindingKind::Paths,
                format!("declares {p} in `paths` but does not touch it"),
            ));
        }
        for p in touched.iter().filter(|p| !registry.upstream.contains(p)) {
            out.push(Finding::patch(
                id,
                FindingKind::Paths,
                format!(
                    "touches {p}, outside the baseline {} (fork code belongs in a fork crate)",
                    crate::workarea::baseline_label(registry)
                ),
            ));
        }
    }
    out
}

/// `symbols-and-seams`: the required symbols and seams missing at each
/// patch's prefix (measured by the analysis).
#[must_use]
pub fn symbols_and_seams(analysis: &[PatchAnalysis<'_>]) -> Vec<Finding> {
    analysis
        .iter()
        .flat_map(|a| {
            a.guard_problems
                .iter()
                .map(|g| Finding::patch(a.entry.id.as_str(), FindingKind::Symbol, g.clone()))
        })
        .collect()
}

/// `guard-files`: guard tests and snapshots are listed and exist, and so do
/// the fork crates.
#[must_use]
pub fn guard_files(root: &Path, analysis: &[PatchAnalysis<'_>]) -> Vec<Finding> {
    analysis
        .iter()
        .flat_map(|a| {
            guard_file_problems(root, a.entry)
                .into_iter()
                .map(|g| Finding::patch(a.entry.id.as_str(), FindingKind::GuardFile, g))
        })
        .collect()
}

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

/// `owned-changes`: every path the series changes is declared and touched
/// by a patch (meaningful only when every patch applies: the tree is then
/// the series' tree).
#[must_use]
pub fn owned_changes(analysis: &Analysis<'_>) -> Vec<Finding> {
    analysis
        .differing
        .iter()
        .filter(|path| {
            !analysis.patches.iter().any(|a| {
                a.entry.paths.contains(path)
                    && a.parsed.as_ref().is_some_and(|p| p.paths().contains(path))
            })
        })
        .map(|path| {
            Finding::new(
                Subject::Unregistered,
                FindingKind::Unregistered,
                format!("{path} differs from the baseline but no patch declares and touches it"),
            )
        })
        .collect()
}

/// `no-orphans`: `.patch` files and content snapshots that no active entry
/// owns.
///
/// # Errors
/// I/O errors listing the directories.
pub fn no_orphans(root: &Path, registry: &Registry) -> Result<Vec<Finding>> {
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
                Some(p) => out.push(Finding::patch(
                    p.id.as_str(),
                    FindingKind::Orphan,
                    format!(
                        "{rel} still exists although the patch is {}; delete it",
                        p.status.as_str()
                    ),
                )),
                None => out.push(Finding::new(
                    Subject::Orphan,
                    FindingKind::Orphan,
                    format!("{rel} is not registered in patches.json"),
                )),
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
            out.push(Finding::new(
                Subject::Orphan,
                FindingKind::Orphan,
                format!("{rel} belongs to no active patch; delete it"),
            ));
        }
    }
    Ok(out)
}

/// `dropped-snapshots`: no insta snapshot under the tests package still
/// starts with a dropped patch's id.
///
/// # Errors
/// I/O errors listing the tests package.
pub fn dropped_snapshots(root: &Path, registry: &Registry) -> Result<Vec<Finding>> {
    let tests = &registry.workspace.tests_path;
    let snaps: Vec<String> = fsutil::list_files(&root.join(tests))?
        .into_iter()
        .filter(|f| f.ends_with(".snap"))
        .collect();
    let mut out = Vec::new();
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
                out.push(Finding::patch(
                    p.id.as_str(),
                    FindingKind::DroppedSnapshot,
                    format!("snapshot {tests}/{s} still names this dropped patch; delete it"),
                ));
            }
        }
    }
    Ok(out)
}

/// `inventory`: `FORK_PATCHES.md` is what `render` writes.
///
/// # Errors
/// I/O errors reading the inventory.
pub fn inventory(facts: &Facts<'_, '_>) -> Result<Vec<Finding>> {
    let want = crate::render::render(
        facts.registry,
        &facts.analysis.line_counts(),
        facts.analysis.surface.as_ref(),
    );
    let state = match fsutil::read_optional(&facts.root.join(INVENTORY_FILE))? {
        Some(have) if have == want => return Ok(Vec::new()),
        Some(_) => "stale",
        None => "missing",
    };
    Ok(vec![Finding::new(
        Subject::Inventory,
        FindingKind::Inventory,
        format!("{INVENTORY_FILE} is {state} (run `scripts/fork render`)"),
    )])
}

/// Refuses a series that cannot be built, with the first blocking finding
/// and a count of the rest: the same verdict `check` gives (exit 1).
///
/// # Errors
/// [`Error::SeriesInvalid`]; I/O errors reading the baseline.
pub fn preflight(root: &Path, registry: &Registry) -> Result<()> {
    // Only the series findings decide; the surface is not measured.
    let analyzed = analysis::analyze(root, registry, Measure::SeriesOnly)?;
    let (findings, consequences) = series_applies(registry, &analyzed.patches);
    match findings.iter().find(|f| f.kind.blocks_apply()) {
        None => Ok(()),
        Some(first) => Err(Error::SeriesInvalid {
            first: first.to_string(),
            more: findings.len() - 1 + consequences,
        }),
    }
}
