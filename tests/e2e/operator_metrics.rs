//! Guard of patch `operator-metrics`: the patched harness serves Prometheus metrics on the
//! operator's address, and what it counts is what the scenario did on the wire.
//!
//! The scenario runs over the test relay (`RelayWorld`: the owner posts signed events, each
//! harness connects as the agent and reads the threads' history from the relay when it starts).
//! It runs two harness processes on one store, one after the other, each with
//! `BUZZ_ACP_METRICS_LISTEN` on a free loopback port (the variable, not the flag: a harness
//! without the patch ignores it and serves nothing, so the guard fails by its assertion on the
//! scrape, not by a rejected command line). The first answers thread A cold (its first turn), A's
//! follow-up hot, and thread B cold; the agent then loses B's stored session; the second process
//! answers A's next message warm (`session/load`) and B's cold after the agent says the session
//! is gone (a notice in B). Each process is scraped over HTTP while it runs, the exposition is
//! read with a Prometheus text parser, and the counts are compared with that process's part of
//! the agent's wire log (`served_as`), the relay's notices, and what the store did.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;
use prometheus_parse::{Scrape, Value};
use serde_json::json;

/// A free loopback address for the metrics endpoint.
fn free_addr() -> SocketAddr {
    let probe = TcpListener::bind("127.0.0.1:0").expect("bind a probe");
    probe.local_addr().expect("probe address")
}

/// Starts the patched harness on the relay with two agents and its metrics variable set to
/// `metrics`, and waits until it is subscribed.
fn start_serving_metrics(w: &RelayWorld, metrics: SocketAddr) -> Background {
    let listen = metrics.to_string();
    w.start_env(
        &[],
        &["--agents", "2"],
        &[("BUZZ_ACP_METRICS_LISTEN", listen.as_str())],
    )
}

/// GETs the metrics endpoint and parses the exposition.
fn scrape(addr: SocketAddr, w: &RelayWorld) -> Scrape {
    let url = format!("http://{addr}/metrics");
    let response = ureq::get(&url).call().map_err(|e| e.to_string());
    assert_eq!(
        response.as_ref().err(),
        None,
        "GET {url}: the harness serves no metrics on BUZZ_ACP_METRICS_LISTEN (its logs are in {})",
        w.s.root.display()
    );
    let text = response
        .expect("checked above")
        .body_mut()
        .read_to_string()
        .expect("the exposition body");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("a Prometheus text exposition")
}

/// A counter's or gauge's value with exactly `labels` (0 when the series is absent).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && s.labels.len() == labels.len())
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => panic!("{name} is not a counter or gauge"),
        })
        .sum()
}

/// Every series of `name` (a counter or gauge), by its labels.
fn series(scrape: &Scrape, name: &str) -> BTreeMap<String, f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter_map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                Some((s.labels.to_string(), v))
            }
            _ => None,
        })
        .collect()
}

/// The store latency histogram's observation count for `op`.
fn latency_count(scrape: &Scrape, op: &str) -> f64 {
    let name = "buzz_acp_store_operation_duration_seconds";
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && s.labels.get("op") == Some(op));
    match sample.map(|s| &s.value) {
        Some(Value::Histogram(buckets)) => buckets
            .iter()
            .find(|b| b.less_than.is_infinite())
            .map_or(0.0, |b| b.count),
        None => 0.0,
        other => panic!("{name}{{op={op}}} is no histogram: {other:?}"),
    }
}

/// How many prompts of `threads` the wire shows served as `via` ("new", "restored",
/// "continued").
fn served(frames: &[WireFrame], threads: &[&str], via: &str) -> f64 {
    threads
        .iter()
        .flat_map(|root| served_as(frames, root))
        .filter(|v| *v == via)
        .count() as f64
}

