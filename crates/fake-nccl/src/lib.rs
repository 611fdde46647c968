//! A stub `libnccl.so.2` for the test bed: NCCL's entry points with their real names, types
//! and result codes (`nccl.h` of NCCL 2.21+), over the stub CUDA driver (crates/fake-cuda).
//!
//! As the real library does, a collective enqueues a kernel on the caller's stream and
//! returns; the host does not wait (../shared/REAL_NODE.md §3). The kernel starts once its
//! stream reaches it and spins on the GPU — busy, a few SMs — until every rank's kernel of the
//! same collective has started, then moves the data for the time the bytes take at the
//! slowest rank's bus bandwidth (`FAKE_NCCL_BUS_BYTES_PER_S`, 100 GB/s by default). Work
//! queued after it waits on the GPU; the host meets the wait at its next sync. A rank that
//! never arrives leaves its peers' kernels spinning: a hang, as a node shows one.
//!
//! The ranks find each other through the file the unique id names (shared.rs), under
//! `EMUGPU_DIR` or the temporary directory. Each process runs NCCL's RAS service (ras.rs),
//! answering from those files. A rank whose `NCCL_IB_HCA` names a port (ib.rs) moves its data
//! at that port's rate and counts it in the port's counters.
//!
//! `ncclSend` and `ncclRecv` meet as NCCL's do: the n-th send from one rank to another with
//! the n-th receive of the other from it, each side's kernel spinning until both have started
//! (so a send and a receive issued outside a group, in opposite orders on two ranks, hang, as
//! NCCL's do). Between `ncclGroupStart` and `ncclGroupEnd` a thread's operations are kept and
//! launched at the end as one kernel per communicator, which waits for every part. Not
//! emulated (yet): NVLink counters.

#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod comm;
pub mod cuda;
pub mod ib;
pub mod ras;
pub mod shared;

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use comm::{Comm, Direction, Operation, Part};
use shared::{Shared, MAX_RANKS};

/// `ncclResult_t`.
pub type NcclResult = c_int;
pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;

/// `ncclNumTypes`, `ncclNumOps` (built-in reduction operations).
const DATA_TYPES: c_int = 12;
const REDUCTIONS: c_int = 5;

/// `ncclUniqueId`: 128 opaque bytes; here "fake-nccl:" and the communicator file's path.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

const ID_PREFIX: &[u8] = b"fake-nccl:";

/// Bytes of one element of `ncclDataType_t`.
fn element_bytes(data_type: c_int) -> Option<u64> {
    Some(match data_type {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => return None,
    })
}

thread_local! {
    /// ncclGroupStart's nesting on this thread.
    static GROUP_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The operations of the open group, in the order issued: each with its communicator and
    /// stream.
    static GROUPED: RefCell<Vec<(*const Comm, Part, *mut c_void)>> = const { RefCell::new(Vec::new()) };
}

fn errors(result: NcclResult) -> &'static CStr {
    match result {
        SUCCESS => c"no error",
        UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => c"internal error - please report this issue to the NCCL developers",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}

#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    errors(result).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    if version.is_null() {
        return INVALID_ARGUMENT;
    }
    version.write(ras::version_code());
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> NcclResult {
    if id.is_null() {
        return INVALID_ARGUMENT;
    }
    static MADE: AtomicU64 = AtomicU64::new(0);
    let directory = std::env::var_os("EMUGPU_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = directory.join(format!(
        "nccl-{}-{}-{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::SeqCst),
        comm::now_ns()
    ));
    let text = [ID_PREFIX, path.as_os_str().as_encoded_bytes()].concat();
    if text.len() >= 128 {
        return SYSTEM_ERROR;
    }
    let mut internal = [0 as c_char; 128];
    for (to, from) in internal.iter_mut().zip(text) {
        *to = from as c_char;
    }
    id.write(UniqueId { internal });
    SUCCESS
}

/// The communicator file a unique id names.
fn path_of(id: &UniqueId) -> Option<PathBuf> {
    let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
    let end = bytes.iter().position(|&b| b == 0)?;
    let path = bytes[..end].strip_prefix(ID_PREFIX)?;
    Some(PathBuf::from(std::str::from_utf8(path).ok()?))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut *mut Comm,
    ranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    if comm.is_null() || ranks < 1 || ranks as usize > MAX_RANKS || rank < 0 || rank >= ranks {
        return INVALID_ARGUMENT;
    }
    let Some(path) = path_of(&id) else {
        return INVALID_ARGUMENT;
    };
    let Ok(shared) = Shared::open(&path) else {
        return SYSTEM_ERROR;
    };
    if !shared.agree_ranks(ranks as u32) {
        return INVALID_ARGUMENT;
    }
    // Across an InfiniBand port where one is named, at its rate; else at the bus bandwidth
    // given (NVLink's, 100 GB/s by default).
    let port = ib::Port::from_env();
    let bus = match &port {
        Some(port) => port.bytes_per_second,
        None => std::env::var("FAKE_NCCL_BUS_BYTES_PER_S")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|b| *b >= 1.0)
            .unwrap_or(100e9),
    } as u64;
    match Comm::join(shared, rank as usize, ranks as usize, bus, port) {
        Ok(joined) => {
            comm.write(Box::into_raw(Box::new(joined)));
            SUCCESS
        }
        Err(_) => UNHANDLED_CUDA_ERROR,
    }
}

