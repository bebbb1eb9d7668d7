//! The lease keeper: the shell that drives [`FencedLease`] against the store, beside the
//! harness's event loop.
//!
//! It runs as a task of its own. It carries out the machine's effects: a request for the lease
//! or a renewal goes to the store on a blocking thread (one at a time; the store bounds each call
//! in time), and its answer comes back as an [`Input`] stamped with the moment the request left.
//! When the machine serves, the keeper puts the token into the store's [`Fence`] (every receipt
//! and watermark write carries it) and tells the harness ([`Keeper::serving`]); when it stops,
//! the keeper clears the fence and tells the harness ([`Keeper::lost`]) and the thread's log
//! why. [`PublishGate`] answers, without waiting, whether a reply may leave right now.
//!
//! The event loop never waits on the keeper: it asks the gate (a lock held for a copy) and
//! learns of a lost lease through a watch channel.

use std::sync::{Arc, Mutex, PoisonError};

use buzz_session_store::Fence;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::fenced::{Effect, FencedLease, Input, LeaseSettings, StopReason, Token};

/// What the store answered a request for the lease or a renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The lease is the asker's, with this token.
    Held(Token),
    /// Another harness holds it.
    HeldBy(String),
}

/// Where the lease lives (PostgreSQL: [`crate::pg::PgLeaseStore`]). Calls block, for a bounded
/// time; the keeper makes them from a blocking thread.
pub trait LeaseStore: Send + Sync + 'static {
    /// Why a call failed.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Asks for the lease.
    fn acquire(&self) -> Result<Grant, Self::Error>;
    /// Renews the lease held with `token`.
    fn renew(&self, token: Token) -> Result<Grant, Self::Error>;
    /// Ends the lease held with `token` now (a clean stop), so a standby need not wait.
    fn release(&self, token: Token) -> Result<(), Self::Error>;
    /// Who this harness is, in the store's record and in logs.
    fn holder(&self) -> &str;
}

/// Where the harness stands, as the keeper tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Waiting for the lease; `Some`: why it stopped serving last.
    Standby(Option<StopReason>),
    /// Holding the lease with this token: serve.
    Serving(Token),
}

/// Whether a reply may be published right now: only while the lease's serving time lasts (see
/// [`FencedLease::may_publish`]). Cheap to clone and to ask.
#[derive(Clone, Debug)]
pub struct PublishGate(Option<Arc<Mutex<Option<Instant>>>>);

impl PublishGate {
    /// A gate that is always open: a harness without a lease across machines.
    pub fn open() -> Self {
        Self(None)
    }

    /// Whether a publish attempt may start now.
    pub fn may_publish(&self) -> bool {
        match &self.0 {
            None => true,
            Some(until) => until
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|end| Instant::now() < end),
        }
    }
}

