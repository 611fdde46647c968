//! An emulated device's timeline: what a workload's kernels did on the GPU. The stub CUDA
//! driver (crates/fake-cuda) and the Python emulator (`workloads/emugpu.py`) write it through
//! [`Device`]'s layout; the fake NVML reads it back ([`read`]) so that every activity call
//! answers from what actually ran.
//!
//! The file (one per GPU, little-endian) is the contract between the two:
//!
//! | offset | what |
//! |---|---|
//! | 0 | magic `EMUGPU01` |
//! | 8 | u32 record capacity, u32 process slots |
//! | 16 | u64 records written so far (the ring's head) |
//! | 24 | u64 end of the device's queue (CLOCK_MONOTONIC ns) |
//! | 64 | process slots, 16 bytes each: u32 pid, u32 0, u64 device memory held |
//! | 64 + 16 × slots | ring of records, 32 bytes each: u64 start ns, u64 end ns, u32 pid, u16 SM share, u16 occupancy, u16 tensor share, u16 DRAM share (each per mille), u32 flags (1: a collective's kernel; 2: not a kernel but the part of a host↔device copy that a PCIe link trained below its maximum added — both for the workload runner's ground truth; the driver ignores them) |
//!
//! Writers hold an exclusive `flock` while they change it; this reader holds a shared one.
//! Kernels of every process run one after another on the device's single queue, so kernel
//! records are ordered by start and never overlap; a record may lie in the future (queued, not
//! yet run). [`LINK_WAIT`] records run on the copy engines beside them: [`read`] leaves them
//! out (NVML's utilization counts kernels only).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

mod device;
mod kernel;

pub use device::{Booked, Device, Length, Shares};
pub use kernel::{now_ns, KernelCost, UNTIL_WORD};

const MAGIC: &[u8; 8] = b"EMUGPU01";
const HEADER: u64 = 64;
const SLOT: u64 = 16;
const RECORD: u64 = 32;
/// Records the ring holds and process slots, as every writer lays a new file out.
const CAPACITY: u64 = 65536;
const SLOTS: u64 = 64;
/// `flags` of a collective's kernel (for the workload runner's ground truth; NVML ignores it).
pub const COLLECTIVE_KERNEL: u32 = 1;
/// `flags` of a record that is no kernel: the time a host↔device copy took beyond what the
/// device's PCIe link at its maximum generation and width would have taken (the ground
/// truth of a degraded link; [`read`] leaves it out).
pub const LINK_WAIT: u32 = 2;
/// Records read per backward step through the ring.
const CHUNK: u64 = 1024;

/// One kernel (or a run of identical back-to-back kernels) of one process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kernel {
    pub start_ns: u64,
    pub end_ns: u64,
    pub pid: u32,
    /// Shares of the device, 0..1: SMs the kernel keeps busy, warps resident per SM of the
    /// maximum, tensor pipes, DRAM bandwidth.
    pub sm: f64,
    pub occupancy: f64,
    pub tensor: f64,
    pub dram: f64,
    /// [`COLLECTIVE_KERNEL`] or 0.
    pub flags: u32,
}

impl Kernel {
    /// Nanoseconds of the kernel inside `[from, to)`.
    fn overlap(&self, from: u64, to: u64) -> u64 {
        self.end_ns.min(to).saturating_sub(self.start_ns.max(from))
    }
}

/// What a timeline file held when read: the kernels that ended after the time asked for
/// (oldest first), and device memory per process.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    pub kernels: Vec<Kernel>,
    /// (pid, bytes) of every process slot in use, live or not.
    pub memory: Vec<(u32, u64)>,
}

