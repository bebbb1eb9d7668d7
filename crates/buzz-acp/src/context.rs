//! Conversation context: which history a prompt carries and how it is framed.
//!
//! Before each turn the harness gathers a *window* of history (the thread root
//! plus the last `BUZZ_ACP_CONTEXT_MESSAGE_LIMIT` replies, or recent DM
//! history), subtracts what the live session has already been shown
//! (`delivered_event_ids`), and renders the rest as a `<thread-context>` block
//! before the triggering `<buzz-event>`s. The ids it renders become *pending*
//! and are committed to the session's delivery state only after the agent
//! reports success, so a failed or cancelled turn re-sends them.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::relay::{ChannelInfo, Event, KIND_STREAM_MESSAGE};
use crate::scope::SessionScope;

/// Which history a window holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// A thread: its root and replies.
    Thread,
    /// Recent direct-message history.
    Dm,
}

/// A window of history, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextWindow {
    /// Thread or DM history.
    pub kind: WindowKind,
    /// The thread root, when known (threads only).
    pub root: Option<Event>,
    /// The newest `limit` messages, chronological.
    pub messages: Vec<Event>,
    /// How many messages existed in all (before truncation).
    pub total: usize,
}

impl ContextWindow {
    /// Whether older messages were left out.
    pub fn truncated(&self) -> bool {
        self.total > self.messages.len()
    }

    /// Root first, then messages.
    pub fn items(&self) -> impl Iterator<Item = &Event> {
        self.root.iter().chain(self.messages.iter())
    }

    /// Ids of every event in the window.
    pub fn ids(&self) -> HashSet<String> {
        self.items().map(|e| e.id.clone()).collect()
    }
}

/// Resolves the history window for a batch.
///
/// `history` is the channel's events in relay order; only events that precede
/// the last trigger are considered, so the window is what existed when the
/// mention was made.
pub fn resolve_window(
    scope: &SessionScope,
    channel: &ChannelInfo,
    triggers: &[Event],
    history: &[&Event],
    limit: usize,
) -> Option<ContextWindow> {
    if limit == 0 || triggers.is_empty() {
        return None;
    }
    let trigger_ids: HashSet<&str> = triggers.iter().map(|t| t.id.as_str()).collect();
    let cut = triggers
        .iter()
        .filter_map(|t| history.iter().position(|h| h.id == t.id))
        .max()
        .unwrap_or(history.len());
    let before: Vec<&Event> = history[..cut]
        .iter()
        .copied()
        .filter(|e| e.kind == KIND_STREAM_MESSAGE && !trigger_ids.contains(e.id.as_str()))
        .collect();

    let thread_root = match scope {
        SessionScope::Thread { root_event_id, .. } => Some(root_event_id.clone()),
        SessionScope::Conversation { .. } => {
            // A conversation reply follows its reply chain.
            let last = triggers.last()?;
            let refs = last.thread_refs();
            match (refs.root, refs.reply) {
                (Some(root), Some(_)) => Some(root),
                _ => None,
            }
        }
    };

    match thread_root {
        Some(root_id) => {
            let root = before
                .iter()
                .find(|e| e.id == root_id)
                .map(|e| (*e).clone());
            let replies: Vec<&Event> = before
                .iter()
                .copied()
                .filter(|e| e.id != root_id && e.thread_refs().root.as_deref() == Some(&root_id))
                .collect();
            Some(window(WindowKind::Thread, root, &replies, limit))
        }
        None if channel.is_dm() => Some(window(WindowKind::Dm, None, &before, limit)),
        // A plain top-level message in a conversation-scoped stream channel.
        None => None,
    }
}

fn window(kind: WindowKind, root: Option<Event>, all: &[&Event], limit: usize) -> ContextWindow {
    let start = all.len().saturating_sub(limit);
    ContextWindow {
        kind,
        root,
        messages: all[start..].iter().map(|e| (*e).clone()).collect(),
        total: all.len(),
    }
}

