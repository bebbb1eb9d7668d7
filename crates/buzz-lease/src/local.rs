//! The host-wide lease: an exclusive lock on a file named for the (agent key, relay), held for
//! the harness's whole run.
//!
//! The operating system holds the lock, not the file: a harness that crashes or is killed
//! releases it with its last descriptor, so a file left behind never keeps the next harness out.
//! The file only tells a refused harness who holds it ([`Holder`]). Where it lives is upstream's
//! choice (its PR #5931): `buzz/buzz-acp-runtime-leases/<agent key>__<sha256(relay)>.lock` under
//! the user's local data directory ([`default_dir`]), the directory readable by its owner only
//! (0700) and the file too (0600).

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The exit status of a harness that did not start because another process on this host serves
/// the same agent on the same relay: `EX_TEMPFAIL` of `sysexits.h` (the agent is being served;
/// starting again once that process is gone works). A supervisor told not to restart on it
/// (systemd's `RestartPreventExitStatus=75`) stops a second copy from looping.
pub const EXIT_HELD_ELSEWHERE: u8 = 75;

/// Below the data directory: where the lease files live (upstream's names).
const LEASES_SUBDIR: [&str; 2] = ["buzz", "buzz-acp-runtime-leases"];

/// What a lease is taken for: one agent key on one relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseName {
    agent: String,
    relay: String,
}

impl LeaseName {
    /// The lease of agent `agent` (its public key, hex) on the relay at `relay`. A trailing `/`
    /// of the URL does not make another relay.
    pub fn new(agent: &str, relay: &str) -> Self {
        Self {
            agent: agent.to_owned(),
            relay: relay.trim_end_matches('/').to_owned(),
        }
    }

    /// The agent's public key.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The relay's URL.
    pub fn relay(&self) -> &str {
        &self.relay
    }

    /// `<agent key>__<sha256(relay), hex>.lock`. A key that is not 64 hex digits (none the
    /// harness derives) is hashed too, so that no name can leave the directory.
    pub fn file_name(&self) -> String {
        let agent = if self.agent.len() == 64 && self.agent.bytes().all(|b| b.is_ascii_hexdigit()) {
            self.agent.to_ascii_lowercase()
        } else {
            sha256_hex(&self.agent)
        };
        format!("{agent}__{}.lock", sha256_hex(&self.relay))
    }
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The leases' directory under the user's local data directory: `$XDG_DATA_HOME` when it is an
/// absolute path (the XDG base directory rule), else `$HOME/.local/share`. `None` without
/// either. `env` reads a variable (`std::env::var_os` in the harness).
pub fn default_dir(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let data = env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            env("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local").join("share"))
        })?;
    Some(LEASES_SUBDIR.iter().fold(data, |dir, part| dir.join(part)))
}

/// Who holds a lease: written into its file once the lock is taken, read by a harness refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// The holding process.
    pub pid: u32,
    /// When it took the lease (unix seconds).
    pub since_unix: u64,
}

