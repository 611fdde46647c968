//! What the network source reads: the node's NICs, its InfiniBand / RoCE ports, its network
//! filesystems, and the traffic of each GPU process's network namespace.

/// The node's network: the network source fills the interfaces and the GPU processes', the
/// infiniband source the ports, the network_filesystems source the mounts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkSnapshot {
    /// Selected interfaces (physical ones by default), sorted by name.
    pub interfaces: Vec<InterfaceSnapshot>,
    /// InfiniBand / RoCE ports, sorted by device and port.
    pub infiniband: Vec<IbPortSnapshot>,
    /// Mounts of network and FUSE filesystems, sorted by mount point.
    pub mounts: Vec<NetworkMount>,
    /// Each GPU process's network namespace traffic and network mounts, by pid.
    pub processes: Vec<ProcessNetwork>,
}

/// Counters of one interface, as /proc/net/dev has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    pub receive_bytes: u64,
    /// Receive errors (CRC, frame, FIFO and length errors the driver counts).
    pub receive_errors: u64,
    /// Received packets dropped (no buffer, filtered).
    pub receive_drops: u64,
    /// Bytes transmitted.
    pub transmit_bytes: u64,
    /// Transmit errors.
    pub transmit_errors: u64,
    /// Packets dropped on transmit.
    pub transmit_drops: u64,
}

/// One interface on one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InterfaceSnapshot {
    /// Its counters.
    pub counters: InterfaceCounters,
    /// Link speed in bytes per second (`None` where the driver reports none: down, virtual).
    pub speed_bytes_per_second: Option<f64>,
    /// Whether its operational state is `up`.
    pub up: bool,
    /// Rates over the last interval (`None` on the first read or after a counter reset).
    pub rates: Option<LinkRates>,
}

/// Traffic of a link over the last interval, in both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkRates {
    /// Bytes received per second.
    pub receive_bytes_per_second: f64,
    /// Bytes transmitted per second.
    pub transmit_bytes_per_second: f64,
}

impl LinkRates {
    /// The busier direction's share of a full-duplex link of `speed` bytes per second.
    pub fn utilization(&self, speed: f64) -> Option<f64> {
        (speed > 0.0).then(|| {
            (self
                .receive_bytes_per_second
                .max(self.transmit_bytes_per_second)
                / speed)
                .min(1.0)
        })
    }
}

/// Counters of one InfiniBand / RoCE port (/sys/class/infiniband/<device>/ports/<port>), in
/// bytes where the kernel counts 4-byte words; `None` for a counter the driver lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IbPortCounters {
    /// HCA name (`mlx5_0`).
    pub device: String,
    /// Port number.
    pub port: u32,
    /// Data bytes received (`port_rcv_data` × 4).
    pub receive_bytes: Option<u64>,
    /// Data bytes transmitted (`port_xmit_data` × 4).
    pub transmit_bytes: Option<u64>,
    /// Ticks the port had data to send but no credits to send it (`port_xmit_wait`):
    /// congestion downstream.
    pub transmit_wait_ticks: Option<u64>,
    /// Minor link errors (`symbol_error`).
    pub symbol_errors: Option<u64>,
    /// Times the link went down (`link_downed`).
    pub link_downed: Option<u64>,
}

/// One InfiniBand / RoCE port on one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IbPortSnapshot {
    /// Its counters.
    pub counters: IbPortCounters,
    /// Signalling rate in bytes per second (`rate`: "200 Gb/sec (4X HDR)").
    pub rate_bytes_per_second: Option<f64>,
    /// Whether the port is `ACTIVE`.
    pub active: bool,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// Data rates over the last interval.
    pub rates: Option<LinkRates>,
    /// Transmit-wait ticks per second over the last interval.
    pub transmit_wait_ticks_per_second: Option<f64>,
}

/// Counters of one NFS operation on one mount (a `per-op statistics` line of mountstats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NfsOpCounters {
    /// Operation name (`READ`, `GETATTR`, `LOOKUP`, `OPEN`).
    pub name: String,
    /// Requests completed.
    pub requests: u64,
    /// Milliseconds from transmission to the reply, summed over the requests.
    pub rtt_ms: u64,
    /// Milliseconds from queueing to completion, summed over the requests.
    pub execute_ms: u64,
}

/// An operation's figures over the last interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NfsOpRates {
    /// Operation name.
    pub name: String,
    /// Requests completed per second.
    pub per_second: f64,
    /// Mean round-trip time of those requests (0 when none).
    pub rtt_seconds: f64,
    /// Mean execution time of those requests, queueing included (0 when none).
    pub execute_seconds: f64,
}

/// An NFS mount's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NfsCounters {
    /// Bytes read from the server (`bytes:` serverreadbytes).
    pub read_bytes: u64,
    /// The operations that describe a data set's reads, in [`NFS_OPERATIONS`] order (an
    /// operation the protocol version lacks is absent).
    pub operations: Vec<NfsOpCounters>,
}

/// The NFS operations reported: reading data and the metadata round trips that small-file
/// data sets multiply.
pub const NFS_OPERATIONS: [&str; 4] = ["READ", "GETATTR", "LOOKUP", "OPEN"];

/// A mount of a network or FUSE filesystem.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkMount {
    /// What is mounted (`server:/export`, the FUSE program's name).
    pub device: String,
    /// Where.
    pub mount_point: String,
    /// Filesystem type (`nfs4`, `lustre`, `fuse.s3fs`).
    pub fstype: String,
    /// NFS statistics (NFS mounts only).
    pub nfs: Option<NfsCounters>,
    /// NFS figures over the last interval.
    pub nfs_rates: Option<NfsRates>,
}

/// An NFS mount's figures over the last interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NfsRates {
    /// Bytes read from the server per second.
    pub read_bytes_per_second: f64,
    /// Per operation, in [`NFS_OPERATIONS`] order.
    pub operations: Vec<NfsOpRates>,
}

impl NfsRates {
    /// The figures of one operation.
    pub fn operation(&self, name: &str) -> Option<&NfsOpRates> {
        self.operations.iter().find(|o| o.name == name)
    }
}

/// A GPU process's network: its namespace's traffic (its pod's interfaces, loopback left
/// out) and the network filesystems it has mounted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessNetwork {
    /// The GPU process.
    pub pid: u32,
    /// Whether that namespace is the node's own (host networking, bare metal): its traffic is
    /// then the node's, not the job's alone.
    pub host_network: bool,
    /// Rates over the last interval.
    pub rates: Option<LinkRates>,
    /// The interface of its namespace that received the most (`eth0` in a pod).
    pub interface: Option<String>,
    /// The network and FUSE filesystems its mount namespace holds (`None` where its
    /// mountinfo is unreadable).
    pub mounts: Option<Vec<ProcessMount>>,
}

/// A network or FUSE filesystem as a GPU process sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessMount {
    /// What is mounted (matches a [`NetworkMount`]'s device).
    pub device: String,
    /// Filesystem type.
    pub fstype: String,
    /// Where the process sees it (inside its container).
    pub mount_point: String,
}
