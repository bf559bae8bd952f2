//! The human report of `memscope analyze`: sizes in KiB/MiB/GiB, aligned tables, the findings
//! (leaks, OOMs, warnings) before the details.

use std::fmt::Write;

use snapshot::analysis::{Diff, human_bytes as hb};
use snapshot::frames::FrameView;

fn site(f: &Option<FrameView>) -> String {
    match f {
        Some(f) if api::is_cpp_frame(&f.filename, f.line) => api::cpp_name(&f.name),
        Some(f) => format!("{}:{} in {}", f.filename, f.line, f.name),
        None => api::NO_STACK.into(),
    }
}

/// [`site`] for a frame as the API carries it.
fn api_site(f: &Option<api::Frame>) -> String {
    match f {
        Some(f) if api::is_cpp_frame(&f.filename, f.line) => api::cpp_name(&f.name),
        Some(f) => format!("{}:{} in {}", f.filename, f.line, f.name),
        None => api::NO_STACK.into(),
    }
}

use snapshot::units::thousands;

/// The human report of `memscope analyze`, from the same `api::Report` that `--json` and the
/// HTTP API answer (one source for every output).
pub fn render(name: &str, r: &api::Report, top: usize) -> String {
    let mut o = String::new();
    render_format(&mut o, name, &r.format);
    render_totals(&mut o, r);
    for (dev, d) in &r.devices {
        render_device(&mut o, *dev, d);
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(o, "  - {}", w.message);
        }
    }
    render_leaks(&mut o, r, top);
    render_ooms(&mut o, r);
    render_fragmentation(&mut o, &r.fragmentation);
    o
}

/// The first line: what the file is.
fn render_format(o: &mut String, name: &str, f: &api::Format) {
    let _ = writeln!(
        o,
        "{name}: {} snapshot{}, {} layout, {} decoded",
        f.encoding.as_str(),
        if f.encoding == api::Encoding::Pickle {
            format!(" (protocol {})", f.protocol)
        } else {
            String::new()
        },
        f.layout.as_str().replace('_', " "),
        hb(f.decoded_bytes)
    );
    let _ = writeln!(o);
}

/// Segments, blocks and their bytes at the snapshot, and the blocks by state.
fn render_totals(o: &mut String, r: &api::Report) {
    let _ = writeln!(
        o,
        "  segments   {:>10}    reserved   {:>10}",
        thousands(r.segments),
        hb(r.reserved_bytes)
    );
    let _ = writeln!(
        o,
        "  blocks     {:>10}    allocated  {:>10}    requested {:>10}",
        thousands(r.blocks),
        hb(r.allocated_bytes),
        hb(r.requested_bytes)
    );
    let states: Vec<String> = r
        .block_states
        .iter()
        .map(|(k, v)| format!("{} {v}", k.as_str()))
        .collect();
    let _ = writeln!(
        o,
        "  block states: {}",
        if states.is_empty() {
            "none".into()
        } else {
            states.join(", ")
        }
    );
    if r.pending_free_blocks > 0 {
        let _ = writeln!(
            o,
            "  pending free: {} block(s), {}, freed by the caller but still in use on another stream (record_stream)",
            r.pending_free_blocks,
            hb(r.pending_free_bytes)
        );
    }
}

