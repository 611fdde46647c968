//! A communicator in one rank's process: its collectives, launched as kernels that spin on a
//! word of this process until the shared file says every rank has arrived, and the thread that
//! carries the news both ways (NCCL's proxy thread has the same place in a real process).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use emu_timeline::now_ns;
use emu_timeline::{KernelCost, UNTIL_WORD};

use crate::cuda::{self, Ptr, NOT_READY, SUCCESS};
use crate::shared::{Shared, SLOTS};

/// What a collective does with its data, for its transfer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    AllReduce = 1,
    ReduceScatter = 2,
    AllGather = 3,
    Broadcast = 4,
    Reduce = 5,
}

impl Operation {
    /// Its `ncclFunc_t`, the index RAS counts it under.
    pub fn function(self) -> usize {
        match self {
            Operation::Broadcast => 0,
            Operation::Reduce => 1,
            Operation::AllGather => 2,
            Operation::ReduceScatter => 3,
            Operation::AllReduce => 4,
        }
    }

    /// Bytes each rank moves per byte of the collective's buffer (ring algorithms: NCCL's
    /// "bus bandwidth" factors, docs/PERFORMANCE.md of nccl-tests).
    fn bus_factor(self, ranks: usize) -> f64 {
        let n = ranks.max(1) as f64;
        match self {
            Operation::AllReduce => 2.0 * (n - 1.0) / n,
            Operation::ReduceScatter | Operation::AllGather => (n - 1.0) / n,
            Operation::Broadcast | Operation::Reduce => 1.0,
        }
    }
}

/// A collective's fixed cost on the GPU once every rank is there.
const LATENCY_S: f64 = 20e-6;
/// Shares of the GPU an NCCL kernel keeps busy: one block per channel, a few SMs of 132.
const SPIN_SM: f64 = 0.06;

/// The words this process's kernels spin on; never freed, since the driver may read one until
/// its kernel ends.
type Words = &'static [AtomicU64];

/// Words per communicator: twice the shared ring's slots. A rank running ahead of its peers
/// reuses collective n's word at n + WORDS, whose slot it can claim only once every rank's
/// kernel of n + SLOTS has its end — its own kernel of n + SLOTS started, so its kernel of n,
/// queued before, has ended and its word is read. With one word per slot, a rank SLOTS
/// collectives ahead (a loop that never syncs) could clear the word its own kernel of n still
/// waited on: a hang.
const WORDS: u64 = 2 * SLOTS;

/// What the communicator's thread shares with the calls.
struct InFlight {
    /// Collectives this rank issued whose wait has not ended here: (number, arrival told,
    /// bytes it moves).
    numbers: Mutex<Vec<(u64, bool, u64)>>,
    stop: AtomicBool,
    /// The InfiniBand port its transfers cross, whose counters they add to.
    port: Option<crate::ib::Port>,
}

pub struct Comm {
    pub shared: Arc<Shared>,
    pub rank: usize,
    pub ranks: usize,
    pub device: c_int,
    context: Ptr,
    function: Ptr,
    issued: AtomicU64,
    words: Words,
    in_flight: Arc<InFlight>,
    bus_bytes_per_s: f64,
    pub aborted: AtomicBool,
}

// The raw handles are the stub driver's, usable from any thread.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

impl Comm {
    /// Joins the communicator in `shared` as `rank` of `ranks` on the calling thread's current
    /// context, blocking until every rank has joined (NCCL's bootstrap does).
    pub fn join(
        shared: Shared,
        rank: usize,
        ranks: usize,
        bus_bytes_per_s: u64,
        port: Option<crate::ib::Port>,
    ) -> Result<Comm, &'static str> {
        let driver = cuda::driver().ok_or("no CUDA driver")?;
        let (mut context, mut device, mut module, mut function) = (
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: out-pointers to locals; the image and name are NUL-terminated.
        unsafe {
            if (driver.cu_ctx_get_current)(&mut context) != SUCCESS || context.is_null() {
                return Err("no current CUDA context");
            }
            if (driver.cu_ctx_get_device)(&mut device) != SUCCESS
                || (driver.cu_module_load_data)(&mut module, c"nccl".as_ptr().cast()) != SUCCESS
                || (driver.cu_module_get_function)(&mut function, module, c"ncclDevKernel".as_ptr())
                    != SUCCESS
            {
                return Err("the CUDA driver refused NCCL's module");
            }
        }
        let shared = Arc::new(shared);
        shared.join(rank, std::process::id(), device, bus_bytes_per_s);
        crate::ras::register(&shared, rank, ranks);
        while shared.joined() < ranks as u64 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let words: Words = Vec::from_iter((0..WORDS).map(|_| AtomicU64::new(0))).leak();
        let in_flight = Arc::new(InFlight {
            numbers: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            port,
        });
        let carried = (shared.clone(), in_flight.clone());
        std::thread::Builder::new()
            .name("nccl-proxy".into())
            .spawn(move || carry(&carried.0, &carried.1, words, rank, ranks))
            .map_err(|_| "no thread for the communicator")?;
        Ok(Comm {
            bus_bytes_per_s: shared.slowest_bus(ranks) as f64,
            shared,
            rank,
            ranks,
            device,
            context,
            function,
            issued: AtomicU64::new(0),
            words,
            in_flight,
            aborted: AtomicBool::new(false),
        })
    }

