//! `PYTORCH_CUDA_ALLOC_CONF`, parsed as PyTorch parses it, and the snapshot's own
//! `allocator_settings` read into the same shape, so a replay runs under exactly the settings a
//! trace was recorded with or under any other string a user types.
//!
//! Source: PyTorch 2.11's `c10/core/AllocatorConfig.cpp` (`AcceleratorAllocatorConfig::parseArgs`,
//! its `parse*` helpers and `ConfigTokenizer` in `AllocatorConfig.h`) and
//! `c10/cuda/CUDAAllocatorConfig.cpp` (the CUDA keys). A key neither knows is refused at CUDA
//! start ("Unrecognized key 'expandable_segment' in Accelerator allocator config."), and so it is
//! here, in PyTorch's words; so are values PyTorch refuses (`expandable_segments:true`: only
//! `True` and `False`). Keys PyTorch accepts that do not change what the device allocator does
//! with memory (pinned host memory, `release_lock_on_cudamalloc`, …) are accepted and listed as
//! not simulated ([`Parsed::not_simulated`]); `backend:cudaMallocAsync` is a different allocator
//! altogether, which the model is not.

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

/// Keys PyTorch 2.11 accepts that the model does not simulate (host/pinned memory, locking,
/// graph-capture stream reuse; the ROCm spellings too).
const NOT_SIMULATED: &[&str] = &[
    "pinned_use_background_threads",
    "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "graph_capture_record_stream_reuse",
];

/// Keys the model simulates.
const SIMULATED: &[&str] = &[
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "large_segment_size_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "backend",
];

/// Keys whose value PyTorch reads with `ConfigTokenizer::toBool`.
const BOOLEAN: &[&str] = &[
    "expandable_segments",
    "pinned_use_background_threads",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "graph_capture_record_stream_reuse",
];

/// A parsed setting string: the settings, and the keys it sets that the model does not simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub conf: AllocConf,
    /// "pinned_use_background_threads:True (host memory: not simulated)".
    pub not_simulated: Vec<String>,
}

