//! `buzz-receipts`: the operator's command for the harness's session receipts.
//!
//! It takes the harness's own store flags and variables (`--state-dir` / `BUZZ_ACP_STATE_DIR`,
//! `--session-store-url` / `BUZZ_ACP_SESSION_STORE_URL`) plus, optionally, the store scope
//! (`--relay`, `--agent-pubkey` / `BUZZ_ACP_AGENT_PUBKEY`); without a scope it works on every
//! store scope in the database.
//!
//! ```text
//! buzz-receipts list [--channel ID] [--older-than DUR] [--json]
//! buzz-receipts show SCOPE                       SCOPE: <channel> or <channel>/<thread root>
//! buzz-receipts forget SCOPE | --channel ID | --older-than DUR [--dry-run]
//! buzz-receipts export > receipts.jsonl          one JSON object per receipt
//! buzz-receipts import < receipts.jsonl          keys that have a receipt keep it
//! buzz-receipts watermark show [--json]          per store scope: RFC 3339 UTC and unix seconds
//! buzz-receipts watermark set TIME               RFC 3339, unix seconds, or a duration ago (2h)
//! buzz-receipts watermark clear
//! ```
//!
//! `list`, `show`, `export`, `forget --dry-run` and `watermark show` open the store read-only: no
//! schema migration, no JSON import, nothing registered. `watermark set` and `clear` replace the
//! watermark of the (relay, agent key) whatever it was: a harness only ever moves it forward. `forget` leaves tombstones, so a running harness's queued
//! writes never bring a forgotten receipt back, and that harness answers the thread's next
//! message from a new session (docs/STORE.md, "What `forget` means for a running harness").

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use buzz_session_store::{
    Backend, Expect, ForgetOutcome, ImportOutcome, KeyScheme, OpenMode, ReceiptStore, ScopeKey,
    SessionRecord, StoreArgs, StoreError, StoreScope, StoredReceipt, UnixMillis, WatermarkOutcome,
    open_backend, store_scopes,
};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

/// Inspect, forget, export and import the buzz-acp harness's session receipts.
#[derive(Debug, Parser)]
#[command(name = "buzz-receipts", version)]
struct Cli {
    /// The harness's state directory (where the default SQLite store lives).
    /// Default: $XDG_STATE_HOME/buzz-acp (or ~/.local/state/buzz-acp), as the harness.
    #[arg(long, env = "BUZZ_ACP_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,

    /// The relay identity whose receipts to use (with --agent-pubkey). Without both: every store
    /// scope in the database.
    #[arg(long, global = true, requires = "agent_pubkey")]
    relay: Option<String>,

    /// The agent key whose receipts to use (with --relay).
    #[arg(long, env = "BUZZ_ACP_AGENT_PUBKEY", global = true, requires = "relay")]
    agent_pubkey: Option<String>,

