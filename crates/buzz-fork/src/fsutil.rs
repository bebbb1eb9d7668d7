//! Small file-system helpers: atomic writes, directory copies and swaps.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Directory names never copied into a generated tree.
const SKIPPED_DIRS: &[&str] = &["target", ".git"];

/// Writes `bytes` to `path` through a sibling temporary file and a rename, so
/// readers never see a half-written file.
///
/// # Errors
/// On I/O failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = parent_of(path);
    fs::create_dir_all(&parent).map_err(|e| Error::io("creating", &parent, e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".buzz-fork-")
        .tempfile_in(&parent)
        .map_err(|e| Error::io("creating a temporary file in", &parent, e))?;
    tmp.write_all(bytes)
        .map_err(|e| Error::io("writing", tmp.path().to_path_buf(), e))?;
    set_readable(tmp.as_file(), path)?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("syncing", tmp.path().to_path_buf(), e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("replacing", path, e.error))?;
    Ok(())
}

/// Gives a new file the permissions of the file it replaces, or 0644
/// (temporary files start out private).
#[cfg(unix)]
fn set_readable(file: &fs::File, replaced: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(replaced).map_or(0o644, |m| m.permissions().mode() & 0o7777);
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("setting permissions of", replaced, e))
}

#[cfg(not(unix))]
fn set_readable(_file: &fs::File, _replaced: &Path) -> Result<()> {
    Ok(())
}

/// `path` made absolute by joining it to the current directory, exactly as
/// given (unlike `std::path::absolute`, `.` components stay), so the paths
/// the commands print read as the user typed them.
///
/// # Errors
/// The current directory cannot be read.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .map_err(|e| Error::io("reading", ".", e))?
            .join(path))
    }
}

/// Reads a file to a string; `None` when it does not exist.
///
/// # Errors
/// On other I/O failures.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

/// Reads a file to a string.
///
/// # Errors
/// On I/O failure.
pub fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))
}

/// Removes a file if present.
///
/// # Errors
/// On I/O failures other than absence.
pub fn remove_file_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path, e)),
    }
}

/// Removes a directory tree if present.
///
/// # Errors
/// On I/O failures other than absence.
pub fn remove_dir_if_present(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path, e)),
    }
}

/// Copies the directory `from` to `to` (created), skipping `target/` and
/// `.git/` at any depth. Symbolic links are recreated, not followed.
///
/// # Errors
/// On I/O failure.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).map_err(|e| Error::io("creating", to, e))?;
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(|e| Error::io("listing", from, e))?
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::io("listing", from, e))?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        let src = entry.path();
        let dst = to.join(&name);
        let kind = entry
            .file_type()
            .map_err(|e| Error::io("inspecting", &src, e))?;
        if kind.is_dir() {
            if SKIPPED_DIRS.iter().any(|s| name == *s) {
                continue;
            }
            copy_dir(&src, &dst)?;
        } else if kind.is_symlink() {
            let link = fs::read_link(&src).map_err(|e| Error::io("reading link", &src, e))?;
            symlink(&link, &dst)?;
        } else {
            fs::copy(&src, &dst).map_err(|e| Error::io("copying", &src, e))?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).map_err(|e| Error::io("creating link", link, e))
}

#[cfg(not(unix))]
fn symlink(target: &Path, link: &Path) -> Result<()> {
    fs::copy(target, link)
        .map(|_| ())
        .map_err(|e| Error::io("copying", link, e))
}

/// A directory being built next to its final location. Call
/// [`StagedDir::commit`] to swap it into place; dropping it discards it.
pub struct StagedDir {
    tmp: tempfile::TempDir,
    dest: PathBuf,
}

impl StagedDir {
    /// Starts a staging directory beside `dest`.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn new(dest: &Path) -> Result<Self> {
        let parent = parent_of(dest);
        fs::create_dir_all(&parent).map_err(|e| Error::io("creating", &parent, e))?;
        let tmp = tempfile::Builder::new()
            .prefix(".buzz-fork-staging-")
            .tempdir_in(&parent)
            .map_err(|e| Error::io("creating a staging directory in", &parent, e))?;
        Ok(StagedDir {
            tmp,
            dest: dest.to_path_buf(),
        })
    }

    /// Where to write the new content.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Replaces `dest` with the staged content: the old directory is moved
    /// aside, the new one renamed into place, then the old one removed. The
    /// destination is never half-written.
    ///
    /// # Errors
    /// On I/O failure.
    pub fn commit(self) -> Result<()> {
        let staged = self.tmp.keep();
        let parent = parent_of(&self.dest);
        let mut old = None;
        if self.dest.exists() {
            let aside = tempfile::Builder::new()
                .prefix(".buzz-fork-old-")
                .tempdir_in(&parent)
                .map_err(|e| Error::io("creating a directory in", &parent, e))?
                .keep();
            let target = aside.join("old");
            fs::rename(&self.dest, &target)
                .map_err(|e| Error::io("moving aside", &self.dest, e))?;
            old = Some(aside);
        }
        fs::rename(&staged, &self.dest).map_err(|e| Error::io("renaming into", &self.dest, e))?;
        if let Some(aside) = old {
            remove_dir_if_present(&aside)?;
        }
        Ok(())
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Lists regular files under `dir` recursively, as `/`-separated paths
/// relative to `dir`, sorted, skipping `target/` and `.git/`.
///
/// # Errors
/// On I/O failure.
pub fn list_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("listing", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| Error::io("inspecting", entry.path(), e))?;
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_str()) {
                walk(&entry.path(), &rel, out)?;
            }
        } else {
            out.push(rel);
        }
    }
    Ok(())
}
