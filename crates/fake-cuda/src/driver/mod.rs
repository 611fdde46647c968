//! The driver's state in one process, in safe Rust: contexts, streams, events, captured graphs,
//! allocations and pinned host memory, each operation returning a [`CuResult`] code as the real
//! driver does. `api` puts the C ABI over it. Waits never hold the state's lock: another
//! thread of the process launches while one waits, as on a real driver.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use emu_timeline::Device;

mod held;
mod memory;
mod work;

pub use emu_timeline::UNTIL_WORD;
pub use held::{move_holds, HELD, POLL_NS};

use super::wait::{self, Wait};
use super::CuResult;

/// What a CUDA context holds before the first tensor (cuBLAS workspace, module images), as the
/// device's memory shows it.
pub const CONTEXT_BYTES: u64 = 512 << 20;
/// The driver's launch queue: a launch past this many pending kernels blocks.
pub const QUEUE_DEPTH: usize = 1024;
/// Copy bandwidths (bytes per second) and the fixed cost of one copy.
const PINNED_BYTES_PER_S: f64 = 25e9;
const PAGEABLE_BYTES_PER_S: f64 = 10e9;
const DEVICE_BYTES_PER_S: f64 = 1e12;
const COPY_LATENCY_NS: u64 = 8_000;
/// Where device allocations start: an address range no host pointer has.
const DEVICE_BASE: u64 = 0x7e00_0000_0000;

pub use emu_timeline::KernelCost;

/// Direction of a copy, for its bandwidth and its sync rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copy {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

/// A handle's index in its table (0-based), from the opaque value the C side holds.
pub type Handle = usize;

struct Context {
    device: u32,
    flags: u32,
    timeline: Arc<Device>,
    slot: u64,
    /// End of the work queued on the legacy default stream (which waits for every stream).
    last_end_ns: u64,
    /// End times of this context's queued kernels, oldest first (the launch queue).
    pending: VecDeque<u64>,
    /// Live references of a primary context (cuDevicePrimaryCtxRetain), 0 for others.
    retained: u32,
    /// The kernel the context's queue waits behind, and the work kept after it.
    held: Option<held::Held>,
}

struct Stream {
    context: Handle,
    last_end_ns: u64,
    capture: Option<Capture>,
}

struct Capture {
    kernels: Vec<KernelCost>,
    invalidated: bool,
}

struct Event {
    /// When the work before its record ends, once recorded.
    at_ns: Option<u64>,
}

/// The driver of one process.
pub struct Driver {
    pub directory: PathBuf,
    pub devices: u32,
    pub memory_total: u64,
    /// What the devices' PCIe links move a second in DMA copies, as they trained and at their
    /// maximum (`None`: no limit below the copy rates, a healthy link).
    pub pcie_bytes_per_s: Option<(f64, f64)>,
    pid: u32,
    contexts: Vec<Option<Context>>,
    primary: HashMap<u32, Handle>,
    /// Flags set for a device's primary context before it is active.
    primary_flags: HashMap<u32, u32>,
    streams: Vec<Option<Stream>>,
    events: Vec<Option<Event>>,
    graphs: Vec<Option<Vec<KernelCost>>>,
    execs: Vec<Option<Vec<KernelCost>>>,
    modules: Vec<bool>,
    functions: Vec<Handle>,
    allocations: HashMap<u64, (Handle, u64)>,
    next_device_ptr: u64,
    pinned: Vec<(usize, usize)>,
    /// When each kernel waiting on a word (by its address) started, until asked (held.rs).
    started: HashMap<u64, u64>,
}

fn insert<T>(table: &mut Vec<Option<T>>, value: T) -> Handle {
    match table.iter().position(Option::is_none) {
        Some(free) => {
            table[free] = Some(value);
            free
        }
        None => {
            table.push(Some(value));
            table.len() - 1
        }
    }
}

