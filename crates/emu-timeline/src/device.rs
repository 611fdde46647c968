//! Writing a timeline: a device's queue, process slots and kernel ring, shared by every process
//! using the emulated GPU (mapped, each change under an exclusive `flock`, as the Python
//! emulator does it).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::{CAPACITY, HEADER, MAGIC, RECORD, SLOT, SLOTS};

/// One emulated GPU's timeline file, mapped for writing.
pub struct Device {
    file: File,
    map: *mut u8,
    len: usize,
    capacity: u64,
    slots: u64,
}

// The mapping is shared memory that every change reaches under the file lock; the pointer is
// never handed out.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

/// Where a booked kernel landed on the device's single queue (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booked {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What a kernel keeps busy, each a share 0..1 (stored per mille).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub sm: f64,
    pub occupancy: f64,
    pub tensor: f64,
    pub dram: f64,
}

/// How long a kernel runs: for a duration, or until a moment (a kernel that waits on the GPU
/// for something outside it, as a collective's does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    Nanos(u64),
    Until(u64),
}

impl Device {
    /// Opens (creating and laying out where needed) the timeline at `path`.
    pub fn open(path: &Path) -> io::Result<Device> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(path)?;
        file.lock()?;
        let wanted = HEADER + SLOTS * SLOT + CAPACITY * RECORD;
        if file.metadata()?.len() < wanted {
            file.set_len(wanted)?;
        }
        let len = file.metadata()?.len() as usize;
        // SAFETY: a shared read-write mapping of the whole file, unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut device = Device {
            file,
            map: map.cast(),
            len,
            capacity: CAPACITY,
            slots: SLOTS,
        };
        if device.bytes(0, 8) != MAGIC {
            device.put(0, MAGIC);
            device.put(8, &(CAPACITY as u32).to_le_bytes());
            device.put(12, &(SLOTS as u32).to_le_bytes());
            device.put_u64(16, 0);
            device.put_u64(24, 0);
        }
        device.capacity = u64::from(device.u32(8));
        device.slots = u64::from(device.u32(12));
        let laid_out = HEADER + device.slots * SLOT + device.capacity * RECORD;
        device.file.unlock()?;
        if device.capacity == 0 || laid_out > len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: a timeline with a layout this file cannot hold",
                    path.display()
                ),
            ));
        }
        Ok(device)
    }

    /// Runs `change` holding the file's exclusive lock.
    pub fn locked<T>(&self, change: impl FnOnce(&Self) -> T) -> io::Result<T> {
        self.file.lock()?;
        let result = change(self);
        self.file.unlock()?;
        Ok(result)
    }

    /// A process slot for `pid`: its own, a free one, or one left by a process that exited
    /// (the driver forgets a context when its process goes). Call under [`Device::locked`].
    pub fn claim_slot(&self, pid: u32, alive: impl Fn(u32) -> bool) -> Option<u64> {
        let free = (0..self.slots).find(|&slot| self.slot_pid(slot) == pid);
        let free = free.or_else(|| {
            (0..self.slots).find(|&slot| {
                let owner = self.slot_pid(slot);
                owner == 0 || !alive(owner)
            })
        })?;
        self.put(self.slot_at(free), &pid.to_le_bytes());
        self.put_u64(self.slot_at(free) + 8, 0);
        Some(free)
    }

    /// Frees a slot (a destroyed context).
    pub fn release_slot(&self, slot: u64) {
        self.put(self.slot_at(slot), &[0u8; SLOT as usize]);
    }

    /// Device memory the slot's process holds.
    pub fn held(&self, slot: u64) -> u64 {
        self.u64(self.slot_at(slot) + 8)
    }

    pub fn set_held(&self, slot: u64, bytes: u64) {
        self.put_u64(self.slot_at(slot) + 8, bytes);
    }

    /// Device memory every live process holds, as NVML reports it used.
    pub fn used_by_all(&self, alive: impl Fn(u32) -> bool) -> u64 {
        (0..self.slots)
            .filter(|&slot| {
                let pid = self.slot_pid(slot);
                pid != 0 && alive(pid)
            })
            .map(|slot| self.held(slot))
            .sum()
    }

    /// Books a kernel of `pid` on the device's queue: it starts once the queue is clear and not
    /// before `not_before_ns` (the work its stream holds before it), and runs for its length.
    /// Back-to-back identical kernels of one process become one record. Call under
    /// [`Device::locked`].
    pub fn book(
        &self,
        pid: u32,
        now_ns: u64,
        not_before_ns: u64,
        length: Length,
        shares: Shares,
        flags: u32,
    ) -> Booked {
        let head = self.u64(16);
        let start = now_ns.max(self.u64(24)).max(not_before_ns);
        let end = match length {
            Length::Nanos(ns) => start + ns.max(1),
            Length::Until(at) => at.max(start + 1),
        };
        let permille = |share: f64| (share.clamp(0.0, 1.0) * 1000.0).round() as u16;
        let mut record = [0u8; RECORD as usize];
        record[16..20].copy_from_slice(&pid.to_le_bytes());
        for (at, share) in [
            (20, shares.sm),
            (22, shares.occupancy),
            (24, shares.tensor),
            (26, shares.dram),
        ] {
            record[at..at + 2].copy_from_slice(&permille(share).to_le_bytes());
        }
        record[28..32].copy_from_slice(&flags.to_le_bytes());
        let last = self.record_at(head.wrapping_sub(1));
        let merges = head > 0
            && self.u64(last + 8) == start
            && self.bytes(last as usize + 16, 16) == &record[16..];
        if merges {
            self.put_u64(last + 8, end);
        } else {
            record[0..8].copy_from_slice(&start.to_le_bytes());
            record[8..16].copy_from_slice(&end.to_le_bytes());
            self.put(self.record_at(head), &record);
            self.put_u64(16, head + 1);
        }
        self.put_u64(24, end);
        Booked {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Notes that `pid` waited for its PCIe link over `[start_ns, end_ns)` (a [`crate::LINK_WAIT`]
    /// record: no kernel, the device's queue unmoved). Call under [`Device::locked`].
    pub fn note_link_wait(&self, pid: u32, start_ns: u64, end_ns: u64) {
        let head = self.u64(16);
        let mut record = [0u8; RECORD as usize];
        record[0..8].copy_from_slice(&start_ns.to_le_bytes());
        record[8..16].copy_from_slice(&end_ns.to_le_bytes());
        record[16..20].copy_from_slice(&pid.to_le_bytes());
        record[28..32].copy_from_slice(&crate::LINK_WAIT.to_le_bytes());
        self.put(self.record_at(head), &record);
        self.put_u64(16, head + 1);
    }

    /// Ends `pid`'s last kernel at `end_ns` instead of `booked_end_ns`, when nothing was booked
    /// after it (a spin booked ahead of the clock whose wait turned out to end sooner; link
    /// waits noted since are no kernels); returns the end it now has, or None when the
    /// device's queue has moved past it. Call under [`Device::locked`].
    pub fn shorten_last(&self, pid: u32, booked_end_ns: u64, end_ns: u64) -> Option<u64> {
        let mut n = self.u64(16).checked_sub(1)?;
        while self.u32(self.record_at(n) as usize + 28) & crate::LINK_WAIT != 0 {
            n = n.checked_sub(1)?;
        }
        let last = self.record_at(n);
        if self.u32(last as usize + 16) != pid
            || self.u64(last + 8) != booked_end_ns
            || self.u64(24) != booked_end_ns
        {
            return None;
        }
        let end = end_ns.max(self.u64(last) + 1);
        self.put_u64(last + 8, end);
        self.put_u64(24, end);
        Some(end)
    }

    fn slot_at(&self, slot: u64) -> u64 {
        HEADER + slot * SLOT
    }

    fn slot_pid(&self, slot: u64) -> u32 {
        self.u32(self.slot_at(slot) as usize)
    }

    fn record_at(&self, n: u64) -> u64 {
        HEADER + self.slots * SLOT + (n % self.capacity) * RECORD
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        assert!(
            at + len <= self.len,
            "timeline offset {at} past the mapping"
        );
        // SAFETY: in bounds of the live mapping.
        unsafe { std::slice::from_raw_parts(self.map.add(at), len) }
    }

    fn put(&self, at: u64, bytes: &[u8]) {
        let at = at as usize;
        assert!(
            at + bytes.len() <= self.len,
            "timeline offset {at} past the mapping"
        );
        // SAFETY: in bounds of the live mapping; other writers are held off by the file lock.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.add(at), bytes.len()) }
    }

    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes(at, 4).try_into().expect("4 bytes"))
    }

    fn u64(&self, at: u64) -> u64 {
        u64::from_le_bytes(self.bytes(at as usize, 8).try_into().expect("8 bytes"))
    }

    fn put_u64(&self, at: u64, value: u64) {
        self.put(at, &value.to_le_bytes());
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the mapping made in open, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.len) };
    }
}
