//! A stub `libcudart.so.12` for the test bed: the CUDA runtime entry points PyTorch's ATen
//! calls (`cudaLaunchKernel`, `cudaMemcpyAsync`, `cudaStreamSynchronize`, ...), each forwarded to
//! the driver as the real runtime does it — the runtime loads `libcuda.so.1` with `dlopen` at
//! its first call, keeps one primary context per device, and a thread's calls go to the device
//! `cudaSetDevice` chose (0 by default). Without a loadable driver every call returns
//! `cudaErrorInsufficientDriver`, as the real runtime does on a machine without one.
//!
//! A wait therefore happens in the driver, under a call of this library, under the caller: the
//! shape a real process shows to a profiler and to uprobes on either library.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

type Ptr = *mut c_void;
/// `cudaError_t`; the codes shared with the driver have the driver's values.
pub type CudaError = c_int;

pub const SUCCESS: CudaError = 0;
pub const ERROR_INVALID_VALUE: CudaError = 1;
pub const ERROR_INSUFFICIENT_DRIVER: CudaError = 35;

macro_rules! driver_api {
    ($($name:ident($($arg:ty),*);)*) => {
        /// The driver entry points the runtime calls, found in libcuda.so.1.
        struct Driver { $($name: unsafe extern "C" fn($($arg),*) -> c_int,)* }

        impl Driver {
            unsafe fn load(library: Ptr) -> Option<Driver> {
                Some(Driver {
                    $($name: {
                        let symbol = libc::dlsym(library, concat!(stringify!($name), "\0").as_ptr().cast());
                        if symbol.is_null() {
                            return None;
                        }
                        std::mem::transmute::<Ptr, unsafe extern "C" fn($($arg),*) -> c_int>(symbol)
                    },)*
                })
            }
        }
    };
}

driver_api! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuDeviceGetCount(*mut c_int);
    cuDevicePrimaryCtxRetain(*mut Ptr, c_int);
    cuDevicePrimaryCtxSetFlags_v2(c_int, c_uint);
    cuDevicePrimaryCtxRelease_v2(c_int);
    cuCtxSetCurrent(Ptr);
    cuCtxSynchronize();
    cuModuleLoadData(*mut Ptr, *const c_void);
    cuModuleGetFunction(*mut Ptr, Ptr, *const c_char);
    cuLaunchKernel(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr);
    cuMemAlloc_v2(*mut u64, usize);
    cuMemFree_v2(u64);
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemHostAlloc(*mut Ptr, usize, c_uint);
    cuMemFreeHost(Ptr);
    cuPointerGetAttribute(*mut c_void, c_int, u64);
    cuMemcpyHtoD_v2(u64, *const c_void, usize);
    cuMemcpyDtoH_v2(Ptr, u64, usize);
    cuMemcpyDtoD_v2(u64, u64, usize);
    cuMemcpyHtoDAsync_v2(u64, *const c_void, usize, Ptr);
    cuMemcpyDtoHAsync_v2(Ptr, u64, usize, Ptr);
    cuMemcpyDtoDAsync_v2(u64, u64, usize, Ptr);
    cuStreamCreate(*mut Ptr, c_uint);
    cuStreamDestroy_v2(Ptr);
    cuStreamSynchronize(Ptr);
    cuStreamQuery(Ptr);
    cuStreamWaitEvent(Ptr, Ptr, c_uint);
    cuStreamBeginCapture_v2(Ptr, c_int);
    cuStreamEndCapture(Ptr, *mut Ptr);
    cuEventCreate(*mut Ptr, c_uint);
    cuEventDestroy_v2(Ptr);
    cuEventRecord(Ptr, Ptr);
    cuEventSynchronize(Ptr);
    cuEventQuery(Ptr);
    cuEventElapsedTime(*mut f32, Ptr, Ptr);
    cuGraphInstantiateWithFlags(*mut Ptr, Ptr, u64);
    cuGraphLaunch(Ptr, Ptr);
    cuGraphDestroy(Ptr);
    cuGraphExecDestroy(Ptr);
}

/// The driver, loaded and initialised at the first call; None when it cannot be.
fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| unsafe {
            let library = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if library.is_null() {
                return None;
            }
            let driver = Driver::load(library)?;
            // cuInit's own error (no device) is each later call's; the driver is still there.
            (driver.cuInit)(0);
            Some(driver)
        })
        .as_ref()
}

