//! Throw-away PostgreSQL servers for tests.
//!
//! [`PgServer::start`] runs `initdb` into a private temporary directory and starts a server that
//! listens on a unix socket in that directory and, when asked, on a free TCP port of 127.0.0.1,
//! with TLS on and a certificate the fixture makes (a CA of its own, a server certificate for
//! `localhost` and 127.0.0.1 signed by it). Authentication is `trust` (the server is private to the
//! test). Dropping the value stops the server and deletes its files.
//!
//! [`PgServer::freeze`] sends SIGSTOP to the postmaster and every backend it forked (the kernel
//! still accepts connections and acknowledges packets, so a client sees a server that never
//! answers), [`PgServer::thaw`] SIGCONT; [`PgServer::stop`] and [`PgServer::restart`] stop and
//! start it on the same data, port and socket.
//!
//! The server binaries are found the way `scripts/pg` finds them: the newest
//! `/usr/lib/postgresql/*/bin` with a `pg_ctl`, else `pg_ctl` on `PATH`. The fixture installs
//! nothing; `scripts/pg start`, run once as root, installs the Debian package. PostgreSQL refuses
//! to run as root, so as root the server runs as the package's `postgres` user (via `runuser`), as
//! `scripts/pg` does.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

/// Why a server could not be set up or controlled.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// No PostgreSQL server binaries on this machine.
    #[error(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/pg_ctl and no pg_ctl on PATH): run `scripts/pg start` once as root to install the Debian package 'postgresql', or install it yourself"
    )]
    NoBinaries,
    /// Running as root, but there is no `postgres` user to run the server as.
    #[error(
        "running as root, but there is no 'postgres' user to run the server as (PostgreSQL refuses to run as root)"
    )]
    NoServerUser,
    /// A command failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// What was run.
        command: String,
        /// Its output, or why it could not run.
        detail: String,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Making the test certificates failed.
    #[error("making test certificates: {0}")]
    Certificate(#[from] rcgen::Error),
}

/// How to start a server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Also listen on a free TCP port of 127.0.0.1.
    pub tcp: bool,
    /// Turn TLS on (implies `tcp`: PostgreSQL never uses TLS on a unix socket).
    pub tls: bool,
}

/// The certificate files of a TLS server.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The fixture's CA certificate (PEM): what a client names in `sslrootcert`.
    pub ca_cert: PathBuf,
    /// The server certificate (PEM), for `localhost` and 127.0.0.1.
    pub server_cert: PathBuf,
    /// An unrelated CA (PEM) that did not sign the server's certificate: a wrong `sslrootcert`.
    pub other_ca_cert: PathBuf,
}

/// A running throw-away server; stopped and deleted on drop.
#[derive(Debug)]
pub struct PgServer {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    run_as: Option<String>,
    port: u16,
    tcp: bool,
    tls: Option<TlsFiles>,
    running: bool,
}

