//! `acp-schema-check`: is every frame on the wire valid ACP?
//!
//! The JSON schemas of ACP v1 and of the v2 draft are generated from the SDK's own schema types
//! (`agent-client-protocol-schema` 1.17.0, the exact version `agent-client-protocol` 5.2.0 pins,
//! with its `schemars` and `unstable_protocol_v2` features) and compiled with the `jsonschema`
//! crate. Two entry points:
//!
//! * [`Checker::check`]: one JSON-RPC frame, given who sent it (for a response: the method it
//!   answers) and the negotiated version. Returns every [`Violation`] with the method, the part
//!   (`params`, `result`, `error`, envelope) and the JSON pointer of the offending value.
//! * [`check_wire_log`]: a whole `acp-test-agent` wire log; the `initialize` exchange tells the
//!   version of each agent process, then every frame is checked against its method's schema.
//!
//! Extension methods (names starting with `_`) pass with any object params; `_meta` passes
//! wherever the schema declares it. Unknown fields fail by default ([`Closure::Closed`]): the
//! specification reserves every name at the root of its types ([`schemas`] has the source).
//!
//! The `acp-schema-check` binary checks wire log files and prints the violations.
//!
//! Sources: the schema types' docs link the ACP pages they implement; the v1 "Extensibility"
//! page (<https://agentclientprotocol.com/protocol/v1/extensibility>) for `_meta`, extension
//! methods and reserved names; JSON-RPC 2.0 (<https://www.jsonrpc.org/specification>) for the
//! envelope.

pub mod frame;
pub mod log;
pub mod schemas;

pub use frame::{Checker, Frame, Part, Violation};
pub use log::{LogReport, LogViolation, check_wire_log};
pub use schemas::{BuildError, Closure, Sender, Version};