/// What of a window still has to be sent to a live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextDelta {
    /// Window events the session has not seen, oldest first.
    pub entries: Vec<Event>,
    /// Whether some window events were delivered to this session before.
    pub had_delivered: bool,
    /// Ids to commit as delivered once the turn succeeds: the entries plus
    /// every trigger.
    pub pending_ids: Vec<String>,
}

/// Subtracts the delivered set (and the triggers, which render in the event
/// block) from a window.
pub fn conversation_context_delta(
    window: Option<&ContextWindow>,
    delivered: &HashSet<String>,
    triggers: &[Event],
) -> ContextDelta {
    let trigger_ids: HashSet<&str> = triggers.iter().map(|t| t.id.as_str()).collect();
    let mut entries = Vec::new();
    let mut had_delivered = false;
    if let Some(window) = window {
        for event in window.items() {
            if trigger_ids.contains(event.id.as_str()) {
                continue;
            }
            if delivered.contains(&event.id) {
                had_delivered = true;
            } else {
                entries.push(event.clone());
            }
        }
    }
    let mut pending_ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
    pending_ids.extend(triggers.iter().map(|t| t.id.clone()));
    ContextDelta {
        entries,
        had_delivered,
        pending_ids,
    }
}

/// Everything [`format_prompt`] needs.
#[derive(Debug, Clone)]
pub struct PromptInput<'a> {
    /// The turn's scope.
    pub scope: &'a SessionScope,
    /// Channel metadata.
    pub channel: &'a ChannelInfo,
    /// The resolved window (for its totals).
    pub window: Option<&'a ContextWindow>,
    /// What to show of it.
    pub delta: &'a ContextDelta,
    /// The triggering events, oldest first.
    pub triggers: &'a [Event],
    /// Standing context for agents without a system-prompt capability, on the
    /// first turn of a session only.
    pub standing: Option<&'a str>,
    /// The triggers arrived while a previous turn was running and cancelled it.
    pub steered: bool,
    /// This agent's pubkey (its own messages are labelled).
    pub agent_pubkey: &'a str,
}

/// Renders the user message of a turn.
pub fn format_prompt(input: &PromptInput<'_>) -> String {
    let mut out = String::new();
    if let Some(standing) = input.standing.filter(|s| !s.trim().is_empty()) {
        let _ = writeln!(
            out,
            "<standing-context>\n{}\n</standing-context>",
            standing.trim()
        );
    }
    out.push_str("<context>\n");
    let scope_name = match (input.scope, input.channel.is_dm()) {
        (SessionScope::Thread { .. }, _) => "thread",
        (SessionScope::Conversation { .. }, true) => "dm",
        (SessionScope::Conversation { .. }, false) => "channel",
    };
    let _ = writeln!(out, "scope: {scope_name}");
    let name = if input.channel.name.is_empty() {
        "(unnamed)".to_string()
    } else {
        format!("#{}", input.channel.name)
    };
    let _ = writeln!(out, "channel: {name} ({})", input.scope.channel_id());
    if let Some(root) = input.scope.root_event_id() {
        let _ = writeln!(out, "thread root: {root}");
    }
    let _ = writeln!(out, "history: {}", history_hint(input.window, input.delta));
    out.push_str("</context>\n");

    if let Some(window) = input.window.filter(|_| !input.delta.entries.is_empty()) {
        let tag = match window.kind {
            WindowKind::Thread => "thread-context",
            WindowKind::Dm => "conversation-context",
        };
        let _ = writeln!(
            out,
            "<{tag} shown=\"{}\" total=\"{}\"{}>",
            input.delta.entries.len(),
            window.total + usize::from(window.root.is_some()),
            if window.truncated() {
                " truncated=\"true\""
            } else {
                ""
            }
        );
        for (i, event) in input.delta.entries.iter().enumerate() {
            let _ = writeln!(
                out,
                "[{}] {}",
                i + 1,
                render_line(event, input.agent_pubkey)
            );
        }
        let _ = writeln!(out, "</{tag}>");
    }

    out.push_str("Reply to the latest event; your final message is posted to the same thread.\n");
    if input.steered {
        out.push_str(
            "<steer>New messages arrived while you were working; the previous turn was \
             stopped. Address everything below.</steer>\n",
        );
    }
    for event in input.triggers {
        let _ = writeln!(
            out,
            "<buzz-event id=\"{}\" author=\"{}\" time=\"{}\">\n{}\n</buzz-event>",
            event.id,
            event.pubkey,
            rfc3339(event.created_at),
            event.content
        );
    }
    out
}

