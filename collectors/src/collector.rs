//! The collector's loops: the sampler (source → batch → spool) and the shipper (spool → server).
//! They share only the spool, so sampling never waits on the network.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::relay::Relay;
use crate::sender::{SendError, Sender, backoff};
use crate::source::{Reading, Source};
use crate::spool::Spool;

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Settings of a running collector.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub host: String,
    pub interval: Duration,
    /// Readings per batch.
    pub readings_per_batch: usize,
    /// The agent folder to relay in-process agents' data from.
    pub relay: Option<Relay>,
}

/// Takes `readings` readings (all of them if `None`) at `interval`, spooling a batch every
/// `readings_per_batch`; returns how many samples were spooled.
pub fn sample(
    cfg: &Config,
    source: &mut dyn Source,
    spool: &Mutex<Spool>,
    readings: Option<u64>,
    stop: &AtomicBool,
) -> std::io::Result<u64> {
    let mut pending = Reading::default();
    let mut nvml_pids: Vec<u32> = Vec::new();
    let (mut taken, mut in_batch, mut spooled) = (0u64, 0usize, 0u64);
    let mut next = Instant::now();
    while readings.is_none_or(|n| taken < n) && !stop.load(Ordering::Relaxed) {
        let r = source.read(now_ms());
        nvml_pids.clear();
        nvml_pids.extend(r.processes.iter().map(|p| p.pid));
        pending.gpus.extend(r.gpus);
        pending.processes.extend(r.processes);
        taken += 1;
        in_batch += 1;
        if in_batch >= cfg.readings_per_batch || readings.is_some_and(|n| taken == n) {
            spooled += flush(cfg, spool, &mut pending, &nvml_pids)?;
            in_batch = 0;
        }
        next += cfg.interval;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        } else {
            next = Instant::now();
        }
    }
    if in_batch > 0 {
        spooled += flush(cfg, spool, &mut pending, &nvml_pids)?;
    }
    // Pushing the last batch may have dropped older ones (the cap): one more batch reports
    // them now, rather than whenever this spool next sends (never, for one held in memory).
    // Its own push can drop at most the batches before it, so this ends within a few rounds.
    for _ in 0..3 {
        if spool.lock().expect("spool lock").dropped_samples == 0 {
            break;
        }
        flush(cfg, spool, &mut pending, &nvml_pids)?;
    }
    Ok(spooled)
}

fn flush(
    cfg: &Config,
    spool: &Mutex<Spool>,
    pending: &mut Reading,
    nvml_pids: &[u32],
) -> std::io::Result<u64> {
    let agents = cfg
        .relay
        .as_ref()
        .map(|r| r.take(nvml_pids))
        .unwrap_or_default();
    let mut s = spool.lock().expect("spool lock");
    if pending.gpus.is_empty()
        && pending.processes.is_empty()
        && agents.files.is_empty()
        && s.dropped_samples == 0
    {
        return Ok(0); // nothing to say (a host without NVML and no agent running)
    }
    let mut batch = s.batch(&cfg.name, &cfg.host);
    batch.gpus = std::mem::take(&mut pending.gpus);
    batch.processes = std::mem::take(&mut pending.processes);
    batch.allocator = agents.allocator;
    batch.events = agents.events;
    batch.dropped_samples += agents.dropped_samples;
    let had_disk = s.disk_error.is_none();
    let on_disk = s.push(&batch)?;
    if had_disk && !on_disk {
        eprintln!(
            "memscope-collector: cannot write the spool ({}); keeping batches in memory \
             (up to 32 MiB, then dropping and counting the oldest) until it can",
            s.disk_error.as_deref().unwrap_or("unknown error")
        );
    } else if !had_disk && on_disk {
        eprintln!("memscope-collector: the spool is writable again");
    }
    // Only now, with the batch kept (in the spool, or in memory if the disk refused it), may
    // the agents' files go.
    if let Some(r) = &cfg.relay {
        r.done(&agents.files);
    }
    Ok((batch.gpus.len() + batch.processes.len() + batch.allocator.len()) as u64)
}

/// Refusals of the collector's token (401, 403) in a row after which it stops: a token the server
/// does not know, or a host it does not speak for, does not mend itself.
pub const REFUSALS_BEFORE_GIVING_UP: u32 = 4;

/// What the shipper did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shipped {
    /// Batches the server acknowledged.
    pub acked: u64,
    /// Batches the server refused for good (a conflict, or malformed), moved out of the spool
    /// and kept for an operator: not delivered.
    pub set_aside: u64,
    /// Why the shipper gave up (the server refuses this collector's token or host), if it did;
    /// unsent batches stay in the spool.
    pub gave_up: Option<String>,
}

impl Shipped {
    /// Whether everything spooled was delivered (nothing set aside, nothing given up on).
    pub fn delivered_all(&self) -> bool {
        self.set_aside == 0 && self.gave_up.is_none()
    }
}

