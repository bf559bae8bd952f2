//! `memscope mcp`: a Model Context Protocol server on standard input and output, so a coding
//! agent can ask what a person asks the dashboard (the report, OOM verdicts, leak suspects, memory
//! by stack or category, what-if, predict, a diff, a run's ranks) about snapshot files on this
//! machine. This file is the protocol: newline-delimited JSON-RPC 2.0, the `initialize`
//! handshake (protocol revisions 2024-11-05 to 2025-11-25), `ping`, `tools/list` and
//! `tools/call`; `tools.rs` is what each tool takes and answers. Nothing but protocol messages
//! is written to standard output (logs go to standard error), and every answer is bounded.

mod tools;

use std::io::{BufRead, Write};

use serde_json::{Value, json};

/// The protocol revisions this server speaks, oldest to newest: the handshake era, which every
/// client of 2025-2026 can fall back to.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The longest request line read (a tool call's arguments are a few paths and numbers).
const MAX_LINE_BYTES: u64 = 1 << 20;

/// JSON-RPC's error codes.
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
}

/// A JSON-RPC error answer.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Serves one client until its input ends.
pub fn serve(input: impl BufRead, mut output: impl Write) -> anyhow::Result<()> {
    let mut session = Session::default();
    let mut input = input.take(MAX_LINE_BYTES);
    let mut line = Vec::new();
    loop {
        line.clear();
        input.set_limit(MAX_LINE_BYTES);
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && input.limit() == 0 {
            // Over the limit: answer once, then skip the rest of the line.
            write_message(
                &mut output,
                &error_answer(
                    Value::Null,
                    RpcError::new(
                        code::INVALID_REQUEST,
                        format!("a message is at most {MAX_LINE_BYTES} bytes"),
                    ),
                ),
            )?;
            skip_line(&mut input)?;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(answer) = session.handle(&line) {
            write_message(&mut output, &answer)?;
        }
    }
}

fn skip_line(input: &mut std::io::Take<impl BufRead>) -> std::io::Result<()> {
    let mut rest = Vec::new();
    loop {
        rest.clear();
        input.set_limit(MAX_LINE_BYTES);
        if input.read_until(b'\n', &mut rest)? == 0 || rest.last() == Some(&b'\n') {
            return Ok(());
        }
    }
}

fn write_message(output: &mut impl Write, message: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *output, message)?;
    output.write_all(b"\n")?;
    output.flush()
}

fn error_answer(id: Value, e: RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
}

/// One client's connection: the snapshots it has opened (kept for the next call).
#[derive(Default)]
struct Session {
    files: tools::Files,
}

impl Session {
    /// The answer to one message (none for notifications and for answers to our requests).
    fn handle(&mut self, line: &[u8]) -> Option<Value> {
        let message: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                return Some(error_answer(
                    Value::Null,
                    RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}")),
                ));
            }
        };
        let Some(object) = message.as_object() else {
            return Some(error_answer(
                Value::Null,
                RpcError::new(
                    code::INVALID_REQUEST,
                    "a message is one JSON-RPC object (batches are not taken)",
                ),
            ));
        };
        let method = object.get("method").and_then(Value::as_str);
        let id = object.get("id").cloned();
        match (method, id) {
            // A notification (initialized, cancelled, ...): nothing to answer.
            (Some(_), None) => None,
            (Some(method), Some(id)) => {
                let params = object.get("params").cloned().unwrap_or(Value::Null);
                Some(match self.call(method, params) {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err(e) => error_answer(id, e),
                })
            }
            // An answer to a request of ours: this server sends none.
            (None, _) => None,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": tools::list()})),
            "tools/call" => {
                let name = params.get("name").and_then(Value::as_str).ok_or_else(|| {
                    RpcError::new(code::INVALID_PARAMS, "tools/call needs a name")
                })?;
                let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
                self.files.call(name, arguments).ok_or_else(|| {
                    RpcError::new(
                        code::INVALID_PARAMS,
                        format!("unknown tool {name:?}: tools/list names them"),
                    )
                })
            }
            _ => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "method {method:?} is not served (memscope mcp serves initialize, ping, tools/list and tools/call)"
                ),
            )),
        }
    }
}

/// The handshake: the client's revision when this server speaks it, else the newest it does.
fn initialize(params: &Value) -> Value {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .unwrap_or(&PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "memscope", "version": env!("CARGO_PKG_VERSION")},
        "instructions": tools::INSTRUCTIONS,
    })
}
