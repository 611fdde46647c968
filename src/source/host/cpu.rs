//! Node-wide CPU time, task counts and context switches from `/proc/stat`.

use std::time::Duration;

use super::super::{HostRoots, Previous, Source, SourceError};
use crate::snapshot::{CpuRates, CpuSnapshot, CpuStat, CpuTimes, Snapshot};

/// Clock ticks per second of /proc/stat's CPU columns (`USER_HZ`). The kernel fixes it at 100
/// on every architecture it exports to user space, whatever `CONFIG_HZ` is.
pub const USER_HZ: f64 = 100.0;

/// Parses `/proc/stat`. The aggregate `cpu` line and the task/context-switch lines are
/// required; columns missing on old kernels (steal, guest, guest_nice) read as 0.
pub fn parse_stat(text: &str) -> Result<CpuStat, String> {
    let mut times = None;
    let mut per_cpu = Vec::new();
    let (mut running, mut blocked, mut ctxt) = (None, None, None);
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(key) = fields.next() else { continue };
        match key {
            "cpu" => times = Some(parse_cpu_times(fields).map_err(|e| format!("cpu line: {e}"))?),
            "procs_running" => running = Some(parse_single(key, fields)?),
            "procs_blocked" => blocked = Some(parse_single(key, fields)?),
            "ctxt" => ctxt = Some(parse_single(key, fields)?),
            _ if key.starts_with("cpu") => {
                if let Ok(id) = key[3..].parse::<u32>() {
                    let line_times =
                        parse_cpu_times(fields).map_err(|e| format!("{key} line: {e}"))?;
                    per_cpu.push((id, line_times));
                }
            }
            _ => {}
        }
    }
    Ok(CpuStat {
        times: times.ok_or("no aggregate cpu line")?,
        cpu_count: per_cpu.len() as u32,
        per_cpu,
        procs_running: running.ok_or("no procs_running line")?,
        procs_blocked: blocked.ok_or("no procs_blocked line")?,
        context_switches: ctxt.ok_or("no ctxt line")?,
    })
}

fn parse_cpu_times<'a>(fields: impl Iterator<Item = &'a str>) -> Result<CpuTimes, String> {
    let ticks: Vec<u64> = fields
        .map(|f| f.parse().map_err(|_| format!("not a number: {f:?}")))
        .collect::<Result<_, _>>()?;
    if ticks.len() < 4 {
        return Err(format!(
            "expected at least 4 columns, found {}",
            ticks.len()
        ));
    }
    let column = |i: usize| ticks.get(i).map_or(0.0, |&t| t as f64 / USER_HZ);
    Ok(CpuTimes {
        user: column(0),
        nice: column(1),
        system: column(2),
        idle: column(3),
        iowait: column(4),
        irq: column(5),
        softirq: column(6),
        steal: column(7),
        guest: column(8),
        guest_nice: column(9),
    })
}

fn parse_single<'a>(key: &str, mut fields: impl Iterator<Item = &'a str>) -> Result<u64, String> {
    let value = fields.next().ok_or_else(|| format!("{key}: no value"))?;
    value
        .parse()
        .map_err(|_| format!("{key}: not a number: {value:?}"))
}

/// Shares of CPU time between two reads. A mode whose counter went backwards (iowait does on
/// some kernels) counts as 0 for the interval instead of producing a negative share.
/// `None` when no time passed.
pub fn cpu_rates(previous: &CpuTimes, current: &CpuTimes) -> Option<CpuRates> {
    let delta = |p: f64, c: f64| (c - p).max(0.0);
    let idle = delta(previous.idle, current.idle);
    let iowait = delta(previous.iowait, current.iowait);
    let steal = delta(previous.steal, current.steal);
    // guest and guest_nice are already inside user and nice: leave them out of the total.
    let busy = delta(previous.user, current.user)
        + delta(previous.nice, current.nice)
        + delta(previous.system, current.system)
        + delta(previous.irq, current.irq)
        + delta(previous.softirq, current.softirq)
        + steal;
    let total = busy + idle + iowait;
    (total > 0.0).then(|| CpuRates {
        iowait_ratio: iowait / total,
        steal_ratio: steal / total,
        busy_ratio: busy / total,
    })
}

/// Busy share of each CPU between two reads, for the CPUs present in both.
pub fn busy_by_cpu(previous: &[(u32, CpuTimes)], current: &[(u32, CpuTimes)]) -> Vec<(u32, f64)> {
    current
        .iter()
        .filter_map(|(id, now)| {
            let (_, before) = previous.iter().find(|(p, _)| p == id)?;
            Some((*id, cpu_rates(before, now)?.busy_ratio))
        })
        .collect()
}

