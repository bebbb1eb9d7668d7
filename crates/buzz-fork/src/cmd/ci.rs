//! `ci`: the one command a scheduled fork-CI job runs on every upstream.
//!
//! 1. Get the new upstream: a directory (`--upstream DIR`), or a ref of a git
//!    repository (`--upstream-git URL --ref REF`) fetched into the work area.
//! 2. `sync`: the baseline must be pristine; classify the series.
//! 3. Unless upstream equals the baseline: provide the services the
//!    registry asks for (a throw-away PostgreSQL server, see
//!    [`crate::services`]), and in a *candidate* copy of the repository
//!    (`target/fork-work/ci/candidate`, with its own work area and cargo
//!    target directory) build the new upstream alone and run its own tests
//!    (upstream first, see [`crate::upstream_run`]).
//! 4. When nothing blocks, adopt the sync into the candidate and run
//!    `verify --mutation` there.
//! 5. Write the report (JSON, Markdown, range-diff) and print ONE line on
//!    stdout: `no_update …`, `ready …`, `blocked …` or `upstream-broken …`.
//!    Progress and cargo output go to stderr.
//! 6. With `--write`, a ready result is also adopted in the repository
//!    (exactly `sync --write`); without it nothing in the repository changes.
//!
//! Exit codes: 0 `no_update` or `ready`, 3 `blocked` (a conflict, a failed
//! guard, or a synced series that fails `verify --mutation`), 4
//! `upstream-broken` (upstream fails its own tests; no patch is blamed), 1 a
//! baseline that is not pristine or a series `check` refuses, 2 usage or
//! environment.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cargo::Cargo;
use crate::cli::{CiArgs, UpstreamSource, VerifyArgs};
use crate::cmd::sync::{self, SyncResult, SyncRun, SyncStatus, UpstreamDir};
use crate::cmd::verify::{self, VerifyRow, WholeSuite};
use crate::context::{Context, Outcome};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::registry::Registry;
use crate::services::Services;
use crate::ui;
use crate::upstream_run::{self, UpstreamRun};
use crate::workarea::{self, Layout};

/// Ref the fetched upstream commit is kept under in the work repo.
pub const CI_FETCHED_REF: &str = "refs/fork/ci/fetched";

/// The overall CI verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CiResult {
    /// The upstream equals the baseline.
    NoUpdate,
    /// The synced series applies and passes `verify --mutation`.
    Ready,
    /// A conflict, a failed guard or a failing synced series.
    Blocked,
    /// The new upstream fails its own tests, before any patch is applied.
    UpstreamBroken,
}

impl CiResult {
    /// How the command ends: `no_update` and `ready` are success.
    #[must_use]
    pub fn outcome(self) -> Outcome {
        match self {
            CiResult::NoUpdate | CiResult::Ready => Outcome::Ok,
            CiResult::Blocked => Outcome::Blocked,
            CiResult::UpstreamBroken => Outcome::UpstreamBroken,
        }
    }

    /// The keyword the one-line summary starts with.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CiResult::NoUpdate => "no_update",
            CiResult::Ready => "ready",
            CiResult::Blocked => "blocked",
            CiResult::UpstreamBroken => "upstream-broken",
        }
    }
}

/// `verify --mutation` on the synced series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiVerify {
    /// Whether verify found no problem.
    pub passed: bool,
    /// Per patch results.
    pub rows: Vec<VerifyRow>,
    /// The whole-suite result.
    pub suite: WholeSuite,
    /// Every problem verify reported.
    pub problems: Vec<String>,
    /// The mutation check's evidence, per guard.
    pub mutation: Option<crate::mutation::MutationReport>,
}

/// The fork-CI report (deterministic: no times, no absolute paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiReport {
    /// The verdict.
    pub result: CiResult,
    /// The one line printed on stdout.
    pub summary: String,
    /// The upstream as given (`--upstream` text, or `URL@REF`).
    pub source: String,
    /// The fetched upstream commit (`--upstream-git` only).
    pub upstream_commit: Option<String>,
    /// The services the tests got (`started PostgreSQL at …`).
    pub services: Vec<String>,
    /// Upstream's own tests, run before the series is applied (not run when
    /// upstream equals the baseline).
    pub upstream_tests: Option<UpstreamRun>,
    /// The sync classification.
    pub sync: sync::SyncReport,
    /// `verify --mutation` of the synced series (only when sync was ready).
    pub verify: Option<CiVerify>,
    /// Whether the repository was changed (`--write` on a ready result).
    pub written: bool,
}

