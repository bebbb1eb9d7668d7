//! How a relay is set up: its port, its own key, and the faults it injects.
//!
//! Every fault is off by default. The ones that fire "for the next K" (REST failures, `CLOSED`
//! answers) count down in [`FaultState`], which every connection shares, so K is counted across
//! the whole relay, not per connection. A running relay's faults can be replaced at any time
//! ([`crate::TestRelay::set_faults`]); the counters then start again from the new values.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nostr::{Keys, PublicKey};

/// The relay's settings.
#[derive(Debug, Clone, Default)]
pub struct RelayConfig {
    /// Port on 127.0.0.1; 0 lets the operating system pick a free one.
    pub port: u16,
    /// The relay's own key: published as `pubkey` and `self` in NIP-11, and used to
    /// authenticate the relay's internal connection that carries REST writes. A fresh one when
    /// `None`.
    pub keys: Option<Keys>,
    /// Faults to inject (all off by default).
    pub faults: Faults,
    /// Serve TLS (`wss://`, `https://`) with a certificate signed by a CA made at start
    /// ([`crate::TestRelay::ca_certificate_pem`]).
    pub tls: bool,
    /// A members-only relay: a REST request is served only when its NIP-98 signer is one of
    /// these, or when it carries an `x-auth-tag` header (membership through an owner, which
    /// the Buzz relay verifies and this relay takes as given); others get 403
    /// `relay_membership_required`. `None`: everyone is served.
    pub members: Option<Vec<PublicKey>>,
}

impl RelayConfig {
    /// Listen on this port (0 = any free one).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Use this key for the relay itself.
    #[must_use]
    pub fn keys(mut self, keys: Keys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Serve TLS: `wss://` and `https://` with a certificate for `localhost` and 127.0.0.1.
    #[must_use]
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Members only: see [`RelayConfig::members`].
    #[must_use]
    pub fn members_only(mut self, members: Vec<PublicKey>) -> Self {
        self.members = Some(members);
        self
    }

    /// Inject these faults.
    #[must_use]
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }
}

/// Faults a test can ask for. Each is off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Answer every `AUTH` with `OK false` (`restricted: …`), so no client ever authenticates
    /// and every read or write stays refused.
    pub refuse_auth: bool,
    /// Cut every websocket connection this long after it opened, without a close frame (what
    /// a crashed or restarted relay looks like to the client).
    pub drop_connections_after: Option<Duration>,
    /// Answer the next REST requests (`POST` routes) with an error status instead of serving them.
    pub rest_failure: Option<RestFailure>,
    /// Send this `NOTICE` to every websocket client right after its `AUTH` challenge.
    pub notice: Option<String>,
    /// Answer the next `REQ`s with `CLOSED` and this reason instead of serving them.
    pub closed: Option<ClosedFault>,
    /// Answer the next `REQ`s for one subscription id with `CLOSED` and a reason (before
    /// [`Faults::closed`] is looked at); `REQ`s for other ids are served.
    pub closed_subscription: Option<ClosedSubscriptionFault>,
    /// Send these frames, in order, to the next client that authenticates, right after the
    /// relay's `OK true` for its `AUTH`. Sent once: the first connection that authenticates
    /// after they were set takes them.
    pub after_auth: Vec<RawFrame>,
}

/// "Fail the next `count` REST requests like this."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestFailure {
    /// How they fail.
    pub kind: RestFailureKind,
    /// How many requests fail before the relay serves again.
    pub count: u32,
}

/// The two ways the Buzz relay's REST bridge turns a request away before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestFailureKind {
    /// 429 `{"error":"rate-limited: quota exceeded; retry in Ns"}` with `Retry-After: N`.
    RateLimited {
        /// The `N` in the message and the header, in whole seconds.
        retry_after_secs: u64,
    },
    /// 503 `{"error":"unavailable: …"}` (the Buzz relay's answer when its limiter is down).
    Unavailable,
}

/// "Answer the next `count` `REQ`s with `CLOSED` and `reason`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedFault {
    /// The `CLOSED` message, e.g. `restricted: not a channel member`.
    pub reason: String,
    /// How many `REQ`s are closed before the relay serves them again.
    pub count: u32,
}

/// "Answer the next `count` `REQ`s for `subscription` with `CLOSED` and `reason`."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedSubscriptionFault {
    /// The subscription id (e.g. `ch-<channel uuid>`).
    pub subscription: String,
    /// The `CLOSED` message, e.g. `restricted: not a channel member` or `rate-limited: …`.
    pub reason: String,
    /// How many of its `REQ`s are closed before the relay serves it again.
    pub count: u32,
}

/// A frame the relay sends a client as it is, whatever a Nostr client makes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawFrame {
    /// A text frame with exactly this text: not JSON, or JSON that is no relay message.
    Text(String),
    /// A text frame of exactly `bytes` bytes: a `NOTICE` whose message is padding (just
    /// padding when `bytes` is too small for the brackets). Over a client's frame limit (16 MiB
    /// is tungstenite's default), an oversized frame.
    PaddedNotice {
        /// The frame's payload length.
        bytes: usize,
    },
}

impl RawFrame {
    /// The frame's text.
    #[must_use]
    pub fn text(&self) -> String {
        match self {
            RawFrame::Text(text) => text.clone(),
            RawFrame::PaddedNotice { bytes } => {
                const OPEN: &str = "[\"NOTICE\",\"";
                const CLOSE: &str = "\"]";
                match bytes.checked_sub(OPEN.len() + CLOSE.len()) {
                    Some(padding) => format!("{OPEN}{}{CLOSE}", "x".repeat(padding)),
                    None => "x".repeat(*bytes),
                }
            }
        }
    }
}

