//! The unit tests' random numbers: a xorshift generator, so that a randomized test is the same
//! run every time (a failure names its step and replays) and needs no crate.

/// Numbers below the bound asked, from `seed` (which must not be 0).
pub(crate) fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    }
}
