//! The timeline's allocation bands, laid out from one answer: every allocation in it (the
//! largest in the window, up to the server's limit) is a band; bands stack in allocation order,
//! oldest at the bottom, like PyTorch's Active Memory Timeline. An allocation is alive over one
//! contiguous run of buckets, so each band keeps its lower edges for that run only. Pure, so the
//! layout is unit-tested on the host.

use std::sync::Arc;

use ::api::TimelineAnswer;

/// One allocation's band: `lower[j]` is its lower edge in bucket `first + j`.
#[derive(Debug, PartialEq)]
pub struct Band {
    /// Index into the answer's `allocations`.
    pub alloc: usize,
    pub first: usize,
    pub lower: Vec<f32>,
}

/// Bands of one answer, and the bytes they cover in each bucket (the top of the stack); compared
/// by identity so a Memo recomputes only on new data.
#[derive(Debug, Clone)]
pub struct Layout(pub Arc<Vec<Band>>, pub Arc<Vec<f64>>);

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

pub fn layout(r: &TimelineAnswer) -> Layout {
    let buckets = &r.timeline.buckets;
    let mut order: Vec<usize> = (0..r.allocations.len()).collect();
    order.sort_by_key(|&i| {
        (
            r.allocations[i].start.map_or(0, |s| s as i64 + 1),
            r.allocations[i].id,
        )
    });
    let mut acc = vec![0f64; buckets.len()];
    let mut bands = Vec::with_capacity(order.len());
    for i in order {
        let a = &r.allocations[i];
        // Alive in bucket b when start < b.last <= end.
        let first = a
            .start
            .map_or(0, |s| buckets.partition_point(|b| b.last <= s));
        let end = a
            .end
            .map_or(buckets.len(), |e| buckets.partition_point(|b| b.last <= e));
        if first >= end {
            continue;
        }
        let lower = acc[first..end].iter().map(|&x| x as f32).collect();
        for x in &mut acc[first..end] {
            *x += a.size_bytes as f64;
        }
        bands.push(Band {
            alloc: i,
            first,
            lower,
        });
    }
    Layout(Arc::new(bands), Arc::new(acc))
}

impl Layout {
    /// The share of live bytes the bands show where live memory is highest in the answer: low
    /// when most of it is in allocations narrower than a bucket (or beyond the largest sent).
    pub fn shown_at_peak(&self, r: &TimelineAnswer) -> f64 {
        let b = &r.timeline.buckets;
        let Some((j, k)) = b.iter().enumerate().max_by_key(|(_, k)| k.live_max_bytes) else {
            return 1.0;
        };
        if k.live_max_bytes == 0 {
            return 1.0;
        }
        (self.1.get(j).copied().unwrap_or(0.0) / k.live_max_bytes as f64).min(1.0)
    }
}

impl Band {
    /// The band's lower edge as steps: each run of buckets at one height, as (first bucket,
    /// bucket after the run, height). Drawing a vertex pair per step instead of per bucket draws
    /// the same polygon: a band as long as the window was ~1,300 line segments at one height, and
    /// one answer of the 164 MB GPT file asked for 320,000 `lineTo`s where 585 draw the same
    /// (issue 41).
    pub fn steps(&self) -> Vec<(usize, usize, f32)> {
        let mut out: Vec<(usize, usize, f32)> = Vec::new();
        for (j, &lo) in self.lower.iter().enumerate() {
            let at = self.first + j;
            match out.last_mut() {
                Some(s) if s.2 == lo => s.1 = at + 1,
                _ => out.push((at, at + 1, lo)),
            }
        }
        out
    }
}

