//! Series over a time window: buckets, alignment, the memory outside PyTorch and the live leak
//! signal. Pure functions of rows; no database.

/// Columns of one bucketed series row: (key, bucket, value columns…).
pub type Bucketed = (i64, i64, Option<i64>, Option<i64>, Option<String>);

/// A time window cut into buckets; series are reduced to one value per bucket (the maximum, so
/// peaks stay visible) and aligned, so the page can stack them.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
    pub bucket_ms: i64,
}

/// The latest time a window may reach: the year 10,000, in ms since the epoch.
pub const MAX_TIME_MS: i64 = 253_402_300_800_000;
/// The longest window: a year and a day.
pub const MAX_SPAN_MS: i64 = 366 * 86_400_000;

impl Window {
    /// A window the store can answer whatever a client asks: times between the epoch and
    /// `MAX_TIME_MS`, `to` after `from`, at most `MAX_SPAN_MS` long (cut at its start), 10 to
    /// 4,000 buckets.
    pub fn new(from_ms: i64, to_ms: i64, points: i64) -> Window {
        let from_ms = from_ms.clamp(0, MAX_TIME_MS - 1);
        let to_ms = to_ms.clamp(from_ms + 1, MAX_TIME_MS);
        let from_ms = from_ms.max(to_ms - MAX_SPAN_MS);
        let points = points.clamp(10, 4000);
        Window {
            from_ms,
            to_ms,
            bucket_ms: ((to_ms - from_ms) + points - 1) / points,
        }
    }

    pub fn buckets(&self) -> usize {
        ((self.to_ms - self.from_ms) / self.bucket_ms + 1) as usize
    }

    pub fn to_api(&self) -> api::Window {
        api::Window {
            from_ms: self.from_ms,
            to_ms: self.to_ms,
            bucket_ms: self.bucket_ms,
        }
    }

    pub fn times(&self) -> Vec<i64> {
        (0..self.buckets() as i64)
            .map(|b| self.from_ms + b * self.bucket_ms)
            .collect()
    }
}

/// A series aligned to a window's buckets; a missing bucket takes the previous value if it is at
/// most `fill_ms` old (samples come every interval, buckets may be finer).
pub fn align(w: &Window, points: &[(i64, i64)], fill_ms: i64) -> Vec<Option<i64>> {
    let mut out = vec![None; w.buckets()];
    for &(b, v) in points {
        if let Some(slot) = out.get_mut(b as usize) {
            *slot = Some(slot.map_or(v, |x: i64| x.max(v)));
        }
    }
    let fill = (fill_ms / w.bucket_ms).max(1) as usize;
    let mut last: Option<(usize, i64)> = None;
    for (i, slot) in out.iter_mut().enumerate() {
        match (*slot, last) {
            (Some(v), _) => last = Some((i, v)),
            (None, Some((j, v))) if i - j <= fill => *slot = Some(v),
            _ => {}
        }
    }
    out
}

/// Whether memory held between steps keeps rising: the "live leak signal" (`api::LeakSignal`).
/// Takes the allocated bytes at each step's low point (what survives from one step to the next),
/// oldest first.
pub use api::LeakSignal;

/// Steps needed before the signal says anything.
pub const LEAK_MIN_STEPS: usize = 8;

