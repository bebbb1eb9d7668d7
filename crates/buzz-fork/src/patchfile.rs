//! Patch files: parsing (with `diffy`), the commit message with its DEP-3
//! headers and `Fork-Patch-Id` trailer, and the normalized content snapshot.

use std::fmt::Write as _;

use diffy::patch_set::{FileOperation, ParseOptions, PatchKind, PatchSet};

use crate::registry::{PATCH_ID_TRAILER, PatchEntry, Reason, upstream_url};

/// Directory of the normalized content snapshots.
pub const CONTENT_DIR: &str = "patches/content";

/// Content snapshot path of a patch.
#[must_use]
pub fn content_path(id: &str) -> String {
    format!("{CONTENT_DIR}/{id}.txt")
}

/// What happens to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The file is created.
    Create,
    /// The file is deleted.
    Delete,
    /// The file is modified in place.
    Modify,
}

impl FileKind {
    fn label(self) -> &'static str {
        match self {
            FileKind::Create => "new file",
            FileKind::Delete => "deleted file",
            FileKind::Modify => "modified",
        }
    }
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// Present before and after (text includes its newline, if any).
    Context(String),
    /// Removed.
    Delete(String),
    /// Added.
    Insert(String),
}

/// An owned hunk with its stated positions (1-based, as in `@@` headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// Old start line.
    pub old_start: usize,
    /// Old line count.
    pub old_len: usize,
    /// New start line.
    pub new_start: usize,
    /// New line count.
    pub new_len: usize,
    /// The lines.
    pub lines: Vec<HunkLine>,
}

impl Hunk {
    /// `@@ -a,b +c,d @@`.
    #[must_use]
    pub fn header(&self) -> String {
        format!(
            "@@ -{},{} +{},{} @@",
            self.old_start, self.old_len, self.new_start, self.new_len
        )
    }

    /// The lines the hunk expects in the old file (context and removed).
    #[must_use]
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Delete(s) => Some(s.as_str()),
                HunkLine::Insert(_) => None,
            })
            .collect()
    }

    /// The lines the hunk leaves in the new file (context and added).
    #[must_use]
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Insert(s) => Some(s.as_str()),
                HunkLine::Delete(_) => None,
            })
            .collect()
    }

    /// The 0-based index in the old file where the hunk's old lines start.
    #[must_use]
    pub fn stated_index(&self) -> usize {
        if self.old_len == 0 {
            // An insertion-only hunk names the line *after which* it inserts.
            self.old_start
        } else {
            self.old_start.saturating_sub(1)
        }
    }
}

/// The change to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Repo-relative path (the `a/`/`b/` prefixes stripped).
    pub path: String,
    /// Create, delete or modify.
    pub kind: FileKind,
    /// Hunks in file order.
    pub hunks: Vec<Hunk>,
}

/// A parsed patch file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedPatch {
    /// The e-mail subject (unfolded).
    pub subject: Option<String>,
    /// The commit message body after the subject (up to the `---` line).
    pub body: String,
    /// The file changes, in patch order.
    pub files: Vec<FileChange>,
}

impl ParsedPatch {
    /// Paths the patch touches, sorted.
    #[must_use]
    pub fn paths(&self) -> Vec<String> {
        let mut p: Vec<String> = self.files.iter().map(|f| f.path.clone()).collect();
        p.sort();
        p.dedup();
        p
    }

    /// Added and removed line counts.
    #[must_use]
    pub fn line_counts(&self) -> (usize, usize) {
        let mut added = 0;
        let mut removed = 0;
        for h in self.files.iter().flat_map(|f| &f.hunks) {
            for l in &h.lines {
                match l {
                    HunkLine::Insert(_) => added += 1,
                    HunkLine::Delete(_) => removed += 1,
                    HunkLine::Context(_) => {}
                }
            }
        }
        (added, removed)
    }

