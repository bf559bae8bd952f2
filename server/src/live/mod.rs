//! The live-collection tables (`migrations/sqlite/0002_live.sql`, `0003_live_rollups.sql`,
//! `0004_hosts_processes.sql`, `0007_latest.sql`, `0008_spool_id.sql`) and their owner, [`Live`]:
//! beside `library::Library` over the same `db::Db`, each the only writer of its own tables.
//!
//! - `store`: a collector batch stored idempotently (once per `(collector, spool_id, seq)`; the
//!   same key with other content is a conflict), its notice published.
//! - `queries`: the tables read back as rows (latest readings, windows, events, counters).
//! - `series`: windows, bucket alignment, the outside-PyTorch series and the leak signal (pure).
//! - `outbox`: what the webhook notifier (`crate::notify`) owes its receiver, one row a message.
//! - `pages`: the live pages' answers (`api` types) shaped from the rows, functions over `&Live`.
//! - `rollup`: raw samples into one-minute rows, and retention.
//! - `days`: the one-minute rows of days over, packed one row per series and day.
//! - `notices`: batches announced to every server's live stream.

pub mod days;
pub mod notices;
pub mod outbox;
pub mod pages;
mod queries;
mod rollup;
mod series;
mod store;

pub use outbox::{OutboxCounts, Owed};
pub use pages::{Growing, growing_since};
pub use queries::{Counters, DeviceAllocator, EventRow, GpuLatest};
pub use rollup::RollUp;
pub use series::{LEAK_MIN_STEPS, Window, align, leak_signal, outside};
pub use store::{IngestError, Live, MAX_AHEAD_MS, MAX_GPUS_PER_HOST};