/// The cpu source.
pub struct CpuSource {
    roots: HostRoots,
    previous: Option<Previous<CpuStat>>,
}

impl CpuSource {
    /// A source reading `<procfs>/stat`.
    pub fn new(roots: HostRoots) -> Self {
        CpuSource {
            roots,
            previous: None,
        }
    }
}

impl Source for CpuSource {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let text = self.roots.read_proc("stat")?;
        let stat = parse_stat(&text).map_err(|e| SourceError::Failed(format!("stat: {e}")))?;
        let previous = self.previous.as_ref().map(|p| &p.value);
        let rates = previous.and_then(|p| cpu_rates(&p.times, &stat.times));
        let busy_by_cpu =
            previous.map_or_else(Vec::new, |p| busy_by_cpu(&p.per_cpu, &stat.per_cpu));
        self.previous = Some(Previous {
            at: now,
            value: stat.clone(),
        });
        snapshot.cpu = Some(CpuSnapshot {
            stat,
            rates,
            busy_by_cpu,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  2358 10 1489 24517 151 0 31 5 0 0
cpu0 994 0 701 12540 40 0 3 2 0 0
cpu1 1364 10 788 11977 111 0 28 3 0 0
intr 123 0 0
ctxt 987654
btime 1700000000
processes 4242
procs_running 3
procs_blocked 1
softirq 1 2 3
";

    #[test]
    fn parses_modes_counts_and_tasks() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(stat.times.user, 23.58);
        assert_eq!(stat.times.nice, 0.10);
        assert_eq!(stat.times.idle, 245.17);
        assert_eq!(stat.times.steal, 0.05);
        assert_eq!(stat.cpu_count, 2);
        assert_eq!(stat.procs_running, 3);
        assert_eq!(stat.procs_blocked, 1);
        assert_eq!(stat.context_switches, 987654);
    }

    #[test]
    fn old_kernel_without_steal_and_guest_columns() {
        let stat = parse_stat("cpu 1 2 3 4 5\nctxt 1\nprocs_running 1\nprocs_blocked 0\n").unwrap();
        assert_eq!(stat.times.iowait, 0.05);
        assert_eq!(stat.times.steal, 0.0);
        assert_eq!(stat.cpu_count, 0);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            "",
            "cpu 1 2\nctxt 1\nprocs_running 1\nprocs_blocked 0\n",
            "cpu 1 2 x 4\nctxt 1\nprocs_running 1\nprocs_blocked 0\n",
            "cpu 1 2 3 4\nctxt\nprocs_running 1\nprocs_blocked 0\n",
            "cpu 1 2 3 4\nctxt 1\nprocs_running -1\nprocs_blocked 0\n",
            "cpu 1 2 3 4\nprocs_running 1\nprocs_blocked 0\n",
            "cpu 1 2 3 99999999999999999999999\n",
        ] {
            assert!(parse_stat(bad).is_err(), "{bad:?}");
        }
    }

    fn times(user: f64, idle: f64, iowait: f64, steal: f64) -> CpuTimes {
        CpuTimes {
            user,
            idle,
            iowait,
            steal,
            ..CpuTimes::default()
        }
    }

    #[test]
    fn rates_are_shares_of_the_interval() {
        let rates = cpu_rates(&times(0.0, 0.0, 0.0, 0.0), &times(1.0, 2.0, 0.5, 0.5)).unwrap();
        assert_eq!(rates.iowait_ratio, 0.125);
        assert_eq!(rates.steal_ratio, 0.125);
        assert_eq!(rates.busy_ratio, 0.375);
    }

    #[test]
    fn iowait_going_backwards_gives_zero_not_negative() {
        let rates = cpu_rates(&times(0.0, 0.0, 5.0, 0.0), &times(1.0, 1.0, 4.0, 0.0)).unwrap();
        assert_eq!(rates.iowait_ratio, 0.0);
        assert_eq!(rates.busy_ratio, 0.5);
    }

    #[test]
    fn each_cpu_has_its_busy_share() {
        let before = parse_stat(STAT).unwrap();
        let after =
            parse_stat(&STAT.replace("cpu0 994 0 701 12540", "cpu0 1044 0 701 12590")).unwrap();
        assert_eq!(before.per_cpu.len(), 2);
        assert_eq!(before.per_cpu[1].0, 1);
        // cpu0: 0.5 s user and 0.5 s idle; cpu1 did not move (no time passed: left out).
        assert_eq!(busy_by_cpu(&before.per_cpu, &after.per_cpu), vec![(0, 0.5)]);
    }

    #[test]
    fn no_time_passed_gives_no_rates() {
        let same = times(1.0, 1.0, 1.0, 0.0);
        assert_eq!(cpu_rates(&same, &same), None);
    }
}
