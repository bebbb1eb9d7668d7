//! The patch registry `patches.json`: typed, strictly parsed, deterministic
//! when written back.
//!
//! Array order is application order. Active patches (`carried`,
//! `submitted`) are applied; `upstreamed` and `dropped` entries stay as
//! history. Structural rules (valid unique ids, safe relative paths, known
//! format version, retirement bookkeeping) are enforced on load; consistency
//! between the registry and the patch files is the job of `check`.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The only registry format this tool reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Registry file name at the repository root.
pub const REGISTRY_FILE: &str = "patches.json";
/// Git trailer that maps a commit to its registry entry.
pub const PATCH_ID_TRAILER: &str = "Fork-Patch-Id";

/// A validated patch id: `[a-z0-9-]+`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PatchId(String);

impl PatchId {
    /// The id text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix insta gives snapshots of a test target named after this
    /// patch (`session-store-resume` → `session_store_resume`).
    #[must_use]
    pub fn snapshot_prefix(&self) -> String {
        self.0.replace('-', "_")
    }
}

impl FromStr for PatchId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("a patch id must not be empty".into());
        }
        if let Some(bad) = s
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(format!(
                "patch id {s:?} contains {bad:?}; use only a-z, 0-9 and '-'"
            ));
        }
        Ok(PatchId(s.to_owned()))
    }
}

impl TryFrom<String> for PatchId {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<PatchId> for String {
    fn from(id: PatchId) -> Self {
        id.0
    }
}

impl fmt::Display for PatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why the fork carries a patch (after Electron's three justifications).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Temporary, headed upstream.
    Upstreamable,
    /// Specific to the fork; never going upstream.
    ForkOnly,
    /// Needed only to build in this workspace.
    BuildCompat,
}

impl Reason {
    /// The registry spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Upstreamable => "upstreamable",
            Reason::ForkOnly => "fork-only",
            Reason::BuildCompat => "build-compat",
        }
    }
}

/// Where the patch stands relative to upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Applied; not (yet) offered upstream.
    Carried,
    /// Applied; offered upstream (see `upstream`).
    Submitted,
    /// Retired: upstream has it.
    Upstreamed,
    /// Retired by an owner decision.
    Dropped,
}

impl Status {
    /// Whether patches with this status are applied.
    #[must_use]
    pub fn is_active(self) -> bool {
        matches!(self, Status::Carried | Status::Submitted)
    }

    /// The registry spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Carried => "carried",
            Status::Submitted => "submitted",
            Status::Upstreamed => "upstreamed",
            Status::Dropped => "dropped",
        }
    }
}

/// The pristine upstream crate the series applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// `owner/name` on GitHub.
    pub repository: String,
    /// Crate name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Repo-relative directory of the baseline.
    pub path: String,
    /// Upstream version the baseline stands for.
    pub version: String,
    /// Free text: the upstream commit or tag.
    pub commit: String,
    /// Git tree id of the baseline: the content of the crate directory
    /// `path` when `baseline_paths` is empty (format 1), otherwise the root
    /// tree holding `path` and every baseline path at its location.
    pub tree: String,
    /// Further upstream paths that belong to the baseline and are imported
    /// with the crate by `sync`: workspace crates it depends on by path,
    /// upstream's root manifest or lock (stored at a path of our choosing).
    /// Empty for a single-crate baseline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_paths: Vec<BaselinePath>,
}

/// One further path of a workspace baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselinePath {
    /// Repo-relative location in this repository (a directory or a file).
    pub path: String,
    /// Location in upstream's checkout when it differs from `path` (e.g.
    /// upstream's root `Cargo.toml`, kept here as `upstream/Cargo.toml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

impl BaselinePath {
    /// Where the path lives in upstream's checkout.
    #[must_use]
    pub fn upstream_path(&self) -> &str {
        self.upstream.as_deref().unwrap_or(&self.path)
    }
}

impl Upstream {
    /// Every baseline path, the patched crate first, as (local, upstream).
    #[must_use]
    pub fn all_paths(&self) -> Vec<(String, String)> {
        std::iter::once((self.path.clone(), self.path.clone()))
            .chain(
                self.baseline_paths
                    .iter()
                    .map(|b| (b.path.clone(), b.upstream_path().to_owned())),
            )
            .collect()
    }

