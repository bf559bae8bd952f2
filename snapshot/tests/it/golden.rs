//! Golden tests over every real fixture (recorded on an H200 with PyTorch 2.11): our figures must
//! equal those Python's own unpickler produced, and each scenario's planted behaviour must be
//! found. `tests/golden/NAME.txt` holds a digest of every analysis; run with `UPDATE_GOLDEN=1` to
//! rewrite them after an intended change, and review the diff.

use std::fmt::Write;

use snapshot::analysis::{self, Verdict};

const SCENARIOS: [&str; 7] = [
    "leak_detached_cache",
    "steady_train",
    "fragmentation",
    "oom_fraction",
    "segments_only",
    "multistream",
    "big_python",
];

fn file_of(scenario: &str) -> String {
    if scenario == "big_python" {
        "big_python.pickle.xz".into()
    } else {
        format!("{scenario}.pickle")
    }
}

#[test]
fn figures_equal_python_reference() {
    for scenario in SCENARIOS {
        let (_, _, report) = crate::support::analyze(&file_of(scenario));
        let reference = crate::support::reference_figures(scenario);
        let ours = crate::support::our_figures(&report, &reference);
        assert_eq!(
            ours, reference,
            "{scenario}: figures differ from figures.json"
        );
    }
}

/// A digest of every analysis, compared with `tests/golden/SCENARIO.txt`.
fn digest(scenario: &str) -> String {
    let (snap, index, report) = crate::support::analyze(&file_of(scenario));
    let mut o = String::new();
    let _ = writeln!(o, "format: {:?}", report.format);
    let _ = writeln!(
        o,
        "tables: strings={} frames={} stacks={} entries={}",
        snap.strings.len(),
        snap.frames.len(),
        snap.stacks.len(),
        snap.trace.len()
    );
    for w in &report.warnings {
        let _ = writeln!(o, "warning: {}", w.code.as_str());
    }
    for l in &report.leak_suspects {
        let site = l
            .site
            .as_ref()
            .map(|s| format!("{}:{}", s.filename.rsplit('/').next().unwrap(), s.line));
        let _ = writeln!(
            o,
            "leak: {site:?} bytes={} count={} spread={} series_end={}",
            l.bytes,
            l.count,
            l.spread,
            l.series.last().unwrap().live_bytes
        );
    }
    for m in &report.ooms {
        let _ = writeln!(
            o,
            "oom: requested={} block={} free={:?} reserved={} allocated={} largest_free={} verdict={:?}",
            m.requested_bytes,
            m.block_bytes,
            m.device_free_bytes,
            m.reserved_bytes,
            m.allocated_bytes,
            m.largest_free_block_bytes,
            m.verdict
        );
    }
    for f in &report.fragmentation {
        let _ = writeln!(o, "fragmentation: device={} {:?}", f.device, f.total);
    }
    for d in &index.devices {
        let _ = writeln!(
            o,
            "device {}: events={} allocations={} segments={} checkpoints={} peak={}@{} live_at_start={} reserved_at_start={}",
            d.device,
            d.len,
            d.allocations.len(),
            d.segments.len(),
            d.checkpoints.len(),
            d.peak_live_bytes,
            d.peak_position,
            d.live_at_start,
            d.reserved_at_start
        );
        if let Some(st) = analysis::stacks_at(&snap, &index, d.device, None, 3) {
            for s in &st.sites {
                let site = s.site.as_ref().map(|f| {
                    format!(
                        "{}:{} {}",
                        f.filename.rsplit('/').next().unwrap(),
                        f.line,
                        f.name
                    )
                });
                let _ = writeln!(
                    o,
                    "  peak site: {site:?} bytes={} count={}",
                    s.bytes, s.count
                );
            }
        }
        let mid = analysis::state_at(&snap, &index, d.device, d.len / 2);
        let _ = writeln!(
            o,
            "  state@{}: segments={} {:?}",
            d.len / 2,
            mid.segments.len(),
            mid.total
        );
    }
    o
}

