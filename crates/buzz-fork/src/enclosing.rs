//! Which upstream items a hunk touches: the measure that matters for a
//! rebase is not how many lines a patch adds but which upstream functions it
//! edits, because that is where upstream's next change will collide with it.
//!
//! A hunk is located in the file *as the patch finds it* (the baseline plus
//! the patches before it; for the first patch that touches a file, the
//! baseline file itself):
//!
//! * in a Rust file, each changed line (a removed line, or the gap an added
//!   line goes into) is attributed to the innermost item that spans it,
//!   parsed with syn: `Pool::ensure_session` for a method, `spawn` for a free
//!   function, `impl Pool` for lines of an impl block outside its methods,
//!   `struct Config`, `mod tests`, …; a change between items is at
//!   `(module level)`;
//! * in a TOML file (`Cargo.toml`), the table the changed line belongs to,
//!   e.g. `[dependencies]`;
//! * other files have no items.
//!
//! An item's span starts at its first attribute, so a changed doc comment
//! belongs to the item it documents.

use syn::spanned::Spanned;

use crate::patchfile::{Hunk, HunkLine};

/// Where a changed line sits in the old file (1-based line numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// This old line is removed.
    Removed(usize),
    /// Lines are inserted after this old line (0 = at the top).
    InsertedAfter(usize),
}

/// The changed positions of a hunk, in order. A run of added lines that
/// replaces removed lines is where those lines were; a run of added lines
/// alone is the gap it goes into.
fn changes(hunk: &Hunk) -> Vec<Change> {
    // `@@ -a,0 …` names the line after which it inserts; otherwise the
    // first old line is `a`.
    let base = if hunk.old_len == 0 {
        hunk.old_start
    } else {
        hunk.old_start.saturating_sub(1)
    };
    let mut consumed = 0;
    let mut out = Vec::new();
    let mut run_removes = false;
    for line in &hunk.lines {
        match line {
            HunkLine::Context(_) => {
                consumed += 1;
                run_removes = false;
            }
            HunkLine::Delete(_) => {
                consumed += 1;
                run_removes = true;
                out.push(Change::Removed(base + consumed));
            }
            HunkLine::Insert(_) if run_removes => {}
            HunkLine::Insert(_) => {
                let gap = Change::InsertedAfter(base + consumed);
                if out.last() != Some(&gap) {
                    out.push(gap);
                }
            }
        }
    }
    out
}

/// A named item and the old-file lines it spans (inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    name: String,
    first: usize,
    last: usize,
}

impl Span {
    fn contains(&self, change: Change) -> bool {
        match change {
            Change::Removed(line) => self.first <= line && line <= self.last,
            // The gap after `line` is inside when both of its neighbours are.
            Change::InsertedAfter(line) => self.first <= line && line < self.last,
        }
    }

    fn len(&self) -> usize {
        self.last - self.first
    }
}

/// The name every change outside an item gets.
pub const MODULE_LEVEL: &str = "(module level)";

