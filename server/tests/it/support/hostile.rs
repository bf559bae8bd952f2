//! Uploads built to take memory (issue 38, item 1), shared by the engine's tests, the server's
//! memory benchmark and the collectors' soak (the other suites include this file by path):
//! each is `total` bytes of a well-formed document that a snapshot reader must refuse early.
#![allow(dead_code)]

/// A pickle list of distinct 8-character strings (`X` + length + text + `APPEND`), then `STOP`:
/// no dict anywhere.
pub fn distinct_strings(total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + 16);
    out.extend(b"\x80\x02]");
    let mut i = 0u64;
    while out.len() + 15 < total {
        out.push(b'X');
        out.extend(8u32.to_le_bytes());
        out.extend(format!("{:08x}", i & 0xffff_ffff).as_bytes());
        out.push(b'a');
        i += 1;
    }
    out.push(b'.');
    out
}

/// A pickle that opens with a dict (so it passes the early check for structure) and then
/// lists distinct 8-character strings under `segments`.
pub fn dict_then_strings(total: usize) -> Vec<u8> {
    let mut out = b"\x80\x02}X\x08\x00\x00\x00segments]".to_vec();
    let body = distinct_strings(total - out.len() - 3);
    out.extend(&body[3..body.len() - 1]);
    out.extend(b"s.");
    out
}

/// `{"segments":[{},{},…]}`.
pub fn empty_segments(total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + 16);
    out.extend(b"{\"segments\":[{}");
    while out.len() + 5 < total {
        out.extend(b",{}");
    }
    out.extend(b"]}");
    out
}
