//! Downloads: the `Content-Disposition` of a file the server hands out under a name (the
//! original upload, a report), and a file streamed in chunks. Shared by the library's and the
//! snapshots' routes and by `memscope open`'s uploads.

/// `Content-Disposition` for a download named `name` (RFC 6266): an ASCII `filename` for old
/// clients and the exact name as UTF-8 in `filename*`; a control character (in a name stored
/// before names were checked) becomes `_`, so the header is always valid.
pub fn attachment(name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let printable: String = name
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect();
    let exact = percent_encoding::utf8_percent_encode(&printable, ATTR_CHAR);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}")
}

/// RFC 5987's `attr-char`: what a `filename*` value may hold unencoded.
const ATTR_CHAR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// Streams a file in 256 KiB chunks.
pub fn file_chunks(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<Vec<u8>>> {
    futures_util::stream::unfold(file, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(buf), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_download_name_is_one_valid_header_whatever_it_holds() {
        assert_eq!(
            super::attachment("run \"7\".pickle"),
            "attachment; filename=\"run _7_.pickle\"; filename*=UTF-8''run%20%227%22.pickle"
        );
        let crlf = super::attachment("a\r\nSet-Cookie: x\0.pickle");
        assert!(crlf.chars().all(|c| !c.is_control()), "{crlf}");
        assert!(axum::http::HeaderValue::from_str(&crlf).is_ok());
        assert!(super::attachment("mémoire.pickle").ends_with("m%C3%A9moire.pickle"));
    }
}
