//! Interned strings: every distinct string in a snapshot is stored once and named by a `StrId`.
//!
//! Snapshots repeat the same few thousand strings (keys, file names, function names) millions of
//! times; the tables store 4-byte ids instead.

use rustc_hash::FxHashMap;
use serde::Serialize;

/// Index of a string in a [`StringPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct StrId(pub u32);

/// The empty string is always id 0.
impl StrId {
    pub const EMPTY: StrId = StrId(0);
}

/// A deduplicating string table.
#[derive(Debug, Clone)]
pub struct StringPool {
    strings: Vec<Box<str>>,
    index: FxHashMap<Box<str>, StrId>,
    bytes: usize,
}

impl Default for StringPool {
    fn default() -> Self {
        let mut pool = StringPool {
            strings: Vec::new(),
            index: FxHashMap::default(),
            bytes: 0,
        };
        pool.intern("");
        pool
    }
}

impl StringPool {
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(self.strings.len() as u32);
        self.strings.push(s.into());
        self.index.insert(s.into(), id);
        self.bytes += s.len();
        id
    }

    /// Looks a string up without adding it.
    pub fn find(&self, s: &str) -> Option<StrId> {
        self.index.get(s).copied()
    }

    pub fn get(&self, id: StrId) -> &str {
        &self.strings[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.len() <= 1
    }

    /// Approximate heap bytes held (both copies of each string plus table overhead).
    pub fn heap_bytes(&self) -> usize {
        2 * self.bytes + self.strings.len() * (16 + 16 + 8)
    }
}
