//! Guards of patch `session-store-resume` for a receipt store that is down, frozen, refusing the
//! harness or write-locked (issue 18.2): the store is an optimisation, so no store outage may
//! hold up a turn that does not need a receipt, and none may lose what the harness decided.
//!
//! What the harness promises, and how each scenario shows it by events (an answer published
//! while the database is still frozen, a receipt that appears in the store), never by timing:
//!
//! * every store call runs off the event loop, so a hot follow-up and a thread whose trigger is
//!   its own root (nothing can be stored for it yet) are answered while the store does not
//!   answer at all;
//! * a turn that needs its receipt waits for it at most `--session-store-wait-secs`, then goes on
//!   in a new session with one notice in the thread; that session becomes the thread's (written
//!   when the store returns, and reopened after a restart);
//! * writes are queued and replayed after an outage, conditional on what the harness believed,
//!   so a replay never overwrites a receipt another harness wrote meanwhile;
//! * the harness starts and serves with the store down and attaches when it comes back;
//! * a harness killed with writes outstanding loses no reply and answers nothing twice.
//!
//! Each scenario runs the real patched harness against the test agent over the test relay
//! (`RelayWorld`: the owner posts signed events, the harness connects as the agent and hears what
//! is posted while it is subscribed; a restart is the harness stopped and started again), on a
//! PostgreSQL server of its own (`pg-fixture`: frozen with SIGSTOP, stopped, restarted) or on the
//! embedded SQLite store write-locked by another process (the package's `sqlite-write-lock`
//! helper). The fork's settings are passed through the environment (see
//! `buzz_acp_fork_tests::outage`): the tree without the series runs the same scenarios and fails
//! them by what it does (it stores nothing and tells the thread nothing).

use std::path::Path;

use buzz_acp_fork_tests::outage::*;
use buzz_acp_fork_tests::relay::{DM_CHANNEL, RELAY_CHANNEL, RelayWorld};
use buzz_acp_fork_tests::*;
use buzz_session_store::{Expect, PutOutcome, ReceiptStore, UnixMillis};

/// The session ids of every `session/load` and `session/resume` on the wire, in order.
fn restored_sessions(frames: &[WireFrame]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| matches!(f.method.as_deref(), Some("session/load" | "session/resume")))
        .filter_map(|f| f.params["sessionId"].as_str().map(str::to_string))
        .collect()
}

/// How many of `frames` open or reopen a session (`session/new`, `session/load`,
/// `session/resume`): none for a hot turn.
fn session_setups(frames: &[WireFrame]) -> usize {
    ["session/new", "session/load", "session/resume"]
        .iter()
        .map(|m| count_method(frames, m))
        .sum()
}

/// Waits (bounded by [`WAIT`]: the store is up) until the receipt in `#general` names `session`,
/// and asserts that it does.
fn wait_stored(receipts: impl Fn() -> Vec<buzz_session_store::StoredReceipt>, session: &str) {
    let in_general = || sessions_by_channel(&receipts()).get(RELAY_CHANNEL).cloned();
    let _ = wait_until(WAIT, || {
        (in_general().as_deref() == Some(session)).then_some(())
    });
    assert_eq!(
        in_general().as_deref(),
        Some(session),
        "the thread's receipt is in the store"
    );
}

/// Whether `text` is the notice that the receipt store did not answer in time, whatever it says
/// the new session has (the recent messages, or with `continuity-handoff` the whole thread).
fn is_store_unavailable_notice(text: &str) -> bool {
    let template = buzz_session_lifecycle::notice::store_unavailable("\u{0}");
    let (before, after) = template
        .split_once('\u{0}')
        .expect("the notice names what the new session has");
    text.starts_with(before) && text.ends_with(after)
}

