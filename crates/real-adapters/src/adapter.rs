//! The adapters of the tier and the throw-away home each agent runs in.
//!
//! Every agent gets its own `HOME` (and `CODEX_HOME`, XDG directories) under a temporary root,
//! with the configuration that points it at the fake LLM, so nothing reads or writes the user's
//! real configuration and a test can delete an agent's session storage on purpose.

use std::fmt;
use std::path::{Path, PathBuf};

use buzz_acp::testing::AGENT_CWD;

/// Why the tier cannot run a scenario.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// An adapter is not installed where expected.
    #[error("{adapter} is not installed: {} is missing (run scripts/install-adapters)", path.display())]
    NotInstalled {
        /// The adapter.
        adapter: Adapter,
        /// The file that should be there.
        path: PathBuf,
    },
    /// A harness binary is missing.
    #[error("{what} is missing at {} ({hint})", path.display())]
    MissingBinary {
        /// Which binary.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to build it.
        hint: &'static str,
    },
    /// Preparing or cleaning an agent home failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A scenario step did not happen.
    #[error("{0}")]
    Scenario(String),
}

/// A real ACP adapter pinned in `tools/adapters/package-lock.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `@zed-industries/codex-acp` 0.16.0 (OpenAI Responses API).
    Codex,
    /// opencode 1.18.33 in ACP mode (`opencode acp`; Chat Completions through a custom provider).
    Opencode,
    /// `@agentclientprotocol/claude-agent-acp` 0.101.0 (Anthropic Messages API).
    Claude,
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The model name every adapter is configured with; the fake LLM accepts any.
pub const FAKE_MODEL: &str = fake_llm::models::DEFAULT_MODEL;
/// The fake LLM's second model, offered by the adapters that can list it (opencode from its
/// provider configuration, claude-agent-acp as its custom model option; codex-acp takes any
/// name), so a session can switch models in place.
pub const LARGE_MODEL: &str = fake_llm::models::LARGE_MODEL;

impl Adapter {
    /// Every adapter of the tier.
    pub const ALL: [Adapter; 3] = [Adapter::Codex, Adapter::Opencode, Adapter::Claude];

    /// The adapter's short name (also its `--adapter` value in the tools).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Codex => "codex-acp",
            Self::Opencode => "opencode",
            Self::Claude => "claude-agent-acp",
        }
    }

    /// Parses [`Adapter::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The installed entry point, relative to the install directory, and whether it runs
    /// under `node`.
    fn entry(self) -> (&'static str, bool) {
        match self {
            Self::Codex => (
                "node_modules/@zed-industries/codex-acp/bin/codex-acp.js",
                true,
            ),
            Self::Opencode => ("node_modules/opencode-linux-x64/bin/opencode", false),
            Self::Claude => (
                "node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js",
                true,
            ),
        }
    }
}

/// Creates the fixed cwd the scenarios hand agents ([`AGENT_CWD`], so wire logs are stable):
/// real agents need it to exist.
///
/// # Errors
///
/// [`TierError::Io`] when it cannot be created.
pub fn create_agent_cwd() -> Result<(), TierError> {
    std::fs::create_dir_all(AGENT_CWD).map_err(|source| TierError::Io {
        action: "creating the scenario cwd",
        path: PathBuf::from(AGENT_CWD),
        source,
    })
}

/// Where `scripts/install-adapters` put the adapters: `$BUZZ_ADAPTERS_DIR`, or `target/adapters`
/// of this workspace (which that script points at its install in the cache outside the clone).
#[must_use]
pub fn install_dir() -> PathBuf {
    std::env::var_os("BUZZ_ADAPTERS_DIR").map_or_else(
        || crate::workspace::root().join("target/adapters"),
        PathBuf::from,
    )
}

/// One agent's throw-away home and the command line that runs the adapter in it.
#[derive(Debug, Clone)]
pub struct AgentHome {
    /// Which adapter.
    pub adapter: Adapter,
    /// `HOME` of the agent.
    pub home: PathBuf,
    /// Environment given to the agent (on top of the harness's own).
    pub env: Vec<(String, String)>,
    /// The program and its arguments.
    pub argv: Vec<String>,
}

