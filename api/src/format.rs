//! How a snapshot file was written: its encoding, compression and layout (PyTorch version).

use serde::{Deserialize, Serialize};

/// How the uploaded bytes were encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Pickle,
    Json,
}

/// How the uploaded bytes were compressed (recognised by content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    Gzip,
    Zstd,
    Xz,
    None,
}

/// Parses one of a closed set by its JSON name.
fn by_name<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

impl Encoding {
    pub fn from_name(name: &str) -> Option<Encoding> {
        by_name(name)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Pickle => "pickle",
            Encoding::Json => "json",
        }
    }
}

impl Compression {
    pub fn from_name(name: &str) -> Option<Compression> {
        by_name(name)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::None => "none",
        }
    }
}

impl Layout {
    pub fn from_name(name: &str) -> Option<Layout> {
        by_name(name)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::LegacySegmentList => "legacy_segment_list",
            Layout::SegmentList => "segment_list",
            Layout::BlockHistory => "block_history",
            Layout::Modern => "modern",
        }
    }
}

/// The snapshot's layout, by PyTorch version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// PyTorch ≤ 1.13: a bare list of segments.
    LegacySegmentList,
    /// A bare list of segments with 2.1+ keys: `torch.cuda.memory_snapshot()` pickled directly
    /// (segments only, no trace).
    SegmentList,
    /// PyTorch 2.0: blocks carry their `history`.
    BlockHistory,
    /// PyTorch 2.1 and later.
    Modern,
}

/// How the input was encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Format {
    pub encoding: Encoding,
    /// Pickle protocol (0 when absent).
    pub protocol: u8,
    pub compression: Compression,
    pub layout: Layout,
    pub decoded_bytes: u64,
}

impl Format {
    /// The file as a person would describe it: what wrote it, how it is encoded and compressed
    /// (the snapshot page's format line).
    pub fn describe(&self) -> String {
        let layout = match self.layout {
            Layout::Modern => "PyTorch ≥ 2.1 snapshot",
            Layout::BlockHistory => "PyTorch 2.0 snapshot (a history per block)",
            Layout::SegmentList => "segment list (torch.cuda.memory_snapshot(), no trace)",
            Layout::LegacySegmentList => "PyTorch ≤ 1.13 segment list",
        };
        let encoding = match self.encoding {
            Encoding::Pickle if self.protocol > 0 => format!("pickle protocol {}", self.protocol),
            Encoding::Pickle => "pickle".to_string(),
            Encoding::Json => "JSON".to_string(),
        };
        let compression = match self.compression {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip-compressed",
            Compression::Zstd => "zstd-compressed",
            Compression::Xz => "xz-compressed",
        };
        format!("{layout}, {encoding}, {compression}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_describes_itself_in_words() {
        let f = Format {
            encoding: Encoding::Pickle,
            protocol: 4,
            compression: Compression::Xz,
            layout: Layout::Modern,
            decoded_bytes: 10,
        };
        assert_eq!(
            f.describe(),
            "PyTorch ≥ 2.1 snapshot, pickle protocol 4, xz-compressed"
        );
        let bare = Format {
            encoding: Encoding::Json,
            protocol: 0,
            compression: Compression::None,
            layout: Layout::SegmentList,
            decoded_bytes: 10,
        };
        assert!(bare.describe().ends_with("no trace), JSON, uncompressed"));
    }

    #[test]
    fn closed_sets_name_themselves_as_their_json_does() {
        for e in [Encoding::Pickle, Encoding::Json] {
            assert_eq!(Encoding::from_name(e.as_str()), Some(e));
        }
        for c in [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Xz,
            Compression::None,
        ] {
            assert_eq!(Compression::from_name(c.as_str()), Some(c));
        }
        for l in [
            Layout::LegacySegmentList,
            Layout::SegmentList,
            Layout::BlockHistory,
            Layout::Modern,
        ] {
            assert_eq!(Layout::from_name(l.as_str()), Some(l));
        }
    }
}
