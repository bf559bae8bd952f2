//! Small helpers the server's benchmarks share (included with `#[path]`): a deterministic
//! generator for picking what to ask, and percentiles of timings.
#![allow(dead_code)]

/// xorshift64: the same sequence every run, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The `p` quantile (0 to 1) of `v`, nearest rank; sorts `v`.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}
