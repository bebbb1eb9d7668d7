//! Test support for crates that drive `acp-test-agent`: reading its wire log, querying it, turning
//! it into a snapshot-stable JSON view, and locating workspace binaries.
//!
//! The wire log is what the *agent* received, one [`WireFrame`] per line, so a test can assert
//! what a client under test actually put on the wire (which methods, in which order, how many
//! bytes of prompt it re-sent after a restart, ...) without instrumenting the client.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What kind of JSON-RPC message a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// A request (has `method` and `id`); from the client unless the frame was sent.
    Request,
    /// A notification (has `method`, no `id`); from the client unless the frame was sent.
    Notification,
    /// A response: the client's to a request the agent sent (e.g.
    /// `session/request_permission`), or, for a sent frame, the agent's.
    Response,
}

/// Which way a frame went, seen from the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The client wrote it and the agent read it (every frame of a log written without
    /// `--wire-log-sent`).
    #[default]
    Received,
    /// The agent wrote it (`--wire-log-sent`).
    Sent,
}

impl Direction {
    fn is_received(&self) -> bool {
        *self == Direction::Received
    }
}

/// One line of the wire log: one JSON-RPC message the agent received (or, with
/// `--wire-log-sent`, wrote).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireFrame {
    /// Unix time in milliseconds when the agent read the line.
    pub ts_ms: u64,
    /// Process id of the agent that received it (several agents may share one log).
    pub pid: u32,
    /// Request, notification or response.
    pub kind: FrameKind,
    /// The method; `None` for responses.
    pub method: Option<String>,
    /// The JSON-RPC id; `None` for notifications.
    pub id: Option<Value>,
    /// Length in bytes of the raw line as received (without its newline). For a batch, every
    /// element carries the length of the whole line.
    pub bytes: u64,
    /// The `params` of a request or notification, or the `result` / `error` of a response
    /// (`null` when absent).
    pub params: Value,
    /// Which way the frame went; absent (received) in logs written before the field existed.
    #[serde(default, skip_serializing_if = "Direction::is_received")]
    pub direction: Direction,
    /// For a response: `params` holds its `error` rather than its `result`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

/// Why the wire log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The file exists but could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The wire log path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A line is not a valid [`WireFrame`].
    #[error("{}:{line}: malformed wire frame: {source}", path.display())]
    Malformed {
        /// The wire log path.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// Reads a wire log. A missing file is an empty log (the agent never received anything, or was
/// never started), which is what a test usually wants to assert on rather than fail on.
///
/// # Errors
///
/// [`HarnessError::Io`] if the file cannot be read, [`HarnessError::Malformed`] naming the first
/// bad line.
pub fn read_wire_log(path: impl AsRef<Path>) -> Result<Vec<WireFrame>, HarnessError> {
    let path = path.as_ref();
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(HarnessError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|source| HarnessError::Malformed {
                path: path.to_owned(),
                line: index + 1,
                source,
            })
        })
        .collect()
}

/// The methods of the requests and notifications, in order (responses have none and are skipped).
#[must_use]
pub fn methods(frames: &[WireFrame]) -> Vec<String> {
    frames.iter().filter_map(|f| f.method.clone()).collect()
}

/// How many requests or notifications of `method` were received.
#[must_use]
pub fn count_method(frames: &[WireFrame], method: &str) -> usize {
    frames
        .iter()
        .filter(|f| f.method.as_deref() == Some(method))
        .count()
}

/// The requests of `method`, in order.
#[must_use]
pub fn requests_of<'a>(frames: &'a [WireFrame], method: &str) -> Vec<&'a WireFrame> {
    frames
        .iter()
        .filter(|f| f.kind == FrameKind::Request && f.method.as_deref() == Some(method))
        .collect()
}

