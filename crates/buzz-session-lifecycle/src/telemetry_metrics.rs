//! The lifecycle's telemetry as Prometheus metrics (patch `operator-metrics`, behaviour `Metrics`).
//!
//! An operator running the patched harness under a supervisor wants a dashboard: are follow-ups
//! still served hot after an upgrade, how often do restores fail, is the receipt store up and
//! how slow is it. This module turns what the lifecycle already says into metrics through the
//! [`metrics`] facade; [`serve`] installs `metrics-exporter-prometheus` as the process's recorder
//! and serves its text exposition over HTTP on the operator's `--metrics-listen` address. Nothing
//! here writes exposition text: names, help and units are declared once ([`describe`]) and the
//! exporter renders them. Without an installed recorder (no `--metrics-listen`) every update is a
//! no-op of the facade.
//!
//! Names follow Prometheus' naming practice (<https://prometheus.io/docs/practices/naming/>):
//! the application prefix `buzz_acp_`, base units as suffixes (`_seconds`, `_bytes`), `_total`
//! on counters, and label values that are bounded enums (serde names of the lifecycle's types),
//! never scope labels or session ids. `docs/METRICS.md` lists every metric.
//!
//! # Where each metric comes from
//!
//! The [`Driver`](crate::Driver) is the one place every [`Record`] passes (its `emit`), where
//! every notice is handed to the harness, where turn tasks' reports are taken in and where the
//! store worker's events arrive; it feeds [`Metrics`] at each of those points. Counters of
//! records map one record to one increment ([`Metrics::record`]); the store worker reports each
//! finished operation with its duration ([`Metrics::store`]).
//!
//! # Hot, warm and cold count what happened on the wire
//!
//! A turn's [`Plan`] says how its session *should* be reached, decided at dispatch
//! ([`Record::TurnStarted`]). That is not always what happens: a hot plan whose worker no longer
//! holds the session goes stale ([`Record::PlanStale`]) and the input is planned again; a warm
//! plan whose session the agent no longer has ends in `session/new`; a session that refuses the
//! owner's model switch in place never gets the prompt. Counting plans would count all of these
//! as what they were meant to be. So `buzz_acp_turns_served_total` counts from the turn task's
//! own reports, which it posts exactly when it has the session it will prompt:
//!
//! * **hot**: the task found the live session its plan continues and reported the context
//!   window it is about to prompt with (`Report::Window` under a hot plan). A stale plan
//!   reports `Report::Stale` instead, never a window, so it is not counted;
//! * **warm**: `session/load` or `session/resume` succeeded (`Opened::Restored`);
//! * **cold**: `session/new` succeeded (`Opened::Created`), with the plan's cold reason, or
//!   `session_lost` when the plan was warm and the agent had lost the session.
//!
//! The reached session is held per scope and counted when the turn ends
//! ([`Metrics::turn_ended`]), so a session that did not get the prompt after all (a model
//! switch it refused although it offers the model, `Report::ModelRefused`: it is retired) is
//! dropped, and the prompt is counted once, under
//! the session that got it. These are the same three cases the fork's guards read from the wire
//! (`served_as` in the tests crate): a prompt after `session/new` is cold, after a restore warm,
//! after neither hot. A first turn of a thread is cold with reason `no_receipt`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ::metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};
use serde::Serialize;

use crate::decision::NoticeCause;
use crate::mailbox::{Opened, Report};
use crate::reach::{ColdReason, Plan, Reach};
use crate::scope::Scope;
use crate::store_io::{IoEvent, Operation};
use crate::telemetry::Record;

