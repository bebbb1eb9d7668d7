//! The store used when resume is switched off (`--no-resume-sessions`): it remembers nothing and
//! says so on every write, so a caller never mistakes "not written" for "written". It has no
//! watermark either: reading one gives `None`, advancing one `None` (nothing stored), setting one
//! `NotWritable(Disabled)`.

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey, StoreScope};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, Expect, ForgetOutcome, ImportOutcome, PutOutcome,
    ReceiptStore, Removal, StoredReceipt, TurnCommit, UnixMillis, WatermarkOutcome, WriteRefusal,
};
use crate::record::SessionRecord;

/// A store that holds no receipt and writes nothing.
#[derive(Debug, Clone)]
pub struct DisabledStore {
    /// Read only by `Debug`, so logs and diagnostics can name whose receipts are not kept.
    #[expect(dead_code, reason = "read only through the derived Debug")]
    scope: StoreScope,
    scheme: KeyScheme,
}

impl DisabledStore {
    /// A disabled store for `scope` (kept only so logs and diagnostics can name it).
    pub fn new(scope: StoreScope, scheme: KeyScheme) -> Self {
        Self { scope, scheme }
    }
}

impl ReceiptStore for DisabledStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Disabled
    }

    fn location(&self) -> String {
        "nowhere (resume is off)".into()
    }

    fn scheme(&self) -> KeyScheme {
        self.scheme
    }

    fn get(&self, _key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        Ok(None)
    }

    fn put(
        &self,
        _key: &ScopeKey,
        _record: &SessionRecord,
        _expect: &Expect,
        _now: UnixMillis,
    ) -> Result<PutOutcome, StoreError> {
        Ok(PutOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn commit_turn(
        &self,
        _key: &ScopeKey,
        _commit: &TurnCommit,
        _now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError> {
        Ok(CommitOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn remove(&self, _key: &ScopeKey, _expect: &Expect) -> Result<Removal, StoreError> {
        Ok(Removal::NotWritable(WriteRefusal::Disabled))
    }

    fn remove_channel(
        &self,
        _channel_id: &str,
        _now: UnixMillis,
    ) -> Result<ChannelRemoval, StoreError> {
        Ok(ChannelRemoval::NotWritable(WriteRefusal::Disabled))
    }

    fn forget(
        &self,
        _key: &ScopeKey,
        _expect: &Expect,
        _now: UnixMillis,
    ) -> Result<ForgetOutcome, StoreError> {
        Ok(ForgetOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn import(&self, _receipts: &[StoredReceipt]) -> Result<ImportOutcome, StoreError> {
        Ok(ImportOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        Ok(Vec::new())
    }

    fn len(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    fn watermark(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    fn advance_watermark(&self, _secs: u64) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    fn set_watermark(&self, _secs: Option<u64>) -> Result<WatermarkOutcome, StoreError> {
        Ok(WatermarkOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn storage_bytes(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_store_reports_every_write_as_not_written() {
        let store: Box<dyn ReceiptStore> = Box::new(DisabledStore::new(
            StoreScope {
                relay: "wss://relay.example".into(),
                agent_pubkey: "ab".repeat(32),
            },
            KeyScheme::Scope,
        ));
        let key = ScopeKey::conversation("0b9f3a52-6c1e-4d2a-9f00-1234567890ab");
        let refused = WriteRefusal::Disabled;
        let now = UnixMillis(1);
        assert_eq!(
            store
                .put(&key, &SessionRecord::new("s"), &Expect::Absent, now)
                .unwrap(),
            PutOutcome::NotWritable(refused.clone())
        );
        assert_eq!(store.get(&key).unwrap(), None);
        let commit = TurnCommit {
            session_id: "s".into(),
            delivered_event_ids: Vec::new(),
            standing_context_sent: true,
            turns: Some(1),
            usage: None,
            handoff_delivered: false,
        };
        assert_eq!(
            store.commit_turn(&key, &commit, now).unwrap(),
            CommitOutcome::NotWritable(refused.clone())
        );
        assert_eq!(
            store.remove(&key, &Expect::Session("s".into())).unwrap(),
            Removal::NotWritable(refused.clone())
        );
        assert_eq!(
            store.remove_channel(key.channel_id(), now).unwrap(),
            ChannelRemoval::NotWritable(refused.clone())
        );
        assert_eq!(
            store
                .forget(&key, &Expect::NotWrittenSince(now), now)
                .unwrap(),
            ForgetOutcome::NotWritable(refused.clone())
        );
        let receipt = StoredReceipt {
            key,
            record: SessionRecord::new("s"),
            last_used: now,
        };
        assert_eq!(
            store.import(&[receipt]).unwrap(),
            ImportOutcome::NotWritable(refused)
        );
        assert!(store.receipts().unwrap().is_empty());
        assert!(store.is_empty().unwrap());
        assert_eq!(store.advance_watermark(5).unwrap(), None);
        assert_eq!(
            store.set_watermark(Some(5)).unwrap(),
            WatermarkOutcome::NotWritable(WriteRefusal::Disabled)
        );
        assert_eq!(store.watermark().unwrap(), None);
        assert_eq!(store.kind(), BackendKind::Disabled);
    }
}
