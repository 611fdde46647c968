//! The loader workers of a GPU process, summed: their CPU and its kernel part, their waits
//! (for a CPU, for the disk), how they gave up their CPUs, what the sleeping ones wait on.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::{cpu_wait, forked_within, procfs, read, ProcessSource, ReadError, Ticks, STATUS_EVERY};
use crate::snapshot::{AsleepWorkers, WaitTarget, WorkerSummary};
use crate::source::host::cpu::USER_HZ;
use crate::source::Previous;

impl ProcessSource {
    /// What the `sleeping` workers wait on this tick; `None` when refused.
    pub(super) fn asleep(&mut self, sleeping: &[u32], now: Duration) -> Option<AsleepWorkers> {
        let mut asleep = AsleepWorkers::default();
        for &worker in sleeping {
            match self.waits.target(worker, now, &mut self.kept) {
                Ok(Some(target)) => {
                    asleep.sampled += 1;
                    match target {
                        WaitTarget::Remote => asleep.remote += 1,
                        WaitTarget::LocalFile => asleep.local_file += 1,
                        WaitTarget::Idle => {}
                    }
                }
                Ok(None) | Err(ReadError::Gone) => {}
                Err(ReadError::Denied) => {
                    self.waits_denied = true;
                    return None;
                }
                Err(ReadError::Other(e)) => {
                    tracing::debug!(error = %e, "a worker's wait could not be read");
                }
            }
        }
        Some(asleep)
    }

    /// The summary of `descendants`, and those of them asleep (S) on this tick.
    /// `interval`: the seconds since the GPU process was last read, which a worker forked
    /// since fills from its start.
    pub(super) fn workers(
        &mut self,
        descendants: &[u32],
        (now, interval): (Duration, Option<f64>),
        delay_accounting: bool,
        fresh: &mut HashMap<(u32, u64), Previous<Ticks>>,
        nodes: &mut BTreeSet<u32>,
    ) -> (WorkerSummary, Vec<u32>) {
        let mut summary = WorkerSummary::default();
        let mut sleeping = Vec::new();
        let (mut cpu, mut max_cpu, mut blkio, mut read_rate) = (0.0, None::<f64>, 0.0, None::<f64>);
        let mut system = 0.0;
        let (mut voluntary, mut involuntary) = (0u64, 0u64);
        // Voluntary switches a second of the workers whose status was read again this tick.
        let (mut voluntary_rate, mut rated) = (0.0, 0u32);
        let mut waiting = Some(0.0);
        let mut all_have_rates = true;
        for &worker in descendants {
            // A worker that exited since discovery is simply not counted.
            let Ok(stat) = self.kept_stat(&self.proc_path(worker, "stat")) else {
                continue;
            };
            summary.count += 1;
            match stat.state {
                'S' => sleeping.push(worker),
                'R' => summary.running += 1,
                'D' => summary.disk_wait += 1,
                'Z' => summary.zombie += 1,
                _ => {}
            }
            nodes.extend(self.numa_node_of(stat.processor));
            let key = (worker, stat.starttime);
            let mut ticks = self.read_ticks(worker, &stat);
            let before = self
                .since(key, now)
                .or_else(|| forked_within(&stat, interval?));
            // Why a worker gave up its CPU: waiting for I/O (voluntary) or preempted while
            // computing (involuntary); its waits for a CPU follow the same split. Read every
            // few seconds; a tick in between carries the last reading.
            let last = before.and_then(|(_, b)| b.switches);
            ticks.switches = match last {
                Some((.., at)) if now.saturating_sub(at) < STATUS_EVERY => last,
                _ => {
                    let read = read(&self.proc_path(worker, "status")).ok();
                    let switches = read.as_deref().and_then(procfs::parse_switches);
                    if let (Some((v, i)), Some((v0, i0, at))) = (switches, last) {
                        voluntary += v.saturating_sub(v0);
                        involuntary += i.saturating_sub(i0);
                        let seconds = now.saturating_sub(at).as_secs_f64();
                        if seconds > 0.0 {
                            voluntary_rate += v.saturating_sub(v0) as f64 / seconds;
                            rated += 1;
                        }
                    }
                    switches.map(|(v, i)| (v, i, now))
                }
            };
            match before {
                Some((seconds, before)) => {
                    let cores = ticks.cpu.saturating_sub(before.cpu) as f64 / USER_HZ / seconds;
                    cpu += cores;
                    system += ticks.system.saturating_sub(before.system) as f64 / USER_HZ / seconds;
                    max_cpu = Some(max_cpu.map_or(cores, |m| m.max(cores)));
                    blkio += ticks.blkio.saturating_sub(before.blkio) as f64 / USER_HZ / seconds;
                    waiting = waiting
                        .zip(cpu_wait(&ticks, &before, seconds))
                        .map(|(a, b)| a + b);
                    if let (Some(now_bytes), Some(then_bytes)) =
                        (ticks.read_bytes, before.read_bytes)
                    {
                        *read_rate.get_or_insert(0.0) +=
                            now_bytes.saturating_sub(then_bytes) as f64 / seconds;
                    }
                }
                None => all_have_rates = false,
            }
            fresh.insert(
                key,
                Previous {
                    at: now,
                    value: ticks,
                },
            );
        }
        // Rates only when every counted worker has a previous reading (or there are none):
        // a sum over part of the workers would understate the load.
        if all_have_rates {
            summary.cpu_cores = Some(cpu);
            summary.system_cpu_cores = Some(system.min(cpu));
            summary.voluntary_switch_share = (voluntary + involuntary > 0)
                .then(|| voluntary as f64 / (voluntary + involuntary) as f64);
            summary.voluntary_switches_per_second =
                (rated > 0).then(|| voluntary_rate / f64::from(rated));
            summary.max_cpu_ratio = Some(max_cpu.unwrap_or(0.0).min(1.0));
            summary.blkio_delay_ratio = delay_accounting.then_some(blkio);
            summary.cpu_wait_ratio = waiting;
            summary.read_bytes_per_second = if summary.count == 0 {
                Some(0.0)
            } else {
                read_rate
            };
        }
        (summary, sleeping)
    }
}
