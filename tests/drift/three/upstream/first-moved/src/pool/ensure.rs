//! Session lookup, split out of pool.rs.

use super::Pool;

impl Pool {
    /// Returns the session for `channel`, opening one when needed.
    pub fn ensure_session(&mut self, channel: &str) -> u64 {
        if let Some(id) = self.sessions.get(channel) {
            return *id;
        }
        let id = self.open_session();
        self.sessions.insert(channel.to_owned(), id);
        id
    }
}
