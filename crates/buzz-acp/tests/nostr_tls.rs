//! The relay over TLS: `wss://` for the subscription and `https://` for REST, the relay's
//! certificate trusted through `SSL_CERT_FILE` (as an operator names a private CA). One test in
//! its own binary: it sets `SSL_CERT_FILE` for this process before any other thread exists.

mod common;

use std::process::Stdio;

use buzz_acp::testing::{
    ChatMessage, NostrRelayArgs, agent_messages, answer_among, post_chat, wait_until,
};
use buzz_test_relay::{RelayConfig, TestRelay};
use common::*;
use nostr::{Keys, Timestamp};

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";

#[test]
fn a_wss_relay_is_served_over_tls_with_a_trusted_ca() {
    let (_dir, s) = scenario();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let relay = runtime
        .block_on(TestRelay::start(RelayConfig::default().tls()))
        .expect("the relay starts");
    let ca = s.root.join("relay-ca.pem");
    std::fs::write(&ca, relay.ca_certificate_pem().expect("a CA")).expect("write the CA");
    // SAFETY: the only test of this binary; the runtime's workers never read the environment,
    // and nothing has read the TLS roots yet (they are loaded once, at the first TLS use).
    unsafe { std::env::set_var("SSL_CERT_FILE", &ca) };
    let url = relay.ws_url();
    assert!(url.starts_with("wss://"), "{url}");

    let (agent, owner) = (Keys::generate(), Keys::generate());
    runtime
        .block_on(relay.add_channel(CHANNEL, "general", "stream", &[agent.public_key()]))
        .expect("the agent's channel");
    let log_path = s.root.join("harness.log");
    let (secret, owner_hex) = (
        agent.secret_key().to_secret_hex(),
        owner.public_key().to_hex(),
    );
    let mut cmd = s.nostr_harness_command(
        &harness_bin(),
        &common::agent(&s, &[]),
        NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner_hex,
        },
        &[],
    );
    cmd.env("SSL_CERT_FILE", &ca)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log"));
    let mut harness = cmd.spawn().expect("the harness starts");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let subscribed = wait_until(WAIT, || {
        log()
            .contains("connected, authenticated and subscribed")
            .then_some(())
    });
    assert!(subscribed.is_some(), "not subscribed over TLS:\n{}", log());

    let message = ChatMessage {
        channel: CHANNEL,
        mention: Some(agent.public_key()),
        text: "hello over TLS",
        thread: None,
        at: Timestamp::now(),
    };
    let mention = runtime
        .block_on(post_chat(&url, &owner, message))
        .expect("posted over https");
    let answer = wait_until(WAIT, || {
        let messages = runtime
            .block_on(agent_messages(&url, &owner, agent.public_key()))
            .ok()?;
        answer_among(messages, &mention.id.to_hex())
    });
    let _ = harness.kill();
    let _ = harness.wait();
    let answer = answer.unwrap_or_else(|| panic!("no answer over TLS:\n{}", log()));
    assert_eq!(turns(&answer), 1);
}