#[test]
fn analyses_match_golden_digests() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let dir = crate::support::fixtures().join("../golden");
    let mut failures = Vec::new();
    for scenario in SCENARIOS {
        let got = digest(scenario);
        let path = dir.join(format!("{scenario}.txt"));
        if update {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            failures.push(format!(
                "{scenario}:\n--- expected ({})\n{want}\n--- got\n{got}",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden digests differ (UPDATE_GOLDEN=1 rewrites them):\n{}",
        failures.join("\n")
    );
}

#[test]
fn leak_detached_cache_leads_with_planted_line() {
    let (_, _, report) = crate::support::analyze("leak_detached_cache.pickle");
    let top = &report.leak_suspects[0];
    let site = top.site.as_ref().unwrap();
    assert!(
        site.filename.ends_with("gen_snapshots.py") && site.line == 126,
        "top suspect is {site:?}"
    );
    assert!(
        top.frames
            .iter()
            .any(|f| f.filename.ends_with("gen_snapshots.py") && f.line == 126)
    );
    // 60 iterations, about 2 MiB each.
    assert_eq!(top.count, 60);
    assert_eq!(top.bytes, 60 * 2 * 1024 * 1024);
    // The evidence grows.
    let s = &top.series;
    assert!(
        s.last().unwrap().live_bytes > s[s.len() / 2].live_bytes
            && s[s.len() / 2].live_bytes > s[0].live_bytes
    );
}

#[test]
fn steady_train_has_no_leak_suspects() {
    let (_, _, report) = crate::support::analyze("steady_train.pickle");
    assert!(
        report.leak_suspects.is_empty(),
        "{:#?}",
        report
            .leak_suspects
            .iter()
            .map(|l| &l.site)
            .collect::<Vec<_>>()
    );
}

/// A list grows until the per-process limit stops it (the truth: "list grows until OOM"). The
/// cache is fragmented too, but growth is the cause and leads: no setting fixes it.
#[test]
fn oom_fraction_reports_one_fatal_growth_oom_of_24_mib() {
    let (_, _, report) = crate::support::analyze("oom_fraction.pickle");
    assert_eq!(report.ooms.len(), 1);
    let oom = &report.ooms[0];
    assert_eq!(oom.requested_bytes, 24 << 20);
    assert_eq!(oom.device, 0);
    assert_eq!(oom.device_free_bytes, Some(143_561_719_808));
    assert_eq!(oom.verdict, Verdict::Growth);
    assert!(!oom.recovered);
    let growth = oom.growth.as_ref().unwrap();
    assert_eq!(growth.site.as_ref().unwrap().line, 181);
    assert!(growth.bytes_at_oom * 2 >= oom.allocated_bytes);
    assert!(
        oom.explanation.contains("also fragmented"),
        "{}",
        oom.explanation
    );
    // PyTorch's own message (in the truth file), as far as the trace's figures go.
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixture("oom_fraction.truth.json")).unwrap(),
    )
    .unwrap();
    let said = truth["oom_message"].as_str().unwrap();
    assert!(said.starts_with("CUDA out of memory. Tried to allocate 24.00 MiB."));
    for part in [
        "CUDA out of memory. Tried to allocate 24.00 MiB.",
        "Of the allocated memory 5.30 GiB is allocated by PyTorch, and 290.00 MiB is reserved by PyTorch but unallocated.",
    ] {
        assert!(
            said.contains(part) && oom.pytorch_message.contains(part),
            "{}",
            oom.pytorch_message
        );
    }
    assert!(
        oom.pytorch_message.contains("GPU 0 had 133.70 GiB free."),
        "{}",
        oom.pytorch_message
    );
    assert!(oom.largest_free_block_bytes < oom.block_bytes);
    // The growing list at line 181 is both the leak suspect and the largest site at the OOM.
    let site = report.leak_suspects[0].site.as_ref().unwrap();
    assert_eq!(
        (site.filename.rsplit('/').next().unwrap(), site.line),
        ("gen_snapshots.py", 181)
    );
    let largest = oom.largest_sites[0].site.as_ref().unwrap();
    assert_eq!(largest.line, 181);
}

/// A recording the analyses were not written against (tests/fixtures/record_unseen.py): the
/// planted leak is found, and the OOM's what-if, whose candidates include expandable segments,
/// replays a request larger than a whole expandable reservation as an allocation that fails
/// (it used to index past the reservation's last block and panic).
#[test]
fn lstm_leak_and_an_oom_larger_than_any_reservation() {
    let (snap, index, report) = crate::support::analyze("lstm_leak_oom.pickle.gz");
    let leak = &report.leak_suspects[0];
    assert_eq!(report.leak_suspects.len(), 1);
    assert_eq!((leak.site.as_ref().unwrap().line, leak.count), (31, 80));
    assert_eq!(report.ooms.len(), 1);
    let oom = &report.ooms[0];
    assert_eq!(oom.verdict, Verdict::Exhaustion);
    assert!(oom.requested_bytes > 150 << 30);
    let sim = snapshot::analysis::whatif::oom_whatif(&snap, &index, 0).unwrap();
    assert!(sim.replay_exact);
    assert!(sim.settings_tried > 1);
    assert_eq!((sim.settings_avoiding, sim.alloc_conf), (0, None));
}

