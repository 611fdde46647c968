//! Pure parsers for a process's cgroup: where it is (`/proc/<pid>/cgroup`), whose it is (pod
//! UID, container ID, Slurm job, read from the path), and how it is throttled (`cpu.stat`,
//! `cpu.max` or the v1 CFS files).

use std::sync::OnceLock;

use regex::Regex;

/// The cgroup paths of a process that matter here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupPaths {
    /// cgroup v2 (unified hierarchy) path, from the `0::` line.
    pub unified: Option<String>,
    /// cgroup v1 path of the cpu controller.
    pub cpu: Option<String>,
}

impl CgroupPaths {
    /// The path that names the process's container: the v1 cpu path where v1 is in use
    /// (the unified line is then usually a bare `/`), else the v2 path.
    pub fn naming_path(&self) -> Option<&str> {
        self.cpu.as_deref().or(self.unified.as_deref())
    }
}

/// Parses `/proc/<pid>/cgroup`: lines of `hierarchy-id:controllers:path`.
pub fn parse_proc_cgroup(text: &str) -> Result<CgroupPaths, String> {
    let mut paths = CgroupPaths::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("malformed cgroup line {line:?}"));
        };
        if id == "0" && controllers.is_empty() {
            paths.unified = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            paths.cpu = Some(path.to_string());
        }
    }
    if paths.unified.is_none() && paths.cpu.is_none() {
        return Err("no cgroup v2 line and no v1 cpu controller".into());
    }
    Ok(paths)
}

/// Who a cgroup path belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupIdentity {
    /// Kubernetes pod UID (dashed form).
    pub pod_uid: Option<String>,
    /// Container runtime ID (64 hex digits).
    pub container_id: Option<String>,
    /// Slurm job ID.
    pub slurm_job: Option<String>,
}

fn pod_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    // cgroupfs driver: pod<uid with dashes>; systemd driver: ...-pod<uid with underscores>.slice
    PATTERN.get_or_init(|| {
        Regex::new(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
            .expect("valid regex")
    })
}

fn container_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    // cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope (systemd driver) or a bare
    // <id> segment (cgroupfs driver, /docker/<id>).
    PATTERN.get_or_init(|| {
        Regex::new(r"^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$").expect("valid regex")
    })
}

fn slurm_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    // v1: /slurm/uid_1000/job_42/step_0/task_0; v2: /system.slice/slurmstepd.scope/job_42/step_0/...
    PATTERN.get_or_init(|| Regex::new(r"/job_(\d+)(?:/|$)").expect("valid regex"))
}

/// Reads the owners out of a cgroup path. Paths seen through a private cgroup namespace
/// start with `/..` components; the names after them still identify the container.
pub fn identity(path: &str) -> CgroupIdentity {
    let pod_uid = pod_pattern().captures(path).map(|c| c[1].replace('_', "-"));
    let container_id = path
        .rsplit('/')
        .find(|segment| !segment.is_empty())
        .and_then(|last| container_pattern().captures(last))
        .map(|c| c[1].to_string());
    let slurm_job = slurm_pattern().captures(path).map(|c| c[1].to_string());
    CgroupIdentity {
        pod_uid,
        container_id,
        slurm_job,
    }
}

/// Whether the path was shown relative to a private cgroup namespace (`/../..`), so it cannot
/// be found under the host's cgroup mount.
pub fn is_outside_namespace(path: &str) -> bool {
    path.starts_with("/..")
}

/// CFS throttling counters of a cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuThrottling {
    /// Enforcement periods elapsed with the quota in force.
    pub periods: u64,
    /// Periods in which the cgroup ran out of quota.
    pub throttled_periods: u64,
    /// Time the cgroup's tasks spent throttled, in seconds.
    pub throttled_seconds: f64,
}

/// Parses `cpu.stat`: v2 (`throttled_usec`) or v1 (`throttled_time`, nanoseconds).
pub fn parse_cpu_stat(text: &str) -> Result<CpuThrottling, String> {
    let value = |key: &str| -> Result<Option<u64>, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(' ')))
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("{key} is not a number"))
            })
            .transpose()
    };
    let throttled_seconds = match (value("throttled_usec")?, value("throttled_time")?) {
        (Some(usec), _) => usec as f64 / 1e6,
        (None, Some(nsec)) => nsec as f64 / 1e9,
        (None, None) => return Err("no throttled_usec or throttled_time".into()),
    };
    Ok(CpuThrottling {
        periods: value("nr_periods")?.ok_or("no nr_periods")?,
        throttled_periods: value("nr_throttled")?.ok_or("no nr_throttled")?,
        throttled_seconds,
    })
}

/// Parses v2 `cpu.max` (`max 100000` or `<quota> <period>`) into a quota in cores.
pub fn parse_cpu_max(text: &str) -> Result<Option<f64>, String> {
    let mut parts = text.split_ascii_whitespace();
    let quota = parts.next().ok_or("empty cpu.max")?;
    let period: f64 = parts
        .next()
        .unwrap_or("100000")
        .parse()
        .map_err(|_| format!("bad cpu.max {text:?}"))?;
    if quota == "max" {
        return Ok(None);
    }
    let quota: f64 = quota.parse().map_err(|_| format!("bad cpu.max {text:?}"))?;
    if period <= 0.0 {
        return Err(format!("bad cpu.max {text:?}"));
    }
    Ok(Some(quota / period))
}

