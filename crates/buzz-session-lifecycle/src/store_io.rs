//! The store worker: receipt I/O beside the event loop, never on it.
//!
//! The event loop hands the worker store operations and goes on; each operation runs on a
//! blocking thread (`tokio::task::spawn_blocking`) and its result comes back through a channel
//! the loop polls (and `select!`s on). The rules:
//!
//! * **Writes are ordered per scope and bounded in memory.** They wait in a [`WriteQueue`] (at
//!   most one entry per scope, channel-wide removals in their place) and go to the store one at a
//!   time. A write that fails goes back in front and is retried with a growing pause (1 s doubling
//!   to 30 s): that is the replay after an outage. Every write is conditional on what the
//!   lifecycle believed when it decided, so a replay never overwrites a receipt someone else
//!   wrote meanwhile.
//! * **Reads never wait behind another scope's writes** (only behind the same scope's, so they
//!   see them), and the lifecycle bounds how long a turn waits for one.
//! * **The store may be down at startup**: it is opened in the background and retried; the
//!   harness serves meanwhile. Health is logged on transitions (down / up), not per call.
//!
//! Under tokio's paused clock (tests) a blocking task keeps the clock from auto-advancing while
//! it runs, so a real store call is never overtaken by virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use buzz_session_store::{Healing, PermanentReason, SessionRecord, StoreError, UnixMillis};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Moment;
pub use crate::decision::OpKind;
use crate::receipt_view::Expect;
use crate::receipts::{Condition, Receipts, Written, store_key};
use crate::scope::Scope;
use crate::write_queue::{Entry, ReceiptChange, Write, WriteQueue};

/// A lifecycle write condition in the store's time.
fn condition(expect: Option<&Expect>, to_store_time: impl Fn(Moment) -> UnixMillis) -> Condition {
    expect.map(|expect| match expect {
        Expect::Absent => buzz_session_store::Expect::Absent,
        Expect::Session(id) => buzz_session_store::Expect::Session(id.clone()),
        Expect::UnchangedSince(at) => {
            buzz_session_store::Expect::NotWrittenSince(to_store_time(*at))
        }
    })
}

/// Opens the store (called on a blocking thread, again after each failure).
pub type Opener = Arc<dyn Fn() -> Result<Arc<dyn Receipts>, StoreError> + Send + Sync>;

/// Longest pause between two attempts at a failing write or open.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// What the worker tells the driver.
#[allow(clippy::large_enum_variant)] // a receipt (with `continuity`) is large; moved once per turn or store call, never kept in bulk
#[derive(Debug)]
pub enum IoEvent<K> {
    /// A read answered.
    Read(K, Result<Option<SessionRecord>, StoreError>),
    /// A scope write was refused: the store holds something else than the lifecycle believed.
    Conflict {
        /// The scope.
        scope: K,
        /// What was written ([`OpKind::Put`], [`OpKind::Commit`] or [`OpKind::Remove`]).
        op: OpKind,
        /// The session the store names now.
        stored: Option<String>,
    },
    /// An operator forgot the scope's receipt after the lifecycle decided a write for it.
    Forgotten(K),
    /// The store became unavailable (the first failure after it worked, or at startup), or the
    /// kind of its failure changed.
    Down {
        /// What failed.
        error: String,
        /// The store refuses this harness for a reason that lasts until someone fixes its
        /// configuration (a password rotated under a running harness, a certificate replaced):
        /// the harness goes on serving without receipts, and says so loudly.
        refusal: Option<PermanentReason>,
    },
    /// The store answers again (or for the first time).
    Up {
        /// Where the receipts live.
        location: String,
    },
    /// An operation on the store finished (one per open attempt, read and write attempt).
    Finished(Operation),
}

/// One finished store operation: what it was, how it ended and how long the store took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operation {
    /// What was done.
    pub op: OpKind,
    /// How it ended.
    pub outcome: OpOutcome,
    /// How long the store call took (wall time on its blocking thread).
    pub elapsed: Duration,
}

/// Where a scope's read stands in the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadState {
    /// Waiting for the scope's queued writes (it must see them) or for the store to open.
    Waiting,
    /// Running on a blocking thread.
    Running,
    /// Running, and asked for again since it started: its answer predates what was asked, so it
    /// is dropped and the scope is read again.
    RunningAskedAgain,
}

