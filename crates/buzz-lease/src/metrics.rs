//! What the lease across machines tells an operator's Prometheus scraper (through the harness's
//! metrics endpoint, patch `operator-metrics`; without it these calls record nothing).
//!
//! Each harness reports its own side: whether it holds its agent's lease now (summed over the
//! machines, exactly one should), how often it was granted the lease (a grant after the first is
//! a takeover, or this harness's return after losing it), how often it lost it and why, and how
//! many receipt or watermark writes its store refused for want of the lease.

use metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

use crate::fenced::{StopReason, Token};

/// Gauge: 1 while this harness holds its agent's lease and serves, else 0.
pub const HOLDING: &str = "buzz_acp_lease_holding";
/// Gauge: the fencing token this harness holds (0: none).
pub const TOKEN: &str = "buzz_acp_lease_token";
/// Counter: grants of the lease to this harness.
pub const GRANTS: &str = "buzz_acp_lease_grants_total";
/// Counter: times this harness stopped serving, by `reason` (`expired`, `taken_over`).
pub const LOSSES: &str = "buzz_acp_lease_losses_total";

/// Declares the lease's metrics and starts them at zero.
pub fn describe() {
    describe_gauge!(
        HOLDING,
        Unit::Count,
        "1 while this harness holds its agent's lease across machines and serves"
    );
    describe_gauge!(
        TOKEN,
        Unit::Count,
        "The fencing token of the agent's lease this harness holds (0: none)"
    );
    describe_counter!(
        GRANTS,
        Unit::Count,
        "Grants of the agent's lease to this harness (after the first: takeovers)"
    );
    describe_counter!(
        LOSSES,
        Unit::Count,
        "Times this harness stopped serving because it lost the agent's lease, by reason"
    );
    describe_counter!(
        buzz_session_store::fence::FENCED_WRITES,
        Unit::Count,
        "Receipt and watermark writes the store refused because this harness did not hold the agent's lease"
    );
    gauge!(HOLDING).set(0.0);
    gauge!(TOKEN).set(0.0);
    counter!(GRANTS).absolute(0);
    for reason in ["expired", "taken_over"] {
        counter!(LOSSES, "reason" => reason).absolute(0);
    }
    counter!(buzz_session_store::fence::FENCED_WRITES).absolute(0);
}

/// This harness serves with `token`.
pub fn serving(token: Token) {
    gauge!(HOLDING).set(1.0);
    gauge!(TOKEN).set(u32::try_from(token.0).map_or(f64::MAX, f64::from));
    counter!(GRANTS).increment(1);
}

/// This harness stopped serving for `reason`.
pub fn stopped(reason: &StopReason) {
    gauge!(HOLDING).set(0.0);
    gauge!(TOKEN).set(0.0);
    let reason = match reason {
        StopReason::Expired => "expired",
        StopReason::TakenOver { .. } => "taken_over",
    };
    counter!(LOSSES, "reason" => reason).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_then_a_loss_read_as_a_scraper_sees_them() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            serving(Token(4));
            let text = handle.render();
            assert!(text.contains("buzz_acp_lease_holding 1"), "{text}");
            assert!(text.contains("buzz_acp_lease_token 4"), "{text}");
            assert!(text.contains("buzz_acp_lease_grants_total 1"), "{text}");
            stopped(&StopReason::TakenOver { by: "b".into() });
        });
        let text = handle.render();
        assert!(text.contains("buzz_acp_lease_holding 0"), "{text}");
        assert!(
            text.contains("buzz_acp_lease_losses_total{reason=\"taken_over\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("buzz_acp_lease_losses_total{reason=\"expired\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("buzz_acp_receipt_writes_fenced_total 0"),
            "{text}"
        );
        assert!(text.contains("# HELP buzz_acp_lease_holding"), "{text}");
    }
}
