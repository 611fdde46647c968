//! The split's tests: window figures in, shares and reasons out.

use super::*;
use crate::analysis::{InputSource, Kind};
use crate::snapshot::{AsleepWorkers, PerActivity};

mod pauses;
mod waits_for_a_cpu;

fn stacks(shares: [f64; 5]) -> Option<ProcessStacks> {
    Some(ProcessStacks::sampled(100, PerActivity(shares)))
}

fn split(w: WindowFigures) -> LostTime {
    lost_time(&w, &[], &Thresholds::default()).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn idle_time_falls_in_what_the_thread_did_while_the_gpu_waited() {
    // .item() every step: 60 % waiting for the GPU (which works meanwhile), 35 % Python on
    // the queue the sync drained, 5 % loader.
    let lost = split(WindowFigures {
        busy: Some(0.62),
        stacks: stacks([0.05, 0.6, 0.0, 0.35, 0.0]),
        ..WindowFigures::default()
    });
    assert_eq!(lost.basis, Basis::Observed);
    assert!(close(lost.share(Cause::Kind(Kind::SyncStall)), 0.35 * 0.95));
    assert!(close(lost.total(), 0.38));
    // The same Python without syncs: the loop itself.
    let lost = split(WindowFigures {
        busy: Some(0.62),
        stacks: stacks([0.05, 0.0, 0.0, 0.95, 0.0]),
        busiest_thread: Some(0.95),
        ..WindowFigures::default()
    });
    assert!(lost.share(Cause::Kind(Kind::HostBound)) > 0.35);
    assert!(close(lost.share(Cause::Kind(Kind::SyncStall)), 0.0));
    // A copy from pageable memory every step: the thread waits for the GPU 34 % of the
    // time, then runs Python 66 %, most of it launching while the GPU works. The GPU idles
    // 16 %, all of it in the Python after the sync, shorter than the sync held the thread:
    // all of it is the sync's.
    let lost = split(WindowFigures {
        busy: Some(0.84),
        stacks: stacks([0.0, 0.34, 0.0, 0.66, 0.0]),
        busiest_thread: Some(1.0),
        ..WindowFigures::default()
    });
    assert!(
        close(lost.share(Cause::Kind(Kind::SyncStall)), 0.16),
        "{lost:?}"
    );
    assert!(
        close(lost.share(Cause::Kind(Kind::HostBound)), 0.0),
        "{lost:?}"
    );
}

#[test]
fn without_a_busy_fraction_the_stacks_split_from_the_loops_own_waits() {
    // A MIG slice: no utilization. The loop waits for the GPU 60 % of the time, runs
    // Python after each sync 35 %: the GPU was busy at least 60 %.
    let mig = WindowFigures {
        up: true,
        busy: None,
        stacks: stacks([0.05, 0.6, 0.0, 0.35, 0.0]),
        ..WindowFigures::default()
    };
    let lost = split(mig.clone());
    assert_eq!(lost.basis, Basis::Observed);
    assert!(close(lost.idle, 0.4));
    assert!(close(lost.share(Cause::Kind(Kind::SyncStall)), 0.35));
    assert!(matches!(
        lost.reasons[0],
        Reason::BusyFromSyncs { busy, backlog: false } if close(busy, 0.6)
    ));
    // A sync found the GPU more than a step behind, busy 0.9 in all: most of the Python
    // after the syncs ran while it worked. A reading under the samples' is not taken.
    let behind = split(WindowFigures {
        backlog_busy: Some(0.9),
        ..mig.clone()
    });
    assert!(close(behind.idle, 0.1), "{behind:?}");
    assert!(matches!(
        behind.reasons[0],
        Reason::BusyFromSyncs { busy, backlog: true } if close(busy, 0.9)
    ));
    let under = split(WindowFigures {
        backlog_busy: Some(0.5),
        ..mig.clone()
    });
    assert!(close(under.idle, 0.4));
    // No stacks, or a GPU that does not answer: nothing to split from.
    let unseen = WindowFigures {
        stacks: None,
        ..mig.clone()
    };
    assert!(lost_time(&unseen, &[], &Thresholds::default()).is_none());
    let down = WindowFigures { up: false, ..mig };
    assert!(lost_time(&down, &[], &Thresholds::default()).is_none());
}

#[test]
fn a_launch_held_by_a_full_queue_is_time_the_gpu_worked_not_python() {
    // A MIG slice, a loop that never syncs and launches faster than the GPU runs: its thread
    // reads as its own Python in every sample, but the launch windows timed 85 % of its time
    // in launches held for room in the queue. The GPU worked then: busy at least 0.85, and
    // only the rest of the Python is the host's.
    let queued = WindowFigures {
        up: true,
        busy: None,
        stacks: stacks([0.0, 0.0, 0.0, 1.0, 0.0]),
        busiest_thread: Some(1.0),
        launch_queue_full: Some(0.85),
        ..WindowFigures::default()
    };
    let lost = split(queued.clone());
    assert!(close(lost.idle, 0.15), "{lost:?}");
    assert!(
        close(lost.share(Cause::Kind(Kind::HostBound)), 0.15),
        "{lost:?}"
    );
    assert!(lost
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::LaunchQueueFull { share } if close(*share, 0.85))));
    // Without the windows' timing the same samples read host-bound: nothing shows it busy.
    let unseen = split(WindowFigures {
        launch_queue_full: None,
        ..queued.clone()
    });
    assert!(close(unseen.idle, 1.0), "{unseen:?}");
    // Where a window found the queue full from its start to the end, the GPU worked
    // throughout: busy 1, whatever the held launches' own share.
    let full = split(WindowFigures {
        queue_busy: Some(1.0),
        ..queued.clone()
    });
    assert!(close(full.idle, 0.0), "{full:?}");
    assert!(matches!(
        full.reasons[0],
        Reason::BusyFromSyncs { busy, backlog: true } if close(busy, 1.0)
    ));
    // Where the device reports its busy time, the held launches are where it worked: a GPU
    // busy 0.6 idles in the Python that is left, the host's, none of it after a sync.
    let lost = split(WindowFigures {
        busy: Some(0.6),
        stacks: stacks([0.0, 0.0, 0.0, 1.0, 0.0]),
        launch_queue_full: Some(0.5),
        ..queued
    });
    assert!(
        close(lost.share(Cause::Kind(Kind::HostBound)), 0.4),
        "{lost:?}"
    );
    assert!(
        close(lost.share(Cause::Kind(Kind::SyncStall)), 0.0),
        "{lost:?}"
    );
}

