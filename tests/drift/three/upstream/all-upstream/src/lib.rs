//! Clean-room model of the upstream bridge crate (drift corpus).

pub mod pool;
pub mod resume;
