//! The events a relay has delivered or published, indexed the ways the harness asks for them:
//! by id, by channel (the history for context windows, in the order they were added), and by
//! the triggers each one answers (so the harness can tell what it already answered). Both
//! relays keep one.

use std::collections::HashMap;

use crate::relay::{ChannelId, Event};

/// Events by id, by channel and by the triggers they answer.
#[derive(Debug, Default)]
pub struct EventIndex {
    events: Vec<Event>,
    by_id: HashMap<String, usize>,
    by_channel: HashMap<ChannelId, Vec<usize>>,
    /// Trigger id → events answering it (`e` tags marked `reply` or `mention`).
    answers: HashMap<String, Vec<usize>>,
}

impl EventIndex {
    /// Adds `event`; false (and nothing changes) when its id is already known.
    pub fn insert(&mut self, event: Event) -> bool {
        if self.by_id.contains_key(&event.id) {
            return false;
        }
        let index = self.events.len();
        self.by_id.insert(event.id.clone(), index);
        if let Some(channel) = event.channel_id() {
            self.by_channel.entry(channel).or_default().push(index);
        }
        // Only a chat message answers anything: never a reaction, an indicator or a notice
        // that happens to name the event it is about.
        if event.is_message() {
            for answered in event.answered_ids() {
                self.answers.entry(answered).or_default().push(index);
            }
        }
        self.events.push(event);
        true
    }

    /// The event with this id (either case).
    pub fn find(&self, id: &str) -> Option<&Event> {
        self.by_id
            .get(&id.to_ascii_lowercase())
            .map(|&i| &self.events[i])
    }

    /// Every event of `channel`, in the order they were added.
    pub fn channel(&self, channel: &ChannelId) -> Vec<&Event> {
        self.by_channel
            .get(channel)
            .map(|indexes| indexes.iter().map(|&i| &self.events[i]).collect())
            .unwrap_or_default()
    }

    /// An event by `author` that answers `trigger_id`.
    pub fn reply_by(&self, author: &str, trigger_id: &str) -> Option<&Event> {
        self.answers
            .get(&trigger_id.to_ascii_lowercase())?
            .iter()
            .map(|&i| &self.events[i])
            .find(|e| e.pubkey.eq_ignore_ascii_case(author))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::EventBuilder;

    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
    const AGENT: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

    fn channel() -> ChannelId {
        ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap()
    }

    #[test]
    fn an_event_is_indexed_once_by_id_channel_and_the_trigger_it_answers() {
        let mut index = EventIndex::default();
        let question = EventBuilder::message(ALICE, &channel(), "q")
            .created_at(1)
            .build();
        let answer = EventBuilder::message(AGENT, &channel(), "a")
            .created_at(2)
            .thread(&question.id, &question.id)
            .build();
        assert!(index.insert(question.clone()));
        assert!(index.insert(answer.clone()));
        assert!(
            !index.insert(question.clone()),
            "a known id is not added twice"
        );
        let ids: Vec<&str> = index
            .channel(&channel())
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(
            ids,
            [question.id.as_str(), answer.id.as_str()],
            "in the order added"
        );
        assert_eq!(
            index.find(&question.id.to_ascii_uppercase()),
            Some(&question)
        );
        assert_eq!(index.reply_by(AGENT, &question.id), Some(&answer));
        assert_eq!(
            index.reply_by(ALICE, &question.id),
            None,
            "only the author's answers"
        );
    }

    #[test]
    fn only_a_chat_message_answers() {
        let mut index = EventIndex::default();
        let question = EventBuilder::message(ALICE, &channel(), "q")
            .created_at(1)
            .build();
        // The agent's typing indicator names the question with a `reply` marker too.
        let mut typing = EventBuilder::message(AGENT, &channel(), "")
            .created_at(2)
            .thread(&question.id, &question.id)
            .build();
        typing.kind = 20002;
        index.insert(question.clone());
        index.insert(typing);
        assert_eq!(index.reply_by(AGENT, &question.id), None);
    }
}
