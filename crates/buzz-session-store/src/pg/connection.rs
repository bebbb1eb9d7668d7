//! The connection thread: how every call is bounded in time, and how the connection is made,
//! lost and made again.
//!
//! The connection lives on a thread of its own, which runs `tokio-postgres` on a private
//! current-thread runtime (the harness's runtime is never entered). A caller sends a [`Job`]
//! and waits for its answer. Every job runs under a client-side deadline
//! ([`PgOptions::call_timeout`](super::PgOptions::call_timeout)): when it passes (a frozen or unreachable server, whose kernel
//! may still acknowledge every packet), the connection is dropped, the caller gets
//! [`StoreError::Unavailable`] (a write may or may not have happened), and the next call connects
//! afresh. A job whose caller has already given up is never started. So neither the caller nor
//! the connection thread waits on the server for longer than the deadline. Server-side
//! `statement_timeout` and `lock_timeout` (5 s) bound what the server itself waits for.
//!
//! [`Link`] is the thread's state: the configuration, the live connection if there is one, and
//! the store's scope id. Its [`Link::read`] and [`Link::write`] hand a job a query context
//! ([`Db`]); `write` retries a transaction the server rolled back as a serialization failure or
//! deadlock.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, Statement, Transaction};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::sql::{Db, pg_err};
use crate::error::StoreError;
use crate::fence::Fence;
use crate::key::StoreScope;
use crate::pg_tls;
use crate::schema::Access;

/// Connection attempt limit when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-side limits per statement and per lock wait.
const STATEMENT_TIMEOUT_MS: u32 = 5_000;

/// How much longer than a job's deadline its caller waits for the answer (the job ends by its
/// deadline; this only covers handing the answer over).
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Attempts for a transaction the server rolled back as a serialization failure or deadlock.
const MAX_ATTEMPTS: usize = 3;

/// The body of a job: runs on the connection thread's runtime within the time left.
type Work = Box<dyn FnOnce(&Runtime, &mut Link, Duration) + Send>;

/// A unit of work for the connection thread, with the instant its caller gives up.
pub(super) struct Job {
    expires: Instant,
    run: Work,
}

/// The handle to the connection thread: where jobs go, and the thread to join when the store is
/// dropped.
pub(super) struct Connection {
    /// Server and database without credentials, for errors.
    target: String,
    /// To the connection thread; `None` only while dropping.
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<thread::JoinHandle<()>>,
}

/// What the connection thread found when it opened the store.
pub(super) struct Opened {
    pub(super) connection: Connection,
    /// Server and database without credentials, for logs and errors.
    pub(super) target: String,
    /// The schema revision the database is at.
    pub(super) revision: i64,
}

