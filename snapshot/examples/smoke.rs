fn main() {
    for path in std::env::args().skip(1) {
        let t = std::time::Instant::now();
        let f = std::fs::File::open(&path).unwrap();
        match snapshot::read(f) {
            Ok(s) => println!(
                "{path}: {:?} segs={} blocks={} entries={} stacks={} frames={} strings={} devices={:?} heap={}MB in {:?}",
                s.format, s.segments.len(), s.blocks.len(), s.trace.len(), s.stacks.len(), s.frames.len(), s.strings.len(),
                s.devices, s.heap_bytes() >> 20, t.elapsed()
            ),
            Err(e) => println!("{path}: error: {e}"),
        }
    }
}