/// v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` into a quota in cores (`-1`: none).
pub fn parse_cfs_quota(quota: &str, period: &str) -> Result<Option<f64>, String> {
    let quota: i64 = quota
        .trim()
        .parse()
        .map_err(|_| format!("bad cfs_quota_us {quota:?}"))?;
    let period: i64 = period
        .trim()
        .parse()
        .map_err(|_| format!("bad cfs_period_us {period:?}"))?;
    match (quota, period) {
        (q, _) if q < 0 => Ok(None),
        (_, p) if p <= 0 => Err("cfs_period_us is not positive".into()),
        (q, p) => Ok(Some(q as f64 / p as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    const CID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100";

    #[test]
    fn systemd_driver_containerd_on_cgroup_v2() {
        let text = format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n", UID.replace('-', "_"));
        let paths = parse_proc_cgroup(&text).unwrap();
        let who = identity(paths.naming_path().unwrap());
        assert_eq!(who.pod_uid.as_deref(), Some(UID));
        assert_eq!(who.container_id.as_deref(), Some(CID));
        assert_eq!(who.slurm_job, None);
    }

    #[test]
    fn cgroupfs_driver_on_cgroup_v1() {
        let text = format!("12:memory:/kubepods/burstable/pod{UID}/{CID}\n4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n0::/\n");
        let paths = parse_proc_cgroup(&text).unwrap();
        assert_eq!(paths.unified.as_deref(), Some("/"));
        assert_eq!(
            paths.cpu.as_deref(),
            Some(format!("/kubepods/burstable/pod{UID}/{CID}").as_str())
        );
        let who = identity(paths.naming_path().unwrap());
        assert_eq!(who.pod_uid.as_deref(), Some(UID));
        assert_eq!(who.container_id.as_deref(), Some(CID));
    }

    #[test]
    fn crio_docker_and_private_namespaces() {
        let crio = identity(&format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope",
            UID.replace('-', "_")
        ));
        assert_eq!(
            (crio.pod_uid.as_deref(), crio.container_id.as_deref()),
            (Some(UID), Some(CID))
        );
        let docker = identity(&format!("/system.slice/docker-{CID}.scope"));
        assert_eq!(
            (docker.pod_uid, docker.container_id.as_deref()),
            (None, Some(CID))
        );
        let docker_v1 = identity(&format!("/docker/{CID}"));
        assert_eq!(docker_v1.container_id.as_deref(), Some(CID));
        let namespaced = format!(
            "/../../kubepods-besteffort-pod{}.slice/cri-containerd-{CID}.scope",
            UID.replace('-', "_")
        );
        assert!(is_outside_namespace(&namespaced));
        assert_eq!(identity(&namespaced).pod_uid.as_deref(), Some(UID));
        assert!(!is_outside_namespace("/kubepods.slice"));
    }

    #[test]
    fn slurm_jobs_on_v1_and_v2() {
        assert_eq!(
            identity("/slurm/uid_1000/job_4242/step_0/task_0")
                .slurm_job
                .as_deref(),
            Some("4242")
        );
        assert_eq!(
            identity("/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0")
                .slurm_job
                .as_deref(),
            Some("77")
        );
        assert_eq!(
            identity("/user.slice/user-1000.slice/session-3.scope"),
            CgroupIdentity::default()
        );
    }

    #[test]
    fn malformed_proc_cgroup() {
        assert!(parse_proc_cgroup("").is_err());
        assert!(parse_proc_cgroup("garbage\n").is_err());
        assert!(parse_proc_cgroup("3:memory:/x\n").is_err());
    }

    #[test]
    fn throttling_counters_v2_and_v1() {
        let v2 = parse_cpu_stat("usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 50\nnr_throttled 20\nthrottled_usec 1500000\n").unwrap();
        assert_eq!(
            v2,
            CpuThrottling {
                periods: 50,
                throttled_periods: 20,
                throttled_seconds: 1.5
            }
        );
        let v1 =
            parse_cpu_stat("nr_periods 10\nnr_throttled 5\nthrottled_time 2500000000\n").unwrap();
        assert_eq!(v1.throttled_seconds, 2.5);
        assert!(parse_cpu_stat("usage_usec 1\n").is_err());
        assert!(parse_cpu_stat("nr_periods x\nnr_throttled 1\nthrottled_usec 1\n").is_err());
    }

    #[test]
    fn quotas() {
        assert_eq!(parse_cpu_max("max 100000\n").unwrap(), None);
        assert_eq!(parse_cpu_max("250000 100000\n").unwrap(), Some(2.5));
        assert!(parse_cpu_max("").is_err());
        assert!(parse_cpu_max("x 100").is_err());
        assert_eq!(parse_cfs_quota("-1\n", "100000\n").unwrap(), None);
        assert_eq!(parse_cfs_quota("50000", "100000").unwrap(), Some(0.5));
        assert!(parse_cfs_quota("1", "0").is_err());
    }
}
