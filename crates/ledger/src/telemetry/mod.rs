//! Telemetry: metric names and closed label values ([`names`]), the metric
//! registry ([`metrics`]), the families it renders at scrape time
//! ([`families`]; the data path's in [`xfer_families`]), the exposition
//! encoders ([`exposition`]) with the exemplars they write ([`exemplars`]),
//! and the events that are the only way the rest of the crate records
//! anything ([`events`]).

pub mod events;
mod exemplars;
pub mod exposition;
mod families;
pub mod last_words;
pub mod logs;
pub mod metrics;
pub mod names;
pub mod traces;
mod xfer_families;

pub use metrics::Metrics;
