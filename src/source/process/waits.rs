//! What a sleeping loader worker waits on: its blocking system call and the descriptor it
//! names (`/proc/<pid>/syscall`, `/proc/<pid>/fd/<n>`; the same ptrace access the stacks
//! need). A worker asleep in `recv` on a socket, or in a read of a file on a network or FUSE
//! mount, waits for remote input; one polling its index queue (a pipe) waits for the main
//! process to ask for more (back-pressure: in-order delivery, full prefetch slots); one in
//! `sleep`, a lock or anything else waits on neither. Without this, a worker's sleep could
//! only be guessed to be input, and a loader whose one slow batch holds the loop while the
//! other workers idle read as remote input.
//!
//! The parsing and the system-call tables are pure; [`WaitReader`] reads the files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::kept::KeptFiles;
use super::{read, ReadError};
use crate::snapshot::WaitTarget;
use crate::source::network::mounts::parse_mountinfo;

/// The signal `gpu_exporter_signal_supported` reports for the workers' waits.
pub const WORKER_WAITS_SIGNAL: &str = "worker_waits";

/// How long a worker's network and FUSE mount points are kept before being read again.
const MOUNTS_KEPT: Duration = Duration::from_secs(30);

/// Most descriptors of one `poll` looked at.
const MAX_POLLED: u64 = 64;

/// Parses `/proc/<pid>/syscall` of a blocked task: the call's number and its six arguments.
/// `None` for a running task (`running`) or one blocked outside a system call (`-1 sp pc`).
pub fn parse_syscall(text: &str) -> Option<(u64, [u64; 6])> {
    let mut fields = text.split_ascii_whitespace();
    let number: u64 = fields.next()?.parse().ok()?;
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some((number, args))
}

/// What a blocking system call waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// One descriptor (read, recv, accept, connect, ...).
    Fd(i32),
    /// The `pollfd` array at this address, of this many entries.
    Poll(u64, u64),
    /// The descriptors an epoll instance watches.
    Epoll(i32),
    /// Nothing that is input (a sleep, a lock, waiting for a child).
    Nothing,
}

/// System-call numbers of this architecture (x86_64 and aarch64; elsewhere nothing is told).
mod numbers {
    #[cfg(target_arch = "x86_64")]
    pub const FD_FIRST: [u64; 15] = [0, 17, 19, 295, 327, 45, 47, 299, 43, 288, 42, 1, 18, 20, 44];
    #[cfg(target_arch = "x86_64")]
    pub const POLL: [u64; 2] = [7, 271];
    #[cfg(target_arch = "x86_64")]
    pub const EPOLL: [u64; 3] = [232, 281, 441];
    #[cfg(target_arch = "aarch64")]
    pub const FD_FIRST: [u64; 14] = [
        63, 67, 65, 69, 286, 207, 212, 243, 202, 242, 203, 64, 68, 206,
    ];
    #[cfg(target_arch = "aarch64")]
    pub const POLL: [u64; 1] = [73];
    #[cfg(target_arch = "aarch64")]
    pub const EPOLL: [u64; 2] = [22, 441];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const FD_FIRST: [u64; 0] = [];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const POLL: [u64; 0] = [];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const EPOLL: [u64; 0] = [];
}

/// What the system call `number` with `args` waits on: reads, receives, writes, accepts and
/// connects name their descriptor first; poll a `pollfd` array; epoll_wait an epoll instance.
pub fn waited_on(number: u64, args: &[u64; 6]) -> Waited {
    if numbers::FD_FIRST.contains(&number) {
        Waited::Fd(args[0] as i32)
    } else if numbers::POLL.contains(&number) {
        Waited::Poll(args[0], args[1].min(MAX_POLLED))
    } else if numbers::EPOLL.contains(&number) {
        Waited::Epoll(args[0] as i32)
    } else {
        Waited::Nothing
    }
}

/// What a descriptor's link (`/proc/<pid>/fd/<n>`) names: a socket, a file on one of the
/// `remote_mounts` (network or FUSE mount points) or elsewhere, or something else (a pipe, an
/// eventfd: the loader's own queues).
pub fn target_of(link: &str, remote_mounts: &[String]) -> WaitTarget {
    if link.starts_with("socket:") {
        WaitTarget::Remote
    } else if !link.starts_with('/') {
        WaitTarget::Idle
    } else if remote_mounts.iter().any(|m| under(link, m)) {
        WaitTarget::Remote
    } else {
        WaitTarget::LocalFile
    }
}

/// Whether `path` is `mount_point` or below it.
fn under(path: &str, mount_point: &str) -> bool {
    let point = mount_point.trim_end_matches('/');
    path.strip_prefix(point)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || point.is_empty())
}

/// The descriptors of a `pollfd` array (`int fd; short events; short revents`).
pub fn polled_fds(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(8)
        .map(|entry| i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]))
        .filter(|fd| *fd >= 0)
        .collect()
}