    #[command(flatten)]
    store: StoreArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists receipts: scope, session, model, turns, last used, ledger size.
    List {
        /// Only this channel's conversation and threads.
        #[arg(long)]
        channel: Option<String>,
        /// Only receipts not used for this long (e.g. 30d, 12h).
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows one receipt in full (JSON).
    Show {
        /// `<channel>` or `<channel>/<thread root>`.
        scope: String,
    },
    /// Forgets receipts; a running harness's queued writes never bring them back.
    Forget {
        /// `<channel>` or `<channel>/<thread root>`.
        #[arg(conflicts_with_all = ["channel", "older_than"], required_unless_present_any = ["channel", "older_than"])]
        scope: Option<String>,
        /// Every receipt of this channel.
        #[arg(long)]
        channel: Option<String>,
        /// Every receipt not used for this long (e.g. 30d).
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// Say what would be forgotten, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Writes every receipt as JSON lines to standard output.
    Export,
    /// Reads JSON lines (as `export` writes them) from standard input; keys that already have a
    /// receipt keep it.
    Import,
    /// The watermark of a store scope: every mention created before it was settled by a harness
    /// of the (relay, agent key), which resumes its relay subscription from there.
    Watermark {
        #[command(subcommand)]
        action: WatermarkAction,
    },
}

#[derive(Debug, Subcommand)]
enum WatermarkAction {
    /// Shows the watermark (RFC 3339 UTC and unix seconds), or that none is recorded.
    Show {
        /// One JSON object per store scope instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Sets the watermark to TIME, also to an earlier time than it is.
    Set {
        /// RFC 3339 (`2026-03-01T12:00:00Z`, any offset), unix seconds (`1772366400`), or a
        /// duration meaning that long ago (`2h`, `1d 12h`). Not in the future.
        time: String,
    },
    /// Clears the watermark: the harness resumes as it would with none recorded.
    Clear,
}

/// One exported receipt.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    relay: String,
    agent_pubkey: String,
    scope: String,
    last_used_ms: u64,
    record: SessionRecord,
}

/// What can go wrong, each said in one line.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Usage(String),
    #[error("reading standard input: {0}")]
    Input(io::Error),
    #[error("writing standard output: {0}")]
    Output(io::Error),
    #[error("line {line}: {reason}")]
    BadLine { line: usize, reason: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("buzz-receipts: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    let state_dir = match cli.state_dir.clone().or_else(default_state_dir) {
        Some(dir) => dir,
        None => {
            return Err(Failure::Usage(
                "no --state-dir, and no XDG_STATE_HOME or HOME to derive it from".into(),
            ));
        }
    };
    let backend = cli.store.backend(&state_dir)?;
    let chosen = match (&cli.relay, &cli.agent_pubkey) {
        (Some(relay), Some(agent_pubkey)) => Some(StoreScope {
            relay: relay.clone(),
            agent_pubkey: agent_pubkey.clone(),
        }),
        _ => None,
    };
    let cap = cli.store.max_session_receipts;
    let mut out = io::stdout().lock();
    match cli.command {
        Command::List {
            channel,
            older_than,
            json,
        } => {
            let filter = Filter::new(channel.as_deref(), older_than)?;
            let rows = collect(&backend, chosen.as_ref(), OpenMode::ReadOnly, cap)?;
            if !json {
                writeln!(
                    out,
                    "{:<24} {:<101} {:<38} {:<20} {:>5} {:>12} {:>6}",
                    "store scope", "scope", "session", "model", "turns", "last used", "ledger"
                )
                .map_err(Failure::Output)?;
            }
            let now = UnixMillis::now();
            for (scope, receipt) in rows.iter().filter(|(_, r)| filter.keeps(r, now)) {
                if json {
                    print_line(&mut out, scope, receipt)?;
                } else {
                    let r = &receipt.record;
                    writeln!(
                        out,
                        "{:<24} {:<101} {:<38} {:<20} {:>5} {:>12} {:>6}",
                        short_scope(scope),
                        receipt.key.to_storage_key(),
                        r.session_id,
                        r.model.as_deref().unwrap_or("(default)"),
                        r.turns.map_or("?".into(), |t| t.to_string()),
                        ago(receipt.last_used, now),
                        r.delivery
                            .as_ref()
                            .map_or(0, |d| d.delivered_event_ids.len()),
                    )
                    .map_err(Failure::Output)?;
                }
            }
            Ok(())
        }
        Command::Show { scope } => {
            let key = parse_scope(&scope)?;
            let rows = collect(&backend, chosen.as_ref(), OpenMode::ReadOnly, cap)?;
            let found: Vec<_> = rows.iter().filter(|(_, r)| r.key == key).collect();
            if found.is_empty() {
                return Err(Failure::Usage(format!("no receipt for {scope}")));
            }
            for (store_scope, receipt) in found {
                let value = serde_json::json!({
                    "relay": store_scope.relay,
                    "agentPubkey": store_scope.agent_pubkey,
                    "scope": receipt.key.to_storage_key(),
                    "lastUsedMs": receipt.last_used.0,
                    "record": receipt.record,
                });
                let text = serde_json::to_string_pretty(&value)
                    .map_err(|e| Failure::Usage(e.to_string()))?;
                writeln!(out, "{text}").map_err(Failure::Output)?;
            }
            Ok(())
        }
        Command::Forget {
            scope,
            channel,
            older_than,
            dry_run,
        } => {
            let exact = scope.as_deref().map(parse_scope).transpose()?;
            let filter = Filter::new(channel.as_deref(), older_than)?;
            let now = UnixMillis::now();
            let mode = if dry_run {
                OpenMode::ReadOnly
            } else {
                OpenMode::ReadWrite
            };
            let scopes = match &chosen {
                Some(s) => vec![s.clone()],
                None => store_scopes(&backend)?
                    .into_iter()
                    .map(|(s, _)| s)
                    .collect(),
            };
            let mut forgotten = 0usize;
            let mut kept = 0usize;
            for store_scope in scopes {
                let store =
                    open_backend(&backend, store_scope.clone(), KeyScheme::Scope, cap, mode)?;
                let targets: Vec<(ScopeKey, Expect)> = match &exact {
                    Some(key) => vec![(key.clone(), Expect::NotWrittenSince(now))],
                    None => store
                        .receipts()?
                        .into_iter()
                        .filter(|r| filter.keeps(r, now))
                        .map(|r| {
                            // Only while it is as old as it was when listed.
                            let bound = filter.cutoff(now).unwrap_or(now);
                            (r.key, Expect::NotWrittenSince(bound))
                        })
                        .collect(),
                };
                for (key, expect) in targets {
                    if dry_run {
                        let live = store.get(&key)?;
                        if let Some(record) = live {
                            writeln!(
                                out,
                                "would forget {} {} (session {})",
                                short_scope(&store_scope),
                                key,
                                record.session_id
                            )
                            .map_err(Failure::Output)?;
                            forgotten += 1;
                        }
                        continue;
                    }
                    match store.forget(&key, &expect, now)? {
                        ForgetOutcome::Forgotten { session_id } => {
                            if let Some(session) = session_id {
                                writeln!(
                                    out,
                                    "forgot {} {} (session {session})",
                                    short_scope(&store_scope),
                                    key
                                )
                                .map_err(Failure::Output)?;
                                forgotten += 1;
                            }
                        }
                        ForgetOutcome::Conflict { stored_session_id } => {
                            writeln!(
                                out,
                                "kept {} {}: used since it was listed (session {stored_session_id})",
                                short_scope(&store_scope),
                                key
                            )
                            .map_err(Failure::Output)?;
                            kept += 1;
                        }
                        ForgetOutcome::NotWritable(why) => {
                            return Err(Failure::Usage(format!(
                                "the store is not writable: {why:?}"
                            )));
                        }
                    }
                }
            }
            let verb = if dry_run { "would forget" } else { "forgot" };
            writeln!(out, "{verb} {forgotten} receipt(s); kept {kept}").map_err(Failure::Output)?;
            Ok(())
        }
        Command::Export => {
            for (scope, receipt) in collect(&backend, chosen.as_ref(), OpenMode::ReadOnly, cap)? {
                print_line(&mut out, &scope, &receipt)?;
            }
            Ok(())
        }
        Command::Import => {
            let mut by_scope: Vec<(StoreScope, Vec<StoredReceipt>)> = Vec::new();
            for (n, line) in io::stdin().lock().lines().enumerate() {
                let line = line.map_err(Failure::Input)?;
                if line.trim().is_empty() {
                    continue;
                }
                let bad = |reason: String| Failure::BadLine {
                    line: n + 1,
                    reason,
                };
                let parsed: Line = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
                let key = parse_scope(&parsed.scope).map_err(|e| bad(e.to_string()))?;
                let store_scope = StoreScope {
                    relay: parsed.relay,
                    agent_pubkey: parsed.agent_pubkey,
                };
                if chosen.as_ref().is_some_and(|c| *c != store_scope) {
                    continue;
                }
                let receipt = StoredReceipt {
                    key,
                    record: parsed.record,
                    last_used: UnixMillis(parsed.last_used_ms),
                };
                match by_scope.iter_mut().find(|(s, _)| *s == store_scope) {
                    Some((_, receipts)) => receipts.push(receipt),
                    None => by_scope.push((store_scope, vec![receipt])),
                }
            }
            for (store_scope, receipts) in by_scope {
                let store = open_for_import(&backend, &store_scope, cap)?;
                let outcome = store.import(&receipts)?;
                match outcome {
                    ImportOutcome::Imported {
                        inserted,
                        kept_existing,
                        forgotten,
                        evicted,
                    } => writeln!(
                        out,
                        "{}: imported {inserted}, kept {kept_existing} existing, skipped {forgotten} forgotten, evicted {evicted}",
                        short_scope(&store_scope)
                    )
                    .map_err(Failure::Output)?,
                    ImportOutcome::NotWritable(why) => {
                        return Err(Failure::Usage(format!("the store is not writable: {why:?}")));
                    }
                }
            }
            Ok(())
        }
        Command::Watermark { action } => {
            watermark(&mut out, &backend, chosen.as_ref(), cap, action)
        }
    }
}

/// `watermark show|set|clear` on `chosen`, or on every store scope of the database.
fn watermark(
    out: &mut impl Write,
    backend: &Backend,
    chosen: Option<&StoreScope>,
    cap: usize,
    action: WatermarkAction,
) -> Result<(), Failure> {
    // The operator's input first: a TIME that cannot be a watermark is refused before any store
    // is opened.
    let (mode, target) = match &action {
        WatermarkAction::Show { .. } => (OpenMode::ReadOnly, None),
        WatermarkAction::Set { time } => (
            OpenMode::ReadWrite,
            Some(parse_time(time, jiff::Timestamp::now())?),
        ),
        WatermarkAction::Clear => (OpenMode::ReadWrite, None),
    };
    let scopes = match chosen {
        Some(s) => vec![s.clone()],
        None => store_scopes(backend)?.into_iter().map(|(s, _)| s).collect(),
    };
    if scopes.is_empty() {
        return Err(Failure::Usage(
            "no store scope in the database; name one with --relay and --agent-pubkey".into(),
        ));
    }
    for scope in scopes {
        let store = open_backend(backend, scope.clone(), KeyScheme::Scope, cap, mode)?;
        let current = store.watermark()?;
        match &action {
            WatermarkAction::Show { json: true } => {
                let value = serde_json::json!({
                    "relay": scope.relay,
                    "agentPubkey": scope.agent_pubkey,
                    "watermark": current.and_then(rfc3339),
                    "unixSeconds": current,
                });
                writeln!(out, "{value}").map_err(Failure::Output)?;
            }
            WatermarkAction::Show { json: false } => {
                let text = match current {
                    Some(secs) => format!("watermark {}", describe_time(secs)),
                    None => "no watermark recorded".into(),
                };
                writeln!(out, "{}: {text}", short_scope(&scope)).map_err(Failure::Output)?;
            }
            WatermarkAction::Set { .. } | WatermarkAction::Clear => {
                match store.set_watermark(target)? {
                    WatermarkOutcome::Written => {}
                    WatermarkOutcome::NotWritable(why) => {
                        return Err(Failure::Usage(format!(
                            "the store is not writable: {why:?}"
                        )));
                    }
                }
                let done = match target {
                    Some(secs) => format!("watermark set to {}", describe_time(secs)),
                    None => "watermark cleared".into(),
                };
                let was = current.map_or("none".into(), describe_time);
                writeln!(out, "{}: {done} (was {was})", short_scope(&scope))
                    .map_err(Failure::Output)?;
            }
        }
    }
    Ok(())
}

/// A watermark given on the command line, in unix seconds: unix seconds as they are, an RFC
/// 3339 time (any offset), or a duration meaning that long before `now`. Times before 1970 or
/// after `now` are refused: a watermark says what was already settled.
fn parse_time(text: &str, now: jiff::Timestamp) -> Result<u64, Failure> {
    let text = text.trim();
    let forms = "expected an RFC 3339 time (2026-03-01T12:00:00Z), unix seconds (1772366400) \
                 or a duration meaning that long ago (2h, 1d 12h)";
    let secs: i64 = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<i64>()
            .map_err(|e| Failure::Usage(format!("{text:?}: not a time in unix seconds: {e}")))?
    } else if let Ok(time) = text.parse::<jiff::Timestamp>() {
        time.as_second()
    } else {
        match humantime::parse_duration(text) {
            Ok(ago) => {
                let ago = i64::try_from(ago.as_secs()).unwrap_or(i64::MAX);
                now.as_second().saturating_sub(ago)
            }
            Err(duration) => {
                // Say why it is not the form it looks most like.
                let reason = match text.parse::<jiff::Timestamp>() {
                    Err(e) if looks_like_a_date(text) => e.to_string(),
                    _ => duration.to_string(),
                };
                return Err(Failure::Usage(format!(
                    "{text:?} is not a time ({reason}); {forms}"
                )));
            }
        }
    };
    if secs > now.as_second() {
        return Err(Failure::Usage(format!(
            "{text:?} is in the future ({}); a watermark says what was already settled",
            describe_time(u64::try_from(secs).unwrap_or(u64::MAX))
        )));
    }
    u64::try_from(secs)
        .map_err(|_| Failure::Usage(format!("{text:?} is before 1970; a watermark cannot be")))
}

/// Whether `text` starts as an RFC 3339 date does (`YYYY-`).
fn looks_like_a_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() > 4 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-'
}

