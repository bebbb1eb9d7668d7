//! Randomized interleavings: the lifecycle driven by a model of the harness, checked after every
//! step.
//!
//! The model plays the harness's part faithfully but without processes: a pool of worker slots
//! with their live sessions, the harness's queue (which hands failed batches back to the front,
//! and dead-letters a batch after three failed attempts), turns that end in every way a real turn
//! can, owner controls, idle pool sleeps, worker crashes, session releases and a receipt store.
//! Thousands of seeded runs check the invariants the issue names:
//!
//! * per-scope order: a message admitted later is never answered before an earlier one (also
//!   across restore retries, capacity waits and steers);
//! * at most one turn in flight per scope; a worker is never given to two turns;
//! * every resident is disposed exactly once;
//! * every admitted message ends in exactly one turn (answered, cancelled or rotated) or one
//!   dead-letter — none is lost, even when traffic stops (the run must settle).
//!
//! A failing seed prints itself; rerun one with `INTERLEAVING_SEED=<n>`.

use std::collections::{BTreeMap, HashMap, VecDeque};

use buzz_session_lifecycle::testing::{Msg, TestScope};
use buzz_session_lifecycle::{
    Batch, Delivered, Effect, Lifecycle, LifecycleConfig, Moment, Opened, Persist, Record,
    RestoreMethod, RunningRoute, SessionConfig, SlotView, Target, TurnOutcome, Via,
};
use buzz_session_store::SessionRecord;

const MAX_ATTEMPTS: u32 = 3;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotM {
    Empty,
    Spawning,
    Idle,
    Busy,
    Backoff,
}

#[derive(Debug, Default)]
struct Partition {
    ids: VecDeque<String>,
    attempts: u32,
    steered: bool,
}

#[derive(Debug)]
struct Turn {
    slot: usize,
    batch: Vec<String>,
    attempts: u32,
    steered_in: Vec<String>,
    warm: bool,
    session: Option<String>,
    rotate: bool,
    cancel: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Turn,
    DeadLetter,
}

struct World {
    l: Lifecycle<TestScope, Msg>,
    rng: Rng,
    now: u64,
    steer: bool,
    slots: Vec<SlotM>,
    sessions: Vec<BTreeMap<TestScope, String>>,
    inbox: BTreeMap<TestScope, Partition>,
    turns: BTreeMap<TestScope, Turn>,
    admitted: BTreeMap<TestScope, Vec<String>>,
    ended: HashMap<String, End>,
    receipts: BTreeMap<TestScope, String>,
    kept: HashMap<(TestScope, String), u32>,
    disposed: HashMap<(TestScope, String), u32>,
    releasing: Vec<(TestScope, usize, String)>,
    next_id: u64,
    scopes: Vec<TestScope>,
}