    /// Whether a repo-relative path lies inside the baseline.
    #[must_use]
    pub fn contains(&self, path: &str) -> bool {
        self.all_paths()
            .iter()
            .any(|(local, _)| path == local || path.starts_with(&format!("{local}/")))
    }
}

/// Optional limits on the series' surface (see `crate::surface`), enforced by
/// `check`; absent limits are reported only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurfaceLimits {
    /// Most lines the whole series may add to files that exist in the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_added_lines_in_upstream_files: Option<usize>,
    /// Most lines the whole series may remove from files of the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_removed_lines_in_upstream_files: Option<usize>,
    /// Deprecated and ignored: glue modules are bounded by ownership (each
    /// belongs to one patch), not by length. Still read, so a registry that
    /// sets it keeps loading; `check` says to remove it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_glue_module_lines: Option<usize>,
    /// Whether an import cycle through a glue module is an error.
    #[serde(default)]
    pub forbid_glue_import_cycles: bool,
    /// Lists in glue modules that later patches may each add lines to without
    /// owning the module: the series' switchboard, where a patch whose whole
    /// effect lives in a fork crate switches it on with one line (see
    /// `crate::surface`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switch_lists: Vec<SwitchList>,
}

impl SurfaceLimits {
    /// The item of the switch list declared in `path`, if any.
    #[must_use]
    pub fn switch_list(&self, path: &str) -> Option<&str> {
        self.switch_lists
            .iter()
            .find(|l| l.path == path)
            .map(|l| l.item.as_str())
    }
}

/// A list in a glue module that later patches may add lines to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchList {
    /// Repo-relative path of the glue module.
    pub path: String,
    /// The item holding the list, named as the surface names items
    /// (`const BEHAVIOURS`).
    pub item: String,
}

/// Members of the patched workspace besides the patched crate and fork crates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Support crates copied as-is (e.g. the ACP test agent).
    pub support_paths: Vec<String>,
    /// The tests package directory (not a member of the root workspace).
    pub tests_path: String,
    /// The tests package name (for `cargo test -p`).
    pub tests_package: String,
    /// External services the tests of the patched tree need; `verify` and
    /// `ci` provide them for their runs (see `crate::services`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
}

/// An external service tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// A PostgreSQL server, reached through `BUZZ_TEST_POSTGRES_URL`.
    Postgresql,
}

/// An item that must be defined in a file of the patched tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequiredSymbol {
    /// Repo-relative file.
    pub path: String,
    /// Item name, or `Type::method`.
    pub symbol: String,
}

/// A call that must exist inside a function of the patched tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seam {
    /// Repo-relative file.
    pub path: String,
    /// Function or method (`Type::method`) containing the call.
    pub caller: String,
    /// A path suffix (`a::b`) or a method (`.name`).
    pub callee: String,
}

/// A guard test that proves only the patch's API (see
/// [`PatchEntry::api_guards`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiGuard {
    /// `<test target>::<fn>`, one of the patch's `guard_tests`.
    pub test: String,
    /// Why failing to compile without the patch is what this guard proves.
    pub reason: String,
}

/// Bookkeeping of a retired patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retired {
    /// Why it was retired.
    pub reason: String,
    /// Upstream version at retirement.
    pub upstream_version: String,
    /// Whether an owner decided (rather than detection).
    pub owner_decision: bool,
}

/// One patch of the series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchEntry {
    /// Stable name.
    pub id: PatchId,
    /// Repo-relative patch file.
    pub file: String,
    /// One line.
    pub title: String,
    /// Why the patch exists.
    pub description: String,
    /// Justification class.
    pub reason: Reason,
    /// Upstream status.
    pub status: Status,
    /// Upstream references (`owner/repo#N` or URLs).
    pub upstream: Vec<String>,
    /// DEP-3 `Last-Update`, `YYYY-MM-DD`.
    pub last_update: String,
    /// Earlier patches this one needs.
    pub depends_on: Vec<PatchId>,
    /// Fork-owned crates this patch wires in.
    pub fork_crates: Vec<String>,
    /// Files the patch touches.
    pub paths: Vec<String>,
    /// Items that must exist once the patch is applied.
    pub required_symbols: Vec<RequiredSymbol>,
    /// Calls that must exist once the patch is applied.
    pub seams: Vec<Seam>,
    /// `<test target>::<fn>` in the tests package.
    pub guard_tests: Vec<String>,
    /// Repo-relative `.snap` files guarding the patch.
    pub guard_snapshots: Vec<String>,
    /// Guard tests that only prove the patch's API: they do not compile
    /// without the patch, and this says why that is all they can prove.
    /// The mutation check reports them as API guards, never as behavioural
    /// proofs; any other guard must fail by an assertion without its patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_guards: Vec<ApiGuard>,
    /// `<package>::<test target>::<fn>` baseline tests that must fail once applied.
    pub fixes_defects: Vec<String>,
    /// Set when the patch is retired.
    pub retired: Option<Retired>,
}