/// What a link of `EMUGPU_PCIE_LINK` moves a second in DMA copies, as it trained and at its
/// maximum: "generation,width,max generation,max width" (the fields NVML reports; "2,4,5,16":
/// a gen 5 x16 slot's link trained at gen 2 x4). `None` when it does not read so.
pub fn pcie_bytes_per_s(link: &str) -> Option<(f64, f64)> {
    // Usable Gb/s per lane after line coding (8b/10b to gen 2, 128b/130b from gen 3).
    let lane = |generation: u32| match generation {
        1 => Some(2.0),
        2 => Some(4.0),
        3 => Some(7.877),
        4 => Some(15.754),
        5 => Some(31.508),
        6 => Some(63.016),
        _ => None,
    };
    // Large DMA copies reach about 80 % of that (packet headers, flow control): a gen 4 x16
    // link's 31.5 GB/s moves some 25 GB/s.
    let copies = |generation: u32, width: u32| {
        Some(lane(generation)? * f64::from(width) * 1e9 / 8.0 * 0.8).filter(|b| *b > 0.0)
    };
    let fields: Vec<u32> = link
        .split(',')
        .map(|f| f.trim().parse().ok())
        .collect::<Option<_>>()?;
    let [generation, width, max_generation, max_width] = fields[..] else {
        return None;
    };
    Some((
        copies(generation, width)?,
        copies(max_generation, max_width)?,
    ))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Driver {
    /// The driver cuInit starts: the emulated GPUs of `EMUGPU_DIR`, or no device.
    pub fn from_env() -> Result<Driver, CuResult> {
        let directory = std::env::var_os("EMUGPU_DIR").ok_or(CuResult::NoDevice)?;
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let devices = number("EMUGPU_COUNT", 8) as u32;
        if devices == 0 {
            return Err(CuResult::NoDevice);
        }
        let mut driver = Driver::new(
            directory.into(),
            devices,
            number("EMUGPU_MEMORY_BYTES", 85_899_345_920),
        );
        if let Ok(link) = std::env::var("EMUGPU_PCIE_LINK") {
            driver.pcie_bytes_per_s = Some(pcie_bytes_per_s(&link).ok_or(CuResult::InvalidValue)?);
        }
        Ok(driver)
    }

    pub fn new(directory: PathBuf, devices: u32, memory_total: u64) -> Driver {
        Driver {
            directory,
            devices,
            memory_total,
            pcie_bytes_per_s: None,
            pid: std::process::id(),
            contexts: Vec::new(),
            primary: HashMap::new(),
            primary_flags: HashMap::new(),
            streams: Vec::new(),
            events: Vec::new(),
            graphs: Vec::new(),
            execs: Vec::new(),
            modules: Vec::new(),
            functions: Vec::new(),
            allocations: HashMap::new(),
            next_device_ptr: DEVICE_BASE,
            pinned: Vec::new(),
            started: HashMap::new(),
        }
    }

    fn device_ok(&self, device: i32) -> Result<u32, CuResult> {
        u32::try_from(device)
            .ok()
            .filter(|d| *d < self.devices)
            .ok_or(CuResult::InvalidDevice)
    }

    fn context(&self, handle: Handle) -> Result<&Context, CuResult> {
        self.contexts
            .get(handle)
            .and_then(Option::as_ref)
            .ok_or(CuResult::InvalidContext)
    }

    fn context_mut(&mut self, handle: Handle) -> Result<&mut Context, CuResult> {
        self.contexts
            .get_mut(handle)
            .and_then(Option::as_mut)
            .ok_or(CuResult::InvalidContext)
    }

    /// A new context on `device` (cuCtxCreate): a process slot on its timeline holding the
    /// context's memory.
    pub fn create_context(&mut self, flags: u32, device: i32) -> Result<Handle, CuResult> {
        let device = self.device_ok(device)?;
        let path = self.directory.join(format!("gpu{device}.timeline"));
        let timeline = Arc::new(Device::open(&path).map_err(|_| CuResult::Unknown)?);
        let pid = self.pid;
        let slot = timeline
            .locked(|t| {
                let slot = t.claim_slot(pid, alive)?;
                t.set_held(slot, t.held(slot) + CONTEXT_BYTES);
                Some(slot)
            })
            .map_err(|_| CuResult::Unknown)?
            .ok_or(CuResult::OutOfMemory)?;
        Ok(insert(
            &mut self.contexts,
            Context {
                device,
                flags,
                timeline,
                slot,
                last_end_ns: 0,
                pending: VecDeque::new(),
                retained: 0,
                held: None,
            },
        ))
    }

    pub fn destroy_context(&mut self, handle: Handle) -> Result<(), CuResult> {
        let context = self.contexts.get_mut(handle).and_then(Option::take);
        let context = context.ok_or(CuResult::InvalidContext)?;
        let _ = context.timeline.locked(|t| t.release_slot(context.slot));
        self.primary.retain(|_, h| *h != handle);
        self.streams.iter_mut().for_each(|s| {
            if s.as_ref().is_some_and(|s| s.context == handle) {
                *s = None;
            }
        });
        self.allocations.retain(|_, (c, _)| *c != handle);
        Ok(())
    }

    /// The device's primary context, created on first retain (what the runtime uses).
    pub fn retain_primary(&mut self, device: i32) -> Result<Handle, CuResult> {
        let index = self.device_ok(device)?;
        let handle = match self.primary.get(&index) {
            Some(&handle) => handle,
            None => {
                let flags = self.primary_flags.get(&index).copied().unwrap_or(0);
                let handle = self.create_context(flags, device)?;
                self.primary.insert(index, handle);
                handle
            }
        };
        self.context_mut(handle)?.retained += 1;
        Ok(handle)
    }

    pub fn release_primary(&mut self, device: i32) -> Result<(), CuResult> {
        let index = self.device_ok(device)?;
        let handle = *self.primary.get(&index).ok_or(CuResult::InvalidContext)?;
        let context = self.context_mut(handle)?;
        context.retained -= 1;
        if context.retained == 0 {
            self.destroy_context(handle)?;
        }
        Ok(())
    }

    /// cuDevicePrimaryCtxSetFlags: the scheduling flags of the device's primary context, set
    /// before it is created or while it is active (CUDA 11+ allows both).
    pub fn set_primary_flags(&mut self, device: i32, flags: u32) -> Result<(), CuResult> {
        let index = self.device_ok(device)?;
        if flags & !wait::SCHED_MASK & !0x18 != 0 {
            return Err(CuResult::InvalidValue);
        }
        self.primary_flags.insert(index, flags);
        if let Some(&handle) = self.primary.get(&index) {
            self.context_mut(handle)?.flags = flags;
        }
        Ok(())
    }

    /// (flags, active) of a device's primary context.
    pub fn primary_state(&self, device: i32) -> Result<(u32, bool), CuResult> {
        let index = self.device_ok(device)?;
        let flags = self.primary_flags.get(&index).copied().unwrap_or(0);
        Ok((flags, self.primary.contains_key(&index)))
    }

    /// Whether this is a child forked from the process that initialised the driver.
    pub fn forked(&self) -> bool {
        self.pid != std::process::id()
    }

    /// The device's primary context, if retained.
    pub fn primary_of(&self, device: i32) -> Result<Handle, CuResult> {
        let index = self.device_ok(device)?;
        self.primary
            .get(&index)
            .copied()
            .ok_or(CuResult::InvalidContext)
    }

    /// When the work queued in `context` ends (CLOCK_MONOTONIC ns).
    pub fn queue_end(&self, context: Handle) -> Result<u64, CuResult> {
        Ok(self.context(context)?.last_end_ns)
    }

    pub fn context_device(&self, handle: Handle) -> Result<u32, CuResult> {
        Ok(self.context(handle)?.device)
    }

    /// How a thread of `context` waits.
    pub fn wait_of(&self, context: Handle) -> Result<Wait, CuResult> {
        let contexts = self.contexts.iter().flatten().count();
        Ok(Wait::of(self.context(context)?.flags, contexts))
    }
}

/// The process's driver behind its lock, created by cuInit.
pub static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

/// The driver, locked; a poisoned lock is taken over (a panic cannot cross the C ABI anyway).
pub fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