/// `(sessionId, text)` of every `session/prompt` request, the text being the prompt's text
/// blocks joined with `\n` (exactly what the agent records as the user turn).
#[must_use]
pub fn prompt_texts(frames: &[WireFrame]) -> Vec<(String, String)> {
    requests_of(frames, "session/prompt")
        .into_iter()
        .map(|frame| {
            let session_id = frame.params["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let text = frame.params["prompt"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter(|b| b["type"] == "text")
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            (session_id, text)
        })
        .collect()
}

/// A snapshot-stable view of a wire log.
///
/// Per frame it keeps `pid`, `kind`, `method`, `bytes` and `params`, and:
/// - drops `ts_ms` and the JSON-RPC `id` (UUIDs chosen by the client);
/// - renames pids to `agent-1`, `agent-2`, ... in order of first appearance;
/// - renames session ids (the values of `sessionId` fields, and those ids wherever they occur
///   inside any string) to `session-1`, `session-2`, ... in order of first appearance;
/// - replaces the values of `requestId` fields (`$/cancel_request`, client-chosen UUIDs) with
///   `<request-id>`;
/// - replaces each `roots` path (and its canonical form, which differs when the temp dir sits
///   behind a symlink) occurring inside strings with its placeholder, e.g. `(tmp, "<tmp>")`.
///
/// - writes `<harness version>` for the version the harness names in `initialize`
///   (`clientInfo.version`, or `info.version` in the v2 shape), and leaves that frame's `bytes`
///   out, so a release of the harness does not change every snapshot.
///
/// `bytes` is otherwise kept as recorded: it is deterministic when the inputs are, even though
/// the ids it counted are gone.
#[must_use]
pub fn normalize_wire_log(frames: &[WireFrame], roots: &[(&Path, &str)]) -> Value {
    let mut session_ids: Vec<String> = Vec::new();
    for frame in frames {
        collect_session_ids(&frame.params, &mut session_ids);
    }
    let mut replacements: Vec<(String, String)> = session_ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), format!("session-{}", i + 1)))
        .collect();
    for (root, placeholder) in roots {
        let mut forms = vec![root.to_string_lossy().into_owned()];
        if let Ok(canonical) = root.canonicalize() {
            forms.push(canonical.to_string_lossy().into_owned());
        }
        for form in forms {
            if !form.is_empty() && !replacements.iter().any(|(from, _)| *from == form) {
                replacements.push((form, (*placeholder).to_owned()));
            }
        }
    }
    // Longest first, so an id or path that contains another is replaced as a whole.
    replacements.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));

    let mut agents: HashMap<u32, String> = HashMap::new();
    let normalized = frames
        .iter()
        .map(|frame| {
            let next = format!("agent-{}", agents.len() + 1);
            let agent = agents.entry(frame.pid).or_insert(next).clone();
            let mut out = Map::new();
            out.insert("pid".into(), Value::String(agent));
            out.insert(
                "kind".into(),
                serde_json::to_value(frame.kind).unwrap_or(Value::Null),
            );
            out.insert(
                "method".into(),
                frame.method.clone().map_or(Value::Null, Value::String),
            );
            let mut params = rewrite(&frame.params, &replacements);
            // The harness names its own version in `initialize`; a release must not change
            // every snapshot, so it reads `<harness version>` and that frame's size is left out.
            let mut names_version = false;
            if frame.method.as_deref() == Some("initialize") {
                for path in ["/info/version", "/clientInfo/version"] {
                    if let Some(version) = params.pointer_mut(path) {
                        *version = Value::String("<harness version>".into());
                        names_version = true;
                    }
                }
            }
            if !names_version {
                out.insert("bytes".into(), Value::from(frame.bytes));
            }
            out.insert("params".into(), params);
            Value::Object(out)
        })
        .collect();
    Value::Array(normalized)
}

/// Appends the string values of `sessionId` fields found anywhere in `value` to `seen`, in
/// document order, skipping ids already seen.
fn collect_session_ids(value: &Value, seen: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match child {
                    Value::String(id) if key == "sessionId" => {
                        if !seen.contains(id) {
                            seen.push(id.clone());
                        }
                    }
                    _ => collect_session_ids(child, seen),
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| collect_session_ids(item, seen)),
        _ => {}
    }
}

/// `value` with every replacement applied inside strings and `requestId` values masked.
fn rewrite(value: &Value, replacements: &[(String, String)]) -> Value {
    match value {
        Value::String(s) => {
            let mut s = s.clone();
            for (from, to) in replacements {
                if s.contains(from.as_str()) {
                    s = s.replace(from.as_str(), to);
                }
            }
            Value::String(s)
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| rewrite(v, replacements)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, child)| {
                    let child = if key == "requestId" {
                        Value::String("<request-id>".into())
                    } else {
                        rewrite(child, replacements)
                    };
                    (key.clone(), child)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The path of workspace binary `name` for a test running from another package.
///
/// Cargo only exposes `CARGO_BIN_EXE_*` for the package's own binaries; a test in another crate
/// finds ours next to its own test executable: `current_exe()` is `<target>/<profile>/deps/<test>`,
/// so the binary is `<target>/<profile>/<name>`.
///
/// When the test runs under cargo (`CARGO` is set), the binary is first brought up to date with
/// `cargo build --workspace --bin <name>` in the same target directory and profile, once per test
/// process: `cargo test -p some-crate` alone does not rebuild other packages' binaries, and a
/// stale agent binary would make tests pass or fail for the wrong reason.
///
/// # Panics
///
/// If the build fails or the binary is not there, with the command that builds it. This is test
/// support: a clear panic is the right failure.
#[must_use]
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot locate the running test executable: {e}"));
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("unexpected test executable location {}", exe.display()));
    ensure_built(name, profile_dir);
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "binary {} not found; build it first with `cargo build --bin {name}` \
         (same profile and target dir as the tests)",
        path.display()
    );
    path
}

