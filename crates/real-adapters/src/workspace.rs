//! Where this workspace is on disk: the adapters' install directory and the harness binaries
//! are found relative to it (a module of its own, so [`crate::adapter`] and [`crate::binaries`]
//! both use it without importing each other).

use std::path::{Path, PathBuf};

/// The root of this workspace (two levels above this crate).
#[must_use]
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}
