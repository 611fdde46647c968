//! Snapshot → exposition bytes. The only place metric names, HELP texts and units appear.
//!
//! Both text formats are rendered once per tick from one list of families, so a scrape only
//! copies bytes out. The one figure that depends on the scrape's own time, the sample age, is
//! appended at scrape time: a stuck sampler then shows as a growing age, not a frozen page.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Instant;

use bytes::Bytes;

use crate::analysis::GpuVerdict;
use crate::snapshot::{
    DiskCounters, DiskRates, DiskSnapshot, GpuDevice, GpuSnapshot, HttpCounters, PodRef,
    ProcessContext, Rejection, Snapshot, SourceOutcome,
};

/// How a metric family behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Monotonic; samples carry the `_total` suffix.
    Counter,
    /// Any value.
    Gauge,
    /// Identity, valued 1; samples carry the `_info` suffix.
    Info,
}

/// The fixed description of one metric family.
#[derive(Debug)]
pub struct MetricDef {
    /// Family name without the `_total` / `_info` suffix.
    pub name: &'static str,
    /// Counter, gauge or info.
    pub kind: MetricType,
    /// Base unit the name ends with (`seconds`, `bytes`, `ratio`), for OpenMetrics' UNIT line.
    pub unit: Option<&'static str>,
    /// One-line help text.
    pub help: &'static str,
    /// Label names, in the order values are given.
    pub labels: &'static [&'static str],
}

impl MetricDef {
    /// The name samples are exposed under (`_total` for counters, `_info` for info metrics).
    pub fn sample_name(&self) -> String {
        match self.kind {
            MetricType::Counter => format!("{}_total", self.name),
            MetricType::Info => format!("{}_info", self.name),
            MetricType::Gauge => self.name.to_string(),
        }
    }
}

/// Exposition format chosen by content negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus classic text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The Content-Type header of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// One family with its samples: label values in the order of `def.labels`, and the value.
#[derive(Debug)]
struct Family {
    def: &'static MetricDef,
    samples: Vec<(Vec<String>, f64)>,
}

impl Family {
    fn new(def: &'static MetricDef) -> Self {
        Family {
            def,
            samples: Vec::new(),
        }
    }

    fn add<S: AsRef<str>>(&mut self, labels: &[S], value: f64) {
        debug_assert_eq!(labels.len(), self.def.labels.len(), "{}", self.def.name);
        self.samples.push((
            labels.iter().map(|l| l.as_ref().to_string()).collect(),
            value,
        ));
    }

    fn single(def: &'static MetricDef, value: f64) -> Self {
        let mut family = Family::new(def);
        family.add::<&str>(&[], value);
        family
    }
}

/// A published exposition: both formats, without the scrape-time sample age and `# EOF`.
#[derive(Debug)]
pub struct Exposition {
    /// Classic text body (shared, so a scrape sends it without copying).
    pub text: Bytes,
    /// OpenMetrics body.
    pub openmetrics: Bytes,
    /// When the snapshot behind it was taken.
    pub sampled_at: Instant,
    /// The verdicts of the same snapshot, for `/api/v1/diagnosis` (rendered only when asked).
    pub verdicts: Vec<GpuVerdict>,
    /// Whether the snapshot is the simulated node.
    pub simulated: bool,
}

impl Exposition {
    /// The full response body at time `now`: the pre-rendered bytes plus the sample age
    /// (and OpenMetrics' closing `# EOF`).
    pub fn body(&self, format: Format, now: Instant, http: &HttpCounters) -> Vec<u8> {
        self.body_parts(format, now, http).concat()
    }

    /// The same body as two parts: the pre-rendered bytes (shared, not copied) and the
    /// scrape-time families.
    pub fn body_parts(&self, format: Format, now: Instant, http: &HttpCounters) -> [Bytes; 2] {
        let base = match format {
            Format::Text => &self.text,
            Format::OpenMetrics => &self.openmetrics,
        };
        let age = now.saturating_duration_since(self.sampled_at).as_secs_f64();
        let mut tail = encode(&scrape_families(age, http), format);
        if format == Format::OpenMetrics {
            tail.push_str("# EOF\n");
        }
        [base.clone(), Bytes::from(tail)]
    }
}