impl PatchEntry {
    /// Whether the patch is applied.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.status.is_active()
    }

    /// The registry's reason for calling `test` an API guard, if it does.
    #[must_use]
    pub fn api_guard_reason(&self, test: &str) -> Option<&str> {
        self.api_guards
            .iter()
            .find(|a| a.test == test)
            .map(|a| a.reason.as_str())
    }
}

/// The whole registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The baseline.
    pub upstream: Upstream,
    /// Extra members of the patched workspace.
    pub workspace: WorkspaceConfig,
    /// Limits on the series' surface; `None` reports it without limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<SurfaceLimits>,
    /// The series, in application order.
    pub patches: Vec<PatchEntry>,
}

/// A guard test reference `<target>::<fn path>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TestRef {
    /// Package (for defect tests) or the tests package.
    pub package: String,
    /// Test target (`lib` for unit tests).
    pub target: String,
    /// Test path inside the target binary.
    pub name: String,
}

impl TestRef {
    /// Parses a guard test `<target>::<fn>` of `package`.
    pub fn guard(package: &str, text: &str) -> Option<TestRef> {
        let (target, name) = text.split_once("::")?;
        (!target.is_empty() && !name.is_empty()).then(|| TestRef {
            package: package.to_owned(),
            target: target.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Parses a defect test `<package>::<target>::<fn>`.
    pub fn defect(text: &str) -> Option<TestRef> {
        let (package, rest) = text.split_once("::")?;
        if package.is_empty() {
            return None;
        }
        TestRef::guard(package, rest)
    }
}

impl Registry {
    /// Reads and validates `patches.json` under `root`.
    ///
    /// # Errors
    /// [`Error::RegistryMissing`], [`Error::RegistryMalformed`] (with the JSON
    /// path of the offending field) or [`Error::RegistryInvalid`].
    pub fn load(root: &Path) -> Result<Registry> {
        let path = root.join(REGISTRY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::RegistryMissing { path });
            }
            Err(e) => return Err(Error::io("reading", path, e)),
        };
        Registry::parse(&text, &path)
    }

    /// Parses and validates registry text (`path` is for messages).
    ///
    /// # Errors
    /// As [`Registry::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Registry> {
        let mut de = serde_json::Deserializer::from_str(text);
        let registry: Registry =
            serde_path_to_error::deserialize(&mut de).map_err(|e| Error::RegistryMalformed {
                path: path.to_owned(),
                field: e.path().to_string(),
                message: e.inner().to_string(),
            })?;
        de.end().map_err(|e| Error::RegistryMalformed {
            path: path.to_owned(),
            field: ".".into(),
            message: e.to_string(),
        })?;
        registry
            .validate()
            .map_err(|message| Error::RegistryInvalid {
                path: path.to_owned(),
                message,
            })?;
        Ok(registry)
    }

