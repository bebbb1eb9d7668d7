//! What every command shares: the repository root with its work-area layout
//! and git ([`Context`]), and how a command ended ([`Outcome`]).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::git::Git;
use crate::registry::Registry;
use crate::workarea::Layout;

/// How a command ended (errors are separate: see [`Error::exit_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything is fine (exit 0).
    Ok,
    /// A check or verification failed (exit 1).
    Failed,
    /// A sync is blocked by a conflict or a failed guard (exit 3).
    Blocked,
    /// Fork CI: the new upstream fails its own tests (exit 4).
    UpstreamBroken,
}

impl Outcome {
    /// The process exit code.
    #[must_use]
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::Failed => 1,
            Outcome::Blocked => 3,
            Outcome::UpstreamBroken => 4,
        }
    }
}

/// What every command needs: the root, its work-area layout and git.
pub struct Context {
    /// Repository root.
    pub root: PathBuf,
    /// Work-area paths.
    pub layout: Layout,
    /// The isolated git environment.
    pub git: Git,
}

impl Context {
    /// Checks git and resolves the root (`--root`, or the git toplevel of the
    /// current directory).
    ///
    /// # Errors
    /// Git missing or too old; the root cannot be found.
    pub fn new(root: Option<&Path>) -> Result<Context> {
        let git = Git::new()?;
        let cwd = std::env::current_dir().map_err(|e| Error::io("reading", ".", e))?;
        let root = match root {
            Some(r) => {
                let r = if r.is_absolute() {
                    r.to_path_buf()
                } else {
                    cwd.join(r)
                };
                std::fs::canonicalize(&r)
                    .ok()
                    .filter(|c| c.is_dir())
                    .ok_or_else(|| Error::RootNotFound {
                        cwd: cwd.clone(),
                        detail: format!("--root {} is not a directory", r.display()),
                    })?
            }
            None => git.toplevel(&cwd).map_err(|e| Error::RootNotFound {
                cwd: cwd.clone(),
                detail: e.to_string(),
            })?,
        };
        Ok(Context {
            layout: Layout::new(&root),
            root,
            git,
        })
    }

    /// Loads `patches.json`.
    ///
    /// # Errors
    /// See [`Registry::load`].
    pub fn registry(&self) -> Result<Registry> {
        Registry::load(&self.root)
    }
}
