//! `Driver::dispatch` against small scripted stand-ins for the pool and the queue, on tokio's
//! paused clock with the in-memory store: rules that live in the dispatcher itself.

use buzz_session_lifecycle::driver::DEFAULT_READ_WAIT;
use buzz_session_lifecycle::test_values::none_and_all;
use buzz_session_lifecycle::testing::{MemoryReceipts, Msg, TestScope};
use buzz_session_lifecycle::{
    AgentCaps, Claimed, Driver, Inbox, LifecycleConfig, Plan, Reach, SlotView, Step, Target,
    TurnOutcome, Workers,
};
use buzz_session_store::KeyScheme;
use tokio::runtime::Runtime;

fn a() -> TestScope {
    TestScope::conversation("c1")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// A pool whose routing the test scripts: `claim` hands out `next` (a worker slot), whatever
/// the target; `held` says whether an idle worker holds a live session of the scope.
struct Pool {
    view: Vec<SlotView>,
    next: usize,
    held: bool,
    /// The live session each slot's worker holds for the scope.
    live: Vec<Option<String>>,
    given_back: Vec<usize>,
}

impl Workers<TestScope> for Pool {
    type Worker = usize;

    fn view(&self) -> Vec<SlotView> {
        self.view.clone()
    }

    fn held(&self, _: &TestScope) -> bool {
        self.held
    }

    fn claim(&mut self, _: Target, _: &TestScope) -> Claimed<usize> {
        Claimed::Worker(self.next)
    }

    fn slot(&self, worker: &usize) -> usize {
        *worker
    }

    fn live(&self, worker: &usize, _: &TestScope) -> Option<String> {
        self.live[*worker].clone()
    }

    fn caps(&self, _: &usize) -> Option<AgentCaps> {
        Some(AgentCaps {
            load: true,
            ..AgentCaps::default()
        })
    }

    fn give_back(&mut self, worker: usize) {
        self.given_back.push(worker);
    }

    fn spawning(&self) -> usize {
        0
    }

    fn begin_spawn(&mut self, _: usize) {}
}

/// A queue with one message waiting for [`a`].
struct Queue(Option<Vec<Msg>>);

impl Inbox<TestScope, Msg> for Queue {
    type Batch = Vec<Msg>;

    fn ready(&self) -> Vec<TestScope> {
        self.0.iter().map(|_| a()).collect()
    }

    fn take(&mut self, _: &TestScope) -> Option<Vec<Msg>> {
        self.0.take()
    }

    fn inputs(batch: &Vec<Msg>) -> Vec<Msg> {
        batch.clone()
    }
}

fn settle(rt: &Runtime, driver: &mut Driver<TestScope, Msg>) {
    while driver.store_in_flight() > 0 {
        rt.block_on(driver.store_progress());
    }
}

fn plans(steps: Vec<Step<usize, Vec<Msg>>>) -> Vec<(usize, Plan)> {
    steps
        .into_iter()
        .filter_map(|s| match s {
            Step::Turn { worker, plan, .. } => Some((worker, plan)),
            Step::Spawn(_) => None,
        })
        .collect()
}

#[test]
fn a_turn_the_pool_routes_away_from_its_held_session_reads_its_receipt_first() {
    for behaviours in none_and_all() {
        // Rule: a scope whose live session an idle worker holds is placed without reading its
        // receipt, because it will continue that session. If the pool's routing hands it another
        // worker anyway (the holder was claimed by a scope placed before it, or its owner is busy),
        // the turn cannot continue the session: the worker goes back and the receipt is read first,
        // as for any turn that is not hot.
        let rt = runtime();
        let _context = rt.enter();
        let store = MemoryReceipts::new(KeyScheme::Scope);
        let config = LifecycleConfig {
            max_residents: 0,
            ..LifecycleConfig::with_behaviours(behaviours)
        };
        let records = Box::new(|_: &str, _| {});
        let mut driver = Driver::new(config, store.opener(), DEFAULT_READ_WAIT, records);
        driver.configure_sessions(&["/srv"], None, None);
        settle(&rt, &mut driver);
        let mut pool = Pool {
            view: vec![SlotView::Idle, SlotView::Idle],
            next: 0,
            held: false,
            live: vec![None, None],
            given_back: Vec::new(),
        };

        // A first turn on worker 0 opens s1 and answers.
        let mut queue = Queue(Some(vec![Msg::new("m1")]));
        assert!(
            plans(driver.dispatch(&mut pool, &mut queue)).is_empty(),
            "read first"
        );
        settle(&rt, &mut driver);
        let [(0, plan)] = &plans(driver.dispatch(&mut pool, &mut queue))[..] else {
            panic!("one turn on worker 0")
        };
        plan.report.created("s1", &None, &None);
        let outcome = TurnOutcome::Replied {
            session_id: "s1".into(),
            rotated: false,
        };
        driver.turn_end(&a(), outcome);
        driver.settled(&a(), None);
        settle(&rt, &mut driver);
        assert_eq!(store.get(&a()).map(|r| r.session_id), Some("s1".into()));
        let reads = store.calls().reads;

        // Worker 0 holds s1 — but the pool hands out worker 1.
        pool.held = true;
        pool.live[0] = Some("s1".into());
        pool.next = 1;
        let mut queue = Queue(Some(vec![Msg::new("m2")]));
        let steps = plans(driver.dispatch(&mut pool, &mut queue));
        assert!(steps.is_empty(), "no turn without a read: {steps:?}");
        // The read comes first either way: a live session's receipt is checked before it is
        // continued (an operator may have forgotten it), so no worker is even claimed; without that
        // check, the worker the pool handed out would go back.
        assert!(
            pool.given_back.iter().all(|&w| w == 1),
            "{:?}",
            pool.given_back
        );
        assert!(queue.0.is_some(), "the batch stays queued");
        settle(&rt, &mut driver);
        assert_eq!(store.calls().reads, reads + 1, "the receipt was read");
        let steps = plans(driver.dispatch(&mut pool, &mut queue));
        let [(1, plan)] = &steps[..] else {
            panic!("one turn on worker 1: {steps:?}")
        };
        assert!(
            matches!(&plan.reach, Reach::Warm { record, .. } if record.session_id == "s1"),
            "{plan:?}"
        );
    }
}