#[test]
fn multistream_shows_the_pending_free() {
    let (snap, index, report) = crate::support::analyze("multistream.pickle");
    assert_eq!(report.summary.pending_free_blocks, 1);
    assert_eq!(report.summary.pending_free_bytes, 16 << 20);
    // The trace agrees: one allocation has free_requested without free_completed.
    let d = index.device(0).unwrap();
    let pending: Vec<_> = d
        .allocations
        .iter()
        .filter(|a| a.free_requested != analysis::index::NONE && a.end == analysis::index::NONE)
        .collect();
    assert_eq!(pending.len(), 1);
    let end = analysis::state_at(&snap, &index, 0, d.len);
    assert!(
        end.segments
            .iter()
            .flat_map(|s| &s.blocks)
            .any(|b| b.state == snapshot::BlockState::ActivePendingFree)
    );
}

#[test]
fn segments_only_analyses_without_traces() {
    let (_, index, report) = crate::support::analyze("segments_only.pickle");
    assert_eq!(report.summary.segments, 12);
    // The device is listed with its final state as its peaks, and the leak search says it could
    // not run (not "none").
    let d = &report.summary.devices[&0];
    assert_eq!(
        (d.entries, d.peaks_over),
        (0, analysis::PeakScope::FinalState)
    );
    assert_eq!(d.peak_reserved_bytes, 224_395_264);
    assert_eq!(report.leak_check, analysis::LeakCheck::NoTrace);
    assert!(report.leak_suspects.is_empty() && report.ooms.is_empty());
    assert_eq!(report.warnings[0].code.as_str(), "history_not_enabled");
    assert!(index.devices.iter().all(|d| d.len == 0));
    assert_eq!(report.fragmentation[0].total.reserved_bytes, 224_395_264);
}

#[test]
fn state_at_end_matches_snapshot_and_rebuilt_states_are_consistent() {
    for scenario in [
        "leak_detached_cache",
        "fragmentation",
        "multistream",
        "steady_train",
    ] {
        let (snap, index, _) = crate::support::analyze(&file_of(scenario));
        let d = &index.devices[0];
        for p in [0, d.len / 3, d.len / 2, d.len - 1] {
            let st = analysis::state_at(&snap, &index, 0, p);
            // Reserved bytes from segment intervals equal the reserved series.
            assert_eq!(st.total.reserved_bytes, d.reserved_at(p), "{scenario}@{p}");
            for s in &st.segments {
                let sum: u64 = s.blocks.iter().map(|b| b.size).sum();
                assert_eq!(sum, s.total_size, "{scenario}@{p}: blocks tile the segment");
                assert!(
                    s.blocks
                        .windows(2)
                        .all(|w| w[0].address + w[0].size <= w[1].address)
                );
            }
            // Checkpoint answer equals a brute-force scan of the intervals.
            let mut brute: Vec<u32> = (0..d.allocations.len() as u32)
                .filter(|&a| d.allocations[a as usize].alive_at(p))
                .collect();
            brute.sort_unstable();
            assert_eq!(d.alive_at(p), brute, "{scenario}@{p}");
        }
    }
}

#[test]
fn timeline_buckets_keep_the_peak() {
    let (snap, index, _) = crate::support::analyze("big_python.pickle.xz");
    let d = &index.devices[0];
    let tl = analysis::timeline(&snap, &index, 0, 0, d.len, 500).unwrap();
    assert_eq!(tl.buckets.len(), 500);
    assert_eq!(
        tl.buckets.iter().map(|b| b.live_max).max().unwrap(),
        d.peak_live_bytes
    );
    // A time window maps to the positions inside it.
    let t0 = snap.trace.time_us.get(d.row(1000)) as f64;
    let t1 = snap.trace.time_us.get(d.row(2000)) as f64;
    let (a, b) = analysis::timeline::window_positions(&snap, d, analysis::Axis::Time, t0, t1);
    assert!(a <= 1000 && b >= 2000 && b - a < 1500, "{a}..{b}");
    let allocs = analysis::allocations_in_window(&snap, &index, 0, a, b, 50);
    assert_eq!(allocs.len(), 50);
    assert!(allocs.windows(2).all(|w| w[0].size >= w[1].size));
}

