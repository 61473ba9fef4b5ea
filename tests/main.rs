//! The integration tests, one test binary (`--test integration`): each file
//! of tests/ is a module of it, named as the file is (`docs::…`,
//! `interposer::releases::…`), and `support` is the one copy of what they
//! share. One binary because each is linked on its own against the whole
//! workspace, and the links dominated `make test`; nextest still runs each
//! test in a process of its own, so tests that set process-wide state (a
//! signal handler, the tap, a CUDA context) stay apart.
//!
//! Cargo.toml says `autotests = false`: a new file of tests/ is a test only
//! once it is a `mod` here, and `layers::` fails if it is not, or if the
//! package grows past three test binaries.

mod support;

mod alerts;
mod bench_smoke;
mod binary;
mod check;
mod check_transfer;
mod dashboards;
mod death;
mod deploy;
mod diagnostics;
mod docs;
mod example;
mod faults;
mod gpu;
mod hardening;
mod image;
mod interposer;
mod layers;
mod library;
mod matrix;
mod newcomer;
mod observe_transfers;
mod plain_programs;
mod pod;
mod public_api;
mod python;
mod python_host;
mod python_stub;
mod python_tap;
mod python_transfers;
mod python_vllm;
mod snippets;
mod soak;
mod traces;
mod transfer;
