//! A communicator in one rank's process: its collectives and point-to-point transfers,
//! launched as kernels that spin on a word of this process until the shared file says every
//! party has arrived, and the thread that carries the news both ways (NCCL's proxy thread has
//! the same place in a real process). A group's operations are one kernel (NCCL fuses a
//! group's work into one launch per communicator): it waits for every part's parties.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use emu_timeline::now_ns;
use emu_timeline::{KernelCost, UNTIL_WORD};

use crate::cuda::{self, Ptr, NOT_READY, SUCCESS};
use crate::shared::{Place, Shared};

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

/// Words per communicator, one per kernel in turn: kernel n's word serves again at n + WORDS,
/// more kernels than the stub driver queues on a context (1024): by then kernel n has ended
/// and the driver no longer reads its word.
const WORDS: u64 = 4096;

/// One transfer of a kernel: where its parties meet, which party this rank is there, and the
/// bytes this rank moves.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    place: Place,
    party: usize,
    parties: usize,
    moved: u64,
}

/// A kernel this rank launched whose wait has not ended here.
struct Kernel {
    word: usize,
    parts: Vec<Part>,
    /// Whether its start has been told to the parts' peers.
    told: bool,
}

/// What the communicator's thread shares with the calls.
struct InFlight {
    kernels: Mutex<Vec<Kernel>>,
    stop: AtomicBool,
    /// The InfiniBand port its transfers cross, whose counters they add to.
    port: Option<crate::ib::Port>,
}

/// Which way a point-to-point transfer goes, seen from this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Send,
    Receive,
}

pub struct Comm {
    pub shared: Arc<Shared>,
    pub rank: usize,
    pub ranks: usize,
    pub device: c_int,
    context: Ptr,
    function: Ptr,
    /// Collectives issued: each one's number, the same on every rank.
    issued: AtomicU64,
    /// Sends issued to each peer, and receives from each.
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    launched: AtomicU64,
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
            kernels: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            port,
        });
        let carried = (shared.clone(), in_flight.clone());
        std::thread::Builder::new()
            .name("nccl-proxy".into())
            .spawn(move || carry(&carried.0, &carried.1, words))
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
            sent: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            received: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            launched: AtomicU64::new(0),
            words,
            in_flight,
            aborted: AtomicBool::new(false),
        })
    }

    /// Numbers a collective over `bytes` and takes its slot: one part of a kernel.
    pub fn collective(&self, operation: Operation, bytes: u64) -> Part {
        let number = self.issued.fetch_add(1, Ordering::SeqCst);
        let place = Place::Collective(number);
        self.shared
            .claim(place, bytes, operation as u32, self.ranks);
        self.shared.count_issued(self.rank, operation.function());
        Part {
            place,
            party: self.rank,
            parties: self.ranks,
            moved: (operation.bus_factor(self.ranks) * bytes as f64) as u64,
        }
    }

    /// Numbers a send of `bytes` to `peer`, or a receive from it, and takes its slot: one part
    /// of a kernel.
    pub fn point_to_point(&self, direction: Direction, peer: usize, bytes: u64) -> Part {
        let (counter, from, to, party) = match direction {
            Direction::Send => (&self.sent[peer], self.rank, peer, 0),
            Direction::Receive => (&self.received[peer], peer, self.rank, 1),
        };
        let place = Place::PointToPoint {
            from,
            to,
            number: counter.fetch_add(1, Ordering::SeqCst),
        };
        self.shared.claim(place, bytes, 0, 2);
        Part {
            place,
            party,
            parties: 2,
            moved: bytes,
        }
    }

    /// Enqueues one kernel for `parts` on `stream` and returns: it spins on the GPU until
    /// every part's parties have started theirs, then moves the parts' data.
    ///
    /// # Safety
    /// `stream` is null (the legacy stream) or a stream of the stub driver.
    pub unsafe fn launch(&self, parts: Vec<Part>, stream: Ptr) -> Result<(), c_int> {
        let driver = cuda::driver().ok_or(crate::UNHANDLED_CUDA_ERROR)?;
        let kernel = self.launched.fetch_add(1, Ordering::SeqCst);
        let word_index = (kernel % WORDS) as usize;
        let word = &self.words[word_index];
        word.store(0, Ordering::SeqCst);
        let moved: u64 = parts.iter().map(|p| p.moved).sum();
        let mut cost = KernelCost {
            seconds: LATENCY_S + moved as f64 / self.bus_bytes_per_s,
            sm: SPIN_SM,
            occupancy: SPIN_SM / 4.0,
            tensor: 0.0,
            dram: 0.02,
            flags: emu_timeline::COLLECTIVE_KERNEL | UNTIL_WORD,
            until_ns: word.as_ptr() as u64,
        };
        self.lock_in_flight().push(Kernel {
            word: word_index,
            parts,
            told: false,
        });
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
            self.lock_in_flight().retain(|k| k.word != word_index);
            return Err(crate::UNHANDLED_CUDA_ERROR);
        }
        Ok(())
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, Vec<Kernel>> {
        self.in_flight
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Ends this rank's part: its kernels still spinning end now (the peers' go on waiting,
    /// as a real abort leaves them until their own watchdogs fire).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.shared.set_aborted(self.rank);
        let now = now_ns();
        for kernel in self.lock_in_flight().drain(..) {
            self.words[kernel.word].store(now, Ordering::SeqCst);
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.in_flight.stop.store(true, Ordering::SeqCst);
    }
}

/// The communicator's thread: tells the peers when each of this rank's kernels started, and
/// this rank's kernels when every part's peers have arrived.
fn carry(shared: &Shared, in_flight: &InFlight, words: Words) {
    let Some(driver) = cuda::driver() else { return };
    while !in_flight.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_micros(250));
        let mut kernels = in_flight.kernels.lock().unwrap_or_else(|p| p.into_inner());
        kernels.retain_mut(|kernel| {
            let word = &words[kernel.word];
            if !kernel.told {
                let mut start = 0;
                // SAFETY: the word is this process's, the out-pointer a local.
                match unsafe { (driver.emu_kernel_started)(word.as_ptr(), &mut start) } {
                    SUCCESS => {
                        for part in &kernel.parts {
                            shared.arrive(part.place, part.party, part.parties, start);
                        }
                        kernel.told = true;
                    }
                    NOT_READY => return true,
                    _ => return false,
                }
            }
            // Each end read once: a part's end written between two reads would otherwise
            // leave the kernel's word at 0 (not yet known) for ever.
            let ends: Vec<u64> = kernel
                .parts
                .iter()
                .map(|part| shared.end_word(part.place).load(Ordering::SeqCst))
                .collect();
            if ends.contains(&0) {
                return true;
            }
            // A kernel without parts (an empty group's) waits for nothing.
            let end = ends.into_iter().max().unwrap_or(1);
            word.store(end, Ordering::SeqCst);
            for part in &kernel.parts {
                shared.read_end(part.place);
            }
            // The transfers start now: their bytes cross the port.
            if let Some(port) = &in_flight.port {
                port.count(kernel.parts.iter().map(|p| p.moved).sum());
            }
            false
        });
    }
}
