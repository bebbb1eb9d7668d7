//! The stores under measurement behind one small facade: the `ReceiptStore` backends (SQLite,
//! PostgreSQL), opened the way the harness opens them. (The old JSON file was measured here too
//! until its writer was removed; docs/STORE.md keeps those figures.)

use std::collections::HashSet;
use std::fmt;

use std::path::PathBuf;

use buzz_session_store::{
    Backend, CommitOutcome, DeliveryRecord, Expect, KeyScheme, PutOutcome, ReceiptStore, ScopeKey,
    SessionRecord, StoreConfig, StoreScope, StoredReceipt, TurnCommit, UnixMillis,
};

use buzz_bench::{BenchError, ctx};

pub const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
pub const RELAY: &str = "wss://relay.example";

/// Ids in a seeded ledger (a thread root plus the default context window of 12 replies, plus a
/// few triggers).
pub const LEDGER_IDS: usize = 16;

/// Which store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The embedded SQLite backend.
    Sqlite,
    /// The PostgreSQL backend.
    Postgres,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        })
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sqlite" => Ok(Self::Sqlite),
            "postgres" => Ok(Self::Postgres),
            other => Err(format!("unknown store {other:?} (sqlite, postgres)")),
        }
    }
}

/// Where one measurement's receipts live: a state directory, and for PostgreSQL a URL whose
/// search path is a schema of its own.
#[derive(Debug, Clone)]
pub struct Place {
    pub kind: Kind,
    pub dir: PathBuf,
    pub pg_url: Option<String>,
}

pub fn scope() -> StoreScope {
    StoreScope {
        relay: RELAY.into(),
        agent_pubkey: "ab".repeat(32),
    }
}

/// Thread `n` of the benchmark channel.
pub fn key(n: u64) -> ScopeKey {
    ScopeKey::thread(CHANNEL, format!("{n:064x}"))
}

pub fn session_id(n: u64) -> String {
    format!("session-{n:08}")
}

/// A 64-hex event id, deterministic in (n, j).
pub fn event_id(n: u64, j: u64) -> String {
    let a = splitmix(n.wrapping_mul(0x9e37_79b9).wrapping_add(j));
    let b = splitmix(a);
    let c = splitmix(b);
    let d = splitmix(c);
    format!("{a:016x}{b:016x}{c:016x}{d:016x}")
}

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The receipt thread `n` is seeded with: configuration plus a full ledger.
pub fn seeded_record(n: u64) -> SessionRecord {
    let mut r = SessionRecord::new(session_id(n));
    r.model = Some("claude-opus".into());
    r.requested_model = Some("claude-opus".into());
    r.permission_mode = Some("default".into());
    r.requested_permission_mode = Some("default".into());
    r.delivery = Some(DeliveryRecord {
        standing_context_sent: false,
        delivered_event_ids: (0..LEDGER_IDS as u64).map(|j| event_id(n, j)).collect(),
    });
    r
}

/// An open store.
pub enum Handle {
    Store(Box<dyn ReceiptStore>),
}

/// What one write did, as the benchmark counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wrote {
    /// The store reports it wrote (or already held) what was asked.
    Yes,
    /// The store refused or failed; the text says why.
    Refused(String),
}

impl Handle {
    pub fn open(place: &Place) -> Result<Self, BenchError> {
        match place.kind {
            Kind::Sqlite | Kind::Postgres => {
                let backend = match &place.pg_url {
                    Some(url) => Backend::Postgres { url: url.clone() },
                    None => Backend::Sqlite {
                        path: place.dir.join("sessions.sqlite3"),
                    },
                };
                let config = StoreConfig {
                    backend,
                    scope: scope(),
                    scheme: KeyScheme::Scope,
                    max_receipts: 10_000_000,
                    state_dir: place.dir.clone(),
                    fence: None,
                };
                Ok(Self::Store(ctx(
                    buzz_session_store::open(&config),
                    "opening the store",
                )?))
            }
        }
    }

    pub fn put(&self, key: &ScopeKey, record: &SessionRecord, now: u64) -> Wrote {
        match self {
            Self::Store(s) => match s.put(
                key,
                record,
                &Expect::NotWrittenSince(UnixMillis(now)),
                UnixMillis(now),
            ) {
                Ok(PutOutcome::Written { .. }) => Wrote::Yes,
                Ok(other) => Wrote::Refused(format!("{other:?}")),
                Err(e) => Wrote::Refused(e.to_string()),
            },
        }
    }

    pub fn commit(
        &self,
        key: &ScopeKey,
        session: &str,
        new_ids: &[String],
        window: &HashSet<String>,
        now: u64,
    ) -> Wrote {
        match self {
            Self::Store(s) => {
                // The ledger the lifecycle would keep: what is still in the window, plus the new
                // ids.
                let commit = TurnCommit {
                    session_id: session.to_owned(),
                    delivered_event_ids: window.iter().chain(new_ids).cloned().collect(),
                    standing_context_sent: false,
                    turns: None,
                    usage: None,
                    handoff_delivered: false,
                };
                match s.commit_turn(key, &commit, UnixMillis(now)) {
                    Ok(CommitOutcome::Written | CommitOutcome::Unchanged) => Wrote::Yes,
                    Ok(other) => Wrote::Refused(format!("{other:?}")),
                    Err(e) => Wrote::Refused(e.to_string()),
                }
            }
        }
    }

    /// The receipt for `key`, if the store can say.
    pub fn get(&self, key: &ScopeKey) -> Option<SessionRecord> {
        match self {
            Self::Store(s) => s.get(key).ok().flatten(),
        }
    }

    /// Every receipt (key, record).
    pub fn all(&self) -> Result<Vec<(ScopeKey, SessionRecord)>, BenchError> {
        match self {
            Self::Store(s) => Ok(ctx(s.receipts(), "listing receipts")?
                .into_iter()
                .map(|r| (r.key, r.record))
                .collect()),
        }
    }

    /// Bytes on disk (or in the server's tables).
    pub fn bytes(&self) -> Result<u64, BenchError> {
        match self {
            Self::Store(s) => ctx(s.storage_bytes(), "measuring the store"),
        }
    }

    /// Loads `records` as fast as the store allows (not measured).
    pub fn seed(
        &self,
        place: &Place,
        records: &[(ScopeKey, SessionRecord)],
    ) -> Result<(), BenchError> {
        match self {
            Self::Store(s) => {
                let _ = place;
                for chunk in records.chunks(10_000) {
                    let receipts: Vec<StoredReceipt> = chunk
                        .iter()
                        .map(|(key, record)| StoredReceipt {
                            key: key.clone(),
                            record: record.clone(),
                            last_used: UnixMillis(1),
                        })
                        .collect();
                    ctx(s.import(&receipts), "seeding")?;
                }
                Ok(())
            }
        }
    }
}
