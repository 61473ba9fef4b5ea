//! nixl-agent's lowest layer: the domain words (`model`), the vocabulary of
//! what happens (`event`) and of what is configured (`config`, `plan`), and
//! the pure rules over them (`validate`, `diagnose`, `units`, `backoff`).
//! It depends on no other crate of the workspace; every other crate
//! depends on it. See ARCHITECTURE.md.

pub mod backoff;
pub mod config;
pub mod diagnose;
pub mod event;
pub mod model;
pub mod plan;
pub mod units;
pub mod validate;
