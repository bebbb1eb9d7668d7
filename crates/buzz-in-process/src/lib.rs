//! Agents served inside the harness's own process (patch `in-process-agents`).
//!
//! An agent command `in-process:NAME` reaches an agent registered under NAME over in-memory line
//! channels instead of spawning a process. Every line is tapped exactly as a process's stdio is.
//! This lets the series' guards run the whole harness on tokio's paused clock, where a child
//! process could not follow the clock: no real sleeps, no wall-clock races.
//!
//! Tests [`register`] a factory; the harness's one hook (in `AcpClient::spawn`) asks
//! [`connect`] whether a command names a registered agent before it launches a process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agent_client_protocol::{Client, DynConnectTo, LineDirection, Lines};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::{SinkExt, StreamExt, future};

/// The command prefix that names an in-process agent.
pub const PREFIX: &str = "in-process:";

/// The client's ends of one agent's line channels: lines for the agent, the agent's lines.
pub type AgentLines = (UnboundedSender<String>, UnboundedReceiver<String>);

/// Starts one agent (each worker spawn calls it once).
pub type Factory = Arc<dyn Fn() -> Result<AgentLines, String> + Send + Sync>;

fn registry() -> &'static Mutex<HashMap<String, Factory>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Factory>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Makes `factory` the agent command `in-process:NAME`.
pub fn register(name: &str, factory: Factory) {
    let mut agents = registry().lock().unwrap_or_else(PoisonError::into_inner);
    agents.insert(name.to_string(), factory);
}

/// The transport for `command` when it names an in-process agent (`None`: launch a process as
/// usual), with every line passed to `observe` as the process transport does. `Some(Err)`: the
/// command names an in-process agent that is not registered, or whose factory failed.
pub fn connect<F>(command: &str, observe: F) -> Option<Result<DynConnectTo<Client>, String>>
where
    F: Fn(&str, LineDirection) + Clone + Send + Sync + 'static,
{
    let name = command.strip_prefix(PREFIX)?;
    let factory = registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned();
    let Some(factory) = factory else {
        return Some(Err(format!(
            "no in-process agent is registered as {name:?}"
        )));
    };
    let (to_agent, from_agent) = match factory() {
        Ok(lines) => lines,
        Err(e) => return Some(Err(e)),
    };
    let tap = observe.clone();
    let outgoing = to_agent
        .sink_map_err(std::io::Error::other)
        .with(move |line: String| {
            tap(&line, LineDirection::Stdin);
            future::ready(Ok::<_, std::io::Error>(line))
        });
    let incoming = from_agent.map(move |line| {
        observe(&line, LineDirection::Stdout);
        Ok(line)
    });
    Some(Ok(DynConnectTo::new(Lines::new(outgoing, incoming))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignore(_: &str, _: LineDirection) {}

    #[test]
    fn other_commands_launch_a_process_and_unknown_names_are_errors() {
        assert!(connect("/usr/bin/agent --flag", ignore).is_none());
        let Some(Err(e)) = connect("in-process:nobody", ignore) else {
            panic!("an unregistered name is an error");
        };
        assert!(e.contains("nobody"), "{e}");
        register("failing", Arc::new(|| Err("cannot start".to_string())));
        let Some(Err(e)) = connect("in-process:failing", ignore) else {
            panic!("a failing factory is an error");
        };
        assert_eq!(e, "cannot start");
    }

    #[tokio::test]
    async fn a_registered_agent_is_reached_over_its_lines() {
        let (to_client, from_agent) = futures::channel::mpsc::unbounded::<String>();
        let (to_agent, _from_client) = futures::channel::mpsc::unbounded::<String>();
        let lines = Arc::new(Mutex::new(Some((to_agent, from_agent))));
        register(
            "one",
            Arc::new(move || {
                lines
                    .lock()
                    .unwrap()
                    .take()
                    .ok_or_else(|| "started twice".to_string())
            }),
        );
        assert!(matches!(connect("in-process:one", ignore), Some(Ok(_))));
        drop(to_client);
        assert!(matches!(connect("in-process:one", ignore), Some(Err(_))));
    }
}