/// `ncclCommInitRankConfig`: the configuration (blocking, CTAs, names) changes nothing here.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut *mut Comm,
    ranks: c_int,
    id: UniqueId,
    rank: c_int,
    _config: *mut c_void,
) -> NcclResult {
    ncclCommInitRank(comm, ranks, id, rank)
}

unsafe fn comm_ref<'a>(comm: *const Comm) -> Result<&'a Comm, NcclResult> {
    comm.as_ref().ok_or(INVALID_ARGUMENT)
}

unsafe fn query(comm: *const Comm, out: *mut c_int, field: fn(&Comm) -> c_int) -> NcclResult {
    match comm_ref(comm) {
        Ok(_) if out.is_null() => INVALID_ARGUMENT,
        Ok(c) => {
            out.write(field(c));
            SUCCESS
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: *const Comm, count: *mut c_int) -> NcclResult {
    query(comm, count, |c| c.ranks as c_int)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: *const Comm, device: *mut c_int) -> NcclResult {
    query(comm, device, |c| c.device)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: *const Comm, rank: *mut c_int) -> NcclResult {
    query(comm, rank, |c| c.rank as c_int)
}

/// No asynchronous error is raised here: a missing peer is a hang, as with real NCCL until the
/// caller's watchdog aborts.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: *const Comm,
    error: *mut NcclResult,
) -> NcclResult {
    query(comm, error, |_| SUCCESS)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(comm: *mut Comm) -> NcclResult {
    comm_ref(comm).map_or_else(|e| e, |_| SUCCESS)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: *mut Comm) -> NcclResult {
    if comm.is_null() {
        return INVALID_ARGUMENT;
    }
    drop(Box::from_raw(comm));
    SUCCESS
}

/// Ends this rank's kernels still waiting and frees the communicator.
#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: *mut Comm) -> NcclResult {
    if comm.is_null() {
        return INVALID_ARGUMENT;
    }
    (*comm).abort();
    drop(Box::from_raw(comm));
    SUCCESS
}

#[no_mangle]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP_DEPTH.with(|d| d.set(d.get() + 1));
    SUCCESS
}

/// Closes a group; the outermost launches what it kept, one kernel per communicator (on the
/// stream of the communicator's first operation).
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> NcclResult {
    let depth = GROUP_DEPTH.with(|d| d.get());
    if depth == 0 {
        return INVALID_USAGE;
    }
    GROUP_DEPTH.with(|d| d.set(depth - 1));
    if depth > 1 {
        return SUCCESS;
    }
    let mut grouped = GROUPED.with(|g| std::mem::take(&mut *g.borrow_mut()));
    while let Some(&(comm, _, stream)) = grouped.first() {
        let (mine, rest) = grouped.into_iter().partition(|(c, _, _)| *c == comm);
        grouped = rest;
        let parts = mine.into_iter().map(|(_, part, _)| part).collect();
        // SAFETY: a communicator checked when its operations were kept, and its stream.
        if let Err(e) = unsafe { (*comm).launch(parts, stream) } {
            return e;
        }
    }
    SUCCESS
}

/// Launches `part` now, or keeps it for the open group's end.
unsafe fn issue(comm: &Comm, part: Part, stream: *mut c_void) -> NcclResult {
    if GROUP_DEPTH.with(|d| d.get()) > 0 {
        GROUPED.with(|g| g.borrow_mut().push((comm, part, stream)));
        return SUCCESS;
    }
    match comm.launch(vec![part], stream) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

/// Checks an operation's arguments as NCCL does, in its order: the communicator, the datatype,
/// the rest (`bad`), then whether the communicator was aborted. Its communicator and the
/// datatype's size.
unsafe fn checked<'a>(
    comm: *const Comm,
    data_type: c_int,
    bad: impl FnOnce(&Comm) -> bool,
) -> Result<(&'a Comm, u64), NcclResult> {
    let comm = comm_ref(comm)?;
    let size = element_bytes(data_type)
        .filter(|_| data_type < DATA_TYPES)
        .ok_or(INVALID_ARGUMENT)?;
    if bad(comm) {
        return Err(INVALID_ARGUMENT);
    }
    if comm.aborted.load(Ordering::SeqCst) {
        return Err(INVALID_USAGE);
    }
    Ok((comm, size))
}

