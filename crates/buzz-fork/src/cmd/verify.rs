//! `verify`: build and test the patched tree, patch by patch.
//!
//! 1. `apply` (work repo + patched tree).
//! 2. Unless `--skip-prefix`, for each prefix 1..=n of the active series
//!    (written to the tree directory in turn): `cargo check --workspace`, `cargo build
//!    --workspace --bins`, then each of that patch's guard tests (`cargo test -p
//!    <tests package> --test <target> -- --exact <fn>`, compiled first with
//!    `--no-run` so a compile failure is told apart from a failure).
//! 3. The whole tree: `cargo build --workspace --bins`, then the whole suite
//!    with the applied patches' `fixes_defects` tests skipped per target
//!    (`--exact --skip`), then each defect test alone, which must FAIL.
//! 4. With `--mutation`, for each patch P: the series without P, without the
//!    patches that depend on P and without those that no longer apply; each
//!    of P's guards runs there and is judged by the rule of
//!    [`crate::mutation`]: it must have passed with P (at P's prefix, or on
//!    the whole tree with `--skip-prefix`) and now compile and fail by an
//!    assertion. The evidence goes to `target/fork-work/mutation.json` and
//!    `mutation.md` (and `--mutation-report FILE`).
//!
//! The tests get the services the registry asks for (`workspace.services`,
//! see [`crate::services`]); the caller provides them for the whole run.
//!
//! Every cargo call uses the patched profile and the root target directory;
//! after building, the tree's lock must hold the root lock's registry packages.
//! Prefix and mutant trees are written to the same directory as the full tree
//! (unchanged files keep their mtimes): cargo fingerprints units of
//! same-layout workspaces alike, so building them from different directories
//! into one target directory would let it reuse stale artifacts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::cargo::{Cargo, TestRun, compare_locks};
use crate::cli::VerifyArgs;
use crate::cmd::apply::{Applied, Force, apply};
use crate::context::{Context, Outcome};
use crate::error::Result;
use crate::fsutil;
use crate::git::{ApplyMode, ApplyOutcome, Direction, Oid, Repo};
use crate::mutation::{self, GuardEvidence, MutationReport, PatchEvidence};
use crate::patchfile;
use crate::registry::{PatchEntry, Registry, TestRef};
use crate::services::Services;
use crate::tree;
use crate::ui::{self, Table};
use crate::workarea::{self, Series};

/// One row of the verify report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRow {
    /// Patch id.
    pub id: String,
    /// Prefix build result.
    pub prefix: String,
    /// Guard test result at the prefix.
    pub guards: String,
    /// Defect tests result.
    pub defects: String,
    /// Mutation check result.
    pub mutation: String,
}

/// The verify report.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Per patch rows.
    pub rows: Vec<VerifyRow>,
    /// Whole-suite result.
    pub suite: String,
    /// Problems found.
    pub problems: Vec<String>,
    /// The services the tests got (`started PostgreSQL at …`).
    pub services: Vec<String>,
    /// The mutation check's evidence (with `--mutation`).
    pub mutation: Option<MutationReport>,
    /// Where the evidence was written (JSON, Markdown).
    pub mutation_files: Option<(PathBuf, PathBuf)>,
}

impl VerifyReport {
    /// Table, services, suite result, evidence files and problems.
    #[must_use]
    pub fn render(&self) -> String {
        let mut t = Table::new(&["id", "prefix build", "guards", "defects", "mutation"]);
        for r in &self.rows {
            t.row(vec![
                r.id.clone(),
                r.prefix.clone(),
                r.guards.clone(),
                r.defects.clone(),
                r.mutation.clone(),
            ]);
        }
        let mut out = if t.is_empty() {
            "series is empty\n".to_owned()
        } else {
            t.render()
        };
        out.push('\n');
        for s in &self.services {
            out.push_str(&format!("service: {s}\n"));
        }
        out.push_str(&format!("whole test suite: {}\n", self.suite));
        if let Some((json, md)) = &self.mutation_files {
            out.push_str(&format!(
                "mutation evidence: {} ({})\n",
                json.display(),
                md.display()
            ));
        }
        match ui::bullets(
            &format!("\n{} problem(s):", self.problems.len()),
            &self.problems,
        ) {
            Some(list) => out.push_str(&list),
            None => out.push_str("\nverify passed\n"),
        }
        out
    }
}

