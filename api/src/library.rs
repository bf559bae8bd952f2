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

/// Longest snapshot name kept, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Longest tag key or value kept, in bytes; and most tags on one snapshot.
pub const MAX_TAG_BYTES: usize = 256;
pub const MAX_TAGS: usize = 64;

/// Why `name` cannot name a snapshot, if it cannot: empty, too long, or holding a control
/// character (NUL, which PostgreSQL cannot store, or a line break, which no header can carry).
pub fn name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("the name must not be empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "the name is {} bytes long; at most {MAX_NAME_BYTES}",
            name.len()
        ));
    }
    name.chars().any(char::is_control).then(|| {
        format!(
            "the name \"{}\" holds a control character (NUL, a line break, a tab, …)",
            name.escape_debug()
        )
    })
}

/// Why `tags` cannot be kept, if they cannot: too many, or a key or value too long or holding a
/// control character.
pub fn tags_problem(tags: &[Tag]) -> Option<String> {
    if tags.len() > MAX_TAGS {
        return Some(format!("{} tags; at most {MAX_TAGS}", tags.len()));
    }
    tags.iter().find_map(|t| {
        let text = t.text();
        if t.key.len() > MAX_TAG_BYTES || t.value.len() > MAX_TAG_BYTES {
            Some(format!(
                "the tag \"{}…\" is longer than {MAX_TAG_BYTES} bytes",
                text.chars().take(20).collect::<String>()
            ))
        } else if t.key.is_empty() || t.value.is_empty() {
            // A bare word cannot be searched as `key=…` nor grouped into a run: say how to
            // write it instead of keeping something the library half-understands.
            Some(format!(
                "the tag \"{text}\" is not key=value: write it as, for example, job=bert, rank=0 or run={}",
                if text.is_empty() { "nightly" } else { text.trim_matches('=') }
            ))
        } else if text.chars().any(char::is_control) {
            Some(format!(
                "the tag \"{}\" holds a control character (NUL, a line break, …)",
                text.escape_debug()
            ))
        } else {
            None
        }
    })
}

/// Tags from the text people type and the upload's `tags=` parameter: comma-separated
/// `key=value` (`job=bert, rank=0`). A bare word is parsed as a tag without a key, which
/// [`tags_problem`] refuses with a message.
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
    /// The highest allocated (block) bytes of any device (`torch.cuda.max_memory_allocated()`;
    /// over the trace's window, or the final state without a trace).
    pub peak_bytes: u64,
    /// The highest reserved bytes of any device (`max_memory_reserved()`), likewise; 0 for an
    /// entry written by a version before it was kept, until its report is computed again.
    #[serde(default)]
    pub peak_reserved_bytes: u64,
    /// Reserved bytes at the snapshot.
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub leak_suspects: u64,
    pub ooms: u64,
    pub warnings: u64,
    /// From the first byte received to the model file written.
    pub index_ms: u64,
    pub tags: Vec<Tag>,
    /// The device's total memory, when known: what tells an OOM caused by memory held outside
    /// PyTorch from PyTorch's own exhaustion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<DeviceTotal>,
}

/// A device's total memory and where memscope learned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceTotal {
    #[serde(rename = "bytes")]
    pub total_bytes: u64,
    pub source: DeviceTotalSource,
    /// For people: which GPU, which host ("NVIDIA H200 on gpu-7").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Where a device's total memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceTotalSource {
    /// Given with the upload (`memscope_agent` records it from `torch.cuda`).
    Upload,
    /// The collector's NVML readings of the host and process the snapshot is tagged with.
    Collector,
    /// Set on the snapshot after its upload (the dashboard's GPU picker, `PATCH`).
    Set,
}

