//! The stub driver through its C ABI, as a CUDA program calls it: what returns at once, what
//! waits and how, what the device's timeline shows, and the errors a real driver returns.

use std::ptr::null_mut;

use emu_timeline::COLLECTIVE_KERNEL;
use fake_cuda::api::*;
use fake_cuda::wait::now_ns;
use fake_cuda::CuResult;

mod common;
use common::*;

/// The scheduler state of the calling thread (R, S, ...) from /proc, as a sampler sees it.
fn state_of(tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

#[test]
fn a_launch_returns_at_once_and_a_sync_waits_for_the_kernel_on_the_timeline() {
    on_device(0, 0);
    let f = function();
    let before = now_ns();
    assert_eq!(launch(f, null_mut(), cost(0.05, 0.8)), CuResult::Success);
    // Queued, not run: the stream is busy when the launch returns.
    assert_eq!(cuStreamQuery(null_mut()), CuResult::NotReady);
    let booked = kernels(0);
    assert_eq!(booked.len(), 1);
    assert_eq!(booked[0].pid, std::process::id());
    assert!((booked[0].sm - 0.8).abs() < 1e-9);
    assert!(booked[0].start_ns >= before && booked[0].end_ns - booked[0].start_ns == 50_000_000);
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
    assert!(now_ns() >= booked[0].end_ns);
    assert_eq!(cuStreamQuery(null_mut()), CuResult::Success);
}

#[test]
fn a_spinning_wait_runs_in_the_driver_and_a_blocking_one_sleeps() {
    for (device, flags, expected) in [(1, 1, 'R'), (2, 4, 'S')] {
        on_device(device, flags);
        let f = function();
        assert_eq!(launch(f, null_mut(), cost(0.4, 1.0)), CuResult::Success);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let context = on_device(device, flags);
            let _ = context;
            tx.send(unsafe { libc::gettid() }).unwrap();
            assert_eq!(cuCtxSynchronize(), CuResult::Success);
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        // Several looks: a spinning thread on a shared VM is sometimes preempted (still R).
        let states: Vec<char> = (0..5)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                state_of(tid)
            })
            .collect();
        waiter.join().unwrap();
        assert!(
            states.iter().all(|s| *s == expected),
            "flags {flags}: {states:?}"
        );
    }
}

#[test]
fn a_full_launch_queue_blocks_the_launch_until_the_oldest_kernel_ends() {
    on_device(3, 0);
    let f = function();
    for n in 0..1024 {
        assert_eq!(
            launch(f, null_mut(), cost(0.001, 0.1 + (n % 2) as f64 * 0.1)),
            CuResult::Success
        );
    }
    let first_end = kernels(3)[0].end_ns;
    assert_eq!(launch(f, null_mut(), cost(0.001, 0.5)), CuResult::Success);
    assert!(
        now_ns() >= first_end,
        "the 1,025th launch returned before the first kernel ended"
    );
    assert_eq!(cuCtxSynchronize(), CuResult::Success);
}

#[test]
fn a_captured_graph_books_nothing_until_launched_and_a_sync_in_capture_is_refused() {
    on_device(4, 0);
    let f = function();
    let mut stream = null_mut();
    unsafe { assert_eq!(cuStreamCreate(&mut stream, 0), CuResult::Success) };
    // The legacy stream cannot be captured.
    assert_eq!(
        cuStreamBeginCapture_v2(null_mut(), 0),
        CuResult::StreamCaptureUnsupported
    );
    assert_eq!(cuStreamBeginCapture_v2(stream, 0), CuResult::Success);
    assert_eq!(launch(f, stream, cost(0.001, 0.2)), CuResult::Success);
    assert_eq!(
        cuStreamSynchronize(stream),
        CuResult::StreamCaptureUnsupported
    );
    let mut graph = null_mut();
    unsafe {
        assert_eq!(
            cuStreamEndCapture(stream, &mut graph),
            CuResult::StreamCaptureInvalidated
        )
    };
    assert!(kernels(4).is_empty());

    assert_eq!(cuStreamBeginCapture_v2(stream, 0), CuResult::Success);
    for sm in [0.2, 0.9, 0.4] {
        assert_eq!(launch(f, stream, cost(0.002, sm)), CuResult::Success);
    }
    unsafe { assert_eq!(cuStreamEndCapture(stream, &mut graph), CuResult::Success) };
    assert!(kernels(4).is_empty());
    let mut exec = null_mut();
    unsafe {
        assert_eq!(
            cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            CuResult::Success
        )
    };
    // A graph handle is not an executable graph.
    assert_eq!(cuGraphLaunch(graph, stream), CuResult::InvalidHandle);
    assert_eq!(cuGraphLaunch(exec, stream), CuResult::Success);
    let sms: Vec<f64> = kernels(4).iter().map(|k| k.sm).collect();
    assert_eq!(sms, [0.2, 0.9, 0.4]);
    assert_eq!(cuStreamSynchronize(stream), CuResult::Success);
    assert_eq!(cuGraphExecDestroy(exec), CuResult::Success);
    assert_eq!(cuGraphExecDestroy(exec), CuResult::InvalidHandle);
}

