//! `verify`: build and test the patched tree, patch by patch.
//!
//! 1. `apply` (work repo + patched tree).
//! 2. The plan: the trees the run needs. Unless `--skip-prefix`, each prefix
//!    1..=n of the active series (its patch's guards run there with the
//!    patch); the whole tree (the last prefix: the suite and the defect
//!    tests run there); with `--mutation`, for each patch P the series
//!    without P, without the patches that depend on P and without those that
//!    no longer apply (P's guards run there without it). Trees that coincide
//!    (the series without a patch is often a prefix) are one tree: each
//!    distinct tree is written and built once, the whole tree last.
//! 3. Each tree: `cargo build --workspace`, then the tests package's test
//!    targets its guards need (all of them on the whole tree) compiled in one
//!    `cargo build --keep-going` (a target that does not compile is told
//!    apart from a test that fails), then each
//!    guard run that needs the tree, by running the target's libtest
//!    executable directly (`--exact <fn>`, one process per guard,
//!    `--guard-jobs` of them at a time: the machine's cores by default; the
//!    runs without their patch, mostly waiting, three times as many).
//! 4. The whole tree: each of the applied patches' `fixes_defects` tests
//!    alone, which must FAIL, then the whole suite in one `cargo test` with
//!    them skipped (`--exact --skip`).
//! 5. With `--mutation`, each guard is judged by the rule of
//!    [`crate::mutation`]: it must have passed with P (at P's prefix, or on
//!    the whole tree with `--skip-prefix`) and now compile and fail by an
//!    assertion. The evidence goes to `target/fork-work/mutation.json` and
//!    `mutation.md` (and `--mutation-report FILE`).
//!
//! Every stage's wall time is printed at the end (stderr).
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
use std::time::{Duration, Instant};

use crate::cargo::{Cargo, TestBinaries, TestRun, compare_locks, is_library};
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

mod row;

pub use row::{
    CellParseError, DefectRun, DefectTests, GuardVerdicts, MutationCheck, PrefixBuild,
    PrefixGuards, RunTally, VerifyRow, WholeSuite,
};

/// The verify report.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// Per patch rows.
    pub rows: Vec<VerifyRow>,
    /// Whole-suite result.
    pub suite: WholeSuite,
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
            t.row(r.cells());
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

fn lock_check(cargo: &Cargo, root: &Path, problems: &mut Vec<String>, what: &str) {
    if let Err(e) = compare_locks(&cargo.lock_path(), &root.join("Cargo.lock")) {
        problems.push(format!("[{what}] {e}"));
    }
}

/// The whole suite's package selection: every package of the tree but those
/// in `unchanged` (built exactly as in the root workspace, whose own `cargo
/// test --workspace` runs their tests).
///
/// One selection for the suite and the defect tests, never a package alone: a
/// package selected alone resolves its dependencies' features for itself, and
/// the harness's package alone (without the tests package that asks for the
/// root workspace's features) compiled some fifty dependencies a second time.
fn suite_selection(unchanged: &BTreeSet<String>) -> Vec<String> {
    let mut selection = vec!["--workspace".to_owned()];
    for p in unchanged {
        selection.push("--exclude".into());
        selection.push(p.clone());
    }
    selection
}

/// The whole suite in one `cargo test`, with the defect tests skipped by their
/// exact names (each ran alone before it, and failed as it must). A test of
/// another target with the very name of a defect test would be skipped as
/// well; defect tests are named for the defect they pin.
fn whole_suite(cargo: &Cargo, defects: &[TestRef], selection: &[String]) -> Result<bool> {
    let mut selection = selection.to_vec();
    selection.push("--no-fail-fast".to_owned());
    let mut libtest = Vec::new();
    if !defects.is_empty() {
        libtest.push("--exact".to_owned());
        for t in defects {
            libtest.push("--skip".into());
            libtest.push(t.name.clone());
        }
    }
    cargo.test(&selection, &libtest)
}