/// Fixtures whose traces the series and window tests walk position by position.
const SERIES_FIXTURES: [&str; 3] = [
    "big_python.pickle.xz",
    "fragmentation.pickle",
    "multistream.pickle",
];

/// Position ranges over a trace of `len` events: the whole trace, both ends, and `n` random
/// ranges whose widths are drawn from `widths`.
fn position_ranges(
    rng: &mut crate::support::Rng,
    len: u32,
    widths: &[usize],
    n: usize,
) -> Vec<(u32, u32)> {
    let mut ranges = vec![(0, len), (0, 0), (len, len), (1, 1)];
    for _ in 0..n {
        let a = rng.below(len as usize + 1) as u32;
        let w = widths[rng.below(widths.len())];
        let b = (a as usize + rng.below(w)).min(len as usize) as u32;
        ranges.push((a, b));
    }
    ranges
}

/// The index keeps live bytes with block extremes and reserved bytes as their changes; over any
/// range the extremes are those of every position in it, and each position reads its own value.
#[test]
fn series_extremes_equal_a_scan_of_every_position() {
    let mut rng = crate::support::Rng(7);
    for f in SERIES_FIXTURES {
        let (_, index, _) = crate::support::analyze(f);
        for d in index.traced() {
            for (lo, hi) in position_ranges(&mut rng, d.len, &[1, 255, 256, 257, 5000], 300) {
                let mut want = (u64::MAX, 0, u64::MAX, 0);
                for p in lo..=hi {
                    let (l, r) = (d.live_at(p), d.reserved_at(p));
                    want = (want.0.min(l), want.1.max(l), want.2.min(r), want.3.max(r));
                }
                assert_eq!(d.extremes(lo, hi), want, "{f} {lo}..={hi}");
            }
            let peak = (0..=d.len).map(|p| d.reserved_at(p)).max().unwrap();
            assert_eq!(d.peak_reserved(), peak, "{f}");
        }
    }
}

/// The timeline's largest allocations in a window (by-size walk for wide windows, checkpoint
/// plus window events for narrow ones) equal a scan of every allocation; `alive_at` equals
/// each allocation's own interval.
#[test]
fn largest_allocations_in_a_window_equal_a_scan_of_every_allocation() {
    let mut rng = crate::support::Rng(11);
    for f in SERIES_FIXTURES {
        let (snap, index, _) = crate::support::analyze(f);
        let t = &snap.trace;
        for d in index.traced() {
            let widths = [1, 100, 5000, d.len as usize / 9, d.len as usize];
            for (first, last) in position_ranges(&mut rng, d.len, &widths, 200) {
                for limit in [1usize, 20, 2000] {
                    let mut want: Vec<u32> = (0..d.allocations.len() as u32)
                        .filter(|&i| {
                            let a = &d.allocations[i as usize];
                            (a.start == analysis::index::NONE || a.start < last)
                                && (a.end == analysis::index::NONE || a.end >= first)
                        })
                        .collect();
                    want.sort_by_key(|&i| (std::cmp::Reverse(d.size_of(t, i)), i));
                    want.truncate(limit);
                    let got =
                        snapshot::analysis::timeline::largest_overlapping(t, d, first, last, limit);
                    assert_eq!(got, want, "{f} {first}..={last} limit {limit}");
                    // With only the 10 largest in order, most wide windows take the full scan.
                    let top = &d.top_by_size(t)[..d.top_by_size(t).len().min(10)];
                    let got = snapshot::analysis::timeline::largest_overlapping_given(
                        t, d, top, first, last, limit,
                    );
                    assert_eq!(got, want, "{f} {first}..={last} limit {limit}, top 10");
                }
                let alive: Vec<u32> = (0..d.allocations.len() as u32)
                    .filter(|&i| d.allocations[i as usize].alive_at(first))
                    .collect();
                assert_eq!(d.alive_at(first), alive, "{f} alive at {first}");
            }
        }
    }
}