/// The harness's store health records (`store_health`), in order: `true` when the store
/// answered again (or for the first time), `false` when it stopped answering.
fn store_health(w: &RelayWorld) -> Vec<bool> {
    w.s.observer_records("store_health")
        .iter()
        .map(|r| r["up"].as_bool().expect("store_health has `up`"))
        .collect()
}

/// Waits until the harness has found the store unavailable (a receipt write failed), and asserts
/// that it did.
fn wait_for_store_down(w: &RelayWorld) {
    let _ = wait_until(CATCH_UP, || store_health(w).contains(&false).then_some(()));
    assert_ne!(
        store_health(w).iter().filter(|up| !**up).count(),
        0,
        "the harness finds the store unavailable"
    );
}

/// A long-running harness on a private PostgreSQL store answers thread A; then the database is
/// frozen (it accepts connections and never answers). A's follow-up continues hot on the live
/// session at once (its receipt is checked beside the turn, not before it), and a new thread B is
/// answered from a new session, both while the database is still frozen. The outage lasts until
/// the harness has seen B's receipt write fail (and recorded the store as down), and A's next
/// follow-up is answered hot then too. Once the database thaws, B's receipt reaches the store by
/// the replay, A's still names A's session, and the harness recorded the outage once.
#[test]
fn hot_follow_ups_and_new_threads_are_answered_while_the_database_is_frozen() {
    let pg = pg_server();
    let url = pg.url();
    let w = RelayWorld::new();
    add_ops_channel(&w);
    let harness = start_with(&w, &[store_at(&url)]);
    let a = w.post_top("thread A: remember alpha-7301");
    let ra = wait_answer(&w, &a);
    let a_session = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| pg_receipts(&url, &w), &a_session);

    pg.freeze().expect("freeze the database");
    let before = wire(&w.s).len();
    let q = w.post_reply(&a, &ra, "what did I ask you to remember?");
    let rq = wait_answer(&w, &q);
    assert_eq!(turns(&rq), 2, "continued on A's live session");
    assert!(rq.content.contains("alpha-7301"), "{}", rq.content);
    // The first follow-up after the freeze did not wait for the store: the check of A's receipt
    // runs beside the turn and meets its 10 s deadline only after the answer is out, so nothing
    // has recorded A's receipt as unreadable yet (a check before the turn would have, first).
    assert_eq!(
        w.s.observer_records("receipt_unreadable"),
        Vec::<serde_json::Value>::new(),
        "the answer did not wait for a read of the frozen store"
    );
    assert_eq!(
        session_setups(&wire(&w.s)[before..]),
        0,
        "hot: no session/new, session/load or session/resume"
    );

    // B's trigger is its own root: nothing can be stored for B yet, so no read is needed. A read
    // of the frozen database could only have failed (after its 10 s deadline), and the turn would
    // then have gone on with a notice that the store is unavailable: there is none.
    let b = post_top_in_ops(&w, "thread B: remember beta-4242");
    let rb = wait_answer(&w, &b);
    assert_eq!(turns(&rb), 1, "a new session for a new thread");
    assert!(notices_in_thread(&w, &a).is_empty());
    assert!(notices_in_thread(&w, &b).is_empty());
    let b_session = session_order(&wire(&w.s))[1].clone();

    // The outage outlasts the write deadline: B's receipt write fails and waits for its replay.
    // Meanwhile A's next follow-up continues hot as well.
    wait_for_store_down(&w);
    let before = wire(&w.s).len();
    let q2 = w.post_reply(&a, &rq, "and once more?");
    let rq2 = wait_answer(&w, &q2);
    assert_eq!(turns(&rq2), 3);
    assert_eq!(session_setups(&wire(&w.s)[before..]), 0, "hot");

    // Every answer was published while the database was frozen: it thaws only now.
    pg.thaw().expect("thaw the database");
    let stored = sessions_when(|| pg_receipts(&url, &w), |m| m.contains_key(OPS));
    assert_eq!(
        stored.get(OPS),
        Some(&b_session),
        "B's receipt reaches the store once the database answers again"
    );
    assert_eq!(
        stored.get(RELAY_CHANNEL),
        Some(&a_session),
        "A's receipt still names A's session"
    );
    assert_eq!(
        store_health(&w),
        [true, false, true],
        "the outage was recorded once, down then up"
    );
    harness.stop();
}

