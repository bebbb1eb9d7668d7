//! The prompt-cache ledger: for each request, how much of its prompt a provider's cache could
//! have served, under both cache lifetimes. Pure (time is passed in).
//!
//! The model of a provider cache used here is the upper bound of what one can do:
//! every prefix of every prompt is cached when the request is made, and an entry lives for the
//! lifetime after its *last* use (a hit refreshes it, as both providers document). A request
//! made at time `t` can then be served the longest prefix it shares with any earlier request to
//! the same model made no earlier than `t - lifetime`: a prefix read within the lifetime was
//! refreshed by that read. Prefixes are compared in whole segments of the prompt layout
//! ([`shared_prefix`]). Real caches serve less (OpenAI from 1024 tokens on, in 128-token
//! steps; Anthropic only up to a `cache_control` breakpoint), so these numbers say what a
//! resume *could* save at best, and what it cannot save at all.
//!
//! Caches are per model, as the providers' are (and per organisation, which here is everyone).
//! A prefix shared with another conversation (the same system prompt and tools) therefore
//! counts as cacheable, as it would at the provider.

use std::time::Duration;

use crate::prompt::{Lifetime, shared_prefix};

/// What the cache could have served of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheReport {
    /// Bytes of the prompt as laid out for comparison ([`crate::prompt::Prompt::text`]).
    pub prompt_bytes: usize,
    /// Bytes a cache with a 5-minute lifetime could have served.
    pub cached_5m: usize,
    /// Bytes a cache with a 1-hour lifetime could have served.
    pub cached_1h: usize,
}

impl CacheReport {
    /// Cacheable bytes under `lifetime`.
    #[must_use]
    pub fn cached(&self, lifetime: Lifetime) -> usize {
        match lifetime {
            Lifetime::FiveMinutes => self.cached_5m,
            Lifetime::OneHour => self.cached_1h,
        }
    }

    /// Bytes the model had to read fresh under `lifetime`.
    #[must_use]
    pub fn fresh(&self, lifetime: Lifetime) -> usize {
        self.prompt_bytes - self.cached(lifetime)
    }
}

/// One earlier request.
#[derive(Debug)]
struct Entry {
    model: String,
    at: Duration,
    text: Vec<u8>,
}

/// Every request of the last hour (older ones can no longer be served under either lifetime).
#[derive(Debug, Default)]
pub struct CacheLedger {
    entries: Vec<Entry>,
}

impl CacheLedger {
    /// An empty ledger.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports what a request to `model` with prompt `text`, made at `now`, could have been
    /// served from cache, then records it (the provider processed it).
    pub fn observe(&mut self, model: &str, text: &[u8], now: Duration) -> CacheReport {
        let report = self.peek(model, text, now);
        self.entries.push(Entry {
            model: model.to_owned(),
            at: now,
            text: text.to_vec(),
        });
        report
    }

    /// Reports like [`CacheLedger::observe`] without recording the request (one the provider
    /// rejected, which caches nothing).
    pub fn peek(&mut self, model: &str, text: &[u8], now: Duration) -> CacheReport {
        let longest = Lifetime::OneHour.duration();
        self.entries.retain(|e| e.at + longest >= now);
        let mut report = CacheReport {
            prompt_bytes: text.len(),
            ..CacheReport::default()
        };
        for entry in self.entries.iter().filter(|e| e.model == model) {
            let shared = shared_prefix(&entry.text, text);
            let age = now.saturating_sub(entry.at);
            if age <= Lifetime::FiveMinutes.duration() {
                report.cached_5m = report.cached_5m.max(shared);
            }
            report.cached_1h = report.cached_1h.max(shared);
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn the_first_request_reads_everything_fresh() {
        let mut ledger = CacheLedger::new();
        let r = ledger.observe("m", b"system\ntools\nq1", Duration::ZERO);
        assert_eq!(r.prompt_bytes, 15);
        assert_eq!((r.cached_5m, r.cached_1h), (0, 0));
        assert_eq!(r.fresh(Lifetime::FiveMinutes), 15);
    }

    #[test]
    fn a_follow_up_a_minute_later_shares_the_whole_earlier_prompt() {
        let mut ledger = CacheLedger::new();
        ledger.observe("m", b"system\ntools\nq1", Duration::ZERO);
        let r = ledger.observe("m", b"system\ntools\nq1\na1\nq2", MIN);
        assert_eq!((r.cached_5m, r.cached_1h), (15, 15));
        assert_eq!(r.fresh(Lifetime::OneHour), 6);
    }

    #[test]
    fn after_fifteen_minutes_only_the_hour_cache_serves() {
        let mut ledger = CacheLedger::new();
        ledger.observe("m", b"system\ntools\nq1", Duration::ZERO);
        let r = ledger.observe("m", b"system\ntools\nq1\na1\nq2", 15 * MIN);
        assert_eq!((r.cached_5m, r.cached_1h), (0, 15));
        let later = ledger.observe("m", b"system\ntools\nq1\na1\nq2\na2\nq3", 76 * MIN);
        assert_eq!(
            (later.cached_5m, later.cached_1h),
            (0, 0),
            "an hour and more after the last use, nothing is left"
        );
    }

    #[test]
    fn a_hit_refreshes_the_shared_prefix() {
        let mut ledger = CacheLedger::new();
        ledger.observe("m", b"system\ntools\nq1", Duration::ZERO);
        // A title request at minute 4 shares the segment "system" and keeps it alive.
        ledger.observe("m", b"system\nhello", 4 * MIN);
        let r = ledger.observe("m", b"system\ntools\nq1\na1\nq2", 8 * MIN);
        assert_eq!(r.cached_5m, "system".len());
        assert_eq!(r.cached_1h, 15);
    }

    #[test]
    fn a_rejected_request_caches_nothing() {
        let mut ledger = CacheLedger::new();
        ledger.peek("m", b"system\ntools\nq1", Duration::ZERO);
        let r = ledger.observe("m", b"system\ntools\nq1", MIN);
        assert_eq!((r.cached_5m, r.cached_1h), (0, 0));
    }

    #[test]
    fn models_have_separate_caches() {
        let mut ledger = CacheLedger::new();
        ledger.observe("small", b"system\ntools\nq1", Duration::ZERO);
        let r = ledger.observe("big", b"system\ntools\nq1", Duration::ZERO);
        assert_eq!((r.cached_5m, r.cached_1h), (0, 0));
    }
}