/// How a store operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpOutcome {
    /// Done (a replayed write that finds its own result stored counts as done).
    Ok,
    /// A conditional write was refused: the store held something else.
    Conflict,
    /// A write found the scope forgotten by an operator.
    Forgotten,
    /// The store failed (a write is retried, a read given up on).
    Error,
}

impl OpKind {
    /// The kind of a queued write.
    fn of(entry: &Entry<impl Sized>) -> OpKind {
        match entry {
            Entry::Scope(_, write) => match write.change {
                ReceiptChange::Put(_) => OpKind::Put,
                ReceiptChange::Commit(_) => OpKind::Commit,
                ReceiptChange::Remove => OpKind::Remove,
            },
            Entry::Channel(..) => OpKind::RemoveChannel,
        }
    }
}

/// A finished operation and how long the store took.
enum Done<K> {
    Opened(Result<Arc<dyn Receipts>, StoreError>, Duration),
    Read(K, Result<Option<SessionRecord>, StoreError>, Duration),
    Wrote(Entry<K>, Result<Written, StoreError>, Duration),
}

/// Runs a store call and measures it.
fn timed<T>(call: impl FnOnce() -> T) -> (T, Duration) {
    let started = std::time::Instant::now();
    let result = call();
    (result, started.elapsed())
}

enum Backend {
    /// Not open yet; the next attempt is due at `at` (or runs now, `opening`).
    Closed {
        at: Instant,
        pause: Duration,
        opening: bool,
    },
    Open(Arc<dyn Receipts>),
}

/// The store's health as the worker last saw it; reported on transitions only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Unknown,
    Up,
    /// Its last operation failed; `refusal` when the failure lasts until someone fixes the
    /// configuration ([`Healing::Permanent`]).
    Down {
        refusal: Option<PermanentReason>,
    },
}

/// The store worker of one lifecycle.
pub struct StoreIo<K> {
    opener: Opener,
    backend: Backend,
    queue: WriteQueue<K>,
    writing: Option<Entry<K>>,
    write_due: Instant,
    write_pause: Duration,
    /// Reads waiting for their scope's writes, or in flight.
    reads: BTreeMap<K, ReadState>,
    done_tx: mpsc::UnboundedSender<Done<K>>,
    done_rx: mpsc::UnboundedReceiver<Done<K>>,
    health: Health,
    /// The lifecycle clock's origin (moments are measured from it).
    origin: Instant,
    events: Vec<IoEvent<K>>,
}

