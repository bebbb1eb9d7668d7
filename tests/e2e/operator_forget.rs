//! The operator's `buzz-receipts forget` against a harness that is running on the same store
//! (docs/STORE.md, "What `forget` means for a running harness"), on SQLite and on PostgreSQL.
//!
//! The real `buzz-receipts` binary forgets a thread whose session the harness keeps live. The
//! thread's next message must be answered by a new session — on the wire: a second `session/new`
//! for the thread, asking for a fresh conversation, and no prompt for the forgotten session ever
//! again — and `buzz-receipts list` must never show the forgotten session again: not once the
//! harness has settled its turns, not after it stops (flushing its queued writes), not after a
//! restart. A forget while the thread's turn runs lets that turn answer from its session, and
//! the turn's settle does not bring the receipt back.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, the harness
//! connects as the agent, and a restart is the harness stopped and started again. The operator's
//! command is given the harness's store scope: the relay's identity (its websocket URL) and the
//! agent's key.

use std::process::{Command, Output};

use buzz_acp::relay::Event;
use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;
use serde_json::Value;

/// Where the harness and the operator's command find the receipts.
enum Store {
    /// The harness's default: SQLite in its state directory.
    Sqlite,
    /// A shared PostgreSQL database (given to the harness as its variable, which a harness
    /// without the store ignores).
    Postgres(String),
}

impl Store {
    fn postgres() -> Option<Store> {
        postgres_url().map(Store::Postgres)
    }

    /// The harness's environment for this store.
    fn harness_env(&self) -> Vec<(&str, &str)> {
        match self {
            Store::Sqlite => Vec::new(),
            Store::Postgres(url) => vec![("BUZZ_ACP_SESSION_STORE_URL", url.as_str())],
        }
    }

    /// Runs `buzz-receipts ARGS` on the harness's store scope (the relay's identity and the
    /// agent's key).
    fn receipts(&self, w: &RelayWorld, args: &[&str]) -> Output {
        let mut command = Command::new(acp_test_agent::harness::bin_path("buzz-receipts"));
        for name in [
            "BUZZ_ACP_STATE_DIR",
            "BUZZ_ACP_SESSION_STORE_URL",
            "BUZZ_ACP_AGENT_PUBKEY",
        ] {
            command.env_remove(name);
        }
        command.arg("--state-dir").arg(&w.s.state_dir);
        if let Store::Postgres(url) = self {
            command.arg("--session-store-url").arg(url);
        }
        let scope = w.store_scope();
        command
            .args([
                "--relay",
                &scope.relay,
                "--agent-pubkey",
                &scope.agent_pubkey,
            ])
            .args(args)
            .output()
            .expect("run buzz-receipts")
    }

    /// `buzz-receipts list --json`: (scope, session id) of every receipt.
    fn listed(&self, w: &RelayWorld) -> Vec<(String, String)> {
        let out = self.receipts(w, &["list", "--json"]);
        assert!(
            out.status.success(),
            "buzz-receipts list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                let row: Value = serde_json::from_str(line).expect("a JSON line");
                let scope = row["scope"].as_str().unwrap_or_default().to_string();
                let session = row["record"]["sessionId"].as_str().unwrap_or_default();
                (scope, session.to_string())
            })
            .collect()
    }

    /// The session ids `buzz-receipts list` shows.
    fn sessions(&self, w: &RelayWorld) -> Vec<String> {
        self.listed(w).into_iter().map(|(_, id)| id).collect()
    }

    /// `buzz-receipts forget SCOPE` for the receipt that names `session` (its scope as the list
    /// shows it: the harness's key for the thread).
    fn forget(&self, w: &RelayWorld, session: &str) {
        let listed = self.listed(w);
        let scope = listed
            .iter()
            .find(|(_, id)| id == session)
            .map(|(scope, _)| scope.clone())
            .unwrap_or_else(|| panic!("no receipt names {session}: {listed:?}"));
        let out = self.receipts(w, &["forget", &scope]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "buzz-receipts forget: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains(session) && said.contains("forgot 1 receipt"),
            "{said}"
        );
    }
}

/// The thread's first message, answered; returns the root, the answer and its session, once
/// `buzz-receipts list` shows that session's receipt.
fn answered_thread(w: &RelayWorld, store: &Store) -> (Event, Event, String) {
    let root = w.post_top("remember alpha-7301");
    let answer = w.wait_for_reply(&root.id, WAIT).expect("the first answer");
    let session = session_order(&wire(&w.s))[0].clone();
    let listed = wait_until(WAIT, || {
        (store.sessions(w) == [session.as_str()]).then_some(())
    });
    assert!(
        listed.is_some(),
        "the receipt of the thread's session is listed: {:?}",
        store.sessions(w)
    );
    (root, answer, session)
}

