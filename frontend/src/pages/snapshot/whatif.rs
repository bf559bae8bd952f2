//! The What if tab: the trace replayed through memscope's model of PyTorch's caching allocator
//! (`snapshot::analysis::whatif`, run by the server) under other `PYTORCH_CUDA_ALLOC_CONF` settings. The
//! answer in words first, then the replay check that says how far to trust it, the settings
//! ranked (peak reserved, the saving against the recorded run, whether each runs out of memory
//! under the limit), and the chosen setting's simulated reserved memory drawn over the recorded
//! run's. The chosen setting (`conf`) and a limit (`limit`, `limit_kind`) live in the URL; a
//! setting typed in is replayed on demand.

use ::api::{RecordedCurves, WhatIf, WhatIfOutline, WhatIfProgress, WhatIfQuery, WhatIfRun};
use leptos::html::Canvas;
use leptos::prelude::*;

use crate::canvas::{Ink, Scale, byte_axis_max, byte_grid, ink, pointer, sharp};
use crate::url::UrlState;
use crate::{api, fmt};

/// A setting as a person reads it ("" is PyTorch's defaults).
pub fn conf_name(conf: &str) -> String {
    if conf.is_empty() {
        "PyTorch's defaults".into()
    } else {
        conf.to_string()
    }
}

/// The query the URL asks for (`curves` and one setting for a chart's answer): the What if tab's
/// and the timeline's overlay.
pub fn query(url: UrlState, alloc_conf: Option<String>, curves: bool) -> WhatIfQuery {
    WhatIfQuery {
        device: url.device(),
        alloc_conf,
        limit_bytes: url.get("limit").and_then(|v| v.parse().ok()),
        limit_kind: url
            .get("limit_kind")
            .and_then(|k| ::api::LimitKind::parse(&k)),
        curves: curves.then_some(true),
    }
}

/// A run's simulated reserved bytes over positions `first..=last` (the highest); none past where
/// it runs out of memory.
pub fn simulated_in(run: &WhatIfRun, first: u32, last: u32) -> Option<u64> {
    let end = run.oom_position.unwrap_or(u32::MAX);
    (first <= end)
        .then(|| RecordedCurves::max_in(&run.reserved_curve, first, last.min(end)))
        .flatten()
}

/// The setting shown first: the best-ranked one that is not the recorded one.
pub fn best_other(w: &WhatIf) -> Option<&WhatIfRun> {
    w.runs.iter().find(|r| !r.recorded)
}

#[component]
pub fn WhatIfView() -> impl IntoView {
    let url: UrlState = expect_context();
    // The table's replays take seconds on a large trace: until they end, the server's progress
    // is shown (what is known before any replay, then the runs as they end), asked again every
    // POLL_MS. A newer query (another limit) or leaving the tab stops the older loop.
    let progress = RwSignal::new(None::<WhatIfProgress>);
    let asked = StoredValue::new(0u32);
    let ranked = LocalResource::new(move || {
        let id = url.id.get();
        let q = query(url, None, false);
        let turn = asked.try_update_value(|n| {
            *n += 1;
            *n
        });
        async move {
            loop {
                let p = api::whatif_progress(&id, &q).await?;
                if asked.try_get_value() != turn {
                    return Err("replaced by a newer question".to_string());
                }
                match p.answer {
                    Some(w) if p.done => return Ok(w),
                    _ => {
                        if progress.try_set(Some(p)).is_some() {
                            return Err("the tab was closed".to_string());
                        }
                    }
                }
                api::sleep_ms(POLL_MS).await;
            }
        }
    });
    // The chosen setting: the URL's, else the best other one.
    let chosen = Memo::new(move |_| {
        url.get("conf").or_else(|| {
            ranked
                .get()
                .and_then(|r| r.ok())
                .and_then(|w| best_other(&w).map(|r| r.alloc_conf.clone()))
        })
    });
    let detail = LocalResource::new(move || {
        let id = url.id.get();
        let conf = chosen.get();
        let q = query(url, conf.clone(), true);
        async move {
            let conf = conf?;
            // Checked here as the server would (the same parser), so a typo is said at once.
            if let Err(e) = snapshot::analysis::whatif::conf::AllocConf::parse(&conf) {
                return Some(Err(format!("PYTORCH_CUDA_ALLOC_CONF={conf}: {e}")));
            }
            Some(api::whatif(&id, &q).await)
        }
    });
    view! {
        <section class="whatif">
            {move || match ranked.get() {
                None => match progress.get() {
                    Some(p) => progress_view(p, url).into_any(),
                    None => view! {
                        <p class="muted loading">"Replaying the trace under each setting…"</p>
                    }
                        .into_any(),
                },
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(w)) => {
                    let extra = detail.get().flatten().and_then(|d| d.ok());
                    ranked_view(w, extra, chosen.get(), url).into_any()
                }
            }}
            <TryForm/>
            {move || match detail.get().flatten() {
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(d)) => view! { <Overlay answer=d/> }.into_any(),
                None => ().into_any(),
            }}
        </section>
    }
}

