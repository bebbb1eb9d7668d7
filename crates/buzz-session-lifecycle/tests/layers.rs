//! The state machine's modules call each other in one direction only, enforced.
//!
//! `Lifecycle` is one state machine whose methods live in several modules, one concept each. A
//! call from one module into another is invisible in the imports (both are methods on `self`),
//! so a cycle between two concepts — residency calling placement calling residency — would grow
//! unseen. This test reads the modules' `impl Lifecycle` blocks and fails, naming the call, when
//! a module calls a method of a sibling or of a higher layer, or when two modules define methods
//! of the same name (a call could not be attributed, and a reader could not either).

use std::collections::BTreeMap;
use std::path::Path;

/// The modules of the state machine, from the bottom up. A module may call the methods of its
/// own module and of lower layers only.
const LAYERS: &[&[&str]] = &[
    // The scope table and the outbox: the primitives every concept uses.
    &["lifecycle"],
    // The lifecycle's store operations for a scope; the release of a session on its worker.
    &["receipt_ops", "release"],
    // Resident sessions.
    &["residency"],
    // Ending a session on purpose; continuity (retirement, handoffs, replacements).
    &["abandonment", "rotation"],
    // A model switched in place.
    &["config_change"],
    // The inputs: admission and the start of a turn, placement and store answers, the turn's
    // reports and end, settlement. Each handles its inputs with the layers below.
    &["turn_start", "placement", "outcome", "settlement"],
];

/// The text of the `impl … Lifecycle<K, I>` blocks of `source` (up to each block's closing
/// brace at the start of a line).
fn lifecycle_impls(source: &str) -> String {
    let mut text = String::new();
    let mut inside = false;
    for line in source.lines() {
        if line.starts_with("impl") && line.contains("Lifecycle<K, I>") {
            inside = true;
            continue;
        }
        if inside && line.starts_with('}') {
            inside = false;
        }
        if inside {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// The names of the methods an `impl` block's text defines (at its first indentation).
fn methods(block: &str) -> Vec<String> {
    block
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("    ")?;
            let rest = rest
                .strip_prefix("pub(crate) ")
                .or_else(|| rest.strip_prefix("pub "))
                .unwrap_or(rest);
            let name = rest.strip_prefix("fn ")?;
            let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            Some(name[..end].to_string())
        })
        .collect()
}

/// Every call against the layering, given each module's `impl Lifecycle` text: "module ->
/// owner::method".
fn wrong_calls(modules: &BTreeMap<String, String>, layers: &[&[&str]]) -> Vec<String> {
    let layer_of = |module: &str| layers.iter().position(|l| l.contains(&module));
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    let mut found = Vec::new();
    for (module, block) in modules {
        for method in methods(block) {
            if let Some(other) = owner.insert(method.clone(), module) {
                found.push(format!("{method} is defined in both {other} and {module}"));
            }
        }
    }
    for (module, block) in modules {
        let Some(caller) = layer_of(module) else {
            found.push(format!("{module} is in no layer"));
            continue;
        };
        for (method, defined_in) in &owner {
            if defined_in == module || !block.contains(&format!("self.{method}(")) {
                continue;
            }
            let callee = layer_of(defined_in).unwrap_or(usize::MAX);
            if callee >= caller {
                found.push(format!("{module} -> {defined_in}::{method}"));
            }
        }
    }
    found
}

#[test]
fn the_state_machine_modules_call_downwards_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let source = std::fs::read_to_string(&path).expect("source");
        let block = lifecycle_impls(&source);
        if block.is_empty() {
            continue;
        }
        let name = path
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        modules.insert(name, block);
    }
    let listed: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    let mut found = wrong_calls(&modules, LAYERS);
    for module in listed {
        if !modules.contains_key(module) {
            found.push(format!("{module} is listed but holds no impl Lifecycle"));
        }
    }
    assert!(
        found.is_empty(),
        "calls against the layering (see LAYERS in tests/layers.rs):\n{}",
        found.join("\n")
    );
}

/// Modules by name, for the check's own test.
fn named(pairs: Vec<(&str, String)>) -> BTreeMap<String, String> {
    pairs.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
}

#[test]
fn the_check_sees_an_upward_call_a_sibling_call_and_a_shared_name() {
    let layers: &[&[&str]] = &[&["low"], &["high", "peer"]];
    let block = |body: &str| {
        lifecycle_impls(&format!(
            "impl<K: Scope, I: Input> Lifecycle<K, I> {{\n{body}}}\n"
        ))
    };
    let modules = named(vec![
        (
            "low",
            block("    pub(crate) fn base(&mut self) {\n        self.top();\n    }\n"),
        ),
        (
            "high",
            block(
                "    pub fn top(&mut self) {\n        self.base();\n        self.side();\n    }\n",
            ),
        ),
        (
            "peer",
            block("    fn side(&self) {}\n    fn base(&self) {}\n"),
        ),
    ]);
    let found = wrong_calls(&modules, layers);
    assert!(found.contains(&"low -> high::top".to_string()), "{found:?}");
    assert!(
        found.contains(&"high -> peer::side".to_string()),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("base is defined in both")),
        "{found:?}"
    );
    let fine = named(vec![
        ("low", block("    fn base(&self) {}\n")),
        (
            "high",
            block("    fn top(&self) {\n        self.base();\n    }\n"),
        ),
    ]);
    assert!(wrong_calls(&fine, layers).is_empty());
}