/// On the time axis buckets are equal in time: a bucket's value is the state at its start and
/// after each event in it, so an idle stretch is flat at the last value before it (not a ramp to
/// the next event) and the peak is kept; every event is in exactly the buckets around its time.
/// Over a real run and the harness's GPU-planted ones.
#[test]
fn time_buckets_hold_each_value_until_the_next_event() {
    for fixture in [
        "leak_detached_cache.pickle",
        "harness/leak_list.pickle",
        "harness/side_stream.pickle",
        "harness/cuda_graph.pickle",
        "harness/oom_fragmentation.oom.pickle",
    ] {
        let (snap, index, _) = crate::support::analyze(fixture);
        let d = index.traced().next().expect("a traced device");
        let time = |e: u32| snap.trace.time_us.get(d.row(e));
        let (t0, t1) = (time(0), time(d.len - 1));
        let n = 1000;
        let tl = analysis::timeline::timeline_by_time(&snap, &index, d.device, t0, t1, n).unwrap();
        assert_eq!(tl.buckets.len(), n, "{fixture}");
        assert_eq!((tl.x_from, tl.x_to), (t0 as f64, t1 as f64), "{fixture}");
        assert_eq!(
            (tl.first_position, tl.last_position),
            (0, d.len),
            "{fixture}"
        );
        assert_eq!(
            tl.buckets.iter().map(|b| b.live_max).max().unwrap(),
            d.peak_live_bytes,
            "{fixture}"
        );
        let width = (t1 - t0) as f64 / n as f64;
        let mut idle = 0;
        for (k, b) in tl.buckets.iter().enumerate() {
            // Equal durations: bucket k starts k widths after t0.
            let at = t0 as f64 + k as f64 * width;
            assert!((b.time_us as f64 - at).abs() <= 1.0, "{fixture} bucket {k}");
            // Its positions: the events before its start .. the events before its end.
            let before = |t: i64| (0..d.len).filter(|&e| time(e) < t).count() as u32;
            assert_eq!(b.first, before(b.time_us), "{fixture} bucket {k}");
            if b.first == b.last {
                // No event inside: the value before it, held.
                idle += 1;
                assert_eq!(b.live_min, b.live_max, "{fixture} bucket {k}");
                assert_eq!(b.live_max, d.live_at(b.first), "{fixture} bucket {k}");
                assert_eq!(
                    b.reserved_max,
                    d.reserved_at(b.first),
                    "{fixture} bucket {k}"
                );
            }
        }
        if fixture == "leak_detached_cache.pickle" {
            // This run is idle for most of its time: most buckets have no event and are flat.
            assert!(idle > n / 2, "{idle} idle buckets of {n}");
            // A window in time maps to those times exactly, even where no event falls on its ends.
            let (a, z) = (t0 + 1_000_000, t0 + 3_000_000);
            let w = analysis::timeline::timeline_by_time(&snap, &index, 0, a, z, 100).unwrap();
            assert_eq!((w.x_from, w.x_to), (a as f64, z as f64));
            assert_eq!(w.buckets[0].time_us, a);
        }
    }
}

/// Expandable segments grow and shrink by pages: the state at every position shows each
/// contiguous mapped range as one segment (as PyTorch reports them), with its mapped bytes
/// equal to the reserved series, never the final size back-dated to the start.
#[test]
fn expandable_segments_show_their_mapped_growth() {
    let (snap, index, _) = crate::support::analyze("harness/expandable_segments.pickle");
    let d = &index.devices[0];
    let final_total: u64 = snap.segments.iter().map(|s| s.total_size).sum();
    let mut sizes = Vec::new();
    for p in 0..=d.len {
        let st = analysis::state_at(&snap, &index, 0, p);
        assert_eq!(st.total.reserved_bytes, d.reserved_at(p), "@{p}");
        for s in &st.segments {
            assert!(s.is_expandable);
            let sum: u64 = s.blocks.iter().map(|b| b.size).sum();
            assert_eq!(sum, s.total_size, "@{p}: blocks tile the mapped range");
            let g = s.mapped.as_ref().unwrap();
            assert_eq!(g.before_trace_bytes + g.mapped_in_trace_bytes, s.total_size);
        }
        sizes.push(st.total.reserved_bytes);
    }
    // Nothing mapped before the trace's first map; all of it mapped at the end, in 102 maps of
    // 20 MiB, one contiguous range.
    assert_eq!(sizes[0], 0);
    assert_eq!(*sizes.last().unwrap(), final_total);
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "only maps");
    let end = analysis::state_at(&snap, &index, 0, d.len);
    assert!(end.exact && end.segments.len() == 1);
    let g = end.segments[0].mapped.clone().unwrap();
    assert_eq!((g.maps, g.before_trace_bytes), (102, 0));
    assert_eq!(g.last.unwrap().bytes, 20 << 20);
    // Just before the end the rebuilt state agrees with the recorded one.
    let before = analysis::state_at(&snap, &index, 0, d.len - 1);
    assert_eq!(before.segments.len(), 1);
    assert_eq!(before.segments[0].total_size, end.segments[0].total_size);
}

