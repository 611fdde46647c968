//! Device and pinned memory, and copies with CUDA's synchronisation rules.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_uint, c_void};

use super::*;
use crate::driver::{self, Copy, Driver};
use crate::wait;
use crate::CuResult;

// -- memory -----------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(ptr: *mut u64, bytes: usize) -> CuResult {
    if ptr.is_null() {
        return CuResult::InvalidValue;
    }
    code(in_context(|d, c| out(ptr, d.alloc(c, bytes as u64)?)).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(ptr: u64) -> CuResult {
    code(with(|d| d.free(ptr)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    code(
        in_context(|d, c| {
            let (f, t) = d.memory_info(c)?;
            out(free, f as usize)?;
            out(total, t as usize)
        })
        .map(|_| ()),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(ptr: *mut Ptr, bytes: usize, _flags: c_uint) -> CuResult {
    if ptr.is_null() || bytes == 0 {
        return CuResult::InvalidValue;
    }
    code(
        in_context(|d, _| {
            let memory = libc::calloc(bytes, 1);
            if memory.is_null() {
                return Err(CuResult::OutOfMemory);
            }
            d.add_pinned(memory as usize, bytes);
            out(ptr, memory)
        })
        .map(|_| ()),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(ptr: *mut Ptr, bytes: usize) -> CuResult {
    cuMemHostAlloc(ptr, bytes, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(ptr: Ptr) -> CuResult {
    code(with(|d| {
        d.remove_pinned(ptr as usize)?;
        libc::free(ptr);
        Ok(())
    }))
}

/// A copy: checks the device side, queues the DMA on `stream`, and returns when the host may
/// go on, by CUDA's rules ("API synchronization behavior" in the driver API reference):
/// - from pageable memory, the host stages the buffer itself (it runs inside the driver); the
///   synchronous form first waits for the legacy stream;
/// - from pinned memory, the synchronous form returns once the copy is done, the async one at
///   once;
/// - to the host, the synchronous form, and the async one into pageable memory, return once the
///   copy is done;
/// - device to device never waits.
#[inline(never)]
unsafe fn copy(copy: Copy, device: u64, host: Ptr, bytes: usize, stream: Option<Ptr>) -> CuResult {
    let synchronous = stream.is_none();
    let checked = |d: &mut Driver, _| {
        let stream = stream.map_or(Ok(None), stream_of)?;
        let on_host = copy != Copy::DeviceToDevice;
        if !d.on_device(device, bytes as u64) || (on_host && host.is_null()) {
            return Err(CuResult::InvalidValue);
        }
        let pinned = on_host && d.is_pinned(host as usize, bytes);
        let waits = match copy {
            Copy::HostToDevice => synchronous,
            Copy::DeviceToHost => synchronous || !pinned,
            Copy::DeviceToDevice => false,
        };
        Ok((stream, pinned, waits))
    };
    // A copy the host waits for waits first for a held kernel before it to end (held.rs).
    let held_first = wait_for(|d, c| {
        let (_, _, waits) = checked(d, c)?;
        Ok(if waits && d.is_held(c)? {
            driver::HELD
        } else {
            0
        })
    });
    if held_first != CuResult::Success {
        return held_first;
    }
    let result = in_context(|d, c| {
        let (stream, pinned, waits) = checked(d, c)?;
        // The legacy stream's work first, for a synchronous copy from pageable memory.
        let before = if synchronous && copy == Copy::HostToDevice && !pinned {
            d.sync_point(c, None)?
        } else {
            0
        };
        Ok((stream, pinned, waits, before))
    });
    let ((stream, pinned, waits, before), wait) = match result {
        Ok(found) => found,
        Err(e) => return e,
    };
    if before == driver::HELD {
        // Held since the check, by another thread's launch: after the held kernel, then.
        wait_for(|d, c| d.sync_point(c, None));
    } else {
        wait::until(before, wait);
    }
    if copy == Copy::HostToDevice && !pinned {
        wait::busy_for(Driver::staging_ns(bytes as u64));
    }
    let end = match in_context(|d, c| d.queue_copy(c, stream, copy, bytes as u64, pinned)) {
        Ok((end, _)) => end,
        Err(e) => return e,
    };
    // A synchronous copy from pinned memory returns once done; the staged pageable one at once.
    let waits = waits && (copy != Copy::HostToDevice || pinned);
    if waits && end == driver::HELD {
        wait_for(|d, c| d.sync_point(c, stream));
    } else if waits {
        wait::until(end, wait);
    }
    if copy == Copy::DeviceToHost {
        // Device memory holds no values here: what comes back is zeros.
        std::ptr::write_bytes(host.cast::<u8>(), 0, bytes);
    }
    CuResult::Success
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, bytes: usize) -> CuResult {
    copy(Copy::HostToDevice, dst, src.cast_mut(), bytes, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: Ptr, src: u64, bytes: usize) -> CuResult {
    copy(Copy::DeviceToHost, src, dst, bytes, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, bytes: usize) -> CuResult {
    if !with(|d| Ok(d.on_device(dst, bytes as u64))).unwrap_or(false) {
        return CuResult::InvalidValue;
    }
    copy(Copy::DeviceToDevice, src, std::ptr::null_mut(), bytes, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    bytes: usize,
    stream: Ptr,
) -> CuResult {
    copy(Copy::HostToDevice, dst, src.cast_mut(), bytes, Some(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: Ptr,
    src: u64,
    bytes: usize,
    stream: Ptr,
) -> CuResult {
    copy(Copy::DeviceToHost, src, dst, bytes, Some(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: Ptr,
) -> CuResult {
    if !with(|d| Ok(d.on_device(dst, bytes as u64))).unwrap_or(false) {
        return CuResult::InvalidValue;
    }
    copy(
        Copy::DeviceToDevice,
        src,
        std::ptr::null_mut(),
        bytes,
        Some(stream),
    )
}

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (2) only: `CU_MEMORYTYPE_DEVICE` (2) for device memory,
/// `CU_MEMORYTYPE_HOST` (1) for pinned host memory; other host pointers are not the driver's
/// (CUDA_ERROR_INVALID_VALUE), which is how the runtime tells a pageable pointer apart.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: u64,
) -> CuResult {
    if attribute != 2 {
        return CuResult::InvalidValue;
    }
    code(with(|d| {
        let kind = if d.on_device(ptr, 1) {
            2
        } else if d.is_pinned(ptr as usize, 1) {
            1
        } else {
            return Err(CuResult::InvalidValue);
        };
        out(data.cast::<c_uint>(), kind)
    }))
}
