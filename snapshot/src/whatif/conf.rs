//! `PYTORCH_CUDA_ALLOC_CONF`, parsed as PyTorch parses it, and the snapshot's own
//! `allocator_settings` read into the same shape, so a replay runs under exactly the settings a
//! trace was recorded with or under any other string a user types.
//!
//! Source: `c10/core/AllocatorConfig.cpp` (`AcceleratorAllocatorConfig::parseArgs` and its
//! `parse*` helpers; older releases: `c10/cuda/CUDAAllocatorConfig.cpp`). Keys we do not model
//! (pinned-memory options, `backend`, `release_lock_on_cudamalloc`, …) are accepted and ignored,
//! as PyTorch skips keys that do not concern the device allocator.

use std::fmt;

const MIB: u64 = 1 << 20;
/// `kLargeBuffer`: the default large-pool segment and the least `max_split_size_mb`.
pub const LARGE_BUFFER_BYTES: u64 = 20 * MIB;
/// `kRoundUpPowerOfTwoIntervals`: one divisions value per power-of-two size from 1 MiB to 32 GiB.
pub const POWER2_INTERVALS: usize = 16;

/// The device allocator's settings that change what it does with memory.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    /// Blocks at or above this size are never split (`max_split_size_mb`; `u64::MAX`: no limit).
    pub max_split_size_bytes: u64,
    /// How much larger than a request (≥ `max_split_size`) a cached block may be and still be
    /// used whole (`max_non_split_rounding_mb`, default 20 MiB).
    pub max_non_split_rounding_bytes: u64,
    /// Divisions per power-of-two interval (index 0: sizes up to 2 MiB, … 15: 32 GiB and up);
    /// 0 or 1: plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; POWER2_INTERVALS],
    /// Fraction of the per-process limit above which cached blocks are collected (0: off). Acts
    /// only under a per-process memory fraction.
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// Large-pool segment for requests under 10 MiB (`large_segment_size_mb`, newer PyTorch).
    pub large_segment_bytes: u64,
}