fn history_hint(window: Option<&ContextWindow>, delta: &ContextDelta) -> String {
    let shown = delta.entries.len();
    match (window.is_some(), shown, delta.had_delivered) {
        (false, _, _) => "none".to_string(),
        (true, 0, true) => {
            "every earlier message in this window was already delivered to this session".to_string()
        }
        (true, 0, false) => "no earlier messages".to_string(),
        (true, n, true) => format!(
            "{n} message(s) you have not seen yet follow; earlier ones were delivered to this session before"
        ),
        (true, n, false) => format!("the {n} most recent earlier message(s) follow"),
    }
}

fn render_line(event: &Event, agent_pubkey: &str) -> String {
    let who = if event.pubkey == agent_pubkey {
        "you".to_string()
    } else {
        event.pubkey.chars().take(8).collect()
    };
    format!(
        "{who} ({}) #{}: {}",
        rfc3339(event.created_at),
        &event.id[..8.min(event.id.len())],
        event.content
    )
}

/// Unix seconds as an RFC 3339 UTC timestamp (no external time crate needed).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// well-known algorithm, written out here from its description).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{ChannelId, ChannelKind, EventBuilder};

    const AGENT: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

    fn ch() -> ChannelId {
        ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap()
    }

    fn stream() -> ChannelInfo {
        ChannelInfo {
            name: "general".into(),
            kind: ChannelKind::Stream,
        }
    }

    /// A thread with a root and `n` replies, in relay order.
    fn thread(n: usize) -> Vec<Event> {
        let root = EventBuilder::message(ALICE, &ch(), "root")
            .created_at(1000)
            .mention(AGENT)
            .build();
        let mut out = vec![root.clone()];
        for i in 0..n {
            let parent = out.last().unwrap().id.clone();
            out.push(
                EventBuilder::message(ALICE, &ch(), &format!("reply {i}"))
                    .created_at(1001 + i as u64)
                    .thread(&root.id, &parent)
                    .build(),
            );
        }
        out
    }

    fn scope_of(root: &Event) -> SessionScope {
        SessionScope::Thread {
            channel_id: ch(),
            root_event_id: root.id.clone(),
        }
    }

    #[test]
    fn thread_window_is_root_plus_last_n_replies_before_the_trigger() {
        let events = thread(20);
        let history: Vec<&Event> = events.iter().collect();
        let trigger = events[15].clone();
        let w = resolve_window(&scope_of(&events[0]), &stream(), &[trigger], &history, 12).unwrap();
        assert_eq!(w.root.as_ref().unwrap().id, events[0].id);
        assert_eq!(w.messages.len(), 12);
        assert_eq!(w.total, 14, "replies 0..=13 precede the trigger (reply 14)");
        assert!(w.truncated());
        assert_eq!(w.messages.last().unwrap().content, "reply 13");
    }

    #[test]
    fn zero_limit_fetches_nothing() {
        let events = thread(3);
        let history: Vec<&Event> = events.iter().collect();
        assert!(
            resolve_window(
                &scope_of(&events[0]),
                &stream(),
                &[events[3].clone()],
                &history,
                0
            )
            .is_none()
        );
    }

    #[test]
    fn plain_channel_message_in_conversation_scope_gets_no_history_but_dm_does() {
        let events = thread(2);
        let history: Vec<&Event> = events.iter().collect();
        let top = EventBuilder::message(ALICE, &ch(), "top")
            .created_at(5000)
            .build();
        let mut with_top = history.clone();
        with_top.push(&top);
        let conv = SessionScope::Conversation { channel_id: ch() };
        assert!(
            resolve_window(&conv, &stream(), std::slice::from_ref(&top), &with_top, 12).is_none()
        );
        let dm = ChannelInfo {
            name: String::new(),
            kind: ChannelKind::Dm,
        };
        let w = resolve_window(&conv, &dm, std::slice::from_ref(&top), &with_top, 12).unwrap();
        assert_eq!(w.kind, WindowKind::Dm);
        assert_eq!(w.messages.len(), 3);
    }

    #[test]
    fn delta_subtracts_delivered_and_triggers_and_tracks_pending() {
        let events = thread(4);
        let history: Vec<&Event> = events.iter().collect();
        let trigger = events[4].clone();
        let w = resolve_window(
            &scope_of(&events[0]),
            &stream(),
            std::slice::from_ref(&trigger),
            &history,
            12,
        )
        .unwrap();
        let fresh =
            conversation_context_delta(Some(&w), &HashSet::new(), std::slice::from_ref(&trigger));
        assert_eq!(fresh.entries.len(), 4, "root + 3 replies");
        assert!(!fresh.had_delivered);
        assert_eq!(fresh.pending_ids.len(), 5);

        let delivered: HashSet<String> = events[..3].iter().map(|e| e.id.clone()).collect();
        let delta =
            conversation_context_delta(Some(&w), &delivered, std::slice::from_ref(&trigger));
        assert_eq!(delta.entries.len(), 1);
        assert_eq!(delta.entries[0].id, events[3].id);
        assert!(delta.had_delivered);
    }

    #[test]
    fn hint_stays_truthful_when_everything_was_delivered() {
        let events = thread(2);
        let history: Vec<&Event> = events.iter().collect();
        let trigger = events[2].clone();
        let scope = scope_of(&events[0]);
        let w = resolve_window(
            &scope,
            &stream(),
            std::slice::from_ref(&trigger),
            &history,
            12,
        )
        .unwrap();
        let delivered: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
        let delta =
            conversation_context_delta(Some(&w), &delivered, std::slice::from_ref(&trigger));
        let text = format_prompt(&PromptInput {
            scope: &scope,
            channel: &stream(),
            window: Some(&w),
            delta: &delta,
            triggers: std::slice::from_ref(&trigger),
            standing: None,
            steered: false,
            agent_pubkey: AGENT,
        });
        assert!(!text.contains("<thread-context"));
        assert!(text.contains("already delivered to this session"));
        assert!(text.contains(&format!("<buzz-event id=\"{}\"", trigger.id)));
    }

    #[test]
    fn prompt_renders_context_before_event_and_standing_first() {
        let events = thread(2);
        let history: Vec<&Event> = events.iter().collect();
        let trigger = events[2].clone();
        let scope = scope_of(&events[0]);
        let w = resolve_window(
            &scope,
            &stream(),
            std::slice::from_ref(&trigger),
            &history,
            12,
        )
        .unwrap();
        let delta =
            conversation_context_delta(Some(&w), &HashSet::new(), std::slice::from_ref(&trigger));
        let text = format_prompt(&PromptInput {
            scope: &scope,
            channel: &stream(),
            window: Some(&w),
            delta: &delta,
            triggers: std::slice::from_ref(&trigger),
            standing: Some("Be brief."),
            steered: false,
            agent_pubkey: AGENT,
        });
        let standing = text.find("<standing-context>").unwrap();
        let ctx = text.find("<thread-context").unwrap();
        let ev = text.find("<buzz-event").unwrap();
        assert!(standing < ctx && ctx < ev);
        assert!(text.contains("[1] b2b2b2b2"));
        assert!(text.contains("[2] b2b2b2b2"));
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_000), "2026-11-30T00:53:20Z");
    }
}
