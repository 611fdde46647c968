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
const CELSIUS: Option<&str> = Some("celsius");
const WATTS: Option<&str> = Some("watts");
const JOULES: Option<&str> = Some("joules");
const HERTZ: Option<&str> = Some("hertz");

// Self-observability.
metric!(BUILD, "gpu_exporter_build", Info, None, ["version", "commit", "mode"], "Build of the running exporter; mode is \"node\" or \"demo\" (a simulated node: nothing it reports is real).");
metric!(SOURCE_UP, "gpu_exporter_source_up", Gauge, None, ["source"], "1 if the source produced data on the last tick, 0 if it failed or is not supported on this host.");
metric!(SOURCE_SUPPORTED, "gpu_exporter_source_supported", Gauge, None, ["source"], "0 if the host does not offer this source at all (e.g. no /proc/pressure), else 1.");
metric!(SOURCE_DURATION, "gpu_exporter_source_duration_seconds", Gauge, SECONDS, ["source"], "Wall time the source took on the last tick.");
metric!(SOURCE_ERRORS, "gpu_exporter_source_errors", Counter, None, ["source"], "Ticks on which the source failed.");
metric!(SIGNAL_SUPPORTED, "gpu_exporter_signal_supported", Gauge, None, ["signal"], "0 for a signal the exporter lacks the privilege to read on this tick (process_read_bytes needs CAP_SYS_PTRACE unless the process runs as the exporter's uid with no capability the exporter lacks); readable signals have no series.");
metric!(SAMPLES, "gpu_exporter_samples", Counter, None, [], "Ticks the sampler has taken.");
metric!(SAMPLE_DURATION, "gpu_exporter_sample_duration_seconds", Gauge, SECONDS, [], "Wall time of the last tick, all sources together.");
metric!(HTTP_OPEN_CONNECTIONS, "gpu_exporter_http_open_connections", Gauge, None, [], "Connections the HTTP server is serving now.");
metric!(HTTP_REJECTED, "gpu_exporter_http_rejected", Counter, None, ["reason"], "Connections or requests turned away: connection_limit (503), tls_handshake, header_timeout, bad_request (incl. 431), write_timeout, unauthorized (401), request_timeout (503).");
metric!(WEB_CONFIG_OK, "gpu_exporter_web_config_last_reload_successful", Gauge, None, [], "0 while the latest change to the web configuration file could not be applied (the previous settings stay in force), else 1.");
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

