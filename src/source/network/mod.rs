//! The network around the GPUs, as three sources that fail apart: `network` (the node's NICs,
//! and each GPU process's namespace traffic and network mounts), `infiniband` (HCA ports) and
//! `network_filesystems` (NFS, Lustre, FUSE and other network mounts).
//!
//! The node's own figures are read through pid 1 (`<procfs>/1/net/dev`, `<procfs>/1/mountstats`):
//! with hostPID, the exporter's own `/proc/self` is its pod's namespace, not the node's.

pub mod infiniband;
pub mod mounts;
pub mod nic;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{elapsed_since, HostRoots, Previous, Source, SourceError};
use crate::config::{MountsConfig, NetworkConfig};
use crate::snapshot::{
    IbPortSnapshot, InterfaceCounters, InterfaceSnapshot, NetworkMount, NfsCounters, ProcessMount,
    ProcessNetwork, Snapshot,
};

/// Reads `<procfs>/1/<file>`, or the exporter's own where pid 1 is not visible (no hostPID).
fn read_node_file(roots: &HostRoots, file: &str) -> Result<String, SourceError> {
    roots
        .read_proc(&format!("1/{file}"))
        .or_else(|_| roots.read_proc(file))
}

/// The `network` source: the node's interfaces and each GPU process's network.
pub struct NetworkSource {
    roots: HostRoots,
    config: NetworkConfig,
    previous: HashMap<String, Previous<(u64, u64)>>,
    previous_processes: HashMap<u32, Previous<(u64, u64)>>,
    /// Each GPU process's mounts, as last read (`None`: unreadable).
    process_mounts: HashMap<u32, Previous<Option<Vec<ProcessMount>>>>,
}

/// How long a process's mount table is kept before it is read again: training jobs mount
/// their storage at start, and the table (hundreds of lines in a pod) is the largest file the
/// source reads per process.
const MOUNTS_KEPT: Duration = Duration::from_secs(30);

impl NetworkSource {
    /// A source reading `<procfs>/1/net/dev`, `<procfs>/<pid>/net/dev` and `<sysfs>/class/net`.
    pub fn new(roots: HostRoots, config: NetworkConfig) -> Self {
        NetworkSource {
            roots,
            config,
            previous: HashMap::new(),
            previous_processes: HashMap::new(),
            process_mounts: HashMap::new(),
        }
    }

    fn interface(&mut self, counters: InterfaceCounters, now: Duration) -> InterfaceSnapshot {
        let class = self.roots.sysfs.join("class/net").join(&counters.name);
        let read = |name: &str| std::fs::read_to_string(class.join(name)).unwrap_or_default();
        let bytes = (counters.receive_bytes, counters.transmit_bytes);
        let rates = elapsed_since(self.previous.get(&counters.name), now)
            .and_then(|(seconds, before)| nic::link_rates(*before, bytes, seconds));
        self.previous.insert(
            counters.name.clone(),
            Previous {
                at: now,
                value: bytes,
            },
        );
        InterfaceSnapshot {
            speed_bytes_per_second: nic::parse_speed(&read("speed")),
            up: read("operstate").trim() == "up",
            rates,
            counters,
        }
    }

    /// The network namespace of `<procfs>/<pid>` (its `ns/net` link); `None` where it cannot
    /// be read (it needs ptrace access).
    fn namespace_of(&self, pid: &str) -> Option<PathBuf> {
        std::fs::read_link(self.roots.procfs.join(pid).join("ns/net")).ok()
    }

    /// The interfaces `pid` sees and whether they are the node's namespace (then only the
    /// physical ones are kept, as the node's `net/dev` read them): by the namespace links
    /// where they can be read (`own`, pid 1's), else by the interfaces it sees being the
    /// node's with the same counters (read a moment apart: within 1 %). `None` where its
    /// `net/dev` cannot be read (it exited).
    fn interfaces_of(
        &self,
        pid: u32,
        (own, node_namespace): (Option<&PathBuf>, Option<&PathBuf>),
        node: &[InterfaceCounters],
        physical: &[&str],
    ) -> Option<(bool, Vec<InterfaceCounters>)> {
        let physical_only = |seen: &mut Vec<InterfaceCounters>| {
            seen.retain(|i| physical.contains(&i.name.as_str()));
        };
        if own.is_some() && own == node_namespace {
            // The node's namespace, whose `net/dev` was read already.
            let mut seen = node.to_vec();
            physical_only(&mut seen);
            return Some((true, seen));
        }
        let text = self.roots.read_proc(&format!("{pid}/net/dev")).ok()?;
        let mut seen = nic::parse_net_dev(&text).ok()?;
        let close = |a: u64, b: u64| a.abs_diff(b) as f64 <= 0.01 * a.max(b) as f64 + 4096.0;
        let host_network = match (own, node_namespace) {
            (Some(own), Some(node)) => own == node,
            _ => {
                seen.len() == node.len()
                    && seen.iter().zip(node).all(|(a, b)| {
                        a.name == b.name
                            && close(a.receive_bytes, b.receive_bytes)
                            && close(a.transmit_bytes, b.transmit_bytes)
                    })
            }
        };
        if host_network {
            physical_only(&mut seen);
        }
        Some((host_network, seen))
    }

