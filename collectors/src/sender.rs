//! Ships spooled batches to the server: `POST /api/ingest` with the collector's token, the spool's
//! gzip file as the body; the batch is deleted only after the server's acknowledgement.

use std::time::Duration;

/// Why a batch was not acknowledged.
#[derive(Debug)]
pub enum SendError {
    /// The server could not be reached or timed out: keep the batch, retry later.
    Unreachable(String),
    /// The server refused the batch (bad token, malformed): retrying will not help.
    Refused { status: u16, message: String },
    /// The server has this batch's key stored with different content (409): resending cannot
    /// help and deleting it would lose it.
    Conflict(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Unreachable(m) => write!(f, "server unreachable: {m}"),
            SendError::Refused { status, message } => {
                write!(f, "server refused the batch ({status}): {message}")
            }
            SendError::Conflict(m) => write!(f, "server holds other content for this batch: {m}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Sender {
    agent: ureq::Agent,
    url: String,
    token: String,
}

impl Sender {
    pub fn new(server: &str, token: &str) -> Sender {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .into();
        Sender {
            agent,
            url: format!("{}/api/ingest", server.trim_end_matches('/')),
            token: token.to_string(),
        }
    }

    /// Sends one spooled batch (gzip JSON); Ok with the server's acknowledgement.
    pub fn send(&self, body: &[u8]) -> Result<wire::Ack, SendError> {
        let resp = self
            .agent
            .post(&self.url)
            .header("authorization", &format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .send(body)
            .map_err(|e| SendError::Unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp.into_body().read_to_string().unwrap_or_default();
        match status {
            200 => serde_json::from_str(&text)
                .map_err(|e| SendError::Unreachable(format!("unexpected answer: {e}"))),
            409 => Err(SendError::Conflict(text)),
            s if (500..600).contains(&s) || s == 429 => {
                SendError::Unreachable(format!("status {s}")).into_err()
            }
            s => Err(SendError::Refused {
                status: s,
                message: text,
            }),
        }
    }
}

impl SendError {
    fn into_err<T>(self) -> Result<T, SendError> {
        Err(self)
    }
}

/// Exponential backoff with jitter: 0.5 s doubling to 30 s, ±25%.
pub fn backoff(attempt: u32, jitter_seed: u64) -> Duration {
    let base = (500u64 << attempt.min(6)).min(30_000);
    let jitter = (jitter_seed % 500) as i64 - 250; // ±250 ‰ of base, in thousandths
    Duration::from_millis((base as i64 + base as i64 * jitter / 1000).max(50) as u64)
}
