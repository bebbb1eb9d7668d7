use super::*;
use crate::record::{Handoff, Usage};

fn live(session: &str, used: u64) -> State {
    State::Live {
        session_id: session.into(),
        last_used: UnixMillis(used),
    }
}

fn ids(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_receipt_is_live_only_when_written_after_its_tombstone() {
    assert_eq!(State::of(None, None), State::Nothing);
    assert_eq!(State::of(Some(("s".into(), 5)), None), live("s", 5));
    assert_eq!(
        State::of(Some(("s".into(), 5)), Some(5)),
        State::Forgotten { at: UnixMillis(5) }
    );
    assert_eq!(State::of(Some(("s".into(), 6)), Some(5)), live("s", 6));
    assert_eq!(
        State::of(None, Some(5)),
        State::Forgotten { at: UnixMillis(5) }
    );
}

#[test]
fn expectations_decide_every_state() {
    let forgotten = State::Forgotten { at: UnixMillis(10) };
    let conflict = |s: &str| Err(Refusal::Conflict(Some(s.into())));
    let cases: Vec<(Expect, State, u64, Result<(), Refusal>)> = vec![
        (Expect::Absent, State::Nothing, 1, Ok(())),
        (Expect::Absent, live("a", 5), 20, conflict("a")),
        (Expect::Absent, forgotten.clone(), 11, Ok(())),
        (
            Expect::Absent,
            forgotten.clone(),
            10,
            Err(Refusal::Forgotten(UnixMillis(10))),
        ),
        (Expect::Session("a".into()), live("a", 5), 20, Ok(())),
        (Expect::Session("a".into()), live("b", 5), 20, conflict("b")),
        (
            Expect::Session("a".into()),
            State::Nothing,
            20,
            Err(Refusal::Conflict(None)),
        ),
        (
            Expect::Session("a".into()),
            forgotten.clone(),
            20,
            Err(Refusal::Forgotten(UnixMillis(10))),
        ),
        (
            Expect::NotWrittenSince(UnixMillis(5)),
            live("a", 5),
            20,
            Ok(()),
        ),
        (
            Expect::NotWrittenSince(UnixMillis(4)),
            live("a", 5),
            20,
            conflict("a"),
        ),
        (
            Expect::NotWrittenSince(UnixMillis(4)),
            State::Nothing,
            20,
            Ok(()),
        ),
        (
            Expect::NotWrittenSince(UnixMillis(10)),
            forgotten.clone(),
            20,
            Ok(()),
        ),
        (
            Expect::NotWrittenSince(UnixMillis(9)),
            forgotten.clone(),
            20,
            Err(Refusal::Forgotten(UnixMillis(10))),
        ),
        // Decided before the forget: refused whatever it expected.
        (
            Expect::NotWrittenSince(UnixMillis(10)),
            forgotten,
            9,
            Err(Refusal::Forgotten(UnixMillis(10))),
        ),
    ];
    for (expect, state, now, want) in cases {
        assert_eq!(
            admit(&state, &expect, UnixMillis(now)),
            want,
            "{expect:?} on {state:?} at {now}"
        );
    }
}

#[test]
fn removals_and_forgets_are_refused_only_by_a_live_receipt_they_do_not_expect() {
    assert_eq!(
        removal(&State::Nothing, &Expect::Absent),
        Err(Removal::Absent)
    );
    assert_eq!(
        removal(
            &State::Forgotten { at: UnixMillis(3) },
            &Expect::Session("a".into())
        ),
        Err(Removal::Absent)
    );
    assert_eq!(
        removal(&live("a", 1), &Expect::Session("a".into())),
        Ok("a".into())
    );
    assert_eq!(
        removal(&live("b", 1), &Expect::Session("a".into())),
        Err(Removal::Conflict {
            stored_session_id: "b".into()
        })
    );
    assert_eq!(
        forget(&live("a", 5), &Expect::NotWrittenSince(UnixMillis(5))),
        Ok(Some("a".into()))
    );
    assert_eq!(
        forget(&live("a", 6), &Expect::NotWrittenSince(UnixMillis(5))),
        Err(ForgetOutcome::Conflict {
            stored_session_id: "a".into()
        })
    );
    assert_eq!(forget(&State::Nothing, &Expect::Absent), Ok(None));
}

#[test]
fn sql_columns_classify_as_the_values_they_hold() {
    assert_eq!(
        State::of(Some(("s".into(), 6)), Some(5)),
        State::classify(Some(("s".into(), UnixMillis(6))), Some(UnixMillis(5)))
    );
    // A negative time (never written by this crate) reads as 0: at or before any tombstone.
    assert_eq!(
        State::of(Some(("s".into(), -1)), Some(0)),
        State::Forgotten { at: UnixMillis(0) }
    );
    assert_eq!(live("s", 1).live_session(), Some("s"));
    assert_eq!(State::Nothing.live_session(), None);
}

#[test]
fn a_commit_is_admitted_only_while_the_live_receipt_names_its_session() {
    let c = commit("s", &[]);
    assert_eq!(admit_commit(&live("s", 5), &c, UnixMillis(1)), Ok(()));
    assert_eq!(
        admit_commit(&live("t", 5), &c, UnixMillis(9)),
        Err(Refusal::Conflict(Some("t".into())))
    );
    assert_eq!(
        admit_commit(&State::Nothing, &c, UnixMillis(9)),
        Err(Refusal::Conflict(None))
    );
    // Forgotten: refused whenever it was decided (the receipt it expects is gone).
    for decided in [9, 10, 11] {
        assert_eq!(
            admit_commit(
                &State::Forgotten { at: UnixMillis(10) },
                &c,
                UnixMillis(decided)
            ),
            Err(Refusal::Forgotten(UnixMillis(10)))
        );
    }
}

fn commit(session: &str, delivered: &[&str]) -> TurnCommit {
    TurnCommit {
        session_id: session.into(),
        delivered_event_ids: ids(delivered),
        standing_context_sent: false,
        turns: None,
        usage: None,
        handoff_delivered: false,
    }
}

fn usage(used: u64) -> Usage {
    Usage {
        used_tokens: used,
        context_tokens: Some(1000),
    }
}

fn handoff() -> Handoff {
    Handoff {
        text: "what the old session knew".into(),
        reason: "rotation".into(),
        from_session_id: "old".into(),
    }
}

/// A stored receipt of session `s` with these counters.
fn stored(turns: Option<u32>, used: Option<u64>) -> SessionRecord {
    SessionRecord {
        turns,
        usage: used.map(usage),
        ..SessionRecord::new("s")
    }
}

#[test]
fn a_commit_replaces_turns_and_usage_none_included() {
    // (stored, committed, stored afterwards): the commit's value, whatever was stored.
    let cases = [
        (None, None, None),
        (None, Some(4), Some(4)),
        (Some(3), Some(4), Some(4)),
        // `None` is "unknown": it replaces a count of an earlier state, it is not "keep".
        (Some(3), None, None),
    ];
    for (before, committed, after) in cases {
        let mut record = stored(before, None);
        let c = TurnCommit {
            turns: committed,
            ..commit("s", &[])
        };
        apply_commit(&mut record, &c);
        assert_eq!(record.turns, after, "turns {before:?} then {committed:?}");
    }
    let cases = [
        (None, None, None),
        (None, Some(7), Some(7)),
        (Some(5), Some(7), Some(7)),
        (Some(5), None, None),
    ];
    for (before, committed, after) in cases {
        let mut record = stored(None, before);
        let c = TurnCommit {
            usage: committed.map(usage),
            ..commit("s", &[])
        };
        apply_commit(&mut record, &c);
        assert_eq!(
            record.usage,
            after.map(usage),
            "usage {before:?} then {committed:?}"
        );
    }
}

#[test]
fn a_commit_replaces_the_ledger_ors_the_standing_context_and_clears_a_delivered_handoff() {
    let mut record = SessionRecord {
        model: Some("opus".into()),
        handoff: Some(handoff()),
        retired: None,
        ..SessionRecord::new("s")
    };
    // No ledger yet: the first commit creates one, even an empty one (a turn succeeded).
    apply_commit(&mut record, &commit("s", &[]));
    assert_eq!(record.delivery, Some(DeliveryRecord::default()));
    assert_eq!(record.handoff, Some(handoff()), "not delivered: kept");

    let c = TurnCommit {
        standing_context_sent: true,
        ..commit("s", &["b", "a", "", "a"])
    };
    apply_commit(&mut record, &c);
    let ledger = record.delivery.clone().unwrap();
    assert!(ledger.standing_context_sent);
    assert_eq!(
        ledger.delivered_event_ids,
        ["a", "b"],
        "sorted, unique, non-empty"
    );

    // A later commit that did not send it cannot unsend it; the ledger is replaced, not merged.
    let c = TurnCommit {
        handoff_delivered: true,
        ..commit("s", &["c"])
    };
    apply_commit(&mut record, &c);
    let ledger = record.delivery.clone().unwrap();
    assert!(ledger.standing_context_sent, "ORed, never cleared");
    assert_eq!(ledger.delivered_event_ids, ["c"]);
    assert_eq!(record.handoff, None, "delivered: cleared");
    assert_eq!(record.model.as_deref(), Some("opus"), "configuration kept");
    assert_eq!(record.session_id, "s");
}

/// Every combination of the fields a commit merges, for a receipt and two commits of `s`.
fn receipts() -> Vec<SessionRecord> {
    let mut out = Vec::new();
    for turns in [None, Some(2)] {
        for used in [None, Some(5)] {
            for delivery in [
                None,
                Some(DeliveryRecord {
                    standing_context_sent: false,
                    delivered_event_ids: ids(&["x"]),
                }),
                Some(DeliveryRecord {
                    standing_context_sent: true,
                    delivered_event_ids: ids(&["x"]),
                }),
            ] {
                for handoff in [None, Some(handoff())] {
                    out.push(SessionRecord {
                        delivery: delivery.clone(),
                        handoff,
                        ..stored(turns, used)
                    });
                }
            }
        }
    }
    out
}

fn commits() -> Vec<TurnCommit> {
    let mut out = Vec::new();
    for turns in [None, Some(3)] {
        for used in [None, Some(6)] {
            for standing_context_sent in [false, true] {
                for handoff_delivered in [false, true] {
                    out.push(TurnCommit {
                        standing_context_sent,
                        turns,
                        usage: used.map(usage),
                        handoff_delivered,
                        ..commit("s", &["y", "x"])
                    });
                }
            }
        }
    }
    out
}

#[test]
fn a_fold_of_two_commits_has_the_effect_of_both_in_order() {
    for record in receipts() {
        for earlier in commits() {
            for later in commits() {
                let mut one_by_one = record.clone();
                apply_commit(&mut one_by_one, &earlier);
                apply_commit(&mut one_by_one, &later);
                let mut folded = record.clone();
                apply_commit(&mut folded, &fold_commits(earlier.clone(), later.clone()));
                assert_eq!(
                    folded, one_by_one,
                    "{record:?} then {earlier:?} then {later:?}"
                );
            }
        }
    }
    // The case a copy of this rule once got wrong: a later `None` is not "keep the earlier".
    let earlier = TurnCommit {
        turns: Some(3),
        usage: Some(usage(6)),
        ..commit("s", &[])
    };
    let folded = fold_commits(earlier, commit("s", &[]));
    assert_eq!((folded.turns, folded.usage), (None, None));
}