impl Connection {
    /// Starts the connection thread and waits for it to open the store (connect, then
    /// `Link::initialise`) within `deadline`. The thread then serves jobs until the connection
    /// is dropped.
    pub(super) fn start(
        url: &str,
        scope: &StoreScope,
        access: Access,
        deadline: Duration,
        fence: Option<Fence>,
    ) -> Result<Opened, StoreError> {
        let target_spec = pg_tls::parse_url(url)?;
        let tls = pg_tls::connector(&target_spec)?;
        let mut config = target_spec.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("buzz-acp session store");
        }
        let target = describe(&config);
        let unavailable = |reason: String| StoreError::Unavailable {
            target: target.clone(),
            op: "open",
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| unavailable(format!("cannot start the connection runtime: {e}")))?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let mut link = Link {
            config,
            tls,
            target: target.clone(),
            conn: None,
            scope_id: None,
            access,
            revision: 0,
            fence,
        };
        let thread_scope = scope.clone();
        let worker = thread::Builder::new()
            .name("buzz-receipts-pg".into())
            .spawn(move || {
                let ready = runtime.block_on(async {
                    match tokio::time::timeout(deadline, link.initialise(&thread_scope)).await {
                        Ok(answer) => answer,
                        Err(_) => Err(StoreError::Unavailable {
                            target: link.target.clone(),
                            op: "open",
                            reason: format!("no answer within {deadline:?}"),
                        }),
                    }
                });
                let ok = ready.is_ok();
                // The opener may have given up waiting; then there is nobody to serve.
                if ready_tx.send(ready).is_err() || !ok {
                    return;
                }
                for job in inbox {
                    let left = job.expires.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // Its caller has given up: an operation nobody waits for never starts.
                        continue;
                    }
                    (job.run)(&runtime, &mut link, left);
                }
            })
            .map_err(|source| {
                unavailable(format!("cannot start the connection thread: {source}"))
            })?;
        let opening = match ready_rx.recv_timeout(deadline + ANSWER_GRACE) {
            Ok(Ok(opening)) => opening,
            Ok(Err(e)) => {
                // The thread has returned already.
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => return Err(unavailable(format!("no answer within {deadline:?}"))),
        };
        Ok(Opened {
            connection: Connection {
                target: target.clone(),
                jobs: Some(jobs),
                worker: Some(worker),
            },
            target,
            revision: opening.revision,
        })
    }

    /// Runs `work` on the connection thread within `deadline` and waits for its answer.
    pub(super) fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        deadline: Duration,
        work: impl AsyncFnOnce(&mut Link) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let unavailable = |reason: String| StoreError::Unavailable {
            target: self.target.clone(),
            op,
            reason,
        };
        let (answer_tx, answer_rx) = mpsc::sync_channel(1);
        let expires = Instant::now() + deadline;
        let run = Box::new(move |runtime: &Runtime, link: &mut Link, left: Duration| {
            let answer = runtime.block_on(async {
                match tokio::time::timeout(left, work(link)).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        link.reset();
                        Err(StoreError::Unavailable {
                            target: link.target.clone(),
                            op,
                            reason: format!(
                                "no answer within {deadline:?}; the connection was dropped, and a write may or may not have happened"
                            ),
                        })
                    }
                }
            });
            // The caller may have given up; its answer is then dropped.
            let _ = answer_tx.send(answer);
        });
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| unavailable("the store is closing".into()))?;
        jobs.send(Job { expires, run })
            .map_err(|_| unavailable("the connection thread has stopped".into()))?;
        match answer_rx.recv_timeout(deadline + ANSWER_GRACE) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(unavailable(format!(
                "no answer within {deadline:?} (the connection is busy with an earlier call); this call was not started"
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(unavailable(
                "no answer: the call was not started before its deadline, or the connection thread stopped".into(),
            )),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Closing the job channel ends the thread after the job in progress (bounded by its
        // deadline); joining closes the connection cleanly.
        self.jobs = None;
        if let Some(worker) = self.worker.take()
            && worker.join().is_err()
        {
            tracing::warn!(target = %self.target, "session store: the PostgreSQL connection thread panicked");
        }
    }
}

/// A live connection: the client, the task driving its socket, and its prepared statements.
struct Conn {
    client: Client,
    task: JoinHandle<()>,
    statements: HashMap<&'static str, Statement>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Closes the socket even when the server never answers.
        self.task.abort();
    }
}

/// The connection thread's state.
pub(super) struct Link {
    config: Config,
    tls: MakeRustlsConnect,
    pub(super) target: String,
    /// `None` until connected, and again after the connection is lost or dropped.
    conn: Option<Conn>,
    /// `buzz_receipt_scopes.id` of the store's scope (`None`: a read-only store whose scope has
    /// never written).
    pub(super) scope_id: Option<i64>,
    pub(super) access: Access,
    pub(super) revision: i64,
    /// The lease token every receipt write must carry (see [`crate::fence`]).
    fence: Option<Fence>,
}

/// Whether a transaction checks the lease first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fencing {
    /// A receipt or watermark write: only while this harness holds the lease.
    Checked,
    /// Opening the store, or the lease's own rows.
    Exempt,
}

