//! The analysis every command starts from: the registry, the patch files and
//! the baseline directory, applied in process (no git, no build) into what
//! each patch is and does.
//!
//! For every active patch, in order: its file (read and parsed, or why not),
//! how it fits at its prefix (exactly, shifted, or not at all), which of its
//! required symbols and seams are missing there, and the files as it finds
//! them. For the whole series: the paths it changes and its surface (see
//! [`crate::surface`]). `check` judges the analysis, `status` and `render`
//! report it, and `apply` (with every command built on it) refuses a series
//! whose analysis says it cannot be built (see [`crate::checks::preflight`]).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::exact::{ApplyReport, BaseReader, Overlay, Strictness};
use crate::fsutil;
use crate::guards;
use crate::patchfile::{self, ParsedPatch};
use crate::registry::{PatchEntry, Registry, Upstream};
use crate::surface::{self, Surface};

/// What one active patch is and does at its place in the series.
pub struct PatchAnalysis<'r> {
    /// The entry.
    pub entry: &'r PatchEntry,
    /// The parsed file, when it exists and parses.
    pub parsed: Option<ParsedPatch>,
    /// Raw file text.
    pub text: Option<String>,
    /// Why the file could not be used.
    pub file_problem: Option<String>,
    /// Strict application report (`None` when the file was unusable).
    pub exact: Option<ApplyReport>,
    /// Whether the patch applies at all (exact or shifted).
    pub applies: bool,
    /// The earlier patch that did not apply, if any: this patch's
    /// application and guards are then measured on a tree without it.
    pub after_failure: Option<String>,
    /// Missing symbols and seams at this prefix.
    pub guard_problems: Vec<String>,
    /// The baseline files the patch touches, as it finds them (the baseline
    /// plus the patches before it).
    pub before: BTreeMap<String, Option<String>>,
}

impl PatchAnalysis<'_> {
    /// How the patch fits at its prefix, for tables: `exact`, `offset`,
    /// `FAIL`, or `blocked` after an earlier patch that does not apply.
    #[must_use]
    pub fn fit_label(&self) -> &'static str {
        match (&self.exact, self.applies, &self.after_failure) {
            (_, _, Some(_)) => "blocked",
            (Some(r), _, None) if r.is_exact() => "exact",
            (Some(_), true, None) => "offset",
            _ => "FAIL",
        }
    }
}

/// The in-process application of the active series.
pub struct Analysis<'r> {
    /// One analysis per active patch, in order.
    pub patches: Vec<PatchAnalysis<'r>>,
    /// Paths the applied patches changed.
    pub differing: Vec<String>,
    /// The series' surface; `None` when a patch does not apply (the patched
    /// tree is then not the series' tree) or it was not asked for.
    pub surface: Option<Surface>,
}

impl Analysis<'_> {
    /// Added/removed line counts of each active patch whose file parses.
    #[must_use]
    pub fn line_counts(&self) -> BTreeMap<String, (usize, usize)> {
        self.patches
            .iter()
            .filter_map(|a| Some((a.entry.id.to_string(), a.parsed.as_ref()?.line_counts())))
            .collect()
    }

    /// Whether every active patch applies.
    #[must_use]
    pub fn all_apply(&self) -> bool {
        self.patches.iter().all(|a| a.applies)
    }

    /// The analysis of patch `id`, if it is active.
    #[must_use]
    pub fn patch(&self, id: &str) -> Option<&PatchAnalysis<'_>> {
        self.patches.iter().find(|a| a.entry.id.as_str() == id)
    }
}

/// Whether the surface is measured: it parses every patched Rust file, which
/// `preflight` (run by every `apply` and `sync`) does not need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Measure the surface.
    Surface,
    /// Only apply and check guards.
    SeriesOnly,
}

/// Reads a baseline file for the overlay; paths outside the baseline (and
/// build output under a baseline crate's `target/`) are absent.
#[must_use]
pub fn baseline_reader<'a>(root: &'a Path, upstream: &'a Upstream) -> BaseReader<'a> {
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
pub fn in_baseline(upstream: &Upstream, path: &str) -> bool {
    upstream.all_paths().iter().any(|(local, _)| {
        path == local
            || path
                .strip_prefix(local.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.starts_with("target/"))
    })
}

/// Reads and parses one patch file.
fn read_patch(
    root: &Path,
    entry: &PatchEntry,
) -> Result<(Option<String>, Result<ParsedPatch, String>)> {
    Ok(match fsutil::read_optional(&root.join(&entry.file))? {
        None => (
            None,
            Err(format!("patch file {} does not exist", entry.file)),
        ),
        Some(text) => {
            let parsed = patchfile::parse(&text)
                .map_err(|e| format!("{} does not parse as a patch: {e}", entry.file));
            (Some(text), parsed)
        }
    })
}

/// Applies the active series in process over the baseline directory,
/// strictly, checks guards at each prefix and (with [`Measure::Surface`])
/// measures the series' surface.
///
/// # Errors
/// I/O errors reading the baseline or a patch file.
pub fn analyze<'r>(root: &Path, registry: &'r Registry, measure: Measure) -> Result<Analysis<'r>> {
    let mut overlay = Overlay::new(baseline_reader(root, &registry.upstream));
    let mut out = Vec::new();
    let mut broken: Option<String> = None;
    for entry in registry.active() {
        let (text, parsed) = read_patch(root, entry)?;
        let mut a = PatchAnalysis {
            entry,
            parsed: None,
            text,
            file_problem: None,
            exact: None,
            applies: false,
            after_failure: broken.clone(),
            guard_problems: Vec::new(),
            before: BTreeMap::new(),
        };
        match parsed {
            Ok(p) => a.parsed = Some(p),
            Err(problem) => a.file_problem = Some(problem),
        }
        if let Some(parsed) = &a.parsed {
            for file in &parsed.files {
                if in_baseline(&registry.upstream, &file.path) {
                    a.before
                        .insert(file.path.clone(), overlay.read(&file.path)?);
                }
            }
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
    let surface = if measure == Measure::Surface && broken.is_none() {
        Some(measure_surface(root, registry, &out, &overlay)?)
    } else {
        None
    };
    Ok(Analysis {
        patches: out,
        differing,
        surface,
    })
}

fn measure_surface(
    root: &Path,
    registry: &Registry,
    patches: &[PatchAnalysis<'_>],
    overlay: &Overlay<'_>,
) -> Result<Surface> {
    let parsed: Vec<(&str, &ParsedPatch)> = patches
        .iter()
        .filter_map(|a| a.parsed.as_ref().map(|p| (a.entry.id.as_str(), p)))
        .collect();
    surface::measure(
        registry,
        &parsed,
        surface::Trees {
            in_baseline: &mut |path: &str| {
                Ok(in_baseline(&registry.upstream, path) && root.join(path).is_file())
            },
            before: &mut |index: usize, path: &str| {
                Ok(patches
                    .get(index)
                    .and_then(|a| a.before.get(path).cloned())
                    .flatten())
            },
            patched: &mut |path: &str| overlay.read(path),
        },
    )
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
