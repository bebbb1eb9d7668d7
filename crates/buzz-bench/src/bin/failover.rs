//! One agent on two machines sharing a PostgreSQL database (`--lease-across-machines`), its
//! holder killed again and again while mentions flow: how long each takeover takes, and whether
//! any mention went unanswered or was answered twice.
//!
//! A private PostgreSQL server and a test relay run in this process; the two "machines" are two
//! harness processes with state directories of their own. Three threads are opened first. Then,
//! for each kill, once the thread's last turn has landed in its receipt, the holder (the machine
//! that is subscribed) is killed with SIGKILL and the owner posts a follow-up in the thread at
//! once; the time runs from the kill until an observer
//! subscribed to the agent's events (over its own websocket) receives the answer to that
//! follow-up: the standby had to see the lease expire, take it, connect, read the follow-up back
//! from the watermark and answer it on the thread's stored session. The killed machine is started
//! again as the next standby.
//!
//! Then the cost of the fence on a hot follow-up: one harness with the host's lease and one with
//! the lease across machines (every receipt write checks the lease row, every reply passes the
//! gate), alternating, each answering hot follow-ups in one thread; medians and their ratio.
//!
//! Exit status 1 when a mention was answered twice or not at all, or a thread was given a new
//! session: the test command runs this with `--cost-runs 0` as the twenty-kill scenario.
//!
//! ```sh
//! failover --harness target/patched/buzz-acp --agent target/debug/acp-test-agent --kills 20
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::Scenario;
use buzz_bench::observer::{
    Socket, harness_on_relay, post_mention, relay_with_agent, subscribe_to_agent,
};
use buzz_bench::{BenchError, Binaries, ctx, median, ms, quantile, scenario, wait_subscribed};
use buzz_test_relay::TestRelay;
use clap::Parser;
use futures::StreamExt;
use nostr::{JsonUtil, Keys, RelayMessage};
use tokio_tungstenite::tungstenite::Message;

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
const WAIT: Duration = Duration::from_secs(60);
const THREADS: usize = 3;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    binaries: Binaries,
    /// Holders killed in a row.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// The lease's lifetime (`--lease-lifetime`).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    lifetime: Duration,
    /// How often the holder renews (`--lease-renew-every`).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    renew_every: Duration,
    /// The holder stops serving this long before its lease could end (`--lease-margin`).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    margin: Duration,
    /// How often a standby asks (`--lease-retry-every`).
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    retry_every: Duration,
    /// Runs of the fence's cost (each: one harness per lease kind, alternating); 0 skips it.
    #[arg(long, default_value_t = 5)]
    cost_runs: usize,
    /// Hot follow-ups per run of the fence's cost.
    #[arg(long, default_value_t = 5)]
    follow_ups: usize,
}

/// When the observer received each of the agent's answers, by the id of the mention answered.
type Answers = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

/// Reads the agent's events as they come and records what each answers. It waits as long as
/// it takes (a takeover with the default lease is quiet for half a minute).
fn observe(mut socket: Socket) -> Answers {
    let answers: Answers = Arc::default();
    let record = Arc::clone(&answers);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = socket.next().await {
            let Message::Text(text) = frame else { continue };
            let Ok(RelayMessage::Event { event, .. }) = RelayMessage::from_json(text.as_str())
            else {
                continue;
            };
            let at = Instant::now();
            let event = Event::from(&event.into_owned());
            let mut answers = record.lock().expect("the answers' lock");
            for id in event.answered_ids() {
                answers.entry(id).or_default().push(at);
            }
        }
    });
    answers
}

