//! The JSON form of a snapshot (what the official viewer also accepts): the same structure as the
//! pickle, converted into the same values so the same lowering and model builder apply.

use std::io::Read;

use crate::error::{Error, Result};
use crate::values::{Heap, HeapErr, Kind, Value};

pub(crate) fn read<R: Read>(reader: R, heap: &mut Heap) -> Result<Value> {
    let doc: serde_json::Value =
        serde_json::from_reader(reader).map_err(|e| Error::Json(e.to_string()))?;
    convert(&doc, heap, 0).map_err(|e| match e {
        HeapErr::Limit { what, limit } => Error::LimitExceeded {
            offset: 0,
            what,
            limit,
        },
        HeapErr::Bad(m) => Error::Json(m),
    })
}

fn convert(v: &serde_json::Value, heap: &mut Heap, depth: usize) -> Result<Value, HeapErr> {
    use serde_json::Value as J;
    if depth > heap.limits.max_depth {
        return Err(HeapErr::Limit {
            what: "nesting depth",
            limit: heap.limits.max_depth as u64,
        });
    }
    Ok(match v {
        J::Null => Value::None,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => {
                heap.bigs.push(u as i128);
                Value::Big((heap.bigs.len() - 1) as u32)
            }
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::Str(intern_bounded(heap, s)?),
        J::Array(items) => {
            let list = heap.new_container(Kind::List, Vec::new())?;
            for item in items {
                let v = convert(item, heap, depth + 1)?;
                heap.extend(list, &[v])?;
            }
            list
        }
        J::Object(map) => {
            let dict = heap.new_container(Kind::Dict, Vec::new())?;
            for (k, item) in map {
                let key = Value::Str(intern_bounded(heap, k)?);
                let v = convert(item, heap, depth + 1)?;
                heap.set_items(dict, &[key, v])?;
            }
            dict
        }
    })
}

/// A string held to the same limit as a pickle's (`Limits::max_string_bytes`).
fn intern_bounded(heap: &mut Heap, s: &str) -> Result<crate::intern::StrId, HeapErr> {
    if s.len() as u64 > heap.limits.max_string_bytes {
        return Err(HeapErr::Limit {
            what: "a string's length",
            limit: heap.limits.max_string_bytes,
        });
    }
    heap.intern(s)
}
