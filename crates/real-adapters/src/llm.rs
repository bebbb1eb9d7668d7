//! The fake LLM on a runtime of its own, so synchronous tests and tools can use it.

use std::path::{Path, PathBuf};

use fake_llm::FakeLlm;
use fake_llm::server::RunningFakeLlm;

use crate::adapter::TierError;

/// A fake LLM serving on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct Llm {
    // Field order matters: the server task is aborted before its runtime shuts down.
    server: RunningFakeLlm,
    _runtime: tokio::runtime::Runtime,
    log: PathBuf,
}

impl Llm {
    /// Starts the fake LLM on a free port, logging every completion request to `log`.
    ///
    /// # Errors
    ///
    /// [`TierError::Scenario`] when the runtime or the server cannot start.
    pub fn start(log: &Path) -> Result<Self, TierError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            TierError::Scenario(format!("fake LLM: {what}: {e}"))
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| fail("runtime", &e))?;
        let server = runtime.block_on(async {
            let bound = FakeLlm::bind(0, Some(log))
                .await
                .map_err(|e| fail("bind", &e))?;
            bound.spawn().map_err(|e| fail("spawn", &e))
        })?;
        Ok(Self {
            server,
            _runtime: runtime,
            log: log.to_path_buf(),
        })
    }

    /// `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// Pushes the fake LLM's clock ahead by `by`: an idle gap as its prompt cache sees it.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.server.advance_clock(by);
    }

    /// Sets the context window of `model` (with `None`: of every model without its own), so a
    /// conversation can be driven into overflow.
    pub fn set_context_limit(&self, model: Option<&str>, tokens: u64) {
        self.server.set_context_limit(model, tokens);
    }

    /// Every completion request so far.
    ///
    /// # Errors
    ///
    /// [`TierError::Scenario`] when the log cannot be read.
    pub fn requests(&self) -> Result<Vec<fake_llm::RequestRecord>, TierError> {
        fake_llm::read_log(&self.log).map_err(|e| TierError::Scenario(e.to_string()))
    }
}