/// Unmaps split mapped ranges, and take back pages mapped before the trace began.
#[test]
fn expandable_unmaps_split_ranges_and_reach_before_the_trace() {
    const MIB: u64 = 1 << 20;
    let b: u64 = 0x4_0000_0000;
    let ev = |action: &str, addr: u64, size: u64| serde_json::json!({"action": action, "addr": addr, "size": size, "stream": 0});
    let doc = serde_json::json!({
        "segments": [{"device": 0, "address": b + 20 * MIB, "total_size": 20 * MIB,
            "segment_type": "large", "is_expandable": true, "stream": 0, "blocks": [
                {"size": 10 * MIB, "requested_size": 10 * MIB, "state": "active_allocated"},
                {"size": 10 * MIB, "state": "inactive"}]}],
        "device_traces": [[
            ev("segment_map", b + 20 * MIB, 60 * MIB),
            ev("alloc", b + 20 * MIB, 10 * MIB),
            ev("segment_unmap", b + 40 * MIB, 20 * MIB),
            ev("segment_unmap", b, 20 * MIB),
            ev("segment_unmap", b + 60 * MIB, 20 * MIB),
        ]],
    });
    let snap = snapshot::from_bytes(doc.to_string().as_bytes()).unwrap();
    let (index, _) = analysis::analyze(&snap, &Default::default());
    let d = &index.devices[0];
    let ranges = |p: u32| -> Vec<(u64, u64)> {
        let st = analysis::state_at(&snap, &index, 0, p);
        assert_eq!(st.total.reserved_bytes, d.reserved_at(p), "@{p}");
        st.segments
            .iter()
            .map(|s| ((s.address - b) / MIB, s.total_size / MIB))
            .collect()
    };
    assert_eq!(ranges(0), [(0, 20)], "mapped before the trace");
    assert_eq!(ranges(1), [(0, 80)], "one contiguous range");
    assert_eq!(
        ranges(3),
        [(0, 40), (60, 20)],
        "an unmap in the middle splits it"
    );
    assert_eq!(ranges(4), [(20, 20), (60, 20)]);
    assert_eq!(ranges(5), [(20, 20)]);
    let st = analysis::state_at(&snap, &index, 0, 1);
    let g = st.segments[0].mapped.clone().unwrap();
    assert_eq!(
        (g.before_trace_bytes, g.mapped_in_trace_bytes, g.maps),
        (20 * MIB, 60 * MIB, 1)
    );
}

/// The same holds on expandable-segment runs recorded for the what-if proof (other workloads,
/// unmaps under a limit): at every position the mapped ranges add up to the reserved series and
/// their blocks tile them.
#[test]
fn expandable_growth_holds_on_the_whatif_recordings() {
    let dir = crate::support::fixtures().join("whatif");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains("expandable_segments") && n.ends_with(".pickle.xz"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for f in files {
        let (snap, index, _) = crate::support::analyze(&format!("whatif/{f}"));
        for d in index.traced() {
            let step = (d.len / 200).max(1);
            for p in (0..=d.len).step_by(step as usize).chain([d.len]) {
                let st = analysis::state_at(&snap, &index, d.device, p);
                assert_eq!(st.total.reserved_bytes, d.reserved_at(p), "{f}@{p}");
                for s in &st.segments {
                    let sum: u64 = s.blocks.iter().map(|b| b.size).sum();
                    assert_eq!(sum, s.total_size, "{f}@{p}: blocks tile the range");
                    if let Some(g) = &s.mapped {
                        assert_eq!(
                            g.before_trace_bytes + g.mapped_in_trace_bytes,
                            s.total_size,
                            "{f}@{p}"
                        );
                    }
                }
            }
        }
    }
}
