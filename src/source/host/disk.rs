//! Block device counters from `/proc/diskstats` and the rates `iostat -x` derives from them.

use std::collections::HashMap;
use std::time::Duration;

use procfs_core::DiskStat;

use super::super::{elapsed_since, procfs_message, HostRoots, Previous, Source, SourceError};
use crate::config::DiskConfig;
use crate::snapshot::{DiskCounters, DiskRates, DiskSnapshot, Snapshot};

/// /proc/diskstats counts sectors of 512 bytes whatever the device's real sector size.
const SECTOR_BYTES: u64 = 512;

/// Parses `/proc/diskstats` a line at a time with procfs-core, so an error names its line.
/// Every line needs the device id, name and the 11 classic counters (kernels since 4.18 add
/// discard and flush columns, which are not read).
pub fn parse_diskstats(text: &str) -> Result<Vec<DiskCounters>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let disk = DiskStat::from_line(line)
                .map_err(|e| format!("{} in line {line:?}", procfs_message(e)))?;
            Ok(DiskCounters {
                reads_completed: disk.reads,
                reads_merged: disk.merged,
                read_bytes: disk.sectors_read.saturating_mul(SECTOR_BYTES),
                read_time_ms: disk.time_reading,
                writes_completed: disk.writes,
                writes_merged: disk.writes_merged,
                written_bytes: disk.sectors_written.saturating_mul(SECTOR_BYTES),
                write_time_ms: disk.time_writing,
                in_flight: disk.in_progress,
                io_time_ms: disk.time_in_progress,
                weighted_io_time_ms: disk.weighted_time_in_progress,
                name: disk.name,
            })
        })
        .collect()
}

/// iostat -x figures between two reads `seconds` apart. `None` when any counter went
/// backwards: the device was re-attached or the counter wrapped, and a rate would be a lie.
pub fn disk_rates(
    previous: &DiskCounters,
    current: &DiskCounters,
    seconds: f64,
) -> Option<DiskRates> {
    // Integer deltas keep iostat's arithmetic exact; times become seconds only at the end.
    let d = |p: u64, c: u64| c.checked_sub(p).map(|d| d as f64);
    let reads = d(previous.reads_completed, current.reads_completed)?;
    let writes = d(previous.writes_completed, current.writes_completed)?;
    let read_bytes = d(previous.read_bytes, current.read_bytes)?;
    let written_bytes = d(previous.written_bytes, current.written_bytes)?;
    let read_time = d(previous.read_time_ms, current.read_time_ms)? / 1000.0;
    let write_time = d(previous.write_time_ms, current.write_time_ms)? / 1000.0;
    let io_time = d(previous.io_time_ms, current.io_time_ms)? / 1000.0;
    let weighted = d(previous.weighted_io_time_ms, current.weighted_io_time_ms)? / 1000.0;
    let mean = |total: f64, count: f64| if count > 0.0 { total / count } else { 0.0 };
    Some(DiskRates {
        // io_time can exceed the interval by a tick when the two reads straddle a jiffy.
        utilization_ratio: (io_time / seconds).min(1.0),
        read_await_seconds: mean(read_time, reads),
        write_await_seconds: mean(write_time, writes),
        queue_size: weighted / seconds,
        reads_per_second: reads / seconds,
        writes_per_second: writes / seconds,
        read_bytes_per_second: read_bytes / seconds,
        write_bytes_per_second: written_bytes / seconds,
    })
}

/// Whether a device is reported: include/exclude regexes by name, partitions only if asked.
pub fn is_selected(name: &str, is_partition: bool, config: &DiskConfig) -> bool {
    let included = config.include.is_empty() || config.include.0.is_match(name);
    let excluded = !config.exclude.is_empty() && config.exclude.0.is_match(name);
    (config.include_partitions || !is_partition) && included && !excluded
}

/// The disk source.
pub struct DiskSource {
    roots: HostRoots,
    config: DiskConfig,
    previous: HashMap<String, Previous<DiskCounters>>,
}

impl DiskSource {
    /// A source reading `<procfs>/diskstats`, and `<sysfs>/class/block` to tell partitions.
    pub fn new(roots: HostRoots, config: DiskConfig) -> Self {
        DiskSource {
            roots,
            config,
            previous: HashMap::new(),
        }
    }

    fn is_partition(&self, name: &str) -> bool {
        // sysfs marks partitions with a `partition` attribute; without sysfs, assume a disk.
        self.roots
            .sysfs
            .join("class/block")
            .join(name)
            .join("partition")
            .exists()
    }
}

impl Source for DiskSource {
    fn name(&self) -> &'static str {
        "disk"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let text = self.roots.read_proc("diskstats")?;
        let all =
            parse_diskstats(&text).map_err(|e| SourceError::Failed(format!("diskstats: {e}")))?;
        let mut previous = std::mem::take(&mut self.previous);
        let mut disks = Vec::new();
        for counters in all {
            if !is_selected(
                &counters.name,
                self.is_partition(&counters.name),
                &self.config,
            ) {
                continue;
            }
            let rates = elapsed_since(previous.remove(&counters.name).as_ref(), now)
                .and_then(|(seconds, before)| disk_rates(before, &counters, seconds));
            // Devices that vanished are simply not carried over: their series disappear.
            self.previous.insert(
                counters.name.clone(),
                Previous {
                    at: now,
                    value: counters.clone(),
                },
            );
            disks.push(DiskSnapshot { counters, rates });
        }
        disks.sort_by(|a, b| a.counters.name.cmp(&b.counters.name));
        snapshot.disks = disks;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pattern;