impl CiReport {
    /// Pretty JSON with a trailing newline.
    #[must_use]
    pub fn to_json(&self) -> String {
        sync::pretty_json(self)
    }

    /// The Markdown summary: the verdict, the sync report and verify's table.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Fork CI: `{}`", self.summary);
        m.push('\n');
        let _ = writeln!(m, "- Upstream: {}", self.source);
        if let Some(c) = &self.upstream_commit {
            let _ = writeln!(m, "- Upstream commit: `{c}`");
        }
        let _ = writeln!(
            m,
            "- Repository changed: {}",
            if self.written { "yes (--write)" } else { "no" }
        );
        for service in &self.services {
            let _ = writeln!(m, "- Service: {service}");
        }
        m.push('\n');
        if let Some(up) = &self.upstream_tests {
            let _ = writeln!(
                m,
                "## Upstream's own tests (before the series): {}",
                if up.is_broken() { "FAILED" } else { "passed" }
            );
            m.push('\n');
            let _ = writeln!(
                m,
                "Packages: {}. Result: {}.",
                up.packages.join(", "),
                up.summary()
            );
            m.push('\n');
        }
        m.push_str(&self.sync.to_markdown().replacen("# ", "## ", 1));
        m.push('\n');
        match &self.verify {
            None => {
                let _ = writeln!(m, "## verify --mutation\n\nNot run: the sync is not ready.");
            }
            Some(v) => {
                let _ = writeln!(
                    m,
                    "## verify --mutation on the synced series: {}",
                    if v.passed { "passed" } else { "FAILED" }
                );
                m.push('\n');
                if !v.rows.is_empty() {
                    let _ = writeln!(m, "| id | prefix build | guards | defects | mutation |");
                    let _ = writeln!(m, "|----|--------------|--------|---------|----------|");
                    for r in &v.rows {
                        let _ = writeln!(
                            m,
                            "| `{}` | {} | {} | {} | {} |",
                            r.id, r.prefix, r.guards, r.defects, r.mutation
                        );
                    }
                    m.push('\n');
                }
                let _ = writeln!(m, "Whole test suite: {}", v.suite);
                for p in &v.problems {
                    let _ = writeln!(m, "- {p}");
                }
                if let Some(evidence) = &v.mutation {
                    m.push('\n');
                    let text = evidence
                        .to_markdown()
                        .replacen("# Mutation report", "### Mutation evidence", 1)
                        .replace("\n## ", "\n#### ");
                    m.push_str(&text);
                }
            }
        }
        m
    }
}

/// The new upstream, ready for `sync`.
struct Fetched {
    /// Where its tree is.
    dir: PathBuf,
    /// The upstream as given, for the report.
    source: String,
    /// The fetched commit (`--upstream-git` only).
    commit: Option<String>,
}

/// Step 1: the new upstream, from a directory or fetched from a git ref.
fn get_upstream(ctx: &Context, source: &UpstreamSource) -> Result<Fetched> {
    match source {
        UpstreamSource::Dir(dir) => Ok(Fetched {
            dir: fsutil::absolute(dir)?,
            source: dir.display().to_string(),
            commit: None,
        }),
        UpstreamSource::Git { url, rev } => fetch(ctx, url, rev),
    }
}

/// Fetches `rev` of `url` into the work area and writes its tree to
/// `target/fork-work/ci/upstream`.
fn fetch(ctx: &Context, url: &str, rev: &str) -> Result<Fetched> {
    let repo = workarea::ensure_repo(&ctx.git, &ctx.layout)?;
    let commit = repo
        .fetch(url, rev, CI_FETCHED_REF)?
        .map_err(|detail| Error::Fetch {
            url: url.to_owned(),
            rev: rev.to_owned(),
            detail,
        })?;
    let dir = ctx.layout.ci_dir().join("upstream");
    fsutil::remove_dir_if_present(&dir)?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    repo.export_tree(&commit, &dir)?;
    Ok(Fetched {
        dir,
        source: format!("{url}@{rev}"),
        commit: Some(commit.to_string()),
    })
}