/// One device: its trace, its peaks and where they are, its actions and what was alive at its
/// peak by category.
fn render_device(o: &mut String, dev: i32, d: &api::DeviceSummary) {
    let secs = match (d.first_time_us, d.last_time_us) {
        (Some(a), Some(b)) if a != b => format!(" over {:.2} s", (b - a) as f64 / 1e6),
        _ => String::new(),
    };
    let final_state = d.peaks_over == api::PeakScope::FinalState;
    let at = |p: u32| match (final_state, p) {
        (true, _) => String::new(),
        (_, 0) => " at the trace's start".to_string(),
        (_, p) => format!(" after event {}", thousands(p as u64)),
    };
    let entries = match d.entries {
        0 => "no trace entries".to_string(),
        1 => "1 trace entry".to_string(),
        n => format!("{} trace entries", thousands(n)),
    };
    let _ = writeln!(o, "  device {dev}: {entries}{secs}");
    let _ = writeln!(
        o,
        "    peak requested {}{}, allocated {}{}, reserved {}{}",
        hb(d.peak_requested_bytes),
        at(d.peak_requested_position),
        hb(d.peak_allocated_bytes),
        at(d.peak_allocated_position),
        hb(d.peak_reserved_bytes),
        at(d.peak_reserved_position),
    );
    let _ = writeln!(o, "    {}", d.peaks_over.words());
    // By PyTorch's name, as the trace names them.
    let mut acts: Vec<(&str, u64)> = d.actions.iter().map(|(k, v)| (k.name(), *v)).collect();
    acts.sort_unstable();
    if !acts.is_empty() {
        let words: Vec<String> = acts
            .iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect();
        let _ = writeln!(o, "    {}", words.join(", "));
    }
    if let Some(c) = &d.categories {
        let _ = writeln!(
            o,
            "    by category at the peak (event {}): {}",
            thousands(c.peak_position as u64),
            api::category_words(&c.at_peak, hb)
        );
    }
}

/// The leak suspects, `top` of them.
fn render_leaks(o: &mut String, r: &api::Report, top: usize) {
    let _ = writeln!(o, "\nLeak suspects");
    if r.leak_suspects.is_empty() {
        let _ = writeln!(o, "  {}", r.leak_check.no_suspects_words());
        return;
    }
    let _ = writeln!(
        o,
        "  {:>3}  {:>10}  {:>6}  {:>6}  site",
        "#", "alive", "count", "spread"
    );
    for (i, l) in r.leak_suspects.iter().take(top).enumerate() {
        let _ = writeln!(
            o,
            "  {:>3}  {:>10}  {:>6}  {:>5.0}%  {}",
            i + 1,
            hb(l.bytes),
            l.count,
            l.spread * 100.0,
            api_site(&l.site)
        );
    }
    if r.leak_suspects.len() > top {
        let _ = writeln!(
            o,
            "  … {} more (--top N, or --json)",
            r.leak_suspects.len() - top
        );
    }
}

/// The OOMs: one entry per incident (the same line, cause and fate), its latest OOM in full.
fn render_ooms(o: &mut String, r: &api::Report) {
    if r.ooms.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nOut of memory");
    if let Some(outcome) = &r.oom_outcome {
        let _ = writeln!(o, "  {outcome}");
    }
    for (inc, m) in r.incidents() {
        let fate = if m.recovered { "survived" } else { "FATAL" };
        let _ = writeln!(
            o,
            "\n  [{fate}] {}: {}",
            inc.verdict.as_str().replace('_', " "),
            inc.summary
        );
        render_oom(o, m);
    }
}

/// One OOM: where, what was asked and what the allocator held, how it ended, the verdict and
/// its advice, what was alive by category and the largest sites.
fn render_oom(o: &mut String, m: &api::OomReport) {
    let step = m.step.map(|s| format!(" (step {s})")).unwrap_or_default();
    let _ = writeln!(
        o,
        "  device {} at event {}{step}: requested {}{}; driver free {}; reserved {}, allocated {}, largest free block {}",
        m.device,
        thousands(m.position as u64),
        hb(m.requested_bytes),
        if m.site.is_some() {
            format!(" at {}", api_site(&m.site))
        } else {
            String::new()
        },
        m.device_free_bytes
            .map(hb)
            .unwrap_or_else(|| "unknown".into()),
        hb(m.reserved_bytes),
        hb(m.allocated_bytes),
        hb(m.largest_free_block_bytes)
    );
    let _ = writeln!(
        o,
        "    {}: {}",
        m.recovery.as_str().replace('_', " "),
        m.recovery_evidence
    );
    let _ = writeln!(o, "    verdict: {}: {}", m.verdict.as_str(), m.explanation);
    for a in &m.advice {
        let _ = writeln!(o, "    - {a}");
    }
    if m.categories.total() > 0 {
        let _ = writeln!(
            o,
            "    at the OOM: {}",
            api::category_words(&m.categories, hb)
        );
    }
    for s in m.largest_sites.iter().take(3) {
        let _ = writeln!(o, "    {:>10}  {}", hb(s.bytes), api_site(&s.site));
    }
}

