//! The job's waits for a CPU: what others' processes caused, against what its own threads
//! would have waited on its CPUs alone.

use super::*;

/// contention_ddp_straggler's rank 1: two workers and the loop on one CPU beside hogs that
/// hold 0.78 of it. The workers, each a tenth of a core short of their work, are runnable
/// all the time (90 % of it waiting), and the loop's thread, woken from its waits for the
/// loader and the GPU, waits too (0.6): neither is demand the job would have alone. Its CPU
/// work at its GPU's pace (0.22 / 0.56 of a core) fits the CPU: the waits go to the hogs as
/// their share of it, and the hogs, not the decoding, cost the most.
#[test]
fn workers_behind_because_of_hogs_wait_for_the_hogs() {
    let starved = WindowFigures {
        busy: Some(0.56),
        stacks: stacks([0.44, 0.56, 0.0, 0.0, 0.0]),
        workers: Some(2.0),
        workers_cpu: Some(0.2),
        cpu_wait: Some(2.4),
        loop_cpu_wait: Some(0.6),
        job_cpus: Some(1.0),
        own_cpu: Some(0.22),
        other_cpu: Some(0.78),
        disk_util: Some(0.0),
        ..WindowFigures::default()
    };
    let lost = split(starved.clone());
    let contention = lost.share(Cause::Kind(Kind::Contention));
    let decoding = lost.share(Cause::Kind(Kind::DataCpu));
    assert!(contention > 2.0 * decoding, "{lost:?}");
    // The same loader with a GPU that could go no faster than the CPU work it is fed (busy a
    // fifth of the time): alone it would want more than its CPU, and what exceeds it is its own.
    let lost = split(WindowFigures {
        busy: Some(0.2),
        ..starved
    });
    assert!(
        lost.share(Cause::Kind(Kind::DataCpu)) > lost.share(Cause::Kind(Kind::Contention)),
        "{lost:?}"
    );
}

#[test]
fn python_waits_for_a_cpu_are_contention_for_the_part_others_caused() {
    // The main thread runs Python in 90 % of the samples but holds a core only 45 % of
    // the time: it waits for a CPU half of its Python. A main thread and one worker on two
    // CPUs beside three hogs: alone the job (2 cores wanted) would not have waited.
    let hogged = WindowFigures {
        busy: Some(0.5),
        stacks: stacks([0.0, 0.0, 0.0, 0.9, 0.1]),
        busiest_thread: Some(0.45),
        workers: Some(1.0),
        cpu_wait: Some(1.2),
        job_cpus: Some(2.0),
        own_cpu: Some(0.4),
        other_cpu: Some(0.6),
        ..WindowFigures::default()
    };
    let lost = split(hogged.clone());
    let contention = lost.share(Cause::Kind(Kind::Contention));
    let host = lost.share(Cause::Kind(Kind::HostBound));
    assert!(contention > 0.15 && close(contention, host), "{lost:?}");
    // The same wait where the job's own threads want 3.1 cores of its two: they would
    // have waited 1.1 of the 1.2 alone; others caused the rest.
    let crowded = split(WindowFigures {
        own_cpu: Some(0.95),
        other_cpu: Some(0.05),
        ..hogged.clone()
    });
    let contention = crowded.share(Cause::Kind(Kind::Contention));
    assert!(contention > 0.0 && contention < 0.03, "{crowded:?}");
    // Others may add no more wait than the CPUs they hold.
    let light = split(WindowFigures {
        own_cpu: Some(0.5),
        other_cpu: Some(0.1),
        ..hogged
    });
    let share =
        light.share(Cause::Kind(Kind::Contention)) / lost.share(Cause::Kind(Kind::Contention));
    assert!(close(share, 0.2 / 1.2), "{light:?}");
}
