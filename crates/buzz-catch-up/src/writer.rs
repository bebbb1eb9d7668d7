//! The watermark's I/O: read once at the start, then written beside the event loop.
//!
//! The loop hands the newest watermark to a [`WriterHandle`] and goes on; a task writes it
//! (`advance_watermark`, forward only) on a blocking thread with a bounded wait. A store that
//! fails or stalls delays the write, never the loop: the task retries with the newest value after
//! a growing pause, and a call still stuck from an earlier attempt is waited for rather than
//! joined by a second one. A watermark written late only makes the next catch-up read a little
//! more (answered mentions are recognised by their answers); it never loses a mention.

use std::sync::Arc;
use std::time::Duration;

use buzz_session_store::{ReceiptStore, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::window::Start;

/// Opens the receipt store of this (relay, agent key).
pub type Open = Arc<dyn Fn() -> Result<Arc<dyn ReceiptStore>, StoreError> + Send + Sync>;

/// The longest pause between two attempts at a failing write.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);

/// Reads the recorded watermark, opening the store, within `wait`. Also returns the opened
/// store, for the writer.
pub async fn read_at_start(open: &Open, wait: Duration) -> (Start, Option<Arc<dyn ReceiptStore>>) {
    let open = Arc::clone(open);
    let read = tokio::task::spawn_blocking(move || {
        let store = open()?;
        let watermark = store.watermark()?;
        Ok::<_, StoreError>((store, watermark))
    });
    match tokio::time::timeout(wait, read).await {
        Ok(Ok(Ok((store, Some(watermark))))) => (Start::Recorded(watermark), Some(store)),
        Ok(Ok(Ok((store, None)))) => (Start::NeverRecorded, Some(store)),
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "catch-up: the receipt store cannot tell the watermark");
            (Start::Unreadable, None)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "catch-up: reading the watermark failed");
            (Start::Unreadable, None)
        }
        Err(_) => {
            tracing::warn!(
                wait_s = wait.as_secs_f64(),
                "catch-up: the receipt store did not answer in time; reading back the age limit"
            );
            (Start::Unreadable, None)
        }
    }
}