/// Runs the test named `name` (exactly) wherever `cargo test SELECTION` finds it: passed,
/// failed (with its panic), not found (no target has it) or not compiled. Not narrowed to the
/// test's own target: `--test <target>` would change the selection, and with it the features.
fn run_by_name(cargo: &Cargo, selection: &[String], name: &str) -> Result<TestRun> {
    let mut selection = selection.to_vec();
    selection.push("--no-fail-fast".to_owned());
    let libtest = ["--exact".to_owned(), name.to_owned()];
    let (passed, output) = cargo.test_captured(&selection, &libtest)?;
    let ran = output
        .lines()
        .any(|line| line.starts_with(&format!("test {name} ... ")));
    Ok(match (ran, passed) {
        (true, true) => TestRun::Passed,
        (true, false) => TestRun::Failed {
            failure: crate::libtest::failure_of(&output, name)
                .map(|f| f.placed_in(cargo.workspace_root())),
        },
        (false, true) => TestRun::NotFound,
        (false, false) => TestRun::CompileFailed,
    })
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

/// Whether a guard run has its patch (and where that run counts) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// With its patch.
    With(WithPatch),
    /// Without it (the mutation check).
    Without,
}

/// How many more runs without their patch than runs with it go side by side.
/// A guard without its patch mostly waits out its bound for an answer the
/// unpatched harness never gives (14 of the 68 wait 20 s each), using no
/// processor meanwhile; the runs with their patch, which must pass, keep the
/// machine to themselves.
const WITHOUT_PATCH_RUNS_PER_JOB: usize = 3;

/// A tree's guard runs: those with their patch `jobs` at a time, then those
/// without it [`WITHOUT_PATCH_RUNS_PER_JOB`] times as many at a time; the
/// results in the order of `guards`.
fn run_tree_guards(
    cargo: &Cargo,
    binaries: &TestBinaries,
    guards: &[(usize, Role, TestRef)],
    jobs: usize,
    active: &[&PatchEntry],
) -> Result<Vec<TestRun>> {
    let (with, without): (Vec<usize>, Vec<usize>) =
        (0..guards.len()).partition(|&k| matches!(guards[k].1, Role::With(_)));
    let mut results = vec![TestRun::NotFound; guards.len()];
    for (indices, jobs) in [(with, jobs), (without, jobs * WITHOUT_PATCH_RUNS_PER_JOB)] {
        let batch: Vec<(usize, Role, TestRef)> =
            indices.iter().map(|&k| guards[k].clone()).collect();
        let runs = run_guards(cargo, binaries, &batch, jobs, active)?;
        for (k, run) in indices.into_iter().zip(runs) {
            results[k] = run;
        }
    }
    Ok(results)
}

/// Runs `guards` (patch index, role, test) on a built tree, `jobs` at a time,
/// each in a process of its own; the results in the order of `guards`. Most
/// of a guard run is waiting on the harness it drives (a guard without its
/// patch often waits out its bound for what the unpatched harness never
/// does), so runs side by side overlap their waiting.
fn run_guards(
    cargo: &Cargo,
    binaries: &TestBinaries,
    guards: &[(usize, Role, TestRef)],
    jobs: usize,
    active: &[&PatchEntry],
) -> Result<Vec<TestRun>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<TestRun>>>> =
        Mutex::new((0..guards.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, guards.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((i, role, test)) = guards.get(k) else {
                        break;
                    };
                    let outcome = match binaries.get(test) {
                        None => Ok(TestRun::CompileFailed),
                        Some(binary) => {
                            cargo
                                .run_test_binary(binary, &test.name)
                                .map(|(run, took)| {
                                    let with = match role {
                                        Role::With(_) => "with",
                                        Role::Without => "without",
                                    };
                                    ui::note(&format!(
                                        "guard {} ({with} {}): {} in {:.1} s",
                                        guard_name(test),
                                        active[*i].id,
                                        run.label(),
                                        took.as_secs_f64()
                                    ));
                                    run
                                })
                        }
                    };
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[k] = Some(outcome);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|r| r.unwrap_or(Ok(TestRun::NotFound)))
        .collect()
}