    /// Structural rules that every command relies on.
    fn validate(&self) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "format_version is {}, this tool reads version {FORMAT_VERSION}",
                self.format_version
            ));
        }
        check_rel_path("upstream.path", &self.upstream.path)?;
        let mut locals = BTreeSet::from([self.upstream.path.clone()]);
        for (i, b) in self.upstream.baseline_paths.iter().enumerate() {
            check_rel_path(&format!("upstream.baseline_paths[{i}].path"), &b.path)?;
            if let Some(u) = &b.upstream {
                check_rel_path(&format!("upstream.baseline_paths[{i}].upstream"), u)?;
            }
            let overlaps = locals.iter().any(|l| {
                *l == b.path
                    || b.path.starts_with(&format!("{l}/"))
                    || l.starts_with(&format!("{}/", b.path))
            });
            if overlaps {
                return Err(format!(
                    "upstream.baseline_paths[{i}].path: {:?} overlaps another baseline path",
                    b.path
                ));
            }
            locals.insert(b.path.clone());
        }
        for (i, p) in self.workspace.support_paths.iter().enumerate() {
            check_rel_path(&format!("workspace.support_paths[{i}]"), p)?;
        }
        check_rel_path("workspace.tests_path", &self.workspace.tests_path)?;
        let mut seen = BTreeSet::new();
        for (i, p) in self.patches.iter().enumerate() {
            let at = format!("patches[{i}] ({})", p.id);
            if !seen.insert(p.id.clone()) {
                return Err(format!("{at}: duplicate patch id"));
            }
            check_rel_path(&format!("{at}.file"), &p.file)?;
            if !p.file.ends_with(".patch") {
                return Err(format!("{at}.file: {:?} must end in .patch", p.file));
            }
            if p.title.trim().is_empty() || p.title.contains('\n') {
                return Err(format!("{at}.title: must be one non-empty line"));
            }
            crate::dates::parse(&p.last_update).map_err(|e| format!("{at}.last_update: {e}"))?;
            for r in &p.upstream {
                upstream_url(r).map_err(|e| format!("{at}.upstream: {e}"))?;
            }
            if matches!(p.status, Status::Submitted | Status::Upstreamed) && p.upstream.is_empty() {
                return Err(format!(
                    "{at}.upstream: status {} needs at least one upstream reference",
                    p.status.as_str()
                ));
            }
            match (p.is_active(), &p.retired) {
                (true, Some(_)) => {
                    return Err(format!(
                        "{at}.retired: an active ({}) patch must have retired = null",
                        p.status.as_str()
                    ));
                }
                (false, None) => {
                    return Err(format!(
                        "{at}.retired: a {} patch needs its retirement record",
                        p.status.as_str()
                    ));
                }
                _ => {}
            }
            let lists = [
                ("fork_crates", &p.fork_crates),
                ("paths", &p.paths),
                ("guard_snapshots", &p.guard_snapshots),
            ];
            for (name, list) in lists {
                for (j, v) in list.iter().enumerate() {
                    check_rel_path(&format!("{at}.{name}[{j}]"), v)?;
                }
            }
            for (j, s) in p.required_symbols.iter().enumerate() {
                check_rel_path(&format!("{at}.required_symbols[{j}].path"), &s.path)?;
            }
            for (j, s) in p.seams.iter().enumerate() {
                check_rel_path(&format!("{at}.seams[{j}].path"), &s.path)?;
            }
            for (j, t) in p.guard_tests.iter().enumerate() {
                if TestRef::guard("", t).is_none() {
                    return Err(format!(
                        "{at}.guard_tests[{j}]: {t:?} is not <test target>::<fn>"
                    ));
                }
            }
            for (j, a) in p.api_guards.iter().enumerate() {
                if !p.guard_tests.contains(&a.test) {
                    return Err(format!(
                        "{at}.api_guards[{j}]: {:?} is not one of the patch's guard_tests",
                        a.test
                    ));
                }
                if a.reason.trim().is_empty() {
                    return Err(format!(
                        "{at}.api_guards[{j}]: an API guard needs a reason (why failing to compile without the patch is all it proves)"
                    ));
                }
            }
            for (j, t) in p.fixes_defects.iter().enumerate() {
                if TestRef::defect(t).is_none() {
                    return Err(format!(
                        "{at}.fixes_defects[{j}]: {t:?} is not <package>::<test target>::<fn>"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Pretty JSON with a trailing newline (field order fixed by the types).
    ///
    /// # Errors
    /// Never in practice (the types always serialize).
    pub fn to_json(&self) -> Result<String> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| Error::JsonMalformed {
            what: "registry",
            path: REGISTRY_FILE.into(),
            message: e.to_string(),
        })?;
        text.push('\n');
        Ok(text)
    }

    /// Writes the registry to `root/patches.json` atomically.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn save(&self, root: &Path) -> Result<()> {
        crate::fsutil::write_atomic(&root.join(REGISTRY_FILE), self.to_json()?.as_bytes())
    }

    /// Active patches in application order.
    pub fn active(&self) -> impl Iterator<Item = &PatchEntry> {
        self.patches.iter().filter(|p| p.is_active())
    }

    /// The entry with `id`, or [`Error::UnknownPatch`].
    ///
    /// # Errors
    /// When no entry has that id.
    pub fn find(&self, id: &str) -> Result<&PatchEntry> {
        self.patches
            .iter()
            .find(|p| p.id.as_str() == id)
            .ok_or_else(|| self.unknown(id))
    }

    /// Mutable access to the entry with `id`.
    ///
    /// # Errors
    /// When no entry has that id.
    pub fn find_mut(&mut self, id: &str) -> Result<&mut PatchEntry> {
        let unknown = self.unknown(id);
        self.patches
            .iter_mut()
            .find(|p| p.id.as_str() == id)
            .ok_or(unknown)
    }

    fn unknown(&self, id: &str) -> Error {
        Error::UnknownPatch {
            id: id.to_owned(),
            known: self
                .patches
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Every fork crate of every registered patch, in registry order, deduplicated.
    #[must_use]
    pub fn all_fork_crates(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.patches
            .iter()
            .flat_map(|p| p.fork_crates.iter())
            .filter(|c| seen.insert((*c).clone()))
            .cloned()
            .collect()
    }
}

/// A repo-relative path must be relative, normalized and stay inside the repo.
fn check_rel_path(field: &str, p: &str) -> Result<(), String> {
    let path = Path::new(p);
    let ok = !p.is_empty()
        && !p.contains('\\')
        && !p.ends_with('/')
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field}: {p:?} must be a normalized repo-relative path (no '..', no leading '/', no trailing '/')"
        ))
    }
}

