//! A stub `libcuda.so.1` for the test bed: the CUDA driver API entry points a PyTorch process
//! crosses — context, memory, kernel and graph launches, copies, stream, context and event
//! synchronisation — with the real names, signatures and error codes (`cuda.h` of CUDA 12),
//! on the emulated GPUs whose timelines the fake NVML reads (`EMUGPU_DIR`, crates/emu-timeline).
//!
//! What a real driver decides from a kernel's code and grid, the stub takes from the kernel's
//! first argument, a [`KernelCost`]. Everything else behaves as the driver does where it shows
//! from outside the process:
//!
//! - a launch returns at once until the context's launch queue holds [`driver::QUEUE_DEPTH`]
//!   kernels, then blocks in the driver;
//! - a wait (`cuStreamSynchronize`, `cuCtxSynchronize`, `cuEventSynchronize`, a copy to the host,
//!   a copy from pageable memory) spins, yields or sleeps inside this library by the context's
//!   `CU_CTX_SCHED_*` flag: a spinning thread is running, 100 % of a core, its innermost frames
//!   here, whatever Python line called it; a blocking one sleeps in `ppoll`;
//! - streams order their work, the legacy default stream waits for every stream, events mark a
//!   point in a stream, and stream capture records launches into a graph that `cuGraphLaunch`
//!   books as one launch (syncing a capturing stream is refused and invalidates the capture);
//! - device memory counts against the device's total, shared with every process on it;
//! - a copy to or from the host moves no faster than the device's PCIe link as it trained
//!   (`EMUGPU_PCIE_LINK`: "generation,width,max generation,max width", as NVML reports the
//!   link; unset: a healthy one), and the time a degraded link added is noted on the timeline
//!   for the ground truth (`emu_timeline::LINK_WAIT`).
//!
//! Symbols are those `cuda.h` maps its names to (`cuMemAlloc_v2`, ...), so uprobes placed on
//! the real library's entry points find the same ones here.

pub mod api;
pub mod driver;
pub mod wait;

pub use driver::KernelCost;

/// `CUresult`: the driver's return codes used here, with their values in `cuda.h`.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CuResult {
    Success = 0,
    InvalidValue = 1,
    OutOfMemory = 2,
    NotInitialized = 3,
    NoDevice = 100,
    InvalidDevice = 101,
    InvalidContext = 201,
    InvalidHandle = 400,
    IllegalState = 401,
    NotFound = 500,
    NotReady = 600,
    StreamCaptureUnsupported = 900,
    StreamCaptureInvalidated = 901,
    StreamCaptureImplicit = 906,
    Unknown = 999,
}