// NVML and GPUs.
metric!(NVML_UP, "gpu_exporter_nvml_up", Gauge, None, [], "1 if the NVML library is loaded and answering, 0 if not (then gpu_exporter_nvml_error_info says why).");
metric!(NVML_ERROR, "gpu_exporter_nvml_error", Info, None, ["reason"], "Present while NVML is unavailable: library_not_found, driver_not_loaded, no_permission, symbol_missing, ...");
metric!(GPU_DEVICES, "gpu_devices", Gauge, None, [], "GPUs NVML counts, including any that stopped answering.");
metric!(GPU_INFO, "gpu", Info, None, ["gpu", "uuid", "model", "pci_bus_id", "numa_node", "cpu_affinity", "vbios_version", "architecture", "brand", "driver_version", "cuda_driver_version", "node"], "Identity of each GPU; numa_node and cpu_affinity are empty where NVML does not say; node is NODE_NAME (or the hostname).");
metric!(GPU_POD, "gpu_pod", Info, None, ["gpu", "uuid", "namespace", "pod", "container"], "A pod container the kubelet assigned the GPU to (several under time-slicing or MIG); absent off Kubernetes or when unassigned.");
metric!(ALLOCATABLE, "gpu_allocatable", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 when the kubelet's device plugin can hand the GPU (or its MIG devices) to pods, 0 when it cannot (not advertised); absent off Kubernetes.");
metric!(ALLOCATED_IDLE, "gpu_allocated_idle", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 when the GPU is assigned to a pod but has had no process or no activity for sources.kubernetes.allocated_idle_after (10 minutes), else 0; present for assigned GPUs.");
metric!(ALLOCATED_IDLE_SECONDS, "gpu_allocated_idle_seconds", Gauge, SECONDS, ["gpu", "uuid", "namespace", "pod", "container"], "How long the assigned GPU has been idle (present while it is).");
metric!(GPU_UP, "gpu_up", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 if the GPU answered on the last tick, 0 if it is lost or failing (its other series are then absent).");
metric!(GPU_FEATURE, "gpu_feature_supported", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "feature"], "0 for each measurement this GPU or driver does not offer (learned on first use, never asked again); a supported feature has no series, so a missing reading is told from an unsupported one.");
metric!(GPU_UTIL, "gpu_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Share of NVML's last sample period in which a kernel ran (the classic GPU-Util; not SM occupancy).");
metric!(GPU_MEM_UTIL, "gpu_memory_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Share of NVML's last sample period in which device memory was read or written.");
metric!(BUSY_MEAN, "gpu_busy_mean_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Mean of the utilization samples NVML buffered since the previous tick.");
metric!(BUSY_IDLE, "gpu_busy_idle_share_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Share of utilization samples since the previous tick at or below 5 %: how often the GPU sat waiting.");
metric!(BUSY_SAMPLES, "gpu_busy_samples", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Number of utilization samples summarised on the last tick.");
metric!(GPU_MEM_TOTAL, "gpu_memory_total_bytes", Gauge, BYTES, ["gpu", "uuid", "namespace", "pod", "container"], "Installed device memory.");
metric!(GPU_MEM_USED, "gpu_memory_used_bytes", Gauge, BYTES, ["gpu", "uuid", "namespace", "pod", "container"], "Device memory allocated by processes.");
metric!(GPU_TEMP, "gpu_temperature_celsius", Gauge, CELSIUS, ["gpu", "uuid", "namespace", "pod", "container"], "GPU die temperature.");
metric!(GPU_TEMP_SLOWDOWN, "gpu_temperature_slowdown_celsius", Gauge, CELSIUS, ["gpu", "uuid", "namespace", "pod", "container"], "Temperature at which the GPU starts slowing its clocks.");
metric!(GPU_POWER, "gpu_power_watts", Gauge, WATTS, ["gpu", "uuid", "namespace", "pod", "container"], "Board power draw.");
metric!(GPU_POWER_LIMIT, "gpu_power_limit_watts", Gauge, WATTS, ["gpu", "uuid", "namespace", "pod", "container"], "Enforced power limit.");
metric!(GPU_POWER_LIMIT_DEFAULT, "gpu_power_limit_default_watts", Gauge, WATTS, ["gpu", "uuid", "namespace", "pod", "container"], "The board's default power limit: an enforced limit below it means the GPU was capped.");
metric!(GPU_PSTATE, "gpu_performance_state", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Performance state, 0 (P0, fastest) to 15 (slowest): a busy GPU should be in P0.");
metric!(GPU_FAN, "gpu_fan_speed_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Mean speed of the board's fans as a share of their maximum (absent on boards cooled by the chassis).");
metric!(GPU_ENCODER, "gpu_encoder_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Share of NVML's last sample period the video encoders were busy.");
metric!(GPU_DECODER, "gpu_decoder_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "Share of NVML's last sample period the video decoders (NVDEC) were busy: GPU-side decoding in the input pipeline.");
metric!(GPU_ENERGY, "gpu_energy_joules", Counter, JOULES, ["gpu", "uuid", "namespace", "pod", "container"], "Energy consumed since the driver loaded.");
metric!(GPU_CLOCK, "gpu_clock_hertz", Gauge, HERTZ, ["gpu", "uuid", "namespace", "pod", "container", "domain"], "Current clock of the sm and memory domains (graphics runs with sm on data-centre GPUs).");
metric!(GPU_CLOCK_MAX, "gpu_clock_max_hertz", Gauge, HERTZ, ["gpu", "uuid", "namespace", "pod", "container", "domain"], "Maximum clock of the domain.");
metric!(GPU_THROTTLE, "gpu_throttle_reason", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "reason"], "1 for each clock-event (throttle) reason NVML reports active; inactive reasons have no series.");
metric!(PCIE_GEN, "gpu_pcie_link_generation", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Current PCIe link generation (drops at idle to save power).");
metric!(PCIE_WIDTH, "gpu_pcie_link_width", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Current PCIe link width in lanes.");
metric!(PCIE_MAX_GEN, "gpu_pcie_link_max_generation", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Highest PCIe generation the GPU and slot support.");
metric!(PCIE_MAX_WIDTH, "gpu_pcie_link_max_width", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Widest PCIe link the GPU and slot support.");
metric!(PCIE_TX, "gpu_pcie_tx_bytes_per_second", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "PCIe bytes per second sent by the GPU (NVML's 20 ms sample).");
metric!(PCIE_RX, "gpu_pcie_rx_bytes_per_second", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "PCIe bytes per second received by the GPU (NVML's 20 ms sample).");
metric!(PCIE_REPLAYS, "gpu_pcie_replays", Counter, None, ["gpu", "uuid", "namespace", "pod", "container"], "PCIe link-level replays (retransmissions) since the driver loaded.");
metric!(GPU_ECC, "gpu_ecc_errors", Counter, None, ["gpu", "uuid", "namespace", "pod", "container", "type"], "ECC errors over the GPU's life (aggregate counter), by type corrected or uncorrected.");
metric!(PROC_MEM, "gpu_process_memory_used_bytes", Gauge, BYTES, ["gpu", "uuid", "pid", "command", "type"], "Device memory held by a process (the top processes per GPU by memory).");
metric!(PROC_SM, "gpu_process_sm_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command", "type"], "Share of the last interval the process's kernels occupied the SMs (0 when it ran none).");
metric!(PROC_MEM_UTIL, "gpu_process_memory_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command", "type"], "Share of the last interval the process read or wrote device memory.");
metric!(GPU_VIOLATION, "gpu_clock_limited_seconds", Counter, SECONDS, ["gpu", "uuid", "namespace", "pod", "container", "limit"], "Time the clocks were held below the requested frequency by the power cap or thermal limits, since the driver loaded.");
metric!(REMAPPED_ROWS, "gpu_memory_remapped_rows", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "cause"], "Memory rows remapped over the GPU's life after correctable or uncorrectable errors.");
metric!(REMAP_PENDING, "gpu_memory_remap_pending", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 while a row remap waits for the next GPU reset (absent otherwise).");
metric!(REMAP_FAILED, "gpu_memory_remap_failed", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 once a row remap failed: the GPU needs service (absent otherwise).");
metric!(NVLINK_ACTIVE, "gpu_nvlink_links_active", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "NVLink links of the GPU that are active (absent on GPUs without NVLink).");
metric!(NVLINK_INACTIVE, "gpu_nvlink_link_inactive", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "link"], "1 for each NVLink link of the GPU that is not active; active links have no series.");
metric!(NVLINK_TX, "gpu_nvlink_tx_bytes", Counter, BYTES, ["gpu", "uuid", "namespace", "pod", "container"], "Data bytes sent over all active NVLink links since the driver loaded.");
metric!(NVLINK_RX, "gpu_nvlink_rx_bytes", Counter, BYTES, ["gpu", "uuid", "namespace", "pod", "container"], "Data bytes received over all active NVLink links since the driver loaded.");
metric!(GPM_SM_ACTIVITY, "gpu_sm_activity_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "GPM: share of the last interval SMs had a warp resident, averaged over SMs (Hopper and newer; absent elsewhere, see gpu_feature_supported{feature=\"gpm\"}).");
metric!(GPM_SM_OCCUPANCY, "gpu_sm_occupancy_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "GPM: resident warps relative to the SMs' maximum over the last interval.");
metric!(GPM_TENSOR, "gpu_tensor_activity_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "GPM: share of the last interval any tensor pipe was busy.");
metric!(GPM_DRAM, "gpu_dram_bandwidth_utilization_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container"], "GPM: share of peak device-memory bandwidth used over the last interval.");
metric!(XID_ERRORS, "gpu_xid_errors", Counter, None, ["gpu", "uuid", "namespace", "pod", "container", "xid"], "XID errors the driver reported since the exporter started, by XID code (a series appears with the first error of a code).");
metric!(MIG_ENABLED, "gpu_mig_enabled", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 when the GPU is in MIG mode (absent on GPUs without MIG).");
metric!(MIG_INFO, "gpu_mig", Info, None, ["gpu", "uuid", "mig_uuid", "mig_index", "gpu_instance_id"], "A MIG device of the GPU, with the MIG UUID that device plugins hand to pods.");
metric!(MIG_MEM_TOTAL, "gpu_mig_memory_total_bytes", Gauge, BYTES, ["gpu", "uuid", "mig_uuid"], "Memory of the MIG device.");
metric!(MIG_MEM_USED, "gpu_mig_memory_used_bytes", Gauge, BYTES, ["gpu", "uuid", "mig_uuid"], "Memory of the MIG device in use.");
metric!(MIG_SM_ACTIVITY, "gpu_mig_sm_activity_ratio", Gauge, RATIO, ["gpu", "uuid", "mig_uuid"], "GPM: SM activity of the MIG device's GPU instance over the last interval (Hopper and newer; NVML offers no utilization rates per MIG device).");
metric!(MIG_BUSY, "gpu_mig_busy_ratio", Gauge, RATIO, ["gpu", "uuid", "mig_uuid"], "GPM: share of the last interval any kernel ran on the MIG device's GPU instance (graphics activity; Hopper and newer): the instance's busy time, which the analysis takes for a GPU in MIG mode from the instance its main process runs in.");

// Network: NICs, InfiniBand / RoCE ports, network filesystems.
metric!(NET_BYTES, "gpu_host_network_bytes", Counter, BYTES, ["interface", "direction"], "Bytes received or transmitted by a physical interface (/proc/net/dev of the node's namespace).");
metric!(NET_BPS, "gpu_host_network_bytes_per_second", Gauge, None, ["interface", "direction"], "Bytes per second received or transmitted by the interface over the last interval.");
metric!(NET_UTIL, "gpu_host_network_utilization_ratio", Gauge, RATIO, ["interface", "direction"], "Share of the interface's link speed used over the last interval, per direction (full duplex).");
metric!(NET_SPEED, "gpu_host_network_link_speed_bytes_per_second", Gauge, None, ["interface"], "Link speed of the interface (/sys/class/net/<if>/speed); absent where the driver reports none.");
metric!(NET_UP, "gpu_host_network_up", Gauge, None, ["interface"], "1 when the interface's operational state is up.");
metric!(NET_ERRORS, "gpu_host_network_errors", Counter, None, ["interface", "direction"], "Receive or transmit errors of the interface.");
metric!(NET_DROPS, "gpu_host_network_drops", Counter, None, ["interface", "direction"], "Packets dropped on receive or transmit by the interface.");
metric!(IB_BYTES, "gpu_host_infiniband_bytes", Counter, BYTES, ["device", "port", "direction"], "Data bytes received or transmitted by an InfiniBand / RoCE port (port_rcv_data / port_xmit_data, which count 4-byte words, times 4).");
metric!(IB_BPS, "gpu_host_infiniband_bytes_per_second", Gauge, None, ["device", "port", "direction"], "Data bytes per second received or transmitted by the port over the last interval.");
metric!(IB_UTIL, "gpu_host_infiniband_utilization_ratio", Gauge, RATIO, ["device", "port", "direction"], "Share of the port's rate used over the last interval, per direction.");
metric!(IB_RATE, "gpu_host_infiniband_rate_bytes_per_second", Gauge, None, ["device", "port", "link_layer"], "Signalling rate of the port (its rate file, e.g. 200 Gb/sec (4X HDR)); link_layer InfiniBand or Ethernet (RoCE).");
metric!(IB_ACTIVE, "gpu_host_infiniband_port_active", Gauge, None, ["device", "port"], "1 when the port's state is ACTIVE.");
metric!(IB_WAIT, "gpu_host_infiniband_transmit_wait_ticks", Counter, None, ["device", "port"], "Ticks during which the port had data to send but no flow-control credits (port_xmit_wait): congestion downstream. The tick length is the HCA's.");
metric!(IB_WAIT_RATE, "gpu_host_infiniband_transmit_wait_ticks_per_second", Gauge, None, ["device", "port"], "Transmit-wait ticks per second over the last interval.");
metric!(IB_SYMBOL_ERRORS, "gpu_host_infiniband_symbol_errors", Counter, None, ["device", "port"], "Minor link errors on the port (symbol_error).");
metric!(IB_LINK_DOWNED, "gpu_host_infiniband_link_downed", Counter, None, ["device", "port"], "Times the port's link went down (link_downed).");
metric!(NETFS_INFO, "gpu_host_network_filesystem", Info, None, ["mountpoint", "device", "fstype"], "A mount of a network or FUSE filesystem in the node's mount namespace (NFS, Lustre, GPFS, BeeGFS, CephFS, SMB, FUSE object-store clients, ...).");
metric!(NFS_READ_BYTES, "gpu_host_nfs_read_bytes", Counter, BYTES, ["mountpoint"], "Bytes an NFS mount read from its server (mountstats serverreadbytes).");
metric!(NFS_READ_BPS, "gpu_host_nfs_read_bytes_per_second", Gauge, None, ["mountpoint"], "Bytes per second the NFS mount read from its server over the last interval.");
metric!(NFS_REQUESTS, "gpu_host_nfs_requests", Counter, None, ["mountpoint", "operation"], "NFS requests completed on the mount, for READ, GETATTR, LOOKUP and OPEN (NFSv4).");
metric!(NFS_OPS, "gpu_host_nfs_operations_per_second", Gauge, None, ["mountpoint", "operation"], "NFS requests per second completed on the mount over the last interval.");
metric!(NFS_RTT, "gpu_host_nfs_rtt_seconds", Gauge, SECONDS, ["mountpoint", "operation"], "Mean round trip (transmission to reply) of the mount's requests over the last interval; 0 when none.");
metric!(NFS_EXECUTE, "gpu_host_nfs_execute_seconds", Gauge, SECONDS, ["mountpoint", "operation"], "Mean time from queueing to completion of the mount's requests over the last interval; 0 when none.");

// GPU process context (host side of each GPU process and its workers).
metric!(GPU_PROCESSES, "gpu_processes", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "Distinct processes with a context on the GPU (before the per-GPU series bound): more than one means they share it.");
metric!(PROC_CPU_SECONDS, "gpu_process_cpu_seconds", Counter, SECONDS, ["gpu", "uuid", "pid", "command", "mode"], "CPU time of the GPU process (its own threads, not its children), user or system.");
metric!(PROC_CPU_CORES, "gpu_process_cpu_cores", Gauge, None, ["gpu", "uuid", "pid", "command"], "CPU used by the GPU process over the last interval, in cores (1 = one core fully busy).");
metric!(PROC_BUSIEST_THREAD, "gpu_process_busiest_thread_cpu_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command"], "Share of one core used by the process's busiest thread over the last interval; near 1 is the host-bound signature.");
metric!(PROC_LOOP_CPU_WAIT, "gpu_process_loop_cpu_wait_ratio", Gauge, None, ["gpu", "uuid", "pid", "command"], "The part of gpu_process_cpu_wait_ratio of the threads that run the loop's host work: the main thread and the busiest other thread. Over it plus gpu_process_busiest_thread_cpu_ratio: the share of their runnable time they waited for a CPU.");
metric!(PROC_THREADS, "gpu_process_threads", Gauge, None, ["gpu", "uuid", "pid", "command"], "Threads of the GPU process.");
metric!(PROC_RESIDENT, "gpu_process_resident_memory_bytes", Gauge, BYTES, ["gpu", "uuid", "pid", "command"], "Host memory resident for the GPU process (VmRSS, read every 5 s; its workers not included).");
metric!(PROC_START_TIME, "gpu_process_start_time_seconds", Gauge, SECONDS, ["gpu", "uuid", "pid", "command"], "When the GPU process started, in seconds since the epoch.");
metric!(PROC_SWITCHES, "gpu_process_context_switches", Counter, None, ["gpu", "uuid", "pid", "command", "kind"], "Context switches of the GPU process's main thread: voluntary (it waited) or involuntary (preempted); read every 5 s.");
metric!(PROC_BLKIO, "gpu_process_blkio_delay_seconds", Counter, SECONDS, ["gpu", "uuid", "pid", "command"], "Time the GPU process waited for block I/O (delay accounting; absent when it is off, see gpu_host_delay_accounting_enabled).");
metric!(PROC_READ_BYTES, "gpu_process_read_bytes", Counter, BYTES, ["gpu", "uuid", "pid", "command"], "Bytes the GPU process caused to be read from storage (absent when /proc/<pid>/io is not readable).");
metric!(PROC_STATE, "gpu_process_state", Gauge, None, ["gpu", "uuid", "pid", "command", "state"], "1, labelled with the GPU process's current state: running, sleeping, disk_wait, zombie, stopped or idle.");
metric!(PROC_ALLOWED_CPUS, "gpu_process_allowed_cpus", Gauge, None, ["gpu", "uuid", "pid", "command"], "CPUs the GPU process may run on (its affinity mask or cpuset; read every 5 s).");
metric!(PROC_NUMA_MISMATCH, "gpu_process_numa_mismatch", Gauge, None, ["gpu", "uuid", "pid", "command"], "1 when threads of the process or its workers last ran on a NUMA node other than the GPU's (absent when either is unknown).");
metric!(WORKERS, "gpu_process_workers", Gauge, None, ["gpu", "uuid", "pid", "command"], "Data-loader workers below the GPU process (processes named pt_data_worker and what they start; without that name, those running the process's own executable that are not Python's or PyTorch's helpers).");
metric!(WORKERS_ASLEEP_ON, "gpu_process_workers_asleep_on", Gauge, None, ["gpu", "uuid", "pid", "command", "on"], "Sleeping loader workers by what their blocking system call waits on this tick: remote (a socket, a file on a network or FUSE mount), local_file, or idle (their own queues, a sleep, a lock: back-pressure or nothing to do). Needs ptrace access to the workers (SYS_PTRACE for other users' processes).");
metric!(OTHER_CHILDREN, "gpu_process_other_children", Gauge, None, ["gpu", "uuid", "pid", "command"], "Processes below the GPU process that are not loader workers (wandb-core, torch.compile workers, forkserver, ...); they do not count in gpu_process_workers*.");
metric!(OTHER_CHILDREN_CPU, "gpu_process_other_children_cpu_cores", Gauge, None, ["gpu", "uuid", "pid", "command"], "CPU those other children used over the last interval, in cores, summed.");
metric!(WORKERS_CPU, "gpu_process_workers_cpu_cores", Gauge, None, ["gpu", "uuid", "pid", "command"], "CPU the workers used over the last interval, in cores, summed.");
metric!(WORKERS_MAX_CPU, "gpu_process_workers_max_cpu_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command"], "Share of one core used by the busiest worker over the last interval.");
metric!(WORKERS_STATE, "gpu_process_workers_in_state", Gauge, None, ["gpu", "uuid", "pid", "command", "state"], "Workers running, in uninterruptible wait (disk_wait: usually I/O) or zombie; the rest of gpu_process_workers sleep.");
metric!(PROC_CPU_WAIT, "gpu_process_cpu_wait_ratio", Gauge, None, ["gpu", "uuid", "pid", "command"], "Mean number of the GPU process's main thread, its busiest other thread (the autograd engine's, a training thread) and its workers' main threads waiting runnable for a CPU over the last interval (run-queue delay per second, schedstat).");
metric!(PROC_NET_BPS, "gpu_process_network_bytes_per_second", Gauge, None, ["gpu", "uuid", "pid", "command", "direction"], "Bytes per second received or transmitted over the last interval by the GPU process's network namespace, loopback left out: its pod's traffic (the node's, where gpu_process_host_network is 1).");
metric!(PROC_HOST_NETWORK, "gpu_process_host_network", Gauge, None, ["gpu", "uuid", "pid", "command"], "1 when the GPU process shares the node's network namespace (host networking, bare metal).");
metric!(PROC_CUDA_LAUNCHES, "gpu_process_cuda_launches", Counter, None, ["gpu", "uuid", "pid", "command", "kind"], "Launches the GPU process made through the CUDA driver since its probes were attached: kernel (cuLaunchKernel, cuLaunchKernelEx) or graph (cuGraphLaunch, a whole captured step). Needs the CUDA probes (CAP_BPF and CAP_PERFMON).");
metric!(PROC_CUDA_COPIES, "gpu_process_cuda_copies", Counter, None, ["gpu", "uuid", "pid", "command", "direction"], "Copies between host and device (to_device, to_host) the GPU process made through the CUDA driver since its probes were attached.");
metric!(PROC_CUDA_COPY_BYTES, "gpu_process_cuda_copy_bytes", Counter, BYTES, ["gpu", "uuid", "pid", "command", "direction"], "Bytes of those copies, by direction.");
metric!(PROC_CUDA_WAIT, "gpu_process_cuda_wait_seconds", Counter, SECONDS, ["gpu", "uuid", "pid", "command", "kind"], "Time the GPU process's threads spent inside the CUDA driver waiting for the GPU, by kind: stream (cuStreamSynchronize: .item(), bool(t), a blocking copy's sync), device (cuCtxSynchronize), event (cuEventSynchronize), copy (inside a copy to or from the host). Observed at the driver: no Python line needs to name the wait.");
metric!(PROC_NCCL_COLLECTIVES, "gpu_process_nccl_collectives", Counter, None, ["gpu", "uuid", "pid", "command", "op"], "NCCL collectives the GPU process issued since its probes were attached, by operation (all_reduce, reduce_scatter, all_gather, broadcast, reduce; send and recv, the two sides of a point-to-point transfer): enqueued on the GPU, not completed (NCCL returns at once). Needs the CUDA probes and an NCCL library the process maps (libnccl.so*).");
metric!(PROC_NCCL_BYTES, "gpu_process_nccl_bytes", Counter, BYTES, ["gpu", "uuid", "pid", "command", "op"], "Bytes of those collectives' buffers (element count times the datatype's size; a reduce-scatter counts what each rank receives, an all-gather what each rank sends, a send or recv its own buffer), by operation.");
metric!(PROC_NCCL_CREATING, "gpu_process_nccl_communicator_init_seconds", Gauge, SECONDS, ["gpu", "uuid", "pid", "command"], "While a thread of the GPU process is inside NCCL's creation of a communicator (ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable, ncclCommSplit): how long it has been there, at the last read. The call returns once every rank of the communicator has made it: seconds at a job's start, minutes is a rank that never came. Absent otherwise; a call begun before the probes were attached is not seen.");
metric!(PROC_CUDA_WAITING, "gpu_process_cuda_wait_ongoing_seconds", Gauge, SECONDS, ["gpu", "uuid", "pid", "command"], "How long the GPU process's thread longest inside a CUDA driver wait has been in it, at the last read (0: no thread waits). A step's syncs end in milliseconds; minutes here, after a collective, is a rank waiting for a peer that does not come.");
metric!(PROC_STEP, "gpu_process_step_seconds", Gauge, SECONDS, ["gpu", "uuid", "pid", "command"], "The GPU process's training step: the mean period of the calls its loop makes into CUDA and NCCL every step (syncs, copies, graph launches, collectives) over the last minute, or the step in progress once it has lasted longer (a stalled or hung loop's grows). Absent where no repeating step is found.");
metric!(PROC_STEP_BEST, "gpu_process_step_best_seconds", Gauge, SECONDS, ["gpu", "uuid", "pid", "command"], "The shortest mean step any minute of the GPU process has had: its own best pace.");
metric!(PROC_CUDA_THREADS, "gpu_process_cuda_driving_threads", Gauge, None, ["gpu", "uuid", "pid", "command"], "Threads of the GPU process that launched kernels over the last interval (the main thread, the autograd engine's pt_autograd_0, ...).");
metric!(PROC_CUDA_QUEUE_FULL, "gpu_process_cuda_launch_queue_full_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command"], "Share of the time the GPU process's threads spent in kernel launches held for room in the CUDA driver's launch queue (the GPU a thousand kernels behind), timed in the launch windows: the GPU works meanwhile, whatever line the stacks read. Absent until a window sees the process launch.");
metric!(PROC_CUDA_MAIN_WAIT, "gpu_process_cuda_main_thread_wait_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command"], "Share of the last interval the GPU process's main thread spent inside CUDA driver waits.");
metric!(PROC_ACTIVITY, "gpu_process_activity_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command", "activity"], "Share of the stack window's samples in which the GPU process's main thread (or the thread that drives its GPU, where the main thread touches no CUDA) was waiting for the data loader, synchronizing with the GPU, in a collective, running Python, or other (Python processes the exporter may read; needs ptrace access).");
metric!(WORKERS_BLKIO, "gpu_process_workers_blkio_delay_ratio", Gauge, None, ["gpu", "uuid", "pid", "command"], "Block-I/O delay of the workers over the last interval, summed: the mean number of workers waiting for storage.");
metric!(WORKERS_READ, "gpu_process_workers_read_bytes_per_second", Gauge, None, ["gpu", "uuid", "pid", "command"], "Bytes the workers read from storage per second over the last interval.");
metric!(CGROUP_INFO, "gpu_process_cgroup", Info, None, ["gpu", "uuid", "pid", "command", "uid", "pod_uid", "container_id", "slurm_job"], "The GPU process's owner: its user id, and from its cgroup path the pod UID, container ID and Slurm job (empty where unknown).");
metric!(CGROUP_QUOTA, "gpu_process_cgroup_cpu_quota_cores", Gauge, None, ["gpu", "uuid", "pid", "command"], "CPU quota of the process's cgroup in cores (absent without a quota).");
metric!(CGROUP_THROTTLED_RATIO, "gpu_process_cgroup_cpu_throttled_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command"], "Share of the last interval's enforcement periods in which the cgroup was throttled.");
metric!(CGROUP_PRESSURE, "gpu_process_cgroup_pressure_stalled_ratio", Gauge, RATIO, ["gpu", "uuid", "pid", "command", "resource", "kind"], "Share of the last interval the cgroup's tasks were stalled on cpu, io or memory (cgroup v2 PSI).");
metric!(GPU_SLURM_JOB, "gpu_slurm_job", Info, None, ["gpu", "uuid", "namespace", "pod", "container", "slurm_job"], "A Slurm job running on the GPU (from its processes' cgroups), to join GPU and verdict series with the job.");
metric!(OTHER_CPU, "gpu_host_other_cpu_ratio", Gauge, RATIO, [], "Share of all host CPU used over the last interval by processes outside the GPU process trees: competition for the data pipeline.");
metric!(TOP_PROCESS_CPU, "gpu_host_top_process_cpu_cores", Gauge, None, ["pid", "command", "pod_uid", "container_id"], "CPU used by one of the node's busiest processes outside the GPU process trees (top sources.culprits.top), in cores; present only while some GPU scores data_io, data_cpu or contention.");
metric!(TOP_PROCESS_DISK, "gpu_host_top_process_disk_bytes_per_second", Gauge, None, ["pid", "command", "pod_uid", "container_id", "direction"], "Bytes per second read or written from storage by one of the node's busiest processes by disk bytes outside the GPU process trees; present only while some GPU scores data_io, data_cpu or contention (other users' processes need CAP_SYS_PTRACE).");
metric!(DELAY_ACCOUNTING, "gpu_host_delay_accounting_enabled", Gauge, None, [], "1 when the kernel's delay accounting (kernel.task_delayacct) is on, 0 when off; absent on kernels before 5.14 (on by default there).");

// Verdicts.
metric!(VERDICT, "gpu_bottleneck", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "kind"], "1 while the analysis finds this bottleneck kind active on the GPU (after the window and hysteresis), else 0. Every kind is always present for every GPU.");
metric!(VERDICT_SCORE, "gpu_bottleneck_score", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "kind"], "How strongly the window's evidence points at this kind, 0..1 (0.5 at the rule's threshold); absent while the kind is unknown.");
metric!(VERDICT_UNKNOWN, "gpu_bottleneck_unknown", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "kind"], "1 for each kind whose rule misses an input on this GPU (no GPM, no process context, no storage signal): it is not judged; judged kinds have no series.");
metric!(PRIMARY, "gpu_verdict", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "verdict", "basis"], "1, labelled with the GPU's primary verdict (hung when its main thread has sat in one collective for analysis.hang_after while the GPU spins; else the active kind that costs the most GPU time, else idle, busy or undetermined) and its basis: observed (the main thread's Python stacks, or a fact the device reports) or inferred (counters alone). One series per GPU; the labels change with the verdict.");
metric!(HANG, "gpu_collective_hang_seconds", Gauge, SECONDS, ["gpu", "uuid", "namespace", "pod", "container"], "How long the GPU's main process has sat in one collective, seen there in every recent stack sample while the GPU reads busy (NCCL's kernels spin while they wait); 0 while it is not. Past analysis.hang_after the GPU's verdict is hung. Seen by the Python stacks (ptrace access) or the CUDA and NCCL probes (the thread inside a driver wait since it issued a collective); 0 without either.");
metric!(RANK_WORKING, "gpu_rank_working", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container"], "1 while the GPU's main process works: its GPU computing (SM activity past a collective's spin), or its busiest thread on a CPU while it waits in no collective (no driver wait begun after a collective, its recent stack samples not all in one) where the stacks or the CUDA probes watch it (unwatched, a thread spinning in a CUDA wait holds a core just as one that works); 0 while it waits, sleeps or is tracked as hung, and for a GPU without processes. A rank hung in a collective on another node while a rank of its job works here waits for that work (rank 0 preprocessing the dataset while the others wait at their first collective): the fleet's hang alerts read it.");
metric!(HANG_RANKS, "gpu_collective_hang_ranks", Gauge, None, ["gpu", "uuid", "namespace", "pod", "container", "state"], "While a hang is tracked on the GPU and NCCL's RAS service (NCCL 2.24 and later) answered for its process: ranks of the job's communicators by state, missing (they do not answer RAS: a stopped or crashed process, a lost node) or behind (they answer but launched fewer collectives of some operation: they never reached the one the others wait in). Absent while no hang is tracked or RAS was not read (sources.nccl_ras).");
metric!(STRAGGLER, "gpu_straggler_score_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container", "against"], "Share of the step the GPU's rank loses against a reference (0: at its pace): against=own_best, its main process's step against its own best (1 - best/now); against=node_ranks, the job's step this rank costs against the fastest of its group's ranks on this node, from the time each spends waiting for its peers in collectives (1 - least_own_work/own_work; the fleet rule gpu:job_straggler_score:ratio compares ranks across nodes). Absent where not measured.");
metric!(LOST_TIME, "gpu_lost_time_ratio", Gauge, RATIO, ["gpu", "uuid", "namespace", "pod", "container", "cause", "basis"], "Share of the analysis window's GPU time that did no useful work for the GPU's main job, by cause: idle time split by what the job was doing (data_io, data_cpu, host_bound, sync_stall, communication, contention, unexplained) and busy time taken by other processes (contention), spent waiting in collectives (communication), with empty SMs (kernel_efficiency) or at held-down clocks (throttling). Every cause is present for every GPU whose busy fraction is known; basis as on gpu_verdict.");