/// Waits until `id` is answered; the moment the first answer was received.
async fn answered(answers: &Answers, id: &str) -> Result<Instant, BenchError> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(at) = answers
            .lock()
            .expect("the answers' lock")
            .get(id)
            .and_then(|a| a.first())
        {
            return Ok(*at);
        }
        if Instant::now() > deadline {
            return Err(BenchError(format!("no answer to {id} within {WAIT:?}")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

struct World {
    relay: TestRelay,
    agent: Keys,
    owner: Keys,
    s: Scenario,
    binaries: Binaries,
    env: Vec<(String, String)>,
    store_url: String,
    starts: usize,
}

/// One harness process and its log.
struct Machine {
    child: Child,
    log: PathBuf,
    state_dir: PathBuf,
}

impl World {
    /// Starts a harness with `state_dir` (a machine of its own), its log a new file.
    fn start(&mut self, state_dir: &Path) -> Result<Machine, BenchError> {
        self.starts += 1;
        let log = self.s.root.join(format!("harness-{}.log", self.starts));
        ctx(
            std::fs::create_dir_all(state_dir),
            "a machine's state directory",
        )?;
        self.s.state_dir = state_dir.to_path_buf();
        let mut cmd = harness_on_relay(
            &self.s,
            &self.binaries.harness,
            &self.binaries.agent,
            &self.relay,
            &self.agent,
            &self.owner,
            &log,
        )?;
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = ctx(cmd.spawn(), "starting buzz-acp")?;
        Ok(Machine {
            child,
            log,
            state_dir: state_dir.to_path_buf(),
        })
    }

    async fn mention(
        &self,
        text: &str,
        thread: Option<(&str, &str)>,
    ) -> Result<nostr::Event, BenchError> {
        post_mention(&self.relay, &self.owner, &self.agent, CHANNEL, text, thread).await
    }
}

fn subscribed(machine: &Machine) -> bool {
    std::fs::read_to_string(&machine.log).is_ok_and(|l| l.contains(buzz_bench::SUBSCRIBED))
}

/// The index of the machine serving now (the one subscribed), waiting for one.
async fn holder(machines: &[Machine]) -> Result<usize, BenchError> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(i) = machines.iter().position(subscribed) {
            return Ok(i);
        }
        if Instant::now() > deadline {
            return Err(BenchError("no machine serves".into()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `e` with the machines' logs.
fn with_logs(e: BenchError, machines: &[Machine]) -> BenchError {
    let logs: Vec<String> = machines
        .iter()
        .map(|m| std::fs::read_to_string(&m.log).unwrap_or_default())
        .collect();
    BenchError(format!("{e}\n--- logs:\n{}", logs.join("\n---\n")))
}

fn kill(machine: &mut Machine) {
    let _ = machine.child.kill();
    let _ = machine.child.wait();
}

/// What the kills showed.
struct Takeovers {
    failovers: Vec<Duration>,
    mentions: Vec<String>,
}

async fn kills(world: &mut World, args: &Args) -> Result<(Takeovers, Answers), BenchError> {
    let socket = subscribe_to_agent(&world.relay.ws_url(), &world.owner, &world.agent).await?;
    let answers = observe(socket);
    let machines_dirs = [
        world.s.root.join("machine-a"),
        world.s.root.join("machine-b"),
    ];
    let first = world.start(&machines_dirs[0])?;
    wait_subscribed(&first.log, WAIT).await?;
    let second = world.start(&machines_dirs[1])?;
    let mut machines = vec![first, second];

    let mut mentions = Vec::new();
    // Per thread: its root and the mention the next follow-up answers.
    let mut last: Vec<(String, String)> = Vec::new();
    for t in 0..THREADS {
        let root = world
            .mention(&format!("thread {t}: remember t{t}-marker"), None)
            .await?;
        answered(&answers, &root.id.to_hex()).await?;
        mentions.push(root.id.to_hex());
        // Each follow-up answers the thread's previous mention (the observer keeps times only).
        last.push((root.id.to_hex(), root.id.to_hex()));
    }

    let scope = buzz_session_store::StoreScope {
        relay: world.relay.ws_url().trim_end_matches('/').to_owned(),
        agent_pubkey: world.agent.public_key().to_hex(),
    };
    let mut failovers = Vec::new();
    for k in 0..args.kills {
        let h = holder(&machines).await?;
        let t = k % THREADS;
        let (root, parent) = last[t].clone();
        // The thread's last turn has landed in its receipt (a kill before that costs the
        // thread its ledger, or a new thread its session: the guards cover a kill mid-turn).
        ctx(
            tokio::task::spawn_blocking({
                let (url, scope, parent) = (world.store_url.clone(), scope.clone(), parent.clone());
                move || buzz_bench::wait_delivered(&url, &scope, &parent, WAIT)
            })
            .await,
            "waiting for the receipt",
        )??;
        kill(&mut machines[h]);
        let killed = Instant::now();
        let follow = world
            .mention(
                &format!("follow-up {k}: what do you remember?"),
                Some((&root, &parent)),
            )
            .await?;
        let id = follow.id.to_hex();
        let at = answered(&answers, &id)
            .await
            .map_err(|e| with_logs(e, &machines))?;
        failovers.push(at.saturating_duration_since(killed));
        mentions.push(id.clone());
        last[t].1 = id;
        let dir = machines[h].state_dir.clone();
        machines[h] = world.start(&dir)?;
        eprintln!("kill {}: answered after {}", k + 1, ms(failovers[k]));
    }
    // One more mention after the last takeover, answered by whoever serves.
    let (root, parent) = last[0].clone();
    let last_mention = world.mention("one more", Some((&root, &parent))).await?;
    answered(&answers, &last_mention.id.to_hex()).await?;
    mentions.push(last_mention.id.to_hex());
    for machine in &mut machines {
        kill(machine);
    }
    Ok((
        Takeovers {
            failovers,
            mentions,
        },
        answers,
    ))
}

/// Hot follow-ups on one harness with `env`, timed from the post to the answer.
async fn hot_follow_ups(
    world: &mut World,
    env: &[(String, String)],
    follow_ups: usize,
    run: usize,
) -> Result<Vec<Duration>, BenchError> {
    let saved = std::mem::replace(&mut world.env, env.to_vec());
    let socket = subscribe_to_agent(&world.relay.ws_url(), &world.owner, &world.agent).await?;
    let answers = observe(socket);
    let dir = world.s.root.join(format!("cost-{run}"));
    let mut machine = world.start(&dir)?;
    world.env = saved;
    let result = async {
        wait_subscribed(&machine.log, WAIT).await?;
        // Texts name the run: two identical events in one second would be one event.
        let root = world
            .mention(&format!("plan the release (run {run})"), None)
            .await?;
        answered(&answers, &root.id.to_hex())
            .await
            .map_err(|e| with_logs(e, std::slice::from_ref(&machine)))?;
        let mut parent = root.id.to_hex();
        let mut times = Vec::new();
        for n in 0..follow_ups {
            let started = Instant::now();
            let q = world
                .mention(
                    &format!("and then {n}?"),
                    Some((&root.id.to_hex(), &parent)),
                )
                .await?;
            let at = answered(&answers, &q.id.to_hex())
                .await
                .map_err(|e| with_logs(e, std::slice::from_ref(&machine)))?;
            times.push(at.saturating_duration_since(started));
            parent = q.id.to_hex();
        }
        Ok(times)
    }
    .await;
    kill(&mut machine);
    result
}

#[tokio::main]
async fn main() -> Result<ExitCode, BenchError> {
    let args = Args::parse();
    let pg = ctx(
        pg_fixture::PgServer::start(pg_fixture::Options::default()),
        "starting PostgreSQL",
    )?;
    let (relay, agent, owner) = relay_with_agent(CHANNEL).await?;
    let (_dir, s) = scenario()?;
    let store = ("BUZZ_ACP_SESSION_STORE_URL".to_owned(), pg.url());
    let secs = |d: Duration| format!("{}ms", d.as_millis());
    let across: Vec<(String, String)> = vec![
        store.clone(),
        ("BUZZ_ACP_LEASE_ACROSS_MACHINES".into(), "1".into()),
        ("BUZZ_ACP_LEASE_LIFETIME".into(), secs(args.lifetime)),
        ("BUZZ_ACP_LEASE_RENEW_EVERY".into(), secs(args.renew_every)),
        ("BUZZ_ACP_LEASE_MARGIN".into(), secs(args.margin)),
        ("BUZZ_ACP_LEASE_RETRY_EVERY".into(), secs(args.retry_every)),
    ];
    let host_lease = vec![store];
    let mut world = World {
        relay,
        agent,
        owner,
        s,
        binaries: Binaries {
            harness: args.binaries.harness.clone(),
            agent: args.binaries.agent.clone(),
        },
        env: across.clone(),
        store_url: pg.url(),
        starts: 0,
    };

    let mut healthy = true;
    if args.kills > 0 {
        let (takeovers, answers) = kills(&mut world, &args).await?;
        let answers = answers.lock().expect("the answers' lock").clone();
        let counts: Vec<usize> = takeovers
            .mentions
            .iter()
            .map(|id| answers.get(id).map_or(0, Vec::len))
            .collect();
        let lost = counts.iter().filter(|&&n| n == 0).count();
        let duplicated = counts.iter().filter(|&&n| n > 1).count();
        let frames = buzz_bench::wire(&world.s)?;
        let news = frames
            .iter()
            .filter(|f| {
                f.direction == acp_test_agent::harness::Direction::Received
                    && f.method.as_deref() == Some("session/new")
            })
            .count();
        let f = &takeovers.failovers;
        println!(
            "| {} kills, lease {} / renew {} / margin {} / retry {} | value |",
            args.kills,
            ms(args.lifetime),
            ms(args.renew_every),
            ms(args.margin),
            ms(args.retry_every)
        );
        println!("|---|---:|");
        println!(
            "| failover, kill → standby's answer (median) | {} |",
            ms(median(f.clone()))
        );
        println!(
            "| failover (95th percentile) | {} |",
            ms(quantile(f.clone(), 0.95))
        );
        println!(
            "| failover (longest) | {} |",
            ms(f.iter().copied().max().unwrap_or_default())
        );
        println!("| mentions | {} |", counts.len());
        println!("| answered twice | {duplicated} |");
        println!("| never answered | {lost} |");
        println!("| sessions opened for {THREADS} threads | {news} |");
        healthy = lost == 0 && duplicated == 0 && news == THREADS;
    }

    if args.cost_runs > 0 {
        let (mut host, mut fenced) = (Vec::new(), Vec::new());
        for run in 0..args.cost_runs {
            let order = if run % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for is_fenced in order {
                let (env, into) = if is_fenced {
                    (&across, &mut fenced)
                } else {
                    (&host_lease, &mut host)
                };
                let times = hot_follow_ups(
                    &mut world,
                    env,
                    args.follow_ups,
                    run * 2 + usize::from(is_fenced),
                )
                .await?;
                into.extend(times);
            }
        }
        let (h, f) = (median(host), median(fenced));
        println!();
        println!(
            "| hot follow-up → answer, {} runs × {} (ms) | host's lease | lease across machines | ratio |",
            args.cost_runs, args.follow_ups
        );
        println!("|---|---:|---:|---:|");
        println!(
            "| median | {} | {} | {:.2} |",
            ms(h),
            ms(f),
            f.as_secs_f64() / h.as_secs_f64().max(1e-9)
        );
    }
    drop(pg);
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        eprintln!("failover: a mention was lost or answered twice, or a thread got a new session");
        ExitCode::FAILURE
    })
}
