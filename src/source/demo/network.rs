//! The simulated node's network: a 100 GbE data NIC and a 10 GbE management NIC, four
//! 400 Gb/s InfiniBand ports (the two-rank job's all-reduce crossing one of them, with some
//! congestion waits but far from saturation: that job waits for its slow rank, not the
//! wire), an NFS data set and an object-store FUSE mount, and each GPU process's pod traffic.

use std::time::Duration;

use super::{wobble, Role};
use crate::snapshot::{
    IbPortCounters, IbPortSnapshot, InterfaceCounters, InterfaceSnapshot, LinkRates, NetworkMount,
    NetworkSnapshot, NfsCounters, NfsOpCounters, NfsOpRates, NfsRates, ProcessMount,
    ProcessNetwork,
};

/// The NFS export the vision pods read their data set from.
const DATASETS: &str = "10.20.0.5:/datasets";

fn rates(receive: f64, transmit: f64) -> Option<LinkRates> {
    Some(LinkRates {
        receive_bytes_per_second: receive,
        transmit_bytes_per_second: transmit,
    })
}

fn interface(
    name: &str,
    gbits: f64,
    (receive, transmit): (f64, f64),
    seconds: f64,
) -> InterfaceSnapshot {
    InterfaceSnapshot {
        counters: InterfaceCounters {
            name: name.into(),
            receive_bytes: (receive * seconds) as u64,
            transmit_bytes: (transmit * seconds) as u64,
            ..InterfaceCounters::default()
        },
        speed_bytes_per_second: Some(gbits * 125e6),
        up: true,
        rates: rates(receive, transmit),
    }
}

fn port(device: &str, (receive, transmit): (f64, f64), waits: f64, seconds: f64) -> IbPortSnapshot {
    IbPortSnapshot {
        counters: IbPortCounters {
            device: device.into(),
            port: 1,
            receive_bytes: Some((receive * seconds) as u64),
            transmit_bytes: Some((transmit * seconds) as u64),
            transmit_wait_ticks: Some((waits * seconds) as u64),
            symbol_errors: Some(0),
            link_downed: Some(0),
        },
        rate_bytes_per_second: Some(400.0 * 125e6),
        active: true,
        link_layer: "InfiniBand".into(),
        rates: rates(receive, transmit),
        transmit_wait_ticks_per_second: Some(waits),
    }
}

/// The data set's NFS mount: small-file reads at a healthy 1.5 ms round trip.
fn datasets(seconds: f64, now: Duration) -> NetworkMount {
    let reads = 900.0 + 50.0 * wobble(3, now, 40.0);
    let op = |name: &str, per_second: f64, rtt: f64| {
        (
            NfsOpCounters {
                name: name.into(),
                requests: (per_second * seconds) as u64,
                rtt_ms: (per_second * rtt * 1000.0 * seconds) as u64,
                execute_ms: (per_second * rtt * 1100.0 * seconds) as u64,
            },
            NfsOpRates {
                name: name.into(),
                per_second,
                rtt_seconds: rtt,
                execute_seconds: rtt * 1.1,
            },
        )
    };
    let ops = [
        op("READ", reads, 0.0015),
        op("GETATTR", 300.0, 0.0004),
        op("LOOKUP", 40.0, 0.0005),
        op("OPEN", 40.0, 0.0008),
    ];
    let read_bytes = reads * 128e3;
    NetworkMount {
        device: DATASETS.into(),
        mount_point: "/var/lib/kubelet/pods/datasets/volumes/kubernetes.io~nfs/datasets".into(),
        fstype: "nfs4".into(),
        nfs: Some(NfsCounters {
            read_bytes: (read_bytes * seconds) as u64,
            operations: ops.iter().map(|(c, _)| c.clone()).collect(),
        }),
        nfs_rates: Some(NfsRates {
            read_bytes_per_second: read_bytes,
            operations: ops.into_iter().map(|(_, r)| r).collect(),
        }),
    }
}

/// The node's network at `now`; `processes` are the GPU main processes with their cases.
pub(super) fn network(now: Duration, processes: &[(u32, Role)]) -> NetworkSnapshot {
    let seconds = now.as_secs_f64();
    // The all-reduce of the two-rank job: 40 % of a 400 Gb/s port each way.
    let all_reduce = 0.4 * 400.0 * 125e6 * (1.0 + 0.03 * wobble(6, now, 20.0));
    NetworkSnapshot {
        interfaces: vec![
            interface("eth0", 100.0, (2.4e9, 3.0e8), seconds),
            interface("eth1", 10.0, (2.0e6, 1.5e6), seconds),
        ],
        infiniband: vec![
            port("mlx5_0", (all_reduce, all_reduce), 2.0e4, seconds),
            port("mlx5_1", (1.0e8, 1.0e8), 0.0, seconds),
            port("mlx5_2", (0.0, 0.0), 0.0, seconds),
            port("mlx5_3", (0.0, 0.0), 0.0, seconds),
        ],
        mounts: vec![
            datasets(seconds, now),
            NetworkMount {
                device: "s3fs".into(),
                mount_point: "/var/lib/kubelet/pods/features/volumes/s3/features".into(),
                fstype: "fuse.s3fs".into(),
                nfs: None,
                nfs_rates: None,
            },
        ],
        processes: processes
            .iter()
            .map(|&(pid, role)| process(pid, role))
            .collect(),
    }
}

/// A GPU process's pod traffic and mounts: the vision pods read the NFS data set, the
/// storage-starved one fastest; the two ranks of the job exchange gradients over RDMA, which
/// their pod's interfaces do not see.
fn process(pid: u32, role: Role) -> ProcessNetwork {
    let (receive, transmit) = match role {
        Role::DataIo => (1.1e8, 2.0e6),
        Role::DataCpu => (3.0e8, 3.0e6),
        Role::Idle => (1.0e3, 1.0e3),
        _ => (2.0e7, 1.0e6),
    };
    let mut mounts = vec![ProcessMount {
        device: DATASETS.into(),
        fstype: "nfs4".into(),
        mount_point: "/data".into(),
    }];
    if role == Role::DataCpu {
        mounts.push(ProcessMount {
            device: "s3fs".into(),
            fstype: "fuse.s3fs".into(),
            mount_point: "/features".into(),
        });
    }
    ProcessNetwork {
        pid,
        host_network: false,
        rates: rates(receive, transmit),
        interface: Some("eth0".into()),
        mounts: Some(mounts),
    }
}
