//! The series' surface: how much of upstream it touches, which is what can
//! conflict on every sync.
//!
//! * lines each patch adds to and removes from files that exist in the
//!   baseline ("upstream files"), and the totals;
//! * the new files the series adds inside the patched crate, with their line
//!   counts in the fully patched tree: new `.rs` files are *glue modules*;
//! * import cycles between baseline modules and glue modules in the fully
//!   patched crate (see [`crate::modgraph`]).
//!
//! Measuring is pure: the caller passes readers for the baseline and for the
//! fully patched tree, so `render` (in process, over the baseline directory)
//! and `refresh` (over the work repo's commits) produce the same figures.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::modgraph;
use crate::patchfile::{HunkLine, ParsedPatch};
use crate::registry::{Registry, SurfaceLimits};

/// One patch's lines in upstream files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchSurface {
    /// Patch id.
    pub id: String,
    /// Lines added to files that exist in the baseline.
    pub added: usize,
    /// Lines removed from files that exist in the baseline.
    pub removed: usize,
}

/// A file the series creates inside the patched crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// Repo-relative path.
    pub path: String,
    /// Lines in the fully patched tree.
    pub lines: usize,
}

/// The measured surface of the active series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Surface {
    /// Per active patch, in order.
    pub patches: Vec<PatchSurface>,
    /// New `.rs` files inside the crate (glue modules), by path.
    pub glue: Vec<NewFile>,
    /// Other new files inside the crate (snapshots, data), by path.
    pub other_new: Vec<NewFile>,
    /// Import cycles through a glue module (module names, first = last).
    pub cycles: Vec<Vec<String>>,
    /// Files of the patched crate whose imports could not be read.
    pub unreadable: Vec<String>,
}

impl Surface {
    /// Lines the whole series adds to upstream files.
    #[must_use]
    pub fn added(&self) -> usize {
        self.patches.iter().map(|p| p.added).sum()
    }

    /// Lines the whole series removes from upstream files.
    #[must_use]
    pub fn removed(&self) -> usize {
        self.patches.iter().map(|p| p.removed).sum()
    }

    /// The largest glue module.
    #[must_use]
    pub fn largest_glue(&self) -> Option<&NewFile> {
        self.glue
            .iter()
            .max_by(|a, b| a.lines.cmp(&b.lines).then(b.path.cmp(&a.path)))
    }