/// The version a crate manifest declares (following `version.workspace`
/// to the checkout root's `[workspace.package]`).
fn manifest_version(found: &UpstreamDir, registry: &Registry) -> Option<String> {
    let read = |p: &Path| -> Option<toml::Table> {
        toml::from_str(&std::fs::read_to_string(p).ok()?).ok()
    };
    let (manifest, checkout) = match found {
        UpstreamDir::Checkout(root) => (
            root.join(&registry.upstream.path).join("Cargo.toml"),
            Some(root.clone()),
        ),
        UpstreamDir::CrateDir(dir) => (dir.join("Cargo.toml"), None),
    };
    let version = read(&manifest)?.get("package")?.get("version")?.clone();
    match version {
        toml::Value::String(v) => Some(v),
        toml::Value::Table(t)
            if t.get("workspace").and_then(toml::Value::as_bool) == Some(true) =>
        {
            let root = read(&checkout?.join("Cargo.toml"))?;
            root.get("workspace")?
                .get("package")?
                .get("version")?
                .as_str()
                .map(str::to_owned)
        }
        _ => None,
    }
}

/// Counts of each status, e.g. `2 exact, 1 already-upstream`.
fn status_counts(report: &sync::SyncReport) -> String {
    let order = [
        SyncStatus::Exact,
        SyncStatus::Offset,
        SyncStatus::Merged,
        SyncStatus::AlreadyUpstream,
        SyncStatus::Empty,
        SyncStatus::Conflict,
        SyncStatus::GuardFailed,
    ];
    let parts: Vec<String> = order
        .iter()
        .filter_map(|s| {
            let n = report.patches.iter().filter(|p| p.status == *s).count();
            (n > 0).then(|| format!("{n} {}", s.as_str()))
        })
        .collect();
    if parts.is_empty() {
        "no active patch".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Why each blocking patch blocks, for the one-line summary.
fn blockers(report: &sync::SyncReport) -> String {
    report
        .patches
        .iter()
        .filter(|p| p.status.blocks())
        .map(|p| match p.status {
            SyncStatus::Conflict => format!("{} conflict in {}", p.id, p.files.join(", ")),
            _ => format!("{} guard-failed", p.id),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A context for the candidate copy at `dir`: its own work area, and the
/// fork-CI cargo target directory, which persists between runs (the
/// candidate is always written to the same place, so cargo's fingerprints
/// stay valid).
fn candidate_context(ctx: &Context, dir: &Path) -> Result<Context> {
    let mut layout = Layout::new(dir);
    layout.target = ctx.layout.ci_dir().join("target");
    Ok(Context {
        root: dir.to_path_buf(),
        layout,
        git: crate::git::Git::new()?,
    })
}

/// A fresh candidate copy of the repository (`target/fork-work/ci/candidate`).
fn fresh_candidate(ctx: &Context) -> Result<PathBuf> {
    let dir = ctx.layout.ci_dir().join("candidate");
    fsutil::remove_dir_if_present(&dir)?;
    fsutil::copy_dir(&ctx.root, &dir)?;
    Ok(dir)
}

/// Upstream first: the new upstream on its own (no patch applied, the fork
/// crates and tests package beside it as in every tree), written to the
/// candidate's tree directory and built into the fork-CI target directory;
/// its own tests run there.
fn upstream_tests(
    ctx: &Context,
    registry: &Registry,
    run: &SyncRun,
    candidate: &Context,
    services: &Services,
) -> Result<UpstreamRun> {
    let repo = workarea::open_repo(&ctx.git, &ctx.layout)?;
    let dir = candidate.layout.tree();
    crate::tree::write_tree(&repo, &candidate.layout, registry, &run.new_base, &dir)?;
    let mut packages = Vec::new();
    for member in crate::tree::baseline_members(registry, &dir) {
        if let Ok(Some(name)) = sync::package_name(&dir.join(&member).join("Cargo.toml")) {
            packages.push(name);
        }
    }
    let cargo = Cargo::new(&dir, &candidate.layout.target_dir()).with_services(services);
    upstream_run::run(&cargo, &packages)
}

/// What a ready sync is adopted with, as `sync --write` records it.
struct Adoption {
    /// Upstream version (`--version`, or the crate manifest's).
    version: Option<String>,
    /// Upstream commit text (`--commit`, or the fetched commit id).
    commit: Option<String>,
    /// Last-Update of content changes.
    date: String,
}

impl Adoption {
    /// The options, with what the new upstream itself says for those not given.
    fn new(args: &CiArgs, fetched: &Fetched, found: &UpstreamDir, registry: &Registry) -> Self {
        Adoption {
            version: args
                .version
                .clone()
                .or_else(|| manifest_version(found, registry)),
            commit: args.commit.clone().or_else(|| fetched.commit.clone()),
            date: crate::dates::or_today(args.date),
        }
    }

    /// The version the summary line names.
    fn label(&self) -> &str {
        self.version.as_deref().unwrap_or("(unnamed)")
    }

    /// Writes the adopted sync into the repository copy at `dest`.
    fn adopt_into(
        &self,
        ctx: &Context,
        registry: &Registry,
        run: &SyncRun,
        dest: &Path,
    ) -> Result<()> {
        sync::adopt(
            ctx,
            registry,
            run,
            self.version.as_deref(),
            self.commit.as_deref(),
            &self.date,
            dest,
        )?;
        Ok(())
    }

    /// Adopts the sync in the repository itself (`sync --write`).
    fn write(&self, ctx: &Context, registry: &Registry, run: &SyncRun) -> Result<()> {
        sync::write(
            ctx,
            registry,
            run,
            self.version.as_deref(),
            self.commit.as_deref(),
            &self.date,
        )?;
        Ok(())
    }
}

/// What the candidate copy showed: upstream's own tests, and the synced
/// series' `verify --mutation` (when the sync was ready).
struct CandidateRun {
    /// The services the tests got.
    services: Vec<String>,
    /// Upstream's own tests, before any patch is applied.
    upstream: UpstreamRun,
    /// `verify --mutation` of the synced series.
    verify: Option<CiVerify>,
}

impl CandidateRun {
    /// The verdict: upstream first, then the synced series.
    fn verdict(&self) -> CiResult {
        if self.upstream.is_broken() {
            CiResult::UpstreamBroken
        } else if self.verify.as_ref().is_some_and(|v| v.passed) {
            CiResult::Ready
        } else {
            CiResult::Blocked
        }
    }
}

/// Steps 3 and 4, for an upstream that differs from the baseline: with the
/// services the registry asks for, in a fresh candidate copy of the
/// repository, upstream's own tests, then (when nothing blocks the sync)
/// `verify --mutation` of the synced series. The services stop on return.
fn test_candidate(
    ctx: &Context,
    registry: &Registry,
    run: &SyncRun,
    adoption: &Adoption,
) -> Result<CandidateRun> {
    let services = Services::provide(registry, &ctx.layout.work)?;
    let candidate = candidate_context(ctx, &fresh_candidate(ctx)?)?;
    // Upstream first: its own tests, before any patch is applied.
    let upstream = upstream_tests(ctx, registry, run, &candidate, &services)?;
    let verify = if run.report.result == SyncResult::Ready {
        Some(verify_candidate(
            ctx, registry, run, adoption, &candidate, &services,
        )?)
    } else {
        None
    };
    Ok(CandidateRun {
        services: services.describe(),
        upstream,
        verify,
    })
}

/// Adopts `run` into the candidate copy of the repository and runs
/// `verify --mutation` there.
fn verify_candidate(
    ctx: &Context,
    registry: &Registry,
    run: &SyncRun,
    adoption: &Adoption,
    candidate: &Context,
    services: &Services,
) -> Result<CiVerify> {
    adoption.adopt_into(ctx, registry, run, &candidate.root)?;
    ui::step(&format!(
        "verify --mutation of the synced series in {}",
        candidate.root.display()
    ));
    let report = verify::verify(
        candidate,
        &VerifyArgs {
            mutation: true,
            skip_prefix: false,
            mutation_report: None,
            guard_jobs: None,
        },
        services,
    )?;
    Ok(CiVerify {
        passed: report.problems.is_empty(),
        rows: report.rows,
        suite: report.suite,
        problems: report.problems,
        mutation: report.mutation,
    })
}

/// What the series line of the summary says: why the sync blocks, or how
/// the synced series did in `verify --mutation`.
fn series_line(sync: &sync::SyncReport, verify: Option<&CiVerify>) -> String {
    match verify {
        None => blockers(sync),
        Some(v) if v.passed => format!("{}; verify --mutation passed", status_counts(sync)),
        Some(v) => {
            let first = v.problems.first().cloned().unwrap_or_default();
            let more = match v.problems.len().saturating_sub(1) {
                0 => String::new(),
                n => format!(" (+{n} more)"),
            };
            format!("the synced series fails verify --mutation: {first}{more}")
        }
    }
}

/// The one line `ci` prints: the verdict's keyword, the version, and why.
fn summary_line(
    result: CiResult,
    label: &str,
    sync: &sync::SyncReport,
    tested: Option<&CandidateRun>,
    written: bool,
) -> String {
    let keyword = result.as_str();
    let Some(tested) = tested else {
        return format!(
            "{keyword} {label}: upstream equals the baseline ({} {})",
            sync.upstream.crate_name, sync.upstream.old_version
        );
    };
    let series = series_line(sync, tested.verify.as_ref());
    if result == CiResult::UpstreamBroken {
        return format!(
            "{keyword} {label}: upstream fails its own tests before any patch is applied: {}; \
             no patch is blamed (the series: {series})",
            tested.upstream.summary()
        );
    }
    let flaky = if tested.upstream.flaky.is_empty() {
        String::new()
    } else {
        format!(
            "; upstream's own tests were flaky: {}",
            tested.upstream.flaky.join(", ")
        )
    };
    let adopted = if written { "; adopted (--write)" } else { "" };
    format!("{keyword} {label}: {series}{flaky}{adopted}")
}

/// Step 5: writes the report (JSON, Markdown, range-diff), prints the sync
/// table and the files on stderr, and the one line on stdout.
fn publish(ctx: &Context, path: Option<&Path>, report: &CiReport, run: &SyncRun) -> Result<()> {
    let path = path.map_or_else(
        || ctx.layout.ci_dir().join("report.json"),
        Path::to_path_buf,
    );
    let files = sync::write_report(
        &path,
        &report.to_json(),
        &report.to_markdown(),
        &run.range_diff,
    )?;
    ui::note(&run.report.to_table());
    ui::note(&files.listing());
    ui::report(&format!("{}\n", report.summary));
    Ok(())
}

/// The report of a run: the verdict, its one line, and what they rest on.
fn conclude(
    result: CiResult,
    adoption: &Adoption,
    fetched: Fetched,
    sync: &sync::SyncReport,
    tested: Option<CandidateRun>,
    written: bool,
) -> CiReport {
    let summary = summary_line(result, adoption.label(), sync, tested.as_ref(), written);
    let (services, upstream_tests, verify) = match tested {
        None => (Vec::new(), None, None),
        Some(t) => (t.services, Some(t.upstream), t.verify),
    };
    CiReport {
        result,
        summary,
        source: fetched.source,
        upstream_commit: fetched.commit,
        services,
        upstream_tests,
        sync: sync.clone(),
        verify,
        written,
    }
}

/// `scripts/fork ci`: the steps of the module's documentation, in order
/// (step 6, the `--write` adoption of a ready result, comes before the
/// report, which records it).
///
/// # Errors
/// Usage and environment errors (exit 2), an edited baseline or a series
/// `check` refuses (exit 1).
pub fn run(ctx: &Context, args: &CiArgs) -> Result<Outcome> {
    let registry = ctx.registry()?;
    let fetched = get_upstream(ctx, &args.upstream)?;
    let found = sync::upstream_dir(&fetched.dir, &registry)?;
    let adoption = Adoption::new(args, &fetched, &found, &registry);
    let run = sync::compute_from(ctx, &registry, &found, adoption.version.as_deref())?;
    let tested = match run.report.result {
        SyncResult::NoUpdate => None,
        SyncResult::Ready | SyncResult::Blocked => {
            Some(test_candidate(ctx, &registry, &run, &adoption)?)
        }
    };
    let result = tested
        .as_ref()
        .map_or(CiResult::NoUpdate, CandidateRun::verdict);
    let written = args.write && result == CiResult::Ready;
    if written {
        adoption.write(ctx, &registry, &run)?;
    }
    let report = conclude(result, &adoption, fetched, &run.report, tested, written);
    publish(ctx, args.report.as_deref(), &report, &run)?;
    Ok(result.outcome())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::sync::{PatchReport, SyncReport, UpstreamReport};

    fn sync_report(statuses: &[(&str, SyncStatus)]) -> SyncReport {
        SyncReport {
            upstream: UpstreamReport {
                repository: "owner/up".into(),
                crate_name: "up".into(),
                path: "crates/up".into(),
                old_version: "0.9.0".into(),
                new_version: Some("0.9.1".into()),
                old_tree: "a".repeat(40),
                new_tree: "b".repeat(40),
            },
            patches: statuses
                .iter()
                .map(|(id, status)| PatchReport {
                    id: (*id).into(),
                    status: *status,
                    files: vec!["crates/up/src/pool.rs".into()],
                    hunks: Vec::new(),
                    detail: None,
                })
                .collect(),
            result: if statuses.iter().any(|(_, s)| s.blocks()) {
                SyncResult::Blocked
            } else {
                SyncResult::Ready
            },
        }
    }

    fn verified(problems: &[&str]) -> CiVerify {
        CiVerify {
            passed: problems.is_empty(),
            rows: Vec::new(),
            suite: WholeSuite::Passed {
                left_to_root: Vec::new(),
            },
            problems: problems.iter().map(|p| (*p).to_owned()).collect(),
            mutation: None,
        }
    }

    fn tested(upstream: UpstreamRun, verify: Option<CiVerify>) -> CandidateRun {
        CandidateRun {
            services: Vec::new(),
            upstream,
            verify,
        }
    }

    /// The verdict and the line for one candidate run.
    fn line(sync: &SyncReport, run: Option<&CandidateRun>, write: bool) -> (CiResult, String) {
        let result = run.map_or(CiResult::NoUpdate, CandidateRun::verdict);
        let written = write && result == CiResult::Ready;
        (result, summary_line(result, "0.9.1", sync, run, written))
    }

    #[test]
    fn each_verdict_has_its_line() {
        let ready = sync_report(&[("a", SyncStatus::Exact), ("b", SyncStatus::Offset)]);
        assert_eq!(
            line(&ready, None, false),
            (
                CiResult::NoUpdate,
                "no_update 0.9.1: upstream equals the baseline (up 0.9.0)".to_owned()
            )
        );
        let passed = tested(UpstreamRun::default(), Some(verified(&[])));
        assert_eq!(
            line(&ready, Some(&passed), true),
            (
                CiResult::Ready,
                "ready 0.9.1: 1 exact, 1 offset; verify --mutation passed; adopted (--write)"
                    .to_owned()
            )
        );
        let flaky = tested(
            UpstreamRun {
                flaky: vec!["up::t::sometimes".into()],
                ..UpstreamRun::default()
            },
            Some(verified(&[])),
        );
        assert_eq!(
            line(&ready, Some(&flaky), false).1,
            "ready 0.9.1: 1 exact, 1 offset; verify --mutation passed; \
             upstream's own tests were flaky: up::t::sometimes"
        );
        let failing = tested(
            UpstreamRun::default(),
            Some(verified(&["[a] x", "[b] y", "[b] z"])),
        );
        assert_eq!(
            line(&ready, Some(&failing), true),
            (
                CiResult::Blocked,
                "blocked 0.9.1: the synced series fails verify --mutation: [a] x (+2 more)"
                    .to_owned()
            )
        );
        let conflict = sync_report(&[("a", SyncStatus::Conflict), ("b", SyncStatus::Exact)]);
        assert_eq!(
            line(&conflict, Some(&tested(UpstreamRun::default(), None)), true),
            (
                CiResult::Blocked,
                "blocked 0.9.1: a conflict in crates/up/src/pool.rs".to_owned()
            )
        );
    }

    #[test]
    fn a_broken_upstream_is_the_verdict_whatever_the_series_does() {
        let ready = sync_report(&[("a", SyncStatus::Exact)]);
        let broken = tested(
            UpstreamRun {
                broken: vec!["up::t::x".into()],
                ..UpstreamRun::default()
            },
            Some(verified(&[])),
        );
        assert_eq!(
            line(&ready, Some(&broken), true),
            (
                CiResult::UpstreamBroken,
                "upstream-broken 0.9.1: upstream fails its own tests before any patch is applied: \
                 fails up::t::x; no patch is blamed (the series: 1 exact; verify --mutation passed)"
                    .to_owned()
            )
        );
        assert_eq!(CiResult::UpstreamBroken.outcome(), Outcome::UpstreamBroken);
        assert_eq!(CiResult::Blocked.outcome(), Outcome::Blocked);
        assert_eq!(CiResult::Ready.outcome(), Outcome::Ok);
        assert_eq!(CiResult::NoUpdate.outcome(), Outcome::Ok);
    }
}