#[test]
fn copies_to_the_host_wait_for_the_stream_and_pinned_uploads_do_not() {
    on_device(5, 0);
    let f = function();
    let mut device = 0u64;
    let mut pinned: Ptr = null_mut();
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut device, 1 << 20), CuResult::Success);
        assert_eq!(cuMemAllocHost_v2(&mut pinned, 1 << 20), CuResult::Success);
    }
    let mut stream = null_mut();
    unsafe { assert_eq!(cuStreamCreate(&mut stream, 0), CuResult::Success) };
    assert_eq!(launch(f, stream, cost(0.05, 0.9)), CuResult::Success);
    // A pinned async upload queues behind the kernel and returns at once.
    unsafe {
        assert_eq!(
            cuMemcpyHtoDAsync_v2(device, pinned, 1 << 20, stream),
            CuResult::Success
        )
    };
    assert_eq!(cuStreamQuery(stream), CuResult::NotReady);
    // A scalar read back into pageable memory (loss.item()) returns once the kernel is done.
    let end = kernels(5)[0].end_ns;
    let mut scalar = [7u8; 4];
    unsafe {
        assert_eq!(
            cuMemcpyDtoHAsync_v2(scalar.as_mut_ptr().cast(), device, 4, stream),
            CuResult::Success
        );
    }
    assert!(now_ns() >= end);
    assert_eq!(scalar, [0; 4]);
    // Copies outside a device allocation, and more memory than the device has, are refused.
    unsafe {
        assert_eq!(
            cuMemcpyDtoH_v2(scalar.as_mut_ptr().cast(), device + (2 << 20), 4),
            CuResult::InvalidValue
        );
        let mut huge = 0u64;
        assert_eq!(cuMemAlloc_v2(&mut huge, 200 << 30), CuResult::OutOfMemory);
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(cuMemGetInfo_v2(&mut free, &mut total), CuResult::Success);
        assert!(
            total - free >= (512 << 20) + (1 << 20),
            "the context and the allocation count"
        );
        assert_eq!(cuMemFree_v2(device), CuResult::Success);
        assert_eq!(cuMemFree_v2(device), CuResult::InvalidValue);
        assert_eq!(cuMemFreeHost(pinned), CuResult::Success);
    }
}

#[test]
fn a_collective_kernel_runs_until_its_moment_and_events_mark_points_in_a_stream() {
    on_device(6, 0);
    let f = function();
    let until = now_ns() + 30_000_000;
    let mut spin = cost(0.0, 0.02);
    spin.flags = COLLECTIVE_KERNEL;
    spin.until_ns = until;
    assert_eq!(launch(f, null_mut(), spin), CuResult::Success);
    let (mut start, mut end) = (null_mut(), null_mut());
    unsafe {
        assert_eq!(cuEventCreate(&mut start, 0), CuResult::Success);
        assert_eq!(cuEventCreate(&mut end, 0), CuResult::Success);
    }
    assert_eq!(cuEventRecord(start, null_mut()), CuResult::Success);
    assert_eq!(launch(f, null_mut(), cost(0.01, 0.9)), CuResult::Success);
    assert_eq!(cuEventRecord(end, null_mut()), CuResult::Success);
    assert_eq!(cuEventQuery(end), CuResult::NotReady);
    let mut ms = 0f32;
    unsafe { assert_eq!(cuEventElapsedTime(&mut ms, start, end), CuResult::NotReady) };
    assert_eq!(cuEventSynchronize(end), CuResult::Success);
    unsafe { assert_eq!(cuEventElapsedTime(&mut ms, start, end), CuResult::Success) };
    assert!((ms - 10.0).abs() < 0.01, "{ms} ms between the events");
    let booked = kernels(6);
    assert_eq!(
        (booked[0].end_ns, booked[0].flags),
        (until, COLLECTIVE_KERNEL)
    );
}

#[test]
fn handles_of_the_wrong_kind_and_bad_arguments_are_refused_as_the_driver_refuses_them() {
    let context = on_device(7, 0);
    let f = function();
    assert_eq!(cuStreamSynchronize(f), CuResult::InvalidHandle);
    assert_eq!(
        launch(context, null_mut(), cost(0.0, 0.1)),
        CuResult::InvalidHandle
    );
    assert_eq!(cuCtxSetCurrent(f), CuResult::InvalidContext);
    assert_eq!(cuInit(1), CuResult::InvalidValue);
    let mut device = 0;
    unsafe {
        assert_eq!(cuDeviceGet(&mut device, 8), CuResult::InvalidDevice);
        assert_eq!(
            cuDevicePrimaryCtxSetFlags_v2(0, 0x100),
            CuResult::InvalidValue
        );
        let mut name = std::ptr::null();
        assert_eq!(cuGetErrorName(900, &mut name), CuResult::Success);
        assert_eq!(
            std::ffi::CStr::from_ptr(name).to_str().unwrap(),
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
        );
        assert_eq!(cuGetErrorName(12345, &mut name), CuResult::InvalidValue);
    }
    // A thread with no current context has nothing to synchronise.
    std::thread::spawn(|| assert_eq!(cuCtxSynchronize(), CuResult::InvalidContext))
        .join()
        .unwrap();
}