    /// The mounts `pid` sees; `None` where its mountinfo is unreadable.
    fn mounts_of(&self, pid: u32) -> Option<Vec<ProcessMount>> {
        let text = self.roots.read_proc(&format!("{pid}/mountinfo")).ok()?;
        Some(
            mounts::parse_mountinfo(&text)
                .into_iter()
                .map(|(device, fstype, mount_point)| ProcessMount {
                    device,
                    fstype,
                    mount_point,
                })
                .collect(),
        )
    }

    /// Each GPU process's namespace traffic and network mounts. A process in the node's
    /// namespace sees the virtual interfaces too (veth, bridges: the pods' traffic a second
    /// time), so its traffic is that of the node's physical interfaces.
    fn processes(
        &mut self,
        pids: impl Iterator<Item = u32>,
        node: &[InterfaceCounters],
        physical: &[&str],
        now: Duration,
    ) -> Vec<ProcessNetwork> {
        let mut previous = std::mem::take(&mut self.previous_processes);
        let mut kept_mounts = std::mem::take(&mut self.process_mounts);
        let mut networks = Vec::new();
        // The ranks of a pod share its namespace: its `net/dev` is read once a tick.
        let node_namespace = self.namespace_of("1");
        let mut read: HashMap<PathBuf, (bool, Vec<InterfaceCounters>)> = HashMap::new();
        for pid in pids {
            let own = self.namespace_of(&pid.to_string());
            let known = own.as_ref().and_then(|n| read.get(n)).cloned();
            // A process that exited since the GPU source listed it has no namespace to read.
            let Some((host_network, seen)) = known.or_else(|| {
                self.interfaces_of(pid, (own.as_ref(), node_namespace.as_ref()), node, physical)
            }) else {
                continue;
            };
            if let Some(own) = own {
                read.entry(own)
                    .or_insert_with(|| (host_network, seen.clone()));
            }
            let bytes = nic::namespace_bytes(&seen);
            let interface = seen
                .iter()
                .filter(|i| i.name != "lo")
                .max_by_key(|i| i.receive_bytes)
                .map(|i| i.name.clone());
            let rates = elapsed_since(previous.remove(&pid).as_ref(), now)
                .and_then(|(seconds, before)| nic::link_rates(*before, bytes, seconds));
            self.previous_processes.insert(
                pid,
                Previous {
                    at: now,
                    value: bytes,
                },
            );
            let mounts = match kept_mounts.remove(&pid) {
                Some(kept) if now.saturating_sub(kept.at) < MOUNTS_KEPT => kept,
                _ => Previous {
                    at: now,
                    value: self.mounts_of(pid),
                },
            };
            let process_mounts = mounts.value.clone();
            self.process_mounts.insert(pid, mounts);
            networks.push(ProcessNetwork {
                pid,
                host_network,
                rates,
                interface,
                mounts: process_mounts,
            });
        }
        networks
    }
}

impl Source for NetworkSource {
    /// It reads the network namespace of each GPU process gpu listed.
    fn after(&self) -> &'static [&'static str] {
        &["gpu"]
    }

    fn name(&self) -> &'static str {
        "network"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let text = read_node_file(&self.roots, "net/dev")?;
        let node =
            nic::parse_net_dev(&text).map_err(|e| SourceError::Failed(format!("net/dev: {e}")))?;
        let class = self.roots.sysfs.join("class/net");
        let physical: Vec<&str> = node
            .iter()
            .map(|i| i.name.as_str())
            .filter(|name| class.join(name).join("device").exists())
            .collect();
        let mut interfaces = Vec::new();
        for counters in node.iter().cloned() {
            let is_physical = physical.contains(&counters.name.as_str());
            if nic::is_selected(&counters.name, is_physical, &self.config) {
                interfaces.push(self.interface(counters, now));
            }
        }
        // Interfaces that vanished are not carried over: their series disappear.
        self.previous
            .retain(|name, _| interfaces.iter().any(|i| &i.counters.name == name));
        interfaces.sort_by(|a, b| a.counters.name.cmp(&b.counters.name));
        snapshot.network.interfaces = interfaces;
        let pids = snapshot.gpu_pids().into_iter();
        snapshot.network.processes = self.processes(pids, &node, &physical, now);
        Ok(())
    }
}

/// A port's received and transmitted bytes and its transmit-wait ticks, as last read.
type PortCounts = (u64, u64, u64);

/// The `infiniband` source: every HCA port.
pub struct InfinibandSource {
    class: std::path::PathBuf,
    previous: HashMap<(String, u32), Previous<PortCounts>>,
}

impl InfinibandSource {
    /// A source reading `<sysfs>/class/infiniband`.
    pub fn new(sysfs: &Path) -> Self {
        InfinibandSource {
            class: sysfs.join("class/infiniband"),
            previous: HashMap::new(),
        }
    }
}