/// Fragmentation at the snapshot, per device.
fn render_fragmentation(o: &mut String, fragmentation: &[api::DeviceFragmentation]) {
    let _ = writeln!(o, "\nFragmentation at the snapshot");
    for d in fragmentation {
        let t = &d.total;
        let _ = writeln!(
            o,
            "  device {}: reserved {}, allocated {}; rounding waste {}; cached free {} in {} blocks, largest {}",
            d.device,
            hb(t.reserved_bytes),
            hb(t.allocated_bytes),
            hb(t.internal_bytes),
            hb(t.external_bytes),
            t.inactive_blocks,
            hb(t.largest_free_bytes)
        );
    }
}

fn signed_bytes(d: i64) -> String {
    match d.signum() {
        1 => format!("+{}", hb(d.unsigned_abs())),
        -1 => format!("-{}", hb(d.unsigned_abs())),
        _ => "0".into(),
    }
}

/// The human report of `memscope diff`: figures A, B and the change, then leak suspects new or
/// gone, then the call sites whose memory at the peak changed most.
pub fn render_diff(a: &str, b: &str, d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A = {a} (cuda:{})", d.device_a);
    let _ = writeln!(o, "B = {b} (cuda:{})", d.device_b);
    let _ = writeln!(o);
    let _ = writeln!(o, "  {:<26} {:>12} {:>12} {:>12}", "", "A", "B", "B - A");
    for f in &d.figures {
        let (va, vb, dv) = if f.figure.is_bytes() {
            (hb(f.a), hb(f.b), signed_bytes(f.delta))
        } else {
            let sign = if f.delta > 0 { "+" } else { "" };
            (thousands(f.a), thousands(f.b), format!("{sign}{}", f.delta))
        };
        let _ = writeln!(o, "  {:<26} {va:>12} {vb:>12} {dv:>12}", f.figure.name());
    }
    if let Some((ca, cb)) = d.categories_at_peak {
        let (ca, cb) = (
            crate::convert::category_bytes(ca),
            crate::convert::category_bytes(cb),
        );
        let _ = writeln!(o, "\n  by category at each peak");
        for c in api::Category::ALL {
            let (a, b) = (ca.get(c), cb.get(c));
            if a + b > 0 {
                let _ = writeln!(
                    o,
                    "  {:<26} {:>12} {:>12} {:>12}",
                    c.words(),
                    hb(a),
                    hb(b),
                    signed_bytes(b as i64 - a as i64)
                );
            }
        }
    }
    let _ = writeln!(o);
    let events = |i: usize| {
        d.figures
            .iter()
            .find(|f| f.figure == snapshot::analysis::diff::Figure::TraceEvents)
            .map_or(1, |f| if i == 0 { f.a } else { f.b })
    };
    let untraced: Vec<&str> = [("A", events(0)), ("B", events(1))]
        .into_iter()
        .filter(|&(_, n)| n == 0)
        .map(|(side, _)| side)
        .collect();
    if !untraced.is_empty() {
        let _ = writeln!(
            o,
            "{} {} no trace: compared by {} state at the snapshot (its peaks are that state; no leak search).\n",
            untraced.join(" and "),
            if untraced.len() == 1 { "has" } else { "have" },
            if untraced.len() == 1 { "its" } else { "their" }
        );
    }
    if d.leaks.is_empty() {
        let _ = writeln!(o, "Leak suspects: none in either snapshot.");
    } else {
        let _ = writeln!(o, "Leak suspects (bytes alive at the end):");
        for l in &d.leaks {
            let status = match (l.a_bytes, l.b_bytes) {
                (None, Some(_)) => "new in B ",
                (Some(_), None) => "gone in B",
                _ => "in both  ",
            };
            let show = |v: Option<u64>| v.map_or("-".to_string(), hb);
            let _ = writeln!(
                o,
                "  {status}  A {:>10}  B {:>10}  {}",
                show(l.a_bytes),
                show(l.b_bytes),
                site(&l.site)
            );
        }
    }
    let _ = writeln!(o);
    if d.sites_at_peak.is_empty() {
        let _ = writeln!(
            o,
            "Memory by call site at the peak: no change ({} sites the same).",
            d.unchanged_sites
        );
    } else {
        let _ = writeln!(
            o,
            "Memory by call site at each peak, largest change first ({} sites the same, not listed):",
            d.unchanged_sites
        );
        for s in &d.sites_at_peak {
            let _ = writeln!(
                o,
                "  {:>12}  A {:>10}  B {:>10}  {}",
                signed_bytes(s.delta_bytes),
                hb(s.a_bytes),
                hb(s.b_bytes),
                site(&s.site)
            );
        }
    }
    o
}

