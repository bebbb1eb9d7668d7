//! The receipt writes waiting for the store: at most one entry per scope, in order.
//!
//! While the store is slow or down, writes must neither pile up in memory nor lose their order.
//! Every queued write of a scope is folded into one entry that describes the receipt the scope
//! should end up with (a turn commit is merged as the store merges it, by the store's own
//! functions in `buzz_session_store::rules`), under the condition of the first write folded in
//! (the store must still hold what the lifecycle believed before that write) and the moment of
//! the earliest decision (a write decided before an operator forgot the receipt never brings it
//! back). A channel-wide
//! removal supersedes the queued writes of that channel's scopes and keeps its place in the
//! order: writes queued after it come after it. So memory is bounded by the number of scopes and
//! channels, and the store always sees each scope's writes in the order they were decided.

use std::collections::{BTreeMap, VecDeque};

use buzz_session_store::rules;
use buzz_session_store::{SessionRecord, TurnCommit};

use crate::clock::Moment;
use crate::receipt_view::Expect;
use crate::scope::Scope;

/// What a scope's receipt should become: the change a scope's folded writes make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiptChange {
    /// Write this receipt (a session was opened).
    Put(SessionRecord),
    /// Commit a turn's updates to the stored receipt, while it names the turn's session.
    Commit(TurnCommit),
    /// Remove the receipt.
    Remove,
}

/// One scope's folded writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The condition of the first write folded in (`None` for a turn commit, whose condition is
    /// its session).
    pub expect: Option<Expect>,
    /// When the earliest write folded in was decided.
    pub decided: Moment,
    /// The receipt it should end up with.
    pub change: ReceiptChange,
}

impl Write {
    /// `self`, then `later`: one write with the same effect on a store that still holds what
    /// `self` expects.
    pub fn then(self, later: Write) -> Write {
        let expect = self.expect.or(later.expect);
        let decided = self.decided.min(later.decided);
        let change = match (self.change, later.change) {
            // A commit for the session being written goes into the written receipt; a commit for
            // any other session would be refused by the store, so it is dropped.
            (ReceiptChange::Put(mut record), ReceiptChange::Commit(commit)) => {
                if record.session_id == commit.session_id {
                    rules::apply_commit(&mut record, &commit);
                }
                ReceiptChange::Put(record)
            }
            // Two commits of one session: one commit with the effect of both, as the store
            // would merge them one after the other.
            (ReceiptChange::Commit(earlier), ReceiptChange::Commit(later))
                if earlier.session_id == later.session_id =>
            {
                ReceiptChange::Commit(rules::fold_commits(earlier, later))
            }
            // A commit for a receipt that will be gone is moot.
            (ReceiptChange::Remove, ReceiptChange::Commit(_)) => ReceiptChange::Remove,
            (_, later) => later,
        };
        Write {
            expect,
            decided,
            change,
        }
    }
}