/// Why a lease was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another process on this host holds it.
    #[error(
        "another buzz-acp process{} already serves agent {agent} on {relay} (lease {}); \
         stop it first, or run this one with another agent key or relay",
        holder_text(holder),
        path.display()
    )]
    HeldElsewhere {
        /// The agent's public key.
        agent: String,
        /// The relay.
        relay: String,
        /// The lease file.
        path: PathBuf,
        /// Who holds it, when its file says so.
        holder: Option<Holder>,
    },
    /// The lease file or its directory could not be used.
    #[error("cannot take the lease {}: {action}: {source}", path.display())]
    Io {
        /// What failed.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's answer.
        source: io::Error,
    },
    /// The lease across machines cannot be kept with these settings.
    #[error("the agent's lease settings: {0}")]
    Settings(#[from] crate::fenced::SettingsError),
    /// The PostgreSQL store that keeps the lease across machines could not be opened.
    #[error("cannot keep the agent's lease in the session store: {0}")]
    Store(#[from] buzz_session_store::StoreError),
}

fn holder_text(holder: &Option<Holder>) -> String {
    holder.map_or_else(String::new, |h| {
        format!(" (pid {}, since unix time {})", h.pid, h.since_unix)
    })
}

/// A lease held: released when dropped, or by the operating system when the process ends.
#[derive(Debug)]
pub struct LocalLease {
    /// The locked file; the lock lives as long as this descriptor.
    _file: File,
    path: PathBuf,
}

impl LocalLease {
    /// Takes the lease `name` in `dir` (created, 0700, when missing) for `holder`, without
    /// waiting: a lease another process holds is refused at once.
    ///
    /// # Errors
    /// [`LeaseError::HeldElsewhere`] when another process holds it; [`LeaseError::Io`] when the
    /// directory or the file cannot be created, opened or written.
    pub fn take(dir: &Path, name: &LeaseName, holder: Holder) -> Result<Self, LeaseError> {
        create_private_dir(dir)?;
        let path = dir.join(name.file_name());
        let io_error = |action: &'static str| {
            let path = path.clone();
            move |source| LeaseError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = open_private(&path).map_err(io_error("opening the lease file"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LeaseError::HeldElsewhere {
                    agent: name.agent.clone(),
                    relay: name.relay.clone(),
                    holder: read_holder(&mut file),
                    path,
                });
            }
            Err(TryLockError::Error(source)) => {
                return Err(io_error("locking the lease file")(source));
            }
        }
        let text = serde_json::to_string(&holder).map_err(|e| LeaseError::Io {
            action: "writing the holder",
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| file.flush())
            .map_err(io_error("writing the holder"))?;
        Ok(Self { _file: file, path })
    }

    /// The lease file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The holder a lease file names, if it names one readably (a file from an older format, or
/// half written, names none).
fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(4096).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> Result<(), LeaseError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| LeaseError::Io {
            action: "creating the leases' directory",
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> Result<(), LeaseError> {
    std::fs::create_dir_all(dir).map_err(|source| LeaseError::Io {
        action: "creating the leases' directory",
        path: dir.to_path_buf(),
        source,
    })
}

fn open_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

    fn holder(pid: u32) -> Holder {
        Holder {
            pid,
            since_unix: 1_800_000_000,
        }
    }

    #[test]
    fn a_second_taker_of_the_same_lease_is_refused_and_told_who_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let name = LeaseName::new(AGENT, "wss://relay.example/");
        let first = LocalLease::take(dir.path(), &name, holder(41)).unwrap();
        let refused = LocalLease::take(dir.path(), &name, holder(42)).unwrap_err();
        let LeaseError::HeldElsewhere {
            agent,
            relay,
            path,
            holder: by,
        } = &refused
        else {
            panic!("expected HeldElsewhere, got {refused:?}");
        };
        assert_eq!(agent, AGENT);
        assert_eq!(relay, "wss://relay.example");
        assert_eq!(path, first.path());
        assert_eq!(*by, Some(holder(41)));
        let message = refused.to_string();
        assert!(message.contains("pid 41"), "{message}");
        assert!(message.contains(AGENT), "{message}");
    }

    #[test]
    fn a_lease_let_go_is_taken_again_and_names_its_new_holder() {
        let dir = tempfile::tempdir().unwrap();
        let name = LeaseName::new(AGENT, "ws://127.0.0.1:7000");
        drop(LocalLease::take(dir.path(), &name, holder(7)).unwrap());
        let again = LocalLease::take(dir.path(), &name, holder(8)).unwrap();
        let refused = LocalLease::take(dir.path(), &name, holder(9)).unwrap_err();
        assert!(
            matches!(refused, LeaseError::HeldElsewhere { holder: Some(h), .. } if h.pid == 8),
            "{refused:?}"
        );
        drop(again);
    }

    #[test]
    fn other_agents_and_other_relays_have_leases_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let other_agent = "c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5";
        let held = [
            LeaseName::new(AGENT, "wss://a.example"),
            LeaseName::new(AGENT, "wss://b.example"),
            LeaseName::new(other_agent, "wss://a.example"),
        ];
        let leases: Vec<LocalLease> = held
            .iter()
            .map(|name| LocalLease::take(dir.path(), name, holder(1)).unwrap())
            .collect();
        assert_eq!(leases.len(), 3);
        assert_eq!(
            LeaseName::new(AGENT, "wss://a.example/").file_name(),
            held[0].file_name(),
            "a trailing slash is the same relay"
        );
    }

    #[test]
    fn a_file_left_by_a_holder_that_died_keeps_nobody_out() {
        let dir = tempfile::tempdir().unwrap();
        let name = LeaseName::new(AGENT, "wss://relay.example");
        std::fs::write(
            dir.path().join(name.file_name()),
            r#"{"pid":999999,"since_unix":1}"#,
        )
        .unwrap();
        let lease = LocalLease::take(dir.path(), &name, holder(5)).unwrap();
        let written: Holder =
            serde_json::from_str(&std::fs::read_to_string(lease.path()).unwrap()).unwrap();
        assert_eq!(written, holder(5));
    }

    #[test]
    fn an_unreadable_lease_file_still_refuses_without_naming_a_holder() {
        let dir = tempfile::tempdir().unwrap();
        let name = LeaseName::new(AGENT, "wss://relay.example");
        let lease = LocalLease::take(dir.path(), &name, holder(5)).unwrap();
        std::fs::write(lease.path(), "not json").unwrap();
        let refused = LocalLease::take(dir.path(), &name, holder(6)).unwrap_err();
        assert!(
            matches!(refused, LeaseError::HeldElsewhere { holder: None, .. }),
            "{refused:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_directory_and_the_file_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data").join("leases");
        let lease = LocalLease::take(&dir, &LeaseName::new(AGENT, "wss://r"), holder(1)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(lease.path()), 0o600);
    }

    #[test]
    fn a_directory_that_cannot_be_created_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let blocker = root.path().join("a-file");
        std::fs::write(&blocker, "").unwrap();
        let err = LocalLease::take(
            &blocker.join("leases"),
            &LeaseName::new(AGENT, "wss://r"),
            holder(1),
        )
        .unwrap_err();
        assert!(
            matches!(&err, LeaseError::Io { action, .. } if action.contains("directory")),
            "{err:?}"
        );
    }

    #[test]
    fn names_hash_the_relay_and_keep_odd_keys_inside_the_directory() {
        let name = LeaseName::new(AGENT, "wss://relay.example");
        let file = name.file_name();
        assert!(file.starts_with(&format!("{AGENT}__")), "{file}");
        assert_eq!(file.len(), 64 + 2 + 64 + ".lock".len());
        let odd = LeaseName::new("../../etc/passwd", "wss://relay.example").file_name();
        assert!(!odd.contains('/') && !odd.contains(".."), "{odd}");
    }

    #[test]
    fn the_default_directory_follows_the_xdg_rule() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(
            default_dir(env(&[("XDG_DATA_HOME", "/data"), ("HOME", "/home/u")])),
            Some(PathBuf::from("/data/buzz/buzz-acp-runtime-leases"))
        );
        assert_eq!(
            default_dir(env(&[("XDG_DATA_HOME", "relative"), ("HOME", "/home/u")])),
            Some(PathBuf::from(
                "/home/u/.local/share/buzz/buzz-acp-runtime-leases"
            )),
            "a relative XDG_DATA_HOME is ignored"
        );
        assert_eq!(default_dir(env(&[])), None);
    }
}