    /// Enqueues a collective over `bytes` on `stream` and returns: its kernel spins on the GPU
    /// until every rank's has started, then moves the data.
    ///
    /// # Safety
    /// `stream` is null (the legacy stream) or a stream of the stub driver.
    pub unsafe fn collective(
        &self,
        operation: Operation,
        bytes: u64,
        stream: Ptr,
    ) -> Result<(), c_int> {
        let driver = cuda::driver().ok_or(crate::UNHANDLED_CUDA_ERROR)?;
        let number = self.issued.fetch_add(1, Ordering::SeqCst);
        self.shared
            .claim(number, bytes, operation as u32, self.ranks);
        self.shared.count_issued(self.rank, operation.function());
        let word = &self.words[(number % WORDS) as usize];
        word.store(0, Ordering::SeqCst);
        let moved = operation.bus_factor(self.ranks) * bytes as f64;
        let transfer = LATENCY_S + moved / self.bus_bytes_per_s;
        let mut cost = KernelCost {
            seconds: transfer,
            sm: SPIN_SM,
            occupancy: SPIN_SM / 4.0,
            tensor: 0.0,
            dram: 0.02,
            flags: emu_timeline::COLLECTIVE_KERNEL | UNTIL_WORD,
            until_ns: word.as_ptr() as u64,
        };
        self.lock_in_flight().push((number, false, moved as u64));
        let mut params = [(&mut cost as *mut KernelCost).cast::<std::ffi::c_void>()];
        // SAFETY: the stub driver's entry points with valid handles and a cost argument that
        // outlives the call (the driver copies it).
        let launched = unsafe {
            let mut previous = std::ptr::null_mut();
            (driver.cu_ctx_get_current)(&mut previous);
            (driver.cu_ctx_set_current)(self.context);
            let code = (driver.cu_launch_kernel)(
                self.function,
                self.ranks.min(32) as u32,
                1,
                1,
                512,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            (driver.cu_ctx_set_current)(previous);
            code
        };
        if launched != SUCCESS {
            self.lock_in_flight().retain(|(n, _, _)| *n != number);
            return Err(crate::UNHANDLED_CUDA_ERROR);
        }
        Ok(())
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, Vec<(u64, bool, u64)>> {
        self.in_flight
            .numbers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Ends this rank's part: its kernels still spinning end now (the peers' go on waiting,
    /// as a real abort leaves them until their own watchdogs fire).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.shared.set_aborted(self.rank);
        let now = now_ns();
        for (number, _, _) in self.lock_in_flight().drain(..) {
            self.words[(number % WORDS) as usize].store(now, Ordering::SeqCst);
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.in_flight.stop.store(true, Ordering::SeqCst);
    }
}

/// The communicator's thread: tells the peers when each of this rank's kernels started, and
/// this rank's kernels when the peers have all arrived.
fn carry(shared: &Shared, in_flight: &InFlight, words: Words, rank: usize, ranks: usize) {
    let Some(driver) = cuda::driver() else { return };
    while !in_flight.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_micros(250));
        let mut numbers = in_flight.numbers.lock().unwrap_or_else(|p| p.into_inner());
        numbers.retain_mut(|(number, told, moved)| {
            let word = &words[(*number % WORDS) as usize];
            if !*told {
                let mut start = 0;
                // SAFETY: the word is this process's, the out-pointer a local.
                match unsafe { (driver.emu_kernel_started)(word.as_ptr(), &mut start) } {
                    SUCCESS => {
                        shared.arrive(*number, rank, ranks, start);
                        *told = true;
                    }
                    NOT_READY => return true,
                    _ => return false,
                }
            }
            match shared.end_word(*number).load(Ordering::SeqCst) {
                0 => true,
                end => {
                    word.store(end, Ordering::SeqCst);
                    shared.read_end(*number);
                    // The transfer starts now: its bytes cross the port.
                    if let Some(port) = &in_flight.port {
                        port.count(*moved);
                    }
                    false
                }
            }
        });
    }
}