/// The items of `path` (its text as the patch finds it) that `hunk`
/// changes, in order of appearance, deduplicated. Empty when the file has
/// no items (not Rust or TOML) or does not parse.
#[must_use]
pub fn touched_items(path: &str, text: &str, hunk: &Hunk) -> Vec<String> {
    let spans = if path.ends_with(".rs") {
        match syn::parse_file(text) {
            Ok(file) => rust_spans(&file),
            Err(_) => return Vec::new(),
        }
    } else if path.ends_with(".toml") {
        toml_spans(text)
    } else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for change in changes(hunk) {
        let name = spans
            .iter()
            .filter(|s| s.contains(change))
            .min_by_key(|s| s.len())
            .map_or(MODULE_LEVEL, |s| s.name.as_str());
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// Every item of a Rust file with its line span, nested items included
/// (inline modules, impl and trait members); function bodies are not
/// entered.
fn rust_spans(file: &syn::File) -> Vec<Span> {
    let mut out = Vec::new();
    collect_items(&file.items, &[], &mut out);
    out
}

fn span_of(node: &impl Spanned, name: String) -> Span {
    let span = node.span();
    Span {
        name,
        first: span.start().line,
        last: span.end().line,
    }
}

fn path_name(scope: &[String], name: &str) -> String {
    let mut parts: Vec<&str> = scope.iter().map(String::as_str).collect();
    parts.push(name);
    parts.join("::")
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        syn::Type::Paren(p) => type_name(&p.elem),
        syn::Type::Group(g) => type_name(&g.elem),
        _ => "_".to_owned(),
    }
}

fn collect_items(items: &[syn::Item], scope: &[String], out: &mut Vec<Span>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => out.push(span_of(f, path_name(scope, &f.sig.ident.to_string()))),
            syn::Item::Impl(i) => {
                let ty = type_name(&i.self_ty);
                let header = match &i.trait_ {
                    Some((_, trait_path, _)) => {
                        let trait_name = trait_path
                            .segments
                            .last()
                            .map(|s| s.ident.to_string())
                            .unwrap_or_default();
                        format!("impl {trait_name} for {ty}")
                    }
                    None => format!("impl {ty}"),
                };
                out.push(span_of(i, path_name(scope, &header)));
                let mut inner = scope.to_vec();
                inner.push(ty);
                for member in &i.items {
                    let name = match member {
                        syn::ImplItem::Fn(f) => f.sig.ident.to_string(),
                        syn::ImplItem::Const(c) => c.ident.to_string(),
                        syn::ImplItem::Type(t) => t.ident.to_string(),
                        _ => continue,
                    };
                    out.push(span_of(member, path_name(&inner, &name)));
                }
            }
            syn::Item::Trait(t) => {
                let name = t.ident.to_string();
                out.push(span_of(t, path_name(scope, &format!("trait {name}"))));
                let mut inner = scope.to_vec();
                inner.push(name);
                for member in &t.items {
                    if let syn::TraitItem::Fn(f) = member {
                        out.push(span_of(member, path_name(&inner, &f.sig.ident.to_string())));
                    }
                }
            }
            syn::Item::Mod(m) => {
                let name = m.ident.to_string();
                if let Some((_, content)) = &m.content {
                    out.push(span_of(m, path_name(scope, &format!("mod {name}"))));
                    let mut inner = scope.to_vec();
                    inner.push(name);
                    collect_items(content, &inner, out);
                }
            }
            syn::Item::Struct(s) => {
                out.push(span_of(s, path_name(scope, &format!("struct {}", s.ident))))
            }
            syn::Item::Enum(e) => {
                out.push(span_of(e, path_name(scope, &format!("enum {}", e.ident))));
            }
            syn::Item::Union(u) => {
                out.push(span_of(u, path_name(scope, &format!("union {}", u.ident))));
            }
            syn::Item::Const(c) => {
                out.push(span_of(c, path_name(scope, &format!("const {}", c.ident))));
            }
            syn::Item::Static(s) => {
                out.push(span_of(s, path_name(scope, &format!("static {}", s.ident))))
            }
            syn::Item::Type(t) => {
                out.push(span_of(t, path_name(scope, &format!("type {}", t.ident))));
            }
            syn::Item::Macro(m) => {
                let name = m.ident.as_ref().map_or_else(
                    || {
                        m.mac
                            .path
                            .segments
                            .last()
                            .map(|s| format!("{}!", s.ident))
                            .unwrap_or_default()
                    },
                    |ident| format!("macro {ident}"),
                );
                out.push(span_of(m, path_name(scope, &name)));
            }
            // `use`, `mod x;`, `extern crate`: module-level declarations.
            _ => {}
        }
    }
}