/// The prompts each session got, in order: (session id, count).
fn prompts_to(frames: &[WireFrame], session: &str) -> usize {
    prompt_texts(frames)
        .iter()
        .filter(|(id, _)| id == session)
        .count()
}

/// After the harness stopped: the thread's receipt names `new`, never `old`; after a restart the
/// next message restores `new` (its second turn), and the list still never shows `old`.
fn after_a_restart(
    w: &RelayWorld,
    store: &Store,
    root: &Event,
    last: &Event,
    old: &str,
    new: &str,
) {
    assert_eq!(
        store.sessions(w),
        [new],
        "once the harness settled and flushed"
    );
    let running = w.start_env(&[], &[], &store.harness_env());
    let q = w.post_reply(root, last, "still there?");
    let answer = w.wait_for_reply(&q.id, WAIT);
    running.stop().expect("the harness stops");
    let answer = answer.expect("answered after the restart");
    assert_eq!(turns(&answer), 2, "the new session was restored");
    let frames = wire(&w.s);
    assert_eq!(
        prompt_texts(&frames).last().map(|(id, _)| id.as_str()),
        Some(new)
    );
    assert_eq!(store.sessions(w), [new], "after the restart");
    assert!(!store.sessions(w).iter().any(|id| id == old));
}

/// A thread whose session is live (resident, or held by an idle worker) is forgotten. The harness
/// never waits for the store before it continues a live session: the next message is answered by
/// that session while its receipt is checked beside the turn; the check finds the receipt gone,
/// so the session is released after that turn and never written back, and the thread's
/// following message is answered by a new session that asks for a fresh conversation.
fn forget_a_live_session(store: &Store) {
    let w = RelayWorld::new();
    let running = w.start_env(&[], &[], &store.harness_env());
    let (root, r1, old) = answered_thread(&w, store);

    store.forget(&w, &old);
    assert!(store.sessions(&w).is_empty(), "forgotten at once");
    let q = w.post_reply(&root, &r1, "what did I ask you?");
    let r2 = w
        .wait_for_reply(&q.id, WAIT)
        .expect("answered after the forget");
    assert_eq!(
        turns(&r2),
        2,
        "the turn beside the check continued the live session"
    );
    wait_until(WAIT, || {
        (!w.s.observer_records("receipt_forgotten").is_empty()).then_some(())
    })
    .expect("the check beside the turn saw the forget");
    let q2 = w.post_reply(&root, &r2, "and now?");
    let r3 = w
        .wait_for_reply(&q2.id, WAIT)
        .expect("answered after the check");
    assert_eq!(turns(&r3), 1, "a new session answered");
    assert!(
        !store.sessions(&w).contains(&old),
        "the turn beside the check did not bring the receipt back"
    );
    running.stop().expect("the harness stops");

    let frames = wire(&w.s);
    assert_eq!(served_as(&frames, &root.id), ["new", "continued", "new"]);
    let news = requests_of(&frames, "session/new");
    assert_eq!(news.len(), 2);
    assert_eq!(
        news[1].params["_meta"]["freshSession"], true,
        "the new session asks for a fresh conversation"
    );
    assert_eq!(
        prompts_to(&frames, &old),
        2,
        "no prompt after the turn that saw the forget"
    );
    let new = prompt_texts(&frames).last().expect("prompts").0.clone();
    assert_ne!(new, old);
    after_a_restart(&w, store, &root, &r3, &old, &new);
}

