//! Reading the cgroups of GPU processes: where each process's cgroup is (found once per
//! process), and the cgroup's quota, throttling and pressure (read once per cgroup and tick).
//!
//! Several GPU processes often share one cgroup (a pod with one rank per GPU in one
//! container). The cgroup's rates are derived from its counters on the previous tick, so they
//! are computed once per cgroup and tick and handed to every process in it: computing them
//! per process would leave every process after the first with no elapsed time.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cgroup::{self, CgroupIdentity, CpuThrottling};
use crate::snapshot::{CgroupContext, Pressure, PressureSnapshot};
use crate::source::host::pressure::{parse_pressure, pressure_rates, RESOURCES};
use crate::source::{elapsed_since, Previous};

/// Where a process's cgroup files are.
#[derive(Debug, Clone, Default)]
struct CgroupPlace {
    identity: CgroupIdentity,
    /// Directory of the cgroup v2 cgroup, or of the v1 cpu controller's cgroup.
    dir: Option<PathBuf>,
    /// Whether `dir` is a cgroup v2 directory.
    v2: bool,
}

/// Counters of a cgroup, kept between ticks, and the figures derived from them on the tick
/// they were read (handed to every later process of the same cgroup on that tick).
#[derive(Debug, Clone, Default)]
struct CgroupCounters {
    throttling: Option<CpuThrottling>,
    pressure: Vec<(&'static str, Pressure)>,
    figures: CgroupContext,
}

/// The cgroup state the process source keeps between ticks.
#[derive(Debug)]
pub struct CgroupReader {
    procfs: PathBuf,
    /// `<sysfs>/fs/cgroup`.
    mount: PathBuf,
    /// Per process (pid, start time): where its cgroup is.
    places: HashMap<(u32, u64), CgroupPlace>,
    /// Per cgroup directory: the counters of its last read.
    counters: HashMap<PathBuf, Previous<CgroupCounters>>,
}

impl CgroupReader {
    /// A reader below the given procfs and sysfs roots.
    pub fn new(procfs: &Path, sysfs: &Path) -> Self {
        CgroupReader {
            procfs: procfs.to_path_buf(),
            mount: sysfs.join("fs/cgroup"),
            places: HashMap::new(),
            counters: HashMap::new(),
        }
    }

    /// Ends a tick: forgets the processes not in `live` and the cgroups none of them is in.
    pub fn retain(&mut self, live: &BTreeSet<u32>) {
        self.places.retain(|(pid, _), _| live.contains(pid));
        let dirs: BTreeSet<&PathBuf> = self
            .places
            .values()
            .filter_map(|p| p.dir.as_ref())
            .collect();
        self.counters.retain(|dir, _| dirs.contains(dir));
    }

    /// The cgroup of process `pid` (started at `starttime`) as of `now`; `None` when its
    /// `/proc/<pid>/cgroup` cannot be read or parsed.
    pub fn context(&mut self, pid: u32, starttime: u64, now: Duration) -> Option<CgroupContext> {
        let key = (pid, starttime);
        if !self.places.contains_key(&key) {
            let place = self.locate(pid)?;
            self.places.insert(key, place);
        }
        let place = &self.places[&key];
        let identity = place.identity.clone();
        let mut context = match place.dir.clone() {
            // Already read on this tick for another process of the cgroup.
            Some(dir) => match self.counters.get(&dir).filter(|read| read.at == now) {
                Some(read) => read.value.figures.clone(),
                None => self.read_figures(&dir, place.v2, now),
            },
            None => CgroupContext::default(),
        };
        context.pod_uid = identity.pod_uid.unwrap_or_default();
        context.container_id = identity.container_id.unwrap_or_default();
        context.slurm_job = identity.slurm_job.unwrap_or_default();
        Some(context)
    }

    /// Quota, throttling and pressure of the cgroup in `dir`, with rates against its previous
    /// read.
    fn read_figures(&mut self, dir: &Path, v2: bool, now: Duration) -> CgroupContext {
        let text = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let throttling = text("cpu.stat").and_then(|t| cgroup::parse_cpu_stat(&t).ok());
        let cpu_quota_cores = if v2 {
            text("cpu.max").and_then(|t| cgroup::parse_cpu_max(&t).ok().flatten())
        } else {
            text("cpu.cfs_quota_us")
                .zip(text("cpu.cfs_period_us"))
                .and_then(|(q, p)| cgroup::parse_cfs_quota(&q, &p).ok().flatten())
        };
        let pressure: Vec<(&'static str, Pressure)> = if v2 {
            RESOURCES
                .iter()
                .filter_map(|r| Some((*r, parse_pressure(&text(&format!("{r}.pressure"))?).ok()?)))
                .collect()
        } else {
            Vec::new()
        };
        let previous = elapsed_since(self.counters.get(dir), now);
        let throttled_ratio = throttling.zip(previous).and_then(|(t, (_, before))| {
            let before = before.throttling?;
            let periods = t.periods.checked_sub(before.periods)?;
            let throttled = t.throttled_periods.checked_sub(before.throttled_periods)?;
            Some(if periods == 0 {
                0.0
            } else {
                throttled as f64 / periods as f64
            })
        });
        let pressure_snapshots = pressure
            .iter()
            .map(|(resource, now_pressure)| PressureSnapshot {
                resource,
                pressure: *now_pressure,
                rates: previous.and_then(|(seconds, before)| {
                    let (_, then) = before.pressure.iter().find(|(r, _)| r == resource)?;
                    pressure_rates(then, now_pressure, seconds)
                }),
            })
            .collect();
        let figures = CgroupContext {
            cpu_quota_cores,
            throttled_ratio,
            pressure: pressure_snapshots,
            ..CgroupContext::default()
        };
        self.counters.insert(
            dir.to_path_buf(),
            Previous {
                at: now,
                value: CgroupCounters {
                    throttling,
                    pressure,
                    figures: figures.clone(),
                },
            },
        );
        figures
    }

    /// Reads `/proc/<pid>/cgroup` and finds the cgroup's directory under the host mount.
    fn locate(&self, pid: u32) -> Option<CgroupPlace> {
        let text = std::fs::read_to_string(self.procfs.join(format!("{pid}/cgroup"))).ok()?;
        let paths = cgroup::parse_proc_cgroup(&text).ok()?;
        let under = |mount: &Path, path: &str| -> Option<PathBuf> {
            if cgroup::is_outside_namespace(path) {
                return None;
            }
            let dir = mount.join(path.trim_start_matches('/'));
            dir.join("cpu.stat").exists().then_some(dir)
        };
        let pure_v2 = self.mount.join("cgroup.controllers").exists();
        let v2 = paths
            .unified
            .as_deref()
            .filter(|_| pure_v2)
            .and_then(|p| under(&self.mount, p));
        let v1_cpu = || {
            paths.cpu.as_deref().and_then(|p| {
                ["cpu,cpuacct", "cpu", "cpuacct,cpu"]
                    .iter()
                    .find_map(|mount| under(&self.mount.join(mount), p))
            })
        };
        let (dir, is_v2) = match v2 {
            Some(dir) => (Some(dir), true),
            None => (v1_cpu(), false),
        };
        if dir.is_none() {
            tracing::debug!(pid, "cgroup directory not found (private cgroup namespace or unusual mount); owner only");
        }
        Some(CgroupPlace {
            identity: cgroup::identity(paths.naming_path()?),
            dir,
            v2: is_v2,
        })
    }
}
