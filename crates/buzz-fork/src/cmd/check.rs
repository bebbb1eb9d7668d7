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
use crate::error::Result;
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

/// One row of the per-patch table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchRow {
    /// Patch id.
    pub id: String,
    /// exact / offset / FAIL / - (inactive).
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
    /// Every problem, prefixed with what it concerns (`[id]`, `[baseline]`, …).
    pub problems: Vec<String>,
}

impl CheckReport {
    /// True when no problem was found.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
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
            &format!("\n{} problem(s):", self.problems.len()),
            &self.problems,
        ) {
            Some(list) => out.push_str(&list),
            None => out.push_str("\ncheck passed\n"),
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
    /// Missing symbols and seams at this prefix.
    pub guard_problems: Vec<String>,
}

/// Reads a baseline file for the overlay; paths outside the baseline are absent.
fn baseline_reader<'a>(root: &'a Path, upstream_path: &'a str) -> crate::exact::BaseReader<'a> {
    Box::new(move |path: &str| {
        let Some(rest) = path.strip_prefix(upstream_path) else {
            return Ok(None);
        };
        if !rest.starts_with('/') || rest.starts_with("/target/") {
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

/// Applies the active series in process over the baseline directory,
/// strictly, checking guards at each prefix.
///
/// # Errors
/// I/O errors reading the baseline.
pub fn analyze<'r>(
    root: &Path,
    registry: &'r Registry,
) -> Result<(Vec<PatchAnalysis<'r>>, Vec<String>)> {
    let mut overlay = Overlay::new(baseline_reader(root, &registry.upstream.path));
    let mut out = Vec::new();
    for entry in registry.active() {
        let mut a = PatchAnalysis {
            entry,
            parsed: None,
            text: None,
            file_problem: None,
            exact: None,
            applies: false,
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
            if a.applies {
                a.guard_problems = guard_problems(&overlay, entry)?;
            }
        }
        out.push(a);
    }
    let differing = overlay.differing_paths()?;
    Ok((out, differing))
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

/// Runs every check.
///
/// # Errors
/// Environment errors only (registry, baseline missing, git); findings are
/// problems in the report.
pub fn check(ctx: &Context) -> Result<CheckReport> {
    let registry = ctx.registry()?;
    let root = &ctx.root;
    let mut report = CheckReport::default();
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut general: Vec<String> = Vec::new();

    // (1) Pristine baseline.
    let repo = workarea::ensure_repo(&ctx.git, &ctx.layout)?;
    let baseline = ctx.layout.baseline(&registry);
    let tree = workarea::directory_tree(&repo, &ctx.layout, &baseline)?;
    if tree.as_str() != registry.upstream.tree {
        general.push(format!(
            "[baseline] {} has tree {} but upstream.tree is {}: the baseline must stay pristine; \
             fork work must go into a patch or a fork crate (the baseline changes only through `scripts/fork sync --write`)",
            registry.upstream.path, tree, registry.upstream.tree
        ));
    }

    // (2)-(5) Patches in order.
    let (analysis, differing) = analyze(root, &registry)?;
    let active_ids: Vec<&str> = registry.active().map(|p| p.id.as_str()).collect();
    for (idx, a) in analysis.iter().enumerate() {
        let id = a.entry.id.to_string();
        let list = problems.entry(id.clone()).or_default();
        if let Some(p) = &a.file_problem {
            list.push(p.clone());
        }
        for dep in &a.entry.depends_on {
            if !active_ids[..idx].contains(&dep.as_str()) {
                let why = if active_ids.contains(&dep.as_str()) {
                    "comes later in the series"
                } else if registry.patches.iter().any(|p| p.id == *dep) {
                    "is not active"
                } else {
                    "is not registered"
                };
                list.push(format!("depends_on {dep}, which {why}"));
            }
        }
        if let Some(parsed) = &a.parsed {
            for m in patchfile::message_mismatches(parsed, a.entry) {
                list.push(format!("header: {m}"));
            }
            let snapshot_path = root.join(content_path(&id));
            let want = patchfile::content_snapshot(&id, parsed);
            match fsutil::read_optional(&snapshot_path)? {
                Some(have) if have == want => {}
                Some(_) => list.push(format!(
                    "{} is stale (run `scripts/fork refresh`)",
                    content_path(&id)
                )),
                None => list.push(format!(
                    "{} is missing (run `scripts/fork refresh`)",
                    content_path(&id)
                )),
            }
            let touched: BTreeSet<String> = parsed.paths().into_iter().collect();
            let declared: BTreeSet<String> = a.entry.paths.iter().cloned().collect();
            for p in touched.difference(&declared) {
                list.push(format!("touches {p}, which `paths` does not declare"));
            }
            for p in declared.difference(&touched) {
                list.push(format!("declares {p} in `paths` but does not touch it"));
            }
            let prefix = format!("{}/", registry.upstream.path);
            for p in &touched {
                if !p.starts_with(&prefix) {
                    list.push(format!(
                        "touches {p}, outside the baseline {} (fork code belongs in a fork crate)",
                        registry.upstream.path
                    ));
                }
            }
        }
        if let Some(exact) = &a.exact {
            list.extend(exact.problems());
            if !a.applies {
                list.push("does not apply even with shifted hunks".into());
            }
        }
        list.extend(a.guard_problems.iter().cloned());
        list.extend(guard_file_problems(root, a.entry));
    }
    for path in &differing {
        let owner = analysis.iter().any(|a| {
            a.entry.paths.contains(path)
                && a.parsed.as_ref().is_some_and(|p| p.paths().contains(path))
        });
        if !owner {
            general.push(format!(
                "[unregistered] {path} differs from the baseline but no patch declares and touches it"
            ));
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
                problems.entry(p.id.to_string()).or_default().push(format!(
                    "snapshot {}/{s} still names this dropped patch; delete it",
                    registry.workspace.tests_path
                ));
            }
        }
    }

    // (7) Inventory.
    let want = crate::cmd::render::inventory(ctx, &registry);
    match fsutil::read_optional(&root.join(INVENTORY_FILE))? {
        Some(have) if have == want => {}
        Some(_) => general.push(format!(
            "[inventory] {INVENTORY_FILE} is stale (run `scripts/fork render`)"
        )),
        None => general.push(format!(
            "[inventory] {INVENTORY_FILE} is missing (run `scripts/fork render`)"
        )),
    }

    // Rows.
    for entry in &registry.patches {
        let id = entry.id.to_string();
        let list = problems.get(&id).cloned().unwrap_or_default();
        let a = analysis.iter().find(|a| a.entry.id == entry.id);
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
                let apply = match (&a.exact, a.applies) {
                    (Some(r), _) if r.is_exact() => "exact",
                    (Some(_), true) => "offset",
                    _ => "FAIL",
                };
                let ok = |bad: bool| if bad { "FAIL" } else { "ok" }.to_owned();
                let paths_bad = list
                    .iter()
                    .any(|p| p.contains("`paths`") || p.contains("outside the baseline"));
                let guards_bad = list.iter().any(|p| p.starts_with("guard:"));
                PatchRow {
                    id: id.clone(),
                    apply: apply.into(),
                    paths: ok(paths_bad),
                    symbols: ok(!a.guard_problems.is_empty()),
                    guards: ok(guards_bad),
                    notes: if list.is_empty() {
                        String::new()
                    } else {
                        format!("{} problem(s)", list.len())
                    },
                }
            }
        };
        report.rows.push(row);
        for p in list {
            report.problems.push(format!("[{id}] {p}"));
        }
    }
    report.problems.extend(general);
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
fn orphans(root: &Path, registry: &Registry) -> Result<Vec<String>> {
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
                Some(p) => out.push(format!(
                    "[{}] {rel} still exists although the patch is {}; delete it",
                    p.id,
                    p.status.as_str()
                )),
                None => out.push(format!("[orphan] {rel} is not registered in patches.json")),
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
            out.push(format!(
                "[orphan] {rel} belongs to no active patch; delete it"
            ));
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
