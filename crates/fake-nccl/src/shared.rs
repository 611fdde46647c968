//! A communicator's shared file: what its ranks' processes see of each other. Each rank maps
//! it; collectives are numbered in the order every rank issues them (NCCL requires one order)
//! and each takes a slot of a ring, where each rank writes when its kernel started on its GPU
//! and the last to arrive writes when the collective's wait ends: the word the ranks' kernels
//! spin on.
//!
//! | offset | what |
//! |---|---|
//! | 0 | u32 ranks (set by the first to join), u32 0 |
//! | 8 | u64 ranks joined |
//! | 64 | per rank, 96 bytes: u32 pid, i32 device, u64 bus bytes per second, u64 collectives issued, u64 its process's last RAS heartbeat (monotonic ns), 5 × u64 collectives issued by NCCL function (`ncclFunc_t` order: Broadcast, Reduce, AllGather, ReduceScatter, AllReduce), u32 flags (1: aborted), 20 bytes free |
//! | 64 + 96 × MAX_RANKS | ring of SLOTS slots: u64 collective number + 1 (0: free), u64 end of the wait (ns; 0 until known), u64 bytes, u32 operation, u32 ranks whose kernels have read the end, then per rank its kernel's start (ns; 0 until known) |
//! | after the ring | per ordered pair of ranks (sender × MAX_RANKS + receiver), P2P_SLOTS slots laid out as the ring's with two parties: the sender's kernel's start, the receiver's |
//!
//! A point-to-point send and its receive meet in their pair's slot as a collective's ranks meet
//! in the ring's: sends from one rank to another are numbered in the order the sender issues
//! them, receives in the order the receiver does, and the n-th send matches the n-th receive
//! (NCCL's rule too).

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Ranks a communicator may have, and collectives in flight at once.
pub const MAX_RANKS: usize = 64;
pub const SLOTS: u64 = 256;
const RANKS_AT: usize = 64;
const RANK_BYTES: usize = 96;
/// NCCL's collective functions, in `ncclFunc_t` order (RAS counts them so).
pub const FUNCTIONS: usize = 5;
const ABORTED: u32 = 1;
const SLOTS_AT: usize = RANKS_AT + RANK_BYTES * MAX_RANKS;
const SLOT_BYTES: usize = 32 + 8 * MAX_RANKS;
/// Sends in flight at once from one rank to another.
pub const P2P_SLOTS: u64 = 8;
const P2P_AT: usize = SLOTS_AT + SLOT_BYTES * SLOTS as usize;
const P2P_SLOT_BYTES: usize = 32 + 8 * 2;
const LEN: usize = P2P_AT + P2P_SLOT_BYTES * P2P_SLOTS as usize * MAX_RANKS * MAX_RANKS;

/// Where the kernels of one transfer meet: a collective's slot of the ring (every rank a
/// party), or a point-to-point transfer's slot of its pair (two parties: 0 sends, 1
/// receives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Collective(u64),
    PointToPoint { from: usize, to: usize, number: u64 },
}

impl Place {
    fn number(self) -> u64 {
        match self {
            Place::Collective(number) | Place::PointToPoint { number, .. } => number,
        }
    }

    fn at(self) -> usize {
        match self {
            Place::Collective(number) => SLOTS_AT + (number % SLOTS) as usize * SLOT_BYTES,
            Place::PointToPoint { from, to, number } => {
                let pair = from * MAX_RANKS + to;
                let slot = pair * P2P_SLOTS as usize + (number % P2P_SLOTS) as usize;
                P2P_AT + slot * P2P_SLOT_BYTES
            }
        }
    }

    /// How many kernels meet there, of a communicator of `ranks`.
    pub fn parties(self, ranks: usize) -> usize {
        match self {
            Place::Collective(_) => ranks,
            Place::PointToPoint { .. } => 2,
        }
    }
}

/// One rank's mapping of the file.
pub struct Shared {
    map: *mut u8,
    /// The communicator's hash as NCCL's RAS reports it: here of the file's path, the same
    /// in every rank.
    pub hash: u64,
}

/// What one rank's record says, for RAS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankRecord {
    pub pid: u32,
    pub device: i32,
    /// Monotonic ns of its process's last RAS heartbeat (0: none yet).
    pub heartbeat_ns: u64,
    /// Collectives issued, by `ncclFunc_t`.
    pub issued: [u64; FUNCTIONS],
    pub aborted: bool,
}

