//! The catalogue of every metric family: name, type, unit, help and label names.
//! One line per family so the list reads as a table.

use super::{MetricDef, MetricType};

macro_rules! metric {
    ($id:ident, $name:literal, $kind:ident, $unit:expr, [$($label:literal),*], $help:literal) => {
        #[doc = $help]
        pub static $id: MetricDef = MetricDef {
            name: $name,
            kind: MetricType::$kind,
            unit: $unit,
            help: $help,
            labels: &[$($label),*],
        };
    };
}

const SECONDS: Option<&str> = Some("seconds");
const BYTES: Option<&str> = Some("bytes");
const RATIO: Option<&str> = Some("ratio");

// Self-observability.
metric!(BUILD, "gpu_exporter_build", Info, None, ["version", "commit"], "Build of the running exporter.");
metric!(SOURCE_UP, "gpu_exporter_source_up", Gauge, None, ["source"], "1 if the source produced data on the last tick, 0 if it failed or is not supported on this host.");
metric!(SOURCE_SUPPORTED, "gpu_exporter_source_supported", Gauge, None, ["source"], "0 if the host does not offer this source at all (e.g. no /proc/pressure), else 1.");
metric!(SOURCE_DURATION, "gpu_exporter_source_duration_seconds", Gauge, SECONDS, ["source"], "Wall time the source took on the last tick.");
metric!(SOURCE_ERRORS, "gpu_exporter_source_errors", Counter, None, ["source"], "Ticks on which the source failed.");
metric!(SAMPLES, "gpu_exporter_samples", Counter, None, [], "Ticks the sampler has taken.");
metric!(SAMPLE_DURATION, "gpu_exporter_sample_duration_seconds", Gauge, SECONDS, [], "Wall time of the last tick, all sources together.");
metric!(SAMPLE_AGE, "gpu_exporter_sample_age_seconds", Gauge, SECONDS, [], "Time since the snapshot being served was taken; grows if the sampler is stuck.");

// CPU.
metric!(CPU_SECONDS, "gpu_host_cpu_seconds", Counter, SECONDS, ["mode"], "CPU time of the node summed over all CPUs, per mode (/proc/stat).");
metric!(CPU_COUNT, "gpu_host_cpus", Gauge, None, [], "Online CPUs.");
metric!(TASKS_RUNNING, "gpu_host_tasks_running", Gauge, None, [], "Runnable tasks (procs_running).");
metric!(TASKS_BLOCKED, "gpu_host_tasks_blocked", Gauge, None, [], "Tasks blocked on I/O (procs_blocked).");
metric!(CONTEXT_SWITCHES, "gpu_host_context_switches", Counter, None, [], "Context switches since boot.");
metric!(CPU_BUSY, "gpu_host_cpu_busy_ratio", Gauge, RATIO, [], "Share of CPU time not idle and not iowait over the last interval.");
metric!(CPU_IOWAIT, "gpu_host_cpu_iowait_ratio", Gauge, RATIO, [], "Share of CPU time in iowait over the last interval.");
metric!(CPU_STEAL, "gpu_host_cpu_steal_ratio", Gauge, RATIO, [], "Share of CPU time stolen by the hypervisor over the last interval.");