/// Renders a snapshot in both formats. `tick_seconds` is how long taking it lasted.
pub fn render(snapshot: &Snapshot, tick_seconds: f64, sampled_at: Instant) -> Exposition {
    let families = families(snapshot, tick_seconds);
    Exposition {
        text: Bytes::from(encode(&families, Format::Text)),
        openmetrics: Bytes::from(encode(&families, Format::OpenMetrics)),
        sampled_at,
        verdicts: snapshot.verdicts.clone(),
        simulated: snapshot.simulated,
    }
}

#[rustfmt::skip]
mod catalog;
pub use catalog::*;

/// Commit the binary was built from (set by build.rs; "unknown" outside a git checkout).
pub const COMMIT: &str = env!("GPU_EXPORTER_COMMIT");

/// The families that change between ticks, rendered at each scrape.
fn scrape_families(sample_age: f64, http: &HttpCounters) -> Vec<Family> {
    let mut rejected = Family::new(&HTTP_REJECTED);
    for (reason, count) in Rejection::ALL.iter().zip(http.rejected) {
        rejected.add(&[reason.label()], count as f64);
    }
    vec![
        Family::single(&HTTP_OPEN_CONNECTIONS, http.open_connections as f64),
        rejected,
        Family::single(&WEB_CONFIG_OK, flag(!http.web_config_reload_failed)),
        Family::single(&SAMPLE_AGE, sample_age),
    ]
}

fn families(snapshot: &Snapshot, tick_seconds: f64) -> Vec<Family> {
    let mut out = Vec::new();
    self_families(snapshot, tick_seconds, &mut out);
    cpu_families(snapshot, &mut out);
    disk_families(snapshot, &mut out);
    pressure_families(snapshot, &mut out);
    memory_families(snapshot, &mut out);
    if let Some(gpu) = &snapshot.gpu {
        gpu_families(gpu, &snapshot.node, &mut out);
        pod_families(gpu, &mut out);
        process_context_families(gpu, &snapshot.processes, &mut out);
    }
    verdict_families(&snapshot.verdicts, snapshot.gpu.as_ref(), &mut out);
    if let Some(ratio) = snapshot.other_cpu_ratio {
        out.push(Family::single(&OTHER_CPU, ratio));
    }
    if let Some(enabled) = snapshot.delay_accounting {
        out.push(Family::single(&DELAY_ACCOUNTING, flag(enabled)));
    }
    out.retain(|family| !family.samples.is_empty());
    out
}

fn self_families(snapshot: &Snapshot, tick_seconds: f64, out: &mut Vec<Family>) {
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
    out.push(Family::single(&SAMPLES, snapshot.samples_total as f64));
    out.push(Family::single(&SAMPLE_DURATION, tick_seconds));
}

fn cpu_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
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

fn disk_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
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

fn pressure_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
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