/// Runs `cargo build --workspace --bin <name>` once per process and binary name.
fn ensure_built(name: &str, profile_dir: &Path) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let Ok(cargo) = std::env::var("CARGO") else {
        return;
    };
    let (Some(target_dir), Some(dir_name)) = (
        profile_dir.parent(),
        profile_dir.file_name().and_then(|n| n.to_str()),
    ) else {
        return;
    };
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.insert(name.to_string()) {
        return;
    }
    // Cargo names the output directory of the `dev` profile `debug`.
    let profile = if dir_name == "debug" { "dev" } else { dir_name };
    let mut cmd = std::process::Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "--workspace",
        "--bin",
        name,
        "--profile",
        profile,
    ])
    .env("CARGO_TARGET_DIR", target_dir);
    if let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        cmd.current_dir(manifest_dir);
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {name}: {e}"));
    assert!(
        output.status.success(),
        "building {name} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `acp-test-agent` binary, for tests in other workspace crates.
///
/// # Panics
///
/// See [`bin_path`].
#[must_use]
pub fn test_agent_bin() -> PathBuf {
    bin_path("acp-test-agent")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(pid: u32, kind: FrameKind, method: Option<&str>, params: Value) -> WireFrame {
        WireFrame {
            ts_ms: 1,
            pid,
            kind,
            method: method.map(Into::into),
            id: Some(json!("x")),
            bytes: 10,
            params,
            direction: Direction::Received,
            error: false,
        }
    }

    #[test]
    fn read_reports_line_numbers_and_tolerates_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        assert!(read_wire_log(&path).unwrap().is_empty());
        let good =
            serde_json::to_string(&frame(1, FrameKind::Request, Some("m"), json!({}))).unwrap();
        fs::write(&path, format!("{good}\n{good}\n{{\"ts_ms\":1}}\n")).unwrap();
        let err = read_wire_log(&path).unwrap_err();
        assert!(
            matches!(err, HarnessError::Malformed { line: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn normalization_renames_ids_pids_and_roots() {
        let frames = vec![
            frame(
                77,
                FrameKind::Request,
                Some("session/new"),
                json!({"cwd": "/tmp/abc/w"}),
            ),
            frame(
                77,
                FrameKind::Request,
                Some("session/prompt"),
                json!({"sessionId": "ts-b", "x": "see ts-a"}),
            ),
            frame(
                99,
                FrameKind::Notification,
                Some("session/cancel"),
                json!({"sessionId": "ts-a"}),
            ),
            frame(
                99,
                FrameKind::Notification,
                Some("$/cancel_request"),
                json!({"requestId": "u-1"}),
            ),
            frame(99, FrameKind::Response, None, json!({"outcome": "ts-b"})),
        ];
        let view = normalize_wire_log(&frames, &[(Path::new("/tmp/abc"), "<tmp>")]);
        assert_eq!(
            view,
            json!([
                {"pid": "agent-1", "kind": "request", "method": "session/new", "bytes": 10, "params": {"cwd": "<tmp>/w"}},
                {"pid": "agent-1", "kind": "request", "method": "session/prompt", "bytes": 10, "params": {"sessionId": "session-1", "x": "see session-2"}},
                {"pid": "agent-2", "kind": "notification", "method": "session/cancel", "bytes": 10, "params": {"sessionId": "session-2"}},
                {"pid": "agent-2", "kind": "notification", "method": "$/cancel_request", "bytes": 10, "params": {"requestId": "<request-id>"}},
                {"pid": "agent-2", "kind": "response", "method": null, "bytes": 10, "params": {"outcome": "session-1"}},
            ])
        );
    }

    #[test]
    fn prompt_texts_join_text_blocks() {
        let frames = vec![frame(
            1,
            FrameKind::Request,
            Some("session/prompt"),
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "a"}, {"type": "image", "data": "", "mimeType": "x"}, {"type": "text", "text": "b"}]}),
        )];
        assert_eq!(prompt_texts(&frames), [("s".to_owned(), "a\nb".to_owned())]);
        assert_eq!(methods(&frames), ["session/prompt"]);
        assert_eq!(count_method(&frames, "session/prompt"), 1);
    }
}
