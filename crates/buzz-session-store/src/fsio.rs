//! File-system primitives for a state file in operator-chosen storage (#6088 item 5, #2633 item 16).
//!
//! Everything that touches the disk lives here, so the safety rules are in one place:
//! * reads never follow a symlink at the store path and never read more than the cap + 1 bytes;
//! * writers serialise on an exclusive lock of a sibling lock file (opened without following
//!   symlinks), bounded in time so a wedged peer cannot block a turn;
//! * a write goes to a unique `create_new` temp file in the same directory (a pre-placed symlink
//!   cannot redirect it), is fsynced, renamed over the store (which replaces a symlink itself,
//!   never its target) and the directory is fsynced; a failed write or rename removes the temp;
//! * files are created 0600 and a missing directory 0700 (an existing one is left as it is).

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::store::StoreError;

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

/// Distinguishes temp files of concurrent writers inside one process.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` atomically with `bytes` (temp file, fsync, rename, fsync directory).
///
/// Readers see the old or the new file, never a partial one, and a crash leaves at most a stray
/// temp file, never a truncated store.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = parent_dir(path);
    let (tmp_path, mut tmp) = create_temp(path)?;
    let written = tmp
        .write_all(bytes)
        .and_then(|()| tmp.sync_all())
        .map_err(|source| io_error(&tmp_path, "write temp file", source));
    drop(tmp);
    let renamed = written.and_then(|()| {
        fs::rename(&tmp_path, path)
            .map_err(|source| io_error(path, "rename temp file over", source))
    });
    if let Err(e) = renamed {
        if let Err(cleanup) = fs::remove_file(&tmp_path) {
            tracing::warn!(path = %tmp_path.display(), error = %cleanup, "session store: could not remove temp file");
        }
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| io_error(dir, "sync directory", source))
}

/// A new, exclusively created 0600 temp file next to `path`.
fn create_temp(path: &Path) -> Result<(PathBuf, File), StoreError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut attempt = 0;
    loop {
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp_path = path.with_file_name(format!("{name}.tmp-{}-{seq}", std::process::id()));
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp_path);
        match opened {
            Ok(file) => return Ok((tmp_path, file)),
            // A leftover from a crashed process with a recycled pid: pick the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(source) => return Err(io_error(&tmp_path, "create temp file", source)),
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

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
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

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory at the target makes rename(2) fail after the temp was written.
        let target = dir.path().join("store.json");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"x").unwrap();
        let err = write_atomic(&target, b"{}").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Io {
                    op: "rename temp file over",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(names(dir.path()), ["store.json"]);
    }

    #[test]
    fn written_files_are_owner_only_and_no_temp_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("store.json");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(names(dir.path()), ["store.json"]);
    }

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