/// A harness restarted after A's first answer knows A's session only from its receipt. The
/// database is frozen, and a turn waits at most 2 s for a receipt: A's follow-up is answered from
/// a new session with exactly one notice (a second follow-up continues that session hot and
/// tells nothing). Once the database thaws, the new session's receipt is written, and a later
/// restart reopens that session, never the old one.
#[test]
fn a_follow_up_whose_receipt_cannot_be_read_goes_on_in_a_new_session_that_becomes_the_threads() {
    let pg = pg_server();
    let url = pg.url();
    let w = RelayWorld::new();
    let first = start_with(&w, &[store_at(&url)]);
    let root = w.post_top("remember alpha-7301");
    let r1 = wait_answer(&w, &root);
    let old = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| pg_receipts(&url, &w), &old);
    first.stop();

    pg.freeze().expect("freeze the database");
    let harness = start_with(&w, &[store_at(&url), store_wait_secs("2")]);
    let q2 = w.post_reply(&root, &r1, "what did I ask you to remember?");
    let r2 = wait_answer(&w, &q2);
    assert_eq!(turns(&r2), 1, "a new session: {}", r2.content);
    assert!(
        r2.content.contains("alpha-7301"),
        "the new session got the recent messages: {}",
        r2.content
    );
    let new = session_order(&wire(&w.s))[1].clone();
    assert_ne!(new, old);
    let q3 = w.post_reply(&root, &r2, "and what else?");
    let r3 = wait_answer(&w, &q3);
    assert_eq!(turns(&r3), 2, "continued on the new session");
    let notices = notices_in_thread(&w, &root);
    assert_eq!(notices.len(), 1, "one notice: {notices:?}");
    assert!(is_store_unavailable_notice(&notices[0].content));
    assert_eq!(notices[0].tag_values("q").next(), Some(q2.id.as_str()));
    assert!(
        restored_sessions(&wire(&w.s)).is_empty(),
        "the old session was never reopened"
    );

    pg.thaw().expect("thaw the database");
    let stored = sessions_when(
        || pg_receipts(&url, &w),
        |m| m.get(RELAY_CHANNEL) == Some(&new),
    );
    assert_eq!(
        stored.get(RELAY_CHANNEL),
        Some(&new),
        "the new session's receipt is written once the database answers again"
    );
    harness.stop();

    let restarted = start_with(&w, &[store_at(&url)]);
    let q4 = w.post_reply(&root, &r3, "still there?");
    let r4 = wait_answer(&w, &q4);
    restarted.stop();
    assert_eq!(
        restored_sessions(&wire(&w.s)),
        [new],
        "the new session, never the old one"
    );
    assert_eq!(
        turns(&r4),
        3,
        "the reopened session remembers its two turns"
    );
    assert_eq!(notices_in_thread(&w, &root).len(), 1, "no further notice");
}

