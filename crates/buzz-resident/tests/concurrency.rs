//! Randomized interleavings of routing, finishing, settling, continuing and disposal.
//!
//! Each round builds a fresh table and runs, on real threads:
//! * router threads that route unique inputs to random scopes (with random worker
//!   availability and the occasional configuration change);
//! * one turn thread per scope that plays the harness: it runs hot continuations and cold
//!   dispatches, ends each prompt with a random outcome, settles, and re-routes whatever is
//!   handed back;
//! * a disposer thread firing random disposals and checking the stats invariant.
//!
//! At the end every input must have been delivered to a turn exactly once: lost inputs (for
//! example acknowledged as queued for a turn that never claimed them) or duplicated ones fail
//! the round, which reports its seed.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use buzz_resident::{
    Continuation, ControllerTable, DisposeReason, Fingerprint, Finish, Keep, NotResidentReason,
    Route, StartId, TurnEnd, TurnStatus,
};

const ROUNDS: u64 = 1_000;
const SCOPES: u32 = 3;
const ROUTERS: u64 = 4;
const INPUTS_PER_ROUTER: u64 = 24;
const FP: Fingerprint = Fingerprint(1);
const DRIFTED_FP: Fingerprint = Fingerprint(2);

/// SplitMix64: tiny, seedable and good enough to vary interleavings reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `1 / n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Sometimes give up the CPU, so threads interleave differently from run to run.
    fn jitter(&mut self) {
        match self.below(4) {
            0 => thread::yield_now(),
            1 => std::hint::spin_loop(),
            _ => {}
        }
    }
}

type Table = ControllerTable<u32, u64>;

/// The harness-side state of one scope.
#[derive(Default)]
struct Scope {
    /// Inputs that fell back to the cold/warm path and wait for a dispatch.
    backlog: Mutex<VecDeque<u64>>,
    /// Hot continuations granted by `route`, waiting for the scope's turn thread.
    continuations: Mutex<VecDeque<Continuation<u64>>>,
}

struct World {
    table: Table,
    scopes: Vec<Scope>,
    /// Every input handed to a turn, in delivery order (duplicates kept on purpose).
    delivered: Mutex<Vec<u64>>,
    routers_done: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().expect("test mutex poisoned")
}

impl World {
    fn deliver(&self, inputs: &[u64]) {
        lock(&self.delivered).extend_from_slice(inputs);
    }

    /// Routes one input and takes the action the harness would for the answer.
    fn route(&self, key: u32, input: u64, rng: &mut Rng) {
        loop {
            let busy = rng.one_in(5);
            let fingerprint = if rng.one_in(40) { DRIFTED_FP } else { FP };
            match self.table.route(&key, input, fingerprint, &|_| busy) {
                Route::Queued | Route::WaitFinishing => return,
                Route::Continue(continuation) => {
                    lock(&self.scopes[key as usize].continuations).push_back(continuation);
                    return;
                }
                Route::Fallback(fallback) => {
                    lock(&self.scopes[key as usize].backlog).extend(fallback.inputs);
                    return;
                }
                Route::CapacityWait(back) => {
                    assert_eq!(back, input, "capacity wait returns the same input");
                    thread::yield_now();
                }
            }
        }
    }

    /// Plays one turn from its start to its settle, including claimed continuations.
    fn run_turn(&self, key: u32, start: StartId, slot: usize, session: &str, rng: &mut Rng) {
        loop {
            rng.jitter();
            let end = match rng.below(20) {
                0..=2 => TurnEnd::Failed,
                3..=5 => TurnEnd::Cancelled,
                roll => TurnEnd::Succeeded {
                    slot,
                    session_id: session.to_owned(),
                    fingerprint: FP,
                    keep: if roll == 6 {
                        Keep::No(NotResidentReason::PerTurnCwd)
                    } else {
                        Keep::Yes
                    },
                },
            };
            match self.table.finish(&key, start, end) {
                Finish::Claimed(inputs) => {
                    assert!(
                        !inputs.is_empty(),
                        "an empty claim would be a lost completion"
                    );
                    self.deliver(&inputs);
                }
                Finish::Completed { resident, .. } => {
                    rng.jitter();
                    if let Some(resident) = resident
                        && rng.one_in(8)
                    {
                        // A cancel that lost the race to completion.
                        self.table.dispose(
                            &key,
                            Some(resident.handle),
                            DisposeReason::CancelLostRace,
                        );
                    }
                    rng.jitter();
                    for input in self.table.settle(&key, start) {
                        self.route(key, input, rng);
                    }
                    return;
                }
                Finish::Failed { requeue, .. } | Finish::Cancelled { requeue, .. } => {
                    assert!(self.table.settle(&key, start).is_empty());
                    for input in requeue {
                        self.route(key, input, rng);
                    }
                    return;
                }
                Finish::Stale => panic!("scope {key}: the only driver of {start} saw it stale"),
            }
        }
    }

