//! The InfiniBand port a rank's transfers cross, as NCCL's IB transport uses one: the HCA
//! `NCCL_IB_HCA` names ("mlx5_1", "=mlx5_1:1"; port 1 unless given), found under
//! `<FAKE_NCCL_SYSFS or /sys>/class/infiniband/<hca>/ports/<port>/`. Its `rate` ("10 Gb/sec
//! (4X SDR)") bounds what the rank moves a second, and each transfer adds its bytes to the
//! port's `counters/port_xmit_data` and `port_rcv_data` (4-byte words, as the hardware counts
//! them), so a node's port counters show the job's collectives.
//!
//! The stub does not tell ranks on one node from ranks on others: a workload names an HCA only
//! for ranks that stand for ranks on other nodes (a real NCCL keeps a node's own ranks on
//! NVLink).

use std::fs::OpenOptions;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

/// An HCA port the rank sends and receives through.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    /// `.../ports/<port>/counters`.
    counters: PathBuf,
    /// What the port moves a second at its signalling rate.
    pub bytes_per_second: f64,
}

impl Port {
    /// The port `NCCL_IB_HCA` names, where it exists with a rate; `None` without the variable.
    pub fn from_env() -> Option<Port> {
        let names = std::env::var("NCCL_IB_HCA").ok()?;
        let sysfs = std::env::var_os("FAKE_NCCL_SYSFS")
            .map_or_else(|| PathBuf::from("/sys"), PathBuf::from);
        Port::named(&names, &sysfs)
    }

    /// The first HCA of an `NCCL_IB_HCA` list under `sysfs`.
    pub fn named(names: &str, sysfs: &std::path::Path) -> Option<Port> {
        let first = names.trim_start_matches(['=', '^']).split(',').next()?;
        let (hca, port) = match first.split_once(':') {
            Some((hca, port)) => (hca, port.parse::<u32>().ok()?),
            None => (first, 1),
        };
        let dir = sysfs
            .join("class/infiniband")
            .join(hca)
            .join("ports")
            .join(port.to_string());
        let rate = std::fs::read_to_string(dir.join("rate")).ok()?;
        let (value, unit) = rate.trim().split_once(' ')?;
        let gigabits: f64 = value.parse().ok()?;
        (unit.starts_with("Gb/sec") && gigabits > 0.0).then(|| Port {
            counters: dir.join("counters"),
            bytes_per_second: gigabits * 125e6,
        })
    }

    /// Adds `bytes` sent and as many received to the port's data counters (under a lock: the
    /// ranks of a node share their ports).
    pub fn count(&self, bytes: u64) {
        for name in ["port_xmit_data", "port_rcv_data"] {
            let _ = add_words(&self.counters.join(name), bytes / 4);
        }
    }
}

fn add_words(path: &std::path::Path, words: u64) -> std::io::Result<()> {
    // The lock is a file of its own: the counter's file is replaced on each write, and two
    // ranks locking the old and the new one would each add to the same old number.
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("lock"))?;
    // SAFETY: flock on an open descriptor; released when the file closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let now = std::fs::read_to_string(path)?
        .trim()
        .parse::<u64>()
        .unwrap_or(0)
        + words;
    // A new file renamed over the old: a reader that does not take the lock (the exporter,
    // which opens the file afresh each tick) finds the old number or the new one, never an
    // empty file, which sysfs never shows. (Truncated and rewritten, it was read empty in
    // about one reading in three; on writing over it in place, docs/development.md, the
    // slow-link check's stalls.)
    let next = path.with_extension("next");
    std::fs::write(&next, format!("{now}\n"))?;
    std::fs::rename(&next, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_port_gives_its_rate_and_counts_what_crosses_it() {
        let sysfs = std::env::temp_dir().join(format!("fake-nccl-ib-{}", std::process::id()));
        let port = sysfs.join("class/infiniband/mlx5_1/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        std::fs::write(port.join("rate"), "10 Gb/sec (4X SDR)\n").unwrap();
        std::fs::write(port.join("counters/port_xmit_data"), "100\n").unwrap();
        std::fs::write(port.join("counters/port_rcv_data"), "0\n").unwrap();
        let found = Port::named("=mlx5_1:1,mlx5_2", &sysfs).unwrap();
        assert_eq!(found.bytes_per_second, 1.25e9);
        found.count(4000);
        let read = |name: &str| std::fs::read_to_string(port.join("counters").join(name)).unwrap();
        assert_eq!(
            (read("port_xmit_data"), read("port_rcv_data")),
            ("1100\n".into(), "1000\n".into())
        );
        // Ranks sharing the port (threads here, each opening the files as a rank does) lose
        // no update to one another, though each write replaces the file.
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| (0..50).for_each(|_| found.count(400)));
            }
        });
        assert_eq!(read("port_xmit_data"), format!("{}\n", 1100 + 4 * 50 * 100));
        // No such HCA, or port: no port (the rank keeps the default bandwidth).
        assert_eq!(Port::named("mlx5_9", &sysfs), None);
        assert_eq!(Port::named("mlx5_1:2", &sysfs), None);
        std::fs::remove_dir_all(sysfs).unwrap();
    }
}
