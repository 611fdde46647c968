//! Modules and launches, streams, events and graphs.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::*;
use crate::driver::{self, KernelCost};
use crate::wait;
use crate::CuResult;

// -- modules and launches ---------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Ptr, image: *const c_void) -> CuResult {
    if image.is_null() {
        return CuResult::InvalidValue;
    }
    code(in_context(|d, _| out(module, handle(Kind::Module, d.load_module()))).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: Ptr) -> CuResult {
    code(with(|d| d.unload_module(index_or(Kind::Module, module)?)))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut Ptr,
    module: Ptr,
    name: *const c_char,
) -> CuResult {
    if name.is_null() {
        return CuResult::InvalidValue;
    }
    code(with(|d| {
        let f = d.function(index_or(Kind::Module, module)?)?;
        out(function, handle(Kind::Function, f))
    }))
}

/// The stub kernel's cost: its first argument, or a tiny kernel's.
unsafe fn cost_of(params: *mut Ptr) -> KernelCost {
    if params.is_null() || (*params).is_null() {
        return KernelCost::default_tiny();
    }
    (*params).cast::<KernelCost>().read_unaligned()
}

/// Books `kernels` as one launch on `stream`, blocking while the launch queue is full.
#[inline(never)]
fn launch(function: Option<Ptr>, stream: Ptr, kernels: &[KernelCost]) -> CuResult {
    loop {
        let booked = with(|d| {
            if let Some(f) = function {
                d.check_function(index_or(Kind::Function, f)?)?;
            }
            let context = current()?;
            let wait = d.wait_of(context)?;
            match d.launch(context, stream_of(stream)?, kernels) {
                Ok(end) => Ok(Ok(end == Some(driver::HELD))),
                Err(Ok(oldest)) => Ok(Err((oldest, wait))),
                Err(Err(e)) => Err(e),
            }
        });
        match booked {
            Ok(Ok(held)) => {
                if held {
                    driver::move_holds();
                }
                return CuResult::Success;
            }
            Ok(Err((full, wait))) => wait::until(full, wait),
            Err(e) => return e,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    function: Ptr,
    _grid_x: c_uint,
    _grid_y: c_uint,
    _grid_z: c_uint,
    _block_x: c_uint,
    _block_y: c_uint,
    _block_z: c_uint,
    _shared_bytes: c_uint,
    stream: Ptr,
    params: *mut Ptr,
    _extra: *mut Ptr,
) -> CuResult {
    launch(Some(function), stream, &[cost_of(params)])
}

/// `CUlaunchConfig` of cuda.h.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_bytes: c_uint,
    stream: Ptr,
    attributes: Ptr,
    attribute_count: c_uint,
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    function: Ptr,
    params: *mut Ptr,
    _extra: *mut Ptr,
) -> CuResult {
    if config.is_null() {
        return CuResult::InvalidValue;
    }
    launch(Some(function), (*config).stream, &[cost_of(params)])
}

// -- streams, events, graphs ------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Ptr, _flags: c_uint) -> CuResult {
    code(in_context(|d, c| out(stream, handle(Kind::Stream, d.create_stream(c)?))).map(|_| ()))
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: Ptr) -> CuResult {
    code(with(|d| d.destroy_stream(index_or(Kind::Stream, stream)?)))
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn cuStreamSynchronize(stream: Ptr) -> CuResult {
    wait_for(|d, c| d.sync_point(c, stream_of(stream)?))
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(stream: Ptr) -> CuResult {
    match in_context(|d, c| d.sync_point(c, stream_of(stream)?)) {
        Ok((point, _)) if point > wait::now_ns() => CuResult::NotReady,
        Ok(_) => CuResult::Success,
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(stream: Ptr, event: Ptr, _flags: c_uint) -> CuResult {
    code(
        in_context(|d, c| {
            d.stream_wait_event(c, stream_of(stream)?, index_or(Kind::Event, event)?)
        })
        .map(drop),
    )
}

#[no_mangle]
pub extern "C" fn cuStreamBeginCapture_v2(stream: Ptr, _mode: c_int) -> CuResult {
    code(with(|d| d.begin_capture(stream_of(stream)?)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(stream: Ptr, graph: *mut Ptr) -> CuResult {
    if graph.is_null() {
        return CuResult::InvalidValue;
    }
    code(with(|d| {
        out(
            graph,
            handle(Kind::Graph, d.end_capture(stream_of(stream)?)?),
        )
    }))
}

/// `CUstreamCaptureStatus`: 0 none, 1 active.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Ptr, status: *mut c_int) -> CuResult {
    code(with(|d| {
        out(status, c_int::from(d.is_capturing(stream_of(stream)?)?))
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Ptr, _flags: c_uint) -> CuResult {
    code(with(|d| out(event, handle(Kind::Event, d.create_event()))))
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: Ptr) -> CuResult {
    code(with(|d| d.destroy_event(index_or(Kind::Event, event)?)))
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: Ptr, stream: Ptr) -> CuResult {
    code(
        in_context(|d, c| d.record_event(c, index_or(Kind::Event, event)?, stream_of(stream)?))
            .map(|_| ()),
    )
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn cuEventSynchronize(event: Ptr) -> CuResult {
    wait_for(|d, _| d.event_point(index_or(Kind::Event, event)?))
}

#[no_mangle]
pub extern "C" fn cuEventQuery(event: Ptr) -> CuResult {
    match with(|d| d.event_point(index_or(Kind::Event, event)?)) {
        Ok(point) if point > wait::now_ns() => CuResult::NotReady,
        Ok(_) => CuResult::Success,
        Err(e) => e,
    }
}

/// Milliseconds between two recorded, completed events.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Ptr, end: Ptr) -> CuResult {
    code(with(|d| {
        let from = d.event_point(index_or(Kind::Event, start)?)?;
        let to = d.event_point(index_or(Kind::Event, end)?)?;
        if from == 0 || to == 0 {
            return Err(CuResult::InvalidHandle);
        }
        if to.max(from) > wait::now_ns() {
            return Err(CuResult::NotReady);
        }
        out(ms, (to as f64 - from as f64) as f32 / 1e6)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut Ptr,
    graph: Ptr,
    _flags: u64,
) -> CuResult {
    code(with(|d| {
        out(
            exec,
            handle(Kind::Exec, d.instantiate(index_or(Kind::Graph, graph)?)?),
        )
    }))
}

#[no_mangle]
pub extern "C" fn cuGraphDestroy(graph: Ptr) -> CuResult {
    code(with(|d| d.destroy_graph(index_or(Kind::Graph, graph)?)))
}

#[no_mangle]
pub extern "C" fn cuGraphExecDestroy(exec: Ptr) -> CuResult {
    code(with(|d| d.destroy_exec(index_or(Kind::Exec, exec)?)))
}

/// A whole captured graph, one launch.
#[no_mangle]
pub extern "C" fn cuGraphLaunch(exec: Ptr, stream: Ptr) -> CuResult {
    match with(|d| d.exec_kernels(index_or(Kind::Exec, exec)?)) {
        Ok(kernels) => launch(None, stream, &kernels),
        Err(e) => e,
    }
}

/// The test bed's own entry point, which no real driver has: when the work queued in the
/// device's primary context ends (CLOCK_MONOTONIC ns). The emulated collectives ask it when a rank's gradients are
/// ready, which NCCL's kernels learn on the GPU.
#[no_mangle]
pub unsafe extern "C" fn emuDeviceQueueEnd(device: c_int, end: *mut u64) -> CuResult {
    code(with(|d| out(end, d.queue_end(d.primary_of(device)?)?)))
}

/// The test bed's own entry point: when the kernel spinning on `word` (`UNTIL_WORD`) started
/// on the device, `CUDA_ERROR_NOT_READY` until it is booked (it may wait behind another
/// held kernel); told once. The stub NCCL learns from it when its rank arrived at a
/// collective, which NCCL's kernels learn on the GPU.
#[no_mangle]
pub unsafe extern "C" fn emuKernelStarted(word: *const u64, start: *mut u64) -> CuResult {
    code(with(|d| match d.take_start(word as u64) {
        Some(at) => out(start, at),
        None => Err(CuResult::NotReady),
    }))
}
