//! Families of the exporter itself and of the host: CPU, disks, pressure stall information,
//! memory.

use super::*;
use crate::snapshot::{
    Culprits, DiskCounters, DiskRates, DiskSnapshot, NodeProcess, Snapshot, SourceOutcome,
};

pub(super) fn self_families(snapshot: &Snapshot, tick_seconds: f64, out: &mut Vec<Family>) {
    let mut build = Family::new(&BUILD);
    let mode = if snapshot.simulated { "demo" } else { "node" };
    build.add(&[env!("CARGO_PKG_VERSION"), COMMIT, mode], 1.0);
    out.push(build);
    let mut up = Family::new(&SOURCE_UP);
    let mut supported = Family::new(&SOURCE_SUPPORTED);
    let mut duration = Family::new(&SOURCE_DURATION);
    let mut errors = Family::new(&SOURCE_ERRORS);
    for status in &snapshot.sources {
        let name = [status.name];
        up.add(&name, flag(status.outcome == SourceOutcome::Ok));
        supported.add(
            &name,
            flag(!matches!(status.outcome, SourceOutcome::Unsupported(_))),
        );
        duration.add(&name, status.duration_seconds);
        errors.add(&name, status.errors_total as f64);
    }
    out.extend([up, supported, duration, errors]);
    let mut signals = Family::new(&SIGNAL_SUPPORTED);
    for signal in &snapshot.unsupported_signals {
        signals.add(&[signal], 0.0);
    }
    out.push(signals);
    out.push(Family::single(&SAMPLES, snapshot.samples_total as f64));
    out.push(Family::single(&SAMPLE_DURATION, tick_seconds));
}

pub(super) fn cpu_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
    let Some(cpu) = &snapshot.cpu else { return };
    let mut seconds = Family::new(&CPU_SECONDS);
    for (mode, value) in cpu.stat.times.modes() {
        seconds.add(&[mode], value);
    }
    out.push(seconds);
    out.push(Family::single(&CPU_COUNT, cpu.stat.cpu_count as f64));
    out.push(Family::single(
        &TASKS_RUNNING,
        cpu.stat.procs_running as f64,
    ));
    out.push(Family::single(
        &TASKS_BLOCKED,
        cpu.stat.procs_blocked as f64,
    ));
    out.push(Family::single(
        &CONTEXT_SWITCHES,
        cpu.stat.context_switches as f64,
    ));
    if let Some(rates) = &cpu.rates {
        out.push(Family::single(&CPU_BUSY, rates.busy_ratio));
        out.push(Family::single(&CPU_IOWAIT, rates.iowait_ratio));
        out.push(Family::single(&CPU_STEAL, rates.steal_ratio));
    }
}

/// Adds one family with a sample per disk for which `value` has a figure.
fn per_disk(
    out: &mut Vec<Family>,
    def: &'static MetricDef,
    disks: &[DiskSnapshot],
    value: impl Fn(&DiskSnapshot) -> Option<f64>,
) {
    let mut family = Family::new(def);
    for disk in disks {
        if let Some(v) = value(disk) {
            family.add(&[&disk.counters.name], v);
        }
    }
    out.push(family);
}

