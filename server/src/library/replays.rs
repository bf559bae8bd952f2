//! What-ifs computed in the background and watched while they run.
//!
//! Why this exists: the What if tab's table replays a trace once per setting, about 12 s for a
//! 13M-event trace on two cores, while every other tab answers in under 0.2 s. So an upload's
//! table is computed in the background once the upload is answered (on one thread, leaving the
//! other cores to the person's requests), and the tab asks how far a what-if has got instead of
//! waiting for it: its first answer is what is known before any replay, then the runs as each
//! ends. Whoever waits puts every core to work on the replays left (`Progress::hurry`).
//!
//! A what-if under way is a `Flight`, listed with its model's answers
//! ([`Answers`]) until its answer is kept there. One what-if is computed
//! at a time per model (`Answers::computing`), and one background table at a time in all.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use snapshot::analysis::whatif::WhatIfError;

use super::models::{Answers, Flight, Loaded, ReplayCounts};

/// What-ifs under way or waiting per model, at most: each replays the trace for seconds, so a
/// client asking for many different limits waits for these first.
pub const MAX_FLIGHTS: usize = 4;

/// Why a what-if could not be started.
#[derive(Debug)]
pub enum NotStarted {
    /// [`MAX_FLIGHTS`] what-ifs of this model are under way or waiting.
    Busy,
}

/// The what-if `q` under way, or started now on `threads` threads (0: every core) in the
/// background. `background` work also waits for the other background tables to end.
pub fn fly(
    m: &Arc<Loaded>,
    q: &api::WhatIfQuery,
    threads: usize,
    background: bool,
    counts: &Arc<ReplayCounts>,
) -> Result<Arc<Flight>, NotStarted> {
    let key = Answers::whatif_key(q);
    let flight = {
        let mut flights = m.answers.flights.lock().expect("answers lock");
        if let Some(f) = flights.iter().find(|f| f.key == key) {
            return Ok(f.clone());
        }
        if flights.len() >= MAX_FLIGHTS {
            // A failed one has been told (its error is the same each time it is asked).
            flights.retain(|f| f.failed().is_none());
        }
        if flights.len() >= MAX_FLIGHTS {
            return Err(NotStarted::Busy);
        }
        let f = Arc::new(Flight::new(key, threads));
        flights.push(f.clone());
        f
    };
    tokio::spawn(run(
        Arc::downgrade(m),
        q.clone(),
        flight.clone(),
        background,
        counts.clone(),
    ));
    Ok(flight)
}

/// Forgets a flight whose answer is kept. A failed one stays to say why when asked, until
/// room is needed.
fn land(m: &Loaded, flight: &Flight) {
    m.answers
        .flights
        .lock()
        .expect("answers lock")
        .retain(|f| f.key != flight.key);
}

/// One background table at a time, whatever the number of uploads.
static BACKGROUND_REPLAYS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// What-ifs someone asked to watch replaying at once, over every model: each takes every core,
/// and one that nobody watches any more is not cancelled, so a client asking about many
/// snapshots waits for these instead of starting a replay per snapshot.
static WATCHED_REPLAYS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Computes the flight's what-if in its turn and keeps the answer. A model dropped from memory
/// before its turn is skipped: the flight holds only a weak reference until then.
async fn run(
    m: Weak<Loaded>,
    q: api::WhatIfQuery,
    flight: Arc<Flight>,
    background: bool,
    counts: Arc<ReplayCounts>,
) {
    let _turn = match background {
        true => match BACKGROUND_REPLAYS.acquire().await {
            Ok(turn) => Some(turn),
            Err(_) => return,
        },
        false => None,
    };
    let Some(m) = m.upgrade() else {
        return;
    };
    let _computing = m.answers.computing.lock().await;
    if m.answers.whatif(&q).is_some() {
        land(&m, &flight);
        return;
    }
    let _watched = match background {
        true => None,
        false => match WATCHED_REPLAYS.acquire().await {
            Ok(turn) => Some(turn),
            Err(_) => return,
        },
    };
    flight.start();
    let model = m.clone();
    let progress = flight.progress.clone();
    let replaying = counts.replaying(background);
    let answer = {
        let q = q.clone();
        tokio::task::spawn_blocking(move || {
            model.whatif(&q, &snapshot::Cancel::new(), Some(progress))
        })
        .await
    };
    drop(replaying);
    match answer {
        Ok(Ok(answer)) => {
            counts.answered_total.fetch_add(1, Ordering::Relaxed);
            m.answers
                .keep_whatif(Answers::whatif_key(&q), Arc::new(answer));
            tracing::info!(
                key = flight.key,
                background,
                whatif_ms = flight.elapsed_ms(),
                "what-if replayed"
            );
            land(&m, &flight);
        }
        Ok(Err(e)) => {
            counts.no_answer_total.fetch_add(1, Ordering::Relaxed);
            fail(&flight, e);
        }
        Err(e) => {
            counts.failed_total.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = flight.key, error = %e, "a what-if's replays failed");
            flight.fail(format!("the replays failed: {e}"));
        }
    }
}

fn fail(flight: &Flight, e: WhatIfError) {
    // A trace with nothing to replay: whoever watches is told why.
    tracing::debug!(key = flight.key, error = %e, "no what-if");
    flight.fail(e.to_string());
}

/// How long after an upload's answer its background table waits: the dashboard opens the
/// timeline right after the answer, and a replay on every core meanwhile made choosing a 164 MB
/// file → timeline drawn 0.19 s slower (median of 3, bench/README.md, issue 41). The replays
/// then run on one thread, leaving the other cores to the person's requests, until someone
/// opens the What if tab.
const BACKGROUND_REPLAY_DELAY: Duration = Duration::from_secs(2);

/// Computes the What if tab's table (every candidate setting, with curves) for a new upload in
/// the background once its first screen is drawn. Counted in `/metrics` as a what-if replay
/// (`memscope_whatif_replays_*`), not as a request's engine work.
pub fn replay_later(id: String, loaded: Weak<Loaded>, counts: Arc<ReplayCounts>) {
    tokio::spawn(async move {
        tokio::time::sleep(BACKGROUND_REPLAY_DELAY).await;
        let Some(m) = loaded.upgrade() else {
            return;
        };
        let table = Answers::table_query(&api::WhatIfQuery::default());
        if m.answers.whatif(&table).is_none() && fly(&m, &table, 1, true, &counts).is_err() {
            tracing::debug!(id, "no background what-if: the model has enough under way");
        }
    });
}
