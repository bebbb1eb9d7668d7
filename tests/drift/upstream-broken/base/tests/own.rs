//! Upstream's own tests.

#[test]
fn a_fresh_bridge_starts_at_zero() {
    assert_eq!(buzz_acp::session_after_restart(None), 0);
}