/// `secs` as an RFC 3339 UTC time, when it is one (up to the year 9999).
fn rfc3339(secs: u64) -> Option<String> {
    let secs = i64::try_from(secs).ok()?;
    jiff::Timestamp::from_second(secs)
        .ok()
        .map(|t| t.to_string())
}

/// `2026-03-01T12:00:00Z (unix 1772366400)`.
fn describe_time(secs: u64) -> String {
    match rfc3339(secs) {
        Some(time) => format!("{time} (unix {secs})"),
        None => format!("unix {secs} (after the year 9999)"),
    }
}

/// The target store for an import: created if it does not exist yet (moving receipts to a new
/// database is what import is for).
fn open_for_import(
    backend: &Backend,
    scope: &StoreScope,
    cap: usize,
) -> Result<Box<dyn ReceiptStore>, Failure> {
    let store = match backend {
        Backend::Sqlite { path } => Box::new(buzz_session_store::SqliteStore::open(
            path,
            scope.clone(),
            KeyScheme::Scope,
            cap,
        )?) as Box<dyn ReceiptStore>,
        Backend::Postgres { .. } => open_backend(
            backend,
            scope.clone(),
            KeyScheme::Scope,
            cap,
            OpenMode::ReadWrite,
        )?,
    };
    Ok(store)
}

