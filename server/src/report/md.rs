//! The report as Markdown, to paste into a GitHub issue: the findings first, then the peaks
//! (with the memory over the trace as a line of block characters), the call sites at the peak,
//! what the memory was, leaks, OOMs and the what-if table. GitHub-flavoured tables; every
//! figure the same as the HTML report's and the dashboard's.

use std::fmt::Write;

use snapshot::analysis::human_bytes as hb;
use snapshot::units::thousands;

use super::shared::{
    Shareable, categories, findings, replay_words, site_words, whatif_caveat, whatif_outcome,
};

/// Text for a table cell: no pipes or line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn markdown(r: &Shareable) -> String {
    let rep = &r.report;
    let mut o = String::new();
    let _ = writeln!(o, "### memscope report: `{}`\n", r.name);
    for f in findings(rep) {
        let _ = writeln!(o, "> {f}");
    }
    for w in &rep.warnings {
        let _ = writeln!(o, ">\n> ⚠ {}", w.message);
    }
    let shown = r.device.as_ref().map(|d| d.device).or(rep.shown_device());
    if let Some((dev, d)) = shown.and_then(|k| rep.devices.get(&k).map(|d| (k, d))) {
        let _ = writeln!(o, "\n| cuda:{dev} | peak | after event |\n|---|---:|---:|");
        for (what, bytes, p) in [
            (
                "requested",
                d.peak_requested_bytes,
                d.peak_requested_position,
            ),
            (
                "allocated (`max_memory_allocated`)",
                d.peak_allocated_bytes,
                d.peak_allocated_position,
            ),
            (
                "reserved (`max_memory_reserved`)",
                d.peak_reserved_bytes,
                d.peak_reserved_position,
            ),
        ] {
            let _ = writeln!(o, "| {what} | {} | {} |", hb(bytes), thousands(p as u64));
        }
        let _ = writeln!(
            o,
            "\nPeaks {}; {} trace events.",
            d.peaks_over.words(),
            thousands(d.entries)
        );
    }
    if let Some(d) = &r.device {
        let line = sparkline(&d.buckets);
        if !line.is_empty() {
            let _ = writeln!(
                o,
                "\nLive bytes over the trace (each character the highest over about {} events; top = {}):\n\n`{line}`",
                thousands((d.events as u64).div_ceil(line.chars().count() as u64)),
                hb(d.buckets.iter().map(|b| b.live_max).max().unwrap_or(0))
            );
        }
        if let Some(s) = d.sites.as_ref().filter(|s| !s.sites.is_empty()) {
            let _ = writeln!(
                o,
                "\n**At the peak** ({} live after event {}):\n\n| call site | bytes | share |\n|---|---:|---:|",
                hb(s.total_bytes),
                thousands(s.position as u64)
            );
            for c in s.sites.iter().take(10) {
                let _ = writeln!(
                    o,
                    "| `{}` | {} | {:.1}% |",
                    cell(&site_words(&c.site)),
                    hb(c.bytes),
                    100.0 * c.bytes as f64 / s.total_bytes.max(1) as f64
                );
            }
        }
    }
    if let Some(c) = shown
        .and_then(|k| rep.devices.get(&k))
        .and_then(|d| d.categories.as_ref())
    {
        let parts: Vec<String> = categories(&c.at_peak)
            .iter()
            .map(|(k, b)| format!("{} {}", k.as_str().replace('_', " "), hb(*b)))
            .collect();
        if !parts.is_empty() {
            let _ = writeln!(o, "\n**What it was** at the peak: {}.", parts.join(", "));
        }
    }
    if !rep.leak_suspects.is_empty() {
        let _ = writeln!(
            o,
            "\n**Leak suspects**\n\n| call site | alive | how it grew |\n|---|---:|---|"
        );
        for l in rep.leak_suspects.iter().take(5) {
            let _ = writeln!(
                o,
                "| `{}` | {} | {} |",
                cell(&site_words(&l.site)),
                hb(l.bytes),
                cell(&l.growth)
            );
        }
    }
    ooms(&mut o, rep);
    whatif(&mut o, r);
    let _ = writeln!(
        o,
        "\n<sub>memscope {}: figures from the snapshot's own trace and segments.</sub>",
        env!("CARGO_PKG_VERSION")
    );
    o
}

fn ooms(o: &mut String, rep: &api::Report) {
    if rep.ooms.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n**Out of memory**");
    for (inc, m) in rep.incidents() {
        let _ = writeln!(
            o,
            "\n- **{}** ({}): {}\n  {}",
            m.verdict.as_str().replace('_', " "),
            if m.recovered { "survived" } else { "fatal" },
            inc.summary,
            m.explanation
        );
        for a in m.advice.iter().take(3) {
            let _ = writeln!(o, "  - {a}");
        }
    }
}

fn whatif(o: &mut String, r: &Shareable) {
    let Some(Ok(w)) = &r.whatif else { return };
    let _ = writeln!(
        o,
        "\n**What if** (replayed through the allocator model; {}):\n\n| `PYTORCH_CUDA_ALLOC_CONF` | peak reserved | outcome |\n|---|---:|---|",
        replay_words(&w.replay_check)
    );
    for run in &w.runs {
        let name = if run.alloc_conf.is_empty() {
            "(defaults)".to_string()
        } else {
            format!("`{}`", cell(&run.alloc_conf))
        };
        let _ = writeln!(
            o,
            "| {name}{} | {} | {} |",
            if run.recorded { " (recorded)" } else { "" },
            hb(run.peak_reserved_bytes),
            whatif_outcome(w, run)
        );
    }
    if let Some(c) = whatif_caveat(w) {
        let _ = writeln!(o, "\n{c}");
    }
}

/// Live bytes as up to 60 block characters, each its events' highest.
fn sparkline(buckets: &[snapshot::analysis::timeline::Bucket]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if buckets.is_empty() {
        return String::new();
    }
    let per = buckets.len().div_ceil(60);
    let highs: Vec<u64> = buckets
        .chunks(per)
        .map(|c| c.iter().map(|b| b.live_max).max().unwrap_or(0))
        .collect();
    let top = highs.iter().copied().max().unwrap_or(0).max(1) as f64;
    highs
        .iter()
        .map(|&v| BLOCKS[((v as f64 / top) * 7.0).round() as usize])
        .collect()
}