impl<K> std::fmt::Debug for StoreIo<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreIo")
            .field("health", &self.health)
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl<K: Scope + Send + Sync + 'static> StoreIo<K> {
    /// A worker that opens its store with `opener`, in the background, at once. `origin` is the
    /// lifecycle clock's origin.
    pub fn new(opener: Opener, origin: Instant) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let mut io = StoreIo {
            opener,
            backend: Backend::Closed {
                at: origin,
                pause: Duration::from_secs(1),
                opening: false,
            },
            queue: WriteQueue::default(),
            writing: None,
            write_due: origin,
            write_pause: Duration::ZERO,
            reads: BTreeMap::new(),
            done_tx,
            done_rx,
            health: Health::Unknown,
            origin,
            events: Vec::new(),
        };
        io.pump();
        io
    }

    /// Queues a read of `scope`'s receipt. A read of the scope already running was started
    /// before this one was asked for (and before the writes decided since): it is not the
    /// answer, the scope is read again after it.
    pub fn read(&mut self, scope: K) {
        let state = match self.reads.get(&scope) {
            Some(ReadState::Running | ReadState::RunningAskedAgain) => ReadState::RunningAskedAgain,
            Some(ReadState::Waiting) | None => ReadState::Waiting,
        };
        self.reads.insert(scope, state);
        self.pump();
    }

    /// Queues a write for `scope`.
    pub fn write(&mut self, scope: K, write: Write) {
        self.queue.push(scope, write);
        self.pump();
    }

    /// Queues the removal of every receipt of `channel`, decided at `decided`.
    pub fn remove_channel(&mut self, channel: String, decided: Moment) {
        self.queue.push_channel(channel, decided);
        self.pump();
    }

    /// Takes in finished operations without waiting, starts what can start, and returns what
    /// happened.
    pub fn poll(&mut self) -> Vec<IoEvent<K>> {
        while let Ok(done) = self.done_rx.try_recv() {
            self.finish(done);
        }
        self.pump();
        std::mem::take(&mut self.events)
    }

    /// Waits until an operation finishes (for the event loop's `select!`), then behaves like
    /// [`StoreIo::poll`].
    pub async fn next(&mut self) -> Vec<IoEvent<K>> {
        if let Some(done) = self.done_rx.recv().await {
            self.finish(done);
        }
        self.poll()
    }

    /// Operations running on blocking threads now: the open, reads, the write. A test under
    /// tokio's paused clock lets the worker settle by taking in results until this is zero.
    pub fn in_flight(&self) -> usize {
        let opening = matches!(self.backend, Backend::Closed { opening: true, .. });
        let reads = self
            .reads
            .values()
            .filter(|state| **state != ReadState::Waiting)
            .count();
        usize::from(opening) + reads + usize::from(self.writing.is_some())
    }

    /// Whether the store is known to be down: its last operation (or open) failed, and none has
    /// succeeded since.
    pub fn is_down(&self) -> bool {
        matches!(self.health, Health::Down { .. })
    }

    /// Writes waiting or in flight.
    pub fn unwritten(&self) -> usize {
        self.queue.len() + usize::from(self.writing.is_some())
    }

    /// Waits up to `within` for every queued write to reach the store (at shutdown). Returns how
    /// many did not.
    pub async fn flush(&mut self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        while self.unwritten() > 0 {
            self.pump();
            let Ok(Some(done)) = tokio::time::timeout_at(deadline, self.done_rx.recv()).await
            else {
                break;
            };
            self.finish(done);
        }
        self.unwritten()
    }

    /// Starts every operation that can start now.
    fn pump(&mut self) {
        let now = Instant::now();
        let store = match &mut self.backend {
            Backend::Open(store) => Arc::clone(store),
            Backend::Closed { at, opening, .. } => {
                if !*opening && *at <= now {
                    *opening = true;
                    let opener = Arc::clone(&self.opener);
                    let tx = self.done_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let (result, elapsed) = timed(|| opener());
                        let _ = tx.send(Done::Opened(result, elapsed));
                    });
                }
                return;
            }
        };
        let waiting: Vec<K> = self
            .reads
            .iter()
            .filter(|(scope, state)| **state == ReadState::Waiting && !self.has_write(scope))
            .map(|(scope, _)| scope.clone())
            .collect();
        for scope in waiting {
            self.reads.insert(scope.clone(), ReadState::Running);
            let store = Arc::clone(&store);
            let tx = self.done_tx.clone();
            tokio::task::spawn_blocking(move || {
                let key = store_key(&scope, store.scheme());
                let (result, elapsed) = timed(|| store.read(&key));
                let _ = tx.send(Done::Read(scope, result, elapsed));
            });
        }
        if self.writing.is_some() || self.write_due > now {
            return;
        }
        let Some(entry) = self.queue.pop() else {
            return;
        };
        self.writing = Some(entry.clone());
        let to_store_time = self.to_store_time();
        let tx = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let (result, elapsed) = timed(|| match &entry {
                Entry::Scope(scope, write) => {
                    let key = store_key(scope, store.scheme());
                    let condition = condition(write.expect.as_ref(), &to_store_time);
                    let decided = to_store_time(write.decided);
                    store.write(&key, &condition, &write.change, decided)
                }
                Entry::Channel(channel, decided) => store
                    .remove_channel(channel, to_store_time(*decided))
                    .map(|()| Written::Done),
            });
            let _ = tx.send(Done::Wrote(entry, result, elapsed));
        });
    }

    /// Whether a write of `scope` waits or runs: its own, or a removal of its channel.
    fn has_write(&self, scope: &K) -> bool {
        self.queue.has(scope)
            || self.queue.has_channel(scope.channel())
            || match &self.writing {
                Some(Entry::Scope(s, _)) => s == scope,
                Some(Entry::Channel(channel, _)) => channel == scope.channel(),
                None => false,
            }
    }

    /// Converts a lifecycle moment to the store's wall clock (now, minus how long ago it was).
    fn to_store_time(&self) -> impl Fn(Moment) -> UnixMillis + Send + 'static {
        let now = Moment::from_elapsed(Instant::now().duration_since(self.origin));
        let wall_now = UnixMillis::now().0;
        move |at: Moment| {
            let ago = u64::try_from(now.since(at).as_millis()).unwrap_or(u64::MAX);
            UnixMillis(wall_now.saturating_sub(ago))
        }
    }

    fn finish(&mut self, done: Done<K>) {
        match done {
            Done::Opened(Ok(store), elapsed) => {
                self.finished(OpKind::Open, OpOutcome::Ok, elapsed);
                self.backend = Backend::Open(store);
                self.up();
            }
            Done::Opened(Err(e), elapsed) => {
                self.finished(OpKind::Open, OpOutcome::Error, elapsed);
                let pause = match &self.backend {
                    Backend::Closed { pause, .. } => *pause,
                    Backend::Open(_) => Duration::from_secs(1),
                };
                self.backend = Backend::Closed {
                    at: Instant::now() + pause,
                    pause: (pause * 2).min(MAX_PAUSE),
                    opening: false,
                };
                self.down(&e);
            }
            Done::Read(scope, result, elapsed) => {
                let asked_again = self.reads.remove(&scope) == Some(ReadState::RunningAskedAgain);
                match &result {
                    Ok(_) => {
                        self.finished(OpKind::Read, OpOutcome::Ok, elapsed);
                        self.up();
                    }
                    Err(e) => {
                        self.finished(OpKind::Read, OpOutcome::Error, elapsed);
                        self.down(e);
                    }
                }
                if asked_again {
                    self.reads.insert(scope, ReadState::Waiting);
                } else {
                    self.events.push(IoEvent::Read(scope, result));
                }
            }
            Done::Wrote(entry, result, elapsed) => {
                self.writing = None;
                let op = OpKind::of(&entry);
                match result {
                    Ok(written) => {
                        self.write_pause = Duration::ZERO;
                        let outcome = match (entry, written) {
                            (Entry::Scope(scope, write), Written::Conflict { stored }) => {
                                self.conflict(scope, &write, stored)
                            }
                            (Entry::Scope(scope, _), Written::Forgotten) => {
                                self.events.push(IoEvent::Forgotten(scope));
                                OpOutcome::Forgotten
                            }
                            _ => OpOutcome::Ok,
                        };
                        self.finished(op, outcome, elapsed);
                        self.up();
                    }
                    Err(e) => {
                        self.finished(op, OpOutcome::Error, elapsed);
                        self.down(&e);
                        self.write_pause = (self.write_pause * 2)
                            .max(Duration::from_secs(1))
                            .min(MAX_PAUSE);
                        self.write_due = Instant::now() + self.write_pause;
                        self.queue.push_front(entry);
                    }
                }
            }
        }
    }

    /// A refused write. A replay of a write that did reach the store before (its answer was
    /// lost) finds its own session stored: that is success.
    fn conflict(&mut self, scope: K, write: &Write, stored: Option<String>) -> OpOutcome {
        let own = match &write.change {
            ReceiptChange::Put(record) => stored.as_deref() == Some(record.session_id.as_str()),
            ReceiptChange::Remove => stored.is_none(),
            ReceiptChange::Commit(_) => false,
        };
        if own {
            return OpOutcome::Ok;
        }
        let op = match write.change {
            ReceiptChange::Put(_) => OpKind::Put,
            ReceiptChange::Commit(_) => OpKind::Commit,
            ReceiptChange::Remove => OpKind::Remove,
        };
        self.events.push(IoEvent::Conflict { scope, op, stored });
        OpOutcome::Conflict
    }

    fn finished(&mut self, op: OpKind, outcome: OpOutcome, elapsed: Duration) {
        self.events.push(IoEvent::Finished(Operation {
            op,
            outcome,
            elapsed,
        }));
    }

    fn up(&mut self) {
        if self.health != Health::Up {
            self.health = Health::Up;
            let location = match &self.backend {
                Backend::Open(store) => store.location(),
                Backend::Closed { .. } => String::new(),
            };
            self.events.push(IoEvent::Up { location });
        }
    }

    /// A failed operation: reported when the store was not down, or when the kind of failure
    /// changed (an outage that turned out to be a refusal that lasts, or the other way round).
    fn down(&mut self, e: &StoreError) {
        let refusal = match e.healing() {
            Healing::Permanent { reason } => Some(reason),
            Healing::Transient => None,
        };
        let now = Health::Down { refusal };
        if self.health != now {
            self.health = now;
            self.events.push(IoEvent::Down {
                error: e.to_string(),
                refusal,
            });
        }
    }
}