// Every field is read and written through atomics.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// Maps the communicator's file, creating it (zeroed) if this rank is the first.
    pub fn open(path: &Path) -> io::Result<Shared> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if file.metadata()?.len() < LEN as u64 {
            file.set_len(LEN as u64)?;
        }
        // SAFETY: a shared mapping of a file of LEN bytes; unmapped on drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // FNV-1a, 64 bits.
        let hash = path
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        Ok(Shared {
            map: map.cast(),
            hash,
        })
    }

    fn u64_at(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at + 8 <= LEN && at.is_multiple_of(8));
        // SAFETY: in bounds and aligned (the mapping is page-aligned, offsets multiples of 8).
        unsafe { &*(self.map.add(at) as *const AtomicU64) }
    }

    fn u32_at(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as u64_at.
        unsafe { &*(self.map.add(at) as *const AtomicU32) }
    }

    /// Sets the rank count, or checks it against the one set: false on a mismatch.
    pub fn agree_ranks(&self, ranks: u32) -> bool {
        match self
            .u32_at(0)
            .compare_exchange(0, ranks, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => true,
            Err(set) => set == ranks,
        }
    }

    /// Records this rank; returns the ranks joined so far, itself included.
    pub fn join(&self, rank: usize, pid: u32, device: i32, bus_bytes_per_s: u64) -> u64 {
        let at = RANKS_AT + rank * RANK_BYTES;
        self.u32_at(at + 4).store(device as u32, Ordering::SeqCst);
        self.u64_at(at + 8).store(bus_bytes_per_s, Ordering::SeqCst);
        self.u32_at(at).store(pid, Ordering::SeqCst);
        self.u64_at(8).fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn joined(&self) -> u64 {
        self.u64_at(8).load(Ordering::SeqCst)
    }

    /// The slowest rank's bus bandwidth: what every transfer of the communicator runs at.
    pub fn slowest_bus(&self, ranks: usize) -> u64 {
        (0..ranks)
            .map(|r| {
                self.u64_at(RANKS_AT + r * RANK_BYTES + 8)
                    .load(Ordering::SeqCst)
            })
            .filter(|&b| b > 0)
            .min()
            .unwrap_or(1)
    }

    /// Counts a collective of NCCL function `function` (`ncclFunc_t`) issued by `rank`.
    pub fn count_issued(&self, rank: usize, function: usize) {
        let at = RANKS_AT + rank * RANK_BYTES;
        self.u64_at(at + 16).fetch_add(1, Ordering::SeqCst);
        self.u64_at(at + 32 + 8 * function.min(FUNCTIONS - 1))
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Says that `rank`'s process is alive and its RAS thread answers.
    pub fn beat(&self, rank: usize, now_ns: u64) {
        self.u64_at(RANKS_AT + rank * RANK_BYTES + 24)
            .store(now_ns, Ordering::SeqCst);
    }

    pub fn set_aborted(&self, rank: usize) {
        self.u32_at(RANKS_AT + rank * RANK_BYTES + 72)
            .fetch_or(ABORTED, Ordering::SeqCst);
    }

    pub fn record(&self, rank: usize) -> RankRecord {
        let at = RANKS_AT + rank * RANK_BYTES;
        RankRecord {
            pid: self.u32_at(at).load(Ordering::SeqCst),
            device: self.u32_at(at + 4).load(Ordering::SeqCst) as i32,
            heartbeat_ns: self.u64_at(at + 24).load(Ordering::SeqCst),
            issued: std::array::from_fn(|f| self.u64_at(at + 32 + 8 * f).load(Ordering::SeqCst)),
            aborted: self.u32_at(at + 72).load(Ordering::SeqCst) & ABORTED != 0,
        }
    }

    /// Takes `place`'s slot: the first party to reach it clears it; a party that finds it
    /// still held by the transfer a ring's length before (a peer that far behind), or that
    /// transfer's end not yet read by each of its `parties` (their kernels still wait on it),
    /// waits.
    pub fn claim(&self, place: Place, bytes: u64, operation: u32, parties: usize) {
        let at = place.at();
        let number = place.number();
        let tag = self.u64_at(at);
        loop {
            let held = tag.load(Ordering::SeqCst);
            if held == number + 1 {
                return;
            }
            let previous_done =
                held == 0 || self.u32_at(at + 28).load(Ordering::SeqCst) as usize >= parties;
            if held < number + 1 && previous_done {
                // Cleared before it is tagged, so that a peer that sees the tag sees it clear.
                if tag
                    .compare_exchange(held, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    self.u64_at(at + 8).store(0, Ordering::SeqCst);
                    self.u64_at(at + 16).store(bytes, Ordering::SeqCst);
                    self.u32_at(at + 24).store(operation, Ordering::SeqCst);
                    self.u32_at(at + 28).store(0, Ordering::SeqCst);
                    for party in 0..parties {
                        self.u64_at(at + 32 + 8 * party).store(0, Ordering::SeqCst);
                    }
                    tag.store(number + 1, Ordering::SeqCst);
                    return;
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The word `place`'s kernels spin on: when its wait ends (0 until known).
    pub fn end_word(&self, place: Place) -> &AtomicU64 {
        self.u64_at(place.at() + 8)
    }

    /// Says that one party's kernel has `place`'s end: the slot may be reused once every
    /// party's has.
    pub fn read_end(&self, place: Place) {
        self.u32_at(place.at() + 28).fetch_add(1, Ordering::SeqCst);
    }

    /// Records when `party`'s kernel at `place` started; once every one of the `parties` has,
    /// the wait ends at the latest start (the last arrival), written once. Returns whether this
    /// call completed it.
    pub fn arrive(&self, place: Place, party: usize, parties: usize, start_ns: u64) -> bool {
        let at = place.at();
        self.u64_at(at + 32 + 8 * party)
            .store(start_ns.max(1), Ordering::SeqCst);
        let starts: Vec<u64> = (0..parties)
            .map(|p| self.u64_at(at + 32 + 8 * p).load(Ordering::SeqCst))
            .collect();
        if starts.contains(&0) {
            return false;
        }
        let last = starts.into_iter().max().unwrap_or(start_ns);
        self.end_word(place)
            .compare_exchange(0, last, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the mapping made in open, unmapped once.
        unsafe { libc::munmap(self.map.cast(), LEN) };
    }
}
