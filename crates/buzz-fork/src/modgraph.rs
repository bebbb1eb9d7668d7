//! The module graph of a library crate, parsed with syn, and the import
//! cycles in it.
//!
//! Nodes are the crate's file modules (`crate` for `src/lib.rs`, `pool` for
//! `src/pool.rs`, `pool::ensure` for `src/pool/ensure.rs`); inline modules
//! fold into the file that holds them. An edge `a → b` means a file refers
//! to an item of another file through a path: `use crate::b::…`,
//! `crate::b::f()`, `super::…`, `self::…`, or a path that starts with a
//! child module's name. `crate::X` for an item the crate root re-exports
//! (`pub use b::X;`) points at `b`, where the item lives. Paths inside macro
//! invocations and `#[path]` modules are not followed.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;

/// A module path inside the crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// The graph: file modules and the references between them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleGraph {
    /// Module name (`crate`, `pool`, `pool::ensure`) → repo-relative file.
    pub files: BTreeMap<String, String>,
    /// Module name → the modules it refers to.
    pub edges: BTreeMap<String, BTreeSet<String>>,
    /// Files that could not be read or parsed (their references are unknown).
    pub unreadable: Vec<String>,
}

/// Display name of a module path.
fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

/// What one file declares and refers to.
#[derive(Default)]
struct FileScan {
    /// Module paths of `mod x;` declarations (file children).
    file_children: Vec<ModPath>,
    /// Every module path declared in the file (inline ones included).
    declared: BTreeSet<ModPath>,
    /// Referenced paths, already made absolute where possible.
    references: Vec<ModPath>,
    /// Root-level `use` items: name → absolute path (crate root only).
    reexports: BTreeMap<String, ModPath>,
}

struct Scanner<'s> {
    scan: &'s mut FileScan,
    /// The module the visitor is in (starts at the file's module).
    current: ModPath,
    /// Whether the file is the crate root.
    root_file: bool,
    /// Child modules known per module (to resolve `child::x` paths).
    children: &'s BTreeMap<ModPath, BTreeSet<String>>,
}

impl Scanner<'_> {
    /// Makes `segments` absolute from the current module, if it is a path
    /// into this crate.
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some(segments[1..].to_vec()),
            "self" => {
                let mut out = self.current.clone();
                out.extend_from_slice(&segments[1..]);
                Some(out)
            }
            "super" => {
                let mut out = self.current.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    out.pop()?;
                    rest = &rest[1..];
                }
                out.extend_from_slice(rest);
                Some(out)
            }
            other => {
                let is_child = self
                    .children
                    .get(&self.current)
                    .is_some_and(|c| c.contains(other))
                    || self.scan.declared.contains(&{
                        let mut p = self.current.clone();
                        p.push(other.to_owned());
                        p
                    });
                is_child.then(|| {
                    let mut out = self.current.clone();
                    out.extend_from_slice(segments);
                    out
                })
            }
        }
    }

    fn record(&mut self, segments: Vec<String>) {
        if segments.len() < 2 && !matches!(segments.first().map(String::as_str), Some("super")) {
            return;
        }
        if let Some(abs) = self.absolute(&segments) {
            self.scan.references.push(abs);
        }
    }
}

/// Flattens a `use` tree into full paths (`*` and renames keep their prefix).
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let ident = n.ident.to_string();
            let mut full = prefix.clone();
            if ident != "self" {
                full.push(ident.clone());
            }
            let visible = if ident == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                ident
            };
            out.push((full, visible));
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            full.push(r.ident.to_string());
            out.push((full, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), String::new())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Scanner<'_> {
    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        let mut child = self.current.clone();
        child.push(i.ident.to_string());
        self.scan.declared.insert(child.clone());
        let has_path_attr = i.attrs.iter().any(|a| a.path().is_ident("path"));
        match &i.content {
            None if !has_path_attr => self.scan.file_children.push(child),
            None => {}
            Some(_) => {
                let saved = std::mem::replace(&mut self.current, child);
                syn::visit::visit_item_mod(self, i);
                self.current = saved;
            }
        }
    }

    fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
        let mut flat = Vec::new();
        let mut prefix = Vec::new();
        if i.leading_colon.is_none() {
            flatten_use(&i.tree, &mut prefix, &mut flat);
        }
        for (full, visible) in flat {
            let Some(abs) = self.absolute(&full) else {
                continue;
            };
            if self.root_file && self.current.is_empty() && !visible.is_empty() {
                self.scan.reexports.insert(visible, abs.clone());
            }
            self.scan.references.push(abs);
        }
    }

    /// `pub(super)`, `pub(in crate::x)`: who may see an item, not a reference to one.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(segments);
        }
        syn::visit::visit_path(self, p);
    }
}