impl Default for AllocConf {
    fn default() -> AllocConf {
        AllocConf {
            max_split_size_bytes: u64::MAX,
            max_non_split_rounding_bytes: LARGE_BUFFER_BYTES,
            roundup_power2_divisions: [0; POWER2_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            large_segment_bytes: LARGE_BUFFER_BYTES,
        }
    }
}

/// A setting string PyTorch would refuse, said the way a user can fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfError(pub String);

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfError {}

/// PyTorch's lexer: `,` `:` `[` `]` are tokens of their own, spaces are dropped.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for c in s.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(c.to_string());
        } else if c != ' ' {
            buf.push(c);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

impl AllocConf {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string ("" is PyTorch's defaults).
    pub fn parse(s: &str) -> Result<AllocConf, ConfError> {
        let t = tokens(s);
        let mut c = AllocConf::default();
        let err = |m: String| Err(ConfError(format!("{m} in PYTORCH_CUDA_ALLOC_CONF {s:?}")));
        let get = |i: usize| t.get(i).map(String::as_str).unwrap_or("");
        let number = |i: usize| -> Result<u64, ConfError> {
            get(i).parse::<u64>().map_err(|_| {
                ConfError(format!(
                    "expected a whole number, found {:?} in PYTORCH_CUDA_ALLOC_CONF {s:?}",
                    get(i)
                ))
            })
        };
        let expect = |i: usize, tok: &str| -> Result<(), ConfError> {
            if get(i) == tok {
                Ok(())
            } else {
                Err(ConfError(format!(
                    "expected '{tok}' after {:?}, found {:?} in PYTORCH_CUDA_ALLOC_CONF {s:?}",
                    get(i.saturating_sub(1)),
                    get(i)
                )))
            }
        };
        let mut i = 0;
        while i < t.len() {
            let key = get(i).to_string();
            match key.as_str() {
                "max_split_size_mb" | "max_non_split_rounding_mb" | "large_segment_size_mb" => {
                    expect(i + 1, ":")?;
                    let mb = number(i + 2)?;
                    if mb < LARGE_BUFFER_BYTES / MIB {
                        return err(format!("{key} must be at least 20, not {mb}"));
                    }
                    let bytes = mb.saturating_mul(MIB);
                    match key.as_str() {
                        "max_split_size_mb" => c.max_split_size_bytes = bytes,
                        "max_non_split_rounding_mb" => c.max_non_split_rounding_bytes = bytes,
                        _ => c.large_segment_bytes = bytes,
                    }
                    i += 3;
                }
                "garbage_collection_threshold" => {
                    expect(i + 1, ":")?;
                    let v: f64 = get(i + 2).parse().map_err(|_| {
                        ConfError(format!(
                            "expected a number in (0, 1) for garbage_collection_threshold in PYTORCH_CUDA_ALLOC_CONF {s:?}"
                        ))
                    })?;
                    if !(v > 0.0 && v < 1.0) {
                        return err(format!(
                            "garbage_collection_threshold must be in (0.0, 1.0), not {v}"
                        ));
                    }
                    c.garbage_collection_threshold = v;
                    i += 3;
                }
                "expandable_segments" => {
                    expect(i + 1, ":")?;
                    c.expandable_segments = match get(i + 2) {
                        "True" | "true" | "1" => true,
                        "False" | "false" | "0" => false,
                        other => {
                            return err(format!(
                                "expandable_segments takes True or False, not {other:?}"
                            ));
                        }
                    };
                    i += 3;
                }
                "roundup_power2_divisions" => {
                    expect(i + 1, ":")?;
                    i += 2;
                    if get(i) == "[" {
                        let mut first = true;
                        let mut last_index = 0usize;
                        i += 1;
                        while i < t.len() && get(i) != "]" {
                            let boundary = get(i).to_string();
                            expect(i + 1, ":")?;
                            let value = number(i + 2)?;
                            if value != 0 && !value.is_power_of_two() {
                                return err(format!(
                                    "roundup_power2_divisions values must be powers of 2 or 0, not {value}"
                                ));
                            }
                            if boundary == ">" {
                                for d in c.roundup_power2_divisions.iter_mut().skip(last_index + 1)
                                {
                                    *d = value;
                                }
                            } else {
                                let b: u64 = boundary.parse().map_err(|_| {
                                    ConfError(format!(
                                        "expected a size in MiB or '>', found {boundary:?} in PYTORCH_CUDA_ALLOC_CONF {s:?}"
                                    ))
                                })?;
                                if !b.is_power_of_two() {
                                    return err(format!(
                                        "roundup_power2_divisions intervals must be powers of 2, not {b}"
                                    ));
                                }
                                let index = (b.ilog2() as usize).min(POWER2_INTERVALS - 1);
                                if first {
                                    for d in &mut c.roundup_power2_divisions[..index] {
                                        *d = value;
                                    }
                                    first = false;
                                }
                                c.roundup_power2_divisions[index] = value;
                                last_index = index;
                            }
                            i += 3;
                            if get(i) == "," {
                                i += 1;
                            }
                        }
                        if get(i) != "]" {
                            return err("roundup_power2_divisions lacks its closing ']'".into());
                        }
                        i += 1;
                    } else {
                        let value = number(i)?;
                        if !value.is_power_of_two() {
                            return err(format!(
                                "roundup_power2_divisions must be a power of 2, not {value}"
                            ));
                        }
                        c.roundup_power2_divisions = [value; POWER2_INTERVALS];
                        i += 1;
                    }
                }
                "" | "," => i += 1,
                _ => {
                    // A key we do not model: skip it and its value (or bracketed list).
                    i += 1;
                    if get(i) == ":" {
                        i += 1;
                        if get(i) == "[" {
                            while i < t.len() && get(i) != "]" {
                                i += 1;
                            }
                        }
                        i += 1;
                    }
                }
            }
            if i < t.len() {
                expect(i, ",")?;
                i += 1;
            }
        }
        Ok(c)
    }

    /// The settings a snapshot records (`allocator_settings`, PyTorch 2.3+): the parsed values
    /// where the snapshot has them, the raw string for the rest (some settings appear only there).
    pub fn from_snapshot(settings: &serde_json::Value) -> Result<(AllocConf, String), ConfError> {
        let raw = settings
            .get("PYTORCH_CUDA_ALLOC_CONF")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        let mut c = AllocConf::parse(&raw)?;
        if let Some(v) = settings.get("max_split_size").and_then(|v| v.as_i64()) {
            c.max_split_size_bytes = if v < 0 { u64::MAX } else { v as u64 };
        }
        if let Some(v) = settings
            .get("garbage_collection_threshold")
            .and_then(|v| v.as_f64())
        {
            c.garbage_collection_threshold = v;
        }
        if let Some(v) = settings
            .get("expandable_segments")
            .and_then(|v| v.as_bool())
        {
            c.expandable_segments = v;
        }
        if let Some(d) = settings
            .get("roundup_power2_divisions")
            .and_then(|v| v.as_object())
        {
            // Keys are the interval's lower bound in MiB ("1" … "32768").
            for (k, v) in d {
                if let (Ok(mb), Some(v)) = (k.parse::<u64>(), v.as_u64())
                    && mb.is_power_of_two()
                {
                    let index = (mb.ilog2() as usize).min(POWER2_INTERVALS - 1);
                    c.roundup_power2_divisions[index] = v;
                }
            }
        }
        Ok((c, raw))
    }

    /// Divisions for a request of `size` bytes (`roundup_power2_divisions(size)`).
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - size.max(1).leading_zeros() as usize;
        let index = log.saturating_sub(20).min(POWER2_INTERVALS - 1);
        self.roundup_power2_divisions[index]
    }

    /// The size a request of `size` bytes is rounded to (`round_size`).
    pub fn round_size(&self, size: u64) -> u64 {
        const MIN: u64 = 512;
        if size < MIN {
            return MIN;
        }
        let divisions = self.divisions_for(size);
        if divisions > 1 && size > MIN * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            size.div_ceil(MIN) * MIN
        }
    }

    /// The new segment a request of `size` (rounded) gets when nothing cached fits
    /// (`get_allocation_size`).
    pub fn allocation_size(&self, size: u64) -> u64 {
        const SMALL_SIZE: u64 = MIB;
        const SMALL_BUFFER: u64 = 2 * MIB;
        const MIN_LARGE_ALLOC: u64 = 10 * MIB;
        const ROUND_LARGE: u64 = 2 * MIB;
        if size <= SMALL_SIZE {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            self.large_segment_bytes
        } else {
            size.div_ceil(ROUND_LARGE) * ROUND_LARGE
        }
    }
}

