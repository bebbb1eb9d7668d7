//! Plain test values for the lifecycle: a scope and a message type with no harness behind them,
//! and an in-memory receipt store. Public so the crate's integration tests (and anyone modelling
//! the harness) can use them.
//!
//! [`MemoryReceipts`] plays the store's part behind the [`Receipts`] interface, deciding with the
//! store's own rules ([`buzz_session_store::rules`], which the SQL backends call too; see
//! `buzz_session_store::receipt_store`): every write is conditional and decided atomically under
//! one lock — `Absent`, `Session(id)` and `NotWrittenSince(t)` are honoured, a turn commit is
//! written only while the receipt names its session and merged as the store merges it, and a
//! forget (an operator's, or a channel removal) leaves a tombstone that refuses every write
//! decided at or before it, until a receipt written after it replaces it. A test can seed
//! receipts as another harness would, forget one as an operator would, take the store down (every
//! call fails, the open too) or stall it (every call blocks until released, so a read outlives the
//! driver's bound), and count the calls that reached it.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use buzz_session_store::rules::{self, Refusal, State};
use buzz_session_store::{
    Expect, KeyScheme, Removal, ScopeKey, SessionRecord, StoreError, UnixMillis,
};

use crate::receipts::{Condition, Receipts, Written, store_key};
use crate::scope::Scope;
use crate::store_io::Opener;
pub use crate::test_values::{Msg, TestScope};
use crate::write_queue::ReceiptChange;

/// How many calls reached a [`MemoryReceipts`] (a stalled call counts once it is let through; a
/// call refused because the store is down counts under `failed` only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// Successful opens.
    pub opens: usize,
    /// Reads answered.
    pub reads: usize,
    /// Receipt writes (`ReceiptChange::Put`) answered.
    pub puts: usize,
    /// Turn commits answered.
    pub commits: usize,
    /// Removals (`ReceiptChange::Remove`) answered.
    pub removes: usize,
    /// Channel removals answered.
    pub channel_removals: usize,
    /// Writes refused because the store held something else (`Written::Conflict`).
    pub conflicts: usize,
    /// Writes refused because the scope was forgotten at or after they were decided.
    pub forgotten: usize,
    /// Calls (opens included) that failed because the store was down.
    pub failed: usize,
}

/// What the store holds under one key: a receipt with the time it was last written, and the
/// time it was last forgotten. Every decision over it is the store's own ([`rules`]).
#[derive(Clone, Debug, Default)]
struct Row {
    receipt: Option<(SessionRecord, UnixMillis)>,
    forgotten: Option<UnixMillis>,
}

impl Row {
    /// The key as the store's conditions see it.
    fn state(&self) -> State {
        let receipt = self
            .receipt
            .as_ref()
            .map(|(record, at)| (record.session_id.clone(), *at));
        State::classify(receipt, self.forgotten)
    }

    /// The receipt a read returns.
    fn live(&self) -> Option<&SessionRecord> {
        let (record, _) = self.receipt.as_ref()?;
        self.state().is_live().then_some(record)
    }
}

/// A refused write's answer, as the lifecycle's adapter reports a store's refusal.
fn refused(refusal: Refusal) -> Written {
    match refusal {
        Refusal::Conflict(stored) => Written::Conflict { stored },
        Refusal::Forgotten(_) => Written::Forgotten,
    }
}

#[derive(Debug)]
struct Contents {
    rows: BTreeMap<ScopeKey, Row>,
    calls: Calls,
    down: bool,
}

#[derive(Debug, Default)]
struct Gate {
    stalled: bool,
    waiting: usize,
}

#[derive(Debug)]
struct Shared {
    scheme: KeyScheme,
    contents: Mutex<Contents>,
    gate: Mutex<Gate>,
    moved: Condvar,
    /// Notified whenever a call finished.
    answered: Condvar,
}

