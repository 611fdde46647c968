//! The idle time the loop spent waiting for its loader, by what the workers' time went to.

use super::{add, cpu_wait_caused_by_others, note};
use crate::analysis::{Cause, InputSource, Kind, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Reader, Reason, RemoteSeen};

/// Whether the node's storage shows load: half of any storage threshold.
pub(super) fn storage_busy(w: &WindowFigures, t: &Thresholds) -> Option<bool> {
    let figures = [
        w.disk_util.map(|u| u >= 0.5 * t.disk_util_high),
        w.iowait.map(|u| u >= 0.5 * t.iowait_high),
        w.psi_io.map(|u| u >= 0.5 * t.psi_io_high),
    ];
    figures.iter().flatten().copied().reduce(|a, b| a || b)
}

/// The idle time the loop spent waiting for its loader (`share` of the window, `seen` of the
/// main thread's samples), by what the workers did.
pub(super) fn split_loader(
    lost: &mut LostTime,
    w: &WindowFigures,
    t: &Thresholds,
    share: f64,
    seen: f64,
) {
    if seen <= 0.0 {
        return;
    }
    let workers = w.workers.unwrap_or(0.0);
    if workers < 0.5 {
        // The main thread fetches its own samples (num_workers=0): it computes or it waits.
        if w.busiest_thread.is_some_and(|b| b >= t.quiet_below) {
            add(lost, Cause::Kind(Kind::HostBound), share);
            note(lost, seen, Reason::LoadsItsOwnData { seen });
        } else {
            add_input(lost, w, t, (share, seen), (1.0, 0.0), Reader::MainThread);
        }
        return;
    }
    let per_worker = |v: Option<f64>| v.unwrap_or(0.0) / workers;
    let computing = per_worker(w.workers_cpu).clamp(0.0, 1.0);
    // CPU in the kernel is the I/O side of the work (reads, receives), not decoding.
    let in_kernel = per_worker(w.workers_system_cpu).clamp(0.0, computing);
    // The job's wait for a CPU less the loop threads' part: the workers'.
    let workers_wait = w.cpu_wait.map(|all| all - w.loop_cpu_wait.unwrap_or(0.0));
    let wait_cpu = per_worker(workers_wait).clamp(0.0, 1.0 - computing);
    let blocked_workers = match (w.workers_blkio, w.workers_disk_wait) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let blocked = per_worker(blocked_workers).clamp(0.0, 1.0 - computing - wait_cpu);
    let sleeping = 1.0 - computing - wait_cpu - blocked;
    // Of the sleep, what waited for input: observed in the sleepers' system calls (a socket,
    // a file), the rest waits on the loader's own queues or on nothing (back-pressure: in
    // order, one slow batch holds the loop while the others' slots are full) and costs the
    // loop nothing itself. Where the calls cannot be read, a reader's sleep is taken for
    // input (inferred).
    let seen_asleep = w.workers_asleep.filter(|a| a.sampled >= MIN_ASLEEP_SEEN);
    let (asleep_on_input, asleep_on_remote) = seen_asleep.map_or((sleeping, sleeping), |a| {
        let of = |n: u32| sleeping * f64::from(n) / f64::from(a.sampled);
        (of(a.remote + a.local_file), of(a.remote))
    });
    let active = 1.0 - (sleeping - asleep_on_input);
    // Of the workers' wait for a CPU, the part others' processes caused is contention; the
    // rest of their time is the job's own, and splits into reading (CPU in the kernel, and the
    // waits after blocking: voluntary switches) and decoding (CPU in user space, and the waits
    // after preemption: too many workers for the CPUs). Each is a share of the workers'
    // active time (all but their idle sleep).
    let others = cpu_wait_caused_by_others(w, t);
    let own_wait = wait_cpu * (1.0 - others);
    let after_blocking = w.workers_voluntary_switches.unwrap_or(if computing > 0.0 {
        in_kernel / computing
    } else {
        0.5
    });
    // Voluntary switches come from every sleep and block: where the sleep was seen, those of
    // the sleeps not on input are not a read's. Those sleeps are few and long (one ends when
    // the loop hands the worker its next batch), reads many and short (a block a read): of
    // the switches a second, the sleeps not on input take at most their time over the
    // shortest such sleep; without the rate, the switches split as the time off a CPU does.
    let after_blocking = match seen_asleep {
        Some(_) if sleeping > 0.0 => {
            let not_input = sleeping - asleep_on_input;
            let input_switches = match w.workers_voluntary_rate {
                Some(rate) if rate > 0.0 => 1.0 - (not_input / QUEUE_SLEEP_MIN_S / rate).min(1.0),
                _ => (blocked + asleep_on_input) / (blocked + sleeping),
            };
            after_blocking * input_switches
        }
        _ => after_blocking,
    };
    let reasons = Reason::LoaderWait {
        seen,
        workers,
        computing,
        in_kernel,
        waiting_for_cpu: wait_cpu,
        others_caused: (others > 0.0).then_some(others),
        blocked,
        sleeping,
        asleep_on_input: seen_asleep.map(|_| asleep_on_input),
    };
    if active < MIN_ACTIVE {
        // Every worker idles while the loop waits for them: what holds the batch is the
        // loader's own side in the main process (the pin-memory thread, collation).
        add(lost, Cause::Kind(Kind::DataCpu), share);
        note(lost, seen, reasons);
        return;
    }
    let decoding = (computing - in_kernel + own_wait * (1.0 - after_blocking)) / active;
    let reading = (in_kernel + own_wait * after_blocking + blocked + asleep_on_input) / active;
    let contended = wait_cpu * others / active;
    add(lost, Cause::Kind(Kind::DataCpu), share * decoding);
    add(lost, Cause::Kind(Kind::Contention), share * contended);
    note(lost, seen, reasons);
    let waiting = (share * reading, seen);
    let local_waits = blocked + asleep_on_input - asleep_on_remote;
    add_input(
        lost,
        w,
        t,
        waiting,
        (local_waits, asleep_on_remote),
        Reader::Workers,
    );
}

