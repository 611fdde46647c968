//! The node's busiest processes outside the GPU process trees, by CPU and by disk bytes: who
//! else takes the CPUs or the disks a starved GPU's pipeline needs ("updatedb, pid 812, read
//! 310 MB/s").
//!
//! A pass reads `/proc/<pid>/stat` of every process (about 10 µs each: 20 ms on a node of 2,000
//! processes), so it runs only while the sampler says culprits are wanted (some GPU scored
//! data_io, data_cpu or contention past the leave score on the previous tick), at most every
//! `interval`. `/proc/<pid>/io` is read only for processes that used CPU since the previous pass
//! (a process doing I/O makes system calls) or were not seen before. Reading another user's io
//! needs ptrace access (CAP_SYS_PTRACE): without it the disk ranking holds only the readable
//! processes and the `node_process_disk_bytes` signal is reported unsupported.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use super::host::cpu::USER_HZ;
use super::process::cgroup::{identity, parse_proc_cgroup};
use super::process::procfs::{parse_comm, parse_io, parse_stat};
use super::process::{read, ReadError};
use super::{Source, SourceError};
use crate::config::CulpritsConfig;
use crate::snapshot::{Culprits, NodeProcess, Snapshot};

/// The signal `gpu_exporter_signal_supported` reports when other processes' io is unreadable.
pub const DISK_SIGNAL: &str = "node_process_disk_bytes";

/// What one pass read of one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Start time in ticks after boot (with the pid, identifies the process across reuse).
    pub starttime: u64,
    /// Command name.
    pub command: String,
    /// User plus system CPU time, in ticks.
    pub cpu_ticks: u64,
    /// CPU time of its reaped children, in ticks.
    pub children_ticks: u64,
    /// Bytes read and written from storage so far, when its io file was read on this pass.
    pub io: Option<(u64, u64)>,
}

/// What is kept of a process between passes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    cpu_ticks: u64,
    children_ticks: u64,
    at: Duration,
    /// The last io reading and when it was taken (io is not read on every pass).
    io: Option<((u64, u64), Duration)>,
}

/// Every process in the trees rooted at `roots` (the GPU processes and their descendants).
pub fn trees(readings: &[Reading], roots: &BTreeSet<u32>) -> BTreeSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for r in readings {
        children.entry(r.ppid).or_default().push(r.pid);
    }
    let mut inside: BTreeSet<u32> = roots.clone();
    let mut todo: Vec<u32> = roots.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if inside.insert(*child) {
                todo.push(*child);
            }
        }
    }
    inside
}

/// The `top` busiest of `readings` outside `excluded`, by CPU and by disk bytes, from the
/// counters `previous` kept (pure: the source's pass minus the file reads).
fn rank(
    readings: &[Reading],
    previous: &HashMap<(u32, u64), Seen>,
    excluded: &BTreeSet<u32>,
    now: Duration,
    top: usize,
) -> Culprits {
    let mut candidates: Vec<NodeProcess> = Vec::new();
    for r in readings.iter().filter(|r| !excluded.contains(&r.pid)) {
        let Some(before) = previous.get(&(r.pid, r.starttime)) else {
            continue;
        };
        let seconds = now.saturating_sub(before.at).as_secs_f64();
        if seconds <= 0.0 {
            continue;
        }
        let cpu_cores = r.cpu_ticks.saturating_sub(before.cpu_ticks) as f64 / USER_HZ / seconds;
        let rates = match (r.io, before.io) {
            (Some((read, write)), Some(((read0, write0), at))) if now > at => {
                let seconds = (now - at).as_secs_f64();
                Some((
                    read.saturating_sub(read0) as f64 / seconds,
                    write.saturating_sub(write0) as f64 / seconds,
                ))
            }
            _ => None,
        };
        candidates.push(NodeProcess {
            pid: r.pid,
            command: r.command.clone(),
            cpu_cores,
            read_bytes_per_second: rates.map(|(read, _)| read),
            write_bytes_per_second: rates.map(|(_, write)| write),
            ..NodeProcess::default()
        });
    }
    let busiest = |key: fn(&NodeProcess) -> f64| {
        let mut ranked: Vec<NodeProcess> = candidates
            .iter()
            .filter(|p| key(p) > 0.0)
            .cloned()
            .collect();
        ranked.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.pid.cmp(&b.pid)));
        ranked.truncate(top);
        ranked
    };
    Culprits {
        by_cpu: busiest(|p| p.cpu_cores),
        by_disk: busiest(NodeProcess::disk_bytes_per_second),
    }
}