// Disks.
metric!(DISK_READS, "gpu_host_disk_reads_completed", Counter, None, ["device"], "Reads completed.");
metric!(DISK_READS_MERGED, "gpu_host_disk_reads_merged", Counter, None, ["device"], "Adjacent reads merged before being issued.");
metric!(DISK_READ_BYTES, "gpu_host_disk_read_bytes", Counter, BYTES, ["device"], "Bytes read.");
metric!(DISK_READ_TIME, "gpu_host_disk_read_time_seconds", Counter, SECONDS, ["device"], "Time spent by all reads (sum of request latencies).");
metric!(DISK_WRITES, "gpu_host_disk_writes_completed", Counter, None, ["device"], "Writes completed.");
metric!(DISK_WRITES_MERGED, "gpu_host_disk_writes_merged", Counter, None, ["device"], "Adjacent writes merged before being issued.");
metric!(DISK_WRITTEN_BYTES, "gpu_host_disk_written_bytes", Counter, BYTES, ["device"], "Bytes written.");
metric!(DISK_WRITE_TIME, "gpu_host_disk_write_time_seconds", Counter, SECONDS, ["device"], "Time spent by all writes (sum of request latencies).");
metric!(DISK_IO_TIME, "gpu_host_disk_io_time_seconds", Counter, SECONDS, ["device"], "Time with at least one request in flight.");
metric!(DISK_IO_WEIGHTED, "gpu_host_disk_io_time_weighted_seconds", Counter, SECONDS, ["device"], "Requests in flight integrated over time.");
metric!(DISK_IN_FLIGHT, "gpu_host_disk_in_flight_requests", Gauge, None, ["device"], "Requests in flight when sampled.");
metric!(DISK_UTIL, "gpu_host_disk_utilization_ratio", Gauge, RATIO, ["device"], "Share of the last interval with I/O in flight (iostat %util / 100).");
metric!(DISK_R_AWAIT, "gpu_host_disk_read_await_seconds", Gauge, SECONDS, ["device"], "Mean latency of reads completed in the last interval (iostat r_await); 0 when none.");
metric!(DISK_W_AWAIT, "gpu_host_disk_write_await_seconds", Gauge, SECONDS, ["device"], "Mean latency of writes completed in the last interval (iostat w_await); 0 when none.");
metric!(DISK_QUEUE, "gpu_host_disk_queue_size", Gauge, None, ["device"], "Mean requests in flight over the last interval (iostat aqu-sz).");
metric!(DISK_READS_RATE, "gpu_host_disk_reads_per_second", Gauge, None, ["device"], "Reads completed per second over the last interval (iostat r/s).");
metric!(DISK_WRITES_RATE, "gpu_host_disk_writes_per_second", Gauge, None, ["device"], "Writes completed per second over the last interval (iostat w/s).");
metric!(DISK_READ_BPS, "gpu_host_disk_read_bytes_per_second", Gauge, None, ["device"], "Bytes read per second over the last interval.");
metric!(DISK_WRITE_BPS, "gpu_host_disk_write_bytes_per_second", Gauge, None, ["device"], "Bytes written per second over the last interval.");

// Pressure stall information.
metric!(PSI_SECONDS, "gpu_host_pressure_stalled_seconds", Counter, SECONDS, ["resource", "kind"], "Time some (or all, kind=full) non-idle tasks were stalled on the resource (/proc/pressure).");
metric!(PSI_RATIO, "gpu_host_pressure_stalled_ratio", Gauge, RATIO, ["resource", "kind"], "Share of the last interval tasks were stalled on the resource.");

// Memory.
metric!(MEM_TOTAL, "gpu_host_memory_total_bytes", Gauge, BYTES, [], "Physical memory (MemTotal).");
metric!(MEM_AVAILABLE, "gpu_host_memory_available_bytes", Gauge, BYTES, [], "Memory available without swapping (MemAvailable).");
metric!(SWAP_TOTAL, "gpu_host_swap_total_bytes", Gauge, BYTES, [], "Swap space (SwapTotal).");
metric!(SWAP_FREE, "gpu_host_swap_free_bytes", Gauge, BYTES, [], "Unused swap space (SwapFree).");
metric!(SWAP_IN, "gpu_host_swap_in_bytes", Counter, BYTES, [], "Bytes swapped in since boot.");
metric!(SWAP_OUT, "gpu_host_swap_out_bytes", Counter, BYTES, [], "Bytes swapped out since boot.");
metric!(SWAP_IN_RATE, "gpu_host_swap_in_bytes_per_second", Gauge, None, [], "Bytes swapped in per second over the last interval.");
metric!(SWAP_OUT_RATE, "gpu_host_swap_out_bytes_per_second", Gauge, None, [], "Bytes swapped out per second over the last interval.");
