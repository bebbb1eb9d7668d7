//! Typed errors of the maintenance tool and their exit codes.
//!
//! Exit codes: `0` success, `1` a check or verify failure (something about the
//! series is wrong), `2` a usage or environment error (the tool could not do
//! its job), `3` a sync blocked by a conflict or a failed guard, `4` (fork
//! CI) an upstream that fails its own tests. `3` and `4` are verdicts
//! ([`crate::Outcome`]), never errors.

use std::path::PathBuf;

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `git` is not on `PATH`.
    #[error("git was not found on PATH; install git >= {need}")]
    GitMissing {
        /// Minimum version the tool needs.
        need: &'static str,
    },
    /// `git` is too old for `merge-tree --write-tree`.
    #[error("git {found} is too old; the fork tool needs git >= {need} (merge-tree --write-tree)")]
    GitTooOld {
        /// Version reported by `git version`.
        found: String,
        /// Minimum version the tool needs.
        need: &'static str,
    },
    /// A git subprocess failed.
    #[error("git {cmd}: {stderr}")]
    Git {
        /// The git subcommand (e.g. `apply`).
        cmd: String,
        /// Trimmed standard error of the process.
        stderr: String,
    },
    /// A git subprocess printed something the tool cannot read.
    #[error("git {cmd}: unexpected output: {detail}")]
    GitOutput {
        /// The git subcommand.
        cmd: String,
        /// What was wrong with the output.
        detail: String,
    },
    /// A file-system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What the tool was doing, e.g. "reading".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A child process (cargo) could not be started.
    #[error("could not run {program}: {source}")]
    Spawn {
        /// Program name.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The repository root could not be determined.
    #[error("cannot find the repository root from {}: {detail} (pass --root DIR)", cwd.display())]
    RootNotFound {
        /// Current directory.
        cwd: PathBuf,
        /// Why.
        detail: String,
    },
    /// `patches.json` does not exist.
    #[error("registry {} does not exist", path.display())]
    RegistryMissing {
        /// Expected location.
        path: PathBuf,
    },
    /// `patches.json` does not deserialize.
    #[error("malformed registry {}: at `{field}`: {message}", path.display())]
    RegistryMalformed {
        /// Registry file.
        path: PathBuf,
        /// JSON path of the offending field (e.g. `patches[2].reason`).
        field: String,
        /// The serde message.
        message: String,
    },
    /// `patches.json` deserializes but breaks a structural rule.
    #[error("invalid registry {}: {message}", path.display())]
    RegistryInvalid {
        /// Registry file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A JSON document the tool owns (other than the registry) is invalid.
    #[error("malformed {what} {}: {message}", path.display())]
    JsonMalformed {
        /// What kind of document.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The serde message with its field path.
        message: String,
    },
    /// The root `Cargo.toml` or a `Cargo.lock` cannot be used.
    #[error("{}: {message}", path.display())]
    Manifest {
        /// The manifest or lock file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The pristine upstream crate directory does not exist.
    #[error("baseline directory {} does not exist (upstream.path in patches.json)", path.display())]
    BaselineMissing {
        /// Expected location.
        path: PathBuf,
    },
    /// The baseline directory differs from the registered upstream tree.
    #[error(
        "baseline {path} has tree {found} but patches.json records upstream.tree {expected}; \
         fork work must go into a patch or a fork crate, and the baseline changes only through `scripts/fork sync --write`"
    )]
    BaselineEdited {
        /// Repo-relative baseline path.
        path: String,
        /// Registered tree id.
        expected: String,
        /// Actual tree id.
        found: String,
    },
    /// A patch file is missing.
    #[error("patch {id}: file {file} does not exist")]
    PatchMissing {
        /// Patch id.
        id: String,
        /// Registered file.
        file: String,
    },
    /// A patch file does not parse.
    #[error("patch {id}: {file} does not parse as a patch: {message}")]
    PatchParse {
        /// Patch id.
        id: String,
        /// Registered file.
        file: String,
        /// Parser message.
        message: String,
    },
    /// A patch does not apply to the tree it should apply to.
    #[error("patch {id} does not apply: {detail}")]
    PatchDoesNotApply {
        /// Patch id.
        id: String,
        /// git's explanation.
        detail: String,
    },
    /// A patch id on the command line is not in the registry.
    #[error("unknown patch id `{id}` (known: {known})")]
    UnknownPatch {
        /// Requested id.
        id: String,
        /// Comma-separated registered ids.
        known: String,
    },
    /// The work repository holds work that an operation would discard.
    #[error("work repo {} is dirty: {reason}", repo.display())]
    DirtyWorkRepo {
        /// Work repo location.
        repo: PathBuf,
        /// What would be lost and how to proceed.
        reason: String,
    },
    /// The work repository does not exist.
    #[error("work repo {} does not exist; run `scripts/fork apply` first", repo.display())]
    NoWorkRepo {
        /// Expected location.
        repo: PathBuf,
    },
    /// The `series` branch cannot be mapped onto the registry.
    #[error("series branch does not match patches.json: {detail}")]
    SeriesMismatch {
        /// What does not match.
        detail: String,
    },
    /// The patched tree resolved different registry packages than the root lock.
    #[error("the patched tree must build with the root lock: {detail}")]
    LockMismatch {
        /// Added and removed packages.
        detail: String,
    },
    /// `retire` refused.
    #[error("cannot retire {id}: {reason}")]
    RetireRefused {
        /// Patch id.
        id: String,
        /// Why.
        reason: String,
    },
    /// A command-line value is not acceptable.
    #[error("{0}")]
    Usage(String),
    /// The directory given as the new upstream does not hold the baseline.
    #[error("--upstream {}: {detail}", dir.display())]
    UpstreamInvalid {
        /// The directory as given.
        dir: PathBuf,
        /// What is missing.
        detail: String,
    },
    /// An upstream git repository or ref cannot be fetched.
    #[error("cannot fetch {rev} from {url}: {detail}")]
    Fetch {
        /// The repository URL as given.
        url: String,
        /// The ref as given.
        rev: String,
        /// git's first line of explanation.
        detail: String,
    },
    /// The work repository exists but git cannot use it.
    #[error(
        "work repo {} is not a usable git repository ({detail}); delete it (rm -rf {}) or run `scripts/fork apply --force`, which rebuilds it",
        repo.display(),
        repo.display()
    )]
    WorkRepoCorrupt {
        /// Work repo location.
        repo: PathBuf,
        /// git's first line of explanation.
        detail: String,
    },
    /// The registered series cannot be built: the first blocking finding of
    /// `check`, and how many more there are.
    #[error("{first}{}", more_suffix(*more))]
    SeriesInvalid {
        /// The first blocking problem, prefixed with its subject.
        first: String,
        /// How many further problems `check` reports.
        more: usize,
    },
    /// `cargo update --workspace` could not bring the lock file in line
    /// with a new baseline.
    #[error(
        "cannot update the lock file for {}: {detail} (the new baseline is written; run `cargo update --workspace` by hand)",
        manifest.display()
    )]
    LockUpdate {
        /// The workspace manifest.
        manifest: PathBuf,
        /// First line of cargo's explanation.
        detail: String,
    },
    /// A PostgreSQL server the guards need could not be provided.
    #[error(
        "cannot start PostgreSQL for the guard tests (workspace.services in patches.json): {step}: {detail} \
         (or set BUZZ_TEST_POSTGRES_URL to a running server)"
    )]
    Postgres {
        /// The step that failed (initdb, pg_ctl start, …).
        step: String,
        /// What went wrong.
        detail: String,
    },
    /// cargo metadata failed or printed something unreadable.
    #[error("cargo metadata for {}: {detail}", manifest.display())]
    CargoMetadata {
        /// The manifest.
        manifest: PathBuf,
        /// First line of cargo's explanation.
        detail: String,
    },
}

fn more_suffix(more: usize) -> String {
    match more {
        0 => " (run `scripts/fork check` for the full report)".to_owned(),
        n => format!(" (and {n} more problem(s); run `scripts/fork check` for the full report)"),
    }
}

/// The first line of a tool's error output that explains something: `fatal:`
/// and `error:` lines first, never usage text, hints or advice.
#[must_use]
pub fn first_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !(l.starts_with("hint:") || l.starts_with("usage:") || l.starts_with("or:")))
        .collect();
    let chosen = lines
        .iter()
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
        .or_else(|| lines.first())
        .copied()
        .unwrap_or("");
    chosen.to_owned()
}

impl Error {
    /// The process exit code for this error.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::PatchDoesNotApply { .. }
            | Error::SeriesInvalid { .. }
            | Error::LockMismatch { .. }
            | Error::RetireRefused { .. }
            | Error::BaselineEdited { .. } => 1,
            _ => 2,
        }
    }

    /// Shorthand for an I/O error with its action and path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
