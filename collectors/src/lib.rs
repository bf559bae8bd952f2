//! The host collector: reads GPUs (NVML, or recorded readings through the same path), batches
//! readings, appends each batch to an on-disk spool first, and ships the spool to the server,
//! deleting a batch only once the server has acknowledged it.
//!
//! Sampling never waits on the network: the sampler only appends to the spool; a separate sender
//! drains it (newest first, so fresh data goes ahead of a backlog), with backoff and jitter on
//! failure. The spool is bounded; what is dropped is counted and reported in the next batch.
//! In-process agents on the host hand their data to the collector through a folder (`relay`).

pub mod collector;
pub mod relay;
pub mod sender;
pub mod source;
pub mod spool;