/// A replayed write never overwrites a receipt another harness wrote meanwhile. The database
/// stays up; only the harness's own role may no longer log in (`ALTER ROLE … NOLOGIN`, and its
/// connections are ended), so the store is unavailable to the harness alone and the other writer
/// goes first, deterministically. A refusal that lasts met by a running harness does not stop
/// it: it records the refusal (`store_health` with its reason) and goes on serving. It answers
/// A's follow-up from a new session (its receipt cannot be read) and queues that session's
/// receipt; another harness records a newer session for A; the harness's role may log in again;
/// its replay is refused, and the other harness's receipt stays.
#[test]
fn a_replayed_write_never_overwrites_a_receipt_another_harness_wrote_meanwhile() {
    let pg = pg_server();
    let admin = pg.url();
    sql(
        &admin,
        "CREATE ROLE harness LOGIN; GRANT ALL ON SCHEMA public TO harness;",
    );
    let url = url_as(&admin, "harness");
    let w = RelayWorld::new();
    let first = start_with(&w, &[store_at(&url)]);
    let root = w.post_top("remember alpha-7301");
    let r1 = wait_answer(&w, &root);
    let first_session = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| pg_receipts(&admin, &w), &first_session);
    first.stop();

    // The harness starts with its store answering (a store that refuses a starting harness for
    // good stops it: see the last scenario); then its role is locked out under it.
    let earlier = store_health(&w).len();
    let harness = start_with(&w, &[store_at(&url), store_wait_secs("2")]);
    let _ = wait_until(CATCH_UP, || {
        (store_health(&w).len() > earlier).then_some(())
    });
    assert_eq!(
        store_health(&w)[earlier..],
        [true],
        "the store answered the harness"
    );
    sql(
        &admin,
        "ALTER ROLE harness NOLOGIN; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'harness';",
    );
    let q = w.post_reply(&root, &r1, "what did I say?");
    let rq = wait_answer(&w, &q);
    assert_eq!(
        turns(&rq),
        1,
        "a new session: its receipt could not be read"
    );
    assert_eq!(notices_in_thread(&w, &root).len(), 1, "one notice");
    let mine = session_order(&wire(&w.s))[1].clone();
    let refusals: Vec<serde_json::Value> =
        w.s.observer_records("store_health")
            .iter()
            .map(|r| r["refusal"].clone())
            .collect();
    assert_eq!(
        refusals.last(),
        Some(&serde_json::json!("role_not_admitted")),
        "the running harness says the store refuses it for good, and why: {refusals:?}"
    );

    // Another harness sharing the database records a newer session for the thread.
    let stored = pg_receipts(&admin, &w)
        .into_iter()
        .next()
        .expect("A's receipt");
    let mut theirs = stored.record.clone();
    theirs.session_id = "session-of-another-harness".into();
    let other = pg_store(&admin, &w);
    let put = other
        .put(
            &stored.key,
            &theirs,
            &Expect::Session(first_session.clone()),
            UnixMillis::now(),
        )
        .expect("the other harness writes");
    assert!(matches!(put, PutOutcome::Written { .. }), "{put:?}");
    drop(other);

    sql(&admin, "ALTER ROLE harness LOGIN;");
    // The harness replays its queued write as soon as it can log in again: the store refuses it
    // (the receipt was written after the harness decided) and the harness records the refusal.
    let _ = wait_until(CATCH_UP, || {
        w.s.observer_records("receipt_conflict").into_iter().next()
    });
    let refused: Vec<serde_json::Value> =
        w.s.observer_records("receipt_conflict")
            .iter()
            .map(|r| r["storedSessionId"].clone())
            .collect();
    assert_eq!(
        refused,
        ["session-of-another-harness"],
        "the harness replayed its write and the store refused it"
    );
    let by_channel = sessions_by_channel(&pg_receipts(&admin, &w));
    assert_eq!(by_channel[RELAY_CHANNEL], "session-of-another-harness");
    harness.stop();
    let by_channel = sessions_by_channel(&pg_receipts(&admin, &w));
    assert_eq!(
        by_channel[RELAY_CHANNEL], "session-of-another-harness",
        "nor at shutdown: {mine} was never written over it"
    );
}

