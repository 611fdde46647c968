//! Host context of each GPU process: its threads, the processes below it (data-loader
//! workers), its cgroup (owner, CPU throttling, pressure) and where on the NUMA topology its
//! threads run.
//!
//! Cost is the design constraint: a full pass over /proc on a node with thousands of
//! processes costs more than the whole sampler's budget. So the descendants of a GPU process
//! are discovered through the kernel's `children` files (only the tree is visited) every
//! `discovery_interval`, and each tick reads only the known trees. Kernels without `children`
//! files fall back to one /proc pass per discovery. A process that exits while being read is
//! skipped quietly.

pub mod cgroup;
mod cgroups;
pub mod children;
mod cpus;
mod kept;
pub mod procfs;
mod threads;
mod tree;
pub mod waits;
mod workers;
pub mod world;

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::cgroups::CgroupReader;
use self::cpus::read_cpu_nodes;
pub use self::cpus::share_cpus;
use self::kept::KeptFiles;
use self::procfs::Stat;
use self::threads::ThreadPass;
use self::tree::TreeFinder;
use self::waits::{WaitReader, WORKER_WAITS_SIGNAL};
use super::host::cpu::USER_HZ;
use super::{elapsed_since, HostRoots, Previous, Source, SourceError};
use crate::config::ProcessConfig;
use crate::snapshot::{ProcessContext, Snapshot, World};

/// ESRCH: the process exited between finding it and reading one of its files.
const ESRCH: i32 = 3;

/// Why a /proc or /sys file could not be read.
pub(crate) enum ReadError {
    /// The process (or cgroup) is gone: skip it quietly.
    Gone,
    /// The exporter lacks the privilege (e.g. /proc/<pid>/io of another user's process
    /// without CAP_SYS_PTRACE).
    Denied,
    /// Anything else (a malformed file, an I/O error).
    Other(String),
}

/// Opened and read in `pread`s, without the size query and seek `read_to_string` adds: a
/// /proc file reports no size, and every system call counts at thousands of files a minute.
pub(crate) fn read(path: &Path) -> Result<String, ReadError> {
    let file = std::fs::File::open(path).map_err(|e| classify(path, &e))?;
    kept::read_whole(path, &file)
}

/// ENOENT and ESRCH: the task is gone; EACCES and EPERM: refused.
fn classify(path: &Path, e: &io::Error) -> ReadError {
    match (e.kind(), e.raw_os_error()) {
        (io::ErrorKind::NotFound, _) | (_, Some(ESRCH)) => ReadError::Gone,
        (io::ErrorKind::PermissionDenied, _) => ReadError::Denied,
        _ => ReadError::Other(format!("{}: {e}", path.display())),
    }
}

/// The counters a task forked within the last `interval` seconds started from (all zero:
/// a child's CPU times, I/O and delays start at nothing), over that interval: everything it
/// did since belongs to it. A DataLoader without persistent workers replaces them every epoch;
/// without this their first second, which may be most of a short epoch, would go uncounted.
fn forked_within(stat: &Stat, interval: f64) -> Option<(f64, Ticks)> {
    let age = seconds_since_boot()? - stat.starttime as f64 / USER_HZ;
    let zero = Ticks {
        read_bytes: Some(0),
        cpu_wait_ns: Some(0),
        ..Ticks::default()
    };
    (age <= interval).then_some((interval, zero))
}

/// Seconds since boot on the clock `stat`'s start times count on (CLOCK_BOOTTIME, in the
/// reader's time namespace as they are).
fn seconds_since_boot() -> Option<f64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the call to fill in.
    let answered = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } == 0;
    answered.then(|| now.tv_sec as f64 + now.tv_nsec as f64 / 1e9)
}

/// Reads and parses a `stat` file of a process or thread.
fn read_stat(path: &Path) -> Result<Stat, ReadError> {
    parse_stat_of(path, &read(path)?)
}

fn parse_stat_of(path: &Path, text: &str) -> Result<Stat, ReadError> {
    procfs::parse_stat(text).map_err(|e| ReadError::Other(format!("{}: {e}", path.display())))
}

/// The signal `/proc/<pid>/io` feeds, named as `gpu_exporter_signal_supported` labels it.
pub const READ_BYTES_SIGNAL: &str = "process_read_bytes";

