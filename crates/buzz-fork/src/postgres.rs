//! A throw-away PostgreSQL server for guard tests that need one (the
//! session store's shared-database guard reads `BUZZ_TEST_POSTGRES_URL`).
//!
//! The same steps as `scripts/pg`, in the tool itself so `verify` and `ci`
//! work in any repository root (fixtures and the fork-CI candidate
//! included) and fail with one typed error:
//!
//! 1. find the server binaries: the newest `/usr/lib/postgresql/<major>/bin`
//!    (Debian and Ubuntu, GitHub's hosted runners included), else `pg_ctl`
//!    on `PATH`;
//! 2. none, and running as root: install the Debian package `postgresql`
//!    with `apt-get` (no default cluster, no service); none, and not root:
//!    an error that says what to install;
//! 3. `initdb` a cluster with trust authentication and start it with
//!    `pg_ctl`, listening on a unix socket only (no TCP), in
//!    `target/fork-work/pg/` (or, when the server's user cannot reach it
//!    or its socket path would be too long, a private directory under
//!    `/tmp`, recorded in `target/fork-work/pg.dir`). PostgreSQL refuses to
//!    run as root, so as root it runs as the package's `postgres` user;
//!    otherwise as the caller;
//! 4. [`Server::stop`] (or dropping the [`Server`]) stops it and deletes its
//!    data.
//!
//! Only a server started here is ever stopped here. Its place belongs to
//! the work area, which one command holds at a time (the work-area lock):
//! a server still running there was left by a run that was killed before it
//! could stop it, and [`Server::start`] stops it first.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::error::{Error, Result};

/// The variable the tests read the server's URL from.
pub const URL_VAR: &str = "BUZZ_TEST_POSTGRES_URL";
/// The variable that makes the PostgreSQL tests skip themselves; never
/// passed on to a run that provides the server.
pub const SKIP_VAR: &str = "BUZZ_TEST_SKIP_POSTGRES";

/// Longest base directory whose socket path (`<base>/sock/.s.PGSQL.5432`)
/// fits in a unix socket address (107 bytes) with room to spare.
const MAX_BASE_LEN: usize = 80;

/// Who the server's processes run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAs {
    /// The caller (not root).
    Caller,
    /// The `postgres` user of the Debian package (the caller is root).
    PostgresUser,
}

impl RunAs {
    fn detect() -> RunAs {
        if is_root() {
            RunAs::PostgresUser
        } else {
            RunAs::Caller
        }
    }

    /// `program args…` as the server's user, from `/`.
    fn command(self, program: &Path) -> Command {
        match self {
            RunAs::Caller => Command::new(program),
            RunAs::PostgresUser => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", "postgres", "--"]).arg(program);
                cmd.current_dir("/");
                cmd
            }
        }
    }

    fn label(self) -> String {
        match self {
            RunAs::Caller => std::env::var("USER").unwrap_or_else(|_| "the caller".to_owned()),
            RunAs::PostgresUser => "postgres".to_owned(),
        }
    }
}

/// Whether the process runs as root (the owner of `/proc/self`).
fn is_root() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        false
    }
}

fn failed(step: &str, detail: impl Into<String>) -> Error {
    Error::Postgres {
        step: step.to_owned(),
        detail: detail.into(),
    }
}

fn run(step: &str, mut cmd: Command) -> Result<Output> {
    cmd.stdin(Stdio::null());
    let out = cmd.output().map_err(|e| failed(step, e.to_string()))?;
    if out.status.success() {
        Ok(out)
    } else {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        Err(failed(step, crate::error::first_line(&text)))
    }
}

