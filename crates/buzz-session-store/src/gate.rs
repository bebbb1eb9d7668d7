//! Which session methods the agent allows.
//!
//! ACP clients MUST NOT call a session method the agent did not advertise in `initialize`
//! (`agentCapabilities.loadSession`, `sessionCapabilities.resume`, `sessionCapabilities.close`).
//! These checks are the only place the harness decides that, so no path can call around them.

/// The session capabilities an agent advertised in its `initialize` response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentCaps {
    /// `agentCapabilities.loadSession`: `session/load` (replays history as `session/update`).
    pub load_session: bool,
    /// `sessionCapabilities.resume`: `session/resume` (no history replay).
    pub resume: bool,
    /// `sessionCapabilities.close`: `session/close`.
    pub close: bool,
}

/// How a stored session can be restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreMethod {
    /// `session/resume`.
    Resume,
    /// `session/load`.
    Load,
    /// Neither is advertised: the receipt cannot be used, create a new session.
    Unavailable,
}

/// Picks the restore method: `session/resume` when advertised, because it does not replay the
/// history (nothing to filter out of the observer path, no replay cost), else `session/load`.
pub fn restore_method(caps: AgentCaps) -> RestoreMethod {
    if caps.resume {
        RestoreMethod::Resume
    } else if caps.load_session {
        RestoreMethod::Load
    } else {
        RestoreMethod::Unavailable
    }
}

/// Whether `session/close` may be sent.
pub fn may_close(caps: AgentCaps) -> bool {
    caps.close
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_method_table() {
        let cases = [
            (false, false, RestoreMethod::Unavailable),
            (true, false, RestoreMethod::Load),
            (false, true, RestoreMethod::Resume),
            (true, true, RestoreMethod::Resume),
        ];
        for (load_session, resume, want) in cases {
            for close in [false, true] {
                let caps = AgentCaps {
                    load_session,
                    resume,
                    close,
                };
                assert_eq!(restore_method(caps), want, "{caps:?}");
                assert_eq!(may_close(caps), close, "{caps:?}");
            }
        }
        assert_eq!(
            restore_method(AgentCaps::default()),
            RestoreMethod::Unavailable
        );
    }
}