    /// The reversed patch (for "is it already applied?" checks).
    #[must_use]
    pub fn reversed(&self) -> ParsedPatch {
        let files = self
            .files
            .iter()
            .map(|f| FileChange {
                path: f.path.clone(),
                kind: match f.kind {
                    FileKind::Create => FileKind::Delete,
                    FileKind::Delete => FileKind::Create,
                    FileKind::Modify => FileKind::Modify,
                },
                hunks: f
                    .hunks
                    .iter()
                    .map(|h| Hunk {
                        old_start: h.new_start,
                        old_len: h.new_len,
                        new_start: h.old_start,
                        new_len: h.old_len,
                        lines: h
                            .lines
                            .iter()
                            .map(|l| match l {
                                HunkLine::Context(s) => HunkLine::Context(s.clone()),
                                HunkLine::Delete(s) => HunkLine::Insert(s.clone()),
                                HunkLine::Insert(s) => HunkLine::Delete(s.clone()),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        ParsedPatch {
            subject: self.subject.clone(),
            body: self.body.clone(),
            files,
        }
    }
}

/// Parses a `git format-patch` file (or a plain git diff).
///
/// # Errors
/// A message naming what could not be parsed; binary changes and renames are
/// not supported (the export never produces them).
pub fn parse(text: &str) -> Result<ParsedPatch, String> {
    let (subject, body) = parse_message(text);
    let mut files = Vec::new();
    for item in PatchSet::parse(text, ParseOptions::gitdiff()) {
        let file = item.map_err(|e| e.to_string())?;
        let op = file.operation().strip_prefix(1);
        let (path, kind) = match op {
            FileOperation::Create(p) => (p.into_owned(), FileKind::Create),
            FileOperation::Delete(p) => (p.into_owned(), FileKind::Delete),
            FileOperation::Modify { original, modified } => {
                if original != modified {
                    return Err(format!(
                        "{original} -> {modified}: renames are not supported"
                    ));
                }
                (modified.into_owned(), FileKind::Modify)
            }
            FileOperation::Rename { from, to } | FileOperation::Copy { from, to } => {
                return Err(format!(
                    "{from} -> {to}: renames and copies are not supported"
                ));
            }
        };
        let patch = match file.patch() {
            PatchKind::Text(p) => p,
            PatchKind::Binary(_) => {
                return Err(format!("{path}: binary changes are not supported"));
            }
        };
        let hunks = patch
            .hunks()
            .iter()
            .map(|h| Hunk {
                old_start: h.old_range().start(),
                old_len: h.old_range().len(),
                new_start: h.new_range().start(),
                new_len: h.new_range().len(),
                lines: h
                    .lines()
                    .iter()
                    .map(|l| match l {
                        diffy::Line::Context(s) => HunkLine::Context((*s).to_owned()),
                        diffy::Line::Delete(s) => HunkLine::Delete((*s).to_owned()),
                        diffy::Line::Insert(s) => HunkLine::Insert((*s).to_owned()),
                    })
                    .collect(),
            })
            .collect();
        files.push(FileChange { path, kind, hunks });
    }
    Ok(ParsedPatch {
        subject,
        body,
        files,
    })
}

/// Splits the e-mail part of a format-patch file into subject and body.
fn parse_message(text: &str) -> (Option<String>, String) {
    if !text.starts_with("From ") {
        return (None, String::new());
    }
    // The message ends at the `---` separator, or (with --no-stat) right
    // before the first `diff --git` line.
    let end = [text.find("\n---\n"), text.find("\ndiff --git ")]
        .into_iter()
        .flatten()
        .min()
        .map_or(text.len(), |pos| pos + 1);
    let head = &text[..end];
    let (headers, body) = head.split_once("\n\n").unwrap_or((head, ""));
    let mut subject: Option<String> = None;
    let mut in_subject = false;
    for line in headers.lines() {
        if let Some(rest) = line.strip_prefix("Subject: ") {
            subject = Some(rest.to_owned());
            in_subject = true;
        } else if in_subject && line.starts_with([' ', '\t']) {
            // RFC 2822 unfolding removes only the line break: the folding
            // whitespace stays (git folds long subjects before a space).
            if let Some(s) = subject.as_mut() {
                s.push_str(line);
            }
        } else {
            in_subject = false;
        }
    }
    (subject, body.to_owned())
}

/// The commit message of a patch: title, DEP-3 headers, then the
/// `Fork-Patch-Id` trailer. Everything is rendered from the registry.
#[must_use]
pub fn render_message(entry: &PatchEntry) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "{}", entry.title.trim());
    m.push('\n');
    m.push_str(&render_dep3(entry));
    m.push('\n');
    let _ = writeln!(m, "{PATCH_ID_TRAILER}: {}", entry.id);
    m
}

/// The DEP-3 header paragraph for an entry.
#[must_use]
pub fn render_dep3(entry: &PatchEntry) -> String {
    let urls: Vec<String> = entry
        .upstream
        .iter()
        .map(|r| upstream_url(r).unwrap_or_else(|_| r.clone()))
        .collect();
    let mut m = String::new();
    let _ = writeln!(m, "Description: {}", entry.title.trim());
    for line in entry.description.trim().lines() {
        if line.trim().is_empty() {
            m.push_str(" .\n");
        } else {
            let _ = writeln!(m, " {}", line.trim_end());
        }
    }
    let origin = match (entry.reason, urls.first()) {
        (Reason::Upstreamable, Some(url)) => format!("upstream, {url}"),
        _ => "vendor".to_owned(),
    };
    let _ = writeln!(m, "Origin: {origin}");
    let forwarded = match (entry.reason, entry.status, urls.first()) {
        (Reason::ForkOnly | Reason::BuildCompat, _, _) => "not-needed".to_owned(),
        (Reason::Upstreamable, _, Some(url)) => url.clone(),
        (Reason::Upstreamable, _, None) => "no".to_owned(),
    };
    let _ = writeln!(m, "Forwarded: {forwarded}");
    for url in &urls {
        let _ = writeln!(m, "Bug: {url}");
    }
    let _ = writeln!(m, "Last-Update: {}", entry.last_update);
    m
}

/// Splits a DEP-3 style paragraph into `(field, value)` pairs; continuation
/// lines (starting with a space) join their field.
#[must_use]
pub fn dep3_fields(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with(' ') {
            if let Some((_, v)) = out.last_mut() {
                v.push('\n');
                v.push_str(line.trim_start());
            }
        } else if let Some((k, v)) = line.split_once(": ")
            && !k.is_empty()
            && !k.contains(' ')
        {
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out
}

/// Compares a patch file's message with what the registry renders.
/// Returns one human-readable mismatch per differing field.
#[must_use]
pub fn message_mismatches(parsed: &ParsedPatch, entry: &PatchEntry) -> Vec<String> {
    let mut problems = Vec::new();
    match &parsed.subject {
        None => problems.push("no e-mail header (not git format-patch output)".to_owned()),
        Some(s) if s.trim() != entry.title.trim() => problems.push(format!(
            "Subject is {:?}, registry title is {:?}",
            s.trim(),
            entry.title.trim()
        )),
        Some(_) => {}
    }
    let want = render_message(entry);
    let want_body = want.split_once("\n\n").map_or("", |(_, b)| b);
    let got = dep3_fields(&parsed.body);
    let expected = dep3_fields(want_body);
    for (k, v) in &expected {
        let found: Vec<&String> = got
            .iter()
            .filter(|(gk, _)| gk == k)
            .map(|(_, v)| v)
            .collect();
        let wanted: Vec<&String> = expected
            .iter()
            .filter(|(ek, _)| ek == k)
            .map(|(_, v)| v)
            .collect();
        if found.is_empty() {
            problems.push(format!("{k} is missing (registry renders {v:?})"));
        } else if found != wanted && !problems.iter().any(|p| p.starts_with(&format!("{k} "))) {
            problems.push(format!(
                "{k} is {:?}, registry renders {:?}",
                join(&found),
                join(&wanted)
            ));
        }
    }
    for (k, v) in &got {
        if !expected.iter().any(|(ek, _)| ek == k) {
            problems.push(format!("unexpected field {k}: {v:?}"));
        }
    }
    if problems.is_empty() && parsed.body.trim_end() != want_body.trim_end() {
        problems.push("commit message differs from the registry rendering (run refresh)".into());
    }
    problems
}

fn join(v: &[&String]) -> String {
    v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" | ")
}

/// The normalized content snapshot: only added and removed lines per file, no
/// index lines, no `@@` numbers, no context. A refresh that only moves
/// context or offsets leaves it unchanged.
#[must_use]
pub fn content_snapshot(id: &str, parsed: &ParsedPatch) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Fork patch content: {id}");
    let _ = writeln!(
        out,
        "# Added (+) and removed (-) lines only; written by `scripts/fork refresh`."
    );
    for file in &parsed.files {
        let _ = writeln!(out, "\n=== {} ({})", file.path, file.kind.label());
        for h in &file.hunks {
            for l in &h.lines {
                let (sign, s) = match l {
                    HunkLine::Insert(s) => ('+', s),
                    HunkLine::Delete(s) => ('-', s),
                    HunkLine::Context(_) => continue,
                };
                out.push(sign);
                out.push_str(s);
                if !s.ends_with('\n') {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{PatchId, Status};

    fn entry() -> PatchEntry {
        PatchEntry {
            id: "demo-fix".parse::<PatchId>().unwrap(),
            file: "patches/demo-fix.patch".into(),
            title: "Fix the demo".into(),
            description: "First line.\n\nSecond paragraph.".into(),
            reason: Reason::Upstreamable,
            status: Status::Submitted,
            upstream: vec!["block/buzz#12".into()],
            last_update: "2026-11-30".into(),
            depends_on: vec![],
            fork_crates: vec![],
            paths: vec![],
            required_symbols: vec![],
            seams: vec![],
            guard_tests: vec![],
            guard_snapshots: vec![],
            api_guards: vec![],
            fixes_defects: vec![],
            retired: None,
        }
    }

    #[test]
    fn message_has_dep3_and_trailer() {
        insta::assert_snapshot!(render_message(&entry()), @r"
        Fix the demo

        Description: Fix the demo
         First line.
         .
         Second paragraph.
        Origin: upstream, https://github.com/block/buzz/pull/12
        Forwarded: https://github.com/block/buzz/pull/12
        Bug: https://github.com/block/buzz/pull/12
        Last-Update: 2026-11-30

        Fork-Patch-Id: demo-fix
        ");
    }

    #[test]
    fn forwarded_per_reason() {
        let mut e = entry();
        e.reason = Reason::ForkOnly;
        e.status = Status::Carried;
        e.upstream.clear();
        let m = render_dep3(&e);
        assert!(m.contains("Origin: vendor\n"));
        assert!(m.contains("Forwarded: not-needed\n"));
        e.reason = Reason::Upstreamable;
        assert!(render_dep3(&e).contains("Forwarded: no\n"));
    }

    const SAMPLE: &str = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Buzz Fork Maintenance <fork@buzz.invalid>
Date: Sat, 1 Jan 2000 00:00:00 +0000
Subject: Fix the demo

Description: Fix the demo
 First line.
Last-Update: 2026-01-01

Fork-Patch-Id: demo-fix
---
diff --git a/crates/x/src/lib.rs b/crates/x/src/lib.rs
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/crates/x/src/lib.rs
+++ b/crates/x/src/lib.rs
@@ -1,3 +1,3 @@
 fn a() {}
-fn b() {}
+fn b() { c() }
 fn d() {}
diff --git a/crates/x/src/new.rs b/crates/x/src/new.rs
new file mode 100644
index 0000000000000000000000000000000000000000..3333333333333333333333333333333333333333
--- /dev/null
+++ b/crates/x/src/new.rs
@@ -0,0 +1 @@
+pub fn c() {}
";

    #[test]
    fn folded_subjects_unfold_with_their_space() {
        let folded = SAMPLE.replace(
            "Subject: Fix the demo\n",
            "Subject: Fix the demo after a very long title that git folds\n (port of x#1)\n",
        );
        let p = parse(&folded).unwrap();
        assert_eq!(
            p.subject.as_deref(),
            Some("Fix the demo after a very long title that git folds (port of x#1)")
        );
    }

    #[test]
    fn parses_format_patch_output() {
        let p = parse(SAMPLE).unwrap();
        assert_eq!(p.subject.as_deref(), Some("Fix the demo"));
        assert_eq!(
            p.paths(),
            vec!["crates/x/src/lib.rs", "crates/x/src/new.rs"]
        );
        assert_eq!(p.files[1].kind, FileKind::Create);
        assert_eq!(p.line_counts(), (2, 1));
        assert_eq!(p.files[0].hunks[0].stated_index(), 0);
        insta::assert_snapshot!(content_snapshot("demo-fix", &p), @r"
        # Fork patch content: demo-fix
        # Added (+) and removed (-) lines only; written by `scripts/fork refresh`.

        === crates/x/src/lib.rs (modified)
        -fn b() {}
        +fn b() { c() }

        === crates/x/src/new.rs (new file)
        +pub fn c() {}
        ");
    }

    #[test]
    fn reports_field_mismatches() {
        let p = parse(SAMPLE).unwrap();
        let problems = message_mismatches(&p, &entry());
        let text = problems.join("\n");
        assert!(text.contains("Last-Update is \"2026-01-01\""), "{text}");
        assert!(text.contains("Origin is missing"), "{text}");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("this is not a patch\n").is_err());
    }
}
