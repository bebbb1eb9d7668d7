//! In-process, strict patch application (in the spirit of
//! ungoogled-chromium's validator): every context and removed line of a hunk
//! must match the file *at the hunk's stated line*. A hunk that only matches
//! elsewhere is reported with its offset; one that matches nowhere is missing.
//!
//! `diffy`'s own apply searches offsets silently, so it is not used here;
//! only its parser is (see [`crate::patchfile`]).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::patchfile::{FileKind, Hunk, ParsedPatch};

/// How a hunk fits a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HunkFit {
    /// Matches at the stated line.
    Exact,
    /// Matches only this many lines away from the stated line.
    Offset(i64),
    /// Matches nowhere.
    Missing,
}

/// The fit of one hunk of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkReport {
    /// File path.
    pub path: String,
    /// 1-based hunk number within the file.
    pub number: usize,
    /// The `@@` header.
    pub header: String,
    /// How it fits.
    pub fit: HunkFit,
}

/// The outcome of applying one patch to an [`Overlay`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Every hunk's fit.
    pub hunks: Vec<HunkReport>,
    /// File-level problems (missing file, file already exists, …).
    pub file_problems: Vec<String>,
    /// Whether the overlay was changed.
    pub applied: bool,
}

impl ApplyReport {
    /// True when every hunk matched at its stated line and no file problem occurred.
    #[must_use]
    pub fn is_exact(&self) -> bool {
        self.file_problems.is_empty() && self.hunks.iter().all(|h| h.fit == HunkFit::Exact)
    }

    /// Human-readable problems, one per hunk or file.
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.file_problems.clone();
        for h in &self.hunks {
            match h.fit {
                HunkFit::Exact => {}
                HunkFit::Offset(d) => out.push(format!(
                    "{} hunk #{} {}: context matches only at offset {d:+} (exact position required; refresh the patch)",
                    h.path, h.number, h.header
                )),
                HunkFit::Missing => out.push(format!(
                    "{} hunk #{} {}: removed/context lines not found",
                    h.path, h.number, h.header
                )),
            }
        }
        out
    }
}

/// Splits text into lines that keep their `\n`.
#[must_use]
pub fn split_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

fn matches_at(lines: &[&str], old: &[&str], at: usize) -> bool {
    at + old.len() <= lines.len() && lines[at..at + old.len()] == *old
}

/// Where `hunk` fits in `lines`: exactly at its stated position, at the
/// nearest offset, or nowhere.
#[must_use]
pub fn locate(lines: &[&str], hunk: &Hunk) -> (HunkFit, Option<usize>) {
    let old = hunk.old_lines();
    let stated = hunk.stated_index();
    if old.is_empty() {
        return if stated <= lines.len() {
            (HunkFit::Exact, Some(stated))
        } else {
            (HunkFit::Missing, None)
        };
    }
    if matches_at(lines, &old, stated) {
        return (HunkFit::Exact, Some(stated));
    }
    for distance in 1..=lines.len().max(stated) {
        if let Some(before) = stated.checked_sub(distance)
            && matches_at(lines, &old, before)
        {
            return (HunkFit::Offset(-(distance as i64)), Some(before));
        }
        if matches_at(lines, &old, stated + distance) {
            return (HunkFit::Offset(distance as i64), Some(stated + distance));
        }
    }
    (HunkFit::Missing, None)
}

/// Whether a patch must fit exactly or may be shifted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Every hunk at its stated line.
    Exact,
    /// Hunks may be shifted (never fuzzed).
    AllowOffset,
}

/// Reads a file of the base tree; `None` when it does not exist.
pub type BaseReader<'a> = Box<dyn Fn(&str) -> Result<Option<String>> + 'a>;

/// A virtual file system: a base tree (read lazily) plus the files the
/// series has changed so far.
pub struct Overlay<'a> {
    base: BaseReader<'a>,
    changed: BTreeMap<String, Option<String>>,
}

impl<'a> Overlay<'a> {
    /// An overlay over `base`.
    #[must_use]
    pub fn new(base: BaseReader<'a>) -> Self {
        Overlay {
            base,
            changed: BTreeMap::new(),
        }
    }

    /// The current content of `path`.
    ///
    /// # Errors
    /// When the base cannot be read.
    pub fn read(&self, path: &str) -> Result<Option<String>> {
        match self.changed.get(path) {
            Some(content) => Ok(content.clone()),
            None => (self.base)(path),
        }
    }

    /// Paths whose content now differs from the base, sorted.
    ///
    /// # Errors
    /// When the base cannot be read.
    pub fn differing_paths(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (path, content) in &self.changed {
            if (self.base)(path)? != *content {
                out.push(path.clone());
            }
        }
        Ok(out)
    }