/// The directory holding the newest installed server's binaries.
fn find_bindir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            let major = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((major, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("pg_ctl"))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// Installs the Debian package (root only): only our own throw-away server
/// is wanted, so no default cluster is created and no service started.
fn install() -> Result<()> {
    crate::ui::step("installing PostgreSQL (Debian package 'postgresql')");
    let conf_dir = Path::new("/etc/postgresql-common");
    std::fs::create_dir_all(conf_dir).map_err(|e| Error::io("creating", conf_dir, e))?;
    let conf = conf_dir.join("createcluster.conf");
    if !conf.exists() {
        std::fs::write(&conf, "create_main_cluster = false\n")
            .map_err(|e| Error::io("writing", &conf, e))?;
    }
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run("apt-get update", update)?;
    let mut install = Command::new("apt-get");
    install
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(["-o", "Dpkg::Options::=--force-confdef"])
        .args(["-o", "Dpkg::Options::=--force-confold"])
        .arg("postgresql");
    run("apt-get install postgresql", install)?;
    Ok(())
}

/// The server binaries, installed first when missing and allowed.
fn binaries(run_as: RunAs) -> Result<PathBuf> {
    if let Some(dir) = find_bindir() {
        return Ok(dir);
    }
    if run_as == RunAs::Caller {
        return Err(failed(
            "finding the server",
            "PostgreSQL is not installed: install the Debian package 'postgresql' \
             (run as root to have it installed), or set BUZZ_TEST_POSTGRES_URL to a running server",
        ));
    }
    install()?;
    find_bindir().ok_or_else(|| {
        failed(
            "finding the server",
            "the package was installed but pg_ctl was not found",
        )
    })
}

/// A server this process started. Stopped, and its data deleted, by
/// [`Server::stop`] or when dropped.
#[derive(Debug)]
pub struct Server {
    bindir: PathBuf,
    run_as: RunAs,
    base: PathBuf,
    pointer: PathBuf,
    url: String,
    running: bool,
}

impl Server {
    /// Starts a server for the work area `work` (`target/fork-work`): see
    /// the module documentation.
    ///
    /// # Errors
    /// [`Error::Postgres`] naming the step that failed; I/O errors.
    pub fn start(work: &Path) -> Result<Server> {
        let run_as = RunAs::detect();
        let bindir = binaries(run_as)?;
        let pointer = work.join("pg.dir");
        stop_left_over(&bindir, run_as, &pointer, &work.join("pg"));
        let base = choose_base(work, run_as)?;
        std::fs::write(&pointer, format!("{}\n", base.display()))
            .map_err(|e| Error::io("writing", &pointer, e))?;
        let mut server = Server {
            bindir,
            run_as,
            url: format!(
                "postgresql://postgres@/postgres?host={}/sock",
                base.display()
            ),
            base,
            pointer,
            running: false,
        };
        server.init_and_start()?;
        Ok(server)
    }

    fn init_and_start(&mut self) -> Result<()> {
        let sock = self.base.join("sock");
        let data = self.base.join("data");
        let mut mkdir = self.run_as.command(Path::new("mkdir"));
        mkdir.arg("-m").arg("700").arg(&sock);
        run("creating the socket directory", mkdir)?;
        crate::ui::step(&format!(
            "initialising a PostgreSQL server in {} (as {})",
            self.base.display(),
            self.run_as.label()
        ));
        let mut initdb = self.run_as.command(&self.bindir.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
            ])
            // Throw-away data: nothing is worth an fsync.
            .arg("--no-sync");
        run("initdb", initdb)?;
        let mut start = self.run_as.command(&self.bindir.join("pg_ctl"));
        start
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(data.join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-c listen_addresses='' -c unix_socket_directories='{}' -c unix_socket_permissions=0700 \
                 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
                sock.display()
            ))
            .arg("start")
            // pg_ctl leaves the server running with our stderr otherwise.
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.running = true;
        let status = start
            .status()
            .map_err(|e| failed("pg_ctl start", e.to_string()))?;
        if !status.success() {
            let log = std::fs::read_to_string(data.join("server.log")).unwrap_or_default();
            return Err(failed(
                "pg_ctl start",
                format!(
                    "the server did not start: {}",
                    log.lines().last().unwrap_or("(no server log)")
                ),
            ));
        }
        Ok(())
    }

    /// The URL the tests connect with (a unix socket, user `postgres`).
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the server keeps its data and socket.
    #[must_use]
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Stops the server and deletes its data (idempotent).
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        stop_server(&self.bindir, self.run_as, &self.base);
        let _ = std::fs::remove_dir_all(&self.base);
        let _ = std::fs::remove_file(&self.pointer);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `pg_ctl stop` of the cluster under `base`, if one runs there.