/// The loop's end of the writer: hands it the newest watermark.
#[derive(Debug)]
pub struct WriterHandle {
    newest: watch::Sender<Option<u64>>,
    written: watch::Receiver<Option<u64>>,
    task: JoinHandle<()>,
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WriterHandle {
    /// Hands `watermark` to the writer (replacing one it has not written yet). Never waits.
    pub fn propose(&self, watermark: u64) {
        self.newest.send_replace(Some(watermark));
    }

    /// What the store holds after the writer's last successful write.
    pub fn written(&self) -> Option<u64> {
        *self.written.borrow()
    }

    /// Follows what the store holds after each successful write (a test waits on it).
    pub fn subscribe(&self) -> watch::Receiver<Option<u64>> {
        self.written.clone()
    }
}

/// Starts writers.
#[derive(Debug)]
pub struct Writer;

impl Writer {
    /// Spawns the writer on the current runtime: `store` if the start could open it, else one
    /// `open` makes when the first write comes; every call bounded by `wait`.
    pub fn spawn(open: Open, store: Option<Arc<dyn ReceiptStore>>, wait: Duration) -> WriterHandle {
        let (newest, mut proposals) = watch::channel(None::<u64>);
        let (report, written) = watch::channel(None::<u64>);
        let task = tokio::spawn(async move {
            let mut store = store;
            let mut stuck: Option<JoinHandle<()>> = None;
            let mut failures = 0u32;
            while proposals.changed().await.is_ok() {
                loop {
                    let Some(watermark) = *proposals.borrow_and_update() else {
                        break;
                    };
                    if let Some(previous) = stuck.take()
                        && !previous.is_finished()
                        && tokio::time::timeout(wait, previous).await.is_err()
                    {
                        // Still stuck: the store is not answering. Try again later.
                        tracing::warn!(
                            watermark,
                            "catch-up: the receipt store is still busy with an earlier write"
                        );
                        failures += 1;
                        tokio::time::sleep(pause(failures)).await;
                        continue;
                    }
                    let (call, done) = write(&open, store.clone(), watermark);
                    match tokio::time::timeout(wait, done).await {
                        Ok(Ok(Ok((opened, stored)))) => {
                            store = Some(opened);
                            failures = 0;
                            report.send_replace(stored);
                            tracing::debug!(watermark, stored = ?stored, "catch-up: watermark written");
                            break;
                        }
                        Ok(Ok(Err(e))) => {
                            store = None;
                            tracing::warn!(watermark, error = %e, "catch-up: the watermark could not be written; trying again");
                        }
                        Ok(Err(_)) => {
                            store = None;
                            tracing::warn!(
                                watermark,
                                "catch-up: the watermark write was lost; trying again"
                            );
                        }
                        Err(_) => {
                            stuck = Some(call);
                            tracing::warn!(
                                watermark,
                                wait_s = wait.as_secs_f64(),
                                "catch-up: the receipt store did not take the watermark in time; trying again"
                            );
                        }
                    }
                    failures += 1;
                    tokio::time::sleep(pause(failures)).await;
                }
            }
        });
        WriterHandle {
            newest,
            written,
            task,
        }
    }
}

type Written = Result<(Arc<dyn ReceiptStore>, Option<u64>), StoreError>;

/// One write on a blocking thread: the handle that follows the thread, and a receiver for its
/// result (so a timed-out wait leaves the thread's handle to be waited for later).
fn write(
    open: &Open,
    store: Option<Arc<dyn ReceiptStore>>,
    watermark: u64,
) -> (JoinHandle<()>, tokio::sync::oneshot::Receiver<Written>) {
    let open = Arc::clone(open);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let call = tokio::task::spawn_blocking(move || {
        let result = (|| {
            let store = match store {
                Some(store) => store,
                None => open()?,
            };
            let stored = store.advance_watermark(watermark)?;
            Ok((store, stored))
        })();
        let _ = tx.send(result);
    });
    (call, rx)
}

/// The pause after `failures` (at least one) failed attempts: 1, 2, 4, … s, at most
/// [`MAX_RETRY_PAUSE`].
fn pause(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(MAX_RETRY_PAUSE)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use buzz_session_store::{KeyScheme, SqliteStore, StoreScope};

    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    fn scope() -> StoreScope {
        StoreScope {
            relay: "ws://relay.example".into(),
            agent_pubkey: "a1".repeat(32),
        }
    }

    fn opener(dir: &std::path::Path, failures_first: usize) -> (Open, Arc<AtomicUsize>) {
        let path = dir.join("sessions.sqlite3");
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let open: Open = Arc::new(move || {
            if counted.fetch_add(1, Ordering::SeqCst) < failures_first {
                return Err(StoreError::Unavailable {
                    target: "test".into(),
                    op: "open",
                    reason: "down".into(),
                });
            }
            let store = SqliteStore::open(&path, scope(), KeyScheme::Scope, 100)?;
            Ok(Arc::new(store) as Arc<dyn ReceiptStore>)
        });
        (open, calls)
    }

    async fn wait_written(writer: &WriterHandle, value: u64) {
        let mut written = writer.subscribe();
        tokio::time::timeout(WAIT, written.wait_for(|w| *w == Some(value)))
            .await
            .expect("written in time")
            .expect("the writer runs");
    }

    #[tokio::test]
    async fn the_start_reads_nothing_then_what_the_writer_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (open, _) = opener(dir.path(), 0);
        let (start, store) = read_at_start(&open, WAIT).await;
        assert_eq!(start, Start::NeverRecorded);
        let writer = Writer::spawn(Arc::clone(&open), store, WAIT);
        writer.propose(1_000);
        wait_written(&writer, 1_000).await;
        // An older value never moves it back: the store answers with what it keeps.
        writer.propose(900);
        wait_written(&writer, 1_000).await;
        writer.propose(1_200);
        wait_written(&writer, 1_200).await;
        drop(writer);
        let (start, _) = read_at_start(&open, WAIT).await;
        assert_eq!(start, Start::Recorded(1_200));
    }

    #[tokio::test]
    async fn a_store_that_fails_is_tried_again_with_the_newest_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (open, calls) = opener(dir.path(), 2);
        let (start, store) = read_at_start(&open, WAIT).await;
        assert_eq!(start, Start::Unreadable, "the first open failed");
        assert!(store.is_none());
        let writer = Writer::spawn(Arc::clone(&open), None, WAIT);
        writer.propose(50);
        writer.propose(60);
        wait_written(&writer, 60).await;
        assert!(
            calls.load(Ordering::SeqCst) >= 3,
            "opened again after the failures"
        );
    }
}
