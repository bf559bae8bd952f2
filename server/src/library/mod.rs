//! The snapshot library, [`Library`]: the `snapshots` and `snapshot_tags` rows (through
//! `db::Db`, beside `live::Live`, which owns the live tables) and the data folder's files, of
//! which it is the only writer.
//!
//! - `files`: the data folder (originals, model files, stored first views, temporary files) and
//!   the commit of an upload: files renamed into place, then the row.
//! - `rows`: the rows (entries, tags, stored reports) on either backend.
//! - `upload`: an upload streamed, parsed, deduplicated and committed; `original`: its bytes
//!   hashed and written to disk on a thread of their own.
//! - `models`: parsed snapshots in memory, loaded from model files (rebuilt from the original
//!   when missing).
//! - `views`: stored first views of a snapshot.
//! - `secret`: the key of the content hashes an upload is deduplicated by.

mod files;
pub mod models;
mod original;
pub mod replays;
mod rows;
mod secret;
pub mod upload;
pub mod views;

pub use api::{SnapshotInfo, Tag};
pub use files::{Library, ModelWrite, Waited, write_model_file};
pub use rows::Stored;