/// Turns by how their session was reached (`via`), cold ones by `cold_reason`.
pub const TURNS_SERVED: &str = "buzz_acp_turns_served_total";
/// Hot plans that went stale before their prompt.
pub const STALE_PLANS: &str = "buzz_acp_stale_plans_total";
/// Restore attempts by `outcome` and `method`.
pub const RESTORES: &str = "buzz_acp_restores_total";
/// Turns that went on without their receipt (the store did not answer in time).
pub const RECEIPT_READ_TIMEOUTS: &str = "buzz_acp_receipt_read_timeouts_total";
/// Receipt writes refused because the store held something else, by `op`.
pub const RECEIPT_CONFLICTS: &str = "buzz_acp_receipt_conflicts_total";
/// Scopes whose receipt an operator forgot while this harness knew them.
pub const RECEIPTS_FORGOTTEN: &str = "buzz_acp_receipts_forgotten_total";
/// Notices posted in threads, by `cause`.
pub const NOTICES: &str = "buzz_acp_notices_total";
/// Live sessions kept resident now.
pub const RESIDENT_SESSIONS: &str = "buzz_acp_resident_sessions";
/// Residents disposed, by `reason` (`evicted` is the LRU bound).
pub const RESIDENT_DISPOSALS: &str = "buzz_acp_resident_disposals_total";
/// Follow-ups that waited for their resident's busy worker.
pub const CAPACITY_WAITS: &str = "buzz_acp_capacity_waits_total";
/// Store operations by `op` and `outcome`.
pub const STORE_OPERATIONS: &str = "buzz_acp_store_operations_total";
/// How long store operations took, by `op`.
pub const STORE_DURATION: &str = "buzz_acp_store_operation_duration_seconds";
/// Whether the receipt store answers (1) or not (0).
pub const STORE_UP: &str = "buzz_acp_store_up";
/// 1 while the receipt store refuses this harness for a reason that lasts (`reason`:
/// `certificate_rejected`, `authentication_failed`, `role_not_admitted`, `database_missing`,
/// `file_permission_denied`): a misconfiguration to fix, not an outage to wait out.
pub const STORE_REFUSED: &str = "buzz_acp_store_refused";
/// Sessions the harness retired, by `reason`.
pub const SESSIONS_RETIRED: &str = "buzz_acp_sessions_retired_total";
/// Handoffs from retiring sessions, by `outcome` (`taken`, `unavailable`).
pub const HANDOFFS: &str = "buzz_acp_handoffs_total";
/// Size of the handoffs taken.
pub const HANDOFF_SIZE: &str = "buzz_acp_handoff_size_bytes";
/// Sessions that refused a prompt as too long.
pub const SESSIONS_EXHAUSTED: &str = "buzz_acp_sessions_exhausted_total";
/// Model switches in place, by `outcome` (`switched`, `refused`).
pub const MODEL_SWITCHES: &str = "buzz_acp_model_switches_total";

/// Bucket bounds of the store latency histogram, in seconds: from a local SQLite write to a
/// PostgreSQL call that hits its timeout.
const STORE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Bucket bounds of the handoff size histogram, in bytes.
const HANDOFF_BUCKETS: &[f64] = &[256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0];

/// The metrics endpoint could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address cannot be listened on, or a recorder is installed already.
    #[error("--metrics-listen {addr}: cannot serve metrics there: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// What the exporter said (e.g. the address is in use).
        #[source]
        source: BuildError,
    },
}

/// A builder with this module's histogram buckets (else the exporter renders summaries).
fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(STORE_DURATION.to_string()), STORE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(HANDOFF_SIZE.to_string()), HANDOFF_BUCKETS)
}

/// Serves the process's metrics at `addr` (Prometheus text exposition over HTTP, any path) and
/// installs the recorder every update of this module goes to. The address is bound now, so a
/// busy or foreign address is an error when the harness starts, not a silent gap in the
/// dashboard. Call once per process, inside the tokio runtime (the listener runs on it).
///
/// # Errors
/// [`ServeError::Listen`] when the address cannot be bound, or a recorder was installed already.
pub fn serve(addr: SocketAddr) -> Result<(), ServeError> {
    let listen = |source| ServeError::Listen { addr, source };
    builder()
        .map_err(listen)?
        .with_http_listener(addr)
        .install()
        .map_err(listen)?;
    describe();
    tracing::info!(%addr, "serving Prometheus metrics");
    Ok(())
}

/// A recorder with this module's buckets, not installed: for tests that render what they
/// recorded (`metrics::with_local_recorder`).
pub fn local_recorder() -> metrics_exporter_prometheus::PrometheusRecorder {
    builder()
        .unwrap_or_else(|_| PrometheusBuilder::new())
        .build_recorder()
}

