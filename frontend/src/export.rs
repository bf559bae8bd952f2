//! What the dashboard hands out to be read elsewhere: the call sites as CSV (a spreadsheet of
//! what the Stacks tab lists), as a `data:` link the browser downloads without asking the server,
//! and a page's address on the clipboard. The CSV and the link are pure, tested on the host.

use wasm_bindgen::JsCast;

/// A CSV field: quoted when it holds a comma, a quote or a line break (quotes doubled).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The call sites, one row each, in the answer's weight, largest first: bytes, share of the
/// total, allocations, distinct stacks, the site (file, line, function) and its stack, frames
/// separated by ` <- `. Weighed by time held, the share is of all memory held, and two columns
/// come first: byte × seconds held and the average bytes held over the trace; `bytes` is then
/// every byte allocated at the site.
pub fn call_sites_csv(r: &::api::StackReport) -> String {
    let mut rows: Vec<&::api::CallSite> = r.sites.iter().collect();
    let w = r.weight;
    rows.sort_by(|a, b| w.of(b.bytes, b.held).total_cmp(&w.of(a.bytes, a.held)));
    let total = w.of(r.total_bytes, r.flame.held).max(1.0);
    let mut out = String::new();
    if r.held.is_some() {
        out.push_str("held_byte_seconds,average_bytes_held,");
    }
    out.push_str("bytes,share_percent,allocations,stacks,filename,line,function,stack\n");
    for c in rows {
        let (file, line, name) = match &c.site {
            Some(f) => (f.filename.as_str(), f.line.to_string(), f.name.as_str()),
            None => ("", String::new(), ::api::NO_STACK),
        };
        let stack: Vec<String> = c
            .frames
            .iter()
            .map(|f| format!("{}:{} {}", f.filename, f.line, f.name))
            .collect();
        if let Some(clock) = &r.held {
            out.push_str(&format!(
                "{:.3},{:.0},",
                c.held / 1e6,
                clock.average_bytes(c.held)
            ));
        }
        out.push_str(&format!(
            "{},{:.2},{},{},{},{},{},{}\n",
            c.bytes,
            100.0 * w.of(c.bytes, c.held) / total,
            c.count,
            c.stacks,
            field(file),
            line,
            field(name),
            field(&stack.join(" <- "))
        ));
    }
    out
}

/// A `data:` address of `text` as a file of `mime` type.
pub fn data_url(mime: &str, text: &str) -> String {
    let mut out = format!("data:{mime};charset=utf-8,");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Writes `text` to the clipboard (`navigator.clipboard.writeText`); an error where the browser
/// gives this page no clipboard (not focused, not a secure context, refused).
pub async fn copy_text(text: &str) -> Result<(), String> {
    let get = |o: &wasm_bindgen::JsValue, key: &str| {
        js_sys::Reflect::get(o, &key.into())
            .ok()
            .filter(|v| !v.is_undefined())
    };
    let window: wasm_bindgen::JsValue = web_sys::window().ok_or("no window")?.into();
    let clipboard = get(&window, "navigator")
        .and_then(|n| get(&n, "clipboard"))
        .ok_or("no clipboard")?;
    let write = get(&clipboard, "writeText")
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .ok_or("no clipboard")?;
    let promise = write
        .call1(&clipboard, &text.into())
        .ok()
        .and_then(|p| p.dyn_into::<js_sys::Promise>().ok())
        .ok_or("the clipboard refused")?;
    wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .map(|_| ())
        .map_err(|_| "the clipboard refused".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(file: &str, line: u32, name: &str, bytes: u64) -> ::api::CallSite {
        let f = ::api::Frame {
            filename: file.into(),
            line,
            name: name.into(),
        };
        ::api::CallSite {
            site: Some(f.clone()),
            bytes,
            count: 2,
            held: bytes as f64 * (1000 - bytes) as f64,
            frames: vec![f.clone(), f],
            stacks: 1,
        }
    }

    #[test]
    fn call_sites_are_rows_largest_first_with_awkward_names_quoted() {
        let sites = vec![site("a.py", 3, "f", 100), site("b, \"c\".py", 9, "g", 300)];
        let mut r = report(sites);
        let csv = call_sites_csv(&r);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "bytes,share_percent,allocations,stacks,filename,line,function,stack"
        );
        assert_eq!(
            lines[1],
            "300,75.00,2,1,\"b, \"\"c\"\".py\",9,g,\"b, \"\"c\"\".py:9 g <- b, \"\"c\"\".py:9 g\""
        );
        assert_eq!(lines[2], "100,25.00,2,1,a.py,3,f,a.py:3 f <- a.py:3 f");

        // Weighed by time held: a.py held 100 B × 900 µs, b 300 B × 700 µs, over 1000 µs.
        r.weight = ::api::FlameWeight::Held;
        r.flame.held = 300_000.0;
        r.held = Some(::api::HeldClock {
            span_us: 1000.0,
            by_events: false,
            before_trace: 0,
            at_snapshot: 0,
        });
        let csv = call_sites_csv(&r);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("held_byte_seconds,average_bytes_held,bytes,share_percent"));
        assert!(
            lines[1].starts_with("0.210,210,300,70.00,2,1,"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("0.090,90,100,30.00,2,1,a.py"),
            "{}",
            lines[2]
        );
    }

    fn report(sites: Vec<::api::CallSite>) -> ::api::StackReport {
        ::api::StackReport {
            device: 0,
            position: 1,
            total_bytes: sites.iter().map(|s| s.bytes).sum(),
            count: 4,
            sites,
            frames: ::api::FlameFrames::Python,
            weight: ::api::FlameWeight::Live,
            held: None,
            flame: ::api::FlameNode {
                name: "all".into(),
                filename: String::new(),
                line: 0,
                bytes: 400,
                count: 4,
                held: 0.0,
                children: Vec::new(),
            },
        }
    }

    #[test]
    fn a_data_url_escapes_everything_but_unreserved_characters() {
        assert_eq!(
            data_url("text/csv", "a,b\n"),
            "data:text/csv;charset=utf-8,a%2Cb%0A"
        );
    }
}