/// Where the file of module `path` lives (`src/a/b.rs` or `src/a/b/mod.rs`).
fn candidate_files(src: &str, path: &[String]) -> [String; 2] {
    let joined = path.join("/");
    [
        format!("{src}/{joined}.rs"),
        format!("{src}/{joined}/mod.rs"),
    ]
}

/// Builds the module graph of the library crate at `crate_dir` (its
/// `src/lib.rs` and every file module reachable from it) from `read`.
///
/// # Errors
/// Whatever `read` returns.
pub fn build<E>(
    crate_dir: &str,
    read: &mut dyn FnMut(&str) -> Result<Option<String>, E>,
) -> Result<ModuleGraph, E> {
    let src = format!("{crate_dir}/src");
    let mut graph = ModuleGraph::default();
    let mut scans: BTreeMap<ModPath, FileScan> = BTreeMap::new();
    let mut children: BTreeMap<ModPath, BTreeSet<String>> = BTreeMap::new();
    let mut queue: Vec<(ModPath, Vec<String>)> = vec![(Vec::new(), vec![format!("{src}/lib.rs")])];
    // First pass: find every file module and its declarations.
    let mut parsed: BTreeMap<ModPath, (String, syn::File)> = BTreeMap::new();
    while let Some((path, candidates)) = queue.pop() {
        let mut found = None;
        for file in &candidates {
            if let Some(text) = read(file)? {
                found = Some((file.clone(), text));
                break;
            }
        }
        let Some((file, text)) = found else {
            if !path.is_empty() {
                graph.unreadable.push(candidates[0].clone());
            }
            continue;
        };
        let Ok(ast) = syn::parse_file(&text) else {
            graph.unreadable.push(file);
            continue;
        };
        let mut scan = FileScan::default();
        let empty = BTreeMap::new();
        let mut scanner = Scanner {
            scan: &mut scan,
            current: path.clone(),
            root_file: path.is_empty(),
            children: &empty,
        };
        for item in &ast.items {
            if let syn::Item::Mod(m) = item {
                scanner.visit_item_mod(m);
            }
        }
        for child in &scan.file_children {
            if let Some((last, parent)) = child.split_last() {
                children
                    .entry(parent.to_vec())
                    .or_default()
                    .insert(last.clone());
            }
            queue.push((child.clone(), candidate_files(&src, child).to_vec()));
        }
        graph.files.insert(name(&path), file.clone());
        parsed.insert(path, (file, ast));
    }
    // Second pass: references, with every module's children known.
    for (path, (_, ast)) in &parsed {
        let mut scan = FileScan::default();
        let mut scanner = Scanner {
            scan: &mut scan,
            current: path.clone(),
            root_file: path.is_empty(),
            children: &children,
        };
        scanner.visit_file(ast);
        scans.insert(path.clone(), scan);
    }
    let modules: BTreeSet<ModPath> = parsed.keys().cloned().collect();
    let reexports = scans
        .get(&Vec::new())
        .map(|s| s.reexports.clone())
        .unwrap_or_default();
    for (path, scan) in &scans {
        let from = name(path);
        for reference in &scan.references {
            let target = owning_module(&modules, &reexports, reference);
            if target != *path {
                graph
                    .edges
                    .entry(from.clone())
                    .or_default()
                    .insert(name(&target));
            }
        }
    }
    graph.unreadable.sort();
    Ok(graph)
}

/// The file module that holds the item at `path`: its longest prefix that
/// is a file module; an item named at the crate root that the root imports
/// from elsewhere resolves to where it comes from.
fn owning_module(
    modules: &BTreeSet<ModPath>,
    reexports: &BTreeMap<String, ModPath>,
    path: &[String],
) -> ModPath {
    let mut path = path.to_vec();
    for _ in 0..4 {
        let Some(first) = path.first() else {
            return Vec::new();
        };
        let is_module = modules.iter().any(|m| m.first() == Some(first));
        match reexports.get(first) {
            Some(target) if !is_module && target.first() != Some(first) => {
                let mut next = target.clone();
                next.extend_from_slice(&path[1..]);
                path = next;
            }
            _ => break,
        }
    }
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
        .unwrap_or_default()
}

