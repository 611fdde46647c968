//! Network and FUSE filesystem mounts from `mountstats`, with the NFS statistics of
//! node_exporter's mountstats collector: the `bytes:` line and the per-op lines
//! (`READ: ops transmissions timeouts bytes_sent bytes_received queue_ms rtt_ms execute_ms`).

use procfs_core::process::MountStats;

use crate::snapshot::{NfsCounters, NfsOpCounters, NfsOpRates, NfsRates, NFS_OPERATIONS};
use crate::source::parse_with_procfs;

/// Filesystem types whose data comes over the network. FUSE filesystems (`fuse.s3fs`,
/// `fuse.gcsfuse`, `fuse.mountpoint-s3`, ...) are matched by their `fuse` prefix: most that
/// hold training data are object-store or remote clients (`fuseblk`, a local disk, is not).
const NETWORK_FILESYSTEMS: [&str; 16] = [
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "afs",
    "wekafs",
    "orangefs",
    "pvfs2",
    "juicefs",
];

/// Whether `fstype` is a network or FUSE filesystem.
pub fn is_network_filesystem(fstype: &str) -> bool {
    NETWORK_FILESYSTEMS.contains(&fstype) || fstype == "fuse" || fstype.starts_with("fuse.")
}

/// The network and FUSE filesystems a process's mount namespace holds, from its
/// `mountinfo` (`36 35 0:52 / /data rw - nfs4 10.0.0.5:/datasets rw,...`): what is mounted
/// and where the process sees it. Malformed lines are skipped: the file is read for naming,
/// never for figures. Parsed by hand, not by procfs-core: the library builds two option maps
/// per line, 4.5x the cost on a 300-mount namespace, read for every GPU process every tick
/// (docs/development.md).
pub fn parse_mountinfo(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let mount_point = head.split_ascii_whitespace().nth(4)?;
            let mut tail = tail.split_ascii_whitespace();
            let (fstype, device) = (tail.next()?, tail.next()?);
            is_network_filesystem(fstype).then(|| {
                (
                    device.to_string(),
                    fstype.to_string(),
                    unescape(mount_point),
                )
            })
        })
        .collect()
}

/// A mount point as the kernel writes it in mountinfo and mountstats, blanks escaped as
/// `\040` (procfs-core leaves them escaped).
fn unescape(mount_point: &str) -> String {
    mount_point.replace("\\040", " ")
}

/// A mount as mountstats lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountEntry {
    /// What is mounted.
    pub device: String,
    /// Where.
    pub mount_point: String,
    /// Filesystem type.
    pub fstype: String,
    /// NFS statistics, for an NFS mount with a statistics block.
    pub nfs: Option<NfsCounters>,
}

/// Parses mountstats (procfs-core), keeping the network and FUSE filesystems and, of an NFS
/// mount's statistics, the bytes read from the server and the operations in
/// [`NFS_OPERATIONS`] (in that order).
pub fn parse_mountstats(text: &str) -> Result<Vec<MountEntry>, String> {
    let mounts: MountStats = parse_with_procfs(text)?;
    Ok(mounts
        .0
        .into_iter()
        .filter(|mount| is_network_filesystem(&mount.fs))
        .map(|mount| MountEntry {
            device: mount.device.unwrap_or_default(),
            mount_point: unescape(&mount.mount_point.to_string_lossy()),
            nfs: mount.statistics.map(|statistics| NfsCounters {
                read_bytes: statistics.bytes.server_read,
                operations: NFS_OPERATIONS
                    .iter()
                    .filter_map(|name| {
                        let op = statistics.per_op_stats.get(*name)?;
                        Some(NfsOpCounters {
                            name: name.to_string(),
                            requests: op.operations,
                            rtt_ms: op.cum_resp_time.as_millis() as u64,
                            execute_ms: op.cum_total_req_time.as_millis() as u64,
                        })
                    })
                    .collect(),
            }),
            fstype: mount.fs,
        })
        .collect())
}

