//! The store used when resume is switched off (`--no-resume-sessions`): it remembers nothing and
//! says so on every write, so a caller never mistakes "not written" for "written".

use std::collections::HashSet;

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, ImportOutcome, PutOutcome, ReceiptStore, Removal,
    StoredReceipt, UnixMillis, WriteRefusal,
};
use crate::record::SessionRecord;
use crate::store::StoreScope;

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
        _now: UnixMillis,
    ) -> Result<PutOutcome, StoreError> {
        Ok(PutOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn remove(&self, _key: &ScopeKey) -> Result<Removal, StoreError> {
        Ok(Removal::NotWritable(WriteRefusal::Disabled))
    }

    fn remove_if_session(&self, _key: &ScopeKey, _session_id: &str) -> Result<Removal, StoreError> {
        Ok(Removal::NotWritable(WriteRefusal::Disabled))
    }

    fn remove_channel(&self, _channel_id: &str) -> Result<ChannelRemoval, StoreError> {
        Ok(ChannelRemoval::NotWritable(WriteRefusal::Disabled))
    }

    fn commit_delivery(
        &self,
        _key: &ScopeKey,
        _session_id: &str,
        _standing_sent: bool,
        _new_ids: &[String],
        _live_window: &HashSet<String>,
        _now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError> {
        Ok(CommitOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn import(
        &self,
        _records: &[(ScopeKey, SessionRecord)],
        _now: UnixMillis,
    ) -> Result<ImportOutcome, StoreError> {
        Ok(ImportOutcome::NotWritable(WriteRefusal::Disabled))
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        Ok(Vec::new())
    }

    fn len(&self) -> Result<usize, StoreError> {
        Ok(0)
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
        assert_eq!(
            store
                .put(&key, &SessionRecord::new("s"), UnixMillis(1))
                .unwrap(),
            PutOutcome::NotWritable(refused.clone())
        );
        assert_eq!(store.get(&key).unwrap(), None);
        assert_eq!(
            store
                .commit_delivery(&key, "s", true, &[], &HashSet::new(), UnixMillis(2))
                .unwrap(),
            CommitOutcome::NotWritable(refused.clone())
        );
        assert_eq!(
            store.remove(&key).unwrap(),
            Removal::NotWritable(refused.clone())
        );
        assert_eq!(
            store.remove_if_session(&key, "s").unwrap(),
            Removal::NotWritable(refused.clone())
        );
        assert_eq!(
            store.remove_channel(key.channel_id()).unwrap(),
            ChannelRemoval::NotWritable(refused.clone())
        );
        assert_eq!(
            store
                .import(&[(key, SessionRecord::new("s"))], UnixMillis(3))
                .unwrap(),
            ImportOutcome::NotWritable(refused)
        );
        assert!(store.receipts().unwrap().is_empty());
        assert!(store.is_empty().unwrap());
        assert_eq!(store.kind(), BackendKind::Disabled);
    }
}