/// Declares every metric's help text and unit to the current recorder, and starts the series
/// an operator alerts on at zero (a counter that appears only on its first increment hides the
/// first increase from `rate()`).
pub fn describe() {
    describe_counter!(
        TURNS_SERVED,
        Unit::Count,
        "Turns by how their session was reached on the wire: hot (the live session), warm (session/load or session/resume), cold (session/new, with cold_reason)"
    );
    describe_counter!(
        STALE_PLANS,
        Unit::Count,
        "Hot plans whose worker no longer held the session; the input was planned again"
    );
    describe_counter!(
        RESTORES,
        Unit::Count,
        "Attempts to reopen a stored session, by outcome (restored, lost, retry, abandoned) and method"
    );
    describe_counter!(
        RECEIPT_READ_TIMEOUTS,
        Unit::Count,
        "Turns that went on without their receipt because the store did not answer in time"
    );
    describe_counter!(
        RECEIPT_CONFLICTS,
        Unit::Count,
        "Receipt writes refused because the store held something else (another harness or an operator wrote)"
    );
    describe_counter!(
        RECEIPTS_FORGOTTEN,
        Unit::Count,
        "Scopes whose receipt an operator forgot while this harness held their session"
    );
    describe_counter!(NOTICES, Unit::Count, "Notices posted in threads, by cause");
    describe_gauge!(
        RESIDENT_SESSIONS,
        Unit::Count,
        "Live sessions kept resident for hot follow-ups"
    );
    describe_counter!(
        RESIDENT_DISPOSALS,
        Unit::Count,
        "Resident sessions disposed, by reason (evicted: the --max-resident-sessions bound)"
    );
    describe_counter!(
        CAPACITY_WAITS,
        Unit::Count,
        "Follow-ups that waited for their resident's busy worker instead of going cold elsewhere"
    );
    describe_counter!(
        STORE_OPERATIONS,
        Unit::Count,
        "Receipt store operations, by op and outcome (ok, conflict, forgotten, error)"
    );
    describe_histogram!(
        STORE_DURATION,
        Unit::Seconds,
        "How long receipt store operations took, by op"
    );
    describe_gauge!(
        STORE_UP,
        "Whether the receipt store answers (1) or not (0); absent until it first answers or fails"
    );
    describe_counter!(
        SESSIONS_RETIRED,
        Unit::Count,
        "Sessions the harness retired with a handoff, by reason"
    );
    describe_counter!(
        HANDOFFS,
        Unit::Count,
        "Handoffs asked of retiring sessions, by outcome (taken, unavailable)"
    );
    describe_histogram!(HANDOFF_SIZE, Unit::Bytes, "Size of the handoffs taken");
    describe_counter!(
        SESSIONS_EXHAUSTED,
        Unit::Count,
        "Sessions that refused a prompt as too long"
    );
    describe_counter!(
        MODEL_SWITCHES,
        Unit::Count,
        "Model switches applied in place, by outcome (switched, refused)"
    );
    for via in ["hot", "warm"] {
        counter!(TURNS_SERVED, "via" => via).absolute(0);
    }
    counter!(TURNS_SERVED, "via" => "cold", "cold_reason" => "no_receipt").absolute(0);
}

/// A label value: the serde name of one of the lifecycle's enums.
fn code(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(code)) => code,
        _ => "unknown".to_string(),
    }
}

/// How a turn reached the session it prompts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reached {
    Hot,
    Warm,
    Cold(String),
}

/// What the driver tells the metrics, and the one piece of state they need: the session each
/// running turn reached, until the turn ends.
#[derive(Debug)]
pub struct Metrics<K> {
    reached: BTreeMap<K, Reached>,
    /// The lasting refusal the gauge shows now, if any.
    refused: Option<buzz_session_store::PermanentReason>,
}

impl<K> Default for Metrics<K> {
    fn default() -> Self {
        Metrics {
            reached: BTreeMap::new(),
            refused: None,
        }
    }
}

