//! The receipt writes waiting for the store: at most one entry per scope, in order.
//!
//! While the store is slow or down, writes must neither pile up in memory nor lose their order.
//! Every queued write of a scope is folded into one entry that describes the receipt the scope
//! should end up with, under the condition of the first write folded in (the store must still
//! hold what the lifecycle believed before that write). A channel-wide removal supersedes the
//! queued writes of that channel's scopes and keeps its place in the order: writes queued after
//! it come after it. So memory is bounded by the number of scopes and channels, and the store
//! always sees each scope's writes in the order they were decided.

use std::collections::{BTreeMap, VecDeque};

use buzz_session_store::{DeliveryRecord, SessionRecord};

use crate::receipt_view::Expect;
use crate::scope::Scope;

/// What a scope's receipt should become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// This receipt (a session was opened).
    Record(SessionRecord),
    /// The stored receipt's delivery ledger, while it names `session_id`.
    Ledger {
        /// The session.
        session_id: String,
        /// The ledger.
        ledger: DeliveryRecord,
    },
    /// No receipt.
    Absent,
}

/// One scope's folded writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The condition of the first write folded in (`None` for a ledger commit, whose condition
    /// is its session).
    pub expect: Option<Expect>,
    /// The receipt it should end up with.
    pub target: Target,
}

impl Write {
    /// `self`, then `later`: one write with the same effect on a store that still holds what
    /// `self` expects.
    pub fn then(self, later: Write) -> Write {
        let expect = self.expect.or(later.expect);
        let target = match (self.target, later.target) {
            // A ledger for the session being written goes into the written receipt; a ledger
            // for any other session would be refused by the store, so it is dropped.
            (Target::Record(mut record), Target::Ledger { session_id, ledger }) => {
                if record.session_id == session_id {
                    record.delivery = Some(ledger);
                }
                Target::Record(record)
            }
            // A ledger for a receipt that will be gone is moot.
            (Target::Absent, Target::Ledger { .. }) => Target::Absent,
            (_, later) => later,
        };
        Write { expect, target }
    }
}

/// One entry of the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<K> {
    /// A scope's folded writes.
    Scope(K, Write),
    /// Forget every receipt of a channel.
    Channel(String),
}

/// The queue.
#[derive(Debug)]
pub struct WriteQueue<K> {
    order: VecDeque<Key<K>>,
    scopes: BTreeMap<K, Write>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Key<K> {
    Scope(K),
    Channel(String),
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
    pub fn push_channel(&mut self, channel: String) {
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
            Key::Channel(_) => true,
        });
        self.order.push_back(Key::Channel(channel));
    }

    /// Takes the next entry to write.
    pub fn pop(&mut self) -> Option<Entry<K>> {
        let key = self.order.pop_front()?;
        Some(match key {
            Key::Scope(scope) => {
                let write = self.scopes.remove(&scope)?;
                Entry::Scope(scope, write)
            }
            Key::Channel(channel) => Entry::Channel(channel),
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
            Entry::Channel(channel) => self.order.push_front(Key::Channel(channel)),
        }
    }

    /// Whether a write of `scope` is waiting.
    pub fn has(&self, scope: &K) -> bool {
        self.scopes.contains_key(scope)
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
    use crate::testing::TestScope;

    fn put(session: &str, expect: Expect) -> Write {
        Write {
            expect: Some(expect),
            target: Target::Record(SessionRecord::new(session)),
        }
    }

    fn ledger(session: &str, ids: &[&str]) -> Write {
        Write {
            expect: None,
            target: Target::Ledger {
                session_id: session.into(),
                ledger: DeliveryRecord {
                    standing_context_sent: false,
                    delivered_event_ids: ids.iter().map(|s| s.to_string()).collect(),
                },
            },
        }
    }

    fn remove(expect: Expect) -> Write {
        Write {
            expect: Some(expect),
            target: Target::Absent,
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
        q.push(a(), put("s1", Expect::Absent));
        q.push(a(), ledger("s1", &["e1"]));
        q.push(a(), put("s2", Expect::Session("s1".into())));
        q.push(a(), ledger("s2", &["e2"]));
        q.push(a(), ledger("s-old", &["x"]));
        assert_eq!(q.len(), 1);
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!("one scope entry")
        };
        assert_eq!(write.expect, Some(Expect::Absent), "the store never saw s1");
        let Target::Record(record) = write.target else {
            panic!("a receipt")
        };
        assert_eq!(record.session_id, "s2");
        let ids = record.delivery.unwrap().delivered_event_ids;
        assert_eq!(ids, ["e2"], "the ledger of s2 only");
    }

    #[test]
    fn a_removal_wins_and_a_later_put_keeps_the_removals_condition() {
        let mut q = WriteQueue::default();
        q.push(a(), ledger("s1", &["e1"]));
        q.push(a(), remove(Expect::Session("s1".into())));
        q.push(a(), ledger("s1", &["e2"]));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(write.target, Target::Absent);
        assert_eq!(write.expect, Some(Expect::Session("s1".into())));
        q.push(a(), remove(Expect::Session("s1".into())));
        q.push(a(), put("s2", Expect::Absent));
        let Some(Entry::Scope(_, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(write.expect, Some(Expect::Session("s1".into())));
        assert!(matches!(write.target, Target::Record(r) if r.session_id == "s2"));
    }

    #[test]
    fn a_channel_removal_supersedes_that_channels_waiting_writes_and_keeps_its_place() {
        let mut q = WriteQueue::default();
        q.push(a(), put("sa", Expect::Absent));
        q.push(c(), put("sc", Expect::Absent));
        q.push(b(), put("sb", Expect::Absent));
        q.push_channel("c1".into());
        q.push(a(), put("sa2", Expect::Absent));
        let order: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|e| match e {
                Entry::Scope(k, Write { target: Target::Record(r), .. }) => {
                    format!("{}:{}", k.root.unwrap_or_default(), r.session_id)
                }
                Entry::Scope(k, _) => format!("{k:?}"),
                Entry::Channel(ch) => format!("channel {ch}"),
            })
            .collect();
        assert_eq!(order, ["c:sc", "channel c1", "a:sa2"]);
    }

    #[test]
    fn a_failed_write_goes_back_in_front_with_later_writes_folded_behind_it() {
        let mut q = WriteQueue::default();
        q.push(a(), put("s1", Expect::Absent));
        q.push(b(), put("sb", Expect::Absent));
        let failed = q.pop().unwrap();
        q.push(a(), ledger("s1", &["e1"]));
        q.push_front(failed);
        assert_eq!(q.len(), 2);
        let Some(Entry::Scope(scope, write)) = q.pop() else {
            panic!()
        };
        assert_eq!(scope, a());
        assert_eq!(write.expect, Some(Expect::Absent));
        assert!(matches!(write.target, Target::Record(r) if r.delivery.is_some()));
        assert!(matches!(q.pop(), Some(Entry::Scope(s, _)) if s == b()));
        assert!(q.is_empty());
    }
}