fn memory_families(snapshot: &Snapshot, out: &mut Vec<Family>) {
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

/// NVML's clock-event reason bits, named as the exporter labels them.
const THROTTLE_REASONS: [(&str, u64); 9] = [
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
];

/// A per-GPU family: one sample per answering GPU with a value.
fn per_gpu(
    out: &mut Vec<Family>,
    def: &'static MetricDef,
    gpus: &[GpuDevice],
    value: impl Fn(&GpuDevice) -> Option<f64>,
) {
    let mut family = Family::new(def);
    for gpu in gpus.iter().filter(|g| g.up) {
        if let Some(v) = value(gpu) {
            family.add(&gpu_key(gpu), v);
        }
    }
    out.push(family);
}

fn gpu_families(snapshot: &GpuSnapshot, node: &str, out: &mut Vec<Family>) {
    out.push(Family::single(&NVML_UP, flag(snapshot.nvml_up)));
    if !snapshot.nvml_up {
        let mut error = Family::new(&NVML_ERROR);
        error.add(&[&snapshot.nvml_error], 1.0);
        out.push(error);
        return;
    }
    let gpus = &snapshot.devices;
    out.push(Family::single(&GPU_DEVICES, gpus.len() as f64));
    let mut info = Family::new(&GPU_INFO);
    let mut up = Family::new(&GPU_UP);
    let mut features = Family::new(&GPU_FEATURE);
    for gpu in gpus {
        let index = gpu.index.to_string();
        let numa = gpu.numa_node.map(|n| n.to_string()).unwrap_or_default();
        let affinity = gpu.cpu_affinity.clone().unwrap_or_default();
        info.add(
            &[
                &index,
                &gpu.uuid,
                &gpu.model,
                &gpu.pci_bus_id,
                &numa,
                &affinity,
                &snapshot.driver_version,
                &snapshot.cuda_driver_version,
                node,
            ],
            1.0,
        );
        let key = gpu_key(gpu);
        up.add(&key, flag(gpu.up));
        if gpu.up {
            for feature in crate::source::gpu::FEATURES {
                features.add(
                    &key_and(&key, feature),
                    flag(!gpu.unsupported.contains(&feature)),
                );
            }
        }
    }
    out.extend([info, up, features]);
    per_gpu(out, &GPU_UTIL, gpus, |g| g.utilization.map(|u| u.gpu_ratio));
    per_gpu(out, &GPU_MEM_UTIL, gpus, |g| {
        g.utilization.map(|u| u.memory_ratio)
    });
    per_gpu(out, &BUSY_MEAN, gpus, |g| g.busy.map(|b| b.mean_ratio));
    per_gpu(out, &BUSY_MIN, gpus, |g| g.busy.map(|b| b.min_ratio));
    per_gpu(out, &BUSY_MAX, gpus, |g| g.busy.map(|b| b.max_ratio));
    per_gpu(out, &BUSY_IDLE, gpus, |g| {
        g.busy.map(|b| b.idle_share_ratio)
    });
    per_gpu(out, &BUSY_SAMPLES, gpus, |g| {
        g.busy.map(|b| f64::from(b.samples))
    });
    per_gpu(out, &GPU_MEM_TOTAL, gpus, |g| {
        g.memory.map(|m| m.total_bytes as f64)
    });
    per_gpu(out, &GPU_MEM_USED, gpus, |g| {
        g.memory.map(|m| m.used_bytes as f64)
    });
    per_gpu(out, &GPU_MEM_FREE, gpus, |g| {
        g.memory.map(|m| m.free_bytes as f64)
    });
    per_gpu(out, &GPU_MEM_RESERVED, gpus, |g| {
        g.memory.map(|m| m.reserved_bytes as f64)
    });
    per_gpu(out, &GPU_TEMP, gpus, |g| g.temperature_celsius);
    per_gpu(out, &GPU_TEMP_SLOWDOWN, gpus, |g| {
        g.slowdown_temperature_celsius
    });
    per_gpu(out, &GPU_TEMP_SHUTDOWN, gpus, |g| {
        g.shutdown_temperature_celsius
    });
    per_gpu(out, &GPU_POWER, gpus, |g| g.power_watts);
    per_gpu(out, &GPU_POWER_LIMIT, gpus, |g| g.power_limit_watts);
    per_gpu(out, &GPU_ENERGY, gpus, |g| g.energy_joules);
    let mut clock = Family::new(&GPU_CLOCK);
    let mut clock_max = Family::new(&GPU_CLOCK_MAX);
    let mut throttle = Family::new(&GPU_THROTTLE);
    let mut ecc = Family::new(&GPU_ECC);
    for gpu in gpus.iter().filter(|g| g.up) {
        let key = gpu_key(gpu);
        for c in &gpu.clocks {
            if let Some(hertz) = c.hertz {
                clock.add(&key_and(&key, c.domain), hertz);
            }
            if let Some(hertz) = c.max_hertz {
                clock_max.add(&key_and(&key, c.domain), hertz);
            }
        }
        if let Some(bits) = gpu.throttle_reasons {
            for (reason, bit) in THROTTLE_REASONS {
                throttle.add(&key_and(&key, reason), flag(bits & bit != 0));
            }
        }
        for (kind, count) in [
            ("corrected", gpu.ecc_corrected),
            ("uncorrected", gpu.ecc_uncorrected),
        ] {
            if let Some(count) = count {
                ecc.add(&key_and(&key, kind), count as f64);
            }
        }
    }
    out.extend([clock, clock_max, throttle]);
    per_gpu(out, &PCIE_GEN, gpus, |g| g.pcie.generation.map(f64::from));
    per_gpu(out, &PCIE_WIDTH, gpus, |g| g.pcie.width.map(f64::from));
    per_gpu(out, &PCIE_MAX_GEN, gpus, |g| {
        g.pcie.max_generation.map(f64::from)
    });
    per_gpu(out, &PCIE_MAX_WIDTH, gpus, |g| {
        g.pcie.max_width.map(f64::from)
    });
    per_gpu(out, &PCIE_DEGRADED, gpus, |g| {
        let p = g.pcie;
        Some(flag(
            p.generation? < p.max_generation? || p.width? < p.max_width?,
        ))
    });
    per_gpu(out, &PCIE_TX, gpus, |g| g.pcie.tx_bytes_per_second);
    per_gpu(out, &PCIE_RX, gpus, |g| g.pcie.rx_bytes_per_second);
    per_gpu(out, &PCIE_REPLAYS, gpus, |g| {
        g.pcie.replays.map(|r| r as f64)
    });
    out.push(ecc);
    gpu_health_families(gpus, out);
    per_gpu(out, &GPM_SM_ACTIVITY, gpus, |g| {
        g.gpm.map(|m| m.sm_activity_ratio)
    });
    per_gpu(out, &GPM_SM_OCCUPANCY, gpus, |g| {
        g.gpm.map(|m| m.sm_occupancy_ratio)
    });
    per_gpu(out, &GPM_TENSOR, gpus, |g| {
        g.gpm.map(|m| m.tensor_activity_ratio)
    });
    per_gpu(out, &GPM_DRAM, gpus, |g| {
        g.gpm.map(|m| m.dram_bandwidth_ratio)
    });
    mig_families(gpus, out);
    let mut memory = Family::new(&PROC_MEM);
    let mut sm = Family::new(&PROC_SM);
    let mut memory_util = Family::new(&PROC_MEM_UTIL);
    for gpu in gpus.iter().filter(|g| g.up) {
        let index = gpu.index.to_string();
        for p in &gpu.processes {
            let pid = p.pid.to_string();
            let labels = [index.as_str(), &gpu.uuid, &pid, &p.command, p.kind];
            memory.add(&labels, p.used_memory_bytes as f64);
            if let Some(ratio) = p.sm_ratio {
                sm.add(&labels, ratio);
            }
            if let Some(ratio) = p.memory_ratio {
                memory_util.add(&labels, ratio);
            }
        }
    }
    out.extend([memory, sm, memory_util]);
}

/// Clock limits, row remapping, NVLink and XID errors: the slower-moving health signals.
fn gpu_health_families(gpus: &[GpuDevice], out: &mut Vec<Family>) {
    let mut limited = Family::new(&GPU_VIOLATION);
    let mut remapped = Family::new(&REMAPPED_ROWS);
    let mut links = Family::new(&NVLINK_ACTIVE);
    let mut xids = Family::new(&XID_ERRORS);
    for gpu in gpus.iter().filter(|g| g.up) {
        let key = gpu_key(gpu);
        for (limit, seconds) in [
            ("power", gpu.violation_power_seconds),
            ("thermal", gpu.violation_thermal_seconds),
        ] {
            if let Some(seconds) = seconds {
                limited.add(&key_and(&key, limit), seconds);
            }
        }
        if let Some(rows) = gpu.remapped_rows {
            remapped.add(&key_and(&key, "correctable"), rows.correctable as f64);
            remapped.add(&key_and(&key, "uncorrectable"), rows.uncorrectable as f64);
        }
        for (link, active) in gpu.nvlink.iter().flat_map(|n| n.links.iter().enumerate()) {
            links.add(&key_and(&key, &link.to_string()), flag(*active));
        }
        for (code, count) in &gpu.xid_errors {
            xids.add(&key_and(&key, &code.to_string()), *count as f64);
        }
    }
    out.extend([limited, remapped]);
    per_gpu(out, &REMAP_PENDING, gpus, |g| {
        g.remapped_rows.map(|r| flag(r.pending))
    });
    per_gpu(out, &REMAP_FAILED, gpus, |g| {
        g.remapped_rows.map(|r| flag(r.failed))
    });
    out.push(links);
    per_gpu(out, &NVLINK_TX, gpus, |g| {
        g.nvlink.as_ref()?.tx_bytes.map(|b| b as f64)
    });
    per_gpu(out, &NVLINK_RX, gpus, |g| {
        g.nvlink.as_ref()?.rx_bytes.map(|b| b as f64)
    });
    out.push(xids);
}

fn mig_families(gpus: &[GpuDevice], out: &mut Vec<Family>) {
    per_gpu(out, &MIG_ENABLED, gpus, |g| g.mig_enabled.map(flag));
    let mut info = Family::new(&MIG_INFO);
    let mut total = Family::new(&MIG_MEM_TOTAL);
    let mut used = Family::new(&MIG_MEM_USED);
    let mut activity = Family::new(&MIG_SM_ACTIVITY);
    for gpu in gpus.iter().filter(|g| g.up) {
        let index = gpu.index.to_string();
        for mig in &gpu.mig_devices {
            let instance = mig
                .gpu_instance_id
                .map(|i| i.to_string())
                .unwrap_or_default();
            info.add(
                &[
                    &index,
                    &gpu.uuid,
                    &mig.uuid,
                    &mig.index.to_string(),
                    &instance,
                ],
                1.0,
            );
            let labels = [index.as_str(), &gpu.uuid, &mig.uuid];
            if let Some(memory) = mig.memory {
                total.add(&labels, memory.total_bytes as f64);
                used.add(&labels, memory.used_bytes as f64);
            }
            if let Some(ratio) = mig.sm_activity_ratio {
                activity.add(&labels, ratio);
            }
        }
    }
    out.extend([info, total, used, activity]);
}

/// Process states as labelled, and the /proc letters that map to each.
const PROCESS_STATES: [(&str, &[char]); 6] = [
    ("running", &['R']),
    ("sleeping", &['S']),
    ("disk_wait", &['D']),
    ("zombie", &['Z']),
    ("stopped", &['T', 't']),
    ("idle", &['I']),
];

/// The four labels of a GPU process series plus one more.
fn and<'a>(base: &[&'a str; 4], extra: &'a str) -> [&'a str; 5] {
    [base[0], base[1], base[2], base[3], extra]
}