/// Reads the kernels that ended at or after `since_ns` and the process table. A missing file is
/// an emulated GPU nobody has used yet: empty.
pub fn read(path: &Path, since_ns: u64) -> io::Result<Timeline> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Timeline::default()),
        Err(e) => return Err(e),
    };
    file.lock_shared()?;
    let mut header = [0u8; HEADER as usize];
    if file.read_exact_at(&mut header, 0).is_err() {
        // Created but not yet initialised by its first writer.
        return Ok(Timeline::default());
    }
    if &header[..8] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not an emulated GPU timeline", path.display()),
        ));
    }
    let capacity = u64::from(u32_at(&header, 8));
    let slots = u64::from(u32_at(&header, 12));
    let head = u64_at(&header, 16);

    let mut table = vec![0u8; (slots * SLOT) as usize];
    file.read_exact_at(&mut table, HEADER)?;
    let memory = table
        .chunks_exact(SLOT as usize)
        .map(|slot| (u32_at(slot, 0), u64_at(slot, 8)))
        .filter(|(pid, _)| *pid != 0)
        .collect();

    // Walk back from the newest record until one ended before `since_ns`.
    let ring = HEADER + slots * SLOT;
    let oldest = head.saturating_sub(capacity);
    let mut kernels = Vec::new();
    let mut next = head;
    'walk: while next > oldest {
        let first = next.saturating_sub(CHUNK).max(oldest);
        let mut chunk = vec![0u8; ((next - first) * RECORD) as usize];
        // A chunk that wraps around the end of the ring is read record by record.
        if first / capacity == (next - 1) / capacity {
            file.read_exact_at(&mut chunk, ring + (first % capacity) * RECORD)?;
        } else {
            for (i, n) in (first..next).enumerate() {
                let at = i * RECORD as usize;
                file.read_exact_at(
                    &mut chunk[at..at + RECORD as usize],
                    ring + (n % capacity) * RECORD,
                )?;
            }
        }
        for record in chunk.chunks_exact(RECORD as usize).rev() {
            let kernel = Kernel {
                start_ns: u64_at(record, 0),
                end_ns: u64_at(record, 8),
                pid: u32_at(record, 16),
                sm: permille(record, 20),
                occupancy: permille(record, 22),
                tensor: permille(record, 24),
                dram: permille(record, 26),
                flags: u32_at(record, 28),
            };
            if kernel.end_ns < since_ns {
                break 'walk;
            }
            if kernel.flags & LINK_WAIT == 0 {
                kernels.push(kernel);
            }
        }
        next = first;
    }
    kernels.reverse();
    Ok(Timeline { kernels, memory })
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn permille(bytes: &[u8], at: usize) -> f64 {
    f64::from(u16::from_le_bytes([bytes[at], bytes[at + 1]])) / 1000.0
}

impl Timeline {
    /// Share of `[from, to)` in which a kernel ran: NVML's "utilization" (busy time, however
    /// little of the chip the kernel used).
    pub fn busy(&self, from: u64, to: u64) -> f64 {
        self.weighted(from, to, |_| 1.0)
    }

    /// Time-weighted mean of a per-kernel share over `[from, to)` (idle time counts as 0): GPM's
    /// SM activity, occupancy, tensor and DRAM figures.
    pub fn weighted(&self, from: u64, to: u64, share: impl Fn(&Kernel) -> f64) -> f64 {
        if to <= from {
            return 0.0;
        }
        let sum: f64 = self
            .kernels
            .iter()
            .map(|k| k.overlap(from, to) as f64 * share(k))
            .sum();
        (sum / (to - from) as f64).clamp(0.0, 1.0)
    }

