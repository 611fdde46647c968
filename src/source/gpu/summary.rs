//! Pure helpers of the GPU source: busy-fraction summaries, process ranking, CPU sets.

use crate::snapshot::{BusySummary, GpuProcess};

/// A utilization sample at or below this percentage counts as "idle" in the summary: NVML
/// reports a few percent of housekeeping on an otherwise idle GPU.
pub const IDLE_SAMPLE_PERCENT: u32 = 5;

/// Summarises the utilization samples (percent) NVML buffered over one interval, so a GPU
/// alternating 100 %/0 % is told apart from one at a steady 50 %. `None` without samples.
pub fn busy_summary(percentages: &[u32]) -> Option<BusySummary> {
    if percentages.is_empty() {
        return None;
    }
    let ratio = |p: u32| f64::from(p.min(100)) / 100.0;
    let sum: f64 = percentages.iter().map(|&p| ratio(p)).sum();
    let idle = percentages
        .iter()
        .filter(|&&p| p <= IDLE_SAMPLE_PERCENT)
        .count();
    Some(BusySummary {
        mean_ratio: sum / percentages.len() as f64,
        max_ratio: ratio(*percentages.iter().max()?),
        idle_share_ratio: idle as f64 / percentages.len() as f64,
        samples: percentages.len() as u32,
    })
}

/// Keeps the `limit` processes that matter most: most GPU memory, then busiest SMs, then
/// lowest PID so the choice is stable from tick to tick.
pub fn top_processes(mut processes: Vec<GpuProcess>, limit: usize) -> Vec<GpuProcess> {
    processes.sort_by(|a, b| {
        b.used_memory_bytes
            .cmp(&a.used_memory_bytes)
            .then(
                b.sm_ratio
                    .unwrap_or(0.0)
                    .total_cmp(&a.sm_ratio.unwrap_or(0.0)),
            )
            .then(a.pid.cmp(&b.pid))
    });
    processes.truncate(limit);
    processes
}

/// Turns NVML's CPU affinity bitmask (64 CPUs per word) into a cpuset list like `0-15,32-47`.
pub fn cpu_list(words: &[u64]) -> String {
    let cpus: Vec<usize> = words
        .iter()
        .enumerate()
        .flat_map(|(w, word)| {
            (0..64)
                .filter(move |b| word >> b & 1 == 1)
                .map(move |b| w * 64 + b)
        })
        .collect();
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        ranges.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    ranges.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursty_and_steady_gpus_differ_in_spread_and_idle_share() {
        let bursty = busy_summary(&[100, 0, 100, 0, 100, 0]).unwrap();
        let steady = busy_summary(&[50, 50, 50, 50, 50, 50]).unwrap();
        assert_eq!(bursty.mean_ratio, 0.5);
        assert_eq!(steady.mean_ratio, 0.5);
        assert_eq!((bursty.max_ratio, steady.max_ratio), (1.0, 0.5));
        assert_eq!(bursty.idle_share_ratio, 0.5);
        assert_eq!(steady.idle_share_ratio, 0.0);
        assert_eq!(bursty.samples, 6);
    }

    #[test]
    fn near_zero_counts_as_idle_and_out_of_range_is_clamped() {
        let s = busy_summary(&[5, 6, 250]).unwrap();
        assert!((s.idle_share_ratio - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.max_ratio, 1.0);
        assert_eq!(busy_summary(&[]), None);
    }

    fn process(pid: u32, memory: u64, sm: Option<f64>) -> GpuProcess {
        GpuProcess {
            pid,
            used_memory_bytes: memory,
            sm_ratio: sm,
            ..GpuProcess::default()
        }
    }

    #[test]
    fn top_processes_by_memory_then_sm_then_pid() {
        let ranked = top_processes(
            vec![
                process(5, 10, None),
                process(4, 30, Some(0.1)),
                process(3, 30, Some(0.9)),
                process(2, 20, None),
                process(1, 20, None),
            ],
            4,
        );
        let pids: Vec<u32> = ranked.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![3, 4, 1, 2]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list(&[0xffff]), "0-15");
        assert_eq!(cpu_list(&[0b1011, 1]), "0-1,3,64");
        assert_eq!(cpu_list(&[0, 0]), "");
    }
}
