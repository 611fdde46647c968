//! Pure parsers of the per-process files under /proc/<pid>.

pub use procfs_core::process::Io;

use crate::source::parse_ascii_with_procfs;

/// The fields of `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`) the exporter uses.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stat {
    /// One-letter state: R running, S sleeping, D uninterruptible (I/O) wait, Z zombie, ...
    pub state: char,
    /// Parent process id.
    pub ppid: u32,
    /// User-mode CPU time in clock ticks.
    pub utime: u64,
    /// Kernel-mode CPU time in clock ticks.
    pub stime: u64,
    /// CPU time of its exited and reaped children, in clock ticks (`cutime` + `cstime`).
    pub children_ticks: u64,
    /// Threads in the process.
    pub threads: u32,
    /// Start time in clock ticks after boot: with the pid, identifies a process across reuse.
    pub starttime: u64,
    /// CPU the task last ran on.
    pub processor: u32,
    /// Block-I/O delay in clock ticks (delay accounting; 0 when it is off).
    pub blkio_ticks: u64,
}

/// Parses a stat line. The command name is in parentheses and may itself contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Result<Stat, String> {
    let close = line.rfind(')').ok_or("no command name")?;
    let fields: Vec<&str> = line[close + 1..].split_ascii_whitespace().collect();
    // fields[0] is field 3 (state) of proc(5).
    let field = |n: usize| -> Result<&str, String> {
        fields
            .get(n - 3)
            .copied()
            .ok_or_else(|| format!("field {n} missing"))
    };
    let number = |n: usize| -> Result<u64, String> {
        let text = field(n)?;
        text.parse()
            .map_err(|_| format!("field {n} is not a number: {text:?}"))
    };
    Ok(Stat {
        state: field(3)?.chars().next().ok_or("empty state")?,
        ppid: number(4)? as u32,
        utime: number(14)?,
        stime: number(15)?,
        children_ticks: number(16)?.saturating_add(number(17)?),
        threads: number(20)? as u32,
        starttime: number(22)?,
        processor: number(39)? as u32,
        // Field 42 exists since Linux 2.6.18.
        blkio_ticks: number(42).unwrap_or(0),
    })
}

/// The fields of `/proc/<pid>/status` the exporter uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// Voluntary context switches (the task waited: I/O, locks, sleeps).
    pub voluntary_switches: u64,
    /// Involuntary context switches (the scheduler took the CPU away).
    pub involuntary_switches: u64,
    /// CPUs the process may run on.
    pub allowed_cpus: Vec<u32>,
    /// Real user id (absent from a malformed or truncated file).
    pub uid: Option<u32>,
    /// Resident memory in bytes (`VmRSS`; absent for zombies).
    pub resident_bytes: Option<u64>,
}

/// Parses `/proc/<pid>/status`; every field used is required.
pub fn parse_status(text: &str) -> Result<Status, String> {
    // One pass over the ~55 lines (this is read for every rank on every tick).
    let (mut voluntary, mut involuntary, mut cpus) = (None, None, None);
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "voluntary_ctxt_switches" => voluntary = Some(value),
            "nonvoluntary_ctxt_switches" => involuntary = Some(value),
            "Cpus_allowed_list" => cpus = Some(value),
            "Uid" => status.uid = value.split_whitespace().next().and_then(|u| u.parse().ok()),
            "VmRSS" => {
                status.resident_bytes = value
                    .strip_suffix("kB")
                    .and_then(|kib| kib.trim().parse::<u64>().ok())
                    .map(|kib| kib * 1024)
            }
            _ => {}
        }
    }
    let count = |key: &str, text: Option<&str>| -> Result<u64, String> {
        let text = text.ok_or_else(|| format!("no {key}"))?;
        text.parse()
            .map_err(|_| format!("{key} is not a number: {text:?}"))
    };
    status.voluntary_switches = count("voluntary_ctxt_switches", voluntary)?;
    status.involuntary_switches = count("nonvoluntary_ctxt_switches", involuntary)?;
    status.allowed_cpus = parse_cpu_list(cpus.ok_or("no Cpus_allowed_list")?)?;
    Ok(status)
}

/// The (voluntary, involuntary) context switches of `/proc/<pid>/status`, searched from its
/// end, where the kernel writes them (followed on some kernels by a few lines of x86 thread
/// features).
pub fn parse_switches(text: &str) -> Option<(u64, u64)> {
    let (mut voluntary, mut involuntary) = (None, None);
    for line in text.lines().rev() {
        if let Some((key, value)) = line.split_once(':') {
            match key {
                "voluntary_ctxt_switches" => voluntary = value.trim().parse().ok(),
                "nonvoluntary_ctxt_switches" => involuntary = value.trim().parse().ok(),
                _ => {}
            }
        }
        if voluntary.is_some() && involuntary.is_some() {
            break;
        }
    }
    voluntary.zip(involuntary)
}

