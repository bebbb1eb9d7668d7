use super::*;

const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";

fn ids(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn live(session: &str, used: u64) -> State {
    State::Live {
        session_id: session.into(),
        last_used: UnixMillis(used),
    }
}

fn commit(session: &str, delivered: &[&str]) -> TurnCommit {
    TurnCommit {
        session_id: session.into(),
        delivered_event_ids: ids(delivered),
        standing_context_sent: false,
        turns: Some(1),
        usage: None,
        handoff_delivered: false,
    }
}

#[test]
fn a_record_round_trips_through_a_row() {
    let key = ScopeKey::thread(CHANNEL, "ab".repeat(32));
    let mut record = SessionRecord::new("s-1");
    record.model = Some("opus".into());
    record.requested_permission_mode = Some("plan".into());
    record.delivery = Some(DeliveryRecord {
        standing_context_sent: true,
        delivered_event_ids: ids(&["b", "a", "a", ""]),
    });
    record.turns = Some(4);
    record.retired = Some(Retirement {
        reason: "rotation".into(),
    });
    let row = put_row(KeyScheme::Scope, &key, &record, UnixMillis(42)).unwrap();
    assert_eq!(row.delivered_event_ids.as_deref(), Some(r#"["a","b"]"#));
    let back = row.into_receipt().unwrap();
    assert_eq!(back.key, key);
    assert_eq!(back.record, record.normalized());
    assert_eq!(back.last_used, UnixMillis(42));

    let bare = put_row(
        KeyScheme::Scope,
        &key,
        &SessionRecord::new("s-2"),
        UnixMillis(1),
    )
    .unwrap();
    assert_eq!(bare.delivered_event_ids, None);
    assert_eq!(bare.ext, None, "nothing known: no extension");
    assert_eq!(
        bare.into_receipt().unwrap().record,
        SessionRecord::new("s-2")
    );
}

#[test]
fn extension_fields_of_another_session_read_as_unknown() {
    let key = ScopeKey::conversation(CHANNEL);
    let mut record = SessionRecord::new("old");
    record.turns = Some(9);
    let mut row = put_row(KeyScheme::Scope, &key, &record, UnixMillis(1)).unwrap();
    // What a harness that predates the extension does: rewrite the session, keep the column.
    row.session_id = "new".into();
    let back = row.into_receipt().unwrap().record;
    assert_eq!(back, SessionRecord::new("new"));
}

#[test]
fn unreadable_rows_are_reported_with_their_key() {
    let good = put_row(
        KeyScheme::Scope,
        &ScopeKey::conversation(CHANNEL),
        &SessionRecord::new("s"),
        UnixMillis(1),
    )
    .unwrap();
    let cases = [
        Row {
            scope_key: "general".into(),
            ..good.clone()
        },
        Row {
            session_id: " ".into(),
            ..good.clone()
        },
        Row {
            delivered_event_ids: Some("{\"not\":\"a list\"}".into()),
            ..good.clone()
        },
        Row {
            ext: Some("{\"sessionId\":\"s\",\"secret\":1}".into()),
            ..good.clone()
        },
    ];
    for row in cases {
        let key = row.scope_key.clone();
        let err = row.into_receipt().unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptRow { key: k, .. } if *k == key),
            "{err:?}"
        );
    }
}

#[test]
fn puts_are_checked_and_mapped_by_the_scheme() {
    let thread = ScopeKey::thread(CHANNEL, "cd".repeat(32));
    let row = put_row(
        KeyScheme::Channel,
        &thread,
        &SessionRecord::new("s"),
        UnixMillis(1),
    )
    .unwrap();
    assert_eq!(row.scope_key, CHANNEL);
    assert!(matches!(
        put_row(
            KeyScheme::Scope,
            &thread,
            &SessionRecord::new("  "),
            UnixMillis(1)
        ),
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        put_row(
            KeyScheme::Scope,
            &ScopeKey::conversation("general"),
            &SessionRecord::new("s"),
            UnixMillis(1)
        ),
        Err(StoreError::Invalid { .. })
    ));
}

#[test]
fn a_commit_replaces_the_ledger_counts_and_usage_and_clears_a_delivered_handoff() {
    let key = "k";
    let mut stored_record = SessionRecord::new("s");
    stored_record.delivery = Some(DeliveryRecord {
        standing_context_sent: true,
        delivered_event_ids: ids(&["gone", "kept"]),
    });
    stored_record.handoff = Some(Handoff {
        text: "context".into(),
        reason: "rotation".into(),
        from_session_id: "old".into(),
    });
    stored_record.retired = None;
    let row = put_row(
        KeyScheme::Scope,
        &ScopeKey::conversation(CHANNEL),
        &stored_record,
        UnixMillis(1),
    )
    .unwrap();
    let stored = CommitColumns {
        ledger: LedgerColumns {
            standing_context_sent: row.standing_context_sent,
            delivered_event_ids: row.delivered_event_ids.clone(),
        },
        ext: row.ext.clone(),
    };
    let state = live("s", 1);
    let mut c = commit("s", &["kept", "x"]);
    c.usage = Some(Usage {
        used_tokens: 10,
        context_tokens: None,
    });
    let CommitPlan::Write(cols) =
        plan_commit(key, &state, Some(stored.clone()), &c, UnixMillis(2)).unwrap()
    else {
        panic!("expected a write");
    };
    assert!(
        cols.ledger.standing_context_sent,
        "standing is ORed, never cleared"
    );
    assert_eq!(
        cols.ledger.delivered_event_ids.as_deref(),
        Some(r#"["kept","x"]"#)
    );
    let ext = Ext::decode(cols.ext.as_deref(), key, "s").unwrap();
    assert_eq!(ext.turns, Some(1));
    assert_eq!(ext.usage.unwrap().used_tokens, 10);
    assert!(ext.handoff.is_some(), "not delivered yet: kept");

    c.handoff_delivered = true;
    let CommitPlan::Write(cols) =
        plan_commit(key, &state, Some(stored.clone()), &c, UnixMillis(2)).unwrap()
    else {
        panic!("expected a write");
    };
    assert_eq!(
        Ext::decode(cols.ext.as_deref(), key, "s").unwrap().handoff,
        None
    );

    // The same commit again changes nothing.
    let again = plan_commit(key, &state, Some(cols), &c, UnixMillis(3)).unwrap();
    assert_eq!(again, CommitPlan::Unchanged);

    // Another session's commit, or one on nothing, is refused.
    assert_eq!(
        plan_commit(key, &live("t", 1), Some(stored.clone()), &c, UnixMillis(3)).unwrap(),
        CommitPlan::Refuse(CommitOutcome::Conflict {
            stored: Some("t".into())
        })
    );
    assert_eq!(
        plan_commit(key, &State::Nothing, None, &c, UnixMillis(3)).unwrap(),
        CommitPlan::Refuse(CommitOutcome::Conflict { stored: None })
    );
    assert_eq!(
        plan_commit(
            key,
            &State::Forgotten { at: UnixMillis(1) },
            None,
            &c,
            UnixMillis(3)
        )
        .unwrap(),
        CommitPlan::Refuse(CommitOutcome::Forgotten { at: UnixMillis(1) })
    );
    // A first commit of nothing still creates the (empty) ledger: a turn succeeded.
    let bare = CommitColumns {
        ledger: LedgerColumns::encode(None).unwrap(),
        ext: None,
    };
    assert!(matches!(
        plan_commit(key, &state, Some(bare), &commit("s", &[]), UnixMillis(2)).unwrap(),
        CommitPlan::Write(_)
    ));
}

#[test]
fn a_commit_of_unknown_counters_clears_them_from_the_extension_column() {
    let key = "k";
    let mut known = SessionRecord::new("s");
    known.turns = Some(4);
    known.usage = Some(Usage {
        used_tokens: 10,
        context_tokens: Some(100),
    });
    let row = put_row(
        KeyScheme::Scope,
        &ScopeKey::conversation(CHANNEL),
        &known,
        UnixMillis(1),
    )
    .unwrap();
    let stored = CommitColumns {
        ledger: LedgerColumns::encode(None).unwrap(),
        ext: row.ext.clone(),
    };
    assert!(stored.ext.is_some());
    let mut c = commit("s", &[]);
    c.turns = None;
    let CommitPlan::Write(cols) =
        plan_commit(key, &live("s", 1), Some(stored), &c, UnixMillis(2)).unwrap()
    else {
        panic!("expected a write");
    };
    assert_eq!(
        cols.ext, None,
        "turns and usage now unknown: nothing left to store"
    );
    assert_eq!(
        plan_commit(key, &live("s", 2), Some(cols), &c, UnixMillis(3)).unwrap(),
        CommitPlan::Unchanged
    );
}

#[test]
fn imports_skip_live_receipts_and_what_was_forgotten_after_them() {
    let row = put_row(
        KeyScheme::Scope,
        &ScopeKey::conversation(CHANNEL),
        &SessionRecord::new("s"),
        UnixMillis(5),
    )
    .unwrap();
    assert_eq!(plan_import(&row, &State::Nothing), Ok(()));
    assert_eq!(plan_import(&row, &live("x", 1)), Err(ImportSkip::Existing));
    assert_eq!(
        plan_import(&row, &State::Forgotten { at: UnixMillis(5) }),
        Err(ImportSkip::Forgotten)
    );
    assert_eq!(
        plan_import(&row, &State::Forgotten { at: UnixMillis(4) }),
        Ok(())
    );
}

#[test]
fn a_channel_range_holds_its_threads_and_no_other_channel() {
    let (exact, lower, upper) = channel_key_range(&CHANNEL.to_uppercase());
    assert_eq!(exact, CHANNEL);
    let inside = ScopeKey::thread(CHANNEL, "ff".repeat(32)).to_storage_key();
    assert!(lower.as_str() <= inside.as_str() && inside.as_str() < upper.as_str());
    for other in [
        "0b9f3a52-6c1e-4d2a-9f00-1234567890ac",
        "0b9f3a52-6c1e-4d2a-9f00-1234567890aa",
    ] {
        let conv = ScopeKey::conversation(other).to_storage_key();
        let thread = ScopeKey::thread(other, "00".repeat(32)).to_storage_key();
        for key in [conv, thread] {
            assert!(
                !(lower.as_str() <= key.as_str() && key.as_str() < upper.as_str()),
                "{key}"
            );
            assert_ne!(key, exact);
        }
    }
}

#[test]
fn watermarks_past_the_column_are_refused_and_negative_ones_are_unreadable() {
    assert_eq!(watermark_to_sql(0).unwrap(), 0);
    let largest = u64::try_from(i64::MAX).unwrap();
    assert_eq!(watermark_to_sql(largest).unwrap(), i64::MAX);
    for secs in [largest + 1, u64::MAX] {
        let err = watermark_to_sql(secs).unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains(&secs.to_string()), "{err}");
    }
    assert_eq!(watermark_from_sql(None).unwrap(), None);
    assert_eq!(watermark_from_sql(Some(7)).unwrap(), Some(7));
    let err = watermark_from_sql(Some(-1)).unwrap_err();
    assert!(matches!(err, StoreError::CorruptRow { .. }), "{err:?}");
}
