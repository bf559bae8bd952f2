//! `memscope mcp`'s protocol layer, in process: the handshake, errors for what is not a request,
//! notifications answered with nothing, lines over the limit refused without losing the session.
//! (The tools are driven by the official Python SDK in tests/mcp/test_mcp.py.)

use serde_json::{Value, json};

/// Every answer `memscope mcp` writes for these input lines.
fn exchange(lines: &[String]) -> Vec<Value> {
    let input = lines.join("\n") + "\n";
    let mut out = Vec::new();
    server::mcp::serve(input.as_bytes(), &mut out).expect("serves");
    String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each answer is one JSON line"))
        .collect()
}

fn request(id: u32, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[test]
fn the_handshake_takes_the_clients_revision_or_offers_the_newest() {
    let a = exchange(&[
        request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        request(2, "initialize", json!({"protocolVersion": "1999-01-01"})),
        request(3, "ping", json!({})),
    ]);
    assert_eq!(a.len(), 3, "the notification gets no answer: {a:?}");
    assert_eq!(a[0]["id"], 1);
    assert_eq!(a[0]["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(a[0]["result"]["serverInfo"]["name"], "memscope");
    assert!(a[0]["result"]["capabilities"]["tools"].is_object());
    assert_eq!(a[1]["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(a[2], json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
}

#[test]
fn what_is_not_a_request_gets_a_json_rpc_error_and_the_session_goes_on() {
    let long = format!("{{\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    let a = exchange(&[
        "{not json".to_string(),
        "[1, 2]".to_string(),
        request(4, "resources/list", json!({})),
        request(5, "server/discover", json!({})),
        request(6, "tools/call", json!({"name": "nope", "arguments": {}})),
        long,
        request(7, "tools/list", json!({})),
    ]);
    let codes: Vec<i64> = a[..6]
        .iter()
        .map(|m| m["error"]["code"].as_i64().expect("an error"))
        .collect();
    assert_eq!(codes, [-32700, -32600, -32601, -32601, -32602, -32600]);
    assert!(
        a[5]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most")
    );
    let tools = a[6]["result"]["tools"].as_array().expect("tools");
    assert_eq!(a[6]["id"], 7);
    assert!(tools.len() >= 10);
}

#[test]
fn a_tool_error_is_a_result_the_agent_reads() {
    let a = exchange(&[request(
        1,
        "tools/call",
        json!({"name": "report", "arguments": {"file": "/nonexistent/x.pickle"}}),
    )]);
    assert_eq!(a[0]["result"]["isError"], true);
    let text = a[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("cannot open /nonexistent/x.pickle"), "{text}");
}
