//! The human report of `memscope analyze`: sizes in KiB/MiB/GiB, aligned tables, the findings
//! (leaks, OOMs, warnings) before the details.

use std::fmt::Write;

use snapshot::analysis::{Diff, Report, human_bytes as hb};
use snapshot::frames::FrameView;

fn site(f: &Option<FrameView>) -> String {
    match f {
        Some(f) => format!("{}:{} in {}", f.filename, f.line, f.name),
        None => "(no frames)".into(),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn render(name: &str, r: &Report, top: usize) -> String {
    let mut o = String::new();
    let f = &r.format;
    let s = &r.summary;
    let _ = writeln!(
        o,
        "{name}: {} snapshot{}, {} layout, {} decoded",
        f.encoding,
        if f.encoding == "pickle" {
            format!(" (protocol {})", f.protocol)
        } else {
            String::new()
        },
        f.layout.replace('_', " "),
        hb(f.decoded_bytes)
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "  segments   {:>10}    reserved   {:>10}",
        thousands(s.segments),
        hb(s.reserved_bytes)
    );
    let _ = writeln!(
        o,
        "  blocks     {:>10}    allocated  {:>10}    requested {:>10}",
        thousands(s.blocks),
        hb(s.allocated_bytes),
        hb(s.requested_bytes)
    );
    let states: Vec<String> = s
        .block_states
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
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
    if s.pending_free_blocks > 0 {
        let _ = writeln!(
            o,
            "  pending free: {} block(s), {}, freed by the caller but still in use on another stream (record_stream)",
            s.pending_free_blocks,
            hb(s.pending_free_bytes)
        );
    }
    for (dev, d) in &s.devices {
        let secs = match (d.first_time_us, d.last_time_us) {
            (Some(a), Some(b)) => format!(" over {:.2} s", (b - a) as f64 / 1e6),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  device {dev}: {} trace entries{secs}; peak live {} after event {}",
            thousands(d.entries),
            hb(d.peak_live_bytes),
            thousands(d.peak_position as u64)
        );
        let acts: Vec<String> = d
            .actions
            .iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect();
        let _ = writeln!(o, "    {}", acts.join(", "));
    }

    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(o, "  - {}", w.message);
        }
    }

    let _ = writeln!(o, "\nLeak suspects");
    if r.leak_suspects.is_empty() {
        let _ = writeln!(
            o,
            "  none: no stack keeps allocations alive that were made throughout the trace"
        );
    } else {
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
                site(&l.site)
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

    if !r.ooms.is_empty() {
        let _ = writeln!(o, "\nOut of memory");
        for m in &r.ooms {
            let _ = writeln!(
                o,
                "  device {} at event {}: requested {}; driver free {}; reserved {}, allocated {}, largest free block {}",
                m.device,
                thousands(m.position as u64),
                hb(m.requested_bytes),
                m.device_free_bytes
                    .map(hb)
                    .unwrap_or_else(|| "unknown".into()),
                hb(m.reserved_bytes),
                hb(m.allocated_bytes),
                hb(m.largest_free_block_bytes)
            );
            let _ = writeln!(o, "    verdict: {:?}: {}", m.verdict, m.explanation);
            for s in m.largest_sites.iter().take(3) {
                let _ = writeln!(o, "    {:>10}  {}", hb(s.bytes), site(&s.site));
            }
        }
    }

    let _ = writeln!(o, "\nFragmentation at the snapshot");
    for d in &r.fragmentation {
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
    o
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
        let (va, vb, dv) = if f.bytes {
            (hb(f.a), hb(f.b), signed_bytes(f.delta))
        } else {
            let sign = if f.delta > 0 { "+" } else { "" };
            (thousands(f.a), thousands(f.b), format!("{sign}{}", f.delta))
        };
        let _ = writeln!(o, "  {:<26} {va:>12} {vb:>12} {dv:>12}", f.name);
    }
    let _ = writeln!(o);
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