/// Fewest sleeping workers whose waits were read over the window for them to decide.
const MIN_ASLEEP_SEEN: u32 = 3;

/// The shortest a worker's sleep on the loader's own queues lasts, in seconds: it waits for
/// the loop to take a batch (a step, milliseconds at least on any GPU loop).
const QUEUE_SLEEP_MIN_S: f64 = 0.001;

/// The share of the workers' time below which they are all idle.
const MIN_ACTIVE: f64 = 0.05;

/// Idle time spent waiting for input (`share`, the loader wait `seen` in that share of the
/// samples): data_io, from local storage when the readers wait on local files (`local`:
/// blocked uninterruptibly, as a read from a disk blocks, or seen asleep in one) at least as
/// long as on remote input (`remote`: seen asleep on a socket or a network or FUSE file, or,
/// where that cannot be read, asleep at all) and the node's storage shows the load (or has no
/// figures). Readers blocked while the disks are quiet wait in a network or FUSE filesystem
/// (their requests block uninterruptibly too).
fn add_input(
    lost: &mut LostTime,
    w: &WindowFigures,
    t: &Thresholds,
    (share, seen): (f64, f64),
    (local, remote): (f64, f64),
    reader: Reader,
) {
    if share <= 0.0 {
        return;
    }
    add(lost, Cause::Kind(Kind::DataIo), share);
    let local = local >= remote && storage_busy(w, t).unwrap_or(true);
    let (source, remote) = if local {
        (InputSource::LocalStorage, RemoteSeen::default())
    } else {
        (InputSource::Remote, remote_seen(w))
    };
    lost.input = Some(source);
    note(
        lost,
        seen,
        Reason::Input {
            reader,
            source,
            remote,
        },
    );
}

/// Where remote input comes from, as the network figures name it: the NFS mount read most
/// (with its round trip), else the network or FUSE filesystems the job has mounted, and the
/// job's ingress.
fn remote_seen(w: &WindowFigures) -> RemoteSeen {
    if let Some(m) = w.mount.as_ref().filter(|m| m.requests_per_second >= 1.0) {
        return RemoteSeen {
            nfs: Some((m.mount_point.clone(), m.device.clone(), m.read_rtt_seconds)),
            ..RemoteSeen::default()
        };
    }
    RemoteSeen {
        nfs: None,
        mounts: w.network_mounts.clone(),
        ingress: w
            .job_ingress
            .filter(|i| *i > 0.0)
            .map(|bytes| (w.job_interface.clone(), bytes)),
    }
}
