//! The few BPF and perf_event calls the probes need, made directly (no BPF toolchain: the
//! programs are a dozen instructions each, assembled by [`Insn`]), and the maps they fill.
//!
//! A program is attached to a uprobe (or uretprobe) on a file and offset through
//! `perf_event_open` with the uprobe PMU and `PERF_EVENT_IOC_SET_BPF`; one event with `pid = -1`
//! and `cpu = 0` runs the program for every process that maps the file, on every CPU (the
//! program runs from the uprobe handler before the event's own CPU filter).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

pub(super) const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_MAP_LOOKUP_BATCH: libc::c_int = 24;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

pub(super) fn bpf(command: libc::c_int, attr: &mut [u64]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-padded bpf_attr of the size passed.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// A BPF hash map with fixed-size keys and values, read and cleared from user space.
pub struct Map {
    fd: OwnedFd,
    key_size: usize,
    value_size: usize,
}

impl Map {
    pub fn hash(key_size: usize, value_size: usize, max_entries: u32) -> io::Result<Map> {
        // bpf_attr for MAP_CREATE: map_type, key_size, value_size, max_entries (u32 each).
        let mut attr = [0u64; 16];
        attr[0] = u64::from(BPF_MAP_TYPE_HASH) | ((key_size as u64) << 32);
        attr[1] = value_size as u64 | (u64::from(max_entries) << 32);
        let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
        Ok(Map {
            // SAFETY: a new descriptor the kernel just returned.
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            key_size,
            value_size,
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        debug_assert_eq!(key.len(), self.key_size);
        let mut value = vec![0u8; self.value_size];
        // bpf_attr for element calls: map_fd (u32, padded), key pointer, value pointer.
        let mut attr = [0u64; 4];
        attr[0] = self.fd() as u64;
        attr[1] = key.as_ptr() as u64;
        attr[2] = value.as_mut_ptr() as u64;
        bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).ok().map(|_| value)
    }

    /// Sets `key` to `value` (created or replaced).
    pub fn set(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        debug_assert_eq!((key.len(), value.len()), (self.key_size, self.value_size));
        // bpf_attr for element calls: map_fd, key pointer, value pointer, flags (BPF_ANY).
        let mut attr = [0u64; 4];
        attr[0] = self.fd() as u64;
        attr[1] = key.as_ptr() as u64;
        attr[2] = value.as_ptr() as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }

    pub fn delete(&self, key: &[u8]) {
        let mut attr = [0u64; 4];
        attr[0] = self.fd() as u64;
        attr[1] = key.as_ptr() as u64;
        let _ = bpf(BPF_MAP_DELETE_ELEM, &mut attr);
    }

    /// Every (key, value) the map holds now: a batch of entries a system call where the
    /// kernel has batch lookups (Linux 5.6), else two calls an entry. The sampler reads the
    /// maps every tick, and a walk key by key also rescans the hash table's empty buckets
    /// from each key to the next (a map of 16,384 slots holding a few dozen entries).
    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.entries_in_batches()
            .unwrap_or_else(|| self.entries_key_by_key())
    }

    /// Every entry through `BPF_MAP_LOOKUP_BATCH`; `None` where the kernel refuses it.
    fn entries_in_batches(&self) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        /// Entries asked for a call: more than a hash bucket ever holds (the kernel refuses
        /// a batch smaller than the bucket it is in, ENOSPC).
        const BATCH: usize = 256;
        let mut found = Vec::new();
        let mut keys = vec![0u8; BATCH * self.key_size];
        let mut values = vec![0u8; BATCH * self.value_size];
        // A hash map's cursor is the next bucket's index (a u32): none at first, then the
        // one the kernel wrote after the previous batch.
        let (mut cursor, mut next) = (None::<u64>, 0u64);
        loop {
            // bpf_attr.batch: in_batch, out_batch, keys, values (pointers), count and
            // map_fd (u32 each), elem_flags, flags.
            let mut attr = [0u64; 7];
            attr[0] = cursor.as_ref().map_or(0, |c| c as *const u64 as u64);
            attr[1] = &mut next as *mut u64 as u64;
            attr[2] = keys.as_mut_ptr() as u64;
            attr[3] = values.as_mut_ptr() as u64;
            attr[4] = BATCH as u64 | ((self.fd() as u64) << 32);
            let answer = bpf(BPF_MAP_LOOKUP_BATCH, &mut attr);
            // The kernel writes back how many it copied, the last batch's too.
            let copied = ((attr[4] & 0xffff_ffff) as usize).min(BATCH);
            for i in 0..copied {
                found.push((
                    keys[i * self.key_size..(i + 1) * self.key_size].to_vec(),
                    values[i * self.value_size..(i + 1) * self.value_size].to_vec(),
                ));
            }
            match answer {
                Ok(_) => cursor = Some(next),
                // No bucket left: the walk is done.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Some(found),
                // Not supported (EINVAL before 5.6), or a bucket over BATCH: key by key.
                Err(_) => return None,
            }
        }
    }

    /// Every entry through `BPF_MAP_GET_NEXT_KEY` and a lookup each.
    fn entries_key_by_key(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut found = Vec::new();
        let mut key: Option<Vec<u8>> = None;
        loop {
            let mut next = vec![0u8; self.key_size];
            let mut attr = [0u64; 4];
            attr[0] = self.fd() as u64;
            // A null key asks for the first one.
            attr[1] = key.as_ref().map_or(0, |k| k.as_ptr() as u64);
            attr[2] = next.as_mut_ptr() as u64;
            if bpf(BPF_MAP_GET_NEXT_KEY, &mut attr).is_err() {
                return found;
            }
            if let Some(value) = self.get(&next) {
                found.push((next.clone(), value));
            }
            key = Some(next);
        }
    }
}

