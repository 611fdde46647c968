//! The CUDA boundary, seen from outside the job: uprobes on the CUDA driver (`libcuda.so*`)
//! that each GPU process maps, found in `/proc/<pid>/maps` and probed through
//! `/proc/<pid>/root` (a container's own copy is its own file). Per process and thread: kernel
//! and graph launches, host↔device copies (count, bytes, direction), and the time spent inside
//! the driver's waits (stream, device and event syncs, copies to or from the host), which no
//! Python frame names: `.item()`, `bool(t)`, `.to("cuda")` from pageable memory and every
//! other implicit sync end there. A thread inside a wait now is what [`WaitsNow`] tells the
//! stack sampler.
//!
//! Mechanism (docs/development.md): small BPF programs assembled in `programs.rs`, attached to
//! the uprobe PMU with `perf_event_open` — no BPF toolchain at build time, nothing injected into
//! the job. One attachment per driver file serves every process mapping it. Needs CAP_BPF and
//! CAP_PERFMON (or CAP_SYS_ADMIN); without them the source is unsupported
//! (`gpu_exporter_signal_supported{signal="cuda_probes"} 0`) and nothing else changes. Each hit
//! costs the traced thread a trap (about a microsecond); hot entry points are counted in the
//! kernel, only waits are timed.

pub mod bpf;
pub mod elf;
mod libraries;
pub mod programs;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::bpf::{Attached, Map, Program, UprobePmu};
use self::libraries::cuda_driver;
use super::{Source, SourceError};
use crate::snapshot::{CudaThread, CudaTotals, CudaWait, ProcessCuda, Snapshot};

/// The signal `gpu_exporter_signal_supported` reports when the probes are refused.
pub const CUDA_SIGNAL: &str = "cuda_probes";

/// Entries each map holds: (process, thread, probe) keys of the GPU processes.
const MAP_ENTRIES: u32 = 16384;

/// What a probed entry point counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Launch,
    GraphLaunch,
    ToDevice,
    ToHost,
}

/// One entry point of the driver: counted on entry, timed as a wait, or both (a copy).
struct Probe {
    symbol: &'static str,
    counted: Option<Counted>,
    wait: Option<CudaWait>,
}

const fn probe(symbol: &'static str, counted: Option<Counted>, wait: Option<CudaWait>) -> Probe {
    Probe {
        symbol,
        counted,
        wait,
    }
}