/// Host context of each GPU process, labelled like its GPU process series.
fn process_context_families(gpu: &GpuSnapshot, contexts: &[ProcessContext], out: &mut Vec<Family>) {
    per_gpu(out, &GPU_PROCESSES, &gpu.devices, |g| {
        g.process_count.map(f64::from)
    });
    let mut cpu_seconds = Family::new(&PROC_CPU_SECONDS);
    let mut cpu_cores = Family::new(&PROC_CPU_CORES);
    let mut busiest = Family::new(&PROC_BUSIEST_THREAD);
    let mut threads = Family::new(&PROC_THREADS);
    let mut switches = Family::new(&PROC_SWITCHES);
    let mut blkio = Family::new(&PROC_BLKIO);
    let mut read_bytes = Family::new(&PROC_READ_BYTES);
    let mut state = Family::new(&PROC_STATE);
    let mut allowed = Family::new(&PROC_ALLOWED_CPUS);
    let mut numa = Family::new(&PROC_NUMA_MISMATCH);
    let mut workers = Family::new(&WORKERS);
    let mut workers_cpu = Family::new(&WORKERS_CPU);
    let mut workers_max = Family::new(&WORKERS_MAX_CPU);
    let mut workers_state = Family::new(&WORKERS_STATE);
    let mut workers_blkio = Family::new(&WORKERS_BLKIO);
    let mut workers_read = Family::new(&WORKERS_READ);
    let mut cgroup_info = Family::new(&CGROUP_INFO);
    let mut quota = Family::new(&CGROUP_QUOTA);
    let mut periods = Family::new(&CGROUP_PERIODS);
    let mut throttled_periods = Family::new(&CGROUP_THROTTLED_PERIODS);
    let mut throttled_seconds = Family::new(&CGROUP_THROTTLED_SECONDS);
    let mut throttled_ratio = Family::new(&CGROUP_THROTTLED_RATIO);
    let mut pressure = Family::new(&CGROUP_PRESSURE);
    let mut slurm_jobs = Family::new(&GPU_SLURM_JOB);
    let by_pid: HashMap<u32, &ProcessContext> = contexts.iter().map(|c| (c.pid, c)).collect();
    for device in gpu.devices.iter().filter(|d| d.up) {
        let index = device.index.to_string();
        let jobs: BTreeSet<&str> = device
            .processes
            .iter()
            .filter_map(|p| by_pid.get(&p.pid)?.cgroup.as_ref())
            .map(|g| g.slurm_job.as_str())
            .filter(|job| !job.is_empty())
            .collect();
        for job in jobs {
            slurm_jobs.add(&key_and(&gpu_key(device), job), 1.0);
        }
        for process in &device.processes {
            let Some(c) = by_pid.get(&process.pid) else {
                continue;
            };
            let pid = process.pid.to_string();
            let base = [index.as_str(), &device.uuid, &pid, &process.command];
            cpu_seconds.add(&and(&base, "user"), c.cpu_user_seconds);
            cpu_seconds.add(&and(&base, "system"), c.cpu_system_seconds);
            let optional = [
                (&mut cpu_cores, c.cpu_cores),
                (&mut busiest, c.busiest_thread_ratio),
                (&mut blkio, c.blkio_delay_seconds),
                (&mut read_bytes, c.read_bytes.map(|b| b as f64)),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            threads.add(&base, f64::from(c.threads));
            switches.add(&and(&base, "voluntary"), c.voluntary_switches as f64);
            switches.add(&and(&base, "involuntary"), c.involuntary_switches as f64);
            for (name, letters) in PROCESS_STATES {
                state.add(&and(&base, name), flag(letters.contains(&c.state)));
            }
            allowed.add(&base, f64::from(c.allowed_cpus));
            if let (Some(node), false) = (device.numa_node, c.numa_nodes.is_empty()) {
                numa.add(&base, flag(c.numa_nodes.iter().any(|n| *n != node)));
            }
            let w = &c.workers;
            workers.add(&base, f64::from(w.count));
            let optional = [
                (&mut workers_cpu, w.cpu_cores),
                (&mut workers_max, w.max_cpu_ratio),
                (&mut workers_blkio, w.blkio_delay_ratio),
                (&mut workers_read, w.read_bytes_per_second),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            for (name, count) in [
                ("running", w.running),
                ("sleeping", w.sleeping),
                ("disk_wait", w.disk_wait),
                ("zombie", w.zombie),
            ] {
                workers_state.add(&and(&base, name), f64::from(count));
            }
            let Some(g) = &c.cgroup else { continue };
            cgroup_info.add(
                &[
                    base[0],
                    base[1],
                    base[2],
                    base[3],
                    &g.pod_uid,
                    &g.container_id,
                    &g.slurm_job,
                ],
                1.0,
            );
            let optional = [
                (&mut quota, g.cpu_quota_cores),
                (&mut periods, g.periods.map(|v| v as f64)),
                (
                    &mut throttled_periods,
                    g.throttled_periods.map(|v| v as f64),
                ),
                (&mut throttled_seconds, g.throttled_seconds),
                (&mut throttled_ratio, g.throttled_ratio),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            for p in &g.pressure {
                let Some(rates) = p.rates else { continue };
                let labels = |kind| [base[0], base[1], base[2], base[3], p.resource, kind];
                pressure.add(&labels("some"), rates.some_ratio);
                if let Some(full) = rates.full_ratio {
                    pressure.add(&labels("full"), full);
                }
            }
        }
    }
    out.extend([
        cpu_seconds,
        cpu_cores,
        busiest,
        threads,
        switches,
        blkio,
        read_bytes,
        state,
        allowed,
        numa,
        workers,
        workers_cpu,
        workers_max,
        workers_state,
        workers_blkio,
        workers_read,
        cgroup_info,
        quota,
        periods,
        throttled_periods,
        throttled_seconds,
        throttled_ratio,
        pressure,
        slurm_jobs,
    ]);
}

/// Every value the primary verdict can take.
const PRIMARY_VERDICTS: [&str; 13] = [
    "idle",
    "busy",
    "undetermined",
    "data_io",
    "data_cpu",
    "host_bound",
    "sync_stall",
    "kernel_efficiency",
    "memory_pressure",
    "communication",
    "contention",
    "throttling",
    "hardware",
];

/// The labels every GPU-level series starts with: index, UUID and the GPU's pod labels.
fn gpu_key(gpu: &GpuDevice) -> [String; 5] {
    let [namespace, pod, container] = pod_labels(Some(gpu));
    [
        gpu.index.to_string(),
        gpu.uuid.clone(),
        namespace,
        pod,
        container,
    ]
}

/// A GPU key followed by one more label value.
fn key_and<'a>(key: &'a [String; 5], extra: &'a str) -> [&'a str; 6] {
    [&key[0], &key[1], &key[2], &key[3], &key[4], extra]
}

/// The pod labels of a GPU: its assignment, or several joined with commas (time-slicing,
/// MIG), or empty.
fn pod_labels(gpu: Option<&GpuDevice>) -> [String; 3] {
    let pods = gpu.map_or(&[][..], |g| &g.pods[..]);
    let join = |f: fn(&PodRef) -> &str| {
        let mut values: Vec<&str> = pods.iter().map(f).collect();
        values.dedup();
        values.join(",")
    };
    [
        join(|p| &p.namespace),
        join(|p| &p.pod),
        join(|p| &p.container),
    ]
}

fn verdict_families(verdicts: &[GpuVerdict], gpus: Option<&GpuSnapshot>, out: &mut Vec<Family>) {
    let mut active = Family::new(&VERDICT);
    let mut score = Family::new(&VERDICT_SCORE);
    let mut unknown = Family::new(&VERDICT_UNKNOWN);
    let mut primary = Family::new(&PRIMARY);
    for verdict in verdicts {
        let index = verdict.index.to_string();
        let device = gpus.and_then(|g| g.devices.iter().find(|d| d.uuid == verdict.uuid));
        let [namespace, pod, container] = pod_labels(device);
        let base = [index.as_str(), &verdict.uuid, &namespace, &pod, &container];
        let with = |last: &'static str| [base[0], base[1], base[2], base[3], base[4], last];
        for kind in &verdict.kinds {
            let labels = with(kind.scored.kind.name());
            active.add(&labels, flag(kind.active));
            unknown.add(&labels, flag(kind.scored.score.is_none()));
            if let Some(value) = kind.scored.score {
                score.add(&labels, value);
            }
        }
        for name in PRIMARY_VERDICTS {
            primary.add(&with(name), flag(verdict.primary.name() == name));
        }
    }
    out.extend([active, score, unknown, primary]);
}

/// Pod assignments of the GPUs (kubelet pod-resources) and allocated-but-idle flags.
fn pod_families(gpu: &GpuSnapshot, out: &mut Vec<Family>) {
    let mut pods = Family::new(&GPU_POD);
    let mut idle = Family::new(&ALLOCATED_IDLE);
    let mut idle_seconds = Family::new(&ALLOCATED_IDLE_SECONDS);
    for device in gpu.devices.iter().filter(|d| !d.pods.is_empty()) {
        let index = device.index.to_string();
        for p in &device.pods {
            pods.add(
                &[&index, &device.uuid, &p.namespace, &p.pod, &p.container],
                1.0,
            );
        }
        let [namespace, pod, container] = pod_labels(Some(device));
        let labels = [index.as_str(), &device.uuid, &namespace, &pod, &container];
        idle.add(&labels, flag(device.allocated_idle));
        if let Some(seconds) = device.allocated_idle_seconds {
            idle_seconds.add(&labels, seconds);
        }
    }
    out.extend([pods, idle, idle_seconds]);
    per_gpu(out, &ALLOCATABLE, &gpu.devices, |g| g.allocatable.map(flag));
}

fn flag(value: bool) -> f64 {
    if value {
        1.0
    } else {
        0.0
    }
}

/// Encodes families in one format. Families without samples were removed by the caller.
fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::with_capacity(families.len() * 160);
    for family in families {
        let def = family.def;
        let sample_name = def.sample_name();
        let (header_name, type_name) = match (format, def.kind) {
            (Format::Text, MetricType::Counter) => (sample_name.as_str(), "counter"),
            (Format::Text, MetricType::Info) => (sample_name.as_str(), "gauge"),
            (Format::Text, MetricType::Gauge) => (def.name, "gauge"),
            (Format::OpenMetrics, MetricType::Counter) => (def.name, "counter"),
            (Format::OpenMetrics, MetricType::Info) => (def.name, "info"),
            (Format::OpenMetrics, MetricType::Gauge) => (def.name, "gauge"),
        };
        let _ = writeln!(out, "# HELP {header_name} {}", escape_help(def.help));
        let _ = writeln!(out, "# TYPE {header_name} {type_name}");
        if let (Format::OpenMetrics, Some(unit)) = (format, def.unit) {
            let _ = writeln!(out, "# UNIT {header_name} {unit}");
        }
        for (values, value) in &family.samples {
            out.push_str(&sample_name);
            if !values.is_empty() {
                out.push('{');
                for (i, (name, label_value)) in def.labels.iter().zip(values).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape_label(label_value));
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&format_value(*value));
            out.push('\n');
        }
    }
    out
}