fn stop_server(bindir: &Path, run_as: RunAs, base: &Path) {
    let data = base.join("data");
    if !data.join("postmaster.pid").is_file() {
        return;
    }
    let mut stop = run_as.command(&bindir.join("pg_ctl"));
    stop.arg("-D")
        .arg(&data)
        .args(["-m", "fast", "-w", "stop"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _ = stop.status();
}

/// Stops and deletes a server a killed run left in this work area.
fn stop_left_over(bindir: &Path, run_as: RunAs, pointer: &Path, default_base: &Path) {
    let recorded = std::fs::read_to_string(pointer)
        .ok()
        .map(|s| PathBuf::from(s.trim()));
    for base in recorded.iter().map(PathBuf::as_path).chain([default_base]) {
        if base.join("data").is_dir() {
            crate::ui::note(&format!(
                "stopping the PostgreSQL server a killed run left in {}",
                base.display()
            ));
            stop_server(bindir, run_as, base);
        }
        let _ = std::fs::remove_dir_all(base);
    }
    let _ = std::fs::remove_file(pointer);
}

/// `work/pg`, or a private directory under `/tmp` when the server's user
/// cannot write there or the socket path would be too long.
fn choose_base(work: &Path, run_as: RunAs) -> Result<PathBuf> {
    let preferred = work.join("pg");
    std::fs::create_dir_all(&preferred).map_err(|e| Error::io("creating", &preferred, e))?;
    let usable =
        preferred.as_os_str().len() <= MAX_BASE_LEN && hand_over(&preferred, run_as).is_ok() && {
            let mut probe = run_as.command(Path::new("test"));
            probe.arg("-w").arg(&preferred);
            probe.status().is_ok_and(|s| s.success())
        };
    if usable {
        return Ok(preferred);
    }
    let _ = std::fs::remove_dir_all(&preferred);
    let dir = tempfile::Builder::new()
        .prefix("buzz-pg.")
        .tempdir_in("/tmp")
        .map_err(|e| Error::io("creating a directory in", "/tmp", e))?
        .keep();
    hand_over(&dir, run_as)?;
    crate::ui::note(&format!(
        "{} is not usable by the server's user {}; using {}",
        preferred.display(),
        run_as.label(),
        dir.display()
    ));
    Ok(dir)
}

/// Makes `dir` private to the server's user.
fn hand_over(dir: &Path, run_as: RunAs) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("setting the permissions of", dir, e))?;
    }
    if run_as == RunAs::PostgresUser {
        let mut chown = Command::new("chown");
        chown.arg("postgres").arg(dir);
        run("handing the directory to the postgres user", chown)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a server accepts connections on the socket of `base`.
    fn accepts(server_bin: &Path, base: &Path) -> bool {
        Command::new(server_bin.join("pg_isready"))
            .arg("-h")
            .arg(base.join("sock"))
            .arg("-U")
            .arg("postgres")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a server and sees it accept connections on its socket; the
    /// run is then "killed" (the server is never stopped), and the next
    /// start in the same work area stops that server first and starts its
    /// own, which stopping removes with its data. Deliberately skipped only
    /// with BUZZ_TEST_SKIP_POSTGRES=1, as the store's PostgreSQL tests are.
    #[test]
    fn starts_and_stops_and_cleans_up_after_a_killed_run() {
        if std::env::var_os(SKIP_VAR).is_some() {
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let left = Server::start(work.path()).unwrap();
        let left_base = left.base().to_path_buf();
        let bindir = left.bindir.clone();
        assert_eq!(
            left.url(),
            format!(
                "postgresql://postgres@/postgres?host={}/sock",
                left_base.display()
            )
        );
        assert!(accepts(&bindir, &left_base));
        std::mem::forget(left);

        let mut server = Server::start(work.path()).unwrap();
        let base = server.base().to_path_buf();
        assert!(accepts(&bindir, &base));
        if left_base != base {
            assert!(!accepts(&bindir, &left_base));
            assert!(!left_base.exists());
        }
        server.stop();
        assert!(!accepts(&bindir, &base));
        assert!(!base.exists());
        assert!(!work.path().join("pg.dir").exists());
    }
}
