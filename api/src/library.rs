//! The snapshot library: entries, tags, uploads and their progress, renames.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::BlockState;
use crate::format::{Compression, Encoding};
use crate::report::{DeviceSummary, Warning};

/// A tag on a snapshot: `job=…`, `rank=…`, `host=…`, or free text (empty key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    #[serde(default)]
    pub key: String,
    pub value: String,
}

impl Tag {
    /// `key=value`, or the value alone for free text.
    pub fn text(&self) -> String {
        if self.key.is_empty() {
            self.value.clone()
        } else {
            format!("{}={}", self.key, self.value)
        }
    }
}

/// Tags from the text people type and the upload's `tags=` parameter: comma-separated,
/// `key=value` or free text (`job=bert, rank=0, nightly`).
pub fn parse_tags(s: &str) -> Vec<Tag> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => Tag {
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            },
            None => Tag {
                key: String::new(),
                value: t.to_string(),
            },
        })
        .collect()
}

/// A library entry (`GET /api/snapshots`, `/api/snapshots/{id}/info`, the answer to a rename).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The first 16 hex digits of the upload's sha256: the same bytes get the same id.
    pub id: String,
    pub sha256: String,
    pub name: String,
    pub uploaded_at_ms: i64,
    /// The upload as received (compressed, if it was).
    pub size_bytes: u64,
    /// The pickle or JSON after decompression.
    pub decoded_bytes: u64,
    pub encoding: Encoding,
    pub compression: Compression,
    /// CUDA devices with segments or a trace.
    pub devices: Vec<i32>,
    /// Trace entries, all devices.
    pub entries: u64,
    /// The highest live (allocated) bytes of any device over its trace.
    pub peak_bytes: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub leak_suspects: u64,
    pub ooms: u64,
    pub warnings: u64,
    /// From the first byte received to the model file written.
    pub index_ms: u64,
    pub tags: Vec<Tag>,
}

/// `POST /api/snapshots` query: `?name=N&tags=job=x,rank=0&token=T`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UploadQuery {
    /// Display name (else the `X-Filename` header, else "snapshot").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Comma-separated tags, `key=value` or free text (see [`parse_tags`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    /// A client-chosen token (≤ 64 characters): `GET /api/uploads/{token}` reports progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The headline figures of an upload's report (what the upload answer shows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UploadSummary {
    pub segments: u64,
    pub blocks: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    pub block_states: BTreeMap<BlockState, u64>,
    pub devices: BTreeMap<String, DeviceSummary>,
    pub warnings: Vec<Warning>,
    /// How many leak suspects and OOM reports the report has.
    pub leak_suspects: u64,
    pub ooms: u64,
}

/// The answer to an upload: 201 with `created: true`, or 200 with `created: false` when the same
/// bytes were uploaded before (the existing entry is returned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uploaded {
    pub id: String,
    pub created: bool,
    pub snapshot: SnapshotInfo,
    pub summary: UploadSummary,
}

/// `GET /api/uploads/{token}`: how far an upload in flight has got (404 once it has ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadProgress {
    pub received_bytes: u64,
    /// Bytes the parser has consumed (parsing overlaps the transfer).
    pub parsed_bytes: u64,
    /// What the client announced (Content-Length; 0 if unknown).
    pub total_bytes: u64,
}

/// `PATCH /api/snapshots/{id}`: rename and/or replace the tags; absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<Tag>>,
}

/// `GET /api/snapshots?q=text`: `q` matches name, id or any tag (case-insensitive).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_parsed_from_what_people_type_and_written_back_the_same() {
        let t = parse_tags(" job = bert, rank=0,,nightly ");
        assert_eq!(
            t.iter().map(Tag::text).collect::<Vec<_>>(),
            ["job=bert", "rank=0", "nightly"]
        );
        assert_eq!(t[2].key, "");
    }
}
