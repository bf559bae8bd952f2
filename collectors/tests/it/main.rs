//! collectors's integration tests, one binary (one link) for all of them: each file is a module,
//! `support` their shared helpers. Run one file's tests with a filter on its module, e.g.
//! `cargo test --release -p collectors --test it -- agent::`.

mod support;

mod agent;
mod harness;
mod incarnations;
mod ingest_bench;
mod load_bench;
mod no_loss;
mod soak_bench;
