//! The series' surface: what of upstream it touches, which is what can
//! conflict on every sync.
//!
//! * per patch, every hunk it makes in a file that exists in the baseline
//!   (an "upstream file") and the upstream items that hunk touches (see
//!   [`crate::enclosing`]), with the lines it adds and removes;
//! * the new files the series adds inside the patched crate, with their line
//!   counts in the fully patched tree and the patches that edit them: new
//!   `.rs` files are *glue modules*, and each belongs to one patch. A later
//!   patch may add lines to a *switch list* the registry declares in a glue
//!   module (`surface.switch_lists`: the item holding it) without owning the
//!   module, as long as every hunk it makes there only adds lines inside that
//!   item: such a patch is listed apart, as switching something on;
//! * import cycles between baseline modules and glue modules in the fully
//!   patched crate (see [`crate::modgraph`]).
//!
//! Measuring is pure: the caller passes readers for the baseline, for each
//! file as each patch finds it and for the fully patched tree, so `render`
//! (in process, over the baseline directory) and `refresh` (over the work
//! repo's commits) produce the same figures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::enclosing;
use crate::modgraph;
use crate::patchfile::{Hunk, HunkLine, ParsedPatch};
use crate::registry::{Registry, SurfaceLimits};

/// One hunk a patch makes in an upstream file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkSurface {
    /// Repo-relative path of the upstream file.
    pub path: String,
    /// The `@@` header.
    pub header: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The upstream items the hunk touches (see [`crate::enclosing`]).
    pub items: Vec<String>,
}

/// One patch's hunks in upstream files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchSurface {
    /// Patch id.
    pub id: String,
    /// Every hunk in an upstream file, in patch order.
    pub hunks: Vec<HunkSurface>,
}

impl PatchSurface {
    /// Lines added to upstream files.
    #[must_use]
    pub fn added(&self) -> usize {
        self.hunks.iter().map(|h| h.added).sum()
    }

    /// Lines removed from upstream files.
    #[must_use]
    pub fn removed(&self) -> usize {
        self.hunks.iter().map(|h| h.removed).sum()
    }

    /// The items the patch touches, grouped by file (named by its last path
    /// component), in patch order and deduplicated; a file without items
    /// (not Rust or TOML) has an empty list.
    #[must_use]
    pub fn touched(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for h in &self.hunks {
            let file = h.path.rsplit('/').next().unwrap_or(&h.path).to_owned();
            let at = match out.iter().position(|(f, _)| *f == file) {
                Some(at) => at,
                None => {
                    out.push((file, Vec::new()));
                    out.len() - 1
                }
            };
            for item in &h.items {
                if !out[at].1.contains(item) {
                    out[at].1.push(item.clone());
                }
            }
        }
        out
    }

