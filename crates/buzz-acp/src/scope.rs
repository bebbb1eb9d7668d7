//! Session scopes: which provider session a chat event belongs to.
//!
//! A [`SessionScope`] is the single key for provider sessions, queue partitions,
//! in-flight tracking and context gathering. It is derived **once**, at
//! admission, from the triggering event; later code carries the scope and never
//! re-infers it from the last event of a batch.
//!
//! Derivation rules (upstream's):
//! 1. a DM channel, or the `channel` policy, is always `Conversation`;
//! 2. otherwise the event opens or joins a `Thread`:
//!    * a reply with a valid NIP-10 root *and* reply marker scopes to the
//!      canonical **root**, never to its parent;
//!    * a top-level mention opens a thread rooted at the triggering event;
//!    * a lone `root` marker without a `reply` marker counts as top-level;
//!    * a marker whose id is not 64 hex characters is ignored;
//!    * an edit scopes to its **original** message's thread (the original's id
//!      when the original is top-level or unknown), never to the edit event;
//!    * roots are lowercased, so `AB…` and `ab…` share one session.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::relay::{ChannelId, Event, ThreadRefs, is_event_id};

/// How sessions are split inside a non-DM channel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum SessionPolicy {
    /// One session per channel (the rollback setting).
    Channel,
    /// One session per canonical thread root (the default).
    #[default]
    Thread,
}

impl fmt::Display for SessionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionPolicy::Channel => "channel",
            SessionPolicy::Thread => "thread",
        })
    }
}

impl SessionPolicy {
    /// Appends the policy's session-model note to a base prompt, exactly once,
    /// so the model knows what one session spans.
    pub fn append_session_model(self, base: &str) -> String {
        let note = match self {
            SessionPolicy::Channel => SESSION_MODEL_CHANNEL,
            SessionPolicy::Thread => SESSION_MODEL_THREAD,
        };
        if base.contains(note) {
            return base.to_string();
        }
        if base.trim().is_empty() {
            note.to_string()
        } else {
            format!("{}\n\n{note}", base.trim_end())
        }
    }
}

const SESSION_MODEL_CHANNEL: &str = "Session model: this session spans the whole channel; \
every thread of the channel shares it.";
const SESSION_MODEL_THREAD: &str = "Session model: this session spans one thread; \
other threads of the channel have sessions of their own.";

/// The key of one provider session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionScope {
    /// The whole channel is one session (DMs, or the `channel` policy).
    Conversation {
        /// The channel; always the authorization boundary.
        channel_id: ChannelId,
    },
    /// One canonical thread of a channel.
    Thread {
        /// The channel the thread lives in.
        channel_id: ChannelId,
        /// The thread's root event id: 64 lowercase hex characters.
        root_event_id: String,
    },
}

impl SessionScope {
    /// The channel this scope belongs to (always present).
    pub fn channel_id(&self) -> &ChannelId {
        match self {
            SessionScope::Conversation { channel_id } | SessionScope::Thread { channel_id, .. } => {
                channel_id
            }
        }
    }

    /// The canonical thread root, for thread scopes only.
    pub fn root_event_id(&self) -> Option<&str> {
        match self {
            SessionScope::Conversation { .. } => None,
            SessionScope::Thread { root_event_id, .. } => Some(root_event_id),
        }
    }

    /// The root of the thread an answer to `trigger` sits in: this scope's root for a thread
    /// scope, else the root `trigger` names, else `trigger` itself (a top-level message starts
    /// a thread).
    pub fn answer_root(&self, trigger: &Event) -> String {
        self.root_event_id()
            .map(str::to_string)
            .or_else(|| trigger.thread_refs().root)
            .unwrap_or_else(|| trigger.id.clone())
    }

    /// Whether this is a thread scope.
    pub fn is_thread(&self) -> bool {
        matches!(self, SessionScope::Thread { .. })
    }

    /// A low-cardinality label for logs and telemetry: full ids stay out.
    pub fn telemetry_label(&self) -> String {
        match self {
            SessionScope::Conversation { .. } => "conversation".to_string(),
            SessionScope::Thread { root_event_id, .. } => {
                let short: String = root_event_id.chars().take(8).collect();
                format!("thread:{short}")
            }
        }
    }

