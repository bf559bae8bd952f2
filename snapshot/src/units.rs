//! Byte counts written for people, in the engine's own messages (OOM explanations, warnings).

/// `1.5 GiB`, `24.0 MiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// `1,234,567`: a count as the reports print it.
pub fn thousands(n: u64) -> String {
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

/// A size as PyTorch's own messages print it (`format_size` in `CUDACachingAllocator.cpp`):
/// `Tried to allocate 20.00 MiB`. Two decimals, and a unit only once the size passes it.
pub fn pytorch_size(b: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    if b <= KIB {
        format!("{b} bytes")
    } else if b <= MIB {
        format!("{:.2} KiB", b as f64 / KIB as f64)
    } else if b <= GIB {
        format!("{:.2} MiB", b as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_pytorch_prints_them() {
        assert_eq!(pytorch_size(512), "512 bytes");
        assert_eq!(pytorch_size(1024), "1024 bytes");
        assert_eq!(pytorch_size(2 << 20), "2.00 MiB");
        assert_eq!(pytorch_size(1 << 20), "1024.00 KiB");
        assert_eq!(pytorch_size(3 << 29), "1.50 GiB");
    }
}