impl PgServer {
    /// Starts a server as `options` say.
    ///
    /// # Errors
    /// [`FixtureError::NoBinaries`] when PostgreSQL is not installed, otherwise what failed.
    pub fn start(options: Options) -> Result<Self, FixtureError> {
        let bindir = find_bindir().ok_or(FixtureError::NoBinaries)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let run_as = if root {
            if !user_exists("postgres") {
                return Err(FixtureError::NoServerUser);
            }
            Some("postgres".to_owned())
        } else {
            None
        };
        // Short and reachable by the server's user: /tmp, not a deep target directory (a unix
        // socket path must fit in 107 bytes).
        let dir = tempfile::Builder::new()
            .prefix("pgfx.")
            .tempdir_in("/tmp")
            .map_err(|source| FixtureError::Io {
                what: "create",
                path: PathBuf::from("/tmp"),
                source,
            })?;
        let tcp = options.tcp || options.tls;
        let mut server = Self {
            dir,
            bindir,
            run_as,
            port: 5432,
            tcp,
            tls: None,
            running: false,
        };
        server.chown_to_server(server.dir.path())?;
        set_mode(server.dir.path(), 0o700)?;
        server.port = free_port()?;
        server.run(
            "initdb",
            &[
                "-D",
                &server.data().display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        if options.tls {
            server.tls = Some(server.make_certificates()?);
        }
        server.write_config()?;
        server.pg_ctl_start()?;
        Ok(server)
    }

    /// The unix-socket URL (`postgresql://postgres@/postgres?host=DIR&port=PORT`).
    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@/postgres?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// The TCP URL for host name `host` (`localhost` matches the certificate; `127.0.0.1` is in
    /// it too), with `params` appended as the query; `None` without TCP.
    pub fn tcp_url(&self, host: &str, params: &str) -> Option<String> {
        self.tcp.then(|| {
            let sep = if params.is_empty() { "" } else { "?" };
            format!(
                "postgresql://postgres@{host}:{}/postgres{sep}{params}",
                self.port
            )
        })
    }

    /// The TCP port (also the number in the socket's file name).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The certificate files, when TLS is on.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// Stops the postmaster and every backend with SIGSTOP: connections are accepted by the kernel
    /// and nothing answers.
    ///
    /// # Errors
    /// The postmaster's pid could not be read, or a signal could not be sent.
    pub fn freeze(&self) -> Result<(), FixtureError> {
        let postmaster = self.postmaster_pid()?;
        // The postmaster first, so it forks nothing new while its children are stopped.
        signal(postmaster, libc::SIGSTOP)?;
        for child in children_of(postmaster) {
            signal(child, libc::SIGSTOP)?;
        }
        Ok(())
    }

    /// Resumes what [`PgServer::freeze`] stopped.
    ///
    /// # Errors
    /// As [`PgServer::freeze`].
    pub fn thaw(&self) -> Result<(), FixtureError> {
        let postmaster = self.postmaster_pid()?;
        for child in children_of(postmaster) {
            signal(child, libc::SIGCONT)?;
        }
        signal(postmaster, libc::SIGCONT)
    }

    /// Stops the server (fast shutdown: connections are ended). Its data stays for
    /// [`PgServer::restart`].
    ///
    /// # Errors
    /// `pg_ctl stop` failed.
    pub fn stop(&mut self) -> Result<(), FixtureError> {
        if !self.running {
            return Ok(());
        }
        // A frozen server cannot shut down: resume it first (harmless when running).
        let _ = self.thaw();
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])?;
        self.running = false;
        Ok(())
    }