/// An in-memory receipt store with the store's conditional-write rules (see the module docs).
/// Cheap to clone: clones share one store.
#[derive(Clone, Debug)]
pub struct MemoryReceipts(Arc<Shared>);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryReceipts {
    /// An empty store keyed by `scheme`.
    pub fn new(scheme: KeyScheme) -> Self {
        MemoryReceipts(Arc::new(Shared {
            scheme,
            contents: Mutex::new(Contents {
                rows: BTreeMap::new(),
                calls: Calls::default(),
                down: false,
            }),
            gate: Mutex::new(Gate::default()),
            moved: Condvar::new(),
            answered: Condvar::new(),
        }))
    }

    /// An opener for [`crate::Driver::new`]: it opens this store, or fails while it is down.
    pub fn opener(&self) -> Opener {
        let store = self.clone();
        Arc::new(move || {
            store.pass();
            let mut contents = store.contents();
            store.0.answered.notify_all();
            if contents.down {
                contents.calls.failed += 1;
                return Err(store.unavailable("open"));
            }
            contents.calls.opens += 1;
            Ok(Arc::new(store.clone()) as Arc<dyn Receipts>)
        })
    }

    /// The live receipt of `scope` (under the store's key scheme), as a read would return it.
    pub fn get(&self, scope: &impl Scope) -> Option<SessionRecord> {
        let key = store_key(scope, self.0.scheme);
        self.contents().rows.get(&key)?.live().cloned()
    }

    /// Stores `record` for `scope` as another harness would, last written `at`.
    pub fn insert(&self, scope: &impl Scope, record: SessionRecord, at: UnixMillis) {
        let key = store_key(scope, self.0.scheme);
        let mut contents = self.contents();
        contents.rows.entry(key).or_default().receipt = Some((record, at));
    }

    /// An operator forgets `scope`'s receipt at `at`: a tombstone refuses every write decided at
    /// or before `at`. Returns the session the forgotten receipt named.
    pub fn forget(&self, scope: &impl Scope, at: UnixMillis) -> Option<String> {
        let key = store_key(scope, self.0.scheme);
        let mut contents = self.contents();
        let row = contents.rows.entry(key).or_default();
        let session = row.live().map(|r| r.session_id.clone());
        row.receipt = None;
        row.forgotten = row.forgotten.max(Some(at));
        session
    }

