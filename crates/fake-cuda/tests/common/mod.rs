//! What the tests of the stub driver share: a driver initialised once per test process, one
//! emulated device per test, kernels launched through the C ABI with their stub cost.
#![allow(dead_code)]

use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::Once;

use fake_cuda::api::*;
use fake_cuda::{CuResult, KernelCost};

pub type Ptr = *mut c_void;

pub fn directory() -> PathBuf {
    std::env::temp_dir().join(format!("fake-cuda-test-{}", std::process::id()))
}

/// Initialises the driver once for the process; each test then uses a device of its own (one
/// device queue each), with its primary context current on the calling thread.
pub fn on_device(device: i32, flags: u32) -> Ptr {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        std::fs::create_dir_all(directory()).unwrap();
        std::env::set_var("EMUGPU_DIR", directory());
        std::env::set_var("EMUGPU_COUNT", "8");
    });
    assert_eq!(cuInit(0), CuResult::Success);
    let mut context = null_mut();
    unsafe {
        assert_eq!(
            cuDevicePrimaryCtxSetFlags_v2(device, flags),
            CuResult::Success
        );
        assert_eq!(
            cuDevicePrimaryCtxRetain(&mut context, device),
            CuResult::Success
        );
    }
    assert_eq!(cuCtxSetCurrent(context), CuResult::Success);
    context
}

pub fn function() -> Ptr {
    let (mut module, mut function) = (null_mut(), null_mut());
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut module, c"image".as_ptr().cast()),
            CuResult::Success
        );
        assert_eq!(
            cuModuleGetFunction(&mut function, module, c"k".as_ptr()),
            CuResult::Success
        );
    }
    function
}

pub fn cost(seconds: f64, sm: f64) -> KernelCost {
    KernelCost {
        seconds,
        sm,
        occupancy: sm / 2.0,
        tensor: 0.0,
        dram: 0.3,
        flags: 0,
        until_ns: 0,
    }
}

pub fn launch(function: Ptr, stream: Ptr, mut cost: KernelCost) -> CuResult {
    let mut params = [(&mut cost as *mut KernelCost).cast::<c_void>()];
    unsafe {
        cuLaunchKernel(
            function,
            1,
            1,
            1,
            128,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}

pub fn kernels(device: i32) -> Vec<emu_timeline::Kernel> {
    let path = directory().join(format!("gpu{device}.timeline"));
    emu_timeline::read(&path, 0).unwrap().kernels
}
