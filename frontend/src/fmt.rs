//! Formatting shared by the pages: bytes, times, counts, signed changes. Pure (but `date`), so
//! unit-tested on the host.

/// A number of bytes, whatever integer or float type it comes in.
pub trait Amount: Copy {
    fn as_f64(self) -> f64;
}

impl Amount for f64 {
    fn as_f64(self) -> f64 {
        self
    }
}
impl Amount for u64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}
impl Amount for i64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}
impl Amount for u32 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

/// `512 B`, `1.5 KiB`, `24.0 MiB`, `2.1 GiB` (binary units, one decimal).
pub fn bytes(b: impl Amount) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let b = b.as_f64();
    if b.abs() < 1024.0 {
        return format!("{b:.0} B");
    }
    let mut v = b / 1024.0;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Memory held over time, from byte × µs: `39.7 GiB·s`; `GiB·events` where the trace had no
/// clock and events stood in for µs.
pub fn held(byte_us: f64, by_events: bool) -> String {
    if by_events {
        format!("{}·events", bytes(byte_us))
    } else {
        format!("{}·s", bytes(byte_us / 1e6))
    }
}

/// Seconds relative to a start, for the time axis.
pub fn seconds(us: f64) -> String {
    let s = us / 1e6;
    if us.abs() < 1000.0 && us != 0.0 {
        // A trace of a few events can span microseconds: "0.0 ms" on every tick says nothing.
        format!("{us:.1} µs")
    } else if s.abs() < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A Unix time in milliseconds as a local date and time.
pub fn date(ms: impl Amount) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms.as_f64()));
    d.to_locale_string("en-GB", &wasm_bindgen::JsValue::UNDEFINED)
        .as_string()
        .unwrap_or_default()
}

/// A CUDA stream as a person names it: `default stream` (0, PyTorch's unless told otherwise),
/// `side stream N` for the Nth other stream of `sides` (the snapshot's non-default streams, in
/// address order), its id where it is not among them.
pub fn stream(stream: u64, sides: &[u64]) -> String {
    if stream == 0 {
        return "default stream".into();
    }
    match sides.iter().position(|&s| s == stream) {
        Some(i) => format!("side stream {}", i + 1),
        None => format!("stream {stream:#x}"),
    }
}

/// The non-default streams among `streams`, sorted and once each: what [`stream`] numbers.
pub fn side_streams(streams: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut s: Vec<u64> = streams.into_iter().filter(|&s| s != 0).collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// `1,234,567`.
pub fn count(n: u64) -> String {
    snapshot::units::thousands(n)
}

/// A change: `+1.5 GiB` / `−24.0 MiB` (bytes) or `+3` / `−1,000` (a count); `0` for none.
pub fn signed(delta: i64, as_bytes: bool) -> String {
    let mag = if as_bytes {
        bytes(delta.unsigned_abs())
    } else {
        count(delta.unsigned_abs())
    };
    match delta.signum() {
        1 => format!("+{mag}"),
        -1 => format!("−{mag}"),
        _ => "0".into(),
    }
}

/// How long ago `t_ms` was at `now_ms`: seconds, minutes, else the date.
pub fn ago(now_ms: i64, t_ms: i64) -> String {
    let s = ((now_ms - t_ms) as f64 / 1000.0).max(0.0);
    if s < 90.0 {
        format!("{s:.0} s ago")
    } else if s < 5400.0 {
        format!("{:.0} min ago", s / 60.0)
    } else {
        date(t_ms)
    }
}

/// An error message split for people: what went wrong, and its closing parenthesis (the
/// parser's particulars: byte offsets, opcodes) for a "details" toggle.
pub fn error_parts(message: &str) -> (String, Option<String>) {
    let m = message.trim_end();
    if !m.ends_with(')') {
        return (message.to_string(), None);
    }
    // The '(' matching the final ')'.
    let mut depth = 0i32;
    for (i, c) in m.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    let say = m[..i].trim_end();
                    if say.is_empty() {
                        break;
                    }
                    return (say.to_string(), Some(m[i + 1..m.len() - 1].to_string()));
                }
            }
            _ => {}
        }
    }
    (message.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_named_default_or_side_n() {
        let sides = side_streams([0, 0x7f20, 0x7f10, 0x7f20]);
        assert_eq!(sides, vec![0x7f10, 0x7f20]);
        assert_eq!(stream(0, &sides), "default stream");
        assert_eq!(stream(0x7f10, &sides), "side stream 1");
        assert_eq!(stream(0x7f20, &sides), "side stream 2");
        assert_eq!(stream(0x99, &sides), "stream 0x99");
    }

    #[test]
    fn an_error_keeps_its_particulars_for_the_details_toggle() {
        let (say, more) = error_parts(
            "not a memory snapshot: the file is neither a pickle nor JSON; it starts with the text “hi” (malformed pickle at offset 0: DICT/LIST/TUPLE without a MARK)",
        );
        assert_eq!(
            say,
            "not a memory snapshot: the file is neither a pickle nor JSON; it starts with the text “hi”"
        );
        assert_eq!(
            more.unwrap(),
            "malformed pickle at offset 0: DICT/LIST/TUPLE without a MARK"
        );
        assert_eq!(
            error_parts("the upload is empty"),
            ("the upload is empty".to_string(), None)
        );
    }

    #[test]
    fn bytes_use_binary_units_whatever_the_number_type() {
        assert_eq!(bytes(0u64), "0 B");
        assert_eq!(bytes(1023i64), "1023 B");
        assert_eq!(bytes(1536u64), "1.5 KiB");
        assert_eq!(bytes(24u64 << 20), "24.0 MiB");
        assert_eq!(bytes(3.0 * (1u64 << 30) as f64), "3.0 GiB");
        assert_eq!(bytes(-(2i64 << 20)), "-2.0 MiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn counts_changes_and_times_read_as_people_write_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(signed(24 << 20, true), "+24.0 MiB");
        assert_eq!(signed(-1000, false), "−1,000");
        assert_eq!(signed(0, true), "0");
        assert_eq!(seconds(2_500.0), "2.5 ms");
        assert_eq!(seconds(12.5), "12.5 µs");
        assert_eq!(seconds(6_230_000.0), "6.23 s");
        assert_eq!(ago(100_000, 40_000), "60 s ago");
        assert_eq!(ago(1_000_000, 400_000), "10 min ago");
    }

    #[test]
    fn memory_held_over_time_reads_in_byte_seconds() {
        // 2 GiB held for 1.5 s.
        assert_eq!(held(2.0 * (1u64 << 30) as f64 * 1.5e6, false), "3.0 GiB·s");
        assert_eq!(held(4096.0 * 10.0, true), "40.0 KiB·events");
    }
}