impl DeviceTotalSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceTotalSource::Upload => "upload",
            DeviceTotalSource::Collector => "collector",
            DeviceTotalSource::Set => "set",
        }
    }

    pub fn from_name(name: &str) -> Option<DeviceTotalSource> {
        [
            DeviceTotalSource::Upload,
            DeviceTotalSource::Collector,
            DeviceTotalSource::Set,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// "from the upload (the agent)", for people.
    pub fn words(self) -> &'static str {
        match self {
            DeviceTotalSource::Upload => "given with the upload",
            DeviceTotalSource::Collector => "from the collector's NVML readings",
            DeviceTotalSource::Set => "set on this page",
        }
    }
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
    /// The device's total memory (`torch.cuda.get_device_properties(d).total_memory`), for the
    /// OOM verdicts; without it the server looks for the host's NVML readings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_total_bytes: Option<u64>,
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
    pub devices: BTreeMap<i32, DeviceSummary>,
    pub warnings: Vec<Warning>,
    /// How many leak suspects and OOM reports the report has.
    pub leak_suspects: u64,
    pub ooms: u64,
}

impl UploadSummary {
    /// The view that answers the question this file raises: its OOM report when it ran out of
    /// memory, its leak suspects when something grows, else its timeline.
    pub fn landing_view(&self) -> &'static str {
        landing_view(self.ooms, self.leak_suspects)
    }
}

/// The view a new snapshot opens on: its OOM report when it ran out of memory, its leak
/// suspects when something grows, else its timeline (an upload's answer and the page's own
/// reading of a file choose alike).
pub fn landing_view(ooms: u64, leak_suspects: u64) -> &'static str {
    if ooms > 0 {
        "oom"
    } else if leak_suspects > 0 {
        "leaks"
    } else {
        "timeline"
    }
}

impl SnapshotInfo {
    /// An entry's figures from its report: everything but who it is (`id`, `sha256`, `name`),
    /// when and how it came (`uploaded_at_ms`, `index_ms`, `tags`, `device_total`), which
    /// are left empty.
    pub fn from_report(report: &crate::Report, entries: u64, size_bytes: u64) -> SnapshotInfo {
        let (peak_bytes, peak_reserved_bytes) = report.peaks();
        SnapshotInfo {
            id: String::new(),
            sha256: String::new(),
            name: String::new(),
            uploaded_at_ms: 0,
            size_bytes,
            decoded_bytes: report.format.decoded_bytes,
            encoding: report.format.encoding,
            compression: report.format.compression,
            devices: report.devices.keys().copied().collect(),
            entries,
            peak_bytes,
            peak_reserved_bytes,
            reserved_bytes: report.reserved_bytes,
            allocated_bytes: report.allocated_bytes,
            leak_suspects: report.leak_suspects.len() as u64,
            ooms: report.ooms.len() as u64,
            warnings: report.warnings.len() as u64,
            index_ms: 0,
            tags: Vec::new(),
            device_total: None,
        }
    }
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

/// `GET /api/uploads/{token}`: how far an upload has got. An ended upload answers `finished`
/// for a minute (a poller racing the upload's own answer gets no 404); a token not seen (yet,
/// or any more) answers zeros.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadProgress {
    pub received_bytes: u64,
    /// Bytes the parser has consumed (parsing overlaps the transfer).
    pub parsed_bytes: u64,
    /// What the client announced (Content-Length; 0 if unknown).
    pub total_bytes: u64,
    /// The upload has ended (stored or refused: its own answer says which).
    #[serde(default)]
    pub finished: bool,
}

/// `PATCH /api/snapshots/{id}`: rename, replace the tags, set the device total; absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<Tag>>,
    /// The device's total memory: the OOM reports are judged again with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total_bytes: Option<u64>,
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
    fn a_tag_that_is_not_key_value_is_refused_saying_how_to_write_it() {
        for bad in ["nightly", "job=", "=bert"] {
            let why = tags_problem(&parse_tags(bad)).expect(bad);
            assert!(why.contains("is not key=value"), "{bad}: {why}");
        }
        assert_eq!(tags_problem(&parse_tags("job=bert, rank=0")), None);
        assert!(
            tags_problem(&parse_tags("nightly"))
                .unwrap()
                .contains("run=nightly")
        );
    }

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
