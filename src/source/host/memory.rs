//! Memory and swap from `/proc/meminfo` and `/proc/vmstat`.

use std::collections::HashMap;
use std::time::Duration;

use super::super::{counter_delta, elapsed_since, HostRoots, Previous, Source, SourceError};
use crate::snapshot::{MemoryCounters, MemoryRates, MemorySnapshot, Snapshot};

/// Page size of the swap counters in /proc/vmstat. The kernel counts `pswpin`/`pswpout` in
/// pages; 4 KiB on every architecture this exporter ships for (x86_64, aarch64 with 4K pages).
pub const PAGE_BYTES: u64 = 4096;

/// Parses `/proc/meminfo` lines `Key:   value kB` into bytes by key.
pub fn parse_meminfo(text: &str) -> Result<HashMap<&str, u64>, String> {
    let mut values = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (key, rest) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed line {line:?}"))?;
        let mut parts = rest.split_ascii_whitespace();
        let number: u64 = parts
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("not a number in line {line:?}"))?;
        let bytes = match parts.next() {
            Some("kB") => number.saturating_mul(1024),
            None => number,
            Some(unit) => return Err(format!("unknown unit {unit:?} in line {line:?}")),
        };
        values.insert(key, bytes);
    }
    Ok(values)
}

/// Parses `/proc/vmstat` lines `key value`.
pub fn parse_vmstat(text: &str) -> Result<HashMap<&str, u64>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (key, value) = line
                .split_once(' ')
                .ok_or_else(|| format!("malformed line {line:?}"))?;
            let value = value
                .trim()
                .parse()
                .map_err(|_| format!("not a number in line {line:?}"))?;
            Ok((key, value))
        })
        .collect()
}

/// Builds the memory counters from both files; every key used is required.
pub fn memory_counters(meminfo: &str, vmstat: &str) -> Result<MemoryCounters, String> {
    let meminfo = parse_meminfo(meminfo).map_err(|e| format!("meminfo: {e}"))?;
    let vmstat = parse_vmstat(vmstat).map_err(|e| format!("vmstat: {e}"))?;
    let mem = |key: &str| {
        meminfo
            .get(key)
            .copied()
            .ok_or(format!("meminfo: no {key}"))
    };
    let pages = |key: &str| {
        vmstat
            .get(key)
            .map(|p| p.saturating_mul(PAGE_BYTES))
            .ok_or(format!("vmstat: no {key}"))
    };
    Ok(MemoryCounters {
        total_bytes: mem("MemTotal")?,
        available_bytes: mem("MemAvailable")?,
        swap_total_bytes: mem("SwapTotal")?,
        swap_free_bytes: mem("SwapFree")?,
        swapped_in_bytes: pages("pswpin")?,
        swapped_out_bytes: pages("pswpout")?,
    })
}

/// Swap traffic between two reads `seconds` apart; `None` if a counter went backwards.
pub fn memory_rates(
    previous: &MemoryCounters,
    current: &MemoryCounters,
    seconds: f64,
) -> Option<MemoryRates> {
    let rate = |p: u64, c: u64| counter_delta(p as f64, c as f64).map(|d| d / seconds);
    Some(MemoryRates {
        swap_in_bytes_per_second: rate(previous.swapped_in_bytes, current.swapped_in_bytes)?,
        swap_out_bytes_per_second: rate(previous.swapped_out_bytes, current.swapped_out_bytes)?,
    })
}

/// The memory source.
pub struct MemorySource {
    roots: HostRoots,
    previous: Option<Previous<MemoryCounters>>,
}

impl MemorySource {
    /// A source reading `<procfs>/meminfo` and `<procfs>/vmstat`.
    pub fn new(roots: HostRoots) -> Self {
        MemorySource {
            roots,
            previous: None,
        }
    }
}

impl Source for MemorySource {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let meminfo = self.roots.read_proc("meminfo")?;
        let vmstat = self.roots.read_proc("vmstat")?;
        let counters = memory_counters(&meminfo, &vmstat).map_err(SourceError::Failed)?;
        let rates = elapsed_since(self.previous.as_ref(), now)
            .and_then(|(seconds, before)| memory_rates(before, &counters, seconds));
        self.previous = Some(Previous {
            at: now,
            value: counters,
        });
        snapshot.memory = Some(MemorySnapshot { counters, rates });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\nSwapTotal:       1024 kB\nSwapFree:        512 kB\nHugePages_Total:       0\n";
    const VMSTAT: &str = "nr_free_pages 100\npswpin 10\npswpout 20\n";

    #[test]
    fn reads_bytes_from_kb_and_pages() {
        let m = memory_counters(MEMINFO, VMSTAT).unwrap();
        assert_eq!(m.total_bytes, 24576000 * 1024);
        assert_eq!(m.available_bytes, 20000000 * 1024);
        assert_eq!(m.swap_free_bytes, 512 * 1024);
        assert_eq!(m.swapped_in_bytes, 10 * 4096);
        assert_eq!(m.swapped_out_bytes, 20 * 4096);
    }

    #[test]
    fn malformed_or_missing_keys_are_errors() {
        assert!(memory_counters("MemTotal: x kB\n", VMSTAT).is_err());
        assert!(memory_counters("MemTotal 5 kB\n", VMSTAT).is_err());
        assert!(memory_counters("MemTotal: 5 MB\n", VMSTAT).is_err());
        assert!(memory_counters("MemTotal: 5 kB\n", VMSTAT)
            .unwrap_err()
            .contains("MemAvailable"));
        assert!(memory_counters(MEMINFO, "pswpin 1\n")
            .unwrap_err()
            .contains("pswpout"));
        assert!(memory_counters(MEMINFO, "pswpin x\npswpout 1\n").is_err());
    }

    #[test]
    fn swap_rates_and_reset() {
        let a = memory_counters(MEMINFO, VMSTAT).unwrap();
        let b = memory_counters(MEMINFO, "pswpin 20\npswpout 20\n").unwrap();
        let rates = memory_rates(&a, &b, 2.0).unwrap();
        assert_eq!(rates.swap_in_bytes_per_second, 5.0 * 4096.0);
        assert_eq!(rates.swap_out_bytes_per_second, 0.0);
        assert_eq!(memory_rates(&b, &a, 1.0), None);
    }
}