impl Source for InfinibandSource {
    fn name(&self) -> &'static str {
        "infiniband"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let ports =
            infiniband::read_ports(&self.class).map_err(|e| SourceError::io(&self.class, &e))?;
        if ports.is_empty() {
            return Err(SourceError::Unsupported(format!(
                "no InfiniBand or RoCE device under {}",
                self.class.display()
            )));
        }
        let mut previous = std::mem::take(&mut self.previous);
        snapshot.network.infiniband = ports
            .into_iter()
            .map(|port| {
                let c = &port.counters;
                let key = (c.device.clone(), c.port);
                let now_counters = (
                    c.receive_bytes.unwrap_or(0),
                    c.transmit_bytes.unwrap_or(0),
                    c.transmit_wait_ticks.unwrap_or(0),
                );
                let before = previous.remove(&key);
                let elapsed = elapsed_since(before.as_ref(), now);
                let rates = elapsed.and_then(|(seconds, &(rx, tx, _))| {
                    c.receive_bytes.and(c.transmit_bytes)?;
                    nic::link_rates((rx, tx), (now_counters.0, now_counters.1), seconds)
                });
                let waits = elapsed.and_then(|(seconds, &(_, _, wait))| {
                    let delta = c.transmit_wait_ticks?.checked_sub(wait)?;
                    Some(delta as f64 / seconds)
                });
                self.previous.insert(
                    key,
                    Previous {
                        at: now,
                        value: now_counters,
                    },
                );
                IbPortSnapshot {
                    counters: port.counters,
                    rate_bytes_per_second: port.rate_bytes_per_second,
                    active: port.active,
                    link_layer: port.link_layer,
                    rates,
                    transmit_wait_ticks_per_second: waits,
                }
            })
            .collect();
        Ok(())
    }
}

/// The `network_filesystems` source: network and FUSE mounts, NFS statistics.
pub struct NetworkFilesystemsSource {
    roots: HostRoots,
    config: MountsConfig,
    previous: HashMap<String, Previous<NfsCounters>>,
}

impl NetworkFilesystemsSource {
    /// A source reading `<procfs>/1/mountstats` (the node's mount namespace).
    pub fn new(roots: HostRoots, config: MountsConfig) -> Self {
        NetworkFilesystemsSource {
            roots,
            config,
            previous: HashMap::new(),
        }
    }
}

impl NetworkFilesystemsSource {
    /// The node's mountstats: pid 1's, which only uid 0 may read (mode 0400); the exporter's
    /// own where pid 1 is not visible (no hostPID).
    fn read_mountstats(&self) -> Result<String, SourceError> {
        let node = self.roots.procfs.join("1/mountstats");
        match std::fs::read_to_string(&node) {
            Ok(text) => Ok(text),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(SourceError::Unsupported(format!(
                    "{}: {e} (readable by uid 0 only: run the exporter as uid 0, as the DaemonSet does)",
                    node.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.roots.read_proc("self/mountstats")
            }
            Err(e) => Err(SourceError::io(&node, &e)),
        }
    }
}

impl Source for NetworkFilesystemsSource {
    fn name(&self) -> &'static str {
        "network_filesystems"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let text = self.read_mountstats()?;
        let entries = mounts::parse_mountstats(&text)
            .map_err(|e| SourceError::Failed(format!("mountstats: {e}")))?;
        let mut previous = std::mem::take(&mut self.previous);
        let mut kept: Vec<NetworkMount> = Vec::new();
        for entry in entries {
            // A bind mount of the same filesystem (a CSI volume staged once, published per
            // pod) repeats its statistics: the first mount point stands for it.
            if entry.nfs.is_some()
                && kept
                    .iter()
                    .any(|m| m.device == entry.device && m.nfs == entry.nfs)
            {
                continue;
            }
            let before = previous.remove(&entry.mount_point);
            let nfs_rates = entry.nfs.as_ref().and_then(|nfs| {
                let (seconds, before) = elapsed_since(before.as_ref(), now)?;
                mounts::nfs_rates(before, nfs, seconds)
            });
            if let Some(nfs) = &entry.nfs {
                self.previous.insert(
                    entry.mount_point.clone(),
                    Previous {
                        at: now,
                        value: nfs.clone(),
                    },
                );
            }
            kept.push(NetworkMount {
                device: entry.device,
                mount_point: entry.mount_point,
                fstype: entry.fstype,
                nfs: entry.nfs,
                nfs_rates,
            });
        }
        let read_rate = |m: &NetworkMount| {
            m.nfs_rates
                .as_ref()
                .map_or(-1.0, |r| r.read_bytes_per_second)
        };
        kept.sort_by(|a, b| {
            read_rate(b)
                .total_cmp(&read_rate(a))
                .then_with(|| a.mount_point.cmp(&b.mount_point))
        });
        kept.truncate(self.config.max_mounts);
        kept.sort_by(|a, b| a.mount_point.cmp(&b.mount_point));
        snapshot.network.mounts = kept;
        Ok(())
    }
}