/// Rounds `size` up to the next of `divisions` equal steps of its power-of-two interval
/// (`roundup_power2_next_division`).
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_modelled_key() {
        let c = AllocConf::parse(
            "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,max_non_split_rounding_mb:40",
        )
        .unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size_bytes, 128 * MIB);
        assert_eq!(c.max_non_split_rounding_bytes, 40 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(AllocConf::parse("").unwrap(), AllocConf::default());
        // Keys of other allocators are skipped, like PyTorch does.
        let c = AllocConf::parse("pinned_num_register_threads:8,backend:native").unwrap();
        assert_eq!(c, AllocConf::default());
    }

    #[test]
    fn roundup_power2_divisions_in_both_forms() {
        let c = AllocConf::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; POWER2_INTERVALS]);
        // The first value also fills every interval below its boundary, each boundary sets its
        // own interval, '>' every interval after the last boundary; the others stay 0.
        let c = AllocConf::parse("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]").unwrap();
        assert_eq!(c.divisions_for(32 * MIB), 8);
        assert_eq!(c.divisions_for(64 * MIB), 8);
        assert_eq!(c.divisions_for(128 * MIB), 0);
        assert_eq!(c.divisions_for(256 * MIB), 4);
        assert_eq!(c.divisions_for(1024 * MIB), 4);
        assert_eq!(c.divisions_for(4096 * MIB), 1);
        assert!(AllocConf::parse("roundup_power2_divisions:3").is_err());
    }

    #[test]
    fn rounding_follows_round_size() {
        let c = AllocConf::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(513), 1024);
        let c = AllocConf::parse("roundup_power2_divisions:4").unwrap();
        // 1200 lies in [1024, 2048): quarters of 256 B, but sizes ≤ 512·4 keep 512 B rounding.
        assert_eq!(c.round_size(1200), 1536);
        assert_eq!(c.round_size(5000), 5120);
        assert_eq!(c.round_size(3 * MIB + 1), 3 * MIB + 512 * 1024);
        assert_eq!(c.allocation_size(512), 2 * MIB);
        assert_eq!(c.allocation_size(5 * MIB), 20 * MIB);
        assert_eq!(c.allocation_size(11 * MIB + 1), 12 * MIB);
    }

    #[test]
    fn refusals_say_what_to_fix() {
        let e = AllocConf::parse("max_split_size_mb:10").unwrap_err();
        assert!(e.0.contains("at least 20"), "{e}");
        let e = AllocConf::parse("expandable_segments:maybe").unwrap_err();
        assert!(e.0.contains("True or False"), "{e}");
    }
}