/// How often a `status` file is read, a worker's (for its context switches) or a rank's
/// (owner, resident memory, CPU affinity, switches): the costliest of a task's files (1.4 KiB
/// the kernel formats, half of what a worker's reads cost on a tick), and nothing in it is
/// needed to the second: of the switches only a window's share is used, and the rest changes
/// rarely. A tick in between carries the last reading.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// CPU and I/O counters of one task, kept between ticks.
#[derive(Debug, Clone, Copy, Default)]
struct Ticks {
    cpu: u64,
    /// The part of `cpu` spent in the kernel (system calls: reads, receives, page faults).
    system: u64,
    /// Voluntary and involuntary context switches, and when they were read (for workers only,
    /// every [`STATUS_EVERY`]).
    switches: Option<(u64, u64, Duration)>,
    blkio: u64,
    read_bytes: Option<u64>,
    /// Nanoseconds the task waited for a CPU (`None` where schedstat is absent).
    cpu_wait_ns: Option<u64>,
}

/// The process-context source.
pub struct ProcessSource {
    roots: HostRoots,
    thread_interval: Duration,
    /// CPU → NUMA node, read once from sysfs.
    cpu_nodes: Option<HashMap<u32, u32>>,
    /// The descendants (loader workers) of each GPU process.
    trees: TreeFinder,
    /// Per process (pid, start time): the counters read on the previous tick.
    ticks: HashMap<(u32, u64), Previous<Ticks>>,
    /// Per GPU process (pid, start time): the last pass over its threads.
    thread_passes: HashMap<(u32, u64), ThreadPass>,
    /// Whether an io file was refused for lack of privilege on this tick.
    io_denied: bool,
    /// Where sleeping loader workers wait.
    waits: WaitReader,
    /// Whether a worker's system call was refused on this tick.
    waits_denied: bool,
    /// Boot time in seconds since the epoch (`None` until looked at).
    boot_time: Option<Option<u64>>,
    cgroups: CgroupReader,
    /// The per-tick files of the GPU processes and their workers.
    kept: KeptFiles,
    /// Per GPU process (pid, start time): the distributed job its launcher described, read
    /// once.
    worlds: HashMap<(u32, u64), Option<World>>,
    /// Per GPU process (pid, start time): its last `status` and when it was read.
    statuses: HashMap<(u32, u64), (Duration, procfs::Status)>,
}

impl ProcessSource {
    /// A source reading below the given roots.
    pub fn new(roots: HostRoots, config: ProcessConfig) -> Self {
        ProcessSource {
            thread_interval: config.thread_interval.0,
            cpu_nodes: None,
            trees: TreeFinder::new(&roots.procfs, config.discovery_interval.0),
            ticks: HashMap::new(),
            thread_passes: HashMap::new(),
            io_denied: false,
            waits: WaitReader::new(roots.procfs.clone()),
            waits_denied: false,
            boot_time: None,
            cgroups: CgroupReader::new(&roots.procfs, &roots.sysfs),
            kept: KeptFiles::new(&roots.procfs),
            worlds: HashMap::new(),
            statuses: HashMap::new(),
            roots,
        }
    }

    fn proc_path(&self, pid: u32, file: &str) -> PathBuf {
        self.roots.procfs.join(pid.to_string()).join(file)
    }

    /// A per-tick `stat` file, through its kept descriptor.
    fn kept_stat(&mut self, path: &Path) -> Result<Stat, ReadError> {
        parse_stat_of(path, &self.kept.read(path)?)
    }

    /// `kernel.task_delayacct`: `None` on kernels before 5.14, where it is not a sysctl and
    /// delay accounting is on unless booted with `nodelayacct`.
    fn delay_accounting(&self) -> Option<bool> {
        let text =
            std::fs::read_to_string(self.roots.procfs.join("sys/kernel/task_delayacct")).ok()?;
        Some(text.trim() != "0")
    }

    /// The boot time from /proc/stat, read once (it does not change while the host runs).
    fn boot_time(&mut self) -> Option<u64> {
        let procfs = self.roots.procfs.clone();
        *self.boot_time.get_or_insert_with(|| {
            procfs::parse_boot_time(&std::fs::read_to_string(procfs.join("stat")).ok()?)
        })
    }

    fn numa_node_of(&mut self, cpu: u32) -> Option<u32> {
        let sysfs = self.roots.sysfs.clone();
        let nodes = self.cpu_nodes.get_or_insert_with(|| read_cpu_nodes(&sysfs));
        nodes.get(&cpu).copied()
    }

    /// Counter deltas of a task since the previous tick: (seconds elapsed, previous ticks).
    fn since(&self, key: (u32, u64), now: Duration) -> Option<(f64, Ticks)> {
        elapsed_since(self.ticks.get(&key), now).map(|(seconds, ticks)| (seconds, *ticks))
    }