/// The entry points, by probe number. `_ptsz` / `_ptds` are the per-thread-default-stream
/// forms a runtime built with `--default-stream per-thread` calls.
const PROBES: &[Probe] = &[
    probe("cuLaunchKernel", Some(Counted::Launch), None),
    probe("cuLaunchKernel_ptsz", Some(Counted::Launch), None),
    probe("cuLaunchKernelEx", Some(Counted::Launch), None),
    probe("cuLaunchKernelEx_ptsz", Some(Counted::Launch), None),
    probe("cuGraphLaunch", Some(Counted::GraphLaunch), None),
    probe("cuGraphLaunch_ptsz", Some(Counted::GraphLaunch), None),
    probe(
        "cuMemcpyHtoD_v2",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoD_v2_ptds",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoDAsync_v2",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoDAsync_v2_ptsz",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoH_v2",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoH_v2_ptds",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoHAsync_v2",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoHAsync_v2_ptsz",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe("cuStreamSynchronize", None, Some(CudaWait::Stream)),
    probe("cuStreamSynchronize_ptsz", None, Some(CudaWait::Stream)),
    probe("cuCtxSynchronize", None, Some(CudaWait::Device)),
    probe("cuEventSynchronize", None, Some(CudaWait::Event)),
];

/// The maps the programs fill (programs.rs gives their layout).
struct Maps {
    counts: Map,
    starts: Map,
    waits: Map,
}

/// Whether a thread is inside a CUDA driver wait now: what a stack sample asks, so that a
/// sample taken there is a GPU sync whatever the Python line reads.
#[derive(Clone)]
pub struct WaitsNow {
    maps: Arc<Maps>,
    /// The processes whose driver is probed (updated every tick).
    probed: Arc<Mutex<HashSet<u32>>>,
}

impl WaitsNow {
    /// `None` for a process the probes do not watch (no driver mapped, or it could not be
    /// probed): the stacks then infer from the line.
    pub fn inside(&self, pid: u32, tid: u32) -> Option<bool> {
        let probed = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        if !probed.contains(&pid) {
            return None;
        }
        let key = (u64::from(pid) << 32) | u64::from(tid);
        Some(self.maps.starts.get(&key.to_ne_bytes()).is_some())
    }
}

/// A (process, thread, probe) key of `counts` and `waits`.
fn decode_key(key: &[u8]) -> Option<(u32, u32, usize)> {
    let word = |i: usize| Some(u32::from_ne_bytes(key.get(i..i + 4)?.try_into().ok()?));
    Some((word(0)?, word(4)?, word(8)? as usize))
}

/// A (hits, bytes or nanoseconds) value.
fn decode_value(value: &[u8]) -> Option<(u64, u64)> {
    let word = |i: usize| Some(u64::from_ne_bytes(value.get(i..i + 8)?.try_into().ok()?));
    Some((word(0)?, word(8)?))
}

/// Per (process, thread, probe): cumulative hits and bytes (counts) or nanoseconds (waits).
type Reading = HashMap<(u32, u32, usize), (u64, u64)>;

/// Folds one read of the maps into per-process totals, and (against the previous read,
/// `seconds` before) the threads that used the driver in between. Pure.
pub fn fold(
    counts: &Reading,
    waits: &Reading,
    before: Option<(&Reading, &Reading, f64)>,
) -> Vec<ProcessCuda> {
    let mut processes: HashMap<u32, ProcessCuda> = HashMap::new();
    let mut threads: HashMap<(u32, u32), CudaThread> = HashMap::new();
    fn totals(processes: &mut HashMap<u32, ProcessCuda>, pid: u32) -> &mut CudaTotals {
        let process = processes.entry(pid).or_insert_with(|| ProcessCuda {
            pid,
            totals: CudaTotals::default(),
            threads: Vec::new(),
        });
        &mut process.totals
    }
    fn thread(
        threads: &mut HashMap<(u32, u32), CudaThread>,
        pid: u32,
        tid: u32,
    ) -> &mut CudaThread {
        threads.entry((pid, tid)).or_insert(CudaThread {
            tid,
            launches_per_second: 0.0,
            wait_ratio: 0.0,
        })
    }
    for (&(pid, tid, probe), &(hits, bytes)) in counts {
        let Some(counted) = PROBES.get(probe).and_then(|p| p.counted) else {
            continue;
        };
        let totals = totals(&mut processes, pid);
        match counted {
            Counted::Launch => totals.launches += hits,
            Counted::GraphLaunch => totals.graph_launches += hits,
            Counted::ToDevice => {
                totals.copies_to_device += hits;
                totals.bytes_to_device += bytes;
            }
            Counted::ToHost => {
                totals.copies_to_host += hits;
                totals.bytes_to_host += bytes;
            }
        }
        if let Some((previous, _, seconds)) = before {
            let launched = matches!(counted, Counted::Launch | Counted::GraphLaunch);
            let old = previous.get(&(pid, tid, probe)).map_or(0, |v| v.0);
            if launched && hits > old && seconds > 0.0 {
                thread(&mut threads, pid, tid).launches_per_second += (hits - old) as f64 / seconds;
            }
        }
    }
    for (&(pid, tid, probe), &(_, nanos)) in waits {
        let Some(kind) = PROBES.get(probe).and_then(|p| p.wait) else {
            continue;
        };
        totals(&mut processes, pid).wait_seconds[kind as usize] += nanos as f64 / 1e9;
        if let Some((_, previous, seconds)) = before {
            let old = previous.get(&(pid, tid, probe)).map_or(0, |v| v.1);
            if nanos > old && seconds > 0.0 {
                thread(&mut threads, pid, tid).wait_ratio += (nanos - old) as f64 / 1e9 / seconds;
            }
        }
    }
    for ((pid, _), thread) in threads {
        if let Some(process) = processes.get_mut(&pid) {
            process.threads.push(CudaThread {
                wait_ratio: thread.wait_ratio.min(1.0),
                ..thread
            });
        }
    }
    let mut found: Vec<ProcessCuda> = processes.into_values().collect();
    for process in &mut found {
        process.threads.sort_by(|a, b| {
            b.launches_per_second
                .total_cmp(&a.launches_per_second)
                .then(a.tid.cmp(&b.tid))
        });
    }
    found.sort_by_key(|p| p.pid);
    found
}

/// The probes on one driver file; dropping it detaches them.
struct Library {
    _attached: Vec<Attached>,
}

/// Attaches every probe the driver at `path` has.
fn attach(pmu: UprobePmu, maps: &Maps, path: &Path) -> io::Result<Library> {
    let bytes = std::fs::read(path)?;
    let symbols: Vec<&str> = PROBES.iter().map(|p| p.symbol).collect();
    let offsets = elf::offsets(&bytes, &symbols).map_err(io::Error::other)?;
    let mut attached = Vec::new();
    for (number, (probe, offset)) in PROBES.iter().zip(offsets).enumerate() {
        let Some(offset) = offset else { continue };
        let number = number as u32;
        if let Some(counted) = probe.counted {
            let copy = matches!(counted, Counted::ToDevice | Counted::ToHost);
            let program = Program::load(&programs::count(maps.counts.fd(), number, copy))?;
            attached.push(Attached::new(pmu, path, offset, false, program)?);
        }
        if probe.wait.is_some() {
            let entry = Program::load(&programs::wait_entry(maps.starts.fd(), number))?;
            attached.push(Attached::new(pmu, path, offset, false, entry)?);
            let exit = programs::wait_exit(maps.starts.fd(), maps.waits.fd(), number);
            attached.push(Attached::new(
                pmu,
                path,
                offset,
                true,
                Program::load(&exit)?,
            )?);
        }
    }
    if attached.is_empty() {
        return Err(io::Error::other(
            "none of the probed entry points is exported",
        ));
    }
    Ok(Library {
        _attached: attached,
    })
}

/// Why the probes cannot run, worded for the log.
fn refusal(error: &io::Error) -> String {
    if error.kind() == io::ErrorKind::PermissionDenied {
        "BPF or perf_event refused: the probes need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); \
         as shipped, the Helm value `cudaProbes` and deploy/kubernetes grant them"
            .to_string()
    } else {
        format!("uprobes unavailable: {error}")
    }
}

/// The source: driver files attached once each, the maps read every tick.
pub struct CudaSource {
    procfs: PathBuf,
    setup: Result<(Arc<Maps>, UprobePmu), String>,
    /// Per driver file (device, inode): its probes, or why it could not be probed.
    libraries: HashMap<(String, u64), Result<Library, String>>,
    /// The GPU processes mapping a probed driver, shared with [`WaitsNow`].
    probed: Arc<Mutex<HashSet<u32>>>,
    previous: Option<(Reading, Reading, Duration)>,
}

impl CudaSource {
    pub fn new(procfs: PathBuf, sysfs: &Path) -> CudaSource {
        let setup = (|| {
            let maps = Maps {
                counts: Map::hash(16, 16, MAP_ENTRIES)?,
                starts: Map::hash(8, 16, MAP_ENTRIES)?,
                waits: Map::hash(16, 16, MAP_ENTRIES)?,
            };
            Ok((Arc::new(maps), UprobePmu::find(sysfs)?))
        })()
        .map_err(|e: io::Error| refusal(&e));
        if let Err(why) = &setup {
            tracing::warn!("cuda probes: {why}");
        }
        CudaSource {
            procfs,
            setup,
            libraries: HashMap::new(),
            probed: Arc::default(),
            previous: None,
        }
    }

    /// The in-wait question for the stack sampler, when the probes can run.
    pub fn waits_now(&self) -> Option<WaitsNow> {
        self.setup.as_ref().ok().map(|(maps, _)| WaitsNow {
            maps: maps.clone(),
            probed: self.probed.clone(),
        })
    }

    /// Attaches the driver files the GPU processes map that are not attached yet, and lets
    /// go of those none maps any more.
    fn track_libraries(&mut self, pmu: UprobePmu, maps: &Maps, pids: &BTreeSet<u32>) {
        let mut mapped = HashSet::new();
        let mut probed = HashSet::new();
        for &pid in pids {
            let Ok(text) = std::fs::read_to_string(self.procfs.join(format!("{pid}/maps"))) else {
                continue; // exited, or no ptrace access: its process source says which
            };
            for library in cuda_driver(&text) {
                let key = (library.device.clone(), library.inode);
                if !self.libraries.contains_key(&key) {
                    let path = self
                        .procfs
                        .join(format!("{pid}/root"))
                        .join(library.path.trim_start_matches('/'));
                    let probes = attach(pmu, maps, &path).map_err(|e| refusal(&e));
                    match &probes {
                        Ok(_) => {
                            tracing::info!(pid, library = %library.path, "cuda probes attached")
                        }
                        Err(why) => {
                            tracing::warn!(pid, library = %library.path, "cuda probes: {why}")
                        }
                    }
                    self.libraries.insert(key.clone(), probes);
                }
                if self.libraries.get(&key).is_some_and(Result::is_ok) {
                    probed.insert(pid);
                }
                mapped.insert(key);
            }
        }
        self.libraries.retain(|key, _| mapped.contains(key));
        *self.probed.lock().unwrap_or_else(|p| p.into_inner()) = probed;
    }
}

/// Every entry of a map, decoded; entries of processes not in `keep` are deleted.
fn read_map(map: &Map, keep: &HashSet<u32>) -> Reading {
    let mut reading = Reading::new();
    for (key, value) in map.entries() {
        let (Some(k), Some(v)) = (decode_key(&key), decode_value(&value)) else {
            continue;
        };
        if keep.contains(&k.0) {
            reading.insert(k, v);
        } else {
            map.delete(&key);
        }
    }
    reading
}

impl Source for CudaSource {
    /// It probes the GPU processes gpu listed.
    fn after(&self) -> &'static [&'static str] {
        &["gpu"]
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let (maps, pmu) = match &self.setup {
            Ok((maps, pmu)) => (maps.clone(), *pmu),
            Err(why) => {
                snapshot.unsupported_signals.push(CUDA_SIGNAL);
                return Err(SourceError::Unsupported(why.clone()));
            }
        };
        let pids = snapshot.gpu_pids();
        self.track_libraries(pmu, &maps, &pids);
        let keep: HashSet<u32> = pids.iter().copied().collect();
        let counts = read_map(&maps.counts, &keep);
        let waits = read_map(&maps.waits, &keep);
        for (key, _) in maps.starts.entries() {
            let pid = key
                .get(4..8)
                .map(|b| u32::from_ne_bytes(b.try_into().unwrap_or_default()));
            if pid.is_some_and(|pid| !keep.contains(&pid)) {
                maps.starts.delete(&key);
            }
        }
        let before = self
            .previous
            .as_ref()
            .map(|(c, w, at)| (c, w, now.saturating_sub(*at).as_secs_f64()));
        snapshot.cuda = fold(&counts, &waits, before);
        self.previous = Some((counts, waits, now));
        let refused = self
            .libraries
            .values()
            .filter_map(|l| l.as_ref().err())
            .find(|why| why.starts_with("BPF or perf_event refused"));
        if let Some(why) = refused {
            snapshot.unsupported_signals.push(CUDA_SIGNAL);
            if self.libraries.values().all(Result::is_err) {
                return Err(SourceError::Unsupported(why.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(symbol: &str) -> usize {
        PROBES.iter().position(|p| p.symbol == symbol).unwrap()
    }

    #[test]
    fn totals_add_up_by_kind_and_threads_are_what_changed_since_the_last_read() {
        let launch = number("cuLaunchKernel");
        let graph = number("cuGraphLaunch");
        let to_host = number("cuMemcpyDtoHAsync_v2");
        let stream = number("cuStreamSynchronize");
        let before_counts = Reading::from([((7, 7, launch), (1000, 0)), ((7, 9, launch), (50, 0))]);
        let before_waits = Reading::from([((7, 7, stream), (10, 2_000_000_000))]);
        let counts = Reading::from([
            ((7, 7, launch), (3000, 0)),
            ((7, 9, launch), (50, 0)),
            ((7, 9, graph), (4, 0)),
            ((7, 7, to_host), (20, 80)),
        ]);
        let waits = Reading::from([
            ((7, 7, stream), (30, 3_000_000_000)),
            ((7, 7, to_host), (20, 500_000_000)),
            ((8, 8, stream), (1, 1_000)),
        ]);
        let found = fold(&counts, &waits, Some((&before_counts, &before_waits, 2.0)));
        assert_eq!(found.len(), 2);
        let p = &found[0];
        assert_eq!((p.totals.launches, p.totals.graph_launches), (3050, 4));
        assert_eq!((p.totals.copies_to_host, p.totals.bytes_to_host), (20, 80));
        assert_eq!(p.totals.wait(CudaWait::Stream), 3.0);
        assert_eq!(p.totals.wait(CudaWait::Copy), 0.5);
        // Over 2 s: the main thread launched 2,000 (1,000/s) and waited 1 s in syncs and the
        // whole copy wait it had not had before (0.5 s): 0.75 of the time; thread 9 launched
        // two graphs a second.
        assert_eq!(p.threads[0].tid, 7);
        assert_eq!(p.threads[0].launches_per_second, 1000.0);
        assert!((p.threads[0].wait_ratio - 0.75).abs() < 1e-9);
        assert_eq!(
            (p.threads[1].tid, p.threads[1].launches_per_second),
            (9, 2.0)
        );
        // The first read has totals and no threads.
        assert!(fold(&counts, &waits, None)
            .iter()
            .all(|p| p.threads.is_empty()));
    }

    #[test]
    fn keys_and_values_decode_as_the_programs_write_them() {
        let mut key = Vec::new();
        for word in [7u32, 9, 3, 0] {
            key.extend(word.to_ne_bytes());
        }
        assert_eq!(decode_key(&key), Some((7, 9, 3)));
        let mut value = 5u64.to_ne_bytes().to_vec();
        value.extend(80u64.to_ne_bytes());
        assert_eq!(decode_value(&value), Some((5, 80)));
        assert_eq!(decode_key(&key[..6]), None);
    }
}