/// Every receipt of `chosen` (or of every store scope), with its store scope.
fn collect(
    backend: &Backend,
    chosen: Option<&StoreScope>,
    mode: OpenMode,
    cap: usize,
) -> Result<Vec<(StoreScope, StoredReceipt)>, Failure> {
    let scopes = match chosen {
        Some(s) => vec![s.clone()],
        None => store_scopes(backend)?.into_iter().map(|(s, _)| s).collect(),
    };
    let mut rows = Vec::new();
    for scope in scopes {
        let store = open_backend(backend, scope.clone(), KeyScheme::Scope, cap, mode)?;
        for receipt in store.receipts()? {
            rows.push((scope.clone(), receipt));
        }
    }
    Ok(rows)
}

/// `list` and `forget` filters.
struct Filter {
    channel: Option<String>,
    older_than: Option<Duration>,
}

impl Filter {
    fn new(channel: Option<&str>, older_than: Option<Duration>) -> Result<Self, Failure> {
        let channel = channel
            .map(|c| {
                let key = ScopeKey::conversation(c);
                key.validate()
                    .map_err(|e| Failure::Usage(format!("--channel: {e}")))?;
                Ok::<_, Failure>(key.channel_id().to_owned())
            })
            .transpose()?;
        Ok(Self {
            channel,
            older_than,
        })
    }

