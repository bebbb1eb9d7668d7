//! Token usage as each provider reports it, from the estimate of [`prompt`](crate::prompt) and
//! the cache report of [`cache`](crate::cache). Pure.
//!
//! The three APIs count the same thing differently:
//!
//! * **Anthropic Messages** splits the input in three disjoint parts: `cache_read_input_tokens`
//!   (served from cache), `cache_creation_input_tokens` (written to cache: from the end of the
//!   cached part to the last `cache_control` breakpoint) and `input_tokens` (the rest, after the
//!   last breakpoint). Without a breakpoint nothing is read or written. `cache_creation` splits
//!   the written tokens by lifetime (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`).
//! * **OpenAI Responses**: `input_tokens` is the whole input, `input_tokens_details.cached_tokens`
//!   the part of it served from cache; `total_tokens` is input plus output.
//! * **Chat Completions**: the same with `prompt_tokens`, `prompt_tokens_details.cached_tokens`,
//!   `completion_tokens`.
//!
//! The cached part is what [`CacheReport`] says a cache of the request's lifetime could have
//! served (Anthropic: only up to the last breakpoint), so the numbers an adapter sees agree
//! with the request log.

use serde_json::{Value, json};

use crate::cache::CacheReport;
use crate::prompt::{Api, Lifetime, Prompt, tokens};

/// One request's usage, in estimated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Every input token of the prompt (cached or not).
    pub input_tokens: u64,
    /// Input tokens served from cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to cache (Anthropic only).
    pub cache_write_tokens: u64,
    /// The lifetime the written tokens are cached for.
    pub cache_write_lifetime: Lifetime,
    /// Tokens of the reply.
    pub output_tokens: u64,
}

impl Usage {
    /// The usage of a request to `api` with `prompt`, whose cache report is `cache` and whose
    /// reply text is `output_bytes` long.
    #[must_use]
    pub fn of(api: Api, prompt: &Prompt, cache: &CacheReport, output_bytes: usize) -> Self {
        let cached = cache.cached(prompt.lifetime);
        let (read, written) = match api {
            Api::Anthropic => match prompt.breakpoint_end {
                Some(end) => {
                    let read = cached.min(end);
                    (read, end - read)
                }
                None => (0, 0),
            },
            Api::Responses | Api::Chat => (cached, 0),
        };
        Self {
            input_tokens: prompt.tokens(),
            cache_read_tokens: tokens(read),
            cache_write_tokens: tokens(written),
            cache_write_lifetime: prompt.lifetime,
            output_tokens: tokens(output_bytes),
        }
    }

    /// Input tokens neither read from nor written to cache.
    #[must_use]
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read_tokens + self.cache_write_tokens)
    }

    /// Anthropic's `usage` object (a complete message, or `message_delta`'s cumulative usage).
    #[must_use]
    pub fn anthropic(&self) -> Value {
        self.anthropic_with_output(self.output_tokens)
    }

    /// Anthropic's `usage` in `message_start`: the input is known, the output has just begun.
    #[must_use]
    pub fn anthropic_start(&self) -> Value {
        self.anthropic_with_output(self.output_tokens.min(1))
    }

    fn anthropic_with_output(&self, output_tokens: u64) -> Value {
        let (five_minutes, one_hour) = match self.cache_write_lifetime {
            Lifetime::FiveMinutes => (self.cache_write_tokens, 0),
            Lifetime::OneHour => (0, self.cache_write_tokens),
        };
        json!({"input_tokens": self.uncached_input_tokens(),
            "cache_creation_input_tokens": self.cache_write_tokens,
            "cache_read_input_tokens": self.cache_read_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": five_minutes,
                "ephemeral_1h_input_tokens": one_hour},
            "output_tokens": output_tokens})
    }

    /// The Responses API's `usage` object.
    #[must_use]
    pub fn responses(&self) -> Value {
        json!({"input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cache_read_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens})
    }

    /// Chat Completions' `usage` object.
    #[must_use]
    pub fn chat(&self) -> Value {
        json!({"prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::RequestKind;

    fn prompt(len: usize, breakpoint_end: Option<usize>, lifetime: Lifetime) -> Prompt {
        Prompt {
            text: vec![b'x'; len],
            breakpoint_end,
            lifetime,
            kind: RequestKind::Turn,
        }
    }

    fn report(prompt_bytes: usize, cached_5m: usize, cached_1h: usize) -> CacheReport {
        CacheReport {
            prompt_bytes,
            cached_5m,
            cached_1h,
        }
    }

    #[test]
    fn anthropic_splits_read_written_and_the_rest() {
        // 4000 bytes, a breakpoint at 3600, 2000 bytes cached for five minutes.
        let p = prompt(4000, Some(3600), Lifetime::FiveMinutes);
        let usage = Usage::of(Api::Anthropic, &p, &report(4000, 2000, 3000), 40);
        assert_eq!(usage.input_tokens, 1000);
        assert_eq!(usage.cache_read_tokens, 500);
        assert_eq!(usage.cache_write_tokens, 400);
        assert_eq!(usage.uncached_input_tokens(), 100);
        let json = usage.anthropic();
        assert_eq!(json["input_tokens"], 100);
        assert_eq!(json["cache_read_input_tokens"], 500);
        assert_eq!(json["cache_creation_input_tokens"], 400);
        assert_eq!(json["cache_creation"]["ephemeral_5m_input_tokens"], 400);
        assert_eq!(json["output_tokens"], 10);
        assert_eq!(usage.anthropic_start()["output_tokens"], 1);
    }

    #[test]
    fn anthropic_one_hour_markers_use_the_hour_cache() {
        let p = prompt(4000, Some(4000), Lifetime::OneHour);
        let usage = Usage::of(Api::Anthropic, &p, &report(4000, 0, 2000), 0);
        assert_eq!(usage.cache_read_tokens, 500);
        assert_eq!(
            usage.anthropic()["cache_creation"]["ephemeral_1h_input_tokens"],
            500
        );
    }

    #[test]
    fn anthropic_without_a_breakpoint_caches_nothing() {
        let p = prompt(400, None, Lifetime::FiveMinutes);
        let usage = Usage::of(Api::Anthropic, &p, &report(400, 400, 400), 4);
        assert_eq!(usage.anthropic()["input_tokens"], 100);
        assert_eq!(usage.anthropic()["cache_read_input_tokens"], 0);
    }

    #[test]
    fn openai_counts_cached_tokens_inside_the_input() {
        let p = prompt(4000, None, Lifetime::FiveMinutes);
        let usage = Usage::of(Api::Responses, &p, &report(4000, 3000, 3000), 8);
        let responses = usage.responses();
        assert_eq!(responses["input_tokens"], 1000);
        assert_eq!(responses["input_tokens_details"]["cached_tokens"], 750);
        assert_eq!(responses["total_tokens"], 1002);
        let chat = Usage::of(Api::Chat, &p, &report(4000, 0, 3000), 8).chat();
        assert_eq!(chat["prompt_tokens"], 1000);
        assert_eq!(chat["prompt_tokens_details"]["cached_tokens"], 0);
        assert_eq!(chat["completion_tokens"], 2);
    }
}