/// One entry of the queue.
#[allow(clippy::large_enum_variant)] // a receipt (with `continuity`) is large; moved once per turn or store call, never kept in bulk
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<K> {
    /// A scope's folded writes.
    Scope(K, Write),
    /// Forget every receipt of a channel (decided at the moment given).
    Channel(String, Moment),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Key<K> {
    Scope(K),
    Channel(String, Moment),
}

/// The queue.
#[derive(Debug)]
pub struct WriteQueue<K> {
    order: VecDeque<Key<K>>,
    scopes: BTreeMap<K, Write>,
}

impl<K> Default for WriteQueue<K> {
    fn default() -> Self {
        WriteQueue {
            order: VecDeque::new(),
            scopes: BTreeMap::new(),
        }
    }
}

impl<K: Scope> WriteQueue<K> {
    /// Queues `write` for `scope`, folded into the scope's waiting entry if it has one.
    pub fn push(&mut self, scope: K, write: Write) {
        match self.scopes.remove(&scope) {
            Some(queued) => {
                self.scopes.insert(scope, queued.then(write));
            }
            None => {
                self.order.push_back(Key::Scope(scope.clone()));
                self.scopes.insert(scope, write);
            }
        }
    }

    /// Queues the removal of every receipt of `channel`; the channel's waiting scope writes are
    /// superseded by it.
    pub fn push_channel(&mut self, channel: String, decided: Moment) {
        let gone: Vec<K> = self
            .scopes
            .keys()
            .filter(|k| k.channel() == channel)
            .cloned()
            .collect();
        for scope in &gone {
            self.scopes.remove(scope);
        }
        self.order.retain(|key| match key {
            Key::Scope(k) => !gone.contains(k),
            Key::Channel(..) => true,
        });
        self.order.push_back(Key::Channel(channel, decided));
    }

    /// Takes the next entry to write.
    pub fn pop(&mut self) -> Option<Entry<K>> {
        let key = self.order.pop_front()?;
        Some(match key {
            Key::Scope(scope) => {
                let write = self.scopes.remove(&scope)?;
                Entry::Scope(scope, write)
            }
            Key::Channel(channel, decided) => Entry::Channel(channel, decided),
        })
    }

    /// Puts back an entry whose write failed, in front: anything queued for the same scope
    /// since was decided after it, so it is folded in behind it.
    pub fn push_front(&mut self, entry: Entry<K>) {
        match entry {
            Entry::Scope(scope, write) => {
                let write = match self.scopes.remove(&scope) {
                    Some(later) => {
                        self.order.retain(|k| *k != Key::Scope(scope.clone()));
                        write.then(later)
                    }
                    None => write,
                };
                self.order.push_front(Key::Scope(scope.clone()));
                self.scopes.insert(scope, write);
            }
            Entry::Channel(channel, decided) => {
                self.order.push_front(Key::Channel(channel, decided));
            }
        }
    }

    /// Whether a write of `scope` is waiting.
    pub fn has(&self, scope: &K) -> bool {
        self.scopes.contains_key(scope)
    }

    /// Whether a removal of every receipt of `channel` is waiting.
    pub fn has_channel(&self, channel: &str) -> bool {
        self.order
            .iter()
            .any(|key| matches!(key, Key::Channel(c, _) if c == channel))
    }
}

impl<K> WriteQueue<K> {
    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::TestScope;

    fn put(session: &str, expect: Expect, at: u64) -> Write {
        Write {
            expect: Some(expect),
            decided: Moment(at),
            change: ReceiptChange::Put(SessionRecord::new(session)),
        }
    }

    fn commit(session: &str, ids: &[&str], turns: u32, at: u64) -> Write {
        Write {
            expect: None,
            decided: Moment(at),
            change: ReceiptChange::Commit(TurnCommit {
                session_id: session.into(),
                delivered_event_ids: ids.iter().map(|s| s.to_string()).collect(),
                standing_context_sent: false,
                turns: Some(turns),
                usage: None,
                handoff_delivered: false,
            }),
        }
    }

    fn remove(expect: Expect, at: u64) -> Write {
        Write {
            expect: Some(expect),
            decided: Moment(at),
            change: ReceiptChange::Remove,
        }
    }

    fn a() -> TestScope {
        TestScope::thread("c1", "a")
    }
    fn b() -> TestScope {
        TestScope::thread("c1", "b")
    }
    fn c() -> TestScope {
        TestScope::thread("c2", "c")
    }

    #[test]
    fn writes_of_one_scope_fold_into_one_entry_under_the_first_condition() {
        let mut q = WriteQueue::default();
        q.push(a(), put("s1", Expect::Absent, 1));
        q.push(a(), commit("s1", &["e1"], 1, 2));
        q.push(a(), put("s2", Expect::Session("s1".into()), 3));
        q.push(a(), commit("s2", &["e2"], 1, 4));
        q.push(a(), commit("s-old", &["x"], 9, 5));
        assert_eq!(q.len(), 1);
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!("one scope entry")
        };
        assert_eq!(write.expect, Some(Expect::Absent), "the store never saw s1");
        assert_eq!(write.decided, Moment(1), "the earliest decision");
        let ReceiptChange::Put(record) = write.change else {
            panic!("a receipt")
        };
        assert_eq!(record.session_id, "s2");
        assert_eq!(record.turns, Some(1));
        let ids = record.delivery.unwrap().delivered_event_ids;
        assert_eq!(ids, ["e2"], "the ledger of s2 only");
    }

    #[test]
    fn commits_of_one_session_fold_and_a_removal_wins() {
        let mut q = WriteQueue::default();
        q.push(a(), commit("s1", &["e1"], 1, 1));
        q.push(a(), commit("s1", &["e1", "e2"], 2, 2));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!()
        };
        let ReceiptChange::Commit(c) = write.change else {
            panic!()
        };
        assert_eq!((c.turns, c.delivered_event_ids.len()), (Some(2), 2));
        q.push(a(), commit("s1", &["e1"], 1, 3));
        q.push(a(), remove(Expect::Session("s1".into()), 4));
        q.push(a(), commit("s1", &["e2"], 2, 5));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(write.change, ReceiptChange::Remove);
        assert_eq!(write.expect, Some(Expect::Session("s1".into())));
        q.push(a(), remove(Expect::Session("s1".into()), 6));
        q.push(a(), put("s2", Expect::Absent, 7));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(write.expect, Some(Expect::Session("s1".into())));
        assert!(matches!(write.change, ReceiptChange::Put(r) if r.session_id == "s2"));
    }

    #[test]
    fn a_commit_of_unknown_counters_folds_as_the_store_merges_it() {
        let unknown = |at| {
            let mut write = commit("s1", &["e2"], 0, at);
            if let ReceiptChange::Commit(c) = &mut write.change {
                c.turns = None;
            }
            write
        };
        // Into a waiting commit: the later `None` replaces the earlier count, as in the store.
        let mut q = WriteQueue::default();
        q.push(a(), commit("s1", &["e1"], 4, 1));
        q.push(a(), unknown(2));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!("one scope entry")
        };
        let ReceiptChange::Commit(c) = write.change else {
            panic!("a commit")
        };
        assert_eq!(
            (c.turns, c.delivered_event_ids),
            (None, vec!["e2".to_string()])
        );
        // Into a waiting receipt: the receipt the store would hold after both.
        let mut counted = SessionRecord::new("s1");
        counted.turns = Some(4);
        q.push(
            a(),
            Write {
                expect: Some(Expect::Absent),
                decided: Moment(3),
                change: ReceiptChange::Put(counted),
            },
        );
        q.push(a(), unknown(4));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!("one scope entry")
        };
        let ReceiptChange::Put(record) = write.change else {
            panic!("a receipt")
        };
        assert_eq!(record.turns, None);
    }

    #[test]
    fn a_channel_removal_supersedes_that_channels_waiting_writes_and_keeps_its_place() {
        let mut q = WriteQueue::default();
        q.push(a(), put("sa", Expect::Absent, 1));
        q.push(c(), put("sc", Expect::Absent, 2));
        q.push(b(), put("sb", Expect::Absent, 3));
        q.push_channel("c1".into(), Moment(4));
        q.push(a(), put("sa2", Expect::Absent, 5));
        let order: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|e| match e {
                Entry::Scope(
                    k,
                    Write {
                        change: ReceiptChange::Put(r),
                        ..
                    },
                ) => {
                    format!("{}:{}", k.root.unwrap_or_default(), r.session_id)
                }
                Entry::Scope(k, _) => format!("{k:?}"),
                Entry::Channel(ch, _) => format!("channel {ch}"),
            })
            .collect();
        assert_eq!(order, ["c:sc", "channel c1", "a:sa2"]);
    }

    #[test]
    fn a_failed_write_goes_back_in_front_with_later_writes_folded_behind_it() {
        let mut q = WriteQueue::default();
        q.push(a(), put("s1", Expect::Absent, 1));
        q.push(b(), put("sb", Expect::Absent, 2));
        let failed = q.pop().unwrap();
        q.push(a(), commit("s1", &["e1"], 1, 3));
        q.push_front(failed);
        assert_eq!(q.len(), 2);
        let Some(Entry::Scope(scope, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(scope, a());
        assert_eq!(write.expect, Some(Expect::Absent));
        assert!(matches!(write.change, ReceiptChange::Put(r) if r.delivery.is_some()));
        assert!(matches!(q.pop(), Some(Entry::Scope(s, _)) if s == b()));
        assert!(q.is_empty());
    }
}
