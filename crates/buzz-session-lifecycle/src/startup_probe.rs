//! The store at startup: a refusal that lasts stops the harness before it serves.
//!
//! The store worker ([`crate::store_io`]) opens the store in the background and retries, so a
//! database that is down or frozen when the harness starts does not stop it: that is an outage,
//! and outages pass. A store that *refuses* the harness for a reason that lasts — its
//! certificate does not verify, the password is wrong, the database or the role does not exist,
//! the state directory may not be written ([`buzz_session_store::Healing::Permanent`]) — is a
//! misconfiguration, and waiting does not fix it. Served anyway, every thread would silently
//! lose its earlier session at each restart. So before the harness starts serving it tries one
//! open, for a bounded time: a lasting refusal is an error (the harness exits non-zero with the
//! reason), anything else — success, a transient failure, no answer in time — lets it start,
//! and the worker takes over.
//!
//! A lasting refusal met later, while the harness runs (a password rotated under it), is not
//! fatal: the harness keeps serving, and the store worker reports it as such (see
//! [`crate::store_io::IoEvent::Down`]) in the log, the observer and the metrics.

use std::sync::mpsc;
use std::time::Duration;

use buzz_session_store::{Healing, StoreError};

use crate::store_io::Opener;

/// How long a starting harness waits for its store's first answer before it starts anyway (a
/// frozen or slow server is an outage, not a refusal).
pub const STARTUP_PROBE_WAIT: Duration = Duration::from_secs(5);

/// What the first open told.
#[derive(Debug)]
pub enum Probe {
    /// The store opened.
    Opened,
    /// It failed in a way that may pass; the worker retries in the background.
    Failed(StoreError),
    /// No answer within the wait; the worker keeps trying in the background.
    NoAnswer,
}

/// Opens the store once, waiting at most `within`.
///
/// # Errors
/// [`StoreError::Refused`] when the store refused for a reason that lasts.
pub fn probe(opener: &Opener, within: Duration) -> Result<Probe, StoreError> {
    let (tx, rx) = mpsc::channel();
    let open = std::sync::Arc::clone(opener);
    let spawned = std::thread::Builder::new()
        .name("session-store-probe".into())
        .spawn(move || {
            // The probe's store is closed again at once; the worker opens its own.
            let _ = tx.send(open().map(drop));
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the session store probe; opening in the background");
        return Ok(Probe::NoAnswer);
    }
    match rx.recv_timeout(within) {
        Ok(Ok(())) => Ok(Probe::Opened),
        Ok(Err(error)) => match error.healing() {
            Healing::Permanent { reason } => Err(StoreError::Refused {
                reason,
                source: Box::new(error),
            }),
            Healing::Transient => {
                tracing::warn!(%error, "session store unavailable at startup; opening it in the background");
                Ok(Probe::Failed(error))
            }
        },
        Err(_) => {
            tracing::warn!(
                waited_secs = within.as_secs(),
                "session store did not answer at startup; opening it in the background"
            );
            Ok(Probe::NoAnswer)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use buzz_session_store::PermanentReason;

    use super::*;

    fn failing(kind: std::io::ErrorKind) -> Opener {
        Arc::new(move || {
            Err(StoreError::Io {
                path: PathBuf::from("/state/sessions.sqlite3"),
                op: "create directory",
                source: std::io::Error::from(kind),
            })
        })
    }

    #[test]
    fn a_refusal_that_lasts_is_an_error_naming_its_reason() {
        let refused = probe(
            &failing(std::io::ErrorKind::PermissionDenied),
            STARTUP_PROBE_WAIT,
        )
        .expect_err("permission denied lasts");
        assert!(matches!(
            refused,
            StoreError::Refused {
                reason: PermanentReason::FilePermissionDenied,
                ..
            }
        ));
        let text = refused.to_string();
        assert!(text.contains("permission denied"), "{text}");
        assert!(text.contains("/state/sessions.sqlite3"), "{text}");
    }

    #[test]
    fn a_failure_that_may_pass_lets_the_harness_start() {
        let probe = probe(&failing(std::io::ErrorKind::TimedOut), STARTUP_PROBE_WAIT);
        assert!(matches!(probe, Ok(Probe::Failed(_))), "{probe:?}");
    }

    #[test]
    fn a_store_that_does_not_answer_lets_the_harness_start() {
        let (release, wait) = mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let stuck: Opener = Arc::new(move || {
            let _ = wait.lock().map(|w| w.recv());
            Err(StoreError::Config {
                reason: "never seen".into(),
            })
        });
        let probe = probe(&stuck, Duration::from_millis(10));
        assert!(matches!(probe, Ok(Probe::NoAnswer)), "{probe:?}");
        drop(release);
    }
}