/// The descriptors an epoll instance watches, from its fdinfo (`tfd:        7 events: ...`).
pub fn epoll_fds(fdinfo: &str) -> Vec<i32> {
    fdinfo
        .lines()
        .filter_map(|line| {
            line.strip_prefix("tfd:")?
                .split_ascii_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Reads where sleeping workers wait, keeping each worker's remote mount points a while.
pub(crate) struct WaitReader {
    procfs: PathBuf,
    mounts: HashMap<u32, (Duration, Vec<String>)>,
}

impl WaitReader {
    /// A reader below the procfs root.
    pub(crate) fn new(procfs: PathBuf) -> Self {
        WaitReader {
            procfs,
            mounts: HashMap::new(),
        }
    }

    /// Forgets the mounts of workers not in `live`.
    pub(crate) fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.mounts.retain(|pid, _| live(*pid));
    }

    /// What the sleeping worker `pid` waits on: `Ok(None)` when it is not in a system call
    /// (it woke up, or exited), `Err` when its files are refused.
    pub(crate) fn target(
        &mut self,
        pid: u32,
        now: Duration,
        kept: &mut KeptFiles,
    ) -> Result<Option<WaitTarget>, ReadError> {
        let text = kept.read(&self.procfs.join(format!("{pid}/syscall")))?;
        let Some((number, args)) = parse_syscall(&text) else {
            return Ok(None);
        };
        let fds = match waited_on(number, &args) {
            Waited::Nothing => return Ok(Some(WaitTarget::Idle)),
            Waited::Fd(fd) => vec![fd],
            Waited::Poll(address, count) => self.memory(pid, address, count * 8),
            Waited::Epoll(fd) => epoll_fds(&read(&self.procfs.join(format!("{pid}/fdinfo/{fd}")))?),
        };
        let links: Vec<String> = fds
            .iter()
            .filter_map(|fd| std::fs::read_link(self.procfs.join(format!("{pid}/fd/{fd}"))).ok())
            .map(|link| link.to_string_lossy().into_owned())
            .collect();
        if links
            .iter()
            .all(|l| l.starts_with("socket:") || !l.starts_with('/'))
        {
            return Ok(Some(best(links.iter().map(|l| target_of(l, &[])))));
        }
        let mounts = self.remote_mounts(pid, now);
        Ok(Some(best(links.iter().map(|l| target_of(l, mounts)))))
    }

    /// `length` bytes of the worker's memory at `address` (empty where unreadable).
    fn memory(&self, pid: u32, address: u64, length: u64) -> Vec<i32> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; length as usize];
        let read = std::fs::File::open(self.procfs.join(format!("{pid}/mem")))
            .and_then(|mem| mem.read_at(&mut bytes, address));
        match read {
            Ok(n) => polled_fds(&bytes[..n]),
            Err(_) => Vec::new(),
        }
    }

    fn remote_mounts(&mut self, pid: u32, now: Duration) -> &[String] {
        let stale = self
            .mounts
            .get(&pid)
            .is_none_or(|(at, _)| now.saturating_sub(*at) >= MOUNTS_KEPT);
        if stale {
            let points = read(&self.procfs.join(format!("{pid}/mountinfo")))
                .map(|text| {
                    parse_mountinfo(&text)
                        .into_iter()
                        .map(|(_, _, point)| point)
                        .collect()
                })
                .unwrap_or_default();
            self.mounts.insert(pid, (now, points));
        }
        &self.mounts[&pid].1
    }
}

/// The most telling of several targets (a poll over a pipe and a socket waits for the socket).
fn best(targets: impl Iterator<Item = WaitTarget>) -> WaitTarget {
    targets.max().unwrap_or(WaitTarget::Idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_files_parse_blocked_running_and_outside() {
        let text = "7 0x7ffd1c0 0x1 0x1388 0x0 0x0 0x0 0x7ffd1b8 0x7f3a9c\n";
        assert_eq!(
            parse_syscall(text),
            Some((7, [0x7ffd1c0, 1, 0x1388, 0, 0, 0]))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd1b8 0x7f3a9c\n"), None);
        assert_eq!(parse_syscall("7 0x1"), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn system_calls_name_what_they_wait_on() {
        let args = [5, 0x1000, 3, 0, 0, 0];
        assert_eq!(waited_on(45, &args), Waited::Fd(5)); // recvfrom
        assert_eq!(waited_on(0, &args), Waited::Fd(5)); // read
        assert_eq!(waited_on(7, &args), Waited::Poll(5, 0x1000.min(MAX_POLLED))); // poll
        assert_eq!(waited_on(281, &args), Waited::Epoll(5)); // epoll_pwait
        assert_eq!(waited_on(230, &args), Waited::Nothing); // clock_nanosleep
        assert_eq!(waited_on(202, &args), Waited::Nothing); // futex
    }

    #[test]
    fn descriptors_are_sockets_remote_or_local_files_or_queues() {
        let remote = vec!["/mnt/bucket".to_string(), "/data".to_string()];
        assert_eq!(target_of("socket:[48213]", &remote), WaitTarget::Remote);
        assert_eq!(
            target_of("/data/train/0001.jpg", &remote),
            WaitTarget::Remote
        );
        assert_eq!(target_of("/database/x", &remote), WaitTarget::LocalFile);
        assert_eq!(target_of("/scratch/x.jpg", &remote), WaitTarget::LocalFile);
        assert_eq!(target_of("pipe:[99]", &remote), WaitTarget::Idle);
        assert_eq!(target_of("anon_inode:[eventfd]", &remote), WaitTarget::Idle);
        // A poll over the index queue's pipe and a socket waits for the socket.
        assert_eq!(
            best(["pipe:[1]", "socket:[2]"].iter().map(|l| target_of(l, &[]))),
            WaitTarget::Remote
        );
    }

    #[test]
    fn poll_arrays_and_epoll_fdinfo_list_their_descriptors() {
        let mut bytes = Vec::new();
        for fd in [4i32, -1, 9] {
            bytes.extend_from_slice(&fd.to_ne_bytes());
            bytes.extend_from_slice(&[1, 0, 0, 0]);
        }
        assert_eq!(polled_fds(&bytes), vec![4, 9]);
        let fdinfo = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\ntfd:        7 events:       19 data:                7  pos:0 ino:2a4c sdev:8\ntfd:       12 events:       19 data:                c  pos:0 ino:2a4d sdev:8\n";
        assert_eq!(epoll_fds(fdinfo), vec![7, 12]);
    }
}
