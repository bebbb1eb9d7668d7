//! The relay log disrupted under the harness: truncated while it runs,
//! rotated while it is stopped, a cursor whose position lies past the end of
//! the file, a torn line left by a writer that died, and a kill between
//! publishing a reply and saving the cursor.
//!
//! In every case: each mention is answered exactly once, nothing answered is
//! answered again, and each detection is reported once. All of it runs the
//! real `buzz-acp` binary against the real test agent; the tests wait for
//! replies, observer records and process exits, never for time to pass.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write as _;

use buzz_acp::relay::Event;
use buzz_acp::testing::{AGENT, Scenario, USER, general, wait_until};
use common::*;

/// The `relay_reset` observer records (one per detection).
fn resets(s: &Scenario) -> Vec<serde_json::Value> {
    s.observer_records("relay_reset")
}

/// Appends raw bytes to the events file without the writers' lock or their
/// newline repair: a foreign writer, or one that dies mid-line.
fn append_raw(s: &Scenario, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .append(true)
        .open(s.events_path())
        .expect("open events.jsonl");
    f.write_all(bytes).expect("raw append");
}

fn line_of(event: &Event) -> String {
    serde_json::to_string(event).expect("event json") + "\n"
}

/// The first line of the events file, with its newline.
fn first_line(s: &Scenario) -> String {
    let text = fs::read_to_string(s.events_path()).expect("events.jsonl");
    let end = text.find('\n').expect("a complete line") + 1;
    text[..end].to_string()
}

#[test]
fn truncation_while_running_loses_no_later_mention_and_redoes_nothing() {
    let (_dir, mut s) = scenario();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();
    let before: Vec<Event> = (0..5)
        .map(|i| s.post_top(&format!("before the rewrite {i}")).unwrap())
        .collect();
    for e in &before {
        s.wait_for_reply(&e.id, WAIT)
            .expect("reply before the rewrite");
    }
    // Rewritten shorter in place: only the first mention is kept, its reply
    // is gone. Then more is appended than the file held before.
    let kept = first_line(&s);
    fs::write(s.events_path(), kept).unwrap();
    let after: Vec<Event> = (0..30)
        .map(|i| s.post_top(&format!("after the rewrite {i}")).unwrap())
        .collect();
    for e in &after {
        s.wait_for_reply(&e.id, WAIT)
            .unwrap_or_else(|| panic!("no reply to {:?}", e.content));
    }
    running.stop().unwrap();

    for e in &after {
        assert_eq!(s.answers_to(&e.id), 1, "{:?} answered once", e.content);
    }
    assert_eq!(
        s.answers_to(&before[0].id),
        0,
        "the kept mention was handled before the rewrite: not answered again"
    );
    let resets = resets(&s);
    assert_eq!(resets.len(), 1, "one detection, reported once: {resets:?}");
    // Shorter when the harness looks before the appends outgrow the old
    // length, rewritten when after: either way the change is seen.
    let reason = &resets[0]["divergence"]["reason"];
    assert!(reason == "shorter" || reason == "rewritten", "{reason}");
    assert_eq!(resets[0]["atStartup"], false);
}

#[test]
fn rotation_while_stopped_answers_the_new_file_and_not_the_copied_history() {
    let (_dir, mut s) = scenario();
    let old = s.post_top("answered before the rotation").unwrap();
    run_once(&s, &[], &[]);
    assert_eq!(s.answers_to(&old.id), 1);

    // Rotated: the file moves away; the new one starts with a copy of the
    // answered mention (without its reply), then a new mention.
    let copied = first_line(&s);
    fs::rename(s.events_path(), s.relay_dir.join("events.jsonl.1")).unwrap();
    fs::write(s.events_path(), copied).unwrap();
    let new = s.post_top("after the rotation").unwrap();
    run_once(&s, &[], &[]);

    assert_eq!(s.answers_to(&new.id), 1, "the new mention is answered once");
    assert_eq!(
        s.answers_to(&old.id),
        0,
        "the copied mention is recognised by id: no reply in the new file"
    );
    let resets = resets(&s);
    assert_eq!(resets.len(), 1, "{resets:?}");
    assert_eq!(resets[0]["divergence"]["reason"], "replaced");
    assert_eq!(resets[0]["atStartup"], true);

    // The next run finds the cursor bound to the new file: nothing to report.
    run_once(&s, &[], &[]);
    assert_eq!(self::resets(&s).len(), 1);
    assert_eq!(s.answers_to(&new.id), 1);
}

#[test]
fn a_cursor_past_the_end_of_the_file_skips_nothing_new() {
    let (_dir, mut s) = scenario();
    let first = s.post_top("one").unwrap();
    s.post_top("two").unwrap();
    s.post_top("three").unwrap();
    run_once(&s, &[], &[]);
    // The same file (same inode) cut down to its first line while the
    // harness is stopped: the cursor's position now lies past its end.
    let kept = first_line(&s);
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(s.events_path())
        .unwrap();
    f.write_all(kept.as_bytes()).unwrap();
    drop(f);
    let fourth = s.post_top("four").unwrap();
    run_once(&s, &[], &[]);

    assert_eq!(s.answers_to(&fourth.id), 1, "the new mention is answered");
    assert_eq!(
        s.answers_to(&first.id),
        0,
        "the kept one is not answered again"
    );
    let resets = resets(&s);
    assert_eq!(resets.len(), 1, "{resets:?}");
    assert_eq!(resets[0]["divergence"]["reason"], "shorter");
}

