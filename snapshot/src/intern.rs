//! Interned strings: every distinct string in a snapshot is stored once and named by a `StrId`.
//!
//! Snapshots repeat the same few thousand strings (keys, file names, function names) millions of
//! times; the tables store 4-byte ids instead. Each distinct string is kept once, in one buffer
//! with every other (its end offset in a table, its id in a hash table that hashes the buffer's
//! bytes): about 13 bytes beyond its text, where a boxed copy per string and a second one as the
//! map's key took about 110. A hostile upload of distinct strings grows the pool by little more
//! than its own size (issue 38, item 1). The hash is seeded per pool (foldhash), so an upload
//! cannot be made of strings that collide.

use std::hash::BuildHasher;

use foldhash::quality::RandomState;
use hashbrown::HashTable;
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
#[derive(Clone)]
pub struct StringPool {
    /// Every string's text, one after another.
    text: String,
    /// Where each string ends in `text`; string `i` starts where string `i - 1` ends.
    ends: Vec<u64>,
    /// Ids, found by their text's hash.
    index: HashTable<StrId>,
    /// The hash's seed, this pool's own.
    hasher: RandomState,
}

impl std::fmt::Debug for StringPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StringPool")
            .field("strings", &self.ends.len())
            .field("text_bytes", &self.text.len())
            .finish()
    }
}

impl Default for StringPool {
    fn default() -> Self {
        let mut pool = StringPool {
            text: String::new(),
            ends: Vec::new(),
            index: HashTable::new(),
            hasher: RandomState::default(),
        };
        pool.intern("");
        pool
    }
}

/// String `id`'s text: from where string `id - 1` ends to where it ends.
fn slice<'a>(text: &'a str, ends: &[u64], id: StrId) -> &'a str {
    let i = id.0 as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text[start..ends[i] as usize]
}

impl StringPool {
    pub fn intern(&mut self, s: &str) -> StrId {
        let h = self.hasher.hash_one(s);
        let StringPool {
            text,
            ends,
            index,
            hasher,
        } = self;
        if let Some(&id) = index.find(h, |&id| slice(text, ends, id) == s) {
            return id;
        }
        let id = StrId(ends.len() as u32);
        text.push_str(s);
        ends.push(text.len() as u64);
        let (text, ends) = (&*text, &*ends);
        index.insert_unique(h, id, |&id| hasher.hash_one(slice(text, ends, id)));
        id
    }

    /// Looks a string up without adding it.
    pub fn find(&self, s: &str) -> Option<StrId> {
        self.index
            .find(self.hasher.hash_one(s), |&id| self.get(id) == s)
            .copied()
    }

    pub fn get(&self, id: StrId) -> &str {
        slice(&self.text, &self.ends, id)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.len() <= 1
    }

    /// Heap bytes held: the text, the end offsets and the hash table (its slots and control
    /// bytes), as allocated.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 8 + self.index.capacity() * 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_kept_once_and_found_by_text() {
        let mut pool = StringPool::default();
        let a = pool.intern("alloc");
        let b = pool.intern("free");
        assert_eq!(pool.intern("alloc"), a);
        assert_eq!(
            (pool.get(a), pool.get(b), pool.get(StrId::EMPTY)),
            ("alloc", "free", "")
        );
        assert_eq!(pool.find("free"), Some(b));
        assert_eq!(pool.find("segment"), None);
        assert_eq!(pool.len(), 3);
        for i in 0..10_000 {
            let s = format!("{i:08x}");
            let id = pool.intern(&s);
            assert_eq!(pool.get(id), s);
        }
        assert_eq!(pool.len(), 10_003);
        assert!(pool.heap_bytes() < 10_003 * 40, "{}", pool.heap_bytes());
    }
}
