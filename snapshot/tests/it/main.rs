//! snapshot's integration tests, one binary (one link) for all of them: each file is a module,
//! `support` their shared helpers. Run one file's tests with a filter on its module, e.g.
//! `cargo test --release -p snapshot --test it -- categories::`.

mod support;

mod categories;
mod density;
mod diff;
mod flame;
mod follow;
mod formats;
mod fuzz_structured;
mod golden;
mod gpus;
mod held;
mod held_flame;
mod hostile;
mod peaks;
mod pending;
mod predict;
mod python_sites;
mod store;
mod verdicts;
mod whatif;
mod wild;
