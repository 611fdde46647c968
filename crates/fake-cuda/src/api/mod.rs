//! The C ABI: each entry point checks its pointers, runs its operation on the [`Driver`] under
//! the lock and, where the real driver waits, waits after letting the lock go.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void};

mod errors;
mod memory;
mod work;

pub use errors::*;
pub use memory::*;
pub use work::*;

use super::driver::{self, Driver, Handle};
use super::wait::{self, Wait};
use super::CuResult;

type Ptr = *mut c_void;

/// Opaque handles are a type tag and an index, so a handle of the wrong kind is refused as
/// CUDA_ERROR_INVALID_HANDLE (or INVALID_CONTEXT) rather than read as another.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Context = 1,
    Stream = 2,
    Event = 3,
    Module = 4,
    Function = 5,
    Graph = 6,
    Exec = 7,
}

pub(super) fn handle(kind: Kind, index: Handle) -> Ptr {
    (((kind as usize) << 40) | (index + 1)) as Ptr
}

fn index(kind: Kind, ptr: Ptr) -> Option<Handle> {
    let value = ptr as usize;
    (value >> 40 == kind as usize && value & ((1 << 40) - 1) > 0)
        .then(|| (value & ((1 << 40) - 1)) - 1)
}

pub(super) fn index_or(kind: Kind, ptr: Ptr) -> Result<Handle, CuResult> {
    let missing = if kind == Kind::Context {
        CuResult::InvalidContext
    } else {
        CuResult::InvalidHandle
    };
    index(kind, ptr).ok_or(missing)
}

/// A stream argument: None for the legacy default stream (NULL, CU_STREAM_LEGACY and, here,
/// CU_STREAM_PER_THREAD).
pub(super) fn stream_of(ptr: Ptr) -> Result<Option<Handle>, CuResult> {
    match ptr as usize {
        0..=2 => Ok(None),
        _ => index_or(Kind::Stream, ptr).map(Some),
    }
}