/// The deterministic part of a scrape (no store counts or latencies, which depend on how the
/// store worker batched its writes): the series the snapshot pins.
fn pinned(scrape: &Scrape) -> serde_json::Value {
    let names = [
        "buzz_acp_turns_served_total",
        "buzz_acp_stale_plans_total",
        "buzz_acp_restores_total",
        "buzz_acp_notices_total",
        "buzz_acp_resident_sessions",
        "buzz_acp_resident_disposals_total",
        "buzz_acp_capacity_waits_total",
        "buzz_acp_store_up",
    ];
    let view: BTreeMap<&str, BTreeMap<String, f64>> = names
        .iter()
        .map(|name| (*name, series(scrape, name)))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    json!(view)
}

/// A store operation's count with outcome `ok`.
fn store_ok(scrape: &Scrape, op: &str) -> f64 {
    value(
        scrape,
        "buzz_acp_store_operations_total",
        &[("op", op), ("outcome", "ok")],
    )
}

/// Scrapes until the store worker has caught up with what the scenario needs of it (`ready`):
/// receipt writes run beside the event loop, so a write may still be in flight when a reply is
/// out. Returns the last scrape either way; the assertions then say what is missing.
fn scrape_when(addr: SocketAddr, w: &RelayWorld, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let mut last = scrape(addr, w);
    if ready(&last) {
        return last;
    }
    let settled = wait_until(WAIT, || {
        last = scrape(addr, w);
        ready(&last).then_some(())
    });
    if settled.is_none() {
        last = scrape(addr, w);
    }
    last
}

/// What the receipt store did in a process: every operation succeeded and was timed, the store
/// is up, and at least `needed` operations of each op were done.
fn assert_store_healthy(scrape: &Scrape, process: &str, needed: &[(&str, f64)]) {
    let ops = series(scrape, "buzz_acp_store_operations_total");
    assert!(
        ops.keys().all(|labels| labels.contains("outcome=\"ok\"")),
        "{process}: every store operation succeeded: {ops:?}"
    );
    for (op, at_least) in needed {
        assert!(
            store_ok(scrape, op) >= *at_least,
            "{process}: the store did at least {at_least} {op}: {ops:?}"
        );
    }
    for labels in ops.keys() {
        let op = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("op=\""))
            .and_then(|v| v.strip_suffix('"'))
            .expect("an op label");
        assert_eq!(
            latency_count(scrape, op),
            store_ok(scrape, op),
            "{process}: every {op} is timed"
        );
    }
    assert_eq!(
        value(scrape, "buzz_acp_store_up", &[]),
        1.0,
        "{process}: the store is up"
    );
}

/// Whether the store worker has done `needed` and the scrape shows it consistently.
fn store_settled(scrape: &Scrape, needed: &[(&str, f64)]) -> bool {
    value(scrape, "buzz_acp_store_up", &[]) == 1.0
        && needed.iter().all(|(op, at_least)| {
            store_ok(scrape, op) >= *at_least && latency_count(scrape, op) == store_ok(scrape, op)
        })
}