    /// Takes the store down (every call, the open included, fails) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.contents().down = down;
    }

    /// Stalls the store: every call blocks until the returned guard is dropped (or
    /// [`Stall::release`]d). Drop the guard before the runtime: a runtime waits for its blocking
    /// threads when it is dropped.
    pub fn stall(&self) -> Stall {
        lock(&self.0.gate).stalled = true;
        Stall(Some(self.clone()))
    }

    /// Calls blocked by a stall now.
    pub fn stalled_calls(&self) -> usize {
        lock(&self.0.gate).waiting
    }

    /// Blocks until `n` calls wait at the stall (a call the driver started reached the store).
    pub fn wait_for_stalled_calls(&self, n: usize) {
        let mut gate = lock(&self.0.gate);
        while gate.waiting < n {
            gate = self
                .0
                .moved
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The calls answered so far.
    pub fn calls(&self) -> Calls {
        self.contents().calls
    }

    /// Blocks until the calls answered so far satisfy `done` (a call the driver started has
    /// finished, whether or not the driver took its answer in).
    pub fn wait_for_calls(&self, done: impl Fn(&Calls) -> bool) {
        let mut contents = self.contents();
        while !done(&contents.calls) {
            contents = self
                .0
                .answered
                .wait(contents)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn release(&self) {
        lock(&self.0.gate).stalled = false;
        self.0.moved.notify_all();
    }

    /// Waits while the store is stalled.
    fn pass(&self) {
        let mut gate = lock(&self.0.gate);
        if !gate.stalled {
            return;
        }
        gate.waiting += 1;
        self.0.moved.notify_all();
        while gate.stalled {
            gate = self
                .0
                .moved
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
        gate.waiting -= 1;
        self.0.moved.notify_all();
    }

    fn contents(&self) -> MutexGuard<'_, Contents> {
        lock(&self.0.contents)
    }

    fn unavailable(&self, op: &'static str) -> StoreError {
        StoreError::Unavailable {
            target: "memory".to_string(),
            op,
            reason: "the test took the store down".to_string(),
        }
    }

    /// Enters a call: waits out a stall, then fails if the store is down.
    fn enter(&self, op: &'static str) -> Result<MutexGuard<'_, Contents>, StoreError> {
        self.pass();
        let mut contents = self.contents();
        // Wakes the waiters when the call (which holds the lock until it returns) is done.
        self.0.answered.notify_all();
        if contents.down {
            contents.calls.failed += 1;
            return Err(self.unavailable(op));
        }
        Ok(contents)
    }
}

/// A stalled store; dropping it lets the blocked calls through.
#[derive(Debug)]
#[must_use = "the store stays stalled only while the guard lives"]
pub struct Stall(Option<MemoryReceipts>);

impl Stall {
    /// Lets the blocked calls through now.
    pub fn release(mut self) {
        if let Some(store) = self.0.take() {
            store.release();
        }
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        if let Some(store) = self.0.take() {
            store.release();
        }
    }
}

impl Receipts for MemoryReceipts {
    fn read(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        let mut contents = self.enter("read")?;
        contents.calls.reads += 1;
        Ok(contents.rows.get(key).and_then(Row::live).cloned())
    }

    fn write(
        &self,
        key: &ScopeKey,
        condition: &Condition,
        target: &ReceiptChange,
        decided: UnixMillis,
    ) -> Result<Written, StoreError> {
        let mut contents = self.enter("write")?;
        let any = Expect::NotWrittenSince(decided);
        let expect = condition.as_ref().unwrap_or(&any);
        let row = contents.rows.entry(key.clone()).or_default();
        let written = match target {
            ReceiptChange::Put(record) => match rules::admit(&row.state(), expect, decided) {
                Ok(()) => {
                    // The receipt replaces the key's tombstone, as a put does in the store.
                    row.receipt = Some((record.clone().normalized(), decided));
                    row.forgotten = None;
                    Written::Done
                }
                Err(refusal) => refused(refusal),
            },
            ReceiptChange::Commit(commit) => {
                match rules::admit_commit(&row.state(), commit, decided) {
                    Ok(()) => match row.receipt.as_mut() {
                        Some((record, written)) => {
                            rules::apply_commit(record, commit);
                            *written = decided;
                            Written::Done
                        }
                        // Admitted, so the receipt is live: the store answers the same if it is not.
                        None => Written::Conflict { stored: None },
                    },
                    Err(refusal) => refused(refusal),
                }
            }
            ReceiptChange::Remove => match rules::removal(&row.state(), expect) {
                Ok(_) => {
                    row.receipt = None;
                    Written::Done
                }
                Err(Removal::Conflict { stored_session_id }) => Written::Conflict {
                    stored: Some(stored_session_id),
                },
                // No live receipt: nothing to remove (as the store adapter reports `Absent`).
                Err(Removal::Absent | Removal::Removed { .. } | Removal::NotWritable(_)) => {
                    Written::Done
                }
            },
        };
        let calls = &mut contents.calls;
        match target {
            ReceiptChange::Put(_) => calls.puts += 1,
            ReceiptChange::Commit(_) => calls.commits += 1,
            ReceiptChange::Remove => calls.removes += 1,
        }
        match written {
            Written::Done => {}
            Written::Conflict { .. } => calls.conflicts += 1,
            Written::Forgotten => calls.forgotten += 1,
        }
        Ok(written)
    }

    fn remove_channel(&self, channel: &str, decided: UnixMillis) -> Result<(), StoreError> {
        let mut contents = self.enter("remove_channel")?;
        let channel = channel.to_ascii_lowercase();
        for (key, row) in contents.rows.iter_mut() {
            if key.channel_id() == channel && row.receipt.is_some() {
                row.receipt = None;
                row.forgotten = row.forgotten.max(Some(decided));
            }
        }
        contents.calls.channel_removals += 1;
        Ok(())
    }

    fn scheme(&self) -> KeyScheme {
        self.0.scheme
    }

    fn location(&self) -> String {
        "memory".to_string()
    }
}

#[cfg(test)]
mod tests {
    use buzz_session_store::TurnCommit;

    use super::*;

    fn a() -> TestScope {
        TestScope::thread("c1", "aa")
    }

    fn put(store: &MemoryReceipts, session: &str, expect: Option<Expect>, at: u64) -> Written {
        let key = store_key(&a(), store.scheme());
        let target = ReceiptChange::Put(SessionRecord::new(session));
        store.write(&key, &expect, &target, UnixMillis(at)).unwrap()
    }

    fn commit(store: &MemoryReceipts, session: &str, ids: &[&str], at: u64) -> Written {
        let key = store_key(&a(), store.scheme());
        let target = ReceiptChange::Commit(TurnCommit {
            session_id: session.into(),
            delivered_event_ids: ids.iter().map(|s| s.to_string()).collect(),
            standing_context_sent: false,
            turns: Some(1),
            usage: None,
            handoff_delivered: false,
        });
        store.write(&key, &None, &target, UnixMillis(at)).unwrap()
    }

    fn remove(store: &MemoryReceipts, expect: Expect, at: u64) -> Written {
        let key = store_key(&a(), store.scheme());
        store
            .write(&key, &Some(expect), &ReceiptChange::Remove, UnixMillis(at))
            .unwrap()
    }

    fn conflict(stored: Option<&str>) -> Written {
        Written::Conflict {
            stored: stored.map(str::to_string),
        }
    }

    #[test]
    fn every_condition_is_honoured() {
        let store = MemoryReceipts::new(KeyScheme::Scope);
        assert_eq!(put(&store, "s1", Some(Expect::Absent), 10), Written::Done);
        assert_eq!(
            put(&store, "s2", Some(Expect::Absent), 11),
            conflict(Some("s1"))
        );
        let wrong = Some(Expect::Session("s0".into()));
        assert_eq!(put(&store, "s2", wrong, 12), conflict(Some("s1")));
        let newer = Some(Expect::NotWrittenSince(UnixMillis(9)));
        assert_eq!(put(&store, "s2", newer, 13), conflict(Some("s1")));
        let older = Some(Expect::NotWrittenSince(UnixMillis(10)));
        assert_eq!(put(&store, "s2", older, 14), Written::Done);
        assert_eq!(store.get(&a()).unwrap().session_id, "s2");
        // A commit only while the receipt names its session.
        assert_eq!(commit(&store, "s1", &["x"], 15), conflict(Some("s2")));
        assert_eq!(commit(&store, "s2", &["e2", "e1", "e1"], 16), Written::Done);
        let ledger = store
            .get(&a())
            .unwrap()
            .delivery
            .unwrap()
            .delivered_event_ids;
        assert_eq!(ledger, ["e1", "e2"]);
        assert_eq!(
            remove(&store, Expect::Session("s1".into()), 17),
            conflict(Some("s2"))
        );
        assert_eq!(
            remove(&store, Expect::Session("s2".into()), 18),
            Written::Done
        );
        assert!(store.get(&a()).is_none());
        assert_eq!(commit(&store, "s2", &[], 19), conflict(None));
        assert_eq!(
            remove(&store, Expect::Absent, 20),
            Written::Done,
            "nothing to remove"
        );
        let calls = store.calls();
        assert_eq!((calls.puts, calls.commits, calls.removes), (5, 3, 3));
        assert_eq!((calls.conflicts, calls.forgotten), (6, 0));
    }

    #[test]
    fn a_forget_refuses_every_write_decided_at_or_before_it() {
        let store = MemoryReceipts::new(KeyScheme::Scope);
        put(&store, "s1", Some(Expect::Absent), 10);
        assert_eq!(store.forget(&a(), UnixMillis(20)).as_deref(), Some("s1"));
        assert_eq!(
            put(&store, "s2", Some(Expect::Absent), 20),
            Written::Forgotten
        );
        assert_eq!(commit(&store, "s1", &[], 15), Written::Forgotten);
        let before = Some(Expect::NotWrittenSince(UnixMillis(19)));
        assert_eq!(put(&store, "s2", before, 25), Written::Forgotten);
        assert_eq!(put(&store, "s2", Some(Expect::Absent), 21), Written::Done);
        assert_eq!(store.get(&a()).unwrap().session_id, "s2");
        // A channel removal is a forget of every receipt of the channel.
        let key = store_key(&TestScope::conversation("c2"), store.scheme());
        let target = ReceiptChange::Put(SessionRecord::new("c"));
        store.write(&key, &None, &target, UnixMillis(1)).unwrap();
        store.remove_channel("c1", UnixMillis(30)).unwrap();
        assert!(store.get(&a()).is_none());
        assert_eq!(
            put(&store, "s3", Some(Expect::Absent), 30),
            Written::Forgotten
        );
        assert!(store.get(&TestScope::conversation("c2")).is_some());
        assert_eq!(store.calls().forgotten, 4);
    }

    #[test]
    fn a_commit_is_merged_as_the_store_merges_it() {
        let store = MemoryReceipts::new(KeyScheme::Scope);
        let mut known = SessionRecord::new("s1");
        known.turns = Some(3);
        known.usage = Some(buzz_session_store::Usage {
            used_tokens: 5,
            context_tokens: None,
        });
        store.insert(&a(), known.clone(), UnixMillis(1));
        let key = store_key(&a(), store.scheme());
        let unknown = TurnCommit {
            session_id: "s1".into(),
            delivered_event_ids: vec!["e1".into()],
            standing_context_sent: true,
            turns: None,
            usage: None,
            handoff_delivered: false,
        };
        let target = ReceiptChange::Commit(unknown.clone());
        let written = store.write(&key, &None, &target, UnixMillis(2)).unwrap();
        assert_eq!(written, Written::Done);
        let mut want = known;
        rules::apply_commit(&mut want, &unknown);
        assert_eq!(store.get(&a()), Some(want));
        let stored = store.get(&a()).unwrap();
        assert_eq!((stored.turns, stored.usage), (None, None), "None replaces");
    }

    #[test]
    fn a_receipt_written_after_a_forget_replaces_its_tombstone() {
        let store = MemoryReceipts::new(KeyScheme::Scope);
        put(&store, "s1", Some(Expect::Absent), 10);
        store.forget(&a(), UnixMillis(20));
        assert_eq!(put(&store, "s2", Some(Expect::Absent), 21), Written::Done);
        assert_eq!(
            remove(&store, Expect::Session("s2".into()), 22),
            Written::Done
        );
        // The tombstone went with the receipt that replaced it: the key holds nothing, so a
        // write expecting nothing is admitted whenever it was decided (as in the SQL stores).
        assert_eq!(put(&store, "s3", Some(Expect::Absent), 15), Written::Done);
        assert_eq!(store.get(&a()).unwrap().session_id, "s3");
    }

    #[test]
    fn a_down_store_fails_every_call_and_a_channel_scheme_shares_one_key() {
        let store = MemoryReceipts::new(KeyScheme::Channel);
        store.set_down(true);
        assert!((store.opener())().is_err());
        let key = store_key(&a(), store.scheme());
        assert!(store.read(&key).is_err());
        store.set_down(false);
        assert!((store.opener())().is_ok());
        put(&store, "s1", None, 1);
        let other_thread = TestScope::thread("c1", "bb");
        assert_eq!(store.get(&other_thread).unwrap().session_id, "s1");
        assert_eq!(store.calls().failed, 2);
        assert_eq!(store.calls().opens, 1);
    }

    #[test]
    fn a_stalled_call_waits_for_the_release() {
        let store = MemoryReceipts::new(KeyScheme::Scope);
        let stall = store.stall();
        let reader = store.clone();
        let key = store_key(&a(), store.scheme());
        let thread = std::thread::spawn(move || reader.read(&key).map(|r| r.is_none()));
        store.wait_for_stalled_calls(1);
        assert_eq!(store.calls().reads, 0, "blocked before it reads");
        stall.release();
        assert!(thread.join().unwrap().unwrap());
        assert_eq!((store.calls().reads, store.stalled_calls()), (1, 0));
    }
}