#[test]
fn copies_slowed_by_a_degraded_link_are_the_links_idle_time() {
    // The host waits in loss.item() behind each step's upload, which crawls across a
    // gen 2 x4 link: the copies took 0.25 of the time beyond a full link's.
    let slowed = WindowFigures {
        busy: Some(0.65),
        stacks: stacks([0.02, 0.9, 0.0, 0.08, 0.0]),
        pcie_bandwidth_share: Some(0.03),
        link_copy_excess: Some(0.25),
        ..WindowFigures::default()
    };
    let lost = split(slowed.clone());
    let link = lost.share(Cause::Kind(Kind::Communication));
    assert!(close(link, 0.25), "{lost:?}");
    assert!(lost.share(Cause::Kind(Kind::SyncStall)) < 0.11, "{lost:?}");
    assert!(close(lost.total(), 0.35), "{lost:?}");
    assert!(lost
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::SlowCopies { share, .. } if close(*share, 0.25))));
    // More than the idle time: the idle time, every cause's share of it.
    let lost = split(WindowFigures {
        link_copy_excess: Some(0.6),
        ..slowed.clone()
    });
    assert!(close(lost.share(Cause::Kind(Kind::Communication)), 0.35));
    assert!(close(lost.total(), 0.35));
    // A healthy link, or one read while the GPU mostly idles (links slow down when
    // idle, on purpose): the sync's.
    for healthy in [
        WindowFigures {
            pcie_bandwidth_share: Some(1.0),
            link_copy_excess: None,
            ..slowed.clone()
        },
        WindowFigures {
            busy: Some(0.3),
            ..slowed
        },
    ] {
        let lost = split(healthy);
        assert!(close(lost.share(Cause::Kind(Kind::Communication)), 0.0));
    }
}

