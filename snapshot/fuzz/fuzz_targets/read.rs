//! Fuzzes the whole read path (sniffing, decompression, pickle machine, lowering) and the analyses
//! of whatever parses: no input may panic, hang, or take unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = snapshot::Limits {
        max_string_bytes: 1 << 20,
        max_stack: 1 << 16,
        max_memo: 1 << 16,
        max_live_containers: 1 << 16,
        max_container_items: 1 << 20,
        max_string_pool_bytes: 1 << 22,
        max_depth: 64,
        max_decoded_bytes: 64 << 20,
        max_expansion: 100,
        size_hint_bytes: 0,
        max_held_percent_of_input: 150,
        held_allowance_bytes: 16 << 20,
        budget: None,
        content_secret: None,
    };
    if let Ok(snap) = snapshot::read_with_limits(data, limits) {
        let (index, _report) = snapshot::analysis::analyze(&snap, &Default::default());
        for d in &index.devices {
            let _ = snapshot::analysis::state_at(&snap, &index, d.device, d.len / 2);
            let _ = snapshot::analysis::timeline(&snap, &index, d.device, 0, d.len, 16);
        }
    }
});
