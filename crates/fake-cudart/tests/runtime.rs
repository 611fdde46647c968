//! The runtime over the stub driver, as ATen calls it: the driver is loaded by its SONAME,
//! copies and syncs go through it, the thread waits inside it, and errors come back as the
//! runtime's codes.

use std::ffi::c_void;
use std::ptr::null_mut;

use fake_cudart::*;

/// Loads the workspace's stub driver (libcuda.so.1 by SONAME) before the runtime asks for it,
/// with the emulated GPUs in a directory of this test's own.
fn with_driver() {
    let directory = std::env::temp_dir().join(format!("fake-cudart-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    std::env::set_var("EMUGPU_DIR", &directory);
    let exe = std::env::current_exe().unwrap();
    let library = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libfake_cuda.so");
    assert!(
        library.exists(),
        "{} missing: cargo build --workspace first",
        library.display()
    );
    let path = std::ffi::CString::new(library.to_str().unwrap()).unwrap();
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null());
}

#[repr(C)]
struct KernelCost {
    seconds: f64,
    sm: f64,
    occupancy: f64,
    tensor: f64,
    dram: f64,
    flags: u32,
    until_ns: u64,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn item_is_a_launch_a_copy_back_and_a_stream_sync_that_waits_for_the_kernel() {
    with_driver();
    unsafe {
        let mut device: *mut c_void = null_mut();
        assert_eq!(cudaMalloc(&mut device, 4096), SUCCESS);
        let mut cost = KernelCost {
            seconds: 0.05,
            sm: 0.9,
            occupancy: 0.4,
            tensor: 0.5,
            dram: 0.3,
            flags: 0,
            until_ns: 0,
        };
        let mut args = [(&mut cost as *mut KernelCost).cast::<c_void>()];
        let one = Dim3 { x: 1, y: 1, z: 1 };
        let launched = monotonic_ns();
        assert_eq!(
            cudaLaunchKernel(null_mut(), one, one, args.as_mut_ptr(), 0, null_mut()),
            SUCCESS
        );
        assert_eq!(
            cudaStreamQuery(null_mut()),
            600,
            "the kernel is queued, not done"
        );
        // ATen's item(): cudaMemcpyAsync to pageable memory (kind resolved by the driver), then
        // cudaStreamSynchronize.
        let mut scalar = [9u8; 4];
        assert_eq!(
            cudaMemcpyAsync(scalar.as_mut_ptr().cast(), device, 4, 4, null_mut()),
            SUCCESS
        );
        assert_eq!(cudaStreamSynchronize(null_mut()), SUCCESS);
        assert!(monotonic_ns() - launched >= 50_000_000);
        assert_eq!(scalar, [0; 4]);
        // A bad copy is the runtime's error, kept for cudaGetLastError until read.
        assert_eq!(
            cudaMemcpy(scalar.as_mut_ptr().cast(), 16usize as *const c_void, 4, 2),
            ERROR_INVALID_VALUE
        );
        assert_eq!(cudaGetLastError(), ERROR_INVALID_VALUE);
        assert_eq!(cudaGetLastError(), SUCCESS);
        assert_eq!(cudaSetDevice(99), 101);
        let name = std::ffi::CStr::from_ptr(cudaGetErrorName(101));
        assert_eq!(name.to_str().unwrap(), "cudaErrorInvalidDevice");
        assert_eq!(cudaFree(device), SUCCESS);
    }
}