/// The culprits source.
pub struct CulpritsSource {
    procfs: PathBuf,
    config: CulpritsConfig,
    /// Per process (pid, start time), what the previous pass read.
    previous: HashMap<(u32, u64), Seen>,
    /// When the previous pass ran.
    last_pass: Option<Duration>,
    /// The last pass's result, served until the next pass.
    last: Option<Culprits>,
    /// Whether the last pass was refused some io file.
    io_denied: bool,
}

impl CulpritsSource {
    /// A source reading processes below `procfs` as `config` says.
    pub fn new(procfs: PathBuf, config: CulpritsConfig) -> Self {
        CulpritsSource {
            procfs,
            config,
            previous: HashMap::new(),
            last_pass: None,
            last: None,
            io_denied: false,
        }
    }

    /// Reads every process's stat, and its io where it used CPU since the previous pass (or
    /// is new). Processes that exit mid-pass are skipped.
    fn read_all(&mut self) -> Result<Vec<Reading>, SourceError> {
        let entries =
            std::fs::read_dir(&self.procfs).map_err(|e| SourceError::io(&self.procfs, &e))?;
        self.io_denied = false;
        let mut readings = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = entry.path();
            let Ok(line) = read(&dir.join("stat")) else {
                continue;
            };
            let (Ok(stat), Some(command)) = (parse_stat(&line), parse_comm(&line)) else {
                continue;
            };
            let cpu_ticks = stat.utime + stat.stime;
            // A shell whose short-lived children do the I/O spends no CPU of its own, but the
            // kernel adds their CPU and I/O to it as it reaps them.
            let active = self
                .previous
                .get(&(pid, stat.starttime))
                .is_none_or(|seen| {
                    seen.cpu_ticks != cpu_ticks || seen.children_ticks != stat.children_ticks
                });
            let io = if active {
                match read(&dir.join("io")) {
                    Ok(text) => parse_io(&text)
                        .ok()
                        .map(|io| (io.read_bytes, io.write_bytes)),
                    Err(ReadError::Denied) => {
                        self.io_denied = true;
                        None
                    }
                    Err(_) => None,
                }
            } else {
                None
            };
            readings.push(Reading {
                pid,
                ppid: stat.ppid,
                starttime: stat.starttime,
                command: command.to_string(),
                cpu_ticks,
                children_ticks: stat.children_ticks,
                io,
            });
        }
        Ok(readings)
    }

    /// One pass: reads, ranks against the previous pass, names the owners of those ranked and
    /// keeps the counters for the next pass.
    fn pass(&mut self, gpu_pids: &BTreeSet<u32>, now: Duration) -> Result<(), SourceError> {
        // A pass long after the previous one would average over the quiet time between.
        if self
            .last_pass
            .is_some_and(|at| now.saturating_sub(at) > self.config.interval.0 * 3)
        {
            self.previous.clear();
        }
        let readings = self.read_all()?;
        let excluded = trees(&readings, gpu_pids);
        let mut culprits = rank(&readings, &self.previous, &excluded, now, self.config.top);
        for process in culprits
            .by_cpu
            .iter_mut()
            .chain(culprits.by_disk.iter_mut())
        {
            let cgroup = read(&self.procfs.join(process.pid.to_string()).join("cgroup"))
                .ok()
                .and_then(|text| parse_proc_cgroup(&text).ok());
            if let Some(path) = cgroup.as_ref().and_then(|c| c.naming_path()) {
                let owner = identity(path);
                process.pod_uid = owner.pod_uid.unwrap_or_default();
                process.container_id = owner.container_id.unwrap_or_default();
            }
        }
        let previous = std::mem::take(&mut self.previous);
        self.previous = readings
            .into_iter()
            .map(|r| {
                let key = (r.pid, r.starttime);
                let io =
                    r.io.map(|io| (io, now))
                        .or_else(|| previous.get(&key).and_then(|seen| seen.io));
                let seen = Seen {
                    cpu_ticks: r.cpu_ticks,
                    children_ticks: r.children_ticks,
                    at: now,
                    io,
                };
                (key, seen)
            })
            .collect();
        self.last_pass = Some(now);
        self.last = Some(culprits);
        Ok(())
    }
}

