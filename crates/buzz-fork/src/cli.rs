//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use jiff::civil::Date;

/// Maintain the buzz-acp fork's patch series.
///
/// Exit codes: 0 ok, 1 check/verify failure, 2 usage or environment error,
/// 3 sync or ci blocked (conflict, failed guard, or for ci a synced series
/// that fails verify), 4 ci: upstream fails its own tests (upstream-broken).
#[derive(Debug, Parser)]
#[command(
    name = "buzz-fork",
    version,
    about,
    long_about = None,
    after_help = "Exit codes: 0 ok, 1 check/verify failure, 2 usage or environment error, \
                  3 sync or ci blocked (conflict, failed guard, failing synced series), \
                  4 ci upstream-broken (upstream fails its own tests).\nSee docs/MAINTENANCE.md."
)]
pub struct Cli {
    /// Repository root (default: the git toplevel of the current directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands; each has its own module under `cmd/`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the work repo and write the patched tree; prints its path.
    Apply(ApplyArgs),
    /// Validate baseline, registry, patch files, guards and FORK_PATCHES.md (no build).
    Check,
    /// Apply, then build and test every prefix, the whole tree and the defect tests.
    Verify(VerifyArgs),
    /// Re-export patches/ from the work repo's `series` branch.
    Refresh(RefreshArgs),
    /// Re-target the series onto a new upstream tree and classify every patch.
    Sync(SyncArgs),
    /// Retire a patch that is upstream (or dropped by an owner decision).
    Retire(RetireArgs),
    /// One line per patch: status, reason, whether it applies, guard count.
    Status,
    /// Write FORK_PATCHES.md.
    Render,
    /// Fork CI: fetch upstream, run upstream's own tests, sync, verify
    /// --mutation the synced series, report; prints one line (no_update /
    /// ready / blocked / upstream-broken).
    Ci(CiArgs),
}

impl Command {
    /// The subcommand's name, as typed.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Command::Apply(_) => "apply",
            Command::Check => "check",
            Command::Verify(_) => "verify",
            Command::Refresh(_) => "refresh",
            Command::Sync(_) => "sync",
            Command::Retire(_) => "retire",
            Command::Status => "status",
            Command::Render => "render",
            Command::Ci(_) => "ci",
        }
    }
}

/// `apply` options.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Where to write the patched tree (default: target/fork-work/tree).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Discard unsaved work in the work repo.
    #[arg(long)]
    pub force: bool,
}

/// `verify` options.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Also check that each patch's guards fail without the patch.
    #[arg(long)]
    pub mutation: bool,
    /// Skip the per-prefix builds (whole tree and defect tests only).
    #[arg(long)]
    pub skip_prefix: bool,
    /// Also write the mutation check's Markdown evidence to FILE (e.g.
    /// docs/mutation-report.md, the committed copy).
    #[arg(long, value_name = "FILE", requires = "mutation")]
    pub mutation_report: Option<PathBuf>,
    /// Guard runs with their patch at a time (default: the machine's cores);
    /// runs without their patch, which mostly wait for what the unpatched
    /// harness never does, go three times as many at a time. Each guard runs
    /// in a process of its own.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub guard_jobs: Option<u16>,
}

/// `refresh` options.
#[derive(Debug, Args)]
pub struct RefreshArgs {
    /// List the patches that would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Date for Last-Update of content changes (default: today, UTC).
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = crate::dates::parse)]
    pub date: Option<Date>,
}

/// `sync` options.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// New upstream: the crate directory or a checkout containing upstream.path.
    #[arg(long, value_name = "DIR")]
    pub upstream: PathBuf,
    /// JSON report path (default: target/fork-work/sync/report.json); the
    /// Markdown summary and range-diff are written next to it.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Adopt the new upstream when nothing blocks.
    #[arg(long)]
    pub write: bool,
    /// Upstream version of the new baseline (recorded with --write).
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Upstream commit or tag of the new baseline (recorded with --write).
    #[arg(long, value_name = "TEXT")]
    pub commit: Option<String>,
    /// Date for Last-Update of content changes (default: today, UTC).
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = crate::dates::parse)]
    pub date: Option<Date>,
}

/// `ci` options.
#[derive(Debug, Args)]
pub struct CiArgs {
    /// Where the new upstream comes from.
    #[command(flatten)]
    pub upstream: UpstreamSource,
    /// JSON report path (default: target/fork-work/ci/report.json); the
    /// Markdown summary and range-diff are written next to it.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Adopt a ready result in the repository (as `sync --write`).
    #[arg(long)]
    pub write: bool,
    /// Upstream version (default: the version in the crate's Cargo.toml).
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Upstream commit text recorded with --write (default: the fetched commit id).
    #[arg(long, value_name = "TEXT")]
    pub commit: Option<String>,
    /// Date for Last-Update of content changes (default: today, UTC).
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = crate::dates::parse)]
    pub date: Option<Date>,
}

/// Where `ci` takes the new upstream from. clap reads it from
/// [`UpstreamArgs`] and refuses every other combination of those options
/// before a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamSource {
    /// `--upstream DIR`: the crate directory or a checkout containing
    /// upstream.path.
    Dir(PathBuf),
    /// `--upstream-git URL --ref REF`: a ref of a git repository, fetched
    /// into the work area.
    Git {
        /// The repository URL (or path).
        url: String,
        /// The branch, tag or commit.
        rev: String,
    },
}