/// The human report of `memscope whatif`: the replay check first (how far to trust the rest),
/// then every setting ranked, with the saving against the recorded run.
pub fn render_whatif(name: &str, w: &snapshot::analysis::whatif::WhatIf) -> String {
    let mut o = String::new();
    let settings = if w.settings_recorded {
        format!(
            "recorded with PYTORCH_CUDA_ALLOC_CONF={:?}",
            w.recorded_alloc_conf
        )
    } else {
        "allocator settings not recorded (PyTorch before 2.3): PyTorch's defaults assumed"
            .to_string()
    };
    let _ = writeln!(
        o,
        "{name}: device {}, {} events, {settings}",
        w.device,
        thousands(w.events as u64),
    );
    let c = &w.replay_check;
    let _ = writeln!(
        o,
        "Replay check: {} of {} segment events reproduced, peak reserved {} replayed vs {} recorded, {} of {} allocations at the recorded address{}",
        thousands(c.matched_segment_events as u64),
        thousands(c.recorded_segment_events as u64),
        hb(c.replayed_peak_reserved_bytes),
        hb(c.recorded_peak_reserved_bytes),
        thousands(c.allocs_at_recorded_address as u64),
        thousands(c.allocs as u64),
        if c.exact { " — exact." } else { "." }
    );
    if let Some(d) = &c.first_divergence {
        let _ = writeln!(o, "  First divergence: {}", d.why);
    }
    if w.starts_mid_run {
        let _ = writeln!(
            o,
            "The trace starts mid-run: every replay starts from the segments and live blocks reconstructed for its first event."
        );
    }
    if let Some(l) = &w.limit {
        let _ = writeln!(o, "Limit: {} ({}).", hb(l.bytes), l.detail);
    }
    if w.peak_before_trace {
        let _ = writeln!(
            o,
            "\nThe peak reserved memory ({}) was already reserved before the trace's first event: every replay starts there, so no allocator setting can change the peak this trace shows. Record from before the work starts to compare settings.",
            hb(c.recorded_peak_reserved_bytes)
        );
        return o;
    }
    let _ = writeln!(
        o,
        "\n{:<56} {:>13} {:>12} {:>10} {:>9} {:>8}  OOMs",
        "PYTORCH_CUDA_ALLOC_CONF", "peak reserved", "saving", "cudaMalloc", "segments", "retries",
    );
    for r in &w.runs {
        let conf = if r.alloc_conf.is_empty() {
            "(defaults)".to_string()
        } else {
            r.alloc_conf.clone()
        };
        let saving = if r.saving_bytes >= 0 {
            hb(r.saving_bytes as u64)
        } else {
            format!("-{}", hb(r.saving_bytes.unsigned_abs()))
        };
        let _ = writeln!(
            o,
            "{:<56} {:>13} {:>12} {:>10} {:>9} {:>8}  {}{}",
            format!("{conf}{}", if r.recorded { " (recorded)" } else { "" }),
            hb(r.peak_reserved_bytes),
            saving,
            thousands(r.cuda_mallocs),
            thousands(r.segments_at_end),
            thousands(r.alloc_retries),
            match (r.oom, r.survivable_ooms) {
                (true, _) => "dies".to_string(),
                (false, 0) => "none".to_string(),
                (false, n) => format!("survives {n}"),
            },
            match (r.oom_position, r.survivable_ooms) {
                (Some(p), 0) => format!(" at event {p}"),
                (Some(p), n) => format!(" at event {p}, after surviving {n}"),
                _ => String::new(),
            },
        );
    }
    // Keys PyTorch accepts that the model does not replay: said, never silently dropped.
    for r in w.runs.iter().filter(|r| !r.not_simulated.is_empty()) {
        let _ = writeln!(
            o,
            "Not simulated in {}: {}.",
            r.alloc_conf,
            r.not_simulated.join("; ")
        );
    }
    o
}