/// How often the tab asks how far the replays have got.
const POLL_MS: i32 = 400;

/// The answer while the replays run: how far they are, what is known before any replay (the
/// most any setting could save), and once the check is done, it and the runs replayed so far.
fn progress_view(p: WhatIfProgress, url: UrlState) -> impl IntoView {
    let o = &p.outline;
    let replayed = p.answer.as_ref().map_or(0, |w| w.runs.len());
    let share = match p.events_total {
        0 => 0.0,
        t => p.events_replayed as f64 / t as f64,
    };
    let so_far = p.elapsed_ms as f64 / 1000.0;
    let left = (share > 0.02).then(|| so_far / share - so_far);
    let status = format!(
        "Replaying the trace's {} events under {} settings: {} of {} done, {}{}.",
        fmt::count(o.events as u64),
        o.settings,
        replayed,
        o.settings,
        percent(share),
        match left {
            Some(l) => format!(", about {} left", seconds(l)),
            None if p.elapsed_ms == 0 => ", not started yet".into(),
            None => String::new(),
        }
    );
    view! {
        <div class="whatif-progress loading">
            <p class="status">
                <progress max="1000" value=(share * 1000.0).round().to_string()></progress>
                " "
                {status}
            </p>
            <p class="answer-before">{bound_words(o)}</p>
            {p.answer.map(|w| {
                let (exact, check) = check_words(&w);
                let runs = w.runs.clone();
                view! {
                    <p class="replay-check" class:exact=exact class:inexact=!exact>{check}</p>
                    {limit_line(&w, url)}
                    <p class="muted">"Replayed so far, ranked (the table fills in as each setting's replay ends):"</p>
                    {runs_table(&w, runs, None, None, url)}
                }
            })}
        </div>
    }
}

/// What is known before any replay: a setting changes only what is cached around the live
/// allocations and how each is rounded up, so none reserves less than they peak at.
pub fn bound_words(o: &WhatIfOutline) -> String {
    let live = fmt::bytes(o.live_peak_bytes);
    // A trace whose reserved memory is not known (no segment ever seen) has only the floor.
    if o.recorded_peak_reserved_bytes < o.live_peak_bytes {
        return format!(
            "Known before any replay: the live allocations asked for at most {live} at once. A setting changes only what is cached around them and how each is rounded up, so none reserves less than that."
        );
    }
    let gain = o.recorded_peak_reserved_bytes - o.live_peak_bytes;
    format!(
        "Known before any replay: the recorded run reserved {} at its peak, and its live allocations asked for at most {live} at once. A setting changes only what is cached around them and how each is rounded up, so none reserves less than that: at most {} ({}) could be saved.",
        fmt::bytes(o.recorded_peak_reserved_bytes),
        fmt::bytes(gain),
        percent(gain as f64 / o.recorded_peak_reserved_bytes.max(1) as f64),
    )
}

