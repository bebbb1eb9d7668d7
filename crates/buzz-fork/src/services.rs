//! The external services a run's tests need (`workspace.services` in
//! `patches.json`), provided for the length of one `verify` or `ci`.
//!
//! A guard that needs a service is never skipped silently: for
//! `postgresql`, a server named by `BUZZ_TEST_POSTGRES_URL` is used as it
//! is (and left running); otherwise a throw-away server is started (see
//! [`crate::postgres`]) and stopped when the run ends. Either way the tests
//! get `BUZZ_TEST_POSTGRES_URL`, and never `BUZZ_TEST_SKIP_POSTGRES`.

use std::path::Path;

use crate::error::Result;
use crate::postgres::{self, Server};
use crate::registry::{Registry, Service};

/// Where a run's PostgreSQL server comes from.
#[derive(Debug)]
pub enum Postgres {
    /// `BUZZ_TEST_POSTGRES_URL` names one; it is not ours to stop.
    Given(String),
    /// This run started it; it stops when the run ends.
    Started(Server),
}

impl Postgres {
    /// The URL the tests get.
    #[must_use]
    pub fn url(&self) -> &str {
        match self {
            Postgres::Given(url) => url,
            Postgres::Started(server) => server.url(),
        }
    }
}

/// The services of one run.
#[derive(Debug, Default)]
pub struct Services {
    /// PostgreSQL, when the registry asks for it.
    pub postgres: Option<Postgres>,
}

impl Services {
    /// No service (a registry that asks for none).
    #[must_use]
    pub fn none() -> Services {
        Services::default()
    }

    /// Provides what `registry` asks for; `work` is the work area
    /// (`target/fork-work`) a started server lives in.
    ///
    /// # Errors
    /// A server that cannot be started (see [`Server::start`]).
    pub fn provide(registry: &Registry, work: &Path) -> Result<Services> {
        let mut out = Services::none();
        if registry.workspace.services.contains(&Service::Postgresql) {
            let given = std::env::var(postgres::URL_VAR)
                .ok()
                .filter(|u| !u.trim().is_empty());
            out.postgres = Some(match given {
                Some(url) => Postgres::Given(url),
                None => {
                    std::fs::create_dir_all(work)
                        .map_err(|e| crate::error::Error::io("creating", work, e))?;
                    Postgres::Started(Server::start(work)?)
                }
            });
        }
        Ok(out)
    }

    /// Variables to set for the tests.
    #[must_use]
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.postgres
            .iter()
            .map(|p| (postgres::URL_VAR, p.url().to_owned()))
            .collect()
    }

    /// Variables to remove from the tests' environment.
    #[must_use]
    pub fn removed_env(&self) -> Vec<&'static str> {
        if self.postgres.is_some() {
            vec![postgres::SKIP_VAR]
        } else {
            Vec::new()
        }
    }

    /// One line per service for the report, e.g. `started PostgreSQL at
    /// postgresql://…`.
    #[must_use]
    pub fn describe(&self) -> Vec<String> {
        self.postgres
            .iter()
            .map(|p| match p {
                Postgres::Given(url) => {
                    format!("using PostgreSQL at {url} (BUZZ_TEST_POSTGRES_URL)")
                }
                Postgres::Started(server) => format!(
                    "started PostgreSQL at {} (a throw-away server, stopped when the run ends)",
                    server.url()
                ),
            })
            .collect()
    }
}
