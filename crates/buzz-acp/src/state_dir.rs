//! The state directory (`--state-dir`): where durable harness state lives.
//!
//! It is checked once at startup, so an unusable directory stops the harness
//! with a clear message before any work starts, instead of failing the first
//! cursor save after a reply has already been published.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Something other than a directory is in the way.
    #[error(
        "state directory {dir}: {blocker} is a {kind}, not a directory; point --state-dir \
         (BUZZ_ACP_STATE_DIR) at a directory"
    )]
    NotADirectory {
        /// The configured directory.
        dir: PathBuf,
        /// The path that is in the way: the directory itself or a parent.
        blocker: PathBuf,
        /// What is there instead ("file", "symlink to a file", …).
        kind: &'static str,
    },
    /// The directory does not exist and cannot be created.
    #[error("state directory {dir} cannot be created: {source}")]
    Create {
        /// The configured directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The directory exists but files cannot be written in it.
    #[error("state directory {dir} is not writable: {source}")]
    NotWritable {
        /// The configured directory.
        dir: PathBuf,
        /// The I/O error of the write probe.
        source: std::io::Error,
    },
}

/// Creates `dir` if needed and checks that files can be created in it.
pub fn prepare(dir: &Path) -> Result<(), StateDirError> {
    if let Some((blocker, kind)) = first_non_directory(dir) {
        return Err(StateDirError::NotADirectory {
            dir: dir.to_path_buf(),
            blocker,
            kind,
        });
    }
    fs::create_dir_all(dir).map_err(|source| StateDirError::Create {
        dir: dir.to_path_buf(),
        source,
    })?;
    let probe = dir.join(format!(".buzz-acp-probe-{}", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"probe\n").and_then(|()| f.sync_all()));
    let removed = fs::remove_file(&probe);
    match (written, removed) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(source), _) | (Ok(()), Err(source)) => Err(StateDirError::NotWritable {
            dir: dir.to_path_buf(),
            source,
        }),
    }
}

/// The first existing path among `dir` and its ancestors that is not a
/// directory, with what it is.
fn first_non_directory(dir: &Path) -> Option<(PathBuf, &'static str)> {
    let mut existing: Vec<&Path> = dir.ancestors().collect();
    existing.reverse();
    existing.into_iter().find_map(|p| match fs::metadata(p) {
        Ok(meta) if meta.is_dir() => None,
        Ok(meta) => Some((p.to_path_buf(), kind_of(p, &meta))),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(_) => None,
    })
}

fn kind_of(path: &Path, meta: &fs::Metadata) -> &'static str {
    let link = fs::symlink_metadata(path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false);
    match (link, meta.is_file()) {
        (true, true) => "symlink to a file",
        (true, false) => "symlink to something that is not a directory",
        (false, true) => "file",
        (false, false) => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_created_and_probed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/state");
        prepare(&dir).unwrap();
        assert!(dir.is_dir());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the probe is gone");
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("state");
        fs::write(&file, b"not a dir").unwrap();
        let err = prepare(&file).unwrap_err();
        assert!(
            matches!(&err, StateDirError::NotADirectory { blocker, kind: "file", .. } if blocker == &file),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("is a file, not a directory"),
            "{err}"
        );

        let below = file.join("sub");
        let err = prepare(&below).unwrap_err();
        assert!(
            matches!(&err, StateDirError::NotADirectory { blocker, .. } if blocker == &file),
            "a parent that is a file is named: {err}"
        );
    }
}