/// The known key nearest to `key` (one or two edits away), for "did you mean".
fn nearest_key(key: &str) -> Option<&'static str> {
    fn distance(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut prev = row[0];
            row[0] = i;
            for j in 1..=b.len() {
                let cur = row[j];
                row[j] = (row[j] + 1)
                    .min(row[j - 1] + 1)
                    .min(prev + usize::from(a[i - 1] != b[j - 1]));
                prev = cur;
            }
        }
        row[b.len()]
    }
    SIMULATED
        .iter()
        .chain(NOT_SIMULATED)
        .map(|k| (distance(key, k), *k))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, k)| k)
}

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
        } else if !c.is_whitespace() {
            buf.push(c);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

impl AllocConf {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string ("" is PyTorch's defaults) as PyTorch 2.11 does,
    /// refusing what it refuses.
    pub fn parse(s: &str) -> Result<AllocConf, ConfError> {
        Ok(AllocConf::parse_noting(s)?.conf)
    }

    /// [`AllocConf::parse`], with the keys the model does not simulate.
    pub fn parse_noting(s: &str) -> Result<Parsed, ConfError> {
        AllocConf::parse_inner(s, true)
    }

    /// `strict`: unknown keys are refused (what a user types); otherwise they are listed as not
    /// simulated (a recorded string from another PyTorch release).
    fn parse_inner(s: &str, strict: bool) -> Result<Parsed, ConfError> {
        let t = tokens(s);
        let mut c = AllocConf::default();
        let mut not_simulated: Vec<String> = Vec::new();
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
        // `ConfigTokenizer::toBool`: exactly `True` or `False`.
        let boolean = |i: usize| -> Result<bool, ConfError> {
            match get(i) {
                "True" => Ok(true),
                "False" => Ok(false),
                other => Err(ConfError(format!(
                    "Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{other}' (PyTorch's words) for {:?} in PYTORCH_CUDA_ALLOC_CONF {s:?}",
                    get(i.saturating_sub(2))
                ))),
            }
        };
        let mut i = 0;
        while i < t.len() {
            let key = get(i).to_string();
            match key.as_str() {
                "max_split_size_mb" | "max_non_split_rounding_mb" | "large_segment_size_mb" => {
                    expect(i + 1, ":")?;
                    let mb = number(i + 2)?;
                    if key == "large_segment_size_mb" && mb <= 10 {
                        return err(format!(
                            "CachingAllocator option large_segment_size_mb must be > 10 MB (PyTorch's words), not {mb}"
                        ));
                    }
                    if key != "large_segment_size_mb" && mb < LARGE_BUFFER_BYTES / MIB {
                        return err(format!(
                            "CachingAllocator option {key} too small, must be >= 20 (PyTorch's words), not {mb}"
                        ));
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
                            "garbage_collect_threshold is invalid, set it in (0.0, 1.0) (PyTorch's words), not {v}"
                        ));
                    }
                    c.garbage_collection_threshold = v;
                    i += 3;
                }
                "expandable_segments" => {
                    expect(i + 1, ":")?;
                    c.expandable_segments = boolean(i + 2)?;
                    i += 3;
                }
                "backend" => {
                    expect(i + 1, ":")?;
                    match get(i + 2) {
                        "native" => {}
                        "cudaMallocAsync" | "hipMallocAsync" => not_simulated.push(format!(
                            "backend:{} (CUDA's own stream-ordered allocator, not PyTorch's caching allocator: the replay models the native one)",
                            get(i + 2)
                        )),
                        other => {
                            return err(format!(
                                "Unknown allocator backend, options are native and cudaMallocAsync (PyTorch's words), not {other:?}"
                            ));
                        }
                    }
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
                                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup (PyTorch's words), not {value}"
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
                                        "For roundups, the intervals have to be power of 2 (PyTorch's words), not {b}"
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
                                "For roundups, the divisions has to be power of 2 (PyTorch's words), not {value}"
                            ));
                        }
                        c.roundup_power2_divisions = [value; POWER2_INTERVALS];
                        i += 1;
                    }
                }
                "" | "," => i += 1,
                _ => {
                    let known = NOT_SIMULATED.contains(&key.as_str());
                    if !known && strict {
                        let hint = nearest_key(&key)
                            .map(|k| format!(" Did you mean '{k}'?"))
                            .unwrap_or_default();
                        return Err(ConfError(format!(
                            "Unrecognized key '{key}' in Accelerator allocator config. (PyTorch refuses PYTORCH_CUDA_ALLOC_CONF {s:?} when CUDA starts.){hint}"
                        )));
                    }
                    if known && BOOLEAN.contains(&key.as_str()) {
                        expect(i + 1, ":")?;
                        boolean(i + 2)?;
                    }
                    // Skip it and its value (or bracketed list).
                    let start = i;
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
                    let what = if known {
                        "does not change the device allocator's memory"
                    } else {
                        "not a key this model knows"
                    };
                    not_simulated.push(format!("{} ({what})", t[start..i.min(t.len())].concat()));
                }
            }
            if i < t.len() {
                expect(i, ",")?;
                i += 1;
            }
        }
        Ok(Parsed {
            conf: c,
            not_simulated,
        })
    }

    /// The settings a snapshot records (`allocator_settings`, PyTorch 2.3+): the parsed values
    /// where the snapshot has them, the raw string for the rest (some settings appear only there).
    pub fn from_snapshot(settings: &serde_json::Value) -> Result<(AllocConf, String), ConfError> {
        let raw = settings
            .get("PYTORCH_CUDA_ALLOC_CONF")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        // Recorded by some PyTorch release: a key this model does not know is noted, not refused.
        let mut c = AllocConf::parse_inner(&raw, false)?.conf;
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
        // Keys PyTorch accepts that do not change device memory: accepted, said to be not
        // simulated.
        let p = AllocConf::parse_noting("pinned_num_register_threads:8,backend:native").unwrap();
        assert_eq!(p.conf, AllocConf::default());
        assert_eq!(p.not_simulated.len(), 1, "{:?}", p.not_simulated);
        assert!(p.not_simulated[0].starts_with("pinned_num_register_threads:8"));
        let p = AllocConf::parse_noting("backend:cudaMallocAsync").unwrap();
        assert!(p.not_simulated[0].contains("not PyTorch's caching allocator"));
    }

    #[test]
    fn what_pytorch_refuses_is_refused_in_its_words() {
        let e = AllocConf::parse("expandable_segment:True").unwrap_err();
        assert!(
            e.0.starts_with(
                "Unrecognized key 'expandable_segment' in Accelerator allocator config."
            ) && e.0.contains("Did you mean 'expandable_segments'?"),
            "{e}"
        );
        assert!(
            AllocConf::parse("foo")
                .unwrap_err()
                .0
                .contains("Unrecognized key 'foo'")
        );
        // toBool takes exactly True or False.
        for v in ["true", "1", "yes"] {
            let e = AllocConf::parse(&format!("expandable_segments:{v}")).unwrap_err();
            assert!(e.0.contains("Expected 'True' or 'False'"), "{e}");
        }
        let e = AllocConf::parse("release_lock_on_cudamalloc:on").unwrap_err();
        assert!(e.0.contains("Expected 'True' or 'False'"), "{e}");
        let e = AllocConf::parse("backend:jemalloc").unwrap_err();
        assert!(e.0.contains("Unknown allocator backend"), "{e}");
        let e = AllocConf::parse("garbage_collection_threshold:1.5").unwrap_err();
        assert!(e.0.contains("set it in (0.0, 1.0)"), "{e}");
        let e = AllocConf::parse("roundup_power2_divisions:[100:4]").unwrap_err();
        assert!(e.0.contains("intervals have to be power of 2"), "{e}");
        // What a snapshot recorded is read leniently: a later release's key is noted.
        let rec = serde_json::json!({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,future_knob:3"});
        let (c, _) = AllocConf::from_snapshot(&rec).unwrap();
        assert!(c.expandable_segments);
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
        assert!(e.0.contains("too small, must be >= 20"), "{e}");
        let e = AllocConf::parse("expandable_segments:maybe").unwrap_err();
        assert!(e.0.contains("'True' or 'False'"), "{e}");
    }
}
