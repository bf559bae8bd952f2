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

/// The call sites, one row each, largest first: bytes, share of the total, allocations,
/// distinct stacks, the site (file, line, function) and its stack, frames separated by ` <- `.
pub fn call_sites_csv(sites: &[::api::CallSite], total_bytes: u64) -> String {
    let mut rows: Vec<&::api::CallSite> = sites.iter().collect();
    rows.sort_by_key(|c| std::cmp::Reverse(c.bytes));
    let mut out =
        String::from("bytes,share_percent,allocations,stacks,filename,line,function,stack\n");
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
        out.push_str(&format!(
            "{},{:.2},{},{},{},{},{},{}\n",
            c.bytes,
            100.0 * c.bytes as f64 / total_bytes.max(1) as f64,
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
            frames: vec![f.clone(), f],
            stacks: 1,
        }
    }

    #[test]
    fn call_sites_are_rows_largest_first_with_awkward_names_quoted() {
        let sites = vec![site("a.py", 3, "f", 100), site("b, \"c\".py", 9, "g", 300)];
        let csv = call_sites_csv(&sites, 400);
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
    }

    #[test]
    fn a_data_url_escapes_everything_but_unreserved_characters() {
        assert_eq!(
            data_url("text/csv", "a,b\n"),
            "data:text/csv;charset=utf-8,a%2Cb%0A"
        );
    }
}