fn guard_refs(registry: &Registry, entry: &PatchEntry) -> Vec<TestRef> {
    entry
        .guard_tests
        .iter()
        .filter_map(|g| TestRef::guard(&registry.workspace.tests_package, g))
        .collect()
}

fn guard_name(t: &TestRef) -> String {
    format!("{}::{}", t.target, t.name)
}

/// Runs each guard test of `entry` in the tree of `cargo` (one run per
/// test, so each gets its own result; only the first run of a target
/// compiles it).
fn run_guards(
    cargo: &Cargo,
    registry: &Registry,
    entry: &PatchEntry,
) -> Result<Vec<(String, TestRun)>> {
    let mut out = Vec::new();
    for t in guard_refs(registry, entry) {
        out.push((guard_name(&t), cargo.run_test(&t)?));
    }
    Ok(out)
}

fn summarize(results: &[(String, TestRun)]) -> String {
    if results.is_empty() {
        return "none".into();
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, o) in results {
        *counts.entry(o.label()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Groups test references by (package, target).
fn by_target(tests: &[TestRef]) -> BTreeMap<(String, String), Vec<TestRef>> {
    let mut out: BTreeMap<(String, String), Vec<TestRef>> = BTreeMap::new();
    for t in tests {
        out.entry((t.package.clone(), t.target.clone()))
            .or_default()
            .push(t.clone());
    }
    out
}

fn lock_check(cargo: &Cargo, root: &Path, problems: &mut Vec<String>, what: &str) {
    if let Err(e) = compare_locks(&cargo.lock_path(), &root.join("Cargo.lock")) {
        problems.push(format!("[{what}] {e}"));
    }
}

/// The whole suite with defect tests skipped per target.
fn whole_suite(cargo: &Cargo, defects: &[TestRef]) -> Result<bool> {
    if defects.is_empty() {
        return cargo.test(&["--workspace".into(), "--no-fail-fast".into()], &[]);
    }
    let mut ok = true;
    let defect_packages: BTreeSet<String> = defects.iter().map(|d| d.package.clone()).collect();
    let all = cargo.workspace_packages()?;
    if all.iter().any(|p| !defect_packages.contains(p)) {
        let mut sel = vec!["--workspace".to_owned(), "--no-fail-fast".to_owned()];
        for p in &defect_packages {
            sel.push("--exclude".into());
            sel.push(p.clone());
        }
        ok &= cargo.test(&sel, &[])?;
    }
    let grouped = by_target(defects);
    for pkg in &defect_packages {
        let targets = cargo.package_targets(pkg)?;
        let defect_targets: BTreeSet<&str> = grouped
            .keys()
            .filter(|(p, _)| p == pkg)
            .map(|(_, t)| t.as_str())
            .collect();
        let mut sel = vec!["-p".to_owned(), pkg.clone(), "--no-fail-fast".to_owned()];
        let mut any = false;
        let mut has_lib = false;
        for (kind, name) in &targets {
            match kind.as_str() {
                "lib" | "rlib" | "proc-macro" | "cdylib" | "dylib" | "staticlib" => {
                    has_lib = true;
                    if !defect_targets.contains("lib") && !sel.contains(&"--lib".to_owned()) {
                        sel.push("--lib".into());
                        any = true;
                    }
                }
                "bin" => {
                    sel.push("--bin".into());
                    sel.push(name.clone());
                    any = true;
                }
                "test" if !defect_targets.contains(name.as_str()) => {
                    sel.push("--test".into());
                    sel.push(name.clone());
                    any = true;
                }
                _ => {}
            }
        }
        if any {
            ok &= cargo.test(&sel, &[])?;
        }
        if has_lib {
            ok &= cargo.test(&["-p".into(), pkg.clone(), "--doc".into()], &[])?;
        }
        for ((p, target), tests) in &grouped {
            if p != pkg {
                continue;
            }
            let mut sel = vec!["-p".to_owned(), pkg.clone()];
            if target == "lib" {
                sel.push("--lib".into());
            } else {
                sel.push("--test".into());
                sel.push(target.clone());
            }
            let mut libtest = vec!["--exact".to_owned()];
            for t in tests {
                libtest.push("--skip".into());
                libtest.push(t.name.clone());
            }
            ok &= cargo.test(&sel, &libtest)?;
        }
    }
    Ok(ok)
}

/// The series without `excluded` patches; patches that no longer apply are
/// dropped too. Returns the tip and the ids dropped for not applying.
fn mutant_series(
    ctx: &Context,
    series: &Series,
    patches: &[&PatchEntry],
    excluded: &BTreeSet<String>,
) -> Result<(Oid, Vec<String>)> {
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    let mut head = series.base.clone();
    let mut dropped = Vec::new();
    for entry in patches {
        if excluded.contains(entry.id.as_str()) {
            continue;
        }
        let (file, _) = workarea::read_patch_file(&ctx.root, entry)?;
        match repo.apply_patch(&head, &file, Direction::Forward, ApplyMode::Write)? {
            ApplyOutcome::Applied(tree) => {
                head = repo.commit_tree(&tree, &[&head], &patchfile::render_message(entry))?;
            }
            ApplyOutcome::Rejected(_) => dropped.push(entry.id.to_string()),
        }
    }
    Ok((head, dropped))
}

/// Transitive dependents of `id` among `patches`.
fn dependents(patches: &[&PatchEntry], id: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::from([id.to_owned()]);
    loop {
        let before = out.len();
        for p in patches {
            if p.depends_on.iter().any(|d| out.contains(d.as_str())) {
                out.insert(p.id.to_string());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Where each guard's run with its patch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WithPatch {
    /// The prefix stage (its failures are reported there).
    Prefix,
    /// The whole tree, run by the mutation stage under `--skip-prefix`.
    WholeTree,
}

/// Each patch's guard runs with the patch, and where they were taken.
type WithPatchRuns = BTreeMap<String, (WithPatch, Vec<(String, TestRun)>)>;

/// One verify run: what every stage reads, and the report they fill.
struct Run<'a> {
    ctx: &'a Context,
    registry: &'a Registry,
    services: &'a Services,
    applied: &'a Applied,
    active: Vec<&'a PatchEntry>,
    repo: Repo<'a>,
    report: VerifyReport,
    /// Each guard's run with its patch, by patch id.
    with_patch: WithPatchRuns,
}

impl Run<'_> {
    fn cargo(&self, dir: &Path) -> Cargo {
        Cargo::new(dir, &self.ctx.layout.target_dir()).with_services(self.services)
    }

    /// Writes the tree of `commit` into the tree directory.
    fn write_tree(&self, commit: &Oid) -> Result<()> {
        tree::write_tree(
            &self.repo,
            &self.ctx.layout,
            self.registry,
            commit,
            &self.applied.tree,
        )?;
        Ok(())
    }

    fn problem(&mut self, text: String) {
        self.report.problems.push(text);
    }

    /// Stage 2: each prefix builds and passes its patch's guards.
    fn prefixes(&mut self) -> Result<()> {
        for i in 0..self.active.len() {
            let entry = self.active[i];
            ui::step(&format!(
                "prefix {}/{}: {}",
                i + 1,
                self.active.len(),
                entry.id
            ));
            self.write_tree(self.applied.series.prefix_tip(i + 1))?;
            let cargo = self.cargo(&self.applied.tree);
            let checked = cargo.check_workspace()?;
            lock_check(
                &cargo,
                &self.ctx.root,
                &mut self.report.problems,
                entry.id.as_str(),
            );
            let built = checked && cargo.build_bins()?;
            if !built {
                self.report.rows[i].prefix = "FAIL".into();
                self.report.rows[i].guards = "not run".into();
                self.problem(format!(
                    "[{}] the tree up to this patch does not {}",
                    entry.id,
                    if checked {
                        "build its binaries"
                    } else {
                        "pass cargo check"
                    }
                ));
                continue;
            }
            self.report.rows[i].prefix = "ok".into();
            let results = run_guards(&cargo, self.registry, entry)?;
            self.report.rows[i].guards = summarize(&results);
            for (name, run) in &results {
                if *run != TestRun::Passed {
                    self.problem(format!(
                        "[{}] guard {name} {} at its prefix",
                        entry.id,
                        run.label()
                    ));
                }
            }
            self.with_patch
                .insert(entry.id.to_string(), (WithPatch::Prefix, results));
        }
        Ok(())
    }

    /// Stage 3: the whole tree builds, its suite passes, and each pinned
    /// defect test fails on its own. Returns the whole tree's cargo.
    fn whole_tree(&mut self) -> Result<Cargo> {
        ui::step("whole patched tree");
        self.write_tree(self.applied.series.tip())?;
        let cargo = self.cargo(&self.applied.tree);
        let built = cargo.build_bins()?;
        lock_check(&cargo, &self.ctx.root, &mut self.report.problems, "tree");
        if !built {
            self.report.suite = "not run (binaries do not build)".into();
            self.problem("[tree] the patched tree does not build its binaries".into());
            return Ok(cargo);
        }
        let defects: Vec<(String, TestRef)> = self
            .active
            .iter()
            .flat_map(|p| {
                p.fixes_defects
                    .iter()
                    .filter_map(|d| TestRef::defect(d).map(|t| (p.id.to_string(), t)))
            })
            .collect();
        let refs: Vec<TestRef> = defects.iter().map(|(_, t)| t.clone()).collect();
        let ok = whole_suite(&cargo, &refs)?;
        self.report.suite = if ok { "passed".into() } else { "FAILED".into() };
        if !ok {
            self.problem("[tree] the whole test suite of the patched tree fails".into());
        }
        // Defect tests alone: each must fail now that its fix is applied.
        let mut per_patch: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, t) in &defects {
            let name = format!("{}::{}::{}", t.package, t.target, t.name);
            let verdict = match cargo.run_test(t)? {
                TestRun::Failed { .. } => "fails as expected".to_owned(),
                TestRun::Passed => {
                    self.problem(format!(
                        "[{id}] defect test {name} still passes: the patch does not fix the pinned defect"
                    ));
                    "STILL PASSES".to_owned()
                }
                other => {
                    self.problem(format!("[{id}] defect test {name} {}", other.label()));
                    other.label().to_uppercase()
                }
            };
            per_patch.entry(id.clone()).or_default().push(verdict);
        }
        for row in &mut self.report.rows {
            if let Some(v) = per_patch.get(&row.id) {
                row.defects = v.join(", ");
            }
        }
        Ok(cargo)
    }

    /// Stage 4: the mutation check, its evidence written to the work area.
    fn mutation(&mut self, whole_tree: &Cargo) -> Result<()> {
        // Without the prefix stage, the guards' runs with their patches are
        // taken on the whole tree, in the same environment.
        for i in 0..self.active.len() {
            let entry = self.active[i];
            if self.with_patch.contains_key(entry.id.as_str()) {
                continue;
            }
            let results = run_guards(whole_tree, self.registry, entry)?;
            for (name, run) in &results {
                if *run != TestRun::Passed {
                    self.problem(format!(
                        "[{}] guard {name} {} on the whole patched tree",
                        entry.id,
                        run.label()
                    ));
                }
            }
            self.with_patch
                .insert(entry.id.to_string(), (WithPatch::WholeTree, results));
        }
        let cargo_for = |dir: &Path| self.cargo(dir);
        let evidence = mutation_check(
            self.ctx,
            self.registry,
            &self.applied.series,
            &self.active,
            &cargo_for,
            &self.with_patch,
        )?;
        for (row, patch) in self.report.rows.iter_mut().zip(&evidence.patches) {
            row.mutation = patch.cell();
        }
        for patch in &evidence.patches {
            let from_prefix = self
                .with_patch
                .get(patch.id.as_str())
                .is_some_and(|(source, _)| *source == WithPatch::Prefix);
            for g in &patch.guards {
                // A guard that fails with its patch was reported where it ran.
                if matches!(g.verdict, mutation::Verdict::FailsWithPatch { .. }) && from_prefix {
                    continue;
                }
                if let Some(p) = g.verdict.problem(&patch.id, &g.test) {
                    self.report.problems.push(p);
                }
            }
        }
        let layout = &self.ctx.layout;
        let json = layout.work.join("mutation.json");
        let md = layout.work.join("mutation.md");
        fsutil::write_atomic(&json, evidence.to_json().as_bytes())?;
        fsutil::write_atomic(&md, evidence.to_markdown().as_bytes())?;
        self.report.mutation_files = Some((json, md));
        self.report.mutation = Some(evidence);
        // Leave the full patched tree in place.
        self.write_tree(self.applied.series.tip())
    }
}

/// Runs verify with the run's `services` in the tests' environment.
///
/// # Errors
/// Environment errors (registry, git, cargo missing, dirty work repo, a
/// patch that does not apply).
pub fn verify(ctx: &Context, args: &VerifyArgs, services: &Services) -> Result<VerifyReport> {
    let registry = ctx.registry()?;
    let applied = apply(ctx, &registry, None, Force::No)?;
    let active: Vec<&PatchEntry> = registry.active().collect();
    let rows = active
        .iter()
        .map(|entry| VerifyRow {
            id: entry.id.to_string(),
            prefix: "skipped".into(),
            guards: "skipped".into(),
            defects: if entry.fixes_defects.is_empty() {
                "none".into()
            } else {
                "not run".into()
            },
            mutation: "not run".into(),
        })
        .collect();
    let mut run = Run {
        ctx,
        registry: &registry,
        services,
        applied: &applied,
        active,
        repo: workarea::open_repo(&ctx.git, &ctx.layout)?,
        report: VerifyReport {
            rows,
            services: services.describe(),
            ..VerifyReport::default()
        },
        with_patch: BTreeMap::new(),
    };
    if !args.skip_prefix {
        run.prefixes()?;
    }
    let whole_tree = run.whole_tree()?;
    if args.mutation {
        run.mutation(&whole_tree)?;
    }
    Ok(run.report)
}

/// For each patch P: P's guards in the series without P (and without what
/// depends on it or no longer applies), judged against their runs with P.
fn mutation_check(
    ctx: &Context,
    registry: &Registry,
    series: &Series,
    active: &[&PatchEntry],
    cargo_for: &dyn Fn(&Path) -> Cargo,
    with_patch: &WithPatchRuns,
) -> Result<MutationReport> {
    let layout = &ctx.layout;
    let repo = workarea::open_repo(&ctx.git, layout)?;
    let dir = layout.tree();
    let mut out = MutationReport {
        upstream: format!(
            "{} {} (baseline tree `{}`)",
            registry.upstream.crate_name, registry.upstream.version, registry.upstream.tree
        ),
        patches: Vec::new(),
    };
    for (i, entry) in active.iter().enumerate() {
        ui::step(&format!(
            "mutation {}/{}: without {}",
            i + 1,
            active.len(),
            entry.id
        ));
        let excluded = dependents(active, entry.id.as_str());
        let (tip, dropped) = mutant_series(ctx, series, active, &excluded)?;
        tree::write_tree(&repo, layout, registry, &tip, &dir)?;
        let cargo = cargo_for(&dir);
        let _bins_built = cargo.build_bins()?;
        let mut also_without: Vec<String> = excluded
            .iter()
            .filter(|x| x.as_str() != entry.id.as_str())
            .cloned()
            .collect();
        also_without.extend(dropped.iter().map(|d| format!("{d} (no longer applies)")));
        let with: BTreeMap<&str, &TestRun> = with_patch
            .get(entry.id.as_str())
            .map(|(_, runs)| runs.iter().map(|(n, r)| (n.as_str(), r)).collect())
            .unwrap_or_default();
        let mut guards = Vec::new();
        for (name, without) in run_guards(&cargo, registry, entry)? {
            let with_run = with
                .get(name.as_str())
                .copied()
                .cloned()
                .unwrap_or(TestRun::NotFound);
            let verdict = mutation::judge(&with_run, &without, entry.api_guard_reason(&name));
            guards.push(GuardEvidence {
                test: name,
                with_patch: with_run,
                without_patch: without,
                verdict,
            });
        }
        out.patches.push(PatchEvidence {
            id: entry.id.to_string(),
            also_without,
            guards,
        });
    }
    Ok(out)
}

/// `scripts/fork verify`: provides the services the registry asks for,
/// verifies, stops what it started, and prints the report.
///
/// # Errors
/// See [`verify`]; a service that cannot be provided.
pub fn run(ctx: &Context, args: &VerifyArgs) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let services = Services::provide(&registry, &ctx.layout.work)?;
    let report = verify(ctx, args, &services)?;
    drop(services);
    if let (Some(path), Some(evidence)) = (&args.mutation_report, &report.mutation) {
        let path = fsutil::absolute(path)?;
        fsutil::write_atomic(&path, evidence.to_markdown().as_bytes())?;
        ui::note(&format!("wrote the mutation report to {}", path.display()));
    }
    ui::report(&report.render());
    Ok(if report.problems.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Failed
    })
}