/// The database is down when the harness starts (the server is stopped): the harness starts
/// anyway. A new thread's root is answered at once (nothing can be stored for it). A direct
/// message needs its conversation's receipt, which cannot be read: after the 1 s the harness
/// allows, it is answered from a new session, with the notice. When the server comes back, the
/// harness attaches to it: both receipts appear, and the observer recorded the outage once, down
/// then up.
#[test]
fn the_harness_serves_with_the_store_down_at_startup_and_attaches_when_it_returns() {
    let mut pg = pg_server();
    let url = pg.url();
    pg.stop().expect("stop the database");
    let w = RelayWorld::new();
    let harness = start_with(&w, &[store_at(&url), store_wait_secs("1")]);
    let a = w.post_top("a new thread while the store is down");
    let ra = wait_answer(&w, &a);
    assert_eq!(turns(&ra), 1);
    assert!(
        notices_in_thread(&w, &a).is_empty(),
        "a thread's root needs no receipt: nothing to tell"
    );
    let a_session = session_order(&wire(&w.s))[0].clone();

    let d = w.post_dm("a direct message while the store is down");
    let rd = wait_answer(&w, &d);
    assert_eq!(turns(&rd), 1);
    let notices = notices_in_thread(&w, &d);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(is_store_unavailable_notice(&notices[0].content));
    let d_session = session_order(&wire(&w.s))[1].clone();

    pg.restart().expect("restart the database");
    let stored = sessions_when(|| pg_receipts(&url, &w), |m| m.len() == 2);
    assert_eq!(
        stored.get(RELAY_CHANNEL),
        Some(&a_session),
        "the harness attaches to the store: the thread's receipt appears"
    );
    assert_eq!(
        stored.get(DM_CHANNEL),
        Some(&d_session),
        "and the conversation's"
    );
    assert_eq!(store_health(&w), [false, true], "one outage, recorded once");
    harness.stop();
}

/// Two harnesses overlap on one state directory (a rolling deploy), and the other one holds the
/// embedded store's write lock (an exclusive transaction on `sessions.sqlite3`). Meanwhile A's
/// follow-up continues hot and a new thread B is answered; once the lock is released, B's receipt
/// lands.
#[test]
fn a_sqlite_write_lock_held_by_another_process_holds_up_no_turn() {
    let w = RelayWorld::new();
    add_ops_channel(&w);
    let harness = start_with(&w, &[]);
    let a = w.post_top("thread A: remember alpha-7301");
    let ra = wait_answer(&w, &a);
    let a_session = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| sqlite_receipts(&w), &a_session);

    let lock = WriteLock::hold(
        Path::new(env!("CARGO_BIN_EXE_sqlite-write-lock")),
        &store_path(&w),
    );
    let before = wire(&w.s).len();
    let q = w.post_reply(&a, &ra, "what did I ask you to remember?");
    let rq = wait_answer(&w, &q);
    assert_eq!(turns(&rq), 2, "continued on A's live session");
    assert_eq!(session_setups(&wire(&w.s)[before..]), 0, "hot");
    let b = post_top_in_ops(&w, "thread B: remember beta-4242");
    let rb = wait_answer(&w, &b);
    assert_eq!(turns(&rb), 1);
    assert!(notices_in_thread(&w, &b).is_empty());
    let b_session = session_order(&wire(&w.s))[1].clone();

    // The lock outlasts the store's busy wait: B's receipt write fails and waits for its replay.
    wait_for_store_down(&w);
    // Both answers were published while the other process held the lock: it lets go only now.
    lock.release();
    let stored = sessions_when(|| sqlite_receipts(&w), |m| m.contains_key(OPS));
    assert_eq!(
        stored.get(OPS),
        Some(&b_session),
        "B's receipt lands once the lock is released"
    );
    assert_eq!(stored.get(RELAY_CHANNEL), Some(&a_session));
    harness.stop();
}