    /// Applies `patch` if every hunk fits under `strictness`; otherwise leaves
    /// the overlay unchanged. Either way reports every hunk's fit.
    ///
    /// # Errors
    /// When the base cannot be read.
    pub fn apply(&mut self, patch: &ParsedPatch, strictness: Strictness) -> Result<ApplyReport> {
        let mut report = ApplyReport::default();
        let mut results: Vec<(String, Option<String>)> = Vec::new();
        let mut ok = true;
        for file in &patch.files {
            let current = match results.iter().rev().find(|(p, _)| *p == file.path) {
                Some((_, c)) => c.clone(),
                None => self.read(&file.path)?,
            };
            match (file.kind, &current) {
                (FileKind::Create, Some(_)) => {
                    report.file_problems.push(format!(
                        "{}: is created by the patch but already exists",
                        file.path
                    ));
                    ok = false;
                    continue;
                }
                (FileKind::Modify | FileKind::Delete, None) => {
                    report
                        .file_problems
                        .push(format!("{}: does not exist", file.path));
                    ok = false;
                    continue;
                }
                _ => {}
            }
            let text = current.unwrap_or_default();
            let lines = split_lines(&text);
            let mut output = String::new();
            let mut cursor = 0usize;
            let mut file_ok = true;
            for (i, hunk) in file.hunks.iter().enumerate() {
                let (fit, at) = locate(&lines, hunk);
                report.hunks.push(HunkReport {
                    path: file.path.clone(),
                    number: i + 1,
                    header: hunk.header(),
                    fit,
                });
                let accepted = match fit {
                    HunkFit::Exact => true,
                    HunkFit::Offset(_) => strictness == Strictness::AllowOffset,
                    HunkFit::Missing => false,
                };
                match at {
                    Some(at) if accepted && at >= cursor => {
                        output.extend(lines[cursor..at].iter().copied());
                        output.extend(hunk.new_lines());
                        cursor = at + hunk.old_lines().len();
                    }
                    _ => file_ok = false,
                }
            }
            if !file_ok {
                ok = false;
                continue;
            }
            output.extend(lines[cursor..].iter().copied());
            let result = if file.kind == FileKind::Delete {
                if !output.is_empty() {
                    report.file_problems.push(format!(
                        "{}: is deleted by the patch but has content the patch does not remove",
                        file.path
                    ));
                    ok = false;
                    continue;
                }
                None
            } else {
                Some(output)
            };
            results.push((file.path.clone(), result));
        }
        if ok {
            for (path, content) in results {
                self.changed.insert(path, content);
            }
            report.applied = true;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patchfile::parse;

    fn patch(old_start: usize) -> ParsedPatch {
        let text = format!(
            "diff --git a/f.rs b/f.rs\n--- a/f.rs\n+++ b/f.rs\n@@ -{old_start},3 +{old_start},3 @@\n a\n-b\n+B\n c\n"
        );
        parse(&text).unwrap()
    }

    fn overlay(content: &'static str) -> Overlay<'static> {
        Overlay::new(Box::new(move |p: &str| {
            Ok((p == "f.rs").then(|| content.to_owned()))
        }))
    }

    #[test]
    fn exact_position_applies() {
        let mut o = overlay("x\na\nb\nc\n");
        let r = o.apply(&patch(2), Strictness::Exact).unwrap();
        assert!(r.is_exact() && r.applied);
        assert_eq!(o.read("f.rs").unwrap().unwrap(), "x\na\nB\nc\n");
        assert_eq!(o.differing_paths().unwrap(), vec!["f.rs"]);
    }

    #[test]
    fn offset_is_reported_and_refused_when_strict() {
        let mut o = overlay("x\ny\na\nb\nc\n");
        let r = o.apply(&patch(2), Strictness::Exact).unwrap();
        assert!(!r.applied);
        assert_eq!(r.hunks[0].fit, HunkFit::Offset(1));
        assert!(r.problems()[0].contains("offset +1"), "{:?}", r.problems());
        let r = o.apply(&patch(2), Strictness::AllowOffset).unwrap();
        assert!(r.applied && !r.is_exact());
        assert_eq!(o.read("f.rs").unwrap().unwrap(), "x\ny\na\nB\nc\n");
    }

    #[test]
    fn missing_context_fails() {
        let mut o = overlay("a\nq\nc\n");
        let r = o.apply(&patch(1), Strictness::AllowOffset).unwrap();
        assert!(!r.applied);
        assert_eq!(r.hunks[0].fit, HunkFit::Missing);
    }

    #[test]
    fn reverse_detects_applied_patch() {
        let o = overlay("a\nB\nc\n");
        let mut o = o;
        let r = o.apply(&patch(1).reversed(), Strictness::Exact).unwrap();
        assert!(r.is_exact());
        assert_eq!(o.read("f.rs").unwrap().unwrap(), "a\nb\nc\n");
    }
}