/// Per device: its primary context and the one function every host stub launches (the stub
/// driver tells kernels apart by their cost argument, not by their code).
struct Device {
    context: usize,
    function: usize,
}

static DEVICES: Mutex<Option<HashMap<c_int, Device>>> = Mutex::new(None);

thread_local! {
    static DEVICE: Cell<c_int> = const { Cell::new(0) };
    /// The device whose context this thread has current, once set.
    static CURRENT: Cell<Option<c_int>> = const { Cell::new(None) };
    static LAST_ERROR: Cell<CudaError> = const { Cell::new(SUCCESS) };
}

/// Records a failed call's error for cudaGetLastError and returns it.
fn result(code: c_int) -> CudaError {
    if code != SUCCESS {
        LAST_ERROR.with(|e| e.set(code));
    }
    code
}

/// The driver with the calling thread's device's primary context current (created at its
/// first use, as the runtime's lazy initialisation does); the function to launch.
unsafe fn ready() -> Result<(&'static Driver, Ptr), CudaError> {
    let d = driver().ok_or(ERROR_INSUFFICIENT_DRIVER)?;
    let device = DEVICE.with(Cell::get);
    let mut devices = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    let devices = devices.get_or_insert_with(HashMap::new);
    let entry = match devices.entry(device) {
        std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
        std::collections::hash_map::Entry::Vacant(new) => {
            let mut context = std::ptr::null_mut();
            check((d.cuDevicePrimaryCtxRetain)(&mut context, device))?;
            let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
            check((d.cuCtxSetCurrent)(context))?;
            check((d.cuModuleLoadData)(&mut module, c"fatbin".as_ptr().cast()))?;
            check((d.cuModuleGetFunction)(
                &mut function,
                module,
                c"kernel".as_ptr(),
            ))?;
            CURRENT.with(|c| c.set(Some(device)));
            new.insert(Device {
                context: context as usize,
                function: function as usize,
            })
        }
    };
    if CURRENT.with(Cell::get) != Some(device) {
        check((d.cuCtxSetCurrent)(entry.context as Ptr))?;
        CURRENT.with(|c| c.set(Some(device)));
    }
    Ok((d, entry.function as Ptr))
}

fn check(code: c_int) -> Result<(), CudaError> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(code)
    }
}

