//! Where a GPU process's CPUs are: which NUMA node each CPU is on, and who uses the CPUs a
//! process may run on (its own tree, or everyone else).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::procfs;
use crate::snapshot::ProcessContext;

/// CPU → NUMA node from `<sysfs>/devices/system/node/node<N>/cpulist`.
pub(super) fn read_cpu_nodes(sysfs: &Path) -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    let Ok(entries) = std::fs::read_dir(sysfs.join("devices/system/node")) else {
        return map;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(node) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node")?.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(list) = std::fs::read_to_string(entry.path().join("cpulist")) {
            for cpu in procfs::parse_cpu_list(&list).unwrap_or_default() {
                map.insert(cpu, node);
            }
        }
    }
    map
}

/// Splits the busy time of the CPUs each GPU process may run on between the GPU process trees
/// and everyone else: a rank pinned to a few CPUs starves when others take those CPUs, however
/// idle the rest of the node is. A tree's CPU time is spread evenly over the CPUs it may run
/// on (the kernel does not say where it ran). Nothing is set while some tree's CPU use is
/// still unknown (first tick), so that its CPU is never counted as someone else's.
pub fn share_cpus(contexts: &mut [ProcessContext], busy_by_cpu: &[(u32, f64)]) {
    let busy: BTreeMap<u32, f64> = busy_by_cpu.iter().copied().collect();
    let known_cpus = |c: &ProcessContext| -> Vec<u32> {
        c.allowed_cpus
            .iter()
            .copied()
            .filter(|id| busy.contains_key(id))
            .collect()
    };
    let mut trees: BTreeMap<u32, f64> = BTreeMap::new();
    for c in contexts.iter() {
        let (Some(main), Some(workers), Some(others)) = (
            c.cpu_cores,
            c.workers.cpu_cores,
            c.other_children.known_cpu_cores(),
        ) else {
            return;
        };
        let cpus = known_cpus(c);
        for id in &cpus {
            *trees.entry(*id).or_default() += (main + workers + others) / cpus.len() as f64;
        }
    }
    for c in contexts.iter_mut() {
        let cpus = known_cpus(c);
        if cpus.is_empty() {
            continue;
        }
        let count = cpus.len() as f64;
        let (mut own, mut others) = (0.0, 0.0);
        for id in &cpus {
            let trees_here = trees.get(id).copied().unwrap_or(0.0).min(busy[id]);
            own += trees_here;
            others += busy[id] - trees_here;
        }
        c.own_cpu_ratio = Some((own / count).clamp(0.0, 1.0));
        c.others_cpu_ratio = Some((others / count).clamp(0.0, 1.0));
    }
}