/// The options [`UpstreamSource`] is read from: exactly one of `--upstream`
/// and `--upstream-git`, and `--ref` with `--upstream-git` only.
#[derive(Debug, Args)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["upstream", "upstream_git"])))]
pub struct UpstreamArgs {
    /// New upstream: the crate directory or a checkout containing upstream.path.
    #[arg(long, value_name = "DIR")]
    pub upstream: Option<PathBuf>,
    /// New upstream: a git repository URL (or path) to fetch `--ref` from.
    #[arg(long, value_name = "URL", requires = "git_ref")]
    pub upstream_git: Option<String>,
    /// The branch, tag or commit of `--upstream-git`.
    #[arg(
        long = "ref",
        value_name = "REF",
        requires = "upstream_git",
        conflicts_with = "upstream"
    )]
    pub git_ref: Option<String>,
}

impl TryFrom<UpstreamArgs> for UpstreamSource {
    type Error = clap::Error;

    /// The source the options name. The declarations above refuse every
    /// other combination while parsing; this is clap's last word on one
    /// that is built in code.
    fn try_from(args: UpstreamArgs) -> Result<Self, clap::Error> {
        match args {
            UpstreamArgs {
                upstream: Some(dir),
                upstream_git: None,
                git_ref: None,
            } => Ok(UpstreamSource::Dir(dir)),
            UpstreamArgs {
                upstream: None,
                upstream_git: Some(url),
                git_ref: Some(rev),
            } => Ok(UpstreamSource::Git { url, rev }),
            _ => Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                "give either --upstream DIR or --upstream-git URL --ref REF\n",
            )),
        }
    }
}

impl clap::Args for UpstreamSource {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        UpstreamArgs::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        UpstreamArgs::augment_args_for_update(cmd)
    }
}

impl clap::FromArgMatches for UpstreamSource {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        UpstreamArgs::from_arg_matches(matches)?.try_into()
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// `retire` options.
#[derive(Debug, Args)]
pub struct RetireArgs {
    /// The patch id.
    pub id: String,
    /// Retire as `dropped` by owner decision, with this reason.
    #[arg(long, value_name = "WHY")]
    pub owner_decision: Option<String>,
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("buzz-fork").chain(args.iter().copied()))
    }

    fn ci(args: &[&str]) -> Result<CiArgs, ErrorKind> {
        let args: Vec<&str> = std::iter::once("ci").chain(args.iter().copied()).collect();
        match parse(&args).map_err(|e| e.kind())?.command {
            Command::Ci(ci) => Ok(ci),
            other => panic!("parsed as {}", other.name()),
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ci_reads_its_upstream_as_a_directory_or_a_git_ref() {
        assert_eq!(
            ci(&["--upstream", "up"]).unwrap().upstream,
            UpstreamSource::Dir("up".into())
        );
        let args = ci(&[
            "--upstream-git",
            "https://x/up.git",
            "--ref",
            "v1",
            "--write",
        ])
        .unwrap();
        assert_eq!(
            args.upstream,
            UpstreamSource::Git {
                url: "https://x/up.git".into(),
                rev: "v1".into()
            }
        );
        assert!(args.write);
    }

    #[test]
    fn clap_refuses_every_other_upstream_combination() {
        #[rustfmt::skip]
        let refused: [(&[&str], ErrorKind); 6] = [
            (&[], ErrorKind::MissingRequiredArgument),
            (&["--upstream-git", "u"], ErrorKind::MissingRequiredArgument),
            (&["--ref", "r"], ErrorKind::MissingRequiredArgument),
            (&["--upstream", "d", "--ref", "r"], ErrorKind::ArgumentConflict),
            (&["--upstream", "d", "--upstream-git", "u"], ErrorKind::ArgumentConflict),
            (&["--upstream", "d", "--upstream-git", "u", "--ref", "r"], ErrorKind::ArgumentConflict),
        ];
        for (args, kind) in refused {
            assert_eq!(ci(args).map(|a| a.upstream), Err(kind), "{args:?}");
        }
        let none = UpstreamArgs {
            upstream: None,
            upstream_git: None,
            git_ref: None,
        };
        let err = UpstreamSource::try_from(none).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        assert!(
            err.to_string()
                .contains("give either --upstream DIR or --upstream-git URL --ref REF"),
            "{err}"
        );
    }

    #[test]
    fn clap_reads_date_as_a_calendar_date() {
        let args = ci(&["--upstream", "d", "--date", "2026-02-28"]).unwrap();
        assert_eq!(args.date, Some(jiff::civil::date(2026, 2, 28)));
        let commands: [&[&str]; 3] = [
            &["ci", "--upstream", "d"],
            &["sync", "--upstream", "d"],
            &["refresh"],
        ];
        for command in commands {
            for bad in ["2026-02-31", "yesterday", "2026-2-28"] {
                let args = [command, &["--date", bad]].concat();
                let err = parse(&args).map(|_| ()).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ValueValidation, "{args:?}");
                assert!(
                    err.to_string().contains(&format!("\"{bad}\" is not")),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn clap_checks_verifys_options() {
        let kind = |args: &[&str]| parse(args).map(|_| ()).map_err(|e| e.kind());
        assert_eq!(
            kind(&["verify", "--mutation-report", "r.md"]),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            kind(&["verify", "--guard-jobs", "0"]),
            Err(ErrorKind::ValueValidation)
        );
        assert_eq!(
            kind(&["verify", "--mutation", "--mutation-report", "r.md"]),
            Ok(())
        );
    }
}