/// A harness is killed (SIGKILL) while receipt writes are outstanding: the database is frozen
/// while A's follow-up and a new thread B are answered, so B's receipt (and, with delivery
/// persisted, A's ledger commit) cannot have reached it. No reply is lost, and after a restart
/// nothing is answered twice: what the harness answered is in the relay, which does not depend
/// on the store. (Like upstream's, the restarted harness hears only what is posted once it is
/// subscribed, so the next messages are posted then.)
///
/// What the next turn of each thread does then:
/// * A: the store still has A's receipt (written before the outage), naming A's session, which
///   the agent still has with both turns: the restart reopens it (`session/load`). What was lost
///   is at most the ledger of the second turn, so the reopened session may be shown that turn's
///   messages again as context; it is never answered again.
/// * B: its receipt never reached the store, and nobody else knows B's session: B's follow-up is
///   answered from a new session that gets the thread's recent messages (upstream's behaviour for
///   a thread without a receipt). The store answered, so nothing was unavailable and there is no
///   notice. The new session's receipt is written.
#[test]
fn a_harness_killed_with_writes_outstanding_loses_no_reply_and_answers_nothing_twice() {
    let pg = pg_server();
    let url = pg.url();
    let w = RelayWorld::new();
    add_ops_channel(&w);
    let harness = start_with(&w, &[store_at(&url)]);
    let a = w.post_top("thread A: remember alpha-7301");
    let ra = wait_answer(&w, &a);
    let a_session = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| pg_receipts(&url, &w), &a_session);

    pg.freeze().expect("freeze the database");
    let q = w.post_reply(&a, &ra, "what did I ask you to remember?");
    let rq = wait_answer(&w, &q);
    assert_eq!(turns(&rq), 2);
    let b = post_top_in_ops(&w, "thread B: remember beta-4242");
    let rb = wait_answer(&w, &b);
    assert_eq!(turns(&rb), 1);
    let b_session = session_order(&wire(&w.s))[1].clone();
    harness.kill();
    pg.thaw().expect("thaw the database");

    let restarted = start_with(&w, &[store_at(&url)]);
    let qa = w.post_reply(&a, &rq, "and now, what was it?");
    let qb = w.post_reply(&b, &rb, "what did I ask you to remember?");
    let answer_a = wait_answer(&w, &qa);
    let answer_b = wait_answer(&w, &qb);
    for event in [&a, &q, &b, &qa, &qb] {
        assert_eq!(
            w.answers_to(&event.id),
            1,
            "answered exactly once: {:?}",
            event.content
        );
    }

    assert_eq!(
        restored_sessions(&wire(&w.s)),
        [a_session],
        "A's session reopened from the receipt the store still had"
    );
    assert_eq!(
        turns(&answer_a),
        3,
        "the agent kept both turns of A's session"
    );
    assert_eq!(turns(&answer_b), 1, "B's follow-up starts a new session");
    assert!(
        answer_b.content.contains("beta-4242"),
        "with B's recent messages: {}",
        answer_b.content
    );
    let b_new = session_order(&wire(&w.s))[2].clone();
    assert_ne!(b_new, b_session);
    assert!(notices_in_thread(&w, &a).is_empty());
    assert!(notices_in_thread(&w, &b).is_empty());
    let stored = sessions_when(|| pg_receipts(&url, &w), |m| m.get(OPS) == Some(&b_new));
    assert_eq!(stored.get(OPS), Some(&b_new), "B's new session is recorded");
    restarted.stop();
}