impl AgentHome {
    /// Lays out `root` as the agent's home, configured to call the fake LLM at `llm_base_url`
    /// (`http://127.0.0.1:PORT`), and checks that the adapter is installed in `install`.
    ///
    /// # Errors
    ///
    /// [`TierError::NotInstalled`], or [`TierError::Io`] when the home cannot be written.
    pub fn prepare(
        adapter: Adapter,
        install: &Path,
        root: &Path,
        llm_base_url: &str,
    ) -> Result<Self, TierError> {
        let (entry, via_node) = adapter.entry();
        let entry = install.join(entry);
        if !entry.exists() {
            return Err(TierError::NotInstalled {
                adapter,
                path: entry,
            });
        }
        let home = root.join("home");
        let xdg = |name: &str| home.join(name).display().to_string();
        let mut env = vec![
            ("HOME".to_owned(), home.display().to_string()),
            ("XDG_CONFIG_HOME".to_owned(), xdg(".config")),
            ("XDG_DATA_HOME".to_owned(), xdg(".local/share")),
            ("XDG_STATE_HOME".to_owned(), xdg(".local/state")),
            ("XDG_CACHE_HOME".to_owned(), xdg(".cache")),
        ];
        match adapter {
            Adapter::Codex => {
                let codex_home = home.join(".codex");
                write(&codex_home.join("config.toml"), &codex_config(llm_base_url))?;
                env.push(("CODEX_HOME".to_owned(), codex_home.display().to_string()));
            }
            Adapter::Opencode => {
                let config = home.join(".config/opencode/opencode.json");
                write(&config, &opencode_config(llm_base_url))?;
                env.extend(
                    [
                        ("OPENCODE_CONFIG", config.display().to_string()),
                        ("OPENCODE_DISABLE_MODELS_FETCH", "true".to_owned()),
                        ("OPENCODE_DISABLE_AUTOUPDATE", "true".to_owned()),
                        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "true".to_owned()),
                    ]
                    .map(|(k, v)| (k.to_owned(), v)),
                );
            }
            Adapter::Claude => {
                std::fs::create_dir_all(&home).map_err(|source| TierError::Io {
                    action: "creating",
                    path: home.clone(),
                    source,
                })?;
                env.extend(
                    [
                        // As root, claude refuses its permission bypass unless told it is sandboxed.
                        ("IS_SANDBOX", "1"),
                        ("ANTHROPIC_BASE_URL", llm_base_url),
                        ("ANTHROPIC_API_KEY", "sk-ant-fake-offline"),
                        ("ANTHROPIC_MODEL", FAKE_MODEL),
                        // Offered in the model select next to the built-in aliases.
                        ("ANTHROPIC_CUSTOM_MODEL_OPTION", LARGE_MODEL),
                        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                        ("DISABLE_AUTOUPDATER", "1"),
                    ]
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
                );
            }
        }
        let mut argv = Vec::new();
        if via_node {
            argv.push("node".to_owned());
        }
        argv.push(entry.display().to_string());
        if adapter == Adapter::Opencode {
            argv.push("acp".to_owned());
        }
        Ok(Self {
            adapter,
            home,
            env,
            argv,
        })
    }

    /// The `--agent-command` for buzz-acp: `NAME=value … program args`, quoted for the SDK's
    /// shell-words parser.
    #[must_use]
    pub fn command(&self) -> String {
        self.env
            .iter()
            .map(|(k, v)| format!("{k}={}", quote(v)))
            .chain(self.argv.iter().map(|a| quote(a)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The directories holding the adapter's sessions (transcripts, rollouts, database).
    #[must_use]
    pub fn session_storage(&self) -> Vec<PathBuf> {
        match self.adapter {
            Adapter::Codex => vec![
                self.home.join(".codex/sessions"),
                self.home.join(".codex/archived_sessions"),
            ],
            Adapter::Opencode => vec![self.home.join(".local/share/opencode")],
            Adapter::Claude => vec![self.home.join(".claude/projects")],
        }
    }

    /// Deletes every stored session: the agent has "lost" them. Returns how many of the storage
    /// directories existed (a test checks that it deleted something real).
    ///
    /// # Errors
    ///
    /// [`TierError::Io`] when a directory cannot be removed.
    pub fn lose_all_sessions(&self) -> Result<usize, TierError> {
        let mut removed = 0;
        for dir in self.session_storage() {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(TierError::Io {
                        action: "removing",
                        path: dir,
                        source,
                    });
                }
            }
        }
        Ok(removed)
    }
}