impl<K: Scope> Metrics<K> {
    /// A telemetry record.
    pub fn record(&mut self, record: &Record) {
        match record {
            Record::PlanStale { .. } => counter!(STALE_PLANS).increment(1),
            Record::SessionRestored { method, .. } => {
                counter!(RESTORES, "outcome" => "restored", "method" => method.method())
                    .increment(1)
            }
            Record::SessionLost { method, .. } => {
                counter!(RESTORES, "outcome" => "lost", "method" => method.method()).increment(1)
            }
            Record::RestoreRetry { method, .. } => {
                counter!(RESTORES, "outcome" => "retry", "method" => method.method()).increment(1)
            }
            Record::RestoreAbandoned { method, .. } => {
                counter!(RESTORES, "outcome" => "abandoned", "method" => method.method())
                    .increment(1)
            }
            Record::ReceiptUnreadable { .. } => counter!(RECEIPT_READ_TIMEOUTS).increment(1),
            Record::ReceiptConflict { op, .. } => {
                counter!(RECEIPT_CONFLICTS, "op" => code(op)).increment(1)
            }
            Record::ReceiptForgotten { .. } => counter!(RECEIPTS_FORGOTTEN).increment(1),
            Record::SessionRetired { reason, .. } => {
                counter!(SESSIONS_RETIRED, "reason" => reason.code()).increment(1)
            }
            Record::HandoffTaken { bytes, .. } => {
                counter!(HANDOFFS, "outcome" => "taken").increment(1);
                histogram!(HANDOFF_SIZE).record(*bytes as f64);
            }
            Record::HandoffUnavailable { .. } => {
                counter!(HANDOFFS, "outcome" => "unavailable").increment(1)
            }
            Record::SessionExhausted { .. } => counter!(SESSIONS_EXHAUSTED).increment(1),
            Record::ModelSwitched { .. } => {
                counter!(MODEL_SWITCHES, "outcome" => "switched").increment(1)
            }
            Record::ModelNotSwitched { .. } => {
                counter!(MODEL_SWITCHES, "outcome" => "refused").increment(1)
            }
            Record::CapacityWait { .. } => counter!(CAPACITY_WAITS).increment(1),
            Record::ResidentDisposed { reason, .. } => {
                counter!(RESIDENT_DISPOSALS, "reason" => code(reason)).increment(1)
            }
            // Plans are not what happened (see the module docs); kept residents are the gauge.
            Record::TurnStarted { .. } => {}
            Record::ResidentKept { .. } => {}
        }
    }

    /// A report of `scope`'s running turn, with the turn's plan (`None`: no turn runs), taken
    /// in before the lifecycle handles it.
    pub fn report(&mut self, scope: &K, report: &Report, plan: Option<&Plan>) {
        let reached = match report {
            Report::Window(_) => match plan.map(|p| &p.reach) {
                Some(Reach::Hot { .. }) => Reached::Hot,
                _ => return,
            },
            Report::Opened(Opened::Restored { .. }) => Reached::Warm,
            Report::Opened(Opened::Created { .. }) => {
                let reason = match plan.map(|p| &p.reach) {
                    Some(Reach::Cold { reason }) => *reason,
                    // Reopening failed because the agent lost the session; the same turn opened
                    // a new one.
                    _ => ColdReason::SessionLost,
                };
                Reached::Cold(code(&reason))
            }
            // A model the session does not offer leaves it in place and the turn goes on there.
            Report::ModelRefused {
                offered: Some(false),
                ..
            } => return,
            Report::ModelRefused { .. } => {
                self.reached.remove(scope);
                return;
            }
            _ => return,
        };
        self.reached.insert(scope.clone(), reached);
    }

    /// `scope`'s turn ended: the session it reached got its prompt.
    pub fn turn_ended(&mut self, scope: &K) {
        match self.reached.remove(scope) {
            Some(Reached::Hot) => counter!(TURNS_SERVED, "via" => "hot").increment(1),
            Some(Reached::Warm) => counter!(TURNS_SERVED, "via" => "warm").increment(1),
            Some(Reached::Cold(reason)) => {
                counter!(TURNS_SERVED, "via" => "cold", "cold_reason" => reason).increment(1)
            }
            None => {}
        }
    }

    /// A notice handed to the harness to post.
    pub fn notice(&mut self, cause: NoticeCause) {
        counter!(NOTICES, "cause" => code(&cause)).increment(1);
    }

    /// An event of the store worker.
    pub fn store(&mut self, event: &IoEvent<K>) {
        match event {
            IoEvent::Finished(Operation {
                op,
                outcome,
                elapsed,
            }) => {
                let op = code(op);
                counter!(STORE_OPERATIONS, "op" => op.clone(), "outcome" => code(outcome))
                    .increment(1);
                histogram!(STORE_DURATION, "op" => op).record(elapsed.as_secs_f64());
            }
            IoEvent::Up { .. } => {
                gauge!(STORE_UP).set(1.0);
                self.store_refused(None);
            }
            IoEvent::Down { refusal, .. } => {
                gauge!(STORE_UP).set(0.0);
                self.store_refused(*refusal);
            }
            IoEvent::Read(..) | IoEvent::Conflict { .. } | IoEvent::Forgotten(_) => {}
        }
    }