/// Sends everything in the spool until it is empty and `stop` is set, retrying with backoff while
/// the server is away; gives up when the server refuses the collector itself
/// ([`REFUSALS_BEFORE_GIVING_UP`] times in a row).
pub fn ship(
    spool: &Mutex<Spool>,
    sender: &Sender,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Shipped {
    let mut shipped = Shipped::default();
    let (mut attempt, mut refusals, mut seed) = (0u32, 0u32, 0x2545_f491_4f6c_dd1du64);
    loop {
        let pending = spool
            .lock()
            .expect("spool lock")
            .pending()
            .unwrap_or_default();
        if pending.is_empty() {
            if stop.load(Ordering::Relaxed) {
                return shipped;
            }
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let seq = pending[0];
        let (body, current_id) = {
            let s = spool.lock().expect("spool lock");
            (s.body(seq), s.id().to_string())
        };
        let Ok(body) = body else {
            // Dropped by the cap meanwhile (counted there), or unreadable: look again shortly.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        // The id the batch was numbered under (the spool's may have changed since).
        let spool_id = crate::spool::spool_id_of(&body).unwrap_or(current_id);
        match sender.send(&body) {
            Ok(ack) if ack.acknowledges(Some(&spool_id), seq) => {
                let _ = spool.lock().expect("spool lock").ack(seq);
                shipped.acked += 1;
                attempt = 0;
                refusals = 0;
            }
            Ok(ack) => {
                // Not an acknowledgement of what was sent (a server older than wire version 2
                // does not echo the spool id): keep the batch.
                log(&format!(
                    "server acknowledged seq {} of spool {:?} for batch {seq} of spool {spool_id}; keeping it",
                    ack.seq, ack.spool_id
                ));
                std::thread::sleep(backoff(6, seed));
            }
            Err(SendError::Conflict(message)) => {
                let kept = spool
                    .lock()
                    .expect("spool lock")
                    .set_aside(seq, "conflicts");
                shipped.set_aside += 1;
                log(&format!(
                    "CONFLICT: the server already holds batch {seq} of spool {spool_id} with different \
                     content, so it was not stored: {message}; the batch is kept in {}",
                    kept.map_or_else(
                        |e| format!("the spool (moving it failed: {e})"),
                        |p| p.display().to_string()
                    )
                ));
            }
            Err(SendError::Refused { status, message }) if matches!(status, 401 | 403) => {
                // The server refuses this collector (its token, or the host it speaks for):
                // every batch would be. The batches stay in the spool for when it is fixed.
                refusals += 1;
                log(&format!(
                    "REFUSED: the server refuses this collector ({status}): {message}"
                ));
                if refusals >= REFUSALS_BEFORE_GIVING_UP {
                    shipped.gave_up = Some(format!(
                        "the server refused this collector {refusals} times in a row ({status}: {message}); \
                         check --token, --name and --host against the server's --collector-token NAME=TOKEN \
                         (unsent batches stay in the spool)"
                    ));
                    return shipped;
                }
                std::thread::sleep(backoff(refusals - 1, seed));
            }
            Err(SendError::Refused { status, message }) => {
                // This batch is refused for good (malformed, too large): resending it cannot
                // help, and it would hold up every batch after it. Kept for an operator.
                let kept = spool.lock().expect("spool lock").set_aside(seq, "refused");
                shipped.set_aside += 1;
                log(&format!(
                    "REFUSED: the server refused batch {seq} of spool {spool_id} ({status}): {message}; \
                     the batch is kept in {}",
                    kept.map_or_else(
                        |e| format!("the spool (moving it failed: {e})"),
                        |p| p.display().to_string()
                    )
                ));
            }
            Err(e) => {
                if attempt == 0 {
                    log(&format!("{e}; spooling until it is back"));
                }
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                std::thread::sleep(backoff(attempt, seed));
                attempt += 1;
            }
        }
    }
}

/// Runs sampler and shipper until `stop` (or `readings` readings), then drains the spool.
/// Returns the samples spooled and what the shipper did; a shipper that gave up stops the
/// sampler too.
pub fn run(
    cfg: Config,
    mut source: Box<dyn Source>,
    spool: Spool,
    sender: Sender,
    readings: Option<u64>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(u64, Shipped)> {
    let spool = Arc::new(Mutex::new(spool));
    let ship_stop = Arc::new(AtomicBool::new(false));
    let shipper = {
        let (spool, ship_stop, stop) = (spool.clone(), ship_stop.clone(), stop.clone());
        std::thread::spawn(move || {
            let shipped = ship(&spool, &sender, &ship_stop, &|m| {
                eprintln!("memscope-collector: {m}")
            });
            if shipped.gave_up.is_some() {
                stop.store(true, Ordering::Relaxed);
            }
            shipped
        })
    };
    let spooled = sample(&cfg, source.as_mut(), &spool, readings, &stop)?;
    ship_stop.store(true, Ordering::Relaxed);
    let shipped = shipper
        .join()
        .map_err(|_| anyhow::anyhow!("shipper thread panicked"))?;
    Ok((spooled, shipped))
}
