//! Session pool: one ACP session per channel.

use std::collections::HashMap;

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

    /// Returns the session for `channel`, opening one when needed.
    pub fn ensure_session(&mut self, channel: &str) -> u64 {
        if let Some(id) = self.sessions.get(channel) {
            return *id;
        }
        let id = self.open_session();
        self.sessions.insert(channel.to_owned(), id);
        id
    }

    /// Forgets the session of `channel`.
    pub fn invalidate_for_fresh_session(&mut self, channel: &str) {
        self.sessions.remove(channel);
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    fn open_session(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Drops the session of `channel` so the next prompt starts fresh.
    pub fn reset(&mut self, channel: &str) {
        self.invalidate_for_fresh_session(channel);
    }
}