/// With the whole series, a turn's delivery ledger is committed to the receipt. The commits of
/// three hot follow-ups made while the database is frozen wait as one write for the thread (the
/// thread's latest state), survive the failure of the first attempt, and land once the database
/// thaws: the stored ledger names every follow-up and its answer.
///
/// Not a guard of `session-store-resume`: without `delta-context-delivery` no ledger is committed
/// after a turn, so with only the first patches there is nothing to observe. It runs with the
/// whole tree's tests.
#[test]
fn ledger_commits_queued_while_the_database_is_frozen_land_as_the_threads_latest_state() {
    let pg = pg_server();
    let url = pg.url();
    let w = RelayWorld::new();
    let harness = start_with(&w, &[store_at(&url)]);
    let a = w.post_top("thread A: remember alpha-7301");
    let mut last = wait_answer(&w, &a);
    let a_session = session_order(&wire(&w.s))[0].clone();
    wait_stored(|| pg_receipts(&url, &w), &a_session);

    pg.freeze().expect("freeze the database");
    let mut delivered = Vec::new();
    for text in ["one", "two", "three"] {
        let q = w.post_reply(&a, &last, text);
        last = wait_answer(&w, &q);
        delivered.push(q.id.clone());
        delivered.push(last.id.clone());
    }
    wait_for_store_down(&w);
    pg.thaw().expect("thaw the database");

    let trigger = delivered[delivered.len() - 2].clone();
    let ledger = || -> Vec<String> {
        pg_receipts(&url, &w)
            .into_iter()
            .find(|r| r.key.channel_id() == RELAY_CHANNEL)
            .and_then(|r| r.record.delivery)
            .map(|d| d.delivered_event_ids)
            .unwrap_or_default()
    };
    let _ = wait_until(CATCH_UP, || ledger().contains(&trigger).then_some(()));
    let ledger = ledger();
    assert!(
        ledger.contains(&trigger),
        "the last follow-up's ledger commit lands once the database answers again: {ledger:?}"
    );
    for id in &delivered {
        assert!(ledger.contains(id), "{id} missing from {ledger:?}");
    }
    assert_eq!(
        sessions_by_channel(&pg_receipts(&url, &w))[RELAY_CHANNEL],
        a_session
    );
    harness.stop();
}

/// A store that refuses the harness for a reason that lasts is a misconfiguration, not an
/// outage: a database that does not exist, or a server whose certificate does not verify against
/// the CA the URL names (`sslmode=verify-full`). The harness does not start: it exits non-zero
/// with the reason, before it starts an agent or publishes anything — rather than serve without
/// receipts while every thread loses its earlier session at each restart. (A harness that
/// started would run until stopped: it is given [`WAIT`] to exit.)
#[test]
fn a_store_that_refuses_the_harness_for_good_stops_it_at_startup_with_the_reason() {
    let pg = pg_server_with(pg_fixture::Options {
        tcp: true,
        tls: true,
    });
    let tls = pg.tls().expect("the fixture serves TLS");
    let missing_database = pg.url().replace("@/postgres?", "@/buzz_no_such_database?");
    assert_ne!(missing_database, pg.url());
    let untrusted_ca = pg
        .tcp_url(
            "localhost",
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                tls.other_ca_cert.display()
            ),
        )
        .expect("a TCP URL");
    let cases = [
        (missing_database.as_str(), "does not exist"),
        (untrusted_ca.as_str(), "certificate failed verification"),
    ];
    for (url, reason) in cases {
        let w = RelayWorld::new();
        let (status, stderr) = run_until_exit(&w, &[store_at(url)]);
        assert!(
            status.is_some_and(|s| !s.success()),
            "the harness must not start on {url}; it exited with {status:?}:\n{stderr}"
        );
        assert!(
            stderr.contains("refuses this harness") && stderr.contains(reason),
            "the error names the refusal ({reason}):\n{stderr}"
        );
        assert_eq!(w.replies(), Vec::new(), "nothing was published");
        assert!(
            !w.s.wire_log.exists() || wire(&w.s).is_empty(),
            "no agent was started"
        );
    }
    // The same server, reached as configured, serves: the refusals were the URLs'.
    let w = RelayWorld::new();
    let trusted = pg
        .tcp_url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", tls.ca_cert.display()),
        )
        .expect("a TCP URL");
    let harness = start_with(&w, &[store_at(&trusted)]);
    let root = w.post_top("remember alpha-7301");
    let answer = wait_until(WAIT, || answer_to(&w, &root.id));
    let status = harness.stop();
    assert!(answer.is_some(), "the harness serves on {trusted}");
    assert!(status.success(), "and stops cleanly: {status}");
}
