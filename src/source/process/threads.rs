//! The threads of a GPU process: the busiest one's share of a core, the NUMA nodes they run
//! on, and the wait for a CPU of the busiest thread beside the main one.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::{cpu_wait, procfs, read_stat, Previous, ProcessSource, Ticks, USER_HZ};

/// What the last pass over a GPU process's threads found.
pub(super) struct ThreadPass {
    at: Duration,
    /// CPU ticks of each thread (tid, start time) at the pass.
    cpu: HashMap<(u32, u64), u64>,
    /// The busiest thread's share of a core between this pass and the one before.
    busiest: Option<f64>,
    /// That thread (tid, start time), where it is not the main thread.
    busiest_other: Option<(u32, u64)>,
    /// NUMA nodes the threads last ran on.
    nodes: BTreeSet<u32>,
}

impl ProcessSource {
    /// The busiest thread's share of a core and the NUMA nodes the threads last ran on.
    ///
    /// Ranks carry 100-200 threads, so every thread's stat file is read only every
    /// `thread_interval` (a pass; the second follows the first on the next tick, so the figure
    /// appears at once), while the main thread, the one a host-bound Python loop pins, is read
    /// every tick. The figure is the larger of the main thread's share over the last tick and
    /// the busiest thread's share between the last two passes.
    pub(super) fn threads(
        &mut self,
        pid: u32,
        key: (u32, u64),
        now: Duration,
        fresh: &mut HashMap<(u32, u64), Previous<Ticks>>,
    ) -> (Option<f64>, BTreeSet<u32>) {
        let mut main_share = None;
        let mut main_node = None;
        let main_path = self.roots.procfs.join(format!("{pid}/task/{pid}/stat"));
        if let Ok(main) = self.kept_stat(&main_path) {
            main_node = self.numa_node_of(main.processor);
            // Thread counters are kept beside the processes': key them apart.
            let main_key = (pid, main.starttime ^ (1 << 63));
            let ticks = Ticks {
                cpu: main.utime + main.stime,
                system: main.stime,
                switches: None,
                blkio: 0,
                read_bytes: None,
                cpu_wait_ns: None,
            };
            main_share = self.since(main_key, now).map(|(seconds, before)| {
                (ticks.cpu.saturating_sub(before.cpu) as f64 / USER_HZ / seconds).min(1.0)
            });
            fresh.insert(
                main_key,
                Previous {
                    at: now,
                    value: ticks,
                },
            );
        }
        let due = self.thread_passes.get(&key).is_none_or(|pass| {
            pass.busiest.is_none() || now.saturating_sub(pass.at) >= self.thread_interval
        });
        if due {
            let mut cpu = HashMap::new();
            let mut nodes = BTreeSet::new();
            for tid in self.tasks(pid) {
                let path = self.roots.procfs.join(format!("{pid}/task/{tid}/stat"));
                let Ok(thread) = read_stat(&path) else {
                    continue;
                };
                nodes.extend(self.numa_node_of(thread.processor));
                cpu.insert((tid, thread.starttime), thread.utime + thread.stime);
            }
            let before = self.thread_passes.get(&key);
            let busiest = before.and_then(|before| {
                let seconds = now.checked_sub(before.at)?.as_secs_f64();
                if seconds <= 0.0 {
                    return None;
                }
                // Threads seen by both passes; one started in between waits for the next.
                cpu.iter()
                    .filter_map(|(thread, ticks)| {
                        let then = before.cpu.get(thread)?;
                        let share = ticks.saturating_sub(*then) as f64 / USER_HZ / seconds;
                        Some((share.min(1.0), *thread))
                    })
                    .max_by(|a, b| a.0.total_cmp(&b.0))
            });
            self.thread_passes.insert(
                key,
                ThreadPass {
                    at: now,
                    cpu,
                    busiest: busiest.map(|(share, _)| share),
                    busiest_other: busiest.map(|(_, thread)| thread).filter(|t| t.0 != pid),
                    nodes,
                },
            );
        }
        let pass = &self.thread_passes[&key];
        let busiest = match (main_share, pass.busiest) {
            (Some(main), Some(any)) => Some(main.max(any)),
            (main, any) => main.or(any),
        };
        let mut nodes = pass.nodes.clone();
        nodes.extend(main_node);
        (busiest, nodes)
    }

    /// Seconds per second the process's busiest thread other than the main thread waited
    /// runnable for a CPU over the last tick: the thread that does the loop's host work where
    /// the main thread hands it off (the autograd engine's during backward, a training
    /// function run on a thread), whose wait the main thread's schedstat does not hold.
    pub(super) fn busiest_other_wait(
        &mut self,
        pid: u32,
        key: (u32, u64),
        now: Duration,
        fresh: &mut HashMap<(u32, u64), Previous<Ticks>>,
    ) -> Option<f64> {
        let (tid, start) = self.thread_passes.get(&key)?.busiest_other?;
        let path = self
            .roots
            .procfs
            .join(format!("{pid}/task/{tid}/schedstat"));
        let waited = procfs::parse_schedstat_wait(&self.kept.read(&path).ok()?).ok();
        let ticks = Ticks {
            cpu_wait_ns: waited,
            ..Ticks::default()
        };
        // Keyed apart from the processes' and main threads' counters.
        let thread_key = (tid, start ^ (1 << 62));
        let wait = self
            .since(thread_key, now)
            .and_then(|(seconds, before)| cpu_wait(&ticks, &before, seconds));
        fresh.insert(
            thread_key,
            Previous {
                at: now,
                value: ticks,
            },
        );
        wait
    }
}
