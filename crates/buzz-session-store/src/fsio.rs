//! File-system primitives for state files in operator-chosen storage.
//!
//! Everything that touches the disk outside SQLite lives here, so the safety rules are in one place:
//! * reads never follow a symlink at the path and never read more than the cap + 1 bytes;
//! * the old JSON store's writers' lock is taken on a sibling lock file (opened without following
//!   symlinks), bounded in time so a wedged peer cannot block the start;
//! * a file that cannot be used is moved aside, never deleted;
//! * files are created 0600 and a missing directory 0700 (an existing one is left as it is).

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::StoreError;

/// What reading the store path found, before any parsing.
#[derive(Debug)]
pub(crate) enum Raw {
    /// No file: a normal first start.
    Missing,
    /// The whole file (at most the cap).
    Bytes(Vec<u8>),
    /// Longer than the cap; not parsed at all.
    Oversize,
    /// A symlink sits at the store path; it was not followed.
    Symlink,
    /// Any other failure, including "not a regular file".
    Unreadable(io::Error),
}

/// Reads the store file without following a symlink and without reading past `limit + 1` bytes.
///
/// `O_NONBLOCK` keeps a FIFO planted at the path from blocking the open; it has no effect on
/// regular files, and anything that is not a regular file is refused after `fstat`.
pub(crate) fn read_capped(path: &Path, limit: usize) -> Raw {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Raw::Missing,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Raw::Symlink,
        Err(e) => return Raw::Unreadable(e),
    };
    match file.metadata() {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Raw::Unreadable(io::Error::other("not a regular file")),
        Err(e) => return Raw::Unreadable(e),
    }
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    if let Err(e) = file.take(cap).read_to_end(&mut bytes) {
        return Raw::Unreadable(e);
    }
    if bytes.len() > limit {
        Raw::Oversize
    } else {
        Raw::Bytes(bytes)
    }
}

/// Creates `dir` (and missing parents) with mode 0700; an existing directory is not touched,
/// because the operator may have chosen its permissions deliberately.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), StoreError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| io_error(dir, "create state directory", source))
}

/// An exclusive lock on the sibling lock file, released when dropped (closing the descriptor).
#[derive(Debug)]
pub(crate) struct LockGuard {
    /// Held only for its descriptor: the `flock` lives as long as it is open.
    _file: File,
}

/// Takes the exclusive writer lock, waiting at most `timeout`.
///
/// The wait is bounded because a store write happens on the turn path and the store is only an
/// optimisation: a peer that holds the lock forever must cost a warning, not a turn. The lock file
/// is never deleted (deleting lock files reintroduces the race they exist to prevent).
pub(crate) fn lock(path: &Path, timeout: Duration) -> Result<LockGuard, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| io_error(path, "open lock file", source))?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(LockGuard { _file: file }),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(TryLockError::WouldBlock) => {
                let source = io::Error::new(io::ErrorKind::TimedOut, "lock held by another writer");
                return Err(io_error(path, "lock", source));
            }
            Err(TryLockError::Error(source)) => return Err(io_error(path, "lock", source)),
        }
    }
}

/// Moves an unreadable store file aside as `<file>.corrupt-<unix seconds>[-n]` and returns the new
/// path, so replacing it loses nothing an operator might want to recover.
pub(crate) fn quarantine(path: &Path) -> Result<PathBuf, StoreError> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!(
        "{}.corrupt-{secs}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let mut target = path.with_file_name(&base);
    let mut n = 1;
    while fs::symlink_metadata(&target).is_ok() {
        target = path.with_file_name(format!("{base}-{n}"));
        n += 1;
    }
    fs::rename(path, &target).map_err(|source| io_error(path, "quarantine", source))?;
    Ok(target)
}

/// `path` with `suffix` appended to its last component (`x.json` → `x.json.lock`): the names of
/// sibling files (lock, log, backup) are spelled this way, and `Path::with_extension` would replace
/// an extension rather than add to it.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

pub(crate) fn io_error(path: &Path, op: &'static str, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn reads_are_capped_and_refuse_symlinks_and_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        assert!(matches!(read_capped(&path, 4), Raw::Missing));
        fs::write(&path, b"1234").unwrap();
        assert!(matches!(read_capped(&path, 4), Raw::Bytes(b) if b == b"1234"));
        fs::write(&path, b"12345").unwrap();
        assert!(matches!(read_capped(&path, 4), Raw::Oversize));
        let link = dir.path().join("link");
        symlink(&path, &link).unwrap();
        assert!(matches!(read_capped(&link, 100), Raw::Symlink));
        assert!(matches!(read_capped(dir.path(), 100), Raw::Unreadable(_)));
    }

    #[test]
    fn quarantine_never_overwrites_an_earlier_quarantine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        fs::write(&path, b"first").unwrap();
        let first = quarantine(&path).unwrap();
        fs::write(&path, b"second").unwrap();
        let second = quarantine(&path).unwrap();
        assert_ne!(first, second);
        assert_eq!(fs::read(first).unwrap(), b"first");
        assert_eq!(fs::read(second).unwrap(), b"second");
        assert!(!path.exists());
    }

    #[test]
    fn the_lock_is_exclusive_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json.lock");
        let held = lock(&path, Duration::from_secs(1)).unwrap();
        let err = lock(&path, Duration::from_millis(20)).unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { op: "lock", source, .. } if source.kind() == io::ErrorKind::TimedOut),
            "{err:?}"
        );
        drop(held);
        lock(&path, Duration::from_millis(20)).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
