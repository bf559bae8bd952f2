//! Formatting shared by the pages: bytes, times, counts.

pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
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

pub fn bytes_of(v: &serde_json::Value) -> String {
    bytes(v.as_f64().unwrap_or(0.0))
}

/// Seconds relative to a start, for the time axis.
pub fn seconds(us: f64) -> String {
    let s = us / 1e6;
    if s.abs() < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

pub fn date(ms: f64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms));
    d.to_locale_string("en-GB", &wasm_bindgen::JsValue::UNDEFINED)
        .as_string()
        .unwrap_or_default()
}

pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A call site's frame as `frame` writes it, or `(no frames)` where the stack had none.
pub fn site(f: &serde_json::Value) -> String {
    if f.is_null() {
        "(no frames)".into()
    } else {
        frame(f)
    }
}

pub fn frame(f: &serde_json::Value) -> String {
    format!(
        "{}:{} {}",
        f["filename"]
            .as_str()
            .unwrap_or("?")
            .rsplit('/')
            .next()
            .unwrap_or("?"),
        f["line"].as_u64().unwrap_or(0),
        f["name"].as_str().unwrap_or("")
    )
}