/// `step_lows`: (step number, allocated bytes at that step's low point), oldest first. Not every
/// step need be there (the agent samples at most once per interval): the slope is per step
/// number, not per point.
pub fn leak_signal(step_lows: &[(i64, i64)]) -> LeakSignal {
    let points = &step_lows[step_lows.len().saturating_sub(200)..];
    let lows: Vec<i64> = points.iter().map(|p| p.1).collect();
    let n = lows.len();
    let (mut ups, mut changes) = (0usize, 0usize);
    for w in lows.windows(2) {
        if w[1] != w[0] {
            changes += 1;
            ups += usize::from(w[1] > w[0]);
        }
    }
    let slope = if n >= 2 {
        let mean_x = points.iter().map(|p| p.0 as f64).sum::<f64>() / n as f64;
        let mean_y = lows.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(step, v) in points {
            let dx = step as f64 - mean_x;
            sxy += dx * (v as f64 - mean_y);
            sxx += dx * dx;
        }
        if sxx > 0.0 { sxy / sxx } else { 0.0 }
    } else {
        0.0
    };
    let share = if changes == 0 {
        0.0
    } else {
        ups as f64 / changes as f64
    };
    // The floor (lowest point) of each quarter of the steps: a leak lifts every floor above the
    // previous one; caching's sawtooth goes up and down around the same floor.
    let floors: Vec<i64> = (0..4)
        .filter_map(|q| lows[q * n / 4..(q + 1) * n / 4].iter().min().copied())
        .collect();
    let growth = match (floors.first(), floors.last()) {
        (Some(a), Some(b)) if floors.len() == 4 => b - a,
        _ => 0,
    };
    let mean = lows.iter().map(|&v| v as f64).sum::<f64>() / n.max(1) as f64;
    let rising = n >= LEAK_MIN_STEPS
        && slope > 0.0
        && floors.windows(2).all(|w| w[1] > w[0])
        && growth as f64 >= (1u64 << 20) as f64
        && growth as f64 >= 0.01 * mean;
    LeakSignal {
        rising,
        bytes_per_step: slope,
        steps: n,
        growth_bytes: growth,
        rising_share: share,
    }
}
/// `nvml − reserved` where both are known: memory the process holds outside PyTorch's allocator
/// (CUDA context, NCCL, other libraries).
pub fn outside(nvml: &[Option<i64>], reserved: &[Option<i64>]) -> Vec<Option<i64>> {
    nvml.iter()
        .zip(reserved)
        .map(|(n, r)| Some((n.as_ref()? - r.as_ref()?).max(0)))
        .collect()
}

/// Gaps shorter than this are filled with the previous value when series are aligned: buckets
/// can be finer than the sampling interval (1 s by default), but a process that has gone must
/// not seem to linger.
pub const FILL_MS: i64 = 2_500;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn a_steady_climb_is_a_leak_and_a_sawtooth_or_short_run_is_not() {
        let idx = |v: Vec<i64>| -> Vec<(i64, i64)> {
            v.into_iter()
                .enumerate()
                .map(|(i, v)| (i as i64, v))
                .collect()
        };
        let climb = idx((0..50).map(|i| 1000 * MIB + i * MIB).collect());
        let s = leak_signal(&climb);
        assert!(s.rising);
        assert!((s.bytes_per_step - MIB as f64).abs() < 1e-6);
        assert_eq!((s.steps, s.growth_bytes), (50, 37 * MIB));

        // Caching makes memory go up and down around a level: not a leak.
        let saw = idx((0..50).map(|i| 1000 * MIB + (i % 5) * 40 * MIB).collect());
        assert!(!leak_signal(&saw).rising);
        // Flat: not a leak.
        assert!(!leak_signal(&idx(vec![5 * MIB; 40])).rising);
        // Too few steps to say.
        assert!(!leak_signal(&climb[..LEAK_MIN_STEPS - 1]).rising);
        // Rising by a few bytes (allocator noise): below 1 MiB in total, not a leak.
        let tiny = idx((0..50).map(|i| 1000 * MIB + i * 512).collect());
        assert!(!leak_signal(&tiny).rising);
        // One jump and then flat (a cache filled once): the floors stop rising, not a leak.
        let jump = idx((0..40)
            .map(|i| if i < 5 { MIB } else { 64 * MIB })
            .collect());
        assert!(!leak_signal(&jump).rising);
        // A noisy leak (up 2 MiB, down 1 MiB, ...) is still a leak.
        let noisy = idx((0..60)
            .map(|i| 100 * MIB + (i / 2) * MIB + (i % 2) * 2 * MIB)
            .collect());
        assert!(leak_signal(&noisy).rising);
        assert_eq!(leak_signal(&[]).steps, 0);
        // Only every other step sampled (steps faster than the agent's interval): still 1 MiB
        // per step, not 2 per sample.
        let sparse: Vec<(i64, i64)> = (0..50).map(|i| (2 * i, 1000 * MIB + 2 * i * MIB)).collect();
        assert!((leak_signal(&sparse).bytes_per_step - MIB as f64).abs() < 1e-6);
    }

    #[test]
    fn alignment_takes_bucket_maxima_and_fills_short_gaps_only() {
        let w = Window::new(0, 9_999, 10);
        assert_eq!((w.bucket_ms, w.buckets()), (1000, 10));
        let a = align(&w, &[(0, 5), (0, 7), (2, 1), (9, 4)], 1000);
        assert_eq!(
            a,
            vec![
                Some(7),
                Some(7),
                Some(1),
                Some(1),
                None,
                None,
                None,
                None,
                None,
                Some(4)
            ]
        );
        assert_eq!(
            outside(&[Some(10), None, Some(3)], &[Some(4), Some(1), Some(5)]),
            vec![Some(6), None, Some(0)]
        );
    }
}
