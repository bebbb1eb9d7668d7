//! A catch-up's reads, page by page.
//!
//! The live subscription cannot carry a catch-up: its buffer holds 256 events, an overflow forces
//! a resubscription from the newest event seen, and relays send stored events newest first, so
//! the oldest missed mentions would be the ones lost. The catch-up reads with `POST /query`
//! instead, one page of at most `limit` events at a time, newest first, each page ending where
//! the previous one's oldest event was (`until` is inclusive, so a second shared by two pages is
//! read twice and de-duplicated by id). It ends on a short page.
//!
//! [`Pager`] is the reading as a state machine without I/O: it says which filter to send next and
//! takes each page's answer.

use std::collections::HashSet;

use nostr::{Event, EventId, Filter, Timestamp};

use crate::window::CatchUpWindow;

/// Events per page: the history fetch's size.
pub const PAGE_LIMIT: usize = 500;

/// What a page changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// Ask for the next page ([`Pager::next_filter`]).
    More,
    /// Everything in the window was read.
    Done,
}

/// Reads one filter's events in a window, page by page.
#[derive(Debug, Clone)]
pub struct Pager {
    base: Filter,
    window: CatchUpWindow,
    limit: usize,
    /// Where the next page ends (inclusive); `None` once done.
    until: Option<u64>,
    seen: HashSet<EventId>,
    events: Vec<Event>,
    /// Seconds that held more than a page of events: the rest of each was not read.
    crowded: Vec<u64>,
}

impl Pager {
    /// Reads `base`'s events whose `created_at` is in `window`, `limit` at a time.
    pub fn new(base: Filter, window: CatchUpWindow, limit: usize) -> Self {
        Self {
            base,
            window,
            limit: limit.max(1),
            until: Some(window.until),
            seen: HashSet::new(),
            events: Vec::new(),
            crowded: Vec::new(),
        }
    }

    /// The filter of the next page, or `None` when the window is read.
    pub fn next_filter(&self) -> Option<Filter> {
        let until = self.until?;
        Some(
            self.base
                .clone()
                .since(Timestamp::from(self.window.since))
                .until(Timestamp::from(until))
                .limit(self.limit),
        )
    }

    /// Takes the answer to [`Pager::next_filter`].
    pub fn absorb(&mut self, page: Vec<Event>) -> Page {
        let Some(until) = self.until else {
            return Page::Done;
        };
        let full = page.len() >= self.limit;
        let mut oldest: Option<u64> = None;
        let mut new = 0;
        for event in page {
            let created_at = event.created_at.as_secs();
            // A relay that ignores part of the filter does not widen the window.
            if !self.window.contains(created_at) || created_at > until {
                continue;
            }
            oldest = Some(oldest.map_or(created_at, |o| o.min(created_at)));
            if self.seen.insert(event.id) {
                new += 1;
                self.events.push(event);
            }
        }
        self.until = match oldest {
            _ if !full => None,
            None => None,
            // A full page of nothing new: one second holds more than a page. Go past it.
            Some(oldest) if new == 0 => {
                self.crowded.push(oldest);
                oldest.checked_sub(1).filter(|u| *u >= self.window.since)
            }
            Some(oldest) => Some(oldest),
        };
        if self.until.is_some() {
            Page::More
        } else {
            Page::Done
        }
    }

    /// Seconds that held more than a page of events (only part of each was read).
    pub fn crowded(&self) -> &[u64] {
        &self.crowded
    }

    /// Every event read, oldest first (ties by id).
    pub fn into_events(mut self) -> Vec<Event> {
        self.events.sort_by_key(|e| (e.created_at, e.id));
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::{EventBuilder, Keys};

    fn at(keys: &Keys, created_at: u64, n: usize) -> Event {
        EventBuilder::text_note(format!("m{n}"))
            .custom_created_at(Timestamp::from(created_at))
            .sign_with_keys(keys)
            .expect("sign")
    }

    /// A relay's answer: the events in the filter's bounds, newest first, at most `limit`.
    fn answer(all: &[Event], filter: &Filter) -> Vec<Event> {
        let mut hits: Vec<Event> = all
            .iter()
            .filter(|e| filter.since.is_none_or(|s| e.created_at >= s))
            .filter(|e| filter.until.is_none_or(|u| e.created_at <= u))
            .cloned()
            .collect();
        hits.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        hits.truncate(filter.limit.unwrap_or(usize::MAX));
        hits
    }

    fn read(all: &[Event], window: CatchUpWindow, limit: usize) -> (Vec<Event>, usize, Vec<u64>) {
        let mut pager = Pager::new(Filter::new(), window, limit);
        let mut pages = 0;
        while let Some(filter) = pager.next_filter() {
            pages += 1;
            if pager.absorb(answer(all, &filter)) == Page::Done {
                break;
            }
        }
        let crowded = pager.crowded().to_vec();
        (pager.into_events(), pages, crowded)
    }

    #[test]
    fn every_event_of_the_window_is_read_once_across_pages_sharing_seconds() {
        let keys = Keys::generate();
        // 23 events over 8 seconds, three per second: pages of 5 cut through seconds.
        let all: Vec<Event> = (0..24).map(|n| at(&keys, 1000 + n as u64 / 3, n)).collect();
        let window = CatchUpWindow {
            since: 1001,
            until: 1006,
        };
        let (events, pages, crowded) = read(&all, window, 5);
        let expected: Vec<&Event> = all
            .iter()
            .filter(|e| window.contains(e.created_at.as_secs()))
            .collect();
        assert_eq!(events.len(), expected.len());
        assert!(expected.iter().all(|e| events.contains(e)));
        assert!(
            events
                .windows(2)
                .all(|w| w[0].created_at <= w[1].created_at),
            "oldest first"
        );
        assert!(pages > 3 && crowded.is_empty());
    }

    #[test]
    fn an_empty_window_is_one_short_page() {
        let (events, pages, _) = read(&[], CatchUpWindow { since: 1, until: 2 }, 5);
        assert!(events.is_empty());
        assert_eq!(pages, 1);
    }

    #[test]
    fn a_second_with_more_than_a_page_is_passed_and_reported() {
        let keys = Keys::generate();
        let mut all: Vec<Event> = (0..4).map(|n| at(&keys, 2000, n)).collect();
        all.push(at(&keys, 1999, 9));
        let (events, _, crowded) = read(
            &all,
            CatchUpWindow {
                since: 1990,
                until: 2000,
            },
            3,
        );
        assert_eq!(crowded, [2000]);
        assert!(
            events.iter().any(|e| e.created_at.as_secs() == 1999),
            "the read went on past it"
        );
        assert_eq!(
            events.len(),
            4,
            "three of the crowded second and the one before"
        );
    }

    #[test]
    fn events_outside_the_window_are_not_taken() {
        let keys = Keys::generate();
        let all = vec![at(&keys, 10, 0), at(&keys, 20, 1), at(&keys, 30, 2)];
        let mut pager = Pager::new(
            Filter::new(),
            CatchUpWindow {
                since: 15,
                until: 25,
            },
            10,
        );
        // A relay that ignores since and until.
        assert_eq!(pager.absorb(all.clone()), Page::Done);
        let events = pager.into_events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].created_at.as_secs(), 20);
    }
}