/// The thread is forgotten while its turn runs: the turn answers from its session, its settle
/// does not bring the receipt back, and the next message is answered by a new session.
fn forget_during_a_turn(store: &Store) {
    let w = RelayWorld::new();
    let running = w.start_env(&[], &[], &store.harness_env());
    let (root, r1, old) = answered_thread(&w, store);

    let q = w.post_reply(&root, &r1, "think about it !gate:held");
    wait_until(WAIT, || (prompts(&wire(&w.s)).len() == 2).then_some(())).expect("the turn runs");
    store.forget(&w, &old);
    w.s.open_gate("held").expect("open the gate");
    let r2 = w
        .wait_for_reply(&q.id, WAIT)
        .expect("the running turn answers");
    assert_eq!(turns(&r2), 2, "from the session it ran on");
    // The forget reaches the harness in one of two ways, whichever the harness has: the store
    // refuses the running turn's commit (a harness that commits ledgers, with
    // delta-context-delivery or continuity-handoff), or the receipt check beside the next hot
    // turn (session-store-resume alone commits nothing). The old session answers at most that
    // one turn more, and none after the harness knew.
    let q3 = w.post_reply(&root, &r2, "and now?");
    let r3 = w
        .wait_for_reply(&q3.id, WAIT)
        .expect("answered after the forget");
    let (last, continued_beside_the_check) = if turns(&r3) == 1 {
        (r3, false)
    } else {
        assert_eq!(turns(&r3), 3, "the old session continued beside the check");
        wait_until(WAIT, || {
            (!w.s.observer_records("receipt_forgotten").is_empty()).then_some(())
        })
        .expect("the check told the harness of the forget");
        let q4 = w.post_reply(&root, &r3, "and after the check?");
        let r4 = w
            .wait_for_reply(&q4.id, WAIT)
            .expect("answered after the check");
        (r4, true)
    };
    assert_eq!(turns(&last), 1, "a new session answered");
    assert!(
        !store.sessions(&w).contains(&old),
        "the settle did not bring the receipt back"
    );
    running.stop().expect("the harness stops");

    let frames = wire(&w.s);
    let (served, old_prompts) = if continued_beside_the_check {
        (vec!["new", "continued", "continued", "new"], 3)
    } else {
        (vec!["new", "continued", "new"], 2)
    };
    assert_eq!(served_as(&frames, &root.id), served);
    assert_eq!(
        prompts_to(&frames, &old),
        old_prompts,
        "no prompt after the harness knew of the forget"
    );
    let new = prompt_texts(&frames).last().expect("prompts").0.clone();
    assert_ne!(new, old);
    after_a_restart(&w, store, &root, &last, &old, &new);
}

#[test]
fn a_forgotten_live_session_is_replaced_after_the_turn_that_saw_the_forget_on_sqlite() {
    forget_a_live_session(&Store::Sqlite);
}

#[test]
fn a_forgotten_live_session_is_replaced_after_the_turn_that_saw_the_forget_on_postgres() {
    let Some(store) = Store::postgres() else {
        return;
    };
    forget_a_live_session(&store);
}

#[test]
fn a_forget_during_a_turn_is_not_undone_by_its_settle_on_sqlite() {
    forget_during_a_turn(&Store::Sqlite);
}

#[test]
fn a_forget_during_a_turn_is_not_undone_by_its_settle_on_postgres() {
    let Some(store) = Store::postgres() else {
        return;
    };
    forget_during_a_turn(&store);
}

/// With an agent that advertises `session/close`, the forgotten resident is closed exactly once
/// (after the turn that saw the forget), before the thread's new session is opened.
#[test]
fn a_forgotten_resident_is_closed_once_before_the_new_session() {
    let store = Store::Sqlite;
    let w = RelayWorld::new();
    let running = w.start_env(&["--session-close"], &[], &[]);
    let (root, r1, old) = answered_thread(&w, &store);
    store.forget(&w, &old);
    let q = w.post_reply(&root, &r1, "again");
    let r2 = w
        .wait_for_reply(&q.id, WAIT)
        .expect("answered after the forget");
    wait_until(WAIT, || {
        (!w.s.observer_records("receipt_forgotten").is_empty()).then_some(())
    })
    .expect("the check beside the turn saw the forget");
    let q2 = w.post_reply(&root, &r2, "and now?");
    w.wait_for_reply(&q2.id, WAIT)
        .expect("answered by the new session");
    running.stop().expect("the harness stops");

    let frames = wire(&w.s);
    let closed: Vec<String> = closes(&frames).into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        closed.iter().filter(|id| **id == old).count(),
        1,
        "{closed:?}"
    );
    let requests: Vec<&WireFrame> = frames
        .iter()
        .filter(|f| f.kind == FrameKind::Request)
        .collect();
    let close_at = requests
        .iter()
        .position(|f| {
            f.method.as_deref() == Some("session/close") && f.params["sessionId"] == old.as_str()
        })
        .expect("the forgotten session was closed");
    let second_new = requests
        .iter()
        .enumerate()
        .filter(|(_, f)| f.method.as_deref() == Some("session/new"))
        .nth(1)
        .expect("a second session/new")
        .0;
    assert!(
        close_at < second_new,
        "closed before the new session opened"
    );
}
