//! Families of the network: the node's NICs, its InfiniBand / RoCE ports, its network
//! filesystems, and each GPU process's namespace traffic.

use std::collections::HashMap;

use super::*;
use crate::snapshot::{GpuSnapshot, LinkRates, NetworkSnapshot};

/// How to read one direction's bytes per second from a link's rates.
type Direction = fn(&LinkRates) -> f64;

/// The two directions of a link, as labelled, and how to read each from its rates.
const DIRECTIONS: [(&str, Direction); 2] = [
    ("receive", |r| r.receive_bytes_per_second),
    ("transmit", |r| r.transmit_bytes_per_second),
];

pub(super) fn network_families(network: &NetworkSnapshot, out: &mut Vec<Family>) {
    interface_families(network, out);
    infiniband_families(network, out);
    mount_families(network, out);
}

fn interface_families(network: &NetworkSnapshot, out: &mut Vec<Family>) {
    let mut bytes = Family::new(&NET_BYTES);
    let mut rate = Family::new(&NET_BPS);
    let mut utilization = Family::new(&NET_UTIL);
    let mut speed = Family::new(&NET_SPEED);
    let mut up = Family::new(&NET_UP);
    let mut errors = Family::new(&NET_ERRORS);
    let mut drops = Family::new(&NET_DROPS);
    for interface in &network.interfaces {
        let c = &interface.counters;
        let name = c.name.as_str();
        for (direction, counted) in [
            (
                "receive",
                (c.receive_bytes, c.receive_errors, c.receive_drops),
            ),
            (
                "transmit",
                (c.transmit_bytes, c.transmit_errors, c.transmit_drops),
            ),
        ] {
            bytes.add(&[name, direction], counted.0 as f64);
            errors.add(&[name, direction], counted.1 as f64);
            drops.add(&[name, direction], counted.2 as f64);
        }
        if let Some(rates) = &interface.rates {
            for (direction, of) in DIRECTIONS {
                rate.add(&[name, direction], of(rates));
                if let Some(link) = interface.speed_bytes_per_second {
                    utilization.add(&[name, direction], (of(rates) / link).min(1.0));
                }
            }
        }
        if let Some(link) = interface.speed_bytes_per_second {
            speed.add(&[name], link);
        }
        up.add(&[name], flag(interface.up));
    }
    out.extend([bytes, rate, utilization, speed, up, errors, drops]);
}

fn infiniband_families(network: &NetworkSnapshot, out: &mut Vec<Family>) {
    let mut bytes = Family::new(&IB_BYTES);
    let mut rate = Family::new(&IB_BPS);
    let mut utilization = Family::new(&IB_UTIL);
    let mut link_rate = Family::new(&IB_RATE);
    let mut active = Family::new(&IB_ACTIVE);
    let mut waits = Family::new(&IB_WAIT);
    let mut wait_rate = Family::new(&IB_WAIT_RATE);
    let mut symbol_errors = Family::new(&IB_SYMBOL_ERRORS);
    let mut link_downed = Family::new(&IB_LINK_DOWNED);
    for port in &network.infiniband {
        let c = &port.counters;
        let number = c.port.to_string();
        let key = [c.device.as_str(), number.as_str()];
        for (direction, counted) in [("receive", c.receive_bytes), ("transmit", c.transmit_bytes)] {
            if let Some(value) = counted {
                bytes.add(&[key[0], key[1], direction], value as f64);
            }
        }
        if let Some(rates) = &port.rates {
            for (direction, of) in DIRECTIONS {
                rate.add(&[key[0], key[1], direction], of(rates));
                if let Some(link) = port.rate_bytes_per_second {
                    utilization.add(&[key[0], key[1], direction], (of(rates) / link).min(1.0));
                }
            }
        }
        if let Some(link) = port.rate_bytes_per_second {
            link_rate.add(&[key[0], key[1], port.link_layer.as_str()], link);
        }
        active.add(&key, flag(port.active));
        let counters = [
            (&mut waits, c.transmit_wait_ticks),
            (&mut symbol_errors, c.symbol_errors),
            (&mut link_downed, c.link_downed),
        ];
        for (family, value) in counters {
            if let Some(v) = value {
                family.add(&key, v as f64);
            }
        }
        if let Some(per_second) = port.transmit_wait_ticks_per_second {
            wait_rate.add(&key, per_second);
        }
    }
    out.extend([
        bytes,
        rate,
        utilization,
        link_rate,
        active,
        waits,
        wait_rate,
        symbol_errors,
        link_downed,
    ]);
}

fn mount_families(network: &NetworkSnapshot, out: &mut Vec<Family>) {
    let mut info = Family::new(&NETFS_INFO);
    let mut read_bytes = Family::new(&NFS_READ_BYTES);
    let mut read_rate = Family::new(&NFS_READ_BPS);
    let mut requests = Family::new(&NFS_REQUESTS);
    let mut operations = Family::new(&NFS_OPS);
    let mut rtt = Family::new(&NFS_RTT);
    let mut execute = Family::new(&NFS_EXECUTE);
    for mount in &network.mounts {
        let at = mount.mount_point.as_str();
        info.add(&[at, &mount.device, &mount.fstype], 1.0);
        let Some(nfs) = &mount.nfs else { continue };
        read_bytes.add(&[at], nfs.read_bytes as f64);
        for op in &nfs.operations {
            requests.add(&[at, &op.name], op.requests as f64);
        }
        let Some(rates) = &mount.nfs_rates else {
            continue;
        };
        read_rate.add(&[at], rates.read_bytes_per_second);
        for op in &rates.operations {
            operations.add(&[at, &op.name], op.per_second);
            rtt.add(&[at, &op.name], op.rtt_seconds);
            execute.add(&[at, &op.name], op.execute_seconds);
        }
    }
    out.extend([
        info, read_bytes, read_rate, requests, operations, rtt, execute,
    ]);
}

/// Each GPU process's namespace traffic, labelled like its GPU process series.
pub(super) fn process_network_families(
    gpu: &GpuSnapshot,
    network: &NetworkSnapshot,
    out: &mut Vec<Family>,
) {
    let mut rate = Family::new(&PROC_NET_BPS);
    let mut host = Family::new(&PROC_HOST_NETWORK);
    let by_pid: HashMap<u32, _> = network.processes.iter().map(|n| (n.pid, n)).collect();
    for device in gpu.devices.iter().filter(|d| d.up) {
        let index = device.index.to_string();
        for process in &device.processes {
            let Some(traffic) = by_pid.get(&process.pid) else {
                continue;
            };
            let pid = process.pid.to_string();
            let base = [index.as_str(), &device.uuid, &pid, &process.command];
            host.add(&base, flag(traffic.host_network));
            if let Some(rates) = &traffic.rates {
                for (direction, of) in DIRECTIONS {
                    rate.add(&[base[0], base[1], base[2], base[3], direction], of(rates));
                }
            }
        }
    }
    out.extend([rate, host]);
}