    fn tasks(&self, pid: u32) -> Vec<u32> {
        numeric_entries(&self.roots.procfs.join(pid.to_string()).join("task"))
    }

    fn read_ticks(&mut self, pid: u32, stat: &Stat) -> Ticks {
        let read_bytes = match self.kept.read(&self.proc_path(pid, "io")) {
            Ok(text) => procfs::parse_io(&text).ok().map(|io| io.read_bytes),
            Err(ReadError::Denied) => {
                self.io_denied = true;
                None
            }
            Err(_) => None,
        };
        let cpu_wait_ns = self
            .kept
            .read(&self.proc_path(pid, "schedstat"))
            .ok()
            .and_then(|text| procfs::parse_schedstat_wait(&text).ok());
        Ticks {
            cpu: stat.utime + stat.stime,
            system: stat.stime,
            switches: None,
            blkio: stat.blkio_ticks,
            read_bytes,
            cpu_wait_ns,
        }
    }

    /// The context of one GPU process; `Ok(None)` when it exited.
    fn context(
        &mut self,
        pid: u32,
        now: Duration,
        delay_accounting: bool,
        fresh: &mut HashMap<(u32, u64), Previous<Ticks>>,
    ) -> Result<Option<ProcessContext>, String> {
        let stat = match self.kept_stat(&self.proc_path(pid, "stat")) {
            Ok(stat) => stat,
            Err(ReadError::Gone) => return Ok(None),
            Err(ReadError::Denied) => return Err(format!("/proc/{pid}/stat: permission denied")),
            Err(ReadError::Other(e)) => return Err(e),
        };
        let key = (pid, stat.starttime);
        let status = match self.statuses.get(&key) {
            Some((at, status)) if now.saturating_sub(*at) < STATUS_EVERY => status.clone(),
            _ => {
                let status = match read(&self.proc_path(pid, "status")) {
                    Ok(text) => procfs::parse_status(&text)
                        .map_err(|e| format!("/proc/{pid}/status: {e}"))?,
                    Err(ReadError::Gone) => return Ok(None),
                    Err(ReadError::Denied) => {
                        return Err(format!("/proc/{pid}/status: permission denied"))
                    }
                    Err(ReadError::Other(e)) => return Err(e),
                };
                self.statuses.insert(key, (now, status.clone()));
                status
            }
        };
        let ticks = self.read_ticks(pid, &stat);
        let since = self.since(key, now);
        fresh.insert(
            key,
            Previous {
                at: now,
                value: ticks,
            },
        );

        let (busiest, mut nodes) = self.threads(pid, key, now, fresh);
        let descendants = self.trees.descendants(pid, stat.starttime, now);
        let interval = since.map(|(seconds, _)| seconds);
        let (mut workers, sleeping) = self.workers(
            &descendants.loaders,
            (now, interval),
            delay_accounting,
            fresh,
            &mut nodes,
        );
        workers.asleep = self.asleep(&sleeping, now);
        let others: Vec<u32> = descendants
            .all
            .iter()
            .copied()
            .filter(|d| !descendants.loaders.contains(d))
            .collect();
        let (other_children, _) = self.workers(
            &others,
            (now, interval),
            delay_accounting,
            fresh,
            &mut nodes,
        );
        let cgroup = self.cgroups.context(pid, stat.starttime, now);
        let environ = self.proc_path(pid, "environ");
        let world = *self.worlds.entry(key).or_insert_with(|| {
            std::fs::read(&environ)
                .ok()
                .and_then(|bytes| world::parse_environ(&bytes))
        });
        let main_wait = since.and_then(|(seconds, before)| cpu_wait(&ticks, &before, seconds));
        let driving_wait = self.busiest_other_wait(pid, key, now, fresh);
        let loop_cpu_wait_ratio = main_wait.map(|m| m + driving_wait.unwrap_or(0.0));
        let cpu_wait_ratio = loop_cpu_wait_ratio
            .zip(workers.cpu_wait_ratio)
            .map(|(l, w)| l + w);
        Ok(Some(ProcessContext {
            pid,
            ppid: stat.ppid,
            state: stat.state,
            threads: stat.threads,
            uid: status.uid,
            resident_bytes: status.resident_bytes,
            start_time_seconds: self
                .boot_time()
                .map(|boot| boot as f64 + stat.starttime as f64 / USER_HZ),
            cpu_user_seconds: stat.utime as f64 / USER_HZ,
            cpu_system_seconds: stat.stime as f64 / USER_HZ,
            cpu_cores: since.map(|(seconds, before)| {
                ticks.cpu.saturating_sub(before.cpu) as f64 / USER_HZ / seconds
            }),
            busiest_thread_ratio: busiest,
            cpu_wait_ratio,
            loop_cpu_wait_ratio,
            voluntary_switches: status.voluntary_switches,
            involuntary_switches: status.involuntary_switches,
            blkio_delay_seconds: delay_accounting.then(|| stat.blkio_ticks as f64 / USER_HZ),
            read_bytes: ticks.read_bytes,
            allowed_cpus: status.allowed_cpus,
            // Known once every GPU process is read: see `share_cpus`.
            others_cpu_ratio: None,
            own_cpu_ratio: None,
            numa_nodes: nodes.into_iter().collect(),
            workers,
            other_children,
            descendants: descendants.all,
            cgroup,
            world,
        }))
    }
}