    const DISKSTATS: &str = " 254       0 vda 28678 5266 2292266 6160 7187 11012 1707896 2787 0 6448 9162 3643 71 197296 186 1015 27
 254       1 vda1 100 0 800 10 0 0 0 0 0 10 10
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn parses_every_kernel_layout() {
        let disks = parse_diskstats(DISKSTATS).unwrap();
        assert_eq!(disks.len(), 3);
        let vda = &disks[0];
        assert_eq!(vda.name, "vda");
        assert_eq!(vda.reads_completed, 28678);
        assert_eq!(vda.read_bytes, 2292266 * 512);
        assert_eq!(vda.read_time_ms, 6160);
        assert_eq!(vda.writes_completed, 7187);
        assert_eq!(vda.written_bytes, 1707896 * 512);
        assert_eq!(vda.in_flight, 0);
        assert_eq!(vda.io_time_ms, 6448);
        assert_eq!(vda.weighted_io_time_ms, 9162);
        assert_eq!(disks[1].name, "vda1");
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "8 0 sda 1 2 3",
            "8 0 sda 1 2 3 4 5 6 7 8 9 10 x",
            "8 0 sda 1 2 3 4 5 6 7 8 9 10 -11",
        ] {
            let error = parse_diskstats(bad).unwrap_err();
            assert!(error.contains("sda"), "{error}");
        }
        assert_eq!(parse_diskstats("\n").unwrap(), vec![]);
    }

    fn counters(
        reads: u64,
        read_ms: u64,
        writes: u64,
        write_ms: u64,
        io_ms: u64,
        weighted_ms: u64,
    ) -> DiskCounters {
        DiskCounters {
            name: "sda".into(),
            reads_completed: reads,
            read_bytes: reads * 4096,
            read_time_ms: read_ms,
            writes_completed: writes,
            written_bytes: writes * 8192,
            write_time_ms: write_ms,
            io_time_ms: io_ms,
            weighted_io_time_ms: weighted_ms,
            ..DiskCounters::default()
        }
    }

    #[test]
    fn rates_follow_iostat_formulas() {
        let before = counters(100, 50, 10, 20, 100, 200);
        let after = counters(300, 450, 60, 520, 1100, 2200);
        let rates = disk_rates(&before, &after, 2.0).unwrap();
        assert_eq!(rates.reads_per_second, 100.0);
        assert_eq!(rates.writes_per_second, 25.0);
        assert_eq!(rates.read_await_seconds, 0.002); // 400 ms over 200 reads
        assert_eq!(rates.write_await_seconds, 0.01); // 500 ms over 50 writes
        assert_eq!(rates.utilization_ratio, 0.5); // 1000 ms busy in 2 s
        assert_eq!(rates.queue_size, 1.0); // 2000 ms weighted in 2 s
        assert_eq!(rates.read_bytes_per_second, 100.0 * 4096.0);
        assert_eq!(rates.write_bytes_per_second, 25.0 * 8192.0);
    }

    #[test]
    fn idle_device_has_zero_await_and_full_util_is_capped() {
        let before = counters(5, 5, 5, 5, 0, 0);
        let idle = disk_rates(&before, &before, 1.0).unwrap();
        assert_eq!(idle.read_await_seconds, 0.0);
        assert_eq!(idle.utilization_ratio, 0.0);
        let straddling = counters(5, 5, 5, 5, 1004, 0);
        assert_eq!(
            disk_rates(&before, &straddling, 1.0)
                .unwrap()
                .utilization_ratio,
            1.0
        );
    }

    #[test]
    fn counter_reset_gives_no_rates() {
        let before = counters(100, 50, 10, 20, 100, 200);
        let reattached = counters(3, 1, 0, 0, 2, 2);
        assert_eq!(disk_rates(&before, &reattached, 1.0), None);
    }

    #[test]
    fn selection_by_regex_and_partition() {
        let mut config = DiskConfig::default();
        assert!(is_selected("nvme0n1", false, &config));
        assert!(!is_selected("nvme0n1p1", true, &config));
        assert!(!is_selected("loop3", false, &config));
        assert!(!is_selected("zram0", false, &config));
        assert!(is_selected("dm-0", false, &config));
        config.include_partitions = true;
        assert!(is_selected("nvme0n1p1", true, &config));
        config.include = Pattern::parse("^nvme").unwrap();
        assert!(!is_selected("sda", false, &config));
        config.exclude = Pattern::parse("").unwrap();
        config.include = Pattern::parse("").unwrap();
        assert!(is_selected("loop0", false, &config));
    }
}