#[test]
fn a_loader_wait_goes_to_what_the_workers_did() {
    let waiting = WindowFigures {
        busy: Some(0.25),
        stacks: stacks([0.94, 0.05, 0.0, 0.01, 0.0]),
        workers: Some(2.0),
        workers_cpu: Some(0.1),
        cpu_wait: Some(0.0),
        workers_disk_wait: Some(0.0),
        disk_util: Some(0.01),
        iowait: Some(0.0),
        ..WindowFigures::default()
    };
    // Workers asleep while the disks are quiet: remote input.
    let lost = split(waiting.clone());
    assert!(lost.share(Cause::Kind(Kind::SyncStall)) < 0.02);
    let io = lost.share(Cause::Kind(Kind::DataIo));
    assert!(io > 0.6, "{lost:?}");
    assert_eq!(lost.input, Some(InputSource::Remote));
    assert!(close(lost.total(), 0.75));
    // Workers computing: data_cpu.
    let lost = split(WindowFigures {
        workers_cpu: Some(1.9),
        ..waiting.clone()
    });
    assert!(lost.share(Cause::Kind(Kind::DataCpu)) > 0.6);
    // Workers waiting for CPUs others hold (2 CPUs, others use most of them): the job
    // alone (2.1 cores wanted) would have waited a tenth of what it did.
    let lost = split(WindowFigures {
        workers_cpu: Some(0.5),
        cpu_wait: Some(1.3),
        job_cpus: Some(2.0),
        own_cpu: Some(0.4),
        other_cpu: Some(0.6),
        ..waiting.clone()
    });
    assert!(
        lost.share(Cause::Kind(Kind::Contention)) > lost.share(Cause::Kind(Kind::DataCpu)),
        "{lost:?}"
    );
    // The same wait with the job's own threads filling its CPUs: data_cpu.
    let lost = split(WindowFigures {
        workers_cpu: Some(0.5),
        cpu_wait: Some(1.3),
        job_cpus: Some(2.0),
        own_cpu: Some(0.98),
        other_cpu: Some(0.02),
        ..waiting
    });
    assert!(lost.share(Cause::Kind(Kind::Contention)) < 0.05, "{lost:?}");
}

#[test]
fn waits_for_a_cpu_after_many_short_reads_are_reading_after_a_few_sleeps_are_not() {
    // Four workers on two CPUs, each computing 40 % (8 % in the kernel), waiting for a CPU
    // 45 % of the time, blocked 8 % and asleep 7 %, their sleeps seen on their own queues:
    // 85 % of their switches voluntary.
    let slow_storage = WindowFigures {
        busy: Some(0.4),
        stacks: stacks([0.95, 0.05, 0.0, 0.0, 0.0]),
        workers: Some(4.0),
        workers_cpu: Some(1.6),
        workers_system_cpu: Some(0.32),
        cpu_wait: Some(1.8),
        workers_blkio: Some(0.32),
        workers_voluntary_switches: Some(0.85),
        workers_asleep: Some(AsleepWorkers {
            sampled: 20,
            remote: 0,
            local_file: 0,
        }),
        disk_util: Some(0.6),
        ..WindowFigures::default()
    };
    // 2,500 switches a second a worker, the sleeps at most 70 of them: the waits follow
    // reads, which outweigh the decoding.
    let lost = split(WindowFigures {
        workers_voluntary_rate: Some(2500.0),
        ..slow_storage.clone()
    });
    let (io, cpu) = (
        lost.share(Cause::Kind(Kind::DataIo)),
        lost.share(Cause::Kind(Kind::DataCpu)),
    );
    assert!(io > 1.3 * cpu, "{lost:?}");
    assert_eq!(lost.input, Some(InputSource::LocalStorage));
    // Five switches a second: every one may be a sleep on the queues, none a read's; the
    // waits are decoding's.
    let lost = split(WindowFigures {
        workers_voluntary_rate: Some(5.0),
        ..slow_storage.clone()
    });
    let few = lost.share(Cause::Kind(Kind::DataIo));
    assert!(
        few < 0.5 * io && few < lost.share(Cause::Kind(Kind::DataCpu)),
        "{lost:?}"
    );
    // Without the rate, the switches split as the time off a CPU: in between.
    let lost = split(slow_storage);
    let between = lost.share(Cause::Kind(Kind::DataIo));
    assert!(few < between && between < io, "{few} {between} {io}");
}

