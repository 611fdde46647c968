//! What each GPU process asked of the CUDA driver, from uprobes on the driver it maps.

/// Where a thread waited inside the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CudaWait {
    /// `cuStreamSynchronize` (`.item()`, `.cpu()`, a blocking copy's stream sync).
    Stream,
    /// `cuCtxSynchronize` (`torch.cuda.synchronize()`).
    Device,
    /// `cuEventSynchronize`.
    Event,
    /// Inside a copy to or from the host (a copy into pageable memory returns once done).
    Copy,
}

impl CudaWait {
    /// Every kind, in label order.
    pub const ALL: [CudaWait; 4] = [
        CudaWait::Stream,
        CudaWait::Device,
        CudaWait::Event,
        CudaWait::Copy,
    ];

    /// The `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            CudaWait::Stream => "stream",
            CudaWait::Device => "device",
            CudaWait::Event => "event",
            CudaWait::Copy => "copy",
        }
    }
}

/// Totals of one process (or thread) since its probes were attached.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CudaTotals {
    /// Kernel launches (`cuLaunchKernel`, `cuLaunchKernelEx`).
    pub launches: u64,
    /// CUDA graph launches (`cuGraphLaunch`: a whole captured step each).
    pub graph_launches: u64,
    /// Copies host to device, and their bytes.
    pub copies_to_device: u64,
    pub bytes_to_device: u64,
    /// Copies device to host, and their bytes.
    pub copies_to_host: u64,
    pub bytes_to_host: u64,
    /// Seconds spent inside driver waits, by kind ([`CudaWait::ALL`] order).
    pub wait_seconds: [f64; 4],
}

impl CudaTotals {
    pub fn wait(&self, kind: CudaWait) -> f64 {
        self.wait_seconds[kind as usize]
    }

    /// Every wait together.
    pub fn waited(&self) -> f64 {
        self.wait_seconds.iter().sum()
    }
}

/// One thread that used the driver over the last interval.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaThread {
    pub tid: u32,
    /// Kernel and graph launches per second.
    pub launches_per_second: f64,
    /// Share of the interval the thread spent inside driver waits.
    pub wait_ratio: f64,
}

/// A GPU process at the CUDA boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessCuda {
    pub pid: u32,
    /// Since its probes were attached.
    pub totals: CudaTotals,
    /// The threads that launched or waited over the last interval, busiest launcher first:
    /// the threads that drive the GPU (empty on the first read).
    pub threads: Vec<CudaThread>,
}

/// What the CUDA probes saw of a process at one moment (a stack sample's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverView {
    /// Its main thread was inside a driver wait.
    pub thread_waits: bool,
    /// Another of its threads was (the autograd engine's, a pin-memory thread's).
    pub other_waits: bool,
}