/// The running keeper of one harness's lease.
#[derive(Debug)]
pub struct Keeper {
    status: watch::Receiver<Status>,
    gate: PublishGate,
    holder: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Keeper {
    /// Starts keeping the lease of `store` with `settings` (a standby that asks at once); the
    /// token held goes into `fence`.
    pub fn start<S: LeaseStore>(store: S, settings: LeaseSettings, fence: Fence) -> Self {
        let (status_tx, status) = watch::channel(Status::Standby(None));
        let until = Arc::new(Mutex::new(None));
        let (stop, stopped) = oneshot::channel();
        let holder = store.holder().to_owned();
        crate::metrics::describe();
        let shell = Shell {
            store: Arc::new(store),
            machine: FencedLease::new(settings, Instant::now().into_std()),
            fence,
            until: Arc::clone(&until),
            status: status_tx,
            held: None,
        };
        Self {
            status,
            gate: PublishGate(Some(until)),
            holder,
            stop: Some(stop),
            task: tokio::spawn(shell.run(stopped)),
        }
    }

    /// Waits until this harness holds the lease, and returns its token.
    pub async fn serving(&mut self) -> Token {
        loop {
            if let Status::Serving(token) = *self.status.borrow_and_update() {
                return token;
            }
            if self.status.changed().await.is_err() {
                // The keeper is gone (it never ends on its own): wait forever rather than serve.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until this harness no longer serves with `token`, and returns why: the lease was
    /// lost, even if it was granted again since (a new token: what ran under the old one must
    /// start over).
    pub async fn lost(&mut self, token: Token) -> StopReason {
        loop {
            match &*self.status.borrow_and_update() {
                Status::Serving(now) if *now == token => {}
                Status::Serving(_) => {
                    return StopReason::TakenOver {
                        by: "a later grant".to_owned(),
                    };
                }
                Status::Standby(reason) => return reason.clone().unwrap_or(StopReason::Expired),
            }
            if self.status.changed().await.is_err() {
                return StopReason::Expired;
            }
        }
    }

    /// Where the keeper stands now.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// The gate the harness asks before each publish.
    pub fn gate(&self) -> PublishGate {
        self.gate.clone()
    }

    /// Who this harness is in the store's record.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Stops keeping the lease and releases it if held (a clean stop: a standby takes over
    /// without waiting for it to expire).
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A request on its way to the store.
enum Asked {
    Acquire,
    Renew(Token),
}

struct Shell<S: LeaseStore> {
    store: Arc<S>,
    machine: FencedLease,
    fence: Fence,
    until: Arc<Mutex<Option<Instant>>>,
    status: watch::Sender<Status>,
    /// The token held, to release at a clean stop.
    held: Option<Token>,
}

type Answer<E> = (Asked, std::time::Instant, Result<Grant, E>);

impl<S: LeaseStore> Shell<S> {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        let mut request: Option<JoinHandle<Answer<S::Error>>> = None;
        loop {
            while let Some(effect) = self.machine.poll_effect() {
                match effect {
                    Effect::Acquire => request = Some(self.ask(Asked::Acquire)),
                    Effect::Renew(token) => request = Some(self.ask(Asked::Renew(token))),
                    Effect::Serve(token) => self.serve(token),
                    Effect::StopServing(reason) => self.stop_serving(reason),
                }
            }
            let serving_until = self.machine.serving_until().map(Instant::from_std);
            *self.until.lock().unwrap_or_else(PoisonError::into_inner) = serving_until;
            let wake = self.machine.poll_timeout().map(Instant::from_std);
            tokio::select! {
                answer = answered(&mut request) => {
                    request = None;
                    let input = match answer {
                        Ok(answer) => self.input(answer),
                        Err(e) => {
                            tracing::warn!(error = %e, "the lease request's thread failed");
                            Input::StoreFailed
                        }
                    };
                    self.machine.handle(input, Instant::now().into_std());
                }
                () = sleep_until(wake) => self.machine.handle_timeout(Instant::now().into_std()),
                _ = &mut stopped => break,
            }
        }
        self.fence.release();
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
        if let Some(token) = self.held.take() {
            let store = Arc::clone(&self.store);
            match tokio::task::spawn_blocking(move || store.release(token)).await {
                Ok(Ok(())) => tracing::info!(token = token.0, "released the agent's lease"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release the agent's lease; it expires on its own")
                }
                Err(e) => tracing::warn!(error = %e, "the lease release's thread failed"),
            }
        }
    }

    /// Sends a request from a blocking thread, stamped with the moment it left.
    fn ask(&self, asked: Asked) -> JoinHandle<Answer<S::Error>> {
        let store = Arc::clone(&self.store);
        let asked_at = Instant::now().into_std();
        tokio::task::spawn_blocking(move || {
            let answer = match asked {
                Asked::Acquire => store.acquire(),
                Asked::Renew(token) => store.renew(token),
            };
            (asked, asked_at, answer)
        })
    }

    fn input(&self, (asked, asked_at, answer): Answer<S::Error>) -> Input {
        match (asked, answer) {
            (Asked::Acquire, Ok(Grant::Held(token))) => Input::Granted { token, asked_at },
            (Asked::Renew(_), Ok(Grant::Held(token))) => Input::Confirmed { token, asked_at },
            (_, Ok(Grant::HeldBy(holder))) => Input::HeldByAnother { holder },
            (_, Err(e)) => {
                tracing::warn!(error = %e, "the lease store did not answer");
                Input::StoreFailed
            }
        }
    }

    fn serve(&mut self, token: Token) {
        self.fence.hold(token.0);
        self.held = Some(token);
        tracing::info!(holder = %self.store.holder(), token = token.0, "holding the agent's lease: serving");
        crate::metrics::serving(token);
        self.status.send_replace(Status::Serving(token));
    }

    fn stop_serving(&mut self, reason: StopReason) {
        self.fence.release();
        self.held = None;
        match &reason {
            StopReason::Expired => tracing::error!(
                holder = %self.store.holder(),
                "stopped serving: the agent's lease could not be renewed in time (the store was out of reach, or this process was stopped); nothing more is answered or written until it is held again"
            ),
            StopReason::TakenOver { by } => tracing::error!(
                holder = %self.store.holder(),
                by = %by,
                "stopped serving: another harness holds the agent's lease now"
            ),
        }
        crate::metrics::stopped(&reason);
        self.status.send_replace(Status::Standby(Some(reason)));
    }
}

/// The answer of the request on its way (never, while none is).
async fn answered<T>(request: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match request {
        Some(handle) => handle.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The database's lease row, with the same rules as `buzz_receipt_leases`, and a switch that
    /// cuts one harness off from it (fault injection).
    #[derive(Default)]
    struct Row {
        holder: Option<String>,
        token: u64,
        expires: Option<Instant>,
        cut_off: Vec<String>,
        released: Vec<(String, u64)>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("unreachable")]
    struct Unreachable;

    struct Store {
        row: Arc<Mutex<Row>>,
        holder: String,
        lifetime: Duration,
    }

    impl Store {
        fn row(&self) -> Result<std::sync::MutexGuard<'_, Row>, Unreachable> {
            let row = self.row.lock().unwrap();
            if row.cut_off.contains(&self.holder) {
                return Err(Unreachable);
            }
            Ok(row)
        }
    }

    impl LeaseStore for Store {
        type Error = Unreachable;

        fn acquire(&self) -> Result<Grant, Unreachable> {
            let mut row = self.row()?;
            let now = Instant::now();
            let free = row.expires.is_none_or(|end| end <= now);
            if free || row.holder.as_deref() == Some(&self.holder) {
                row.holder = Some(self.holder.clone());
                row.token += 1;
                row.expires = Some(now + self.lifetime);
                return Ok(Grant::Held(Token(row.token)));
            }
            Ok(Grant::HeldBy(row.holder.clone().unwrap_or_default()))
        }

        fn renew(&self, token: Token) -> Result<Grant, Unreachable> {
            let mut row = self.row()?;
            if row.holder.as_deref() == Some(&self.holder) && row.token == token.0 {
                row.expires = Some(Instant::now() + self.lifetime);
                return Ok(Grant::Held(token));
            }
            Ok(Grant::HeldBy(row.holder.clone().unwrap_or_default()))
        }

        fn release(&self, token: Token) -> Result<(), Unreachable> {
            let mut row = self.row()?;
            if row.holder.as_deref() == Some(&self.holder) && row.token == token.0 {
                row.expires = Some(Instant::now());
            }
            row.released.push((self.holder.clone(), token.0));
            Ok(())
        }

        fn holder(&self) -> &str {
            &self.holder
        }
    }

    fn keeper(row: &Arc<Mutex<Row>>, holder: &str) -> (Keeper, Fence) {
        let settings = LeaseSettings::default().validate().unwrap();
        let fence = Fence::new();
        let store = Store {
            row: Arc::clone(row),
            holder: holder.to_owned(),
            lifetime: settings.lifetime,
        };
        (Keeper::start(store, settings, fence.clone()), fence)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_asker_serves_and_the_other_waits_until_it_releases() {
        let row = Arc::new(Mutex::new(Row::default()));
        let (mut a, fence_a) = keeper(&row, "a");
        assert_eq!(a.serving().await, Token(1));
        assert_eq!(fence_a.token(), Some(1));
        assert!(a.gate().may_publish());

        let (mut b, fence_b) = keeper(&row, "b");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            b.status(),
            Status::Standby(None),
            "A renews; B keeps waiting"
        );
        assert!(!b.gate().may_publish());
        assert_eq!(fence_b.token(), None);
        assert_eq!(a.status(), Status::Serving(Token(1)));

        a.release().await;
        assert_eq!(fence_a.token(), None);
        assert_eq!(row.lock().unwrap().released, [("a".to_owned(), 1)]);
        let started = Instant::now();
        assert_eq!(b.serving().await, Token(2));
        assert!(
            started.elapsed() <= LeaseSettings::default().retry_every,
            "a released lease is taken at B's next ask, not when it would have expired"
        );
        assert_eq!(fence_b.token(), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_cut_off_stops_serving_before_its_lease_ends_and_a_standby_takes_over() {
        let row = Arc::new(Mutex::new(Row::default()));
        let (mut a, fence_a) = keeper(&row, "a");
        assert_eq!(a.serving().await, Token(1));
        let (mut b, _fence_b) = keeper(&row, "b");

        row.lock().unwrap().cut_off.push("a".to_owned());
        let cut = Instant::now();
        assert_eq!(a.lost(Token(1)).await, StopReason::Expired);
        let database_end = row.lock().unwrap().expires.unwrap();
        assert!(
            Instant::now() + LeaseSettings::default().margin <= database_end,
            "A stops serving a margin before the database's end of its lease"
        );
        assert!(!a.gate().may_publish(), "no reply leaves after that");
        assert_eq!(fence_a.token(), None, "and no write carries its token");
        assert!(cut.elapsed() < LeaseSettings::default().lifetime);

        assert_eq!(b.serving().await, Token(2));
        assert!(
            Instant::now() >= database_end,
            "B is granted only after A's lease ended"
        );

        // A reaches the database again: it stays a standby while B holds the lease.
        row.lock().unwrap().cut_off.clear();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(matches!(a.status(), Status::Standby(_)));
        assert_eq!(b.status(), Status::Serving(Token(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_whose_renewal_finds_another_token_stops_at_once() {
        let row = Arc::new(Mutex::new(Row::default()));
        let (mut a, _fence_a) = keeper(&row, "a");
        assert_eq!(a.serving().await, Token(1));
        {
            // An operator (or a clock gone wrong) gave the lease to another meanwhile.
            let mut row = row.lock().unwrap();
            row.holder = Some("b".to_owned());
            row.token = 2;
        }
        assert_eq!(
            a.lost(Token(1)).await,
            StopReason::TakenOver { by: "b".to_owned() }
        );
        assert!(!a.gate().may_publish());
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_under_an_old_token_is_over_even_if_the_lease_came_back() {
        let row = Arc::new(Mutex::new(Row::default()));
        let (mut a, _fence) = keeper(&row, "a");
        assert_eq!(a.serving().await, Token(1));
        // Cut off long enough to lose the lease, then back: granted again, with a new token.
        row.lock().unwrap().cut_off.push("a".to_owned());
        tokio::time::sleep(LeaseSettings::default().lifetime).await;
        row.lock().unwrap().cut_off.clear();
        assert_eq!(a.serving().await, Token(2));
        assert_eq!(
            a.lost(Token(1)).await,
            StopReason::TakenOver {
                by: "a later grant".to_owned()
            },
            "what ran under token 1 does not go on under token 2"
        );
    }

    #[test]
    fn an_open_gate_always_lets_replies_out() {
        assert!(PublishGate::open().may_publish());
    }
}
