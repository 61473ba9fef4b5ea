//! Telemetry: metric names and closed label values ([`names`]), the metric
//! registry ([`metrics`]), the exposition encoders ([`exposition`]) and the
//! events that are the only way the rest of the crate records anything
//! ([`events`]).

pub mod events;
pub mod exposition;
pub mod logs;
pub mod metrics;
pub mod names;
pub mod traces;
mod xfer_families;

pub use metrics::Metrics;