#[test]
fn the_scraped_counts_match_what_the_scenario_did_on_the_wire() {
    let w = RelayWorld::new();

    // First process: A cold, A hot, B cold.
    let addr = free_addr();
    let first = start_serving_metrics(&w, addr);
    let a = w.post_top("thread A: remember alpha-7301");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A answered");
    let qa = w.post_reply(&a, &ra, "A again");
    let ra2 = w
        .wait_for_reply(&qa.id, WAIT)
        .expect("A's follow-up answered");
    let b = w.post_top("thread B: remember beta-1187");
    let rb = w.wait_for_reply(&b.id, WAIT).expect("B answered");
    // Process one opened its store and wrote A's and B's receipts.
    let first_needs = [("open", 1.0), ("put", 1.0)];
    let scraped_first = scrape_when(addr, &w, |s| store_settled(s, &first_needs));
    first.stop().expect("the first harness stops");
    let frames = wire(&w.s);
    let first_frames = frames.len();
    let threads = [a.id.as_str(), b.id.as_str()];
    assert_eq!(
        served(&frames, &threads, "continued"),
        1.0,
        "the scenario has a hot follow-up"
    );

    // The agent loses B's stored session.
    let b_prompt = format!("thread root: {}", b.id);
    let (b_session, _) = prompt_texts(&frames)
        .into_iter()
        .find(|(_, text)| text.contains(&b_prompt))
        .expect("B's prompt");
    let transcript =
        w.s.agent_state_dir
            .join("sessions")
            .join(format!("{b_session}.json"));
    std::fs::remove_file(&transcript).expect("B's transcript");

    // Second process: A warm, B cold after its session was lost.
    let addr = free_addr();
    let second = start_serving_metrics(&w, addr);
    let qa2 = w.post_reply(&a, &ra2, "A after the restart");
    w.wait_for_reply(&qa2.id, WAIT)
        .expect("A answered after the restart");
    let qb = w.post_reply(&b, &rb, "B after the restart");
    w.wait_for_reply(&qb.id, WAIT)
        .expect("B answered after the restart");
    // Process two read A's and B's receipts and wrote B's new one.
    let second_needs = [("open", 1.0), ("read", 2.0), ("put", 1.0)];
    let scraped_second = scrape_when(addr, &w, |s| store_settled(s, &second_needs));
    second.stop().expect("the second harness stops");
    let frames = wire(&w.s);
    let second_frames = &frames[first_frames..];

    // Each process counted what its part of the wire shows.
    for (process, scraped, frames, needs) in [
        (
            "first process",
            &scraped_first,
            &frames[..first_frames],
            &first_needs[..],
        ),
        (
            "second process",
            &scraped_second,
            second_frames,
            &second_needs[..],
        ),
    ] {
        let turns = |via| value(scraped, "buzz_acp_turns_served_total", &[("via", via)]);
        let cold: f64 = series(scraped, "buzz_acp_turns_served_total")
            .iter()
            .filter(|(labels, _)| labels.contains("via=\"cold\""))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(
            turns("hot"),
            served(frames, &threads, "continued"),
            "{process}: hot turns are the prompts on the live session"
        );
        assert_eq!(
            turns("warm"),
            served(frames, &threads, "restored"),
            "{process}: warm turns are the prompts after a restore"
        );
        assert_eq!(
            cold,
            served(frames, &threads, "new"),
            "{process}: cold turns are the prompts after session/new"
        );
        let loads = count_method(frames, "session/load") as f64;
        let restores: f64 = series(scraped, "buzz_acp_restores_total").values().sum();
        assert_eq!(
            restores, loads,
            "{process}: one restore outcome per session/load"
        );
        assert_store_healthy(scraped, process, needs);
    }
    let cold = |scraped: &Scrape, reason| {
        value(
            scraped,
            "buzz_acp_turns_served_total",
            &[("via", "cold"), ("cold_reason", reason)],
        )
    };
    assert_eq!(
        cold(&scraped_first, "no_receipt"),
        2.0,
        "A's and B's first turns"
    );
    assert_eq!(
        cold(&scraped_second, "session_lost"),
        1.0,
        "B's session was gone"
    );
    let restores = |outcome| {
        value(
            &scraped_second,
            "buzz_acp_restores_total",
            &[("outcome", outcome), ("method", "session/load")],
        )
    };
    assert_eq!((restores("restored"), restores("lost")), (1.0, 1.0));
    let notices = w.notices_about(&qb.id).len();
    assert_eq!(notices, 1, "B was told its session was gone");
    assert_eq!(
        value(
            &scraped_second,
            "buzz_acp_notices_total",
            &[("cause", "session_lost")]
        ),
        notices as f64,
        "the notice in B"
    );
    assert_eq!(
        value(&scraped_first, "buzz_acp_resident_sessions", &[]),
        2.0,
        "A and B stayed resident"
    );
    insta::assert_json_snapshot!(
        "scraped_counts",
        json!({"first": pinned(&scraped_first), "second": pinned(&scraped_second)})
    );
}