    /// Derives the scope of an admitted event.
    ///
    /// `edit_original` is the original message when `event` is an edit and the
    /// original could be found; `None` otherwise.
    pub fn derive(
        policy: SessionPolicy,
        channel_id: &ChannelId,
        channel_is_dm: bool,
        event: &Event,
        edit_original: Option<&Event>,
    ) -> SessionScope {
        if channel_is_dm || policy == SessionPolicy::Channel {
            return SessionScope::Conversation {
                channel_id: channel_id.clone(),
            };
        }
        SessionScope::Thread {
            channel_id: channel_id.clone(),
            root_event_id: reply_thread_root(event, edit_original),
        }
    }
}

/// The canonical thread root of an event, following the derivation rules.
pub fn reply_thread_root(event: &Event, edit_original: Option<&Event>) -> String {
    if let Some(target) = event.edit_target() {
        // An edit never roots a thread of its own: it follows its original.
        return match edit_original {
            Some(original) => canonical_root(original.thread_refs(), &original.id),
            None => target.to_ascii_lowercase(),
        };
    }
    canonical_root(event.thread_refs(), &event.id)
}

fn canonical_root(refs: ThreadRefs, own_id: &str) -> String {
    match (refs.root, refs.reply) {
        (Some(root), Some(_reply)) if is_event_id(&root) => root.to_ascii_lowercase(),
        // A lone root marker, a malformed root or no markers at all: top-level.
        _ => own_id.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{EventBuilder, KIND_EDIT};

    const AGENT: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

    fn channel() -> ChannelId {
        ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap()
    }

    fn other_channel() -> ChannelId {
        ChannelId::parse("7c1d9e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f").unwrap()
    }

    fn top(content: &str, at: u64) -> Event {
        EventBuilder::message(ALICE, &channel(), content)
            .created_at(at)
            .mention(AGENT)
            .build()
    }

    fn reply(root: &str, parent: &str, at: u64) -> Event {
        EventBuilder::message(ALICE, &channel(), "reply")
            .created_at(at)
            .thread(root, parent)
            .mention(AGENT)
            .build()
    }

    fn thread_of(event: &Event) -> SessionScope {
        SessionScope::derive(SessionPolicy::Thread, &channel(), false, event, None)
    }

    #[test]
    fn dm_is_always_conversation_scoped_under_thread_policy() {
        let root = top("hi", 1);
        let event = reply(&root.id, &root.id, 2);
        let scope = SessionScope::derive(SessionPolicy::Thread, &channel(), true, &event, None);
        assert_eq!(
            scope,
            SessionScope::Conversation {
                channel_id: channel()
            }
        );
    }

    #[test]
    fn channel_policy_collapses_everything_to_conversation() {
        let root = top("hi", 1);
        for event in [root.clone(), reply(&root.id, &root.id, 2)] {
            let scope =
                SessionScope::derive(SessionPolicy::Channel, &channel(), false, &event, None);
            assert!(!scope.is_thread());
            assert_eq!(scope.channel_id(), &channel());
        }
    }

    #[test]
    fn top_level_mention_opens_thread_rooted_at_trigger() {
        let event = top("hello", 1);
        assert_eq!(thread_of(&event).root_event_id(), Some(event.id.as_str()));
    }

    #[test]
    fn direct_reply_to_root_scopes_to_that_root() {
        let root = top("root", 1);
        let direct = reply(&root.id, &root.id, 2);
        assert_eq!(thread_of(&direct).root_event_id(), Some(root.id.as_str()));
    }

    #[test]
    fn lone_root_marker_counts_as_top_level() {
        let root = top("root", 1);
        let lone = EventBuilder::message(ALICE, &channel(), "lone")
            .created_at(2)
            .tag(&["e", &root.id, "", "root"])
            .build();
        assert_eq!(thread_of(&lone).root_event_id(), Some(lone.id.as_str()));
    }

    #[test]
    fn nested_reply_scopes_to_canonical_root_not_parent() {
        let root = top("root", 1);
        let first = reply(&root.id, &root.id, 2);
        let nested = reply(&root.id, &first.id, 3);
        assert_eq!(thread_of(&nested).root_event_id(), Some(root.id.as_str()));
    }

    #[test]
    fn repeated_replies_in_same_thread_share_scope() {
        let root = top("root", 1);
        let a = reply(&root.id, &root.id, 2);
        let b = reply(&root.id, &a.id, 3);
        assert_eq!(thread_of(&a), thread_of(&b));
    }

    #[test]
    fn malformed_marker_is_ignored() {
        let event = EventBuilder::message(ALICE, &channel(), "odd")
            .created_at(2)
            .tag(&["e", "not-hex", "", "root"])
            .tag(&["e", "also-not-hex", "", "reply"])
            .build();
        assert_eq!(thread_of(&event).root_event_id(), Some(event.id.as_str()));
    }

    #[test]
    fn edit_scopes_to_original_thread_never_the_edit_event() {
        let root = top("root", 1);
        let original = reply(&root.id, &root.id, 2);
        let edit = EventBuilder::new(KIND_EDIT, ALICE, &channel(), "edited")
            .created_at(3)
            .tag(&["e", &original.id, "", "edit"])
            .build();
        let scope = SessionScope::derive(
            SessionPolicy::Thread,
            &channel(),
            false,
            &edit,
            Some(&original),
        );
        assert_eq!(scope.root_event_id(), Some(root.id.as_str()));

        // Top-level original: the root is the original's id.
        let scope =
            SessionScope::derive(SessionPolicy::Thread, &channel(), false, &edit, Some(&root));
        assert_eq!(scope.root_event_id(), Some(root.id.as_str()));

        // Original unknown: still the original's id, never the edit's.
        let scope = SessionScope::derive(SessionPolicy::Thread, &channel(), false, &edit, None);
        assert_eq!(scope.root_event_id(), Some(original.id.as_str()));
        assert_ne!(scope.root_event_id(), Some(edit.id.as_str()));
    }

    #[test]
    fn different_top_level_mentions_get_distinct_scopes() {
        assert_ne!(thread_of(&top("a", 1)), thread_of(&top("b", 2)));
    }

    #[test]
    fn mixed_case_root_spellings_share_one_thread_scope() {
        let root = top("root", 1);
        let upper = reply(&root.id.to_ascii_uppercase(), &root.id, 2);
        let lower = reply(&root.id, &root.id, 3);
        assert_eq!(thread_of(&upper), thread_of(&lower));
    }

    #[test]
    fn same_root_in_two_channels_is_two_scopes() {
        let root = top("root", 1);
        let a = SessionScope::derive(SessionPolicy::Thread, &channel(), false, &root, None);
        let b = SessionScope::derive(SessionPolicy::Thread, &other_channel(), false, &root, None);
        assert_ne!(a, b);
    }

    #[test]
    fn telemetry_label_keeps_full_ids_out() {
        let event = top("x", 1);
        let label = thread_of(&event).telemetry_label();
        assert_eq!(label, format!("thread:{}", &event.id[..8]));
        let conv = SessionScope::Conversation {
            channel_id: channel(),
        };
        assert_eq!(conv.telemetry_label(), "conversation");
    }

    #[test]
    fn scopes_order_and_serialize_stably() {
        let conv = SessionScope::Conversation {
            channel_id: channel(),
        };
        let thread = thread_of(&top("x", 1));
        assert!(conv < thread, "conversation sorts before thread");
        let json = serde_json::to_value(&thread).unwrap();
        assert_eq!(json["kind"], "thread");
        let back: SessionScope = serde_json::from_value(json).unwrap();
        assert_eq!(back, thread);
    }

    #[test]
    fn session_model_is_appended_once_and_matches_policy() {
        let once = SessionPolicy::Thread.append_session_model("Base.");
        let twice = SessionPolicy::Thread.append_session_model(&once);
        assert_eq!(once, twice);
        assert_eq!(once.matches(SESSION_MODEL_THREAD).count(), 1);
        assert!(
            SessionPolicy::Channel
                .append_session_model("")
                .contains("whole channel")
        );
    }
}
