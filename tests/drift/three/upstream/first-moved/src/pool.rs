//! Session pool: one ACP session per channel.

use std::collections::HashMap;

mod ensure;

/// Sessions by channel.
pub struct Pool {
    sessions: HashMap<String, u64>,
    next_id: u64,
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Pool {
            sessions: HashMap::new(),
            next_id: 1,
        }
    }

    /// Forgets the session of `channel`.
    pub fn invalidate_for_fresh_session(&mut self, channel: &str) {
        self.sessions.remove(channel);
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub(super) fn open_session(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}
