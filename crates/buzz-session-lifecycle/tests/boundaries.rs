//! The boundary between the lifecycle's pure core and its shell, enforced.
//!
//! The core — the state machine and the concepts it consults — is plain synchronous code: inputs
//! in, decisions out, time passed in. It must not reach for the async runtime, the command line
//! or the metrics recorder (`tokio`, `clap`, `metrics`), nor for the shell's modules that do
//! (the driver, the store worker, the startup probe, the argument parser, the metrics, the
//! dispatcher, the wire tap, the store adapter, the test store). This test reads the core's
//! source and fails, naming the file and line, when a core module crosses the line.

use std::path::Path;

/// The core's modules (`src/<name>.rs`).
const CORE: &[&str] = &[
    "abandonment",
    "classify",
    "clock",
    "config_change",
    "decision",
    "exhaustion",
    "gate",
    "lifecycle",
    "mailbox",
    "notice",
    "outcome",
    "phase",
    "placement",
    "reach",
    "receipt_ops",
    "receipt_view",
    "release",
    "residency",
    "residents",
    "retirement",
    "retry",
    "rotation",
    "scope",
    "session_config",
    "settlement",
    "telemetry",
    "turn_start",
    "write_queue",
];

/// The shell's modules: I/O, the runtime, the command line, the recorder.
const SHELL: &[&str] = &[
    "args",
    "dispatch",
    "driver",
    "receipts",
    "startup_probe",
    "store_io",
    "telemetry_metrics",
    "testing",
    "wire",
];

/// Crates the core may not name.
const FORBIDDEN_CRATES: &[&str] = &["tokio", "clap", "metrics", "metrics_exporter_prometheus"];

/// The code of a line, without its `//` comment (doc comments included).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Whether `code` names `name` as a path root (`name::…`), not as part of a longer word.
fn names_path(code: &str, name: &str) -> bool {
    let pattern = format!("{name}::");
    code.match_indices(&pattern).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        // `crate::x::`, `super::x::` and `buzz_x::` are not the crate `x`.
        !matches!(before, Some(c) if c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// Every crossing in the core: (file, line number, line).
fn crossings() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for module in CORE {
        let path = src.join(format!("{module}.rs"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for (n, line) in text.lines().enumerate() {
            let code = code(line);
            let crate_hit = FORBIDDEN_CRATES.iter().find(|c| {
                names_path(code, c) || code.contains(&format!("{c}!")) || {
                    let trimmed = code.trim_start();
                    trimmed.starts_with(&format!("use {c}"))
                        || trimmed.starts_with(&format!("extern crate {c}"))
                }
            });
            let shell_hit = SHELL.iter().find(|m| {
                code.contains(&format!("crate::{m}::")) || code.contains(&format!("crate::{m};"))
            });
            if let Some(what) = crate_hit.or(shell_hit) {
                found.push(format!(
                    "src/{module}.rs:{}: names {what}: {}",
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn the_core_names_neither_the_runtime_nor_the_command_line_nor_the_recorder_nor_the_shell() {
    let found = crossings();
    assert!(
        found.is_empty(),
        "the core crosses into the shell:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_is_core_or_shell() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut unplaced = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        let placed = CORE.contains(&module)
            || SHELL.contains(&module)
            || ["lib", "test_values", "behaviours"].contains(&module);
        if !placed {
            unplaced.push(module.to_string());
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules neither core nor shell (add each to CORE or SHELL in tests/boundaries.rs): {unplaced:?}"
    );
}

#[test]
fn the_check_sees_a_crossing() {
    assert!(names_path(
        "let now = tokio::time::Instant::now();",
        "tokio"
    ));
    assert!(!names_path("use crate::clock::Moment;", "clock"));
    assert!(!names_path("buzz_metrics::x", "metrics"));
    assert!(!names_path("telemetry_metrics::serve(addr)", "metrics"));
    assert_eq!(code("let x = 1; // tokio::spawn"), "let x = 1; ");
}