impl ModuleGraph {
    /// Every cycle (as a closed walk of module names, first = last) that
    /// passes through one of `through`, one per such module, shortest first.
    #[must_use]
    pub fn cycles_through(&self, through: &BTreeSet<String>) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = Vec::new();
        for start in through {
            if let Some(cycle) = self.shortest_cycle(start) {
                let mut key = cycle[..cycle.len() - 1].to_vec();
                key.sort();
                let duplicate = out.iter().any(|c| {
                    let mut k = c[..c.len() - 1].to_vec();
                    k.sort();
                    k == key
                });
                if !duplicate {
                    out.push(cycle);
                }
            }
        }
        out
    }

    /// Breadth-first search for the shortest walk `start → … → start`.
    fn shortest_cycle(&self, start: &str) -> Option<Vec<String>> {
        let mut previous: BTreeMap<String, String> = BTreeMap::new();
        let mut frontier = vec![start.to_owned()];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for node in &frontier {
                for target in self.edges.get(node).into_iter().flatten() {
                    if target == start {
                        let mut chain = Vec::new();
                        let mut cur = node.clone();
                        while cur != start {
                            chain.push(cur.clone());
                            cur = previous.get(&cur)?.clone();
                        }
                        chain.reverse();
                        let mut walk = vec![start.to_owned()];
                        walk.extend(chain);
                        walk.push(start.to_owned());
                        return Some(walk);
                    }
                    if !previous.contains_key(target) {
                        previous.insert(target.clone(), node.clone());
                        next.push(target.clone());
                    }
                }
            }
            frontier = next;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> ModuleGraph {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect();
        build::<()>("c", &mut |p: &str| Ok(files.get(p).cloned())).unwrap()
    }

    fn edges(g: &ModuleGraph) -> Vec<String> {
        g.edges
            .iter()
            .flat_map(|(a, bs)| bs.iter().map(move |b| format!("{a} -> {b}")))
            .collect()
    }

    #[test]
    fn references_by_crate_super_self_and_child_paths() {
        let g = graph(&[
            (
                "c/src/lib.rs",
                "pub mod pool;\npub mod resume;\nmod scope;\npub use scope::Scope;\n\
                 pub struct Harness;\nfn f() { pool::run(); }\n",
            ),
            (
                "c/src/pool.rs",
                "mod ensure;\nuse crate::resume::plan;\npub fn run() { let _: crate::Scope; ensure::go(); }\n\
                 #[cfg(test)] mod tests { use super::*; }\n",
            ),
            ("c/src/pool/ensure.rs", "pub fn go() { super::run(); }\n"),
            (
                "c/src/resume.rs",
                "pub fn plan() { let _ = crate::Harness; }\n",
            ),
            ("c/src/scope.rs", "pub struct Scope;\n"),
        ]);
        assert_eq!(
            edges(&g),
            vec![
                "crate -> pool",
                "crate -> scope",
                "pool -> pool::ensure",
                "pool -> resume",
                "pool -> scope",
                "pool::ensure -> pool",
                "resume -> crate",
            ]
        );
        assert_eq!(g.files["pool::ensure"], "c/src/pool/ensure.rs");
        assert!(g.unreadable.is_empty());
    }

    #[test]
    fn a_cycle_through_a_glue_module_is_found_and_an_acyclic_glue_is_not() {
        let g = graph(&[
            (
                "c/src/lib.rs",
                "pub mod pool;\npub mod resume;\npub mod leaf;\n",
            ),
            (
                "c/src/pool.rs",
                "pub fn run() { crate::resume::plan(); crate::leaf::x(); }\npub fn open() {}\n",
            ),
            (
                "c/src/resume.rs",
                "use crate::pool;\npub fn plan() { pool::open(); }\n",
            ),
            ("c/src/leaf.rs", "pub fn x() { other_crate::y(); }\n"),
        ]);
        let cycles = g.cycles_through(&BTreeSet::from(["resume".to_owned(), "leaf".to_owned()]));
        assert_eq!(
            cycles,
            vec![vec!["resume".to_owned(), "pool".into(), "resume".into()]]
        );
    }

    #[test]
    fn macros_strings_and_comments_are_not_references() {
        let g = graph(&[
            ("c/src/lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "c/src/a.rs",
                "// crate::b::f()\npub fn f() { let _ = \"crate::b::f\"; }\n",
            ),
            ("c/src/b.rs", "pub fn f() {}\n"),
        ]);
        assert!(g.edges.is_empty(), "{:?}", g.edges);
    }

    #[test]
    fn visibility_restrictions_are_not_references() {
        let g = graph(&[
            ("c/src/lib.rs", "pub mod p;\n"),
            ("c/src/p.rs", "mod q;\npub fn f() { q::g(); }\n"),
            (
                "c/src/p/q.rs",
                "pub(super) fn g() {}\npub(in crate::p) fn h() {}\n",
            ),
        ]);
        assert_eq!(
            g.edges,
            BTreeMap::from([("p".to_owned(), BTreeSet::from(["p::q".to_owned()]))])
        );
    }

    #[test]
    fn unparsable_files_are_listed() {
        let g = graph(&[
            ("c/src/lib.rs", "pub mod a;\npub mod gone;\n"),
            ("c/src/a.rs", "fn broken( {\n"),
        ]);
        assert_eq!(g.unreadable, vec!["c/src/a.rs", "c/src/gone.rs"]);
    }
}