    fn cutoff(&self, now: UnixMillis) -> Option<UnixMillis> {
        self.older_than.map(|d| {
            let millis = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            UnixMillis(now.0.saturating_sub(millis))
        })
    }

    fn keeps(&self, receipt: &StoredReceipt, now: UnixMillis) -> bool {
        let channel_ok = self
            .channel
            .as_deref()
            .is_none_or(|c| receipt.key.channel_id() == c);
        let age_ok = self.cutoff(now).is_none_or(|cut| receipt.last_used <= cut);
        channel_ok && age_ok
    }
}

/// A scope in the store's key syntax; upper case is accepted (keys are lowercase).
fn parse_scope(text: &str) -> Result<ScopeKey, Failure> {
    ScopeKey::parse_storage_key(&text.trim().to_ascii_lowercase()).map_err(|e| {
        Failure::Usage(format!(
            "not a scope ({e}); expected <channel uuid> or <channel uuid>/<64-hex thread root>"
        ))
    })
}

fn print_line(
    out: &mut impl Write,
    scope: &StoreScope,
    receipt: &StoredReceipt,
) -> Result<(), Failure> {
    let line = Line {
        relay: scope.relay.clone(),
        agent_pubkey: scope.agent_pubkey.clone(),
        scope: receipt.key.to_storage_key(),
        last_used_ms: receipt.last_used.0,
        record: receipt.record.clone(),
    };
    let text = serde_json::to_string(&line).map_err(|e| Failure::Usage(e.to_string()))?;
    writeln!(out, "{text}").map_err(Failure::Output)
}