    /// Stops (if running) and starts the server again on the same data, port and socket.
    ///
    /// # Errors
    /// As [`PgServer::stop`], or the server did not start.
    pub fn restart(&mut self) -> Result<(), FixtureError> {
        self.stop()?;
        self.pg_ctl_start()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl_start(&mut self) -> Result<(), FixtureError> {
        let data = self.data().display().to_string();
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "60", "start"],
        )
        .map_err(|e| match e {
            FixtureError::Command { command, detail } => FixtureError::Command {
                command,
                detail: format!(
                    "{detail}\nserver log:\n{}",
                    fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                ),
            },
            other => other,
        })?;
        self.running = true;
        Ok(())
    }

    /// Appends the fixture's settings to `postgresql.conf`.
    fn write_config(&self) -> Result<(), FixtureError> {
        let conf = self.data().join("postgresql.conf");
        let mut text = fs::read_to_string(&conf).map_err(|source| FixtureError::Io {
            what: "read",
            path: conf.clone(),
            source,
        })?;
        let listen = if self.tcp { "127.0.0.1" } else { "" };
        text.push_str(&format!(
            "\n# pg-fixture\nlisten_addresses = '{listen}'\nport = {}\nunix_socket_directories = '{}'\nunix_socket_permissions = 0700\nfsync = off\nmax_connections = 40\n",
            self.port,
            self.dir.path().display()
        ));
        if let Some(tls) = &self.tls {
            text.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                tls.server_cert.display(),
                self.dir.path().join("server.key").display()
            ));
        }
        fs::write(&conf, text).map_err(|source| FixtureError::Io {
            what: "write",
            path: conf,
            source,
        })
    }

    /// A CA, a server certificate it signs (localhost, 127.0.0.1) and an unrelated CA.
    fn make_certificates(&self) -> Result<TlsFiles, FixtureError> {
        let ca_key = KeyPair::generate()?;
        let ca_settings = ca_params("pg-fixture test CA")?;
        let ca = ca_settings.self_signed(&ca_key)?;
        let other_key = KeyPair::generate()?;
        let other = ca_params("pg-fixture unrelated CA")?.self_signed(&other_key)?;
        let server_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let issuer = rcgen::Issuer::from_params(&ca_settings, &ca_key);
        let server = params.signed_by(&server_key, &issuer)?;
        let files = TlsFiles {
            ca_cert: self.dir.path().join("ca.pem"),
            server_cert: self.dir.path().join("server.pem"),
            other_ca_cert: self.dir.path().join("other-ca.pem"),
        };
        let key_path = self.dir.path().join("server.key");
        for (path, text) in [
            (&files.ca_cert, ca.pem()),
            (&files.other_ca_cert, other.pem()),
            (&files.server_cert, server.pem()),
            (&key_path, server_key.serialize_pem()),
        ] {
            fs::write(path, text).map_err(|source| FixtureError::Io {
                what: "write",
                path: path.clone(),
                source,
            })?;
            self.chown_to_server(path)?;
            set_mode(path, 0o600)?;
        }
        // Clients (the test process) read the CA files.
        for path in [&files.ca_cert, &files.other_ca_cert] {
            set_mode(path, 0o644)?;
        }
        Ok(files)
    }

    fn postmaster_pid(&self) -> Result<i32, FixtureError> {
        let path = self.data().join("postmaster.pid");
        let text = fs::read_to_string(&path).map_err(|source| FixtureError::Io {
            what: "read",
            path: path.clone(),
            source,
        })?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| FixtureError::Command {
                command: "read postmaster.pid".into(),
                detail: format!("no pid in {}", path.display()),
            })
    }

    /// Runs a server binary as the server's user.
    fn run(&self, program: &str, args: &[&str]) -> Result<Output, FixtureError> {
        let binary = self.bindir.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        command.args(args).current_dir("/");
        let shown = format!("{} {}", binary.display(), args.join(" "));
        let output = command.output().map_err(|e| FixtureError::Command {
            command: shown.clone(),
            detail: e.to_string(),
        })?;
        if !output.status.success() {
            return Err(FixtureError::Command {
                command: shown,
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        Ok(output)
    }

    fn chown_to_server(&self, path: &Path) -> Result<(), FixtureError> {
        let Some(user) = &self.run_as else {
            return Ok(());
        };
        let output = Command::new("chown")
            .arg(user)
            .arg(path)
            .output()
            .map_err(|e| FixtureError::Command {
                command: "chown".into(),
                detail: e.to_string(),
            })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(FixtureError::Command {
                command: format!("chown {user} {}", path.display()),
                detail: String::from_utf8_lossy(&output.stderr).into_owned(),
            })
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("pg-fixture: could not stop the server: {e}");
        }
    }
}

fn ca_params(name: &str) -> Result<CertificateParams, FixtureError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    Ok(params)
}

/// The newest `/usr/lib/postgresql/*/bin` with a `pg_ctl`, else the directory of `pg_ctl` on
/// `PATH` (as `scripts/pg` looks).
fn find_bindir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
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
        .and_then(|p| fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

fn user_exists(name: &str) -> bool {
    Command::new("id")
        .arg("-u")
        .arg(name)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), FixtureError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|source| FixtureError::Io {
        what: "chmod",
        path: path.to_path_buf(),
        source,
    })
}

/// A TCP port that was free a moment ago (the server binds it right after).
fn free_port() -> Result<u16, FixtureError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| FixtureError::Io {
            what: "bind",
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| FixtureError::Io {
            what: "bind",
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })
}

/// Processes whose parent is `pid` (from `/proc/*/stat`).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&candidate| parent_of(candidate) == Some(pid))
        .collect()
}

/// The parent pid in `/proc/PID/stat` (the field after the parenthesised command name).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn signal(pid: i32, sig: i32) -> Result<(), FixtureError> {
    // SAFETY: kill has no memory-safety preconditions; the pid is a server process we started.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(FixtureError::Command {
            command: format!("kill -{sig} {pid}"),
            detail: std::io::Error::last_os_error().to_string(),
        })
    }
}