/// One distinct tree of the run, and everything that runs on it.
///
/// Prefix and mutant trees often coincide (the series without
/// `resident-background-controllers` is the prefix before it), and the whole
/// tree is the last prefix: each distinct tree, told apart by its git tree
/// id, is written and built once, and every guard run that needs it runs
/// while it is in place.
#[derive(Debug, Clone)]
struct TreeJob {
    /// A commit of the work repo whose tree this is.
    commit: Oid,
    /// The commit's git tree: what tells two jobs apart.
    tree: Oid,
    /// What the tree is, for the progress lines and the timings.
    names: Vec<String>,
    /// Patches (by index) whose prefix this tree is: their build result
    /// and their guards' runs with the patch.
    prefix_of: Vec<usize>,
    /// Patches (by index) whose guards run here with their patch on the
    /// whole tree (`--skip-prefix`).
    whole_tree_runs: Vec<usize>,
    /// Patches (by index) whose guards run here without their patch.
    mutant_of: Vec<usize>,
}

impl TreeJob {
    fn name(&self) -> String {
        self.names.join(" = ")
    }

    fn runs_guards(&self) -> bool {
        !(self.prefix_of.is_empty() && self.whole_tree_runs.is_empty() && self.mutant_of.is_empty())
    }
}

/// A patch's mutant: what else left the series with it.
#[derive(Debug, Clone, Default)]
struct Mutant {
    also_without: Vec<String>,
}

/// The trees a run builds, in the order it builds them: the whole tree
/// last, so what runs after `verify` (the README's commands, the demo, the
/// real-adapter tier) finds it built.
#[derive(Debug, Default)]
struct TreePlan {
    jobs: Vec<TreeJob>,
    /// The job of the whole tree.
    tip: usize,
    /// Per patch index, its mutant (with `--mutation`).
    mutants: BTreeMap<usize, Mutant>,
}

impl TreePlan {
    /// The job of `commit`'s tree, added (named `name`) when it is new.
    fn job_for(&mut self, repo: &Repo<'_>, commit: &Oid, name: String) -> Result<usize> {
        let tree = repo.read_commit(commit)?.tree;
        if let Some(i) = self.jobs.iter().position(|job| job.tree == tree) {
            let job = &mut self.jobs[i];
            if !job.names.contains(&name) {
                job.names.push(name);
            }
            return Ok(i);
        }
        self.jobs.push(TreeJob {
            commit: commit.clone(),
            tree,
            names: vec![name],
            prefix_of: Vec::new(),
            whole_tree_runs: Vec::new(),
            mutant_of: Vec::new(),
        });
        Ok(self.jobs.len() - 1)
    }