fn config() -> SessionConfig {
    SessionConfig {
        fingerprint: 7,
        requested_model: None,
        requested_permission_mode: None,
    }
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let slots = 1 + rng.below(3) as usize;
        let max_residents = [0, 1, 2, 8][rng.below(4) as usize];
        let steer = rng.chance(50);
        let lazy = rng.chance(50);
        World {
            l: Lifecycle::new(LifecycleConfig {
                max_residents,
                ..LifecycleConfig::default()
            }),
            rng,
            now: 0,
            steer,
            slots: vec![if lazy { SlotM::Empty } else { SlotM::Idle }; slots],
            sessions: vec![BTreeMap::new(); slots],
            inbox: BTreeMap::new(),
            turns: BTreeMap::new(),
            admitted: BTreeMap::new(),
            ended: HashMap::new(),
            receipts: BTreeMap::new(),
            kept: HashMap::new(),
            disposed: HashMap::new(),
            releasing: Vec::new(),
            next_id: 0,
            scopes: vec![
                TestScope::thread("c1", "r1"),
                TestScope::thread("c1", "r2"),
                TestScope::conversation("c2"),
            ],
        }
    }

    fn view(&self) -> Vec<SlotView> {
        self.slots
            .iter()
            .map(|s| match s {
                SlotM::Empty => SlotView::Empty,
                SlotM::Spawning => SlotView::Spawning,
                SlotM::Idle => SlotView::Idle,
                SlotM::Busy => SlotView::Busy,
                SlotM::Backoff => SlotView::Backoff,
            })
            .collect()
    }

    fn pick_scope(&mut self) -> TestScope {
        let i = self.rng.below(self.scopes.len() as u64) as usize;
        self.scopes[i].clone()
    }

    // ----- the harness's queue ------------------------------------------------------------

    fn push(&mut self, scope: &TestScope, id: String) {
        self.inbox
            .entry(scope.clone())
            .or_default()
            .ids
            .push_back(id);
    }

    fn requeue_front(&mut self, scope: &TestScope, ids: Vec<String>, attempts: u32, steered: bool) {
        let p = self.inbox.entry(scope.clone()).or_default();
        for id in ids.into_iter().rev() {
            if !p.ids.contains(&id) {
                p.ids.push_front(id);
            }
        }
        p.attempts = p.attempts.max(attempts);
        p.steered |= steered;
    }

    fn end_msg(&mut self, id: &str, how: End) {
        let before = self.ended.insert(id.to_string(), how);
        assert!(
            before.is_none(),
            "{id} ended twice ({before:?}, then {how:?})"
        );
    }

    // ----- steps --------------------------------------------------------------------------

    fn arrive(&mut self) {
        let scope = self.pick_scope();
        self.next_id += 1;
        let id = format!("m{}", self.next_id);
        self.admitted
            .entry(scope.clone())
            .or_default()
            .push(id.clone());
        match self.l.route_running(&scope, Msg::new(&id), self.steer) {
            RunningRoute::NotRunning(_) => self.push(&scope, id),
            RunningRoute::Queued => {}
            RunningRoute::Steer => self
                .turns
                .get_mut(&scope)
                .expect("steer into a running turn")
                .steered_in
                .push(id),
            RunningRoute::Duplicate => panic!("a new message reported as duplicate"),
        }
    }

    fn dispatch(&mut self) {
        let inbox = std::mem::take(&mut self.inbox);
        for (scope, p) in inbox {
            self.l.admit(
                &scope,
                Batch {
                    inputs: p.ids.iter().map(|id| Msg::new(id)).collect(),
                    attempts: p.attempts,
                    steered: p.steered,
                },
            );
        }
        self.l.end_of_inbox();
        let targets = self.l.plan(&self.view(), &config(), Moment(self.now));
        let mut given = Vec::new();
        for (scope, target) in targets {
            assert!(
                !self.turns.contains_key(&scope),
                "plan targets a running scope"
            );
            let slot = match target {
                Target::Slot(i) => {
                    assert_eq!(self.slots[i], SlotM::Idle, "plan gave a non-idle worker");
                    i
                }
                Target::Spawn(j) => {
                    assert_eq!(self.slots[j], SlotM::Empty, "spawn into an occupied slot");
                    self.slots[j] = SlotM::Spawning;
                    continue;
                }
                Target::Any => match self.slots.iter().position(|s| *s == SlotM::Idle) {
                    Some(i) => i,
                    None => match self.slots.iter().position(|s| *s == SlotM::Empty) {
                        Some(j) => {
                            self.slots[j] = SlotM::Spawning;
                            continue;
                        }
                        None => continue,
                    },
                },
            };
            assert!(!given.contains(&slot), "one worker given to two turns");
            given.push(slot);
            let receipt = self.receipts.get(&scope).cloned();
            let Some(batch) = self.l.start(&scope, slot, &config(), || {
                let mut r = receipt.map(SessionRecord::new);
                if let Some(r) = r.as_mut() {
                    r.requested_model = None;
                    r.requested_permission_mode = None;
                }
                Ok(r)
            }) else {
                continue;
            };
            self.slots[slot] = SlotM::Busy;
            let ids: Vec<String> = batch.inputs.iter().map(|m| m.0.clone()).collect();
            let plan = self.l.plan_for(&scope, Vec::new());
            let mut turn = Turn {
                slot,
                batch: ids,
                attempts: batch.attempts,
                steered_in: Vec::new(),
                warm: false,
                session: None,
                rotate: false,
                cancel: false,
            };
            match plan.via {
                Via::Hot { session_id } => {
                    assert_eq!(
                        self.sessions[slot].get(&scope),
                        Some(&session_id),
                        "hot on a session the worker does not hold"
                    );
                    turn.session = Some(session_id);
                }
                Via::Warm { record } => {
                    turn.warm = true;
                    turn.session = Some(record.session_id);
                }
                Via::Cold { .. } => {}
            }
            self.trace(format!(
                "start {scope:?} on {slot}: {:?} warm={} session={:?}",
                turn.batch, turn.warm, turn.session
            ));
            self.turns.insert(scope, turn);
        }
    }

    fn open_session(&mut self, scope: &TestScope) -> String {
        let turn = self.turns.get_mut(scope).expect("running");
        let slot = turn.slot;
        if let Some(live) = self.sessions[slot].get(scope).cloned() {
            turn.session = Some(live.clone());
            return live;
        }
        let opened = match (turn.warm, turn.session.clone()) {
            (true, Some(sid)) => Opened::Restored {
                session_id: sid,
                method: RestoreMethod::Load,
            },
            _ => {
                self.next_id += 1;
                Opened::Created {
                    session_id: format!("s{}", self.next_id),
                    model: None,
                    permission_mode: None,
                }
            }
        };
        let sid = opened.session_id().to_string();
        turn.session = Some(sid.clone());
        self.sessions[slot].insert(scope.clone(), sid.clone());
        self.l.opened(scope, opened);
        sid
    }

    fn check_order(&self, scope: &TestScope, batch: &[String]) {
        let order = &self.admitted[scope];
        let pos = |id: &String| order.iter().position(|x| x == id).expect("admitted");
        let mut sorted = batch.to_vec();
        sorted.sort_by_key(pos);
        assert_eq!(sorted, batch, "a batch out of admission order");
        let last = batch.iter().map(pos).max().unwrap_or(0);
        for earlier in &order[..last] {
            assert!(
                batch.contains(earlier) || self.ended.contains_key(earlier),
                "{scope:?}: {batch:?} answered while the earlier {earlier} waits"
            );
        }
    }

    fn end_turn(&mut self, scope: &TestScope, success_only: bool) {
        let roll = if success_only { 0 } else { self.rng.below(100) };
        let turn = &self.turns[scope];
        let (warm, slot, has_steer) = (turn.warm, turn.slot, !turn.steered_in.is_empty());
        let open_fails = warm && !success_only && roll < 20;
        if open_fails {
            // The restore failed without a definitive answer; the harness hands the batch back.
            let turn = self.turns.remove(scope).expect("running");
            self.slots[slot] = SlotM::Idle;
            self.l.turn_end(
                scope,
                TurnOutcome::RestoreUndecided {
                    method: RestoreMethod::Load,
                    detail: "timeout".into(),
                },
                Moment(self.now),
            );
            self.requeue_front(scope, turn.batch, turn.attempts, false);
            return;
        }
        let sid = self.open_session(scope);
        let turn = self.turns.remove(scope).expect("running");
        let outcome = if turn.rotate {
            TurnOutcome::Rotated
        } else if turn.cancel {
            TurnOutcome::Cancelled
        } else if success_only || roll < 55 {
            TurnOutcome::Replied {
                session_id: sid.clone(),
                rotated: roll % 13 == 0,
            }
        } else if roll < 70 && has_steer {
            TurnOutcome::Requeued {
                extra: turn.steered_in.clone(),
            }
        } else if roll < 88 {
            TurnOutcome::Failed
        } else {
            TurnOutcome::WorkerLost
        };
        match &outcome {
            TurnOutcome::Replied { rotated, .. } => {
                self.check_order(scope, &turn.batch);
                for id in &turn.batch {
                    self.end_msg(id, End::Turn);
                }
                if *rotated {
                    self.sessions[slot].remove(scope);
                }
            }
            TurnOutcome::Cancelled | TurnOutcome::Rotated => {
                self.check_order(scope, &turn.batch);
                for id in &turn.batch {
                    self.end_msg(id, End::Turn);
                }
                if matches!(outcome, TurnOutcome::Rotated) {
                    self.sessions[slot].remove(scope);
                }
            }
            TurnOutcome::Requeued { extra } => {
                let mut ids = turn.batch.clone();
                ids.extend(extra.iter().cloned());
                self.requeue_front(scope, ids, turn.attempts, true);
            }
            TurnOutcome::Failed | TurnOutcome::WorkerLost => {
                if turn.attempts + 1 < MAX_ATTEMPTS {
                    self.requeue_front(scope, turn.batch.clone(), turn.attempts + 1, false);
                } else {
                    for id in &turn.batch {
                        self.end_msg(id, End::DeadLetter);
                    }
                }
            }
            TurnOutcome::RestoreUndecided { .. } => unreachable!(),
        }
        self.trace(format!("end {scope:?}: {outcome:?}"));
        let lost = matches!(outcome, TurnOutcome::WorkerLost);
        if lost {
            self.slots[slot] = SlotM::Backoff;
            self.sessions[slot].clear();
        } else {
            self.slots[slot] = SlotM::Idle;
        }
        let replied = matches!(outcome, TurnOutcome::Replied { .. });
        self.l.turn_end(scope, outcome, Moment(self.now));
        if replied {
            self.next_id += 1;
            self.l.replied(scope, &format!("reply{}", self.next_id));
            let live = self.sessions[slot].get(scope).cloned();
            self.l.settled(
                scope,
                live.map(|session_id| Delivered {
                    session_id,
                    standing_context_sent: false,
                    event_ids: turn.batch.clone(),
                }),
            );
        }
    }

    fn apply_effects(&mut self) {
        for effect in self.l.take_effects() {
            self.trace(format!("effect {effect:?}"));
            match effect {
                Effect::Release {
                    scope,
                    slot,
                    session_id,
                    ..
                } => {
                    assert!(
                        !self
                            .releasing
                            .iter()
                            .any(|(s, _, id)| *s == scope && *id == session_id),
                        "{session_id} released twice"
                    );
                    self.releasing.push((scope, slot, session_id));
                }
                Effect::Record(Record::ResidentKept {
                    session_id, scope, ..
                }) => {
                    *self
                        .kept
                        .entry((self.scope_of(&scope), session_id))
                        .or_default() += 1
                }
                Effect::Record(Record::ResidentDisposed {
                    session_id, scope, ..
                }) => {
                    let key = (self.scope_of(&scope), session_id);
                    let d = self.disposed.entry(key.clone()).or_default();
                    *d += 1;
                    assert!(
                        *d <= self.kept.get(&key).copied().unwrap_or(0),
                        "{key:?} disposed more often than kept"
                    );
                }
                Effect::Record(_) | Effect::Notice(_) => {}
            }
        }
        for persist in self.l.take_persists() {
            match persist {
                Persist::Put { scope, record } => {
                    self.receipts.insert(scope, record.session_id);
                }
                Persist::Remove { scope } => {
                    self.receipts.remove(&scope);
                }
                Persist::RemoveChannel { channel } => {
                    self.receipts.retain(|k, _| k.channel != channel)
                }
                Persist::Commit { .. } => {}
            }
        }
        // Releases run when their worker is idle (or is gone).
        let pending = std::mem::take(&mut self.releasing);
        for (scope, slot, sid) in pending {
            match self.slots[slot] {
                SlotM::Busy | SlotM::Spawning => self.releasing.push((scope, slot, sid)),
                SlotM::Idle => {
                    if self.sessions[slot].get(&scope) == Some(&sid) {
                        self.sessions[slot].remove(&scope);
                    }
                    self.l.released(&scope, &sid);
                }
                SlotM::Empty | SlotM::Backoff => self.l.released(&scope, &sid),
            }
        }
    }

    fn idle_sessions(&self, pick: impl Fn(&TestScope) -> bool) -> Vec<(TestScope, usize, String)> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if *slot == SlotM::Idle {
                for (scope, sid) in &self.sessions[i] {
                    if pick(scope) {
                        out.push((scope.clone(), i, sid.clone()));
                    }
                }
            }
        }
        out
    }

    fn drop_idle_sessions(&mut self, pick: impl Fn(&TestScope) -> bool) {
        for (i, slot) in self.slots.iter().enumerate() {
            if *slot == SlotM::Idle {
                self.sessions[i].retain(|s, _| !pick(s));
            }
        }
    }

    fn scope_of(&self, label: &str) -> TestScope {
        self.scopes
            .iter()
            .find(|s| buzz_session_lifecycle::Scope::label(*s) == label)
            .cloned()
            .expect("known label")
    }

    fn trace(&self, what: impl std::fmt::Display) {
        if std::env::var_os("INTERLEAVING_TRACE").is_some() {
            eprintln!(
                "t={} {what}  slots={:?} sessions={:?}",
                self.now, self.slots, self.sessions
            );
        }
    }

    fn step(&mut self) {
        let roll = self.rng.below(100);
        self.trace(format!("step roll={roll}"));
        match roll {
            0..=29 => self.arrive(),
            30..=49 => self.dispatch(),
            50..=69 => {
                let running: Vec<TestScope> = self.turns.keys().cloned().collect();
                if !running.is_empty() {
                    let scope = running[self.rng.below(running.len() as u64) as usize].clone();
                    self.end_turn(&scope, false);
                }
            }
            70..=77 => {
                if let Some(j) = self.slots.iter().position(|s| *s == SlotM::Spawning) {
                    self.slots[j] = SlotM::Idle;
                }
            }
            78..=83 => self.now += self.rng.below(40_000),
            84..=86 => {
                if let Some(j) = self.slots.iter().position(|s| *s == SlotM::Backoff) {
                    self.slots[j] = SlotM::Empty;
                }
            }
            87..=89 => {
                // `!rotate`: the harness drops the scope's session from idle workers and signals
                // a running turn.
                let scope = self.pick_scope();
                let live = self
                    .idle_sessions(|s| *s == scope)
                    .into_iter()
                    .map(|(_, slot, sid)| (slot, sid))
                    .collect();
                self.l.abandon(&scope, live);
                self.drop_idle_sessions(|s| *s == scope);
                if let Some(turn) = self.turns.get_mut(&scope) {
                    turn.rotate = true;
                }
            }
            90..=91 => {
                let scope = self.pick_scope();
                self.l.cancel_requested(&scope);
                if let Some(turn) = self.turns.get_mut(&scope) {
                    turn.cancel = true;
                }
            }
            92..=93 => {
                if self
                    .slots
                    .iter()
                    .all(|s| !matches!(s, SlotM::Busy | SlotM::Spawning))
                {
                    for (i, s) in self.slots.iter_mut().enumerate() {
                        *s = SlotM::Empty;
                        self.sessions[i].clear();
                    }
                    self.l.pool_slept();
                }
            }
            94 => {
                // Removed from a channel: the harness drops its sessions from idle workers.
                self.l.abandon_channel("c1");
                self.drop_idle_sessions(|s| s.channel == "c1");
            }
            _ => self.apply_effects(),
        }
        self.apply_effects();
    }

    /// No new traffic: everything admitted must end.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.turns.is_empty()
                && self.inbox.is_empty()
                && self.l.pending_total() == 0
                && self.releasing.is_empty()
            {
                return;
            }
            self.apply_effects();
            for s in self.slots.iter_mut() {
                if matches!(s, SlotM::Spawning | SlotM::Backoff) {
                    *s = if *s == SlotM::Spawning {
                        SlotM::Idle
                    } else {
                        SlotM::Empty
                    };
                }
            }
            self.dispatch();
            self.apply_effects();
            let running: Vec<TestScope> = self.turns.keys().cloned().collect();
            for scope in running {
                self.end_turn(&scope, true);
            }
            self.apply_effects();
            self.now += 20_000;
        }
        panic!(
            "the run never settled: {} running, {} pending, {} releasing",
            self.turns.len(),
            self.l.pending_total(),
            self.releasing.len()
        );
    }

    fn check_everything_ended(&self) {
        for (scope, ids) in &self.admitted {
            for id in ids {
                assert!(self.ended.contains_key(id), "{scope:?}: {id} never ended");
            }
        }
    }
}

fn run(seed: u64) {
    let mut w = World::new(seed);
    let steps = 60 + w.rng.below(200);
    for _ in 0..steps {
        w.step();
    }
    w.settle();
    w.check_everything_ended();
    w.l.shutdown();
    w.apply_effects();
    for (key, kept) in &w.kept {
        assert_eq!(
            w.disposed.get(key).copied().unwrap_or(0),
            *kept,
            "{key:?}: every kept resident is disposed exactly once by shutdown"
        );
    }
}

#[test]
fn invariants_hold_across_random_interleavings() {
    if let Ok(seed) = std::env::var("INTERLEAVING_SEED") {
        run(seed.parse().expect("INTERLEAVING_SEED is a number"));
        return;
    }
    for seed in 1..=3_000 {
        let result = std::panic::catch_unwind(|| run(seed));
        if let Err(e) = result {
            eprintln!("failing seed: {seed} (rerun with INTERLEAVING_SEED={seed})");
            std::panic::resume_unwind(e);
        }
    }
}