/// The boot time in seconds since the epoch, from the `btime` line of `/proc/stat`.
pub fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Parses a CPU list like `0-3,8,10-11` (the kernel's cpulist format).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bound = |b: &str| {
            b.parse::<u32>()
                .map_err(|_| format!("bad CPU list {text:?}"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (bound(first)?, bound(last)?);
                if last < first || last - first > 65_536 {
                    return Err(format!("bad CPU range {part:?}"));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(bound(part)?),
        }
    }
    Ok(cpus)
}

/// Parses `/proc/<pid>/io` (procfs-core). The exporter reads `read_bytes` (bytes the process
/// caused to be fetched from storage, page-cache hits excluded) and `write_bytes` (bytes it
/// caused to be sent to storage).
pub fn parse_io(text: &str) -> Result<Io, String> {
    parse_ascii_with_procfs(text)
}

/// The command name of a stat line: between the first `(` and the last `)`.
pub fn parse_comm(line: &str) -> Option<&str> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    line.get(open + 1..close)
}

/// Parses a `schedstat` file (`run ns, run-queue wait ns, timeslices`): the nanoseconds the
/// task has waited runnable for a CPU (readable for any process, no privilege needed).
pub fn parse_schedstat_wait(text: &str) -> Result<u64, String> {
    let wait = text
        .split_ascii_whitespace()
        .nth(1)
        .ok_or("schedstat: fewer than 2 fields")?;
    wait.parse()
        .map_err(|_| format!("schedstat: not a number: {wait:?}"))
}

/// Parses a `children` file: the pids of a task's children, space separated.
pub fn parse_children(text: &str) -> Result<Vec<u32>, String> {
    text.split_ascii_whitespace()
        .map(|p| p.parse().map_err(|_| format!("bad pid {p:?}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (python3 (main)) S 4200 4242 4200 0 -1 4194560 12000 0 5 0 1500 250 0 0 20 0 24 0 987654 5000000000 300000 18446744073709551615 1 1 0 0 0 0 0 16781312 1073757422 0 0 0 17 7 0 0 33 0 0 0 0 0 0 0 0 0 0";

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 4200);
        assert_eq!((stat.utime, stat.stime), (1500, 250));
        assert_eq!(stat.threads, 24);
        assert_eq!(stat.starttime, 987654);
        assert_eq!(stat.processor, 7);
        assert_eq!(stat.blkio_ticks, 33);
    }

    #[test]
    fn malformed_stat_lines_are_errors() {
        for bad in ["", "12 no-parens S 1", "12 (x) S 1 2 3", "12 (x) S x 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"] {
            assert!(parse_stat(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn status_switches_and_allowed_cpus() {
        let status = parse_status("Name:\tpython3\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n").unwrap();
        assert_eq!(status.voluntary_switches, 150);
        assert_eq!(status.involuntary_switches, 7);
        assert_eq!(status.allowed_cpus, vec![0, 1, 2, 3, 8]);
        assert_eq!((status.uid, status.resident_bytes), (None, None));
        let full = parse_status("Uid:\t1000\t1000\t1000\t1000\nVmRSS:\t  204800 kB\nCpus_allowed_list:\t0\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t1\n").unwrap();
        assert_eq!(
            (full.uid, full.resident_bytes),
            (Some(1000), Some(200 << 20))
        );
        assert!(parse_status("Name:\tx\n").is_err());
        assert!(parse_status(
            "Cpus_allowed_list:\t0\nvoluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"
        )
        .is_err());
    }

    #[test]
    fn switches_alone_are_read_from_the_end() {
        let text = "Name:\tpt_data_worker\nCpus_allowed_list:\t0-3\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\nx86_Thread_features:\t\nx86_Thread_features_locked:\t\n";
        assert_eq!(parse_switches(text), Some((150, 7)));
        assert_eq!(
            parse_switches("Name:\tx\nvoluntary_ctxt_switches:\t1\n"),
            None
        );
        assert_eq!(
            parse_switches("voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"),
            None
        );
    }

    #[test]
    fn boot_time() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu  1 2 3\n"), None);
        assert_eq!(parse_boot_time("btime x\n"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-1,4-5\n").unwrap(), vec![0, 1, 4, 5]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        for bad in ["a", "3-1", "0-", "0-99999999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn io_and_children() {
        let io = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 3\n";
        let io = parse_io(io).unwrap();
        assert_eq!((io.read_bytes, io.write_bytes), (4096, 8192));
        assert_eq!(
            parse_io("rchar: 10\nread_bytes: 4096\n").unwrap_err(),
            "a field is missing"
        );
        assert!(parse_io("rchar: x\n").unwrap_err().contains("\"x\""));
        // Found by the fuzz test: the library panicked on a key ending in a wide character.
        assert_eq!(parse_io("rchar∞ 1\n").unwrap_err(), "not ASCII");
        assert_eq!(parse_comm("812 (updatedb) S 1 812"), Some("updatedb"));
        assert_eq!(parse_comm("9 (a (b) c) R 1"), Some("a (b) c"));
        assert_eq!(parse_comm("9 nothing"), None);
        assert_eq!(parse_children("12 13 \n").unwrap(), vec![12, 13]);
        assert_eq!(parse_children("").unwrap(), Vec::<u32>::new());
        assert!(parse_children("12 x").is_err());
    }
}