/// `relay agent…` shortened for a table column.
fn short_scope(scope: &StoreScope) -> String {
    let agent: String = scope.agent_pubkey.chars().take(8).collect();
    format!("{} {agent}…", scope.relay)
}

/// "3d ago" style age.
fn ago(then: UnixMillis, now: UnixMillis) -> String {
    let secs = now.0.saturating_sub(then.0) / 1000;
    let rounded = Duration::from_secs(match secs {
        0..60 => secs,
        60..3600 => secs / 60 * 60,
        3600..86_400 => secs / 3600 * 3600,
        _ => secs / 86_400 * 86_400,
    });
    format!("{} ago", humantime::format_duration(rounded))
}

/// The harness's default state directory: $XDG_STATE_HOME/buzz-acp or ~/.local/state/buzz-acp.
fn default_state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("buzz-acp"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".local/state/buzz-acp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-03-01T12:00:00Z.
    const MARCH: i64 = 1_709_294_400;

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn a_time_is_rfc_3339_unix_seconds_or_a_duration_ago() {
        let now = at(MARCH);
        for (text, secs) in [
            ("2024-03-01T12:00:00Z", MARCH),
            ("2024-03-01T13:00:00+01:00", MARCH),
            ("2024-03-01T11:59:59.900Z", MARCH - 1),
            ("1709294400", MARCH),
            (" 0 ", 0),
            ("2h", MARCH - 7200),
            ("1d 12h", MARCH - 129_600),
            ("0s", MARCH),
        ] {
            let parsed = parse_time(text, now).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(i64::try_from(parsed).unwrap(), secs, "{text}");
        }
    }

    #[test]
    fn times_that_cannot_be_a_watermark_are_refused() {
        let now = at(MARCH);
        for (text, says) in [
            ("2024-03-01T12:00:01Z", "in the future"),
            ("1709294401", "in the future"),
            ("1969-12-31T23:59:59Z", "before 1970"),
            ("55y", "before 1970"),
            ("2024-03-01T12:00:00", "offset"),
            ("2024-13-01T12:00:00Z", "not a time"),
            ("soon", "not a time"),
            ("", "not a time"),
            ("-5", "not a time"),
            ("99999999999999999999", "unix seconds"),
        ] {
            let err = parse_time(text, now).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn watermarks_are_shown_in_utc_with_their_unix_seconds() {
        assert_eq!(
            describe_time(1_709_294_400),
            "2024-03-01T12:00:00Z (unix 1709294400)"
        );
        assert_eq!(describe_time(0), "1970-01-01T00:00:00Z (unix 0)");
        let far = u64::try_from(i64::MAX).unwrap();
        assert_eq!(rfc3339(far), None);
        assert_eq!(
            describe_time(far),
            format!("unix {far} (after the year 9999)")
        );
    }
}