/// Seconds as a person reads a wait.
fn seconds(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// The answer in words: what the best setting does against the recorded run.
pub fn answer_words(w: &WhatIf) -> String {
    if w.peak_before_trace {
        return format!(
            "No setting can change this trace's peak: its {} of reserved memory was already reserved before the trace's first event, and every replay starts from there. Record from before the work starts to compare settings.",
            fmt::bytes(w.replay_check.recorded_peak_reserved_bytes)
        );
    }
    let recorded = w.runs.iter().find(|r| r.recorded);
    let others = w.runs.iter().filter(|r| !r.recorded).count();
    let Some(rec) = recorded else {
        return String::new();
    };
    let trust = if w.replay_check.exact {
        "simulated"
    } else {
        "estimated"
    };
    if w.limit.is_some() {
        let avoiding: Vec<&WhatIfRun> = w.runs.iter().filter(|r| !r.recorded && !r.oom).collect();
        match (rec.oom, avoiding.first()) {
            (true, Some(b)) if w.oom_ends_trace => format!(
                "With {} this run would have got past its OOM ({trust}): peak reserved {} up to it, {} less than recorded. {} of {others} settings tried {} past it. The trace stops at the OOM, so whether the rest of the run fits is not known: run it again with this setting to see.",
                conf_name(&b.alloc_conf),
                fmt::bytes(b.peak_reserved_bytes),
                fmt::bytes(b.saving_bytes.max(0) as u64),
                avoiding.len(),
                if avoiding.len() == 1 { "gets" } else { "get" }
            ),
            (true, Some(b)) => format!(
                "With {} this run would not have run out of memory ({trust}): peak reserved {}, {} less than recorded. {} of {others} settings tried {} the OOM.",
                conf_name(&b.alloc_conf),
                fmt::bytes(b.peak_reserved_bytes),
                fmt::bytes(b.saving_bytes.max(0) as u64),
                avoiding.len(),
                if avoiding.len() == 1 {
                    "avoids"
                } else {
                    "avoid"
                }
            ),
            (true, None) => format!(
                "Every setting tried ({others}) meets a fatal OOM under this limit too ({trust}): no allocator setting would have saved this run."
            ),
            (false, _) if rec.survivable_ooms > 0 => survived_words(w, rec, trust),
            (false, _) => saving_words(w, rec, trust),
        }
    } else {
        saving_words(w, rec, trust)
    }
}

/// The recorded run survived its OOMs: nothing to save it from; say which settings meet fewer.
fn survived_words(w: &WhatIf, rec: &WhatIfRun, trust: &str) -> String {
    let n = rec.survivable_ooms;
    let fewer = w
        .runs
        .iter()
        .filter(|r| !r.recorded && !r.oom && r.survivable_ooms < n)
        .min_by_key(|r| (r.survivable_ooms, r.peak_reserved_bytes));
    let dies = w.runs.iter().filter(|r| !r.recorded && r.oom).count();
    // The count is the replay's (it may differ from the trace's own when the replay check is
    // not exact): said as the replay's, the run's own count is on the OOM tab.
    let head = format!(
        "The recorded run survived its OOMs: no setting is needed to save it. Replayed under its own settings ({trust}), it meets {n} survivable OOM{}.",
        if n == 1 { "" } else { "s" }
    );
    let better = match fewer {
        Some(b) => format!(
            " {} would have met {} ({} fewer; each survived OOM costs time: a retry, a slower algorithm, a smaller batch).",
            conf_name(&b.alloc_conf),
            match b.survivable_ooms {
                0 => "none".to_string(),
                k => k.to_string(),
            },
            n - b.survivable_ooms
        ),
        None => " No setting tried meets fewer.".into(),
    };
    let worse = match dies {
        0 => String::new(),
        k => format!(
            " {k} setting{} would have met a fatal OOM: keep away from {}.",
            if k == 1 { "" } else { "s" },
            if k == 1 { "it" } else { "them" }
        ),
    };
    format!("{head}{better}{worse}")
}

fn saving_words(w: &WhatIf, rec: &WhatIfRun, trust: &str) -> String {
    let fits = |r: &&WhatIfRun| !r.recorded && !r.oom;
    match w.runs.iter().filter(fits).find(|r| r.saving_bytes > 0) {
        Some(b) => format!(
            "{} would have reserved {} at peak ({trust}), {} ({}) less than the {} the recorded settings reserved.",
            conf_name(&b.alloc_conf),
            fmt::bytes(b.peak_reserved_bytes),
            fmt::bytes(b.saving_bytes as u64),
            percent(b.saving_bytes as f64 / rec.peak_reserved_bytes.max(1) as f64),
            fmt::bytes(rec.peak_reserved_bytes)
        ),
        None => format!(
            "None of the {} settings tried reserves less than the recorded ones ({} at peak, {trust}): the allocator is not what to change here.",
            w.runs.len() - 1,
            fmt::bytes(rec.peak_reserved_bytes)
        ),
    }
}

/// A share as a person reads it: whole percents, "<1%" below one.
fn percent(share: f64) -> String {
    if share < 0.01 {
        "<1%".into()
    } else {
        format!("{:.0}%", share * 100.0)
    }
}

/// The replay check in words, and whether it was exact.
pub fn check_words(w: &WhatIf) -> (bool, String) {
    let c = &w.replay_check;
    let recorded_settings = if w.settings_recorded {
        conf_name(&w.recorded_alloc_conf)
    } else {
        "not recorded in the snapshot (before PyTorch 2.3): PyTorch's defaults assumed".to_string()
    };
    if c.exact {
        (
            true,
            format!(
                "Replay check: exact. Replayed under the recorded settings ({}), the model made all {} of the trace's segment events (cudaMalloc, cudaFree, page maps) with the same sizes in the same order and reached the same peak reserved, {}; {} of {} allocations landed at their recorded addresses. The other settings' figures are predictions from the same model.",
                recorded_settings,
                fmt::count(c.recorded_segment_events as u64),
                fmt::bytes(c.recorded_peak_reserved_bytes),
                fmt::count(c.allocs_at_recorded_address as u64),
                fmt::count(c.allocs as u64),
            ),
        )
    } else {
        let why = c
            .first_divergence
            .as_ref()
            .map(|d| {
                format!(
                    " They part at segment event {}: {}.",
                    d.segment_event + 1,
                    d.why
                )
            })
            .unwrap_or_default();
        (
            false,
            format!(
                "Replay check: not exact. Replayed under the recorded settings ({}), the model made {} of the trace's {} segment events as recorded and peaked at {} reserved against the {} recorded.{why} Treat the other settings' figures as estimates.",
                recorded_settings,
                fmt::count(c.matched_segment_events as u64),
                fmt::count(c.recorded_segment_events as u64),
                fmt::bytes(c.replayed_peak_reserved_bytes),
                fmt::bytes(c.recorded_peak_reserved_bytes),
            ),
        )
    }
}

/// The ranked table (with a setting typed in, when the URL chose one the candidates lack).
fn ranked_view(
    w: WhatIf,
    chart: Option<WhatIf>,
    chosen: Option<String>,
    url: UrlState,
) -> impl IntoView {
    let mut runs = w.runs.clone();
    let typed = chart
        .iter()
        .flat_map(|c| c.runs.iter())
        .find(|r| !runs.iter().any(|x| x.alloc_conf == r.alloc_conf))
        .cloned();
    let typed_conf = typed.as_ref().map(|r| r.alloc_conf.clone());
    if let Some(t) = typed {
        runs.push(t);
        ::api::whatif::rank_runs(&mut runs);
    }
    // Keys PyTorch accepts that the model does not replay (a setting of the user's own too):
    // said under the table, never silently dropped.
    let not_simulated: Vec<String> = runs
        .iter()
        .filter(|r| !r.not_simulated.is_empty())
        .map(|r| {
            format!(
                "Not simulated in {}: {}.",
                conf_name(&r.alloc_conf),
                r.not_simulated.join("; ")
            )
        })
        .collect();
    let (exact, check) = check_words(&w);
    view! {
        <p class="answer">{answer_words(&w)}</p>
        <p class="replay-check" class:exact=exact class:inexact=!exact>
            {check}
            {w.replay_check.first_divergence.as_ref().and_then(|d| d.position).map(|p| view! {
                " "
                <a class="divergence" href=url.href(&[
                    ("view", "segments".to_string()),
                    ("device", w.device.to_string()),
                    ("pos", p.to_string()),
                ])>"the allocator's segments at that event"</a>
            })}
        </p>
        {w.starts_mid_run.then(|| view! {
            <p class="mid-run">"The trace starts mid-run (its ring buffer was full): every run starts from the segments and live blocks at its first event."</p>
        })}
        {limit_line(&w, url)}
        {runs_table(&w, runs, chosen, typed_conf, url)}
        {not_simulated.into_iter().map(|t| view! { <p class="not-simulated">{t}</p> }).collect_view()}
        <p class="muted">"Click a setting to draw its reserved memory over the recorded run's. Peak reserved is the most PyTorch held from the device at once (what nvidia-smi shows); cached free at peak is what it held but had not handed out at that moment."</p>
    }
}

/// The runs ranked, one a row: clicking one draws it over the recorded run.
fn runs_table(
    w: &WhatIf,
    runs: Vec<WhatIfRun>,
    chosen: Option<String>,
    typed_conf: Option<String>,
    url: UrlState,
) -> impl IntoView + use<> {
    let with_limit = w.limit.is_some();
    // Past an OOM that ends the trace a run is known to fit only as far as the trace goes.
    let fits = if w.growth_ends_trace {
        "gets past the OOM; growth fails later"
    } else if w.oom_ends_trace {
        "gets past the OOM"
    } else {
        "fits"
    };
    view! {
        <table class="whatif-runs" class:hidden=w.peak_before_trace>
            <thead>
                <tr>
                    <th>"#"</th>
                    <th>"PYTORCH_CUDA_ALLOC_CONF"</th>
                    <th>"peak reserved"</th>
                    <th>"vs recorded"</th>
                    <th>"peak allocated"</th>
                    <th title="reserved but not allocated when reserved memory peaked">"cached free at peak"</th>
                    <th title="cudaMalloc calls and expandable segments' page maps / cudaFree calls and page unmaps (num_device_alloc / num_device_free)">"device allocs / frees"</th>
                    <th title="allocations that had to free cached memory and try again">"retries"</th>
                    {with_limit.then(|| view! { <th>"under the limit"</th> })}
                </tr>
            </thead>
            <tbody>
                {runs
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let conf = r.alloc_conf.clone();
                        let is_chosen = chosen.as_deref() == Some(conf.as_str());
                        let is_typed = typed_conf.as_deref() == Some(conf.as_str());
                        let saving = if r.recorded {
                            "recorded".to_string()
                        } else if r.saving_bytes == 0 {
                            "same".to_string()
                        } else if r.saving_bytes > 0 {
                            format!("−{}", fmt::bytes(r.saving_bytes as u64))
                        } else {
                            format!("+{}", fmt::bytes((-r.saving_bytes) as u64))
                        };
                        let pick = conf.clone();
                        let saves = !r.recorded && r.saving_bytes > 0;
                        view! {
                            <tr
                                class="run"
                                class:recorded=r.recorded
                                class:chosen=is_chosen
                                class:runs-out=r.oom
                                class:saves=saves
                                data-conf=conf.clone()
                                on:click=move |_| url.set(&[("conf", Some(pick.clone()))])
                            >
                                <td class="num">{i + 1}</td>
                                <td>
                                    <code>{conf_name(&conf)}</code>
                                    {r.recorded.then(|| view! { <span class="tag">"recorded"</span> })}
                                    {is_typed.then(|| view! { <span class="tag">"yours"</span> })}
                                </td>
                                <td class="num peak">{fmt::bytes(r.peak_reserved_bytes)}</td>
                                <td class="num saving">{saving}</td>
                                <td class="num">{fmt::bytes(r.peak_allocated_bytes)}</td>
                                <td class="num">{fmt::bytes(r.fragmentation_at_peak)}</td>
                                <td class="num">{format!("{} / {}", fmt::count(r.cuda_mallocs), fmt::count(r.cuda_frees))}</td>
                                <td class="num">{fmt::count(r.alloc_retries)}</td>
                                {with_limit.then(|| view! {
                                    <td class="fate">
                                        {match (r.oom_position, r.survivable_ooms) {
                                            (Some(p), 0) => format!("dies at event {}", fmt::count(p as u64)),
                                            (Some(p), n) => format!("dies at event {} after surviving {n}", fmt::count(p as u64)),
                                            (None, 0) => fits.to_string(),
                                            (None, n) => format!("survives {n} OOM{}", if n == 1 { "" } else { "s" }),
                                        }}
                                    </td>
                                })}
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

/// The limit every run was held to, where it came from, and a form to try another.
fn limit_line(w: &WhatIf, url: UrlState) -> impl IntoView + use<> {
    let gib = RwSignal::new(String::new());
    let kind = RwSignal::new(
        url.get("limit_kind")
            .or_else(|| w.limit.as_ref().map(|l| l.kind.as_str().to_string()))
            .unwrap_or_else(|| "device".into()),
    );
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = gib.get_untracked();
        match typed.trim().parse::<f64>() {
            Ok(g) if g > 0.0 => {
                error.set(None);
                url.set(&[
                    (
                        "limit",
                        Some(((g * (1u64 << 30) as f64) as u64).to_string()),
                    ),
                    ("limit_kind", Some(kind.get_untracked())),
                ]);
            }
            _ => error.set(Some(format!("“{typed}” is not a size in GiB"))),
        }
    };
    let given = url.get("limit").is_some();
    view! {
        <p class="limit-now">
            {match &w.limit {
                Some(l) => format!(
                    "Every run is held to a limit of {}: {}.",
                    fmt::bytes(l.bytes),
                    l.detail
                ),
                None => "No memory limit: the trace never ran out of memory, so each run reserves what it needs.".to_string(),
            }}
        </p>
        <form class="limit" on:submit=submit>
            "What if the limit were "
            <input class="limit-gib" type="text" inputmode="decimal" placeholder="GiB" size="6"
                on:input=move |ev| gib.set(event_target_value(&ev)) />
            " GiB "
            <select class="limit-kind" on:change=move |ev| kind.set(event_target_value(&ev))>
                <option value="device" selected=kind.get_untracked() == "device">"on the device"</option>
                <option value="fraction" selected=kind.get_untracked() == "fraction">"as a per-process fraction"</option>
            </select>
            " "
            <button type="submit">"Replay"</button>
            {given.then(|| view! {
                " "
                <a class="limit-clear" href=url.href(&[("view", "whatif".to_string())])>"back to the trace's own limit"</a>
            })}
            {move || error.get().map(|e| view! { <span class="error">{e}</span> })}
        </form>
    }
}

/// A setting of the user's own, replayed on demand.
#[component]
fn TryForm() -> impl IntoView {
    let url: UrlState = expect_context();
    let typed = RwSignal::new(String::new());
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        url.set(&[("conf", Some(typed.get_untracked().trim().to_string()))]);
    };
    view! {
        <form class="try-conf" on:submit=submit>
            "Try your own: PYTORCH_CUDA_ALLOC_CONF="
            <input class="conf-input" type="text" size="48"
                placeholder="e.g. max_split_size_mb:64,roundup_power2_divisions:8"
                on:input=move |ev| typed.set(event_target_value(&ev)) />
            " "
            <button type="submit">"Replay"</button>
        </form>
    }
}

const CW: f64 = 1200.0;
const CH: f64 = 300.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 24.0;

/// The curves one chart answer draws: the trace's own, the recorded settings' replay and the
/// chosen setting's.
struct Drawn<'a> {
    curves: &'a RecordedCurves,
    events: u32,
    chosen: Option<&'a WhatIfRun>,
    recorded: Option<&'a WhatIfRun>,
    limit: Option<u64>,
}

impl Drawn<'_> {
    fn scales(&self) -> (Scale, Scale) {
        let mut top = 1.0f64;
        for c in [&self.curves.reserved, &self.curves.live] {
            top = top.max(c.iter().map(|p| p.1).max().unwrap_or(0) as f64);
        }
        if let Some(r) = self.chosen {
            top = top.max(r.reserved_curve.iter().map(|p| p.1).max().unwrap_or(0) as f64);
        }
        if let Some(l) = self.limit {
            top = top.max(l as f64);
        }
        (
            Scale::new(0.0, self.events as f64, LEFT, CW - 10.0),
            Scale::new(0.0, byte_axis_max(top, 1.08), CH - BOTTOM, TOP),
        )
    }
}

/// A step curve drawn up to `end` (a run that ran out of memory stops there).
fn steps(
    g: &web_sys::CanvasRenderingContext2d,
    xs: &Scale,
    ys: &Scale,
    curve: &[(u32, u64)],
    end: f64,
) {
    g.begin_path();
    for (i, &(p, v)) in curve.iter().enumerate() {
        let (x, y) = (xs.at(p as f64), ys.at(v as f64));
        if p as f64 > end {
            break;
        }
        if i == 0 {
            g.move_to(x, y);
        } else {
            g.line_to(x, y);
        }
        let next = curve.get(i + 1).map_or(end, |n| (n.0 as f64).min(end));
        g.line_to(xs.at(next), y);
    }
    g.stroke();
}

fn draw(c: &web_sys::HtmlCanvasElement, d: &Drawn, hover: Option<u32>) {
    let g = sharp(c, CW, CH);
    g.set_fill_style_str(&ink(Ink::Paper));
    g.fill_rect(0.0, 0.0, CW, CH);
    let (xs, ys) = d.scales();
    g.set_font("11px sans-serif");
    byte_grid(&g, &ys, LEFT, CW - 10.0, 4);
    // The event axis, at round numbers.
    g.set_fill_style_str(&ink(Ink::Muted));
    let step = tick_step(d.events);
    for p in (0..=d.events as u64).step_by(step as usize) {
        let label = format!("event {}", fmt::count(p));
        let w = g.measure_text(&label).map_or(60.0, |m| m.width());
        let at = (xs.at(p as f64) - w / 2.0).clamp(LEFT, CW - w - 2.0);
        let _ = g.fill_text(&label, at, CH - 6.0);
    }
    let end = d.events as f64;
    // Live memory as recorded (what any setting must hold), as a fill.
    let live = &d.curves.live;
    if !live.is_empty() {
        g.begin_path();
        g.move_to(xs.at(0.0), ys.at(0.0));
        for (i, &(p, v)) in live.iter().enumerate() {
            let next = live.get(i + 1).map_or(end, |n| n.0 as f64);
            g.line_to(xs.at(p as f64), ys.at(v as f64));
            g.line_to(xs.at(next), ys.at(v as f64));
        }
        g.line_to(xs.at(end), ys.at(0.0));
        g.close_path();
        g.set_fill_style_str(&ink(Ink::Envelope));
        g.fill();
    }
    // Recorded reserved (the trace's own), as the timeline draws it.
    g.set_stroke_style_str(&ink(Ink::Reserved));
    g.set_line_width(2.0);
    steps(&g, &xs, &ys, &d.curves.reserved, end);
    // The chosen setting, simulated, up to where it would run out of memory.
    if let Some(r) = d.chosen {
        let stop = r.oom_position.map_or(end, |p| p as f64);
        g.set_stroke_style_str("#1971c2");
        g.set_line_width(2.0);
        let _ = g.set_line_dash(&js_sys::Array::of2(&6.0.into(), &3.0.into()));
        steps(&g, &xs, &ys, &r.reserved_curve, stop);
        let _ = g.set_line_dash(&js_sys::Array::new());
        if let Some(p) = r.oom_position.filter(|_| !r.recorded) {
            g.set_fill_style_str("#1971c2");
            g.fill_rect(xs.at(p as f64) - 1.0, TOP, 3.0, CH - BOTTOM - TOP);
            let _ = g.fill_text("runs out", xs.at(p as f64) - 52.0, TOP + 22.0);
        }
    }
    g.set_line_width(1.0);
    // Where the recorded settings run out of memory (the trace's OOM, as replayed).
    if let Some(p) = d.recorded.and_then(|r| r.oom_position) {
        g.set_fill_style_str(&ink(Ink::Danger));
        g.fill_rect(xs.at(p as f64) - 1.0, TOP, 3.0, CH - BOTTOM - TOP);
        let x = xs.at(p as f64);
        let _ = g.fill_text(
            "OOM",
            if x > CW - 50.0 { x - 30.0 } else { x + 4.0 },
            TOP + 10.0,
        );
    }
    if let Some(l) = d.limit {
        g.set_stroke_style_str(&ink(Ink::Danger));
        let _ = g.set_line_dash(&js_sys::Array::of2(&3.0.into(), &3.0.into()));
        g.begin_path();
        g.move_to(LEFT, ys.at(l as f64));
        g.line_to(CW - 10.0, ys.at(l as f64));
        g.stroke();
        let _ = g.set_line_dash(&js_sys::Array::new());
        g.set_fill_style_str(&ink(Ink::Danger));
        let _ = g.fill_text(
            &format!("limit {}", fmt::bytes(l)),
            LEFT + 4.0,
            ys.at(l as f64) - 4.0,
        );
    }
    if let Some(p) = hover {
        g.set_fill_style_str(&ink(Ink::Text));
        g.fill_rect(xs.at(p as f64), TOP, 1.0, CH - BOTTOM - TOP);
    }
}

/// A round step (1, 2 or 5 × 10ⁿ events) giving at most six ticks over `events`.
pub fn tick_step(events: u32) -> u64 {
    let mut unit = 1u64;
    loop {
        for m in [1, 2, 5] {
            if events as u64 / (unit * m) <= 5 {
                return unit * m;
            }
        }
        unit *= 10;
    }
}

/// The position under the pointer: the bucket's start when curves are bucketed.
fn position_at(px: f64, events: u32, bucket: u32) -> Option<u32> {
    let xs = Scale::new(0.0, events as f64, LEFT, CW - 10.0);
    if !(LEFT..=CW - 10.0).contains(&px) {
        return None;
    }
    let p = xs.inv(px).round().clamp(0.0, events as f64) as u32;
    Some(p / bucket.max(1) * bucket.max(1))
}

/// What the cursor reads: each curve's value at the position (or the highest in its bucket).
pub fn readout(w: &WhatIf, chosen: Option<&WhatIfRun>, p: u32) -> Option<String> {
    let c = w.curves.as_ref()?;
    let at = |curve: &[(u32, u64)]| RecordedCurves::at(curve, p).map(fmt::bytes);
    let place = if c.bucket_events > 1 {
        let end = (p + c.bucket_events - 1).min(w.events);
        format!(
            "events {}–{} (the highest of each)",
            fmt::count(p as u64),
            fmt::count(end as u64)
        )
    } else {
        format!("after event {}", fmt::count(p as u64))
    };
    let mut parts = vec![
        place,
        format!("recorded reserved {}", at(&c.reserved)?),
        format!("live {}", at(&c.live)?),
    ];
    if let Some(r) = chosen {
        let v = match r.oom_position {
            Some(o) if p > o => "out of memory".to_string(),
            _ => at(&r.reserved_curve).unwrap_or_default(),
        };
        let whose = if r.recorded {
            format!("{} replayed", conf_name(&r.alloc_conf))
        } else {
            conf_name(&r.alloc_conf)
        };
        parts.push(format!("{whose} {v} (simulated)"));
    }
    Some(parts.join(" · "))
}

/// The chosen setting's simulated reserved memory over the recorded run's.
#[component]
fn Overlay(answer: WhatIf) -> impl IntoView {
    let url: UrlState = expect_context();
    let canvas = NodeRef::<Canvas>::new();
    let hover = RwSignal::new(None::<u32>);
    let w = StoredValue::new(answer);
    let chosen_conf = move || url.get("conf");
    let chosen = move |w: &WhatIf| -> Option<WhatIfRun> {
        let conf = chosen_conf();
        w.runs
            .iter()
            .find(|r| Some(&r.alloc_conf) == conf.as_ref())
            .or_else(|| best_other(w))
            .cloned()
    };
    Effect::new(move |_| {
        let h = hover.get();
        let Some(c) = canvas.get() else {
            return;
        };
        w.with_value(|w| {
            let Some(curves) = &w.curves else {
                return;
            };
            let pick = chosen(w);
            let d = Drawn {
                curves,
                events: w.events,
                chosen: pick.as_ref(),
                recorded: w.runs.iter().find(|r| r.recorded),
                limit: w.limit.as_ref().map(|l| l.bytes),
            };
            draw(&c, &d, h);
        });
    });
    let on_move = move |ev: web_sys::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let (px, _) = pointer(&c, &ev);
        let (events, bucket) =
            w.with_value(|w| (w.events, w.curves.as_ref().map_or(1, |c| c.bucket_events)));
        hover.set(position_at(px, events, bucket));
    };
    let title = w.with_value(|w| {
        chosen(w).map(|r| {
            if r.recorded {
                format!(
                    "{} (the recorded settings): the model's replay (dashed) over the trace",
                    conf_name(&r.alloc_conf)
                )
            } else {
                format!(
                    "{} (simulated, dashed) over the recorded run",
                    conf_name(&r.alloc_conf)
                )
            }
        })
    });
    view! {
        <div class="whatif-chart">
            <h3>
                {title}
                " "
                <a class="on-timeline" href=move || {
                    let mut q = vec![("view", "timeline".to_string())];
                    if let Some(d) = url.device() {
                        q.push(("device", d.to_string()));
                    }
                    if let Some(r) = w.with_value(chosen) {
                        q.push(("conf", r.alloc_conf));
                    }
                    for key in ["limit", "limit_kind"] {
                        if let Some(v) = url.get(key) {
                            q.push((key, v));
                        }
                    }
                    url.href(&q)
                }>"on the timeline"</a>
            </h3>
            <canvas id="whatif-canvas" width=CW as u32 height=CH as u32 node_ref=canvas
                on:mousemove=on_move on:mouseleave=move |_| hover.set(None)></canvas>
            <p class="legend">
                <span class="key"><i style="background:#e8590c"></i>"reserved, as recorded"</span>
                <span class="key"><i style="background:#1971c2"></i>"reserved under the chosen setting (simulated)"</span>
                <span class="key"><i style="background:#dde3fb"></i>"live, as recorded"</span>
                <span class="key"><i style="background:#c92a2a"></i>"limit and OOM"</span>
            </p>
            <p class="readout">
                {move || {
                    let p = hover.get()?;
                    w.with_value(|w| {
                        let pick = chosen(w);
                        readout(w, pick.as_ref(), p)
                    })
                }}
            </p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_before_any_replay_says_the_most_a_setting_could_save() {
        let o = WhatIfOutline {
            device: 0,
            events: 10,
            settings: 10,
            recorded_peak_reserved_bytes: 40 << 30,
            live_peak_bytes: 30 << 30,
        };
        let w = bound_words(&o);
        assert!(w.contains("reserved 40.0 GiB"), "{w}");
        assert!(w.contains("at most 30.0 GiB at once"), "{w}");
        assert!(w.contains("at most 10.0 GiB (25%) could be saved"), "{w}");
        // Reserved memory not known (no segment seen): only the floor is said.
        let w = bound_words(&WhatIfOutline {
            recorded_peak_reserved_bytes: 0,
            ..o
        });
        assert!(
            !w.contains("could be saved") && w.contains("30.0 GiB"),
            "{w}"
        );
    }

    #[test]
    fn ticks_fall_on_round_numbers() {
        assert_eq!(tick_step(811), 200);
        assert_eq!(tick_step(250_021), 50_000);
        assert_eq!(tick_step(3), 1);
        assert_eq!(tick_step(1_000_000), 200_000);
    }
}