    /// The harness's dispatcher for one scope: runs hot continuations and cold dispatches
    /// until the routers are done and nothing is left anywhere.
    fn drive(&self, key: u32, rng: &mut Rng) {
        let scope = &self.scopes[key as usize];
        let mut sessions = 0_u32;
        loop {
            let continuation = lock(&scope.continuations).pop_front();
            if let Some(c) = continuation {
                self.deliver(&c.inputs);
                self.run_turn(key, c.start, c.resident.slot, &c.resident.session_id, rng);
                continue;
            }
            if !lock(&scope.backlog).is_empty() {
                // Checked begin: a router may have just won a hot continue.
                if let Ok((start, _replaced)) = self.table.try_begin(&key) {
                    let inputs: Vec<u64> = lock(&scope.backlog).drain(..).collect();
                    self.deliver(&inputs);
                    sessions += 1;
                    let session = format!("scope{key}-session{sessions}");
                    self.run_turn(key, start, key as usize, &session, rng);
                    continue;
                }
            }
            let quiet = self.routers_done.load(Ordering::SeqCst) == ROUTERS as usize
                && lock(&scope.continuations).is_empty()
                && lock(&scope.backlog).is_empty()
                && self.table.status(&key) != Some(TurnStatus::Running)
                && !self.table.is_finishing(&key);
            if quiet {
                return;
            }
            thread::yield_now();
        }
    }
}

/// Marks one router as finished when dropped.
struct RouterDone<'a>(&'a AtomicUsize);

impl Drop for RouterDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn run_round(seed: u64) {
    let world = World {
        table: Table::new(2),
        scopes: (0..SCOPES).map(|_| Scope::default()).collect(),
        delivered: Mutex::new(Vec::new()),
        routers_done: AtomicUsize::new(0),
    };
    let world = &world;
    thread::scope(|s| {
        for router in 0..ROUTERS {
            s.spawn(move || {
                // Counted even if the router panics, so the other threads stop and the
                // panic fails the test instead of hanging it.
                let _done = RouterDone(&world.routers_done);
                let mut rng = Rng(seed ^ (router + 1).wrapping_mul(0x1000_0000_01b3));
                for n in 0..INPUTS_PER_ROUTER {
                    let input = router * INPUTS_PER_ROUTER + n;
                    let key = u32::try_from(rng.below(u64::from(SCOPES))).expect("small");
                    world.route(key, input, &mut rng);
                    rng.jitter();
                }
            });
        }
        for key in 0..SCOPES {
            s.spawn(move || {
                let mut rng = Rng(seed.rotate_left(17) ^ u64::from(key));
                world.drive(key, &mut rng);
            });
        }
        s.spawn(move || {
            let mut rng = Rng(!seed);
            while world.routers_done.load(Ordering::SeqCst) < ROUTERS as usize {
                let stats = world.table.stats();
                assert_eq!(
                    stats.starts,
                    stats.terminals + stats.running,
                    "seed {seed}: {stats:?}"
                );
                assert!(
                    stats.residents <= 2,
                    "seed {seed}: bound exceeded: {stats:?}"
                );
                let key = u32::try_from(rng.below(u64::from(SCOPES))).expect("small");
                match rng.below(40) {
                    0 => drop(world.table.dispose(&key, None, DisposeReason::Rotate)),
                    1 => drop(world.table.dispose_idle(DisposeReason::IdlePoolSleep)),
                    2 => drop(
                        world
                            .table
                            .dispose_slot(key as usize, DisposeReason::AgentExit),
                    ),
                    3 => drop(world.table.dispose_all(DisposeReason::Shutdown)),
                    _ => {}
                }
                thread::yield_now();
            }
        });
    });

    let mut delivered = world.delivered.lock().expect("poisoned").clone();
    delivered.sort_unstable();
    let expected: Vec<u64> = (0..ROUTERS * INPUTS_PER_ROUTER).collect();
    if delivered != expected {
        let duplicated: Vec<_> = delivered
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        let lost: Vec<_> = expected
            .iter()
            .filter(|i| delivered.binary_search(i).is_err())
            .collect();
        panic!("seed {seed}: lost {lost:?}, duplicated {duplicated:?}");
    }
    let stats = world.table.stats();
    assert_eq!(
        (stats.running, stats.finishing, stats.held_inputs),
        (0, 0, 0),
        "seed {seed}: {stats:?}"
    );
    assert_eq!(stats.starts, stats.terminals, "seed {seed}: {stats:?}");
    assert_eq!(stats.stale_finishes, 0, "seed {seed}");
}

#[test]
fn every_input_is_delivered_exactly_once_under_random_interleavings() {
    let base = std::env::var("BUZZ_RESIDENT_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5eed_0000);
    for round in 0..ROUNDS {
        run_round(base.wrapping_add(round));
    }
}
