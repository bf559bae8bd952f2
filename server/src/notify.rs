//! The webhook notifier (`--webhook-url`): live OOMs and processes found growing step over step,
//! told to a chat channel or any receiver of Slack-compatible JSON (`{"text": …}`, with the
//! figures under `memscope`). The one seam to that receiver.
//!
//! Nothing is lost: a scan turns each OOM event the live store holds, and each process the live
//! leak signal finds rising, into an outbox row (`live::outbox`) before anything is sent; a
//! sender posts due rows oldest first and marks each the receiver took (2xx), and retries the
//! others with a backoff (2 s doubling to 5 minutes). A restart resends what was not delivered,
//! and its first scan starts where the queued OOMs end, so an OOM stored while the server was
//! down or between scan and crash is still told. A message is sent at least once; its
//! `Idempotency-Key` header lets a receiver drop a repeat.

use std::time::Duration;

use crate::live::Live;

/// How often the live store is scanned for OOMs (and due messages sent).
const TICK: Duration = Duration::from_secs(2);
/// How often processes are checked for growth, in ticks (10 s; each process costs a query of
/// its steps).
const GROWTH_EVERY_TICKS: u32 = 5;
/// A first scan (an empty outbox) looks back this far: enabling the webhook does not replay
/// older history.
const FIRST_LOOK_BACK_MS: i64 = 10 * 60_000;
/// A later scan starts this far before the latest queued OOM (events arrive out of order across
/// hosts; the key keeps them from being queued twice).
const OVERLAP_MS: i64 = 10 * 60_000;
/// The longest wait between tries of one message.
const MAX_BACKOFF_MS: i64 = 5 * 60_000;

/// Runs the notifier until `stop` turns true.
pub async fn run(
    live: Live,
    url: String,
    dashboard: Option<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tracing::info!(url = %redact(&url), "webhook notifier on: live OOMs and growing processes");
    let mut tick = tokio::time::interval(TICK);
    let mut n = 0u32;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = queue_ooms(&live, dashboard.as_deref()).await {
            tracing::warn!("webhook: scanning for OOMs failed (will retry): {e}");
        }
        if n.is_multiple_of(GROWTH_EVERY_TICKS)
            && let Err(e) = queue_growth(&live, dashboard.as_deref()).await
        {
            tracing::warn!("webhook: checking for growth failed (will retry): {e}");
        }
        n = n.wrapping_add(1);
        if let Err(e) = send_due(&live, &url).await {
            tracing::warn!("webhook: reading the outbox failed (will retry): {e}");
        }
    }
}

/// The address without its path and query (a Slack webhook's secret is its path).
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}/…", rest.split('/').next().unwrap_or("")),
        None => "…".into(),
    }
}

async fn queue_ooms(live: &Live, dashboard: Option<&str>) -> sqlx::Result<()> {
    let since = match live.outbox_latest_oom_ms().await? {
        Some(t) => t - OVERLAP_MS,
        None => crate::now_ms() - FIRST_LOOK_BACK_MS,
    };
    for e in live.ooms_since(since, 1000).await? {
        let key = format!(
            "oom:{}:{}:{}:{}",
            e.host,
            e.pid.unwrap_or(-1),
            e.device.unwrap_or(-1),
            e.time_ms
        );
        let body = oom_message(&e, dashboard);
        if live.outbox_add(&key, e.time_ms, &body).await? {
            tracing::info!(host = e.host, pid = e.pid, "webhook: OOM queued");
        }
    }
    Ok(())
}

async fn queue_growth(live: &Live, dashboard: Option<&str>) -> sqlx::Result<()> {
    let (_, growing) = crate::live::growing_since(live, crate::now_ms() - 5 * 60_000).await?;
    for g in growing {
        let key = format!(
            "growth:{}:{}:{}:{}",
            g.host,
            g.pid,
            g.start_time_ms.unwrap_or(0),
            g.device
        );
        live.outbox_add(&key, crate::now_ms(), &growth_message(&g, dashboard))
            .await?;
    }
    Ok(())
}

