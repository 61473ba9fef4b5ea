//! The pod crate's behaviour with observe mode publishing ranks: tests that
//! need an `Observer`, which lives above the pod crate.

mod publish;
mod read;
mod serve;