    /// Per process that ran a kernel in `[from, to)`: (pid, busy share, DRAM share).
    pub fn by_process(&self, from: u64, to: u64) -> Vec<(u32, f64, f64)> {
        let mut pids: Vec<u32> = self
            .kernels
            .iter()
            .filter(|k| k.overlap(from, to) > 0)
            .map(|k| k.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids.into_iter()
            .map(|pid| {
                let mine = |k: &Kernel, value: f64| if k.pid == pid { value } else { 0.0 };
                (
                    pid,
                    self.weighted(from, to, |k| mine(k, 1.0)),
                    self.weighted(from, to, |k| mine(k, k.dram)),
                )
            })
            .collect()
    }

    /// The processes holding a context on the device, as the driver lists them: slots whose
    /// process is still alive (the driver frees a context when its process exits).
    pub fn live_processes(&self, alive: impl Fn(u32) -> bool) -> Vec<(u32, u64)> {
        self.memory
            .iter()
            .copied()
            .filter(|(pid, _)| alive(*pid))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(start_ns: u64, end_ns: u64, pid: u32, sm: f64) -> Kernel {
        Kernel {
            start_ns,
            end_ns,
            pid,
            sm,
            occupancy: sm / 2.0,
            tensor: 0.0,
            dram: 0.25,
            flags: 0,
        }
    }

    /// Writes a timeline file as the Python client lays it out.
    fn write(path: &Path, capacity: u32, slots: &[(u32, u64)], kernels: &[Kernel]) {
        let slot_count = 4u32;
        let mut bytes = vec![0u8; (HEADER + u64::from(slot_count) * SLOT) as usize];
        bytes[..8].copy_from_slice(MAGIC);
        bytes[8..12].copy_from_slice(&capacity.to_le_bytes());
        bytes[12..16].copy_from_slice(&slot_count.to_le_bytes());
        bytes[16..24].copy_from_slice(&(kernels.len() as u64).to_le_bytes());
        for (i, (pid, memory)) in slots.iter().enumerate() {
            let at = (HEADER + i as u64 * SLOT) as usize;
            bytes[at..at + 4].copy_from_slice(&pid.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&memory.to_le_bytes());
        }
        let mut ring = vec![0u8; (u64::from(capacity) * RECORD) as usize];
        for (n, k) in kernels.iter().enumerate() {
            let at = (n as u64 % u64::from(capacity) * RECORD) as usize;
            let r = &mut ring[at..at + RECORD as usize];
            r[0..8].copy_from_slice(&k.start_ns.to_le_bytes());
            r[8..16].copy_from_slice(&k.end_ns.to_le_bytes());
            r[16..20].copy_from_slice(&k.pid.to_le_bytes());
            for (offset, share) in [(20, k.sm), (22, k.occupancy), (24, k.tensor), (26, k.dram)] {
                r[offset..offset + 2].copy_from_slice(&((share * 1000.0) as u16).to_le_bytes());
            }
        }
        bytes.extend(ring);
        std::fs::write(path, bytes).unwrap();
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fake-nvml-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn busy_time_and_sm_share_are_what_the_kernels_did() {
        let path = temp("busy");
        // Two kernels in a 1 s window: 0.5 s at full SMs, 0.25 s at a tenth of them.
        let kernels = [
            kernel(0, 500_000_000, 7, 1.0),
            kernel(600_000_000, 850_000_000, 8, 0.1),
        ];
        write(&path, 16, &[(7, 1 << 30), (8, 2 << 30)], &kernels);
        let t = read(&path, 0).unwrap();
        assert_eq!(t.kernels, kernels);
        assert!((t.busy(0, 1_000_000_000) - 0.75).abs() < 1e-9);
        assert!((t.weighted(0, 1_000_000_000, |k| k.sm) - 0.525).abs() < 1e-9);
        // The first half-second: only pid 7 ran.
        assert_eq!(t.by_process(0, 500_000_000), vec![(7, 1.0, 0.25)]);
        // pid 8 is gone: the driver no longer lists it.
        assert_eq!(t.live_processes(|pid| pid == 7), vec![(7, 1 << 30)]);
    }

    #[test]
    fn a_wrapped_ring_is_read_back_in_order_up_to_the_time_asked() {
        let path = temp("ring");
        let kernels: Vec<Kernel> = (0..10)
            .map(|i| kernel(i * 100, i * 100 + 50, 1, 1.0))
            .collect();
        write(&path, 4, &[], &kernels);
        // Only the newest 4 survive; asking from 751 keeps those ending at or after it.
        let t = read(&path, 751).unwrap();
        assert_eq!(t.kernels, kernels[8..].to_vec());
        let t = read(&path, 0).unwrap();
        assert_eq!(t.kernels, kernels[6..].to_vec());
    }

    #[test]
    fn kernels_booked_by_two_processes_queue_one_after_another_and_read_back() {
        let path = temp("booked");
        let _ = std::fs::remove_file(&path);
        let device = Device::open(&path).unwrap();
        let full = Shares {
            sm: 1.0,
            occupancy: 0.5,
            tensor: 0.0,
            dram: 0.25,
        };
        let (slot, a, b, merged, spin) = device
            .locked(|d| {
                let slot = d.claim_slot(7, |_| true).unwrap();
                d.set_held(slot, 1 << 30);
                let a = d.book(7, 1_000, 0, Length::Nanos(500), full, 0);
                // Another process's kernel waits for the queue, then 7's identical one merges.
                let b = d.book(8, 1_200, 0, Length::Nanos(100), full, 0);
                let merged = d.book(8, 1_300, 0, Length::Nanos(100), full, 0);
                let spin = d.book(
                    7,
                    1_300,
                    2_000,
                    Length::Until(1_900),
                    full,
                    COLLECTIVE_KERNEL,
                );
                (slot, a, b, merged, spin)
            })
            .unwrap();
        assert_eq!((a.start_ns, a.end_ns), (1_000, 1_500));
        assert_eq!((b.start_ns, b.end_ns), (1_500, 1_600));
        assert_eq!((merged.start_ns, merged.end_ns), (1_600, 1_700));
        // Not before its stream's work (2,000), and `until` already past: one nanosecond.
        assert_eq!((spin.start_ns, spin.end_ns), (2_000, 2_001));
        let t = read(&path, 0).unwrap();
        let runs: Vec<_> = t
            .kernels
            .iter()
            .map(|k| (k.start_ns, k.end_ns, k.pid, k.flags))
            .collect();
        assert_eq!(
            runs,
            [
                (1_000, 1_500, 7, 0),
                (1_500, 1_700, 8, 0),
                (2_000, 2_001, 7, 1)
            ]
        );
        assert_eq!(t.memory, [(7, 1 << 30)]);
        // Slot 0 is 7's; a dead owner's slot is free again, a live one's is not.
        assert_eq!(
            device.locked(|d| d.claim_slot(9, |pid| pid != 7)).unwrap(),
            Some(slot)
        );
        assert_eq!(device.locked(|d| d.used_by_all(|_| true)).unwrap(), 0);
    }

    #[test]
    fn a_spin_booked_ahead_is_cut_back_only_while_nothing_follows_it() {
        let path = temp("shorten");
        let _ = std::fs::remove_file(&path);
        let device = Device::open(&path).unwrap();
        let spin = Shares {
            sm: 0.06,
            occupancy: 0.01,
            tensor: 0.0,
            dram: 0.02,
        };
        let (cut, refused) = device
            .locked(|d| {
                let ahead = d.book(7, 1_000, 1_000, Length::Until(11_000), spin, 1);
                // A copy's wait for a degraded link, noted since, is no kernel: it neither
                // moves the queue nor stops the cut, and NVML's reader leaves it out.
                d.note_link_wait(7, 1_500, 2_500);
                let cut = d.shorten_last(7, ahead.end_ns, 4_000);
                // Another process books behind it: the spin can no longer be cut.
                let next = d.book(8, 2_000, 0, Length::Nanos(500), spin, 0);
                let refused = d.shorten_last(8, next.end_ns + 1, 4_100);
                (cut, refused.or(d.shorten_last(7, 4_000, 3_000)))
            })
            .unwrap();
        assert_eq!((cut, refused), (Some(4_000), None));
        let t = read(&path, 0).unwrap();
        assert_eq!(
            t.kernels
                .iter()
                .map(|k| (k.start_ns, k.end_ns))
                .collect::<Vec<_>>(),
            [(1_000, 4_000), (4_000, 4_500)]
        );
    }

    #[test]
    fn a_missing_file_is_an_unused_gpu_and_a_foreign_one_an_error() {
        assert!(read(&temp("none"), 0).unwrap().kernels.is_empty());
        let path = temp("foreign");
        std::fs::write(&path, [1u8; 128]).unwrap();
        assert!(read(&path, 0).is_err());
    }
}
