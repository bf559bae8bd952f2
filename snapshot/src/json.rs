//! The JSON form of a snapshot (what the official viewer also accepts): the same structure as the
//! pickle, read straight into the same heap, so the same lowering, model builder and limits apply.
//!
//! The document is streamed through a serde visitor that builds heap values as it goes: reading
//! it into a `serde_json::Value` first held the whole tree in memory before any limit was looked
//! at (a 450 MB document of empty objects took the server to 5.6 GB; issue 38, item 1).

use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};
use crate::values::{Heap, HeapErr, Kind, Value};

/// Reads the document into `heap`: its root value and the bytes it took.
pub(crate) fn read<R: Read>(reader: R, heap: &mut Heap) -> Result<(Value, u64)> {
    let consumed = Rc::new(Cell::new(0));
    let mut de = serde_json::Deserializer::from_reader(Counting {
        inner: reader,
        count: consumed.clone(),
    });
    let mut walk = Walk {
        refused: None,
        consumed: consumed.clone(),
        until_weigh: WEIGH_EVERY_VALUES,
    };
    let seed = Seed {
        heap,
        depth: 0,
        walk: &mut walk,
    };
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (parsed, walk.refused) {
        (_, Some(HeapErr::Bad(m))) => Err(Error::Json(m)),
        (_, Some(e)) => Err(e.at(consumed.get())),
        (Ok(v), None) => Ok((v, consumed.get())),
        (Err(e), None) => Err(Error::Json(e.to_string())),
    }
}

/// How many values the visitor builds between weighing what the heap holds (`Heap::weigh`).
const WEIGH_EVERY_VALUES: u32 = 1 << 12;

/// Counts the bytes serde reads, for the weighing.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// What the visitors of one document share.
struct Walk {
    /// A heap refusal (a limit), kept so that it reaches the caller as itself rather than as a
    /// JSON syntax error.
    refused: Option<HeapErr>,
    consumed: Rc<Cell<u64>>,
    until_weigh: u32,
}

/// Builds one JSON value (and everything in it) in the heap.
struct Seed<'a> {
    heap: &'a mut Heap,
    depth: usize,
    walk: &'a mut Walk,
}

impl Seed<'_> {
    fn child(&mut self) -> Seed<'_> {
        Seed {
            heap: &mut *self.heap,
            depth: self.depth + 1,
            walk: &mut *self.walk,
        }
    }

    /// `r`'s value, or the serde error that stops the document with the refusal kept.
    fn held<T, E: serde::de::Error>(
        &mut self,
        r: std::result::Result<T, HeapErr>,
    ) -> std::result::Result<T, E> {
        r.map_err(|e| {
            let said = match &e {
                HeapErr::Limit { what, .. } => format!("{what} over its limit"),
                HeapErr::Busy { .. } => "the shared parse memory is in use".to_string(),
                HeapErr::Bad(m) => m.clone(),
            };
            self.walk.refused = Some(e);
            E::custom(said)
        })
    }

    /// Counts one value built; every so many, weighs the heap against the input read.
    fn built<E: serde::de::Error>(&mut self) -> std::result::Result<(), E> {
        self.walk.until_weigh -= 1;
        if self.walk.until_weigh > 0 {
            return Ok(());
        }
        self.walk.until_weigh = WEIGH_EVERY_VALUES;
        let weighed = self.heap.weigh(self.walk.consumed.get(), 0);
        self.held(weighed)
    }

    fn container<E: serde::de::Error>(&mut self, kind: Kind) -> std::result::Result<Value, E> {
        if self.depth > self.heap.limits.max_depth {
            let limit = self.heap.limits.max_depth as u64;
            return self.held(Err(HeapErr::Limit {
                what: "nesting depth",
                limit,
            }));
        }
        self.built()?;
        let made = self.heap.new_container(kind, Vec::new());
        self.held(made)
    }

    fn string<E: serde::de::Error>(&mut self, s: &str) -> std::result::Result<Value, E> {
        let interned = if s.len() as u64 > self.heap.limits.max_string_bytes {
            Err(HeapErr::Limit {
                what: "a string's length",
                limit: self.heap.limits.max_string_bytes,
            })
        } else {
            self.heap.intern(s)
        };
        self.held(interned).map(Value::Str)
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::None)
    }

    fn visit_bool<E>(self, b: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> std::result::Result<Value, E> {
        Ok(Value::Int(i))
    }

    fn visit_u64<E>(self, u: u64) -> std::result::Result<Value, E> {
        Ok(match i64::try_from(u) {
            Ok(i) => Value::Int(i),
            Err(_) => {
                self.heap.bigs.push(u as i128);
                Value::Big((self.heap.bigs.len() - 1) as u32)
            }
        })
    }

    fn visit_f64<E>(self, f: f64) -> std::result::Result<Value, E> {
        Ok(Value::Float(f))
    }

    fn visit_str<E: serde::de::Error>(mut self, s: &str) -> std::result::Result<Value, E> {
        self.string(s)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let list = self.container(Kind::List)?;
        while let Some(v) = seq.next_element_seed(self.child())? {
            let added = self.heap.extend(list, &[v]);
            self.held(added)?;
            self.built()?;
        }
        Ok(list)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> std::result::Result<Value, A::Error> {
        let dict = self.container(Kind::Dict)?;
        while let Some(key) = map.next_key_seed(self.child())? {
            let v = map.next_value_seed(self.child())?;
            let added = self.heap.set_items(dict, &[key, v]);
            self.held(added)?;
            self.built()?;
        }
        Ok(dict)
    }
}