impl Source for CulpritsSource {
    /// It leaves the GPU process trees out.
    fn after(&self) -> &'static [&'static str] {
        &["gpu"]
    }

    fn name(&self) -> &'static str {
        "culprits"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        if !snapshot.culprits_wanted && !self.config.always {
            // Nothing to look for: forget, so that the next pass starts afresh.
            self.previous.clear();
            self.last_pass = None;
            self.last = None;
            return Ok(());
        }
        let due = self
            .last_pass
            .is_none_or(|at| now.saturating_sub(at) >= self.config.interval.0);
        if due {
            self.pass(&snapshot.gpu_pids(), now)?;
        }
        // The first pass has nothing to compare with: no culprits yet.
        snapshot.culprits = self
            .last
            .clone()
            .filter(|c| !c.by_cpu.is_empty() || !c.by_disk.is_empty());
        if self.io_denied {
            snapshot.unsupported_signals.push(DISK_SIGNAL);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(
        pid: u32,
        ppid: u32,
        command: &str,
        cpu_ticks: u64,
        io: Option<(u64, u64)>,
    ) -> Reading {
        Reading {
            pid,
            ppid,
            starttime: 1000 + u64::from(pid),
            command: command.into(),
            cpu_ticks,
            children_ticks: 0,
            io,
        }
    }

    fn seen(readings: &[Reading], at: Duration) -> HashMap<(u32, u64), Seen> {
        readings
            .iter()
            .map(|r| {
                let io = r.io.map(|io| (io, at));
                (
                    (r.pid, r.starttime),
                    Seen {
                        cpu_ticks: r.cpu_ticks,
                        children_ticks: r.children_ticks,
                        at,
                        io,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_trees_of_the_gpu_processes_are_every_descendant() {
        let readings = [
            reading(1, 0, "init", 0, None),
            reading(10, 1, "python", 0, None),
            reading(11, 10, "pt_data_worker", 0, None),
            reading(12, 11, "decoder", 0, None),
            reading(20, 1, "updatedb", 0, None),
        ];
        let inside = trees(&readings, &BTreeSet::from([10]));
        assert_eq!(inside, BTreeSet::from([10, 11, 12]));
    }

    #[test]
    fn ranks_outside_the_gpu_trees_by_cpu_and_by_disk() {
        let before = [
            reading(10, 1, "python", 0, Some((0, 0))),
            reading(11, 10, "pt_data_worker", 0, Some((0, 0))),
            reading(20, 1, "updatedb", 100, Some((1_000, 0))),
            reading(21, 1, "stress-ng", 0, Some((0, 0))),
            reading(22, 1, "sshd", 5, Some((0, 0))),
        ];
        let after = [
            reading(10, 1, "python", 500, Some((0, 0))),
            reading(11, 10, "pt_data_worker", 400, Some((1 << 30, 0))),
            // 5 s later: 50 ticks = 0.1 core, 1.55 GB read = 310 MB/s.
            reading(20, 1, "updatedb", 150, Some((1_550_001_000, 0))),
            reading(21, 1, "stress-ng", 1000, Some((0, 4096 * 5))),
            // Idle since: its io was not read this pass.
            reading(22, 1, "sshd", 5, None),
            // New since: no rate yet.
            reading(23, 1, "cron", 80, Some((0, 0))),
        ];
        let previous = seen(&before, Duration::from_secs(10));
        let excluded = trees(&after, &BTreeSet::from([10]));
        let culprits = rank(&after, &previous, &excluded, Duration::from_secs(15), 5);
        let names =
            |list: &[NodeProcess]| list.iter().map(|p| p.command.clone()).collect::<Vec<_>>();
        assert_eq!(names(&culprits.by_cpu), ["stress-ng", "updatedb"]);
        assert_eq!(culprits.by_cpu[0].cpu_cores, 2.0);
        assert_eq!(names(&culprits.by_disk), ["updatedb", "stress-ng"]);
        assert_eq!(
            culprits.by_disk[0].read_bytes_per_second,
            Some(310_000_000.0)
        );
        assert_eq!(culprits.by_disk[1].write_bytes_per_second, Some(4096.0));
        // Bounded.
        let one = rank(&after, &previous, &excluded, Duration::from_secs(15), 1);
        assert_eq!((one.by_cpu.len(), one.by_disk.len()), (1, 1));
        // A reused pid (another start time) is a new process: no rate.
        let mut reused = after.to_vec();
        reused[3].starttime += 1;
        let culprits = rank(&reused, &previous, &excluded, Duration::from_secs(15), 5);
        assert_eq!(names(&culprits.by_cpu), ["updatedb"]);
    }
}
