//! The binary: it prints where it listens, serves there, and honours its fault flags.

mod common;

use std::process::Stdio;

use hyper::{Method, StatusCode};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

use common::{HANG_GUARD, request};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Listening {
    ws: String,
    http: String,
}

#[tokio::test]
async fn the_binary_prints_its_address_and_serves_there() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_buzz-test-relay"))
        .args(["--rest-unavailable", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the relay");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    tokio::time::timeout(HANG_GUARD, BufReader::new(stdout).read_line(&mut line))
        .await
        .expect("the address in time")
        .expect("read stdout");
    let listening: Listening = serde_json::from_str(&line).expect("one JSON line");
    assert!(
        listening.ws.starts_with("ws://127.0.0.1:"),
        "{}",
        listening.ws
    );
    assert_eq!(listening.http.replacen("http", "ws", 1), listening.ws);

    let info = request(&listening.http, Method::GET, "/info", &[], Vec::new()).await;
    assert_eq!(info.status, StatusCode::OK);
    // --rest-unavailable 1: the first POST is 503 (before any auth check).
    let post = request(&listening.http, Method::POST, "/count", &[], b"[]".to_vec()).await;
    assert_eq!(post.status, StatusCode::SERVICE_UNAVAILABLE);
    let post = request(&listening.http, Method::POST, "/count", &[], b"[]".to_vec()).await;
    assert_eq!(post.status, StatusCode::UNAUTHORIZED);

    child.start_kill().expect("kill");
    let _ = child.wait().await;
}