    /// [`PatchSurface::touched`] as text: `pool.rs: Pool::ensure_session, impl Pool; Cargo.toml: [dependencies]`.
    #[must_use]
    pub fn touched_text(&self, code: bool) -> String {
        let quote = |s: &str| {
            if code && s != enclosing::MODULE_LEVEL {
                format!("`{s}`")
            } else {
                s.to_owned()
            }
        };
        self.touched()
            .iter()
            .map(|(file, items)| {
                if items.is_empty() {
                    quote(file)
                } else {
                    format!(
                        "{file}: {}",
                        items
                            .iter()
                            .map(|i| quote(i))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A file the series creates inside the patched crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// Repo-relative path.
    pub path: String,
    /// Lines in the fully patched tree.
    pub lines: usize,
    /// The patches whose diffs touch it, in series order (the first creates
    /// it). More than one breaks the ownership rule.
    pub patches: Vec<String>,
    /// Later patches that only add lines to its declared switch list, in
    /// series order (they do not own it).
    pub switches: Vec<String>,
}

impl NewFile {
    /// Whether more than one patch edits the file.
    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.patches.len() > 1
    }
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
        self.patches.iter().map(PatchSurface::added).sum()
    }

    /// Lines the whole series removes from upstream files.
    #[must_use]
    pub fn removed(&self) -> usize {
        self.patches.iter().map(PatchSurface::removed).sum()
    }

    /// Hunks the whole series makes in upstream files.
    #[must_use]
    pub fn hunks(&self) -> usize {
        self.patches.iter().map(|p| p.hunks.len()).sum()
    }

    /// New files inside the crate that more than one patch edits.
    pub fn shared_new_files(&self) -> impl Iterator<Item = &NewFile> {
        self.glue
            .iter()
            .chain(&self.other_new)
            .filter(|f| f.is_shared())
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
            "What can conflict on the next sync: the hunks the series makes in files that exist in the baseline, \
             and the upstream items they touch. {} hunk(s) add / remove +{}{} / -{}{} lines.",
            self.hunks(),
            self.added(),
            limit(limits.and_then(|l| l.max_added_lines_in_upstream_files)),
            self.removed(),
            limit(limits.and_then(|l| l.max_removed_lines_in_upstream_files)),
        );
        m.push('\n');
        if !self.patches.is_empty() {
            let _ = writeln!(m, "| patch | hunks | + | - | upstream items touched |");
            let _ = writeln!(m, "|-------|------:|--:|--:|------------------------|");
            for p in &self.patches {
                let _ = writeln!(
                    m,
                    "| `{}` | {} | {} | {} | {} |",
                    p.id,
                    p.hunks.len(),
                    p.added(),
                    p.removed(),
                    if p.hunks.is_empty() {
                        "—".to_owned()
                    } else {
                        p.touched_text(true)
                    }
                );
            }
            m.push('\n');
            let _ = writeln!(m, "### Hunks in upstream files");
            for p in self.patches.iter().filter(|p| !p.hunks.is_empty()) {
                m.push('\n');
                let _ = writeln!(m, "`{}`:", p.id);
                m.push('\n');
                let _ = writeln!(m, "| file | hunk | + | - | touches |");
                let _ = writeln!(m, "|------|------|--:|--:|---------|");
                for h in &p.hunks {
                    let _ = writeln!(
                        m,
                        "| `{}` | `{}` | {} | {} | {} |",
                        h.path,
                        h.header,
                        h.added,
                        h.removed,
                        code_list(&h.items)
                    );
                }
            }
            m.push('\n');
        }
        if self.glue.is_empty() {
            let _ = writeln!(m, "Glue modules (new `.rs` files inside the crate): none.");
        } else {
            let _ = writeln!(
                m,
                "Glue modules (new `.rs` files inside the crate; each belongs to the one patch that edits it): {}.",
                self.glue.len()
            );
            m.push('\n');
            new_file_table(&mut m, "glue module", &self.glue);
        }
        if !self.other_new.is_empty() {
            m.push('\n');
            let _ = writeln!(m, "Other new files inside the crate:");
            m.push('\n');
            new_file_table(&mut m, "file", &self.other_new);
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
                    .map(|p| format!("{} +{}/-{}", p.id, p.added(), p.removed()))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        for p in &self.patches {
            let _ = writeln!(
                s,
                "  {}: {} hunk(s){}{}",
                p.id,
                p.hunks.len(),
                if p.hunks.is_empty() { "" } else { " in " },
                p.touched_text(false)
            );
        }
        if self.glue.is_empty() {
            let _ = writeln!(s, "glue modules: none");
        } else {
            let _ = writeln!(s, "glue modules: {}", self.glue.len());
            for g in &self.glue {
                let _ = writeln!(
                    s,
                    "  {} {} lines, edited by {}{}{}",
                    g.path,
                    g.lines,
                    g.patches.join(", "),
                    if g.is_shared() {
                        " (more than one patch)"
                    } else {
                        ""
                    },
                    switches_text(&g.switches, false)
                );
            }
        }
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
                by_patch(PatchSurface::added)
            ));
        }
        if let Some(max) = limits.max_removed_lines_in_upstream_files
            && self.removed() > max
        {
            out.push(format!(
                "the series removes {} lines from upstream files, over the limit of {max} ({})",
                self.removed(),
                by_patch(PatchSurface::removed)
            ));
        }
        out
    }

    /// Every import cycle through a glue module, as a problem (when
    /// `limits` forbids them).
    #[must_use]
    pub fn cycle_violations(&self, limits: &SurfaceLimits) -> Vec<String> {
        if !limits.forbid_glue_import_cycles {
            return Vec::new();
        }
        self.cycles
            .iter()
            .map(|c| format!("import cycle through a glue module: {}", cycle_text(c)))
            .collect()
    }

    /// Every new file inside the crate that more than one patch edits, as a
    /// problem: a glue module belongs to one patch, so a rebase of one patch
    /// never has to be replayed through another's edits of it.
    #[must_use]
    pub fn ownership_violations(&self) -> Vec<String> {
        self.shared_new_files()
            .map(|f| {
                format!(
                    "{} {} is edited by {} patches: {} (created by {}); a new file belongs to the one patch that creates it: \
                     move the later edits into that patch, or the shared code into a fork crate",
                    if f.path.ends_with(".rs") {
                        "glue module"
                    } else {
                        "new file"
                    },
                    f.path,
                    f.patches.len(),
                    f.patches.join(", "),
                    f.patches[0]
                )
            })
            .collect()
    }
}

