//! No library crate of this workspace has an import cycle between its modules,
//! measured with the module graph `check` uses for the patched crate's glue
//! modules (`buzz_fork::modgraph`).
//!
//! The baseline (upstream's code, named in `patches.json`) is not ours to
//! restructure and is left out. Every other crate is ours: any cycle fails.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn no_library_crate_of_the_workspace_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let registry = buzz_fork::registry::Registry::load(&root).unwrap();
    let mut found = Vec::new();
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("src/lib.rs").is_file() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let crate_dir = format!("crates/{name}");
        if registry.upstream.contains(&crate_dir) {
            continue;
        }
        let graph = buzz_fork::modgraph::build::<std::io::Error>(&crate_dir, &mut |p: &str| {
            match std::fs::read_to_string(root.join(p)) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        })
        .unwrap();
        assert!(graph.unreadable.is_empty(), "{:?}", graph.unreadable);
        let all: BTreeSet<String> = graph.files.keys().cloned().collect();
        for cycle in graph.cycles_through(&all) {
            found.push(format!("{crate_dir}: {}", cycle.join(" → ")));
        }
        checked.push(crate_dir);
    }
    assert!(
        checked.contains(&"crates/real-adapters".to_owned())
            && checked.contains(&"crates/buzz-fork".to_owned()),
        "{checked:?}"
    );
    assert!(found.is_empty(), "import cycles: {found:#?}");
}