/// A family and how to read its value from one item.
type Field<T> = (&'static MetricDef, fn(&T) -> f64);

pub(super) fn disk_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
    let disks = &snapshot.disks;
    let counters: [Field<DiskCounters>; 11] = [
        (&DISK_READS, |c| c.reads_completed as f64),
        (&DISK_READS_MERGED, |c| c.reads_merged as f64),
        (&DISK_READ_BYTES, |c| c.read_bytes as f64),
        (&DISK_READ_TIME, |c| c.read_time_ms as f64 / 1000.0),
        (&DISK_WRITES, |c| c.writes_completed as f64),
        (&DISK_WRITES_MERGED, |c| c.writes_merged as f64),
        (&DISK_WRITTEN_BYTES, |c| c.written_bytes as f64),
        (&DISK_WRITE_TIME, |c| c.write_time_ms as f64 / 1000.0),
        (&DISK_IO_TIME, |c| c.io_time_ms as f64 / 1000.0),
        (&DISK_IO_WEIGHTED, |c| c.weighted_io_time_ms as f64 / 1000.0),
        (&DISK_IN_FLIGHT, |c| c.in_flight as f64),
    ];
    for (def, get) in counters {
        per_disk(out, def, disks, |d| Some(get(&d.counters)));
    }
    let rates: [Field<DiskRates>; 8] = [
        (&DISK_UTIL, |r| r.utilization_ratio),
        (&DISK_R_AWAIT, |r| r.read_await_seconds),
        (&DISK_W_AWAIT, |r| r.write_await_seconds),
        (&DISK_QUEUE, |r| r.queue_size),
        (&DISK_READS_RATE, |r| r.reads_per_second),
        (&DISK_WRITES_RATE, |r| r.writes_per_second),
        (&DISK_READ_BPS, |r| r.read_bytes_per_second),
        (&DISK_WRITE_BPS, |r| r.write_bytes_per_second),
    ];
    for (def, get) in rates {
        per_disk(out, def, disks, |d| d.rates.as_ref().map(get));
    }
}

pub(super) fn pressure_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
    let mut seconds = Family::new(&PSI_SECONDS);
    let mut ratio = Family::new(&PSI_RATIO);
    for p in &snapshot.pressure {
        seconds.add(&[p.resource, "some"], p.pressure.some.total_seconds);
        if let Some(full) = &p.pressure.full {
            seconds.add(&[p.resource, "full"], full.total_seconds);
        }
        if let Some(rates) = &p.rates {
            ratio.add(&[p.resource, "some"], rates.some_ratio);
            if let Some(full) = rates.full_ratio {
                ratio.add(&[p.resource, "full"], full);
            }
        }
    }
    out.extend([seconds, ratio]);
}

pub(super) fn memory_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
    let Some(memory) = &snapshot.memory else {
        return;
    };
    let c = &memory.counters;
    out.push(Family::single(&MEM_TOTAL, c.total_bytes as f64));
    out.push(Family::single(&MEM_AVAILABLE, c.available_bytes as f64));
    out.push(Family::single(&SWAP_TOTAL, c.swap_total_bytes as f64));
    out.push(Family::single(&SWAP_FREE, c.swap_free_bytes as f64));
    out.push(Family::single(&SWAP_IN, c.swapped_in_bytes as f64));
    out.push(Family::single(&SWAP_OUT, c.swapped_out_bytes as f64));
    if let Some(rates) = &memory.rates {
        out.push(Family::single(
            &SWAP_IN_RATE,
            rates.swap_in_bytes_per_second,
        ));
        out.push(Family::single(
            &SWAP_OUT_RATE,
            rates.swap_out_bytes_per_second,
        ));
    }
}

/// The node's busiest processes outside the GPU process trees: a bounded set (the top few by
/// CPU and by disk bytes), labelled by pid, command and owner.
pub(super) fn culprit_families(culprits: &Culprits, out: &mut Vec<Family>) {
    let labels = |p: &NodeProcess| {
        [
            p.pid.to_string(),
            p.command.clone(),
            p.pod_uid.clone(),
            p.container_id.clone(),
        ]
    };
    let mut cpu = Family::new(&TOP_PROCESS_CPU);
    for p in &culprits.by_cpu {
        let [pid, command, pod, container] = labels(p);
        cpu.add(&[&pid, &command, &pod, &container], p.cpu_cores);
    }
    let mut disk = Family::new(&TOP_PROCESS_DISK);
    for p in &culprits.by_disk {
        let [pid, command, pod, container] = labels(p);
        for (direction, rate) in [
            ("read", p.read_bytes_per_second),
            ("write", p.write_bytes_per_second),
        ] {
            if let Some(rate) = rate {
                disk.add(&[&pid, &command, &pod, &container, direction], rate);
            }
        }
    }
    out.extend([cpu, disk]);
}