#[test]
fn a_torn_line_never_swallows_the_next_event_nor_the_harness_reply() {
    let (_dir, mut s) = scenario();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();
    let m1 = s.post_top("before any tear").unwrap();
    s.wait_for_reply(&m1.id, WAIT).expect("reply 1");

    // A writer dies mid-line; the next writer (with the lock) starts a new line.
    append_raw(&s, b"{\"id\":\"a writer died here");
    let m2 = s.post_top("after a torn line").unwrap();
    s.wait_for_reply(&m2.id, WAIT).expect("reply 2");

    // A foreign writer that does not repair: its event is glued to the tear.
    let m3 = buzz_acp::relay::EventBuilder::message(USER, &general(), "glued to a torn line")
        .created_at(buzz_acp::testing::EPOCH + 86_400)
        .mention(AGENT)
        .build();
    append_raw(
        &s,
        format!("{{\"id\":\"another tear{}", line_of(&m3)).as_bytes(),
    );
    s.wait_for_reply(&m3.id, WAIT).expect("reply 3");

    // The harness's own reply lands after a torn line.
    let m4 = s.post_top("hold on !gate:m4").unwrap();
    wait_until(WAIT, || {
        (s.observer_records("prompt_context_delivery").len() == 4).then_some(())
    })
    .expect("m4 dispatched");
    append_raw(&s, b"{\"id\":\"torn just before the reply");
    s.open_gate("m4").unwrap();
    s.wait_for_reply(&m4.id, WAIT)
        .expect("the reply is a line of its own");
    running.stop().unwrap();

    // After a restart nothing is answered again: the reply was readable.
    run_once(&s, &[], &[]);
    for m in [&m1, &m2, &m3, &m4] {
        assert_eq!(s.answers_to(&m.id), 1, "{:?}", m.content);
    }
}

#[test]
fn a_kill_between_publishing_and_saving_the_cursor_does_not_answer_twice() {
    let (_dir, mut s) = scenario();
    let m1 = s.post_top("answer me once !gate:m1").unwrap();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();
    wait_until(WAIT, || {
        (s.observer_records("prompt_context_delivery").len() == 1).then_some(())
    })
    .expect("the turn is running");
    // The next cursor save (right after the reply is published) opens its
    // temporary file; a FIFO there blocks it until the kill below.
    let tmp = s
        .cursor_path()
        .unwrap()
        .with_extension(format!("json.tmp-{}", running.id()));
    let made = std::process::Command::new("mkfifo")
        .arg(&tmp)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    s.open_gate("m1").unwrap();
    s.wait_for_reply(&m1.id, WAIT)
        .expect("the reply is published");
    running.kill().unwrap();
    fs::remove_file(&tmp).unwrap();

    let m2 = s.post_top("a new mention after the crash").unwrap();
    run_once(&s, &[], &[]);
    assert_eq!(s.answers_to(&m1.id), 1, "published once, never again");
    assert_eq!(s.answers_to(&m2.id), 1, "new work is still answered");
}

#[test]
fn a_stuck_thread_keeps_the_cursor_as_small_as_the_work_in_progress() {
    let (_dir, mut s) = scenario();
    let stuck = s.post_top("a long job !gate:stuck").unwrap();
    let running = s
        .start(&harness_bin(), &agent(&s, &[]), &["--agents", "2"])
        .unwrap();
    wait_until(WAIT, || {
        (s.observer_records("prompt_context_delivery").len() == 1).then_some(())
    })
    .expect("the stuck turn is running");
    // Hundreds of lines arrive behind it: chatter, and mentions in other
    // threads that are answered meanwhile.
    let other = s.post_top("another thread").unwrap();
    for i in 0..300 {
        s.post_chatter(&other, &other, &format!("chatter {i}"))
            .unwrap();
    }
    let answered: Vec<Event> = (0..3)
        .map(|i| s.post_top(&format!("quick {i}")).unwrap())
        .collect();
    for e in answered.iter().chain([&other]) {
        s.wait_for_reply(&e.id, WAIT).expect("answered meanwhile");
    }
    // The cursor is saved right after each reply; wait for the last save.
    let cursor_path = s.cursor_path().unwrap();
    let read_cursor = || -> Option<serde_json::Value> {
        serde_json::from_slice(&fs::read(&cursor_path).ok()?).ok()
    };
    let cursor = wait_until(WAIT, || {
        read_cursor().filter(|c| c["recent"].as_array().map(Vec::len) == Some(4))
    })
    .unwrap_or_else(|| panic!("the four answers are recorded: {:?}", read_cursor()));
    assert_eq!(
        cursor["pending"],
        serde_json::json!([stuck.id]),
        "only the unfinished event is listed, not the 300 lines behind it: {cursor}"
    );
    s.open_gate("stuck").unwrap();
    s.wait_for_reply(&stuck.id, WAIT)
        .expect("the stuck one ends");
    running.stop().unwrap();
}