impl Link {
    /// Drops the connection (a timed-out call): its socket is closed, the next call reconnects.
    fn reset(&mut self) {
        self.conn = None;
    }

    /// The live client, connecting (again) if needed.
    async fn connect(&mut self, op: &'static str) -> Result<&mut Conn, StoreError> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let (client, connection) = self
                .config
                .connect(self.tls.clone())
                .await
                .map_err(pg_err(&self.target, op))?;
            let target = self.target.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(target = %target, error = %e, "session store: PostgreSQL connection ended");
                }
            });
            let read_only = match self.access {
                Access::ReadOnly => "SET default_transaction_read_only = on;",
                Access::ReadWrite => "",
            };
            client
                .batch_execute(&format!(
                    "SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
                     SET lock_timeout = {STATEMENT_TIMEOUT_MS}; \
                     SET idle_in_transaction_session_timeout = {}; {read_only}",
                    STATEMENT_TIMEOUT_MS * 2
                ))
                .await
                .map_err(pg_err(&self.target, op))?;
            self.conn = Some(Conn {
                client,
                task,
                statements: HashMap::new(),
            });
        }
        self.conn.as_mut().ok_or_else(|| StoreError::Unavailable {
            target: self.target.clone(),
            op,
            reason: "not connected".into(),
        })
    }

    /// Runs `body` in a transaction and commits it, retrying what the server rolled back as a
    /// serialization failure or deadlock. With a fence, only while this harness holds the lease.
    pub(super) async fn write<T>(
        &mut self,
        op: &'static str,
        body: impl AsyncFnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.transaction(op, Fencing::Checked, body).await
    }

    /// [`Link::write`] for what the fence does not cover: opening the store, and the lease's
    /// own row.
    pub(super) async fn write_exempt<T>(
        &mut self,
        op: &'static str,
        body: impl AsyncFnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.transaction(op, Fencing::Exempt, body).await
    }

    async fn transaction<T>(
        &mut self,
        op: &'static str,
        fencing: Fencing,
        mut body: impl AsyncFnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let fence = match fencing {
            Fencing::Checked => self.fence.clone(),
            Fencing::Exempt => None,
        };
        let mut attempt = 1;
        loop {
            let scope_id = self.scope_id;
            let target = self.target.clone();
            let conn = self.connect(op).await?;
            let tx = conn
                .client
                .transaction()
                .await
                .map_err(pg_err(&target, op))?;
            let mut db = Db {
                client: &tx,
                statements: &mut conn.statements,
                target: &target,
                op,
                scope_id,
            };
            let result = match &fence {
                Some(fence) => match db.check_lease(fence.token()).await {
                    Ok(()) => body(&mut db).await,
                    Err(e) => Err(e),
                },
                None => body(&mut db).await,
            };
            let result = match result {
                Ok(out) => tx.commit().await.map(|()| out).map_err(pg_err(&target, op)),
                Err(e) => Err(e),
            };
            match result {
                Err(StoreError::Postgres { ref source, .. })
                    if is_retryable(source) && attempt < MAX_ATTEMPTS =>
                {
                    tracing::debug!(target = %target, op, attempt, error = %source, "session store: retrying a rolled-back transaction");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Runs a read outside a transaction.
    pub(super) async fn read<T>(
        &mut self,
        op: &'static str,
        body: impl AsyncFnOnce(&mut Db<'_, Client>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let scope_id = self.scope_id;
        let target = self.target.clone();
        let conn = self.connect(op).await?;
        let mut db = Db {
            client: &conn.client,
            statements: &mut conn.statements,
            target: &target,
            op,
            scope_id,
        };
        body(&mut db).await
    }
}

/// Whether the server rolled the transaction back in a way that is safe to retry.
fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// `user@host[,host]:port/dbname`, never the password.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("")
    )
}
