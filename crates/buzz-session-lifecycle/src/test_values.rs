//! Plain test values: a scope and a message type with no harness behind them. Public so the
//! crate's tests, its integration tests and anyone modelling the harness can use them;
//! re-exported by [`crate::testing`] next to the in-memory receipt store.

use crate::behaviours::Behaviours;
use crate::scope::{Input, Scope};

/// The two ends of the series: none of its behaviours (the port of block/buzz#6088 alone) and
/// all of them (the whole series). A rule that holds in every build is tested at both.
pub fn none_and_all() -> [Behaviours; 2] {
    [Behaviours::default(), Behaviours::all()]
}

/// A test scope: a channel name and an optional thread root.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TestScope {
    /// The channel.
    pub channel: String,
    /// The thread root, for thread scopes.
    pub root: Option<String>,
}

impl TestScope {
    /// A thread `root` of channel `channel`.
    pub fn thread(channel: &str, root: &str) -> Self {
        TestScope {
            channel: channel.to_string(),
            root: Some(root.to_string()),
        }
    }

    /// The conversation of channel `channel`.
    pub fn conversation(channel: &str) -> Self {
        TestScope {
            channel: channel.to_string(),
            root: None,
        }
    }
}

impl Scope for TestScope {
    fn channel(&self) -> &str {
        &self.channel
    }
    fn thread_root(&self) -> Option<&str> {
        self.root.as_deref()
    }
    fn label(&self) -> String {
        match &self.root {
            Some(root) => format!("thread:{root}"),
            None => "conversation".to_string(),
        }
    }
}

/// A test message: just an id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Msg(pub String);

impl Msg {
    /// A message with id `id`.
    pub fn new(id: &str) -> Self {
        Msg(id.to_string())
    }
}

impl Input for Msg {
    fn id(&self) -> &str {
        &self.0
    }
}