/// A run's report (`memscope analyze DIR`): the failing rank first, the imbalance, every rank.
pub fn render_run(r: &api::RunReport, ranks_from: &str) -> String {
    let mut o = String::new();
    let secs = |t: i64| {
        if r.alignment.is_time() {
            format!("{:.3} s", t as f64 / 1e6)
        } else {
            format!("event {t}")
        }
    };
    let _ = writeln!(
        o,
        "run {}: {} ranks (ranks {ranks_from})",
        r.id,
        r.ranks.len()
    );
    let _ = writeln!(o, "  {}", r.alignment_note);
    let _ = writeln!(o);
    match &r.failed {
        Some(f) => {
            let _ = writeln!(
                o,
                "OUT OF MEMORY: rank {} {} at {} ({}), asking for {}",
                f.rank,
                if f.order_known {
                    "ran out first"
                } else {
                    "ran out (which first is not known)"
                },
                secs(f.at),
                f.oom.verdict.as_str().replace('_', " "),
                hb(f.oom.requested_bytes)
            );
            let _ = writeln!(o, "  {}", f.oom.explanation);
            if let Some(s) = &f.oom.site {
                let _ = writeln!(o, "  at {}:{} in {}", s.filename, s.line, s.name);
            }
            if !f.then.is_empty() {
                let then: Vec<String> = f.then.iter().map(|r| r.to_string()).collect();
                let _ = writeln!(
                    o,
                    "  then rank{} {}",
                    if then.len() > 1 { "s" } else { "" },
                    then.join(", ")
                );
            }
        }
        None => {
            let _ = writeln!(o, "No rank ran out of memory.");
        }
    }
    let _ = writeln!(o);
    if let Some(i) = &r.imbalance {
        let _ = writeln!(o, "Imbalance: {}", i.summary);
        for s in i.sites.iter().take(5) {
            let site = api::site_text(s.site.as_ref());
            let _ = writeln!(o, "  +{:>10}  {site}", hb(s.delta_bytes as u64));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "  {:>4}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>5}  {:>4}  snapshot",
        "rank", "events", "peak", "peak res.", "reserved", "cached free", "leaks", "OOMs"
    );
    for k in &r.ranks {
        let _ = writeln!(
            o,
            "  {:>4}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>5}  {:>4}  {}",
            k.rank,
            thousands(k.events as u64),
            hb(k.peak_live_bytes),
            hb(k.peak_reserved_bytes),
            hb(k.reserved_bytes),
            hb(k.cached_free_bytes),
            k.leak_suspects,
            k.ooms,
            k.name
        );
    }
    o
}

/// `memscope categories`: bytes per category at one moment, then the largest allocations.
pub fn render_categories(
    name: &str,
    c: &api::CategoriesAt,
    peak: Option<u32>,
    top: usize,
) -> String {
    let mut o = String::new();
    let when = match peak {
        Some(_) => format!(
            "at the peak of live bytes (event {})",
            thousands(c.position as u64)
        ),
        None => format!("after event {}", thousands(c.position as u64)),
    };
    let _ = writeln!(
        o,
        "{name}: device {}, {when}: {} in {} allocations",
        c.device,
        hb(c.totals.total()),
        thousands(c.count)
    );
    let _ = writeln!(
        o,
        "Labels rest on {} ({} found).",
        c.source.words(),
        match c.backward_passes {
            1 => "1 backward pass".to_string(),
            n => format!("{} backward passes", thousands(n as u64)),
        }
    );
    let total = c.totals.total().max(1);
    for (cat, bytes) in c.totals.largest_first() {
        let _ = writeln!(
            o,
            "  {:<18} {:>12}  {:>5.1}%",
            cat.words(),
            hb(bytes),
            100.0 * bytes as f64 / total as f64
        );
    }
    if c.allocations.is_empty() || top == 0 {
        return o;
    }
    let _ = writeln!(o, "\nLargest allocations:");
    for a in c.allocations.iter().take(top) {
        let site = a
            .site
            .as_ref()
            .map(|f| format!("{}:{} {}", f.filename, f.line, f.name))
            .unwrap_or_else(|| "(no frames)".into());
        let _ = writeln!(
            o,
            "  {:#014x} {:>12}  {:<16} {:<7} {}\n      why: {}",
            a.address,
            hb(a.size_bytes),
            a.category.as_str(),
            format!("{:?}", a.confidence).to_lowercase(),
            site,
            a.rule.words()
        );
    }
    if c.allocations.len() > top {
        let _ = writeln!(
            o,
            "  … and {} more (--top N, or --json for every one)",
            thousands((c.allocations.len() - top) as u64)
        );
    }
    o
}

/// `memscope predict`: each size's predicted peaks, whether it fits, and the linear baseline.
pub fn render_predict(p: &api::PredictAnswer) -> String {
    let mut o = String::new();
    let recorded: Vec<String> = p
        .recorded
        .iter()
        .map(|r| format!("{} ({})", r.size, hb(r.peak_reserved_bytes)))
        .collect();
    let _ = writeln!(
        o,
        "Learnt from recordings at sizes {}: {} requests ({} not in every recording, {} following no line); replayed under PYTORCH_CUDA_ALLOC_CONF={:?}{}.",
        recorded.join(", "),
        thousands(p.requests),
        thousands(p.unmatched_requests),
        thousands(p.requests_without_rule),
        p.alloc_conf,
        p.limit_bytes
            .map(|l| format!(", limit {}", hb(l)))
            .unwrap_or_default()
    );
    if let Some(e) = p.expected_error {
        let _ = writeln!(
            o,
            "Expected error: {:.1}% (each recording predicted from the others).",
            100.0 * e
        );
    }
    let _ = writeln!(
        o,
        "Past the largest recording the error can be larger: scratch a kernel needs only from some size on (a reduction's staging buffer, another cuDNN algorithm) shows in no smaller recording."
    );
    if !p.unmodelled.is_empty() {
        let _ = writeln!(o, "Requests not modelled (in the largest recording):");
        for u in &p.unmodelled {
            let _ = writeln!(
                o,
                "  {:>5} × {:>10}  {}: {}",
                u.requests,
                hb(u.bytes),
                api::site_text(u.site.as_ref()),
                u.why.words()
            );
        }
    }
    let _ = writeln!(
        o,
        "\n  {:>8} {:>14} {:>14} {:>16}  {:>14}",
        "size", "peak reserved", "peak allocated", "fits", "linear baseline"
    );
    for s in &p.sizes {
        let fits = match (s.oom, s.first_oom_step) {
            (false, _) if s.survivable_ooms > 0 => format!("yes, {} survived", s.survivable_ooms),
            (false, _) => "yes".to_string(),
            (true, Some(step)) => format!("OOM step {step}"),
            (true, None) => "OOM".to_string(),
        };
        let _ = writeln!(
            o,
            "  {:>8} {:>14} {:>14} {:>16}  {:>14}",
            s.size,
            hb(s.peak_reserved_bytes),
            hb(s.peak_allocated_bytes),
            fits,
            hb(s.linear_peak_reserved_bytes)
        );
    }
    if let Some(l) = p.largest_fitting_size {
        let below: Vec<String> = p
            .sizes
            .iter()
            .filter(|s| s.oom && s.size < l)
            .map(|s| s.size.to_string())
            .collect();
        let _ = if below.is_empty() {
            writeln!(o, "\nLargest size that fits: {l}.")
        } else {
            writeln!(
                o,
                "\nLargest size that fits: {l}, but not {} (not monotonic: rounding, splitting and reuse change with the requests).",
                below.join(", ")
            )
        };
    }
    if !p.growth.is_empty() {
        let total: f64 = p.growth.iter().map(|g| g.bytes_per_unit).sum();
        let parts: Vec<String> = p
            .growth
            .iter()
            .take(4)
            .map(|g| {
                format!(
                    "{} {} ({:.0}%)",
                    g.category.words(),
                    hb(g.bytes_per_unit.round() as u64),
                    100.0 * g.bytes_per_unit / total
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "What grows, per unit of size (at each recording's peak): {}.",
            parts.join(", ")
        );
    }
    o
}
