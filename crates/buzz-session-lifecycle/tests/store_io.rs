//! The store worker's ordering rules, against the in-memory store on tokio's paused clock: a
//! read sees every write of its scope decided before it was asked for.
//!
//! The store is stalled where a test needs a call to be "still running", and a test waits for
//! the store's own answer ([`MemoryReceipts::wait_for_calls`]) rather than for time.

use buzz_session_lifecycle::Moment;
use buzz_session_lifecycle::receipt_view::Expect;
use buzz_session_lifecycle::store_io::{IoEvent, StoreIo};
use buzz_session_lifecycle::testing::{MemoryReceipts, TestScope};
use buzz_session_lifecycle::write_queue::{ReceiptChange, Write};
use buzz_session_store::{KeyScheme, SessionRecord, UnixMillis};
use tokio::runtime::Runtime;
use tokio::time::Instant;

fn a() -> TestScope {
    TestScope::thread("c1", "aa")
}

fn c() -> TestScope {
    TestScope::conversation("c2")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// Takes in every operation the worker runs, until none runs.
fn settle(rt: &Runtime, io: &mut StoreIo<TestScope>) -> Vec<IoEvent<TestScope>> {
    let mut events = io.poll();
    while io.in_flight() > 0 {
        events.extend(rt.block_on(io.next()));
    }
    events
}

/// The sessions the reads among `events` answered with.
fn reads(events: &[IoEvent<TestScope>]) -> Vec<Option<String>> {
    events
        .iter()
        .filter_map(|e| match e {
            IoEvent::Read(_, Ok(record)) => Some(record.as_ref().map(|r| r.session_id.clone())),
            _ => None,
        })
        .collect()
}

fn put(session: &str, expect: Expect) -> Write {
    Write {
        expect: Some(expect),
        decided: Moment(0),
        change: ReceiptChange::Put(SessionRecord::new(session)),
    }
}

/// A worker on `store`, open.
fn open(rt: &Runtime, store: &MemoryReceipts) -> StoreIo<TestScope> {
    let mut io = StoreIo::new(store.opener(), Instant::now());
    let events = settle(rt, &mut io);
    // The timed report of each store call (`Finished`) is the metrics' concern, not this test's.
    let said: Vec<_> = events
        .iter()
        .filter(|e| !matches!(e, IoEvent::Finished(_)))
        .collect();
    assert!(matches!(&said[..], [IoEvent::Up { .. }]), "{events:?}");
    io
}

#[test]
fn a_read_asked_for_after_a_write_is_not_answered_by_an_older_read() {
    // Rule: a read answers with what the store held after every write of its scope decided
    // before it was asked for. A read asked for while an older read of the scope still runs
    // (the lifecycle gave up on that one and went on) must not take the older one's answer,
    // which predates the writes decided since.
    let rt = runtime();
    let _context = rt.enter();
    let store = MemoryReceipts::new(KeyScheme::Scope);
    store.insert(&a(), SessionRecord::new("old"), UnixMillis(1));
    let mut io = open(&rt, &store);
    let stall = store.stall();
    io.read(a());
    store.wait_for_stalled_calls(1);
    stall.release();
    store.wait_for_calls(|calls| calls.reads == 1);
    // The old read has answered "old", but the worker has not taken it in. A write is decided
    // and lands; then the lifecycle asks for the receipt again.
    io.write(a(), put("new", Expect::Session("old".into())));
    store.wait_for_calls(|calls| calls.puts == 1);
    io.read(a());
    let events = settle(&rt, &mut io);
    assert_eq!(reads(&events), [Some("new".to_string())], "{events:?}");
    assert_eq!(store.get(&a()).unwrap().session_id, "new");
}

#[test]
fn a_read_waits_for_a_queued_removal_of_its_channel() {
    // Rule: reads never wait behind another scope's writes, but always behind their own
    // scope's — a removal of every receipt of the scope's channel included, so a thread of a
    // channel the agent was removed from never reopens a session from before the removal.
    let rt = runtime();
    let _context = rt.enter();
    let store = MemoryReceipts::new(KeyScheme::Scope);
    store.insert(&a(), SessionRecord::new("sa"), UnixMillis(1));
    let mut io = open(&rt, &store);
    let stall = store.stall();
    io.write(c(), put("sc", Expect::Absent));
    store.wait_for_stalled_calls(1);
    io.remove_channel("c1".into(), Moment(0));
    io.read(a());
    assert_eq!(
        io.in_flight(),
        1,
        "only the write of c2 runs; the read of c1 waits"
    );
    stall.release();
    let events = settle(&rt, &mut io);
    assert_eq!(reads(&events), [None], "{events:?}");
    assert!(
        store.get(&c()).is_some(),
        "another channel's write is not held up"
    );
}

#[test]
fn a_read_does_not_wait_for_another_scopes_write() {
    // Rule: a read never waits behind another scope's writes (so a slow write elsewhere never
    // delays a turn).
    let rt = runtime();
    let _context = rt.enter();
    let store = MemoryReceipts::new(KeyScheme::Scope);
    let mut io = open(&rt, &store);
    let stall = store.stall();
    io.write(c(), put("sc", Expect::Absent));
    io.read(a());
    assert_eq!(
        io.in_flight(),
        2,
        "the write of c2 and the read of c1 run side by side"
    );
    store.wait_for_stalled_calls(2);
    stall.release();
    let events = settle(&rt, &mut io);
    assert_eq!(reads(&events), [None]);
}
