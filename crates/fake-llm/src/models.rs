//! The models the fake serves and their context windows. Pure.
//!
//! Two models are always listed: [`DEFAULT_MODEL`], which the tier configures every adapter
//! with, and [`LARGE_MODEL`], a second choice with a larger window, so an adapter can offer a
//! model switch. Any model a request names is served; one the catalogue does not list gets
//! the default limit. A request whose estimated input tokens exceed its model's limit is
//! answered the way the provider answers context overflow (see
//! [`protocol::context_overflow`](crate::protocol::context_overflow)).

use serde_json::{Value, json};

/// The model every adapter of the tier is configured with.
pub const DEFAULT_MODEL: &str = "fake-model";
/// A second model with a larger window.
pub const LARGE_MODEL: &str = "test-large";
/// The window of every model without a limit of its own, unless configured otherwise: the size
/// of today's common large windows.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 200_000;
/// The window of [`LARGE_MODEL`] unless configured otherwise.
pub const LARGE_CONTEXT_TOKENS: u64 = 1_000_000;
/// What the listing reports as a model's maximum output.
const MAX_OUTPUT_TOKENS: u64 = 32_000;
/// `created` / `created_at` of every listed model: fixed, so listings are deterministic.
const CREATED_UNIX: u64 = 1_767_225_600;
const CREATED_RFC3339: &str = "2026-01-01T00:00:00Z";

/// One listed model.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelSpec {
    /// The id requests name.
    id: String,
    /// Its own context window in (estimated) tokens; `None` follows the default limit.
    own_limit: Option<u64>,
}

/// The listed models and the limit of unlisted ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalogue {
    /// Listed models, in listing order.
    models: Vec<ModelSpec>,
    /// The window of models that have no limit of their own.
    default_limit: u64,
}

impl Default for Catalogue {
    fn default() -> Self {
        Self::new(DEFAULT_CONTEXT_TOKENS)
    }
}

impl Catalogue {
    /// [`DEFAULT_MODEL`] following `default_limit`, and [`LARGE_MODEL`] with
    /// [`LARGE_CONTEXT_TOKENS`].
    #[must_use]
    pub fn new(default_limit: u64) -> Self {
        Self {
            models: vec![
                ModelSpec {
                    id: DEFAULT_MODEL.to_owned(),
                    own_limit: None,
                },
                ModelSpec {
                    id: LARGE_MODEL.to_owned(),
                    own_limit: Some(LARGE_CONTEXT_TOKENS),
                },
            ],
            default_limit,
        }
    }

    /// Sets the window of every model without a limit of its own (the default model's, and
    /// that of any model the catalogue does not list).
    pub fn set_default_limit(&mut self, tokens: u64) {
        self.default_limit = tokens;
    }

    /// Gives `model` a window of its own, listing it if it is new.
    pub fn set_limit(&mut self, model: &str, tokens: u64) {
        match self.models.iter_mut().find(|s| s.id == model) {
            Some(spec) => spec.own_limit = Some(tokens),
            None => self.models.push(ModelSpec {
                id: model.to_owned(),
                own_limit: Some(tokens),
            }),
        }
    }

    /// The window of `model` (the default limit for an unlisted or missing model).
    #[must_use]
    pub fn limit_of(&self, model: Option<&str>) -> u64 {
        model
            .and_then(|m| self.models.iter().find(|s| s.id == m))
            .and_then(|s| s.own_limit)
            .unwrap_or(self.default_limit)
    }

    /// The listed model ids with their windows, in listing order.
    #[must_use]
    pub fn models(&self) -> Vec<(String, u64)> {
        self.models
            .iter()
            .map(|s| (s.id.clone(), self.limit(s)))
            .collect()
    }

    fn limit(&self, spec: &ModelSpec) -> u64 {
        spec.own_limit.unwrap_or(self.default_limit)
    }

    /// `GET /v1/models` in OpenAI's shape: `{"object": "list", "data": [{"id", "object":
    /// "model", "created", "owned_by"}]}`.
    #[must_use]
    pub fn openai_list(&self) -> Value {
        let data: Vec<Value> = self.models.iter().map(openai_model).collect();
        json!({"object": "list", "data": data})
    }