fn code_list(items: &[String]) -> String {
    if items.is_empty() {
        "—".to_owned()
    } else {
        items
            .iter()
            .map(|i| {
                if i == enclosing::MODULE_LEVEL {
                    i.clone()
                } else {
                    format!("`{i}`")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn new_file_table(m: &mut String, what: &str, files: &[NewFile]) {
    let _ = writeln!(m, "| {what} | lines | edited by |");
    let _ = writeln!(m, "|---|------:|-----------|");
    for f in files {
        let _ = writeln!(
            m,
            "| `{}` | {} | {}{}{} |",
            f.path,
            f.lines,
            code_list(&f.patches),
            if f.is_shared() {
                " (**more than one patch**)"
            } else {
                ""
            },
            switches_text(&f.switches, true)
        );
    }
}

/// The patches that add lines to a file's switch list, after its owner.
fn switches_text(switches: &[String], code: bool) -> String {
    if switches.is_empty() {
        return String::new();
    }
    let list = if code {
        code_list(switches)
    } else {
        switches.join(", ")
    };
    format!("; its switch list: {list}")
}

/// Whether every hunk of a patch in a glue module only adds lines inside
/// `item` (the module's switch list), `text` being the module as the patch
/// finds it.
fn adds_only_to(item: &str, path: &str, text: &str, hunks: &[Hunk]) -> bool {
    !hunks.is_empty()
        && hunks.iter().all(|h| {
            let inserts = h.lines.iter().any(|l| matches!(l, HunkLine::Insert(_)));
            let deletes = h.lines.iter().any(|l| matches!(l, HunkLine::Delete(_)));
            inserts && !deletes && enclosing::touched_items(path, text, h) == [item]
        })
}

fn cycle_text(cycle: &[String]) -> String {
    cycle.join(" → ")
}

fn line_count(text: &str) -> usize {
    text.lines().count()
}

/// Reads a file of one tree (`None`: it does not exist there).
pub type FileReader<'r, E> = dyn FnMut(&str) -> Result<Option<String>, E> + 'r;

/// Reads a file as patch `i` finds it.
pub type PrefixReader<'r, E> = dyn FnMut(usize, &str) -> Result<Option<String>, E> + 'r;

/// Readers of the trees a surface is measured on.
pub struct Trees<'r, E> {
    /// Whether a repo-relative file exists in the baseline.
    pub in_baseline: &'r mut dyn FnMut(&str) -> Result<bool, E>,
    /// A file as patch `i` (0-based, in series order) finds it: the
    /// baseline plus the patches before it.
    pub before: &'r mut PrefixReader<'r, E>,
    /// A file of the fully patched tree.
    pub patched: &'r mut FileReader<'r, E>,
}

/// Measures the surface of `patches` (id and parsed file, in order).
///
/// # Errors
/// Whatever the readers return.
pub fn measure<E>(
    registry: &Registry,
    patches: &[(&str, &ParsedPatch)],
    trees: Trees<'_, E>,
) -> Result<Surface, E> {
    let crate_dir = registry.upstream.path.as_str();
    let crate_prefix = format!("{crate_dir}/");
    let mut surface = Surface::default();
    let mut created: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut switches: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let switch_list = |path: &str| {
        registry
            .surface
            .as_ref()
            .and_then(|limits| limits.switch_list(path))
    };
    for (index, (id, parsed)) in patches.iter().enumerate() {
        let mut hunks = Vec::new();
        for file in &parsed.files {
            if (trees.in_baseline)(&file.path)? {
                let before = (trees.before)(index, &file.path)?;
                for h in &file.hunks {
                    let added = h
                        .lines
                        .iter()
                        .filter(|l| matches!(l, HunkLine::Insert(_)))
                        .count();
                    let removed = h
                        .lines
                        .iter()
                        .filter(|l| matches!(l, HunkLine::Delete(_)))
                        .count();
                    let items = before.as_deref().map_or_else(Vec::new, |text| {
                        enclosing::touched_items(&file.path, text, h)
                    });
                    hunks.push(HunkSurface {
                        path: file.path.clone(),
                        header: h.header(),
                        added,
                        removed,
                        items,
                    });
                }
            } else if file.path.starts_with(&crate_prefix) {
                let switched = match switch_list(&file.path) {
                    Some(item) if created.contains_key(&file.path) => {
                        (trees.before)(index, &file.path)?
                            .is_some_and(|text| adds_only_to(item, &file.path, &text, &file.hunks))
                    }
                    _ => false,
                };
                let editors = if switched {
                    switches.entry(file.path.clone()).or_default()
                } else {
                    created.entry(file.path.clone()).or_default()
                };
                if !editors.iter().any(|e| e == id) {
                    editors.push((*id).to_owned());
                }
            }
        }
        surface.patches.push(PatchSurface {
            id: (*id).to_owned(),
            hunks,
        });
    }
    let mut glue_modules = BTreeSet::new();
    for (path, editors) in created {
        let Some(text) = (trees.patched)(&path)? else {
            continue;
        };
        let file = NewFile {
            lines: line_count(&text),
            switches: switches.remove(&path).unwrap_or_default(),
            path: path.clone(),
            patches: editors,
        };
        if path.ends_with(".rs") {
            glue_modules.insert(path);
            surface.glue.push(file);
        } else {
            surface.other_new.push(file);
        }
    }
    if !glue_modules.is_empty() {
        let graph = modgraph::build(crate_dir, trees.patched)?;
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

    /// A second patch that edits the first one's glue module and a method
    /// of an upstream file.
    const SECOND: &str = "\
diff --git a/c/src/pool.rs b/c/src/pool.rs
--- a/c/src/pool.rs
+++ b/c/src/pool.rs
@@ -1,2 +1,2 @@
-pub fn open() {}
+pub fn open() { let _ = 1; }
 pub fn run() { crate::resume::plan(); }
diff --git a/c/src/resume.rs b/c/src/resume.rs
--- a/c/src/resume.rs
+++ b/c/src/resume.rs
@@ -1,2 +1,3 @@
 use crate::pool::open;
 pub fn plan() { open(); }
+pub fn again() {}
";

    fn measure_two(patches: &[(&str, &ParsedPatch)]) -> Surface {
        let registry = Registry::parse(REGISTRY, std::path::Path::new("patches.json")).unwrap();
        let baseline: BTreeMap<&str, &str> = BTreeMap::from([
            ("c/src/lib.rs", "pub mod pool;\n// old\n"),
            (
                "c/src/pool.rs",
                "pub fn open() {}\npub fn run() { crate::resume::plan(); }\n",
            ),
        ]);
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
        measure::<()>(
            &registry,
            patches,
            Trees {
                in_baseline: &mut |p: &str| Ok(baseline.contains_key(p)),
                before: &mut |_, p: &str| Ok(baseline.get(p).map(|t| (*t).to_owned())),
                patched: &mut |p: &str| Ok(patched.get(p).map(|t| (*t).to_owned())),
            },
        )
        .unwrap()
    }

    #[test]
    fn counts_hunks_items_glue_and_cycles_and_enforces_limits() {
        let parsed = patchfile::parse(PATCH).unwrap();
        let surface = measure_two(&[("p", &parsed)]);
        assert_eq!((surface.added(), surface.removed()), (2, 1));
        assert_eq!(
            surface.patches[0].hunks,
            vec![HunkSurface {
                path: "c/src/lib.rs".into(),
                header: "@@ -1,2 +1,3 @@".into(),
                added: 2,
                removed: 1,
                items: vec![enclosing::MODULE_LEVEL.into()],
            }]
        );
        assert_eq!(
            surface.glue,
            vec![NewFile {
                path: "c/src/resume.rs".into(),
                lines: 2,
                patches: vec!["p".into()],
                switches: Vec::new(),
            }]
        );
        assert!(surface.ownership_violations().is_empty());
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
            max_glue_module_lines: None,
            forbid_glue_import_cycles: true,
            switch_lists: Vec::new(),
        };
        assert_eq!(
            surface.violations(&limits),
            vec!["the series adds 2 lines to upstream files, over the limit of 1 (p 2)"]
        );
        assert_eq!(
            surface.cycle_violations(&limits),
            vec!["import cycle through a glue module: resume (glue) → pool → resume (glue)"]
        );
        let generous = SurfaceLimits {
            max_added_lines_in_upstream_files: Some(2),
            max_removed_lines_in_upstream_files: Some(1),
            max_glue_module_lines: None,
            forbid_glue_import_cycles: false,
            switch_lists: Vec::new(),
        };
        assert!(surface.violations(&generous).is_empty());
        assert!(surface.cycle_violations(&generous).is_empty());
    }

    #[test]
    fn a_glue_module_edited_by_two_patches_is_a_violation_naming_both() {
        let first = patchfile::parse(PATCH).unwrap();
        let second = patchfile::parse(SECOND).unwrap();
        let surface = measure_two(&[("p", &first), ("q", &second)]);
        assert_eq!(surface.glue[0].patches, ["p", "q"]);
        assert_eq!(surface.patches[1].hunks[0].items, ["open"]);
        assert_eq!(
            surface.patches[1].touched(),
            [("pool.rs".to_owned(), vec!["open".to_owned()])]
        );
        assert_eq!(surface.patches[1].touched_text(true), "pool.rs: `open`");
        let problems = surface.ownership_violations();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "glue module c/src/resume.rs is edited by 2 patches: p, q (created by p)"
            ),
            "{problems:?}"
        );
    }

    /// A glue module with a switch list (`const ON`), created by `p`.
    const SWITCHBOARD: &str = "\
diff --git a/c/src/on.rs b/c/src/on.rs
new file mode 100644
--- /dev/null
+++ b/c/src/on.rs
@@ -0,0 +1,5 @@
+pub const ON: &[&str] = &[
+    // one line per patch
+];
+
+pub fn on() -> usize { ON.len() }
";

    /// Measures `first` (which creates `c/src/on.rs`) then `second`, with
    /// `const ON` declared as its switch list or not.
    fn measure_switch(second: &str, declared: bool) -> Surface {
        let registry = if declared {
            REGISTRY.replace(
                r#""patches": []"#,
                r#""surface": {"switch_lists": [{"path": "c/src/on.rs", "item": "const ON"}]},
                   "patches": []"#,
            )
        } else {
            REGISTRY.to_owned()
        };
        let registry = Registry::parse(&registry, std::path::Path::new("patches.json")).unwrap();
        let created = "pub const ON: &[&str] = &[\n    // one line per patch\n];\n\npub fn on() -> usize { ON.len() }\n";
        let first = patchfile::parse(SWITCHBOARD).unwrap();
        let second = patchfile::parse(second).unwrap();
        measure::<()>(
            &registry,
            &[("p", &first), ("q", &second)],
            Trees {
                in_baseline: &mut |_| Ok(false),
                before: &mut |i, p: &str| {
                    Ok((i > 0 && p == "c/src/on.rs").then(|| created.to_owned()))
                },
                patched: &mut |p: &str| Ok((p == "c/src/on.rs").then(|| created.to_owned())),
            },
        )
        .unwrap()
    }

    #[test]
    fn a_later_patch_may_add_lines_to_a_declared_switch_list_and_nothing_else() {
        let switch_line = "\
diff --git a/c/src/on.rs b/c/src/on.rs
--- a/c/src/on.rs
+++ b/c/src/on.rs
@@ -1,3 +1,4 @@
 pub const ON: &[&str] = &[
     // one line per patch
+    \"q\",
 ];
";
        let surface = measure_switch(switch_line, true);
        assert_eq!(surface.glue[0].patches, ["p"]);
        assert_eq!(surface.glue[0].switches, ["q"]);
        assert!(surface.ownership_violations().is_empty());
        assert!(
            surface
                .markdown(None)
                .contains("| `c/src/on.rs` | 5 | `p`; its switch list: `q` |")
        );

        // Not declared: the same line is an edit of `p`'s module.
        let surface = measure_switch(switch_line, false);
        assert_eq!(surface.glue[0].patches, ["p", "q"]);
        assert_eq!(surface.ownership_violations().len(), 1);

        // Declared, but a line outside the list, or a line of it taken away, is an edit.
        let outside = "\
diff --git a/c/src/on.rs b/c/src/on.rs
--- a/c/src/on.rs
+++ b/c/src/on.rs
@@ -3,3 +3,4 @@
 ];
 
 pub fn on() -> usize { ON.len() }
+pub fn off() {}
";
        let removed = "\
diff --git a/c/src/on.rs b/c/src/on.rs
--- a/c/src/on.rs
+++ b/c/src/on.rs
@@ -1,3 +1,3 @@
 pub const ON: &[&str] = &[
-    // one line per patch
+    \"q\",
 ];
";
        for edit in [outside, removed] {
            let surface = measure_switch(edit, true);
            assert_eq!(surface.glue[0].patches, ["p", "q"], "{edit}");
            assert!(surface.glue[0].switches.is_empty());
            assert_eq!(surface.ownership_violations().len(), 1);
        }
    }
}
