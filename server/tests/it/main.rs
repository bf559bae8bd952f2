//! server's integration tests, one binary (one link) for all of them: each file is a module,
//! `support` their shared helpers. Run one file's tests with a filter on its module, e.g.
//! `cargo test --release -p server --test it -- analyze_cli::`.

mod support;

mod alerts;
mod analyze_cli;
mod api;
mod api_golden;
mod browser;
mod dashboard_bench;
mod hardening;
mod hardening_two;
mod ingest;
mod ingest_scale_bench;
mod live;
mod mcp;
mod metrics_bench;
mod newcomer;
mod pg_history_bench;
mod pg_schema;
mod replicas;
mod report;
mod run_bench;
mod slow_clients;
mod starvation;
mod upload_memory_bench;
mod webhook;
mod wheel;
