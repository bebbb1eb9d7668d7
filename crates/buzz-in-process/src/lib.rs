//! Agents served inside the harness's own process (patch `in-process-agents`).
//!
//! An agent command `in-process:NAME` reaches an agent registered under NAME over in-memory line
//! channels instead of spawning a process. Every line is tapped exactly as a process's stdio is.
//! This lets the series' guards run the whole harness on tokio's paused clock, where a child
//! process could not follow the clock: no real sleeps, no wall-clock races.
//!
//! Tests [`register`] a factory; the harness's one hook (in `AcpClient::spawn`) asks
//! [`connector`] whether a command names a registered agent before it launches a process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agent_client_protocol::{Agent, Client, ConnectTo, DynConnectTo, LineDirection, Lines};
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

/// What the harness's connection asks for each time it needs the agent's transport (once, or
/// twice when the agent refused its first `initialize`).
pub type Connector = Arc<dyn Fn() -> DynConnectTo<Client> + Send + Sync>;

/// As [`connect`], as a [`Connector`]: the first agent is started here, so a name that is not
/// registered or a factory that fails is an error now; each later call starts another agent
/// (a failure then ends that connection with the factory's reason).
pub fn connector<F>(command: &str, observe: F) -> Option<Result<Connector, String>>
where
    F: Fn(&str, LineDirection) + Clone + Send + Sync + 'static,
{
    let first = match connect(command, observe.clone())? {
        Ok(first) => first,
        Err(e) => return Some(Err(e)),
    };
    let first = Mutex::new(Some(first));
    let command = command.to_string();
    Some(Ok(Arc::new(move || {
        let started = first.lock().unwrap_or_else(PoisonError::into_inner).take();
        match started
            .map(Ok)
            .or_else(|| connect(&command, observe.clone()))
        {
            Some(Ok(agent)) => agent,
            Some(Err(reason)) => DynConnectTo::new(NotStarted(reason)),
            None => DynConnectTo::new(NotStarted(format!("{command:?} is not in-process"))),
        }
    })))
}

/// A transport whose agent could not be started: connecting to it fails with the reason.
struct NotStarted(String);

impl ConnectTo<Client> for NotStarted {
    async fn connect_to(
        self,
        _client: impl ConnectTo<Agent>,
    ) -> Result<(), agent_client_protocol::Error> {
        Err(agent_client_protocol::Error::internal_error().data(self.0))
    }
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

    #[test]
    fn a_connector_starts_its_first_agent_at_once_and_another_on_each_later_call() {
        assert!(connector("/usr/bin/agent", ignore).is_none());
        assert!(matches!(
            connector("in-process:nobody", ignore),
            Some(Err(_))
        ));
        let started = Arc::new(Mutex::new(0));
        let count = Arc::clone(&started);
        register(
            "counted",
            Arc::new(move || {
                *count.lock().unwrap() += 1;
                let (to_agent, _) = futures::channel::mpsc::unbounded::<String>();
                let (_, from_agent) = futures::channel::mpsc::unbounded::<String>();
                Ok((to_agent, from_agent))
            }),
        );
        let Some(Ok(agent)) = connector("in-process:counted", ignore) else {
            panic!("a registered name gives a connector");
        };
        assert_eq!(
            *started.lock().unwrap(),
            1,
            "the first agent starts at once"
        );
        let _first = agent();
        assert_eq!(
            *started.lock().unwrap(),
            1,
            "and is the first one handed out"
        );
        let _second = agent();
        assert_eq!(*started.lock().unwrap(), 2);
    }
}