    /// Job indices in build order: every other tree first, the whole tree
    /// last.
    fn order(&self) -> Vec<usize> {
        (0..self.jobs.len())
            .filter(|&i| i != self.tip)
            .chain(std::iter::once(self.tip))
            .collect()
    }
}

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
    /// Each guard's run without its patch, by patch index.
    without_patch: BTreeMap<usize, Vec<(String, TestRun)>>,
    /// Wall time of each stage, in the order they ran.
    timings: Timings,
    /// Guard runs at a time.
    guard_jobs: usize,
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

    /// Which trees the run needs and what runs on each.
    fn plan(&self, args: &VerifyArgs) -> Result<TreePlan> {
        let mut plan = TreePlan::default();
        let n = self.active.len();
        let series = &self.applied.series;
        if !args.skip_prefix {
            for (i, entry) in self.active.iter().enumerate() {
                let name = format!("prefix {}/{n} ({})", i + 1, entry.id);
                let job = plan.job_for(&self.repo, series.prefix_tip(i + 1), name)?;
                plan.jobs[job].prefix_of.push(i);
            }
        }
        plan.tip = plan.job_for(&self.repo, series.tip(), "whole tree".to_owned())?;
        if args.mutation {
            if args.skip_prefix {
                plan.jobs[plan.tip].whole_tree_runs = (0..n).collect();
            }
            for (i, entry) in self.active.iter().enumerate() {
                let excluded = dependents(&self.active, entry.id.as_str());
                let (tip, dropped) = mutant_series(self.ctx, series, &self.active, &excluded)?;
                let job = plan.job_for(&self.repo, &tip, format!("without {}", entry.id))?;
                plan.jobs[job].mutant_of.push(i);
                let mut also_without: Vec<String> = excluded
                    .iter()
                    .filter(|x| x.as_str() != entry.id.as_str())
                    .cloned()
                    .collect();
                also_without.extend(dropped.iter().map(|d| format!("{d} (no longer applies)")));
                plan.mutants.insert(i, Mutant { also_without });
            }
        }
        Ok(plan)
    }

    /// Writes, builds and runs one tree of the plan.
    fn tree_job(&mut self, plan: &TreePlan, j: usize, step: usize) -> Result<Option<Cargo>> {
        let job = &plan.jobs[j];
        let label = job.name();
        ui::step(&format!("tree {step}/{}: {label}", plan.jobs.len()));
        self.write_tree(&job.commit)?;
        let cargo = self.cargo(&self.applied.tree);
        let started = Instant::now();
        let build = cargo.build_workspace()?;
        let built = build.built;
        lock_check(&cargo, &self.ctx.root, &mut self.report.problems, &label);
        let binaries = if job.runs_guards() {
            let selection = self.test_selection(&cargo, job, j == plan.tip)?;
            cargo.build_test_binaries(&selection)?.1
        } else {
            TestBinaries::default()
        };
        self.timings
            .push(format!("build {label}"), started.elapsed());
        // Every guard run this tree serves: with their patch `guard_jobs` at a time, then
        // without it.
        let mut runs: Vec<(usize, Role)> = Vec::new();
        for &i in &job.prefix_of {
            let id = self.active[i].id.to_string();
            if built {
                self.report.rows[i].prefix = PrefixBuild::Builds;
                runs.push((i, Role::With(WithPatch::Prefix)));
            } else {
                self.report.rows[i].prefix = PrefixBuild::DoesNotBuild;
                self.report.rows[i].guards = PrefixGuards::NotRun;
                self.problem(format!("[{id}] the tree up to this patch does not build"));
            }
        }
        runs.extend(
            job.whole_tree_runs
                .iter()
                .map(|&i| (i, Role::With(WithPatch::WholeTree))),
        );
        runs.extend(job.mutant_of.iter().map(|&i| (i, Role::Without)));
        let guards: Vec<(usize, Role, TestRef)> = runs
            .iter()
            .flat_map(|&(i, role)| {
                guard_refs(self.registry, self.active[i])
                    .into_iter()
                    .map(move |t| (i, role, t))
            })
            .collect();
        let started = Instant::now();
        let results = run_tree_guards(&cargo, &binaries, &guards, self.guard_jobs, &self.active)?;
        if !guards.is_empty() {
            self.timings.push(
                format!(
                    "guards on {label} ({} runs, {} at a time with their patch, {} without)",
                    guards.len(),
                    self.guard_jobs,
                    self.guard_jobs * WITHOUT_PATCH_RUNS_PER_JOB
                ),
                started.elapsed(),
            );
        }
        for (i, role) in runs {
            let id = self.active[i].id.to_string();
            let mine: Vec<(String, TestRun)> = guards
                .iter()
                .zip(&results)
                .filter(|((p, r, _), _)| *p == i && *r == role)
                .map(|((_, _, t), run)| (guard_name(t), run.clone()))
                .collect();
            match role {
                Role::With(source) => {
                    if source == WithPatch::Prefix {
                        self.report.rows[i].guards =
                            PrefixGuards::Ran(RunTally::of(mine.iter().map(|(_, run)| run)));
                    }
                    for (name, run) in &mine {
                        if *run != TestRun::Passed {
                            let place = match source {
                                WithPatch::Prefix => "at its prefix",
                                WithPatch::WholeTree => "on the whole patched tree",
                            };
                            self.problem(format!("[{id}] guard {name} {} {place}", run.label()));
                        }
                    }
                    self.with_patch.insert(id, (source, mine));
                }
                Role::Without => {
                    self.without_patch.insert(i, mine);
                }
            }
        }
        // Only the whole tree's artifacts are used after this (by the suite,
        // the README's commands, the demo): the others' executables go.
        if j != plan.tip {
            binaries.remove()?;
            build.remove_kept_copies()?;
        }
        Ok((j == plan.tip).then_some(cargo).filter(|_| built))
    }

    /// The test targets a tree's guard runs need: every target of the tests
    /// package on the whole tree (its suite runs there next), only the
    /// targets holding this tree's guards on the others. Linking the tests
    /// package's other targets took most of each tree's build. A guard whose
    /// target the package does not declare finds no executable, as before.
    fn test_selection(
        &self,
        cargo: &Cargo,
        job: &TreeJob,
        whole_tree: bool,
    ) -> Result<Vec<String>> {
        let package = &self.registry.workspace.tests_package;
        let mut selection = vec!["-p".to_owned(), package.clone()];
        if whole_tree {
            selection.push("--tests".to_owned());
            return Ok(selection);
        }
        let declared: BTreeSet<String> = cargo
            .package_targets(package)?
            .into_iter()
            .map(|(kind, name)| {
                if is_library(&kind) {
                    "lib".to_owned()
                } else {
                    name
                }
            })
            .collect();
        let patches = job
            .prefix_of
            .iter()
            .chain(&job.whole_tree_runs)
            .chain(&job.mutant_of);
        let targets: BTreeSet<String> = patches
            .flat_map(|&i| guard_refs(self.registry, self.active[i]))
            .map(|t| t.target)
            .filter(|t| declared.contains(t))
            .collect();
        // `cargo build` names a library's test harness only through `--tests`.
        if targets.contains("lib") {
            selection.push("--tests".to_owned());
            return Ok(selection);
        }
        for target in targets {
            selection.extend(["--test".to_owned(), target]);
        }
        Ok(selection)
    }

    /// The whole tree (built and in place): its suite passes, and each
    /// pinned defect test fails on its own.
    fn whole_tree(&mut self, cargo: Option<&Cargo>) -> Result<()> {
        let Some(cargo) = cargo else {
            self.report.suite = WholeSuite::NotRun;
            self.problem("[tree] the patched tree does not build".into());
            return Ok(());
        };
        ui::step("whole patched tree: its test suite");
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
        let patched = tree::baseline_members(self.registry, &self.ctx.root);
        // Without a reading of both workspaces (a root lock that is not up
        // to date, say), every package is tested here.
        let mut unchanged = cargo
            .packages_built_as_in(&self.ctx.root, &patched)
            .unwrap_or_else(|e| {
                ui::warn(&format!(
                    "every package of the tree is tested: cannot compare it with the root workspace: {e}"
                ));
                BTreeSet::new()
            });
        for t in &refs {
            unchanged.remove(&t.package);
        }
        if !unchanged.is_empty() {
            ui::note(&format!(
                "built exactly as in the root workspace, so tested by its `cargo test --workspace` \
                 and left out here: {}",
                unchanged.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let selection = suite_selection(&unchanged);
        // Defect tests alone: each must fail now that its fix is applied.
        let started = Instant::now();
        let mut per_patch: BTreeMap<String, Vec<DefectRun>> = BTreeMap::new();
        // Each defect test through the suite's own `cargo test` (the same selection, so the
        // suite compiles nothing after them), filtered to its exact name in every target. They
        // run first: the suite's tests build the harness as `cargo build --workspace --bin …`
        // would, which leaves the TLS chain to be compiled again by the next `cargo test`
        // (50 s to 1:10 measured when the defects ran after the suite).
        for (id, t) in &defects {
            let name = format!("{}::{}::{}", t.package, t.target, t.name);
            let run = run_by_name(cargo, &selection, &t.name)?;
            let defect = DefectRun::from(&run);
            match defect {
                DefectRun::FailsAsExpected => {}
                DefectRun::StillPasses => self.problem(format!(
                    "[{id}] defect test {name} still passes: the patch does not fix the pinned defect"
                )),
                DefectRun::CompileFailed | DefectRun::NotFound => {
                    self.problem(format!("[{id}] defect test {name} {}", run.label()));
                }
            }
            per_patch.entry(id.clone()).or_default().push(defect);
        }
        if !defects.is_empty() {
            self.timings.push(
                format!("whole tree: defect tests ({})", defects.len()),
                started.elapsed(),
            );
        }
        let started = Instant::now();
        let ok = whole_suite(cargo, &refs, &selection)?;
        self.timings
            .push("whole tree: test suite".to_owned(), started.elapsed());
        self.report.suite = if ok {
            WholeSuite::Passed {
                left_to_root: unchanged.into_iter().collect(),
            }
        } else {
            WholeSuite::Failed
        };
        if !ok {
            self.problem("[tree] the whole test suite of the patched tree fails".into());
        }
        for row in &mut self.report.rows {
            if let Some(runs) = per_patch.remove(&row.id) {
                row.defects = DefectTests::Ran(runs);
            }
        }
        Ok(())
    }

    /// The mutation check's verdicts from the runs taken, its evidence
    /// written to the work area.
    fn mutation(&mut self, plan: &TreePlan) -> Result<()> {
        let registry = self.registry;
        let mut evidence = MutationReport {
            upstream: format!(
                "{} {} (baseline tree `{}`)",
                registry.upstream.crate_name, registry.upstream.version, registry.upstream.tree
            ),
            patches: Vec::new(),
        };
        for (i, entry) in self.active.iter().enumerate() {
            let with: BTreeMap<&str, &TestRun> = self
                .with_patch
                .get(entry.id.as_str())
                .map(|(_, runs)| runs.iter().map(|(n, r)| (n.as_str(), r)).collect())
                .unwrap_or_default();
            let mut guards = Vec::new();
            for (name, without) in self.without_patch.get(&i).cloned().unwrap_or_default() {
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
            evidence.patches.push(PatchEvidence {
                id: entry.id.to_string(),
                also_without: plan
                    .mutants
                    .get(&i)
                    .map(|m| m.also_without.clone())
                    .unwrap_or_default(),
                guards,
            });
        }
        for (row, patch) in self.report.rows.iter_mut().zip(&evidence.patches) {
            row.mutation = MutationCheck::from(patch);
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
        Ok(())
    }
}

/// Wall time per stage of a run, printed at its end.
#[derive(Debug, Default)]
struct Timings {
    stages: Vec<(String, Duration)>,
}

impl Timings {
    fn push(&mut self, stage: String, took: Duration) {
        self.stages.push((stage, took));
    }

    fn render(&self, total: Duration) -> String {
        let mut t = Table::new(&["stage", "wall time"]);
        for (stage, took) in &self.stages {
            t.row(vec![stage.clone(), format_duration(*took)]);
        }
        t.row(vec!["total".to_owned(), format_duration(total)]);
        t.render()
    }
}

fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1} s")
    } else {
        format!("{}:{:04.1}", (secs / 60.0).floor(), secs % 60.0)
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
        .map(|entry| VerifyRow::not_run(entry.id.to_string(), !entry.fixes_defects.is_empty()))
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
            suite: WholeSuite::NotRun,
            problems: Vec::new(),
            services: services.describe(),
            mutation: None,
            mutation_files: None,
        },
        with_patch: BTreeMap::new(),
        without_patch: BTreeMap::new(),
        timings: Timings::default(),
        guard_jobs: args.guard_jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            usize::from,
        ),
    };
    let started = Instant::now();
    let plan = run.plan(args)?;
    ui::note(&format!(
        "{} distinct tree(s) to build: {}",
        plan.jobs.len(),
        plan.order()
            .iter()
            .map(|&j| plan.jobs[j].name())
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let mut whole_tree = None;
    for (step, j) in plan.order().into_iter().enumerate() {
        if let Some(cargo) = run.tree_job(&plan, j, step + 1)? {
            whole_tree = Some(cargo);
        }
    }
    run.whole_tree(whole_tree.as_ref())?;
    if args.mutation {
        run.mutation(&plan)?;
    }
    ui::note(&format!(
        "\nverify: where the time went\n{}",
        run.timings.render(started.elapsed())
    ));
    Ok(run.report)
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
