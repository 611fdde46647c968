//! A BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`, Linux 5.8): the mark programs write one
//! fixed-size record per call into it, and user space reads the records through two shared
//! mappings, without a system call per record (a hash map would cost two per entry).
//!
//! Layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position (user space writes it);
//! from page 1 the producer position, then the data pages mapped twice in a row, so that a
//! record that wraps reads contiguously. Each record has an 8-byte header: its length with a
//! busy bit (being written) and a discard bit, then the data, padded to 8 bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::bpf::{bpf, BPF_MAP_CREATE};

const BPF_MAP_TYPE_RINGBUF: u64 = 27;
const BUSY: u32 = 1 << 31;
const DISCARDED: u32 = 1 << 30;
const HEADER: u64 = 8;

/// A ring buffer map, mapped for reading.
pub struct Ring {
    fd: OwnedFd,
    page: usize,
    size: u64,
    consumer: *mut u8,
    producer: *mut u8,
}

// SAFETY: the mappings live as long as the Ring; positions are read and written atomically.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring of `size` bytes (a power of two, at least a page).
    pub fn new(size: u32) -> io::Result<Ring> {
        let mut attr = [0u64; 16];
        attr[0] = BPF_MAP_TYPE_RINGBUF;
        attr[1] = u64::from(size) << 32;
        let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
        // SAFETY: a new descriptor the kernel just returned.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: no arguments.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map = |length: usize, protection: i32, offset: usize| {
            // SAFETY: a shared mapping of the map's descriptor, as the kernel offers it.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    length,
                    protection,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if at == libc::MAP_FAILED {
                Err(io::Error::last_os_error())
            } else {
                Ok(at.cast::<u8>())
            }
        };
        let consumer = map(page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = map(page + 2 * size as usize, libc::PROT_READ, page).inspect_err(|_| {
            // SAFETY: the mapping just made.
            unsafe { libc::munmap(consumer.cast(), page) };
        })?;
        Ok(Ring {
            fd,
            page,
            size: u64::from(size),
            consumer,
            producer,
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Hands every complete record written since the last call to `each`, oldest first, and
    /// frees their space.
    pub fn drain(&self, mut each: impl FnMut(&[u8])) {
        // SAFETY: both positions are 8-byte aligned words at the start of their pages.
        let consumer = unsafe { &*self.consumer.cast::<AtomicU64>() };
        let producer = unsafe { &*self.producer.cast::<AtomicU64>() };
        let mut at = consumer.load(Ordering::Acquire);
        let end = producer.load(Ordering::Acquire);
        let data = self.producer.wrapping_add(self.page);
        while at < end {
            let offset = (at & (self.size - 1)) as usize;
            // SAFETY: the header lies in the data pages; the kernel writes it atomically.
            let header = unsafe { &*data.add(offset).cast::<AtomicU32>() };
            let length = header.load(Ordering::Acquire);
            if length & BUSY != 0 {
                break; // still being written: the rest follows it
            }
            let bytes = length & !(BUSY | DISCARDED);
            if length & DISCARDED == 0 {
                // SAFETY: the record lies within the doubly mapped data, contiguous.
                let record = unsafe {
                    std::slice::from_raw_parts(data.add(offset + HEADER as usize), bytes as usize)
                };
                each(record);
            }
            at += (u64::from(bytes) + HEADER).next_multiple_of(8);
            consumer.store(at, Ordering::Release);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the two mappings made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast(), self.page + 2 * self.size as usize);
        }
    }
}