/// Formats a sample value the way both formats accept it.
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        value.to_string()
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn escape_help(help: &str) -> String {
    help.replace('\\', r"\\").replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SourceStatus;

    fn snapshot() -> Snapshot {
        Snapshot {
            sources: vec![
                SourceStatus {
                    name: "cpu",
                    outcome: SourceOutcome::Ok,
                    duration_seconds: 0.25,
                    errors_total: 0,
                },
                SourceStatus {
                    name: "pressure",
                    outcome: SourceOutcome::Unsupported("no psi".into()),
                    duration_seconds: 0.5,
                    errors_total: 0,
                },
            ],
            samples_total: 3,
            ..Snapshot::default()
        }
    }

    #[test]
    fn classic_text_names_counters_with_total_in_type_line() {
        let text =
            String::from_utf8(render(&snapshot(), 0.5, Instant::now()).text.to_vec()).unwrap();
        assert!(
            text.contains(
                "# TYPE gpu_exporter_samples_total counter\ngpu_exporter_samples_total 3\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE gpu_exporter_build_info gauge\n"));
        assert!(text.contains("gpu_exporter_source_up{source=\"cpu\"} 1\n"));
        assert!(text.contains("gpu_exporter_source_up{source=\"pressure\"} 0\n"));
        assert!(text.contains("gpu_exporter_source_supported{source=\"pressure\"} 0\n"));
        assert!(!text.contains("# UNIT"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn openmetrics_has_family_names_units_and_eof() {
        let exposition = render(&snapshot(), 0.5, Instant::now());
        let body = String::from_utf8(exposition.body(
            Format::OpenMetrics,
            exposition.sampled_at,
            &HttpCounters::default(),
        ))
        .unwrap();
        assert!(
            body.contains("# TYPE gpu_exporter_samples counter\ngpu_exporter_samples_total 3\n")
        );
        assert!(body.contains("# TYPE gpu_exporter_build info\n"));
        assert!(body.contains("# UNIT gpu_exporter_sample_duration_seconds seconds\n"));
        assert!(
            body.ends_with("gpu_exporter_sample_age_seconds 0\n# EOF\n"),
            "{body}"
        );
    }

    #[test]
    fn scrape_time_families_are_appended() {
        let exposition = render(&snapshot(), 0.5, Instant::now());
        let later = exposition.sampled_at + std::time::Duration::from_millis(2500);
        let mut http = HttpCounters {
            open_connections: 3,
            web_config_reload_failed: true,
            ..HttpCounters::default()
        };
        http.rejected[Rejection::Unauthorized as usize] = 7;
        let body = String::from_utf8(exposition.body(Format::Text, later, &http)).unwrap();
        assert!(body.contains("gpu_exporter_http_open_connections 3\n"));
        assert!(body.contains("gpu_exporter_http_rejected_total{reason=\"unauthorized\"} 7\n"));
        assert!(body.contains("gpu_exporter_http_rejected_total{reason=\"header_timeout\"} 0\n"));
        assert!(body.contains("gpu_exporter_web_config_last_reload_successful 0\n"));
        assert!(
            body.ends_with("gpu_exporter_sample_age_seconds 2.5\n"),
            "{body}"
        );
    }

    #[test]
    fn values_and_labels_are_escaped() {
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(1e-7), "0.0000001");
        assert_eq!(format_value(3.0), "3");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn every_unit_is_the_suffix_of_its_name() {
        for def in [
            &CPU_SECONDS,
            &DISK_READ_BYTES,
            &PSI_RATIO,
            &SAMPLE_AGE,
            &MEM_TOTAL,
        ] {
            assert!(def.name.ends_with(def.unit.unwrap()), "{}", def.name);
        }
    }
}