/// Every table of a TOML file (`[name]` or `[[name]]`) with its lines: from
/// its header to the line before the next header.
fn toml_spans(text: &str) -> Vec<Span> {
    let lines: Vec<&str> = text.lines().collect();
    let headers: Vec<(usize, String)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let trimmed = line.trim();
            let end = trimmed.rfind(']')?;
            trimmed
                .starts_with('[')
                .then(|| (i + 1, trimmed[..=end].to_owned()))
        })
        .collect();
    headers
        .iter()
        .enumerate()
        .map(|(k, (first, name))| Span {
            name: name.clone(),
            first: *first,
            last: headers.get(k + 1).map_or(lines.len(), |(next, _)| next - 1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patchfile;

    const POOL: &str = "\
use std::fmt;

/// Sessions.
pub struct Pool {
    open: u32,
}

impl Pool {
    /// New.
    pub fn new() -> Self {
        Pool { open: 0 }
    }

    pub fn ensure(&mut self) -> u32 {
        self.open += 1;
        self.open
    }
}

pub fn free() {}

mod tests {
    fn helper() {}
}
";

    fn hunk(header: &str, body: &str) -> Hunk {
        let text = format!(
            "diff --git a/c/src/pool.rs b/c/src/pool.rs\n--- a/c/src/pool.rs\n+++ b/c/src/pool.rs\n{header}\n{body}"
        );
        patchfile::parse(&text).unwrap().files[0].hunks[0].clone()
    }

    #[test]
    fn a_change_inside_a_method_names_the_method() {
        let h = hunk(
            "@@ -14,3 +14,4 @@",
            "     pub fn ensure(&mut self) -> u32 {\n+        self.check();\n         self.open += 1;\n         self.open\n",
        );
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), ["Pool::ensure"]);
    }

    #[test]
    fn a_new_method_at_the_end_of_an_impl_is_in_the_impl() {
        let h = hunk(
            "@@ -17,2 +17,4 @@",
            "     }\n+\n+    pub fn close(&mut self) {}\n }\n",
        );
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), ["impl Pool"]);
    }

    #[test]
    fn removed_lines_and_doc_comments_belong_to_their_items() {
        let h = hunk(
            "@@ -3,4 +3,4 @@",
            "-/// Sessions.\n+/// Sessions by channel.\n pub struct Pool {\n-    open: u32,\n+    open: u64,\n }\n",
        );
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), ["struct Pool"]);
    }

    #[test]
    fn changes_between_items_are_at_module_level_and_nested_items_are_qualified() {
        let h = hunk("@@ -1,2 +1,3 @@", " use std::fmt;\n+use crate::store;\n \n");
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), [MODULE_LEVEL]);
        let h = hunk(
            "@@ -22,3 +22,3 @@",
            " mod tests {\n-    fn helper() {}\n+    fn helper() { super::free() }\n }\n",
        );
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), ["tests::helper"]);
    }

    #[test]
    fn a_hunk_over_two_items_names_both() {
        let h = hunk(
            "@@ -19,3 +19,3 @@",
            " \n-pub fn free() {}\n+pub fn free() { let _ = 1; }\n \n",
        );
        assert_eq!(touched_items("c/src/pool.rs", POOL, &h), ["free"]);
        let h = hunk(
            "@@ -15,6 +15,6 @@",
            "-        self.open += 1;\n+        self.open += 2;\n         self.open\n     }\n }\n \n-pub fn free() {}\n+pub fn free() { let _ = 1; }\n",
        );
        assert_eq!(
            touched_items("c/src/pool.rs", POOL, &h),
            ["Pool::ensure", "free"]
        );
    }

    #[test]
    fn toml_changes_name_their_table() {
        let manifest = "[package]\nname = \"c\"\n\n[dependencies]\nserde = \"1\"\n\n[dev-dependencies]\ninsta = \"1\"\n";
        let text = "diff --git a/c/Cargo.toml b/c/Cargo.toml\n--- a/c/Cargo.toml\n+++ b/c/Cargo.toml\n@@ -5,2 +5,3 @@\n serde = \"1\"\n+store = { path = \"../store\" }\n \n";
        let h = patchfile::parse(text).unwrap().files[0].hunks[0].clone();
        assert_eq!(
            touched_items("c/Cargo.toml", manifest, &h),
            ["[dependencies]"]
        );
        assert!(touched_items("c/README.md", manifest, &h).is_empty());
    }
}
