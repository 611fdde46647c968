//! The maps the probes' programs fill, and their reading.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;

use super::bpf::Map;
use super::readings::{decode, Reading};
use super::ring::Ring;

/// Entries each counting map holds: (process, thread, probe) keys of the GPU processes.
const MAP_ENTRIES: u32 = 16384;

/// Entries each per-thread map holds (a thread inside a wait or a held launch now): a node's
/// GPU processes have a few driving threads each. Smaller than the counting maps because a
/// tick walks them and a walk visits every bucket (16,384 buckets: some 25 µs).
const THREAD_ENTRIES: u32 = 4096;

/// Bytes of the marks' ring: 16384 marks of 32 bytes, several seconds of a collective-heavy
/// node's calls (a full ring drops marks until the next read, which only thins the cadence).
const MARKS_RING_BYTES: u32 = 1 << 19;

/// The maps the programs fill (programs.rs gives their layout).
pub struct Maps {
    pub counts: Map,
    pub starts: Map,
    /// The launches' open entries, apart from the waits' (programs.rs), and when each thread's
    /// first launch held for room in the queue began and its last returned, in this window.
    pub launch_starts: Map,
    pub held_first: Map,
    pub held_last: Map,
    /// The open calls creating an NCCL communicator, by `pid_tgid` (start ns, probe): apart
    /// from `starts`, whose entries mean a GPU sync to the stack sampler.
    pub communicator_starts: Map,
    pub waits: Map,
    /// Key 0: not zero while a launch window is open, between its last attach and its first
    /// detach; the launches' count programs count only then, so that the window's launches
    /// are those of the span it measures (attaching and detaching take tens of milliseconds
    /// here and evidently far longer on a real node, the launches trapping meanwhile).
    pub window_open: Map,
    /// `None` where the kernel has no BPF ring buffer (before Linux 5.8): no step timing,
    /// the rest of the probes as before.
    pub marks: Option<Ring>,
}

impl Maps {
    /// Creates every map (BPF's `map_create`: CAP_BPF, or root's capabilities).
    pub fn create() -> io::Result<Maps> {
        Ok(Maps {
            counts: Map::hash(16, 16, MAP_ENTRIES)?,
            starts: Map::hash(8, 16, THREAD_ENTRIES)?,
            launch_starts: Map::hash(8, 16, THREAD_ENTRIES)?,
            held_first: Map::hash(8, 8, THREAD_ENTRIES)?,
            held_last: Map::hash(8, 8, THREAD_ENTRIES)?,
            communicator_starts: Map::hash(8, 16, THREAD_ENTRIES)?,
            waits: Map::hash(16, 16, MAP_ENTRIES)?,
            window_open: Map::hash(4, 8, 1)?,
            marks: Ring::new(MARKS_RING_BYTES)
                .inspect_err(|e| {
                    tracing::warn!("cuda probes: no BPF ring buffer ({e}): steps not timed")
                })
                .ok(),
        })
    }
}

/// Per process, of the times (ns) its threads have in a map keyed by `pid_tgid` whose values
/// start with one (a wait's start, a held launch's return), the one `pick` keeps (`u64::min`,
/// `u64::max`); entries of processes not in `keep` (where given) are deleted.
pub fn per_process(
    map: &Map,
    keep: Option<&HashSet<u32>>,
    pick: fn(u64, u64) -> u64,
) -> HashMap<u32, u64> {
    per_process_and_threads(map, keep, pick).0
}

/// [`per_process`], and the (process, thread) of every entry kept, from the same walk.
pub fn per_process_and_threads(
    map: &Map,
    keep: Option<&HashSet<u32>>,
    pick: fn(u64, u64) -> u64,
) -> (HashMap<u32, u64>, Vec<(u32, u32)>) {
    let mut picked: HashMap<u32, u64> = HashMap::new();
    let mut threads = Vec::new();
    for (key, value) in map.entries() {
        let word = |bytes: &[u8]| Some(u64::from_ne_bytes(bytes.get(0..8)?.try_into().ok()?));
        let (Some(pid_tgid), Some(ns)) = (word(&key), word(&value)) else {
            continue;
        };
        let pid = (pid_tgid >> 32) as u32;
        if keep.is_some_and(|keep| !keep.contains(&pid)) {
            map.delete(&key);
            continue;
        }
        threads.push((pid, pid_tgid as u32));
        let entry = picked.entry(pid).or_insert(ns);
        *entry = pick(*entry, ns);
    }
    (picked, threads)
}

/// Every entry of a map, decoded (a collective's entries per datatype added up); entries of
/// processes not in `keep` (where given) are deleted.
pub fn read_map(map: &Map, keep: Option<&HashSet<u32>>) -> Reading {
    let mut reading = Reading::new();
    for (key, value) in map.entries() {
        let Some((k, (hits, measured))) = decode(&key, &value) else {
            continue;
        };
        if keep.is_none_or(|keep| keep.contains(&k.0)) {
            let entry = reading.entry(k).or_default();
            *entry = (entry.0 + hits, entry.1 + measured);
        } else {
            map.delete(&key);
        }
    }
    reading
}

/// Per process whose driver is probed, the threads that called it, waited in it, or wait in
/// it now (a first wait has no count yet): those a stack sample's question looks up.
pub fn threads_calling(
    probed: &HashSet<u32>,
    counts: &Reading,
    waits: &Reading,
    inside: &[(u32, u32)],
) -> HashMap<u32, Vec<u32>> {
    let mut callers: HashMap<u32, Vec<u32>> = probed.iter().map(|&pid| (pid, Vec::new())).collect();
    let called = counts
        .keys()
        .chain(waits.keys())
        .map(|&(pid, tid, _)| (pid, tid));
    for (pid, tid) in called.chain(inside.iter().copied()) {
        if let Some(threads) = callers.get_mut(&pid) {
            threads.push(tid);
        }
    }
    for threads in callers.values_mut() {
        threads.sort_unstable();
        threads.dedup();
    }
    callers
}

/// Per process, when its earliest open creation of an NCCL communicator began. Kept for
/// processes NVML does not list yet (a rank calls ncclCommInitRank within milliseconds of its
/// first allocation, before a tick lists it: deleting those, as the other maps' are, would
/// lose the call for good); deleted once the process is gone.
pub fn communicators_being_created(map: &Map, procfs: &Path) -> HashMap<u32, u64> {
    let (began, threads) = per_process_and_threads(map, None, u64::min);
    for (pid, tid) in threads {
        if !procfs.join(pid.to_string()).exists() {
            map.delete(&((u64::from(pid) << 32) | u64::from(tid)).to_ne_bytes());
        }
    }
    began
}
