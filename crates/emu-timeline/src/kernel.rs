//! What the stub libraries agree on besides the timeline file: the stub kernel's cost argument,
//! which every launcher of stub kernels passes (the emulated torch's C side, emugpu.py, the stub
//! NCCL) and the stub driver reads, and the clock they all keep time by.

/// A kernel launched without the stub's cost argument.
const DEFAULT_KERNEL_NS: u64 = 5_000;

/// `KernelCost::flags` bit: `until_ns` is the address of a u64 word of the launching process
/// that will hold the moment the kernel's wait ends (0 until known): a kernel spinning on a
/// flag its peers write, as NCCL's do. The driver's own flag, never booked on the timeline.
pub const UNTIL_WORD: u32 = 1 << 31;

/// The cost of a stub kernel, passed as its first kernel argument (`kernelParams[0]` points
/// to it): what a real kernel's code and grid decide. C layout (`_C.c` and `emugpu.py` declare
/// the same).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelCost {
    /// Seconds on the device; ignored when `until_ns` is set (with [`UNTIL_WORD`]: the seconds
    /// it runs once its wait has ended).
    pub seconds: f64,
    /// Shares 0..1 of the SMs kept busy, warps resident, tensor pipes, DRAM bandwidth.
    pub sm: f64,
    pub occupancy: f64,
    pub tensor: f64,
    pub dram: f64,
    /// Timeline flags ([`crate::COLLECTIVE_KERNEL`]), and [`UNTIL_WORD`].
    pub flags: u32,
    /// Non-zero: the kernel runs until this CLOCK_MONOTONIC time (a collective's spin), or,
    /// with [`UNTIL_WORD`] in `flags`, the address of the word that will say when.
    pub until_ns: u64,
}

impl KernelCost {
    /// A real kernel launched through the stub without a cost: a tiny one.
    pub fn default_tiny() -> KernelCost {
        KernelCost {
            seconds: DEFAULT_KERNEL_NS as f64 / 1e9,
            sm: 0.05,
            occupancy: 0.02,
            tensor: 0.0,
            dram: 0.05,
            flags: 0,
            until_ns: 0,
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the timeline's clock (Python's `time.monotonic_ns`).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