/// Checks a point-to-point transfer's arguments as NCCL does and issues it.
unsafe fn point_to_point(
    direction: Direction,
    buffer: *const c_void,
    count: usize,
    data_type: c_int,
    peer: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    let bad = |c: &Comm| peer < 0 || peer as usize >= c.ranks || (count > 0 && buffer.is_null());
    match checked(comm, data_type, bad) {
        Ok((comm, size)) => {
            let part = comm.point_to_point(direction, peer as usize, count as u64 * size);
            issue(comm, part, stream)
        }
        Err(e) => e,
    }
}

/// Sends `count` elements to `peer`, whose matching ncclRecv receives them.
#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    data_type: c_int,
    peer: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    point_to_point(Direction::Send, send, count, data_type, peer, comm, stream)
}

/// Receives `count` elements from `peer`'s matching ncclSend.
#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    receive: *mut c_void,
    count: usize,
    data_type: c_int,
    peer: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    let buffer = receive.cast_const();
    point_to_point(
        Direction::Receive,
        buffer,
        count,
        data_type,
        peer,
        comm,
        stream,
    )
}

/// Checks a collective's arguments as NCCL does and enqueues it over `elements` elements.
unsafe fn enqueue(
    comm: *const Comm,
    operation: Operation,
    buffers: [*const c_void; 2],
    elements: usize,
    data_type: c_int,
    reduction: Option<c_int>,
    stream: *mut c_void,
) -> NcclResult {
    let bad = |_: &Comm| {
        reduction.is_some_and(|r| !(0..REDUCTIONS).contains(&r))
            || (elements > 0 && buffers.iter().any(|b| b.is_null()))
    };
    match checked(comm, data_type, bad) {
        Ok((comm, size)) => {
            let part = comm.collective(operation, elements as u64 * size);
            issue(comm, part, stream)
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    receive: *mut c_void,
    count: usize,
    data_type: c_int,
    reduction: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    let buffers = [send, receive.cast_const()];
    let reduction = Some(reduction);
    enqueue(
        comm,
        Operation::AllReduce,
        buffers,
        count,
        data_type,
        reduction,
        stream,
    )
}

/// Each rank receives `receive_count` elements of the reduction of everyone's
/// `ranks × receive_count`.
#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    receive: *mut c_void,
    receive_count: usize,
    data_type: c_int,
    reduction: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    let total = comm.as_ref().map_or(0, |c| c.ranks) * receive_count;
    let buffers = [send, receive.cast_const()];
    let reduction = Some(reduction);
    enqueue(
        comm,
        Operation::ReduceScatter,
        buffers,
        total,
        data_type,
        reduction,
        stream,
    )
}

/// Each rank receives everyone's `send_count` elements.
#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    receive: *mut c_void,
    send_count: usize,
    data_type: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    let total = comm.as_ref().map_or(0, |c| c.ranks) * send_count;
    let buffers = [send, receive.cast_const()];
    enqueue(
        comm,
        Operation::AllGather,
        buffers,
        total,
        data_type,
        None,
        stream,
    )
}

fn root_ok(comm: *const Comm, root: c_int) -> bool {
    // SAFETY: the caller's communicator, checked non-null by as_ref.
    unsafe { comm.as_ref() }.is_some_and(|c| root >= 0 && (root as usize) < c.ranks)
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    receive: *mut c_void,
    count: usize,
    data_type: c_int,
    root: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    if !comm.is_null() && !root_ok(comm, root) {
        return INVALID_ARGUMENT;
    }
    // Only the root's send buffer is read.
    let is_root = comm_ref(comm).is_ok_and(|c| c.rank == root as usize);
    let source = if is_root { send } else { receive.cast_const() };
    let buffers = [source, receive.cast_const()];
    enqueue(
        comm,
        Operation::Broadcast,
        buffers,
        count,
        data_type,
        None,
        stream,
    )
}

/// The in-place form of ncclBroadcast.
#[no_mangle]
pub unsafe extern "C" fn ncclBcast(
    buffer: *mut c_void,
    count: usize,
    data_type: c_int,
    root: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    ncclBroadcast(buffer, buffer, count, data_type, root, comm, stream)
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduce(
    send: *const c_void,
    receive: *mut c_void,
    count: usize,
    data_type: c_int,
    reduction: c_int,
    root: c_int,
    comm: *const Comm,
    stream: *mut c_void,
) -> NcclResult {
    if !comm.is_null() && !root_ok(comm, root) {
        return INVALID_ARGUMENT;
    }
    // Only the root's receive buffer is written.
    let is_root = comm_ref(comm).is_ok_and(|c| c.rank == root as usize);
    let buffers = [send, if is_root { receive.cast_const() } else { send }];
    let reduction = Some(reduction);
    enqueue(
        comm,
        Operation::Reduce,
        buffers,
        count,
        data_type,
        reduction,
        stream,
    )
}