/// One BPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

/// The registers: r0 return value, r1-r5 arguments (r1 the probe's `struct pt_regs *` on
/// entry), r6-r9 kept across helper calls, r10 the frame pointer.
pub const R0: u8 = 0;
pub const R1: u8 = 1;
pub const R2: u8 = 2;
pub const R3: u8 = 3;
pub const R4: u8 = 4;
pub const R6: u8 = 6;
pub const R7: u8 = 7;
pub const R8: u8 = 8;
pub const R10: u8 = 10;

/// Helper functions called by number.
pub const MAP_LOOKUP_ELEM: i32 = 1;
pub const MAP_UPDATE_ELEM: i32 = 2;
pub const MAP_DELETE_ELEM: i32 = 3;
pub const KTIME_GET_NS: i32 = 5;
pub const GET_CURRENT_PID_TGID: i32 = 14;
pub const RINGBUF_OUTPUT: i32 = 130;
/// map_update_elem flags.
pub const ANY: i32 = 0;
pub const NOEXIST: i32 = 1;

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        dst,
        src,
        off,
        imm,
    }
}

impl Insn {
    pub const fn mov_imm(dst: u8, imm: i32) -> Insn {
        insn(0xb7, dst, 0, 0, imm)
    }
    pub const fn mov(dst: u8, src: u8) -> Insn {
        insn(0xbf, dst, src, 0, 0)
    }
    pub const fn add_imm(dst: u8, imm: i32) -> Insn {
        insn(0x07, dst, 0, 0, imm)
    }
    pub const fn sub(dst: u8, src: u8) -> Insn {
        insn(0x1f, dst, src, 0, 0)
    }
    pub const fn rsh_imm(dst: u8, imm: i32) -> Insn {
        insn(0x77, dst, 0, 0, imm)
    }
    /// `dst = *(u64 *)(src + off)`
    pub const fn load64(dst: u8, src: u8, off: i16) -> Insn {
        insn(0x79, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = src`
    pub const fn store64(dst: u8, off: i16, src: u8) -> Insn {
        insn(0x7b, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = src`
    pub const fn store32(dst: u8, off: i16, src: u8) -> Insn {
        insn(0x63, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = imm`
    pub const fn store64_imm(dst: u8, off: i16, imm: i32) -> Insn {
        insn(0x7a, dst, 0, off, imm)
    }
    /// `*(u32 *)(dst + off) = imm`
    pub const fn store32_imm(dst: u8, off: i16, imm: i32) -> Insn {
        insn(0x62, dst, 0, off, imm)
    }
    /// `lock *(u64 *)(dst + off) += src`
    pub const fn atomic_add64(dst: u8, off: i16, src: u8) -> Insn {
        insn(0xdb, dst, src, off, 0)
    }
    /// `if dst == imm goto +off`
    pub const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
        insn(0x15, dst, 0, off, imm)
    }
    /// `if dst != imm goto +off`
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
        insn(0x55, dst, 0, off, imm)
    }
    /// `if dst < imm goto +off` (unsigned)
    pub const fn jlt_imm(dst: u8, imm: i32, off: i16) -> Insn {
        insn(0xa5, dst, 0, off, imm)
    }
    pub const fn ja(off: i16) -> Insn {
        insn(0x05, 0, 0, off, 0)
    }
    pub const fn call(helper: i32) -> Insn {
        insn(0x85, 0, 0, 0, helper)
    }
    pub const fn exit() -> Insn {
        insn(0x95, 0, 0, 0, 0)
    }

    /// `dst = ` the map of descriptor `fd` (a 64-bit immediate load: two instruction slots).
    pub fn load_map(dst: u8, fd: i32) -> [Insn; 2] {
        [insn(0x18, dst, 1, 0, fd), insn(0, 0, 0, 0, 0)]
    }

    fn encode(&self) -> u64 {
        u64::from(self.code)
            | (u64::from(self.dst & 0xf) << 8)
            | (u64::from(self.src & 0xf) << 12)
            | (u64::from(self.off as u16) << 16)
            | (u64::from(self.imm as u32) << 32)
    }
}

/// A loaded program.
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads a kprobe-type program (uprobes run those); the verifier's log is the error.
    pub fn load(insns: &[Insn]) -> io::Result<Program> {
        let code: Vec<u64> = insns.iter().map(Insn::encode).collect();
        let license = c"GPL";
        let mut log = vec![0u8; 1 << 16];
        // bpf_attr for PROG_LOAD: prog_type, insn_cnt; insns; license; log_level, log_size;
        // log_buf; kern_version, prog_flags; ...
        let mut attr = [0u64; 16];
        attr[0] = u64::from(BPF_PROG_TYPE_KPROBE) | ((code.len() as u64) << 32);
        attr[1] = code.as_ptr() as u64;
        attr[2] = license.as_ptr() as u64;
        attr[3] = 1 | ((log.len() as u64) << 32);
        attr[4] = log.as_mut_ptr() as u64;
        match bpf(BPF_PROG_LOAD, &mut attr) {
            // SAFETY: a new descriptor the kernel just returned.
            Ok(fd) => Ok(Program {
                fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            }),
            Err(error) => {
                let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
                let verifier = String::from_utf8_lossy(&log[..end]);
                Err(io::Error::new(
                    error.kind(),
                    format!("{error}: {}", verifier.trim()),
                ))
            }
        }
    }
}

/// The uprobe PMU's type and its retprobe bit, from sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobePmu {
    pub kind: u32,
    pub retprobe_bit: u32,
}

impl UprobePmu {
    pub fn find(sysfs: &Path) -> io::Result<UprobePmu> {
        let device = sysfs.join("bus/event_source/devices/uprobe");
        let kind = std::fs::read_to_string(device.join("type"))?;
        let bit = std::fs::read_to_string(device.join("format/retprobe"))?;
        Ok(UprobePmu {
            kind: kind.trim().parse().map_err(io::Error::other)?,
            // "config:0"
            retprobe_bit: bit
                .trim()
                .strip_prefix("config:")
                .and_then(|b| b.parse().ok())
                .ok_or_else(|| io::Error::other(format!("retprobe format {bit:?}")))?,
        })
    }
}

/// A program attached at `offset` of `file` (on return when `on_return`); detached on drop.
/// Detaching is the only way to spare the traced threads the trap: a disabled event keeps its
/// breakpoint in every process mapping the file.
pub struct Attached {
    _event: OwnedFd,
    _program: Arc<Program>,
}

impl Attached {
    pub fn new(
        pmu: UprobePmu,
        file: &Path,
        offset: u64,
        on_return: bool,
        program: Arc<Program>,
    ) -> io::Result<Attached> {
        let path = CString::new(file.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
        // struct perf_event_attr (PERF_ATTR_SIZE_VER5, 112 bytes): type, size; config;
        // sample_period; sample_type; read_format; flags; wakeup; bp_type; config1 (uprobe
        // path); config2 (probe offset).
        let mut attr = [0u64; 14];
        attr[0] = u64::from(pmu.kind) | (112u64 << 32);
        attr[1] = u64::from(on_return) << pmu.retprobe_bit;
        attr[2] = 1; // sample_period: every hit runs the program
        attr[5] = 1; // disabled until the program is set
        attr[7] = path.as_ptr() as u64;
        attr[8] = offset;
        // SAFETY: a valid perf_event_attr; pid -1, cpu 0, no group.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                -1 as libc::pid_t,
                0,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor the kernel just returned.
        let event = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: ioctls on the event just opened.
        unsafe {
            if libc::ioctl(
                event.as_raw_fd(),
                PERF_EVENT_IOC_SET_BPF,
                program.fd.as_raw_fd(),
            ) < 0
                || libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Attached {
            _event: event,
            _program: program,
        })
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`, which times the waits.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::Map;

    #[test]
    fn batches_and_the_walk_key_by_key_read_the_same_entries() {
        // Creating a map needs CAP_BPF (or CAP_SYS_ADMIN): without it, nothing to compare
        // (the probes' refusal is tests/cuda_probes.rs's).
        let Ok(map) = Map::hash(8, 8, 4096) else {
            return;
        };
        assert_eq!(map.entries(), Vec::new());
        // More entries than a batch holds, so the walk goes on from the kernel's cursor.
        for n in 0u64..700 {
            map.set(&n.to_ne_bytes(), &(n * n).to_ne_bytes()).unwrap();
        }
        let sorted = |mut entries: Vec<(Vec<u8>, Vec<u8>)>| {
            entries.sort();
            entries
        };
        let batched = sorted(map.entries_in_batches().expect("batch lookups (Linux 5.6)"));
        assert_eq!(batched.len(), 700);
        assert_eq!(batched, sorted(map.entries_key_by_key()));
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap());
        assert!(batched.iter().all(|(k, v)| word(v) == word(k) * word(k)));
    }
}