    /// Sets the refusal gauge: 1 for `refusal`, 0 for the one reported before (if another).
    fn store_refused(&mut self, refusal: Option<buzz_session_store::PermanentReason>) {
        if let Some(before) = self.refused.filter(|before| Some(*before) != refusal) {
            gauge!(STORE_REFUSED, "reason" => before.code()).set(0.0);
        }
        if let Some(reason) = refusal {
            gauge!(STORE_REFUSED, "reason" => reason.code()).set(1.0);
        }
        self.refused = refusal;
    }

    /// The number of resident sessions now.
    pub fn residents(&mut self, residents: usize) {
        gauge!(RESIDENT_SESSIONS).set(residents as f64);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ::metrics::with_local_recorder;
    use buzz_session_store::SessionRecord;
    use metrics_exporter_prometheus::PrometheusRecorder;
    use prometheus_parse::{Scrape, Value};

    use super::*;
    use crate::gate::RestoreMethod;
    use crate::store_io::{OpKind, OpOutcome};
    use crate::testing::TestScope;

    /// The exposition `recorder` renders, read back with a Prometheus text parser.
    fn scrape(recorder: &PrometheusRecorder) -> Scrape {
        let text = recorder.handle().render();
        Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses")
    }

    /// The value of the sample `name` with exactly `labels` (0 when absent: a counter that never
    /// moved); for histograms, the observation count.
    fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
        let sample = scrape.samples.iter().find(|s| {
            s.metric == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        });
        match sample.map(|s| &s.value) {
            Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
            Some(Value::Histogram(buckets)) => buckets
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            Some(Value::Summary(_)) => panic!("{name} is a summary, not a histogram"),
            None => 0.0,
        }
    }

    fn plan(reach: Reach) -> Plan {
        Plan {
            reach,
            ..Plan::default()
        }
    }

    fn hot() -> Plan {
        plan(Reach::Hot {
            session_id: "s-1".into(),
        })
    }

    fn warm() -> Plan {
        plan(Reach::Warm {
            record: SessionRecord::new("s-1".to_string()),
            method: RestoreMethod::Load,
        })
    }

    fn cold(reason: ColdReason) -> Plan {
        plan(Reach::Cold { reason })
    }

    fn created() -> Report {
        Report::Opened(Opened::Created {
            session_id: "s-2".into(),
            model: None,
            permission_mode: None,
        })
    }

    fn window() -> Report {
        Report::Window(vec!["e-1".into()])
    }

    /// Each turn is counted once, under the session its task reported reaching, when it ends: a
    /// stale hot plan (no window, only `Stale`) is not a hot turn, a warm plan whose session was
    /// lost is a cold one.
    #[test]
    fn turns_are_counted_by_the_session_the_task_reached() {
        let recorder = local_recorder();
        let a = TestScope::thread("c", "a");
        let b = TestScope::thread("c", "b");
        with_local_recorder(&recorder, || {
            let mut m = Metrics::default();
            describe();
            // a: cold first turn, then a hot follow-up.
            let p = cold(ColdReason::NoReceipt);
            m.report(&a, &window(), Some(&p));
            m.report(&a, &created(), Some(&p));
            m.turn_ended(&a);
            m.report(&a, &window(), Some(&hot()));
            m.turn_ended(&a);
            // a again: the hot plan went stale; planned again, it restored warm.
            m.report(&a, &Report::Stale, Some(&hot()));
            m.record(&Record::PlanStale {
                scope: a.label(),
                session_id: "s-1".into(),
            });
            m.turn_ended(&a);
            let restored = Report::Opened(Opened::Restored {
                session_id: "s-1".into(),
                method: RestoreMethod::Load,
            });
            m.report(&a, &restored, Some(&warm()));
            m.report(&a, &window(), Some(&warm()));
            m.turn_ended(&a);
            // b: the agent had lost its stored session; the same turn opened a new one.
            let lost = Report::Opened(Opened::Lost {
                session_id: "s-9".into(),
                method: RestoreMethod::Load,
                detail: "gone".into(),
            });
            m.report(&b, &lost, Some(&warm()));
            m.report(&b, &window(), Some(&warm()));
            m.report(&b, &created(), Some(&warm()));
            m.turn_ended(&b);
            // A turn that ends before it reached any session counts nothing.
            m.turn_ended(&b);
        });
        let s = scrape(&recorder);
        assert_eq!(value(&s, TURNS_SERVED, &[("via", "hot")]), 1.0);
        assert_eq!(value(&s, TURNS_SERVED, &[("via", "warm")]), 1.0);
        let cold = |reason| {
            value(
                &s,
                TURNS_SERVED,
                &[("via", "cold"), ("cold_reason", reason)],
            )
        };
        assert_eq!(cold("no_receipt"), 1.0);
        assert_eq!(cold("session_lost"), 1.0);
        assert_eq!(value(&s, STALE_PLANS, &[]), 1.0);
    }

