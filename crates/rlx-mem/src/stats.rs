//! Allocator statistics: bytes in use and reserved, their peaks, provider calls, fragmentation.

use std::fmt;

use serde::Serialize;

/// A snapshot of an allocator's counters. `fragmentation` is peak reserved / peak in use, the
/// figure allocation traces are judged by (1.0 is perfect).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Bytes callers asked for and have not freed.
    pub bytes_in_use: usize,
    /// Highest `bytes_in_use` seen.
    pub peak_bytes_in_use: usize,
    /// Bytes held from the provider: in use, cached, pending and lost to rounding.
    pub bytes_reserved: usize,
    /// Highest `bytes_reserved` seen.
    pub peak_bytes_reserved: usize,
    /// Blocks obtained from the provider.
    pub provider_allocs: u64,
    /// Blocks extended in place by the provider.
    pub provider_grows: u64,
    /// Blocks returned to the provider.
    pub provider_frees: u64,
    /// Allocations served.
    pub allocs: u64,
    /// Allocations freed.
    pub frees: u64,
    /// Bytes of dedicated blocks (in use or cached).
    pub dedicated_bytes: usize,
    /// Bytes freed on a stream whose completion has not been observed yet.
    pub pending_bytes: usize,
    /// Largest range a single allocation could get without asking the provider.
    pub largest_free_range: usize,
    /// Peak reserved / peak in use; 1.0 before anything was allocated.
    pub fragmentation: f64,
    /// Expandable mode: physical granules created by the provider (each adds to `bytes_reserved`).
    pub physical_creates: u64,
    /// Expandable mode: physical granules released to the provider.
    pub physical_releases: u64,
    /// Expandable mode: map calls (each maps a run of consecutive granules).
    pub map_calls: u64,
    /// Expandable mode: unmap calls.
    pub unmap_calls: u64,
    /// Expandable mode: granules mapped by those calls.
    pub granules_mapped: u64,
    /// Expandable mode: granules unmapped by those calls.
    pub granules_unmapped: u64,
    /// Expandable mode: bytes mapped now (in use or cached; `bytes_reserved` adds pooled
    /// physical granules, unmapped but held).
    pub bytes_mapped: usize,
    /// Highest `bytes_mapped` seen.
    pub peak_bytes_mapped: usize,
}

impl Stats {
    pub(crate) fn on_alloc(&mut self, bytes: usize) {
        self.allocs += 1;
        self.bytes_in_use += bytes;
        self.peak_bytes_in_use = self.peak_bytes_in_use.max(self.bytes_in_use);
    }

    pub(crate) fn on_free(&mut self, bytes: usize) {
        self.frees += 1;
        self.bytes_in_use -= bytes;
    }

    pub(crate) fn on_reserve(&mut self, bytes: usize) {
        self.bytes_reserved += bytes;
        self.peak_bytes_reserved = self.peak_bytes_reserved.max(self.bytes_reserved);
    }

    pub(crate) fn on_release(&mut self, bytes: usize) {
        self.provider_frees += 1;
        self.bytes_reserved -= bytes;
    }

    /// Bytes given back without a block going back (a physical granule released).
    pub(crate) fn on_unreserve(&mut self, bytes: usize) {
        self.bytes_reserved -= bytes;
    }

    /// Peak reserved over peak in use, or 1.0 when nothing was ever in use.
    pub fn fragmentation_of(peak_reserved: usize, peak_in_use: usize) -> f64 {
        if peak_in_use == 0 {
            1.0
        } else {
            peak_reserved as f64 / peak_in_use as f64
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "in use     {} (peak {})",
            human_bytes(self.bytes_in_use),
            human_bytes(self.peak_bytes_in_use)
        )?;
        writeln!(
            f,
            "reserved   {} (peak {})",
            human_bytes(self.bytes_reserved),
            human_bytes(self.peak_bytes_reserved)
        )?;
        writeln!(
            f,
            "provider   {} allocs, {} grows, {} frees",
            self.provider_allocs, self.provider_grows, self.provider_frees
        )?;
        write!(
            f,
            "fragmentation {:.3}, largest free range {}",
            self.fragmentation,
            human_bytes(self.largest_free_range)
        )?;
        if self.physical_creates > 0 || self.map_calls > 0 {
            write!(
                f,
                "\nvirtual    {} granules created, {} released; {} map calls ({} granules), \
                 {} unmap calls; mapped {} (peak {})",
                self.physical_creates,
                self.physical_releases,
                self.map_calls,
                self.granules_mapped,
                self.unmap_calls,
                human_bytes(self.bytes_mapped),
                human_bytes(self.peak_bytes_mapped)
            )?;
        }
        Ok(())
    }
}

/// Formats a byte count with a binary unit, e.g. `2.50 GiB`.
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_follow_random_traffic() {
        let mut stats = Stats::default();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut live = Vec::new();
        let (mut in_use, mut peak) = (0usize, 0usize);
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if live.is_empty() || x % 3 != 0 {
                let bytes = (x >> 40) as usize + 1;
                stats.on_alloc(bytes);
                live.push(bytes);
                in_use += bytes;
                peak = peak.max(in_use);
            } else {
                let bytes = live.swap_remove((x as usize >> 3) % live.len());
                stats.on_free(bytes);
                in_use -= bytes;
            }
        }
        assert_eq!(stats.bytes_in_use, in_use);
        assert_eq!(stats.peak_bytes_in_use, peak);
        stats.on_reserve(peak + 4096);
        stats.on_release(4096);
        assert_eq!(stats.peak_bytes_reserved, peak + 4096);
        let frag = Stats::fragmentation_of(stats.peak_bytes_reserved, peak);
        assert!(frag > 1.0 && frag < 1.1);
        assert_eq!(Stats::fragmentation_of(10, 0), 1.0);
        let json = serde_json::to_string(&stats).unwrap();
        assert!(json.contains("\"peak_bytes_in_use\""));
        assert!(stats.to_string().contains("provider"));
    }

    #[test]
    fn human_bytes_picks_a_unit() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }
}