#[test]
fn busy_time_taken_or_wasted_is_capped_by_the_busy_time() {
    let lost = split(WindowFigures {
        busy: Some(0.9),
        sm_activity: Some(0.1),
        sharing: Some(crate::snapshot::Sharing {
            working: Some(2),
            main_work_share: Some(0.5),
            ..Default::default()
        }),
        ..WindowFigures::default()
    });
    assert_eq!(lost.basis, Basis::Inferred);
    assert!(close(lost.share(Cause::Kind(Kind::Contention)), 0.45));
    // The main job's half of the busy time, with its SMs empty 1 - 0.1/0.9 of it.
    assert!(close(lost.share(Cause::Kind(Kind::KernelEfficiency)), 0.4));
    assert!(close(lost.share(Cause::Unexplained), 0.1));
    assert!(close(lost.total(), 0.95));
}

#[test]
fn a_loader_wait_the_gpu_worked_through_is_busy_time_not_input() {
    // A MIG slice, `.to("cuda")` of pageable memory right after each batch: the loop waits
    // for its loader 50 % of the time, in the upload 45 %, and each upload waited for the
    // kernels queued before it, so the GPU worked through those loader waits.
    let mig = WindowFigures {
        up: true,
        busy: None,
        workers: Some(2.0),
        stacks: stacks([0.5, 0.45, 0.0, 0.05, 0.0]).map(|s| ProcessStacks {
            loader_queued: 0.5,
            ..s
        }),
        ..WindowFigures::default()
    };
    let lost = split(mig.clone());
    assert!(close(lost.idle, 0.05), "{lost:?}");
    assert!(
        close(lost.share(Cause::Kind(Kind::DataCpu)), 0.0),
        "{lost:?}"
    );
    assert!(
        close(lost.share(Cause::Kind(Kind::DataIo)), 0.0),
        "{lost:?}"
    );
    assert!(lost
        .reasons
        .iter()
        .any(|r| matches!(r, Reason::LoaderWorkedThrough { share } if close(*share, 0.5))));
    // Where the device reports busy time, that part of the loader wait is placed as busy
    // first: a GPU busy 60 % idles in the Python and the rest of the loader wait, not in
    // the waits it worked through.
    let lost = split(WindowFigures {
        busy: Some(0.6),
        stacks: stacks([0.5, 0.1, 0.0, 0.4, 0.0]).map(|s| ProcessStacks {
            loader_queued: 0.3,
            ..s
        }),
        ..mig.clone()
    });
    assert!(close(lost.idle, 0.4), "{lost:?}");
    let input = lost.share(Cause::Kind(Kind::DataCpu)) + lost.share(Cause::Kind(Kind::DataIo));
    assert!(input <= 0.2 + 1e-9, "{lost:?}");
    // Without the probes' spans the same loader wait is the input's.
    let unseen = split(WindowFigures {
        stacks: stacks([0.5, 0.45, 0.0, 0.05, 0.0]),
        ..mig
    });
    assert!(close(unseen.idle, 0.55), "{unseen:?}");
}