    /// A session that refused the owner's model switch never got the prompt: the turn is not
    /// counted under it.
    #[test]
    fn a_refused_model_switch_is_not_a_served_turn() {
        let recorder = local_recorder();
        let a = TestScope::thread("c", "a");
        with_local_recorder(&recorder, || {
            let mut m = Metrics::default();
            m.report(&a, &window(), Some(&hot()));
            let refused = Report::ModelRefused {
                model: "m".into(),
                detail: "no".into(),
                offered: Some(true),
            };
            m.report(&a, &refused, Some(&hot()));
            m.turn_ended(&a);
        });
        let s = scrape(&recorder);
        assert_eq!(value(&s, TURNS_SERVED, &[("via", "hot")]), 0.0);
    }

    /// A model the session does not offer leaves the session in place: the turn goes on there
    /// and is counted under it.
    #[test]
    fn a_model_the_session_does_not_offer_still_serves_the_turn_hot() {
        let recorder = local_recorder();
        let a = TestScope::thread("c", "a");
        with_local_recorder(&recorder, || {
            let mut m = Metrics::default();
            m.report(&a, &window(), Some(&hot()));
            let not_offered = Report::ModelRefused {
                model: "m".into(),
                detail: "not offered".into(),
                offered: Some(false),
            };
            m.report(&a, &not_offered, Some(&hot()));
            m.turn_ended(&a);
        });
        let s = scrape(&recorder);
        assert_eq!(value(&s, TURNS_SERVED, &[("via", "hot")]), 1.0);
    }