    /// `GET /v1/models` in Anthropic's shape: `{"data": [{"type": "model", "id",
    /// "display_name", "created_at", …}], "has_more", "first_id", "last_id"}`.
    #[must_use]
    pub fn anthropic_list(&self) -> Value {
        let data: Vec<Value> = self
            .models
            .iter()
            .map(|s| anthropic_model(s, self.limit(s)))
            .collect();
        json!({"data": data, "has_more": false,
            "first_id": self.models.first().map(|s| s.id.as_str()),
            "last_id": self.models.last().map(|s| s.id.as_str())})
    }

    /// `GET /v1/models/{id}` in OpenAI's shape, if listed.
    #[must_use]
    pub fn openai_get(&self, id: &str) -> Option<Value> {
        self.models.iter().find(|s| s.id == id).map(openai_model)
    }

    /// `GET /v1/models/{id}` in Anthropic's shape, if listed.
    #[must_use]
    pub fn anthropic_get(&self, id: &str) -> Option<Value> {
        self.models
            .iter()
            .find(|s| s.id == id)
            .map(|s| anthropic_model(s, self.limit(s)))
    }
}

fn openai_model(spec: &ModelSpec) -> Value {
    json!({"id": spec.id, "object": "model", "created": CREATED_UNIX, "owned_by": "fake-llm"})
}

fn anthropic_model(spec: &ModelSpec, limit: u64) -> Value {
    json!({"type": "model", "id": spec.id, "display_name": display_name(&spec.id),
        "created_at": CREATED_RFC3339, "max_input_tokens": limit,
        "max_tokens": MAX_OUTPUT_TOKENS})
}

/// `fake-model` → `Fake Model`.
fn display_name(id: &str) -> String {
    id.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_two_models_in_each_shape() {
        let catalogue = Catalogue::default();
        let openai = catalogue.openai_list();
        assert_eq!(openai["object"], "list");
        assert_eq!(openai["data"][0]["id"], DEFAULT_MODEL);
        assert_eq!(openai["data"][1]["id"], LARGE_MODEL);
        assert_eq!(openai["data"][1]["object"], "model");
        let anthropic = catalogue.anthropic_list();
        assert_eq!(anthropic["data"][0]["type"], "model");
        assert_eq!(anthropic["data"][0]["display_name"], "Fake Model");
        assert_eq!(
            anthropic["data"][1]["max_input_tokens"],
            LARGE_CONTEXT_TOKENS
        );
        assert_eq!(anthropic["first_id"], DEFAULT_MODEL);
        assert_eq!(anthropic["last_id"], LARGE_MODEL);
        assert_eq!(anthropic["has_more"], false);
        assert!(catalogue.openai_get("nope").is_none());
        assert_eq!(
            catalogue.anthropic_get(LARGE_MODEL).unwrap()["id"],
            LARGE_MODEL
        );
    }

    #[test]
    fn limits_per_model_and_by_default() {
        let mut catalogue = Catalogue::new(5_000);
        assert_eq!(catalogue.limit_of(Some(DEFAULT_MODEL)), 5_000);
        assert_eq!(catalogue.limit_of(Some("claude-haiku")), 5_000);
        assert_eq!(catalogue.limit_of(None), 5_000);
        assert_eq!(catalogue.limit_of(Some(LARGE_MODEL)), LARGE_CONTEXT_TOKENS);
        catalogue.set_default_limit(7_000);
        assert_eq!(catalogue.limit_of(Some(DEFAULT_MODEL)), 7_000);
        assert_eq!(catalogue.limit_of(Some("other")), 7_000);
        catalogue.set_limit("tiny", 10);
        catalogue.set_limit(LARGE_MODEL, 20);
        assert_eq!(catalogue.limit_of(Some("tiny")), 10);
        assert_eq!(catalogue.limit_of(Some(LARGE_MODEL)), 20);
        assert_eq!(catalogue.models().len(), 3);
    }
}
