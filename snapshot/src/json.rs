//! The JSON form of a snapshot (what the official viewer also accepts): the same structure as the
//! pickle, read straight into the same heap, so the same lowering, model builder and limits apply.
//!
//! The document is streamed through a serde visitor that builds heap values as it goes: reading
//! it into a `serde_json::Value` first held the whole tree in memory before any limit was looked
//! at (a 450 MB document of empty objects took the server to 5.6 GB; issue 38, item 1).

use std::io::Read;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};
use crate::values::{Heap, HeapErr, Kind, Value};

pub(crate) fn read<R: Read>(reader: R, heap: &mut Heap) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let mut refused = None;
    let seed = Seed {
        heap,
        depth: 0,
        refused: &mut refused,
    };
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (parsed, refused) {
        (_, Some(HeapErr::Limit { what, limit })) => Err(Error::LimitExceeded {
            offset: 0,
            what,
            limit,
        }),
        (_, Some(HeapErr::Bad(m))) => Err(Error::Json(m)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(Error::Json(e.to_string())),
    }
}

/// Builds one JSON value (and everything in it) in the heap. A heap refusal (a limit) is kept
/// in `refused`, so it reaches the caller as itself rather than as a JSON syntax error.
struct Seed<'a> {
    heap: &'a mut Heap,
    depth: usize,
    refused: &'a mut Option<HeapErr>,
}

impl Seed<'_> {
    fn child(&mut self) -> Seed<'_> {
        Seed {
            heap: &mut *self.heap,
            depth: self.depth + 1,
            refused: &mut *self.refused,
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
                HeapErr::Bad(m) => m.clone(),
            };
            *self.refused = Some(e);
            E::custom(said)
        })
    }

    fn container<E: serde::de::Error>(&mut self, kind: Kind) -> std::result::Result<Value, E> {
        if self.depth > self.heap.limits.max_depth {
            let limit = self.heap.limits.max_depth as u64;
            return self.held(Err(HeapErr::Limit {
                what: "nesting depth",
                limit,
            }));
        }
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
        }
        Ok(list)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> std::result::Result<Value, A::Error> {
        let dict = self.container(Kind::Dict)?;
        while let Some(key) = map.next_key_seed(self.child())? {
            let v = map.next_value_seed(self.child())?;
            let added = self.heap.set_items(dict, &[key, v]);
            self.held(added)?;
        }
        Ok(dict)
    }
}