/// Turns an upstream reference into a URL: `owner/repo#N` becomes the pull
/// request URL; an `https://` URL is kept as written.
///
/// # Errors
/// When the reference has neither form.
pub fn upstream_url(reference: &str) -> Result<String, String> {
    if reference.starts_with("https://") && !reference.contains(char::is_whitespace) {
        return Ok(reference.to_owned());
    }
    let bad = || {
        format!(
            "{reference:?} is neither owner/repo#N (a pull request) nor an https:// URL (e.g. an issue)"
        )
    };
    let (repo, number) = reference.split_once('#').ok_or_else(bad)?;
    let (owner, name) = repo.split_once('/').ok_or_else(bad)?;
    let valid_part = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if !valid_part(owner)
        || !valid_part(name)
        || number.is_empty()
        || !number.chars().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    Ok(format!("https://github.com/{owner}/{name}/pull/{number}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_id_goodness_and_badness() {
        for good in ["a", "session-store-resume", "fix-2"] {
            assert!(good.parse::<PatchId>().is_ok(), "{good}");
        }
        for bad in ["", "Upper", "under_score", "sp ace", "dot.ted", "ü"] {
            assert!(bad.parse::<PatchId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn upstream_references() {
        assert_eq!(
            upstream_url("block/buzz#6088").unwrap(),
            "https://github.com/block/buzz/pull/6088"
        );
        assert_eq!(
            upstream_url("https://github.com/block/buzz/issues/12").unwrap(),
            "https://github.com/block/buzz/issues/12"
        );
        for bad in ["#12", "block/buzz", "block/buzz#x", "http://x", "a b/c#1"] {
            assert!(upstream_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn test_refs() {
        let g = TestRef::guard("tests", "session_store_resume::restarts").unwrap();
        assert_eq!(
            (g.target.as_str(), g.name.as_str()),
            ("session_store_resume", "restarts")
        );
        let d = TestRef::defect("buzz-acp::pinned_defects::m::restart").unwrap();
        assert_eq!(
            (d.package.as_str(), d.target.as_str(), d.name.as_str()),
            ("buzz-acp", "pinned_defects", "m::restart")
        );
        assert!(TestRef::guard("t", "nofn").is_none());
        assert!(TestRef::defect("pkg::target").is_none());
    }

    #[test]
    fn rel_paths() {
        assert!(check_rel_path("f", "crates/x").is_ok());
        for bad in ["", "/abs", "../up", "a/../b", "a/", "./a"] {
            assert!(check_rel_path("f", bad).is_err(), "{bad}");
        }
    }
}