impl Layout {
    /// The allocation whose band covers `value` bytes in bucket `bucket`, if any.
    pub fn under(&self, r: &TimelineAnswer, bucket: usize, value: f64) -> Option<usize> {
        self.0.iter().find_map(|band| {
            let lo = *band.lower.get(bucket.checked_sub(band.first)?)? as f64;
            let a = &r.allocations[band.alloc];
            (value >= lo && value < lo + a.size_bytes as f64).then_some(band.alloc)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::api::{AllocationView, Axis, Bucket, StackId, Timeline};

    fn bucket(first: u32, last: u32) -> Bucket {
        Bucket {
            first,
            last,
            time_us: first as i64,
            live_min_bytes: 0,
            live_max_bytes: 0,
            reserved_min_bytes: 0,
            reserved_max_bytes: 0,
            allocs: 0,
            alloc_bytes: 0,
        }
    }

    fn alloc(id: u32, size: u64, start: Option<u32>, end: Option<u32>) -> AllocationView {
        AllocationView {
            id,
            addr: 0,
            size_bytes: size,
            stream: 0,
            start,
            end,
            start_time_us: None,
            end_time_us: None,
            stack: StackId(1),
        }
    }

    fn answer(allocations: Vec<AllocationView>) -> TimelineAnswer {
        TimelineAnswer {
            device: 0,
            axis: Axis::Event,
            timeline: Timeline {
                device: 0,
                events: 40,
                first_position: 0,
                last_position: 40,
                x_from: 0.0,
                x_to: 40.0,
                buckets: (0..4).map(|b| bucket(b * 10, b * 10 + 9)).collect(),
                peak_position: 0,
                peak_live_bytes: 0,
            },
            allocations,
            stacks: Default::default(),
            sites: Default::default(),
            annotations: vec![],
            ooms: vec![],
            first_time_us: 0,
            last_time_us: 40,
            fitted: None,
            categories: None,
        }
    }

    #[test]
    fn bands_stack_oldest_at_the_bottom_over_the_buckets_they_are_alive_in() {
        // Sent largest first; laid out by age: the one made before the trace at the bottom.
        let r = answer(vec![
            alloc(2, 300, Some(12), None),    // alive from bucket 1 on
            alloc(1, 100, None, Some(25)),    // before the trace, freed in bucket 2
            alloc(3, 50, Some(31), Some(33)), // inside bucket 3 only: first == end, not drawn
        ]);
        let l = layout(&r);
        assert_eq!(
            *l.0,
            vec![
                Band {
                    alloc: 1,
                    first: 0,
                    lower: vec![0.0, 0.0]
                },
                Band {
                    alloc: 0,
                    first: 1,
                    lower: vec![100.0, 0.0, 0.0]
                },
            ]
        );
        // What is under the cursor: bucket 1 at 50 B is the old one, at 150 B the new one.
        assert_eq!(l.under(&r, 1, 50.0), Some(1));
        assert_eq!(l.under(&r, 1, 150.0), Some(0));
        assert_eq!(l.under(&r, 3, 150.0), Some(0));
        assert_eq!(l.under(&r, 0, 150.0), None);
        // Compared by identity: a clone is the same layout, a new one is not.
        assert!(l.clone() == l);
        assert!(layout(&r) != l);
    }

    #[test]
    fn a_bands_steps_are_its_runs_of_one_height() {
        let band = |first, lower: Vec<f32>| Band {
            alloc: 0,
            first,
            lower,
        };
        assert_eq!(band(3, vec![5.0]).steps(), vec![(3, 4, 5.0)]);
        assert_eq!(
            band(2, vec![0.0, 0.0, 7.0, 7.0, 7.0, 0.0]).steps(),
            vec![(2, 4, 0.0), (4, 7, 7.0), (7, 8, 0.0)]
        );
        // Every bucket covered once, in order, whatever the heights.
        let lower: Vec<f32> = (0..50).map(|i| ((i * 7) % 3) as f32).collect();
        let steps = band(10, lower.clone()).steps();
        let covered: Vec<f32> = steps
            .iter()
            .flat_map(|&(a, z, lo)| std::iter::repeat_n(lo, z - a))
            .collect();
        assert_eq!(covered, lower);
        assert!(
            steps
                .windows(2)
                .all(|w| w[0].1 == w[1].0 && w[0].2 != w[1].2)
        );
    }
}
