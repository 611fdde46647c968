//! Every sentence the analysis says: figures as people read them, and each part of a
//! lost-time split ([`Reason`]) as a sentence. The arithmetic builds typed reasons; only
//! this module words them.

use crate::snapshot::{InputSource, Reader, Reason, RemoteSeen};

/// Bytes per second (`310 MB/s`).
pub fn per_second(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.1} GB/s", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB/s", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB/s", b / 1e3),
        b => format!("{b:.0} B/s"),
    }
}

/// A share as a whole percentage (`62 %`).
pub fn percent(share: f64) -> String {
    format!("{:.0} %", 100.0 * share)
}

/// Who received a job's traffic: its own namespace's interface, or the node's (a job in the
/// node's namespace).
pub fn job_namespace(interface: Option<&str>) -> String {
    match interface {
        Some(interface) => format!("the job's network namespace ({interface})"),
        None => "the node's physical interfaces (the job shares the node's namespace)".into(),
    }
}

/// One part of a split, in a sentence.
pub fn reason(reason: &Reason) -> String {
    match reason {
        Reason::Synchronizing { seen, drained } => format!(
            "the main thread waited for the GPU (synchronizing) in {} of the samples{}",
            percent(*seen),
            drained.map_or(String::new(), |d| format!(
                "; the GPU then idles while the loop's Python runs on the queue it drained ({} of the Python it idled in)",
                percent(d)
            ))
        ),
        Reason::InCollectives { seen } => format!(
            "the main thread waited for its peers in collectives in {} of the samples",
            percent(*seen)
        ),
        Reason::Python {
            seen,
            waiting_for_others,
        } => format!(
            "the main thread ran the loop's own Python in {} of the samples{}",
            percent(*seen),
            waiting_for_others.map_or(String::new(), |w| format!(
                ", waiting for CPUs others took {} of that time",
                percent(w)
            ))
        ),
        Reason::LoadsItsOwnData { seen } => format!(
            "the main thread loads its own data (no loader workers) in {} of the samples, computing",
            percent(*seen)
        ),
        Reason::LoaderWait {
            seen,
            workers,
            computing,
            in_kernel,
            waiting_for_cpu,
            others_caused,
            blocked,
            sleeping,
            asleep_on_input,
        } => format!(
            "the main thread waited for its loader in {} of the samples; its {workers:.0} workers computed {} ({} in system calls), waited for a CPU {}{}, were blocked {} and slept {} of the time{}",
            percent(*seen),
            percent(*computing),
            percent(*in_kernel),
            percent(*waiting_for_cpu),
            others_caused.map_or(String::new(), |o| format!(
                " ({} of it caused by others)",
                percent(o)
            )),
            percent(*blocked),
            percent(*sleeping),
            asleep_on_input.filter(|_| *sleeping >= 0.005).map_or(String::new(), |input| format!(
                " ({} waiting for input, the rest on their own queues or nothing: seen in their system calls)",
                percent(input)
            ))
        ),
        Reason::Input {
            reader,
            source,
            remote,
        } => {
            let who = match reader {
                Reader::MainThread => "the main thread (no loader workers)",
                Reader::Workers => "the workers",
            };
            let from = match source {
                InputSource::LocalStorage => {
                    "from local storage (the node's disks are loaded)".to_string()
                }
                InputSource::Remote => format!(
                    "from a remote source: the node's disks are quiet (a socket, a network or FUSE filesystem, an object store){}",
                    remote_detail(remote)
                ),
            };
            format!("input read by {who} comes {from}")
        }
        Reason::NoStacks => {
            "no Python stacks to observe: the idle time is split by the counter rules' scores"
                .into()
        }
        Reason::OthersWork { share } => {
            format!("other processes did {} of the GPU's work", percent(*share))
        }
        Reason::BusyFromSyncs { busy, backlog: false } => format!(
            "the device reports no utilization (a MIG slice): the GPU is taken as busy while the loop waited for it, {} of the samples (at least that busy; the idle time and its causes are at most what is shown)",
            percent(*busy)
        ),
        Reason::BusyFromSyncs { busy, backlog: true } => format!(
            "the device reports no utilization (a MIG slice): its syncs found the GPU more than a step of the loop behind (it never ran dry from a span's first upload to its sync), or the launch windows in which the loop launched found CUDA's launch queue full (a thousand kernels behind from a window's start to its last held launch), and it is taken as that busy, {} of the time",
            percent(*busy)
        ),
        Reason::LaunchQueueFull { share } => format!(
            "the loop waited in kernel launches for room in CUDA's launch queue {} of the time (the GPU a thousand kernels behind): GPU time, though the line the stacks read is the loop's own",
            percent(*share)
        ),
        Reason::LoaderWorkedThrough { share } => format!(
            "the loop waited for its loader {} of the time while the GPU still worked through kernels queued before (the batch's upload after each wait waited for them): GPU time, not input's",
            percent(*share)
        ),
        Reason::FollowedThread { tid } => format!(
            "the samples are of thread {tid}, which drives the GPU while the main thread touches no CUDA (the training function runs on a thread of its own)"
        ),
        Reason::DegradedLink { bandwidth, share } => format!(
            "the GPU's PCIe link runs at {} of its maximum bandwidth: the idle time nothing else explains ({} of the time) is the link's",
            percent(*bandwidth),
            percent(*share)
        ),
        Reason::SlowCopies { bandwidth, share } => format!(
            "the GPU's PCIe link runs at {} of its maximum bandwidth: the process's copies to and from the GPU took {} of the time longer than across a full link, the GPU waiting for them",
            percent(*bandwidth),
            percent(*share)
        ),
        Reason::SpunForPeers { share } => format!(
            "the process issues NCCL collectives and its GPU was busier, with its SMs empty, than its job's least busy rank (or the host waited in the driver while they crossed a saturated link, or went to its job's ranks on other nodes): it spun {} of the time in the collectives, waiting for its peers or the wire",
            percent(*share)
        ),
        Reason::PipelineBubble { share, microbatches } => format!(
            "the process is a pipeline stage (NCCL sends and receives, about {microbatches:.0} microbatches a step): its schedule leaves it waiting for the other stages, its GPU spinning in the receive kernels, {} of the time (inferred from the schedule: the bubble of two stages)",
            percent(*share)
        ),
        Reason::PeersAsBusy { at_most, seen } => format!(
            "the main thread waited in collectives while its GPU ran its queued work: its peers' GPUs were as busy, so collectives cost it at most {} of the time, not {}",
            percent(*at_most),
            percent(*seen)
        ),
    }
}

/// Where remote input comes from, as the network figures name it: the NFS mount read most
/// (with its round trip), else the network or FUSE filesystems the job has mounted, and the
/// job's ingress.
fn remote_detail(remote: &RemoteSeen) -> String {
    if let Some((mount_point, device, rtt)) = &remote.nfs {
        return format!(
            "; NFS {mount_point} ({device}) answers READs in {:.1} ms",
            1000.0 * rtt
        );
    }
    let mut detail = String::new();
    if !remote.mounts.is_empty() {
        detail += &format!(
            "; the job has network or FUSE filesystems mounted: {}",
            remote.mounts.join(", ")
        );
    }
    if let Some((interface, bytes)) = &remote.ingress {
        detail += &format!(
            "; {} received {}",
            job_namespace(interface.as_deref()),
            per_second(*bytes)
        );
    }
    detail
}
