//! The README's "Running the patched harness yourself" commands, run as
//! written from the repository root: `apply`, the cargo build, then the
//! binary with `--once` on a relay this test starts (the fork's test relay: a
//! NIP-42 websocket and the NIP-98 REST bridge), where the agent belongs to
//! no channel yet. Then cargo itself confirms that
//! the binary the last line ran is the artifact of that build.
//!
//! It builds the patched harness, so it is ignored by `cargo test` and run by
//! `scripts/test` after `scripts/fork verify` (whose builds it reuses).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The first ```sh block of the README section titled `title`.
fn readme_block(readme: &str, title: &str) -> String {
    let section = &readme[readme.find(title).expect("README section")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("end of the block");
    section[start..end].to_owned()
}

/// A command without the BUZZ_ACP_* variables of the caller (they would
/// change the harness's flags) and without cargo's own build variables.
fn clean(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("BUZZ_") || k == "CARGO_TARGET_DIR" {
            cmd.env_remove(k);
        }
    }
    cmd
}

#[test]
#[ignore = "builds the patched harness; scripts/test runs it after verify"]
fn readme_commands_build_and_run_the_patched_harness() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = readme_block(&readme, "## Running the patched harness yourself");
    assert!(block.contains("target/patched/buzz-acp"), "{block}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let relay = runtime
        .block_on(buzz_test_relay::TestRelay::start(
            buzz_test_relay::RelayConfig::default(),
        ))
        .expect("the test relay starts");
    let agent = nostr::Keys::generate();
    let owner = nostr::Keys::generate();
    let state = tempfile::tempdir().unwrap();
    let mut bash = clean(Command::new("bash"));
    bash.arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(&block)
        .current_dir(&root)
        .env("RELAY_URL", relay.ws_url())
        .env("AGENT_SECRET_KEY", agent.secret_key().to_secret_hex())
        .env("OWNER_PUBKEY", owner.public_key().to_hex())
        .env("STATE_DIR", state.path());
    let out = bash.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness ran: it recorded its processed-event cursor.
    let cursors: Vec<_> = std::fs::read_dir(state.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("cursor-"))
        .collect();
    assert_eq!(cursors.len(), 1);

    // Cargo says the build of the README's tree produces exactly the binary
    // the README runs, and that it is up to date.
    let tree = root.join("target/fork-work/tree");
    let mut cargo = clean(Command::new(
        std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
    ));
    cargo
        .arg("build")
        .arg("--manifest-path")
        .arg(tree.join("Cargo.toml"))
        .args([
            "--target-dir",
            "target",
            "--profile",
            "patched",
            "--workspace",
            "--bins",
        ])
        .args(["--message-format", "json"])
        .current_dir(&root);
    let out = cargo.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let binary = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == "buzz-acp"
                && !m["executable"].is_null()
        })
        .expect("an executable artifact for buzz-acp");
    assert_eq!(
        Path::new(binary["executable"].as_str().unwrap()),
        root.join("target/patched/buzz-acp")
    );
    assert_eq!(
        binary["fresh"], true,
        "the README's build left the binary stale"
    );
}