/// An NFS mount's figures between two reads `seconds` apart; `None` when a counter went
/// backwards (remounted).
pub fn nfs_rates(before: &NfsCounters, now: &NfsCounters, seconds: f64) -> Option<NfsRates> {
    let read = now.read_bytes.checked_sub(before.read_bytes)?;
    let mut operations = Vec::new();
    for op in &now.operations {
        let Some(previous) = before.operations.iter().find(|p| p.name == op.name) else {
            continue;
        };
        let requests = op.requests.checked_sub(previous.requests)? as f64;
        let rtt = op.rtt_ms.checked_sub(previous.rtt_ms)? as f64 / 1000.0;
        let execute = op.execute_ms.checked_sub(previous.execute_ms)? as f64 / 1000.0;
        let mean = |total: f64| {
            if requests > 0.0 {
                total / requests
            } else {
                0.0
            }
        };
        operations.push(NfsOpRates {
            name: op.name.clone(),
            per_second: requests / seconds,
            rtt_seconds: mean(rtt),
            execute_seconds: mean(execute),
        });
    }
    Some(NfsRates {
        read_bytes_per_second: read as f64 / seconds,
        operations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTSTATS: &str = "device rootfs mounted on / with fstype rootfs
device proc mounted on /proc with fstype proc
device 10.0.0.5:/datasets mounted on /mnt/data\\040sets with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp
\tage:\t4242
\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=32768,bsize=0,namlen=255
\tsec:\tflavor=1,pseudoflavor=1
\tevents:\t0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
\tbytes:\t1000 0 0 0 5000000 0 0 0
\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)
\txprt:\ttcp 0 1 2 0 11 37 37 0 13 0 2 0 0
\tper-op statistics
\t        NULL: 0 0 0 0 0 0 0 0
\t        READ: 100 100 0 14000 5012800 20 2500 2600 0
\t     GETATTR: 40 40 0 6000 9000 1 80 85 0
\t      LOOKUP: 10 10 0 1500 2600 0 30 31 2
\t       WRITE: 0 0 0 0 0 0 0 0 0

device s3fs mounted on /mnt/bucket with fstype fuse.s3fs
device /dev/sdb1 mounted on /mnt/usb with fstype fuseblk
";

    #[test]
    fn keeps_network_and_fuse_mounts_with_their_nfs_figures() {
        let mounts = parse_mountstats(MOUNTSTATS).unwrap();
        assert_eq!(mounts.len(), 2);
        let nfs = &mounts[0];
        assert_eq!(nfs.device, "10.0.0.5:/datasets");
        assert_eq!(nfs.mount_point, "/mnt/data sets");
        assert_eq!(nfs.fstype, "nfs4");
        let stats = nfs.nfs.as_ref().unwrap();
        assert_eq!(stats.read_bytes, 5_000_000);
        let names: Vec<&str> = stats.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["READ", "GETATTR", "LOOKUP"]);
        assert_eq!(stats.operations[0].requests, 100);
        assert_eq!(stats.operations[0].rtt_ms, 2500);
        assert_eq!(stats.operations[0].execute_ms, 2600);
        assert_eq!(mounts[1].fstype, "fuse.s3fs");
        assert_eq!(mounts[1].nfs, None);
    }

    #[test]
    fn malformed_statistics_are_errors() {
        let nfs = MOUNTSTATS
            .split("\n\n")
            .next()
            .unwrap()
            .lines()
            .skip(2)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(parse_mountstats(&nfs).is_ok());
        let bad_op = nfs.replace("READ: 100 100 0", "READ: 100 x 0");
        assert_eq!(
            parse_mountstats(&bad_op).unwrap_err(),
            "not a number: \"x\""
        );
        let short = nfs.replace("bytes:\t1000 0 0 0 5000000 0 0 0", "bytes:\t1 2");
        assert_eq!(parse_mountstats(&short).unwrap_err(), "a field is missing");
        // A block without statistics (FUSE, a local disk) needs none.
        assert_eq!(
            parse_mountstats("device sda mounted on / with fstype ext4\n").unwrap(),
            vec![]
        );
    }

    #[test]
    fn rates_are_per_second_and_per_request() {
        let before = parse_mountstats(MOUNTSTATS).unwrap()[0]
            .nfs
            .clone()
            .unwrap();
        let mut now = before.clone();
        now.read_bytes += 2_000_000;
        now.operations[0].requests += 50;
        now.operations[0].rtt_ms += 1250;
        now.operations[0].execute_ms += 1500;
        let rates = nfs_rates(&before, &now, 2.0).unwrap();
        assert_eq!(rates.read_bytes_per_second, 1_000_000.0);
        let read = rates.operation("READ").unwrap();
        assert_eq!(read.per_second, 25.0);
        assert_eq!(read.rtt_seconds, 0.025);
        assert_eq!(read.execute_seconds, 0.03);
        assert_eq!(rates.operation("GETATTR").unwrap().rtt_seconds, 0.0);
        // Remounted: counters went back.
        assert_eq!(nfs_rates(&now, &before, 1.0), None);
    }

    #[test]
    fn a_processes_network_mounts_from_its_mountinfo() {
        let mountinfo = "22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
512 498 0:61 / /data rw,relatime master:220 - nfs4 10.20.0.5:/datasets rw,vers=4.2
513 498 0:62 / /mnt/my\\040bucket rw,nosuid - fuse.s3fs s3fs rw,user_id=0
garbage line
";
        assert_eq!(
            parse_mountinfo(mountinfo),
            vec![
                ("10.20.0.5:/datasets".into(), "nfs4".into(), "/data".into()),
                ("s3fs".into(), "fuse.s3fs".into(), "/mnt/my bucket".into()),
            ]
        );
    }

    #[test]
    fn network_filesystem_types() {
        for fstype in [
            "nfs",
            "nfs4",
            "lustre",
            "fuse.gcsfuse",
            "fuse",
            "ceph",
            "cifs",
        ] {
            assert!(is_network_filesystem(fstype), "{fstype}");
        }
        for fstype in ["ext4", "xfs", "fuseblk", "overlay", "tmpfs"] {
            assert!(!is_network_filesystem(fstype), "{fstype}");
        }
    }
}