/// The faults of a running relay, shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct FaultState {
    /// A std mutex: held for a read or a decrement, never across an await.
    faults: Mutex<Faults>,
}

impl FaultState {
    pub(crate) fn new(faults: Faults) -> Self {
        Self {
            faults: Mutex::new(faults),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the current faults (for what a connection reads once, when it opens).
    pub(crate) fn snapshot(&self) -> Faults {
        self.lock().clone()
    }

    pub(crate) fn replace(&self, faults: Faults) {
        *self.lock() = faults;
    }

    /// Whether `AUTH` is refused right now.
    pub(crate) fn refuse_auth(&self) -> bool {
        self.lock().refuse_auth
    }

    /// Takes one REST failure off the counter, if one is armed.
    pub(crate) fn take_rest_failure(&self) -> Option<RestFailureKind> {
        let mut faults = self.lock();
        let failure = faults.rest_failure.as_mut()?;
        let kind = failure.kind;
        failure.count = failure.count.saturating_sub(1);
        if failure.count == 0 {
            faults.rest_failure = None;
        }
        Some(kind)
    }

    /// Takes one `CLOSED` answer for a `REQ` of `subscription` off its counter, if one is armed
    /// (the fault for that subscription first, then the one for any); its reason.
    pub(crate) fn take_closed(&self, subscription: &str) -> Option<String> {
        let mut faults = self.lock();
        if let Some(targeted) = faults.closed_subscription.as_mut()
            && targeted.subscription == subscription
        {
            let reason = targeted.reason.clone();
            targeted.count = targeted.count.saturating_sub(1);
            if targeted.count == 0 {
                faults.closed_subscription = None;
            }
            return Some(reason);
        }
        let closed = faults.closed.as_mut()?;
        let reason = closed.reason.clone();
        closed.count = closed.count.saturating_sub(1);
        if closed.count == 0 {
            faults.closed = None;
        }
        Some(reason)
    }

    /// The frames for a client that has just authenticated (taken: the next one gets none).
    pub(crate) fn take_after_auth(&self) -> Vec<RawFrame> {
        std::mem::take(&mut self.lock().after_auth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_run_out() {
        let state = FaultState::new(Faults {
            rest_failure: Some(RestFailure {
                kind: RestFailureKind::Unavailable,
                count: 2,
            }),
            closed: Some(ClosedFault {
                reason: "rate-limited: slow down".into(),
                count: 1,
            }),
            ..Faults::default()
        });
        assert_eq!(
            state.take_rest_failure(),
            Some(RestFailureKind::Unavailable)
        );
        assert_eq!(
            state.take_rest_failure(),
            Some(RestFailureKind::Unavailable)
        );
        assert_eq!(state.take_rest_failure(), None);
        assert_eq!(
            state.take_closed("any").as_deref(),
            Some("rate-limited: slow down")
        );
        assert_eq!(state.take_closed("any"), None);
    }

    #[test]
    fn a_subscriptions_fault_closes_only_its_reqs_and_comes_first() {
        let state = FaultState::new(Faults {
            closed_subscription: Some(ClosedSubscriptionFault {
                subscription: "ch-a".into(),
                reason: "restricted: not a channel member".into(),
                count: 2,
            }),
            closed: Some(ClosedFault {
                reason: "error: any".into(),
                count: 1,
            }),
            ..Faults::default()
        });
        assert_eq!(
            state.take_closed("ch-a").as_deref(),
            Some("restricted: not a channel member")
        );
        // Another id falls through to the fault for any subscription, and uses it up.
        assert_eq!(state.take_closed("ch-b").as_deref(), Some("error: any"));
        assert_eq!(state.take_closed("ch-b"), None);
        assert_eq!(
            state.take_closed("ch-a").as_deref(),
            Some("restricted: not a channel member")
        );
        assert_eq!(state.take_closed("ch-a"), None);
    }

    #[test]
    fn frames_after_auth_are_taken_once() {
        let frames = vec![
            RawFrame::Text("not json".into()),
            RawFrame::PaddedNotice { bytes: 64 },
        ];
        let state = FaultState::new(Faults {
            after_auth: frames.clone(),
            ..Faults::default()
        });
        assert_eq!(state.take_after_auth(), frames);
        assert!(state.take_after_auth().is_empty());
    }

    #[test]
    fn a_padded_notice_has_exactly_its_size() {
        for bytes in [0, 5, 13, 14, 1000] {
            let text = RawFrame::PaddedNotice { bytes }.text();
            assert_eq!(text.len(), bytes);
        }
        let text = RawFrame::PaddedNotice { bytes: 20 }.text();
        assert_eq!(text, r#"["NOTICE","xxxxxxx"]"#);
    }

    #[test]
    fn a_zero_count_fires_once_at_most() {
        // A count of 0 is read as "one": the fault was asked for, so it is not silently a no-op.
        let state = FaultState::new(Faults {
            closed: Some(ClosedFault {
                reason: "x".into(),
                count: 0,
            }),
            ..Faults::default()
        });
        assert!(state.take_closed("s").is_some());
        assert!(state.take_closed("s").is_none());
    }
}