/// Writes `text` to `path`, creating its directory.
fn write(path: &Path, text: &str) -> Result<(), TierError> {
    let io = |action, source| TierError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    }
    std::fs::write(path, text).map_err(|e| io("writing", e))
}

/// codex: a custom model provider on the Responses API, without retries (a failure should show,
/// not be retried for half a minute).
fn codex_config(base_url: &str) -> String {
    format!(
        "model = \"{FAKE_MODEL}\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\n\
         name = \"fake-llm\"\nbase_url = \"{base_url}/v1\"\nwire_api = \"responses\"\n\
         request_max_retries = 0\nstream_max_retries = 0\n"
    )
}

/// opencode: a custom OpenAI-compatible provider (Chat Completions), used for the main and the
/// small (title) model, with sharing and updates off. Both models of the fake LLM are listed
/// with the fake's context windows: opencode only reports `usage_update` (and compacts on its
/// own) for a model whose window it knows.
fn opencode_config(base_url: &str) -> String {
    use fake_llm::models::{DEFAULT_CONTEXT_TOKENS, LARGE_CONTEXT_TOKENS};
    let model = |name: &str, context: u64| {
        serde_json::json!({"name": name,
            "limit": {"context": context, "output": OPENCODE_OUTPUT_TOKENS}})
    };
    serde_json::json!({
        "model": format!("fake/{FAKE_MODEL}"),
        "small_model": format!("fake/{FAKE_MODEL}"),
        "autoupdate": false,
        "share": "disabled",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "fake-llm",
                "options": {"baseURL": format!("{base_url}/v1"), "apiKey": "fake-key"},
                "models": {
                    FAKE_MODEL: model(FAKE_MODEL, DEFAULT_CONTEXT_TOKENS),
                    LARGE_MODEL: model(LARGE_MODEL, LARGE_CONTEXT_TOKENS)
                }
            }
        }
    })
    .to_string()
}

/// The output reserve opencode is told for each model.
const OPENCODE_OUTPUT_TOKENS: u64 = 32_000;

/// Single-quotes `s` unless it is plainly safe.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepares_each_home_and_quotes_the_command() {
        let install = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        for adapter in Adapter::ALL {
            let missing = AgentHome::prepare(adapter, install.path(), root.path(), "http://x");
            assert!(matches!(missing, Err(TierError::NotInstalled { .. })));
            let entry = install.path().join(adapter.entry().0);
            std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
            std::fs::write(&entry, "").unwrap();
            let home = AgentHome::prepare(
                adapter,
                install.path(),
                &root.path().join(adapter.name()),
                "http://127.0.0.1:9",
            )
            .unwrap();
            let command = home.command();
            assert!(command.starts_with("HOME="), "{command}");
            assert!(command.contains(adapter.entry().0), "{command}");
            assert_eq!(Adapter::from_name(adapter.name()), Some(adapter));
        }
        let codex =
            std::fs::read_to_string(root.path().join("codex-acp/home/.codex/config.toml")).unwrap();
        assert!(codex.contains("base_url = \"http://127.0.0.1:9/v1\""));
        let opencode: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                root.path()
                    .join("opencode/home/.config/opencode/opencode.json"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            opencode["provider"]["fake"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(
            opencode["provider"]["fake"]["models"][LARGE_MODEL]["limit"]["context"],
            fake_llm::models::LARGE_CONTEXT_TOKENS
        );
        assert_eq!(quote("a b'c"), "'a b'\\''c'");
        assert_eq!(quote(""), "''");
    }
}