    /// Markdown section for `FORK_PATCHES.md`.
    #[must_use]
    pub fn markdown(&self, limits: Option<&SurfaceLimits>) -> String {
        let mut m = String::new();
        let limit = |v: Option<usize>| v.map_or(String::new(), |l| format!(" (limit {l})"));
        let _ = writeln!(m, "## Series surface");
        m.push('\n');
        let _ = writeln!(
            m,
            "Lines the series adds to / removes from files that exist in the baseline: +{}{} / -{}{}.",
            self.added(),
            limit(limits.and_then(|l| l.max_added_lines_in_upstream_files)),
            self.removed(),
            limit(limits.and_then(|l| l.max_removed_lines_in_upstream_files)),
        );
        m.push('\n');
        if !self.patches.is_empty() {
            let _ = writeln!(m, "| patch | + in upstream files | - in upstream files |");
            let _ = writeln!(m, "|-------|--------------------:|--------------------:|");
            for p in &self.patches {
                let _ = writeln!(m, "| `{}` | {} | {} |", p.id, p.added, p.removed);
            }
            m.push('\n');
        }
        match self.largest_glue() {
            None => {
                let _ = writeln!(m, "Glue modules (new `.rs` files inside the crate): none.");
            }
            Some(largest) => {
                let _ = writeln!(
                    m,
                    "Glue modules (new `.rs` files inside the crate): {}, largest `{}` with {} lines{}.",
                    self.glue.len(),
                    largest.path,
                    largest.lines,
                    limit(limits.and_then(|l| l.max_glue_module_lines)),
                );
                m.push('\n');
                for g in &self.glue {
                    let _ = writeln!(m, "- `{}`: {} lines", g.path, g.lines);
                }
            }
        }
        if !self.other_new.is_empty() {
            m.push('\n');
            let _ = writeln!(m, "Other new files inside the crate:");
            m.push('\n');
            for f in &self.other_new {
                let _ = writeln!(m, "- `{}`: {} lines", f.path, f.lines);
            }
        }
        m.push('\n');
        let forbid = limits.is_some_and(|l| l.forbid_glue_import_cycles);
        let rule = if forbid { " (forbidden)" } else { "" };
        if self.cycles.is_empty() {
            let _ = writeln!(m, "Import cycles through glue modules{rule}: none.");
        } else {
            let _ = writeln!(m, "Import cycles through glue modules{rule}:");
            m.push('\n');
            for c in &self.cycles {
                let _ = writeln!(m, "- {}", cycle_text(c));
            }
        }
        if !self.unreadable.is_empty() {
            m.push('\n');
            let _ = writeln!(
                m,
                "Not parsed (imports unknown): {}.",
                self.unreadable
                    .iter()
                    .map(|u| format!("`{u}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        m
    }

    /// Plain-text summary for `status`.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "surface: +{} / -{} lines in upstream files ({})",
            self.added(),
            self.removed(),
            if self.patches.is_empty() {
                "no active patch".to_owned()
            } else {
                self.patches
                    .iter()
                    .map(|p| format!("{} +{}/-{}", p.id, p.added, p.removed))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let _ = writeln!(
            s,
            "glue modules: {}",
            match self.largest_glue() {
                None => "none".to_owned(),
                Some(l) => format!(
                    "{} ({}), largest {} with {} lines",
                    self.glue.len(),
                    self.glue
                        .iter()
                        .map(|g| format!("{} {}", g.path, g.lines))
                        .collect::<Vec<_>>()
                        .join(", "),
                    l.path,
                    l.lines
                ),
            }
        );
        let _ = writeln!(
            s,
            "import cycles through glue: {}",
            if self.cycles.is_empty() {
                "none".to_owned()
            } else {
                self.cycles
                    .iter()
                    .map(|c| cycle_text(c))
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        );
        s
    }

    /// Every limit of `limits` the surface exceeds, naming the offender.
    #[must_use]
    pub fn violations(&self, limits: &SurfaceLimits) -> Vec<String> {
        let mut out = Vec::new();
        let by_patch = |pick: fn(&PatchSurface) -> usize| {
            self.patches
                .iter()
                .filter(|p| pick(p) > 0)
                .map(|p| format!("{} {}", p.id, pick(p)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if let Some(max) = limits.max_added_lines_in_upstream_files
            && self.added() > max
        {
            out.push(format!(
                "the series adds {} lines to upstream files, over the limit of {max} ({})",
                self.added(),
                by_patch(|p| p.added)
            ));
        }
        if let Some(max) = limits.max_removed_lines_in_upstream_files
            && self.removed() > max
        {
            out.push(format!(
                "the series removes {} lines from upstream files, over the limit of {max} ({})",
                self.removed(),
                by_patch(|p| p.removed)
            ));
        }
        if let Some(max) = limits.max_glue_module_lines {
            for g in self.glue.iter().filter(|g| g.lines > max) {
                out.push(format!(
                    "glue module {} has {} lines, over the limit of {max}",
                    g.path, g.lines
                ));
            }
        }
        if limits.forbid_glue_import_cycles {
            for c in &self.cycles {
                out.push(format!(
                    "import cycle through a glue module: {}",
                    cycle_text(c)
                ));
            }
        }
        out
    }
}

fn cycle_text(cycle: &[String]) -> String {
    cycle.join(" → ")
}

fn line_count(text: &str) -> usize {
    text.lines().count()
}

/// Measures the surface of `patches` (id and parsed file, in order).
/// `in_baseline` says whether a repo-relative file exists in the baseline;
/// `patched` reads a file of the fully patched tree.
///
/// # Errors
/// Whatever the readers return.
pub fn measure<E>(
    registry: &Registry,
    patches: &[(&str, &ParsedPatch)],
    in_baseline: &mut dyn FnMut(&str) -> Result<bool, E>,
    patched: &mut dyn FnMut(&str) -> Result<Option<String>, E>,
) -> Result<Surface, E> {
    let crate_dir = registry.upstream.path.as_str();
    let crate_prefix = format!("{crate_dir}/");
    let mut surface = Surface::default();
    let mut created: BTreeSet<String> = BTreeSet::new();
    for (id, parsed) in patches {
        let mut added = 0;
        let mut removed = 0;
        for file in &parsed.files {
            if in_baseline(&file.path)? {
                for line in file.hunks.iter().flat_map(|h| &h.lines) {
                    match line {
                        HunkLine::Insert(_) => added += 1,
                        HunkLine::Delete(_) => removed += 1,
                        HunkLine::Context(_) => {}
                    }
                }
            } else if file.path.starts_with(&crate_prefix) {
                created.insert(file.path.clone());
            }
        }
        surface.patches.push(PatchSurface {
            id: (*id).to_owned(),
            added,
            removed,
        });
    }
    let mut glue_modules = BTreeSet::new();
    for path in created {
        let Some(text) = patched(&path)? else {
            continue;
        };
        let file = NewFile {
            lines: line_count(&text),
            path: path.clone(),
        };
        if path.ends_with(".rs") {
            glue_modules.insert(path);
            surface.glue.push(file);
        } else {
            surface.other_new.push(file);
        }
    }
    if !glue_modules.is_empty() {
        let graph = modgraph::build(crate_dir, patched)?;
        let glue_names: BTreeSet<String> = graph
            .files
            .iter()
            .filter(|(_, file)| glue_modules.contains(*file))
            .map(|(module, _)| module.clone())
            .collect();
        surface.cycles = graph
            .cycles_through(&glue_names)
            .into_iter()
            .map(|c| {
                c.into_iter()
                    .map(|m| {
                        if glue_names.contains(&m) {
                            format!("{m} (glue)")
                        } else {
                            m
                        }
                    })
                    .collect()
            })
            .collect();
        surface.unreadable = graph.unreadable;
    }
    Ok(surface)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::patchfile;

    const REGISTRY: &str = r#"{
      "format_version": 1,
      "upstream": {"repository": "o/r", "crate": "c", "path": "c", "version": "1",
                   "commit": "x", "tree": "0000000000000000000000000000000000000000"},
      "workspace": {"support_paths": [], "tests_path": "tests", "tests_package": "t"},
      "patches": []
    }"#;

    const PATCH: &str = "\
diff --git a/c/src/lib.rs b/c/src/lib.rs
--- a/c/src/lib.rs
+++ b/c/src/lib.rs
@@ -1,2 +1,3 @@
 pub mod pool;
-// old
+pub mod resume;
+// new
diff --git a/c/src/resume.rs b/c/src/resume.rs
new file mode 100644
--- /dev/null
+++ b/c/src/resume.rs
@@ -0,0 +1,2 @@
+use crate::pool::open;
+pub fn plan() { open(); }
";

    #[test]
    fn counts_upstream_lines_glue_and_cycles_and_enforces_limits() {
        let registry = Registry::parse(REGISTRY, std::path::Path::new("patches.json")).unwrap();
        let parsed = patchfile::parse(PATCH).unwrap();
        let patched: BTreeMap<&str, &str> = BTreeMap::from([
            ("c/src/lib.rs", "pub mod pool;\npub mod resume;\n// new\n"),
            (
                "c/src/pool.rs",
                "pub fn open() {}\npub fn run() { crate::resume::plan(); }\n",
            ),
            (
                "c/src/resume.rs",
                "use crate::pool::open;\npub fn plan() { open(); }\n",
            ),
        ]);
        let surface = measure::<()>(
            &registry,
            &[("p", &parsed)],
            &mut |p: &str| Ok(p != "c/src/resume.rs"),
            &mut |p: &str| Ok(patched.get(p).map(|t| (*t).to_owned())),
        )
        .unwrap();
        assert_eq!((surface.added(), surface.removed()), (2, 1));
        assert_eq!(
            surface.glue,
            vec![NewFile {
                path: "c/src/resume.rs".into(),
                lines: 2
            }]
        );
        assert_eq!(
            surface.cycles,
            vec![vec![
                "resume (glue)".to_owned(),
                "pool".into(),
                "resume (glue)".into()
            ]]
        );
        let limits = SurfaceLimits {
            max_added_lines_in_upstream_files: Some(1),
            max_removed_lines_in_upstream_files: Some(1),
            max_glue_module_lines: Some(1),
            forbid_glue_import_cycles: true,
        };
        assert_eq!(
            surface.violations(&limits),
            vec![
                "the series adds 2 lines to upstream files, over the limit of 1 (p 2)",
                "glue module c/src/resume.rs has 2 lines, over the limit of 1",
                "import cycle through a glue module: resume (glue) → pool → resume (glue)",
            ]
        );
        let generous = SurfaceLimits {
            max_added_lines_in_upstream_files: Some(2),
            max_removed_lines_in_upstream_files: Some(1),
            max_glue_module_lines: Some(2),
            forbid_glue_import_cycles: false,
        };
        assert!(surface.violations(&generous).is_empty());
    }
}
