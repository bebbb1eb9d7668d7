//! Where the tier finds the harness binaries.

use std::path::PathBuf;

use crate::adapter::TierError;

/// The baseline harness: `$BUZZ_BASELINE_HARNESS` or `target/debug/buzz-acp`.
///
/// # Errors
///
/// [`TierError::MissingBinary`] when it is not built.
pub fn baseline_harness() -> Result<PathBuf, TierError> {
    existing(
        "the baseline buzz-acp",
        std::env::var_os("BUZZ_BASELINE_HARNESS").map_or_else(
            || crate::workspace::root().join("target/debug/buzz-acp"),
            PathBuf::from,
        ),
        "cargo build -p buzz-acp",
    )
}

/// The patched harness: `$BUZZ_PATCHED_HARNESS` or `target/patched/buzz-acp`.
///
/// # Errors
///
/// [`TierError::MissingBinary`] when it is not built.
pub fn patched_harness() -> Result<PathBuf, TierError> {
    existing(
        "the patched buzz-acp",
        std::env::var_os("BUZZ_PATCHED_HARNESS").map_or_else(
            || crate::workspace::root().join("target/patched/buzz-acp"),
            PathBuf::from,
        ),
        "tree=$(scripts/fork apply | tail -n 1); cargo build --manifest-path \"$tree/Cargo.toml\" --profile patched -p buzz-acp",
    )
}

fn existing(what: &'static str, path: PathBuf, hint: &'static str) -> Result<PathBuf, TierError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(TierError::MissingBinary { what, path, hint })
    }
}