thread_local! {
    /// The calling thread's context stack; the last is current.
    static CURRENT: RefCell<Vec<Handle>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn current() -> Result<Handle, CuResult> {
    CURRENT
        .with(|c| c.borrow().last().copied())
        .ok_or(CuResult::InvalidContext)
}

fn set_current(context: Option<Handle>) {
    CURRENT.with(|c| {
        let mut stack = c.borrow_mut();
        stack.pop();
        stack.extend(context);
    });
}

/// Runs `op` on the initialised driver. A child forked after cuInit has no driver: CUDA's
/// state does not survive fork, and every call fails as it does in a real forked child.
pub(super) fn with<T>(op: impl FnOnce(&mut Driver) -> Result<T, CuResult>) -> Result<T, CuResult> {
    let mut guard = driver::lock();
    let driver = guard.as_mut().ok_or(CuResult::NotInitialized)?;
    if driver.forked() {
        return Err(CuResult::NotInitialized);
    }
    op(driver)
}

/// Runs `op` with the current context; returns what it returns and how the context waits.
pub(super) fn in_context<T>(
    op: impl FnOnce(&mut Driver, Handle) -> Result<T, CuResult>,
) -> Result<(T, Wait), CuResult> {
    with(|d| {
        let context = current()?;
        let wait = d.wait_of(context)?;
        Ok((op(d, context)?, wait))
    })
}

pub(super) fn code(result: Result<(), CuResult>) -> CuResult {
    result.err().unwrap_or(CuResult::Success)
}

pub(super) unsafe fn out<T>(ptr: *mut T, value: T) -> Result<(), CuResult> {
    if ptr.is_null() {
        return Err(CuResult::InvalidValue);
    }
    ptr.write(value);
    Ok(())
}

// -- initialisation and devices ---------------------------------------------------------------

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    if flags != 0 {
        return CuResult::InvalidValue;
    }
    let mut guard = driver::lock();
    if guard.is_none() {
        match Driver::from_env() {
            Ok(d) => *guard = Some(d),
            Err(e) => return e,
        }
    }
    CuResult::Success
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    code(out(version, 12080))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    code(with(|d| out(count, d.devices as c_int)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> CuResult {
    code(with(|d| {
        if ordinal < 0 || ordinal as u32 >= d.devices {
            return Err(CuResult::InvalidDevice);
        }
        out(device, ordinal)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> CuResult {
    code(with(|d| {
        if device < 0 || device as u32 >= d.devices {
            return Err(CuResult::InvalidDevice);
        }
        if name.is_null() || len <= 0 {
            return Err(CuResult::InvalidValue);
        }
        let text = b"NVIDIA H100 80GB HBM3 (emulated)\0";
        let n = text.len().min(len as usize);
        std::ptr::copy_nonoverlapping(text.as_ptr().cast(), name, n);
        *name.add(n - 1) = 0;
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> CuResult {
    code(with(|d| {
        if device < 0 || device as u32 >= d.devices {
            return Err(CuResult::InvalidDevice);
        }
        out(bytes, d.memory_total as usize)
    }))
}

/// The attributes a framework asks first; the rest of the enum (1..=140) reads 0.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: c_int,
) -> CuResult {
    code(with(|d| {
        if device < 0 || device as u32 >= d.devices {
            return Err(CuResult::InvalidDevice);
        }
        let v = match attribute {
            16 => 132, // MULTIPROCESSOR_COUNT
            75 => 9,   // COMPUTE_CAPABILITY_MAJOR
            76 => 0,   // COMPUTE_CAPABILITY_MINOR
            1..=140 => 0,
            _ => return Err(CuResult::InvalidValue),
        };
        out(value, v)
    }))
}

// -- contexts ---------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    context: *mut Ptr,
    flags: c_uint,
    device: c_int,
) -> CuResult {
    if context.is_null() {
        return CuResult::InvalidValue;
    }
    code(with(|d| {
        let created = d.create_context(flags, device)?;
        context.write(handle(Kind::Context, created));
        CURRENT.with(|c| c.borrow_mut().push(created));
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(context: Ptr) -> CuResult {
    code(with(|d| {
        let index = index_or(Kind::Context, context)?;
        d.destroy_context(index)?;
        CURRENT.with(|c| c.borrow_mut().retain(|h| *h != index));
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: Ptr) -> CuResult {
    code(with(|d| {
        if context.is_null() {
            set_current(None);
            return Ok(());
        }
        let index = index_or(Kind::Context, context)?;
        d.context_device(index)?;
        set_current(Some(index));
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut Ptr) -> CuResult {
    code(with(|_| {
        let now = current().map_or(std::ptr::null_mut(), |c| handle(Kind::Context, c));
        out(context, now)
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(context: Ptr) -> CuResult {
    code(with(|d| {
        let index = index_or(Kind::Context, context)?;
        d.context_device(index)?;
        CURRENT.with(|c| c.borrow_mut().push(index));
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut Ptr) -> CuResult {
    code(with(|_| {
        let popped = CURRENT
            .with(|c| c.borrow_mut().pop())
            .ok_or(CuResult::InvalidContext)?;
        if !context.is_null() {
            context.write(handle(Kind::Context, popped));
        }
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> CuResult {
    code(with(|d| {
        out(device, d.context_device(current()?)? as c_int)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(context: *mut Ptr, device: c_int) -> CuResult {
    if context.is_null() {
        return CuResult::InvalidValue;
    }
    code(with(|d| {
        context.write(handle(Kind::Context, d.retain_primary(device)?));
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> CuResult {
    code(with(|d| d.release_primary(device)))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, flags: c_uint) -> CuResult {
    code(with(|d| d.set_primary_flags(device, flags)))
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    device: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CuResult {
    code(with(|d| {
        let (f, a) = d.primary_state(device)?;
        out(flags, f)?;
        out(active, c_int::from(a))
    }))
}

/// Waits, without the lock, until the point `query` names; a point behind a held kernel
/// (held.rs) is asked again every poll, the thread waiting meanwhile as its context says.
pub(super) fn wait_for(query: impl Fn(&mut Driver, Handle) -> Result<u64, CuResult>) -> CuResult {
    loop {
        match in_context(&query) {
            Ok((driver::HELD, wait)) => wait::until(wait::now_ns() + driver::POLL_NS, wait),
            Ok((point, wait)) => {
                wait::until(point, wait);
                return CuResult::Success;
            }
            Err(e) => return e,
        }
    }
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    wait_for(|d, c| d.sync_point(c, None))
}