/// The process's live page, where the dashboard's address is known.
fn process_link(dashboard: Option<&str>, host: &str, pid: Option<i64>) -> String {
    match (dashboard, pid) {
        (Some(d), Some(pid)) => format!(
            " <{}{}|process page>",
            d.trim_end_matches('/'),
            api::routes::page::live_process(host, pid, None)
        ),
        _ => String::new(),
    }
}

/// A live OOM in Slack's words, with its figures.
pub fn oom_message(e: &crate::live::EventRow, dashboard: Option<&str>) -> String {
    let device = e
        .device
        .map_or("a GPU".to_string(), |d| format!("cuda:{d}"));
    let pid = e.pid.map_or(String::new(), |p| format!(" (pid {p})"));
    let snapshot = match (&e.snapshot_id, dashboard) {
        (Some(id), Some(d)) => format!(
            " <{}{}|its snapshot's verdict>",
            d.trim_end_matches('/'),
            api::routes::page::snapshot(id, &[("view", "oom")])
        ),
        (Some(id), None) => format!(" Snapshot {id} is in the library."),
        _ => String::new(),
    };
    let text = format!(
        ":rotating_light: *Out of memory* on {} {device}{pid}: {}.{snapshot}{}",
        e.host,
        e.message.trim_end_matches('.'),
        process_link(dashboard, &e.host, e.pid)
    );
    serde_json::json!({
        "text": text,
        "memscope": {
            "kind": "oom",
            "host": e.host,
            "pid": e.pid,
            "device": e.device,
            "time_ms": e.time_ms,
            "message": e.message,
            "snapshot_id": e.snapshot_id,
        }
    })
    .to_string()
}

/// A process found growing, in Slack's words, with its figures.
pub fn growth_message(g: &crate::live::Growing, dashboard: Option<&str>) -> String {
    let per_step = snapshot::analysis::human_bytes(g.signal.bytes_per_step.max(0.0) as u64);
    let text = format!(
        ":chart_with_upwards_trend: *Memory growing* on {} cuda:{} (pid {}): what it holds between steps rose {} over its last {} steps, about {per_step} a step: a leak (tensors kept across steps).{}",
        g.host,
        g.device,
        g.pid,
        snapshot::analysis::human_bytes(g.signal.growth_bytes.max(0) as u64),
        g.signal.steps,
        process_link(dashboard, &g.host, Some(g.pid))
    );
    serde_json::json!({
        "text": text,
        "memscope": {
            "kind": "growth",
            "host": g.host,
            "pid": g.pid,
            "device": g.device,
            "bytes_per_step": g.signal.bytes_per_step,
            "growth_bytes": g.signal.growth_bytes,
            "steps": g.signal.steps,
        }
    })
    .to_string()
}

/// Posts the due messages, oldest first; a failure is retried later with a longer wait.
async fn send_due(live: &Live, url: &str) -> sqlx::Result<()> {
    for m in live.outbox_due(crate::now_ms(), 32).await? {
        let (u, body, key) = (url.to_string(), m.body.clone(), m.key.clone());
        let sent = tokio::task::spawn_blocking(move || post(&u, &key, &body))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match sent {
            Ok(()) => live.outbox_delivered(m.id).await?,
            Err(e) => {
                let wait = (2_000i64 << m.attempts.clamp(0, 20)).min(MAX_BACKOFF_MS);
                tracing::warn!(
                    key = m.key,
                    attempt = m.attempts + 1,
                    "webhook: not delivered ({e}); next try in {} s",
                    wait / 1000
                );
                live.outbox_failed(m.id, crate::now_ms() + wait, &e).await?;
                // The receiver is down: the rest waits for the next tick.
                break;
            }
        }
    }
    Ok(())
}

/// One POST; Ok when the receiver answered 2xx.
fn post(url: &str, key: &str, body: &str) -> Result<(), String> {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let answer = agent
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .send(body)
        .map_err(|e| e.to_string())?;
    let status = answer.status().as_u16();
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(format!("the receiver answered {status}"))
    }
}