/// Runs `call` with the driver ready, recording its error.
unsafe fn run(call: impl FnOnce(&'static Driver, Ptr) -> c_int) -> CudaError {
    result(match ready() {
        Ok((d, function)) => call(d, function),
        Err(e) => e,
    })
}

// -- devices ----------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceCount(count: *mut c_int) -> CudaError {
    match driver() {
        Some(d) => result((d.cuDeviceGetCount)(count)),
        None => result(ERROR_INSUFFICIENT_DRIVER),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaSetDevice(device: c_int) -> CudaError {
    let mut count = 0;
    let found = cudaGetDeviceCount(&mut count);
    if found != SUCCESS {
        return found;
    }
    if device < 0 || device >= count {
        return result(101); // cudaErrorInvalidDevice
    }
    DEVICE.with(|d| d.set(device));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDevice(device: *mut c_int) -> CudaError {
    if device.is_null() {
        return result(ERROR_INVALID_VALUE);
    }
    *device = DEVICE.with(Cell::get);
    SUCCESS
}

/// `cudaDeviceScheduleSpin` (1), `Yield` (2), `BlockingSync` (4): the flags of the current
/// device's primary context, as the driver spells them.
#[no_mangle]
pub unsafe extern "C" fn cudaSetDeviceFlags(flags: c_uint) -> CudaError {
    match driver() {
        Some(d) => result((d.cuDevicePrimaryCtxSetFlags_v2)(
            DEVICE.with(Cell::get),
            flags & 0x7,
        )),
        None => result(ERROR_INSUFFICIENT_DRIVER),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> CudaError {
    run(|d, _| (d.cuCtxSynchronize)())
}

/// Destroys the current device's primary context: its memory and process entry go.
#[no_mangle]
pub unsafe extern "C" fn cudaDeviceReset() -> CudaError {
    let Some(d) = driver() else {
        return result(ERROR_INSUFFICIENT_DRIVER);
    };
    let device = DEVICE.with(Cell::get);
    let mut devices = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    if devices
        .as_mut()
        .and_then(|all| all.remove(&device))
        .is_none()
    {
        return SUCCESS;
    }
    CURRENT.with(|c| c.set(None));
    result((d.cuDevicePrimaryCtxRelease_v2)(device))
}

#[no_mangle]
pub unsafe extern "C" fn cudaDriverGetVersion(version: *mut c_int) -> CudaError {
    if version.is_null() {
        return result(ERROR_INVALID_VALUE);
    }
    match driver() {
        Some(d) => result((d.cuDriverGetVersion)(version)),
        None => {
            *version = 0; // no driver installed
            SUCCESS
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(version: *mut c_int) -> CudaError {
    if version.is_null() {
        return result(ERROR_INVALID_VALUE);
    }
    *version = 12080;
    SUCCESS
}

// -- memory -----------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cudaMalloc(ptr: *mut Ptr, bytes: usize) -> CudaError {
    run(|d, _| (d.cuMemAlloc_v2)(ptr.cast(), bytes))
}

#[no_mangle]
pub unsafe extern "C" fn cudaFree(ptr: Ptr) -> CudaError {
    if ptr.is_null() {
        return SUCCESS;
    }
    run(|d, _| (d.cuMemFree_v2)(ptr as u64))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> CudaError {
    run(|d, _| (d.cuMemGetInfo_v2)(free, total))
}

#[no_mangle]
pub unsafe extern "C" fn cudaHostAlloc(ptr: *mut Ptr, bytes: usize, flags: c_uint) -> CudaError {
    run(|d, _| (d.cuMemHostAlloc)(ptr, bytes, flags))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMallocHost(ptr: *mut Ptr, bytes: usize) -> CudaError {
    cudaHostAlloc(ptr, bytes, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cudaFreeHost(ptr: Ptr) -> CudaError {
    run(|d, _| (d.cuMemFreeHost)(ptr))
}

/// `cudaMemcpyKind`: resolves `cudaMemcpyDefault` (4) by asking the driver what each pointer is.
unsafe fn kind_of(d: &Driver, dst: Ptr, src: *const c_void, kind: c_int) -> c_int {
    if kind != 4 {
        return kind;
    }
    let on_device = |p: u64| {
        let mut memory_type: c_uint = 0;
        (d.cuPointerGetAttribute)((&mut memory_type as *mut c_uint).cast(), 2, p) == SUCCESS
            && memory_type == 2
    };
    match (on_device(src as u64), on_device(dst as u64)) {
        (false, false) => 0,
        (false, true) => 1,
        (true, false) => 2,
        (true, true) => 3,
    }
}

/// The runtime's copies: synchronous ones through the driver's synchronous copies, async
/// ones on `stream`; host to host is a memcpy.
unsafe fn memcpy(
    dst: Ptr,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    stream: Option<Ptr>,
) -> CudaError {
    run(|d, _| match (kind_of(d, dst, src, kind), stream) {
        (0, _) => {
            std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), bytes);
            SUCCESS
        }
        (1, None) => (d.cuMemcpyHtoD_v2)(dst as u64, src, bytes),
        (2, None) => (d.cuMemcpyDtoH_v2)(dst, src as u64, bytes),
        (3, None) => (d.cuMemcpyDtoD_v2)(dst as u64, src as u64, bytes),
        (1, Some(s)) => (d.cuMemcpyHtoDAsync_v2)(dst as u64, src, bytes, s),
        (2, Some(s)) => (d.cuMemcpyDtoHAsync_v2)(dst, src as u64, bytes, s),
        (3, Some(s)) => (d.cuMemcpyDtoDAsync_v2)(dst as u64, src as u64, bytes, s),
        _ => 21, // cudaErrorInvalidMemcpyDirection
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy(
    dst: Ptr,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
) -> CudaError {
    memcpy(dst, src, bytes, kind, None)
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyAsync(
    dst: Ptr,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    stream: Ptr,
) -> CudaError {
    memcpy(dst, src, bytes, kind, Some(stream))
}

// -- launches, streams, events, graphs --------------------------------------------------------

/// `dim3`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel(
    _host_function: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut Ptr,
    shared_bytes: usize,
    stream: Ptr,
) -> CudaError {
    run(|d, function| {
        (d.cuLaunchKernel)(
            function,
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            shared_bytes as c_uint,
            stream,
            args,
            std::ptr::null_mut(),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreate(stream: *mut Ptr) -> CudaError {
    run(|d, _| (d.cuStreamCreate)(stream, 0))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamDestroy(stream: Ptr) -> CudaError {
    run(|d, _| (d.cuStreamDestroy_v2)(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize(stream: Ptr) -> CudaError {
    run(|d, _| (d.cuStreamSynchronize)(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamQuery(stream: Ptr) -> CudaError {
    run(|d, _| (d.cuStreamQuery)(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamWaitEvent(stream: Ptr, event: Ptr, flags: c_uint) -> CudaError {
    run(|d, _| (d.cuStreamWaitEvent)(stream, event, flags))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamBeginCapture(stream: Ptr, mode: c_int) -> CudaError {
    run(|d, _| (d.cuStreamBeginCapture_v2)(stream, mode))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamEndCapture(stream: Ptr, graph: *mut Ptr) -> CudaError {
    run(|d, _| (d.cuStreamEndCapture)(stream, graph))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphInstantiate(exec: *mut Ptr, graph: Ptr, flags: u64) -> CudaError {
    run(|d, _| (d.cuGraphInstantiateWithFlags)(exec, graph, flags))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch(exec: Ptr, stream: Ptr) -> CudaError {
    run(|d, _| (d.cuGraphLaunch)(exec, stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphDestroy(graph: Ptr) -> CudaError {
    run(|d, _| (d.cuGraphDestroy)(graph))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphExecDestroy(exec: Ptr) -> CudaError {
    run(|d, _| (d.cuGraphExecDestroy)(exec))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventCreate(event: *mut Ptr) -> CudaError {
    run(|d, _| (d.cuEventCreate)(event, 0))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventDestroy(event: Ptr) -> CudaError {
    run(|d, _| (d.cuEventDestroy_v2)(event))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecord(event: Ptr, stream: Ptr) -> CudaError {
    run(|d, _| (d.cuEventRecord)(event, stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventSynchronize(event: Ptr) -> CudaError {
    run(|d, _| (d.cuEventSynchronize)(event))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventQuery(event: Ptr) -> CudaError {
    run(|d, _| (d.cuEventQuery)(event))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventElapsedTime(ms: *mut f32, start: Ptr, end: Ptr) -> CudaError {
    run(|d, _| (d.cuEventElapsedTime)(ms, start, end))
}

// -- errors -----------------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn cudaGetLastError() -> CudaError {
    LAST_ERROR.with(|e| e.replace(SUCCESS))
}

#[no_mangle]
pub extern "C" fn cudaPeekAtLastError() -> CudaError {
    LAST_ERROR.with(Cell::get)
}

fn error_text(error: CudaError) -> (&'static [u8], &'static [u8]) {
    match error {
        0 => (b"cudaSuccess\0", b"no error\0"),
        1 => (b"cudaErrorInvalidValue\0", b"invalid argument\0"),
        2 => (b"cudaErrorMemoryAllocation\0", b"out of memory\0"),
        3 => (b"cudaErrorInitializationError\0", b"initialization error\0"),
        21 => (
            b"cudaErrorInvalidMemcpyDirection\0",
            b"invalid copy direction for memcpy\0",
        ),
        35 => (
            b"cudaErrorInsufficientDriver\0",
            b"CUDA driver version is insufficient for CUDA runtime version\0",
        ),
        100 => (
            b"cudaErrorNoDevice\0",
            b"no CUDA-capable device is detected\0",
        ),
        101 => (b"cudaErrorInvalidDevice\0", b"invalid device ordinal\0"),
        400 => (
            b"cudaErrorInvalidResourceHandle\0",
            b"invalid resource handle\0",
        ),
        600 => (b"cudaErrorNotReady\0", b"device not ready\0"),
        900 => (
            b"cudaErrorStreamCaptureUnsupported\0",
            b"operation not permitted when stream is capturing\0",
        ),
        901 => (
            b"cudaErrorStreamCaptureInvalidated\0",
            b"operation failed due to a previous error during capture\0",
        ),
        _ => (b"cudaErrorUnknown\0", b"unrecognized error code\0"),
    }
}

#[no_mangle]
pub extern "C" fn cudaGetErrorName(error: CudaError) -> *const c_char {
    error_text(error).0.as_ptr().cast()
}

#[no_mangle]
pub extern "C" fn cudaGetErrorString(error: CudaError) -> *const c_char {
    error_text(error).1.as_ptr().cast()
}