/// The numeric entries (pids, tids) of a directory, sorted; empty if unreadable.
fn numeric_entries(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

impl Source for ProcessSource {
    /// It reads the GPU process list and the node's CPU busy share.
    fn after(&self) -> &'static [&'static str] {
        &["cpu", "gpu"]
    }

    fn name(&self) -> &'static str {
        "process"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let pids = snapshot.gpu_pids();
        let delay = self.delay_accounting();
        let mut fresh = HashMap::new();
        self.io_denied = false;
        self.waits_denied = false;
        let mut contexts = Vec::new();
        let mut failures = Vec::new();
        for pid in pids.iter().copied() {
            match self.context(pid, now, delay != Some(false), &mut fresh) {
                Ok(Some(context)) => contexts.push(context),
                Ok(None) => {}
                Err(error) => failures.push(error),
            }
        }
        // Whatever was not read this tick is gone: its state goes with it.
        self.ticks = fresh;
        self.trees.retain(&pids);
        self.thread_passes.retain(|(pid, _), _| pids.contains(pid));
        self.worlds.retain(|(pid, _), _| pids.contains(pid));
        self.statuses.retain(|(pid, _), _| pids.contains(pid));
        self.cgroups.retain(&pids);
        let workers: BTreeSet<u32> = contexts
            .iter()
            .flat_map(|c| c.descendants.iter().copied())
            .collect();
        self.waits.retain(|pid| workers.contains(&pid));
        self.kept.sweep();

        snapshot.other_cpu_ratio = snapshot.cpu.as_ref().and_then(|cpu| {
            let rates = cpu.rates?;
            let cpus = f64::from(cpu.stat.cpu_count.max(1));
            let trees: Option<f64> = contexts
                .iter()
                .map(|c| {
                    Some(c.cpu_cores? + c.workers.cpu_cores? + c.other_children.known_cpu_cores()?)
                })
                .sum();
            Some(((rates.busy_ratio * cpus - trees?) / cpus).clamp(0.0, 1.0))
        });
        if let Some(cpu) = &snapshot.cpu {
            share_cpus(&mut contexts, &cpu.busy_by_cpu);
        }
        snapshot.processes = contexts;
        if self.io_denied {
            snapshot.unsupported_signals.push(READ_BYTES_SIGNAL);
        }
        if self.waits_denied {
            snapshot.unsupported_signals.push(WORKER_WAITS_SIGNAL);
        }
        snapshot.delay_accounting = delay;
        match failures.first() {
            // Permission problems on every process mean the source cannot do its job.
            Some(first) if failures.len() == pids.len() => Err(SourceError::Failed(first.clone())),
            Some(first) => {
                tracing::debug!(error = %first, "some GPU processes could not be read");
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// Seconds per second a task waited runnable for a CPU between two readings.
fn cpu_wait(now: &Ticks, before: &Ticks, seconds: f64) -> Option<f64> {
    Some(now.cpu_wait_ns?.saturating_sub(before.cpu_wait_ns?) as f64 / 1e9 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_forked_within_the_interval_counts_from_its_start() {
        let boot = seconds_since_boot().expect("CLOCK_BOOTTIME");
        let started = |seconds_ago: f64| Stat {
            starttime: ((boot - seconds_ago) * USER_HZ) as u64,
            ..Stat::default()
        };
        let (seconds, zero) = forked_within(&started(0.4), 1.0).expect("forked this interval");
        assert_eq!(seconds, 1.0);
        assert_eq!(
            (zero.cpu, zero.read_bytes, zero.cpu_wait_ns),
            (0, Some(0), Some(0))
        );
        // Forked before the last reading: its earlier counters are not this interval's.
        assert!(forked_within(&started(3.0), 1.0).is_none());
    }
}