    /// Restore outcomes by method, notices by cause and the receipt records, one increment per
    /// record.
    #[test]
    fn records_count_restores_notices_and_receipts() {
        let recorder = local_recorder();
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            let scope = || "thread:a".to_string();
            m.record(&Record::SessionRestored {
                scope: scope(),
                session_id: "s".into(),
                method: RestoreMethod::Resume,
            });
            m.record(&Record::SessionLost {
                scope: scope(),
                session_id: "s".into(),
                method: RestoreMethod::Load,
            });
            for attempts in 1..=2 {
                m.record(&Record::RestoreRetry {
                    scope: scope(),
                    method: RestoreMethod::Load,
                    attempts,
                    retry_in_ms: 15_000,
                });
            }
            m.record(&Record::RestoreAbandoned {
                scope: scope(),
                method: RestoreMethod::Load,
                attempts: 3,
                waited_ms: 180_000,
            });
            m.record(&Record::ReceiptUnreadable {
                scope: scope(),
                waited_ms: 10_000,
            });
            m.record(&Record::ReceiptConflict {
                scope: scope(),
                op: crate::store_io::OpKind::Put,
                stored_session_id: None,
            });
            m.record(&Record::ReceiptForgotten { scope: scope() });
            m.notice(NoticeCause::RestoreRetrying);
            m.notice(NoticeCause::SessionLost);
            m.notice(NoticeCause::SessionLost);
        });
        let s = scrape(&recorder);
        let restores =
            |outcome, method| value(&s, RESTORES, &[("outcome", outcome), ("method", method)]);
        assert_eq!(restores("restored", "session/resume"), 1.0);
        assert_eq!(restores("lost", "session/load"), 1.0);
        assert_eq!(restores("retry", "session/load"), 2.0);
        assert_eq!(restores("abandoned", "session/load"), 1.0);
        assert_eq!(value(&s, RECEIPT_READ_TIMEOUTS, &[]), 1.0);
        assert_eq!(value(&s, RECEIPT_CONFLICTS, &[("op", "put")]), 1.0);
        assert_eq!(value(&s, RECEIPTS_FORGOTTEN, &[]), 1.0);
        assert_eq!(value(&s, NOTICES, &[("cause", "restore_retrying")]), 1.0);
        assert_eq!(value(&s, NOTICES, &[("cause", "session_lost")]), 2.0);
    }

    /// Residents: the gauge is what the driver sets, disposals count by reason, capacity waits
    /// one per wait.
    #[test]
    fn residency_records_count_disposals_and_waits() {
        use crate::residents::DisposeReason;

        let recorder = local_recorder();
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            let disposed = |reason| Record::ResidentDisposed {
                scope: "thread:a".into(),
                slot: 0,
                session_id: "s".into(),
                reason,
            };
            m.record(&disposed(DisposeReason::Evicted));
            m.record(&disposed(DisposeReason::IdleSleep));
            m.record(&disposed(DisposeReason::IdleSleep));
            m.record(&Record::CapacityWait {
                scope: "thread:a".into(),
                slot: 1,
            });
            m.residents(3);
            m.residents(2);
        });
        let s = scrape(&recorder);
        assert_eq!(value(&s, RESIDENT_DISPOSALS, &[("reason", "evicted")]), 1.0);
        assert_eq!(
            value(&s, RESIDENT_DISPOSALS, &[("reason", "idle_sleep")]),
            2.0
        );
        assert_eq!(value(&s, CAPACITY_WAITS, &[]), 1.0);
        assert_eq!(value(&s, RESIDENT_SESSIONS, &[]), 2.0);
    }

    /// Handoffs and retirements, with continuity.
    #[test]
    fn continuity_records_count_retirements_and_handoffs() {
        use crate::retirement::RetireReason;

        let recorder = local_recorder();
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            m.record(&Record::SessionRetired {
                scope: "thread:a".into(),
                session_id: "s".into(),
                reason: RetireReason::TurnLimit,
            });
            m.record(&Record::HandoffTaken {
                scope: "thread:a".into(),
                from_session_id: "s".into(),
                bytes: 2000,
            });
            m.record(&Record::HandoffUnavailable {
                scope: "thread:a".into(),
                from_session_id: "s".into(),
            });
            m.record(&Record::SessionExhausted {
                scope: "thread:a".into(),
                session_id: "s".into(),
            });
        });
        let s = scrape(&recorder);
        assert_eq!(
            value(&s, SESSIONS_RETIRED, &[("reason", "turn_limit")]),
            1.0
        );
        assert_eq!(value(&s, HANDOFFS, &[("outcome", "taken")]), 1.0);
        assert_eq!(value(&s, HANDOFFS, &[("outcome", "unavailable")]), 1.0);
        assert_eq!(value(&s, HANDOFF_SIZE, &[]), 1.0);
        assert_eq!(value(&s, SESSIONS_EXHAUSTED, &[]), 1.0);
    }

    /// A lasting refusal raises its reason's gauge; another reason, or the store answering again,
    /// lowers it.
    #[test]
    fn a_lasting_refusal_shows_until_the_store_answers() {
        use buzz_session_store::PermanentReason;
        let refused = |m: &mut Metrics<TestScope>, refusal| {
            m.store(&IoEvent::Down {
                error: "refused".into(),
                refusal,
            })
        };
        let gauge = |s: &Scrape, reason| value(s, STORE_REFUSED, &[("reason", reason)]);
        let recorder = local_recorder();
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            refused(&mut m, None);
            refused(&mut m, Some(PermanentReason::AuthenticationFailed));
        });
        let s = scrape(&recorder);
        assert_eq!(gauge(&s, "authentication_failed"), 1.0);
        assert_eq!(value(&s, STORE_UP, &[]), 0.0);
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            refused(&mut m, Some(PermanentReason::AuthenticationFailed));
            refused(&mut m, Some(PermanentReason::DatabaseMissing));
        });
        let s = scrape(&recorder);
        assert_eq!(gauge(&s, "authentication_failed"), 0.0);
        assert_eq!(gauge(&s, "database_missing"), 1.0);
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            refused(&mut m, Some(PermanentReason::DatabaseMissing));
            m.store(&IoEvent::Up {
                location: "db".into(),
            });
        });
        let s = scrape(&recorder);
        assert_eq!(gauge(&s, "database_missing"), 0.0);
        assert_eq!(value(&s, STORE_UP, &[]), 1.0);
    }

    /// Store operations count by op and outcome, each with its duration in the histogram (not a
    /// summary), and the health gauge follows the last transition.
    #[test]
    fn store_events_count_operations_latency_and_health() {
        let recorder = local_recorder();
        with_local_recorder(&recorder, || {
            let mut m: Metrics<TestScope> = Metrics::default();
            let finished = |op, outcome, ms| {
                IoEvent::Finished(Operation {
                    op,
                    outcome,
                    elapsed: Duration::from_millis(ms),
                })
            };
            m.store(&finished(OpKind::Open, OpOutcome::Error, 3));
            m.store(&IoEvent::Down {
                error: "refused".into(),
                refusal: None,
            });
            m.store(&finished(OpKind::Open, OpOutcome::Ok, 2));
            m.store(&IoEvent::Up {
                location: "db".into(),
            });
            m.store(&finished(OpKind::Read, OpOutcome::Ok, 1));
            m.store(&finished(OpKind::Put, OpOutcome::Ok, 4));
            m.store(&finished(OpKind::Put, OpOutcome::Conflict, 700));
            m.store(&finished(OpKind::Commit, OpOutcome::Forgotten, 5));
        });
        let s = scrape(&recorder);
        let ops = |op, outcome| value(&s, STORE_OPERATIONS, &[("op", op), ("outcome", outcome)]);
        assert_eq!(ops("open", "error"), 1.0);
        assert_eq!(ops("open", "ok"), 1.0);
        assert_eq!(ops("read", "ok"), 1.0);
        assert_eq!(ops("put", "ok"), 1.0);
        assert_eq!(ops("put", "conflict"), 1.0);
        assert_eq!(ops("commit", "forgotten"), 1.0);
        assert_eq!(value(&s, STORE_DURATION, &[("op", "put")]), 2.0);
        let put = s
            .samples
            .iter()
            .find(|x| x.metric == STORE_DURATION && x.labels.get("op") == Some("put"))
            .expect("the put histogram");
        let Value::Histogram(buckets) = &put.value else {
            panic!("store latency is rendered as {:?}", put.value);
        };
        let within = |bound: f64| {
            buckets
                .iter()
                .find(|b| b.less_than == bound)
                .map_or(-1.0, |b| b.count)
        };
        assert_eq!(within(0.005), 1.0, "the 4 ms put");
        assert_eq!(within(1.0), 2.0, "and the 700 ms one");
        assert_eq!(value(&s, STORE_UP, &[]), 1.0);
    }

    /// The endpoint serves what was recorded over HTTP, with help text; an address that is
    /// already taken is an error at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_endpoint_serves_over_http_and_a_taken_address_is_an_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let error = serve(addr).expect_err("the address is taken");
        assert!(
            error
                .to_string()
                .starts_with(&format!("--metrics-listen {addr}:")),
            "{error}"
        );
        drop(taken);
        serve(addr).expect("the address is free now");
        let mut m: Metrics<TestScope> = Metrics::default();
        m.notice(NoticeCause::SessionLost);
        let url = format!("http://{addr}/metrics");
        let text = tokio::task::spawn_blocking(move || {
            ureq::get(&url)
                .call()
                .expect("GET /metrics")
                .body_mut()
                .read_to_string()
                .expect("body")
        })
        .await
        .expect("scrape");
        let s = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
        assert_eq!(value(&s, NOTICES, &[("cause", "session_lost")]), 1.0);
        assert_eq!(value(&s, TURNS_SERVED, &[("via", "hot")]), 0.0);
        assert!(
            s.samples
                .iter()
                .any(|x| x.metric == TURNS_SERVED && x.labels.get("via") == Some("hot")),
            "the hot series starts at zero"
        );
        assert!(s.docs.contains_key(TURNS_SERVED), "help text: {:?}", s.docs);
    }
}
